"""The isl AST as a C function, built with cgen.

Loops come only from isl's AST generator.  A ``parallel`` mark puts
``#pragma omp parallel for`` on the loop under it, a ``promote`` mark hands its nest to
``promote.Promotion`` (isl AST expressions are C through ``cexpr.isl_expr``).
Temporaries are buffers the runtime passes in; the function fills those whose initial
value it reads.  The function returns 0, or the number of the first run-time check that
failed.
"""
from __future__ import annotations

import re

import cgen as c
import islpy as isl
import numpy as np

from ..machine import host
from .chains import const_bounds as _const_bounds
from .microkernel import masked_moves, typedefs
from .fold import folds_of
from .aligned import by_alignment
from .locals import locals_of, thread_helper
from .split import cut
from .prefetch import cursors, steps
from .vmath import vector_math
from .pack import PackPrinter, direct_below, packs_of
from .halves import half_helpers
from .tcopy import transposed_copy
from .vloop import math_loop
from .cexpr import (PRELUDE, ExprPrinter, c_sizes, div_helpers, dot4_helper, ast_nodes, isl_expr,
                    literal, span, statement_code, vdot4_helpers)
from .promote import Promotion
from .rowsplit import rows_split, tiles_split
from ..tiling.extents import least_symbolic, statement_points

