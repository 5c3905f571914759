"""The C target's runtime: ``CompiledKernel``, a program compiled to a shared object
for one set of sizes, loaded with cffi (``ffi.py``) and called on numpy arrays.

A call allocates the outputs (aligned; filled where the kernel reads them first), takes
temporaries from a pool and calls the C function; a non-zero return names the run-time
check that failed."""
from __future__ import annotations

import functools
import threading
import time

import numpy as np

from ..diagnostics import ArgumentError, PolytcError, user_boundary
from ..lang import sizes as S
from . import args as A
from . import placement
from .compiled import Specialised
from .ffi import Library, ffi
from .memory import aligned_copy, aligned_empty, aligned_zeros, allocator, is_aligned


@functools.lru_cache(maxsize=None)
def _pin_openmp():
    """Keep the OpenMP runtime loaded for the whole process.  Kernel libraries are its
    only users; when the last one is unloaded (at exit, by cffi) while OpenMP's worker
    threads still spin inside it, the process dies with SIGSEGV.  ctypes never unloads."""
    import ctypes

    from .. import config

    config.openmp_environment()  # before libgomp reads it
    for name in ("libgomp.so.1", "libomp.so", "libomp.so.5", "libiomp5.so"):
        try:
            return ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue
    return None


_THREADS = threading.local()


def set_threads(n: int) -> None:
    """The OpenMP team size of the parallel loops this thread starts from now on
    (``omp_set_num_threads``; a call only when it changes)."""
    if getattr(_THREADS, "n", None) == n:
        return
    lib = _pin_openmp()
    if lib is not None:
        lib.omp_set_num_threads(n)
    _THREADS.n = n


