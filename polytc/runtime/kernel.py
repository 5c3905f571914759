"""``Kernel`` (what ``polytc.tc`` returns) and ``CompiledKernel`` (one specialisation).

A call looks up the signature (shapes and dtypes) in the kernel's in-memory table; on a
hit it allocates the outputs and calls the loaded C function, nothing else.  On a miss
it checks the arguments, then looks in the process-wide table and the on-disk cache
(content-addressed: canonical program, sizes, dtypes, options, target, compiler and
polytc's own source), and only then runs the pipeline and gcc.
"""
from __future__ import annotations

import functools
import json

import numpy as np
import threading
import time


from .. import config
from ..display import wrap
from ..diagnostics import KernelRuntimeError, PolytcError, user_boundary
from ..lang import program as P
from ..options import Options
from . import args as A
from .cache import DiskCache, cache_key
from .memory import aligned_copy, aligned_zeros, allocator, is_aligned

TARGET = "c"
_PROCESS: dict = {}  # disk key -> CompiledKernel, shared by all Kernel objects
_PIPELINE_LOCK = threading.RLock()


@functools.lru_cache(maxsize=None)
def _ffi(nargs: int):
    """A cffi FFI declaring ``int polytc_kernel(void *, ...)`` with ``nargs`` pointers.
    cffi's ABI mode (dlopen) calls a kernel in ~0.8 us where ctypes takes ~4 us."""
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(f"int polytc_kernel({', '.join(['void *'] * nargs) or 'void'});")
    return ffi


@functools.lru_cache(maxsize=None)
def _pin_openmp():
    """Keep the OpenMP runtime loaded for the whole process.  Kernel libraries are its
    only users; when the last one is unloaded (at exit, by cffi) while OpenMP's worker
    threads still spin inside it, the process dies with SIGSEGV.  ctypes never unloads."""
    import ctypes

    for name in ("libgomp.so.1", "libomp.so", "libomp.so.5", "libiomp5.so"):
        try:
            return ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue
    return None


class Specialised:
    """What a program compiled for one set of sizes shows, on any target."""

    target = "c"

    def __repr__(self):
        sizes = ", ".join(f"{k}={v}" for k, v in self.env.items())
        return f"<CompiledKernel {self.program.name} [{sizes}] target={self.target}>"

    def _repr_html_(self) -> str:
        from ..display import stages_html

        sizes = ", ".join(f"{k}={v}" for k, v in self.env.items())
        return stages_html(self.stages, f"{self.program.name} [{sizes}] target={self.target}")


