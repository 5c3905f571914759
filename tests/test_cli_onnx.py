"""``polytc compile`` and ``polytc run`` on ONNX models."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest

from polytc.cli import main

from .test_onnx_errors import small_model


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    onnx.save(small_model(), d / "small.onnx")
    onnx.save(small_model("symbolic"), d / "sym.onnx")
    x = np.arange(8, dtype=np.float32).reshape(2, 4) - 3
    b = np.full((2, 4), 0.5, np.float32)
    np.savez(d / "in.npz", x=x, b=b)
    np.save(d / "one.npy", x)
    want = np.maximum(x + b, 0) * np.arange(4, dtype=np.float32)
    return d, want


def cli(capsys, *args):
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_compile_reports_groups_and_time(models, capsys):
    d, _ = models
    rc, out, err = cli(capsys, "compile", d / "small.onnx")
    assert rc == 0, err
    assert "model small: 3 nodes after the graph passes" in out
    assert "Add + Relu + Mul" in out  # one fused group
    assert "1 compiled groups" in out
    assert f"compiled {d / 'small.onnx'} for x[2x4], b[2x4] in " in out
    assert "compile " in out.splitlines()[-1]


def test_compile_symbolic_needs_shapes(models, capsys):
    d, _ = models
    rc, out, err = cli(capsys, "compile", d / "sym.onnx")
    assert rc == 1 and out == ""
    assert err.startswith("error: input 'x' has the shape ['N', 4]")
    assert "--shape x=?x4" in err
    rc, out, err = cli(capsys, "compile", d / "sym.onnx", "--shape", "x=3x4", "--shape",
                       "b=3x4", "--show", "graph", "--show", "tc", "--show", "groups")
    assert rc == 0, err
    assert "graph small (opset 17)" in out and "y = Mul(r, w)" in out  # --show graph
    assert "def g0(float(3, 4) v0, float(3, 4) v1, float(4) v2)" in out  # --show tc
    assert "input shapes [[3, 4], [3, 4]]" in out  # --show groups
    assert "for x[3x4], b[3x4]" in out


@pytest.mark.parametrize("args, message", [
    (["--shape", "x=3x4", "--shape", "b=5x4"], "dimension 0 ('N') is 5, but it is 3"),
    (["--shape", "q=3x4"], "the model has no input 'q' (inputs: x ['N', 4], b ['N', 4])"),
    (["--shape", "x3x4"], "expected NAME=DxDx..."),
    (["--shape", "x=3xa", "--shape", "b=3x4"], "dimensions must be integers"),
    (["--shape", "x=3x4x1", "--shape", "b=3x4"], "the model wants rank 2"),
    (["--shape", "x=3x4", "--shape", "b=3x4", "--disable", "nope"],
     "--disable nope: no such graph pass"),
])
def test_compile_bad_shapes(models, capsys, args, message):
    d, _ = models
    rc, out, err = cli(capsys, "compile", d / "sym.onnx", *args)
    assert rc == 1
    assert err.startswith("error: ") and message in err, err


def test_run_prints_outputs(models, capsys):
    d, want = models
    rc, out, err = cli(capsys, "run", d / "small.onnx", "--input", d / "in.npz")
    assert rc == 0, err
    line = out.strip()
    assert line.startswith("y: shape [2, 4] float32  mean ")
    assert f"mean {want.mean():.6g}" in line and f"max {want.max():.6g}" in line
    assert "first [" in line and "(8 values)" in line


def test_run_writes_npz(models, capsys, tmp_path):
    d, want = models
    rc, out, err = cli(capsys, "run", d / "sym.onnx", "-i", d / "in.npz", "-o",
                       tmp_path / "out.npz", "--no-fuse")
    assert rc == 0, err
    assert "wrote 1 output(s)" in out
    with np.load(tmp_path / "out.npz") as f:
        assert f.files == ["y"]
        np.testing.assert_allclose(f["y"], want)


def test_run_single_input_npy(tmp_path, capsys):
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])
    m = helper.make_model(helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "neg",
                                            [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, tmp_path / "neg.onnx")
    np.save(tmp_path / "x.npy", np.arange(1, 4, dtype=np.float32))
    rc, out, err = cli(capsys, "run", tmp_path / "neg.onnx", "--input", tmp_path / "x.npy")
    assert rc == 0, err
    assert out.startswith("y: shape [3] float32  mean -2  min -3  max -1  first [-1., -2., -3.]")


@pytest.mark.parametrize("model, inp, message", [
    ("nothere.onnx", "in.npz", "nothere.onnx: no such model file"),
    ("small.onnx", "nothere.npz", "nothere.npz: No such file"),
    ("small.onnx", "small.onnx", "small.onnx: not an .npz or .npy file"),
    ("small.onnx", "one.npy", "holds one array, but the model has 2 inputs (x, b)"),
    ("in.npz", "in.npz", "not a readable ONNX model"),
])
def test_run_errors(models, capsys, model, inp, message):
    d, _ = models
    rc, out, err = cli(capsys, "run", d / model, "--input", d / inp)
    assert rc == 1 and err.startswith("error: ") and message in err, err


def test_run_wrong_inputs(models, capsys, tmp_path):
    d, _ = models
    np.savez(tmp_path / "bad.npz", x=np.ones((2, 4)), b=np.ones((2, 4)))  # float64
    rc, out, err = cli(capsys, "run", d / "small.onnx", "--input", tmp_path / "bad.npz")
    assert rc == 1
    assert "error: input 'b' has dtype float64; the model wants float32" in err or \
        "error: input 'x' has dtype float64; the model wants float32" in err
    np.savez(tmp_path / "missing.npz", x=np.ones((2, 4), np.float32))
    rc, out, err = cli(capsys, "run", d / "small.onnx", "--input", tmp_path / "missing.npz")
    assert rc == 1 and "error: missing input(s) 'b'" in err and "hint: inputs: x:" in err


def test_subprocess_exit_status(models):
    """The installed entry point's behaviour: ``error: ...`` on stderr, status 1."""
    d, _ = models
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-m", "polytc", "run", str(d / "small.onnx"),
                        "--input", str(d / "missing.npz")], capture_output=True, text=True,
                       env=env, timeout=120)
    assert p.returncode == 1
    assert p.stderr.startswith("error: ") and "missing.npz" in p.stderr
    assert "Traceback" not in p.stderr
