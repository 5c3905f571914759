"""ConvTranspose against onnxruntime: 1-3 spatial dimensions, strides, dilations, groups,
pads, output_padding, output_shape, auto_pad, bias and weights known only at run time."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from polytc import onnx as ponnx
from polytc.diagnostics import ModelError, UnsupportedError

from .test_onnx_movement_ops import _model, run_model


def rnd(*shape, seed=0):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(np.float32)


def deconv(x, w, b=None, const_w=True, ort=True, **attrs):
    feeds, consts = {"x": x}, {}
    (consts if const_w else feeds)["w"] = w
    names = ["x", "w"]
    if b is not None:
        consts["b"] = b
        names.append("b")
    node = helper.make_node("ConvTranspose", names, ["y"], **attrs)
    return run_model(_model([node], feeds, ["y"], consts), feeds, ort=ort)


@pytest.mark.parametrize("xs,ws,attrs", [
    ((1, 3, 5), (3, 2, 3), {}),
    ((2, 3, 7), (3, 4, 4), dict(strides=[3], pads=[1, 2])),
    ((1, 2, 6), (2, 3, 3), dict(strides=[2], dilations=[2], output_padding=[1])),
    ((1, 4, 5, 6), (4, 3, 3, 3), {}),
    ((1, 8, 6, 5), (8, 4, 4, 4), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 3, 4, 5), (3, 2, 3, 2), dict(strides=[3, 2], dilations=[2, 1], pads=[0, 1, 2, 0],
                                      output_padding=[1, 1])),
    ((1, 6, 4, 4), (6, 2, 3, 3), dict(group=3, strides=[2, 2], pads=[1, 0, 0, 1])),
    ((1, 4, 3, 3), (4, 1, 3, 3), dict(group=4, strides=[2, 2])),  # depthwise
    ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2), dict(strides=[2, 1, 2], pads=[1, 0, 0, 0, 1, 1])),
    ((1, 4, 3, 3), (4, 3, 1, 1), dict(strides=[3, 3])),  # taps never overlap
    ((1, 2, 5, 4), (2, 2, 3, 2), dict(strides=[2, 2], dilations=[3, 1], pads=[2, 0, 1, 1])),
    ((1, 2, 4, 4), (2, 3, 2, 3), dict(group=2, strides=[2, 1])),  # one channel a group
    ((1, 4, 4, 3), (4, 1, 3, 3), dict(group=2, strides=[1, 2], pads=[1, 1, 1, 1])),
    ((1, 3, 6), (3, 2, 3), dict(pads=[2, 2])),  # reads inside X only
    ((1, 3, 6, 6), (3, 2, 3, 3), dict(pads=[3, 0, 1, 3])),  # pads beyond the taps
])
def test_shapes(xs, ws, attrs):
    deconv(rnd(*xs), rnd(*ws, seed=1), rnd(ws[1] * attrs.get("group", 1), seed=2), **attrs)


@pytest.mark.parametrize("auto", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("strides,kernel", [([1, 1], [3, 3]), ([2, 3], [3, 2]),
                                            ([2, 2], [4, 4])])
def test_auto_pad(auto, strides, kernel):
    # a stride longer than the kernel makes SAME's total pad negative: onnxruntime clamps
    # it to 0 (a shorter output), the spec and onnx's reference evaluator do not
    ort = all(k >= s for k, s in zip(kernel, strides))
    deconv(rnd(1, 2, 4, 5), rnd(2, 3, *kernel, seed=1), ort=ort, auto_pad=auto,
           strides=strides)


@pytest.mark.parametrize("out,attrs", [
    ([10, 8], dict(strides=[3, 2])),
    ([9, 7], dict(strides=[2, 2], output_padding=[1, 1])),
    ([6, 6], dict(strides=[1, 1])),  # the total pad odd along both axes
    ([8, 9], dict(strides=[2, 2], auto_pad="SAME_UPPER")),  # the odd pad at the end
    ([8, 9], dict(strides=[2, 2], auto_pad="SAME_LOWER")),
])
def test_output_shape(out, attrs):
    deconv(rnd(1, 2, 4, 4), rnd(2, 3, 3, 3, seed=1), output_shape=out, **attrs)


def test_output_shape_beyond_the_result():
    """An output_shape larger than the full result (negative derived pads, which
    onnxruntime and onnx's evaluator reject): the full result, zero-extended (the odd
    position at the end)."""
    x, w, b = rnd(1, 2, 4, 4), rnd(2, 3, 3, 3, seed=1), rnd(3, seed=2)
    full = deconv(x, w, b, strides=[2, 2])[0]  # 9 x 9
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2],
                            output_shape=[12, 9])
    m = _model([node], {"x": x}, ["y"], {"w": w, "b": b})
    got = ponnx.compile(m).run(None, {"x": x})[0]
    want = np.broadcast_to(b[:, None, None], (1, 3, 12, 9)).copy()
    want[:, :, 1:10] = full
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_runtime_weights_and_batch():
    deconv(rnd(3, 4, 5, 5), rnd(4, 2, 3, 3, seed=1), rnd(4, seed=2), const_w=False,
           group=2, strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])


def test_double():
    x, w = rnd(1, 2, 3, 3).astype(np.float64), rnd(2, 2, 2, 2, seed=1).astype(np.float64)
    deconv(x, w, ort=False, strides=[2, 2])  # onnxruntime has no double ConvTranspose


def compile_only(x, w, b=None, **attrs):
    """Compile one node (typed by hand: onnx's shape inference gives up on bad nodes)."""
    consts = {"w": w} if b is None else {"w": w, "b": b}
    node = helper.make_node("ConvTranspose", ["x", *consts], ["y"], **attrs)
    t = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph([node], "t", [helper.make_tensor_value_info("x", t, x.shape)],
                              [helper.make_tensor_value_info("y", t, [None] * x.ndim)],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    ponnx.compile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_errors():
    x, w = rnd(1, 4, 3, 3), rnd(4, 2, 3, 3)
    deconv = compile_only
    with pytest.raises(ModelError, match="group"):
        deconv(x, w, group=3)
    with pytest.raises(ModelError, match="kernel_shape"):
        deconv(x, w, kernel_shape=[2, 2])
    with pytest.raises(ModelError, match="output_padding"):
        deconv(x, w, strides=[2, 2], output_padding=[2, 0])
    with pytest.raises(ModelError, match="bias of shape"):
        deconv(x, w, rnd(3))
    with pytest.raises(ModelError, match="unknown auto_pad 'FOO'"):
        deconv(x, w, auto_pad="FOO")
    with pytest.raises(UnsupportedError, match="ConvTranspose of int32"):
        deconv(x.astype(np.int32), w.astype(np.int32))


def test_col2im():
    """Blocks summed back into an image with strides, dilations and pads, two channels,
    against onnx's reference; blocks that do not fit the image: a ModelError."""
    image, block, strides, dil, pads = [7, 6], [2, 3], [2, 1], [1, 2], [1, 0, 1, 2]
    blocks = [(n + pads[d] + pads[d + 2] - dil[d] * (k - 1) - 1) // strides[d] + 1
              for d, (n, k) in enumerate(zip(image, block))]
    x = np.random.default_rng(0).standard_normal((2, 2 * 6, blocks[0] * blocks[1]))
    x = x.astype(np.float32)
    consts = {"s": np.array(image, np.int64), "b": np.array(block, np.int64)}
    n = helper.make_node("Col2Im", ["x", "s", "b"], ["y"], strides=strides, dilations=dil,
                         pads=pads)
    run_model(_model([n], {"x": x}, ["y"], consts, opset=18), {"x": x}, ort=False)
    bad = x[:, :, :-1].copy()
    with pytest.raises(ModelError, match="blocks of image"):
        ponnx.compile(_model([n], {"x": bad}, ["y"], consts, opset=18)).run(None, {"x": bad})
