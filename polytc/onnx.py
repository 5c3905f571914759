"""Whole ONNX models: ``polytc.onnx.compile(model)`` is a drop-in for an onnxruntime
``InferenceSession``.

>>> sess = polytc.onnx.compile("model.onnx")          # a path, bytes or a ModelProto
>>> outs = sess.run(None, {"input": x})               # onnxruntime's call shape
>>> sess.get_inputs()[0].name, sess.get_outputs()[0].shape

The model is imported through the ``onnx`` package (checker, version converter, shape
inference), simplified by the graph passes (``polytc.graph.passes``), and compiled once per
distinct set of input shapes: a model whose inputs have fixed shapes compiles in
``compile``; one with symbolic dimensions (a batch size ``N``) compiles at the first
``run`` with each new shape, and every compiled form is kept (and cached on disk, kernel by
kernel, like any polytc kernel).  See docs/onnx.md.
"""
from __future__ import annotations

from .graph.session import TARGETS, NodeArg, Session, compile

__all__ = ["TARGETS", "NodeArg", "Session", "compile"]  # and Backend, on demand


def __getattr__(name):
    if name == "Backend":  # the onnx.backend adapter; imported on demand (it loads onnx)
        from .graph.backend import PolytcBackend

        return PolytcBackend
    raise AttributeError(name)
