"""The CUDA dialect of the GPU emitter (``codegen_c/gpu.py``) and the nvcc driver.

Kernels are ``extern "C" __global__`` with ``__launch_bounds__`` of their block and
``__restrict__`` pointers; shared memory is ``__shared__``.  ``compile_ptx`` runs nvcc to
PTX, which needs no GPU: CI compiles every conformance kernel this way.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import tempfile

from .. import config
from ..codegen_c.cexpr import literal as c_literal
from ..diagnostics import CompilationError
from ..lang.types import FLOAT64

_PRELUDE = """\
#include <stdint.h>
#include <math.h>
#define PT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PT_MAX(a, b) ((a) > (b) ? (a) : (b))
__device__ static inline long pt_chk(long i, long n, int site, int *err) {
  if (i < 0 || i >= n) { *err = site; return 0; }
  return i;
}
"""

_AXES = "xyz"


class Cuda:
    name = "cuda"
    barrier = "__syncthreads()"
    function_prefix = "__device__ static inline"
    reduction_pragma = None  # one thread's reduction is a scalar loop

    def prelude(self, doubles: bool) -> str:
        return _PRELUDE

    def pointer(self, ctype, name, const=False) -> str:
        return f"{'const ' if const else ''}{ctype} *__restrict__ {name}"

    def kernel_prefix(self, threads: int) -> str:
        return f'extern "C" __global__ void __launch_bounds__({threads})'

    def shared_array(self, ctype, name, n) -> str:
        return f"__shared__ {ctype} {name}[{n}];"

    def group_id(self, a):
        return f"blockIdx.{_AXES[a]}"

    def num_groups(self, a):
        return f"gridDim.{_AXES[a]}"

    def local_id(self, a):
        return f"threadIdx.{_AXES[a]}"

    def local_size(self, a):
        return f"blockDim.{_AXES[a]}"

    def report_error(self, buf, err) -> str:
        return f"atomicCAS({buf}, 0, {err})"

    def literal(self, value, t) -> str:
        return c_literal(value, t)

    def math(self, name, t) -> str:
        return name if t == FLOAT64 else name + "f"

    def __repr__(self):
        return "CUDA"


DIALECT = Cuda()


def nvcc_command() -> list:
    cmd = shlex.split(config.nvcc())
    if not cmd:
        raise CompilationError("POLYTC_NVCC is set but empty", hint="install the CUDA toolkit")
    return cmd


def compile_ptx(source: str, arch: str | None = None, timeout: float = 120) -> str:
    """PTX for ``compute_<arch>`` (default ``POLYTC_CUDA_ARCH``) from CUDA source."""
    arch = arch or config.cuda_arch()
    with tempfile.TemporaryDirectory(prefix="polytc-cuda-") as d:
        src = os.path.join(d, "kernel.cu")
        with open(src, "w", encoding="utf-8") as f:
            f.write(source)
        cmd = nvcc_command() + ["-ptx", f"-arch=compute_{arch}", "-O3", "-o", "kernel.ptx",
                                "kernel.cu"]
        try:
            r = subprocess.run(cmd, cwd=d, capture_output=True, text=True, errors="replace",
                               timeout=timeout)
        except FileNotFoundError:
            raise CompilationError(f"CUDA compiler {cmd[0]!r} not found",
                                   hint="install the CUDA toolkit or set POLYTC_NVCC") from None
        except subprocess.TimeoutExpired:
            raise CompilationError(f"nvcc timed out after {timeout:.0f} s",
                                   hint="this is a polytc bug") from None
        if r.returncode != 0:
            text = (r.stderr + r.stdout).strip().splitlines()
            raise CompilationError(
                "nvcc failed on generated code:\n" + "\n".join(text[:40]),
                hint="this is a polytc bug: report it with POLYTC_DEBUG=2 output")
        with open(os.path.join(d, "kernel.ptx"), encoding="utf-8") as f:
            return f.read()


def nvcc_available() -> bool:
    try:
        r = subprocess.run(nvcc_command() + ["--version"], capture_output=True, timeout=60)
        return r.returncode == 0
    except (OSError, subprocess.TimeoutExpired, CompilationError):
        return False
