"""Ahead-of-time export: a compiled model or kernel as a directory that builds and runs
without Python (docs/export.md).

    polytc.onnx.export("model.onnx", "out/")          # or polytc export model.onnx -o out
    kernel.export("out/", A, B)                        # a TC kernel at these inputs' sizes
    polytc.aot.load("out/").run(None, feeds)           # the library, called from Python

The directory holds ``model.h`` (the C API), ``model.c`` (the plan: ``emit.py``), one
``kernel_K.c`` per compiled kernel, ``weights.bin`` (the constants and the packed weights,
embedded in the library by ``weights.S``), ``run_model.c`` (a command line program that
runs the model on .npy files) and a ``Makefile``; the export runs ``make``, which builds
``libpolytc_model.so`` and ``run_model``.  Neither needs Python, islpy or a compiler to
run, only libgomp and libm.  The code is compiled for this machine's CPU (``-march=native``
and the vector width polytc chose for it), like every polytc kernel.

A model whose inputs have symbolic dimensions exports with those dimensions symbolic: the
kernels are the plan's generic ones, the memory layout is a polynomial in the dimensions
(``layout.py``), and every run passes their values.
"""
from __future__ import annotations

import math
import os
import shutil
import subprocess
from dataclasses import dataclass

import numpy as np

from ..codegen_c.compiler import FAST_LINK, _cc, default_flags
from ..diagnostics import CompilationError, ModelError, PolytcError, UnsupportedError
from ..runtime.executor import CALL, fill_word
from ..runtime.memory import MOST_BYTES
from . import layout as L
from .emit import Emitter
from .loader import LIBRARY, ExportedModel

_HERE = os.path.dirname(__file__)
PROGRAM = "run_model"


@dataclass(frozen=True)
class Exported:
    """An exported directory: ``library`` and ``program`` are paths in it (None when
    it was written without building)."""

    directory: str
    dims: tuple  # the symbolic dimensions' names, in the order runs take their values
    library: str | None
    program: str | None

    def __repr__(self):
        dims = f", dims {list(self.dims)}" if self.dims else ""
        return f"<polytc export {self.directory}{dims}>"


def load(directory, threads: int = 0):
    """The exported model in ``directory`` (built), callable from Python: a
    ``loader.ExportedModel`` whose ``run(output_names, feeds)`` calls the library."""
    return ExportedModel(directory, threads)


def export_session(session, directory, shapes: dict | None = None,
                   build: bool = True) -> Exported:
    """Export a ``polytc.onnx`` session: its symbolic input dimensions stay symbolic,
    except those that ``shapes`` (input name -> shape) fixes."""
    g = session.graph
    directory = _directory(directory)
    if session.target != "c":
        raise UnsupportedError(f"export builds C: the session's target is "
                               f"'{session.target}'", hint="compile the model with target='c'")
    half = {v: np.dtype(t) for v, t in g.boundary.items()}  # float16, bfloat16
    base, dims = _input_shapes(session, shapes or {})
    if len(dims) > 3:
        raise UnsupportedError(f"the model has {len(dims)} symbolic dimensions "
                               f"({', '.join(dims)}); export keeps at most 3 symbolic",
                               hint=L.FIX_HINT)
    points = L.grid(len(dims)) if dims else [()]
    snaps = [_snapshot(session, _at(base, dims, pt)) for pt in points]
    check = L.verify_point(len(dims))
    fitted = L.fit(snaps, points, (_snapshot(session, _at(base, dims, check)), check)
                   if dims else (snaps[0], ()), "model")
    plan = session.plan(_at(base, dims, points[0]))
    data = {}
    for e in fitted["p"]:
        if e[0] == "const":
            data[e[1]] = plan.constants[e[1]]
        elif e[0] == "packed":
            data[f"{e[1]}:packed{e[2]}"] = plan.prepacked[e[1]][e[2]]
    for _n, r, _s, _d in fitted["outputs"]:
        if r in plan.constants and not any(e[0] == "fresh" and e[1] == r
                                           for e in fitted["p"]):
            data[r] = plan.constants[r]
    fitted["outputs"] = [(n, r, shape, half[n].str if n in half else dtype)
                         for n, r, shape, dtype in fitted["outputs"]]
    inputs = [(v, half.get(v, np.dtype(g.types[v].dtype)).str,
               tuple(-(dims.index(d) + 1) if d in dims else d for d in base[v]))
              for v in g.inputs]
    return _write(Emitter(fitted, dims, inputs, data), directory, build, tuple(dims))


