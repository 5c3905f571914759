"""What the accelerator runtimes (``opencl.py``, ``cuda.py``) share: building through the
pipeline and the disk cache, the compiled form's introspection, and one call.

A backend module provides ``device()`` (a ``tiling.gpu.Device``), ``device_key()``,
``compile_check(source)`` (raises ``CompilationError``) and a ``Compiled`` subclass of
``AcceleratorKernel`` with the device operations (``upload``, ``empty``, ``fill``,
``launch``, ``download``, ``is_device_array``).
"""
from __future__ import annotations

import json
import time

import numpy as np

from .. import config
from ..display import wrap
from ..diagnostics import KernelRuntimeError, PolytcError
from .cache import DiskCache
from .kernel import Specialised


def build(program, env, options, target: str, backend):
    """Run the pipeline for ``target``; returns ``(build, meta)``."""
    from ..tiling.gpu import Launch
    from . import pipeline
    from .kernel import _PIPELINE_LOCK

    with _PIPELINE_LOCK:
        b = pipeline.run(program, env, options, target, backend.device())
    t0 = time.perf_counter()
    backend.compile_check(b.code)
    b.timings["device_compile"] = time.perf_counter() - t0
    sites = [f"{span.location()}: {what} ({program.name}, sizes {env})\n{span.quote()}"
             if span is not None else what for span, what in b.sites]
    meta = {"stages": b.stages, "sites": sites, "timings": b.timings,
            "launches": [Launch.to_json(l) for l in b.launches],
            "temp_fill": [b.fills.get(t.name) for t in program.temporaries],
            "out_fill": [b.fills.get(t.name) for t in program.outputs],
            "out_shapes": [t.extents(env) for t in program.outputs],
            "options": json.loads(options.to_json())}
    return b, meta


def load_or_build(program, env, options, key, target, backend):
    made = []

    def make():
        b, meta = build(program, env, options, target, backend)
        made.append(b)
        config.log(1, f"compiled {program.name} {env} for {target} in "
                      f"{sum(meta['timings'].values()) * 1e3:.0f} ms")
        return {"kernel.src": b.code.encode()}, meta

    entry, _ = DiskCache().get_or_build(key, make)
    return backend.Compiled(program, env, options, entry["meta"], made[0] if made else None)


class AcceleratorKernel(Specialised):
    """A program compiled for one set of sizes on an accelerator.  ``stages`` as for the
    C target, with ``mapping`` and the kernel source under the target's name."""

    target = "?"

    def __init__(self, program, env, options, meta, build=None):
        self.program, self.env, self.options = program, env, options
        self.stages: dict = wrap(meta["stages"])  # text that shows as HTML
        self.sites: list = meta["sites"]
        self.timings: dict = meta.get("timings", {})
        self.launches = meta["launches"]
        self.out_shapes = [tuple(s) for s in meta["out_shapes"]]
        self.out_dtypes = [t.dtype.np_dtype for t in program.outputs]
        #: per output and temporary, what every element holds before the kernel runs
        #: (None: anything; see ``pipeline.p_initial_values``)
        self.out_fill = meta["out_fill"]
        self.temps = [(t.extents(env), t.dtype.np_dtype, f)
                      for t, f in zip(program.temporaries, meta["temp_fill"])]
        self._build = build
        self._scratch: list = []
        self.load(self.stages[self.target])

    @property
    def code(self) -> str:
        return self.stages[self.target]

    @property
    def schedule(self) -> str:
        return self.stages["schedule"]

    # --- one call ------------------------------------------------------------------
    def run(self, inputs, outs: list | None = None):
        """Inputs may be host or device arrays; with a device input (and no ``outs``,
        which are host arrays) the outputs stay on the device.  ``outs`` whose contents
        the kernel reads are uploaded first."""
        on_device = any(self.is_device_array(a) for a in inputs)
        like = self.library(inputs)
        args = [a if self.is_device_array(a) else self.upload(a) for a in inputs]
        try:
            douts = [self._output(s, d, f, into, like) for s, d, f, into in
                     zip(self.out_shapes, self.out_dtypes, self.out_fill,
                         outs or [None] * len(self.out_fill))]
        except (MemoryError, ValueError) as e:
            raise PolytcError(f"{self.program.name}: cannot allocate outputs of shapes "
                              f"{self.out_shapes} ({e})") from None
        try:  # temporaries and the fault word, reused across calls
            scratch = self._scratch.pop()
        except IndexError:
            scratch = [self.empty(s, d) for s, d, _ in self.temps] + \
                [self.empty((1,), np.int32)]
        try:
            for buf, (_, _, fill) in zip(scratch, self.temps + [(0, 0, 0)]):
                if fill is not None:
                    self.fill(buf, fill)
            for launch in self.launches:
                self.launch(launch, args + douts + scratch)
            rc = int(self.download(scratch[-1])[0])
        finally:
            self._scratch.append(scratch)
        if rc:
            self._fail(rc)
        if on_device and outs is None:
            result = douts
        else:
            result = [self.download(o, into) if 0 not in shape else
                      (into if into is not None else np.empty(shape, dtype))
                      for o, into, shape, dtype in
                      zip(douts, outs or [None] * len(douts), self.out_shapes, self.out_dtypes)]
        return result[0] if len(result) == 1 else tuple(result)

    def _output(self, shape, dtype, fill, into, like):
        """The device buffer of one output: ``into`` (the host ``out=`` array) uploaded
        when the kernel reads its initial contents, else a fresh buffer, filled when the
        kernel reads it (``fill``)."""
        if fill is not None and into is not None:
            return self.upload(into)
        buf = self.empty(shape, dtype, like)
        if fill is not None:
            self.fill(buf, fill)
        return buf

    def library(self, inputs) -> str:
        """Which array library device outputs should belong to ("" for the runtime's)."""
        return ""

    def _fail(self, rc):
        if rc < 0 or rc > len(self.sites):
            raise PolytcError(f"{self.program.name}: the kernel failed (code {rc})")
        raise KernelRuntimeError(self.sites[rc - 1])

    def benchmark(self, *args, repeat: int = 20, warmup: int = 2) -> dict:
        """Median and minimum seconds of the kernel launches alone (data on the device)."""
        from . import args as A

        inputs = [self.upload(a) for a in A.as_arrays(self.program, args)]
        outs = [self._output(s, d, 0, None, "") for s, d in
                zip(self.out_shapes, self.out_dtypes)]
        scratch = [self._output(s, d, 0, None, "") for s, d, _ in self.temps]
        ptrs = inputs + outs + scratch + [self._output((1,), np.int32, 0, None, "")]
        t = []
        for i in range(warmup + repeat):
            self.synchronize()
            t0 = time.perf_counter()
            for launch in self.launches:
                self.launch(launch, ptrs)
            self.synchronize()
            if i >= warmup:
                t.append(time.perf_counter() - t0)
        t.sort()
        return {"median": t[len(t) // 2], "min": t[0]}