#: the most characters of C of a parallel loop's body that its serial branch (a generic
#: kernel's size too small to fork) also holds inline, rather than calling the outlined
#: body once per iteration: a call for each row's few stores or short vector loop
INLINE_SERIAL = 4000


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
                 parallel_sum: int | None = None, parallel_if: str = "", team: int = 1,
                 band_points: int = 0, aligned=()):
        self.scop = scop
        #: inputs every call passes 64-byte aligned (``Options.aligned``): not versioned
        self.aligned = frozenset(aligned)
        #: the instances a parallel loop's statements need to fork, where its count is
        #: symbolic (``forked``; ``poly.schedule.BAND_SHIFT`` for fixed sizes)
        self.band_points = band_points
        #: the threads the parallel loops run on (a loop over a symbolic count runs in
        #: parallel when it has an iteration per thread: ``batch_condition``)
        self.team = team
        #: the conditions of the symbolic parallel loops around the node: a parallel loop
        #: inside one forks when it does not
        self.batch_if: list = []
        #: (loop iterator, its contracted buffers) of the parallel loops around the node
        self.scoped: list = []
        self.cursors: list = []  # the cursors in scope (``prefetch.cursors``)
        self.nested_forks = 0  # the parallel loops emitted inside such symbolic loops
        #: C that holds when the parallel loops should fork (symbolic sizes: large enough)
        self.parallel_if = parallel_if
        #: the fewest terms of a sum outside every loop (a dot product, the sum of a whole
        #: tensor) that its threads share (``CEmitter.shared_sum``); None: never
        self.parallel_sum = parallel_sum
        self.reciprocal = reciprocal  # see ExprPrinter.varying
        self.decisions = decisions
        self.adopt(decisions)
        #: the packs the code being emitted skips, reading the operand where it lies
        #: (too few rows for the copy to pay: ``pack.direct_below``)
        self.direct: set = set()
        #: rows that a partial register tile of the code being emitted has more of
        #: (a few-rows variant's: ``promote.Promotion._counted``)
        self.least_rows = 0
        self.iters: list = []  # iterators of the loops around the node being emitted
        self.helpers: list = []  # outlined parallel loop bodies
        prog = scop.program
        self.locals = locals_of(decisions, scop, isl_expr)  # contracted temporaries
        #: temporaries kept in another tensor's array (``tiling/alias.py``)
        self.aliases = {d.subject: d.facts["into"] for d in decisions if d.kind == "alias"}
        self.outlining = 0  # the depth of outlined parallel loops around the node
        #: inside ``rowsplit.tiles_split``'s region (its loop counts in ``outlining``),
        #: and the row loops it has shared there, with ``(their span, the least rows
        #: to share)`` where their mark says (a loop of a fixed count of tiles)
        self.splitting = self.split_hits = 0
        self.split_rows: list = []
        self.in_simd = 0  # the depth of vector (``omp simd``) loops around it
        self.touched: list = []  # (local, inside an outlined loop) per printed instance
        #: locals some instance accesses outside the loop that declares them (isl put it
        #: beside the loop): the code is made again without them (``backends.c``)
        self.escaped: set = set()
        #: extents and sizes as the C code reads them (a symbolic size by its name)
        self.shapes, self.env = c_sizes(scop)
        #: the symbolic sizes come first: ``int polytc_kernel(long M, const float *A, ...)``
        self.params = [f"long {n}" for n in scop.symbolic] + \
            [f"const {t.dtype.c_name} *restrict {t.name}" for t in prog.inputs] + \
            [f"{t.dtype.c_name} *restrict {t.name}" for t in prog.outputs + prog.temporaries
             if (t.name not in self.locals or self.locals[t.name].slot) and
             t.name not in self.aliases] + \
            [p.parameter for p in self.packs.values() if p.box is not None and not p.alias]
        self.vectorize = vectorize
        #: a register tile broadcasts a window's elements (``microkernel._window``)
        self.windows = False
        self.by_name = {s.name: s for s in scop.stmts}
        self.sites: list = []  # (Span, what) for every run-time check, 1-based
        self.num_threads = num_threads
        self.vector_types: set = set()  # (C type, lanes, item size) the code uses
        self.masked_types: set = set()  # those with partial vectors (masked moves)
        self.private: list = []  # tensors the next parallel loop reduces in private copies
        self.shared_pass = 0  # the depth of such loops (``privatize.py``) around the node
        #: (header, the parallel loop's iterator) of a symbolic loop that the parallel
        #: loop inside it collapses with (``collapsing``): set until that loop took it
        self.collapse_into = None

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
                promotion = Promotion(self, n.mark_get_node())
                promoted = promotion.emit()
                if promoted is not None:
                    return self.versioned(promoted)
                full = promotion.full_lanes()
                if full is not None:  # (the loops as they are where the tests fail)
                    rest = self.node(n.mark_get_node())
                    if full[2] is not None:  # (the partial tile of lanes)
                        rest = [c.If(full[2][0], c.Block(self.versioned(full[2][1])),
                                     c.Block(rest))]
                    return [c.If(full[0], c.Block(self.versioned(full[1])), c.Block(rest))]
            if kind == "rows":
                return self.unrolled(n.mark_get_node())
            if kind == "rowsplit":  # (a partial tile's rows, outside the parallel loop)
                row, least, cols = (depth.split(":") + ["", ""])[:3]
                split = rows_split(self, n.mark_get_node(), f"c{row}",
                                   int(least) if least else None, cols and f"c{cols}")
                return split if split is not None else self.node(n.mark_get_node(), pragma)
            if kind == "private":  # the parallel loop below sums per-thread copies
                self.private = [t for t in depth.split(",") if t]
                self.shared_pass += 1
                out = self.node(n.mark_get_node(), pragma)
                self.shared_pass -= 1
                self.private = []
                return out
            text = self.pragma(kind)
            if kind != "parallel" or not text:
                return self.node(n.mark_get_node(), pragma=(text, f"c{depth}") if text else None)
            mine = self.locals_under(n.mark_get_node(), f"c{depth}")
            decls = [d for lc in mine for d in lc.declarations()]
            placed: list = []  # the outlined bodies that declare the buffers
            first = len(self.touched)
            self.scoped.append((f"c{depth}", mine))
            out = self.node(n.mark_get_node(), pragma=(text, f"c{depth}", decls, placed))
            self.scoped.pop()
            if decls and not placed:
                out = [c.Block(decls + out)]  # isl dropped the loop: it runs once
            elif placed:  # an access isl generated outside the loop sees no buffer
                self.escaped.update(t for t, inside in self.touched[first:] if not inside)
            return out
        if t == T.for_:
            it, header = self.for_header(n)
            copy = None if pragma and it == pragma[1] else transposed_copy(self, n)
            if copy is not None:  # a transposing copy's lane loop, in blocks
                return copy
            outlined = bool(pragma) and it == pragma[1] and pragma[0].startswith("omp parallel")
            simd = bool(pragma) and it == pragma[1] and pragma[0] == "omp simd"
            outer = self.collapsing(n, it, header) if pragma is None else None
            batch = self.batch_condition(header) if outlined and not self.outlining else None
            self.iters.append(it)
            self.outlining += outlined
            self.in_simd += simd
            self.batch_if += [batch] if batch else []
            forks = self.nested_forks
            mine = cursors(self, it)
            self.cursors += mine
            inner = self.node(n.for_get_body())
            self.cursors = self.cursors[:len(self.cursors) - len(mine)]
            inner = [cur.declaration for cur in mine if cur.used] + inner
            self.batch_if = self.batch_if[:-1] if batch else self.batch_if
            if batch and self.nested_forks == forks:  # nothing inside forks instead: a
                batch = None  # region of one iteration keeps the other threads awake
            self.in_simd -= simd
            self.outlining -= outlined
            self.iters.pop()
            if outer is not None:
                if self.collapse_into is None:  # the parallel loop below took this one
                    return inner
                self.collapse_into = None
            # a mark applies to the loop of its schedule dimension; when isl dropped
            # that loop (one iteration), to no loop at all
            if pragma and it == pragma[1]:
                if pragma[0].startswith("omp parallel"):
                    pragma[3].append(it)
                    body = pragma[2] + inner
                    inner = [self.outline(body, self.iters + [it])]
                    loop = c.For(*header, c.Block(inner))
                    if self.collapse_into is not None and self.collapse_into[1] == it:
                        outer, self.collapse_into = self.collapse_into[0], None
                        out = self.forked(pragma[0], loop, n)
                        split = self.split(out, n, header)
                        if split is not out:  # (tiles_split's region in the loop around)
                            return [c.For(*outer, c.Block(split))]
                        return self.forked(pragma[0] + " collapse(2)",  # and the loop around
                                           c.For(*outer, c.Block([loop])), n)
                    if batch:  # forks when it has an iteration per thread, else runs
                        # outside any parallel region (a nested region, even inside an
                        # inactive one, gets threads of its own: libgomp creates them)
                        return self.split([c.If(batch, c.Block(self.forked(pragma[0], loop, n)),
                                                c.Block([loop]))], n, header)
                    if self.batch_if and self.outlining:  # inside such a loop: forks when
                        # that one did not (a batch of one), else runs on its thread
                        self.nested_forks += 1
                        return [c.If(f"!({self.batch_if[-1]})",
                                     c.Block(self.forked(pragma[0], loop, n)), c.Block([loop]))]
                    return self.split(self.forked(pragma[0], loop, n, (header, body)), n,
                                      header)
                ahead = steps(self.cursors, str(c.Block(inner))) if simd else []
                phased = self.phases(it, header, inner) if simd else None
                if phased is not None:
                    header, inner = phased
                plain = self.versioned([c.Pragma(pragma[0]), c.For(*header, c.Block(inner))])
                vector = math_loop(self, n, it, header, inner) if simd and not phased \
                    else None
                if vector is None:
                    return ahead + plain
                return ahead + [c.Line("#ifdef PT_EXPV16")] + vector + [c.Line("#else")] + \
                    plain + [c.Line("#endif")]
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
            if name in self.direct:
                return []
            if name in self.packs:
                args = [isl_expr(call.op_get_arg(i + 1)) for i in range(call.op_get_n_arg() - 1)]
                return [c.Statement(self.packs[name].copy(args, self))]
            sst, printer = self.instance(n)
            if sst.name in self.folds:
                return self.folds[sst.name].instance(self, sst, printer)
            return [c.Statement(statement_code(sst, printer).rstrip(";"))]
        raise NotImplementedError(f"isl AST node {t}")

    def split(self, out: list, n, header) -> list:
        """``out``, the code of the parallel loop ``n`` (``header``: its ``for``
        clauses), or where it is a symbolic contraction's loop of full tiles of rows,
        ``rowsplit.tiles_split``'s region where its test holds and ``out`` else."""
        split = None if self.outlining else tiles_split(self, n, header)
        if split is None:
            return out
        test = " && ".join(f"({t})" for t in (self.parallel_if, split[0]) if t)
        return [c.If(test, c.Block(split[1]), c.Block(out))]

    def phases(self, it: str, header, inner: list):
        """``(header, body)`` of a vector loop over ``it`` whose body reads through
        ``it / k`` (nearest 2x upsampling: ``Y(j) = X(j / 2)``) as a loop over ``u =
        it / k`` around its ``k`` phases spelt out (``it = k u + q``, ``it / k`` is
        ``u``): the reads are unit-stride along the vector loop and the ``k`` stores
        interleave (gcc's vector loop over ``j`` made gathers: 127 -> 52 us for (64, 56,
        56) 2x up).  None when the loop runs no whole phases, or ``it`` is divided by
        several constants (its other uses read the constant ``it`` of each phase)."""
        m = re.fullmatch(r"long \w+ = (-?\d+)L", header[0])
        bound = re.fullmatch(rf"{it} <= (-?\d+)L", header[1])
        if m is None or bound is None or header[2] != f"{it} += 1L":
            return None
        text = "\n".join(str(s) for s in inner)
        ks = set(re.findall(rf"\(\({it}\) / (\d+)\)", text))
        if len(ks) != 1:
            return None
        k, lo, hi = int(ks.pop()), int(m.group(1)), int(bound.group(1))
        if k < 2 or k > 8 or lo < 0 or lo % k or (hi + 1) % k:
            return None
        body = text.replace(f"(({it}) / {k})", "pt_u")
        copies = [c.Block([c.Statement(f"const long {it} = {k}L * pt_u + {q}L"),
                           c.Line(body)]) for q in range(k)]
        return ("long pt_u = %dL" % (lo // k), f"pt_u <= {(hi + 1) // k - 1}L",
                "pt_u += 1"), copies

    def batch_condition(self, header) -> str | None:
        """For a parallel loop over a count that depends on a symbolic size (a dynamic
        batch; ``header``: its ``for`` header), the C condition that it has at least an
        iteration per thread; None for a loop of a fixed count, or one thread."""
        if self.team < 2 or not any(re.search(rf"\b{n}\b", " ".join(header[:2]))
                                    for n in self.scop.symbolic):
            return None
        count = span(header)
        return None if count is None else f"{count} >= {self.team}"

    def collapsing(self, n, it: str, header):
        """``header`` when the loop ``n`` runs a symbolic number of iterations (a
        dynamic batch) around nothing but a parallel loop of a fixed count that does not
        depend on it: the two loops then run as one parallel loop (``collapse(2)``), so
        a batch of one keeps every thread busy and a large one forks once.  Else None."""
        T = isl.ast_node_type
        body = n.for_get_body()
        if not self.scop.symbolic or self.outlining or body.get_type() != T.mark:
            return None
        kind, _, depth = body.mark_get_id().get_name().partition(":")
        inner = body.mark_get_node()
        if kind != "parallel" or inner.get_type() != T.for_:
            return None
        it2, header2 = self.for_header(inner)
        if it2 != f"c{depth}" or re.search(rf"\b{it}\b", " ".join(header2)) or \
                not any(re.search(rf"\b{n}\b", " ".join(header)) for n in self.scop.symbolic):
            return None
        self.collapse_into = (header, it2)
        return header

    def locals_under(self, n, loop: str) -> list:
        """The contracted temporaries of the loop ``loop`` that statements under the AST
        node ``n`` access: another band's parallel loop at the same depth neither
        declares nor passes them (where isl dropped that loop in one branch, its outlined
        bodies had been passed a buffer declared nowhere)."""
        mine = [lc for lc in self.locals.values() if lc.loop == loop]
        if not mine:
            return mine
        names = {x.user_get_expr().op_get_arg(0).id_get_id().get_name()
                 for x in ast_nodes(n) if x.get_type() == isl.ast_node_type.user}
        return [lc for lc in mine if names & lc.offsets.keys()]

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
        # the buffers of the parallel loops around this one (a symbolic loop's, whose
        # body runs this loop in parallel when it runs on one thread)
        outer = [lc for loop, lcs in self.scoped if not iters or loop != iters[-1]
                 for lc in lcs]
        params = [c.Value("long", i) for i in iters] + \
            [c.Value("", p) for p in self.params] + \
            [c.Value(f"{lc.ctype} *restrict", lc.name) for lc in outer] + \
            [c.Value("int *restrict", "pt_err")]
        names = iters + [p.rsplit(" ", 1)[-1].lstrip("*") for p in self.params] + \
            [lc.name for lc in outer] + ["pt_err"]
        code = [c.Statement("int err = 0")] + \
            cut(name, params, names, body, self.helpers) + \
            [c.If("err", c.Statement("__atomic_store_n(pt_err, err, __ATOMIC_RELAXED)"))]
        self.helpers.append(c.FunctionBody(
            c.FunctionDeclaration(c.Value("static __attribute__((noinline)) void", name),
                                  params), c.Block(code)))
        return c.Statement(f"{name}({', '.join(names[:-1] + ['&err'])})")

    def team_clause(self, test: bool = True) -> str:
        """The clauses of a parallel region: its team size, and (``test``) the run-time
        test of a kernel with symbolic sizes that it has work enough to fork."""
        return (f" num_threads({self.num_threads})" if self.num_threads else "") + \
            (f" if({self.parallel_if})" if self.parallel_if and test else "")

    def forked(self, pragma: str, loop, n=None, inline=None) -> list:
        """A parallel loop under its pragma, behind the run-time test of a kernel with
        symbolic sizes: an OpenMP ``if`` clause that fails still makes a team of one
        (libgomp allocates and frees it, 0.25 us a region; a 10-statement generic
        kernel's row ran 5 us for 0.8 us of work), a C ``if`` runs the loop as it is,
        or, given ``inline`` (the loop's header and body), the same loop with a small body
        inline rather than a call of the outlined body per iteration (``INLINE_SERIAL``).
        With the AST loop ``n``, also that its own statements have ``band_points``
        instances (a generic row program's row statements at 8 rows forked a region
        each, 2x the time of its specialised twin, whose such loops run on one thread)."""
        test = " && ".join(f"({t})" for t in (self.parallel_if, self.band_test(n)) if t)
        if not test:
            return [c.Pragma(pragma), loop]
        serial = loop
        if inline is not None and len(str(c.Block(inline[1]))) <= INLINE_SERIAL:
            serial = c.For(*inline[0], c.Block(inline[1]))
        return [c.If(test, c.Block([c.Pragma(pragma), loop]), c.Block([serial]))]

    def band_test(self, n) -> str:
        """C that holds where the statements under the AST node ``n`` reach
        ``band_points`` instances (their count scaled by the symbolic sizes); "" where
        they always do (already at a size of 1: their extents fixed), or the kernel's
        sizes are fixed."""
        if n is None or not self.band_points or not self.scop.symbolic:
            return ""
        T = isl.ast_node_type
        names = {x.user_get_expr().op_get_arg(0).id_get_id().get_name()
                 for x in ast_nodes(n) if x.get_type() == T.user}
        ssts = [self.by_name[x] for x in names if x in self.by_name]
        ones = {**self.scop.env, **{x: 1 for x in self.scop.symbolic}}
        if not ssts or sum(statement_points(s, ones) for s in ssts) >= self.band_points:
            return ""
        least = least_symbolic(ssts, self.scop.env, self.scop.symbolic, self.band_points)
        return "" if least <= 1 else f"({' * '.join(self.scop.symbolic)}) >= {least}L"

    def private_clause(self) -> str:
        """OpenMP array reductions of the tensors a ``private:`` mark names (each thread
        updates its own zeroed copy; the copies are added to the tensor at the end)."""
        out = ""
        for name in self.private:
            op = next(s.stmt.op for s in self.scop.stmts
                      if s.kind == "body" and s.stmt.tensor == name)
            out += f" reduction({op}:{name}[:{self.elements(name, '')}])"
        return out

    def shared_sum(self, terms: int, code: str) -> bool:
        """Whether the threads share a sum of ``terms`` terms (``code``): only outside
        every loop (no other parallel region around it), of at least ``parallel_sum``
        terms, none of which can fail an index check (``err``).  A dot product of 4M
        terms on one of two threads ran 2x slower than numpy's."""
        return self.parallel_sum is not None and not self.iters and \
            terms >= self.parallel_sum and not re.search(r"\berr\b", code)

    def pragma(self, mark: str):
        if mark == "parallel":
            return f"omp parallel for{self.private_clause()}{self.team_clause(test=False)}"
        if mark == "simd":
            return "omp simd" if self.vectorize else None
        return None

    def fill(self, t, value) -> list:
        """Statements setting every element of the temporary ``t`` to ``value``."""
        n = self.elements(t.name)
        ct = t.dtype.c_name
        if value == 0:
            return [c.Statement(f"memset({t.name}, 0, {n} * sizeof({ct}))")]
        return self.simd_loop(("long pt_i = 0", f"pt_i < {n}", "pt_i += 1"), c.Statement(
            f"{t.name}[pt_i] = {literal(value, t.dtype)}"))

    def elements(self, tensor: str, suffix: str = "L") -> str:
        """The number of elements of ``tensor`` as C (a number with ``suffix``)."""
        dims = self.shapes[tensor]
        if all(isinstance(n, int) for n in dims):
            return f"{int(np.prod(dims, dtype=np.int64))}{suffix}"
        return " * ".join(f"{n}L" if isinstance(n, int) else f"(long)({n})" for n in dims)

    def reduction_pragma(self, op: str, acc: str, is_float: bool = True):
        return f"omp simd reduction({op}:{acc})" if self.vectorize else None

    def lanes(self, itemsize: int) -> int:
        """Elements of ``itemsize`` bytes in one of the host's vector registers."""
        return host().lanes(itemsize)

    def versioned(self, stmts: list) -> list:
        """Vector loops reading the caller's arrays, at half width where those are not
        64-byte aligned (``aligned.py``)."""
        if not (self.vectorize and self.omp_reductions) or self.shared_pass:
            return stmts  # not on a GPU, nor in one pass over a matrix for two
            # statements: a row's reads come from L1 the second time, and full width
            # paid there (atax on 2 threads at offset 16: 0.21 -> 0.15 ms)
        return by_alignment(stmts, [t.name for t in self.scop.program.inputs
                                    if t.name not in self.aligned], self.lanes(4))

    def simd_loop(self, header, body) -> list:
        """A loop the C compiler should vectorise."""
        return [c.Pragma("omp simd"), c.For(*header, body)]

    def expr(self, e) -> str:
        """An isl AST expression as C."""
        return isl_expr(e)

    def adopt(self, decisions) -> None:
        """Emit the code of the tiling that made ``decisions`` (``codegen_c/fewrows.py``: a
        kernel's few-rows variant is another tiling of the same statements)."""
        self.packs = packs_of(decisions, self.scop)  # copy statement -> Packed
        self.folds = folds_of(decisions, self.scop)  # contraction -> its folded init/epilogue
        self.packed: dict = {}  # statement -> {tensor: Packed}
        for p in self.packs.values():
            self.packed.setdefault(p.sst.name, {})[p.tensor] = p

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
        args = (self.shapes, self.env, vars, sst.guarded, self.sites)
        packed = {t: q for t, q in self.packed.get(sst.name, {}).items()
                  if q.name not in self.direct}
        p = PackPrinter(packed, *args) if packed else ExprPrinter(*args)
        self.localised(p, sst, vars)
        if self.reciprocal:
            p.varying = tuple(self.iters[-1:])
        return p

    def localised(self, p, sst, vars: dict) -> None:
        """``p`` (a printer of ``sst`` at the index values ``vars``) reading and writing
        the contracted and aliased temporaries where they are."""
        p.locals = {t: lc.at(sst, vars) for t, lc in self.locals.items() if sst.name in lc.offsets}
        p.aliases = self.aliases
        self.touched += [(t, self.outlining > 0) for t in p.locals]

    def function(self, ast, fname: str, fills=None, variant=None) -> str:
        """The kernel: ``int fname(inputs..., outputs..., temporaries..., prepacked...)``
        (and the functions filling the prepacked operands, ``codegen_c/pack.py``).  The runtime
        owns the temporaries (scratch buffers reused across calls); those read before
        they are written (in ``fills``: name -> initial value) are filled first (the
        runtime fills the outputs: ``out=`` arrays are initial values).  ``variant``: the
        few-rows variant, ``(its decisions, its AST, (least, most))``, run for rows
        beyond ``least`` and up to ``most`` (``codegen_c/fewrows.py``)."""
        prog = self.scop.program
        params = self.params
        body = [c.Statement("int err = 0")]
        for t in prog.temporaries:
            if t.name in (fills or {}) and t.name not in self.locals:
                body += self.fill(t, fills[t.name])
        main = self.decisions
        few = direct_below(self.packs, self.scop) if self.scop.symbolic else None
        if few is None:
            body += self.node(ast)
        else:  # the same code reading the operand where it lies, for too few rows
            packed = self.node(ast)
            self.direct = few[1]
            direct = self.node(ast)
            if variant is not None:  # (its own packs skipped too: it reads in place)
                decisions, vast, (least, most) = variant
                self.adopt(decisions)
                self.direct, self.least_rows = set(self.packs), least
                rows = few[2][0]
                direct = [c.If(f"({rows}) > {least}L && ({rows}) <= {most}L",
                               c.Block(self.node(vast)), c.Block(direct))]
                self.adopt(main)
                self.least_rows = 0
            body.append(c.If(few[0], c.Block(direct), c.Block(packed)))
            self.direct = set()
        body.append(c.Statement("return err"))
        fn = c.FunctionBody(c.FunctionDeclaration(c.Value("int", fname),
                                                  [c.Value("", p) for p in params] or
                                                  [c.Value("void", "")]),
                            c.Block(body))
        bodies = "\n\n".join(str(h) for h in self.helpers)
        helpers = "".join(typedefs(*v) for v in sorted(self.vector_types)) + \
            vdot4_helpers(bodies + str(fn)) + \
            "".join(masked_moves(*v) for v in sorted(self.masked_types)) + \
            "\n".join(p.declaration() for p in self.packs.values()) + "\n\n" + bodies
        # the same, its arguments in one array (a plan's executor: graph/native.py)
        nsym = len(self.scop.symbolic)  # a symbolic size: a pointer to its long
        args = [f"*(const long *)a[{i}]" if i < nsym else f"a[{i}]" for i in range(len(params))]
        argv = (f"\nint {fname}_argv(void *const *a)\n{{\n  return {fname}("
                f"{', '.join(args)});\n}}\n")
        code = helpers + "\n\n" + str(fn) + "\n" + argv + "".join(
            "\n" + p.prepack(self.shapes, self.env)
            for p in self.packs.values() if p.box is not None and not p.alias)
        return PRELUDE + div_helpers(code) + dot4_helper(code) + half_helpers(code) + \
            vector_math(code) + thread_helper(code) + "\n" + code
