"""OpenMP's worker threads pinned, each to a CPU other than the calling thread's, while
the machine is quiet, and left to Linux while other processes keep a CPU busy.

The pinning itself is C, at the start of each run (``executor.py``: ``pt_place``, in
``polytc_exec`` and as ``polytc_place`` before a kernel called alone): the workers of the
caller's team each get one CPU of the caller's, never the one it runs on, and again
whenever the caller is found on another CPU or its team size changed.  A worker keeps
the CPU Linux gave it where neither the caller nor another worker has it (several
processes' workers stay spread over a large machine); the others take the free CPUs
after the caller's.  A team larger than the CPUs is left to Linux.  ``Placement``
decides whether: it looks at the machine (``Load``) at most every ``LOOK_S``, from a run.

On a virtual machine Linux often wakes an idle worker on the caller's own CPU and
leaves both there for tens of milliseconds, every barrier a sleep and a wake (seen in
``/proc/self/task``: both threads running on one CPU while the other counted idle
ticks): an MLP's runs 100 ms apart took 1.57 ms each instead of 0.04 (onnxruntime's
0.39), and 0.30 pinned.  Under a busy neighbour a worker pinned to its CPU runs in turns
with it: runs either fast or ten times slower, and the thread governor
(``graph/governor.py``), which leaves out the slowest third, kept two threads where one
is faster (a small CNN 0.060 -> 0.096 ms): the workers are free then.
``POLYTC_PIN_THREADS=0`` leaves them to Linux always.
"""
from __future__ import annotations

import os
import time

from .. import config

#: seconds between looks at the machine; the part of a core other processes must keep
#: busy for the machine to count as crowded
LOOK_S, CROWDED = 1.0, 0.25
_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: clock -> the latest ``Load`` sample taken on it (a new ``Load``'s baseline)
_LATEST: dict = {}


class Load:
    """Whether other processes kept the machine's CPUs busy since the last call: the
    busy time ``/proc/stat`` counts over all CPUs (steal included: a virtual machine's
    host taking them) less this process's own, over at least ``CROWDED`` of a core."""

    def __init__(self, clock=time.perf_counter):
        self.clock = clock
        # the first look's baseline: the process's latest sample on this clock, else
        # one now (each plan of a dynamic model makes a governor: 16 us of /proc/stat)
        latest = _LATEST.get(clock)
        self.last = latest if latest is not None else self._sample()

    def _sample(self):
        try:
            with open("/proc/stat", "rb") as f:
                ticks = [int(x) for x in f.readline().split()[1:9]]
        except (OSError, ValueError):
            return None
        t = os.times()
        busy = sum(ticks) - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)
        out = _LATEST[self.clock] = (self.clock(), busy / _HZ, t.user + t.system)
        return out

    def crowded(self) -> bool:
        now, before = self._sample(), self.last
        self.last = now
        if now is None or before is None or now[0] <= before[0]:
            return True
        others = (now[1] - before[1]) - (now[2] - before[2])
        return others >= CROWDED * (now[0] - before[0])


class Placement:
    """Whether runs pin OpenMP's workers (``set_on(1)``, the start) or leave them to Linux
    (``set_on(0)``): pinned while the machine is quiet, free while a look (``Load``, at
    most every ``LOOK_S``) finds other processes busy."""

    def __init__(self, set_on, clock=time.perf_counter, load=None):
        self.set_on, self.clock = set_on, clock
        self.load = load if load is not None else Load(clock)
        self.on = True
        self.next_look = clock() + LOOK_S

    def update(self) -> None:
        """Called before each run: a look at the machine when it is due."""
        now = self.clock()
        if now < self.next_look:
            return
        self.next_look = now + LOOK_S
        on = not self.load.crowded()
        if on != self.on:
            self.on = on
            self.set_on(int(on))


#: [the process's ``Placement``, ``polytc_place``] once a run needs them, or [None, None]
#: under ``POLYTC_PIN_THREADS=0`` (the workers are the process's: one for all)
_STATE: list = []


def before(n: int, pin: bool = True) -> None:
    """Before a run on ``n`` threads: a look at the machine when one is due and, with
    ``pin`` (a kernel called alone: ``polytc_exec`` places them itself), the workers
    placed."""
    if n < 2:
        return
    if not _STATE:
        from .executor import place, placement

        _STATE[:] = [Placement(placement()), place()] if config.pin_threads() else \
            [None, None]
    control, place_now = _STATE
    if control is None:
        return
    control.update()
    if pin:
        place_now()
