"""Padded inputs written in place (``polytc.graph.padplace``): a convolution reads its
input's producer's buffer, border included, instead of a padded copy of it.  Results
equal the plan without the pass and onnxruntime's, at every run, on the native entry
point and the Python executor; values the pass cannot take keep their copy."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import polytc.onnx
from polytc.graph import examples as ex
from polytc.graph.padplace import PADS_IN_PLACE, Border

F = np.float32


def plan_of(sess):
    (plan,) = sess._plans.values()
    return plan


@pytest.mark.parametrize("shape,begin,inside", [
    ((2, 3, 6, 7), (1, 2), (4, 3)),
    ((1, 2, 5, 5, 4), (1, 1), (3, 3)),  # blocked channels: lanes after the plane
    ((3, 2, 9), (2,), (5,)),  # a line
    ((1, 1, 4, 4), (0, 1), (4, 2)),  # no rows above or below
    ((2, 1, 3, 3), (1, 1), (1, 1)),
])
def test_border_runs_cover_exactly_the_border(shape, begin, inside):
    border = Border(-1.0, begin, inside)
    want = np.ones(shape, F)
    border.fill(want)
    got = np.ones(shape, F).ravel()
    for start, count, inner, istride, outer, ostride in border.runs(shape):
        for o in range(outer):
            for i in range(inner):
                at = start + o * ostride + i * istride
                assert not (got[at:at + count] == -1).any()  # each element once
                got[at:at + count] = -1
    np.testing.assert_array_equal(got.reshape(shape), want)


def model(nodes, x_shape, y_shape, inits):
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TP.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TP.FLOAT, y_shape)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def weights(rng, *shape):
    return (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(F)


def chain_2d():
    """Conv with asymmetric pads, Relu, then a dilated Conv whose result the Relu's is
    added to (a second reader, of the inside)."""
    rng = np.random.default_rng(0)
    inits = {"w1": weights(rng, 8, 4, 3, 3), "b1": weights(rng, 8),
             "w2": weights(rng, 8, 8, 3, 3)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 2, 0, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[2, 2, 2, 2],
                              dilations=[2, 2]),
             helper.make_node("Add", ["c2", "r1"], ["y"])]
    return model(nodes, [1, 4, 60, 61], [1, 8, 59, 62], inits)


def chain_1d():
    rng = np.random.default_rng(1)
    inits = {"w1": weights(rng, 6, 3, 3), "w2": weights(rng, 5, 6, 5)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["y"], pads=[2, 2], strides=[2])]
    return model(nodes, [2, 3, 200], [2, 5, 100], inits)


def chain_of_four():
    """Four 3x3 convolutions with Relu: the third's result takes the buffer the first's
    left, border and all."""
    rng = np.random.default_rng(4)
    inits, nodes, x = {}, [], "x"
    for k in range(4):
        inits[f"w{k}"] = weights(rng, 8, 8 if k else 4, 3, 3)
        nodes += [helper.make_node("Conv", [x, f"w{k}"], [f"c{k}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{k}"], ["y" if k == 3 else f"r{k}"])]
        x = f"r{k}"
    return model(nodes, [1, 4, 30, 30], [1, 8, 30, 30], inits)


MODELS = {
    "resnet_block": lambda: ex.resnet_block(1, 8, 28),
    "resnet_block_stride2": lambda: ex.resnet_block(1, 8, 56, out_channels=16, stride=2),
    "chain_2d": chain_2d,
    "chain_1d": chain_1d,
    "chain_of_four": chain_of_four,
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_in_place_padding_gives_the_same_results(name):
    import onnxruntime as ort

    m = MODELS[name]()
    feeds = [ex.example_inputs(m, seed=s) for s in (0, 1)]
    fast = polytc.onnx.compile(m)
    plain = polytc.onnx.compile(m, disable=(PADS_IN_PLACE,))
    python = polytc.onnx.compile(m, native=False)
    assert plan_of(fast).bound.bordered and not plan_of(plain).bound.bordered
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for f in feeds + feeds:  # (a later run finds the border an earlier one left)
        want = ref.run(None, f)[0]
        got, base, slow = (s.run(None, f)[0] for s in (fast, plain, python))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(got, base, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(got, slow)


def test_the_copy_goes_and_the_producer_writes_the_inside():
    p = plan_of(polytc.onnx.compile(MODELS["resnet_block"]()))
    (v, border), = p.bound.bordered.items()  # the first convolution's result
    assert border == Border(0.0, (1, 1), (28, 28))
    assert p.bound.refs[v].shape == (1, 8, 30, 30)
    name = p.bound.refs[v].name
    producer, reader = [s for s in p.steps if hasattr(s, "stmts") and
                        (v in s.outputs or v in s.inputs)]
    assert f"{name}(i0, i1, i2, i3) = " in "\n".join(producer.stmts)
    assert "float(0.0) where" not in p.texts[reader.name]  # no padded copy
    assert "border p[" in p.driver.code and v in p.restore
    assert any(line.strip() == f"{v}: written into the inside of a padded buffer "
               "[1, 8, 30, 30], which its readers read in place" for line in p.report())


def test_a_border_left_by_the_buffer_s_last_value_is_not_written_again():
    p = plan_of(polytc.onnx.compile(chain_of_four()))
    assert len(p.bound.bordered) == 3
    kept = set(p.bound.bordered) - p.restore  # (its results: the test above)
    assert kept and p.driver.code.count("border p[") == len(p.restore)


def test_values_the_pass_cannot_take_keep_their_copy():
    # the first convolution's result is returned, and read by a max pooling
    rng = np.random.default_rng(2)
    inits = {"w1": weights(rng, 8, 4, 3, 3), "w2": weights(rng, 8, 8, 3, 3)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c2"], ["y"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1])]
    m = model(nodes, [1, 4, 30, 30], [1, 8, 30, 30], inits)
    m.graph.output.append(helper.make_tensor_value_info("c1", TP.FLOAT, [1, 8, 30, 30]))
    s = polytc.onnx.compile(m)
    # (with 8-wide vectors the 8 channels run blocked, and the second convolution reads
    # a blocked copy of c1, the pass's to take)
    assert not {"c1", "c2"} & set(plan_of(s).bound.bordered), plan_of(s).bound.bordered
    f = ex.example_inputs(m, seed=0)
    import onnxruntime as ort

    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, f)
    for g, w in zip(s.run(None, f), want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def _random_chain(data):
    """Conv (random pads, strides, dilations, groups) + Relu, then a Conv of that with
    its own; a residual Add of the first result where the shapes agree."""
    from hypothesis import strategies as st

    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
    nd = data.draw(st.sampled_from([1, 2]))
    c0, c1, c2 = (data.draw(st.sampled_from([2, 3, 4, 8])) for _ in range(3))
    side = [data.draw(st.integers(6, 13)) for _ in range(nd)]
    shape, nodes, inits = [1, c0, *side], [], {}
    for k, (cin, cout) in enumerate(((c0, c1), (c1, c2))):
        ks = [data.draw(st.sampled_from([1, 2, 3])) for _ in range(nd)]
        dil = [data.draw(st.sampled_from([1, 2])) for _ in range(nd)]
        strides = [data.draw(st.sampled_from([1, 1, 2])) for _ in range(nd)]
        pads = [data.draw(st.integers(0, 2)) for _ in range(2 * nd)]
        group = cin if k == 1 and cin == cout and data.draw(st.booleans()) else 1
        inits[f"w{k}"] = weights(rng, cout, cin // group, *ks)
        out = [(n + pads[d] + pads[d + nd] - dil[d] * (kk - 1) - 1) // s + 1
               for d, (n, kk, s) in enumerate(zip(shape[2:], ks, strides))]
        if min(out) < 1:
            return None
        x = "x" if k == 0 else "r0"
        nodes.append(helper.make_node("Conv", [x, f"w{k}"], [f"c{k}"], pads=pads,
                                      strides=strides, dilations=dil, group=group))
        if k == 0:
            nodes.append(helper.make_node("Relu", ["c0"], ["r0"]))
            first = [1, cout, *out]
        shape = [1, cout, *out]
    if shape == first:
        nodes.append(helper.make_node("Add", ["c1", "r0"], ["y"]))
    else:
        nodes[-1].output[0] = "y"
    return model(nodes, [1, c0, *side], shape, inits)


def test_random_conv_chains_agree(monkeypatch):
    """Random chains of convolutions, every padded buffer taken (``MAX_BORDER`` lifted):
    the same results with and without the pass, and as onnxruntime's."""
    import onnxruntime as ort
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from polytc.graph import padplace
    from tests.test_differential import SETTINGS

    monkeypatch.setattr(padplace, "MAX_BORDER", 1.0)

    @settings(max_examples=25, database=None, **SETTINGS)
    @given(data=st.data())
    def check(data):
        m = _random_chain(data)
        if m is None:
            return
        f = ex.example_inputs(m, seed=0)
        want = ort.InferenceSession(m.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, f)[0]
        for s in (polytc.onnx.compile(m), polytc.onnx.compile(m, native=False)):
            for _ in range(2):
                np.testing.assert_allclose(s.run(None, f)[0], want, rtol=1e-4, atol=1e-4)

    check()
