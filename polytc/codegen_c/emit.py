"""The isl AST as a C function, built with cgen.

Loops come only from isl's AST generator.  A ``parallel`` mark puts
``#pragma omp parallel for`` on the loop under it.  Temporaries are buffers the runtime
passes in; the function fills those whose initial value it reads.  The function returns
0, or the number of the first run-time check that failed.
"""
from __future__ import annotations

import itertools
import math
import re

import cgen as c
import islpy as isl
import numpy as np

from ..lang import program as P
from ..machine import host
from .microkernel import const_bounds as _const_bounds
from .microkernel import Row, masked_moves, micro_kernel, typedefs
from .fold import folds_of
from .aligned import by_alignment
from .locals import locals_of
from .vmath import vector_math
from .pack import PackPrinter, packs_of
from .cexpr import (PRELUDE, ExprPrinter, div_helpers, extremum_update, literal,
                    statement_code, target_code)

_OP = isl.ast_expr_op_type
_BINARY = {
    _OP.add: "+", _OP.sub: "-", _OP.mul: "*", _OP.div: "/", _OP.pdiv_q: "/",
    _OP.pdiv_r: "%", _OP.zdiv_r: "%", _OP.eq: "==", _OP.le: "<=", _OP.lt: "<",
    _OP.ge: ">=", _OP.gt: ">", _OP.and_: "&&", _OP.and_then: "&&", _OP.or_: "||",
    _OP.or_else: "||",
}


def isl_expr(e) -> str:
    """An isl AST expression as C (loop bounds and statement arguments: all ``long``)."""
    t = e.get_type()
    if t == isl.ast_expr_type.int:
        return f"{e.int_get_val().to_python()}L"
    if t == isl.ast_expr_type.id:
        return e.id_get_id().get_name()
    op = e.op_get_type()
    args = [isl_expr(e.op_get_arg(i)) for i in range(e.op_get_n_arg())]
    if op in _BINARY:
        return f"({args[0]} {_BINARY[op]} {args[1]})"
    if op == _OP.minus:
        return f"(-{args[0]})"
    if op in (_OP.min, _OP.max):
        f = "PT_MIN" if op == _OP.min else "PT_MAX"
        out = args[0]
        for a in args[1:]:
            out = f"{f}({out}, {a})"
        return out
    if op == _OP.fdiv_q:
        a, b = args
        return f"(({a}) >= 0 ? ({a}) / ({b}) : -((-({a}) + ({b}) - 1) / ({b})))"
    if op in (_OP.cond, _OP.select):
        return f"({args[0]} ? {args[1]} : {args[2]})"
    raise NotImplementedError(f"isl AST operator {op}")


