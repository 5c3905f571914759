"""``polytc bench MODEL.onnx``: a model's latency, in the spirit of onnxruntime_perf_test.

``bench`` times ``Session.run`` on random inputs of the given shapes (floats ~N(0, 1),
integers in [0, 10) or below the size of the table a ``Gather`` indexes with them,
booleans at random; one seed), after ``warmup`` runs that are not timed: the first runs
of a session page in its weights and wake its thread team.  Each run is timed alone
(``time.perf_counter`` around the call), so the summary is a distribution: min, mean,
p50, p90, p95, p99 and the runs per second (1 / mean).

With ``ort`` the same inputs also run on onnxruntime (CPU, ``intra_op_num_threads`` =
the thread count given, sequential execution, every graph optimisation).  The two take
turns (A B A B): a machine that speeds up or slows down during the benchmark (frequency,
a neighbour) moves both engines alike, so the ratio of their medians is fair where all
of one engine's runs and then the other's would not be.  A turn is a block of ``BLOCK``
timed runs, not one: each engine's thread pool keeps spinning after a run (onnxruntime's
for up to ~0.1 s), and on a small machine the spinning pool of one slowed the other's
next run tenfold and more.  So before its block an engine waits until the process's
threads are quiet (``settle``) and makes one untimed run (its own threads wake up), and
its timed runs follow one another, as a served model's do.  The outputs of the first run
of each are compared (the largest absolute difference per output).

The command line (argument checks, the session) is ``polytc.cli``; this module takes
checked values and returns a plain dict (``--json`` writes it as it is).
"""
from __future__ import annotations

import time

import numpy as np

from .diagnostics import ModelError, UnsupportedError

#: the percentiles the summary reports
PERCENTILES = (50, 90, 95, 99)
#: timed runs per engine unless a duration is given
RUNS = 50
#: consecutive timed runs of one engine when several take turns
BLOCK = 10
#: the largest integer fed to an integer input (exclusive), unless a Gather bounds it
INT_HIGH = 10


def random_inputs(session, shapes: dict, seed: int = 0) -> dict:
    """Feeds for ``session`` at ``shapes`` (input -> tuple), in the model's dtypes."""
    g = session.graph
    rng = np.random.default_rng(seed)
    feeds = {}
    for v in g.inputs:
        dtype = np.dtype(g.boundary.get(v, g.types[v].dtype))  # float16: the model's
        shape = tuple(shapes[v])
        if dtype == np.bool_:
            feeds[v] = rng.random(shape) < 0.5
        elif dtype.kind in "iu":
            feeds[v] = rng.integers(0, _int_bound(g, v), shape).astype(dtype)
        elif dtype.kind == "f" or dtype.name == "bfloat16":
            feeds[v] = rng.standard_normal(shape).astype(np.float32).astype(dtype)
        else:
            raise UnsupportedError(f"input '{v}' has dtype {dtype.name}: bench makes "
                                   "random floats, integers and booleans only")
    return feeds


def _int_bound(g, v: str) -> int:
    """``INT_HIGH``, or less where ``v`` indexes a constant table (token ids)."""
    high = INT_HIGH
    for n in g.nodes:
        if n.op == "Gather" and len(n.inputs) > 1 and n.inputs[1] == v and \
                n.inputs[0] in g.constants:
            table = g.constants[n.inputs[0]]
            high = min(high, table.shape[n.attr("axis", 0) % table.ndim])
    return max(high, 1)


