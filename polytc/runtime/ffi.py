"""Calling compiled C from Python: cffi's ABI mode without its C parser.

``cffi.FFI().cdef`` parses declarations with pycparser, whose import alone takes ~20 ms
and each ``cdef`` a few more: paid again by every process that loads a model from the
disk cache (ResNet-18's 21 kernels and its driver: ~45 ms of a 0.25 s load).  The
backend's own FFI (``_cffi_backend.FFI``, what cffi's out-of-line modules use) parses
C type names itself, and ``load_library(...).load_function(type, name)`` looks a
function up by the type it is given; the calls are the same ~0.8 us cffi calls (ctypes
takes ~4 us)."""
from __future__ import annotations

import functools

import _cffi_backend

#: the process's FFI: ``new``, ``cast``, ``from_buffer``, ``typeof`` of C type names
ffi = _cffi_backend.FFI()


@functools.lru_cache(maxsize=None)
def function_type(params: int | str, result: str = "int"):
    """``result (*)(params)``; an ``int`` is that many ``void *`` parameters."""
    if isinstance(params, int):
        params = ", ".join(["void *"] * params) or "void"
    return ffi.typeof(f"{result}(*)({params})")


class Library:
    """A shared object opened with ``dlopen`` (``RTLD_NOW``); its functions are looked up
    with their parameters (``function_type``).  The object keeps the library loaded."""

    def __init__(self, path: str):
        self._lib = _cffi_backend.load_library(path)

    def function(self, name: str, params: int | str, result: str = "int"):
        return self._lib.load_function(function_type(params, result), name)
