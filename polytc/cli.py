"""The ``polytc`` command line.

    polytc demo                                   compile and run examples
    polytc show FILE --sizes 64x32,32x48          a TC kernel's stages
    polytc compile MODEL.onnx [--shape x=1x3x224x224 ...] [--show groups|graph|tc]
    polytc run MODEL.onnx --input inputs.npz [--output outputs.npz]
    polytc bench MODEL.onnx [--shape x=8x3x224x224 ...] [--threads N] [--warmup K]
                 [--runs R] [--duration SECONDS] [--seed S] [--ort] [--json FILE]
    polytc export MODEL.onnx -o DIR [--shape x=1x3x224x224 ...] [--no-build]

``compile``, ``run`` and ``bench`` take ``--target c|opencl|cuda`` (default c),
``--no-fuse`` and ``--disable PASS``.

``bench`` (``polytc.perftest``) compiles the model (for ``--shape``, needed where an input
has symbolic dimensions) on ``--threads`` OpenMP threads, feeds it random inputs of those
shapes (``--seed``), runs it ``--warmup`` times (default 5) and then ``--runs`` times
(default 50) or for ``--duration`` seconds, whichever ends first, and prints the compile
time and the latency (min, mean, p50, p90, p95, p99 in ms) and runs per second.  ``--ort``
also times onnxruntime on the same inputs (on ``--threads`` intra-op threads), its runs
alternating with polytc's, and prints the largest difference of the outputs and polytc's
p50 over onnxruntime's.  ``--json FILE`` writes the results as JSON.

``export`` (``polytc.aot``, docs/export.md) writes the model compiled ahead of time as C
sources, its weights and a Makefile in DIR and builds them (unless ``--no-build``): a
library with a C API and ``DIR/run_model``, which runs the model on .npy files without
Python.  Symbolic input dimensions stay symbolic unless ``--shape`` fixes them.

Every polytc error prints ``error: ...`` (and its hint) on stderr and exits with status 1.
"""
from __future__ import annotations

import argparse
import math
import sys
import time

