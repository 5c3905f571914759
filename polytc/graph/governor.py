"""How many threads a model's next run gets: all of them, or one when the machine is busy.

OpenMP's parallel loops end in a barrier that waits for every thread of the team.  When
another process keeps one of the cores busy, the thread on that core runs only when the
scheduler gives it a turn, and every parallel loop of a run waits for it: SqueezeNet
1.7 -> 17 ms, an MLP at batch 1 0.02 -> 1 ms (onnxruntime: 6.7 and 0.04 ms), where the
same runs on one thread take 4.5 and 0.03 ms.  ``Governor`` times each run of a plan and
keeps the thread count whose runs take less time on average:

* a count's measure is the mean of its last ``KEEP`` measured runs less their slowest
  third (under a busy neighbour ShuffleNet's runs on two threads take 2 or 65 ms, by
  turns: neither the best nor the median run is what a run costs; the slowest third
  leaves out a wake-up now and then), and of all of them once a look has found a
  neighbour (a worker pinned to the neighbour's core, ``runtime/placement.py``, runs
  fast or ten times slower by turns, and without its slowest third an LSTM's mean on
  two threads was 1 ms where it cost 2.3-3.5, on one 1.9);
* now and then (at growing intervals while the choice holds, from ``PROBE_S`` up to
  ``PROBE_MAX_S``, or ``SPARE`` times the last burst's time if longer: ResNet-18's
  three runs on one thread take 60 ms; ``SETTLE_S`` after a switch: a neighbour that
  came stays a while) a burst of runs tries the other count, and sooner when runs in a
  row for ``SLOW_S`` seconds (two at least) each take over ``SLOW`` times the current
  measure (the neighbour has just started).  A burst is ``BURST`` runs (one when the
  current measure is over ``LONG_S``: a 170 ms SqueezeNet at batch 64 spent three runs of
  300 ms on one thread, three of a benchmark's five samples; a long run is noisy enough
  alone, and under a busy neighbour it would be a long wait for each); on more
  threads it also lasts ``BURST_S`` seconds and its runs that start in its first
  ``WAKE_S`` seconds do not count (but the last): they pay for waking threads that
  slept (on a virtual machine, after 50 ms idle, six to twelve runs of an MLP took
  1.9 ms where it takes 0.25);
* the choice switches when the burst's mean (likewise) is below ``SWITCH`` times the
  current measure (``SWITCH_BUSY`` with a neighbour found); the runs of the count left
  behind are forgotten, so that the first burst after the neighbour has gone can bring
  all threads back.

A probe costs its burst's runs on one thread (ResNet-18 at batch 1: three runs of 16 ms
where they take 9 ms, every 2 s: 1-2% of a benchmark's time).  So the governor also looks
at the machine (``Load``: the CPU time ``/proc/stat`` counts busy, less this process's,
since the last look, at most every ``LOOK_S``): while no other process used
``CROWDED`` of a core (``runtime/placement.py``), the intervals between probes grow up to
``QUIET_MAX_S`` instead of ``PROBE_MAX_S`` (a probe still finds where one thread is faster
on an idle machine, and checks it now and then), straight to ``QUIET_MAX_S`` after a
probe whose runs took over ``CLEAR`` times the current ones (a look at its end,
``MIN_LOOK_S`` after the last: the first probe of a benchmark's warm-up, not six in its
first seconds); a look that finds a
neighbour brings the next probe forward to within ``PROBE_MAX_S``.  That holds only on
all threads: on fewer, probes come within ``PROBE_MAX_S`` however quiet the machine is.
On a virtual machine, after its idle time (a compile in the same process), Linux may
run both of a process's threads on one CPU for ~40 ms (seen in ``/proc/self/task``:
an MLP's runs took 2.5 ms instead of 0.05, every barrier a sleep and a wake); a
governor that moved to one thread then, and whose next probe fell in the same stretch,
had stayed on one thread for ``QUIET_MAX_S`` (a dynamic MLP at batch 17 ran in 0.090
ms where two threads take 0.060).  Where
``/proc/stat`` cannot be read the machine counts as crowded (the intervals stay at most
``PROBE_MAX_S``).

For the same reason the runs of the first ``GRACE_S`` seconds after an idle gap (over
``GAP_S`` between two runs), and after the runs go back to more threads (a burst on one
thread, or a switch), are not measured.  No probe comes before the current count has
``KEEP`` measured runs.  ``threads`` is what the driver passes to
``omp_set_num_threads`` before the run (``native.py``).  ``POLYTC_ADAPTIVE_THREADS=0``
keeps all threads always.
"""
from __future__ import annotations

import time
from collections import deque

from ..runtime.placement import LOOK_S, Load

PROBE_S, SETTLE_S, PROBE_MAX_S = 0.05, 0.2, 2.0
SLOW, SLOW_S = 2.0, 0.02
SWITCH, SWITCH_BUSY = 0.8, 0.92
SPARE = 50
KEEP = 8
BURST, BURST_S, WAKE_S, BURST_MAX = 3, 0.025, 0.01, 200
GAP_S, GRACE_S = 0.002, 0.03
LONG_S = 0.005
QUIET_MAX_S, MIN_LOOK_S, CLEAR = 30.0, 0.1, 1.25


