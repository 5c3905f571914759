"""``polytc bench`` (polytc/perftest.py): the latency summary, JSON results, onnxruntime
beside polytc, random inputs, and bad arguments."""
from __future__ import annotations

import json
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polytc
from polytc import perftest
from polytc.cli import main

from .test_onnx_errors import small_model

STATS = ("min_ms", "mean_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "runs_per_s")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("bench")
    onnx.save(small_model(), d / "small.onnx")
    onnx.save(small_model("symbolic"), d / "sym.onnx")
    return d


def cli(capsys, *args):
    rc = main(["bench"] + [str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_prints_compile_time_and_latencies(models, capsys):
    rc, out, err = cli(capsys, models / "small.onnx", "--runs", 3, "--warmup", 1)
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == (f"model {models / 'small.onnx'}: x[2x4] float32, b[2x4] float32; "
                        "threads default, 1 warm-up run")
    assert lines[1].startswith("compile: ") and lines[1].endswith(" s")
    assert lines[2].split() == ["engine", "runs", "min", "ms", "mean", "ms", "p50", "ms",
                                "p90", "ms", "p95", "ms", "p99", "ms", "runs/s"]
    row = lines[3].split()
    assert row[:2] == ["polytc", "3"] and len(row) == 9
    assert len(lines) == 4  # no onnxruntime


def test_json_results(models, capsys, tmp_path):
    path = tmp_path / "r.json"
    rc, out, err = cli(capsys, models / "sym.onnx", "--shape", "x=3x4", "--shape", "b=3x4",
                       "--runs", 7, "--warmup", 0, "--seed", 4, "--threads", 1,
                       "--json", path)
    assert rc == 0, err
    r = json.loads(path.read_text())
    assert r["model"] == str(models / "sym.onnx")
    assert r["inputs"] == {"x": {"shape": [3, 4], "dtype": "float32"},
                           "b": {"shape": [3, 4], "dtype": "float32"}}
    assert (r["threads"], r["warmup"], r["seed"]) == (1, 0, 4)
    assert r["compile_s"] > 0 and "onnxruntime" not in r["engines"]
    s = r["engines"]["polytc"]
    assert s["runs"] == 7
    assert 0 < s["min_ms"] <= s["p50_ms"] <= s["p90_ms"] <= s["p95_ms"] <= s["p99_ms"]
    assert s["min_ms"] <= s["mean_ms"]
    assert s["runs_per_s"] == pytest.approx(1e3 / s["mean_ms"])
    assert f"{s['p50_ms']:9.3f}" in out  # the printed table has the same numbers


def test_onnxruntime_beside(models, capsys, tmp_path):
    pytest.importorskip("onnxruntime")
    path = tmp_path / "r.json"
    rc, out, err = cli(capsys, models / "small.onnx", "--ort", "--runs", 12, "--warmup", 1,
                       "--threads", 2, "--json", path)
    assert rc == 0, err
    r = json.loads(path.read_text())
    assert [e["runs"] for e in r["engines"].values()] == [12, 12]
    assert r["max_abs_diff"]["y"] < 1e-6
    e = r["engines"]
    assert r["ratio_p50"] == pytest.approx(e["polytc"]["p50_ms"] / e["onnxruntime"]["p50_ms"])
    lines = out.splitlines()
    assert lines[3].startswith("polytc ") and lines[4].startswith("onnxruntime ")
    assert lines[5].startswith("outputs, max abs diff polytc - onnxruntime: y ")
    assert lines[6] == f"polytc / onnxruntime p50: {r['ratio_p50']:.3f}x"


def test_threads_reach_both_engines(models, monkeypatch):
    """--threads N: the kernels' OpenMP team (Options.num_threads) and onnxruntime's
    intra-op threads."""
    pytest.importorskip("onnxruntime")
    import polytc.onnx as ponnx

    seen = {}
    compile_, ort_session = ponnx.compile, perftest.ort_session

    def spy_compile(*a, **kw):
        seen["options"] = kw.get("options")
        return compile_(*a, **kw)

    def spy_ort(model, threads):
        seen["ort"] = ort_session(model, threads)
        return seen["ort"]
    monkeypatch.setattr(ponnx, "compile", spy_compile)
    monkeypatch.setattr(perftest, "ort_session", spy_ort)
    assert main(["bench", str(models / "small.onnx"), "--threads", "3", "--runs", "1",
                 "--warmup", "0", "--ort"]) == 0
    assert seen["options"].num_threads == 3
    assert seen["ort"].get_session_options().intra_op_num_threads == 3


def test_ort_missing_is_a_clear_error(models, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails
    rc, out, err = cli(capsys, models / "small.onnx", "--ort", "--runs", 1)
    assert rc == 1
    assert err == ("error: --ort needs onnxruntime, which is not installed\n"
                   "hint: pip install onnxruntime\n")


def test_duration_and_runs(models, capsys, tmp_path):
    path = tmp_path / "r.json"
    rc, _, err = cli(capsys, models / "small.onnx", "--duration", 0.05, "--warmup", 0,
                     "--json", path)
    assert rc == 0, err
    runs = json.loads(path.read_text())["engines"]["polytc"]["runs"]
    assert runs > 1 and runs != 50  # time-bound, not the default count
    # both: whichever ends first
    rc, _, err = cli(capsys, models / "small.onnx", "--duration", 60, "--runs", 2,
                     "--json", path)
    assert rc == 0, err
    assert json.loads(path.read_text())["engines"]["polytc"]["runs"] == 2


def test_symbolic_model_needs_shapes(models, capsys):
    rc, out, err = cli(capsys, models / "sym.onnx")
    assert rc == 1 and out == ""
    assert err.startswith("error: input 'x' has the shape ['N', 4]")


@pytest.mark.parametrize("args,message", [
    (["--runs", "0"], "--runs 0: expected a whole number of at least 1"),
    (["--runs", "abc"], "--runs abc: expected a whole number of at least 1"),
    (["--warmup", "-1"], "--warmup -1: expected a whole number of at least 0"),
    (["--threads", "0"], "--threads 0: expected a whole number of at least 1"),
    (["--threads", "2.5"], "--threads 2.5: expected a whole number of at least 1"),
    (["--duration", "0"], "--duration 0: expected a number above 0"),
    (["--duration", "nan"], "--duration nan: expected a number above 0"),
    (["--duration", "inf"], "--duration inf: expected a number above 0"),
    (["--seed", "x"], "--seed x: expected a whole number of at least 0"),
    (["--disable", "nope"], "--disable nope: no such graph pass"),
    (["--shape", "z=2x4"], "--shape z=2x4: the model has no input 'z'"),
    (["--json", "/nonexistent/dir/r.json", "--runs", "1"],
     "/nonexistent/dir/r.json: cannot write (No such file or directory)"),
])
def test_bad_arguments(models, capsys, args, message):
    rc, out, err = cli(capsys, models / "small.onnx", *args)
    assert rc == 1
    assert err.startswith(f"error: {message}"), err
    assert len(err.splitlines()) <= 2  # the error (and its hint)


def test_missing_model_file(capsys, tmp_path):
    rc, _, err = cli(capsys, tmp_path / "none.onnx")
    assert rc == 1 and err == f"error: {tmp_path / 'none.onnx'}: no such model file\n"


# --- the module's parts ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def mixed():
    """ids (int64, indexing a 5-row table), flag (bool), h (float16) -> one output."""
    table = numpy_helper.from_array(np.arange(20, dtype=np.float32).reshape(5, 4), "table")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"]),
             helper.make_node("Cast", ["h"], ["h32"], to=TensorProto.FLOAT),
             helper.make_node("Where", ["flag", "e", "h32"], ["y"])]
    io = [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3]),
          helper.make_tensor_value_info("flag", TensorProto.BOOL, [2, 3, 4]),
          helper.make_tensor_value_info("h", TensorProto.FLOAT16, [2, 3, 4])]
    m = helper.make_model(helper.make_graph(
        nodes, "mixed", io, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])],
        [table]), opset_imports=[helper.make_opsetid("", 17)])
    return polytc.onnx.compile(m)


