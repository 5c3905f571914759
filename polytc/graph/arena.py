"""The memory a model's plans run in (``plan.Plan._plan_memory``): buffers of 64-byte
aligned memory, shared by the plans of a model run at many batch sizes, whose new pages
are faulted in when a plan is made rather than at the first touches of its run."""
from __future__ import annotations

import os
import threading

import numpy as np

from .. import config, machine
from ..runtime.memory import huge_empty, populate, populate_finish, populate_start, reserve


#: a buffer of a model with symbolic dimensions is faulted in up to this many times its
#: first plan's take (``Arena._headroom``)
HEADROOM = 4


class Arena:
    """The buffers of plans' memory (``Plan._plan_memory``): buffer ``k`` of every plan
    that shares the arena is one array, so that a model run at many batch sizes keeps
    one arena, not one per size; those plans run one at a time (``lock``).  A shared
    arena's buffers are reservations of address space (``memory.reserve``: 64 times
    the first need), so a larger batch uses more of the same buffer: the pages touched
    before stay, and only the new ones fault (a grown buffer had been a new one, whose
    every page faulted again: 41 ms per 100 MB on a VM; a transformer layer at batch
    64 after 32: 44 -> 27 ms for a new batch).  Where no reservation is made,
    a plan keeps its buffers and a grown one, at least twice as large, replaces it
    for later plans.  The kernels' temporaries share one buffer (``scratch``: groups
    run one at a time), and the weights a generic kernel packs are packed once
    (``prepacked``: the same for every plan)."""

    def __init__(self, grow: bool = False):
        self.lock = threading.Lock()
        self._grow = grow
        self._buffers: dict = {}
        #: reserved buffer -> the bytes of it that plans have used (their pages touched)
        self._used: dict = {}
        self._new: list = []  # (buffer, start, stop): bytes given out, not yet touched
        #: ``(scale, {buffer: bytes})``: the plan of the largest scale so far, and the
        #: bytes of each buffer it took (``expect``); the current plan's scale and takes
        self._largest: tuple | None = None
        self._scale, self._takes = None, {}
        self._job = None  # (handle, ranges): the pages ``expect`` began to fault in
        #: (the kernel's shared object, its weights' names) -> its packed weights
        self.prepacked: dict = {}

    def take(self, k, nbytes: int) -> np.ndarray:
        """Buffer ``k``, of ``nbytes`` or more.  A reserved buffer's part that no plan
        used before is faulted in by ``populate``."""
        buf = self._buffers.get(k)
        if buf is None or buf.size < nbytes:
            grown = nbytes if buf is None else max(nbytes, 2 * buf.size)
            buf = reserve(grown) if self._grow else None
            self._used[k] = 0 if buf is not None else None
            buf = self._buffers[k] = huge_empty(grown) if buf is None else buf
        self._takes[k] = max(nbytes, self._takes.get(k, 0))
        used = self._used.get(k)
        if used is not None and nbytes > used:
            self._new.append((buf, used, nbytes))
            self._used[k] = nbytes
        return buf

    def expect(self, scale: int) -> None:
        """A plan begins whose symbolic dimensions' product is ``scale``: where it is
        larger than every earlier plan's, the parts of the reserved buffers it will
        likely take beyond those touched so far (the largest plan's takes, grown in
        proportion) begin to fault in on another CPU while the plan is made
        (``memory.populate_start``; ``populate`` finishes them).  A guess too large
        faults in pages a larger batch uses later; too small, ``populate`` faults the
        rest.  A transformer layer's new batch of 17, 32, 64 after 1-3, in-process A/B (medians
        of 4): 4.8 -> 3.6, 6.3 -> 5.0, 9.2 -> 8.1 ms.  Also while other processes run: a
        test of the machine (``/proc/loadavg``'s runnable count, or ``/proc/stat`` since
        the last look) found onnxruntime's pool, spinning after its turn in
        ``bench_onnx --dynamic``, as often as a real neighbour, and switched the guess off
        there half the time (a new batch's median 4.3-4.8 -> 5.1-6.5 ms); under a process
        spinning on the other CPU, with or without the guess, 4.6-9 ms at batch 17."""
        self._scale, self._takes = scale, {}
        if self._largest is None or scale <= self._largest[0] or machine.threads() < 2:
            return
        was, ranges = dict(self._used), []
        for k, nbytes in self._largest[1].items():
            buf, used = self._buffers.get(k), self._used.get(k)
            if buf is not None and used is not None:
                want = min(buf.size, nbytes * scale // self._largest[0])
                if want > used:
                    ranges.append((buf, used, want))
                    self._used[k] = want
        job = populate_start(ranges)
        if job is None:  # (nothing began: those pages fault when taken)
            self._used = was
        else:  # (with its buffers: alive while it runs)
            self._job = (job, ranges)

    def populate(self) -> None:
        """Fault in the parts of reserved buffers that ``take`` gave out first since the
        last call, all at once on every thread (``memory.populate``), after finishing
        what ``expect`` began."""
        self.finish()
        new, self._new = self._new, []
        if self._largest is None and self._scale is not None:  # the first plan's
            new += self._headroom()
        populate(new, machine.threads())
        if self._scale is not None and (self._largest is None or
                                        self._scale >= self._largest[0]):
            self._largest = (self._scale, dict(self._takes))

    def _headroom(self) -> list:
        """Ranges of the reserved buffers beyond the first plan's takes, to fault in with
        them: each buffer up to ``HEADROOM`` times its take, all of them together within
        ``POLYTC_ARENA_HEADROOM`` bytes (``config.arena_headroom``; scaled down alike)
        and a 64th of the memory.  Faulted in while the model's first plan is made
        (its compile takes seconds), they spare the first larger batches those faults
        (a transformer layer's first batch of 17 after 8: 2300 pages, 1.5-2 ms of its
        new batch's cost)."""
        try:
            budget = min(config.arena_headroom(),
                         os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 64)
        except (OSError, ValueError):
            budget = 0
        grow = {k: min(self._buffers[k].size, HEADROOM * used) - used
                for k, used in self._used.items() if used}
        total = sum(grow.values())
        if budget <= 0 or total <= 0:
            return []
        ranges = []
        for k, extra in grow.items():
            extra = extra * min(budget, total) // total
            extra -= extra % 4096
            if extra > 0:
                used = self._used[k]
                ranges.append((self._buffers[k], used, used + extra))
                self._used[k] = used + extra
        return ranges

    def finish(self) -> None:
        """What ``expect`` began, done (the caller's threads join in)."""
        job, self._job = self._job, None
        if job is not None:
            populate_finish(job[0], machine.threads())

    def scratch(self, kernels: dict) -> dict:
        """Group -> the temporaries of its compiled kernel (``kernels``: group ->
        kernel), arrays 64-byte aligned in one buffer of this arena as large as the
        largest group's: they hold nothing from one group's run to another's (a
        kernel's own temporaries hold what its last call left)."""
        def aligned(n):
            return n + -n % 64

        places = {g: [(int(np.prod(shape, dtype=np.int64)), np.dtype(dtype), shape)
                      for shape, dtype in ck.temps] for g, ck in kernels.items() if ck.temps}
        if not places:
            return {}
        need = max(sum(aligned(n * dt.itemsize) for n, dt, _ in ts) for ts in places.values())
        buf = self.take("scratch", need + 64)
        base = (-buf.ctypes.data) % 64
        out = {}
        for g, ts in places.items():
            at, arrays = base, []
            for n, dt, shape in ts:
                arrays.append(buf[at:at + n * dt.itemsize].view(dt).reshape(shape))
                at += aligned(n * dt.itemsize)
            out[g] = arrays
        return out
