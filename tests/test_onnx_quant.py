"""Quantised models: QuantizeLinear/DequantizeLinear (ops/quant.py), the integer products
written as int32 ops (graph/quantised.py), and whole models quantised by onnxruntime's own
tools, each against onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import polytc
from polytc.diagnostics import UnsupportedError

from .onnx_check import reference
from .test_onnx_movement_ops import _model, check, run_model

ort = pytest.importorskip("onnxruntime")
U8, I8 = np.uint8, np.int8


def _ints(shape, dtype, seed=0):
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max + 1, shape).astype(dtype)


def _floats(*shape, seed=0, scale=3.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


# --- QuantizeLinear / DequantizeLinear -------------------------------------------------------
@pytest.mark.parametrize("zdtype", [U8, I8, np.int16, np.uint16])
def test_quantize_per_tensor_ties_and_saturation(zdtype):
    """Halfway quotients round to even; values past the type's range saturate."""
    x = np.array([0.0, 2.0, -3.0, -2.5, 1.34, 0.5, 1.5, 2.5, -0.5, 1e6, -1e6, 255.5],
                 np.float32)
    zero = np.array(3 if np.iinfo(zdtype).min == 0 else -3, zdtype)
    check("QuantizeLinear", [x, np.float32(0.5), zero], consts=(1, 2), opset=21)
    check("QuantizeLinear", [x, np.float32(5 / 255), zero], consts=(1, 2), opset=21)


def test_quantize_per_axis_and_blocked():
    x = _floats(2, 6, 4)
    check("QuantizeLinear", [x, np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], np.float32),
                             np.array([0, 1, 2, -1, -2, 5], I8)], consts=(1, 2), axis=1,
          opset=21)
    check("QuantizeLinear", [x, np.abs(_floats(2, 6, 2, seed=1)) + 0.1,
                             _ints((2, 6, 2), I8, seed=2)], consts=(1, 2), axis=2,
          block_size=2, opset=21)


def test_quantize_default_type_is_uint8():
    x = _floats(3, 4)
    got = check("QuantizeLinear", [x, np.float32(0.05)], consts=(1,), opset=21)
    assert got[0].dtype == np.uint8


@pytest.mark.parametrize("xdtype", [U8, I8, np.int32])
def test_dequantize(xdtype):
    x = _ints((2, 5, 3), xdtype)
    zero = _ints((5,), xdtype, seed=1) if xdtype != np.int32 else np.zeros(5, np.int32)
    check("DequantizeLinear", [x, np.linspace(0.01, 0.1, 5).astype(np.float32), zero],
          consts=(1, 2), axis=1, opset=21)
    check("DequantizeLinear", [x, np.float32(0.02)], consts=(1,), opset=21)


def test_dynamic_quantize_linear():
    x = _floats(4, 33)
    check("DynamicQuantizeLinear", [x], n_out=3, opset=21)


def _compile_one(op, x, consts, opset=21, **attrs):
    names = ["x"] + list(consts)
    m = _model([helper.make_node(op, names, ["y"], **attrs)], {"x": x}, ["y"], consts,
               opset=opset)
    return polytc.onnx.compile(m).run(None, {"x": x})


def test_quantize_errors():
    x = _floats(2, 3)
    with pytest.raises(polytc.ModelError, match=r"scale of shape \[4\].*expected one "
                                               r"element, or 3 along axis 1"):
        _compile_one("QuantizeLinear", x, {"s": np.ones(4, np.float32),
                                           "z": np.zeros(4, U8)})
    with pytest.raises(UnsupportedError, match="quantising to int32 is not supported"):
        _compile_one("QuantizeLinear", x, {"s": np.float32(1.0)},
                     output_dtype=onnx.TensorProto.INT32)


