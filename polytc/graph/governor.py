"""How many threads a model's next run gets: all of them, or one when the machine is busy.

OpenMP's parallel loops end in a barrier that waits for every thread of the team.  When
another process keeps one of the cores busy, the thread on that core runs only when the
scheduler gives it a turn, and every parallel loop of a run waits for it: SqueezeNet
1.7 -> 17 ms, an MLP at batch 1 0.02 -> 1 ms (onnxruntime: 6.7 and 0.04 ms), where the
same runs on one thread take 4.5 and 0.03 ms.  ``Governor`` times each run of a plan and
keeps the thread count whose runs are faster:

* a count's measure is its best run among its last ``KEEP`` (a slow run now and then,
  noise or the first runs after an idle wait, is no evidence; a busy neighbour slows
  every run);
* now and then (at growing intervals while the choice holds, from ``PROBE_S`` up to
  ``PROBE_MAX_S``; ``SETTLE_S`` after a switch: a neighbour that came stays a while) a
  burst of ``BURST`` runs tries the other count, and sooner when runs in a row for
  ``SLOW_S`` seconds (two at least) each take over ``SLOW`` times the current measure
  (the neighbour has just started).  A burst on more threads lasts two runs and
  ``BURST_S`` seconds instead: its first runs pay for waking threads that slept (on a
  virtual machine, after 50 ms idle, six runs of an MLP took 1.9 ms where it takes
  0.25).  The burst's best run is its measure;
* the choice switches when the other count's measure is below ``SWITCH`` times the
  current one's; the runs of the count left behind are forgotten, so that the first
  burst after the neighbour has gone can bring all threads back.

A probe costs one burst at the other count per ``PROBE_S`` at most, and none comes
before the current count has ``KEEP`` runs.  ``threads`` is what the driver passes to
``omp_set_num_threads`` before the run (``native.py``).  ``POLYTC_ADAPTIVE_THREADS=0``
keeps all threads always.
"""
from __future__ import annotations

import time
from collections import deque

PROBE_S = 0.05
SETTLE_S = 0.2
PROBE_MAX_S = 2.0
SLOW, SLOW_S = 2.0, 0.02
SWITCH = 0.8
KEEP = 5
BURST, BURST_S, BURST_MAX = 3, 0.025, 200


class Governor:
    def __init__(self, full: int, clock=time.perf_counter):
        self.full, self.clock = full, clock
        self.current = full
        self.times: dict = {full: deque(maxlen=KEEP), 1: deque(maxlen=KEEP)}
        self.interval = PROBE_S
        self.next_probe = clock() + PROBE_S
        self.slow: list = []  # the runs in a row over SLOW times the current measure
        self.burst: list = []  # the times of the probe under way

    def other(self) -> int:
        return 1 if self.current == self.full else self.full

    def threads(self) -> int:
        """The thread count of the next run."""
        if self.full <= 1:
            return self.current
        if self.burst:
            return self.other()
        if len(self.times[self.current]) < KEEP:
            return self.current
        if len(self.slow) >= 2 and sum(self.slow) >= SLOW_S or \
                self.clock() >= self.next_probe:
            return self.other()
        return self.current

    def record(self, n: int, seconds: float) -> None:
        """The run just made took ``seconds`` on ``n`` threads."""
        if self.full <= 1:
            return
        mine = self.times[self.current]
        if n == self.current:
            slow = bool(mine) and seconds > SLOW * min(mine)
            self.slow = self.slow + [seconds] if slow else []
            mine.append(seconds)
            return
        self.burst.append(seconds)
        up = n > self.current  # (waking threads: long enough to get past it)
        if len(self.burst) < BURST_MAX and (sum(self.burst) < BURST_S or len(self.burst) < 2
                                            if up else len(self.burst) < BURST):
            return
        best = min(self.burst)
        self.burst, self.slow = [], []
        if mine and best < SWITCH * min(mine):
            mine.clear()  # (runs of the old choice would outvote the new ones)
            self.current = n
            self.times[n].clear()
            self.times[n].append(best)
            self.interval = SETTLE_S
        else:
            self.interval = min(PROBE_MAX_S, 2 * self.interval)
        self.next_probe = self.clock() + self.interval
