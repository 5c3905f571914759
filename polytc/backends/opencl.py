"""The OpenCL target (pyopencl; PoCL's CPU device where there is no GPU)."""
from __future__ import annotations

from ..codegen_opencl import DIALECT
from ..runtime import opencl
from .accelerator import Accelerator


class OpenCL(Accelerator):
    name = "opencl"
    dialect = DIALECT
    runtime = opencl


BACKEND = OpenCL()
