"""The isl AST of a mapped schedule (``tiling/gpu.py``) as GPU kernels, in a C dialect.

One emitter serves OpenCL C and CUDA; a ``Dialect`` (``codegen_opencl``,
``codegen_cuda``) supplies the keywords.  Per ``kernel`` mark one kernel function:

* a loop under a ``block``/``thread`` mark is distributed cyclically over the block
  (thread) ids of its axis: ``for (c = lo + step*id; c <= hi; c += step*count)``;
* a statement reached without passing the loop of some axis whose size is more than one
  (isl dropped a loop of one iteration, or a region maps fewer axes than the block has)
  runs only where that axis' id is 0, so every instance runs exactly once;
* barriers: after each thread-mapped region (a later region may read what other threads
  wrote), around a statement only thread 0 runs outside such a region in a kernel of one
  block, before the copies into shared memory and before the compute that reads them;
  they are never inside a thread-mapped loop, so every thread of a block reaches them;
* a failed run-time check stores its site number in the kernel's ``err`` and the first
  one reaches the host through the ``pt_err`` buffer (an atomic compare-and-swap).
"""
from __future__ import annotations

import cgen as c
import islpy as isl

from ..diagnostics import UnsupportedError
from .cexpr import ExprPrinter, div_helpers, dot4_helper
from .cexpr import isl_expr
from .emit import CEmitter
from .promote import Promotion

_T = isl.ast_node_type


class GpuPrinter(ExprPrinter):
    """Reads of promoted tensors go to their shared-memory copy."""

    unsigned_wrap = True  # OpenCL C and CUDA have no -fwrapv
    select_fminmax = False  # their fmax/fmin are built in

    def __init__(self, dialect, shared: dict, *args):
        super().__init__(*args)
        self.dialect, self.shared = dialect, shared

    def literal(self, value, t):
        return self.dialect.literal(value, t)

    def math(self, name, t):
        return self.dialect.math(name, t)

    def element(self, tensor, subs, checked=False, span=None):
        box = self.shared.get(tensor)
        if box is None:
            return super().element(tensor, subs, checked, span)
        return shared_element(tensor, subs, box)


def shared_element(tensor, subs, box) -> str:
    """``pt_shared_<tensor>[...]``: each subscript modulo its box size (one-to-one on a
    box)."""
    lin = None
    for s, n in zip(subs, box):
        r = f"(({s}) & {n - 1}L)" if n & (n - 1) == 0 else f"(({s}) % {n}L)"
        lin = r if lin is None else f"({lin}) * {n}L + {r}"
    return f"{shared_name(tensor)}[{lin if lin is not None else 0}]"


def shared_name(tensor: str) -> str:
    return f"pt_shared_{tensor}"


