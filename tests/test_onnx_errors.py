"""Bad models and bad calls to ``polytc.onnx``: each raises a polytc error (never a crash,
an internal error or a raw onnx/protobuf exception) whose text says what is wrong."""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import polytc
import polytc.onnx as ponnx
from polytc import InternalError, ModelError, PolytcError, UnsupportedError


def small_model(batch="fixed", opset=17):
    """y = relu(x + b) * w, with x and b inputs and w a constant."""
    dims = ["N", 4] if batch == "symbolic" else [2, 4]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    nodes = [helper.make_node("Add", ["x", "b"], ["s"]),
             helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Mul", ["r", "w"], ["y"])]
    graph = helper.make_graph(nodes, "small", [x, b], [y], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def ponnx_ops_supported(op: str) -> bool:
    from polytc.graph.ops import supported

    return supported(op)


def raises(exc, *patterns):
    """pytest.raises(exc) whose message contains every pattern (regular expressions)."""
    class Check:
        def __enter__(self):
            self.ctx = pytest.raises(exc)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *a):
            out = self.ctx.__exit__(*a)
            text = str(self.info.value)
            assert type(self.info.value) is exc, (type(self.info.value), text)
            for p in patterns:
                assert re.search(p, text), f"{p!r} not in the message:\n{text}"
            return out

    return Check()


X = np.ones((2, 4), np.float32)


@pytest.fixture(scope="module")
def session():
    return ponnx.compile(small_model())


# --- models polytc cannot take ---------------------------------------------------------
def test_nonexistent_path(tmp_path):
    path = tmp_path / "nope.onnx"
    with raises(ModelError, re.escape(str(path)), "no such model file"):
        ponnx.compile(str(path))


def test_truncated_file(tmp_path):
    data = small_model().SerializeToString()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(data[: len(data) // 2])
    with raises(ModelError, re.escape(str(path)), "not a readable ONNX model",
                "truncated or malformed"):
        ponnx.compile(path)  # a PathLike works as well as a str


def test_truncated_bytes():
    data = small_model().SerializeToString()
    with raises(ModelError, "the bytes are not an ONNX model", "truncated or malformed"):
        ponnx.compile(data[: len(data) // 2])


def test_random_bytes(tmp_path):
    path = tmp_path / "random.onnx"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 300, np.uint8).tobytes())
    with raises(ModelError, "not a readable ONNX model"):
        ponnx.compile(str(path))


@pytest.mark.parametrize("obj", [42, None, [1, 2], {"x": 1}, np.zeros(3)],
                         ids=["int", "None", "list", "dict", "ndarray"])
def test_not_a_model(obj):
    with raises(ModelError, "takes a path, bytes or an onnx.ModelProto",
                f"not {type(obj).__name__}"):
        ponnx.compile(obj)


def test_checker_rejects():
    m = small_model()
    m.graph.node[1].input[0] = "nowhere"  # Relu reads a value nothing computes
    with raises(ModelError, "the ONNX checker rejects the model", "'nowhere'",
                "topologically sorted"):
        ponnx.compile(m)
    m = small_model()
    del m.graph.node[0].input[1]  # Add with one input
    with raises(ModelError, "checker rejects", "Add", "input size 1"):
        ponnx.compile(m)


def test_checker_rejects_with_large_weights():
    """A model whose weights reach the checker as typed inputs (onnx_import.SKELETON_MIN)
    is rejected for the same faults, with the same words."""
    m = small_model()
    big = numpy_helper.from_array(np.ones((4, 4096), np.float32), "big")
    m.graph.initializer.append(big)
    m.graph.node.append(helper.make_node("MatMul", ["y", "big"], ["z"]))
    m.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4096]))
    assert ponnx.compile(m).run(None, {"x": X, "b": X})[1].shape == (2, 4096)
    m.graph.node[1].input[0] = "nowhere"
    with raises(ModelError, "the ONNX checker rejects the model", "'nowhere'",
                "topologically sorted"):
        ponnx.compile(m)
    m.graph.node[1].input[0] = "s"
    m.graph.output[1].type.tensor_type.shape.dim[1].dim_value = 7  # contradicts inference
    with raises(ModelError, "shape inference fails"):
        ponnx.compile(m)


