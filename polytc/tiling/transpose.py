"""Square tiles for a transpose (``Tiler.band``): a band whose written rows run across
the rows of a read reads one element per input row, in tiles whose lines stay in L1."""
from __future__ import annotations

from ..lang import program as P
from ..poly import transform as T
from .decisions import Decision


def transpose_tiles(tiler, node, ssts, mv, coinc):
    """A parallel band whose last member runs the written tensors' last index while
    a read runs its own last index through another member (a transpose,
    ``B(j, i) = A(i, j)``): the loop along the written rows reads one element per
    row of the input, and a row length that is a power of two maps every one of
    them to the same few cache sets (2048x2048: 12 ms, 3 GB/s).  Tiled into squares
    of ``T x T`` (both members), the lines a tile reads stay in L1 while the tile
    writes its rows.  The point band below the tile band, or ``node``."""
    n = len(coinc)
    if n < 2 or not all(coinc) or tiler.options.tile == ():
        return node
    last = n - 1
    pairs = set()
    for s in ssts:
        if mv[s.name][last] is None or mv[s.name][last] != tiler.target_var(s):
            return node
        for r in P.reads(s.stmt.rhs):
            if len(r.indices) < 2 or not isinstance(r.indices[-1], P.Index):
                continue
            v = s.vars.index(r.indices[-1].name) if r.indices[-1].name in s.vars else None
            m = mv[s.name].index(v) if v is not None and v in mv[s.name] else None
            if m is not None and m != last:
                pairs.add(m)
    if len(pairs) != 1:
        return node
    m = pairs.pop()
    itemsize = max(s.stmt.rhs.dtype.np_dtype.itemsize for s in ssts)
    size = max(8, 64 // itemsize)  # a cache line of each row per tile row
    if any(mv[s.name][k] is None or tiler.extent(s, mv[s.name][k]) < 2 * size
           for s in ssts for k in (m, last)):
        return node
    sizes = [1] * n
    sizes[m] = sizes[last] = size
    tiler.report.append(Decision("transpose", [s.name for s in ssts], {"tile": (size, size)}))
    return T.tile(node, sizes).child(0)
