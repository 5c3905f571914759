"""Register promotion under a ``promote`` mark (``Promotion``): a reduction's
accumulators in locals, the explicit-vector micro-kernel of a contraction's register
tile (``microkernel.py``), vector reductions into one scalar, and a small window spelt
out inside a vector loop."""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import replace

import cgen as c
import islpy as isl

from ..lang import program as P
from .cexpr import (ExprPrinter, extremum_pair, extremum_update, isl_expr, literal, mentions,
                    statement_code, target_code)
from .microkernel import Row, _lane_stride, each_lane, micro_kernel
from .chains import const_bounds as _const_bounds
from .pack import PackPrinter, dim_extent

_OP = isl.ast_expr_op_type


def _picked_row(sst, printer, it: str, lo: int, width: int, u: int, slot: str):
    """For a statement ``cond ? X(.., j) : fill`` (or ``cond ? fill : X``) whose
    condition does not depend on the vector loop's iterator ``it`` and whose read is
    unit-stride along it (a window point that may leave the image, the same for every
    lane: a blocked average pooling's): ``(declaration of a row of fills, the pick of
    the row the lanes read: X's or the fills', the statement into ``slot`` reading
    it)``, so that the loop reads a row without a test; else None.  Tested in the loop,
    gcc moved the test out by duplicating the window loop's code per branch, the
    accumulators in memory between them (the small CNN's 3x3 average pool at batch 64:
    53 -> 20 us)."""
    st, rhs = sst.stmt, sst.stmt.rhs
    if not isinstance(rhs, P.Select) or printer.substitute or \
            type(printer) is not ExprPrinter:  # (C: a GPU's printer has no ``static``)
        return None
    read, fill, negate = rhs.then, rhs.other, False
    if isinstance(read, P.Const):
        read, fill, negate = fill, read, True
    lanes = [v for v, x in printer.vars.items() if mentions(x, [it])]
    if not isinstance(read, P.Read) or not isinstance(fill, P.Const) or \
            len(lanes) != 1 or printer.vars[lanes[0]].strip("() ") != it or \
            lanes[0] in P.index_names(rhs.cond) or id(read) in sst.guarded or \
            read.tensor in printer.locals or _lane_stride(read, lanes[0]) != 1 or \
            (read.dtype.is_float and read.dtype.bits < 32):  # (a half's C is its bits)
        return None
    cond = printer.expr(rhs.cond)
    vars, printer.vars = printer.vars, dict(printer.vars, **{lanes[0]: f"{lo}L"})
    try:
        first = printer.read(read)
    finally:
        printer.vars = vars
    ct = read.dtype.c_name
    value = printer.literal(fill.value, fill.dtype)
    fills = f"static const {ct} pt_fill{u}[{width}] = {{{', '.join([value] * width)}}}"
    pick = f"const {ct} *restrict pt_row{u} = ({'!' if negate else ''}{cond}) ? " \
        f"&{first} : pt_fill{u}"
    printer.substitute = {read.tensor: f"pt_row{u}[{it} - {lo}L]"}
    try:
        code = statement_code(replace(sst, stmt=replace(st, rhs=read)), printer, slot)
    finally:
        printer.substitute = {}
    return fills, pick, code


