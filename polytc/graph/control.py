"""Control flow (If, Loop, Scan) written out as the graph's own nodes, when the
decisions are known at compile time.

* ``If`` whose condition is a constant (an exporter's flag; an attribute of a function
  body: AffineGrid's ``align_corners``): the nodes of the branch it takes.
* ``Loop`` whose trip count and condition are constants, and whose body passes its
  condition through unchanged: the body once per iteration (at most ``MAX_UNROLL``), the
  carried values threaded through, the scan outputs stacked along a new first axis.
* ``Scan`` (opset 9 and later) over an axis whose extent shape inference knows: the body
  once per element, each reading its slice of the scan inputs (``Gather`` at a constant
  index, forwards or backwards), the scan outputs stacked along their axes.

Every copy's values are named after the node and the iteration (``loop__it3__x``); the
copies are then ordinary nodes, which fold, fuse and schedule with the rest (the
recurrent ops are unrolled the same way, ``ops/rnn.py``).  A condition or trip count
computed at run time is refused as a value needed at compile time (``bind.
check_supported``), so the backend adapter specialises on it; other loops are refused by
name.  ``control_flow`` is the graph pass; it repeats while it writes something out
(a branch or body may hold more control flow), folding constants in between.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from .ir import Graph, Node

#: iterations a Loop or Scan is unrolled to at most
MAX_UNROLL = 256


class _Copy:
    """The nodes, constants and types that replace one node."""

    def __init__(self, g: Graph, node: Node):
        self.g, self.node = g, node
        self.nodes: list = []
        self.consts: dict = {}
        self.types: dict = {}

    def const(self, name: str, value) -> str:
        name = f"{self.node.name}__{name}"
        self.consts[name] = np.asarray(value)
        return name

    def add(self, op: str, inputs, out: str, **attrs) -> str:
        self.nodes.append(Node(op, out, tuple(inputs), (out,), tuple(sorted(attrs.items()))))
        return out

    def body(self, body: onnx.GraphProto, tag: str, bound: dict) -> list:
        """One copy of ``body``, its inputs read from ``bound`` (body input -> value) and
        everything it defines prefixed by ``tag``: the names of its outputs."""
        from .onnx_import import _type, nodes_of

        prefix = f"{self.node.name}__{tag}__"
        defined = {o for n in body.node for o in n.output if o} | \
            {t.name for t in body.initializer}
        names = {v: prefix + v for v in defined}
        names.update(bound)
        for t in body.initializer:
            self.consts[names[t.name]] = numpy_helper.to_array(t)
        for vi in list(body.value_info) + list(body.output):
            if vi.name in defined and vi.type.WhichOneof("value"):
                t = _type(vi.type, vi.name, self.node.label)
                if t is not None:
                    self.types[names[vi.name]] = t
        for n in nodes_of(body, prefix=prefix):
            self.nodes.append(Node(n.op, n.name, tuple(names.get(i, i) for i in n.inputs),
                                   tuple(names.get(o, o) for o in n.outputs),
                                   tuple((k, _renamed(v, names)) for k, v in n.attrs),
                                   n.domain))
        return [names.get(o.name, o.name) for o in body.output]

    def stack(self, parts: list, axis: int, out: str) -> None:
        """``out``: the values ``parts`` stacked along a new ``axis``."""
        axes = self.const(f"{out}__axes", np.array([axis], np.int64))
        self.add("Concat", [self.add("Unsqueeze", [p, axes], f"{out}__{k}")
                            for k, p in enumerate(parts)], out, axis=axis)


def _renamed(v, names: dict):
    """A subgraph attribute with the values ``names`` renames read by their new names
    (a branch of an If inside a loop body reads the body's values)."""
    if not isinstance(v, onnx.GraphProto):
        return v
    out = onnx.GraphProto()
    out.CopyFrom(v)
    for n in out.node:
        n.input[:] = [names.get(i, i) for i in n.input]
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                a.g.CopyFrom(_renamed(a.g, names))
    for o in out.output:
        o.name = names.get(o.name, o.name)
    return out


def _if(c: _Copy) -> bool:
    cond = c.g.constants.get(c.node.inputs[0])
    if cond is None or np.asarray(cond).size != 1:
        return False
    branch = c.node.attr("then_branch" if np.asarray(cond).reshape(-1)[0] else
                         "else_branch")
    outs = c.body(branch, "then" if np.asarray(cond).reshape(-1)[0] else "else", {})
    for v, o in zip(outs, c.node.outputs):
        if o:
            c.add("Identity", [v], o)
    return True


def _passes_condition(body: onnx.GraphProto) -> bool:
    """The body's condition output is its condition input, unchanged."""
    cond_in, cond_out = body.input[1].name, body.output[0].name
    made = {o: n for n in body.node for o in n.output}
    while cond_out in made and made[cond_out].op_type == "Identity":
        cond_out = made[cond_out].input[0]
    return cond_out == cond_in


def _loop(c: _Copy) -> bool:
    g, n = c.g, c.node
    trips = g.constants.get(n.inputs[0]) if n.inputs[0] else None
    cond = g.constants.get(n.inputs[1]) if len(n.inputs) > 1 and n.inputs[1] else True
    body = n.attr("body")
    if trips is None or cond is None or np.asarray(trips).size != 1 or \
            not _passes_condition(body):
        return False
    trips = int(np.asarray(trips).reshape(-1)[0]) if np.asarray(cond).all() else 0
    carried = list(n.inputs[2:])
    scans = len(body.output) - 1 - len(carried)
    if not 1 <= trips <= MAX_UNROLL and not (trips == 0 and scans == 0):
        return False
    cond_name = n.inputs[1] or c.const("cond", np.array(True))
    parts: list = [[] for _ in range(scans)]
    for k in range(trips):
        bound = {body.input[0].name: c.const(f"it{k}", np.array(k, np.int64)),
                 body.input[1].name: cond_name}
        bound.update({b.name: v for b, v in zip(body.input[2:], carried)})
        outs = c.body(body, f"it{k}", bound)
        carried = outs[1:1 + len(carried)]
        for p, v in zip(parts, outs[1 + len(carried):]):
            p.append(v)
    for v, o in zip(carried, n.outputs):
        if o:
            c.add("Identity", [v], o)
    for p, o in zip(parts, n.outputs[len(carried):]):
        if o:
            c.stack(p, 0, o)
    return True


def _scan(c: _Copy) -> bool:
    g, n = c.g, c.node
    body = n.attr("body")
    k_in = int(n.attr("num_scan_inputs"))
    states = list(n.inputs[:len(n.inputs) - k_in])
    xs = n.inputs[len(states):]
    in_axes = list(n.attr("scan_input_axes") or [0] * k_in)
    in_dirs = list(n.attr("scan_input_directions") or [0] * k_in)
    k_out = len(body.output) - len(states)
    out_axes = list(n.attr("scan_output_axes") or [0] * k_out)
    out_dirs = list(n.attr("scan_output_directions") or [0] * k_out)
    types = [g.type_of(x) for x in xs]
    if any(t is None or t.shape is None for t in types):
        return False
    extents = {t.shape[a % len(t.shape)] for t, a in zip(types, in_axes)}
    if len(extents) != 1 or not isinstance(next(iter(extents)), int):
        return False
    trips = next(iter(extents))
    if not 1 <= trips <= MAX_UNROLL:
        return False
    parts: list = [[] for _ in range(k_out)]
    for t in range(trips):
        bound = {b.name: v for b, v in zip(body.input, states)}
        for j, (x, ty) in enumerate(zip(xs, types)):
            at = c.const(f"at{t}_{j}", np.array(trips - 1 - t if in_dirs[j] else t, np.int64))
            bound[body.input[len(states) + j].name] = c.add(
                "Gather", [x, at], f"{n.name}__in{j}_{t}", axis=in_axes[j] % len(ty.shape))
        outs = c.body(body, f"it{t}", bound)
        states = outs[:len(states)]
        for p, v in zip(parts, outs[len(states):]):
            p.append(v)
    for v, o in zip(states, n.outputs):
        if o:
            c.add("Identity", [v], o)
    for j, (p, o) in enumerate(zip(parts, n.outputs[len(states):])):
        if o:
            c.stack(p[::-1] if out_dirs[j] else p, out_axes[j], o)
    return True


_WRITERS = {"If": _if, "Loop": _loop, "Scan": _scan}


def control_flow(g: Graph, fold) -> Graph:
    """Every If, Loop and Scan whose decisions are known written out (see the module);
    ``fold`` folds the constants of a graph (``passes.fold_constants``)."""
    if not any(n.op in _WRITERS and not n.domain for n in g.nodes):
        return g
    nodes, consts, types, changed = [], dict(g.constants), dict(g.types), False
    for n in g.nodes:
        c = _Copy(g, n)
        if n.op in _WRITERS and not n.domain and _WRITERS[n.op](c):
            nodes += c.nodes
            consts.update(c.consts)
            for k, v in c.types.items():
                types.setdefault(k, v)
            changed = True
        else:
            nodes.append(n)
    if not changed:
        return g
    return control_flow(fold(g.replace(nodes=tuple(nodes), constants=consts, types=types)),
                        fold)
