"""``Kernel``: what ``polytc.tc`` returns, a checked program compiled on demand for the
sizes of each call, on one target.

A call looks up the signature (shapes, strides and dtypes) in the kernel's own table; on a
hit it runs the loaded kernel, nothing else.  On a miss it checks the arguments, binds the
sizes, applies options from the tuning cache (a kernel made without options), and asks
the target's backend for the compiled form: the process-wide table, then the on-disk
cache (content-addressed: canonical program, sizes, dtypes, options, target, device,
compiler and polytc's own source), and only then the pipeline and the compiler
(``backends/base.py``).
"""
from __future__ import annotations

import weakref

import numpy as np

from . import backends
from .backends.base import forget_loaded
from .cache import DiskCache
from .diagnostics import PolytcError, user_boundary
from .lang import program as P
from .lang import sizes as S
from .options import Options
from .poly.recipe import Schedule
from .runtime import args as A
from .runtime import tuning
from .runtime.compiled import Specialised

_KERNELS: "weakref.WeakSet[Kernel]" = weakref.WeakSet()  # for clear_cache()
#: the most sizes the "auto" policy keeps symbolic (more varied: every size specialised)
AUTO_MOST = 2


def clear_cache(disk: bool = True) -> int:
    """Forget every compiled kernel: the loaded kernels of this process (the next call of
    any kernel compiles, or loads from disk, again) and, with ``disk``, the on-disk cache
    (``POLYTC_CACHE_DIR``; the tuning cache stays).  Returns the number of disk entries
    removed.  Kernels already returned by ``specialize`` keep working."""
    forget_loaded()
    for k in list(_KERNELS):
        for table in (k._table, k._sized, k._generic_kernels):
            table.clear()
    return DiskCache().clear() if disk else 0


