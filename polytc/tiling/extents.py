"""How many iterations the indices of a statement run at the sizes of a build: what the
cost models (tile sizes, the parallel threshold) count with.  A range that depends on a
symbolic size (``Options.symbolic``) counts at least ``GENERIC`` iterations: its code
serves every size, so its tiles and parallel loops are made for large ones."""
from __future__ import annotations

from ..lang import sizes as S
from ..lang.ranges import Interval

#: the iterations the cost model assumes for a loop over a symbolic size
GENERIC = 256


def bounds(sst, env) -> dict:
    """Index name -> ``(lo, hi)`` (numbers, ``hi`` exclusive) of the statement's ranges
    at ``env``; a triangular range widened to its box."""
    known: dict = {}
    for r in sst.stmt.ranges:
        iv = Interval(known)
        lo = S.evaluate(iv.lo(r.lo), env)
        hi = S.evaluate(iv.hi(S.sub(r.hi, S.const(1))), env) + 1
        known[r.var] = (S.const(lo), S.const(hi))
    return {v: (lo.const, hi.const) for v, (lo, hi) in known.items()}


def symbolic(sst, var: str, names) -> bool:
    """Whether the range of ``var`` in ``sst`` depends on one of the sizes ``names``."""
    r = next((r for r in sst.stmt.ranges if r.var == var), None)
    return r is not None and bool((S.names(r.lo) | S.names(r.hi)) & set(names))


def extent(sst, var: str, env, names=()) -> int:
    """The iterations of ``var`` (at least ``GENERIC`` when symbolic in ``names``)."""
    lo, hi = bounds(sst, env)[var]
    return max(hi - lo, GENERIC) if symbolic(sst, var, names) else hi - lo


def statement_points(s, env, names=()) -> int:
    """An upper bound on the number of instances of a statement (for the parallel
    threshold): the product of its index ranges, triangular ones widened to boxes."""
    n = 1
    for v in s.vars:
        if any(r.var == v for r in s.stmt.ranges):
            n *= max(0, extent(s, v, env, names))
    return n


def products(sst) -> int:
    """The products one step of the statement's reduction makes: 4 for ``dot4`` (four
    8-bit products), else 1 (a cost model counts the depth of the same float loop)."""
    rhs = sst.stmt.rhs
    return 4 if getattr(rhs, "func", None) == "dot4" else 1


def least_symbolic(stmts, env, names, min_points: int) -> int:
    """The least product of the symbolic sizes ``names`` at which the statements reach
    ``min_points`` instances (counted at ``env``'s hint sizes, those whose ranges depend
    on a symbolic size scaled by that product, the others as they are): below it a
    generic kernel runs on one thread (``backends/c.py``'s run-time test).  1 where any
    size does (a nest of fixed extents alone has enough: it need not wait for the rows
    of another to fork, as it did when its instances were scaled too)."""
    fixed = scaled = 0
    for s in stmts:
        if any(symbolic(s, v, names) for v in s.vars):
            scaled += statement_points(s, env)
        else:
            fixed += statement_points(s, env)
    need = min_points - fixed
    if need <= 0:
        return 1
    scale = 1
    for n in names:
        scale *= max(1, env[n])
    return max(1, -(-need * scale // max(1, scaled)))
