"""Constant folding's own numpy implementations (``passes._FOLDERS``) give what onnx's
reference implementation gives, types included, and the same errors as polytc errors."""
from __future__ import annotations

import numpy as np
import pytest

from polytc.diagnostics import ModelError
from polytc.graph import passes
from polytc.graph.ir import Node

CASES = [
    ("Constant", [], {"value": np.arange(6, dtype=np.float32).reshape(2, 3)}),
    ("Constant", [], {"value": np.array(7, np.int32)}),
    ("Constant", [], {"value_float": 1.5}),
    ("Constant", [], {"value_floats": (1.0, 2.5)}),
    ("Constant", [], {"value_int": -3}),
    ("Constant", [], {"value_ints": (4, 5, 6)}),
    ("Range", [np.array(0, np.int64), np.array(10, np.int64), np.array(3, np.int64)], {}),
    ("Range", [np.array(5, np.int32), np.array(-4, np.int32), np.array(-2, np.int32)], {}),
    ("Range", [np.array(3, np.int64), np.array(3, np.int64), np.array(1, np.int64)], {}),
    ("Range", [np.array(0.5, np.float32), np.array(2.2, np.float32),
               np.array(0.3, np.float32)], {}),
    ("Range", [np.array(1.0), np.array(0.0), np.array(-0.25)], {}),
    ("Gather", [np.arange(12, dtype=np.float32).reshape(3, 4), np.array([2, 0, -1])], {}),
    ("Gather", [np.arange(12).reshape(3, 4), np.array([[1], [-4]], np.int32)], {"axis": 1}),
    ("Gather", [np.arange(24, dtype=np.float64).reshape(2, 3, 4), np.array(1)], {"axis": -1}),
    ("Gather", [np.arange(5, dtype=np.int8), np.array([], np.int64)], {}),
]


def _node(op, n_inputs, attrs):
    return Node(op, "n", tuple(f"x{i}" for i in range(n_inputs)), ("y",),
                tuple(sorted(attrs.items())))


@pytest.mark.parametrize("op,values,attrs", CASES)
def test_folders_equal_the_reference(op, values, attrs, monkeypatch):
    node = _node(op, len(values), attrs)
    got = passes.evaluate(node, values, 17)
    assert op in passes._FOLDERS and passes._FOLDERS[op](node, values) is not None
    monkeypatch.setattr(passes, "_FOLDERS", {})
    want = passes.evaluate(node, values, 17)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_folding_errors_name_the_node(monkeypatch):
    node = _node("Gather", 2, {})
    bad = [np.arange(3, dtype=np.float32), np.array([3])]  # out of range
    with pytest.raises(ModelError, match="node .*n.*cannot be evaluated"):
        passes.evaluate(node, bad, 17)
    monkeypatch.setattr(passes, "_FOLDERS", {})
    with pytest.raises(ModelError, match="cannot be evaluated"):
        passes.evaluate(node, bad, 17)


def test_other_constants_go_to_the_reference():
    node = _node("Constant", 0, {"value_strings": ("a", "b")})
    assert passes._FOLDERS["Constant"](node, []) is None
    (v,) = passes.evaluate(node, [], 17)
    assert list(v) == ["a", "b"]
