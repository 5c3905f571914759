"""How many threads a model's next run gets: all of them, or one when the machine is busy.

OpenMP's parallel loops end in a barrier that waits for every thread of the team.  When
another process keeps one of the cores busy, the thread on that core runs only when the
scheduler gives it a turn, and every parallel loop of a run waits for it: SqueezeNet
1.7 -> 17 ms, an MLP at batch 1 0.02 -> 1 ms (onnxruntime: 6.7 and 0.04 ms), where the
same runs on one thread take 4.5 and 0.03 ms.  ``Governor`` measures each run of a plan
and keeps the thread count whose recent runs were faster:

* each run is timed and its time kept among the last few of its thread count;
* now and then (at growing intervals while the choice holds, from ``PROBE_S`` up to
  ``PROBE_MAX_S``) one run tries the other count, and sooner when a run takes over
  ``SLOW`` times the median of its count (the neighbour has just started);
* the choice switches when the other count's median is below ``SWITCH`` times the
  current one's; the times of the count left behind are forgotten, so that the first
  probes after the neighbour has gone bring all threads back.

A probe costs one run at the other count (at most one every ``PROBE_S``); an idle
machine keeps all threads, so ``Plan.run``'s times there do not change.  ``threads`` is
what the driver passes to ``omp_set_num_threads`` before the run (``native.py``).
``POLYTC_ADAPTIVE_THREADS=0`` keeps all threads always.
"""
from __future__ import annotations

import statistics
import time
from collections import deque

PROBE_S = 0.05
PROBE_MAX_S = 2.0
SLOW = 2.0
SWITCH = 0.8
KEEP = 5


class Governor:
    def __init__(self, full: int, clock=time.perf_counter):
        self.full, self.clock = full, clock
        self.current = full
        self.times = {full: deque(maxlen=KEEP), 1: deque(maxlen=KEEP)}
        self.interval = PROBE_S
        self.next_probe = clock() + PROBE_S
        self.hurry = False  # a slow run: probe the other count next

    def other(self) -> int:
        return 1 if self.current == self.full else self.full

    def threads(self) -> int:
        """The thread count of the next run."""
        if self.full <= 1:
            return self.current
        if self.hurry or self.clock() >= self.next_probe:
            return self.other()
        return self.current

    def record(self, n: int, seconds: float) -> None:
        """The run just made took ``seconds`` on ``n`` threads."""
        if self.full <= 1:
            return
        mine = self.times[self.current]
        if n == self.current:
            self.hurry = len(mine) >= 3 and seconds > SLOW * statistics.median(mine)
            mine.append(seconds)
            return
        self.times[n].append(seconds)
        self.hurry = False
        if mine and statistics.median(self.times[n]) < SWITCH * statistics.median(mine):
            mine.clear()  # (times of the old choice would outvote the first new probes)
            self.current = n  # the other count is faster now
            self.interval = PROBE_S
        else:
            self.interval = min(PROBE_MAX_S, 2 * self.interval)
        self.next_probe = self.clock() + self.interval
