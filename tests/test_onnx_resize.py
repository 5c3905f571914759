"""Resize (polytc/graph/ops/resize.py) against onnxruntime, for what ONNX's node tests do not
cover: every coordinate transformation with every interpolation, ratios that are not
integers, up- and downsampling in one node, antialiasing, crops outside the input, axes,
the aspect-ratio policies, integer data; the affine form of the common reads; the errors."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from polytc import onnx as ponnx
from polytc.diagnostics import ModelError, UnsupportedError
from polytc.graph.ir import Node
from polytc.graph.ops import Ref, lower
from polytc.graph.ops import resize as resize_module

from .test_onnx_movement_ops import _model, run_model

OPSET = 19
COORDS = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
          "asymmetric"]


def _x(shape, dtype=np.float32, seed=0):
    r = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return r.integers(0, 100, shape).astype(dtype)
    return r.standard_normal(shape).astype(dtype)


def resize(x, scales=None, sizes=None, roi=None, ort=True, **attrs):
    """One Resize node with roi/scales/sizes as initialisers, checked against onnxruntime
    (``ort=False``: onnx's reference evaluator)."""
    consts, names = {}, ["x"]
    for name, v, dt in (("roi", roi, np.float32), ("scales", scales, np.float32),
                        ("sizes", sizes, np.int64)):
        if v is None:
            names.append("")
        else:
            names.append(name)
            consts[name] = np.asarray(v, dt)
    while names[-1] == "":
        names.pop()
    m = _model([helper.make_node("Resize", names, ["y"], **attrs)], {"x": x}, ["y"], consts,
               OPSET)
    return run_model(m, {"x": x}, ort=ort)[0]


def stmts(shape, scales=None, sizes=None, **attrs):
    """The TC statements a Resize of an input of ``shape`` lowers to."""
    ins = [Ref("X", shape, np.float32), None,
           None if scales is None else Ref("S", (len(scales),), np.float32,
                                           np.asarray(scales, np.float32)),
           None if sizes is None else Ref("Z", (len(sizes),), np.int64,
                                          np.asarray(sizes, np.int64))]
    names = iter(f"T{k}" for k in range(100))
    node = Node("Resize", "r", ("X", "", "S", "Z"), ("Y",), tuple(sorted(attrs.items())))
    return lower(node, ins, lambda v: v or next(names)).stmts


# --- results ------------------------------------------------------------------------------
@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("nearest", ["round_prefer_floor", "round_prefer_ceil", "floor",
                                     "ceil"])
def test_nearest(coord, nearest):
    # 5 -> 8 and 7 -> 3: ties (x.5) and exact integers both occur
    resize(_x((2, 3, 5, 7)), sizes=[2, 3, 8, 3], mode="nearest",
           coordinate_transformation_mode=coord, nearest_mode=nearest)


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_interpolation(coord, mode):
    resize(_x((2, 3, 6, 9)), sizes=[2, 3, 10, 4], mode=mode,
           coordinate_transformation_mode=coord)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_scales_not_integer(mode):
    # output extent floor(in * scale); the coordinates use the scale itself, not out / in
    resize(_x((1, 2, 7, 9)), scales=[1, 1, 1.7, 0.6], mode=mode)


def test_cubic_coefficient_and_exclude_outside():
    resize(_x((1, 1, 5, 6)), scales=[1, 1, 1.5, 0.7], mode="cubic", cubic_coeff_a=-0.5,
           exclude_outside=1)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_antialias(mode):
    # downsampling widens the filter (3.4x: 8 and 14 taps); upsampling an axis is unchanged
    resize(_x((1, 2, 17, 5)), sizes=[1, 2, 5, 8], mode=mode, antialias=1)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_tf_crop_and_resize(mode):
    # the crop leaves the input on both sides of the last axis
    resize(_x((1, 2, 6, 7)), roi=[0, 0, 0.2, -0.3, 1, 1, 0.7, 1.2], sizes=[1, 2, 4, 9],
           mode=mode, coordinate_transformation_mode="tf_crop_and_resize",
           extrapolation_value=-3.0)


def test_axes():
    # onnxruntime's linear Resize refuses to resize the channels, the reference evaluator
    # negative axes
    x = _x((2, 5, 4, 3))
    want = resize(x, scales=[0.5, 2.5], axes=[3, 1], mode="linear", ort=False)
    m = _model([helper.make_node("Resize", ["x", "", "s"], ["y"], axes=[3, -3], mode="linear")],
               {"x": x}, ["y"], {"s": np.array([0.5, 2.5], np.float32)}, OPSET)
    np.testing.assert_array_equal(ponnx.compile(m).run(None, {"x": x})[0], want)


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
def test_keep_aspect_ratio(policy):
    resize(_x((1, 1, 6, 4)), sizes=[9, 9], axes=[2, 3], mode="nearest",
           keep_aspect_ratio_policy=policy)


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float64])
def test_dtypes(dtype):
    # onnxruntime has no Resize of doubles
    mode = "linear" if dtype == np.float64 else "nearest"
    resize(_x((1, 2, 3, 4), dtype), scales=[1, 1, 2, 1.5], mode=mode, ort=dtype != np.float64)