def test_random_inputs_by_dtype(mixed):
    shapes = {"ids": (2, 3), "flag": (2, 3, 4), "h": (2, 3, 4)}
    feeds = perftest.random_inputs(mixed, shapes, seed=0)
    assert {v: (a.dtype, a.shape) for v, a in feeds.items()} == {
        "ids": (np.int64, (2, 3)), "flag": (np.bool_, (2, 3, 4)), "h": (np.float16, (2, 3, 4))}
    big = perftest.random_inputs(mixed, {"ids": (1000,), "flag": (1,), "h": (1,)}, seed=0)
    assert 0 <= big["ids"].min() and big["ids"].max() == 4  # below the table's 5 rows
    assert 0 < feeds["flag"].mean() < 1 and feeds["h"].std() > 0.5
    again = perftest.random_inputs(mixed, shapes, seed=0)
    other = perftest.random_inputs(mixed, shapes, seed=1)
    assert all(np.array_equal(feeds[v], again[v]) for v in feeds)
    assert not np.array_equal(feeds["h"], other["h"])
    mixed.run(None, feeds)  # what the session takes


def test_engines_take_turns_by_blocks(monkeypatch):
    monkeypatch.setattr(perftest, "settle", lambda: None)
    order = []
    calls = {"a": lambda: order.append("a"), "b": lambda: order.append("b")}
    times = perftest.time_runs(calls, warmup=1, runs=12, duration=None)
    assert [len(t) for t in times.values()] == [12, 12]
    # warm-up, then per engine one untimed call and a block of BLOCK timed ones
    assert "".join(order) == "ab" + "a" * 11 + "b" * 11 + "a" * 3 + "b" * 3
    order.clear()
    times = perftest.time_runs({"a": calls["a"]}, warmup=2, runs=3, duration=None)
    assert "".join(order) == "aaaaa" and len(times["a"]) == 3  # one engine: no turns


def test_max_abs_diff():
    d = perftest.max_abs_diff(["a", "b", "c", "e"],
                              [np.ones(3, np.float32), np.zeros(2), np.array([1, 5]),
                               np.zeros((0, 2))],
                              [np.full(3, 1.5, np.float16), np.zeros(3), np.array([3, 2]),
                               np.zeros((0, 2))])
    assert d == {"a": 0.5, "b": None, "c": 3.0, "e": 0.0}
