"""The CUDA driver API through ctypes: ``libcuda``, which every NVIDIA driver installs,
is all the cuda target needs at run time (no pycuda, whose only distribution is a
source build against the CUDA toolkit).  The few calls polytc makes: the device and its
attributes, the primary context (the one PyTorch and CuPy use), PTX modules, launches on
the default stream, and device memory (``DeviceArray``).

Every call checks its ``CUresult`` and raises a ``PolytcError`` naming the call and the
driver's error name (``CUDA_ERROR_...``)."""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from ..diagnostics import PolytcError

# CUdevice_attribute, CUjit_option
MAX_THREADS_PER_BLOCK, MAX_SHARED_MEMORY_PER_BLOCK, MULTIPROCESSOR_COUNT = 1, 8, 16
COMPUTE_CAPABILITY_MAJOR, COMPUTE_CAPABILITY_MINOR = 75, 76
_JIT_ERROR_LOG_BUFFER, _JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 5, 6
_LOG = 16384

_P, _U, _I, _S = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_size_t
_U64 = ctypes.c_uint64
#: name -> argument types (every function returns a CUresult)
_SIGNATURES = {
    "cuInit": [_U], "cuDriverGetVersion": [ctypes.POINTER(_I)],
    "cuDeviceGetCount": [ctypes.POINTER(_I)], "cuDeviceGet": [ctypes.POINTER(_I), _I],
    "cuDeviceGetName": [ctypes.c_char_p, _I, _I],
    "cuDeviceGetAttribute": [ctypes.POINTER(_I), _I, _I],
    "cuDevicePrimaryCtxRetain": [ctypes.POINTER(_P), _I], "cuCtxSetCurrent": [_P],
    "cuCtxSynchronize": [],
    "cuModuleLoadDataEx": [ctypes.POINTER(_P), ctypes.c_char_p, _U,
                           ctypes.POINTER(_I), ctypes.POINTER(_P)],
    "cuModuleGetFunction": [ctypes.POINTER(_P), _P, ctypes.c_char_p],
    "cuLaunchKernel": [_P, _U, _U, _U, _U, _U, _U, _U, _P, ctypes.POINTER(_P), _P],
    "cuMemAlloc_v2": [ctypes.POINTER(_U64), _S], "cuMemFree_v2": [_U64],
    "cuMemcpyHtoD_v2": [_U64, _P, _S], "cuMemcpyDtoH_v2": [_P, _U64, _S],
    "cuMemsetD8_v2": [_U64, ctypes.c_ubyte, _S], "cuMemsetD16_v2": [_U64, ctypes.c_ushort, _S],
    "cuMemsetD32_v2": [_U64, _U, _S],
    "cuGetErrorName": [_I, ctypes.POINTER(ctypes.c_char_p)],
}


