"""The CUDA device runtime: the driver API through ctypes (``cuda_driver.py``; the NVIDIA
driver's ``libcuda`` is all it needs).

Kernels are compiled by nvcc to PTX for the GPU's compute capability (kept in the disk
cache) and loaded by the driver into the device's primary context, which PyTorch and
CuPy share; they run on the default stream.  Inputs may be device arrays: any object
with ``__cuda_array_interface__`` or DLPack on a CUDA device (PyTorch, CuPy, pycuda,
polytc's own ``DeviceArray``); outputs then stay on the device, as tensors of the same
library where it is PyTorch or CuPy, else as ``DeviceArray``s.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from .. import config
from ..diagnostics import PolytcError
from . import cuda_driver as CD
from .accel import AcceleratorKernel
from .cuda_driver import DeviceArray, Driver

_LOCK = threading.Lock()
_STATE: dict = {}
_KDLCUDA = 2


def _state() -> dict:
    with _LOCK:
        if "broken" in _STATE:
            raise _STATE["broken"]
        if not _STATE:
            try:
                lib = ctypes.CDLL(config.cuda_driver())
            except OSError as e:
                _STATE["broken"] = PolytcError(
                    f"the cuda target needs the NVIDIA driver's libcuda ({e})",
                    hint="on a machine with an NVIDIA GPU and its driver; "
                         "POLYTC_CUDA_DRIVER names another library")
                raise _STATE["broken"] from None
            try:
                drv = Driver(lib)
            except PolytcError as e:
                _STATE["broken"] = PolytcError(f"CUDA is not usable here ({e.message})")
                raise _STATE["broken"] from None
            _STATE["drv"] = drv
            config.log(1, f"CUDA device: {drv.name()} (driver {drv.version()})")
        return _STATE


def to_device(a) -> DeviceArray:
    """A host array copied to the GPU (a ``DeviceArray``)."""
    a = np.asarray(a)
    return DeviceArray(_state()["drv"], a.shape, a.dtype).set(a)


def default_device():
    """The device the cost model assumes where no GPU is present (source generation and
    PTX compilation in CI): an H100-class GPU."""
    from .. import config
    from ..tiling.gpu import Device

    return Device(kind="gpu", name=f"compute_{config.cuda_arch()}", compute_units=132,
                  max_block=1024, local_memory=48 * 1024)


def _arch() -> str:
    major, minor = _state()["drv"].capability()
    return f"{major}{minor}"


def device():
    from ..tiling.gpu import Device

    d = _state()["drv"]
    return Device(kind="gpu", name=d.name(),
                  compute_units=d.attribute(CD.MULTIPROCESSOR_COUNT),
                  max_block=d.attribute(CD.MAX_THREADS_PER_BLOCK),
                  local_memory=d.attribute(CD.MAX_SHARED_MEMORY_PER_BLOCK))


def device_key() -> dict:
    d = _state()["drv"]
    return {"device": d.name(), "arch": _arch(), "driver": d.version(), **device().key()}


def ptx(source: str) -> str:
    """PTX for this GPU, from the disk cache when it was compiled before."""
    from ..codegen_cuda import compile_ptx, nvcc_command
    from ..cache import DiskCache, cache_key

    arch = _arch()
    key = cache_key(kind="ptx", source=source, arch=arch, nvcc=nvcc_command())
    entry, _ = DiskCache().get_or_build(key, lambda: (
        {"kernel.ptx": compile_ptx(source, arch).encode()}, {"arch": arch}))
    with open(f"{entry['dir']}/kernel.ptx", encoding="utf-8") as f:
        return f.read()


def compile_check(source: str):
    if not _state()["drv"].emulated:  # an emulator compiles the source as it loads it
        ptx(source)


# --- device arrays ------------------------------------------------------------------------
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int),
                ("dtype", ctypes.c_uint32), ("shape", ctypes.c_void_p),
                ("strides", ctypes.c_void_p), ("byte_offset", ctypes.c_uint64)]


def _dlpack_pointer(a) -> tuple:
    """(pointer, capsule) of a DLPack tensor on a CUDA device; the capsule must be kept
    alive while the pointer is used (it is not consumed, so its owner frees nothing)."""
    cap = a.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    t = _DLTensor.from_address(get(cap, b"dltensor"))
    if t.device.device_type != _KDLCUDA:
        raise PolytcError("a DLPack input of the cuda target must be on a CUDA device")
    return t.data + t.byte_offset, cap


def pointer(a) -> tuple:
    """(device pointer, what keeps it alive) of a device array."""
    if type(a) is DeviceArray:
        return a.ptr, a
    if _library(a) == "torch":  # a C call; its array interface is built in Python
        return a.data_ptr(), a
    if hasattr(a, "__cuda_array_interface__"):
        return int(a.__cuda_array_interface__["data"][0]), a
    return _dlpack_pointer(a)


def _library(a) -> str:
    mod = type(a).__module__ or ""
    return "torch" if mod.startswith("torch") else "cupy" if mod.startswith("cupy") else ""


class Compiled(AcceleratorKernel):
    target = "cuda"

    def load(self, source):
        self.drv = _state()["drv"]
        image = source if self.drv.emulated else ptx(source)  # an emulator runs source
        self.functions = self.drv.functions(image, [l["name"] for l in self.launches])

    def library(self, inputs) -> str:
        return next((_library(a) for a in inputs if self.is_device_array(a)), "")

    def is_device_array(self, a) -> bool:
        if type(a) is DeviceArray:
            return True
        if _library(a) == "torch":
            return a.is_cuda
        return hasattr(a, "__cuda_array_interface__") or (
            hasattr(a, "__dlpack_device__") and not isinstance(a, np.ndarray))

    def upload(self, a):
        return to_device(a)

    def empty(self, shape, dtype, like=""):
        if like == "torch":
            import torch

            t = getattr(torch, np.dtype(dtype).name if dtype != np.bool_ else "bool")
            return torch.empty(shape, dtype=t, device="cuda")
        if like == "cupy":
            import cupy

            return cupy.empty(shape, dtype)
        return DeviceArray(self.drv, shape, dtype)

    def fill(self, buf, value):
        if hasattr(buf, "fill_"):  # torch
            buf.fill_(value)
        else:
            buf.fill(np.asarray(value, buf.dtype)[()])

    def launch(self, launch, args):
        ptrs = [pointer(a) for a in args]  # (pointer, owner): the owners live until launched
        self.drv.launch(self.functions[launch["name"]], launch["grid"], launch["block"],
                        [p for p, _ in ptrs])

    def download(self, buf, into=None):
        if isinstance(buf, DeviceArray):
            host = buf.get(into)
        elif hasattr(buf, "get"):  # CuPy
            host = buf.get()
        elif hasattr(buf, "cpu"):
            host = buf.cpu().numpy()
        else:
            host = np.asarray(buf)
        if into is not None and host is not into:
            np.copyto(into, host)
            return into
        return host

    def synchronize(self):
        self.drv.synchronize()