class Promotion:
    """Register promotion under a ``promote`` mark: the marked loop nest reduces into
    elements that do not depend on its iterators, so each accumulator is loaded into a
    local (a scalar, or an array over an inner ``simd`` loop) before the nest, updated in
    it and stored after it.  ``emit`` returns ``None`` when the pattern does not hold,
    and the nest is generated as it is."""

    def __init__(self, em, node):  # em: the ``emit.CEmitter``
        self.em, self.node = em, node

    def _nest(self):
        """The reduction loops under the mark and the rows of the tile in them (None)."""
        T = isl.ast_node_type
        loops, n = [], self.node
        while n.get_type() == T.for_:
            loops.append(n)
            n = n.for_get_body()
        if not loops:
            return loops, None
        self.first_row = None  # when set: C that holds iff the tile has a row
        self.counts: list = []  # (C test, rows) per row count of a symbolic remainder
        if n.get_type() == T.mark and n.mark_get_id().get_name().startswith("rows:"):
            return loops, self._rows(n, loops)
        return loops, self._items(_children(n))

    def emit(self):
        loops, items = self._nest()
        code = None if items is None else self._by_count(loops) or self.tile(loops, items)
        if code is not None and self.first_row is not None:
            # a row count of a symbolic size's remainder (``M % 8``) may be 0: no row
            # is read then (the first row is computed unguarded)
            code = [c.If(self.first_row, c.Block(code))]
        return code

    def full_lanes(self):
        """Where ``emit`` found no code because the lanes' loop ends at ``min(hi, e)``
        (the rows of a partial register tile across every tile of the lanes, the last
        one partial too, which isolation leaves together): ``(C test, code, partial)``, the
        micro-kernel of its full tiles of lanes, for the caller to run where the test
        holds (``e >= hi``), the loops as isl made them otherwise, and ``(C test, code)``
        or None for the partial tile of lanes (``e`` equal to its width, less one); else
        None.  Those rows had run in plain loops, the result loaded and stored at every
        reduction step (33 x 100 x 512 in row tiles of 17: one row of each, 98 -> 20 us)."""
        loops, items = self._nest()
        if not items or any(r.inner is None for r in items) or \
                (self.first_row is not None and not self.counts):
            return None
        bounds = {_lanes_min(r.inner) for r in items}
        if len(bounds) != 1 or None in bounds:
            return None
        lo, hi, rest = bounds.pop()
        # the rows of a symbolic remainder (``M % 8``) too, a micro-kernel per count (a
        # generic M x 784 x 256 product at 100 rows: 915 -> 99 us, specialised 106)
        code = self._lanes(loops, items, (lo, hi))
        if code is None:
            return None
        # the partial tile of lanes, where the columns end in one: its micro-kernel under
        # a test of its width (the columns' count modulo the tile's: 3 rows of 100
        # columns in tiles of 64, generic over specialised 2.1 -> 0.99x)
        tail = self._tail(items[0], hi - lo + 1)
        part = self._lanes(loops, items, (lo, lo + tail - 1)) if tail else None
        return f"{rest} >= {hi}L", code, None if part is None else \
            (f"{rest} == {lo + tail - 1}L", part)

    def _lanes(self, loops, items, lanes_at: tuple):
        """The tile's code with the lanes ``lanes_at``, one per row count where the rows
        are a symbolic remainder; None where it is not a micro-kernel."""
        code = self._by_count(loops, lanes_at) if self.counts else \
            micro_kernel(self.em, loops, items, lanes_at)
        if code is not None and self.first_row is not None:
            code = [c.If(self.first_row, c.Block(code))]
        return code

    def _tail(self, row, width: int) -> int:
        """The lanes of the last tile of ``width`` over the (fixed) extent of the
        statement index the lanes run along (0: whole tiles, or a symbolic extent)."""
        sst, printer = self.em.instance(row.user, row.at)
        lane = self.em.for_header(row.inner)[0]
        dims = [d for d, v in enumerate(sst.vars)
                if re.search(rf"\b{lane}\b", printer.vars[v])]
        if len(dims) != 1:
            return 0
        n, symbolic = dim_extent(sst.domain, dims[0], self.em.scop.context)
        return 0 if symbolic else int(n.rstrip("L")) % width

    def _by_count(self, loops, lanes_at: tuple | None = None):
        """The tile once per row count of a symbolic remainder (``M % 6`` rows: 1 to 5),
        each with exactly its rows, chosen at run time; None when a count's tile is not a
        micro-kernel (then one tile computes every row, storing only the valid ones);
        ``lanes_at``: as ``micro_kernel`` takes it."""
        if not self.counts:
            return None
        code = None
        for test, rows in reversed(self.counts):
            tile = micro_kernel(self.em, loops, rows, lanes_at)
            if tile is None:
                return None
            code = tile if code is None else [c.If(test, c.Block(tile), c.Block(code))]
        return code

    def _counted(self, items, it, lo: int, tests: list) -> None:
        """``counts`` for rows ``lo``, ``lo + 1``, ...: ``tests[k]`` holds when there are
        exactly ``k + 1`` rows (the last count: otherwise).  In a few-rows variant
        (``codegen_c/fewrows.py``) the partial tile has more than ``em.least_rows`` rows and
        fewer than a whole tile's: only those counts."""
        if self.em.scop.symbolic:
            least = self.em.least_rows
            self.counts = [(t, [r._replace(at={it: f"{v}L"}) for v in range(lo, lo + k + 1)
                                for r in items]) for k, t in enumerate(tests)
                           if k + 1 > least and (not least or k + 1 < len(tests))]
            if least and self.counts:
                self.counts[-1] = ("1", self.counts[-1][1])

    def _rows(self, mark, loops):
        """The rows of a register tile under a ``rows:<depth>:<MR>`` mark, unrolled: the
        row loop's iterator replaced by each value.  A loop whose upper bound depends on
        outer loops (a partial tile: ``c13 <= min(7, 104 - c6)``) gives ``MR`` rows, each
        at ``min(row, bound)`` (the last row again past the bound: every access stays in
        bounds) and stored only up to the bound (``Row.guard``)."""
        _, _, count, *span = mark.mark_get_id().get_name().split(":")
        count, body = int(count), mark.mark_get_node()
        batch = self._batch(body) if span else None
        if batch is not None:  # a register tile across a batch's loop and the rows'
            it, values, body = batch  # (``Tiler.contraction``: ``span``): each row of
            guard = None  # the rows' loop once per value
            if body.get_type() == isl.ast_node_type.if_:  # (whether the tile has a row:
                guard, body = isl_expr(body.if_get_cond()), body.if_get_then_node()
                if mentions(guard, [it]):  # its test, the same for the whole batch)
                    return None
            items = self._rows_in(body, count, loops)
            if items is None:
                return None
            if guard is not None:
                self.first_row = guard if self.first_row is None else \
                    f"({guard}) && ({self.first_row})"

            def spread(rows):
                return [r._replace(at={**r.at, it: f"{v}L"}) for v in values for r in rows]
            self.counts = [(t, spread(rows)) for t, rows in self.counts]
            return spread(items)
        return self._rows_in(body, count, loops)

    def _batch(self, node):
        """``(iterator, values, the rows' loop)`` where ``node``, under a ``rows:..:span``
        mark, is a batch's loop around the rows' loop: a loop of constant bounds, or
        isl's block of its iterations, one loop of one iteration each, around the same
        loop of rows; else None."""
        T = isl.ast_node_type
        loops = _children(node)
        if not all(lp.get_type() == T.for_ for lp in loops):
            return None
        its = {self.em.for_header(lp)[0] for lp in loops}
        bounds = [_const_bounds(lp) for lp in loops]
        inner = loops[0].for_get_body()
        if len(its) != 1 or any(lo is None for lo, _ in bounds) or \
                inner.get_type() not in (T.for_, T.if_) or (len(loops) > 1 and (any(
                    lo != hi for lo, hi in bounds) or len({lp.for_get_body().to_C_str()
                                                           for lp in loops}) != 1)):
            return None  # (the iterations' loops of rows alike, but for the iterator)
        if inner.get_type() == T.if_ and (inner.if_has_else_node() or
                                           inner.if_get_then_node().get_type() != T.for_):
            return None
        values = [v for lo, hi in bounds for v in range(lo, hi + 1)]
        return its.pop(), values, inner

    def _rows_in(self, body, count: int, loops):
        """The rows of the loop ``body`` of a register tile of ``count`` rows (``_rows``)."""
        if body.get_type() != isl.ast_node_type.for_:  # one row: isl dropped the loop
            return self._items(_children(body))
        rows = body.for_get_body()
        guard = None  # a row count isl tests inside the loop (``M % 6 >= c6 + 1``: the
        if rows.get_type() == isl.ast_node_type.if_ and not rows.if_has_else_node():
            guard = isl_expr(rows.if_get_cond())  # partial tile of a symbolic size)
            rows = rows.if_get_then_node()
        items = self._items(_children(rows))
        if items is None:
            return None
        it = self.em.for_header(body)[0]
        lo, hi = _const_bounds(body)
        if lo is not None and guard is not None:
            if mentions(guard, [self.em.for_header(lp)[0] for lp in loops]):
                return None
            # every row; one the test excludes is computed at the first row's index
            # (in bounds: the tile has a row) and not stored
            def test(v):
                return re.sub(rf"\b{it}\b", f"{v}L", guard)
            self.first_row = test(lo)
            self._counted(items, it, lo, [f"!({test(v)})" for v in range(lo + 1, hi + 1)] +
                          ["1"])
            return [r._replace(at={it: f"{v}L" if v == lo else f"(({test(v)}) ? {v}L : {lo}L)"},
                               guard=None if v == lo else test(v))
                    for v in range(lo, hi + 1) for r in items]
        if lo is not None:
            return [r._replace(at={it: f"{v}L"}) for v in range(lo, hi + 1) for r in items]
        init, cond = body.for_get_init(), body.for_get_cond()
        if init.get_type() != isl.ast_expr_type.int or \
                cond.get_type() != isl.ast_expr_type.op or \
                cond.op_get_type() not in (_OP.le, _OP.lt):
            return None
        lo = init.int_get_val().to_python()
        bound = isl_expr(cond.op_get_arg(1))
        if cond.op_get_type() == _OP.lt:  # (``c6 < D0 % 6``: a symbolic remainder)
            bound = f"({bound}) - 1L"
        iters = [self.em.for_header(lp)[0] for lp in loops]
        if mentions(bound, iters + [it]):
            return None
        if mentions(bound, self.em.scop.symbolic):
            self.first_row = f"{lo}L <= {bound}"
            self._counted(items, it, lo, [f"({bound}) == {v}L" for v in range(lo, lo + count - 1)]
                          + ["1"])
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
        vector = micro_kernel(self.em, loops, items) or self._rows_sum(loops, items)
        if vector is not None or any(r.guard for r in items):
            return vector
        iters = [self.em.for_header(lp)[0] for lp in loops]
        red, flag = self._simd_reduction(items)
        unroll = self._unrolled(loops, items)
        if unroll is not None:  # inside a vector loop: no reduction of its own
            red, flag = None, flag or "pt_nan0"
        decls, pro, body, epi, post = [], [], [], [], []
        targets: set = set()
        for u, (inner, user, at, _) in enumerate(items):
            sst, printer = self.em.instance(user, at)
            st = sst.stmt
            if sst.kind != "body" or st.op is None or any(
                    r.tensor == st.tensor for r in P.reads(st.rhs)):
                return None
            target = target_code(sst, printer)
            if mentions(target, iters) or target in targets:
                # (two rows of one element: rows along a reduction, ``T0(k) max=! ..
                # A(i, j, k)`` unrolled over j on a GPU thread, each row its own
                # accumulator stored last-wins: the differential fuzzer's find)
                return None
            targets.add(target)
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
                    values = [p.expr(st.rhs)
                              for p in (points if unroll is not None else [printer])]
                    body += [c.Statement(extremum_pair(st.op, st.rhs.dtype, a, b, acc, flag))
                             for a, b in zip(values[::2], values[1::2])]
                    if len(values) % 2:
                        body.append(c.Statement(extremum_update(
                            st.op, st.rhs.dtype, values[-1], acc, flag).rstrip(";")))
                    nan = literal(float("nan"), st.rhs.dtype)
                    epi.append(c.Statement(f"{target} = {flag} ? {nan} : {acc}"))
                    continue
                if unroll is not None:
                    body += [c.Statement(statement_code(sst, p, acc).rstrip(";"))
                             for p in points]
                    epi.append(c.Statement(f"{target} = {acc}"))
                    continue
                code = statement_code(sst, printer, acc).rstrip(";")
                split = self._split_sum(loops, st, [(red, acc, code)]) or \
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
            if lo is None or mentions(" ".join(header), iters):
                return None
            slot = f"{acc}[{it} - {lo}L]"
            decls.append(c.Statement(f"{ct} {acc}[{hi - lo + 1}]"))
            simd = self.em.simd_loop
            pro += simd(header, c.Statement(f"{slot} = {start}"))
            picked = _picked_row(sst, printer, it, lo, hi - lo + 1, u, slot)
            if picked is not None:  # the window point's row, or a row of its fill
                fill, pick, code = picked
                decls.append(c.Statement(fill))
                body.append(c.Statement(pick))
            else:
                code = statement_code(sst, printer, slot)
            body += simd(header, c.Statement(code.rstrip(";")))
            epi += simd(header, c.Statement(f"{target} = {slot}"))
        if unroll is not None:
            return [c.Block(decls + pro + body + epi + post)]
        nest = body
        # one vector reduction over the whole nest when its bounds are constants
        # (``collapse``): one per innermost loop would reduce its vector every row; but
        # not over rows of four vectors or more, where gcc's collapsed loop recomputes
        # every element's indices with divisions and one reduction per row costs little
        # (the min of a 64 x 784 activation: 28 -> 4 us)
        whole = red is not None and self.em.omp_reductions and len(loops) > 1 and \
            all(_const_bounds(lp)[0] is not None for lp in loops) and \
            _trips(loops[-1:]) < 4 * self.em.lanes(st.rhs.dtype.np_dtype.itemsize)
        shared = red is not None and len(loops) > 1 and \
            all(_const_bounds(lp)[0] is not None for lp in loops) and \
            self.em.shared_sum(_trips(loops), " ".join(map(str, body)))
        for depth, lp in enumerate(reversed(loops)):
            loop = c.For(*self.em.for_header(lp)[1], c.Block(nest))
            pragma = None
            if red is not None and whole and depth == len(loops) - 1:
                pragma = f"{red} collapse({len(loops)})"
                if shared:
                    pragma = pragma.replace("omp simd", "omp parallel for simd" +
                                            self.em.team_clause(), 1)
            elif red is not None and not whole and depth == 0:
                pragma = red
            elif shared and not whole and depth == len(loops) - 1:  # the threads share
                # the rows, each reducing its own in vectors
                pragma = red.replace("omp simd", "omp parallel for" + self.em.team_clause(),
                                     1)
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

    def _split_sum(self, loops, st, sums: list):
        """``+``/``*`` reductions over one loop of at least two blocks of ``width``
        iterations, each (``sums``: ``(pragma, accumulator, code)``, one per row of a
        register tile) with an accumulator per lane of ``width`` (``pt_part``): one
        vector accumulator makes every step wait for the previous one (4 cycles of
        latency per vector), four keep the adder busy (a 1024-long sum: 2x); rows side
        by side (two vectors each) share the loads of their other operand.  The
        statements, or None where that does not apply."""
        if any(red is None for red, _acc, _code in sums) or len(loops) != 1 or \
                st.op not in ("+", "*"):
            return None
        lo, hi = _const_bounds(loops[0])
        vectors = 4 if len(sums) == 1 else max(1, 8 // len(sums))  # 4 or 8 chains
        width = vectors * self.em.lanes(st.rhs.dtype.np_dtype.itemsize)
        if lo is None or hi - lo + 1 < 2 * width:
            return None
        it = self.em.for_header(loops[0])[0]
        end = lo + (hi - lo + 1) // width * width  # the blocks end here
        heads, combines, steps = [], [], []
        for red, acc, code in sums:
            part = f"pt_part_{acc}"
            head, combine = self._lane_sums(part, width, red, st, acc)
            heads += head
            combines += combine
            steps.append(c.Statement(re.sub(rf"\b{acc}\b", f"{part}[pt_l]", code)))
        block = c.For(f"long {it}_o = {lo}L", f"{it}_o < {end}L", f"{it}_o += {width}L",
                      c.Block(self.em.simd_loop(each_lane(width), c.Block([
                          c.Statement(f"long {it} = {it}_o + pt_l")] + steps))))
        rest = [c.For(f"long {it} = {end}L", f"{it} <= {hi}L", f"{it} += 1",
                      c.Block([c.Statement(code) for _red, _acc, code in sums]))] \
            if end <= hi else []
        red, acc, code = sums[0]
        if len(sums) == 1 and self.em.shared_sum(end - lo, code):  # each thread sums
            # its share of the blocks in its own lanes, then the threads combine them
            team = f"omp parallel reduction({st.op}:{acc}){self.em.team_clause()}"
            return [c.Pragma(team), c.Block(heads + [c.Pragma("omp for schedule(static)"),
                                                     block] + combines)] + rest
        return heads + [block] + rest + combines

    def _rows_sum(self, loops, items):
        """The rows of a register tile that each reduce into one element along the
        same loop (a matrix's rows in one pass: ``poly/privatize.py``), side by side
        in ``_split_sum``; None where that does not apply."""
        if len(items) < 2 or any(r.inner is not None or r.guard for r in items) or \
                not self.em.omp_reductions:
            return None
        iters = [self.em.for_header(lp)[0] for lp in loops]
        decls, sums, stores, st = [], [], [], None
        for u, (_inner, user, at, _) in enumerate(items):
            sst, printer = self.em.instance(user, at)
            if st is not None and sst.stmt is not st:
                return None
            st = sst.stmt
            if sst.kind != "body" or st.op not in ("+", "*") or \
                    sst.name in self.em.folds or \
                    any(r.tensor == st.tensor for r in P.reads(st.rhs)):
                return None
            target = target_code(sst, printer)
            if mentions(target, iters):
                return None
            if printer.varying:
                printer.varying = tuple(iters)
            acc = f"pt_acc{u}"
            decls.append(c.Statement(f"{st.rhs.dtype.c_name} {acc} = {target}"))
            code = statement_code(sst, printer, acc).rstrip(";")
            sums.append((self.em.reduction_pragma(st.op, acc, st.rhs.dtype.is_float), acc,
                         code))
            stores.append(c.Statement(f"{target} = {acc}"))
        split = self._split_sum(loops, st, sums)
        return None if split is None else [c.Block(decls + split + stores)]

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
        zero = P.identity(st.op, st.rhs.dtype)
        decl = f"{st.rhs.dtype.c_name} {part}[{width}] __attribute__((aligned(64)))"
        if zero == 0:  # an initializer: gcc keeps the sums in registers (filled by a
            # loop, a dot product's four vectors went through the stack at every step)
            head = [c.Statement(decl + " = {0}")]
        else:
            head = [c.Statement(decl)] + self.em.simd_loop(
                each_lane(width), c.Statement(f"{part}[pt_l] = {literal(zero, st.rhs.dtype)}"))
        return head, [c.Pragma(red), c.For(*each_lane(width),
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
        red = self.em.reduction_pragma(op, "pt_acc0", sst.stmt.rhs.dtype.is_float)
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


def _trips(loops) -> int:
    """Iterations of a nest of loops of constant bounds."""
    n = 1
    for lp in loops:
        lo, hi = _const_bounds(lp)
        n *= hi - lo + 1
    return n


def _lanes_min(for_node):
    """``(lo, hi, e)`` of a loop ``for (it = lo; it <= min(hi, e); it += 1)`` (``lo`` and
    ``hi`` constants, ``e`` C text), else None."""
    init, cond, inc = for_node.for_get_init(), for_node.for_get_cond(), for_node.for_get_inc()
    if init.get_type() != isl.ast_expr_type.int or inc.get_type() != isl.ast_expr_type.int or \
            inc.int_get_val().to_python() != 1 or cond.get_type() != isl.ast_expr_type.op or \
            cond.op_get_type() != _OP.le:
        return None
    bound = cond.op_get_arg(1)
    if bound.get_type() != isl.ast_expr_type.op or bound.op_get_type() != _OP.min or \
            bound.op_get_n_arg() != 2:
        return None
    a, b = bound.op_get_arg(0), bound.op_get_arg(1)
    if b.get_type() == isl.ast_expr_type.int:
        a, b = b, a
    if a.get_type() != isl.ast_expr_type.int:
        return None
    return init.int_get_val().to_python(), a.int_get_val().to_python(), isl_expr(b)