class Kernel:
    """A checked program, compiled on demand for the sizes of each call.

    ``dynamic`` is the size policy (docs/dynamic.md): ``"auto"`` specialises each size to
    the value of the call until a call brings another value, after which that size stays
    symbolic (one kernel serves all its values); a sequence of size names keeps those
    symbolic from the first call; ``()`` specialises every size to every call."""

    def __init__(self, program: P.Program, options: Options | None = None,
                 target: str = backends.DEFAULT, dynamic="auto"):
        if not isinstance(program, P.Program):
            raise PolytcError(f"polytc.Kernel takes a checked program, not a "
                              f"{type(program).__name__}",
                              hint="polytc.tc(text) makes the kernel of TC text")
        if options is not None and not isinstance(options, Options):
            raise PolytcError(f"options must be a polytc.Options, not a "
                              f"{type(options).__name__}")
        self.program = program
        self.target = backends.check(target)
        self.backend = backends.get(self.target)
        self.options = options or Options()
        self.dynamic = _policy(program, dynamic)
        for n in self.options.symbolic:
            _policy(program, (n,))  # an unknown name is an error here, not later
        inputs = [t.name for t in program.inputs]
        for field in ("constants", "aligned"):
            unknown = [n for n in getattr(self.options, field) if n not in inputs]
            if unknown:
                raise PolytcError(f"Options.{field} names {unknown[0]!r}, which is not an "
                                  f"input of {program.name}",
                                  hint=f"its inputs: {', '.join(inputs) or '(none)'}")
        self._explicit = options is not None  # autotuning hook: else tuned options apply
        self._table: dict = {}  # signature -> loaded kernel (runtime.compiled.Specialised)
        self._sized: dict = {}  # the sizes' items -> the kernel specialised to them
        self._first: dict = {}  # size -> its value at the first call ("auto")
        self._varied: set = set()  # sizes seen at two values ("auto")
        #: (symbolic sizes, the others' values) -> the loaded kernel that serves them
        self._generic_kernels: dict = {}
        _KERNELS.add(self)

    def __repr__(self):
        where = "" if self.target == backends.DEFAULT else f" target={self.target}"
        return f"<polytc.Kernel {self.program.name}{where}>"

    def __str__(self):
        return str(self.program)

    def _repr_markdown_(self):
        return self.program._repr_markdown_()

    @user_boundary
    def with_options(self, options: Options | None = None, **changes) -> "Kernel":
        """A new kernel with other options (this one is unchanged)."""
        if options is not None and not isinstance(options, Options):
            raise PolytcError(f"with_options takes a polytc.Options (or changes by name), "
                              f"not a {type(options).__name__}")
        base = options or self.options
        return Kernel(self.program, base.replace(**changes) if changes else base, self.target,
                      self.dynamic)

    @user_boundary
    def schedule(self, *args, start: str = "isl"):
        """A ``polytc.Schedule`` to change by hand, for the sizes of these inputs:
        ``start="isl"`` isl's schedule (before tiling), ``"program"`` each statement its
        own loop nest.  ``kernel.with_schedule(s)`` compiles with the result."""
        from .compiler import pipeline

        env = A.bind_sizes(self.program, A.as_arrays(self.program, args))
        base = pipeline.run(self.program, env, Options(), until="dependences")
        return Schedule.start(base, start, self.options.fusion)

    @user_boundary
    def explain(self, *args, vectorizer: bool = True):
        """Why the compiler did what it did for the sizes of these inputs: which
        statements were fused, which loops run in parallel, the tiles and where their
        sizes came from, what was vectorised (see ``CompiledKernel.explain``)."""
        if not self.backend.host:
            raise PolytcError(f"explain() describes the C target's decisions; this kernel "
                              f"targets '{self.target}'", hint="kernel.to('c').explain(...)")
        inputs = A.as_arrays(self.program, args)
        ck = self._specialize(inputs)
        source = None
        if not self._explicit:
            if tuning.lookup(self.program, ck.env, target=self.target) is not None:
                source = "the tuning cache (polytc.autotune)"
        out = ck.explain(vectorizer, source)
        if getattr(ck, "symbolic", ()):  # what the generality costs at these sizes
            from .explain import Fact

            spec = self._specialised(dict(ck.env))
            g, t = (min(k.benchmark(*inputs, repeat=10)["median"] for _ in range(3))
                    for k in (ck, spec))
            out.facts.append(Fact("sizes", f"At these sizes the generic kernel takes "
                                  f"{g * 1e6:.1f} us and one specialised to them "
                                  f"{t * 1e6:.1f} us ({g / t:.2f}x; the C function alone, "
                                  "medians)."))
        return out

    @user_boundary
    def with_schedule(self, schedule) -> "Kernel":
        """A new kernel compiled with the hand schedule ``schedule`` (its steps replay,
        checked, for the sizes of each call); this kernel is unchanged."""
        if not isinstance(schedule, Schedule):
            raise PolytcError(f"with_schedule takes a polytc.Schedule, got "
                              f"{type(schedule).__name__}", hint="kernel.schedule(*inputs)")
        if str(schedule.program) != str(self.program):
            raise PolytcError(f"this schedule was made for '{schedule.program.name}', "
                              f"not for '{self.program.name}'")
        k = self.with_options(schedule=schedule.steps)
        k._explicit = True
        return k

    @user_boundary
    def to(self, target: str) -> "Kernel":
        """The same program and options on another target (``c``, ``opencl``, ``cuda``);
        this kernel is unchanged."""
        k = Kernel(self.program, self.options, target, self.dynamic)
        k._explicit = self._explicit
        return k

    def __call__(self, *args, out=None):
        # the fast path: the signature (shape, strides, dtype) of contiguous arrays seen
        # before maps straight to the loaded function; nothing else is checked or built
        try:
            ck = self._table.get(tuple(_signature(a) for a in args))
        except AttributeError:  # Python scalars for 0-d inputs, host tensors of other libraries
            ck = None
        if ck is not None:
            outs = None if out is None else _fast_out(ck, out, args)
            if out is None or outs is not None:
                try:
                    return ck.run(args, outs)
                except PolytcError as e:  # a fault detected by the kernel
                    raise e.with_traceback(None) from None
        return self._call_slow(args, out)

    @user_boundary
    def _call_slow(self, args, out):
        inputs = A.as_arrays(self.program, args, device_arrays=self.backend.device_arrays)
        ck = self._specialize(inputs)
        outs = None if out is None else A.check_out(self.program, out, ck.out_shapes, inputs)
        if all(a is b for a, b in zip(args, inputs)):  # right dtypes, contiguous
            try:
                self._table[tuple(_signature(a) for a in args)] = ck
            except AttributeError:
                pass
        return ck.run(inputs, outs)

    @user_boundary
    def specialize(self, *args) -> Specialised:
        """The compiled form for these inputs' sizes (compiling if needed)."""
        return self._specialize(A.as_arrays(self.program, args))

    @user_boundary
    def export(self, directory, *args, build: bool = True):
        """Write the kernel compiled for these inputs' sizes as a directory that builds
        a C library and a command line program with ``make`` and runs without Python
        (``polytc.aot``, docs/export.md); returns its ``polytc.aot.Exported``."""
        from .aot import export_kernel

        return export_kernel(self.specialize(*args), directory, build)

    def _specialize(self, inputs) -> Specialised:
        env = A.bind_sizes(self.program, inputs)
        # sizes compiled for before run the same code again (a call with out= and one
        # without give the same bits)
        known = self._sized.get(tuple(env.items()))
        if known is not None:
            return known
        symbolic = self._symbolic(env)
        if symbolic and all(env[n] >= 1 for n in symbolic):
            ck = self._generic(env, symbolic)
            if ck is not None and ck.serves(env):
                return ck.at(env)
            # sizes the generic code does not serve (a size of 0), or no generic code
            # (an access in bounds only for some sizes: A(1) of float(M) A): specialised
        ck = self._sized[tuple(env.items())] = self._specialised(env)
        return ck

    def _specialised(self, env) -> Specialised:
        """The kernel specialised to the sizes ``env``."""
        text, options = str(self.program), self.options
        # --- autotuning hook: a kernel created without options uses the options that
        # polytc.autotune stored for this program, sizes and machine (runtime/tuning.py)
        if not self._explicit:
            options = tuning.lookup(self.program, env, text=text, target=self.target) or options
        # --- end of the autotuning hook
        return self.backend.compiled(self.program, env, options, text)

    def _symbolic(self, env) -> tuple:
        """The sizes this call's kernel keeps symbolic (the size policy; never under a
        hand schedule, whose steps were made for the sizes of a call)."""
        if not self.backend.symbolic or self.options.schedule:
            return ()
        if self.dynamic == "auto":
            for n, v in env.items():
                if self._first.setdefault(n, v) != v:
                    self._varied.add(n)
            # a batch, a sequence length: sizes that all vary (a convolution called at
            # unrelated shapes) make code of every partial tile of each, seconds of isl
            # and gcc: specialised then
            chosen = self._varied if len(self._varied) <= AUTO_MOST else set()
        else:
            chosen = set(self.dynamic)
        return tuple(sorted((chosen | set(self.options.symbolic)) & set(env)))

    def _generic(self, env, symbolic) -> Specialised | None:
        """The kernel symbolic in ``symbolic`` for the other sizes of ``env`` (compiled
        once, at hint sizes: each value rounded up to a power of two, so that nearby
        first calls share a disk-cache entry); None when the program has none."""
        from .poly.scop import OutOfBoundsError

        fixed = tuple(sorted((k, v) for k, v in env.items() if k not in symbolic))
        ck = self._generic_kernels.get((symbolic, fixed))
        if ck is False:
            return None
        if ck is None:
            hint = tuning.bucket(env, symbolic)
            if any(S.evaluate(d, hint) < 0 for t in self.program.tensors for d in t.shape):
                hint = dict(env)  # the rounded sizes would make an extent negative
            options = self.options.replace(symbolic=symbolic)
            if not self._explicit:
                options = tuning.lookup(self.program, hint, target=self.target) or options
                options = options.replace(symbolic=symbolic)
            try:
                ck = self.backend.compiled(self.program, hint, options, str(self.program))
            except OutOfBoundsError:  # in bounds only at some sizes
                self._generic_kernels[(symbolic, fixed)] = False
                return None
            self._generic_kernels[(symbolic, fixed)] = ck
        return ck