# --- integer products ------------------------------------------------------------------------
@pytest.mark.parametrize("b_const", [True, False])
def test_matmul_integer(b_const):
    """Per-column zero points of B, constant or fed at run time, batched A."""
    a, b = _ints((2, 5, 7), U8), _ints((7, 6), I8, seed=1)
    az, bz = np.array(120, U8), _ints((6,), I8, seed=2)
    consts = (1, 2, 3) if b_const else (2, 3)
    check("MatMulInteger", [a, b, az, bz], consts=consts)


def test_matmul_integer_per_row_zero_point():
    """A 1-D zero point of A is one per row (against numpy: onnxruntime and onnx's
    reference take scalars only)."""
    a, b, az = _ints((4, 7), U8), _ints((7, 3), U8, seed=1), _ints((4,), U8, seed=2)
    y = _compile_one("MatMulInteger", a, {"b": b, "az": az, "bz": np.array(7, U8)})[0]
    np.testing.assert_array_equal(y, (a.astype(np.int32) - az[:, None]) @
                                  (b.astype(np.int32) - 7))


@pytest.mark.parametrize("attrs", [{}, {"pads": [1, 1, 1, 1], "strides": [2, 2]},
                                   {"group": 2, "pads": [0, 1, 0, 1]}])
def test_conv_integer(attrs):
    """The padding is the input's zero point (zero after centring)."""
    x, w = _ints((1, 4, 7, 6), U8), _ints((6, 4 // attrs.get("group", 1), 3, 3), U8, seed=1)
    check("ConvInteger", [x, w, np.array(131, U8), np.array(3, U8)], consts=(1, 2, 3),
          **attrs)


@pytest.mark.parametrize("words", ["0", "1"])
@pytest.mark.parametrize("c,kernel,attrs", [
    (4, (3, 3), {}),
    (3, (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),  # a partial word of channels
    (5, (2, 3), {"pads": [2, 1, 0, 1], "dilations": [2, 1]}),
    (8, (1, 1), {"strides": [1, 2]}),
    (16, (3, 3), {"auto_pad": "SAME_UPPER"}),
])
def test_conv_integer_on_int8_words(monkeypatch, words, c, kernel, attrs):
    """ConvInteger with uint8 weights centred on 128 (per tensor or per channel) and the
    input's zero point fed at run time: on int8 words (four channels to a word, the
    padding the zero point in every byte) onnxruntime's int32 sums exactly."""
    monkeypatch.setenv("POLYTC_INT8_DOT", words)
    x, w = _ints((2, c, 7, 6), U8), _ints((6, c, *kernel), U8, seed=1)
    wz = np.array(128, U8) if c % 2 else np.full(6, 128, U8)
    # (onnxruntime's ConvInteger takes one weight zero point: onnx's reference, per
    # channel)
    check("ConvInteger", [x, w, np.array(131, U8), wz], consts=(1, 3), ort=wz.size == 1,
          **attrs)
    g = _compiled_graph("ConvInteger", [x, w, np.array(131, U8), wz], (1, 3), **attrs)
    assert ("ConvWords" in {n.op for n in g.nodes}) == (words == "1")


def _compiled_graph(op, inputs, consts, **attrs):
    """The graph polytc compiles for one ``op`` node (inputs as ``check`` takes them)."""
    names = [f"x{k}" for k in range(len(inputs))]
    feeds = {n: v for k, (n, v) in enumerate(zip(names, inputs)) if k not in consts}
    inits = {n: v for k, (n, v) in enumerate(zip(names, inputs)) if k in consts}
    m = _model([helper.make_node(op, names, ["y0"], **attrs)], feeds, ["y0"], inits, 17)
    return polytc.onnx.compile(m).graph


def test_quantise_dequantise_pair_runs_in_float():
    """A QDQ model's round trip of an activation, DequantizeLinear(QuantizeLinear(x)),
    runs as polytc's QuantizeLinear to a float, dequantised as a float (no 8-bit value
    in between): exactly onnxruntime's values."""
    s, z = np.float32(0.037), np.array(120, U8)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
             helper.make_node("Relu", ["d"], ["y"])]
    x = _floats(4, 33)
    m = _model(nodes, {"x": x}, ["y"], {"s": s, "z": z}, opset=17)
    run_model(m, feeds={"x": x}, rtol=0, atol=0)
    g = polytc.onnx.compile(m).graph
    assert [n.attr("output_dtype") for n in g.nodes if n.op == "QuantizeLinear"] == \
        [onnx.TensorProto.FLOAT]
    (dq,) = [n for n in g.nodes if n.op == "DequantizeLinear"]
    assert g.type_of(dq.inputs[0]).dtype == np.float32


def test_qlinear_matmul():
    a, b = _ints((3, 8), U8), _ints((8, 5), I8, seed=1)
    check("QLinearMatMul", [a, np.float32(0.02), np.array(128, U8), b,
                            np.linspace(0.01, 0.03, 5).astype(np.float32), np.array(0, I8),
                            np.float32(0.05), np.array(100, U8)], consts=(1, 2, 4, 5, 6, 7))


def test_qlinear_conv_per_channel_with_bias():
    x, w = _ints((1, 3, 6, 6), U8), _ints((4, 3, 3, 3), I8, seed=1)
    bias = np.array([100, -50, 0, 2000], np.int32)
    check("QLinearConv", [x, np.float32(0.02), np.array(128, U8), w,
                          np.array([0.01, 0.02, 0.005, 0.03], np.float32),
                          np.zeros(4, I8), np.float32(0.1), np.array(10, U8), bias],
          consts=(1, 2, 3, 4, 5, 6, 7, 8), pads=[1, 1, 1, 1])


@pytest.mark.parametrize("op,operands,attrs", [
    ("QLinearAdd", 2, {}), ("QLinearMul", 2, {}), ("QLinearSigmoid", 1, {}),
    ("QLinearLeakyRelu", 1, {"alpha": 0.1}), ("QLinearConcat", 2, {"axis": 1})])
def test_onnxruntime_qlinear_ops(op, operands, attrs):
    """com.microsoft's QLinear* ops as their float op between DequantizeLinear and
    QuantizeLinear: onnxruntime's results, up to one step where a quotient lands on a
    tie differently."""
    xs = [_ints((2, 3, 4), U8, seed=k) for k in range(operands)]
    params = [(np.float32(0.05 + 0.01 * k), np.array(100 + k, U8)) for k in range(operands)]
    out = (np.float32(0.07), np.array(120, U8))
    names, consts, feeds = [], {}, {}
    triples = [(f"x{k}", f"s{k}", f"z{k}") for k in range(operands)]
    for k, (x, (s, z)) in enumerate(zip(xs, params)):
        feeds[f"x{k}"], consts[f"s{k}"], consts[f"z{k}"] = x, s, z
    consts["ys"], consts["yz"] = out
    if op == "QLinearConcat":
        names = ["ys", "yz"] + [n for t in triples for n in t]
    else:
        names = [n for t in triples for n in t] + ["ys", "yz"]
    n = helper.make_node(op, names, ["y"], domain="com.microsoft", **attrs)
    vi = helper.make_tensor_value_info
    shape = [2, 3 * operands, 4] if op == "QLinearConcat" else [2, 3, 4]
    m = helper.make_model(helper.make_graph(
        [n], "q", [vi(k, onnx.TensorProto.UINT8, v.shape) for k, v in feeds.items()],
        [vi("y", onnx.TensorProto.UINT8, shape)],
        [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    want = reference(m, feeds)[0]
    got = polytc.onnx.compile(m).run(None, feeds)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1


@pytest.mark.parametrize("words", ["0", "1"])
@pytest.mark.parametrize("op", ["DynamicQuantizeMatMul", "MatMulIntegerToFloat"])
def test_onnxruntime_float_output_products(monkeypatch, op, words):
    """com.microsoft's DynamicQuantizeMatMul (the activation quantised at run time, as
    DynamicQuantizeLinear does) and MatMulIntegerToFloat, with per-column weight scales
    and a bias: onnxruntime's results."""
    monkeypatch.setenv("POLYTC_INT8_DOT", words)
    k, n = 32, 24
    w = _ints((k, n), I8, seed=1)
    sb = np.linspace(0.01, 0.03, n).astype(np.float32)
    bias = np.linspace(-1, 1, n).astype(np.float32)
    vi = helper.make_tensor_value_info
    if op == "DynamicQuantizeMatMul":
        x = _floats(5, k)
        ins, consts = ["x", "w", "sb", "", "bias"], {"w": w, "sb": sb, "bias": bias}
        xin = vi("x", onnx.TensorProto.FLOAT, x.shape)
    else:
        x = _ints((5, k), U8)
        ins = ["x", "w", "sa", "sb", "za", "", "bias"]
        consts = {"w": w, "sa": np.float32(0.02), "sb": sb, "za": np.array(128, U8),
                  "bias": bias}
        xin = vi("x", onnx.TensorProto.UINT8, x.shape)
    node = helper.make_node(op, ins, ["y"], domain="com.microsoft")
    m = helper.make_model(helper.make_graph(
        [node], "q", [xin], [vi("y", onnx.TensorProto.FLOAT, [5, n])],
        [onnx.numpy_helper.from_array(np.asarray(v), name) for name, v in consts.items()]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    want = reference(m, {"x": x})[0]
    session = polytc.onnx.compile(m)
    got = session.run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert ("MatMulWords" in {n.op for n in session.graph.nodes}) == (words == "1")


@pytest.mark.parametrize("k,exact", [(16, True), (2048, False)])
def test_constant_weights_fold_once(k, exact):
    """A constant operand and its zero point become one centred constant: in float32
    when every partial sum of the product is an integer below 2^24 (the largest |a - a0|,
    255, times the largest column sum of |b - b0|: 16 rows of at most 250), then
    converted to int32 and, for a Cast to float after it, not converted at all; else in
    int32 (2048 rows)."""
    a, b = _ints((2, k), U8), _ints((k, 8), U8, seed=1)
    consumer = helper.make_node("Cast", ["y32"], ["y"], to=onnx.TensorProto.FLOAT)
    m = _model([helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y32"]),
                consumer], {"a": a}, ["y"],
               {"b": b, "az": np.array(3, U8), "bz": np.array(5, U8)})
    got = run_model(m, {"a": a})[0]
    want = (a.astype(np.int64) - 3) @ (b.astype(np.int64) - 5)
    np.testing.assert_array_equal(got, want.astype(np.float32))
    g = polytc.onnx.compile(m).graph
    dtype = np.float32 if exact else np.int32
    centred = [v for v in g.constants.values() if v.shape == (k, 8)]
    assert len(centred) == 1 and centred[0].dtype == dtype
    np.testing.assert_array_equal(centred[0], (b.astype(np.int32) - 5).astype(dtype))
    assert [n.op for n in g.nodes] == ["Cast", "Sub", "MatMul"] + ([] if exact else ["Cast"])


def test_hand_written_quantised_gemm():
    """The language has the types a kernel author needs for a quantised GEMM."""
    k = polytc.tc("""
    def qgemm(uint8(M, K) A, int8(K, N) B, int32 za) -> (int32(M, N) C) {
        C(i, j) +=! (int32(A(i, k)) - za) * int32(B(k, j))
    }""")
    a, b = _ints((5, 9), U8), _ints((9, 4), I8, seed=1)
    c = k(a, b, np.int32(128))
    np.testing.assert_array_equal(c, (a.astype(np.int64) - 128) @ b.astype(np.int64))


# --- whole models quantised by onnxruntime ---------------------------------------------------
def _quantised(model, tmp_path, static=None):
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_dynamic, quantize_static)

    src, dst = tmp_path / "f32.onnx", tmp_path / "int8.onnx"
    onnx.save(model, src)
    if static is None:
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
        return onnx.load(dst)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.left = [polytc.graph.examples.example_inputs(model, seed=s)
                         for s in range(4)]

        def get_next(self):
            return self.left.pop() if self.left else None

    quantize_static(src, dst, Reader(), per_channel=True,
                    quant_format=QuantFormat.QDQ if static == "qdq" else QuantFormat.QOperator)
    return onnx.load(dst)


@pytest.mark.parametrize("words", ["0", "1"])
@pytest.mark.parametrize("name,static", [
    ("mlp", None), ("small_cnn", None), ("transformer", None), ("small_cnn", "qdq"),
    ("mlp", "qdq"), ("transformer", "qdq"),
    ("small_cnn", "qoperator"), ("mlp", "qoperator"), ("mlp_gemm", "qoperator")])
def test_quantised_models(name, static, words, tmp_path, monkeypatch):
    """Models quantised by onnxruntime.quantization (dynamic: DynamicQuantizeLinear,
    MatMulInteger, ConvInteger; static: QuantizeLinear/DequantizeLinear pairs, or the
    QOperator format's QLinearConv, QLinearMatMul and com.microsoft QGemm, QLinearAdd,
    QLinearAveragePool, QLinearGlobalAveragePool, QLinearSoftmax) give
    onnxruntime's int8 results (up to a float rounding that moves a quantised activation
    by one step: far below the quantisation error itself), with the products on int8
    words or in float."""
    from polytc.graph import examples as ex

    monkeypatch.setenv("POLYTC_INT8_DOT", words)
    model = {"mlp": lambda: ex.mlp(4), "small_cnn": lambda: ex.small_cnn(2),
             "mlp_gemm": lambda: ex.mlp_gemm(4, (64, 32, 10)),
             "transformer": lambda: ex.transformer_layer(1, 16, 32, 2, 64)}[name]()
    q = _quantised(model, tmp_path, static)
    ops = {n.op_type for n in q.graph.node}
    assert ops & {"MatMulInteger", "ConvInteger", "QuantizeLinear", "QGemm"}
    feeds = ex.example_inputs(q, seed=0)
    want = reference(q, feeds)[0]
    exact = reference(model, feeds)[0]
    session = polytc.onnx.compile(q)
    got = session.run(None, feeds)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    error = np.abs(want - exact).mean()  # what quantising costs
    assert np.abs(got - want).mean() <= 0.05 * error + 1e-6
    on_words = {n.op for n in session.graph.nodes} & {"MatMulWords", "ConvWords"}
    assert bool(on_words) == (words == "1")


@pytest.mark.parametrize("xdtype", [U8, I8])
def test_convolution_after_a_qlinear_add_runs_on_words(monkeypatch, xdtype):
    """QOperator: a QLinearConv reads what a com.microsoft QLinearAdd made (rewritten
    earlier in the pass into a QuantizeLinear, of no type ONNX infers): on int8 words
    all the same (an int8 activation made again as uint8), onnxruntime's results."""
    monkeypatch.setenv("POLYTC_INT8_DOT", "1")
    t = onnx.TensorProto.UINT8 if xdtype == U8 else onnx.TensorProto.INT8
    z = np.array(3 if xdtype == U8 else -2, xdtype)
    consts = {"s": np.float32(0.05), "z": z, "w": _ints((6, 8, 3, 3), I8, seed=1),
              "sw": np.float32(0.01), "zw": np.array(0, I8), "sy": np.float32(0.2),
              "zy": z}
    nodes = [helper.make_node("QLinearAdd", ["x", "s", "z", "x", "s", "z", "s", "z"],
                              ["a"], domain="com.microsoft"),
             helper.make_node("QLinearConv", ["a", "s", "z", "w", "sw", "zw", "sy", "zy"],
                              ["y"], pads=[1, 1, 1, 1])]
    vi = helper.make_tensor_value_info
    m = helper.make_model(helper.make_graph(
        nodes, "q", [vi("x", t, [1, 8, 6, 6])], [vi("y", t, [1, 6, 6, 6])],
        [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    x = _ints((1, 8, 6, 6), xdtype)
    session = polytc.onnx.compile(m)
    assert "ConvWords" in {n.op for n in session.graph.nodes}
    got, want = session.run(None, {"x": x})[0], reference(m, {"x": x})[0]
    assert got.dtype == want.dtype
    assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1


def test_layers_of_one_shape_share_their_int8_kernel(tmp_path, monkeypatch):
    """The scales and zero-point sums of a QDQ product on int8 words are its kernel's
    inputs, not numbers in its code: two layers of one shape compile one kernel."""
    from polytc.graph import examples as ex

    monkeypatch.setenv("POLYTC_INT8_DOT", "1")
    q = _quantised(ex.mlp(4, (64, 64, 64, 10)), tmp_path, "qdq")
    session = polytc.onnx.compile(q)
    session.run(None, ex.example_inputs(q, seed=0))
    (plan,) = session._plans.values()
    words = [s for s in plan.steps if "MatMulWords" in getattr(s, "ops", ())]
    codes = {plan.kernels[s.name].code for s in words}
    assert len(words) == 3 and len(codes) == 2  # 64 -> 64 twice, then 64 -> 10


def test_int8_words_with_a_symbolic_batch(tmp_path, monkeypatch):
    """A quantised CNN exported with a symbolic batch: its convolutions and products on
    int8 words serve every batch, onnxruntime's results at each."""
    from polytc.graph import examples as ex

    monkeypatch.setenv("POLYTC_INT8_DOT", "1")
    q = _quantised(ex.small_cnn("N", image=16), tmp_path)
    session = polytc.onnx.compile(q)
    assert {"ConvWords", "MatMulWords"} <= {n.op for n in session.graph.nodes}
    for batch in (1, 3):
        feeds = ex.example_inputs(q, batch=batch, seed=batch)
        np.testing.assert_allclose(session.run(None, feeds)[0], reference(q, feeds)[0],
                                   rtol=1e-5, atol=1e-5)


def _dynamic_matmul(k=16):
    """x (float) -> DynamicQuantizeLinear -> MatMulInteger(constant int8 weights) -> Cast
    to float * scales: what quantize_dynamic writes for a MatMul."""
    w = _ints((k, 8), I8, seed=1)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"]),
             helper.make_node("MatMulInteger", ["q", "w", "z"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["f"], to=onnx.TensorProto.FLOAT),
             helper.make_node("Mul", ["f", "s"], ["y"])]
    x = _floats(3, k)
    return _model(nodes, {"x": x}, ["y"], {"w": w}, opset=17), {"x": x}


def test_dynamic_quantisation_feeds_the_float_product(monkeypatch):
    """Without int8 words (a CPU without VNNI), the activation is quantised straight to
    a float (QuantizeLinear's internal float output), no uint8 in between, and the
    product is a float MatMul: onnxruntime's results exactly."""
    monkeypatch.setenv("POLYTC_INT8_DOT", "0")
    m, feeds = _dynamic_matmul()
    got = run_model(m, feeds, rtol=0, atol=0)[0]
    assert got.dtype == np.float32
    g = polytc.onnx.compile(m).graph
    quantise = [n for n in g.nodes if n.op == "QuantizeLinear"]
    assert [n.attr("output_dtype") for n in quantise] == [onnx.TensorProto.FLOAT]
    assert not [n for n in g.nodes if n.op == "Cast" and n.attr("to") ==
                onnx.TensorProto.INT32]


def _words_model(k, n, rows, wdtype=I8, w_zero=None, a_zero=True):
    """x (float) -> DynamicQuantizeLinear -> MatMulInteger(constant weights [k, n] of
    ``wdtype`` with zero point ``w_zero``; ``a_zero``: the activation's zero point
    given) -> Cast -> Mul -> Relu."""
    w = _ints((k, n), wdtype, seed=1)
    inits = {"w": w}
    ins = ["q", "w", "z" if a_zero else ""]
    if w_zero is not None:
        inits["wz"] = np.asarray(w_zero, wdtype)
        ins.append("wz")
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"]),
             helper.make_node("MatMulInteger", ins, ["acc"]),
             helper.make_node("Cast", ["acc"], ["f"], to=onnx.TensorProto.FLOAT),
             helper.make_node("Mul", ["f", "s"], ["m"]),
             helper.make_node("Relu", ["m"], ["y"])]
    x = _floats(*rows, k)
    return _model(nodes, {"x": x}, ["y"], inits, opset=17), {"x": x}


@pytest.mark.parametrize("k,n,rows,wdtype,w_zero,a_zero", [
    (64, 48, (5,), I8, None, True),  # micro-kernel tiles and a partial one
    (256, 100, (2, 33), I8, None, True),  # batched rows, a masked last vector
    (12, 7, (3,), I8, 0, False),  # narrower than a vector, no activation zero point
    (64, 40, (4,), np.uint8, 128, True),  # uint8 weights centred on 128: int8 again
    (32, 24, (6,), np.uint8, np.full(24, 128), True),  # a zero point per column
])
def test_dynamic_quantisation_runs_on_int8_words(monkeypatch, k, n, rows, wdtype, w_zero,
                                                 a_zero):
    """With int8 words (forced: the code is exact without VNNI too) the product is
    ``MatMulWords`` of the uint8 activation viewed as words and the prepacked weights,
    minus the zero point's column sums, in int32: onnxruntime's results exactly."""
    monkeypatch.setenv("POLYTC_INT8_DOT", "1")
    m, feeds = _words_model(k, n, rows, wdtype, w_zero, a_zero)
    run_model(m, feeds, rtol=0, atol=0)
    session = polytc.onnx.compile(m)
    ops = {n.op for n in session.graph.nodes}
    assert {"QuantWords", "MatMulWords"} <= ops and "MatMul" not in ops
    session.run(None, feeds)
    (plan,) = session._plans.values()
    code = "".join(k.code for k in plan.kernels.values())
    assert "pt_vdot4_" in code or "pt_dot4(" in code


@pytest.mark.parametrize("k,wdtype,w_zero", [
    (18, I8, None),  # rows of 18 bytes: not whole words
    (16, I8, 5),  # int8 weights minus 5 leave int8's range
    (16, U8, np.arange(100, 108)),  # so do uint8 ones minus 100..107, per column
])
def test_products_that_are_not_words_stay_float(monkeypatch, k, wdtype, w_zero):
    monkeypatch.setenv("POLYTC_INT8_DOT", "1")
    m, feeds = _words_model(k, 8, (3,), wdtype, w_zero)
    run_model(m, feeds, rtol=0, atol=0)
    assert "MatMulWords" not in {n.op for n in polytc.onnx.compile(m).graph.nodes}


def test_constant_dequantised_weights_fold_at_opset_17():
    """DequantizeLinear of constant int8 weights folds at compile time (onnx's reference
    has no DequantizeLinear before opset 19), per axis, as the lowering computes it."""
    w, s = _ints((4, 6), I8), np.linspace(0.01, 0.06, 6).astype(np.float32)
    z = _ints((6,), I8, seed=3)
    nodes = [helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wf"], axis=1),
             helper.make_node("MatMul", ["x", "wf"], ["y"])]
    x = _floats(2, 4)
    m = _model(nodes, {"x": x}, ["y"], {"w": w, "s": s, "z": z}, opset=17)
    run_model(m, {"x": x})
    g = polytc.onnx.compile(m).graph
    assert [n.op for n in g.nodes] == ["MatMul"]
