"""Control flow written out as the graph's own nodes (graph/control.py): If on a
constant condition, Loop with a constant trip count, Scan over an axis of known extent,
each against onnxruntime; what is decided at run time runs in stages (staged.py)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from polytc import onnx as ponnx
from polytc.diagnostics import UnsupportedError

from .test_onnx_movement_ops import _model, run_model

F32 = onnx.TensorProto.FLOAT
vi = helper.make_tensor_value_info


def _rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _if_model(cond_const: bool):
    x = _rnd(3, 4)
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", onnx.TensorProto.FLOAT,
                                                            [3, 4])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", onnx.TensorProto.FLOAT,
                                                             [3, 4])])
    n = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)
    feeds = {"x": x} if cond_const else {"x": x, "c": np.array(False)}
    consts = {"c": np.array(False)} if cond_const else {}
    return _model([n], feeds, ["y"], consts=consts, opset=18), feeds


def test_if_with_a_constant_condition_is_inlined():
    m, feeds = _if_model(True)
    run_model(m, feeds)
    g = ponnx.compile(m).graph
    assert [n.op for n in g.nodes] == ["Neg"]


def test_if_with_a_run_time_condition_runs_in_stages():
    """The condition fed at run time: the session compiles the branch of each value it
    meets (graph/staged.py; more in tests/test_staged.py)."""
    m, feeds = _if_model(False)
    for c in (False, True):
        run_model(m, {**feeds, "c": np.array(c)})


def _loop_model(trips, data_cond=False):
    """y = x, then trips times: y = y * 2 + x (scan output: each y); ``data_cond``: the
    body's condition is computed from the data (an early exit)."""
    cond_out = helper.make_node("Identity", ["cond_in"], ["cond_out"]) if not data_cond \
        else helper.make_node("Greater", ["s", "lim"], ["cond_out"])
    body = helper.make_graph(
        [helper.make_node("Mul", ["y_in", "two"], ["d"]),
         helper.make_node("Add", ["d", "x"], ["y_out"]),
         helper.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0),
         cond_out, helper.make_node("Identity", ["y_out"], ["scan"])], "body",
        [vi("i", onnx.TensorProto.INT64, []), vi("cond_in", onnx.TensorProto.BOOL, []),
         vi("y_in", F32, [3])],
        [vi("cond_out", onnx.TensorProto.BOOL, []), vi("y_out", F32, [3]),
         vi("scan", F32, [3])],
        [onnx.numpy_helper.from_array(np.float32(2), "two"),
         onnx.numpy_helper.from_array(np.float32(100), "lim")])
    n = helper.make_node("Loop", ["n", "", "x"], ["y", "ys"], body=body)
    m = helper.make_model(helper.make_graph(
        [n], "loop", [vi("x", F32, [3])], [vi("y", F32, [3]), vi("ys", F32, [trips, 3])],
        [onnx.numpy_helper.from_array(np.array(trips, np.int64), "n")]),
        opset_imports=[helper.make_opsetid("", 18)])
    return m, {"x": _rnd(3)}


def test_loop_with_a_constant_trip_count_is_unrolled():
    m, feeds = _loop_model(4)
    run_model(m, feeds)
    g = ponnx.compile(m).graph
    assert all(n.op != "Loop" for n in g.nodes)


def test_loop_that_may_exit_early_is_refused_by_name():
    m, _ = _loop_model(4, data_cond=True)
    with pytest.raises(UnsupportedError, match=r"does not support: Loop \(1x: Loop_0\)"):
        ponnx.compile(m)


@pytest.mark.parametrize("reverse", [0, 1])
def test_scan_is_unrolled(reverse):
    """A running sum over the rows of x (forwards or backwards) and each partial sum."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "row"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["each"])], "body",
        [vi("acc_in", F32, [4]), vi("row", F32, [4])],
        [vi("acc_out", F32, [4]), vi("each", F32, [4])])
    n = helper.make_node("Scan", ["acc0", "x"], ["acc", "sums"], body=body,
                         num_scan_inputs=1, scan_input_directions=[reverse])
    x, acc0 = _rnd(5, 4), _rnd(4, seed=1)
    m = helper.make_model(helper.make_graph(
        [n], "scan", [vi("acc0", F32, [4]), vi("x", F32, [5, 4])],
        [vi("acc", F32, [4]), vi("sums", F32, [5, 4])]),
        opset_imports=[helper.make_opsetid("", 18)])
    run_model(m, {"acc0": acc0, "x": x})
