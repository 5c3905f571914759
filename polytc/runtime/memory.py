"""64-byte aligned numpy arrays.

numpy's allocator aligns to 16 bytes; a 512-bit load from such a buffer straddles two
cache lines, which costs a register-tiled sgemm a fifth of its speed (113 -> 90 GFLOP/s
per core measured).  Outputs are allocated aligned; inputs of contractions, where every
element is reused many times, are copied into aligned buffers when they are not.
"""
from __future__ import annotations

import os

import numpy as np

ALIGN = 64
#: below this many bytes alignment does not matter and the plain allocator is faster
SMALL = 1 << 14


def aligned_zeros(shape, dtype) -> np.ndarray:
    return aligned_empty(shape, dtype, fill=0)


def aligned_empty(shape, dtype, fill=None, always: bool = False) -> np.ndarray:
    """An aligned array; uninitialised unless ``fill`` is a value (np.empty reuses freed
    heap memory without page faults or clearing; zeros come from calloc).  Arrays under
    ``SMALL`` bytes are aligned only when ``always``."""
    if fill is not None and fill != 0:
        out = aligned_empty(shape, dtype, always=always)
        out.fill(fill)
        return out
    alloc = np.empty if fill is None else np.zeros
    dt = np.dtype(dtype)
    n = 1
    for s in shape:
        n *= s
    nbytes = n * dt.itemsize
    if nbytes < SMALL and not always:
        return alloc(shape, dt)
    buf = alloc(nbytes + ALIGN, np.uint8)
    off = (-buf.ctypes.data) % ALIGN
    return buf[off:off + nbytes].view(dt).reshape(shape)


def offset_copy(a: np.ndarray, offset: int) -> np.ndarray:
    """A copy of ``a`` whose data starts ``offset`` bytes past an ``ALIGN`` boundary (a
    user's array, as it lay: ``polytc.autotune`` times a candidate on the inputs' own
    alignment)."""
    buf = np.empty(a.nbytes + ALIGN, np.uint8)
    at = (offset - buf.ctypes.data) % ALIGN
    out = buf[at:at + a.nbytes].view(a.dtype).reshape(a.shape)
    np.copyto(out, a)
    return out


def is_aligned(a: np.ndarray) -> bool:
    return a.ctypes.data % ALIGN == 0


def aligned_copy(a: np.ndarray, always: bool = False) -> np.ndarray:
    out = aligned_empty(a.shape, a.dtype, None, always)
    np.copyto(out, a)
    return out


def allocator(shape, dtype, fill=None):
    """The fastest way to make an output of this shape whose every element is ``fill``
    (uninitialised for None): the plain numpy call when the array is small (alignment
    does not matter there), else an aligned one.  Called as ``alloc(shape, dtype)``."""
    import functools

    if fill is not None and fill != 0:
        return functools.partial(aligned_empty, fill=fill)
    if np.dtype(dtype).itemsize * int(np.prod(shape, dtype=np.int64)) < SMALL:
        return np.empty if fill is None else np.zeros
    return functools.partial(aligned_empty, fill=fill)


HUGE = 2 << 20  # a transparent huge page (x86-64)
#: the most bytes one array may span: a process's address space (x86-64: 128 TiB)
MOST_BYTES = 1 << 47


def huge_empty(nbytes: int) -> np.ndarray:
    """``nbytes`` of uninitialised, 2 MiB-aligned memory of a private anonymous mapping,
    advised into 2 MiB pages (``madvise(MADV_HUGEPAGE)``) only where Linux's THP
    ``defrag`` policy never stalls a fault to compact memory (``_huge_pages_cheap``).
    Python's plain ``mmap(-1, n)`` is shared memory to Linux (shmem, whose huge pages
    are off by default): the arena used to fault every 4 KiB at 65 ms per 100 MB, 41 ms
    private.  With the advice a first touch costs 8 ms per 100 MB while free 2 MiB
    blocks last and 250 ms once the kernel compacts memory to make them (the default
    ``defrag`` policy, ``madvise``, compacts on the fault: a bench worker holding many
    sessions' arenas ran its first batch-64 transformer 170 -> 300 ms; advised only
    while ``/proc/buddyinfo`` showed 6 GB of free 2 MiB blocks, a new batch of 64 cost
    48 -> 270 ms on a VM, cause not established).
    Plain aligned memory below 4 MiB, without ``mmap``'s flags, or where the mapping
    is refused."""
    buf = _mapped(nbytes) if nbytes >= 2 * HUGE else None
    return aligned_empty((max(nbytes, 1),), np.uint8, always=True) if buf is None else buf


