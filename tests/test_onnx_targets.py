"""Whole ONNX models on the accelerator targets: ``polytc.onnx.compile(model,
target="opencl")`` gives the same outputs as ``target="c"`` (and as the reference), with
every group compiled for the device and the values kept there between groups; the CLI's
``--target``; unknown and unusable targets raise polytc errors.

The device is OpenCL's where there is one (whatever ``polytc.runtime.opencl`` picks:
PoCL's CPU device), else a CUDA GPU; the module is skipped where there is neither.
Without a GPU ``cuda`` must fail with a clear polytc error.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from polytc import UnsupportedError
from polytc.graph import examples as ex
from polytc import backends as targets

from .test_onnx_errors import raises, small_model
from .test_onnx_models import model, reference
from .test_onnx_models import session as c_session

TARGET = next((t for t in ("opencl", "cuda") if targets.available(t)), None)
pytestmark = pytest.mark.skipif(TARGET is None, reason="no OpenCL device, no CUDA GPU")

RTOL, ATOL = 1e-4, 1e-5

# the models of polytc.graph.examples that compile in seconds (test_onnx_models' sizes)
MODELS = ["mlp", "small_cnn", "resnet_block", "transformer_layer", "lstm"]

_SESSIONS: dict = {}


def ponnx():
    from polytc import onnx as polytc_onnx

    return polytc_onnx


def device_session(name: str):
    if name not in _SESSIONS:
        _SESSIONS[name] = ponnx().compile(model(name), target=TARGET)
    return _SESSIONS[name]


def assert_close(got, want, names):
    assert isinstance(got, list) and len(got) == len(want)
    for out, ref, name in zip(got, want, names):
        ref = np.asarray(ref)
        assert isinstance(out, np.ndarray), f"{name}: {type(out).__name__}, not an ndarray"
        assert out.shape == ref.shape, f"{name}: shape {out.shape}, expected {ref.shape}"
        assert out.dtype == ref.dtype, f"{name}: dtype {out.dtype}, expected {ref.dtype}"
        scale = max(1.0, float(np.abs(ref).max())) if ref.size and ref.dtype.kind == "f" \
            else 1.0
        np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL * scale,
                                   err_msg=f"output {name!r}")


def plans(sess):
    return list(sess._plans.values())


@pytest.mark.parametrize("name", MODELS)
def test_model_matches_c_target(name):
    m = model(name)
    feeds = ex.example_inputs(m, seed=1)
    sess = device_session(name)
    # every group was compiled for the device, and the plan keeps values there
    for p in plans(sess):
        assert p.device is not None
        assert p.kernels and all(ck.target == TARGET for ck in p.kernels.values())
    names = [o.name for o in m.graph.output]
    got = sess.run(None, feeds)
    assert_close(got, c_session(name).run(None, feeds), names)
    assert_close(got, reference(m, feeds), names)


@pytest.mark.parametrize("name", ["mlp", "transformer_layer"])
def test_outputs_survive_the_next_run(name):
    m = model(name)
    sess = device_session(name)
    feeds1, feeds2 = ex.example_inputs(m, seed=2), ex.example_inputs(m, seed=3)
    first = sess.run(None, feeds1)
    kept = [o.copy() for o in first]
    second = sess.run(None, feeds2)
    for a, b in zip(first, kept):
        np.testing.assert_array_equal(a, b)
    assert_close(second, c_session(name).run(None, feeds2), [o.name for o in m.graph.output])
    # one output by name, as onnxruntime's run allows
    out = m.graph.output[0].name
    assert_close(sess.run([out], feeds2), second[:1], [out])


def test_symbolic_batch():
    sess = ponnx().compile(small_model("symbolic"), target=TARGET)
    assert not sess._plans  # compiled at the first run with each batch size
    for n in (1, 3, 5):
        x = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        b = np.full((n, 4), 0.25, np.float32)
        (y,) = sess.run(None, {"x": x, "b": b})
        np.testing.assert_allclose(y, np.maximum(x + b, 0) * np.arange(4, dtype=np.float32),
                                   rtol=1e-6)
    assert len(sess._plans) == 3
    assert f"values on the {TARGET} device" in sess.report()


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "edge", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _vi(name, elem, dims):
    return helper.make_tensor_value_info(name, elem, dims)


F = TensorProto.FLOAT


def _i64(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


EDGE_CASES = {
    # a 0-d output, a view (reshape) read by a group and returned, an input returned as
    # is, bool and int64 outputs
    "views_0d_bool_int": _model(
        [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
         helper.make_node("Reshape", ["x", "shp"], ["r"]),
         helper.make_node("Identity", ["x"], ["i"]),
         helper.make_node("Relu", ["r"], ["rr"]),
         helper.make_node("Greater", ["x", "z"], ["gt"]),
         helper.make_node("Cast", ["x"], ["ci"], to=TensorProto.INT64)],
        [_vi("x", F, [2, 3])],
        [_vi("s", F, []), _vi("r", F, [3, 2]), _vi("i", F, [2, 3]), _vi("rr", F, [3, 2]),
         _vi("gt", TensorProto.BOOL, [2, 3]), _vi("ci", TensorProto.INT64, [2, 3])],
        [_i64("shp", [3, 2]), numpy_helper.from_array(np.float32(0.5), "z")]),
    # empty values (constants after binding) next to a compiled group
    "zero_size": _model(
        [helper.make_node("Relu", ["x"], ["y"]),
         helper.make_node("Concat", ["x", "w"], ["c"], axis=0),
         helper.make_node("Reshape", ["y", "shp"], ["r"], allowzero=1),
         helper.make_node("Add", ["c", "c"], ["d"])],
        [_vi("x", F, [0, 3]), _vi("w", F, [2, 3])],
        [_vi("y", F, [0, 3]), _vi("r", F, [3, 0]), _vi("d", F, [2, 3])],
        [_i64("shp", [3, 0])]),
    # a group without inputs (its output comes back to the host), and a 0-d input
    "no_input_group_0d": _model(
        [helper.make_node("ConstantOfShape", ["shp"], ["c"],
                          value=numpy_helper.from_array(np.array([2.5], np.float32))),
         helper.make_node("Mul", ["c", "x"], ["y"])],
        [_vi("x", F, [])], [_vi("y", F, [3, 2]), _vi("c", F, [3, 2])], [_i64("shp", [3, 2])]),
    # no group at all: only a view of the input
    "view_only": _model(
        [helper.make_node("Reshape", ["x", "shp"], ["r"])],
        [_vi("x", F, [2, 3])], [_vi("r", F, [3, 2])], [_i64("shp", [3, 2])]),
}


@pytest.mark.parametrize("case", list(EDGE_CASES))
def test_edge_cases_match_c_target(case):
    m = EDGE_CASES[case]
    rng = np.random.default_rng(0)
    feeds = {i.name: np.asarray(rng.standard_normal(
        [d.dim_value for d in i.type.tensor_type.shape.dim]), np.float32)
        for i in m.graph.input}
    names = [o.name for o in m.graph.output]
    want = ponnx().compile(m).run(None, feeds)
    sess = ponnx().compile(m, target=TARGET)
    got = sess.run(None, feeds)
    assert_close(got, want, names)
    assert_close(sess.run(None, feeds), want, names)  # and again, on the same plan
    # outputs are the caller's: writing to one changes nothing the next run sees
    for g in got:
        if g.size:
            g.reshape(-1)[0] = 0
    assert_close(sess.run(None, feeds), want, names)


# --- errors ------------------------------------------------------------------------------
def test_unknown_target():
    with raises(UnsupportedError, "target 'tpu' is not available for models",
                "targets: c, opencl, cuda"):
        ponnx().compile(small_model(), target="tpu")


def test_cuda_unavailable_is_a_polytc_error(no_gpu):
    with raises(UnsupportedError, "target 'cuda' is not available here: ", "targets: c"):
        ponnx().compile(small_model(), target="cuda")


# --- the command line --------------------------------------------------------------------
@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli-targets")
    onnx.save(small_model(), d / "small.onnx")
    x = np.arange(8, dtype=np.float32).reshape(2, 4) - 3
    b = np.full((2, 4), 0.5, np.float32)
    np.savez(d / "in.npz", x=x, b=b)
    return d, np.maximum(x + b, 0) * np.arange(4, dtype=np.float32)


def cli(capsys, *args):
    from polytc.cli import main

    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_target(files, capsys, tmp_path):
    d, want = files
    rc, out, err = cli(capsys, "compile", d / "small.onnx", "--target", TARGET)
    assert rc == 0, err
    assert "1 compiled groups" in out and f"values on the {TARGET} device" in out
    rc, out, err = cli(capsys, "run", d / "small.onnx", "--input", d / "in.npz",
                       "--target", TARGET, "--output", tmp_path / "out.npz")
    assert rc == 0, err
    with np.load(tmp_path / "out.npz") as got:
        np.testing.assert_allclose(got["y"], want, rtol=1e-6)
    rc, out, err = cli(capsys, "run", d / "small.onnx", "-i", d / "in.npz", "--target", "c")
    assert rc == 0 and out.startswith("y: shape [2, 4] float32"), err


def test_cli_unknown_target(files, capsys):
    d, _ = files
    rc, out, err = cli(capsys, "compile", d / "small.onnx", "--target", "tpu")
    assert rc == 1 and out == ""
    assert err.startswith("error: target 'tpu' is not available for models")
    assert "targets: c, opencl, cuda" in err
