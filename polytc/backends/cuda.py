"""The CUDA target (nvcc to PTX, pycuda to load and launch)."""
from __future__ import annotations

from ..codegen_cuda import DIALECT
from ..runtime import cuda
from .accelerator import Accelerator


class Cuda(Accelerator):
    name = "cuda"
    dialect = DIALECT
    runtime = cuda


BACKEND = Cuda()
