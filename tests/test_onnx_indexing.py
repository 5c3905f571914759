"""The lowerings of ``polytc/graph/ops/indexing.py`` (GatherND, ScatterND, ScatterElements,
Scatter, TopK, OneHot, EyeLike, ReverseSequence) against onnxruntime: negative indices,
batch_dims, every reduction mode, duplicate indices, ties in TopK, indices fed at run
time and as initialisers, and the errors for bad inputs."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from polytc.diagnostics import KernelRuntimeError, ModelError, UnsupportedError
from polytc.graph.ir import Node
from polytc.graph.ops import Ref, lower

from .test_onnx_movement_ops import _model, check, rnd, run_model

I64 = np.int64


def _single(op, inputs, consts=(), n_out=1, opset=18, **attrs):
    """A one-node model and its run-time feeds (as ``check``, for the error cases)."""
    names, feeds, inits = [], {}, {}
    for k, x in enumerate(inputs):
        names.append(f"x{k}")
        (inits if k in consts else feeds)[f"x{k}"] = np.asarray(x)
    outs = [f"y{k}" for k in range(n_out)]
    m = _model([helper.make_node(op, names, outs, **attrs)], feeds, outs, inits, opset)
    return m, feeds


def _fails(err, match, op, inputs, consts=(), n_out=1, opset=18, **attrs):
    from polytc import onnx as ponnx

    m, feeds = _single(op, inputs, consts, n_out, opset, **attrs)
    with pytest.raises(err, match=match):
        ponnx.compile(m).run(None, feeds)


def _lower_fails(err, match, op, inputs, consts=(), **attrs):
    """Lower one node straight away (ONNX's shape inference rejects these models before
    polytc's lowering would see them); inputs at the positions ``consts`` are known."""
    refs = [Ref(f"x{k}", np.shape(x), np.asarray(x).dtype,
                np.asarray(x) if k in consts else None) for k, x in enumerate(inputs)]
    node = Node(op, "", tuple(f"x{k}" for k in range(len(inputs))), ("y0", "y1"),
                tuple(sorted(attrs.items())))
    with pytest.raises(err, match=match):
        lower(node, refs, lambda v: v or "tmp")


# --- GatherND ---------------------------------------------------------------------------------
@pytest.mark.parametrize("xshape,ishape,b", [
    ((4, 5, 3), (2, 1), 0), ((4, 5, 3), (2, 3, 2), 0), ((4, 5, 3), (2,), 0),
    ((2, 5, 3), (2, 4, 1), 1), ((2, 3, 4, 5), (2, 3, 2), 2)])
def test_gather_nd(xshape, ishape, b):
    x = rnd(*xshape)
    ext = np.array(xshape[b:b + ishape[-1]])
    r = np.random.default_rng(1).integers(0, 1 << 30, ishape)
    ind = (r % (2 * ext) - ext).astype(I64)  # negative ones too
    check("GatherND", [x, ind], batch_dims=b)
    check("GatherND", [x.astype(np.int32), ind], consts=(1,), batch_dims=b)


def test_gather_nd_errors():
    x = rnd(4, 5)
    _fails(ModelError, "out of range", "GatherND", [x, np.array([[1, 5]], I64)], consts=(1,))
    _lower_fails(ModelError, "batch_dims", "GatherND", [x, np.array([[1, 2, 0]], I64)])
    _lower_fails(ModelError, "batch dimensions differ", "GatherND",
                 [x, np.array([[1], [2]], I64)], batch_dims=1)
    _fails(KernelRuntimeError, "out of bounds", "GatherND", [x, np.array([[-5, 1]], I64)])


# --- ScatterND --------------------------------------------------------------------------------
@pytest.mark.parametrize("xshape,ishape", [
    ((6, 3), (2, 1)), ((4, 5, 3), (2, 2, 2)), ((4, 5, 3), (3,)), ((4, 5), (2, 3, 2))])
def test_scatter_nd(xshape, ishape):
    x = rnd(*xshape)
    m = ishape[-1]
    # distinct positions (duplicates are undefined without a reduction), some negative
    n = int(np.prod(ishape[:-1]))
    flat = np.random.default_rng(2).permutation(int(np.prod(xshape[:m])))[:n]
    ind = np.stack(np.unravel_index(flat, xshape[:m]), -1).reshape(ishape)
    ind = np.where(np.arange(ind.size).reshape(ind.shape) % 3 == 1,
                   ind - np.array(xshape[:m]), ind).astype(I64)
    upd = rnd(*ishape[:-1], *xshape[m:], seed=5)
    check("ScatterND", [x, ind, upd])
    check("ScatterND", [x, ind, upd], consts=(1,))


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_scatter_nd_reduction(reduction, dtype):
    x = rnd(5, 4, dtype=dtype)
    ind = np.array([[[1], [-1]], [[1], [3]], [[0], [1]]], I64)  # row 1 hit three times
    upd = rnd(3, 2, 4, dtype=dtype, seed=7)
    check("ScatterND", [x, ind, upd], reduction=reduction)


def test_scatter_nd_kv_cache():
    # a KV-cache update: the new step's keys written at a position fed at run time
    cache = rnd(2, 8, 4)
    pos = np.array([[0, 5], [1, 5]], I64)
    check("ScatterND", [cache, pos, rnd(2, 4, seed=3)])


def test_scatter_nd_out_of_range_is_ignored():
    # a run-time index out of range hits nothing (onnxruntime raises): never a bad write
    from polytc import onnx as ponnx

    x, upd = rnd(4, 3), rnd(2, 3, seed=3)
    ind = np.array([[7], [-2]], I64)
    m, feeds = _single("ScatterND", [x, ind, upd])
    want = x.copy()
    want[2] = upd[1]
    np.testing.assert_array_equal(ponnx.compile(m).run(None, feeds)[0], want)


def test_scatter_nd_errors():
    x = rnd(4, 5)
    _fails(ModelError, "updates", "ScatterND", [x, np.array([[1]], I64), rnd(2, 5)])
    _fails(ModelError, "out of range", "ScatterND",
           [x, np.array([[4]], I64), rnd(1, 5)], consts=(1,))
    _fails(UnsupportedError, "reduction 'add' of bool", "ScatterND",
           [x > 0, np.array([[1]], I64), rnd(1, 5) > 0], reduction="add")


# --- ScatterElements, Scatter ---------------------------------------------------------------
@pytest.mark.parametrize("axis,ishape", [(0, (3, 4)), (1, (4, 2)), (-1, (2, 3)), (0, (2, 2))])
def test_scatter_elements(axis, ishape):
    x = rnd(4, 4)
    n = x.shape[axis]
    # distinct targets along the axis in every column (or row), some negative
    r = np.random.default_rng(4)
    ind = np.stack([r.permutation(n)[:ishape[axis]] - n * (k % 2)
                    for k in range(ishape[1 - axis % 2])], -1 if axis == 0 else 0)
    upd = rnd(*ishape, seed=6)
    check("ScatterElements", [x, ind.astype(I64), upd], axis=axis)
    check("ScatterElements", [x, ind.astype(np.int32), upd], consts=(1,), axis=axis)


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
def test_scatter_elements_reduction(reduction):
    x = rnd(3, 5)
    ind = np.array([[1, -4, 1], [0, 0, 2]], I64)  # duplicates along axis 1
    check("ScatterElements", [x, ind, rnd(2, 3, seed=8)], axis=1, reduction=reduction)
    xi = rnd(3, 5, dtype=np.int64)
    check("ScatterElements", [xi, ind, rnd(2, 3, dtype=np.int64, seed=8)], axis=1,
          reduction=reduction)


def test_scatter_opset10():
    x = rnd(3, 3)
    check("Scatter", [x, np.array([[1, 0, 2]], I64), rnd(1, 3)], opset=10, axis=0)


def test_scatter_elements_errors():
    x = rnd(3, 3)
    _fails(ModelError, "updates", "ScatterElements",
           [x, np.array([[1, 0]], I64), rnd(1, 3)])
    _fails(ModelError, "out of range", "ScatterElements",
           [x, np.array([[3]], I64), rnd(1, 1)], consts=(1,))
    _fails(ModelError, "indices of type float", "ScatterElements",
           [x, np.array([[1.0]], np.float32), rnd(1, 1)])


# --- TopK --------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis,k,largest", [(-1, 3, 1), (0, 2, 0), (1, 5, 1), (1, 0, 1)])
def test_topk(axis, k, largest):
    x = rnd(4, 5, 3)
    check("TopK", [x, np.array([k], I64)], consts=(1,), n_out=2, axis=axis, largest=largest)


@pytest.mark.parametrize("largest", [0, 1])
def test_topk_ties(largest):
    # many equal values: the lower index comes first, as onnxruntime does
    x = np.array([[3, 1, 3, 2, 1, 3, 2], [0, 0, 0, 0, 0, 0, 0]], np.int32)
    check("TopK", [x, np.array([5], I64)], consts=(1,), n_out=2, largest=largest)
    check("TopK", [x.astype(np.float32), np.array([4], I64)], consts=(1,), n_out=2,
          largest=largest)
    # NaN is the largest value (and equal to NaN)
    xn = np.array([[1, np.nan, 3, np.nan, -1, 3], [np.inf, 0, np.nan, -np.inf, 2, 0]],
                  np.float32)
    check("TopK", [xn, np.array([6], I64)], consts=(1,), n_out=2, largest=largest)


def test_topk_opset1():
    check("TopK", [rnd(3, 6)], n_out=2, opset=1, k=2)


def test_topk_errors():
    _lower_fails(ModelError, "K = 6 for an axis of extent 5", "TopK",
                 [rnd(2, 5), np.array([6], I64)], consts=(1,))
    _lower_fails(UnsupportedError, "TopK of bool", "TopK",
                 [rnd(2, 5) > 0, np.array([1], I64)], consts=(1,))
    # K fed at run time: the rest of the model compiles for its value (graph/staged.py)
    check("TopK", [rnd(2, 5), np.array([2], I64)], n_out=2)


# --- OneHot, EyeLike ----------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [-1, 0, 1, -2])
def test_one_hot(axis):
    ind = np.array([[0, -1, 4], [7, -6, 2]], I64)  # out of range: 7, -6 (all 'off')
    values = np.array([-2.0, 5.0], np.float32)
    check("OneHot", [ind, np.array(5, I64), values], consts=(1,), axis=axis)
    fi = np.array([[0.5, -1.5, 3.9], [2.0, -4.2, 9.0]], np.float32)  # truncated
    check("OneHot", [fi, np.array([5.0], np.float32), values], consts=(1, 2), axis=axis)


def test_one_hot_errors():
    check("OneHot", [np.array([1], I64), np.array(3, I64), np.array([0, 1], I64)])  # staged
    _lower_fails(ModelError, "values must hold two", "OneHot",
                 [np.array([1], I64), np.array(3, I64), np.array([0, 1, 2], I64)], consts=(1,))
    _lower_fails(ModelError, "depth", "OneHot",
                 [np.array([1], I64), np.array(0, I64), np.array([0, 1], I64)], consts=(1,))


@pytest.mark.parametrize("shape,k,dtype", [
    ((3, 3), 0, None), ((3, 5), 2, TensorProto.INT32), ((4, 2), -1, TensorProto.DOUBLE),
    ((2, 3), 7, None)])
def test_eye_like(shape, k, dtype):
    attrs = {"k": k} if dtype is None else {"k": k, "dtype": dtype}
    check("EyeLike", [rnd(*shape)], **attrs)


def test_eye_like_errors():
    _lower_fails(ModelError, "rank 2", "EyeLike", [rnd(2, 2, 2)])


# --- ReverseSequence ----------------------------------------------------------------------------
@pytest.mark.parametrize("batch_axis,time_axis,shape", [(1, 0, (5, 3, 2)), (0, 1, (3, 5))])
def test_reverse_sequence(batch_axis, time_axis, shape):
    x = rnd(*shape)
    lens = np.array([5, 1, 3], I64)
    check("ReverseSequence", [x, lens], batch_axis=batch_axis, time_axis=time_axis)
    check("ReverseSequence", [x, lens], consts=(1,), batch_axis=batch_axis,
          time_axis=time_axis)


def test_reverse_sequence_errors():
    x = rnd(4, 3)
    _fails(KernelRuntimeError, "out of bounds", "ReverseSequence",
           [x, np.array([5, 1, 2], I64)])  # a length beyond the time axis
    _fails(ModelError, "sequence_lens", "ReverseSequence",
           [x, np.array([5, 1, 2], I64)], consts=(1,))
    _fails(ModelError, "must be 0 and 1", "ReverseSequence",
           [x, np.array([1, 1, 2], I64)], batch_axis=1, time_axis=1)


def test_scatter_into_consumer():
    # ScatterND's output feeding an elementwise op: the scatter's output becomes a
    # temporary of a fused program
    x, upd = rnd(4, 3), rnd(2, 3, seed=9)
    feeds = {"x": x, "u": upd}
    nodes = [helper.make_node("ScatterND", ["x", "i", "u"], ["t"]),
             helper.make_node("Relu", ["t"], ["y"])]
    run_model(_model(nodes, feeds, ["y"], {"i": np.array([[2], [-4]], I64)}), feeds)


@pytest.mark.parametrize("mode,writes", [("linear", [0, 3]), ("circular", [5, 7])])
def test_tensor_scatter(mode, writes):
    """A KV-cache update (opset 24): each sample's update written at its index, wrapping
    around the cache's length when circular, against onnx's reference."""
    past, upd = rnd(2, 3, 6, 4), rnd(2, 3, 2, 4, seed=1)
    w = np.array(writes, I64)
    n = helper.make_node("TensorScatter", ["p", "u", "w"], ["y"], mode=mode)
    m = _model([n], {"p": past, "u": upd, "w": w}, ["y"], opset=24)
    run_model(m, {"p": past, "u": upd, "w": w}, ort=False)
