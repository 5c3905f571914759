"""A contraction's folded init and epilogue in C (see ``tiling/fold.py``).

A register tile of the contraction (``Promotion`` and the micro-kernel) starts its
accumulators at the identity when its reduction loops start at the first value of every
reduction index (``first``), and after storing them runs the epilogue's instances for
its elements when they end at the last values (``last``): the conditions are the
reduction indices with the tile's loop iterators at their first or last values, tested
once per tile.  An instance of the contraction printed on its own (outside a register
tile) tests its own indices.
"""
from __future__ import annotations

import re

import cgen as c
import islpy as isl

from ..lang import program as P
from ..tiling.fold import offsets_of
from .cexpr import literal, statement_code, target_code
from .prefetch import from_memory

_OP = isl.ast_expr_op_type


class Fold:
    def __init__(self, decision, by_name):
        f = decision.facts
        self.sst = by_name[decision.subject]
        self.init = f["init"] is not None
        self.epi = by_name[f["epilogue"]] if f["epilogue"] else None
        self.bounds = f["_bounds"]  # (index, first, last) per reduction index
        #: the result is a temporary only the epilogue reads (``tiling/fold._dead``)
        self.dead = f.get("_dead", False)
        st = self.sst.stmt
        self.identity = literal(P.identity(st.op, st.rhs.dtype), st.rhs.dtype)
        if self.epi is not None:
            t = st.tensor
            at = next(r for r in P.reads(self.epi.stmt.rhs) if r.tensor == t)
            #: the epilogue's index, and the constant its read of the result adds to
            #: it, at each dimension of the contraction's result
            self.epi_at = offsets_of(at)

    def _epilogue_vars(self, vars: dict) -> dict:
        """The epilogue's indices (C text) at the contraction's element ``vars``."""
        return {name: vars[self.sst.stmt.indices[d]] if not off else
                f"({vars[self.sst.stmt.indices[d]]}) - {off}L"
                for d, (name, off) in enumerate(self.epi_at)}

    def condition(self, vars: dict, end: int) -> str:
        """Whether the reduction indices (C text in ``vars``) are at their first
        (``end`` 1) or last (``end`` 2) values."""
        return " && ".join(f"({vars[b[0]]}) == {b[end]}L" for b in self.bounds) or "1"

    def tile_conditions(self, em, loops, vars: dict):
        """``(first, last)`` of a register tile whose reduction loops are ``loops``, or
        None when a loop's first or last iteration is not a plain bound."""
        ends = []
        for lp in loops:
            bounds = _ends(lp, em)
            if bounds is None:
                return None
            ends.append((em.for_header(lp)[0], bounds))
        out = []
        for k in (0, 1):
            at = {}
            for v, x in vars.items():
                for it, b in reversed(ends):  # inner bounds may use outer iterators
                    x = re.sub(rf"\b{it}\b", f"({b[k]})", x)
                at[v] = x
            out.append(self.condition(at, k + 1))
        return tuple(out)

    def start(self, first: str, target: str) -> str:
        """The accumulator's first value: the identity on the first tile."""
        return f"({first}) ? {self.identity} : {target}" if self.init else target

    def epilogue(self, em, vars: dict, header=None, value=None) -> list:
        """The epilogue's instances for the contraction's element at ``vars`` (over the
        lanes of the loop ``header`` when given), reading the contraction's result as the
        C expression ``value`` when given (its accumulator) instead of from memory."""
        if self.epi is None:
            return []
        printer = em.printer(self.epi, self._epilogue_vars(vars))
        if value is not None:
            printer.substitute = {self.sst.stmt.tensor: value}
        code = c.Statement(statement_code(self.epi, printer).rstrip(";"))
        return em.simd_loop(header, code) if header else [code]

    def prefetches(self, em, vars: dict, now: dict, beyond: int | None = None) -> list:
        """``__builtin_prefetch`` of the elements the epilogue reads from other tensors
        at the contraction's element ``vars`` (C text per index), those that differ from
        the ones it reads at ``now``: a register tile's epilogue asks for the next
        tile's while it runs its own."""
        if self.epi is None:
            return []

        def addresses(at):
            printer = em.printer(self.epi, self._epilogue_vars(at))
            return [printer.element(r.tensor, [printer.sub(s) for s in r.indices])
                    for r in P.reads(self.epi.stmt.rhs)
                    if r.tensor != self.sst.stmt.tensor and from_memory(em, r.tensor, beyond)]

        seen = set(addresses(now))
        out = []
        for a in addresses(vars):
            if a not in seen:
                seen.add(a)
                out.append(c.Statement(f"__builtin_prefetch(&{a})"))
        return out

    def instance(self, em, sst, printer) -> list:
        """One instance of the contraction on its own: init, update, epilogue."""
        vars = printer.vars
        out = []
        if self.init:
            out.append(c.If(self.condition(vars, 1),
                            c.Statement(f"{target_code(sst, printer)} = {self.identity}")))
        out.append(c.Statement(statement_code(sst, printer).rstrip(";")))
        if self.epi is not None:
            out.append(c.If(self.condition(vars, 2), c.Block(self.epilogue(em, vars))))
        return [c.Block(out)]


def _ends(lp, em):
    """``(first, last)`` iterator values of a unit-step loop as C text, or None."""
    inc = lp.for_get_inc()
    if inc.get_type() != isl.ast_expr_type.int or inc.int_get_val().to_python() != 1:
        return None
    cond = lp.for_get_cond()
    if cond.get_type() != isl.ast_expr_type.op or cond.op_get_type() not in (_OP.le, _OP.lt):
        return None
    it = em.for_header(lp)[0]
    lhs = cond.op_get_arg(0)
    if lhs.get_type() != isl.ast_expr_type.id or lhs.id_get_id().get_name() != it:
        return None
    hi = em.expr(cond.op_get_arg(1))
    if cond.op_get_type() == _OP.lt:
        hi = f"({hi} - 1L)"
    return em.expr(lp.for_get_init()), hi


def folds_of(decisions, scop) -> dict:
    """``fold`` decisions as ``Fold`` by contraction statement name."""
    by_name = {s.name: s for s in scop.stmts}
    return {d.subject: Fold(d, by_name) for d in decisions if d.kind == "fold"}
