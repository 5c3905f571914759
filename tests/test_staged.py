"""Models that decide shapes at run time, run in stages (graph/staged.py): values that
decide a shape read from tensor data (a Reshape's shape fed as an input, an If's
condition, a Loop's trip count, Range's bounds) and ops whose outputs' shapes depend on
the data (NonZero, Compress, Unique); each against onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from polytc import onnx as ponnx
from polytc.compiler import pipeline
from polytc.diagnostics import UnsupportedError
from polytc.graph import staged

F32, I64, BOOL = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64, onnx.TensorProto.BOOL
vi = helper.make_tensor_value_info


def _model(nodes, inputs, outputs, consts=(), opset=18):
    g = helper.make_graph(nodes, "m", inputs, outputs,
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in consts])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


class Both:
    """One polytc session and one onnxruntime session of a model, compared run by run."""

    def __init__(self, m):
        self.s = ponnx.compile(m)
        self.r = ort.InferenceSession(m.SerializeToString(),
                                      providers=["CPUExecutionProvider"])

    def __call__(self, **feeds):
        got, want = self.s.run(None, feeds), self.r.run(None, feeds)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype,
                                                               w.dtype)
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        return got


def _rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _no_compile(*a, **k):
    raise AssertionError("a run compiled a group")


def test_nonzero_between_compiled_stages(monkeypatch):
    """The positive entries of x summed through NonZero and GatherND, with outputs from
    every stage (the mask's square before, the indices themselves, the sum after), at
    several batch sizes and data: one prefix and one rest, whose count of nonzeros is
    symbolic once it varied."""
    zero = ("zero", np.float32(0))
    m = _model([helper.make_node("Greater", ["x", "zero"], ["pos"]),
                helper.make_node("NonZero", ["pos"], ["idx"]),
                helper.make_node("Transpose", ["idx"], ["idxT"]),
                helper.make_node("GatherND", ["x", "idxT"], ["vals"]),
                helper.make_node("ReduceSum", ["vals"], ["s"], keepdims=0),
                helper.make_node("Mul", ["x", "x"], ["sq"])],
               [vi("x", F32, ["N", 8])],
               [vi("s", F32, []), vi("sq", F32, ["N", 8]), vi("idx", I64, [2, None])],
               [zero])
    both = Both(m)
    for n, seed in ((3, 0), (5, 1), (3, 2), (7, 3), (4, 4), (6, 5)):
        both(x=_rnd(n, 8, seed=seed))
    (p,) = {id(p): p for p in both.s._plans.values()}.values()
    assert isinstance(p, staged.Staged) and p.host.op == "NonZero"
    assert len(p.rests) == 1  # no value baked: one rest for every count
    monkeypatch.setattr(pipeline, "run", _no_compile)
    both(x=_rnd(5, 8, seed=9))  # new data, new counts: nothing compiles
    both(x=_rnd(9, 8, seed=10))
    assert "run in stages, as node 'NonZero_1' (NonZero): the shape of its output " \
        "depends on its input's values" in both.s.report()


def test_if_on_a_condition_computed_from_the_data():
    """The branch an If takes decided by the data: the rest compiles once per value of
    the condition, with the branch written out."""
    zero = ("zero", np.float32(0))
    then = helper.make_graph([helper.make_node("Add", ["x", "x"], ["t"])], "then", [],
                             [vi("t", F32, [4])])
    other = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["e"])], "else", [],
                              [vi("e", F32, [4])])
    m = _model([helper.make_node("ReduceSum", ["x"], ["sx"], keepdims=0),
                helper.make_node("Greater", ["sx", "zero"], ["c"]),
                helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
               [vi("x", F32, [4])], [vi("y", F32, [4])], [zero])
    both = Both(m)
    for v in ([1, 2, 3, 4], [-1, -2, -3, 1], [1, 1, 1, 1], [-5, 0, 0, 0]):
        both(x=np.array(v, np.float32))
    (p,) = {id(p): p for p in both.s._plans.values()}.values()
    assert len(p.rests) == 2
    assert [n.op for s in p.rests.values() for n in s.graph.nodes] in (["Add", "Mul"],
                                                                       ["Mul", "Add"])


def test_reshape_to_a_shape_fed_as_an_input():
    m = _model([helper.make_node("Reshape", ["x", "shape"], ["y"]),
                helper.make_node("Relu", ["y"], ["z"])],
               [vi("x", F32, [4, 6]), vi("shape", I64, [2])], [vi("z", F32, [None, None])])
    both = Both(m)
    for shape in ([3, 8], [2, 12], [3, 8], [-1, 4]):
        both(x=_rnd(4, 6), shape=np.array(shape, np.int64))
    (p,) = {id(p): p for p in both.s._plans.values()}.values()
    assert len(p.rests) == 3 and p.prefix is None  # read from the feeds


def test_loop_with_a_trip_count_fed_as_an_input():
    body = helper.make_graph(
        [helper.make_node("Mul", ["y_in", "two"], ["d"]),
         helper.make_node("Add", ["d", "x"], ["y_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [vi("i", I64, []), vi("cond_in", BOOL, []), vi("y_in", F32, [3])],
        [vi("cond_out", BOOL, []), vi("y_out", F32, [3])],
        [numpy_helper.from_array(np.float32(2), "two")])
    m = _model([helper.make_node("Loop", ["n", "", "x"], ["y"], body=body)],
               [vi("x", F32, [3]), vi("n", I64, [])], [vi("y", F32, [3])])
    both = Both(m)
    for trips in (3, 1, 5, 3):
        both(x=_rnd(3), n=np.array(trips, np.int64))


def test_range_and_compress_decided_by_the_data():
    """Range to a limit computed from the data (the count of positive entries) and
    Compress by a mask computed at run time, in one model."""
    zero = ("zero", np.float32(0))
    m = _model([helper.make_node("Greater", ["x", "zero"], ["pos"]),
                helper.make_node("Compress", ["x", "pos"], ["kept"], axis=0),
                helper.make_node("Cast", ["pos"], ["posi"], to=I64),
                helper.make_node("ReduceSum", ["posi"], ["count"], keepdims=0),
                helper.make_node("Range", ["start", "count", "step"], ["r"]),
                helper.make_node("Cast", ["r"], ["rf"], to=F32),
                helper.make_node("Mul", ["rf", "kept"], ["y"])],
               [vi("x", F32, [6])], [vi("y", F32, [None]), vi("kept", F32, [None])],
               [zero, ("start", np.int64(0)), ("step", np.int64(1))])
    both = Both(m)
    for seed in range(4):
        both(x=_rnd(6, seed=seed))


def test_unique_then_nonzero_stage_twice():
    """A data-dependent op in the rest of another: the rest runs in stages itself."""
    m = _model([helper.make_node("Unique", ["x"], ["u"], sorted=1),
                helper.make_node("Neg", ["u"], ["nu"]),
                helper.make_node("NonZero", ["nu"], ["idx"]),
                helper.make_node("Cast", ["idx"], ["y"], to=F32)],
               [vi("x", F32, [8])], [vi("y", F32, [1, None]), vi("nu", F32, [None])])
    both = Both(m)
    for v in ([1, 2, 2, 0, 3, 3, 3, 1], [0, 0, 5, 5, 0, 1, 1, 1], [4, 3, 2, 1, 0, 0, 0, 0]):
        both(x=np.array(v, np.float32))
    (p,) = {id(p): p for p in both.s._plans.values()}.values()
    (rest,) = p.rests.values()
    assert any(isinstance(q, staged.Staged) for q in rest._plans.values())


def test_too_many_values_are_refused(monkeypatch):
    monkeypatch.setattr(staged, "MOST_VALUES", 2)
    m = _model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
               [vi("x", F32, [4, 6]), vi("shape", I64, [2])], [vi("y", F32, [None, None])])
    s = ponnx.compile(m)
    for shape in ([3, 8], [2, 12]):
        s.run(None, {"x": _rnd(4, 6), "shape": np.array(shape, np.int64)})
    with pytest.raises(UnsupportedError, match=r"'shape' took more than 2 sets of values"):
        s.run(None, {"x": _rnd(4, 6), "shape": np.array([6, 4], np.int64)})


def test_export_refuses_a_model_run_in_stages(tmp_path):
    m = _model([helper.make_node("NonZero", ["x"], ["y"])], [vi("x", F32, [5])],
               [vi("y", I64, [1, None])])
    with pytest.raises(UnsupportedError, match=r"decides shapes from its data \(node "
                                               r"'NonZero_0' \(NonZero\): the shape"):
        ponnx.compile(m).export(tmp_path / "out", build=False)


def test_outputs_bound_to_buffers():
    """onnxruntime's IOBinding on a model run in stages: the bound buffer is checked
    against the output's shape once the stages ran, then filled."""
    from polytc.diagnostics import ModelError
    from polytc.onnx import InferenceSession

    m = _model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
               [vi("x", F32, [4, 6]), vi("shape", I64, [2])], [vi("y", F32, [None, None])])
    sess = InferenceSession(m.SerializeToString())
    x = _rnd(4, 6)
    b = sess.io_binding()
    b.bind_cpu_input("x", x)
    b.bind_cpu_input("shape", np.array([3, 8], np.int64))
    buf = np.empty((3, 8), np.float32)
    b.bind_output("y", "cpu", 0, np.float32, buf.shape, buf.ctypes.data)
    sess.run_with_iobinding(b)
    np.testing.assert_array_equal(buf, x.reshape(3, 8))
    b.bind_cpu_input("shape", np.array([2, 12], np.int64))
    with pytest.raises(ModelError, match=r"output 'y' is bound to a float32 \[3, 8\] buffer; "
                                         r"this run's output is float32 \[2, 12\]"):
        sess.run_with_iobinding(b)


def test_a_session_keeps_a_bounded_number_of_plans(monkeypatch):
    from polytc.graph import session as S

    monkeypatch.setattr(S, "MOST_PLANS", 3)
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F32, ["N"])],
               [vi("y", F32, ["N"])])
    s = ponnx.compile(m)
    for n in range(1, 7):
        np.testing.assert_array_equal(s.run(None, {"x": _rnd(n)})[0], np.maximum(_rnd(n), 0))
    assert [k[0][0] for k in s._plans] == [4, 5, 6]
    np.testing.assert_array_equal(s.run(None, {"x": _rnd(2)})[0], np.maximum(_rnd(2), 0))


def test_an_input_returned_by_a_staged_model_is_a_copy():
    m = _model([helper.make_node("NonZero", ["x"], ["i"]),
                helper.make_node("Identity", ["x"], ["y"])],
               [vi("x", F32, [5])], [vi("i", I64, [1, None]), vi("y", F32, [5])])
    x = np.array([0, 1, 0, 2, 3], np.float32)
    i, y = ponnx.compile(m).run(None, {"x": x})
    np.testing.assert_array_equal(i, [[1, 3, 4]])
    assert not np.shares_memory(y, x) and np.array_equal(y, x)
