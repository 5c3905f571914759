"""Whole ONNX models compiled by ``polytc.onnx.compile``, against onnxruntime.

Every model of ``polytc.graph.examples`` (at small sizes) is compiled once per module and
its ``sess.run`` outputs compared with onnxruntime's, or with
``onnx.reference.ReferenceEvaluator``'s when onnxruntime is not installed: same names,
shapes and dtypes, values within rtol 1e-4 and an absolute tolerance of 1e-5 times the
output's magnitude.  The session's ``get_inputs()``/``get_outputs()`` must describe the
model as onnxruntime's do; models load from a path, from bytes and from a ModelProto; a
symbolic batch dimension runs at several sizes.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from polytc.graph import examples as ex

try:
    import onnxruntime
except ImportError:  # the reference evaluator stands in
    onnxruntime = None

RTOL, ATOL = 1e-4, 1e-5

# small sizes, so compiling and running every model takes seconds, not minutes
CASES = {
    "mlp": lambda batch=4: ex.mlp(batch, sizes=(32, 64, 48, 10)),
    "mlp_gemm": lambda batch=4: ex.mlp_gemm(batch, sizes=(32, 64, 48, 10)),
    "small_cnn": lambda batch=2: ex.small_cnn(batch, image=16),
    "resnet_block": lambda batch=1: ex.resnet_block(batch, channels=8, image=16),
    "resnet_block_down": lambda batch=1: ex.resnet_block(batch, channels=8, image=15,
                                                         out_channels=16, stride=2),
    "resnet18": lambda batch=1: ex.resnet18(batch, image=32, width=8, classes=10),
    "transformer_layer": lambda batch=2: ex.transformer_layer(batch, seq=16, d_model=32,
                                                              heads=4, ffn=64),
    "transformer_where": lambda batch=2: ex.transformer_layer(batch, seq=16, d_model=32,
                                                              heads=4, ffn=64, mask="where"),
    "bert_encoder": lambda batch=2: ex.bert_encoder(batch, seq=16, vocab=50, d_model=32,
                                                    heads=4, ffn=64, layers=2),
    "lstm": lambda batch=2: ex.lstm_model(seq=8, batch=batch, input=16, hidden=32),
    "gru": lambda batch=2: ex.gru_model(seq=8, batch=batch, input=16, hidden=32),
    "gru_reset_after": lambda batch=2: ex.gru_model(seq=8, batch=batch, input=16, hidden=32,
                                                    linear_before_reset=0),
}

_MODELS: dict = {}
_SESSIONS: dict = {}


def ponnx():
    # imported here, not at the top, so a missing compiler fails each test, not collection
    from polytc import onnx as polytc_onnx

    return polytc_onnx


def model(name: str, batch=None) -> onnx.ModelProto:
    key = (name, batch)
    if key not in _MODELS:
        _MODELS[key] = CASES[name]() if batch is None else CASES[name](batch)
    return _MODELS[key]


def session(name: str, batch=None):
    """polytc's session for a case, compiled once per module."""
    key = (name, batch)
    if key not in _SESSIONS:
        _SESSIONS[key] = ponnx().compile(model(name, batch))
    return _SESSIONS[key]


def reference(m: onnx.ModelProto, feeds: dict, output_names=None) -> list:
    if onnxruntime is not None:
        sess = onnxruntime.InferenceSession(m.SerializeToString(),
                                            providers=["CPUExecutionProvider"])
        return sess.run(output_names, feeds)
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(m).run(output_names, feeds)


def assert_outputs_close(got, want, names):
    assert isinstance(got, list), f"run returned {type(got).__name__}, not a list"
    assert len(got) == len(want), f"{len(got)} outputs, expected {len(want)}"
    for out, ref, name in zip(got, want, names):
        assert isinstance(out, np.ndarray), f"{name}: {type(out).__name__}, not an ndarray"
        assert out.shape == ref.shape, f"{name}: shape {out.shape}, expected {ref.shape}"
        assert out.dtype == ref.dtype, f"{name}: dtype {out.dtype}, expected {ref.dtype}"
        scale = max(1.0, float(np.abs(ref).max()))
        np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL * scale,
                                   err_msg=f"output {name!r}")


def output_names(m: onnx.ModelProto) -> list:
    return [o.name for o in m.graph.output]


@pytest.mark.parametrize("name", list(CASES))
def test_model_matches_reference(name):
    m = model(name)
    feeds = ex.example_inputs(m, seed=1)
    sess = session(name)
    got = sess.run(None, feeds)
    assert_outputs_close(got, reference(m, feeds), output_names(m))