class CompiledKernel(Specialised):
    """A program compiled for one set of sizes.  ``stages`` holds the text of every
    stage: ``tc``, ``scop``, ``dependences``, ``schedule``, ``ast``, ``c``."""

    target = "c"

    def __init__(self, program, env, options, lib_path, meta, build=None):
        self._common(program, env, options, meta, build)
        from ..machine import threads

        # the team size of its parallel loops (the environment's at compile time, which
        # keys the kernel): set per calling thread, libgomp may have read another
        self.threads = threads(options.num_threads)
        self.align_inputs = tuple(meta.get("align_inputs", ()))
        self._local = set(meta.get("local_temps", ()))  # kept by the kernel itself
        #: the sizes the code takes as arguments (``Options.symbolic``), in order
        self.symbolic = tuple(meta.get("symbolic", ()))
        #: the tensor extents that may be negative at some sizes (``serves``; one of sizes
        #: with no negative part is at least one)
        self._signed = [d for t in program.tensors for d in t.shape
                        if not (isinstance(d, S.Lin) and d.const >= 0 and
                                all(k > 0 for _n, k in d.terms))]
        self._sizes: tuple = ()  # their values (``at``)
        self._shaped(env)
        self._copies: list = []  # free sets of aligned input buffers, likewise
        #: (input position, elements, function) per operand the kernel reads packed
        #: once, before it runs (``Options.constants``): ``prepack``
        self.prepacked = [tuple(p) for p in meta.get("prepacked", ())]
        self._packs = None  # (the constant inputs, their packed copies): ``packed_for``
        _pin_openmp()
        self._lib = Library(lib_path)
        nargs = len(program.inputs) + len(program.outputs) + len(self.temps) + \
            len(self.prepacked)
        self._fn = self._lib.function("polytc_kernel", ", ".join(
            ["long"] * len(self.symbolic) + ["void *"] * nargs) or "void")
        #: the same, its arguments in one array (the plan's executor, graph/native.py)
        self._argv = self._lib.function("polytc_kernel_argv", 1)
        self._buf = ffi.from_buffer

    def _shaped(self, env) -> None:
        """The outputs' and temporaries' shapes at the sizes ``env``."""
        program = self.program
        self.out_shapes = [t.extents(env) for t in program.outputs]
        self._allocs = [(allocator(s, d, f), s, d) for s, d, f in
                        zip(self.out_shapes, self.out_dtypes, self.out_fill)]
        self.temps = [(t.extents(env), t.dtype.np_dtype) for t in program.temporaries
                      if t.name not in self._local]
        self._scratch: list = []  # free sets of temporaries, reused across calls

    def serves(self, env) -> bool:
        """Whether the code is made for the sizes ``env``: the values of its symbolic
        sizes satisfy its assumptions (each at least 1, no tensor extent below 0; see
        ``poly.scop.Scop.context``), the other sizes are its own."""
        if any(env[n] != v for n, v in self.env.items() if n not in self.symbolic):
            return False
        return all(env[n] >= 1 for n in self.symbolic) and \
            all(S.evaluate(d, env) >= 0 for d in self._signed)

    def at(self, env) -> "CompiledKernel":
        """This kernel (compiled with symbolic sizes) for the sizes ``env`` of a call
        that it ``serves``: a view sharing the shared object, with its own output
        shapes, temporaries and size arguments."""
        if not self.symbolic:
            return self
        import copy

        view = copy.copy(self)
        view.env = dict(env)
        view._sizes = tuple(int(env[n]) for n in self.symbolic)
        view._copies = []
        view._packs = None
        view._shaped(env)
        return view

    # --- introspection -------------------------------------------------------------
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
    def prepack(self, inputs) -> list:
        """The packed copies of the constant inputs that the kernel takes after its
        temporaries (``prepacked``; only those positions of ``inputs`` are read): made
        once for inputs that never change, then passed to every ``run``."""
        out = []
        for i, n, fn in self.prepacked:
            src = np.ascontiguousarray(inputs[i], dtype=self.program.inputs[i].dtype.np_dtype)
            dst = aligned_empty((n,), src.dtype, always=True)
            self._lib.function(fn, 2, "void")(self._buf(src), self._buf(dst))
            out.append(dst)
        return out

    def packed_for(self, inputs) -> list:
        """``prepack(inputs)``, kept while the calls pass the same arrays as the constant
        inputs: ``Options.constants`` promises that their values never change, so only
        another array is packed again (an array changed in place is not read again).
        Packing at every call had cost more than the product it served: 16 x 256 x 1024
        against 1 MB of constant weights, 68 of its 130 us."""
        held = self._packs
        if held is not None and all(a is inputs[i] and a.shape == shape
                                    for (a, shape), (i, _, _) in zip(held[0], self.prepacked)):
            return held[1]
        packed = self.prepack(inputs)
        self._packs = ([(inputs[i], getattr(inputs[i], "shape", None))
                        for i, _, _ in self.prepacked], packed)
        return packed

    def run(self, inputs, outs: list | None = None, packed: list | None = None):
        """The outputs for ``inputs`` (written into ``outs`` when given); ``packed``:
        ``prepack(inputs)``, else ``packed_for``'s (of the arrays given, not of the
        aligned copies below, which are the same buffers at every call)."""
        if packed is None and self.prepacked:
            packed = self.packed_for(inputs)
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
            return self._run(inputs, outs, packed or ())
        finally:
            if copies is not None:
                self._copies.append(copies)

    def _run(self, inputs, outs, packed):
        if outs is None:
            try:
                outs = [alloc(s, d) for alloc, s, d in self._allocs]
            except (MemoryError, ValueError) as e:
                raise PolytcError(f"{self.program.name}: cannot allocate outputs of shapes "
                                  f"{self.out_shapes} ({e})") from None
        buf = self._buf
        set_threads(self.threads)
        placement.before(self.threads)
        if not self.temps:
            rc = self._fn(*self._sizes, *[buf(a) for a in inputs], *[buf(o) for o in outs],
                          *[buf(p) for p in packed])
        else:
            try:  # list.pop/append are atomic: the pool is safe when threads share a kernel
                scratch = self._scratch.pop()
            except IndexError:
                scratch = self._new_scratch()
            try:
                rc = self._fn(*self._sizes, *[buf(a) for a in inputs],
                              *[buf(o) for o in outs], *[buf(t) for t in scratch],
                              *[buf(p) for p in packed])
            finally:
                self._scratch.append(scratch)
        if rc:
            self._fail(rc)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _new_scratch(self) -> list:
        try:
            # aligned however small: a temporary kept in per-thread parts of its array
            # is stored to with aligned vector moves (``codegen_c/locals.py``); a 4 KB
            # row maximum at an address 16 past a line faulted (SIGSEGV)
            return [aligned_empty(s, d, fill=0, always=True) for s, d in self.temps]
        except (MemoryError, ValueError) as e:
            raise PolytcError(f"{self.program.name}: cannot allocate temporaries ({e})") \
                from None

    @user_boundary
    def benchmark(self, *args, repeat: int = 20, warmup: int = 2) -> dict:
        """Median and minimum seconds of the C function alone (no argument checks, no
        allocation): what the generated code costs, with the copies a call makes of the
        inputs it wants aligned where ``args`` are not (a kernel that wants the 4 MB
        weights of a product aligned copies them at every call: timed without the copy,
        ``polytc.autotune`` chose such options, 20% slower to call than the default)."""
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in (repeat, warmup)) \
                or repeat < 1 or warmup < 0:
            raise ArgumentError(f"benchmark takes repeat >= 1 and warmup >= 0 (ints), not "
                                f"repeat={repeat!r}, warmup={warmup!r}")
        given = A.as_arrays(self.program, args)
        env = A.bind_sizes(self.program, given)
        if not self.serves(env):  # (its code would read and write past these arrays)
            theirs = ", ".join(f"{n}={v}" for n, v in sorted(env.items()))
            ours = ", ".join(f"{n}={v}" for n, v in sorted(self.env.items())
                             if n not in self.symbolic)
            raise ArgumentError(f"benchmark: these inputs have the sizes {theirs}; this "
                                f"kernel of {self.program.name} was compiled for {ours}",
                                hint="kernel.specialize(*inputs).benchmark(*inputs)")
        if self.symbolic:
            return self.at(env)._benchmark(given, repeat, warmup)
        return self._benchmark(given, repeat, warmup)

    def _benchmark(self, given, repeat, warmup) -> dict:
        inputs = [a if i not in self.align_inputs or is_aligned(a) else aligned_copy(a)
                  for i, a in enumerate(given)]
        copies = [(inputs[i], a) for i, a in enumerate(given) if inputs[i] is not a]
        outs = [aligned_zeros(s, d) for s, d in zip(self.out_shapes, self.out_dtypes)]
        ptrs = list(self._sizes) + [self._buf(a) for a in inputs] + \
            [self._buf(o) for o in outs] + \
            [self._buf(t) for t in self._new_scratch()] + \
            [self._buf(p) for p in self.prepack(inputs)]
        set_threads(self.threads)
        placement.before(self.threads)
        for _ in range(warmup):
            self._fn(*ptrs)
        t = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            for dst, src in copies:
                np.copyto(dst, src)
            self._fn(*ptrs)
            t.append(time.perf_counter() - t0)
        t.sort()
        return {"median": t[len(t) // 2], "min": t[0]}