class Promotion:
    """Register promotion under a ``promote`` mark: the marked loop nest reduces into
    elements that do not depend on its iterators, so each accumulator is loaded into a
    local (a scalar, or an array over an inner ``simd`` loop) before the nest, updated in
    it and stored after it.  ``emit`` returns ``None`` when the pattern does not hold,
    and the nest is generated as it is."""

    def __init__(self, em: "CEmitter", node):
        self.em, self.node = em, node

    def emit(self):
        T = isl.ast_node_type
        loops, n = [], self.node
        while n.get_type() == T.for_:
            loops.append(n)
            n = n.for_get_body()
        if not loops:
            return None
        if n.get_type() == T.mark and n.mark_get_id().get_name().startswith("rows:"):
            items = self._rows(n, loops)
        else:
            items = self._items(_children(n))
        return None if items is None else self.tile(loops, items)

    def _rows(self, mark, loops):
        """The rows of a register tile under a ``rows:<depth>:<MR>`` mark, unrolled: the
        row loop's iterator replaced by each value.  A loop whose upper bound depends on
        outer loops (a partial tile: ``c13 <= min(7, 104 - c6)``) gives ``MR`` rows, each
        at ``min(row, bound)`` (the last row again past the bound: every access stays in
        bounds) and stored only up to the bound (``Row.guard``)."""
        count = int(mark.mark_get_id().get_name().rsplit(":", 1)[1])
        body = mark.mark_get_node()
        if body.get_type() != isl.ast_node_type.for_:  # one row: isl dropped the loop
            return self._items(_children(body))
        items = self._items(_children(body.for_get_body()))
        if items is None:
            return None
        it = self.em.for_header(body)[0]
        lo, hi = _const_bounds(body)
        if lo is not None:
            return [r._replace(at={it: f"{v}L"}) for v in range(lo, hi + 1) for r in items]
        init, cond = body.for_get_init(), body.for_get_cond()
        if init.get_type() != isl.ast_expr_type.int or \
                cond.get_type() != isl.ast_expr_type.op or cond.op_get_type() != _OP.le:
            return None
        lo = init.int_get_val().to_python()
        bound = isl_expr(cond.op_get_arg(1))
        iters = [self.em.for_header(lp)[0] for lp in loops]
        if _uses(bound, iters + [it]):
            return None
        return [r._replace(at={it: f"{v}L" if v == lo else f"PT_MIN({v}L, {bound})"},
                           guard=None if v == lo else f"{v}L <= {bound}")
                for v in range(lo, lo + count) for r in items]

    @staticmethod
    def _items(kids):
        """A ``Row`` (inner simd loop or None, user node) per row of a register tile, or
        None when a node is something else."""
        T = isl.ast_node_type
        items = []
        for k in kids:
            inner = None
            if k.get_type() == T.mark and k.mark_get_id().get_name().startswith("simd:"):
                k = k.mark_get_node()  # a user node: isl dropped a one-lane loop
                if k.get_type() == T.for_:
                    inner, k = k, k.for_get_body()
            if k.get_type() != T.user:
                return None
            items.append(Row(inner, k))
        return items

    def tile(self, loops, items):
        """The promoted code of the rows ``items`` under the reduction ``loops``."""
        vector = micro_kernel(self.em, loops, items)
        if vector is not None or any(r.guard for r in items):
            return vector
        iters = [self.em.for_header(lp)[0] for lp in loops]
        red, flag = self._simd_reduction(items)
        unroll = self._unrolled(loops, items)
        if unroll is not None:  # inside a vector loop: no reduction of its own
            red, flag = None, flag or "pt_nan0"
        decls, pro, body, epi, post = [], [], [], [], []
        for u, (inner, user, at, _) in enumerate(items):
            sst, printer = self.em.instance(user, at)
            st = sst.stmt
            if sst.kind != "body" or st.op is None or any(
                    r.tensor == st.tensor for r in P.reads(st.rhs)):
                return None
            target = target_code(sst, printer)
            if _uses(target, iters):
                return None
            fold = self.em.folds.get(sst.name)
            if fold is not None:  # the folded init and epilogue (``fold.py``)
                ends = fold.tile_conditions(self.em, loops, printer.vars)
                if ends is None or flag:
                    return None
                header = self.em.for_header(inner)[1] if inner is not None else None
                post.append(c.If(ends[1], c.Block(fold.epilogue(self.em, printer.vars,
                                                                header))))
                start = fold.start(ends[0], target)
            else:
                start = target
            if printer.varying:
                printer.varying = tuple(iters)
            ct = st.rhs.dtype.c_name
            acc = f"pt_acc{u}"
            if inner is None:
                decls.append(c.Statement(f"{ct} {acc} = {start}"))
                if unroll is not None:  # each window point spelt out
                    points = [self.em.instance(user, dict(at or {}, **pt))[1]
                              for pt in unroll]
                if flag and st.op in ("min", "max") and st.rhs.dtype.is_float:
                    decls.append(c.Statement(f"int {flag} = {target} != {target}"))
                    body += [c.Statement(extremum_update(
                        st.op, st.rhs.dtype, p.expr(st.rhs), acc, flag).rstrip(";"))
                        for p in (points if unroll is not None else [printer])]
                    nan = literal(float("nan"), st.rhs.dtype)
                    epi.append(c.Statement(f"{target} = {flag} ? {nan} : {acc}"))
                    continue
                if unroll is not None:
                    body += [c.Statement(statement_code(sst, p, acc).rstrip(";"))
                             for p in points]
                    epi.append(c.Statement(f"{target} = {acc}"))
                    continue
                code = statement_code(sst, printer, acc).rstrip(";")
                split = self._split_sum(loops, red, st, acc, code) or \
                    self._lane_sum(loops, red, st, acc, code)
                if split is not None:
                    return [c.Block(decls + split + [c.Statement(f"{target} = {acc}")] +
                                    post)]
                body.append(c.Statement(code))
                epi.append(c.Statement(f"{target} = {acc}"))
                continue
            it, header = self.em.for_header(inner)
            if printer.varying:
                printer.varying = tuple(iters) + (it,)
            if isinstance(printer, PackPrinter):  # a packed operand's lanes
                printer.inner = tuple(iters) + (it,)
            lo, hi = _const_bounds(inner)
            if lo is None or _uses(" ".join(header), iters):
                return None
            slot = f"{acc}[{it} - {lo}L]"
            decls.append(c.Statement(f"{ct} {acc}[{hi - lo + 1}]"))
            simd = self.em.simd_loop
            pro += simd(header, c.Statement(f"{slot} = {start}"))
            code = statement_code(sst, printer, slot).rstrip(";")
            body += simd(header, c.Statement(code))
            epi += simd(header, c.Statement(f"{target} = {slot}"))
        if unroll is not None:
            return [c.Block(decls + pro + body + epi + post)]
        nest = body
        # one vector reduction over the whole nest when its bounds are constants
        # (``collapse``): one per innermost loop would reduce its vector every row
        whole = red is not None and self.em.omp_reductions and len(loops) > 1 and \
            all(_const_bounds(lp)[0] is not None for lp in loops)
        for depth, lp in enumerate(reversed(loops)):
            loop = c.For(*self.em.for_header(lp)[1], c.Block(nest))
            pragma = None
            if red is not None and whole and depth == len(loops) - 1:
                pragma = f"{red} collapse({len(loops)})"
                if self.em.shared_sum(_trips(loops), " ".join(map(str, body))):
                    pragma = pragma.replace("omp simd", "omp parallel for simd" +
                                            self.em.team_clause(), 1)
            elif red is not None and not whole and depth == 0:
                pragma = red
            nest = [c.Pragma(pragma), loop] if pragma else [loop]
        return [c.Block(decls + pro + nest + epi + post)]

    def _unrolled(self, loops, items):
        """Inside a vector loop (a window's result per lane: ``Tiler.sink_rows``), a
        nest of at most 16 points in constant loops over one scalar accumulator: the
        iterator values of each point (gcc vectorises the outer loop only when the nest
        is spelt out), else None."""
        if not self.em.in_simd or len(items) != 1 or items[0].inner is not None:
            return None
        bounds = [_const_bounds(lp) for lp in loops]
        if any(lo is None for lo, _hi in bounds) or \
                math.prod(hi - lo + 1 for lo, hi in bounds) > 16:
            return None
        iters = [self.em.for_header(lp)[0] for lp in loops]
        return [{it: f"{v}L" for it, v in zip(iters, values)}
                for values in itertools.product(*(range(lo, hi + 1) for lo, hi in bounds))]

    def _split_sum(self, loops, red, st, acc: str, code: str):
        """A ``+``/``*`` reduction over one loop of at least two blocks of ``4 x lanes``
        iterations, with an accumulator per lane of four vectors (``pt_part``): one
        vector accumulator makes every step wait for the previous one (4 cycles of
        latency per vector), four keep the adder busy (a 1024-long sum: 2x).  The
        statements, or None where that does not apply."""
        if red is None or len(loops) != 1 or st.op not in ("+", "*"):
            return None
        lo, hi = _const_bounds(loops[0])
        width = 4 * self.em.lanes(st.rhs.dtype.np_dtype.itemsize)
        if lo is None or hi - lo + 1 < 2 * width:
            return None
        it = self.em.for_header(loops[0])[0]
        part = f"pt_part_{acc}"
        end = lo + (hi - lo + 1) // width * width  # the blocks end here
        body, combine = self._lane_sums(part, width, red, st, acc)
        block = c.For(f"long {it}_o = {lo}L", f"{it}_o < {end}L", f"{it}_o += {width}L",
                      c.Block(self.em.simd_loop(_each_lane(width), c.Block([
                          c.Statement(f"long {it} = {it}_o + pt_l"),
                          c.Statement(re.sub(rf"\b{acc}\b", f"{part}[pt_l]", code))]))))
        rest = [c.For(f"long {it} = {end}L", f"{it} <= {hi}L", f"{it} += 1",
                      c.Block([c.Statement(code)]))] if end <= hi else []
        if self.em.shared_sum(end - lo, code):  # each thread sums its share of the
            # blocks in its own lanes, then the threads combine their sums
            team = f"omp parallel reduction({st.op}:{acc}){self.em.team_clause()}"
            return [c.Pragma(team), c.Block(body + [c.Pragma("omp for schedule(static)"),
                                                    block] + combine)] + rest
        return body + [block] + rest + combine

    def _lane_sum(self, loops, red, st, acc: str, code: str):
        """A ``+``/``*`` reduction over a nest of constant loops whose innermost one is
        at most four vectors long (and not a power of two below one), with an
        accumulator per iteration of that loop (``pt_lane``), vectorised along it and
        combined once at the end.  gcc's ``collapse`` of the nest into one vector loop
        recomputes every element's indices with divisions (a global average pool over
        14x14 pixels ran 10x slower than PyTorch's).  The statements, or None."""
        if red is None or len(loops) < 2 or st.op not in ("+", "*"):
            return None
        if any(_const_bounds(lp)[0] is None for lp in loops):
            return None
        lo, hi = _const_bounds(loops[-1])
        width, lanes = hi - lo + 1, self.em.lanes(st.rhs.dtype.np_dtype.itemsize)
        if width > 4 * lanes or (width < lanes and width & (width - 1) == 0):
            return None  # narrower than a vector by a power of two: collapsed, gcc
            # splits the indices with shifts and fills whole vectors (8x8 pixels)
        it, header = self.em.for_header(loops[-1])
        part = f"pt_lane_{acc}"
        head, combine = self._lane_sums(part, width, red, st, acc)
        nest = self.em.simd_loop(header, c.Block([
            c.Statement(re.sub(rf"\b{acc}\b", f"{part}[{it} - {lo}L]", code))]))
        for lp in reversed(loops[:-1]):
            nest = [c.For(*self.em.for_header(lp)[1], c.Block(nest))]
        return head + nest + combine

    def _lane_sums(self, part: str, width: int, red, st, acc: str):
        """``(head, combine)`` of a reduction into ``acc`` kept in ``width`` partial
        sums ``part``: their declaration and start at the identity, and the reduction
        of them into ``acc`` (``_split_sum``, ``_lane_sum``)."""
        ident = literal(P.identity(st.op, st.rhs.dtype), st.rhs.dtype)
        head = [c.Statement(f"{st.rhs.dtype.c_name} {part}[{width}] "
                            "__attribute__((aligned(64)))")] + \
            self.em.simd_loop(_each_lane(width), c.Statement(f"{part}[pt_l] = {ident}"))
        return head, [c.Pragma(red), c.For(*_each_lane(width),
                                           c.Statement(f"{acc} {st.op}= {part}[pt_l]"))]

    def _simd_reduction(self, items):
        """The pragma that vectorises the reduction into one scalar accumulator
        (reassociating it, as every BLAS does), and the name of its NaN flag.  A float
        ``min``/``max`` under an OpenMP reduction takes no NaN (OpenMP combines partial
        results in any order, and a comparison drops a NaN): a NaN operand sets the flag
        (an ``|`` reduction) and the result is NaN.  Then combining partial results in
        any order gives the sequential result."""
        if len(items) != 1 or items[0].inner is not None:
            return None, None
        sst, _ = self.em.instance(items[0].user)
        op = sst.stmt.op
        red = self.em.reduction_pragma(op, "pt_acc0")
        if red and self.em.omp_reductions and op in ("min", "max") \
                and sst.stmt.rhs.dtype.is_float:
            return red + " reduction(|:pt_nan0)", "pt_nan0"
        return red, None