def test_opset_too_new():
    m = small_model()
    m.opset_import[0].version = 999
    with raises(ModelError, "opset 999 is newer than this onnx package knows",
                "hint: upgrade the onnx package"):
        ponnx.compile(m)


def test_unknown_element_type():
    """An element type code onnx does not know (found by the mutation test below)."""
    m = small_model()
    m.graph.input[1].type.tensor_type.elem_type = 42
    with raises(ModelError, "input 'b' has element type 42, which is not a tensor type "
                "onnx knows"):
        ponnx.compile(m)


def test_empty_graph():
    m = helper.make_model(helper.make_graph([], "empty", [], []))
    with raises(ModelError, "empty graph"):
        ponnx.compile(m)


def test_unknown_target(no_gpu):
    with raises(UnsupportedError, "target 'cuda' is not available", "targets: c"):
        ponnx.compile(small_model(), target="cuda")


#: a standard op polytc does not support (NonZero and Unique run on the host in stages:
#: graph/staged.py)
STANDARD_UNSUPPORTED = next((op for op in ("Det", "BitCast", "RoiAlign")
                             if not ponnx_ops_supported(op)), None)


def test_every_unsupported_op_in_one_error(monkeypatch):
    """Two custom-domain ops and a standard op polytc lacks: one error lists all three,
    raised before anything compiles."""
    if STANDARD_UNSUPPORTED is None:
        pytest.skip("polytc supports every candidate standard op")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    nodes = [helper.make_node("FooOp", ["x"], ["a"], name="foo1", domain="com.acme"),
             helper.make_node("FooOp", ["a"], ["a2"], name="foo2", domain="com.acme"),
             helper.make_node("BarOp", ["a2"], ["b"], name="bar", domain="org.other"),
             helper.make_node("Relu", ["b"], ["r"]),
             helper.make_node(STANDARD_UNSUPPORTED, ["r"], ["y"], name="std")]
    m = helper.make_model(helper.make_graph(nodes, "u", [x], [y]), opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.acme", 1),
        helper.make_opsetid("org.other", 1)])

    from polytc.graph import plan as graph_exec

    def no_compiling(*a, **k):
        raise AssertionError("compiled before reporting unsupported ops")

    monkeypatch.setattr(graph_exec.Plan, "__init__", no_compiling)
    with raises(UnsupportedError, "3 op type\\(s\\) polytc does not support",
                r"com\.acme\.FooOp \(2x: foo1, foo2\)", r"org\.other\.BarOp \(1x: bar\)",
                rf"{STANDARD_UNSUPPORTED} \(1x: std\)"):
        ponnx.compile(m)


# --- bad calls to Session.run ------------------------------------------------------------
def test_checks_still_apply_after_a_good_run(session):
    """A run like an earlier good one skips the checks (``Session._seen``); any other
    run is checked: an extra name, a missing one, another dtype or shape, a view."""
    session.run(None, {"x": X, "b": X})
    session.run(None, {"x": X, "b": X})  # the fast path
    with raises(ModelError, "'bias' is not an input of the model"):
        session.run(None, {"x": X, "b": X, "bias": X})
    with raises(ModelError, "missing input"):
        session.run(None, {"x": X})
    with raises(ModelError, "dtype float64"):
        session.run(None, {"x": X, "b": X.astype(np.float64)})
    with raises(ModelError, "dimension 1 must be 4"):
        session.run(None, {"x": X, "b": np.ones((2, 5), np.float32)})
    wide = np.arange(16, dtype=np.float32).reshape(2, 8)
    (want,) = session.run(None, {"x": X, "b": np.ascontiguousarray(wide[:, ::2])})
    (got,) = session.run(None, {"x": X, "b": wide[:, ::2]})  # strided: checked, copied
    np.testing.assert_array_equal(got, want)


def test_missing_input(session):
    with raises(ModelError, "missing input\\(s\\) 'b'", r"inputs: x: tensor\(float\) \[2, 4\], "
                r"b: tensor\(float\) \[2, 4\]"):
        session.run(None, {"x": X})


def test_wrong_input_name(session):
    with raises(ModelError, "'bias' is not an input of the model",
                r"hint: inputs: x: tensor\(float\) \[2, 4\], b: tensor\(float\) \[2, 4\]"):
        session.run(None, {"x": X, "bias": X})


