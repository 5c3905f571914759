"""The OpenCL device runtime (pyopencl).

The device is the first GPU of any platform, else the first device (PoCL's CPU device
from ``pocl-binary-distribution``); ``POLYTC_OPENCL_DEVICE`` picks another by index
(``"1"``) or by a substring of its name.  Inputs may be ``pyopencl.array.Array``s on that
device's context; a call with device inputs returns device outputs (no copy to the host).
"""
from __future__ import annotations

import threading
import warnings

import numpy as np

from .. import config
from ..diagnostics import CompilationError, PolytcError
from .accel import AcceleratorKernel

_LOCK = threading.Lock()
_STATE: dict = {}


def _cl():
    try:
        import pyopencl as cl
        import pyopencl.array  # noqa: F401
    except ImportError as e:  # pragma: no cover - a declared dependency
        raise PolytcError(f"the opencl target needs pyopencl ({e})",
                          hint="pip install pyopencl pocl-binary-distribution") from None
    return cl


def _state() -> dict:
    with _LOCK:
        if "broken" in _STATE:
            raise _STATE["broken"]
        if not _STATE:
            cl = _cl()
            try:
                devices = [d for p in cl.get_platforms() for d in p.get_devices()]
            except cl.Error as e:
                devices = []
                config.log(1, f"OpenCL: no platform ({e})")
            if not devices:
                raise PolytcError("no OpenCL device found",
                                  hint="pip install pocl-binary-distribution for a CPU "
                                       "device, or install your GPU's OpenCL driver")
            want = config.opencl_device()
            if want:
                chosen = [d for i, d in enumerate(devices)
                          if want == str(i) or want.lower() in d.name.lower()]
                if not chosen:
                    raise PolytcError(
                        f"POLYTC_OPENCL_DEVICE={want!r} matches no OpenCL device",
                        hint="devices: " + "; ".join(f"{i}: {d.name}"
                                                     for i, d in enumerate(devices)))
            else:
                chosen = [d for d in devices if d.type & cl.device_type.GPU] or devices
            dev = chosen[0]
            ctx = cl.Context([dev])
            try:
                _probe(cl, ctx, dev)
            except PolytcError as e:
                _STATE["broken"] = e  # asked again: the same answer, not another build
                raise
            _STATE.update(cl=cl, device=dev, context=ctx, queue=cl.CommandQueue(ctx))
            config.log(1, f"OpenCL device: {dev.name} ({dev.platform.name})")
        return _STATE


def _probe(cl, ctx, dev):
    """Build a one-line kernel: a device whose compiler cannot build anything (pocl 3's
    LLVM names a CPU newer than itself 'generic' and then fails every build with
    "unknown target CPU") is no device, and the opencl target is not available."""
    try:
        cl.Program(ctx, "__kernel void pt_probe(__global float *a) { a[0] = 1.0f; }").build()
    except cl.Error as e:
        why = next((ln.strip() for ln in str(e).splitlines() if "error" in ln.lower()),
                   str(e).splitlines()[0] if str(e) else type(e).__name__)
        raise PolytcError(f"the OpenCL device {dev.name!r} cannot build kernels: {why}",
                          hint="POLYTC_OPENCL_DEVICE picks another device; a newer OpenCL "
                               "driver may know this CPU") from None


def device():
    from ..tiling.gpu import Device

    s = _state()
    d, cl = s["device"], s["cl"]
    return Device(kind="gpu" if d.type & cl.device_type.GPU else "cpu", name=d.name,
                  compute_units=d.max_compute_units, max_block=d.max_work_group_size,
                  local_memory=min(d.local_mem_size, 1 << 20))


def device_key() -> dict:
    d = _state()["device"]
    return {"device": d.name, "driver": d.driver_version, "platform": d.platform.version,
            **device().key()}


def compile_check(source: str):
    return _program(source)


_PROGRAMS: dict = {}


def _program(source: str):
    prog = _PROGRAMS.get(source)
    if prog is not None:
        return prog
    s = _state()
    cl = s["cl"]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prog = cl.Program(s["context"], source).build(options=["-w"])
    except cl.Error as e:
        raise CompilationError(
            f"the OpenCL compiler failed on generated code:\n{str(e)[:4000]}",
            hint="this is a polytc bug: report it with POLYTC_DEBUG=2 output") from None
    _PROGRAMS[source] = prog
    return prog


class Compiled(AcceleratorKernel):
    target = "opencl"

    def load(self, source):
        s = _state()
        self.cl, self.queue = s["cl"], s["queue"]
        prog = _program(source)
        if "pool" not in s:  # buffers are recycled, not created per call
            import pyopencl.tools as tools

            s["pool"] = tools.MemoryPool(tools.ImmediateAllocator(self.queue))
        self.pool = s["pool"]
        self.kernels = {l["name"]: self.cl.Kernel(prog, l["name"]) for l in self.launches}

    def is_device_array(self, a) -> bool:
        return isinstance(a, self.cl.array.Array)

    def upload(self, a):
        a = np.ascontiguousarray(a).reshape(np.shape(a))
        if not a.size:  # an empty buffer cannot be created; nothing reads it
            return self.cl.array.empty(self.queue, 1, a.dtype, allocator=self.pool)
        return self.cl.array.to_device(self.queue, a, allocator=self.pool)

    def empty(self, shape, dtype, like=""):
        n = 1
        for s in shape:
            n *= s
        arr = self.cl.array.empty(self.queue, max(n, 1), dtype, allocator=self.pool)
        return arr if n == 0 else arr.reshape(shape)

    def fill(self, buf, value):
        buf.fill(value)

    def launch(self, launch, args):
        grid, block = launch["grid"], launch["block"]
        gsize = tuple(g * b for g, b in zip(grid, block))
        self.kernels[launch["name"]](self.queue, gsize, tuple(block),
                                     *[a.data for a in args])

    def download(self, buf, into=None):
        if into is not None:
            buf.get(queue=self.queue, ary=into)
            return into
        return buf.get(queue=self.queue)

    def synchronize(self):
        self.queue.finish()
