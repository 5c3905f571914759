"""The model's native entry point (``polytc.graph.native``): one C function runs every
group of a plan; it must give exactly what the Python executor gives."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

import polytc
import polytc.onnx
from polytc.graph import examples as ex
from polytc.graph.native import fill_word
from polytc.runtime.executor import CALL, FILL, executor
from polytc.runtime.ffi import ffi

F = np.float32

MODELS = {
    "mlp": lambda: ex.mlp(3, (20, 16, 5)),
    "small_cnn": lambda: ex.small_cnn(1, 16),
    "transformer_layer": lambda: ex.transformer_layer(1, 8, 16, 2, 32),
    "lstm": lambda: ex.lstm_model(3, 2, 4, 8),
}


def plan_of(sess):
    (plan,) = sess._plans.values()
    return plan


@pytest.mark.parametrize("name", sorted(MODELS))
def test_native_run_equals_the_python_executor(name):
    m = MODELS[name]()
    feeds = ex.example_inputs(m, seed=1)
    native = polytc.onnx.compile(m)
    python = polytc.onnx.compile(m, native=False)
    assert plan_of(native).driver is not None and plan_of(python).driver is None
    want = python.run(None, feeds)
    first = native.run(None, feeds)
    keep = [a.copy() for a in first]
    feeds2 = {k: (v * 2 if v.dtype.kind == "f" else v) for k, v in feeds.items()}
    second = native.run(None, feeds2)
    for a, b, k in zip(first, want, keep):
        np.testing.assert_array_equal(a, b)  # the same kernels, called the same way
        np.testing.assert_array_equal(a, k)  # a later run leaves earlier results alone
    for a, b in zip(second, python.run(None, feeds2)):
        np.testing.assert_array_equal(a, b)


def test_driver_calls_every_group_in_order():
    plan = plan_of(polytc.onnx.compile(MODELS["transformer_layer"]()))
    code = plan.driver.code
    groups = [s.name for s in plan.steps if hasattr(s, "stmts")]
    at = [code.index(f"{g}: ") for g in groups]
    assert at == sorted(at) and code.count("fn[") == len(groups)
    calls = [c for c in plan.driver._code[1:].tolist()]
    assert calls.count(CALL) >= len(groups)  # (and numbers that happen to be 0)


def test_profile_times_each_group_inside_the_native_entry_point():
    m = MODELS["transformer_layer"]()
    sess = polytc.onnx.compile(m)
    plan = plan_of(sess)
    feeds = ex.example_inputs(m, seed=0)
    want = sess.run(None, feeds)[0]
    rows = plan.profile(feeds, repeat=3)
    assert [name for name, _, _ in rows] == [s.name for s in plan.steps if hasattr(s, "stmts")]
    assert all(t > 0 for _, _, t in rows)
    # timing took nothing away: the same outputs, and runs still go through the driver
    np.testing.assert_array_equal(sess.run(None, feeds)[0], want)


def _gather_model():
    g = helper.make_graph(
        [helper.make_node("Exp", ["x"], ["e"]), helper.make_node("Gather", ["e", "i"], ["y"])],
        "m", [helper.make_tensor_value_info("x", TP.FLOAT, [4, 3]),
              helper.make_tensor_value_info("i", TP.INT64, [2])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_failing_kernel_names_its_check():
    sess = polytc.onnx.compile(_gather_model(), fuse=False)  # the Gather is the 2nd step
    x = np.ones((4, 3), F)
    np.testing.assert_allclose(sess.run(None, {"x": x, "i": np.array([1, 3])})[0],
                               np.full((2, 3), np.e, F), rtol=1e-6)
    with pytest.raises(polytc.KernelRuntimeError, match="outside 0:4") as e:
        sess.run(None, {"x": x, "i": np.array([1, 7])})
    assert "Gather" in str(e.value) or "v1(k0)" in str(e.value)
    # and the plan still runs afterwards
    assert sess.run(None, {"x": x, "i": np.array([0, 0])})[0].shape == (2, 3)


def test_unaligned_and_read_only_feeds():
    m = ex.mlp(64, (64, 64, 8))
    feeds = ex.example_inputs(m, seed=2)
    (name,) = feeds
    raw = np.zeros(feeds[name].size * 4 + 1, np.uint8)[1:].view(F)  # misaligned by 1 byte
    x = raw.reshape(feeds[name].shape)
    x[...] = feeds[name]
    x.flags.writeable = False
    want = polytc.onnx.compile(m, native=False).run(None, feeds)
    got = polytc.onnx.compile(m).run(None, {name: x})
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("dtype,fill", [(np.float32, -np.inf), (np.float64, np.nan),
                                        (np.int64, -1), (np.int32, 7), (np.float32, 0.0),
                                        (np.uint8, 1), (np.float16, -np.inf)])
@pytest.mark.parametrize("count", [1, 7, 37, 1001])
def test_fill_writes_the_exact_value(dtype, fill, count):
    """The executor's FILL: ``count`` elements of the value, bit-exact, nothing after
    (whole 32-byte stores, then the rest)."""
    a = np.full(count + 1, 5, dtype)
    p = ffi.new("void *[]", [ffi.from_buffer(a)])
    width, word = fill_word(np.dtype(dtype), fill)
    prog = np.array([0, FILL, 0, 0, count, width, word], np.int64)
    step = ffi.new("int *")
    assert executor()(ffi.from_buffer("int64_t[]", prog), len(prog), ffi.NULL, p, step,
                      ffi.NULL) == 0
    want = np.full(count, fill, dtype)
    assert a[:count].tobytes() == want.tobytes() and a[count] == 5


def test_identical_groups_compile_once():
    m = ex.mlp(4, (16, 16, 16, 16, 3))  # two hidden layers of the same shapes
    sess = polytc.onnx.compile(m)
    plan = plan_of(sess)
    g = [s.name for s in plan.steps if hasattr(s, "stmts")]
    assert plan.texts[g[0]] != plan.texts[g[1]]  # different weights and names ...
    assert plan.kernels[g[0]] is plan.kernels[g[1]]  # ... one kernel
    feeds = ex.example_inputs(m, seed=3)
    np.testing.assert_array_equal(sess.run(None, feeds)[0],
                                  polytc.onnx.compile(m, native=False).run(None, feeds)[0])


def test_a_shared_kernel_fault_names_its_own_group():
    g = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["a"]), helper.make_node("Exp", ["a"], ["b"]),
         helper.make_node("Gather", ["b", "j"], ["y"])],
        "m", [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3]),
              helper.make_tensor_value_info("i", TP.INT64, [2]),
              helper.make_tensor_value_info("j", TP.INT64, [2])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x, ok = np.zeros((2, 3), F), np.array([0, 1])
    for native in (True, False):
        sess = polytc.onnx.compile(m, fuse=False, native=native)
        plan = plan_of(sess)
        first, last = [s for s in plan.steps if hasattr(s, "stmts")][::2]
        assert plan.kernels[first.name] is plan.kernels[last.name]
        with pytest.raises(polytc.KernelRuntimeError) as e:
            sess.run(None, {"x": x, "i": ok, "j": np.array([0, 5])})
        assert f"in the group {last.name} of 'Gather_2'" in str(e.value)


def _concat_model(batch=1, out_concat=False, reuse=False, twice=False, offset_ch=16):
    """Two convolution branches (``offset_ch`` and 8 channels of 6 x 6) concatenated on
    the channels, then a Relu; ``out_concat``: the concatenation is returned too;
    ``reuse``: a branch is read again after the concatenation's reader; ``twice``: one
    branch is concatenated with itself."""
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((offset_ch, 3, 3, 3)).astype(F)
    w2 = rng.standard_normal((8, 3, 1, 1)).astype(F)
    x = helper.make_tensor_value_info("x", TP.FLOAT, [batch, 3, 6, 6])
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w2"], ["b"]),
             helper.make_node("Concat", ["a", "a"] if twice else ["a", "b"], ["c"], axis=1),
             helper.make_node("Relu", ["c"], ["y"])]
    cat = [batch, 2 * offset_ch if twice else offset_ch + 8, 6, 6]
    outs = [helper.make_tensor_value_info("y", TP.FLOAT, cat)]
    if out_concat:
        outs.append(helper.make_tensor_value_info("c", TP.FLOAT, cat))
    if reuse:
        nodes.append(helper.make_node("Neg", ["b"], ["z"]))
        outs.append(helper.make_tensor_value_info("z", TP.FLOAT, [batch, 8, 6, 6]))
    inits = [helper.make_tensor("w1", TP.FLOAT, w1.shape, w1.ravel()),
             helper.make_tensor("w2", TP.FLOAT, w2.shape, w2.ravel())]
    g = helper.make_graph(nodes, "concat", [x], outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), w1, w2


def _joins(sess):
    return [s for s in plan_of(sess).steps if type(s).__name__ == "Join"]


@pytest.mark.parametrize("case,joined", [
    ({}, True), ({"reuse": True}, True), ({"batch": 2}, False), ({"out_concat": True}, False),
    ({"twice": True}, False), ({"offset_ch": 3}, False)])
def test_concatenation_written_in_place(case, joined):
    """A Concat of computed values along an axis before which every dimension is 1 is a
    ``Join``: the branches' groups write straight into its parts (no copy), through the
    native entry point and the Python executor alike; not along a batch of two, not
    when the result or a part is returned to the user, not a value with itself, and
    not at an offset off 64 bytes (3 channels of 6 x 6 floats)."""
    m, w1, w2 = _concat_model(**case)
    feeds = ex.example_inputs(m, seed=2)
    x = feeds["x"]
    pad = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(pad, (3, 3), axis=(2, 3))
    a = np.einsum("nchwij,fcij->nfhw", win, w1)
    b = np.einsum("nchw,fc->nfhw", x, w2[:, :, 0, 0])
    c = np.concatenate([a, a] if case.get("twice") else [a, b], axis=1)
    for native in (True, False):
        sess = polytc.onnx.compile(m, native=native)
        assert bool(_joins(sess)) == joined
        for _ in range(2):
            got = sess.run(None, feeds)
            np.testing.assert_allclose(got[0], np.maximum(c, 0), rtol=1e-5, atol=1e-5)
            if case.get("out_concat"):
                np.testing.assert_allclose(got[1], c, rtol=1e-5, atol=1e-5)
            if case.get("reuse"):
                np.testing.assert_allclose(got[-1], -b, rtol=1e-5, atol=1e-5)
    if joined:
        assert any(line.startswith("join ") for line in plan_of(sess).report())