def test_large_image_bilinear_and_nearest():
    x = _x((1, 8, 30, 34))
    resize(x, scales=[1, 1, 2, 2], mode="linear")
    resize(x, scales=[1, 1, 0.5, 0.5], mode="linear")
    resize(x, sizes=[1, 8, 45, 17], mode="linear", coordinate_transformation_mode="align_corners")
    resize(x, scales=[1, 1, 2, 2], mode="nearest", coordinate_transformation_mode="asymmetric",
           nearest_mode="floor")


def test_identity_and_empty():
    x = _x((1, 2, 3, 4))
    resize(x, scales=[1, 1, 1, 1], mode="linear")
    assert resize(x, scales=[1, 1, 0.2, 1], mode="nearest").shape == (1, 2, 0, 4)


# --- the TC text ------------------------------------------------------------------------------
def test_integer_upsample_is_an_affine_read():
    for attrs in ({}, {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}):
        assert stmts((1, 64, 56, 56), scales=[1, 1, 2, 2], mode="nearest", **attrs) == [
            "Y(i0, i1, i2, i3) = X(i0, i1, i2 / 2, i3 / 2) "
            "where i0 in 0:1, i1 in 0:64, i2 in 0:112, i3 in 0:112"]
    # any rational ratio: 12 -> 7 rows is floor((7 i + 2) / 4) with half_pixel
    assert stmts((1, 3, 12, 10), sizes=[1, 3, 7, 20], mode="nearest")[0].startswith(
        "Y(i0, i1, i2, i3) = X(i0, i1, (7 * i2 + 2) / 4, i3 / 2) ")


def test_bilinear_one_statement_per_axis():
    # 2x up: the last axis first (fewer rows to gather from), weights of period 2
    t0, t1, t2, y = stmts((1, 64, 56, 56), scales=[1, 1, 2, 2], mode="linear")
    assert t0[2:] == t1[2:] == ("(t, o) = (t < 1 ? (o < 1 ? float(0.25) : float(0.75)) : "
                                "(o < 1 ? float(0.75) : float(0.25))) where t in 0:2, o in 0:2")
    assert t2 == ("T2(i0, i1, i2, i3) = T1(0, i3 % 2) * X(i0, i1, i2, max((i3 + 1) / 2 - 1, 0))"
                  " + T1(1, i3 % 2) * X(i0, i1, i2, min((i3 + 1) / 2, 55)) "
                  "where i0 in 0:1, i1 in 0:64, i2 in 0:56, i3 in 0:112")
    assert y.startswith("Y(i0, i1, i2, i3) = T0(0, i2 % 2) * T2(i0, i1, max((i2 + 1) / 2 - 1, 0)"
                        ", i3) + ")
    # 2x down with half_pixel: the mean of 2 pixels per axis, no table; the outer axis first
    assert stmts((1, 1, 8, 8), scales=[1, 1, 0.5, 0.5], mode="linear") == [
        "T0(i0, i1, i2, i3) = float(0.5) * X(i0, i1, 2 * i2, i3) + float(0.5) * "
        "X(i0, i1, 2 * i2 + 1, i3) where i0 in 0:1, i1 in 0:1, i2 in 0:4, i3 in 0:8",
        "Y(i0, i1, i2, i3) = float(0.5) * T0(i0, i1, i2, 2 * i3) + float(0.5) * "
        "T0(i0, i1, i2, 2 * i3 + 1) where i0 in 0:1, i1 in 0:1, i2 in 0:4, i3 in 0:4"]


def test_flipped_crop_is_affine():
    # a roi that ends before it starts mirrors the axis: the indices decrease
    # (onnxruntime does not mirror: the reference evaluator)
    x = _x((1, 1, 5, 6))
    roi = [0, 0, 0.9, 1, 1, 1, 0.1, 0]
    resize(x, roi=roi, sizes=[1, 1, 4, 6], mode="nearest", ort=False,
           coordinate_transformation_mode="tf_crop_and_resize")
    ins = [Ref("X", x.shape, np.float32), Ref("R", (8,), np.float32, np.float32(roi)), None,
           Ref("Z", (4,), np.int64, np.int64([1, 1, 4, 6]))]
    node = Node("Resize", "r", ("X", "R", "", "Z"), ("Y",),
                (("coordinate_transformation_mode", "tf_crop_and_resize"),))
    assert lower(node, ins, str).stmts == [
        "Y(i0, i1, i2, i3) = X(i0, i1, 4 - ((3 * i2) / 2), 5 - i3) "
        "where i0 in 0:1, i1 in 0:1, i2 in 0:4, i3 in 0:6"]


def test_index_tables(monkeypatch):
    # indices that are no c + (q o + b) / p with p <= _MAX_PERIOD are read from a table;
    # such axes share one statement
    monkeypatch.setattr(resize_module, "_MAX_PERIOD", 1)
    *tables, y = stmts((1, 1, 5, 6), sizes=[1, 1, 8, 4], mode="linear")
    assert len(tables) == 4 and y.startswith(
        "Y(i0, i1, i2, i3) = T3(0, i3) * T1(0, i2) * X(i0, i1, T0(0, i2), T2(0, i3)) + ")
    resize(_x((2, 3, 5, 6)), sizes=[2, 3, 8, 4], mode="linear")


