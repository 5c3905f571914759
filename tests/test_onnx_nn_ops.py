"""The lowerings of ``polytc/graph/ops/nn.py`` and ``reduce.py`` (contractions,
convolution, pooling, reductions, softmax, normalisations), one node at a time, against
onnxruntime (or onnx's reference evaluator when onnxruntime is not installed), for
configurations ONNX's own node tests do not cover: groups, dilations, 3-D windows,
broadcasting, constant parameters, keepdims, empty axes, integer types."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from polytc.diagnostics import UnsupportedError

from .onnx_check import compare

OPSET = 18


def _model(op, inputs, attrs, consts=None, n_out=1, opset=OPSET):
    """One node: ``inputs`` is a list of arrays (None for an absent optional input);
    ``consts`` maps input positions to make initialisers."""
    consts = consts or {}
    names, vis, inits, feeds = [], [], [], {}
    for k, x in enumerate(inputs):
        if x is None:
            names.append("")
            continue
        name = f"x{k}"
        names.append(name)
        if k in consts:
            inits.append(numpy_helper.from_array(np.asarray(x), name))
        else:
            vis.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape))
            feeds[name] = x
    outs = [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outs, **attrs)
    graph = helper.make_graph([node], "t", vis,
                              [helper.make_empty_tensor_value_info(o) for o in outs],
                              initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m = onnx.shape_inference.infer_shapes(m)
    for o in m.graph.output:  # shape inference does not know every op (GroupNormalization)
        if not o.type.HasField("tensor_type"):
            o.type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(inputs[0].dtype)
            o.type.tensor_type.shape.dim.extend(
                [onnx.TensorShapeProto.Dimension(dim_value=d) for d in inputs[0].shape])
    return m, feeds


def check(op, inputs, consts=None, n_out=1, rtol=1e-4, atol=1e-5, opset=OPSET, ort=True,
          **attrs):
    """polytc against onnxruntime (``ort=False``: onnx's reference evaluator)."""
    m, feeds = _model(op, inputs, attrs, consts, n_out, opset)
    compare(m, feeds, rtol, atol, ort)


def rnd(*shape, dtype=np.float32, seed=0):
    r = np.random.default_rng(seed + sum(shape))
    if np.dtype(dtype).kind in "iu":
        return r.integers(-5 if np.dtype(dtype).kind == "i" else 0, 9, shape).astype(dtype)
    return r.standard_normal(shape).astype(dtype)


# --- contractions ---------------------------------------------------------------------------
@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)),
                                   ((4,), (4,)), ((2, 1, 3, 4), (5, 4, 6)),
                                   ((1, 3, 4), (2, 4, 5)), ((3, 0), (0, 5)),
                                   ((5,), (2, 3, 5, 4))])
def test_matmul(sa, sb):
    check("MatMul", [rnd(*sa), rnd(*sb)])


def test_matmul_int_and_double():
    check("MatMul", [rnd(3, 4, dtype=np.int32), rnd(4, 5, dtype=np.int32)])
    check("MatMul", [rnd(3, 4, dtype=np.float64), rnd(4, 5, dtype=np.float64)], consts={1: 1})


@pytest.mark.parametrize("ta,tb,alpha,beta,cshape", [
    (0, 0, 1.0, 1.0, None), (1, 0, 0.5, 1.0, (5,)), (0, 1, 1.0, 2.0, (3, 1)),
    (1, 1, -1.5, 0.25, (3, 5)), (0, 0, 1.0, 0.0, (1,)), (0, 1, 2.0, 1.0, ())])
def test_gemm(ta, tb, alpha, beta, cshape):
    a = rnd(*((4, 3) if ta else (3, 4)))
    b = rnd(*((5, 4) if tb else (4, 5)))
    ins = [a, b] + ([rnd(*cshape)] if cshape is not None else [])
    check("Gemm", ins, consts={1: 1}, transA=ta, transB=tb, alpha=alpha, beta=beta)


def test_transposed_operands():  # enough reuse that B is copied into B^T first
    check("Gemm", [rnd(70, 16), rnd(24, 16), rnd(24)], consts={1: 1, 2: 1}, transB=1)
    check("MatMul", [rnd(2, 70, 8), rnd(1, 8, 24)])
    check("Einsum", [rnd(2, 70, 8), rnd(2, 24, 8)], equation="bqd,bkd->bqk")


