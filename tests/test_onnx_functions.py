"""Ops that ONNX defines as functions (graph/expand.py): polytc has no lowering of its own
for them and runs their ONNX function body, against onnxruntime's own kernels."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from polytc import onnx as ponnx
from polytc.diagnostics import ModelError
from polytc.graph import expand
from polytc.graph.onnx_import import import_model

from .test_onnx_movement_ops import _model, run_model


def _rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("attrs,kv_heads", [({}, 4), ({"is_causal": 1}, 4),
                                            ({"is_causal": 1, "scale": 0.3}, 2),
                                            ({"softcap": 2.0}, 1)])
def test_attention_4d(attrs, kv_heads):
    """Scaled dot-product attention, causal, grouped-query (2 and 1 key/value heads for
    4 query heads), soft-capped."""
    q, k, v = _rnd(2, 4, 8, 16), _rnd(2, kv_heads, 10, 16, seed=1), \
        _rnd(2, kv_heads, 10, 16, seed=2)
    n = helper.make_node("Attention", ["q", "k", "v"], ["y"], **attrs)
    m = _model([n], {"q": q, "k": k, "v": v}, ["y"], opset=23)
    run_model(m, {"q": q, "k": k, "v": v})


def test_attention_3d_with_mask_and_cache():
    """3-D inputs (heads folded into the hidden size), an additive mask, and a key/value
    cache whose present values are outputs too."""
    b, s, past, heads, d = 2, 5, 3, 2, 8
    q, k, v = _rnd(b, s, heads * d), _rnd(b, s, heads * d, seed=1), _rnd(b, s, heads * d,
                                                                            seed=2)
    mask = _rnd(s, past + s, seed=3)
    pk, pv = _rnd(b, heads, past, d, seed=4), _rnd(b, heads, past, d, seed=5)
    n = helper.make_node("Attention", ["q", "k", "v", "mask", "pk", "pv"],
                         ["y", "present_k", "present_v"], q_num_heads=heads,
                         kv_num_heads=heads)
    feeds = {"q": q, "k": k, "v": v, "mask": mask, "pk": pk, "pv": pv}
    m = _model([n], feeds, ["y", "present_k", "present_v"], opset=23)
    run_model(m, feeds)


@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_normalization(axis):
    x = _rnd(3, 5, 32)
    scale = _rnd(*x.shape[axis % 3:], seed=1)
    n = helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=axis, epsilon=1e-5)
    m = _model([n], {"x": x}, ["y"], consts={"s": scale}, opset=23)
    run_model(m, {"x": x})


def test_body_ops_fuse_with_their_neighbours():
    """The body is lowered as ordinary ops: RMSNormalization's mean of squares, its
    reciprocal square root and the scale land in one group with the Relu after it."""
    x, scale = _rnd(4, 64), _rnd(64, seed=1)
    nodes = [helper.make_node("RMSNormalization", ["x", "s"], ["t"]),
             helper.make_node("Relu", ["t"], ["y"])]
    m = _model(nodes, {"x": x}, ["y"], consts={"s": scale}, opset=23)
    g = import_model(m)
    assert {n.op for n in g.nodes} >= {"ReduceMean", "Sqrt", "Relu"}
    assert all(n.op != "RMSNormalization" for n in g.nodes)
    assert any(n.name.startswith("RMSNormalization") and "__" in n.name for n in g.nodes)
    sess = ponnx.compile(m)
    run_model(m, {"x": x})
    assert len(sess.plan({"x": x.shape}).kernels) == 1


def test_static_body_with_left_out_attribute():
    """MeanVarianceNormalization's body reads its ``axes`` attribute, which the node
    leaves at its default: onnx's shape inference of the unexpanded node fails, so
    static bodies are written out before it."""
    x = _rnd(2, 3, 4, 5)
    n = helper.make_node("MeanVarianceNormalization", ["x"], ["y"])
    vi = helper.make_tensor_value_info
    m = helper.make_model(helper.make_graph(
        [n], "t", [vi("x", onnx.TensorProto.FLOAT, x.shape)],
        [vi("y", onnx.TensorProto.FLOAT, x.shape)]),
        opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(onnx.shape_inference.InferenceError):  # onnx fails on the node
        onnx.shape_inference.infer_shapes(m, strict_mode=True)
    run_model(m, {"x": x})


def test_expanded_ops_are_listed():
    from polytc.graph.conformance import function_ops

    ops = function_ops()
    assert {"Attention", "RMSNormalization", "RotaryEmbedding",
            "SoftmaxCrossEntropyLoss"} <= set(ops)
    assert not {"Relu", "Softmax", "LayerNormalization", "Gelu"} & set(ops)  # lowered
    assert not expand.expandable(helper.make_node("Relu", ["x"], ["y"]), 23)
    assert not expand.expandable(helper.make_node("TopK", ["x", "k"], ["y", "i"]), 23)


@pytest.mark.parametrize("align", [0, 1])
def test_body_with_a_constant_if(align):
    """AffineGrid's body branches on its ``align_corners`` attribute: the If's condition
    folds and the branch taken is inlined (graph/control.py)."""
    theta = _rnd(2, 2, 3)
    size = np.array([2, 1, 4, 5], np.int64)
    n = helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align)
    m = _model([n], {"theta": theta}, ["grid"], consts={"size": size}, opset=20)
    run_model(m, {"theta": theta})
    assert all(k.op != "If" for k in ponnx.compile(m).graph.nodes)


def test_body_needs_input_types():
    """A context-dependent body is built from the input types: an input whose type is
    unknown is a ModelError that names it."""
    node = helper.make_node("RMSNormalization", ["x", "s"], ["y"], name="rms")
    with pytest.raises(ModelError, match="type of input 'x' is unknown"):
        expand.expand_node(node, 23, {})