def test_large_divisors_share_one_statement():
    # align_corners 56 -> 112: (55 o + 110) / 111; a second statement reading the first
    # through it takes isl seconds to schedule
    *tables, y = stmts((1, 2, 56, 56), sizes=[1, 2, 112, 112], mode="linear",
                       coordinate_transformation_mode="align_corners")
    assert len(tables) == 2 and y.count(" * X(") == 4


def test_upsample_is_resize_10():
    # asymmetric coordinates, the nearest pixel rounded down when upsampling, up when
    # downsampling (onnxruntime's Resize-10; ONNX's version converter loses this)
    ins = [Ref("X", (1, 1, 4, 10), np.float32), Ref("S", (4,), np.float32,
                                                     np.float32([1, 1, 2, 0.6]))]
    node = Node("Upsample", "u", ("X", "S"), ("Y",), (("mode", "nearest"),))
    assert lower(node, ins, str).stmts == [
        "Y(i0, i1, i2, i3) = X(i0, i1, i2 / 2, (5 * i3 + 2) / 3) "
        "where i0 in 0:1, i1 in 0:1, i2 in 0:8, i3 in 0:6"]


# --- errors -------------------------------------------------------------------------------
def test_errors():
    x = _x((1, 1, 2, 2))
    with pytest.raises(UnsupportedError, match="linear interpolation of int32 data"):
        resize(_x((1, 1, 2, 2), np.int32), scales=[1, 1, 2, 2], mode="linear")
    with pytest.raises(UnsupportedError, match="mode 'area' is not supported"):
        stmts((1, 1, 2, 2), scales=[1, 1, 2, 2], mode="area")
    with pytest.raises(UnsupportedError, match="nearest_mode 'round' is not supported"):
        stmts((1, 1, 2, 2), scales=[1, 1, 2, 2], nearest_mode="round")
    with pytest.raises(ModelError, match="scales .* must be positive"):
        stmts((1, 1, 2, 2), scales=[1, 1, 0, 2])
    with pytest.raises(ModelError, match=r"axes \[1, 5\] are invalid for rank 4"):
        stmts((1, 1, 2, 2), scales=[2, 2], axes=[1, 5])
    with pytest.raises(UnsupportedError, match="coordinate_transformation_mode 'tf_half"):
        stmts((1, 1, 2, 2), scales=[1, 1, 2, 2], coordinate_transformation_mode="tf_half_pixel")
    with pytest.raises(ModelError, match="exactly one of scales and sizes"):
        stmts((1, 1, 2, 2), scales=[1, 1, 2, 2], sizes=[1, 1, 4, 4])
    with pytest.raises(ModelError, match="3 scales for 4 axes"):
        stmts((1, 1, 2, 2), scales=[1, 2, 2])
    with pytest.raises(ModelError, match="tf_crop_and_resize needs roi"):
        stmts((1, 1, 2, 2), sizes=[1, 1, 3, 3], coordinate_transformation_mode="tf_crop_and_resize")
    m = _model([helper.make_node("Resize", ["x", "", "s"], ["y"])],
               {"x": x, "s": np.array([1, 1, 2, 2], np.float32)}, ["y"], {}, OPSET)
    run_model(m, {"x": x, "s": np.array([1, 1, 2, 2], np.float32)})  # scales: staged


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_inside_a_chain(mode):
    # Relu -> Resize -> Add: the resize reads and writes temporaries of a fused program
    x = _x((1, 4, 6, 5))
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Resize", ["r", "", "s"], ["z"], mode=mode),
             helper.make_node("Add", ["z", "z"], ["y"])]
    m = _model(nodes, {"x": x}, ["y"], {"s": np.float32([1, 1, 2, 0.7])}, OPSET)
    run_model(m, {"x": x})


@pytest.mark.parametrize("op,opset,mode,scales", [
    ("Resize", 10, "linear", [1, 1, 0.6, 1.7]), ("Resize", 10, "nearest", [1, 1, 0.6, 1.7]),
    ("Upsample", 9, "nearest", [1, 1, 2, 3]), ("Upsample", 9, "linear", [1, 1, 2, 1.5])])
def test_old_opsets_keep_their_coordinates(op, opset, mode, scales):
    """onnx's version converter makes Upsample and Resize-10 a Resize-13 with half_pixel
    coordinates; the importer gives them back their asymmetric ones (opset 10 linear at
    0.6: [0, 1.67, 3.33, ..], not [0.33, 2.0, 3.67, ..])."""
    import onnx

    x = _x((1, 1, 5, 7))
    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node(op, ["x", "s"], ["y"], mode=mode)], "t",
                          [vi("x", onnx.TensorProto.FLOAT, x.shape)],
                          [vi("y", onnx.TensorProto.FLOAT, [None] * 4)],
                          [onnx.numpy_helper.from_array(np.array(scales, np.float32), "s")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7
    run_model(m, {"x": x})
