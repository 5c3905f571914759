"""Shared by the ONNX op tests: polytc against onnxruntime (or onnx's reference
evaluator, where onnxruntime is missing or cannot run the case)."""
from __future__ import annotations

import numpy as np

try:
    import onnxruntime
except ImportError:
    onnxruntime = None


def reference(m, feeds, ort=True) -> list:
    """The model's outputs from onnxruntime with graph optimisations off, or (``ort``
    False, or onnxruntime missing) from onnx's reference evaluator."""
    if onnxruntime is not None and ort:
        so = onnxruntime.SessionOptions()
        so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
        s = onnxruntime.InferenceSession(m.SerializeToString(), so,
                                         providers=["CPUExecutionProvider"])
        return s.run(None, feeds)
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(m).run(None, feeds)


def compare(m, feeds, rtol=1e-4, atol=1e-5, ort=True) -> list:
    """Compile ``m`` with polytc, run it on ``feeds`` and check every output's shape,
    dtype and values against the reference (``atol`` scales with the output's size)."""
    from polytc import onnx as ponnx

    want = reference(m, feeds, ort)
    got = ponnx.compile(m).run(None, feeds)
    assert len(got) == len(want)
    for w, g in zip(want, got):
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        scale = max(1.0, float(np.max(np.abs(w)))) if w.size and w.dtype.kind == "f" else 1
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol * scale)
    return got
