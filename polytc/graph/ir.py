"""The graph IR for whole models: immutable values, nodes and graphs.

A ``Graph`` is a tuple of ``Node``s in topological order, the types of its values
(``TensorType``: a numpy dtype and a shape whose entries are ints, symbol names such as
``"batch"``, or ``None`` when unknown) and its constants (initialisers and folded values,
as numpy arrays).  Every pass is a function ``Graph -> Graph``; nothing is mutated, so a
graph can be kept, compared and printed at every stage.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Union

import numpy as np

Dim = Union[int, str, None]


@dataclass(frozen=True)
class TensorType:
    dtype: np.dtype
    shape: tuple  # of Dim; None for a value of unknown rank

    @property
    def rank(self):
        return None if self.shape is None else len(self.shape)

    @property
    def static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    def __str__(self):
        dims = "?" if self.shape is None else "x".join(
            "?" if d is None else str(d) for d in self.shape)
        return f"{np.dtype(self.dtype).name}[{dims}]"


@dataclass(frozen=True)
class Node:
    op: str
    name: str
    inputs: tuple  # value names; "" for an absent optional input
    outputs: tuple
    attrs: tuple = ()  # sorted (name, value) pairs; values are Python/numpy objects
    domain: str = ""

    def attr(self, name: str, default=None):
        for k, v in self.attrs:
            if k == name:
                return v
        return default

    def reads(self) -> set:
        """The values the node reads: its inputs, and the enclosing graph's values that
        its subgraphs name (an If's branches read them without listing them)."""
        out = {i for i in self.inputs if i}
        for _, v in self.attrs:
            if hasattr(v, "initializer") and hasattr(v, "node"):  # an onnx.GraphProto
                out |= _captured(v)
        return out

    @property
    def label(self) -> str:
        """How messages name the node: ``'conv1' (Conv)``."""
        return f"'{self.name}' ({self.op})" if self.name else f"a {self.op} node"

    def __str__(self):
        attrs = ", ".join(f"{k}={_short(v)}" for k, v in self.attrs)
        outs = ", ".join(self.outputs)
        ins = ", ".join(i or "-" for i in self.inputs)
        return f"{outs} = {self.op}({ins}){' {' + attrs + '}' if attrs else ''}"


def _captured(gp) -> set:
    """The values of enclosing graphs that the subgraph ``gp`` (and those inside it)
    reads."""
    defined = {i.name for i in gp.input} | {t.name for t in gp.initializer} | \
        {o for nd in gp.node for o in nd.output}
    used: set = set()
    for nd in gp.node:
        used.update(nd.input)
        for a in nd.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                used |= _captured(sub)
    return used - defined - {""}


def _short(v):
    if isinstance(v, np.ndarray):
        return f"<{v.dtype.name}{list(v.shape)}>"
    if isinstance(v, Graph):
        return "<graph>"
    return repr(v)


@dataclass(frozen=True)
class Graph:
    name: str
    inputs: tuple  # value names fed at run time (initialisers excluded)
    outputs: tuple
    nodes: tuple
    types: dict = field(hash=False, compare=False)  # value name -> TensorType
    constants: dict = field(hash=False, compare=False)  # value name -> np.ndarray
    opset: int = 17
    #: graph inputs and outputs that the model holds in half precision (float16,
    #: bfloat16), computed in float32 (``halves.py``): value name -> the model's dtype
    boundary: dict = field(default_factory=dict, hash=False, compare=False)

    def replace(self, **changes) -> "Graph":
        return replace(self, **changes)

    def producers(self) -> dict:
        return {o: n for n in self.nodes for o in n.outputs if o}

    def consumers(self) -> dict:
        out: dict = {}
        for n in self.nodes:
            for i in n.reads():
                out.setdefault(i, []).append(n)
        return out

    def type_of(self, value: str) -> TensorType | None:
        if value in self.constants:
            c = self.constants[value]
            return TensorType(c.dtype, tuple(c.shape))
        return self.types.get(value)

    def __str__(self):
        lines = [f"graph {self.name} (opset {self.opset})"]
        for v in self.inputs:
            lines.append(f"  input  {v}: {self.type_of(v) or '?'}")
        for v in self.constants:
            lines.append(f"  const  {v}: {self.type_of(v)}")
        for n in self.nodes:
            types = ", ".join(str(self.type_of(o) or "?") for o in n.outputs)
            lines.append(f"  {n}    # {types}")
        for v in self.outputs:
            lines.append(f"  output {v}: {self.type_of(v) or '?'}")
        return "\n".join(lines)