def _children(node) -> list:
    """The nodes of an AST block, or the node itself."""
    if node.get_type() != isl.ast_node_type.block:
        return [node]
    lst = node.block_get_children()
    return [lst.get_at(i) for i in range(lst.n_ast_node())]


def _each_lane(width: int) -> tuple:
    """The header of a loop over ``pt_l`` in ``0:width``."""
    return ("long pt_l = 0", f"pt_l < {width}L", "pt_l += 1")


def _trips(loops) -> int:
    """Iterations of a nest of loops of constant bounds."""
    n = 1
    for lp in loops:
        lo, hi = _const_bounds(lp)
        n *= hi - lo + 1
    return n


def _uses(text: str, names) -> bool:
    return any(re.search(rf"\b{n}\b", text) for n in names)


def _strip(text: str) -> str:
    """``(a <= b)`` -> ``a <= b`` (OpenMP wants a bare loop condition)."""
    if not (text.startswith("(") and text.endswith(")")):
        return text
    depth = 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and i < len(text) - 1:
            return text
    return text[1:-1]


class CEmitter:
    #: whether ``reduction_pragma`` is an OpenMP reduction (partial results combined)
    omp_reductions = True

    def __init__(self, scop, num_threads=None, vectorize=True, decisions=(), reciprocal=False,
                 parallel_sum: int | None = None):
        self.scop = scop
        #: the fewest terms of a sum outside every loop (a dot product, the sum of a whole
        #: tensor) that its threads share (``CEmitter.shared_sum``); None: never
        self.parallel_sum = parallel_sum
        self.reciprocal = reciprocal  # see ExprPrinter.varying
        self.packs = packs_of(decisions, scop)  # copy statement -> Packed
        self.folds = folds_of(decisions, scop)  # contraction -> its folded init/epilogue
        self.packed: dict = {}  # statement -> {tensor: Packed}
        for p in self.packs.values():
            self.packed.setdefault(p.sst.name, {})[p.tensor] = p
        self.iters: list = []  # iterators of the loops around the node being emitted
        self.helpers: list = []  # outlined parallel loop bodies
        prog = scop.program
        self.locals = locals_of(decisions, scop, isl_expr)  # contracted temporaries
        self.outlining = 0  # the depth of outlined parallel loops around the node
        self.in_simd = 0  # the depth of vector (``omp simd``) loops around it
        self.touched: list = []  # (local, inside an outlined loop) per printed instance
        #: locals some instance accesses outside the loop that declares them (isl put it
        #: beside the loop): the code is made again without them (``backends.c``)
        self.escaped: set = set()
        self.params = [f"const {t.dtype.c_name} *restrict {t.name}" for t in prog.inputs] + \
            [f"{t.dtype.c_name} *restrict {t.name}" for t in prog.outputs + prog.temporaries
             if t.name not in self.locals] + \
            [p.parameter for p in self.packs.values() if p.box is not None and not p.alias]
        self.vectorize = vectorize
        self.by_name = {s.name: s for s in scop.stmts}
        self.sites: list = []  # (Span, what) for every run-time check, 1-based
        self.num_threads = num_threads
        self.vector_types: set = set()  # (C type, lanes, item size) the code uses
        self.masked_types: set = set()  # those with partial vectors (masked moves)

    def node(self, n, pragma=None) -> list:
        t = n.get_type()
        T = isl.ast_node_type
        if t == T.block:  # a pragma applies to every loop of the block (isolation
            kids = n.block_get_children()  # splits one loop into full and partial parts)
            out = []
            for i in range(kids.n_ast_node()):
                out += self.node(kids.get_at(i), pragma)
            return out
        if t == T.mark:
            kind, _, depth = n.mark_get_id().get_name().partition(":")
            if kind == "promote":
                promoted = Promotion(self, n.mark_get_node()).emit()
                if promoted is not None:
                    return self.versioned(promoted)
            if kind == "rows":
                return self.unrolled(n.mark_get_node())
            text = self.pragma(kind)
            if kind != "parallel" or not text:
                return self.node(n.mark_get_node(), pragma=(text, f"c{depth}") if text else None)
            mine = [lc for lc in self.locals.values() if lc.loop == f"c{depth}"]
            decls = [d for lc in mine for d in lc.declarations()]
            placed: list = []  # the outlined bodies that declare the buffers
            first = len(self.touched)
            out = self.node(n.mark_get_node(), pragma=(text, f"c{depth}", decls, placed))
            if decls and not placed:
                out = [c.Block(decls + out)]  # isl dropped the loop: it runs once
            elif placed:  # an access isl generated outside the loop sees no buffer
                self.escaped.update(t for t, inside in self.touched[first:] if not inside)
            return out
        if t == T.for_:
            it, header = self.for_header(n)
            outlined = bool(pragma) and it == pragma[1] and pragma[0].startswith("omp parallel")
            simd = bool(pragma) and it == pragma[1] and pragma[0] == "omp simd"
            self.iters.append(it)
            self.outlining += outlined
            self.in_simd += simd
            inner = self.node(n.for_get_body())
            self.in_simd -= simd
            self.outlining -= outlined
            self.iters.pop()
            # a mark applies to the loop of its schedule dimension; when isl dropped
            # that loop (one iteration), to no loop at all
            if pragma and it == pragma[1]:
                if pragma[0].startswith("omp parallel"):
                    pragma[3].append(it)
                    inner = [self.outline(pragma[2] + inner, self.iters + [it])]
                    return [c.Pragma(pragma[0]), c.For(*header, c.Block(inner))]
                return self.versioned([c.Pragma(pragma[0]), c.For(*header, c.Block(inner))])
            return [c.For(*header, c.Block(inner))]
        if t == T.if_:
            cond = isl_expr(n.if_get_cond())
            then = c.Block(self.node(n.if_get_then_node(), pragma))
            other = c.Block(self.node(n.if_get_else_node(), pragma)) \
                if n.if_has_else_node() else None
            return [c.If(cond, then, other)]
        if t == T.user:
            call = n.user_get_expr()
            name = call.op_get_arg(0).id_get_id().get_name()
            if name in self.packs:
                args = [isl_expr(call.op_get_arg(i + 1)) for i in range(call.op_get_n_arg() - 1)]
                return [c.Statement(self.packs[name].copy(args, self.scop.shapes, self.scop.env,
                                                          self.sites))]
            sst, printer = self.instance(n)
            if sst.name in self.folds:
                return self.folds[sst.name].instance(self, sst, printer)
            return [c.Statement(statement_code(sst, printer).rstrip(";"))]
        raise NotImplementedError(f"isl AST node {t}")

    def unrolled(self, n) -> list:
        """A loop of constant bounds (the rows of a register tile that is not a
        micro-kernel) as a block per iteration, its iterator a constant there."""
        lo, hi = _const_bounds(n) if n.get_type() == isl.ast_node_type.for_ else (None, None)
        if lo is None:
            return self.node(n)
        it = self.for_header(n)[0]
        self.iters.append(it)
        out = [c.Block([c.Statement(f"const long {it} = {v}L")] + self.node(n.for_get_body()))
               for v in range(lo, hi + 1)]
        self.iters.pop()
        return out

    def outline(self, body: list, iters: list):
        """The body of a parallel loop as a call of a static function whose pointer
        parameters are ``restrict``: gcc passes the variables of an OpenMP region to the
        outlined region through a struct and forgets ``restrict`` on the way, after which
        it can neither hoist invariant loads nor vectorise calls such as ``expf``."""
        name = f"pt_body{len(self.helpers)}"
        params = [c.Value("long", i) for i in iters] + \
            [c.Value("", p) for p in self.params] + [c.Value("int *restrict", "pt_err")]
        code = [c.Statement("int err = 0")] + body + [c.If(
            "err", c.Statement("__atomic_store_n(pt_err, err, __ATOMIC_RELAXED)"))]
        self.helpers.append(c.FunctionBody(
            c.FunctionDeclaration(c.Value("static __attribute__((noinline)) void", name),
                                  params), c.Block(code)))
        args = iters + [p.rsplit(" ", 1)[-1].lstrip("*") for p in self.params] + ["&err"]
        return c.Statement(f"{name}({', '.join(args)})")

    def team_clause(self) -> str:
        return f" num_threads({self.num_threads})" if self.num_threads else ""

    def shared_sum(self, terms: int, code: str) -> bool:
        """Whether the threads share a sum of ``terms`` terms (``code``): only outside
        every loop (no other parallel region around it), of at least ``parallel_sum``
        terms, none of which can fail an index check (``err``).  A dot product of 4M
        terms on one of two threads ran 2x slower than numpy's."""
        return self.parallel_sum is not None and not self.iters and \
            terms >= self.parallel_sum and not re.search(r"\berr\b", code)

    def pragma(self, mark: str):
        if mark == "parallel":
            return f"omp parallel for{self.team_clause()}"
        if mark == "simd":
            return "omp simd"
        return None

    def fill(self, t, value) -> list:
        """Statements setting every element of the temporary ``t`` to ``value``."""
        n = int(np.prod(self.scop.shapes[t.name], dtype=np.int64))
        ct = t.dtype.c_name
        if value == 0:
            return [c.Statement(f"memset({t.name}, 0, {n}L * sizeof({ct}))")]
        return self.simd_loop(("long pt_i = 0", f"pt_i < {n}L", "pt_i += 1"), c.Statement(
            f"{t.name}[pt_i] = {literal(value, t.dtype)}"))

    def reduction_pragma(self, op: str, acc: str):
        return f"omp simd reduction({op}:{acc})" if self.vectorize else None

    def lanes(self, itemsize: int) -> int:
        """Elements of ``itemsize`` bytes in one of the host's vector registers."""
        return host().lanes(itemsize)

    def versioned(self, stmts: list) -> list:
        """Vector loops reading the caller's arrays, at half width where those are not
        64-byte aligned (``aligned.py``)."""
        if not (self.vectorize and self.omp_reductions):  # not on a GPU
            return stmts
        return by_alignment(stmts, [t.name for t in self.scop.program.inputs],
                            self.lanes(4))

    def simd_loop(self, header, body) -> list:
        """A loop the C compiler should vectorise."""
        return [c.Pragma("omp simd"), c.For(*header, body)]

    def expr(self, e) -> str:
        """An isl AST expression as C."""
        return isl_expr(e)

    def for_header(self, n):
        it = n.for_get_iterator().id_get_id().get_name()
        init, cond = isl_expr(n.for_get_init()), _strip(isl_expr(n.for_get_cond()))
        return it, (f"long {it} = {init}", cond, f"{it} += {isl_expr(n.for_get_inc())}")

    def instance(self, user_node, at=None):
        """The ScopStmt and an expression printer of one statement instance; ``at``:
        loop iterator -> the C text that replaces it (an unrolled row's value)."""
        call = user_node.user_get_expr()
        sst = self.by_name[call.op_get_arg(0).id_get_id().get_name()]
        args = [isl_expr(call.op_get_arg(i + 1)) for i in range(call.op_get_n_arg() - 1)]
        for it, value in (at or {}).items():
            args = [re.sub(rf"\b{it}\b", value, a) for a in args]
        return sst, self.printer(sst, dict(zip(sst.vars, args)))

    def printer(self, sst, vars: dict) -> ExprPrinter:
        """An expression printer of ``sst`` at the index values ``vars`` (C text)."""
        args = (self.scop.shapes, self.scop.env, vars, sst.guarded, self.sites)
        packed = self.packed.get(sst.name)
        p = ExprPrinter(*args) if packed is None else PackPrinter(packed, *args)
        p.locals = {t: lc.at(sst, vars) for t, lc in self.locals.items() if sst.name in lc.offsets}
        self.touched += [(t, self.outlining > 0) for t in p.locals]
        if self.reciprocal:
            p.varying = tuple(self.iters[-1:])
        return p

    def function(self, ast, fname: str, fills=None) -> str:
        """The kernel: ``int fname(inputs..., outputs..., temporaries..., prepacked...)``
        (and the functions filling the prepacked operands, ``codegen_c/pack.py``).  The runtime
        owns the temporaries (scratch buffers reused across calls); those read before
        they are written (in ``fills``: name -> initial value) are filled first (the
        runtime fills the outputs: ``out=`` arrays are initial values)."""
        prog = self.scop.program
        params = self.params
        body = [c.Statement("int err = 0")]
        for t in prog.temporaries:
            if t.name in (fills or {}) and t.name not in self.locals:
                body += self.fill(t, fills[t.name])
        body += self.node(ast)
        body.append(c.Statement("return err"))
        fn = c.FunctionBody(c.FunctionDeclaration(c.Value("int", fname),
                                                  [c.Value("", p) for p in params] or
                                                  [c.Value("void", "")]),
                            c.Block(body))
        helpers = "".join(typedefs(*v) for v in sorted(self.vector_types)) + \
            "".join(masked_moves(*v) for v in sorted(self.masked_types)) + \
            "\n".join(p.declaration() for p in self.packs.values()) + "\n\n" + \
            "\n\n".join(str(h) for h in self.helpers)
        code = helpers + "\n\n" + str(fn) + "\n" + "".join(
            "\n" + p.prepack(self.scop.shapes, self.scop.env)
            for p in self.packs.values() if p.box is not None and not p.alias)
        return PRELUDE + div_helpers(code) + vector_math(code) + "\n" + code
