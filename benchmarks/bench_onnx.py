"""Whole ONNX models: ``polytc.onnx`` against onnxruntime on the CPU.

    python benchmarks/bench_onnx.py [--only name,name] [--repeats N] [--threads T] [--quick]
                                    [--load] [--batch B] [--dynamic] [--int8 [MODE]] [--export]

One table: per model (from ``polytc.graph.examples``) the median milliseconds of one
``sess.run(None, feeds)`` of polytc and of onnxruntime, polytc's time over onnxruntime's,
and polytc's compile time: cold (an empty ``POLYTC_CACHE_DIR``) and again from that disk
cache, each in a fresh process and each ``polytc.onnx.compile(path)`` plus the first
``run`` (a compiler that specialises lazily compiles there).

Both libraries run on ``--threads`` threads (default: POLYTC_NUM_THREADS /
OMP_NUM_THREADS, else every core): the benchmark sets POLYTC_NUM_THREADS and
OMP_NUM_THREADS before any process imports polytc, and gives onnxruntime
``intra_op_num_threads=threads``, ``inter_op_num_threads=1`` (sequential execution, all
graph optimisations).  As in ``bench_cpu.py`` each library runs in a persistent worker
process of its own and the samples are interleaved round-robin (see ``common``); a
worker waits for its threads to go quiet before it answers.  polytc's first output is
compared with onnxruntime's (allclose, rtol 1e-3, atol 1e-3 times the output's
magnitude); a mismatch reads ``WRONG`` and is not timed, a failure reads ``fail``.
Before its samples each library runs the model for ``WARM_UP_S`` seconds, as a served
model has (polytc's runs choose their team size meanwhile).  ``--load`` times both with a
busy neighbour: a process spinning on the last core (the shared machine a served model
meets), started after the compiles and stopped after the model's samples.

``--dynamic``: models exported with a symbolic batch (``N``; one with a symbolic sequence
length instead), run at batch sizes (sequence lengths) in turn
(docs/dynamic.md): the first run at each new batch (the first compiles the groups with
the batch symbolic; later ones reuse those kernels; the median of ``DYNAMIC_TRIALS``
sessions' first runs, each a session of its own arena, each once no other thread runs:
onnxruntime's pool, spinning after its first run at the batch, had slowed the first
session's by 10 ms), then
polytc's and onnxruntime's run times interleaved, each in its worker process, and then
polytc's interleaved with a session compiled for that batch alone (two pairs: in one
rotation of three, polytc's samples followed onnxruntime's twice as often as the
specialised session's).

``--export``: one more column, the model exported ahead of time (``polytc.aot``: its C
built with make into a library, docs/export.md) called through ``polytc.aot.load`` in
polytc's worker, as a C caller runs it (no session, no checks but the shapes'), and its
time over onnxruntime's.

``--int8 [dynamic|qdq|qoperator]``: the models with int8 weights, quantised by
onnxruntime's ``quantize_dynamic`` (``dynamic``, the default: activations quantised at run
time: DynamicQuantizeLinear, MatMulInteger, ConvInteger) or ``quantize_static`` with its
defaults (int8 activations and weights, calibrated on four example inputs) in the QDQ
format (QuantizeLinear/DequantizeLinear around float ops) or the QOperator format
(QLinearConv, QLinearMatMul, com.microsoft QLinearAdd ...), both libraries running the
quantised model; polytc's outputs within 1e-2 of onnxruntime's (``INT8_TOL``).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.append(os.path.dirname(HERE))  # polytc from this checkout when not installed
import bench_cpu  # noqa: E402  (its worker machinery)
import common  # noqa: E402

COLUMNS = ["model", "polytc", "ort", "polytc/ort", "cold compile s", "disk compile s"]
RTOL = 1e-3
#: --int8: an activation quantised at run time moves by one step where the float values
#: before it differ in the last bit (a multiply-add contracted or not), and the step
#: spreads through the layers after it: ResNet-18 0.005 on average from onnxruntime's
#: int8 results, where quantising moves them by 0.026 from the float model's
INT8_TOL = 1e-2
#: --int8 qdq/qoperator: a statically quantised model requantises every activation (BERT-2L:
#: 90 times), so a step moved early moves more elements, by a few steps, at the end (QDQ:
#: its first product has one element of 32768 one step apart, polytc's exact int32 sums
#: against onnxruntime's float product of the dequantised values, and the output is off
#: by 0.08 where it reaches 5.2, 7e-4 on average; QOperator: a LayerNormalization
#: rounded differently moves 6 of 32768 by a step, the output 0.11 at most, 8e-3 on
#: average): those pass when the mean error is within INT8_TOL / 5 of the output's
#: magnitude and none is off by more than STATIC_SPREAD * INT8_TOL of it
STATIC_SPREAD = 5
WARM_UP_S = 0.5  # each library runs the model this long before its samples
FAMILIES = ("polytc", "ort")


def models(quick: bool) -> dict:
    """name -> (builder of the ModelProto, sizes in words); ``quick``: small sizes.  The
    first five are the default set; the others run when ``--only`` names them."""
    from polytc.graph import examples as ex

    if quick:
        return {
            "mlp": (lambda: ex.mlp(16, (784, 256, 10)), "batch 16, 784-256-10"),
            "mlp_b1": (lambda: ex.mlp(1, (784, 256, 10)), "batch 1, 784-256-10"),
            "resnet18": (lambda: ex.resnet18(1, 64, width=16, classes=100),
                         "batch 1, 64x64, width 16, 100 classes"),
            "transformer_layer": (lambda: ex.transformer_layer(1, 32, 64, 4, 256),
                                  "batch 1, seq 32, d 64, 4 heads, ffn 256"),
            "bert_encoder": (lambda: ex.bert_encoder(1, 32, 1000, 64, 4, 256, 2),
                             "batch 1, seq 32, vocab 1000, d 64, 4 heads, ffn 256, 2 layers"),
            "small_cnn": (lambda: ex.small_cnn(2, 32), "batch 2, 32x32"),
            "lstm_model": (lambda: ex.lstm_model(8, 2, 16, 32), "seq 8, batch 2, 16 -> 32"),
            "gru_model": (lambda: ex.gru_model(8, 2, 16, 32), "seq 8, batch 2, 16 -> 32"),
            "squeezenet": (lambda: ex.squeezenet(1, 64, classes=100, width=0.25),
                           "batch 1, 64x64, width 0.25, 100 classes"),
            "shufflenet": (lambda: ex.shufflenet_v2(1, 64, classes=100, width=0.25),
                           "batch 1, 64x64, width 0.25, 100 classes"),
        }
    return {
        "mlp": (lambda: ex.mlp(64), "batch 64, 784-512-512-10"),
        "mlp_b1": (lambda: ex.mlp(1), "batch 1, 784-512-512-10"),
        "resnet18": (lambda: ex.resnet18(1, 224), "batch 1, 224x224, width 64, 1000 classes"),
        "transformer_layer": (lambda: ex.transformer_layer(1, 128, 256, 4, 1024),
                              "batch 1, seq 128, d 256, 4 heads, ffn 1024"),
        "bert_encoder": (lambda: ex.bert_encoder(1, 128, 1000, 256, 4, 1024, 2),
                         "batch 1, seq 128, vocab 1000, d 256, 4 heads, ffn 1024, 2 layers"),
        "small_cnn": (lambda: ex.small_cnn(8, 32), "batch 8, 32x32"),
        "lstm_model": (lambda: ex.lstm_model(32, 16, 128, 256), "seq 32, batch 16, 128 -> 256"),
        "gru_model": (lambda: ex.gru_model(32, 16, 128, 256), "seq 32, batch 16, 128 -> 256"),
        "squeezenet": (lambda: ex.squeezenet(1, 224), "batch 1, 224x224, SqueezeNet 1.1, "
                       "width 1.0, 1000 classes"),
        "shufflenet": (lambda: ex.shufflenet_v2(1, 224), "batch 1, 224x224, ShuffleNetV2 "
                       "x1.0, 1000 classes"),
    }


def batched(b: int) -> dict:
    """The default models at batch ``b`` (``--batch``; ``mlp_b1`` is ``mlp`` there)."""
    from polytc.graph import examples as ex

    return {
        "mlp": (lambda: ex.mlp(b), f"batch {b}, 784-512-512-10"),
        "resnet18": (lambda: ex.resnet18(b, 224), f"batch {b}, 224x224, width 64"),
        "transformer_layer": (lambda: ex.transformer_layer(b, 128, 256, 4, 1024),
                              f"batch {b}, seq 128, d 256"),
        "bert_encoder": (lambda: ex.bert_encoder(b, 128, 1000, 256, 4, 1024, 2),
                         f"batch {b}, seq 128, d 256, 2 layers"),
        "small_cnn": (lambda: ex.small_cnn(b, 32), f"batch {b}, 32x32"),
        "lstm_model": (lambda: ex.lstm_model(32, b, 128, 256), f"seq 32, batch {b}"),
        "gru_model": (lambda: ex.gru_model(32, b, 128, 256), f"seq 32, batch {b}"),
        "squeezenet": (lambda: ex.squeezenet(b, 224), f"batch {b}, 224x224"),
        "shufflenet": (lambda: ex.shufflenet_v2(b, 224), f"batch {b}, 224x224"),
    }


DEFAULT = ["mlp", "mlp_b1", "resnet18", "transformer_layer", "bert_encoder", "small_cnn",
           "lstm_model", "gru_model", "squeezenet", "shufflenet"]


INT8 = ["mlp", "mlp_b1", "resnet18", "transformer_layer", "bert_encoder", "small_cnn"]


#: --int8's modes: how onnxruntime.quantization writes the model
INT8_MODES = {"dynamic": "quantize_dynamic", "qdq": "quantize_static, QDQ",
              "qoperator": "quantize_static, QOperator"}


def quantised(table: dict, mode: str = "dynamic") -> dict:
    """``table``'s models with int8 weights, as ``onnxruntime.quantization`` writes them
    (``INT8_MODES``): ``quantize_dynamic`` (DynamicQuantizeLinear, MatMulInteger,
    ConvInteger) or ``quantize_static`` with its defaults, calibrated on four example
    inputs, in the QDQ or the QOperator format."""
    def build(make):
        import onnx
        from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                              quantize_dynamic, quantize_static)

        from polytc.graph import examples as ex

        model = make()
        with tempfile.TemporaryDirectory() as d:
            src, dst = os.path.join(d, "f32.onnx"), os.path.join(d, "int8.onnx")
            onnx.save(model, src)
            if mode == "dynamic":
                quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
                return onnx.load(dst)

            class Reader(CalibrationDataReader):
                def __init__(self):
                    self.left = [ex.example_inputs(model, seed=s) for s in range(4)]

                def get_next(self):
                    return self.left.pop() if self.left else None

            quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ if mode == "qdq"
                            else QuantFormat.QOperator)
            return onnx.load(dst)

    return {n: (lambda make=make: build(make), f"{sizes}, int8 ({INT8_MODES[mode]})")
            for n, (make, sizes) in table.items()}


def check(outs, refs, tol: float = RTOL, spread: float = 0) -> str | None:
    """None when polytc's outputs match onnxruntime's, else why not (``spread``: see
    ``STATIC_SPREAD``)."""
    if len(outs) != len(refs):
        return f"{len(outs)} outputs, expected {len(refs)}"
    for i, (o, r) in enumerate(zip(outs, refs)):
        o = np.asarray(o)
        if o.shape != r.shape:
            return f"output {i}: shape {o.shape}, expected {r.shape}"
        big = max(1.0, float(np.abs(r).max()) if r.size else 0.0)
        if np.allclose(o, r, rtol=tol, atol=tol * big):
            continue
        err = np.abs(o.astype(np.float64) - r)
        if spread and np.nanmax(err) <= spread * tol * big and \
                np.nanmean(err) <= tol / 5 * big:
            continue
        return f"output {i}: max abs error {np.nanmax(err):.3g}, mean {np.nanmean(err):.3g} " \
               f"(max |ref| {big:.3g})"
    return None


# --- worker processes -------------------------------------------------------------------
#
# The protocol of bench_cpu's workers, with one setup request per model:
#   ("setup", model, path, feeds, refs, cache_dir) -> ("ok", ready, cells, notes, outputs)
#   ("once", column), ("sample", column, inner), ("quit",) as there.

def _session(family: str, path: str, threads: int):
    if family == "polytc":
        from polytc import onnx as ponnx

        return ponnx.compile(path)
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def _exported(sess, cache_dir: str):
    """``sess``'s model exported into a directory beside ``cache_dir`` and loaded."""
    from polytc import aot

    d = tempfile.mkdtemp(prefix="export-", dir=os.path.dirname(cache_dir))
    sess.export(d)
    return aot.load(d)