SHOW = ("groups", "graph", "tc")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="polytc", description="polyhedral tensor compiler")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("demo", help="compile and run example kernels and a small model")
    c = sub.add_parser("show", help="compile a TC file for given sizes and print its stages")
    c.add_argument("file")
    c.add_argument("--name", help="which def (when the file has several)")
    c.add_argument("--sizes", required=True,
                   help="input shapes, e.g. '64x32,32x48' (one per input; '' for 0-d)")
    c.add_argument("--stage", default="c", help="tc | scop | dependences | schedule | ast | c")

    m = sub.add_parser("compile", help="compile an ONNX model and report what was fused",
                       description="Compile an ONNX model for its input shapes and print "
                       "the fusion groups, the compile time and the memory plan.")
    m.add_argument("model", help="an .onnx file")
    m.add_argument("--shape", action="append", default=[], metavar="NAME=DxDx...",
                   help="the shape of an input (needed for inputs with symbolic dimensions; "
                   "'' for 0-d), e.g. --shape input=1x3x224x224; repeat per input")
    m.add_argument("--show", action="append", default=[], choices=SHOW,
                   help="also print: groups (one line per fused group; the default output), "
                   "graph (the graph after the graph passes), tc (each group's TC program)")
    _model_options(m)

    r = sub.add_parser("run", help="run an ONNX model on inputs from an .npz/.npy file",
                       description="Compile an ONNX model for the given inputs and run it; "
                       "print each output's name, shape, dtype and a summary, or save them.")
    r.add_argument("model", help="an .onnx file")
    r.add_argument("--input", "-i", required=True, metavar="FILE",
                   help="an .npz whose keys are the model's input names (a model with one "
                   "input may take an .npy)")
    r.add_argument("--output", "-o", metavar="FILE.npz",
                   help="save the outputs (keys: output names) instead of printing them")
    _model_options(r)

    b = sub.add_parser("bench", help="time an ONNX model on random inputs (and onnxruntime "
                       "with --ort)", description="Compile an ONNX model, run it on random "
                       "inputs and print the compile time and the latency distribution.")
    b.add_argument("model", help="an .onnx file")
    b.add_argument("--shape", action="append", default=[], metavar="NAME=DxDx...",
                   help="the shape of an input (needed for inputs with symbolic dimensions)")
    b.add_argument("--threads", metavar="N", help="OpenMP team size of polytc's kernels, "
                   "and onnxruntime's intra-op threads (default: the environment's / all)")
    b.add_argument("--warmup", metavar="K", default="5", help="untimed runs first (5)")
    b.add_argument("--runs", metavar="R", help="timed runs (50, unless --duration)")
    b.add_argument("--duration", metavar="SECONDS",
                   help="time runs for this long (with --runs: whichever ends first)")
    b.add_argument("--seed", metavar="S", default="0", help="of the random inputs (0)")
    b.add_argument("--ort", action="store_true",
                   help="also time onnxruntime, interleaved, and compare the outputs")
    b.add_argument("--json", metavar="FILE", help="write the results as JSON")
    _model_options(b)

    x = sub.add_parser("export", help="export an ONNX model as C + a Makefile that runs "
                       "without Python", description="Compile an ONNX model ahead of time: "
                       "write its C sources, weights and a Makefile to DIR and build the "
                       "library and DIR/run_model (docs/export.md).")
    x.add_argument("model", help="an .onnx file")
    x.add_argument("--output", "-o", required=True, metavar="DIR", help="the directory")
    x.add_argument("--shape", action="append", default=[], metavar="NAME=DxDx...",
                   help="fix the shape of an input (its symbolic dimensions stay symbolic "
                   "otherwise); repeat per input")
    x.add_argument("--no-build", action="store_true", help="write the files, skip make")
    _model_options(x)

    args = parser.parse_args(argv)
    from .diagnostics import PolytcError

    try:
        if args.cmd == "demo":
            from .demo import main as demo

            return demo()
        if args.cmd == "compile":
            return _compile(args)
        if args.cmd == "run":
            return _run(args)
        if args.cmd == "bench":
            return _bench(args)
        if args.cmd == "export":
            return _export(args)
        return _show(args)
    except PolytcError as e:
        return _error(str(e))
    except CLIError as e:
        return _error(str(e))


class CLIError(Exception):
    """A bad command-line argument or input file (not a polytc error)."""


def _error(text: str) -> int:
    print(f"error: {text}", file=sys.stderr)
    return 1


def _model_options(p):
    from .onnx import TARGETS

    # no argparse choices: an unknown target is reported as polytc.onnx reports it
    p.add_argument("--target", default="c", metavar="|".join(TARGETS),
                   help="compile the model's groups for this target (default c)")
    p.add_argument("--no-fuse", action="store_true", help="compile every op alone")
    p.add_argument("--disable", action="append", default=[], metavar="PASS",
                   help="skip a graph pass (polytc.graph.passes.PASSES, or "
                        "pads_in_place); repeatable")


def _session(args, options=None):
    import polytc.onnx as ponnx
    from .graph.session import pass_names

    names = pass_names()
    for d in args.disable:
        if d not in names:
            raise CLIError(f"--disable {d}: no such graph pass (passes: {', '.join(names)})")
    return ponnx.compile(args.model, target=args.target, options=options,
                         fuse=not args.no_fuse, disable=tuple(args.disable))


