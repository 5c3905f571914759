"""CumSum and CumProd (``polytc/graph/ops/scan.py``), LpNormalization and LRN
(``reduce.py``) against onnxruntime: every exclusive/reverse mode of short (triangular)
and long (blocked) axes, axes given as int32 and int64 constants (negative, leading,
middle), integer and float types, and the errors.  Where onnxruntime lacks a case
(unsigned scans, LRN other than float, 4-D and odd sizes) onnx's reference evaluator or
the spec's formula in numpy checks it."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import helper

from polytc import onnx as ponnx
from polytc.diagnostics import ModelError, UnsupportedError

from .test_onnx_movement_ops import _model, run_model


def _data(shape, dtype, seed=0, around=0.0):
    r = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        low = 0 if np.dtype(dtype).kind == "u" or around else -3
        return r.integers(low, 4, shape).astype(dtype)
    return (around + r.standard_normal(shape) * (0.1 if around else 1)).astype(dtype)


def _scan(op, x, axis, axis_dtype=np.int64, **attrs):
    m = _model([helper.make_node(op, ["x", "a"], ["y"], **attrs)], {"x": x}, ["y"],
               {"a": np.array(axis, axis_dtype)}, opset=26 if op == "CumProd" else 18)
    return m, {"x": x}


# --- CumSum, CumProd ------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
@pytest.mark.parametrize("reverse,exclusive", list(itertools.product([0, 1], [0, 1])))
@pytest.mark.parametrize("shape,axis", [
    ((7,), 0), ((3, 5), 1), ((4, 6, 2), -2), ((5, 3, 2), 0), ((2, 70), -1),
    ((2, 256), -1), ((160, 3), 0), ((2, 131, 3), 1)])  # blocked (256, 160), prime (131)
def test_scan_modes(op, reverse, exclusive, shape, axis):
    x = _data(shape, np.float32, around=1.0 if op == "CumProd" else 0.0)
    run_model(*_scan(op, x, axis, reverse=reverse, exclusive=exclusive))


@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64, np.uint32, np.uint64])
def test_scan_types(op, dtype):
    prod = op == "CumProd"
    x = _data((3, 6) if prod else (3, 200), dtype, around=1.0 if prod else 0.0)  # 200: blocked
    ort = np.dtype(dtype).kind != "u"  # onnxruntime has no unsigned scans
    run_model(*_scan(op, x, 1, np.int32, exclusive=1), ort=ort)
    run_model(*_scan(op, x, 0, reverse=1), ort=ort)


def test_scan_half():  # computed in float (the widen_halves pass)
    run_model(*_scan("CumSum", _data((2, 40), np.float16), 1, reverse=1), rtol=1e-2,
              atol=1e-2)


def test_scan_axis_of_shape_1():  # as onnxruntime accepts it
    run_model(*_scan("CumSum", _data((3, 4), np.float32), [-1], np.int32))


def test_scan_empty_axis():
    run_model(*_scan("CumSum", np.zeros((3, 0), np.float32), 1))


def test_scan_errors():
    x = _data((2, 3), np.float32)
    with pytest.raises(ModelError, match="axis 2 is out of range for rank 2"):
        ponnx.compile(_scan("CumSum", x, 2)[0])
    with pytest.raises(ModelError, match="axis must be one integer"):
        ponnx.compile(_scan("CumProd", x, [0, 1])[0])
    feeds = {"x": x, "a": np.array(1, np.int64)}
    m = _model([helper.make_node("CumSum", ["x", "a"], ["y"])], feeds, ["y"])
    run_model(m, feeds)  # the axis fed at run time: staged (graph/staged.py)


# --- LpNormalization ------------------------------------------------------------------------
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("shape,axis", [((3, 4), 0), ((3, 4), -1), ((2, 3, 5), 1)])
def test_lpnorm(p, shape, axis):
    x = _data(shape, np.float32)
    x[0] = 0  # a zero norm gives zeros
    m = _model([helper.make_node("LpNormalization", ["x"], ["y"], p=p, axis=axis)],
               {"x": x}, ["y"], opset=22)
    run_model(m, {"x": x})


def test_lpnorm_double_and_default():
    x = _data((4, 3), np.float64)
    m = _model([helper.make_node("LpNormalization", ["x"], ["y"])], {"x": x}, ["y"])
    run_model(m, {"x": x})


@pytest.mark.parametrize("x,attrs,err,match", [
    (np.ones((2, 3), np.float32), {"p": 3}, ModelError, "p = 3"),
    (np.ones((2, 3), np.float32), {"axis": 2}, ModelError, "axis 2 is out of range"),
    (np.ones((2, 3), np.int32), {}, UnsupportedError, "LpNormalization of int32")])
def test_lpnorm_errors(x, attrs, err, match):
    m = _model([helper.make_node("LpNormalization", ["x"], ["y"], **attrs)], {"x": x}, ["y"])
    with pytest.raises(err, match=match):
        ponnx.compile(m)


# --- LRN ------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,size,attrs", [
    ((2, 5, 3, 4), 3, {}), ((1, 7, 4, 4), 4, {"alpha": 0.01, "beta": 0.5, "bias": 2.0}),
    ((2, 6, 5), 5, {"alpha": 0.1}), ((1, 3, 2, 2, 3), 1, {}), ((1, 4, 3, 3), 9, {}),
    ((3, 8), 3, {"beta": 1.0})])
def test_lrn(shape, size, attrs):
    x = _data(shape, np.float32)
    m = _model([helper.make_node("LRN", ["x"], ["y"], size=size, **attrs)], {"x": x}, ["y"])
    if size % 2 == 1 and x.ndim == 4:
        run_model(m, {"x": x})
    else:  # onnxruntime takes odd sizes of 4-D inputs only (and onnx's reference errs)
        np.testing.assert_allclose(ponnx.compile(m).run(None, {"x": x})[0],
                                   _lrn(x, size, **attrs), rtol=1e-5, atol=1e-6)


def _lrn(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    """LRN as the spec defines it, in float64."""
    x64, C = x.astype(np.float64), x.shape[1]
    sq = np.stack([(x64[:, max(0, c - (size - 1) // 2):c + size // 2 + 1] ** 2).sum(1)
                   for c in range(C)], 1)
    return (x64 / (bias + alpha / size * sq) ** beta).astype(x.dtype)


def test_lrn_double():  # onnxruntime has float LRN only
    x = _data((1, 6, 3, 3), np.float64)
    m = _model([helper.make_node("LRN", ["x"], ["y"], size=3, alpha=0.05)], {"x": x}, ["y"])
    np.testing.assert_allclose(ponnx.compile(m).run(None, {"x": x})[0],
                               _lrn(x, 3, alpha=0.05), rtol=1e-7)  # (alpha is a float32)


@pytest.mark.parametrize("x,size,err,match", [
    (np.ones((3,), np.float32), 3, ModelError, r"must be \(N, C, D...\), not \[3\]"),
    (np.ones((1, 3, 2, 2), np.float32), 0, ModelError, "size must be positive"),
    (np.ones((1, 3, 2, 2), np.int64), 3, UnsupportedError, "LRN of int64")])
def test_lrn_errors(x, size, err, match):
    m = _model([helper.make_node("LRN", ["x"], ["y"], size=size)], {"x": x}, ["y"])
    with pytest.raises(err, match=match):
        ponnx.compile(m)