def worker_main(family: str, threads: int, tol: tuple = (RTOL, 0)) -> int:
    """The loop of a worker process: one library, persistent across models (``tol``:
    how close polytc's outputs must be to onnxruntime's, ``check``'s tolerance and
    spread)."""
    bench_cpu.steady_malloc()
    send, receive = common.worker_channel()

    try:
        if family == "polytc":
            import polytc
            import polytc.onnx  # noqa: F401

            version = polytc.__version__
        else:
            import onnxruntime

            version = onnxruntime.__version__
    except ImportError as e:
        send(("missing", common.short(e)))
        return 0
    send(("hello", version))
    calls: dict = {}  # column -> the run it times
    sessions: dict = {}  # model path -> its session (--dynamic: one for every batch)
    for msg in receive():
        op = msg[0]
        try:
            if op == "setup":  # (..., column): a column other than the family's
                name, path, feeds, refs, cache_dir = msg[1:6]
                col = msg[6] if len(msg) > 6 else family
                calls.pop(col, None)
                if cache_dir:
                    os.environ["POLYTC_CACHE_DIR"] = cache_dir
                sess = sessions.get(path) or sessions.setdefault(
                    path, _session(family, path, threads))
                if col == "exported":  # the same model exported (--export)
                    sess = _exported(sess, cache_dir)
                common.quiet_machine()  # (the first run is timed: --dynamic's new batch)
                t0 = time.perf_counter()
                outs = sess.run(None, feeds)
                first = time.perf_counter() - t0
                why = None if refs is None else check(outs, refs, *tol)
                if why is None:
                    def call(run=sess.run, feeds=feeds):
                        return run(None, feeds)
                    calls[col] = call
                    reply = ("ok", [col], {}, [], [np.asarray(o) for o in outs], first)
                else:
                    reply = ("ok", [], {col: "WRONG"}, [f"{name} {col}: WRONG, {why}"],
                             None, first)
            elif op == "once":  # calibrates the calls per sample: a call right after
                # another, as in a sample's loop (the first after an idle wait also wakes
                # the thread pool, and samples of too few calls then measure mostly that)
                warm_up(calls[msg[1]])  # (under --load's neighbour: it runs by now)
                reply = ("ok", common.time_once(calls[msg[1]]))
            elif op == "sample":
                reply = ("ok", common.time_sample(calls[msg[1]], msg[2]))
            else:
                reply = ("error", f"unknown request {op!r}")
            common.settle()
        except Exception as e:  # noqa: BLE001 -- answered, the parent reports it
            reply = ("error", common.short(e))
        send(reply)
    return 0