class CompiledKernel(Specialised):
    """A program compiled for one set of sizes.  ``stages`` holds the text of every
    stage: ``tc``, ``scop``, ``dependences``, ``schedule``, ``ast``, ``c``."""

    def __init__(self, program, env, options, lib_path, meta, build=None):
        self.program, self.env, self.options = program, env, options
        self.stages: dict = wrap(meta["stages"])  # text that shows as HTML
        self.sites: list = meta["sites"]
        self.timings: dict = meta.get("timings", {})
        self.out_shapes = [tuple(s) for s in meta["out_shapes"]]
        self.out_dtypes = [t.dtype.np_dtype for t in program.outputs]
        self.align_inputs = tuple(meta.get("align_inputs", ()))
        #: per output, what every element holds before the kernel runs (None: anything;
        #: see ``pipeline.p_initial_values``)
        self.out_fill = meta["out_fill"]
        self._allocs = [(allocator(s, d, f), s, d) for s, d, f in
                        zip(self.out_shapes, self.out_dtypes, self.out_fill)]
        self._build = build  # the isl objects when compiled in this process
        self.temps = [(t.extents(env), t.dtype.np_dtype) for t in program.temporaries]
        self._scratch: list = []  # free sets of temporaries, reused across calls
        self._copies: list = []  # free sets of aligned input buffers, likewise
        ffi = _ffi(len(program.inputs) + len(program.outputs) + len(program.temporaries))
        _pin_openmp()
        self._lib = ffi.dlopen(lib_path)
        self._fn = self._lib.polytc_kernel
        self._buf = ffi.from_buffer

    # --- introspection -------------------------------------------------------------
    @property
    def code(self) -> str:
        return self.stages["c"]

    @property
    def schedule(self) -> str:
        return self.stages["schedule"]

    @property
    def scop(self) -> str:
        return self.stages["scop"]

    @property
    def dependences(self) -> str:
        return self.stages["dependences"]

    def explain(self, vectorizer: bool = True, source: str | None = None):
        """Why the compiler did what it did for these sizes (``polytc.explain``):
        fusion, parallel loops, tiles, vectorisation, with the isl facts behind them.
        ``vectorizer``: also ask gcc which loops it vectorised (one more compile)."""
        from ..explain import explain

        if source is None:
            source = "your Options" if self.options.tile or self.options.register_tile \
                else "the cost model"
        return explain(self.program, self.env, self.options, source, vectorizer)

    # --- running -------------------------------------------------------------------
    def run(self, inputs, outs: list | None = None):
        copies = None
        for i in self.align_inputs:
            if not is_aligned(inputs[i]):
                if copies is None:  # aligned buffers reused across calls: no page faults
                    try:
                        copies = self._copies.pop()
                    except IndexError:
                        copies = {}
                    inputs = list(inputs)
                buf = copies.get(i)
                if buf is None:
                    buf = copies[i] = aligned_copy(inputs[i])
                else:
                    np.copyto(buf, inputs[i])
                inputs[i] = buf
        try:
            return self._run(inputs, outs)
        finally:
            if copies is not None:
                self._copies.append(copies)

    def _run(self, inputs, outs):
        if outs is None:
            try:
                outs = [alloc(s, d) for alloc, s, d in self._allocs]
            except (MemoryError, ValueError) as e:
                raise PolytcError(f"{self.program.name}: cannot allocate outputs of shapes "
                                  f"{self.out_shapes} ({e})") from None
        buf = self._buf
        if not self.temps:
            rc = self._fn(*[buf(a) for a in inputs], *[buf(o) for o in outs])
        else:
            try:  # list.pop/append are atomic: the pool is safe when threads share a kernel
                scratch = self._scratch.pop()
            except IndexError:
                scratch = self._new_scratch()
            try:
                rc = self._fn(*[buf(a) for a in inputs], *[buf(o) for o in outs],
                              *[buf(t) for t in scratch])
            finally:
                self._scratch.append(scratch)
        if rc:
            self._fail(rc)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _new_scratch(self) -> list:
        try:
            return [aligned_zeros(s, d) for s, d in self.temps]
        except (MemoryError, ValueError) as e:
            raise PolytcError(f"{self.program.name}: cannot allocate temporaries ({e})") \
                from None

    def _fail(self, rc):
        if rc < 0 or rc > len(self.sites):
            raise PolytcError(f"{self.program.name}: the kernel failed (code {rc})")
        msg = self.sites[rc - 1]
        raise KernelRuntimeError(msg)

    def benchmark(self, *args, repeat: int = 20, warmup: int = 2) -> dict:
        """Median and minimum seconds of the C function alone (no argument checks, no
        allocation): what the generated code costs."""
        inputs = [a if i not in self.align_inputs or is_aligned(a) else aligned_copy(a)
                  for i, a in enumerate(A.as_arrays(self.program, args))]
        outs = [aligned_zeros(s, d) for s, d in zip(self.out_shapes, self.out_dtypes)]
        ptrs = [self._buf(a) for a in inputs] + [self._buf(o) for o in outs] + \
            [self._buf(t) for t in self._new_scratch()]
        for _ in range(warmup):
            self._fn(*ptrs)
        t = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            self._fn(*ptrs)
            t.append(time.perf_counter() - t0)
        t.sort()
        return {"median": t[len(t) // 2], "min": t[0]}


class Kernel:
    """A checked program, compiled on demand for the sizes of each call."""

    def __init__(self, program: P.Program, options: Options | None = None,
                 target: str = "c"):
        from .targets import check

        self.program = program
        self.target = check(target)
        self.options = options or Options()
        self._explicit = options is not None  # autotuning hook: else tuned options apply
        self._table: dict = {}  # signature -> CompiledKernel

    def __repr__(self):
        where = "" if self.target == "c" else f" target={self.target}"
        return f"<polytc.Kernel {self.program.name}{where}>"

    def __str__(self):
        return str(self.program)

    def _repr_markdown_(self):
        return self.program._repr_markdown_()

    def with_options(self, options: Options | None = None, **changes) -> "Kernel":
        """A new kernel with other options (this one is unchanged)."""
        base = options or self.options
        return Kernel(self.program, base.replace(**changes) if changes else base, self.target)

    @user_boundary
    def schedule(self, *args, start: str = "isl"):
        """A ``polytc.Schedule`` to change by hand, for the sizes of these inputs:
        ``start="isl"`` isl's schedule (before tiling), ``"program"`` each statement its
        own loop nest.  ``kernel.with_schedule(s)`` compiles with the result."""
        from ..poly.recipe import Schedule

        env = A.bind_sizes(self.program, A.as_arrays(self.program, args))
        return Schedule.start(self.program, env, start, self.options.fusion)

    @user_boundary
    def explain(self, *args, vectorizer: bool = True):
        """Why the compiler did what it did for the sizes of these inputs: which
        statements were fused, which loops run in parallel, the tiles and where their
        sizes came from, what was vectorised (see ``CompiledKernel.explain``)."""
        if self.target != "c":
            raise PolytcError(f"explain() describes the C target's decisions; this kernel "
                              f"targets '{self.target}'", hint="kernel.to('c').explain(...)")
        ck = self._specialize(A.as_arrays(self.program, args))
        source = None
        if not self._explicit:
            from . import tuning

            if tuning.lookup(self.program, ck.env, target=self.target) is not None:
                source = "the tuning cache (polytc.autotune)"
        return ck.explain(vectorizer, source)

    def with_schedule(self, schedule) -> "Kernel":
        """A new kernel compiled with the hand schedule ``schedule`` (its steps replay,
        checked, for the sizes of each call); this kernel is unchanged."""
        from ..poly.recipe import Schedule

        if not isinstance(schedule, Schedule):
            raise PolytcError(f"with_schedule takes a polytc.Schedule, got "
                              f"{type(schedule).__name__}", hint="kernel.schedule(*inputs)")
        if str(schedule.program) != str(self.program):
            raise PolytcError(f"this schedule was made for '{schedule.program.name}', "
                              f"not for '{self.program.name}'")
        k = self.with_options(schedule=schedule.steps)
        k._explicit = True
        return k

    def to(self, target: str) -> "Kernel":
        """The same program and options on another target (``c``, ``opencl``, ``cuda``);
        this kernel is unchanged."""
        k = Kernel(self.program, self.options, target)
        k._explicit = self._explicit
        return k

    def __call__(self, *args, out=None):
        # the fast path: the signature (shape, strides, dtype) of contiguous arrays seen
        # before maps straight to the loaded function; nothing else is checked or built
        try:
            ck = self._table.get(tuple(_signature(a) for a in args))
        except AttributeError:  # Python scalars for 0-d inputs, host tensors of other libraries
            ck = None
        if ck is not None and out is None:
            try:
                return ck.run(args)
            except PolytcError as e:  # a fault detected by the kernel
                raise e.with_traceback(None) from None
        return self._call_slow(args, out)

    @user_boundary
    def _call_slow(self, args, out):
        inputs = A.as_arrays(self.program, args, device_arrays=self.target != "c")
        ck = self._specialize(inputs)
        outs = None if out is None else A.check_out(self.program, out, ck.out_shapes, inputs)
        if all(a is b for a, b in zip(args, inputs)):  # right dtypes, contiguous
            try:
                self._table[tuple(_signature(a) for a in args)] = ck
            except AttributeError:
                pass
        return ck.run(inputs, outs)

    @user_boundary
    def specialize(self, *args) -> CompiledKernel:
        """The compiled form for these inputs' sizes (compiling if needed)."""
        return self._specialize(A.as_arrays(self.program, args))

    def _specialize(self, inputs) -> CompiledKernel:
        env = A.bind_sizes(self.program, inputs)
        text, options = str(self.program), self.options
        # --- autotuning hook: a kernel created without options uses the options that
        # polytc.autotune stored for this program, sizes and machine (runtime/tuning.py)
        if not self._explicit:
            from . import tuning

            options = tuning.lookup(self.program, env, text=text, target=self.target) or options
        # --- end of the autotuning hook
        if self.target == "c":
            key = cache_key(program=text, sizes=env, options=options.key(), target=TARGET)
        else:
            from .targets import backend

            be = backend(self.target)
            key = cache_key(program=text, sizes=env, options=options.key(),
                            target=self.target, device=be.device_key())
        ck = _PROCESS.get(key)
        if ck is None:
            if self.target == "c":
                ck = _load_or_build(self.program, env, options, key)
            else:
                from .accel import load_or_build

                ck = load_or_build(self.program, env, options, key, self.target, be)
            _PROCESS[key] = ck
        return ck


def _signature(a) -> tuple:
    """What the fast path compares: shape, strides and dtype of a numpy (or pyopencl)
    array, or the CUDA array interface of a device array (PyTorch, CuPy, pycuda)."""
    try:
        return a.shape, a.strides, a.dtype
    except AttributeError:
        cai = a.__cuda_array_interface__  # AttributeError: no fast path for it
        return tuple(cai["shape"]), cai.get("strides"), cai["typestr"], type(a)


def _load_or_build(program, env, options, key) -> CompiledKernel:
    made = []

    def build():
        b, so_bytes, meta = _build(program, env, options)
        made.append(b)
        config.log(1, f"compiled {program.name} {env} in "
                      f"{sum(meta['timings'].values()) * 1e3:.0f} ms")
        return {"kernel.so": so_bytes}, meta

    entry, built = DiskCache().get_or_build(key, build)
    if not built:
        config.log(1, f"{program.name} {env}: loaded from the disk cache")
    return CompiledKernel(program, env, options, f"{entry['dir']}/kernel.so", entry["meta"],
                          made[0] if made else None)


def _build(program, env, options):
    from ..codegen_c.compiler import build_shared_object
    from . import pipeline

    with _PIPELINE_LOCK:  # isl's context is not thread-safe; gcc runs concurrently
        b = pipeline.run(program, env, options)
    t0 = time.perf_counter()
    so = build_shared_object(b.code, {"name": program.name})
    b.timings["gcc"] = time.perf_counter() - t0
    with open(so, "rb") as f:
        so_bytes = f.read()
    sites = [f"{span.location()}: {what} ({program.name}, sizes {env})\n{span.quote()}"
             if span is not None else what for span, what in b.sites]
    meta = {"stages": b.stages, "sites": sites, "timings": b.timings,
            "align_inputs": _align_inputs(program, b),
            "out_fill": [b.fills.get(t.name) for t in program.outputs],
            "out_shapes": [t.extents(env) for t in program.outputs],
            "options": json.loads(options.to_json())}
    return b, so_bytes, meta


def _align_inputs(program, b) -> list:
    """Inputs of a register-tiled contraction whose every element is reused at least 16
    times: only then does an aligned copy pay for itself (a matrix-vector product reads
    each element once, and the copy would cost as much as the kernel)."""
    from .pipeline import statement_points

    out = set()
    for entry in b.tiling:
        if entry[0] != "contraction":
            continue
        sst = next(s for s in b.scop.stmts if s.name == entry[1])
        points = statement_points(sst, b.env)
        for e in P.reads(sst.stmt.rhs):
            if len(e.indices) >= 2:
                size = 1
                for d in b.scop.shapes[e.tensor]:
                    size *= d
                if points >= 16 * size:
                    out.add(e.tensor)
    return [i for i, t in enumerate(program.inputs) if t.name in out]
