"""Software prefetches in register tiles, for data with more streams than the hardware
prefetchers follow, from memory: the next tile's part of an operand that a tile reads
a row per reduction step (``streamed``), of what a channel-lane tile's folded
epilogue reads across as many planes as the tile has lanes (``during``), the lines of
the next tile's accumulators (``next_tile``), and the range of a tensor that the next
iteration copies into a contracted buffer, while this one computes from it
(``cursors``, ``steps``).  Only for tensors larger than the last-level cache
(``from_memory``; the epilogue's and the accumulators', than L2): from L3 their lines
come soon enough, and each prefetch is an instruction more.  A prefetch changes no result and
never faults, even at an address past an array's end (the last tile's next one)."""
from __future__ import annotations

import re
from dataclasses import dataclass

import cgen as c

from ..lang import program as P
from ..machine import host
from .cexpr import mentions


#: the streams the hardware prefetchers follow side by side (a register tile reading 8
#: rows of a 64 MB matrix, a vector-matrix product: 0.87-0.93x without prefetches)
STREAMS = 16


def streamed(em, sst, printer, reads: set, lane: str, nxt: int, vectors, lanes: int,
             steps: int | None) -> list:
    """Prefetches (C text) of the vectors the next tile along the lanes reads, for each
    of ``reads`` (ids of lane-dependent reads, not packed) whose element moves with a
    reduction index, one per cache line (``vectors``: the vectors' numbers): such an
    operand is read a row per reduction step, as many streams as steps, more than
    the hardware prefetchers follow (SqueezeNet's squeeze of 128 channels over 55 x
    55 pixels at batch 64 read its input at 21 GB/s: 4.16 -> 3.60 ms); none where the
    tile's ``steps`` (None: not constant) are ``STREAMS`` or fewer."""
    if steps is not None and steps <= STREAMS:
        return []
    moving = set(sst.stmt.reduction_vars)
    out = []
    for r in P.reads(sst.stmt.rhs):
        if id(r) not in reads or not from_memory(em, r.tensor) or \
                not set(P.index_names(*r.indices)) & moving:
            continue
        for v in vectors:
            at = {k: re.sub(rf"\b{lane}\b", f"{nxt + v * lanes}L", x)
                  for k, x in printer.vars.items()}
            p = em.printer(sst, at)
            out.append(f"__builtin_prefetch(&{p.element(r.tensor, [p.sub(s) for s in r.indices])})")
    return out