def warm_up(call, seconds: float = WARM_UP_S) -> None:
    """Run the model for ``seconds`` (a served model's state, not a fresh session's):
    polytc's thread governor has chosen its team size by then (graph/governor.py), as
    onnxruntime's pool has settled."""
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        call()


class Worker(bench_cpu.Worker):
    """bench_cpu's handle on a worker process, running this module's loop."""

    tol = (RTOL, 0)

    def code(self) -> str:
        return f"import bench_onnx; sys.exit(bench_onnx.worker_main({self.family!r}, " \
            f"{self.threads}, {self.tol!r}))"


# --- compile times ----------------------------------------------------------------------

def probe_main(path: str, feeds_path: str) -> None:
    """In a fresh process: seconds of ``polytc.onnx.compile(path)`` and of the first run."""
    from polytc import onnx as ponnx

    with np.load(feeds_path) as z:
        feeds = {k: z[k] for k in z.files}
    t0 = time.perf_counter()
    sess = ponnx.compile(path)
    t1 = time.perf_counter()
    sess.run(None, feeds)
    t2 = time.perf_counter()
    print("PROBE " + json.dumps({"compile": t1 - t0, "first_run": t2 - t1}), flush=True)


def compile_time(path: str, feeds_path: str, cache_dir: str, timeout: float = 1800) -> float:
    """compile + first run in a fresh process with ``POLYTC_CACHE_DIR=cache_dir``."""
    code = f"import bench_onnx; bench_onnx.probe_main({path!r}, {feeds_path!r})"
    env = dict(os.environ, POLYTC_CACHE_DIR=cache_dir)
    env.pop("POLYTC_NO_DISK_CACHE", None)
    # an installed package's modules load from their bytecode: without it every fresh
    # process compiles polytc's sources again (30-60 ms of a load from the disk cache,
    # where PYTHONDONTWRITEBYTECODE is set)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    r = subprocess.run(common.child_command(HERE, code), capture_output=True, text=True, env=env,
                       timeout=timeout)
    for line in r.stdout.splitlines():
        if line.startswith("PROBE "):
            t = json.loads(line[6:])
            return t["compile"] + t["first_run"]
    last = (r.stderr.strip().splitlines() or [f"exit code {r.returncode}"])[-1]
    raise RuntimeError(f"compile failed: {last[:160]}")