class GpuEmitter(CEmitter):
    omp_reductions = False  # a vectoriser hint: the loop's semantics are sequential

    def __init__(self, scop, dialect, launches, vectorize=True):
        super().__init__(scop, None, vectorize=False)
        self.vectorize_reductions = vectorize
        self.dialect, self.launches = dialect, launches
        prog = scop.program
        self.params = [dialect.pointer(t.dtype.c_name, t.name, const=True)
                       for t in prog.inputs] + \
            [dialect.pointer(t.dtype.c_name, t.name) for t in prog.outputs + prog.temporaries]
        self.kernels: list = []
        self.emitted: set = set()  # names of the kernels in the source
        self.launch = None
        self.pending: dict = {}  # loop iterator -> (kind, axis) of a mapping mark
        self.covered: set = set()  # (kind, axis) distributed on the current path
        self.shared: dict = {}  # promoted tensor -> box sizes, inside a shared region
        self.in_copy = False

    # --- marks ---------------------------------------------------------------------
    def node(self, n, pragma=None) -> list:
        t = n.get_type()
        if t == _T.mark:
            name = n.mark_get_id().get_name()
            kind, _, rest = name.partition(":")
            body = n.mark_get_node()
            if kind == "kernel":
                self.kernel(int(rest), body)
                return []
            if kind in ("block", "thread"):
                return self.mapped(kind, rest, body)
            if kind == "copy":
                self.in_copy = True
                try:
                    return [self.barrier()] + self.node(body)
                finally:
                    self.in_copy = False
            if kind == "shared":
                saved = dict(self.shared)
                for tensor in rest.split(","):
                    self.shared[tensor] = self.boxes[tensor]
                try:
                    return [self.barrier()] + self.node(body)
                finally:
                    self.shared = saved
            if kind == "promote" and not self.pending:  # no mapped loop inside
                promoted = Promotion(self, body).emit()
                if promoted is not None:
                    return self.guarded(promoted)
                return self.node(body)
            return self.node(body)
        if t == _T.for_:
            it = n.for_get_iterator().id_get_id().get_name()
            if it in self.pending:
                return self.distributed(n, it)
            return super().node(n)
        if t == _T.user:
            return self.guarded(self.user(n))
        return super().node(n, pragma)

    def mapped(self, kind, rest, body) -> list:
        depth, m = (int(x) for x in rest.split(":"))
        added = {f"c{depth + j}": (kind, m - 1 - j) for j in range(m)}
        outer = kind == "thread" and not any(k == "thread" for k, _ in self.pending.values()) \
            and ("thread", 0) not in self.covered
        self.pending.update(added)
        try:
            out = self.node(body)
        finally:
            for k in added:
                self.pending.pop(k, None)
        # a kernel may run several thread regions in a block, which read each other's
        # results: on one block, and on a grid within a block's tile (``T1(i) =
        # T0(i + 2)`` beside ``T0(j) = ..``, a tile of 3 j per block: the differential
        # fuzzer's find, where T1 read T0(2) before its thread wrote it).  Blocks never
        # wait for each other; the mapping keeps reads of another block's results
        # apart (``tiling/gpu.py``)
        if outer and not self.in_copy and self.threads() > 1:
            out.append(self.barrier())
        return out

    def distributed(self, n, it) -> list:
        kind, axis = self.pending.pop(it)
        d = self.dialect
        ident, count = (d.group_id(axis), d.num_groups(axis)) if kind == "block" else \
            (d.local_id(axis), d.local_size(axis))
        init, cond = isl_expr(n.for_get_init()), isl_expr(n.for_get_cond())
        step = isl_expr(n.for_get_inc())
        self.covered.add((kind, axis))
        self.iters.append(it)
        try:
            inner = self.node(n.for_get_body())
        finally:
            self.iters.pop()
            self.covered.discard((kind, axis))
            self.pending[it] = (kind, axis)
        header = (f"long {it} = {init} + {step} * (long){ident}", cond,
                  f"{it} += {step} * (long){count}")
        return [c.For(*header, c.Block(inner))]

    def guarded(self, stmts: list) -> list:
        """``stmts`` under ``id == 0`` for every axis of size > 1 not distributed here."""
        d, conds = self.dialect, []
        for a in range(3):
            if self.launch.grid[a] > 1 and ("block", a) not in self.covered:
                conds.append(f"{d.group_id(a)} == 0")
            if self.launch.block[a] > 1 and ("thread", a) not in self.covered:
                conds.append(f"{d.local_id(a)} == 0")
        if not conds:
            return stmts
        guard = [c.If(" && ".join(conds), c.Block(stmts))]
        # outside any thread-mapped loop (every thread of the block gets here): what
        # one thread runs may read what the others wrote just before, or write what
        # they read next; a barrier on each side
        if self.threads() > 1 and not any(kind == "thread" for kind, _ in self.covered):
            return [self.barrier()] + guard + [self.barrier()]
        return guard

    def threads(self) -> int:
        n = 1
        for b in self.launch.block:
            n *= b
        return n

    def barrier(self):
        return c.Statement(self.dialect.barrier) if self.threads() > 1 else c.Line("")

    def simd_loop(self, header, body) -> list:
        """The loops over an accumulator array of a register tile: unrolled, so that
        the array lives in registers (LLVM keeps an indexed array on the stack)."""
        return [c.Pragma("unroll"), c.For(*header, body)]

    def pragma(self, mark: str):
        return None

    def reduction_pragma(self, op: str, acc: str, is_float: bool = True):
        """The dialect's licence to reassociate a float reduction; none for an integer
        one, which LLVM vectorises without it (pocl's LLVM, forced on a Zen 4 over the 4
        steps of a reduction tile of ``dot4`` products, dropped the last rows' sums)."""
        return self.dialect.reduction_pragma if self.vectorize_reductions and is_float \
            else None

    # --- statements ----------------------------------------------------------------
    def user(self, n) -> list:
        call = n.user_get_expr()
        name = call.op_get_arg(0).id_get_id().get_name()
        if name.startswith("copy_"):
            tensor = name[len("copy_"):]
            subs = [f"({isl_expr(call.op_get_arg(i + 1))})"
                    for i in range(call.op_get_n_arg() - 1)]
            printer = ExprPrinter(self.scop.shapes, self.scop.env, {}, frozenset(), self.sites)
            src = printer.element(tensor, subs)
            return [c.Statement(f"{shared_element(tensor, subs, self.boxes[tensor])} = {src}")]
        from .cexpr import statement_code

        sst, printer = self.instance(n)
        return [c.Statement(statement_code(sst, printer).rstrip(";"))]

    def instance(self, user_node, at=None):
        sst, p = super().instance(user_node, at)
        return sst, GpuPrinter(self.dialect, self.shared, p.shapes, p.env, p.vars, p.guarded,
                               p.sites)

    # --- kernels -------------------------------------------------------------------
    def kernel(self, k: int, body) -> None:
        self.launch = self.launches[k]
        self.boxes = {t: list(s) for t, s in self.launch.shared}
        d = self.dialect
        decls = []
        for t, sizes in self.launch.shared:
            n = 1
            for x in sizes:
                n *= x
            decls.append(c.Line(d.shared_array(self.scop.program.tensor(t).dtype.c_name,
                                               shared_name(t), n)))
        code = decls + [c.Statement("int err = 0")] + self.node(body) + \
            [c.If("err", c.Statement(d.report_error("pt_err", "err")))]
        params = [c.Value("", p) for p in self.params] + \
            [c.Value("", d.pointer("int", "pt_err"))]
        self.emitted.add(self.launch.name)
        self.kernels.append(c.FunctionBody(
            c.FunctionDeclaration(c.Value(d.kernel_prefix(self.threads()), self.launch.name),
                                  params), c.Block(code)))

    def source(self, ast) -> str:
        """Every kernel of the program, after the dialect's prelude."""
        half = next((t for t in self.scop.program.tensors if t.dtype.is_half), None)
        if half is not None:
            raise UnsupportedError(
                f"'{half.name}' is {half.dtype}: 16-bit float tensors run on the C target "
                "only", getattr(half, "span", None), hint="use float tensors on a GPU target")
        self.node(ast)
        doubles = any(t.dtype.name == "float64" for t in self.scop.program.tensors) or \
            "double" in "".join(str(k) for k in self.kernels)
        kernels = "\n\n".join(str(k) for k in self.kernels) + "\n"
        helpers = div_helpers(kernels, q=self.dialect.function_prefix, zero="b == 0",
                              fail="*err = site") + \
            dot4_helper(kernels, q=self.dialect.function_prefix)  # err is the thread's own
        return self.dialect.prelude(doubles) + helpers + "\n" + kernels