def _mean(xs, trim: bool = True) -> float:
    """The mean of ``xs`` without its largest third (a wake-up now and then), or of
    all of them (not ``trim``)."""
    if trim:
        xs = sorted(xs)[:max(1, len(xs) - len(xs) // 3)]
    return sum(xs) / len(xs)


class Governor:
    def __init__(self, full: int, clock=time.perf_counter, load=None):
        self.full, self.clock = full, clock
        #: ``crowded()``: whether other processes kept a CPU busy since the last call
        self.load = load if load is not None else Load()
        self.quiet: bool | None = None  # the last look found no neighbour (None: no look)
        self.load_at = clock()  # the last look (``look``), and the next one
        self.next_look = self.load_at + LOOK_S
        self.current = full
        self.times: dict = {full: deque(maxlen=KEEP), 1: deque(maxlen=KEEP)}
        self.interval = PROBE_S
        self.next_probe = clock() + PROBE_S
        self.slow: list = []  # the runs in a row over SLOW times the current measure
        self.burst: list = []  # (start, seconds) of the probe's runs so far
        self.last = None  # when the last run ended
        self.grace = 0.0  # runs on the current count that end before this: unmeasured

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
        now = self.clock()
        if now >= self.next_look:
            self.look(now)
        if len(self.slow) >= 2 and sum(self.slow) >= SLOW_S or now >= self.next_probe:
            return self.other()
        return self.current

    def look(self, now: float) -> None:
        """See whether a neighbour came (the next probe within ``PROBE_MAX_S``) or the
        machine is quiet (probes may grow rarer)."""
        self.next_look, self.load_at = now + LOOK_S, now
        self.quiet = not self.load.crowded()
        if not self.quiet:
            self.interval = min(self.interval, PROBE_MAX_S)
            self.next_probe = min(self.next_probe, now + PROBE_MAX_S)

    def record(self, n: int, seconds: float) -> None:
        """The run just made took ``seconds`` on ``n`` threads."""
        if self.full <= 1:
            return
        now = self.clock()
        start = now - seconds
        if self.last is not None and start - self.last > GAP_S:
            self.grace = start + GRACE_S
        self.last = now
        mine = self.times[self.current]
        if n == self.current:
            if now < self.grace:
                return
            # (the minimum first: a run under it is no slow one, and it costs no sort)
            slow = bool(mine) and seconds > SLOW * min(mine) and seconds > SLOW * _mean(mine)
            self.slow = self.slow + [seconds] if slow else []
            mine.append(seconds)
            return
        self.burst.append((start, seconds))
        up = n > self.current  # (waking threads: long enough to get past it)
        spent = sum(t for _, t in self.burst)
        size = BURST if not mine or _mean(mine) < LONG_S else 1
        if len(self.burst) < BURST_MAX and (len(self.burst) < size or
                                            up and spent < BURST_S):
            return
        t0 = self.burst[0][0]
        runs = [t for s, t in self.burst if not up or s - t0 >= WAKE_S] or \
            [self.burst[-1][1]]
        # (with a neighbour found, a slow run is no wake-up to leave out but what runs cost:
        # two threads whose worker shares the neighbour's core run fast or ten times
        # slower, and the trimmed mean kept an LSTM on two at 2.3-3.5 ms a run where one
        # thread takes 1.9)
        trim = self.quiet is not False
        measure = _mean(runs, trim)
        self.burst, self.slow = [], []
        # (with a neighbour found, a smaller margin: both means count every run, and an
        # LSTM whose 32 steps run in one parallel loop, one block of rows a thread, took
        # 4.9 ms on two threads on average, 4.3 on one, where its median run took 6.1)
        if mine and measure < (SWITCH if trim else SWITCH_BUSY) * _mean(mine, trim):
            mine.clear()  # (runs of the old choice would outvote the new ones)
            self.current = n
            self.times[n].clear()
            self.times[n].append(measure)
            self.interval = SETTLE_S
        else:  # (and at most a ``1 / SPARE`` part of the time in probes)
            if now - self.load_at >= MIN_LOOK_S:
                self.look(now)
            # (on fewer threads than the machine's, a quiet machine is no reason to
            # wait: the switch down may have been a transient's, see the docstring)
            quiet = self.quiet and self.current == self.full
            if quiet and measure > CLEAR * _mean(mine):  # and it will stay so
                self.interval = QUIET_MAX_S
            else:
                cap = QUIET_MAX_S if quiet else PROBE_MAX_S
                self.interval = max(min(cap, 2 * self.interval), SPARE * spent)
        if self.current == self.full:  # back to (or on to) more threads: they wake first
            self.grace = now + GRACE_S
        self.next_probe = now + self.interval
