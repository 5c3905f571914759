"""A contraction's partial sums kept in its epilogue's result.

``T(m, n) +=! X(m, k) * W(k, n)`` then ``O(m, n) = gelu(T(m, n) + b(n))``: with the init
and the epilogue folded into the register tiles (``fold.py``) and ``T`` read by nothing
but the epilogue, ``T`` holds only partial sums, between one reduction tile of an element
and the next (a product whose reduction is split into cache tiles: a 1024-deep FFN, or
a 256-deep one under a costly epilogue).  The last tile hands its accumulators to the
epilogue, which writes ``O``.  ``T`` is then an array as large as the result that the
kernel writes and reads once more per reduction tile, and whose pages the runtime
touches (a transformer layer's FFN at batch 64: 33.5 MB, more than any other buffer
of the layer).  BLIS accumulates in ``C`` itself; here ``O`` is that ``C``: ``T`` is
``O``'s memory, element for element (``alias`` decision, printed by the C emitter as
``O``'s array), and the epilogue overwrites each element's last partial sum with its
value.

``T`` takes ``O``'s memory when
* ``T`` is a temporary (neither an input nor an output) of ``O``'s shape and type, not
  filled before the kernel and not packed (nor then contracted: ``contract.py``), and the
  contraction (its init included) and the epilogue are the only statements that touch
  it (``fold._dead``: only the epilogue reads it);
* the epilogue writes ``O(i...)`` from ``T(i...)`` at exactly its own indices (no
  constant added: not the inside of a padded buffer), ``O`` is filled by no one before
  the kernel and packed by no pack (it may be contracted: the partial sums then stay in
  its per-iteration buffer), and no other statement writes it (``fold.py`` checked that
  none reads it before the epilogue): between the contraction's first tile of an
  element and its last nothing reads that element of ``O``.
"""
from __future__ import annotations

from ..lang import program as P
from .decisions import Decision
from .fold import offsets_of


def aliases(scop, folds, fills, packed) -> list:
    """``alias`` Decisions (subject ``T``, fact ``into``: ``O``) for the ``fold``
    decisions ``folds`` whose contraction's result can live in its epilogue's result
    (see the module's doc); ``fills``, ``packed``: tensor names that the runtime fills,
    that a pack copies.  ``T`` is then not contracted (``contract.py``); ``O`` may be:
    the contraction's instances, where its epilogue runs, have ``O``'s box offsets."""
    by_name = {s.name: s for s in scop.stmts}
    temps = {t.name: t for t in scop.program.temporaries}
    out = []
    for d in folds:
        f = d.facts
        if not (f.get("_dead") and f.get("init") and f.get("epilogue")):
            continue
        s, e = by_name[d.subject].stmt, by_name[f["epilogue"]].stmt
        t, o = s.tensor, e.tensor
        if t not in temps or o == t or {t, o} & (set(fills) | set(packed)):
            continue
        tensor_o = scop.program.tensor(o)
        if tensor_o.dtype != temps[t].dtype or scop.shapes.get(t) != scop.shapes.get(o):
            continue
        reads = [r for r in P.reads(e.rhs) if r.tensor == t]
        if not reads or any(offsets_of(r) != tuple((i, 0) for i in e.indices) for r in reads):
            continue
        if any(x is not s and x is not e and x.tensor in (t, o)
               for x in scop.program.statements):
            continue
        out.append(Decision("alias", [t], {"into": o}))
    return out