def test_wrong_dtype(session):
    with raises(ModelError, "input 'b' has dtype float64; the model wants float32",
                r"astype\(np.float32\)"):
        session.run(None, {"x": X, "b": X.astype(np.float64)})


def test_object_input(session):
    with raises(ModelError, "input 'b' is not a numeric array"):
        session.run(None, {"x": X, "b": object()})


def test_wrong_rank(session):
    with raises(ModelError, r"input 'b' has shape \[4\]; the model wants rank 2 \[2, 4\]"):
        session.run(None, {"x": X, "b": X[0]})


def test_wrong_fixed_dimension(session):
    with raises(ModelError, r"input 'b' has shape \[3, 4\]; dimension 0 must be 2"):
        session.run(None, {"x": X, "b": np.ones((3, 4), np.float32)})


def test_inconsistent_symbolic_dimensions():
    s = ponnx.compile(small_model("symbolic"))
    assert s.get_inputs()[0].shape == ["N", 4]
    with raises(ModelError, r"input 'b': dimension 0 \('N'\) is 3, but it is 2 in input 'x'"):
        s.run(None, {"x": X, "b": np.ones((3, 4), np.float32)})
    (y,) = s.run(None, {"x": np.ones((3, 4), np.float32), "b": np.ones((3, 4), np.float32)})
    assert y.shape == (3, 4)


@pytest.mark.parametrize("feed", [[X, X], (X, X), X, "x"], ids=["list", "tuple", "array", "str"])
def test_feed_not_a_dict(session, feed):
    with raises(ModelError, "run takes a dict of input name -> array",
                f"not {type(feed).__name__}"):
        session.run(None, feed)


def test_unknown_output_name(session):
    with raises(ModelError, "'z' is not an output of the model", "hint: outputs: y"):
        session.run(["z"], {"x": X, "b": X})
    with raises(ModelError, "output_names must be None or a list of output names"):
        session.run(3, {"x": X, "b": X})


def test_good_calls_still_work(session):
    """The checks accept what onnxruntime accepts: a name as a str, a non-contiguous or
    byte-swapped array, a list that converts to the right dtype."""
    want = np.maximum(X + X, 0) * np.arange(4, dtype=np.float32)
    (y,) = session.run("y", {"x": X, "b": X})
    np.testing.assert_allclose(y, want)
    (y,) = session.run(["y"], {"x": np.ones((4, 2), np.float32).T, "b": X.astype(">f4")})
    np.testing.assert_allclose(y, want)
    (y,) = session.run(None, {"x": X, "b": np.float32(1) * np.ones((2, 4), np.float32)})
    np.testing.assert_allclose(y, want)


def test_errors_are_polytc_errors():
    assert issubclass(ModelError, PolytcError) and issubclass(UnsupportedError, PolytcError)
    assert polytc.ModelError is ModelError


# --- random corruption --------------------------------------------------------------------
VALID = small_model().SerializeToString()
NP_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64,
            "tensor(bool)": np.bool_}


def _feed(session):
    """Inputs for a session, or None when its inputs are too odd or too big to make."""
    feed = {}
    for a in session.get_inputs():
        if a.shape is None:
            return None
        shape = [2 if not isinstance(d, int) else d for d in a.shape]
        if np.prod(shape, dtype=np.float64) > 1e6:
            return None
        dtype = NP_TYPES.get(a.type) or np.dtype(a.type[len("tensor("):-1])
        feed[a.name] = np.ones(shape, dtype)
    return feed


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)),
                min_size=1, max_size=4),
       st.integers(len(VALID) // 2, len(VALID)))
def test_mutated_models_compile_or_fail_cleanly(edits, length):
    """Random byte edits (and truncation) of a valid model: it compiles and runs, or the
    error is a PolytcError that is not an internal error."""
    data = bytearray(VALID)
    for pos, byte in edits:
        data[pos] = byte
    data = bytes(data[:length])
    try:
        s = ponnx.compile(data)
        feed = _feed(s)
        if feed is not None:
            s.run(None, feed)
    except InternalError as e:  # a bug of polytc: never acceptable
        raise AssertionError(f"internal error for a mutated model: {e}") from None
    except PolytcError:
        pass