def ort_session(model: str, threads: int | None):
    """onnxruntime's CPU session of the model file ``model``."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise UnsupportedError("--ort needs onnxruntime, which is not installed",
                               hint="pip install onnxruntime") from None
    so = ort.SessionOptions()
    if threads:
        so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    try:
        return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnxruntime's own exception types
        raise ModelError(f"onnxruntime cannot load {model}: {_first_line(e)}") from None


def _first_line(e) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def time_runs(calls: dict, warmup: int, runs: int | None, duration: float | None) -> dict:
    """Seconds of each timed call of every engine (``calls``: name -> a function that
    runs the model once): after ``warmup`` untimed calls each, until ``runs`` calls
    each or ``duration`` seconds have passed, whichever comes first (at least one).
    Several engines take turns by blocks of ``BLOCK`` calls (see the module)."""
    for _ in range(warmup):
        for call in calls.values():
            call()
    times: dict = {name: [] for name in calls}
    end = time.perf_counter() + duration if duration is not None else None
    turns = len(calls) > 1
    while True:
        done = len(times[next(iter(calls))])
        block = BLOCK if turns else 1
        if runs is not None:
            block = min(block, runs - done)
        for name, call in calls.items():
            if turns:
                settle()  # the other engine's threads stop spinning
                call()  # (its own thread team wakes up)
            for _ in range(block):
                t0 = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - t0)
        done += block
        if (runs is not None and done >= runs) or (end is not None and
                                                   time.perf_counter() >= end):
            return times


def settle(window: float = 0.005, idle: float = 0.1, limit: float = 0.3) -> None:
    """Sleep until this process's threads are quiet: a window of ``window`` seconds in
    which they use less than ``idle`` of a core, or ``limit`` seconds."""
    start = time.perf_counter()
    while time.perf_counter() - start < limit:
        c0, t0 = time.process_time(), time.perf_counter()
        time.sleep(window)
        if time.process_time() - c0 < idle * (time.perf_counter() - t0):
            return


def summary(seconds: list) -> dict:
    """Latency statistics in milliseconds, and runs per second."""
    ms = np.asarray(seconds) * 1e3
    out = {"runs": len(ms), "min_ms": float(ms.min()), "mean_ms": float(ms.mean())}
    out.update({f"p{q}_ms": float(np.percentile(ms, q)) for q in PERCENTILES})
    out["runs_per_s"] = 1e3 / out["mean_ms"] if out["mean_ms"] > 0 else float("inf")
    return out


def max_abs_diff(names: list, ours: list, theirs: list) -> dict:
    """Output name -> the largest absolute difference of the two engines' values (None
    where the shapes differ)."""
    out = {}
    for name, a, b in zip(names, ours, theirs):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            out[name] = None
        elif a.size == 0:
            out[name] = 0.0
        else:
            out[name] = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
    return out


def bench(session, model: str, shapes: dict, *, compile_s: float, threads: int | None = None,
          warmup: int = 5, runs: int | None = None, duration: float | None = None,
          seed: int = 0, ort: bool = False) -> dict:
    """Time ``session`` (compiled from the file ``model``) at ``shapes``, and with
    ``ort`` onnxruntime beside it (see the module): ``runs`` timed runs (``RUNS`` when
    neither they nor a ``duration`` is given) or ``duration`` seconds of runs, whichever
    ends first.  The results as a dict."""
    if runs is None and duration is None:
        runs = RUNS
    feeds = random_inputs(session, shapes, seed)
    calls = {"polytc": lambda: session.run(None, feeds)}
    names = [a.name for a in session.get_outputs()]
    result = {"model": model, "threads": threads, "warmup": warmup, "seed": seed,
              "inputs": {v: {"shape": list(a.shape), "dtype": a.dtype.name}
                         for v, a in feeds.items()},
              "compile_s": compile_s}
    if ort:
        theirs = ort_session(model, threads)
        try:
            got = theirs.run(names, feeds)
        except Exception as e:  # noqa: BLE001 - onnxruntime's own exception types
            raise ModelError(f"onnxruntime cannot run {model}: {_first_line(e)}") from None
        result["max_abs_diff"] = max_abs_diff(names, session.run(None, feeds), got)
        calls["onnxruntime"] = lambda: theirs.run(names, feeds)
    times = time_runs(calls, warmup, runs, duration)
    result["engines"] = {name: summary(t) for name, t in times.items()}
    if ort:
        e = result["engines"]
        result["ratio_p50"] = e["polytc"]["p50_ms"] / e["onnxruntime"]["p50_ms"]
    return result


def report(result: dict) -> str:
    """The results as text: one line per engine, the outputs' agreement and the ratio."""
    inputs = ", ".join(f"{v}[{'x'.join(map(str, i['shape']))}] {i['dtype']}"
                       for v, i in result["inputs"].items())
    lines = [f"model {result['model']}: {inputs}; threads "
             f"{result['threads'] or 'default'}, {result['warmup']} warm-up "
             f"run{'' if result['warmup'] == 1 else 's'}",
             f"compile: {result['compile_s']:.2f} s",
             f"{'engine':12} {'runs':>6} {'min ms':>9} {'mean ms':>9}" +
             "".join(f" {f'p{q} ms':>9}" for q in PERCENTILES) + f" {'runs/s':>10}"]
    for name, s in result["engines"].items():
        lines.append(f"{name:12} {s['runs']:6d} {s['min_ms']:9.3f} {s['mean_ms']:9.3f}" +
                     "".join(f" {s[f'p{q}_ms']:9.3f}" for q in PERCENTILES) +
                     f" {s['runs_per_s']:10.1f}")
    if "max_abs_diff" in result:
        diffs = ", ".join(f"{n} {'shape differs' if d is None else f'{d:.3g}'}"
                          for n, d in result["max_abs_diff"].items())
        lines.append(f"outputs, max abs diff polytc - onnxruntime: {diffs}")
        lines.append(f"polytc / onnxruntime p50: {result['ratio_p50']:.3f}x")
    return "\n".join(lines)
