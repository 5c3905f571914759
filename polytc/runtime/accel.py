"""What the accelerator runtimes (``opencl.py``, ``cuda.py``) share: the compiled form
of a program for one set of sizes, and one call.

A runtime module provides ``device()`` (a ``tiling.gpu.Device``), ``device_key()``,
``compile_check(source)`` (raises ``CompilationError``) and a ``Compiled`` subclass of
``AcceleratorKernel`` with the device operations (``upload``, ``empty``, ``fill``,
``launch``, ``download``, ``is_device_array``); ``backends/opencl.py`` and
``backends/cuda.py`` plug them into the pipeline and the disk cache.
"""
from __future__ import annotations

import time

import numpy as np

from ..diagnostics import PolytcError
from .compiled import Specialised


class AcceleratorKernel(Specialised):
    """A program compiled for one set of sizes on an accelerator.  ``stages`` as for the
    C target, with ``mapping`` and the kernel source under the target's name."""

    target = "?"

    def __init__(self, program, env, options, meta, build=None):
        self._common(program, env, options, meta, build)
        self.launches = meta["launches"]
        #: per temporary, what every element holds before the kernel runs (None: anything)
        self.temps = [(t.extents(env), t.dtype.np_dtype, f)
                      for t, f in zip(program.temporaries, meta["temp_fill"])]
        self._scratch: list = []
        self.load(self.stages[self.target])

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
            # the fault word is cleared and read back (which waits for the launches) only
            # where a run-time check can set it: else a call with device inputs and
            # outputs returns once its kernels are queued, as PyTorch's calls do
            fills = [f for _, _, f in self.temps] + [0 if self.sites else None]
            for buf, fill in zip(scratch, fills):
                if fill is not None:
                    self.fill(buf, fill)
            for launch in self.launches:
                self.launch(launch, args + douts + scratch)
            rc = int(self.download(scratch[-1])[0]) if self.sites else 0
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
