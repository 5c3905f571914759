"""Whole ONNX models: ``polytc.onnx.compile(model)`` is a drop-in for an onnxruntime
``InferenceSession``.

>>> sess = polytc.onnx.compile("model.onnx")          # a path, bytes or a ModelProto
>>> outs = sess.run(None, {"input": x})               # onnxruntime's call shape
>>> sess.get_inputs()[0].name, sess.get_outputs()[0].shape

``InferenceSession(model, sess_options, providers)`` is the same model behind
onnxruntime's whole session surface (``SessionOptions``, ``RunOptions``, ``IOBinding``,
profiling): ``import polytc.onnx as ort`` runs a script written for onnxruntime.

The model is imported through the ``onnx`` package (checker, version converter, shape
inference), simplified by the graph passes (``polytc.graph.passes``), and compiled once per
distinct set of input shapes: a model whose inputs have fixed shapes compiles in
``compile``; one with symbolic dimensions (a batch size ``N``) compiles at the first
``run`` with each new shape, and every compiled form is kept (and cached on disk, kernel by
kernel, like any polytc kernel).  See docs/onnx.md.
"""
from __future__ import annotations

from .diagnostics import user_boundary
from .graph.ortapi import (ExecutionMode, GraphOptimizationLevel, InferenceSession, IOBinding,
                           ModelMetadata, RunOptions, SessionOptions)
from .graph.session import TARGETS, NodeArg, Session, compile
from .options import Options

__all__ = ["TARGETS", "NodeArg", "Session", "compile", "export",  # and Backend, on demand
           # onnxruntime's session surface (polytc/graph/ortapi.py)
           "InferenceSession", "SessionOptions", "RunOptions", "GraphOptimizationLevel",
           "ExecutionMode", "IOBinding", "ModelMetadata"]


@user_boundary
def export(model, directory, shapes: dict | None = None, *, options: Options | None = None,
           disable=(), build: bool = True):
    """Compile ``model`` (a path, bytes or an ``onnx.ModelProto``) and export it ahead of
    time to ``directory`` (``Session.export``; docs/export.md): its symbolic input
    dimensions stay symbolic unless ``shapes`` (input name -> shape) fixes them."""
    return compile(model, options=options, disable=disable).export(directory, shapes, build)


def __getattr__(name):
    if name == "Backend":  # the onnx.backend adapter; imported on demand (it loads onnx)
        from .graph.backend import PolytcBackend

        return PolytcBackend
    raise AttributeError(name)
