"""Contracted temporaries in C (see ``tiling/contract.py``): a buffer of the box one
parallel iteration touches, declared in the outlined body of that loop (on the thread's
stack), and accesses rebased to the box: ``pt_l_t[(idx_0 - off_0) * e_1 + ...]``."""
from __future__ import annotations

import re

import cgen as c
import islpy as isl


class Local:
    def __init__(self, decision, ctype: str, itemsize: int, ctx, isl_expr):
        f = decision.facts
        self.tensor, self.loop, self.extents = decision.subject, f["loop"], f["_extents"]
        self.name, self.ctype = f"pt_l_{self.tensor}", ctype
        #: a box too large for the stack: the tensor's own array at the thread's box
        #: (``tiling/contract._tiles``), whose iterations then touch only their thread's
        self.slot = f.get("slot") == "thread"
        if not self.slot:  # (rows padded past the array's own would overrun it)
            self.extents = _padded(self.extents, itemsize)
        self.itemsize = itemsize
        #: ``(tensor, C of its range's start at the next iteration, elements, the
        #: iterator of that iteration's loop)`` (``tiling/contract._source``) or None
        self.source = None
        if f.get("_source"):
            x, start, count = f["_source"]
            pa = isl.PwAff.read_from_str(ctx, start)
            self.source = (x, _c_of(pa, isl_expr), count,
                           f"c{pa.dim(isl.dim_type.in_) - 1}")
        #: statement -> per dimension, the box's first index as C over x0, x1, ...
        self.offsets = {s: [_c_of(isl.PwAff.read_from_str(ctx, o), isl_expr) for o in offs]
                        for s, offs in f["_offsets"]}

    def declarations(self) -> list:
        """The buffer, and the ``restrict`` pointer the code reads and writes it
        through: with the array itself, gcc kept the lane sums of a reduction over it
        (``pt_part``) in memory, a store and a load every step (a layer norm's
        variance), as if they might alias."""
        n = 1
        for e in self.extents:
            n *= e
        if self.slot:  # a stride of whole lines keeps the array's alignment
            at = f"{self.tensor} + (long)PT_THREAD() * {n}L"
            if n * self.itemsize % 64 == 0:
                at = f"__builtin_assume_aligned({at}, 64)"
            return [c.Statement(f"{self.ctype} *restrict {self.name} = {at}")]
        return [c.Statement(f"{self.ctype} {self.name}_s[{n}] __attribute__((aligned(64)))"),
                c.Statement(f"{self.ctype} *restrict {self.name} = "
                            f"__builtin_assume_aligned({self.name}_s, 64)")]

    def at(self, sst, vars: dict):
        """``(buffer, extents, offsets)`` for an instance of ``sst`` whose indices are
        the C expressions ``vars``."""
        def sub(m):
            return f"({vars[sst.vars[int(m.group(1))]]})"

        offs = [re.sub(r"\bx(\d+)\b", sub, o) for o in self.offsets[sst.name]]
        return self.name, self.extents, offs


def locals_of(decisions, scop, isl_expr) -> dict:
    """Tensor -> ``Local`` for the ``contract`` decisions."""
    types = {t.name: t.dtype for t in scop.program.temporaries}
    return {d.subject: Local(d, types[d.subject].c_name, types[d.subject].np_dtype.itemsize,
                             scop.ctx, isl_expr)
            for d in decisions if d.kind == "contract"}


def _padded(extents: tuple, itemsize: int, line: int = 64) -> tuple:
    """The box's extents with its rows (the last extent over 1, unless it is the only
    one) padded to whole cache lines when they span two or more: every row then starts
    on a line, and the vector loops over them do not split loads across lines (ResNet-18's
    max pooling reads its padded 113-wide planes with stride 2: 83 -> 56 us with rows
    of 128)."""
    dims = [k for k, e in enumerate(extents) if e > 1]
    if len(dims) < 2:
        return extents
    k, per = dims[-1], line // itemsize
    if extents[k] < 2 * per or extents[k] % per == 0:
        return extents
    return extents[:k] + (-(-extents[k] // per) * per,) + extents[k + 1:]


def _c_of(pa, isl_expr) -> str:
    """A piecewise affine expression of a statement's indices as C: the indices become
    parameters, so that isl's AST builder writes the expression (cases included)."""
    n = pa.dim(isl.dim_type.in_)
    pa = pa.move_dims(isl.dim_type.param, 0, isl.dim_type.in_, 0, n)  # named x0, x1, ...
    pa = pa.project_domain_on_params()
    build = isl.AstBuild.from_context(isl.Set.universe(pa.get_domain_space()))
    return isl_expr(build.expr_from_pw_aff(pa))


def thread_helper(code: str) -> str:
    """``PT_THREAD()``, the thread's number in its team (0 without OpenMP), for code
    that uses it."""
    if "PT_THREAD()" not in code:
        return ""
    return ("\n#ifdef _OPENMP\nint omp_get_thread_num(void);\n"
            "#define PT_THREAD() omp_get_thread_num()\n#else\n#define PT_THREAD() 0\n#endif\n")
