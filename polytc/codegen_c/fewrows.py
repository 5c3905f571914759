"""A second tiling of a kernel for a few rows, chosen at run time.

A contraction whose rows are symbolic (``docs/dynamic.md``) has one register tile for
every number of rows, ``MR`` x ``NR`` (6 x 4 vectors on AVX-512).  Below
``pack.STREAM_ROWS`` rows it reads its operand where it lies (``pack.direct_below``),
and every register tile of rows is one more pass over that operand: 7 rows ran as a
tile of 6 and a tile of 1, 8 as 6 + 2, each pass streaming the operand from L2 for a
few rows' FMAs (M x 512 x 512, the generic kernel over the one made for M rows: 1.32x
at 7 rows, 1.17-1.30x at 8).  No single tile serves both ends: one register tile of 12
rows x 2 vectors, the tile a specialised kernel takes for 7 to 12 rows
(``sizes.choose_sizes``), made 1 to 3 rows 1.3x slower and 256 rows 3% slower.

So such a kernel is tiled twice from the same schedule (the ``few_rows`` pass,
``compiler/pipeline.py``): as before, and with that register tile (``variant_tile``),
under the context that the rows are more than the first tiling's ``MR`` and at most the
variant's; the code runs the second for those rows (one pass over the operand) and the
first elsewhere (``emit.py``).  Only for a kernel of one contraction, its rows one
symbolic size, whose one packed operand is packed at every call (the variant reads it
where it lies) and whose temporaries both tilings keep alike (then they take the same
arguments): as arrays, or a product's partial sums in its epilogue's result.
"""
from __future__ import annotations

from ..machine import host
from ..tiling.sizes import accumulators
from .pack import direct_below, packs_of


def variant_tile(b) -> tuple | None:
    """``((MR, NR), rows, least)`` of the few-rows variant of build ``b`` (after its
    ``ast`` pass): its register tile, the C expression of the rows, and the rows it
    serves beyond; None where it has none: not one contraction over symbolic rows
    reading one operand packed at every call, a temporary kept in a parallel loop's
    buffer, or no taller tile within the accumulators than the contraction's own."""
    contractions = [d for d in b.tiling if d.kind == "contraction"]
    packs = [d for d in b.tiling if d.kind == "pack"]
    if len(contractions) != 1 or len(packs) != 1 or packs[0].facts.get("_box") is not None \
            or any(d.kind == "contract" for d in b.tiling):
        return None
    d = contractions[0].facts
    mr, nr = d.get("_mr"), d.get("_nr")
    if mr is None or not d.get("_symrows"):
        return None
    few = direct_below(packs_of(b.tiling, b.scop), b.scop)
    if few is None or len(few[2]) != 1 or few[2][0] not in b.scop.symbolic:
        return None  # (the rows: one symbolic size, those of the contraction's tiles)
    m = host()
    lanes = m.lanes(b.program.tensor(packs[0].facts["tensor"]).dtype.np_dtype.itemsize)
    most = accumulators(m) // 2
    if mr >= most or nr <= 2 * lanes:
        return None
    return (most, 2 * lanes), few[2][0], mr


def kept(b) -> list:
    """How build ``b`` keeps its temporaries other than as arrays (the variant's must be
    the kernel's: one set of arguments, one set of buffers)."""
    return [str(d) for d in b.tiling if d.kind in ("contract", "alias")]


def bounds(b) -> tuple | None:
    """``(least, most)``: the rows, beyond ``least`` and up to ``most``, for which the
    code of build ``b`` runs its few-rows variant ``b.few``; None without one."""
    if b.few is None:
        return None
    mine = next(d for d in b.tiling if d.kind == "contraction").facts["_mr"]
    few = next(d for d in b.few.tiling if d.kind == "contraction").facts["_mr"]
    return mine, few