def next_tile(targets: list, outer: tuple) -> tuple[list, list]:
    """Prefetches (for writing) of the lines of the next register tile's accumulators,
    ``targets`` (C elements, one per cache line), spread evenly over the outermost
    reduction loop of this tile (``outer``: its iterator and constant bounds): that
    tile then loads and stores lines already in the core's caches, where each of its
    ``MR`` rows is a stream of its own that no hardware prefetcher follows (a 1024^3
    sgemm on two threads, its 4 MB result in L3: 2-6% faster).  Returns the declaration
    of the table of addresses (made before the loop) and the step's statement (at the
    start of the loop's body); nothing where the loop's bounds are not constant."""
    it, lo, hi = outer
    if not targets or lo is None:
        return [], []
    n, steps = len(targets), hi - lo + 1
    table = c.Statement(f"const char *const pt_nt[{n}] = {{"
                        + ", ".join(f"(const char *)&{t}" for t in targets) + "}")
    step = f"({it} - {lo}L)"
    if steps < n:  # several a step
        per = -(-n // steps)
        return [table], [c.For(f"long pt_l = {step} * {per}L",
                               f"pt_l < PT_MIN(({step} + 1L) * {per}L, {n}L)", "pt_l += 1",
                               c.Statement("__builtin_prefetch(pt_nt[pt_l], 1)"))]
    shift = (steps // n).bit_length() - 1  # one every 2^shift steps
    return [table], [c.If(f"({step} & {(1 << shift) - 1}L) == 0L && ({step} >> {shift}) < {n}L",
                          c.Statement(f"__builtin_prefetch(pt_nt[{step} >> {shift}], 1)"))]


def ahead_along(em, tensor: str, width: int, lane: str, first: str | None) -> bool:
    """Whether a register tile of ``width`` lanes along the rows of ``tensor`` (``lane``:
    the C expression of the lanes' index; ``first``: the condition of its first
    reduction tile, where its accumulators start at zero, None: they always start from
    memory) prefetches the next tile's lines of it (``next_tile``): where the tensor is
    larger than L2, the tile loads its accumulators from it (a reduction of more than one
    tile: else the loads that wait are none, and an LSTM's input projection of one was
    4% slower), the loop of tiles around the tile is the one along the lanes (the next
    tile it runs is the next along them: not where the rows' loop is inside it, as in a
    batched product's tiles of 8 rows x 32 lanes, 5% slower with prefetches of the lines
    that tile reads 16 tiles later), and the rows hold four tiles at least (a product of
    64 columns, each tile a whole row, 5% slower with prefetches of lines the tile itself
    holds)."""
    row = em.shapes.get(tensor, ("?",))[-1]
    return isinstance(row, int) and row >= 4 * width and bool(em.iters) and \
        (first is None or mentions(first, em.iters)) and mentions(lane, em.iters[-1:]) and \
        from_memory(em, tensor, _beyond_l2())


def from_memory(em, tensor: str, beyond: int | None = None) -> bool:
    """Whether ``tensor`` is larger than the last-level cache, or than ``beyond`` bytes
    (so that its lines come from memory, where prefetching pays; from L3 they come
    soon enough, and a prefetch is an instruction more per step: SqueezeNet at batch 1
    2% slower with them), of sizes known at compile time, not a contracted
    temporary."""
    n = em.scop.program.tensor(tensor).dtype.np_dtype.itemsize
    for e in em.shapes.get(tensor, ("?",)):
        if not isinstance(e, int):
            return False
        n *= e
    return tensor not in em.locals and n > (_last_level() if beyond is None else beyond)


def _last_level() -> int:
    return host().l3


def _beyond_l2() -> int:
    return min(host().l2, _last_level())


#: cache lines a vector loop that reads a contracted buffer asks for (``steps``)
LINES = 16
#: the smallest range a cursor prefetches: the hardware prefetchers follow a stream of
#: small iterations' ranges (SqueezeNet's pools of 27 x 27 and 13 x 13 planes: 5% slower
#: with cursors), not one that starts a new 50 KB plane after each wait
MIN_BYTES = 16 << 10


@dataclass
class Cursor:
    """A pointer over the next iteration's source of the contracted buffer ``local``:
    ``name``, its ``declaration``, and whether a loop steps it (``used``: declared
    only then)."""
    local: str
    name: str
    declaration: object
    used: bool = False


def cursors(em, it: str) -> list:
    """The ``Cursor``s over the next iteration's source of the contracted buffers in
    scope whose iteration is the loop ``it`` (``Local.source``: a pooling's next plane,
    from memory), declared at the start of its body."""
    out = []
    for _, lcs in em.scoped:
        for lc in lcs:
            if lc.source is None or lc.source[3] != it or not from_memory(em, lc.source[0]):
                continue
            x, start, count, _ = lc.source
            size = count * em.scop.program.tensor(x).dtype.np_dtype.itemsize
            if size < MIN_BYTES:
                continue
            name = f"pt_pf_{lc.tensor}"
            out.append(Cursor(lc.name, name, c.Statement(
                f"const char *{name} = (const char *)&{x}[{start}], *const {name}_end = "
                f"{name} + {size}L")))
    return out


def steps(active: list, body: str) -> list:
    """Prefetches of the next ``LINES`` lines of each active cursor whose buffer the
    vector loop ``body`` (C text) reads and does not write: spread over the loops that
    compute from the buffer, the next iteration's source arrives while they run, where
    the copy at its start waited for memory (ResNet-18's 3x3/2 max pooling at batch 64,
    a plane of 112 x 112 per iteration: 10.5 -> 7.2 ms)."""
    out = []
    for cursor in active:
        local, name = cursor.local, cursor.name
        if f"{local}[" in body and not re.search(rf"\b{local}\[[^;]*\]\s*=[^=]", body):
            cursor.used = True
            out.append(c.Statement(
                f"for (int pt_q = 0; pt_q < {LINES} && {name} < {name}_end; pt_q++, "
                f"{name} += 64) __builtin_prefetch({name})"))
    return out


def during(em, loop, n: int, outer: tuple, width: int, last: str) -> list:
    """Prefetches of what a channel-lane register tile's folded epilogue reads from
    other tensors at the tile's first and last rows (``loop``: its ``n`` rows as one
    over ``pt_r``, ``microkernel._row_loop``; None: they are not), spread over the
    outermost of its reduction loops (``outer``: its iterator and constant bounds, the
    bounds None where they are not), a few of its ``width`` lanes a step,
    on the last reduction tile (``last``): the lines arrive while the tile computes.
    Lanes with the result's stride read a line of each of as many planes (a residual
    add over 32 channels of a 56 x 56 image: 32 streams), more than the hardware
    prefetchers follow.  Tensors larger than L2, not L3 (``from_memory``): ResNet-18 at
    batch 16 (12.8 MB residuals) ran its 64-channel residual convolutions 9% faster,
    its residual 1x1 downsampling 25%; at batch 64 3-7% and 25%, where the next tile's
    rows had been asked for all at once in the epilogue (a 64-channel residual
    convolution at batch 64 in isolation: 32.8 -> 31.5-32.1 ms); at batch 1 (800 KB)
    nothing is prefetched, as nothing was faster."""
    it, lo, hi = outer
    if loop is None or lo is None:
        return []

    def rows(row):
        return {k: re.sub(r"\bpt_r\b", f"({row}L)", x) for k, x in loop.at.items()}

    out: list = []
    for row in (0, n - 1):  # (the addresses that differ from the tile before's)
        out += [s for s in loop.fold.prefetches(em, rows(row), rows(-n), _beyond_l2())
                if str(s) not in map(str, out)]
    if not out:
        return []
    step = f"({it} - {lo}L)"
    per = -(-width // (hi - lo + 1))
    return [c.If(last, c.For(f"long pt_l = {step} * {per}L",
                             f"pt_l < PT_MIN(({step} + 1) * {per}L, {width}L)", "pt_l += 1",
                             c.Block(out)))]