@pytest.mark.parametrize("name", ["mlp", "resnet_block_down", "transformer_layer", "lstm"])
def test_outputs_survive_the_next_run(name):
    """A second run (other inputs) leaves the first run's arrays alone, and gives the
    same answer as a session that never saw the first inputs would."""
    m = model(name)
    sess = session(name)
    feeds1, feeds2 = ex.example_inputs(m, seed=2), ex.example_inputs(m, seed=3)
    first = sess.run(None, feeds1)
    kept = [o.copy() for o in first]
    second = sess.run(None, feeds2)
    for a, b in zip(first, kept):
        np.testing.assert_array_equal(a, b)
    assert_outputs_close(second, reference(m, feeds2), output_names(m))
    again = sess.run(None, feeds1)
    for a, b in zip(again, kept):
        np.testing.assert_array_equal(a, b)


def test_compile_leaves_the_model_alone():
    m = model("resnet_block_down")  # BatchNormalization nodes that the compiler folds
    before = m.SerializeToString()
    ponnx().compile(m, target="c", options=None)
    assert m.SerializeToString() == before


@pytest.mark.parametrize("name", sorted(ex.MODELS))
def test_prepare_infers_as_on_the_whole_model(name):
    """The checker and shape inference see the weights as typed inputs (a skeleton, not
    45 MB of data to serialise): the types they infer are those of the whole model."""
    from polytc.graph.onnx_import import prepare

    m = ex.MODELS[name]()
    whole = onnx.shape_inference.infer_shapes(m, strict_mode=True, data_prop=True)
    got = prepare(m, name)

    def types(model):
        g = model.graph
        return {v.name: v.type.SerializeToString() for v in list(g.value_info) + list(g.output)}

    assert types(got) == types(whole)
    assert len(got.graph.initializer) == len(m.graph.initializer)  # the weights kept


def test_run_selected_outputs():
    m = model("lstm")
    feeds = ex.example_inputs(m, seed=4)
    sess = session("lstm")
    assert_outputs_close(sess.run(["Y_h"], feeds), reference(m, feeds, ["Y_h"]), ["Y_h"])
    assert_outputs_close(sess.run(["Y_h", "Y"], feeds), reference(m, feeds, ["Y_h", "Y"]),
                         ["Y_h", "Y"])


def _describe(args):
    return [(a.name, list(a.shape), a.type) for a in args]


@pytest.mark.parametrize("name,batch", [("mlp", None), ("small_cnn", None),
                                        ("transformer_where", None), ("bert_encoder", None),
                                        ("lstm", None), ("mlp", "N"), ("bert_encoder", "N")])
def test_inputs_and_outputs_as_onnxruntime(name, batch):
    ort = pytest.importorskip("onnxruntime")
    m = model(name, batch)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    sess = session(name, batch)
    assert _describe(sess.get_inputs()) == _describe(ref.get_inputs())
    assert _describe(sess.get_outputs()) == _describe(ref.get_outputs())


@pytest.mark.parametrize("kind", ["str", "pathlib"])
def test_load_from_path(tmp_path, kind):
    m = model("small_cnn")
    path = tmp_path / "small_cnn.onnx"
    onnx.save(m, str(path))
    sess = ponnx().compile(str(path) if kind == "str" else path)
    feeds = ex.example_inputs(m, seed=5)
    assert [i.name for i in sess.get_inputs()] == ["input"]
    assert_outputs_close(sess.run(None, feeds), reference(m, feeds), output_names(m))


def test_load_from_bytes():
    m = model("transformer_layer")
    sess = ponnx().compile(m.SerializeToString(), target="c")
    feeds = ex.example_inputs(m, seed=6)
    assert_outputs_close(sess.run(None, feeds), reference(m, feeds), output_names(m))


@pytest.mark.parametrize("name", ["mlp", "resnet_block_down", "transformer_layer",
                                  "bert_encoder", "lstm"])
def test_symbolic_batch(name):
    """One session of a model with batch dimension ``N`` runs at several batch sizes."""
    m = model(name, "N")
    sess = session(name, "N")
    assert "N" in [d for i in sess.get_inputs() for d in i.shape]
    for batch, seed in ((3, 7), (1, 8), (3, 9)):
        feeds = ex.example_inputs(m, seed=seed, batch=batch)
        got = sess.run(None, feeds)
        assert_outputs_close(got, reference(m, feeds), output_names(m))
