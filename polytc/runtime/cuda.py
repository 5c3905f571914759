"""The CUDA device runtime (pycuda, the optional extra ``polytc[cuda]``).

Kernels are compiled by nvcc to PTX for the GPU's compute capability (kept in the disk
cache) and loaded with ``pycuda.driver.module_from_buffer`` into the device's primary
context, which PyTorch and CuPy share.  Inputs may be device arrays: pycuda
``GPUArray``s, or any object with ``__cuda_array_interface__`` or DLPack on a CUDA
device (PyTorch, CuPy); outputs then stay on the device, as tensors of the same library
where it is PyTorch or CuPy, else as ``GPUArray``s.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from ..diagnostics import PolytcError
from .accel import AcceleratorKernel

_LOCK = threading.Lock()
_STATE: dict = {}
_KDLCUDA = 2


def _state() -> dict:
    with _LOCK:
        if not _STATE:
            try:
                import pycuda.driver as drv
                import pycuda.gpuarray as gpuarray
            except ImportError as e:
                raise PolytcError(f"the cuda target needs pycuda to run kernels ({e})",
                                  hint="pip install 'polytc[cuda]' on a machine with an "
                                       "NVIDIA GPU") from None
            try:
                drv.init()
                if drv.Device.count() == 0:
                    raise PolytcError("no CUDA device found")
                dev = drv.Device(0)
                ctx = dev.retain_primary_context()
                ctx.push()
            except drv.Error as e:
                raise PolytcError(f"CUDA is not usable here ({e})") from None
            _STATE.update(drv=drv, gpuarray=gpuarray, device=dev, context=ctx)
        return _STATE


def default_device():
    """The device the cost model assumes where no GPU is present (source generation and
    PTX compilation in CI): an H100-class GPU."""
    from .. import config
    from ..tiling.gpu import Device

    return Device(kind="gpu", name=f"compute_{config.cuda_arch()}", compute_units=132,
                  max_block=1024, local_memory=48 * 1024)


def _arch() -> str:
    major, minor = _state()["device"].compute_capability()
    return f"{major}{minor}"


def device():
    from ..tiling.gpu import Device

    s = _state()
    d, a = s["device"], s["drv"].device_attribute
    return Device(kind="gpu", name=d.name(),
                  compute_units=d.get_attribute(a.MULTIPROCESSOR_COUNT),
                  max_block=d.get_attribute(a.MAX_THREADS_PER_BLOCK),
                  local_memory=d.get_attribute(a.MAX_SHARED_MEMORY_PER_BLOCK))


def device_key() -> dict:
    s = _state()
    return {"device": s["device"].name(), "arch": _arch(),
            "driver": s["drv"].get_driver_version(), **device().key()}


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
    return ptx(source)


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
    if hasattr(a, "gpudata"):
        return int(a.gpudata), a
    if hasattr(a, "__cuda_array_interface__"):
        return int(a.__cuda_array_interface__["data"][0]), a
    return _dlpack_pointer(a)


def _library(a) -> str:
    mod = type(a).__module__ or ""
    return "torch" if mod.startswith("torch") else "cupy" if mod.startswith("cupy") else ""


class Compiled(AcceleratorKernel):
    target = "cuda"

    def load(self, source):
        s = _state()
        self.drv, self.gpuarray = s["drv"], s["gpuarray"]
        module = self.drv.module_from_buffer(ptx(source).encode())
        self.functions = {l["name"]: module.get_function(l["name"]) for l in self.launches}

    def library(self, inputs) -> str:
        return next((_library(a) for a in inputs if self.is_device_array(a)), "")

    def is_device_array(self, a) -> bool:
        return hasattr(a, "gpudata") or hasattr(a, "__cuda_array_interface__") or (
            hasattr(a, "__dlpack_device__") and not isinstance(a, np.ndarray))

    def upload(self, a):
        return self.gpuarray.to_gpu(np.ascontiguousarray(a).reshape(np.shape(a)))

    def empty(self, shape, dtype, like=""):
        if like == "torch":
            import torch

            t = getattr(torch, np.dtype(dtype).name if dtype != np.bool_ else "bool")
            return torch.empty(shape, dtype=t, device="cuda")
        if like == "cupy":
            import cupy

            return cupy.empty(shape, dtype)
        return self.gpuarray.empty(shape, dtype)

    def fill(self, buf, value):
        if hasattr(buf, "fill_"):  # torch
            buf.fill_(value)
        else:
            buf.fill(np.asarray(value, buf.dtype)[()])

    def launch(self, launch, args):
        ptrs, keep = [], []
        for a in args:
            p, owner = pointer(a)
            ptrs.append(np.uintp(p))
            keep.append(owner)
        self.functions[launch["name"]](*ptrs, block=tuple(launch["block"]),
                                       grid=tuple(launch["grid"]))

    def download(self, buf, into=None):
        if hasattr(buf, "get"):
            host = buf.get() if not hasattr(buf, "gpudata") else buf.get(ary=into)
        elif hasattr(buf, "cpu"):
            host = buf.cpu().numpy()
        else:
            host = np.asarray(buf)
        if into is not None and host is not into:
            np.copyto(into, host)
            return into
        return host

    def synchronize(self):
        self.drv.Context.synchronize()
