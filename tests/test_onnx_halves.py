"""float16 and bfloat16 models, computed in float32 (graph/halves.py)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polytc

from .onnx_check import reference

BF16 = np.dtype(helper.tensor_dtype_to_np_dtype(TensorProto.BFLOAT16))  # ml_dtypes'


def _mlp(elem, dtype, cast_inside=False):
    """x[4, 16] -> MatMul W1[16, 32] + b1 -> Relu -> MatMul W2[32, 8] -> y, all in
    ``dtype``; ``cast_inside``: the hidden layer computed in float32 between Casts (as
    exporters write a mixed-precision LayerNorm)."""
    r = np.random.default_rng(0)
    w1, b1, w2 = (r.standard_normal(s).astype(np.float32).astype(dtype) / 4
                  for s in ((16, 32), (32,), (32, 8)))
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["hb"])]
    if cast_inside:
        nodes += [helper.make_node("Cast", ["hb"], ["h32"], to=TensorProto.FLOAT),
                  helper.make_node("Relu", ["h32"], ["r32"]),
                  helper.make_node("Cast", ["r32"], ["r"], to=elem)]
    else:
        nodes.append(helper.make_node("Relu", ["hb"], ["r"]))
    nodes.append(helper.make_node("MatMul", ["r", "w2"], ["y"]))
    g = helper.make_graph(nodes, "half", [helper.make_tensor_value_info("x", elem, [4, 16])],
                          [helper.make_tensor_value_info("y", elem, [4, 8])],
                          [numpy_helper.from_array(w, n) for w, n in
                           ((w1, "w1"), (b1, "b1"), (w2, "w2"))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    return m, (w1, b1, w2)


def _x(dtype):
    return np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32).astype(dtype)


@pytest.mark.parametrize("cast_inside", [False, True])
def test_float16_model_against_onnxruntime(cast_inside):
    m, _ = _mlp(TensorProto.FLOAT16, np.float16, cast_inside)
    x = _x(np.float16)
    want = reference(m, {"x": x})[0]
    sess = polytc.onnx.compile(m)
    got = sess.run(None, {"x": x})[0]
    assert got.dtype == np.float16 and got.shape == (4, 8)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2,
                               atol=1e-2)
    assert sess.get_inputs()[0].type == "tensor(float16)"
    assert sess.get_outputs()[0].type == "tensor(float16)"


def test_bfloat16_model_is_float32_arithmetic_rounded_once():
    """bfloat16 weights and values: the result is the float32 computation of the same
    numbers, rounded to bfloat16 once, at the output."""
    m, (w1, b1, w2) = _mlp(TensorProto.BFLOAT16, BF16)
    x = _x(BF16)
    f = [a.astype(np.float32) for a in (x, w1, b1, w2)]
    want = (np.maximum(f[0] @ f[1] + f[2], 0) @ f[3]).astype(BF16)
    got = polytc.onnx.compile(m).run(None, {"x": x})[0]
    assert got.dtype == BF16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2,
                               atol=1e-2)


def test_half_inputs_are_checked():
    m, _ = _mlp(TensorProto.FLOAT16, np.float16)
    sess = polytc.onnx.compile(m)
    with pytest.raises(polytc.ModelError, match=r"input 'x' has dtype float32; the model "
                                               r"wants float16"):
        sess.run(None, {"x": _x(np.float32)})


def test_graph_computes_in_float32():
    m, _ = _mlp(TensorProto.FLOAT16, np.float16, cast_inside=True)
    g = polytc.onnx.compile(m).graph
    assert g.boundary == {"x": np.dtype(np.float16), "y": np.dtype(np.float16)}
    assert all(t.dtype != np.float16 for t in g.types.values())
    assert all(c.dtype == np.float32 for c in g.constants.values())
    assert onnx.TensorProto.FLOAT16 not in [v for n in g.nodes for k, v in n.attrs
                                            if k == "to"]