def _parse_shapes(specs, session) -> dict:
    """``--shape`` arguments as {input: tuple}, every input filled in; checked against
    the model as ``Session.run`` checks arrays."""
    import numpy as np

    inputs = {a.name: a for a in session.get_inputs()}
    given = _given_shapes(specs, inputs)
    shapes = {}
    for name, a in inputs.items():
        if name in given:
            shapes[name] = given[name]
        elif a.shape is not None and all(isinstance(d, int) for d in a.shape):
            shapes[name] = tuple(a.shape)
        else:
            raise CLIError(f"input '{name}' has the shape {a.shape}, with symbolic or unknown "
                           f"dimensions: give it with --shape {name}=" +
                           "x".join(str(d) if isinstance(d, int) else "?" for d in
                                    (a.shape or ["?"])))
    # the same checks as run's, on arrays that are never filled
    session._check_feeds({n: np.empty(s, _np_dtype(inputs[n].type)) for n, s in
                          shapes.items()})
    return shapes


def _given_shapes(specs, inputs: dict) -> dict:
    """``--shape`` arguments as {input: tuple}; ``inputs``: name -> NodeArg."""
    given = {}
    for spec in specs:
        name, eq, dims = spec.rpartition("=")
        if not eq or not name:
            raise CLIError(f"--shape {spec}: expected NAME=DxDx... (e.g. x=1x3x224x224)")
        if name not in inputs:
            raise CLIError(f"--shape {spec}: the model has no input '{name}' (inputs: "
                           f"{', '.join(f'{a.name} {a.shape}' for a in inputs.values())})")
        try:
            given[name] = tuple(int(d) for d in dims.lower().split("x") if d.strip())
        except ValueError:
            raise CLIError(f"--shape {spec}: dimensions must be integers, e.g. "
                           f"{name}=1x3x224x224") from None
        if any(d < 0 for d in given[name]):
            raise CLIError(f"--shape {spec}: dimensions must not be negative")
    return given


def _export(args) -> int:
    from .aot import export_session

    t0 = time.perf_counter()
    session = _session(args)
    given = _given_shapes(args.shape, {a.name: a for a in session.get_inputs()})
    e = export_session(session, args.output, given, build=not args.no_build)
    dims = f"; symbolic dimensions {', '.join(e.dims)} (values read off the inputs)" \
        if e.dims else ""
    print(f"exported {args.model} to {e.directory} in {time.perf_counter() - t0:.1f} s{dims}")
    if e.program:
        ins = " ".join(f"{a.name}.npy" for a in session.get_inputs())
        print(f"run it: {e.program} -o OUTDIR {ins}")
    else:
        print(f"build it: make -C {e.directory}")
    return 0


def _np_dtype(type_name: str):
    import numpy as np

    inner = type_name[len("tensor("):-1]
    return np.dtype({"float": "float32", "double": "float64"}.get(inner, inner))


def _compile(args) -> int:
    t0 = time.perf_counter()
    session = _session(args)
    shapes = _parse_shapes(args.shape, session)
    plan = session.plan(shapes)
    total = time.perf_counter() - t0
    show = args.show or ["groups"]
    if "graph" in show:
        print(session.graph)
        print()
    if "groups" in show:
        print(session.report())
    if "tc" in show:
        for text in plan.texts.values():
            print(text)
    timings = dict(session.timings, **plan.timings)
    detail = ", ".join(f"{k} {v:.2f} s" for k, v in timings.items())
    print(f"compiled {args.model} for {_shapes_text(shapes)} in {total:.2f} s ({detail})")
    return 0


def _shapes_text(shapes: dict) -> str:
    return ", ".join(f"{n}[{'x'.join(map(str, s))}]" for n, s in shapes.items())


def _load_inputs(path: str, session) -> dict:
    import numpy as np

    names = [a.name for a in session.get_inputs()]
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
    except OSError as e:
        raise CLIError(f"{path}: {e.strerror or 'cannot be read'}") from None
    if not (magic.startswith(b"PK") or magic == b"\x93NUMPY"):
        raise CLIError(f"{path}: not an .npz or .npy file (save inputs with numpy.savez or "
                       "numpy.save)")
    try:
        data = np.load(path, allow_pickle=False)
    except Exception as e:  # noqa: BLE001 - not an npz/npy, or pickled objects
        raise CLIError(f"{path}: not a readable .npz or .npy file ({e})") from None
    if isinstance(data, np.ndarray):
        if len(names) != 1:
            raise CLIError(f"{path} holds one array, but the model has {len(names)} inputs "
                           f"({', '.join(names)}): save them in an .npz, keyed by name")
        return {names[0]: data}
    with data:
        return {k: data[k] for k in data.files}


