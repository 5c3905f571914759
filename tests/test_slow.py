"""The opt-in slow tier (``pytest -m slow``): the differential fuzzer at ten times the
default number of programs, and the example models at full size against onnxruntime.
The default run (``-m "not slow"``, see setup.cfg) covers the same code at small sizes."""
from __future__ import annotations

import pytest
from hypothesis import given, note, settings

from polytc import config
from polytc.graph import examples as ex

from . import test_differential as D
from .test_onnx_models import assert_outputs_close, output_names, ponnx, reference

pytestmark = pytest.mark.slow


@settings(max_examples=10 * config.fuzz_examples(), **D.SETTINGS)
@given(case=D.cases())
def test_long_fuzz(case):
    note(case["src"])
    problems = D.check(case)
    assert not problems, problems


FULL_SIZE = {
    "mlp": lambda: ex.mlp(64),
    "small_cnn": lambda: ex.small_cnn(8, image=32),
    "resnet18": lambda: ex.resnet18(1, image=224),
    "transformer_layer": lambda: ex.transformer_layer(1, seq=128),
    "bert_encoder": lambda: ex.bert_encoder(1, seq=128),
}


@pytest.mark.parametrize("name", list(FULL_SIZE))
def test_full_size_model(name):
    m = FULL_SIZE[name]()
    feeds = ex.example_inputs(m, seed=1)
    got = ponnx().compile(m).run(None, feeds)
    assert_outputs_close(got, reference(m, feeds), output_names(m))
