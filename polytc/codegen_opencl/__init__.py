"""The OpenCL C dialect of the GPU emitter (``codegen_c/gpu.py``).

Kernels take ``__global`` pointers; ids are ``get_group_id``/``get_local_id``; shared
memory is ``__local``; math functions are overloaded (``exp``, not ``expf``).
"""
from __future__ import annotations

from ..diagnostics import UnsupportedError
from ..codegen_c.cexpr import literal as c_literal

_PRELUDE = """\
typedef char int8_t; typedef uchar uint8_t; typedef short int16_t; typedef ushort uint16_t;
typedef int int32_t; typedef uint uint32_t; typedef long int64_t; typedef ulong uint64_t;
#define PT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PT_MAX(a, b) ((a) > (b) ? (a) : (b))
static inline long pt_chk(long i, long n, int site, int *err) {
  if (i < 0 || i >= n) { *err = site; return 0; }
  return i;
}
"""


class OpenCL:
    name = "opencl"
    barrier = "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)"
    function_prefix = "static inline"
    #: a loop-level licence to reassociate (LLVM vectorises a reduction it forces), the
    #: counterpart of the C target's ``omp simd reduction``
    reduction_pragma = "clang loop vectorize(enable)"

    def prelude(self, doubles: bool) -> str:
        ext = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if doubles else ""
        return ext + _PRELUDE

    def pointer(self, ctype, name, const=False) -> str:
        return f"__global {'const ' if const else ''}{ctype} *restrict {name}"

    def kernel_prefix(self, threads: int) -> str:
        return "__kernel void"

    def shared_array(self, ctype, name, n) -> str:
        return f"__local {ctype} {name}[{n}];"

    def group_id(self, a):
        return f"get_group_id({a})"

    def num_groups(self, a):
        return f"get_num_groups({a})"

    def local_id(self, a):
        return f"get_local_id({a})"

    def local_size(self, a):
        return f"get_local_size({a})"

    def report_error(self, buf, err) -> str:
        return f"atomic_cmpxchg((volatile __global int *){buf}, 0, {err})"

    def literal(self, value, t) -> str:
        if t.name == "int64":  # OpenCL C has no long long: L is 64 bits
            v = int(value)
            return f"({v + 1}L - 1)" if v == -(1 << 63) else f"{v}L"
        if t.name == "uint64":
            return f"{int(value)}UL"
        return c_literal(value, t)

    def math(self, name, t) -> str:
        if name in ("j0", "j1", "y0", "y1"):
            raise UnsupportedError(f"the builtin '{name}' is not supported by OpenCL",
                                   hint="use the c or cuda target")
        return name

    def __repr__(self):
        return "OpenCL"


DIALECT = OpenCL()
