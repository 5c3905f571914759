"""The lowerings of ``polytc/graph/ops/movement.py`` and ``rnn.py``, one node (or a short
chain) at a time, against onnxruntime (or onnx's reference evaluator when onnxruntime is
not installed), for configurations ONNX's own node tests do not cover, or cover only
with inputs that polytc needs at compile time (shapes, pads, starts: initialisers here):
negative steps and clamping, repeated reflection, many-input Concat, outputs that become
temporaries of a fused program, sequence_lens, layouts and activations of the RNNs."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper


from .onnx_check import compare

OPSET = 18
I64 = np.int64


def _vi(name, x):
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(x.dtype),
                                         x.shape)


def _model(nodes, inputs, outputs, consts=(), opset=OPSET):
    """``inputs``: name -> array fed at run time; ``consts``: name -> initialiser."""
    graph = helper.make_graph(nodes, "t", [_vi(n, x) for n, x in inputs.items()],
                              [helper.make_empty_tensor_value_info(o) for o in outputs],
                              initializer=[numpy_helper.from_array(np.asarray(v), k)
                                           for k, v in dict(consts).items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return onnx.shape_inference.infer_shapes(m)


def run_model(m, feeds, rtol=1e-4, atol=1e-5, ort=True):
    return compare(m, feeds, rtol, atol, ort)


def check(op, inputs, consts=None, n_out=1, opset=OPSET, ort=True, **attrs):
    """One node: ``inputs`` a list of arrays (None: an absent optional input), those at
    the positions ``consts`` as initialisers."""
    consts = consts or ()
    names, feeds, inits = [], {}, {}
    for k, x in enumerate(inputs):
        if x is None:
            names.append("")
            continue
        names.append(f"x{k}")
        (inits if k in consts else feeds)[f"x{k}"] = np.asarray(x)
    outs = [f"y{k}" for k in range(n_out)]
    m = _model([helper.make_node(op, names, outs, **attrs)], feeds, outs, inits, opset)
    return run_model(m, feeds, ort=ort)


def rnd(*shape, dtype=np.float32, seed=0):
    r = np.random.default_rng(seed + sum(shape))
    if np.dtype(dtype).kind in "iu":
        return r.integers(-5 if np.dtype(dtype).kind == "i" else 0, 9, shape).astype(dtype)
    return r.standard_normal(shape).astype(dtype)


# --- views ----------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,new,allowzero", [
    ((2, 3, 4), [4, 0, -1], 0), ((2, 3, 4), [-1], 0), ((2, 3, 4), [0, 0, 2, 2], 0),
    ((0, 3), [3, 0], 1), ((2, 3, 4), [6, -1, 1], 0)])
def test_reshape(shape, new, allowzero):
    x = rnd(*shape) if 0 not in shape else np.zeros(shape, np.float32)
    check("Reshape", [x, np.array(new, I64)], consts=(1,), allowzero=allowzero)


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
def test_flatten(axis):
    check("Flatten", [rnd(2, 3, 4)], axis=axis)


def test_squeeze_unsqueeze():
    x = rnd(1, 3, 1, 4)
    check("Squeeze", [x])
    check("Squeeze", [x, np.array([0, -2], I64)], consts=(1,))
    check("Unsqueeze", [rnd(3, 4), np.array([-1, 0, 3], I64)], consts=(1,))
    check("Unsqueeze", [rnd(3, 4)], opset=11, axes=[1, 3])


def test_identity_dropout():
    check("Identity", [rnd(3, 4, dtype=np.int32)])
    check("Dropout", [rnd(3, 4)], n_out=2)
    check("Dropout", [rnd(3, 4), np.array(0.3, np.float32), np.array(False)], consts=(1, 2),
          n_out=2)


# --- transpose, concat, split, slice ---------------------------------------------------------
@pytest.mark.parametrize("perm", [None, [0, 2, 1, 3], [3, 1, 0, 2], [1, 0, 2, 3]])
def test_transpose(perm):
    x = rnd(2, 1, 3, 4)
    check("Transpose", [x], **({} if perm is None else {"perm": perm}))


@pytest.mark.parametrize("n,axis", [(2, 0), (3, -1), (11, 1)])
def test_concat(n, axis):
    xs = [rnd(2, k + 1, 3, seed=k) if axis == 1 else rnd(2, 3, k + 1, seed=k)
          if axis == -1 else rnd(k + 1, 3, seed=k) for k in range(n)]
    check("Concat", xs, axis=axis)


def test_concat_empty_and_constant():
    check("Concat", [rnd(2, 3), np.zeros((2, 0), np.float32), rnd(2, 1, seed=3)],
          consts=(2,), axis=1)
    check("Concat", [np.zeros((0, 3), np.int64), rnd(2, 3, dtype=np.int64)], axis=0)


def test_concat_into_fused_consumer():
    # the Concat's result is read only inside the group: an untyped temporary
    xs = {f"x{k}": rnd(2, k + 1, seed=k) for k in range(10)}
    nodes = [helper.make_node("Concat", list(xs), ["c"], axis=1),
             helper.make_node("Relu", ["c"], ["y"])]
    run_model(_model(nodes, xs, ["y"]), xs)


@pytest.mark.parametrize("split,opset,n", [
    (None, 13, 3), ([1, 4, 1], 13, 3), (None, 18, 4), ([2, 0, 4], 18, 3)])
def test_split(split, opset, n):
    x = rnd(6, 5) if n == 3 else rnd(7, 5)
    attrs = {"axis": 0}
    ins = [x]
    if split is not None:
        ins.append(np.array(split, I64))
    elif opset >= 18:
        attrs["num_outputs"] = n
    check("Split", ins, consts=(1,), n_out=n, opset=opset, **attrs)


def test_split_into_fused_consumer():
    x = {"x": rnd(6, 4)}
    nodes = [helper.make_node("Split", ["x"], ["a", "b"], axis=0, num_outputs=2),
             helper.make_node("Add", ["a", "b"], ["y"])]
    run_model(_model(nodes, x, ["y"]), x)


BIG = np.iinfo(np.int64).max


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1, 0], [3, 4], None, None), ([-1], [-BIG], [1], [-1]), ([5], [-7], [1], [-2]),
    ([0, -100], [BIG, 100], [0, 1], [2, 3]), ([10], [20], [0], [1]),
    ([2, 1], [0, -1], [-1, -2], [-1, 1]), ([-3], [BIG], [0], [1])])
def test_slice(starts, ends, axes, steps):
    x = rnd(5, 7)
    ins = [x, np.array(starts, I64), np.array(ends, I64)]
    ins.append(None if axes is None else np.array(axes, I64))
    ins.append(None if steps is None else np.array(steps, I64))
    check("Slice", ins, consts=(1, 2, 3, 4))


def test_slice_into_fused_consumer():
    x = {"x": rnd(6, 8)}
    c = {"s": np.array([1, 7], I64), "e": np.array([5, -BIG], I64),
         "a": np.array([0, 1], I64), "st": np.array([2, -3], I64)}
    nodes = [helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["t"]),
             helper.make_node("Neg", ["t"], ["y"])]
    run_model(_model(nodes, x, ["y"], c), x)


# --- gathers ----------------------------------------------------------------------------------
@pytest.mark.parametrize("axis,ishape", [(0, (2, 3)), (1, (4,)), (-1, ()), (2, (2, 2))])
def test_gather(axis, ishape):
    x = rnd(5, 4, 3)
    n = x.shape[axis]
    ind = np.random.default_rng(1).integers(-n, n, ishape).astype(I64)
    check("Gather", [x, ind], axis=axis)
    check("Gather", [x, ind.astype(np.int32)], consts=(1,), axis=axis)


def test_gather_embedding():
    # token ids into an embedding table, the common case
    table = rnd(50, 8)
    ids = np.array([[1, 49, -1, 0], [3, 3, -50, 7]], I64)
    check("Gather", [table, ids], consts=(0,))


def test_gather_elements():
    x = rnd(4, 5)
    ind = np.random.default_rng(2).integers(-4, 4, (3, 5)).astype(I64)
    check("GatherElements", [x, ind], axis=0)
    ind = np.random.default_rng(3).integers(-5, 5, (4, 2)).astype(I64)
    check("GatherElements", [x, ind], axis=1)


# --- expand, tile, pad, trilu, depth/space --------------------------------------------------
def test_expand_tile():
    check("Expand", [rnd(3, 1), np.array([2, 1, 4], I64)], consts=(1,))
    check("Expand", [rnd(3, 1), np.array([3, 1], I64)], consts=(1,))
    check("Tile", [rnd(2, 1, 3), np.array([2, 3, 1], I64)], consts=(1,))
    check("Tile", [rnd(2, 3, dtype=np.int32), np.array([1, 1], I64)], consts=(1,))


@pytest.mark.parametrize("mode,pads", [
    ("constant", [1, 0, 2, 3]), ("constant", [-1, 2, 0, -2]), ("reflect", [2, 3, 1, 3]),
    ("reflect", [7, 0, 9, 1]), ("edge", [3, 1, 0, 4]), ("wrap", [5, 2, 6, 9]),
    ("reflect", [-1, 2, 1, -2]), ("edge", [-2, 1, 3, -1])])
def test_pad(mode, pads):
    x = rnd(5, 6)
    # onnxruntime has no wrap mode and reflects at most once (onnx's reference repeats
    # the reflection, as numpy does, but takes no negative pads)
    ort = mode in ("constant", "edge") or (mode == "reflect" and max(pads) < 5)
    check("Pad", [x, np.array(pads, I64), np.array(1.5, np.float32)], consts=(1, 2),
          ort=ort, opset=19, mode=mode)


def test_pad_runtime_value_and_axes():
    x = rnd(2, 3, 4)
    check("Pad", [x, np.array([1, 2, 0, 1], I64), np.array(-2.0, np.float32),
                  np.array([-1, 0], I64)], consts=(1, 3))
    check("Pad", [rnd(2, 3, dtype=np.int32), np.array([0, 1, 1, 0], I64)], consts=(1,))


@pytest.mark.parametrize("upper,k", [(1, 0), (0, 1), (1, -2), (0, None)])
def test_trilu(upper, k):
    ins = [rnd(2, 4, 5)] + ([] if k is None else [np.array(k, I64)])
    check("Trilu", ins, consts=(1,), upper=upper)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_space(mode):
    check("DepthToSpace", [rnd(2, 12, 3, 2)], blocksize=2, mode=mode)
    check("SpaceToDepth", [rnd(2, 3, 4, 6)], blocksize=2)


def test_runtime_shape_runs_in_stages():
    """The target shape fed at run time: compiled for each value (graph/staged.py)."""
    for s in ([3, 2], [6, 1]):
        x = {"x": rnd(2, 3), "s": np.array(s, I64)}
        run_model(_model([helper.make_node("Reshape", ["x", "s"], ["y"])], x, ["y"]), x)


# --- recurrent layers ---------------------------------------------------------------------
def _rnn_inputs(kind, T=4, B=3, I=5, H=4, D=1, layout=0, bias=True, h0=True, seed=0):
    g = {"LSTM": 4, "GRU": 3, "RNN": 1}[kind]
    X = rnd(*((T, B, I) if layout == 0 else (B, T, I)), seed=seed)
    W = rnd(D, g * H, I, seed=seed + 1) * 0.5
    R = rnd(D, g * H, H, seed=seed + 2) * 0.5
    Bs = rnd(D, 2 * g * H, seed=seed + 3) if bias else None
    hs = (D, B, H) if layout == 0 else (B, D, H)
    H0 = rnd(*hs, seed=seed + 4) if h0 else None
    return X, W, R, Bs, H0


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_rnn(kind, direction, layout):
    D = 2 if direction == "bidirectional" else 1
    H = 4
    X, W, R, B, H0 = _rnn_inputs(kind, D=D, H=H, layout=layout)
    ins = [X, W, R, B, None, H0]
    n_out = 2
    if kind == "LSTM":
        ins += [rnd(*H0.shape, seed=9), rnd(D, 3 * H, seed=10)]
        n_out = 3
    check(kind, ins, consts=(1, 2, 3), n_out=n_out, hidden_size=H, direction=direction,
          layout=layout, ort=layout == 0)  # onnxruntime has no layout 1


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_linear_before_reset(lbr):
    X, W, R, B, H0 = _rnn_inputs("GRU", T=3, B=2, H=6)
    check("GRU", [X, W, R, B, None, H0], n_out=2, hidden_size=6, linear_before_reset=lbr)
    check("GRU", [X, W, R], n_out=2, hidden_size=6, linear_before_reset=lbr)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_rnn_sequence_lens(kind):
    X, W, R, B, H0 = _rnn_inputs(kind, T=5, B=3, D=2)
    lens = np.array([5, 2, 3], np.int32)
    n_out = 3 if kind == "LSTM" else 2
    check(kind, [X, W, R, B, lens, H0], n_out=n_out, hidden_size=4,
          direction="bidirectional")  # lens at run time
    X, W, R, B, H0 = _rnn_inputs(kind, T=5, B=3, D=1)
    check(kind, [X, W, R, B, lens, H0], consts=(4,), n_out=n_out, hidden_size=4,
          direction="reverse")


def test_lstm_only_final_state_used():
    # Y unused: the hidden states live in a temporary of the program
    X, W, R, B, H0 = _rnn_inputs("LSTM", T=6, B=2)
    feeds = {"x": X}
    nodes = [helper.make_node("LSTM", ["x", "w", "r", "b"], ["", "yh"], hidden_size=4),
             helper.make_node("Relu", ["yh"], ["y"])]
    run_model(_model(nodes, feeds, ["y"], {"w": W, "r": R, "b": B}), feeds)


def test_rnn_activations_and_clip():
    X, W, R, B, H0 = _rnn_inputs("RNN", T=3, B=2, D=2)
    check("RNN", [X, W, R, B], consts=(1, 2), n_out=2, hidden_size=4,
          direction="bidirectional", activations=["Relu", "LeakyRelu"],
          activation_alpha=[0.2])
    X, W, R, B, H0 = _rnn_inputs("LSTM", T=3, B=2)
    check("LSTM", [X * 4, W, R, B], n_out=3, hidden_size=4, clip=0.5)
    check("LSTM", [X, W, R, B], n_out=3, hidden_size=4, input_forget=1)
    check("GRU", [X, rnd(1, 12, 5), rnd(1, 12, 4)], n_out=2, hidden_size=4,
          activations=["HardSigmoid", "Softsign"])


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_rnn_sequence_lens_layout1(kind):
    # run-time lengths (all full: onnx's reference evaluator ignores sequence_lens)
    X, W, R, B, H0 = _rnn_inputs(kind, T=4, B=2, D=2, layout=1)
    lens = np.array([4, 4], np.int32)
    check(kind, [X, W, R, B, lens, H0], n_out=3 if kind == "LSTM" else 2, hidden_size=4,
          direction="bidirectional", layout=1, ort=False)
