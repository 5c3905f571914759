"""The polyhedral model of a program specialised to the sizes of a call.

Every comprehension becomes one or two isl statements: ``init`` (the identity of a ``!``
reduction, over the left-hand indices) and ``body`` (over all indices).  Domains are
``isl.Set``s with constant bounds (sizes are numbers here), accesses ``isl.Map``s.  An
access isl cannot describe exactly (an indirect ``A(B(i))``, a product of indices, a
division whose numerator may be negative) is a *may* access of the whole tensor, and the
code generator guards it at run time.  Affine accesses are proven in bounds here, or the
program is rejected with the first out-of-bounds point.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import islpy as isl

from ..diagnostics import PolytcError
from ..lang import program as P
from ..lang import sizes as S


class OutOfBoundsError(PolytcError):
    """An affine access reaches outside its tensor for some point of the domain."""


@dataclass
class ScopStmt:
    name: str  # isl tuple name, e.g. "S0" or "I0" (init)
    kind: str  # "init" | "body"
    stmt: P.Stmt
    index: int  # position of stmt in program.statements
    vars: tuple  # index variable names, in isl dimension order
    domain: isl.Set | None = None
    reads: isl.UnionMap | None = None
    writes: isl.UnionMap | None = None
    guarded: frozenset = field(default_factory=frozenset)  # ids of Reads needing checks


class Scop:
    """Domains, accesses and (after ``deps``) dependences of one specialised program."""

    def __init__(self, program: P.Program, env: Mapping, ctx: isl.Context,
                 symbolic: tuple = ()):
        self.program = program
        self.env = env  # every size; a symbolic one's value is the hint tiles are sized for
        self.ctx = ctx
        #: sizes kept as isl parameters (``Options.symbolic``): the code is correct for
        #: every value of them that satisfies ``context``
        self.symbolic = tuple(n for n in program.sizes if n in set(symbolic))
        self._params = f"[{', '.join(self.symbolic)}] -> " if self.symbolic else ""
        self._fixed = {k: S.const(v) for k, v in env.items() if k not in self.symbolic}
        #: the numbers at the hint sizes (what cost models and tile sizes look at)
        self.shapes = {t.name: t.extents(env)
                       for t in program.tensors}
        #: per tensor, its extents as isl/C text (numbers, or expressions of the
        #: symbolic sizes)
        self.dims = {t.name: tuple(self._dim(d) for d in t.shape) for t in program.tensors}
        #: what the code assumes of the symbolic sizes: each at least 1, and every
        #: tensor's extents at least 0 (checked at each call: ``CompiledKernel.serves``)
        self.context = self.read_set("{ : " + " and ".join(
            [f"{n} >= 1" for n in self.symbolic] +
            [f"{d} >= 0" for ds in self.dims.values() for d in ds
             if not d.lstrip("-").isdigit()]) + " }") if self.symbolic else \
            isl.Set.read_from_str(ctx, "{ : }")
        self.stmts: list = []
        for k, st in enumerate(program.statements):
            if st.init:
                self.stmts.append(self._make(f"I{k}", "init", st, k, st.indices))
            self.stmts.append(self._make(f"S{k}", "body", st, k, st.index_vars))
        self.domain = _union_set(ctx, [s.domain for s in self.stmts])
        self.reads = _union_map(ctx, [s.reads for s in self.stmts])
        self.writes = _union_map(ctx, [s.writes for s in self.stmts])

    # --- construction ------------------------------------------------------------
    def _make(self, name, kind, st: P.Stmt, k, vars_) -> ScopStmt:
        s = ScopStmt(name, kind, st, k, tuple(vars_))
        iv = {v: f"x{n}" for n, v in enumerate(vars_)}
        cons = []
        for r in st.ranges:
            if r.var not in iv:
                continue
            lo = S.to_isl(_rename(S.substitute(r.lo, self._fixed), iv))
            hi = S.to_isl(_rename(S.substitute(r.hi, self._fixed), iv))
            cons.append(f"{lo} <= {iv[r.var]} < {hi}")
        tup = f"{name}[{', '.join(iv.values())}]"
        s.domain = self.read_set(
            "{ " + tup + (" : " + " and ".join(cons) if cons else "") + " }").intersect_params(
                self.context)
        target = f"{st.tensor}[{', '.join(iv[v] for v in st.indices)}]"
        s.writes = self._map(tup, target, s.domain)
        self._check_bounds(s.writes, st.tensor, st.span, "writes")
        reads, guarded = [], set()
        if kind == "body":
            if st.op is not None:
                reads.append(s.writes)
            for e, guard in self._reads(st.rhs, tup, iv, s.domain, self._true(tup), True):
                dom = s.domain.intersect(guard) if guard is not None else s.domain
                m = self._read_map(e, tup, iv, dom)
                if m is None:
                    guarded.add(id(e))
                    m = self._map(tup, self._whole(e.tensor), dom)
                elif guard is None and not self._in_bounds(m, e.tensor):
                    guarded.add(id(e))  # only evaluated under a non-affine condition
                else:
                    self._check_bounds(m, e.tensor, e.span, "reads")
                reads.append(m)
        s.reads = _union_map(self.ctx, reads)
        s.guarded = frozenset(guarded)
        return s

    def _dim(self, d) -> str:
        e = S.substitute(d, self._fixed)
        return str(max(0, e.const)) if S.is_const(e) else S.to_isl(e)

    def read_set(self, text: str) -> isl.Set:
        """An isl set from ``{ ... }`` text over the symbolic sizes."""
        return isl.Set.read_from_str(self.ctx, self._params + text)

    def within(self, size: str, least: int, most: int) -> "Scop":
        """This scop where the symbolic ``size`` is beyond ``least`` and at most ``most``
        (a variant of the code for those sizes: ``codegen_c/fewrows.py``)."""
        import copy

        out = copy.copy(self)
        out.context = self.context.intersect(
            self.read_set(f"{{ : {least} < {size} <= {most} }}"))
        return out

    def read_map(self, text: str) -> isl.Map:
        return isl.Map.read_from_str(self.ctx, self._params + text)

    # --- reads and the conditions they are evaluated under --------------------------
    def _true(self, tup):
        return self.read_set("{ " + tup + " }")

    def _reads(self, e, tup, iv, domain, guard, exact):
        """Yield ``(Read, guard)``: ``guard`` is the isl set of points where the read is
        evaluated (``?:``, ``&&`` and ``||`` are lazy), or ``None`` when that depends on
        data (a non-affine condition)."""
        g = guard if exact else None
        if isinstance(e, P.Read):
            yield e, g
            for sub in e.indices:
                yield from self._reads(sub, tup, iv, domain, guard, exact)
            return
        if isinstance(e, P.Select) or (isinstance(e, P.Bin) and e.op in P.LOGIC_OPS):
            cond, a, b = (e.cond, e.then, e.other) if isinstance(e, P.Select) else \
                (e.lhs, e.rhs, None)
            yield from self._reads(cond, tup, iv, domain, guard, exact)
            c = self._cond(cond, tup, iv, domain)
            pos = e.op != "||" if isinstance(e, P.Bin) else True
            for branch, want in ((a, pos), (b, not pos)):
                if branch is None:
                    continue
                if c is None:
                    yield from self._reads(branch, tup, iv, domain, guard, False)
                else:
                    sub = c if want else self._true(tup).subtract(c)
                    yield from self._reads(branch, tup, iv, domain, guard.intersect(sub), exact)
            return
        for ch in P.children(e):
            yield from self._reads(ch, tup, iv, domain, guard, exact)

    def _cond(self, e, tup, iv, domain):
        """The points where the boolean ``e`` holds, when it is affine, else ``None``."""
        if isinstance(e, P.Not):
            c = self._cond(e.value, tup, iv, domain)
            return None if c is None else self._true(tup).subtract(c)
        if isinstance(e, P.Bin) and e.op in P.LOGIC_OPS:
            a, b = self._cond(e.lhs, tup, iv, domain), self._cond(e.rhs, tup, iv, domain)
            if a is None or b is None:
                return None
            return a.intersect(b) if e.op == "&&" else a.union(b)
        if isinstance(e, P.Bin) and e.op in P.COMPARE_OPS and not e.lhs.dtype.is_float:
            a = self.isl_aff(e.lhs, iv, domain, tup)
            b = self.isl_aff(e.rhs, iv, domain, tup)
            if a is None or b is None:
                return None
            op = {"==": "=", "!=": "!="}.get(e.op, e.op)
            if op == "!=":
                text = f"({a}) < ({b}) or ({a}) > ({b})"
            else:
                text = f"({a}) {op} ({b})"
            return self.read_set("{ " + tup + " : " + text + " }")
        return None

    def _in_bounds(self, access, tensor) -> bool:
        box = self.read_set("{ " + self._whole(tensor) + " }")
        return access.subtract_range(isl.UnionSet.from_set(box)).is_empty()

    def _map(self, tup, target, domain) -> isl.UnionMap:
        m = self.read_map("{ " + tup + " -> " + target + " }")
        return isl.UnionMap.from_map(m.intersect_domain(domain))

    def _whole(self, tensor):
        shape = self.dims[tensor]
        names = [f"a{d}" for d in range(len(shape))]
        cons = " and ".join(f"0 <= {n} < {e}" for n, e in zip(names, shape))
        return f"{tensor}[{', '.join(names)}]" + (f" : {cons}" if cons else "")

    def _read_map(self, e: P.Read, tup, iv, domain):
        subs = []
        for sub in e.indices:
            a = self.isl_aff(sub, iv, domain, tup)
            if a is None:
                return None
            subs.append(a)
        return self._map(tup, f"{e.tensor}[{', '.join(subs)}]", domain)

    def isl_aff(self, e, iv, domain, tup):
        """``e`` in isl syntax when it is (quasi-)affine and isl's floor semantics agree
        with C's on the domain; else ``None``."""
        if isinstance(e, P.Const) and not e.dtype.is_float:
            return str(int(e.value))
        if isinstance(e, P.Index):
            return iv[e.name]
        if isinstance(e, P.Size):
            return e.name if e.name in self.symbolic else str(self.env[e.name])
        if isinstance(e, P.Convert) and not e.dtype.is_float and not e.value.dtype.is_float \
                and e.value.dtype.kind != "bool":
            return self.isl_aff(e.value, iv, domain, tup)
        if isinstance(e, P.Neg):
            a = self.isl_aff(e.value, iv, domain, tup)
            return None if a is None else f"-({a})"
        if isinstance(e, P.Bin) and e.op in ("+", "-", "*", "/", "%"):
            a = self.isl_aff(e.lhs, iv, domain, tup)
            b = self.isl_aff(e.rhs, iv, domain, tup)
            if a is None or b is None:
                return None
            if e.op in ("+", "-"):
                return f"({a}) {e.op} ({b})"
            if e.op == "*":  # isl reads "2 * (x0)" but not "(2) * (x0)"
                if self._number(e.lhs):
                    return f"{int(a)} * ({b})"
                if self._number(e.rhs):
                    return f"{int(b)} * ({a})"
                return None
            if not self._number(e.rhs) or int(b) <= 0:
                return None
            # C's / and % truncate: they agree with isl's floor only for a >= 0
            neg = self.read_set("{ " + tup + f" : {a} < 0" + " }")
            if not neg.intersect(domain).is_empty():
                return None
            return f"floor(({a})/{b})" if e.op == "/" else f"({a}) mod {b}"
        return None

    def _number(self, e) -> bool:
        """Whether ``e`` is a number here (a constant, a specialised size)."""
        return isinstance(e, P.Const) or (isinstance(e, P.Size) and e.name not in self.symbolic)

    def _check_bounds(self, access: isl.UnionMap, tensor, span, verb):
        shape = self.dims[tensor]
        if self._in_bounds(access, tensor):
            return
        box = self.read_set("{ " + self._whole(tensor) + " }")
        bad = access.subtract_range(isl.UnionSet.from_set(box))
        pt = bad.wrap().sample_point()
        vals = [pt.get_coordinate_val(isl.dim_type.set, i).to_python()
                for i in range(pt.get_space().dim(isl.dim_type.set))]
        sizes = dict(self.env)
        for n in self.symbolic:  # the sizes of the point found
            k = pt.get_space().find_dim_by_name(isl.dim_type.param, n)
            sizes[n] = pt.get_coordinate_val(isl.dim_type.param, k).to_python()
        extents = [max(0, S.evaluate(d, sizes)) for d in self.program.tensor(tensor).shape]
        raise OutOfBoundsError(
            f"this {'write' if verb == 'writes' else 'access'} {verb} outside '{tensor}' "
            f"(shape {extents}) at {tensor}{vals[len(vals) - len(shape):]} for sizes "
            f"{sizes}", span,
            hint="restrict the index ranges with 'where i in lo:hi' or fix the subscript")

    def fully_written(self, tensor: str) -> bool:
        """Whether the statements write every element of ``tensor``."""
        box = isl.UnionSet.from_set(self.read_set("{ " + self._whole(tensor) + " }"))
        return box.subtract(self.writes.range()).is_empty()

    # --- display -----------------------------------------------------------------
    def __str__(self):
        lines = ["domain:", f"  {self.domain}", "reads:", f"  {self.reads}",
                 "writes:", f"  {self.writes}"]
        return "\n".join(lines)


def _rename(e, iv):
    return S.substitute(e, {v: S.name(n) for v, n in iv.items()})


def _union_set(ctx, sets):
    out = isl.UnionSet.empty(isl.Space.params_alloc(ctx, 0))
    for s in sets:
        out = out.union(isl.UnionSet.from_set(s))
    return out


def _union_map(ctx, maps):
    out = isl.UnionMap.empty(isl.Space.params_alloc(ctx, 0))
    for m in maps:
        out = out.union(m)
    return out