def export_kernel(ck, directory, build: bool = True) -> Exported:
    """Export a kernel compiled for one set of sizes (``Kernel.specialize``'s result)
    as a model of one step: the program's inputs in, its outputs out."""
    directory = _directory(directory)
    if getattr(ck, "target", "c") != "c":
        raise UnsupportedError(f"export builds C: the kernel's target is '{ck.target}'",
                               hint="make the kernel with target='c'")
    if ck.prepacked:
        raise UnsupportedError("a kernel that packs constant operands (Options.constants) "
                               "cannot be exported: its operands are inputs of every run",
                               hint="export it without Options.constants")
    prog = ck.program
    p = [("size", int(v)) for v in ck._sizes]
    p += [("feed", i) for i in range(len(prog.inputs))]
    p += [("fresh", t.name) for t in prog.outputs]
    p += [("scratch", int(np.prod(s, dtype=np.int64)) * np.dtype(d).itemsize)
          for s, d in ck.temps]
    fills = [(t.name, fill_word(d, f), int(np.prod(s, dtype=np.int64)))
             for t, s, d, f in zip(prog.outputs, ck.out_shapes, ck.out_dtypes, ck.out_fill)
             if f is not None]
    layout = {"kernels": {prog.name: (ck.code, tuple(ck.sites))},
              "code": [len(p), CALL, 0, len(p)] + list(range(len(p))), "p": p,
              "arena": {}, "fills": fills,
              "aligned": [prog.inputs[i].name for i in ck.align_inputs],
              "outputs": [(t.name, t.name, tuple(s), np.dtype(d).str) for t, s, d in
                          zip(prog.outputs, ck.out_shapes, ck.out_dtypes)]}
    inputs = [(t.name, np.dtype(t.dtype.np_dtype).str, tuple(t.extents(ck.env)))
              for t in prog.inputs]
    return _write(Emitter(layout, [], inputs, {}), directory, build, ())


def _input_shapes(session, shapes: dict) -> tuple:
    """``(input -> shape with dimension names left, the names)``."""
    g = session.graph
    if not isinstance(shapes, dict):
        raise ModelError(f"shapes must be a dict of input name -> shape, not "
                         f"{type(shapes).__name__}", hint="shapes={'input': (1, 3, 224, 224)}")
    for v, s in shapes.items():
        if v not in g.inputs:
            raise ModelError(f"shapes: the model has no input {v!r}",
                             hint="inputs: " + ", ".join(g.inputs))
        _check_shape(v, s, g.types[v])
    base, dims = {}, []
    for v in g.inputs:
        t = g.types[v]
        if v in shapes:
            base[v] = tuple(int(d) for d in shapes[v])
            continue
        if t.shape is None or any(d is None or d == "" for d in t.shape):
            raise ModelError(f"input '{v}' has an unknown shape {t.shape}: give it",
                             hint=f"export(..., shapes={{'{v}': (...)}}) or --shape "
                                  f"{v}=DxD...")
        base[v] = tuple(t.shape)
        dims += [d for d in t.shape if isinstance(d, str) and d not in dims]
    fixed = {d: n for v in shapes for d, n in zip(g.types[v].shape or (), shapes[v])
             if isinstance(d, str)}
    base = {v: tuple(fixed.get(d, d) for d in s) for v, s in base.items()}
    return base, [d for d in dims if d not in fixed]


def _check_shape(v: str, s, t) -> None:
    """``s``, the shape ``shapes`` gives input ``v`` (of type ``t``): sizes >= 0, of
    the input's rank, that fit in memory."""
    if not isinstance(s, (list, tuple)) or not all(
            isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0
            for d in s):
        raise ModelError(f"shapes: input '{v}' is given {s!r}; a shape is a list of "
                         "sizes >= 0 (ints)", hint=f"shapes={{'{v}': (...)}}")
    if t.shape is not None and len(s) != len(t.shape):
        raise ModelError(f"shapes: input '{v}' is given {list(s)}, of rank {len(s)}; "
                         f"it has rank {len(t.shape)} {list(t.shape)}")
    size = math.prod(int(d) for d in s) * np.dtype(t.dtype).itemsize
    if size > MOST_BYTES:
        raise ModelError(f"shapes: input '{v}' of shape {list(s)} would be {size} bytes, "
                         "more than a process can address")


def _directory(directory) -> str:
    """The export's directory as a str path (a polytc error for what is not a path)."""
    if not isinstance(directory, (str, bytes, os.PathLike)):
        raise PolytcError(f"the export's directory must be a path (a str or os.PathLike), "
                          f"not {type(directory).__name__}")
    return os.fsdecode(os.fspath(directory))