class Driver:
    """libcuda with device 0's primary context, made current in each thread that calls."""

    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib
        for name, args in _SIGNATURES.items():
            try:
                f = getattr(lib, name)
            except AttributeError:
                raise PolytcError(f"{lib._name} is no CUDA driver (it has no {name})") \
                    from None
            f.argtypes, f.restype = args, _I
        self._current = threading.local()
        #: a driver that runs CUDA source on the host (tests/cuda_emulator.c), not PTX
        self.emulated = hasattr(lib, "polytc_cuda_emulator")
        self.call("cuInit", 0)
        count = _I()
        self.call("cuDeviceGetCount", ctypes.byref(count))
        if count.value == 0:
            raise PolytcError("no CUDA device found")
        dev, ctx = _I(), _P()
        self.call("cuDeviceGet", ctypes.byref(dev), 0)
        self.call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
        self.device, self.context = dev.value, ctx

    def call(self, name: str, *args) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc:
            raise PolytcError(f"CUDA: {name} failed with {self.error_name(rc)}")

    def error_name(self, rc: int) -> str:
        s = ctypes.c_char_p()
        if self.lib.cuGetErrorName(rc, ctypes.byref(s)) or not s.value:
            return f"error {rc}"
        return s.value.decode()

    def enter(self) -> None:
        """Make the primary context current in this thread (once per thread)."""
        if not getattr(self._current, "set", False):
            self.call("cuCtxSetCurrent", self.context)
            self._current.set = True

    # --- the device ----------------------------------------------------------------------
    def attribute(self, attr: int) -> int:
        v = _I()
        self.call("cuDeviceGetAttribute", ctypes.byref(v), attr, self.device)
        return v.value

    def name(self) -> str:
        buf = ctypes.create_string_buffer(256)
        self.call("cuDeviceGetName", buf, 256, self.device)
        return buf.value.decode()

    def version(self) -> int:
        v = _I()
        self.call("cuDriverGetVersion", ctypes.byref(v))
        return v.value

    def capability(self) -> tuple:
        return (self.attribute(COMPUTE_CAPABILITY_MAJOR),
                self.attribute(COMPUTE_CAPABILITY_MINOR))

    # --- modules and launches ------------------------------------------------------------
    def functions(self, ptx: str, names) -> dict:
        """The kernels ``names`` of a PTX module (the driver compiles it for the device;
        its compiler's log is in the error where it fails)."""
        self.enter()
        log = ctypes.create_string_buffer(_LOG)
        opts = (_I * 2)(_JIT_ERROR_LOG_BUFFER, _JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
        vals = (_P * 2)(ctypes.cast(log, _P), _P(_LOG))
        module = _P()
        rc = self.lib.cuModuleLoadDataEx(ctypes.byref(module), ptx.encode(), 2, opts, vals)
        if rc:
            raise PolytcError(f"CUDA: the driver cannot load the PTX ({self.error_name(rc)})"
                              + (f": {log.value.decode(errors='replace')}" if log.value else ""))
        out = {}
        for n in names:
            f = _P()
            self.call("cuModuleGetFunction", ctypes.byref(f), module, n.encode())
            out[n] = f
        return out

    def launch(self, function, grid, block, pointers) -> None:
        """One launch on the default stream; ``pointers``: the kernel's arguments, all
        device pointers."""
        self.enter()
        vals = [_U64(p) for p in pointers]
        params = (_P * max(1, len(vals)))(*[ctypes.addressof(v) for v in vals])
        g, b = (list(grid) + [1, 1, 1])[:3], (list(block) + [1, 1, 1])[:3]
        self.call("cuLaunchKernel", function, *g, *b, 0, None, params, None)

    def synchronize(self) -> None:
        self.enter()
        self.call("cuCtxSynchronize")


class DeviceArray:
    """A C-contiguous array in device memory, freed with the object (``base``: the array
    whose memory a view shares, None where it is its own); others read it through
    ``__cuda_array_interface__`` (``torch.as_tensor``, ``cupy.asarray``)."""

    def __init__(self, driver: Driver, shape, dtype, base: DeviceArray | None = None):
        self.driver, self.shape, self.dtype = driver, tuple(int(n) for n in shape), \
            np.dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = self.size * self.dtype.itemsize
        self.ptr, self.base = 0, base
        if base is not None:
            self.ptr = base.ptr
        else:  # an empty array has memory too: a kernel whose index check failed reads
            driver.enter()  # element 0 of it before the run raises (a null pointer
            p = _U64()  # faulted, the process with it)
            driver.call("cuMemAlloc_v2", ctypes.byref(p), max(self.nbytes, 64))
            self.ptr = p.value

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "strides": None, "version": 3}

    def reshape(self, *shape) -> DeviceArray:
        """The same memory in another shape (one extent may be -1), as numpy's."""
        dims = list(shape[0] if len(shape) == 1 and not np.isscalar(shape[0]) else shape)
        if dims.count(-1) == 1:
            rest = int(np.prod([n for n in dims if n != -1], dtype=np.int64))
            dims[dims.index(-1)] = self.size // rest if rest else 0
        if int(np.prod(dims, dtype=np.int64)) != self.size or min(dims, default=0) < 0:
            raise ValueError(f"cannot reshape a DeviceArray of size {self.size} into shape "
                             f"{tuple(shape)}")
        return DeviceArray(self.driver, dims, self.dtype, self.base or self)

    def view(self, dtype) -> DeviceArray:
        """The same memory as another dtype of the same width."""
        if np.dtype(dtype).itemsize != self.dtype.itemsize:
            raise ValueError(f"a DeviceArray of {self.dtype} cannot be viewed as {dtype}")
        return DeviceArray(self.driver, self.shape, dtype, self.base or self)

    def __del__(self):
        if self.ptr and self.base is None:
            try:  # (the collector may run this in a thread of its own)
                self.driver.enter()
                self.driver.lib.cuMemFree_v2(self.ptr)
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass
            self.ptr = 0

    def __repr__(self) -> str:
        return f"<polytc DeviceArray {self.shape} {self.dtype}>"

    def set(self, host: np.ndarray) -> DeviceArray:
        host = np.ascontiguousarray(host, self.dtype)
        if self.nbytes:
            self.driver.enter()
            self.driver.call("cuMemcpyHtoD_v2", self.ptr, host.ctypes.data, self.nbytes)
        return self

    def get(self, ary: np.ndarray | None = None) -> np.ndarray:
        """The contents on the host (into ``ary`` where given, C-contiguous)."""
        out = np.empty(self.shape, self.dtype) if ary is None else ary
        if self.nbytes:
            self.driver.enter()
            self.driver.call("cuMemcpyDtoH_v2", out.ctypes.data, self.ptr, self.nbytes)
        return out

    def fill(self, value) -> None:
        bits = np.asarray(value, self.dtype).reshape(1)
        width = self.dtype.itemsize
        if not self.nbytes:
            return
        if width in (1, 2, 4):
            word = int(bits.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[width])[0])
            self.driver.enter()
            self.driver.call(f"cuMemsetD{8 * width}_v2", self.ptr, word, self.size)
        else:
            self.set(np.full(self.shape, bits[0], self.dtype))
