"""The targets, by name: ``c`` (always), ``opencl`` (pyopencl) and ``cuda`` (pycuda,
nvcc).  Adding a target touches its code generator package, its runtime file and this
registry."""
from __future__ import annotations

import importlib

from ..diagnostics import PolytcError

TARGETS = ("c", "opencl", "cuda")
_DIALECTS = {"opencl": "polytc.codegen_opencl", "cuda": "polytc.codegen_cuda"}
_RUNTIMES = {"opencl": "polytc.runtime.opencl", "cuda": "polytc.runtime.cuda"}


def check(target: str) -> str:
    if target not in TARGETS:
        raise PolytcError(f"unknown target {target!r}", hint=f"choose one of {', '.join(TARGETS)}")
    return target


def dialect(target: str):
    """The GPU emitter's dialect of an accelerator target."""
    return importlib.import_module(_DIALECTS[check(target)]).DIALECT


def backend(target: str):
    """The runtime module of an accelerator target."""
    return importlib.import_module(_RUNTIMES[check(target)])


def available(target: str) -> bool:
    """Whether kernels of ``target`` can run in this process."""
    if check(target) == "c":
        return True
    try:
        backend(target).device()  # finds the device, or says why there is none
        return True
    except PolytcError:
        return False
