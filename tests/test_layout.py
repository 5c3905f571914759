"""The blocked-channel layout (``graph/layout.py``, ``graph/ops/blocked.py``): regions of
convolutional networks rewritten to NCHWc run the models as onnxruntime does and as the
same session without the pass does, at odd sizes, pads, strides and batch sizes; regions
whose wide convolutions outweigh their window ops keep NCHW."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from polytc.graph import examples as ex
from polytc.machine import host

from .onnx_check import reference

C = host().lanes(4)  # the block: the channels below are multiples of it


def ponnx():
    from polytc import onnx as polytc_onnx

    return polytc_onnx


def _blocked_ops(sess) -> set:
    return {n.op for n in sess.graph.nodes if n.op.startswith("Blocked") or n.op == "Unblock"}


def _check(m, feeds, blocked=True):
    on = ponnx().compile(m)
    off = ponnx().compile(m, disable=("blocked_layout",))
    assert bool(_blocked_ops(on)) == blocked, on.stages["blocked_layout"]
    assert not _blocked_ops(off)
    want = reference(m, feeds)
    for sess in (on, off):
        got = sess.run(None, feeds)
        for w, g in zip(want, got):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * max(1, np.abs(w).max()))
    return on


class _G:
    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.k = [], [], 0

    def name(self, base):
        self.k += 1
        return f"{base}{self.k}"

    def const(self, shape, scale=0.3):
        n = self.name("w")
        self.inits.append(helper.make_tensor(
            n, TensorProto.FLOAT, shape,
            (self.rng.standard_normal(shape) * scale).astype(np.float32).ravel().tolist()))
        return n

    def scalar(self, v):
        n = self.name("s")
        self.inits.append(helper.make_tensor(n, TensorProto.FLOAT, [], [v]))
        return n

    def op(self, op, ins, **attrs):
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    def conv(self, x, cin, cout, k, group=1, **attrs):
        w = self.const([cout, cin // group, k, k], 1 / np.sqrt(cin // group * k * k))
        return self.op("Conv", [x, w, self.const([cout])], group=group,
                       kernel_shape=[k, k], **attrs)

    def model(self, inputs, outputs):
        g = helper.make_graph(self.nodes, "m", [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs], [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, [None] * 4) for n in outputs],
            self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        return m


# (image, stem stride, max pool attrs, depthwise attrs, average pool attrs)
CASES = [
    (16, 1, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
     dict(strides=[2, 2], pads=[0, 0, 1, 1]),
     dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=0)),
    (15, 2, dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
     dict(strides=[1, 1], pads=[1, 1, 1, 1], dilations=[2, 2]),
     dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1], count_include_pad=1)),
    (13, 1, dict(kernel_shape=[3, 3], strides=[1, 2], pads=[0, 1, 2, 1], dilations=[2, 1]),
     dict(strides=[2, 1], pads=[1, 1, 0, 0]),
     dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_chain_matches_onnxruntime(case):
    """An NCHW image into a blocked convolution, pools and a depthwise convolution at
    odd sizes, pads, strides, dilations and ceil modes; convolutions of blocked images,
    a residual Add, a Concat of channels, a value read outside the region, a global
    pool."""
    image, stride, maxpool, dw, avg = CASES[case]
    g = _G(case)
    h = g.op("Relu", [g.conv("x", 3, 2 * C, 3, strides=[stride, stride], pads=[1, 1, 1, 1])])
    h = g.op("MaxPool", [h], **maxpool)
    d = g.op("Clip", [g.conv(h, 2 * C, 2 * C, 3, group=2 * C, **dw), g.scalar(0.0),
                      g.scalar(6.0)])
    p = g.conv(d, 2 * C, C, 1)  # (one block of filters: reads the blocked image)
    s = g.op("Add", [p, g.conv(d, 2 * C, C, 1)])
    a = g.op("AveragePool", [s], **avg)
    cat = g.op("Concat", [a, g.op("MaxPool", [a], kernel_shape=[1, 1])], axis=1)
    top = g.op("GlobalMaxPool", [cat])
    m = g.model([("x", [2, 3, image, image])], [top, d])
    x = np.random.default_rng(1).standard_normal((2, 3, image, image)).astype(np.float32)
    sess = _check(m, {"x": x})
    assert {"BlockedConv", "BlockedMaxPool", "BlockedAveragePool", "BlockedGlobalMaxPool",
            "Unblock"} <= _blocked_ops(sess)


def test_small_cnn_and_symbolic_batch():
    """The small CNN's region is blocked, its batch symbolic: one session at several
    batch sizes."""
    m = ex.small_cnn(2, image=16)
    on = _check(m, ex.example_inputs(m, seed=0))
    # its two regions run blocked end to end: the pointwise convolution that starts
    # the second reads the first's blocked image
    assert [n.op for n in on.graph.nodes].count("Unblock") == 1
    dyn = onnx.ModelProto()
    dyn.CopyFrom(m)
    for v in list(dyn.graph.input) + list(dyn.graph.output):
        v.type.tensor_type.shape.dim[0].dim_param = "N"
    sess = ponnx().compile(dyn)
    assert _blocked_ops(sess)
    for batch in (1, 3, 5):
        feeds = ex.example_inputs(dyn, seed=batch, batch=batch)
        np.testing.assert_allclose(sess.run(None, feeds)[0], reference(dyn, feeds)[0],
                                   rtol=1e-4, atol=1e-5)


def test_wide_convolutions_split_regions():
    """A convolution of several blocks of filters reads NCHW: the pool before it is one
    region, which pays, the pool after it another, whose wide convolution outweighs it."""
    g = _G(7)
    h = g.op("MaxPool", [g.op("Relu", [g.conv("x", 3, C, 3, pads=[1, 1, 1, 1])])],
             kernel_shape=[2, 2], strides=[2, 2])
    w = g.op("Relu", [g.conv(h, C, 8 * C, 3, pads=[1, 1, 1, 1])])
    top = g.op("MaxPool", [w], kernel_shape=[2, 2], strides=[2, 2])
    m = g.model([("x", [1, 3, 16, 16])], [top])
    x = np.random.default_rng(2).standard_normal((1, 3, 16, 16)).astype(np.float32)
    sess = _check(m, {"x": x})
    ops = [n.op for n in sess.graph.nodes]
    assert ops.count("BlockedMaxPool") == 1 and ops.count("MaxPool") == 1
    assert ops.count("BlockedConv") == 1 and ops.count("Conv") == 1


def test_wide_convolutions_keep_nchw():
    """A ResNet block's convolutions of 8 blocks of filters outweigh nothing: no region
    pays, the graph is unchanged."""
    m = ex.resnet_block(1, channels=8 * C, image=8)
    sess = ponnx().compile(m)
    assert not _blocked_ops(sess)
    assert "blocked_layout" in sess.stages


def test_layout_stage_shows_the_region():
    m = ex.small_cnn(1, image=16)
    text = ponnx().compile(m).stages["blocked_layout"]
    assert "BlockedConv" in text and "Unblock" in text
    assert f"x{C}]" in text  # a blocked value's type, [N, C / c, H, W, c]


def test_a_bad_convolution_is_reported_not_blocked():
    """Weights whose channels do not match the image stay a Conv, whose lowering says
    what is wrong (the pass reorders no weights it cannot)."""
    import polytc

    g = _G(3)
    w = g.const([C, 4, 3, 3])
    h = g.op("Conv", ["x", w], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    top = g.op("MaxPool", [h], kernel_shape=[2, 2], strides=[2, 2])
    m = g.model([("x", [1, 3, 8, 8])], [top])
    with pytest.raises(polytc.PolytcError, match="channel|Conv"):
        ponnx().compile(m).run(None, {"x": np.zeros((1, 3, 8, 8), np.float32)})
