"""The model-zoo CNNs of ``polytc.graph.examples`` (SqueezeNet 1.1, ShuffleNetV2) at tiny
sizes, compiled by ``polytc.onnx.compile``: outputs against
``onnx.reference.ReferenceEvaluator`` and, when it is installed, onnxruntime (rtol =
atol = 1e-4), and the logits' shape.  The builders run ``onnx.checker`` (full check)
themselves.  SqueezeNet at 36x36 makes two of its ceil_mode MaxPools keep a window that
starts inside the input and ends past it."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from polytc.graph import examples as ex

RTOL = ATOL = 1e-4

CASES = {
    "squeezenet": lambda: ex.squeezenet(batch=1, image=36, classes=10, width=0.125),
    "squeezenet_b2": lambda: ex.squeezenet(batch=2, image=36, classes=10, width=0.125),
    "shufflenet_v2": lambda: ex.shufflenet_v2(batch=1, image=48, classes=10, width=0.125),
}
BATCH = {"squeezenet": 1, "squeezenet_b2": 2, "shufflenet_v2": 1}

_RESULTS: dict = {}


def results(name: str):
    """(model, feeds, polytc's outputs), built and compiled once per module."""
    if name not in _RESULTS:
        from polytc import onnx as ponnx

        m = CASES[name]()
        feeds = ex.example_inputs(m, seed=0)
        _RESULTS[name] = m, feeds, ponnx.compile(m).run(None, feeds)
    return _RESULTS[name]


def assert_close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


def test_registered():
    assert ex.MODELS["squeezenet"] is ex.squeezenet
    assert ex.MODELS["shufflenet_v2"] is ex.shufflenet_v2


@pytest.mark.parametrize("name", sorted(CASES))
def test_shapes(name):
    m, feeds, got = results(name)
    onnx.checker.check_model(m, full_check=True)
    b = BATCH[name]
    assert [o.name for o in m.graph.output] == ["logits"]
    side = 36 if name.startswith("squeezenet") else 48
    assert feeds["input"].shape == (b, 3, side, side)
    assert len(got) == 1 and got[0].shape == (b, 10) and got[0].dtype == np.float32
    assert np.isfinite(got[0]).all() and np.abs(got[0]).max() > 1e-3  # not all zeros


@pytest.mark.parametrize("name", sorted(CASES))
def test_reference_evaluator(name):
    from onnx.reference import ReferenceEvaluator

    m, feeds, got = results(name)
    assert_close(got, ReferenceEvaluator(m).run(None, feeds))


@pytest.mark.parametrize("name", sorted(CASES))
def test_onnxruntime(name):
    ort = pytest.importorskip("onnxruntime")
    m, feeds, got = results(name)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    assert_close(got, sess.run(None, feeds))


def test_full_size_structure():
    """The default sizes are torchvision's: channel counts, node counts, no compiling."""
    sq = ex.squeezenet()
    inits = {t.name: t.dims for t in sq.graph.initializer}
    convs = [inits[n.input[1]] for n in sq.graph.node if n.op_type == "Conv"]
    assert len(convs) == 26 and convs[0] == [64, 3, 3, 3] and convs[-1] == [1000, 512, 1, 1]
    assert all(len(n.input) == 3 for n in sq.graph.node if n.op_type == "Conv")  # biases
    pools = [n for n in sq.graph.node if n.op_type == "MaxPool"]
    assert len(pools) == 3
    assert all(onnx.helper.get_attribute_value(a) == 1
               for n in pools for a in n.attribute if a.name == "ceil_mode")
    sh = ex.shufflenet_v2()
    inits = {t.name: t.dims for t in sh.graph.initializer}
    ops = [n.op_type for n in sh.graph.node]
    assert ops.count("Transpose") == 16 and ops.count("Split") == 13
    assert ops.count("BatchNormalization") == ops.count("Conv") == 1 + 3 * 16 + 2 * 3 + 1
    convs = [inits[n.input[1]] for n in sh.graph.node if n.op_type == "Conv"]
    assert convs[0] == [24, 3, 3, 3] and convs[-1] == [1024, 464, 1, 1]
    gemm = next(n for n in sh.graph.node if n.op_type == "Gemm")
    assert inits[gemm.input[1]] == [1000, 1024]