def _mapped(nbytes: int) -> np.ndarray | None:
    """``nbytes`` of a private anonymous mapping from its first 2 MiB boundary, advised
    into huge pages where that is cheap (``huge_empty``); None without ``mmap``'s flags
    or where the mapping is refused (the address space limited: ``ulimit -v``)."""
    import mmap

    if not hasattr(mmap, "MAP_PRIVATE") or not hasattr(mmap, "MAP_ANONYMOUS"):
        return None
    try:
        m = mmap.mmap(-1, nbytes + HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except (OSError, OverflowError):
        return None
    buf = np.frombuffer(m, np.uint8)
    off = (-buf.ctypes.data) % HUGE
    if _huge_pages_cheap() and hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            m.madvise(mmap.MADV_HUGEPAGE, off, nbytes - nbytes % HUGE)
        except (OSError, ValueError):
            pass
    return buf[off:off + nbytes]


def reserve(nbytes: int) -> np.ndarray | None:
    """An array of ``nbytes`` or more (its ``size``) over a private anonymous mapping of
    address space, 2 MiB aligned, whose pages cost memory only when first touched: room
    to grow in place (``graph.arena.Arena``), so that a larger use of it keeps the
    pages touched before and faults only the new ones.  At least 64 times ``nbytes``
    and 256 MiB, at most a quarter of the memory; None where Linux counts address
    space as memory (``vm.overcommit_memory`` 2), or no mapping is made."""
    try:
        with open("/proc/sys/vm/overcommit_memory", encoding="ascii") as f:
            if f.read().strip() == "2":
                return None
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        return None
    capacity = max(nbytes, min(max(64 * nbytes, 256 << 20), total // 4))
    return _mapped(capacity + -capacity % HUGE)


def _huge_pages_cheap() -> bool:
    """Whether advised memory gets 2 MiB pages only when free ones exist: the THP
    ``defrag`` policy is ``defer`` or ``never`` (``always``, ``madvise`` and
    ``defer+madvise`` compact memory in the faulting thread)."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/defrag", encoding="ascii") as f:
            mode = f.read()
    except OSError:
        return False
    chosen = mode[mode.find("[") + 1:mode.find("]")] if "[" in mode else ""
    return chosen in ("defer", "never")


#: fewer bytes are left to fault at their first touch
POPULATE_MIN = 1 << 20


def populate(ranges: list, threads: int = 1) -> None:
    """Fault in the pages of ``ranges`` (``(array, start, stop)``: bytes of private
    anonymous mappings) now, 1 MiB at a time over ``threads`` threads of OpenMP's pool
    (``executor.py``: ``polytc_populate``, ``madvise``'s MADV_POPULATE_WRITE), rather than
    one by one at the first touches of a run: a grown arena's new parts (a dynamic
    model's larger batch).  A page fault costs this virtual machine's kernel 1.3-1.5 us
    whether a kernel's loop or this call takes it, and the threads fault at once where a
    run's loops took their faults mostly in turn (a transformer layer's new batch of 64
    faulted 8192 pages in 12 ms of its first run, 5-7 ms here).  Python threads had
    done it 0.9 ms slower for 9.4 MB (their start, and the GIL between calls).  Nothing
    below ``POPULATE_MIN`` bytes in all, nor where ``madvise`` lacks the advice (an
    older Linux, another system: the pages then fault as before)."""
    from .executor import populate_pages

    spans = _spans(ranges)
    if spans is not None:
        populate_pages()(*spans, max(1, threads))


def populate_start(ranges: list):
    """Begin faulting in the pages of ``ranges`` (as ``populate``) on a thread of its
    own, pinned to another CPU than the caller's, while the caller goes on: the pages a
    dynamic model's larger batch will likely use, faulted in while its plan is made in
    Python (``graph.arena.Arena.expect``).  A handle for ``populate_finish``; None where
    nothing began (too few bytes, no other CPU: the caller then faults them in, or its
    run does)."""
    from .executor import populate_begun
    from .ffi import ffi

    spans = _spans(ranges)
    if spans is None:
        return None
    job = populate_begun()[0](*spans)
    return None if job == ffi.NULL else job


def populate_finish(job, threads: int = 1) -> None:
    """The rest of ``populate_start``'s job done now, the caller and ``threads`` - 2 more
    threads of OpenMP's pool beside the job's own (joined then)."""
    from .executor import populate_begun

    if job is not None:
        populate_begun()[1](job, max(1, threads))


def _spans(ranges: list) -> tuple | None:
    """``(addresses, lengths, count)`` for ``polytc_populate``: the whole pages of
    ``ranges``; None below ``POPULATE_MIN`` bytes in all."""
    from .ffi import ffi

    page = 4096
    spans = []
    for a, start, stop in ranges:
        lo, hi = a.ctypes.data + start, a.ctypes.data + stop
        lo, hi = lo + -lo % page, hi - hi % page
        if hi > lo:
            spans.append((lo, hi - lo))
    if sum(n for _, n in spans) < POPULATE_MIN:
        return None
    return (ffi.new("void *[]", [ffi.cast("void *", lo) for lo, _ in spans]),
            ffi.new("size_t[]", [n for _, n in spans]), len(spans))