def _policy(program: P.Program, dynamic):
    """A size policy checked: ``"auto"``, or a tuple of the program's size names."""
    if dynamic == "auto":
        return dynamic
    if dynamic is None or dynamic is False:
        return ()
    if isinstance(dynamic, str):
        names = (dynamic,)
    elif isinstance(dynamic, (tuple, list, set, frozenset)) and \
            all(isinstance(n, str) for n in dynamic):
        names = tuple(dynamic)
    else:
        raise PolytcError(f"dynamic= takes 'auto', a size name, a sequence of size names "
                          f"or (), not {dynamic!r}")
    for n in names:
        if n not in program.sizes:
            raise PolytcError(
                f"'{n}' is not a size of {program.name}",
                hint=f"its sizes: {', '.join(program.sizes) or '(none)'}; "
                     "dynamic= takes size names, 'auto' or ()")
    return tuple(sorted(set(names)))


def _fast_out(ck, out, args) -> list | None:
    """``out=`` on the fast path: numpy arrays of the outputs' shapes and dtypes, C
    contiguous and writeable, whose memory no input's bounds reach (``A.check_out``
    checks the rest, and says what is wrong); else None (a call with ``out=`` had gone
    the slow way: 96 x 256 x 256 products 35.7 -> 31 us a call)."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    if len(outs) != len(ck.out_shapes):
        return None
    for k, (o, shape, dtype) in enumerate(zip(outs, ck.out_shapes, ck.out_dtypes)):
        if type(o) is not np.ndarray or o.shape != tuple(shape) or o.dtype != dtype or \
                not (o.flags.c_contiguous and o.flags.writeable) or \
                any(np.may_share_memory(o, a) for a in args) or \
                any(np.may_share_memory(o, p) for p in outs[:k]):
            return None
    return list(outs)


def _signature(a) -> tuple:
    """What the fast path compares: shape, strides and dtype of a numpy (or pyopencl)
    array, or the CUDA array interface of a device array (PyTorch, CuPy, polytc's DeviceArray)."""
    try:  # (the type too: an object of another kind with numpy's attributes is not one)
        return type(a), a.shape, a.strides, a.dtype
    except AttributeError:
        cai = a.__cuda_array_interface__  # AttributeError: no fast path for it
        return tuple(cai["shape"]), cai.get("strides"), cai["typestr"], type(a)
