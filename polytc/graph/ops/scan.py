"""Scans: CumSum and CumProd as comprehensions.

A prefix sum is a triangular reduction along the axis:

    Y(.., i, ..) +=! X(.., r, ..) where r in 0:i+1

Exclusive scans drop ``i`` itself from the range (``0:i``), reverse scans mirror it
(``i:n``, ``i+1:n``); ``*=!`` makes the product, and an empty range (the first element of
an exclusive scan) leaves the initial 0 or 1.  That costs n²/2 operations along an axis
of extent n: a (4, 2048) CumSum ran 8x slower than onnxruntime's sequential loop.  So a
long axis whose extent a block length B divides is scanned in blocks, element ``b*B + j``
being element ``j`` of block ``b``:

    L(b, j) op=! (r <= j ? X(b*B + r) : id) where r in 0:B     scan inside each block
    T(b) op=! X(b*B + r) where r in 0:B                        block totals
    C(b) op=! (r < b ? T(r) : id) where r in 0:n/B             all blocks before b
    Y(i) = L(i / B, i % B) op C(i / B)

(``id`` the identity of ``op``; exclusive and reverse scans change the comparisons).  That
costs n*B + (n/B)² operations (the (4, 2048) CumSum: 1.9x onnxruntime's time).  The
blocked statements mask rectangles rather than range over triangles, and a block length
must divide n, because isl's scheduler stalls on the alternatives tried: triangles such
as ``r in j:B`` beside the block totals, ``min`` bounds or a padded copy of X for a
partial last block.  An extent without a divisor in range keeps the single triangle.
The summation order of a blocked scan differs from a sequential loop's, as in any
parallel scan.
"""
from __future__ import annotations

import numpy as np

from .registry import idx, literal, op

#: the shortest block of a blocked scan
_MIN_BLOCK = 8


@op("CumSum", "CumProd")
def _scan(ctx):
    x = ctx.input(0)
    if x.dtype.kind not in "fiu":
        ctx.fail(f"{ctx.node.op} of {x.dtype.name} is not supported", unsupported=True)
    if x.rank == 0:
        ctx.fail(f"{ctx.node.op} needs an input of rank 1 or more")
    a = np.asarray(ctx.const_input(1))
    if a.size != 1 or a.dtype.kind not in "iu":
        ctx.fail(f"the axis must be one integer, not {a.tolist()}")
    a = int(a.reshape(()))
    if not -x.rank <= a < x.rank:
        ctx.fail(f"axis {a} is out of range for rank {x.rank}")
    a %= x.rank
    y = ctx.out(0, x.shape, x.dtype)
    ctx.result.kind = "reduction"
    reverse, exclusive = bool(ctx.attr("reverse", 0)), bool(ctx.attr("exclusive", 0))
    red = "+=!" if ctx.node.op == "CumSum" else "*=!"
    i = idx(x.rank)
    k, n = i[a], x.shape[a]
    at = lambda ref, *j: ref(*i[:a], *j, *i[a + 1:])  # noqa: E731  (j on the axis)
    B = _block(n)
    if B is None:
        # (string bounds: ctx.emit compares int ones, to drop empty ranges)
        lo, hi = (f"{k} + {int(exclusive)}", str(n)) if reverse \
            else ("0", f"{k} + {int(not exclusive)}")
        ctx.emit(y, i, at(x, "r"), red, {"r": (lo, hi)})
        return
    nb, ident = n // B, literal(0 if red == "+=!" else 1, x.dtype)
    blocks = x.shape[:a] + (nb,) + x.shape[a + 1:]
    local = ctx.temp(x.shape[:a] + (nb, B) + x.shape[a + 1:], x.dtype)
    total, carry = ctx.temp(blocks, x.dtype), ctx.temp(blocks, x.dtype)
    block = at(x, f"{k} * {B} + r")
    ctx.emit(local, [*i[:a], k, "j", *i[a + 1:]],
             f"({_enters('r', 'j', exclusive, reverse)} ? {block} : {ident})", red,
             {"r": (0, B)})
    ctx.emit(total, i, block, red, {"r": (0, B)})
    ctx.emit(carry, i, f"({_enters('r', k, True, reverse)} ? {at(total, 'r')} : {ident})",
             red, {"r": (0, nb)})
    ctx.emit(y, i, f"{at(local, f'{k} / {B}', f'{k} % {B}')} {red[0]} "
             f"{at(carry, f'{k} / {B}')}")


def _block(n):
    """The block length for an axis of extent ``n``: the divisor of n nearest to
    (2n)^(1/3), where the costs of the two scans balance, from ``_MIN_BLOCK`` to four
    times that; None for a short axis or one without such a divisor (one triangle)."""
    if n < 16 * _MIN_BLOCK:
        return None
    best = round((2 * n) ** (1 / 3))
    ok = [b for b in range(_MIN_BLOCK, 4 * best + 1) if n % b == 0]
    return min(ok, key=lambda b: abs(b - best)) if ok else None


def _enters(r, j, exclusive, reverse) -> str:
    """Whether element ``r`` of a block enters the scan's element ``j``."""
    return f"{r} {'>' if reverse else '<'}{'' if exclusive else '='} {j}"
