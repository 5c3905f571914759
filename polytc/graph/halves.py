"""float16 and bfloat16 models, computed in float32.

polytc's kernels compute in float32 and double; a model whose values are float16 or
bfloat16 (the graph's inputs and outputs, its weights, its Casts) runs with every such
value widened to float32: ``widen`` (the first graph pass) turns the half-precision
constants, types and Cast targets into float32, and records in ``Graph.boundary`` the
half types of the graph's inputs and outputs.  The session converts those at the run's
boundary: a float16 input is widened when it is fed, a float16 output rounded (to
nearest even, by numpy) when it is returned.  So every operation computes and accumulates
in float32, as onnxruntime's CPU kernels do for float16, but an intermediate value is not
rounded to half precision between two ops (nor by a Cast to float16 inside the graph): the
results are as accurate or more than per-op rounding, within half precision's tolerance
of onnxruntime's.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from .ir import Graph, Node, TensorType

#: the half-precision element types, as numpy dtypes (bfloat16 is ml_dtypes', which
#: onnx uses)
HALVES = frozenset(np.dtype(helper.tensor_dtype_to_np_dtype(t))
                   for t in (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16))
#: the same as ONNX element type codes
HALF_CODES = frozenset({onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16})
F32 = np.dtype(np.float32)


def _attr(v):
    """An attribute value with its half-precision parts widened."""
    if isinstance(v, np.ndarray) and v.dtype in HALVES:
        return v.astype(np.float32)
    return v


def _node(n: Node) -> Node:
    attrs = []
    for k, v in n.attrs:
        if k in ("to", "dtype", "output_dtype") and isinstance(v, int) and v in HALF_CODES:
            v = onnx.TensorProto.FLOAT
        attrs.append((k, _attr(v)))
    attrs = tuple(attrs)
    return n if attrs == n.attrs else Node(n.op, n.name, n.inputs, n.outputs, attrs,
                                           n.domain)


def has_halves(g: Graph) -> bool:
    return any(t.dtype in HALVES for t in g.types.values()) or \
        any(v.dtype in HALVES for v in g.constants.values()) or \
        any(_node(n) is not n for n in g.nodes)


def widen(g: Graph) -> Graph:
    """``g`` computed in float32 where it holds float16 or bfloat16 (see the module)."""
    if not has_halves(g):
        return g
    boundary = dict(g.boundary)
    for v in g.inputs + g.outputs:
        t = g.type_of(v)
        if t is not None and t.dtype in HALVES:
            boundary[v] = t.dtype
    types = {v: TensorType(F32, t.shape) if t.dtype in HALVES else t
             for v, t in g.types.items()}
    consts = {v: c.astype(np.float32) if c.dtype in HALVES else c
              for v, c in g.constants.items()}
    return g.replace(nodes=tuple(_node(n) for n in g.nodes), types=types, constants=consts,
                     boundary=boundary)