# --- one model --------------------------------------------------------------------------

def run_model(name, build, args, tmp, workers, notes):
    import onnx

    from polytc.graph import examples as ex

    m = build()
    path = os.path.join(tmp, f"{name}.onnx")
    onnx.save(m, path)
    feeds = ex.example_inputs(m, seed=0)
    feeds_path = os.path.join(tmp, f"{name}.npz")
    np.savez(feeds_path, **feeds)
    del m
    cache_dir = os.path.join(tmp, f"cache-{name}")
    os.makedirs(cache_dir)

    cells, compile_s = {}, {}
    for which in ("cold", "disk"):
        try:
            compile_s[which] = compile_time(path, feeds_path, cache_dir)
        except (RuntimeError, subprocess.SubprocessError) as e:
            compile_s[which] = "fail"
            notes.append(f"{name} {which} compile: {common.short(e)}")
            break
        if args.verbose:
            print(f"  {name}: {which} compile {compile_s[which]:.2f}s", file=sys.stderr)

    contenders, refs = {}, None
    for family in ("ort", "polytc"):  # onnxruntime first: its outputs check polytc's
        w = workers[family]
        try:
            if not w.alive and w.missing is None:
                w.start()
                w.hello()
            if w.missing is not None:
                cells[family] = "n/a"
                continue
            ready, c, n, outs, _ = w.call(("setup", name, path, feeds,
                                           refs if family == "polytc" else None,
                                           cache_dir if family == "polytc" else None), 1800)
        except bench_cpu.WorkerError as e:
            cells[family] = "fail"
            notes.append(f"{name} {family}: {e}")
            continue
        cells.update(c)
        notes.extend(n)
        if family == "ort":
            refs = outs
        if family == "polytc" and args.export and ready:
            try:
                more, c, n, _, _ = w.call(("setup", name, path, feeds, refs, cache_dir,
                                           "exported"), 1800)
                ready += more
                cells.update(c)
                notes.extend(n)
            except bench_cpu.WorkerError as e:
                cells["exported"] = "fail"
                notes.append(f"{name} exported: {e}")
        for col in ready:
            contenders[col] = bench_cpu.Remote(w, col)

    with common.BusyNeighbour() if args.load else contextlib.nullcontext():
        timings = common.time_interleaved(contenders, args.repeats, warm=True,
                                          min_sample=args.min_sample, slow=1.0,
                                          slow_repeats=1 if args.quick else 3)
    times = {}
    for col, t in timings.items():
        if args.verbose:
            print(f"  {name} {col}: {t.inner} call(s) a sample, ms "
                  + " ".join(common.fmt_ms(x) for x in t.samples), file=sys.stderr)
        if t.error is not None:
            cells[col] = "fail"
            notes.append(f"{name} {col}: {t.error}")
        else:
            times[col] = t.median
    ratio = (times["polytc"] / times["ort"] if "polytc" in times and "ort" in times
             else math.nan)

    def secs(x):
        return x if isinstance(x, str) else "-" if x is None else f"{x:.2f}"

    row = [name, cells.get("polytc") or common.fmt_ms(times.get("polytc")),
           cells.get("ort") or common.fmt_ms(times.get("ort")), common.fmt_ratio(ratio),
           secs(compile_s.get("cold")), secs(compile_s.get("disk"))]
    if args.export:
        exp = times.get("exported")
        row += [cells.get("exported") or common.fmt_ms(exp), common.fmt_ratio(
            exp / times["ort"] if exp is not None and "ort" in times else math.nan)]
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated model names")
    ap.add_argument("--repeats", type=int, default=None,
                    help="timed samples per contender (default 15, 5 with --quick)")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for both libraries (default: POLYTC_NUM_THREADS / "
                         "OMP_NUM_THREADS, else every core)")
    ap.add_argument("--quick", action="store_true", help="small sizes, fewer samples")
    ap.add_argument("--batch", type=int, default=None,
                    help="every model at this batch size (e.g. 64), full sizes otherwise")
    ap.add_argument("--min-sample", type=float, default=None,
                    help="seconds a sample lasts at least (default 0.02, 0.005 with --quick)")
    ap.add_argument("--load", action="store_true",
                    help="time with a busy neighbour: a process spinning on one core "
                         "(compile times are measured without it)")
    ap.add_argument("--dynamic", action="store_true",
                    help="models with a symbolic batch (one with a symbolic sequence "
                         "length), run at several sizes")
    ap.add_argument("--int8", nargs="?", const="dynamic", choices=list(INT8_MODES),
                    help="the models quantised by onnxruntime's quantize_dynamic (default), "
                         "or quantize_static in the QDQ or QOperator format")
    ap.add_argument("--export", action="store_true",
                    help="also time each model exported ahead of time (polytc.aot)")
    ap.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    args = ap.parse_args(argv)
    if args.dynamic:
        return dynamic_main(args.threads or common.default_threads(), args.repeats or 7)
    if args.repeats is None:
        args.repeats = 5 if args.quick else 15
    if args.min_sample is None:
        args.min_sample = 0.005 if args.quick else 0.02
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    threads = args.threads or common.default_threads()
    if threads < 1:
        ap.error("--threads must be at least 1")
    if args.batch is not None and args.batch < 1:
        ap.error("--batch must be at least 1")
    # before any process imports polytc: its kernels (and every worker) take this count
    os.environ["POLYTC_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = str(threads)

    table = models(args.quick) if args.batch is None else batched(args.batch)
    if args.int8:
        table = quantised(table, args.int8)
    wanted = [w.strip() for w in args.only.split(",") if w.strip()] or \
        [m for m in (INT8 if args.int8 else DEFAULT) if m in table]
    unknown = [w for w in wanted if w not in table]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(table)}")

    workers = {f: Worker(f, threads) for f in FAMILIES}
    for w in workers.values():
        w.tol = (INT8_TOL, STATIC_SPREAD if args.int8 in ("qdq", "qoperator") else 0) \
            if args.int8 else (RTOL, 0)
    notes, rows = [], []
    try:
        for w in workers.values():  # start both, then wait: the imports overlap
            w.start()
        for w in workers.values():
            try:
                w.hello()
            except bench_cpu.WorkerError as e:
                notes.append(str(e))
        vers = [f"{f} {w.version}" if w.version else
                f"{f} not available ({w.missing})" if w.missing else f"{f} failed to start"
                for f, w in workers.items()]
        nthr = f"{threads} thread{'s' if threads != 1 else ''}"
        busy = ", one other process spinning on a core (--load)" if args.load else ""
        print(f"polytc ONNX benchmark: {common.cpu_model()}, {nthr} for both libraries{busy}")
        print(f"{', '.join(vers)}; median ms of one sess.run over {args.repeats} interleaved "
              f"samples{' (--quick)' if args.quick else ''}")
        sys.stdout.flush()
        load0 = common.load_average()
        t_start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="polytc-bench-onnx-") as tmp:
            for name in wanted:
                t0 = time.perf_counter()
                try:
                    rows.append(run_model(name, table[name][0], args, tmp, workers, notes))
                except Exception as e:  # noqa: BLE001 -- one broken model does not end it
                    rows.append([name, "fail"] + [""] * (len(COLUMNS) - 2 + 2 * args.export))
                    notes.append(f"{name}: {common.short(e)}")
                if args.verbose:
                    print(f"{name}: {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    finally:
        for w in workers.values():
            w.stop()
    print()
    print(common.table(COLUMNS + (["exported", "exported/ort"] if args.export else []), rows))
    print()
    print("sizes: " + "; ".join(f"{n} {table[n][1]}" for n in wanted))
    print("polytc, ort: median ms of one run; polytc/ort below 1: polytc is faster; compile: "
          "polytc.onnx.compile + first run in a fresh process, with an empty cache (cold) "
          "and again from that cache (disk)" + ("; exported: the model exported ahead of "
                                                 "time, its library called from Python"
                                                 if args.export else ""))
    common.print_footer(notes, load0, t_start)
    return 0


DYNAMIC_BATCHES = (8, 1, 2, 3, 17, 32, 64)  # the first compiles, the others reuse its kernels
#: sessions of the model with the symbolic batch, each run at every batch in turn: a new
#: batch's cost is the median of their first runs (one first run is one sample of a
#: machine whose page faults and thread wake-ups vary run to run)
DYNAMIC_TRIALS = 3


def dynamic_main(threads: int, repeats: int) -> int:
    """The ``--dynamic`` tables (see the module docstring): each library in its worker
    process, as in the main table; polytc's worker keeps one session of the model with
    the symbolic batch (its first run at a new batch is the cost of that batch) and
    compiles a session for each batch alone (the ``specialised`` column)."""
    import onnx

    from polytc.graph import examples as ex

    os.environ["POLYTC_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = str(threads)
    print(f"polytc ONNX dynamic batch: {common.cpu_model()}, {threads} threads for both; "
          f"median ms of one run over {repeats} interleaved samples")
    workers = {f: Worker(f, threads) for f in FAMILIES}
    notes: list = []
    load0, t_start = common.load_average(), time.perf_counter()
    try:
        for w in workers.values():
            w.start()
        for w in workers.values():
            w.hello()
        with tempfile.TemporaryDirectory(prefix="polytc-bench-dyn-") as tmp:
            for name, make, what in (
                    ("mlp 784-512-512-10", lambda b: ex.mlp(b), "batch"),
                    ("small_cnn 32x32", lambda b: ex.small_cnn(b, 32), "batch"),
                    ("transformer_layer seq 128, d 256, ffn 1024",
                     lambda b: ex.transformer_layer(b, 128, 256, 4, 1024), "batch"),
                    # the sequence length symbolic, two sequences: every product's rows
                    # and the attention's scores, both ways, vary with it
                    ("transformer_layer batch 2, d 256, ffn 1024 (seq N)",
                     lambda s: ex.transformer_layer(2, s, 256, 4, 1024), "seq")):
                stem = f"{name.split()[0]}_{what}"  # (its files and cache: its own)
                dyn = os.path.join(tmp, f"{stem}_N.onnx")
                onnx.save(make("N"), dyn)
                # the same model under other names: sessions of their own (the first
                # compiles, the others load its kernels from the disk cache)
                dyns = [dyn]
                for j in range(1, DYNAMIC_TRIALS):
                    dyns.append(os.path.join(tmp, f"{stem}_N{j}.onnx"))
                    shutil.copyfile(dyn, dyns[-1])
                cache = os.path.join(tmp, f"cache-{stem}")
                rows, ratios, news = [], [], []
                for k, b in enumerate(DYNAMIC_BATCHES):
                    fixed = os.path.join(tmp, f"{stem}_{b}.onnx")
                    m = make(b)
                    onnx.save(m, fixed)
                    feeds = ex.example_inputs(m, seed=k)
                    _, _, _, refs, _ = workers["ort"].call(
                        ("setup", name, dyn, feeds, None, None, "ort"), 600)
                    contenders, cells, firsts = {}, {}, []
                    for col, path in [("polytc", d) for d in dyns] + [("specialised", fixed)]:
                        ready, c, n, _, t = workers["polytc"].call(
                            ("setup", name, path, feeds, refs, cache, col), 1800)
                        if col == "polytc":
                            firsts.append(t)
                        cells.update(c)
                        notes.extend(n)
                        contenders.update({x: bench_cpu.Remote(workers["polytc"], x)
                                           for x in ready})
                    # two pairs, each interleaved: polytc with onnxruntime, then with
                    # its specialised session (the three in one rotation put polytc
                    # after onnxruntime's samples twice as often as the specialised
                    # one: an MLP at batch 32-64 read 1.28-1.34x specialised, 1.02-1.03
                    # without onnxruntime in the rotation)
                    spec = {c: contenders[c] for c in ("polytc", "specialised")
                            if c in contenders}
                    pair = {c: contenders[c] for c in ("polytc",) if c in contenders}
                    pair["ort"] = bench_cpu.Remote(workers["ort"], "ort")
                    t, t_spec = ({col: x.median for col, x in common.time_interleaved(
                        group, repeats, warm=True, min_sample=0.02).items()
                        if x.error is None} for group in (pair, spec))
                    t["specialised"] = t_spec.get("specialised")
                    if t["specialised"] is None:
                        del t["specialised"]
                    # (the first batch: the first session's, which compiled)
                    first = firsts[0] if k == 0 else sorted(firsts)[len(firsts) // 2]
                    cost = first - t.get("polytc", 0.0)  # the first run less a run
                    if k >= 1:
                        news.append(cost)
                    row = [str(b), f"{first * 1e3:.1f}", f"{cost * 1e3:.1f}"]
                    for col in ("polytc", "ort", "specialised"):
                        row.append(cells.get(col) or common.fmt_ms(t[col]) if col in t
                                   else cells.get(col, "fail"))
                    if "polytc" in t and "ort" in t:
                        ratios.append(t["polytc"] / t["ort"])
                        row.append(f"{t['polytc'] / t['ort']:.2f}x")
                    else:
                        row.append("")
                    row.append(f"{t_spec['polytc'] / t_spec['specialised']:.2f}x"
                               if "polytc" in t_spec and "specialised" in t_spec else "")
                    rows.append(row)
                print(f"\n{name}, exported with {what} N")
                print(common.table([what, "first run ms", f"new {what} ms", "polytc", "ort",
                                    "specialised", "polytc/ort", "polytc/spec."], rows))
                geo = math.exp(sum(map(math.log, ratios)) / max(1, len(ratios)))
                print(f"polytc/ort geomean {geo:.2f}; a new {what} after the first (compiles "
                      f"nothing): median {sorted(news)[len(news) // 2] * 1e3:.1f} ms, worst "
                      f"{max(news) * 1e3:.1f} ms more than a run")
    finally:
        for w in workers.values():
            w.stop()
    print(f"\nbatch (seq): in this order; first run: polytc's first sess.run at that batch (the "
          f"first compiles, with the batch symbolic; later ones: the median of "
          f"{DYNAMIC_TRIALS} sessions' first runs); new batch: the first run less a run "
          f"(the plan, first touches of its memory); specialised: a session compiled for "
          f"that batch alone, timed interleaved with polytc's in a pair of their own "
          f"(polytc/spec.), as polytc's with onnxruntime's (polytc, ort, polytc/ort)")
    common.print_footer(notes, load0, t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