@pytest.mark.parametrize("eq,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("ij,jk", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("...ij,...jk->...ik", [(2, 1, 3, 4), (1, 5, 4, 6)]),
    ("ii->i", [(4, 4)]), ("ii", [(4, 4)]), ("i,i", [(5,), (5,)]), ("i,j->ij", [(3,), (4,)]),
    ("ijk->kji", [(2, 3, 4)]), ("ij->", [(3, 4)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]), ("...i,...i->...", [(2, 3, 4), (2, 3, 4)]),
    ("Ab,bC", [(2, 3), (3, 4)])])
def test_einsum(eq, shapes):
    # onnxruntime rejects '...' of different ranks and upper-case labels
    check("Einsum", [rnd(*s, seed=k) for k, s in enumerate(shapes)], equation=eq,
          ort=eq.islower() and "...ij" not in eq)


# --- convolution ----------------------------------------------------------------------------
@pytest.mark.parametrize("xs,ws,attrs", [
    ((1, 3, 9, 9), (4, 3, 3, 3), {}),
    ((2, 3, 9, 8), (4, 3, 3, 2), {"pads": [1, 0, 2, 1], "strides": [2, 1]}),
    ((1, 4, 10, 10), (6, 2, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    ((1, 4, 10, 10), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((1, 4, 10, 10), (8, 1, 3, 3), {"group": 4, "dilations": [2, 2]}),
    ((1, 2, 11, 11), (3, 2, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 2, 11, 11), (3, 2, 4, 4), {"auto_pad": "SAME_LOWER", "strides": [2, 3]}),
    ((1, 2, 11, 11), (3, 2, 3, 3), {"auto_pad": "VALID", "strides": [2, 2]}),
    ((2, 3, 12), (5, 3, 3), {"pads": [2, 1], "dilations": [2]}),
    ((1, 2, 5, 6, 7), (3, 2, 3, 3, 3), {"pads": [1, 1, 1, 0, 1, 2], "strides": [1, 2, 2]}),
    ((1, 8, 7, 7), (8, 2, 1, 1), {"group": 4}),
    # depthwise and strided: the window reads the input's phases (nn._split_read)
    ((2, 6, 11, 13), (6, 1, 3, 3), {"group": 6, "strides": [2, 2]}),
    ((1, 4, 16, 16), (4, 1, 3, 3), {"group": 4, "strides": [2, 2], "pads": [0, 0, 1, 1]}),
    ((1, 3, 10), (3, 1, 5), {"group": 3, "strides": [3], "pads": [2, 2]}),
    ((1, 4, 12, 12), (4, 1, 3, 3), {"group": 4, "strides": [1, 2], "pads": [1, 1, 1, 1]}),
])
@pytest.mark.parametrize("bias", [False, True])
def test_conv(xs, ws, attrs, bias):
    ins = [rnd(*xs), rnd(*ws)] + ([rnd(ws[0])] if bias else [])
    check("Conv", ins, consts={1: 1, 2: 1}, **attrs)


def test_depthwise_strided_conv_reads_phases():
    """A strided depthwise convolution of a small plane reads the padded input split
    into its phases (unit-stride windows: the micro-kernel's explicit vectors), a large
    plane reads it as it is."""
    import polytc

    def texts(size):
        m, feeds = _model("Conv", [rnd(1, 4, size, size), rnd(4, 1, 3, 3)],
                          {"group": 4, "strides": [2, 2], "pads": [1, 1, 1, 1]}, {1: 1})
        sess = polytc.onnx.compile(m.SerializeToString())
        return "\n".join(sess.plan({"x0": (1, 4, size, size)}).texts.values())

    assert "k1 % 2" in texts(16) and "k1 % 2" not in texts(120)


def test_small_padded_planes_filled_then_copied():
    """A max pool's padded copy of a plane in L1 is a fill, then the input copied into
    its part (two statements, no select); a larger plane keeps the select."""
    import polytc

    def text(size):
        m, feeds = _model("MaxPool", [rnd(1, 2, size, size)],
                          {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]})
        sess = polytc.onnx.compile(m.SerializeToString())
        return "\n".join(sess.plan({"x0": (1, 2, size, size)}).texts.values())

    small, large = text(16), text(120)
    assert "i2 in 1:17, i3 in 1:17" in small and "?" not in small
    assert "?" in large


def test_conv_non_constant_weights():
    check("Conv", [rnd(1, 3, 6, 6), rnd(2, 3, 3, 3), rnd(2)], pads=[1, 1, 1, 1])


# --- pooling --------------------------------------------------------------------------------
_POOLS = [
    ((1, 2, 9, 9), {"kernel_shape": [3, 3]}),
    ((1, 2, 9, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 2, 10, 9), {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 10, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 1],
                     "ceil_mode": 1}),
    ((1, 2, 9, 9), {"kernel_shape": [2, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 2, 9, 9), {"kernel_shape": [3, 3], "auto_pad": "SAME_LOWER"}),
    ((2, 3, 11), {"kernel_shape": [3], "strides": [2], "pads": [1, 2]}),
    ((1, 1, 5, 6, 7), {"kernel_shape": [2, 2, 3], "strides": [1, 2, 2],
                       "pads": [0, 1, 1, 1, 0, 1]}),
]


@pytest.mark.parametrize("xs,attrs", _POOLS + [
    ((1, 2, 9, 9), {"kernel_shape": [3, 3], "dilations": [2, 2], "pads": [1, 1, 1, 1]})])
def test_maxpool(xs, attrs):
    check("MaxPool", [rnd(*xs)], **attrs)


@pytest.mark.parametrize("xs,attrs", _POOLS)
@pytest.mark.parametrize("include", [0, 1])
def test_averagepool(xs, attrs, include):
    check("AveragePool", [rnd(*xs)], count_include_pad=include, **attrs)


def test_averagepool_divisor_is_a_formula_not_a_reduction():
    """The count of window positions inside the input, per output position, in closed
    form: as a second reduction it sent isl's fusing scheduler to its 8 s deadline."""
    from polytc import onnx as ponnx

    m, _ = _model("AveragePool", [rnd(1, 2, 9, 9)],
                  {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, None, 1, OPSET)
    (plan,) = ponnx.compile(m)._plans.values()
    (text,) = plan.texts.values()
    assert text.count("+=!") == 1 and "min(9, i3 - 1 + 3) - max(0, i3 - 1)" in text


def test_strided_maxpool_reads_a_padded_copy_in_rows():
    """A padded 3x3/2 MaxPool reads a copy padded with -inf (no guard per read: filled,
    then the plane copied into its part), so
    the tiler runs the row of results as a vector loop around the spelt-out window (a
    ``window`` decision)."""
    from polytc import onnx as ponnx

    x = rnd(1, 4, 35, 37)
    m, feeds = _model("MaxPool", [x], {"kernel_shape": [3, 3], "strides": [2, 2],
                                       "pads": [1, 1, 1, 1]}, None, 1, OPSET)
    (plan,) = ponnx.compile(m)._plans.values()
    (text,) = plan.texts.values()
    copy, window = text.split("max=!")
    assert "i2 in 1:36, i3 in 1:38" in copy and "?" not in window  # (filled, copied)
    (ck,) = plan.kernels.values()
    assert "window " in ck.stages["tiling"]
    compare(m, feeds, 1e-6, 1e-6, True)


@pytest.mark.parametrize("stride", [2, 3])
def test_strided_pooling_of_a_small_plane_reads_split_phases(stride):
    """On a plane that fits L1, the padded copy's last axis is split into ``stride``
    phases, so every window offset reads its row of results unit-stride."""
    from polytc import onnx as ponnx

    x = rnd(2, 3, 15, 17)
    m, feeds = _model("AveragePool", [x], {"kernel_shape": [3, 3],
                                           "strides": [stride, stride],
                                           "pads": [1, 1, 1, 1]}, None, 1, OPSET)
    (plan,) = ponnx.compile(m)._plans.values()
    (text,) = plan.texts.values()
    assert f"k1 % {stride}, i3 + k1 / {stride})" in text
    compare(m, feeds, 1e-5, 1e-5, True)


@pytest.mark.parametrize("shape,attrs", [
    ((2, 3, 15, 17), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((2, 3, 15, 17), {"kernel_shape": [3, 3], "strides": [3, 3], "pads": [1, 1, 1, 1]}),
    ((1, 5, 27, 27), {"kernel_shape": [3, 3], "strides": [2, 2]}),
    ((1, 4, 28, 28), {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1,
                      "pads": [0, 0, 1, 1]}),
    ((1, 3, 13, 14), {"kernel_shape": [3, 2], "strides": [2, 2], "dilations": [1, 2],
                      "pads": [1, 0, 1, 1]}),
    ((2, 3, 29), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
])
def test_small_max_pooling_computes_rows_of_whole_vectors(shape, attrs, monkeypatch):
    """A max pooling whose output rows end in a partial vector, over a padded copy of a
    small plane, computes its rows as whole vectors over a copy padded as far as they
    read, then cuts the result from them: the same values as the rows computed as they
    are, NaN (propagated) and -inf included."""
    from polytc import onnx as ponnx
    from polytc.graph.ops import pool
    from polytc.machine import host

    x = rnd(*shape)
    x.flat[::7] = -np.inf
    m, feeds = _model("MaxPool", [x], attrs, None, 1, OPSET)
    (plan,) = ponnx.compile(m)._plans.values()
    (text,) = plan.texts.values()
    window = next(line for line in text.splitlines() if "max=!" in line)
    (y,) = compare(m, feeds, 0, 0, True)
    lanes = host().lanes(4)
    wide = -(-y.shape[-1] // lanes) * lanes
    assert f"i{len(shape) - 1} in 0:{wide}" in window and "?" not in window
    x.flat[4] = np.nan  # (read by every window geometry above)
    new = ponnx.compile(m).run(None, feeds)[0]
    monkeypatch.setattr(pool, "_lane_rounded", lambda x, geo: None)
    np.testing.assert_array_equal(new, ponnx.compile(m).run(None, feeds)[0])
    assert np.isnan(new).any()


@pytest.mark.parametrize("include", [0, 1])
def test_dilated_averagepool(include):  # the divisor as a reduction, not in closed form
    check("AveragePool", [rnd(1, 2, 9, 9)], count_include_pad=include, opset=19,
          ort=False, kernel_shape=[3, 3], dilations=[2, 2], pads=[1, 1, 1, 1])


@pytest.mark.parametrize("xs,attrs", _POOLS[:3])
@pytest.mark.parametrize("p", [1, 2, 3])
def test_lppool(xs, attrs, p):
    check("LpPool", [rnd(*xs)], p=p, **attrs)


@pytest.mark.parametrize("order", [0, 1])
def test_maxpool_indices(order):
    check("MaxPool", [rnd(2, 3, 7, 6)], n_out=2, kernel_shape=[3, 2], strides=[2, 2],
          pads=[1, 0, 1, 1], storage_order=order)


def test_maxpool_int8_and_global():
    check("MaxPool", [rnd(1, 2, 6, 6, dtype=np.int8)], kernel_shape=[2, 2], pads=[1, 1, 1, 1])
    check("GlobalMaxPool", [rnd(2, 3, 4, 5)])
    check("GlobalAveragePool", [rnd(2, 3, 4, 5, 2)])
    check("GlobalAveragePool", [rnd(2, 3, 7)])
    check("GlobalLpPool", [rnd(2, 3, 4, 5)], p=3)


# --- reductions -----------------------------------------------------------------------------
_REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
           "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]


@pytest.mark.parametrize("op", _REDUCE)
@pytest.mark.parametrize("axes,keep", [([1], 1), ([0, 2], 0), ([-1], 1), (None, 0),
                                       (None, 1)])
def test_reduce(op, axes, keep):
    x = rnd(3, 4, 5)
    if op in ("ReduceLogSum", "ReduceProd"):
        x = np.abs(x) + 0.5
    ins = [x] + ([np.array(axes, np.int64)] if axes is not None else [])
    check(op, ins, consts={1: 1}, keepdims=keep)


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax", "ReduceSum"])
def test_reduce_attribute_axes(op):  # opset 13: axes is an attribute (but ReduceSum's)
    if op == "ReduceSum":
        check(op, [rnd(3, 4, 5), np.array([1], np.int64)], consts={1: 1}, opset=13)
    else:
        check(op, [rnd(3, 4, 5)], axes=[0, 2], keepdims=0, opset=13)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
                                "ReduceL1", "ReduceSumSquare", "ReduceMean"])
def test_reduce_int(op):
    check(op, [rnd(3, 4, 5, dtype=np.int64), np.array([1], np.int64)], consts={1: 1})
    check(op, [rnd(3, 4, dtype=np.int32), np.array([0], np.int64)], consts={1: 1},
          keepdims=0)


def test_reduce_mean_narrow_int():  # a sum that wraps, and a count past int8's range
    from onnx.reference import ReferenceEvaluator

    from polytc import onnx as ponnx

    x = np.random.default_rng(0).integers(-128, 128, (3, 300)).astype(np.int8)
    m, feeds = _model("ReduceMean", [x, np.array([1], np.int64)], {}, consts={1: 1})
    np.testing.assert_array_equal(ponnx.compile(m).run(None, feeds)[0],
                                  ReferenceEvaluator(m).run(None, feeds)[0])


def test_reduce_noop():
    check("ReduceSum", [rnd(3, 4), np.array([], np.int64)], consts={1: 1},
          noop_with_empty_axes=1)


def test_reduce_logsumexp_large():
    x = rnd(3, 4) * 100
    check("ReduceLogSumExp", [x, np.array([1], np.int64)], consts={1: 1})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis,keep,last", [(0, 1, 0), (1, 0, 1), (-1, 1, 1), (2, 0, 0)])
def test_argminmax(op, axis, keep, last):
    x = rnd(3, 4, 5, dtype=np.int32)  # ties
    check(op, [x], axis=axis, keepdims=keep, select_last_index=last)
    check(op, [rnd(3, 4, 5)], axis=axis, keepdims=keep, select_last_index=last)


# --- softmax and normalisations -------------------------------------------------------------
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax(op, axis):
    x = rnd(3, 4, 5) * 30
    check(op, [x], axis=axis)
    check(op, [x.astype(np.float64)], axis=axis, ort=op != "Hardmax")


def test_hardmax_ties():
    check("Hardmax", [np.array([[1, 3, 3, 0], [2, 2, 2, 2]], np.float32)])


@pytest.mark.parametrize("axis", [0, 1, -1, -2])
@pytest.mark.parametrize("bias", [False, True])
def test_layernorm(axis, bias):
    x = rnd(2, 3, 4, 5)
    norm = x.shape[axis % 4:]
    ins = [x, rnd(*norm, seed=1)] + ([rnd(*norm, seed=2)] if bias else [None])
    check("LayerNormalization", ins, n_out=3, axis=axis, epsilon=1e-3)


def test_layernorm_broadcast_scale():
    check("LayerNormalization", [rnd(2, 3, 4), rnd(4, seed=1), rnd(1, seed=2)], consts={1: 1},
          axis=1)


def test_instancenorm():
    check("InstanceNormalization", [rnd(2, 3, 4, 5), rnd(3, seed=1), rnd(3, seed=2)],
          epsilon=1e-3)
    check("InstanceNormalization", [rnd(2, 3, 7), rnd(3, seed=1), rnd(3, seed=2)],
          consts={1: 1, 2: 1})


@pytest.mark.parametrize("groups", [1, 2, 6])
def test_groupnorm(groups):
    check("GroupNormalization", [rnd(2, 6, 4, 3), rnd(6, seed=1), rnd(6, seed=2)],
          num_groups=groups, opset=21)


@pytest.mark.parametrize("constant", [False, True])
def test_batchnorm(constant):
    x = rnd(2, 3, 4, 5)
    ins = [x, rnd(3, seed=1), rnd(3, seed=2), rnd(3, seed=3), np.abs(rnd(3, seed=4)) + 0.1]
    check("BatchNormalization", ins, consts={k: 1 for k in range(1, 5)} if constant else {},
          epsilon=1e-3)
    check("BatchNormalization", [rnd(2, 3)] + ins[1:], epsilon=1e-3)


def test_batchnorm_training():
    """Training mode against onnx's reference (onnxruntime's CPU provider has none)."""
    from onnx.reference import ReferenceEvaluator

    from polytc import onnx as ponnx

    x = rnd(2, 3, 4, 5)
    ins = [x, rnd(3, seed=1), rnd(3, seed=2), rnd(3, seed=3), np.abs(rnd(3, seed=4)) + 0.1]
    m, feeds = _model("BatchNormalization", ins, {"training_mode": 1, "momentum": 0.8},
                      n_out=3)
    want = ReferenceEvaluator(m).run(None, feeds)
    got = ponnx.compile(m).run(None, feeds)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


# --- what is refused ------------------------------------------------------------------------
def test_unsupported_is_said():
    from polytc import onnx as ponnx

    m, feeds = _model("ReduceL2", [rnd(3, 4, dtype=np.int32), np.array([1], np.int64)], {},
                      consts={1: 1})
    with pytest.raises(UnsupportedError):
        ponnx.compile(m).run(None, feeds)


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int32, np.uint64, np.int64])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift(dtype, direction):
    """Shifts as integer arithmetic, broadcast, against onnx's reference: the extremes of
    the type, shifts of 0, 1 and the width less one (shifts past the width and negative
    ones: onnx's node tests, in test_onnx_backend.py)."""
    bits = 8 * np.dtype(dtype).itemsize
    info = np.iinfo(dtype)
    x = np.array([[0, 1, 5, info.max, info.min, 37]], dtype).repeat(3, 0)
    y = np.array([0, 1, bits - 1], dtype).reshape(3, 1)
    check("BitShift", [x, y], opset=11 if info.min == 0 else 20, ort=False,
          direction=direction)


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.int64, np.uint64])
@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot"])
def test_bitwise(op, dtype):
    """Bit by bit, as arithmetic: negative values (two's complement), the type's
    extremes, broadcasting."""
    info = np.iinfo(dtype)
    x = np.array([[0, 1, -1 if info.min else 7, info.max, info.min, 37]], dtype).repeat(2, 0)
    y = np.array([[info.max], [info.min + 5]], dtype)
    check(op, [x] if op == "BitwiseNot" else [x, y], opset=18, ort=False)