def _at(base: dict, dims: list, values: tuple) -> dict:
    at = dict(zip(dims, values))
    return {v: tuple(at.get(d, d) for d in s) for v, s in base.items()}


def _snapshot(session, shapes: dict) -> dict:
    g = session.graph  # the shapes are the model's (a clear error if not)
    try:
        feeds = {v: np.empty(s, g.boundary.get(v, g.types[v].dtype))
                 for v, s in shapes.items()}
    except MemoryError:
        raise ModelError(f"the model's inputs at shapes {shapes} do not fit in this "
                         "machine's memory") from None
    session._check_feeds(feeds)
    plan = session.plan(shapes)
    if session._staged is not None:
        raise UnsupportedError(f"the model decides shapes from its data ({plan.why}): it "
                               "runs in stages, which export does not write")
    if plan.driver is None:
        if plan.kernels:
            raise UnsupportedError("export needs the native plan: compile the session "
                                   "with native=True")
        raise UnsupportedError("the model computes nothing (no compiled group): nothing to "
                               "export")
    return L.snapshot(plan, list(session.graph.inputs))


def _write(em: Emitter, d: str, build: bool, dims: tuple) -> Exported:
    files = {"model.c": em.model_c(), "weights.S": em.weights_s(), "Makefile": _makefile(
        len(em.sources))}
    for u, text in enumerate(em.kernel_sources()):
        files[f"kernel_{u}.c"] = text
    try:
        os.makedirs(d, exist_ok=True)
        for name, text in files.items():
            with open(os.path.join(d, name), "w", encoding="utf-8") as f:
                f.write(text)
        with open(os.path.join(d, "weights.bin"), "wb") as f:
            f.write(em.blob)
        for name in ("model.h", "run_model.c"):
            shutil.copyfile(os.path.join(_HERE, name), os.path.join(d, name))
    except OSError as e:
        raise PolytcError(f"cannot write the export to {d}: {e.strerror or e}"
                          + (f" ({e.filename})" if e.filename and e.filename != d else ""),
                          hint="export to a directory you can write (it is created if "
                          "it does not exist)") from None
    if build:
        make(d)
    return Exported(os.path.abspath(d), dims,
                    os.path.join(os.path.abspath(d), LIBRARY) if build else None,
                    os.path.join(os.path.abspath(d), PROGRAM) if build else None)


def make(directory) -> None:
    """Build an exported directory (``make``, with the jobs the machine has)."""
    try:
        r = subprocess.run(["make", "-s", f"-j{os.cpu_count() or 1}"], cwd=directory,
                           capture_output=True, text=True, timeout=1800)
    except FileNotFoundError:
        raise CompilationError("building the export needs 'make'",
                               hint="install make, or export with build=False") from None
    if r.returncode:
        raise CompilationError(f"building {directory} failed:\n{r.stderr[-4000:]}",
                               hint="this is a polytc bug; please report it with the model")


def _makefile(kernels: int) -> str:
    # (an exported library is linked as usual: against libc, for programs of any kind)
    flags = [f for f in default_flags()
             if f not in ("-shared", "-fPIC", "-lm", "-lmvec", *FAST_LINK)]
    libs = [f for f in default_flags() if f in ("-lmvec", "-lm")]
    objs = " ".join(["model.o", "weights.o"] + [f"kernel_{u}.o" for u in range(kernels)])
    return f"""# Builds the model exported by polytc: make (the library and run_model), make clean.
# The flags are those polytc compiled the kernels with on the exporting machine.
CC ?= {_cc()[0]}
CFLAGS ?= {' '.join(flags)}
LDLIBS = {' '.join(libs)}
OBJS = {objs}

all: {PROGRAM}

{LIBRARY}: $(OBJS)
\t$(CC) $(CFLAGS) -shared -o $@ $(OBJS) $(LDLIBS)

%.o: %.c model.h
\t$(CC) $(CFLAGS) -fPIC -fvisibility=hidden -c $< -o $@

weights.o: weights.S weights.bin
\t$(CC) -c weights.S -o $@

{PROGRAM}: run_model.c model.h {LIBRARY}
\t$(CC) -O2 -std=gnu11 -o $@ run_model.c -L. -lpolytc_model -Wl,-rpath,'$$ORIGIN'

clean:
\trm -f *.o {LIBRARY} {PROGRAM}

.PHONY: all clean
"""
