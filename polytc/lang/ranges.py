"""Range inference, as Tensor Comprehensions does it.

An index gets its range from a ``where i in lo:hi`` clause if it has one.  Otherwise its
range is the largest one for which every access it appears in *alone* (no other index of
unknown range in the same subscript) stays in bounds, for every value of the indices whose
ranges are already known.  Ranges are solved in rounds: an index that is alone only once
others are known is solved in a later round.  ``A(i + k)`` with ``k in 0:K`` and ``A`` of
size ``N`` gives ``i in 0:N-K+1``; ``A(i / 2)`` gives ``i in 0:2N``; ``A(i % 3)`` and an
indirect ``A(B(i))`` give nothing about ``i``.
"""
from __future__ import annotations

from ..diagnostics import RangeInferenceError
from . import program as P
from . import sizes as S


def affine_of(e) -> "S.SizeExpr | tuple | None":
    """``e`` as ``Lin`` over index and size names, ``("div", Lin, q)`` for ``Lin / q``
    with a positive constant ``q``, or ``None`` when it is neither."""
    if isinstance(e, P.Const) and not e.dtype.is_float and not isinstance(e.value, bool):
        return S.const(int(e.value))
    if isinstance(e, (P.Index, P.Size)):
        return S.name(e.name)
    if isinstance(e, P.Convert) and not e.dtype.is_float:
        return affine_of(e.value)
    if isinstance(e, P.Neg):
        a = affine_of(e.value)
        return S.scale(a, -1) if isinstance(a, S.Lin) else None
    if isinstance(e, P.Bin) and e.op in ("+", "-", "*", "/"):
        a, b = affine_of(e.lhs), affine_of(e.rhs)
        if not (isinstance(a, S.Lin) and isinstance(b, S.Lin)):
            return None
        if e.op == "+":
            return S.add(a, b)
        if e.op == "-":
            return S.sub(a, b)
        if e.op == "*":
            if S.is_const(a):
                return S.scale(b, a.const)
            if S.is_const(b):
                return S.scale(a, b.const)
            return None
        if S.is_const(b) and b.const > 0:
            return ("div", a, b.const)
    return None


class Interval:
    """Bounds of expressions over indices with known ranges (symbolic in sizes)."""

    def __init__(self, ranges: dict):
        self.ranges = ranges  # var -> (lo, hi) SizeExprs, hi exclusive

    def lo(self, e: S.SizeExpr) -> S.SizeExpr:
        return self._bound(e, low=True)

    def hi(self, e: S.SizeExpr) -> S.SizeExpr:
        """Largest value (inclusive)."""
        return self._bound(e, low=False)

    def _bound(self, e, low):
        if isinstance(e, S.Lin):
            out = S.const(e.const)
            for n, c in e.terms:
                if n not in self.ranges:
                    out = S.add(out, S.name(n, c))
                    continue
                lo, hi = self.ranges[n]
                use_lo = (c > 0) == low
                v = self._bound(lo, True) if use_lo else self._bound(S.sub(hi, S.const(1)), False)
                out = S.add(out, S.scale(v, c))
            return out
        if e.kind in ("min", "max"):
            a, b = self._bound(e.args[0], low), self._bound(e.args[1], low)
            return S.smin(a, b) if e.kind == "min" else S.smax(a, b)
        if e.kind == "floordiv":
            return S.floordiv(self._bound(e.args[0], low), e.args[1])
        if e.kind == "add":
            return S.add(self._bound(e.args[0], low), self._bound(e.args[1], low))
        if e.kind == "mul":
            k = e.args[1]
            return S.scale(self._bound(e.args[0], low if k > 0 else not low), k)
        raise ValueError(e.kind)


def _solve(form: S.Lin, var: str, extent: S.SizeExpr, known: Interval):
    """The range of ``var`` keeping ``0 <= form < extent`` for all known values."""
    coeff = dict(form.terms)[var]
    rest = S.sub(form, S.name(var, coeff))
    rmin, rmax = known.lo(rest), known.hi(rest)
    last = S.sub(extent, S.const(1))
    if coeff > 0:
        lo = S.ceildiv(S.scale(rmin, -1), coeff)
        hi = S.add(S.floordiv(S.sub(last, rmax), coeff), S.const(1))
    else:
        k = -coeff
        lo = S.ceildiv(S.sub(rmax, last), k)
        hi = S.add(S.floordiv(rmin, k), S.const(1))
    return lo, hi


def infer(stmt_vars: list, explicit: dict, accesses: list, index_names: set,
          spans: dict, nonneg: frozenset = frozenset()) -> dict:
    """Solve the ranges of ``stmt_vars``.

    ``explicit``: var -> (lo, hi) from where clauses.  ``accesses``: (subscripts, shape)
    pairs, subscripts typed expressions, shape SizeExprs, for every access whose tensor's
    shape is known.  ``spans``: var -> Span of its first use, for messages.  ``nonneg``:
    indices that subscript the left-hand side of an output not sized yet, which must
    stay ``>= 0`` (``O(i) = A(i + 1)`` gives ``i in 0:N-1``, as in TC).
    """
    known = dict(explicit)
    progress = True
    while progress and len(known) < len(stmt_vars):
        progress = False
        found: dict = {}
        for subscripts, shape in accesses:
            for sub, extent in zip(subscripts, shape):
                form = affine_of(sub)
                if isinstance(form, tuple):  # floor(lin / q) in [0, D)  <=>  lin in [0, qD)
                    form, extent = form[1], S.scale(extent, form[2])
                if not isinstance(form, S.Lin):  # not affine
                    continue
                unknown = [n for n, _ in form.terms if n in index_names and n not in known]
                if len(unknown) != 1:
                    continue
                lo, hi = _solve(form, unknown[0], extent, Interval(known))
                if unknown[0] in found:
                    plo, phi = found[unknown[0]]
                    lo, hi = S.smax(plo, lo), S.smin(phi, hi)
                found[unknown[0]] = (lo, hi)
        for v, (lo, hi) in found.items():
            known[v] = (S.smax(lo, S.const(0)), hi) if v in nonneg else (lo, hi)
            progress = True
    for v in stmt_vars:
        if v not in known:
            raise RangeInferenceError(
                f"cannot infer the range of index '{v}'",
                spans.get(v),
                hint=f"'{v}' never appears alone in a subscript of a tensor of known size; "
                f"give it a range with 'where {v} in lo:hi'",
            )
    return known