def _run(args) -> int:
    import numpy as np

    session = _session(args)
    feed = _load_inputs(args.input, session)
    t0 = time.perf_counter()
    outs = session.run(None, feed)
    seconds = time.perf_counter() - t0
    names = [a.name for a in session.get_outputs()]
    if args.output:
        try:
            np.savez(args.output, **dict(zip(names, outs)))
        except OSError as e:
            raise CLIError(f"{args.output}: cannot write ({e.strerror or e})") from None
        print(f"wrote {len(outs)} output(s) to {args.output} ({seconds:.2f} s, compile "
              "included)")
        return 0
    for name, a in zip(names, outs):
        print(f"{name}: shape {list(a.shape)} {a.dtype.name}  {_summary(a)}")
    return 0


def _summary(a) -> str:
    import numpy as np

    if a.size == 0:
        return "(empty)"
    flat = a.reshape(-1)
    first = np.array2string(flat[:6], precision=4, separator=", ", threshold=10)
    more = f" ... ({a.size} values)" if a.size > 6 else ""
    if a.dtype.kind in "biuf":
        stats = a.astype(np.float64)
        with np.errstate(all="ignore"):
            return (f"mean {stats.mean():.6g}  min {stats.min():.6g}  max {stats.max():.6g}  "
                    f"first {first}{more}")
    return f"first {first}{more}"


def _bench(args) -> int:
    import contextlib
    import json

    from . import perftest
    from .options import Options

    threads = _number(args.threads, "--threads", int, 1)
    warmup = _number(args.warmup, "--warmup", int, 0)
    duration = _number(args.duration, "--duration", float, 0, strict=True)
    runs = _number(args.runs, "--runs", int, 1)
    seed = _number(args.seed, "--seed", int, 0)
    try:  # opened first: an unwritable path fails before the runs, not after them
        out = open(args.json, "w") if args.json else contextlib.nullcontext()
    except OSError as e:
        raise CLIError(f"{args.json}: cannot write ({e.strerror or e})") from None
    with out as f:
        t0 = time.perf_counter()
        session = _session(args, Options(num_threads=threads) if threads else None)
        shapes = _parse_shapes(args.shape, session)
        session.plan(shapes)  # (a model with symbolic dimensions compiles here)
        result = perftest.bench(session, args.model, shapes,
                                compile_s=time.perf_counter() - t0, threads=threads,
                                warmup=warmup, runs=runs, duration=duration, seed=seed,
                                ort=args.ort)
        print(perftest.report(result))
        if f is not None:
            json.dump(result, f, indent=1)
    return 0


def _number(text, option: str, kind, least, strict: bool = False):
    """``text`` (None: not given) as an int or float of at least ``least`` (``strict``:
    above it)."""
    if text is None:
        return None
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value < least or \
            (strict and value == least):
        what = "a whole number" if kind is int else "a number"
        raise CLIError(f"{option} {text}: expected {what} {'above' if strict else 'of at least'}"
                       f" {least}")
    return value


def _show(args) -> int:
    import numpy as np

    import polytc

    with open(args.file) as f:
        text = f.read()
    k = polytc.tc(text, args.name, filename=args.file)
    if isinstance(k, dict):
        print(f"error: {args.file} defines {', '.join(k)}; pick one with --name", file=sys.stderr)
        return 1
    shapes = [tuple(int(x) for x in s.split("x") if x) for s in args.sizes.split(",")]
    arrays = [np.zeros(s, t.dtype.np_dtype) for s, t in zip(shapes, k.program.inputs)]
    ck = k.specialize(*arrays)
    print(ck.stages[args.stage])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
