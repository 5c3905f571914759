"""Binding a graph to concrete input shapes: shape propagation, folding of everything
known at compile time (shape computations included) and op lowering, in one walk.

Each node either folds (all inputs constant: onnx's reference implementation computes
it; ``Shape``/``Size`` of a value whose shape is now known), becomes a view of its input
(Reshape and friends) or lowers to TC statements.  The result records, for every value,
a ``Ref`` with its concrete shape — the shape inference of this graph for these inputs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..diagnostics import ModelError, NeedsValue, UnsupportedError
from . import ops
from .expand import lowerable
from .ir import Graph, Node, TensorType
from .passes import NONDETERMINISTIC, _has_subgraph, evaluate


class Namer:
    """TC names for graph values (``v<k>``) and fresh temporaries (``t<k>``)."""

    def __init__(self):
        self.names: dict = {}
        self.fresh = 0

    def __call__(self, value: str | None) -> str:
        if value is None:
            self.fresh += 1
            return f"t{self.fresh}"
        if value not in self.names:
            self.names[value] = f"v{len(self.names)}"
        return self.names[value]


@dataclass
class Bound:
    graph: Graph  # constants include everything folded for these shapes
    refs: dict  # value name -> Ref (concrete shape and dtype)
    lowered: dict  # node name -> ops.Lowered, for nodes that compute
    views: dict = field(default_factory=dict)  # value -> (source value, shape)
    #: value -> the ``Border`` around it in its buffer (``padplace.py``): the value's
    #: ``Ref`` has the padded shape, its producer writes the inside
    bordered: dict = field(default_factory=dict)


#: ops whose outputs' shapes depend on their inputs' data: they run on the host
#: (the session runs the model in stages around them: ``staged.py``)
HOST_OPS = ("NonZero", "Compress", "Unique", "NonMaxSuppression")


def needs(n: Node, constants: dict) -> NeedsValue:
    """The ``NeedsValue`` for node ``n`` (an op of ``HOST_OPS``, or an If or a Loop that
    the control-flow pass did not write out) of a graph whose constants are
    ``constants``.  The decisions of control flow are needed even where binding knows
    them (computed from shapes): the rest of the model, with them as constants, writes
    the control flow out."""
    if n.op in HOST_OPS:
        return NeedsValue(f"node {n.label}: the shape of its output depends on its "
                          "input's values", node=n)
    decide = _decisions(n)
    if all(v in constants for v in decide):  # decided, and still not written out
        raise UnsupportedError(f"node {n.label}: polytc writes out only loops whose body "
                               "passes its condition through unchanged")
    return NeedsValue(f"node {n.label}: input ('{decide[0]}') must be known at compile "
                      f"time: polytc writes the {'branch' if n.op == 'If' else 'iterations'} "
                      "out as nodes", decide)


def unsupported_ops(g: Graph) -> list:
    """Every node whose op polytc cannot lower, before any compiling: neither the ops
    that run on the host (``HOST_OPS``) nor control flow decided at run time
    (an If whose condition, a Loop whose trip count is not a constant), which the
    session runs in stages (``staged.py``)."""
    return [n for n in g.nodes if not lowerable(n.op, n.domain) and not _staged(n, g)]


def _staged(n, g: Graph) -> bool:
    if n.domain:
        return False
    if n.op in HOST_OPS:
        return True
    return n.op in ("If", "Loop") and any(v not in g.constants for v in _decisions(n))


def _decisions(n) -> list:
    """The inputs that decide an If (its condition) or a Loop (trip count, condition)."""
    return [v for v in n.inputs[:2 if n.op == "Loop" else 1] if v]


def check_supported(g: Graph) -> None:
    bad = unsupported_ops(g)
    if bad:
        kinds: dict = {}
        for n in bad:
            kinds.setdefault(f"{n.domain + '.' if n.domain else ''}{n.op}", []).append(n.name)
        listing = "; ".join(f"{op} ({len(ns)}x: {', '.join(ns[:3])}"
                            f"{', ...' if len(ns) > 3 else ''})"
                            for op, ns in sorted(kinds.items()))
        raise UnsupportedError(f"the model uses {len(kinds)} op type(s) polytc does not "
                               f"support: {listing}")


def bind(g: Graph, shapes: dict) -> Bound:
    """Propagate the input ``shapes`` (value -> tuple of ints) through ``g``."""
    names = Namer()
    refs: dict = {}
    consts = dict(g.constants)
    for v in g.inputs:
        refs[v] = ops.Ref(names(v), shapes[v], g.types[v].dtype)
    for v, c in consts.items():
        refs[v] = ops.Ref(names(v), c.shape, c.dtype, c)
    lowered, views, nodes = {}, {}, []
    for n in g.nodes:
        ins = []
        for i in n.inputs:
            if i and i not in refs:
                raise ModelError(f"node {n.label}: input '{i}' is not computed before it")
            ins.append(refs[i] if i else None)
        known = [r for r in ins if r is not None]
        if n.op not in NONDETERMINISTIC and not _has_subgraph(n) and \
                all(r.value is not None for r in known):
            vals = evaluate(n, [r.value for r in known], g.opset)
            for o, v in zip([o for o in n.outputs if o], vals):
                consts[o] = v
                refs[o] = ops.Ref(names(o), v.shape, v.dtype, v)
            continue
        if not n.domain and (n.op in HOST_OPS or n.op in ("If", "Loop")):
            raise needs(n, g.constants)  # run in stages: the session's ``staged.Staged``
        if n.op in ("Shape", "Size"):
            shape = np.array(ins[0].shape, np.int64)
            v = shape[slice(n.attr("start", 0), n.attr("end"))] if n.op == "Shape" \
                else np.array(ins[0].size, np.int64)
            consts[n.outputs[0]] = v
            refs[n.outputs[0]] = ops.Ref(names(n.outputs[0]), v.shape, v.dtype, v)
            continue
        low = ops.lower(n, ins, names)
        for k, o in enumerate(n.outputs):
            if not o:
                continue
            if k in low.consts:
                v = low.consts[k]
                consts[o] = v
                refs[o] = ops.Ref(names(o), v.shape, v.dtype, v)
            elif k in low.views:
                src, shape, dtype = low.views[k]
                source = next(i for i, r in zip(n.inputs, ins) if r is src)
                if src.value is not None:
                    consts[o] = np.ascontiguousarray(src.value).view(dtype).reshape(shape)
                    refs[o] = ops.Ref(names(o), shape, dtype, consts[o])
                else:
                    refs[o] = ops.Ref(names(o), shape, dtype)
                    views[o] = (source, shape)
            elif k in low.outputs:
                r = low.outputs[k]
                if r.size == 0:  # nothing to compute: an empty constant
                    consts[o] = np.zeros(r.shape, r.dtype)
                    refs[o] = ops.Ref(r.name, r.shape, r.dtype, consts[o])
                else:
                    refs[o] = r
            else:
                raise ModelError(f"node {n.label}: output {k} ('{o}') is not produced")
        if any(o in views or (o in refs and refs[o].value is None and o not in views)
               for o in n.outputs if o):
            nodes.append(n)
            if low.stmts:
                lowered[n.name] = low
    for v in g.outputs:
        if v not in refs:
            raise ModelError(f"graph output '{v}' is not computed by any node")
    # drop nodes whose results only folded nodes read (Shape of an intermediate value)
    live, keep = set(g.outputs), []
    for n in reversed(nodes):
        if any(o in live for o in n.outputs if o):
            keep.append(n)
            live.update(i for i in n.inputs if i)
    nodes = keep[::-1]
    lowered = {n.name: lowered[n.name] for n in nodes if n.name in lowered}
    types = {v: TensorType(r.dtype, r.shape) for v, r in refs.items()}
    return Bound(g.replace(nodes=tuple(nodes), constants=consts, types=types), refs,
                 lowered, views)
