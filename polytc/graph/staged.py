"""Models that decide shapes at run time, run in stages.

polytc compiles a model for concrete shapes, so binding it (``bind.py``) needs every
value that decides a shape: a Reshape's target, Slice's starts, the bounds of Range or
ConstantOfShape, an If's condition, a Loop's trip count.  Exported models compute most
of them from the inputs' shapes, which bind folds; some compute them from the inputs'
*values* (a length fed as a tensor, a mask's sum), and some ops make outputs whose shape
depends on their input's data (NonZero, Compress, Unique, NonMaxSuppression).  Binding
raises ``NeedsValue`` at the first such value or op, and the session then runs the model
in three stages around it (``Staged``):

1. the **prefix**, the nodes that the needed values (or the op's inputs) are computed
   from, as a model of its own (a ``Session``: compiled, cached per shape);
2. on the host: the values are read, the data-dependent op runs (numpy, or onnx's
   reference implementation);
3. the **rest**, a model whose inputs are the graph's, the prefix's results it reads and
   the op's outputs (their extents symbolic: a new count compiles nothing once the
   session made them generic, ``dynamic.py``), and whose constants include the needed
   values: compiled once per distinct set of values (a Reshape to a shape read from a
   tensor compiles for each shape it is given), the If's branch written out.

The rest may stage again (a second NonZero after the first).  A stage's outputs that the
model returns are returned from it (the prefix's, the op's, or the rest's).
"""
from __future__ import annotations

import numpy as np

from ..diagnostics import NeedsValue, UnsupportedError
from .ir import Graph, Node, TensorType

#: distinct sets of values needed at compile time that one model compiles for at most
MOST_VALUES = 64


def _ancestors(g: Graph, values) -> list:
    """The nodes of ``g`` that ``values`` are computed from, in the graph's order."""
    producer = g.producers()
    todo, seen = [v for v in values if v in producer], set()
    while todo:
        n = producer[todo.pop()]
        if n.name in seen:
            continue
        seen.add(n.name)
        todo.extend(i for i in n.reads() if i in producer)
    return [n for n in g.nodes if n.name in seen]


class Staged:
    """A session's model run in stages around the values and op of ``need`` (see the
    module's docstring); it stands in for the session's ``Plan`` at every shape."""

    kernels: dict = {}
    steps: list = []
    driver = None
    device = None
    arena_bytes = 0

    def __init__(self, session, need: NeedsValue):
        g = self.graph = session.graph
        self.session = session
        self.values = tuple(need.values)
        self.host = need.node
        self.why = need.message  # what binding said
        sources = set(self.values) | (self.host.reads() if self.host is not None else set())
        prefix = _ancestors(g, sources)
        done = {o for n in prefix for o in n.outputs if o}
        skip = {n.name for n in prefix} | ({self.host.name} if self.host else set())
        self.rest_nodes = tuple(n for n in g.nodes if n.name not in skip)
        #: the model's outputs that the rest computes
        self.rest_outputs = tuple(o for o in g.outputs if o in
                                  {v for n in self.rest_nodes for v in n.outputs})
        read = {i for n in self.rest_nodes for i in n.reads()}
        #: the prefix's results: what the host stage and the rest read, and outputs
        self.prefix_outputs = tuple(sorted(v for v in done if v in sources or v in read
                                           or v in g.outputs))
        self.prefix = None
        if self.prefix_outputs:
            used = {i for n in prefix for i in n.reads()}
            sub = g.replace(name=f"{g.name}.prefix", nodes=tuple(prefix),
                            inputs=tuple(v for v in g.inputs if v in used),
                            outputs=self.prefix_outputs, boundary={})
            self.prefix = type(session).of_graph(sub, session)
        self.rests: dict = {}  # the needed values (as a key) -> the rest's Session
        self.timings = {"compile": 0.0}

    def run(self, feeds: dict, names, times=None, direct=None) -> list:
        """The outputs ``names`` for the checked ``feeds`` (the plan's interface; no
        native entry point, so no ``times`` nor ``direct`` outputs)."""
        g = self.graph
        known = {**g.constants, **feeds}
        if self.prefix is not None:
            ins = {v: feeds[v] for v in self.prefix.graph.inputs}
            known.update(zip(self.prefix_outputs,
                             self.prefix.run(list(self.prefix_outputs), ins)))
        if self.host is not None:
            outs = _host(self.host, [known[i] if i else None for i in self.host.inputs],
                         g.opset)
            known.update((o, a) for o, a in zip(self.host.outputs, outs) if o)
        wanted = [n for n in names if n in self.rest_outputs]
        if wanted:
            rest = self._rest({v: np.asarray(known[v]) for v in self.values}, known)
            known.update(zip(wanted, rest.run(wanted, {v: known[v] for v in
                                                       rest.graph.inputs})))
        # (a constant or an input returned as a copy: the caller may write into it)
        return [np.array(known[n]) if n in g.constants or n in feeds else known[n]
                for n in names]

    def _rest(self, baked: dict, known: dict):
        """The rest's session for the needed values ``baked`` (compiled the first time:
        its inputs are the values of ``known`` that its nodes read)."""
        from . import passes

        key = tuple((v, a.dtype.str, a.shape, a.tobytes()) for v, a in sorted(baked.items()))
        s = self.rests.get(key)
        if s is not None:
            return s
        if len(self.rests) >= MOST_VALUES:
            raise UnsupportedError(
                f"model {self.graph.name}: {', '.join(map(repr, self.values))} took more "
                f"than {MOST_VALUES} sets of values ({self.why})",
                hint="these values decide shapes, so polytc compiles the rest of the "
                     "model for each set; compute them from the inputs' shapes instead "
                     "of their values where the model allows")
        g = self.graph
        read = {i for n in self.rest_nodes for i in n.reads()} | set(g.outputs)
        inputs = tuple(v for v in known if v in read and v not in baked and
                       v not in g.constants)
        types = dict(g.types)
        for v in inputs:
            a = known[v]
            t = g.types.get(v)
            if t is None or t.rank != a.ndim or a.dtype != t.dtype or any(
                    not isinstance(d, str) and d != n for d, n in zip(t.shape, a.shape)):
                # a value whose shape depends on data: symbolic extents (a new count
                # runs the generic code once the session made it generic)
                types[v] = TensorType(a.dtype, tuple(f"{v}__{k}" for k in range(a.ndim)))
        consts = {**g.constants, **baked}
        sub = g.replace(name=f"{g.name}.rest", nodes=self.rest_nodes, inputs=inputs,
                        outputs=self.rest_outputs,
                        types=types, constants=consts, boundary={})
        s = self.rests[key] = type(self.session).of_graph(passes.run(sub)[0], self.session)
        return s

    def report(self) -> list:
        """What ``Session.report`` shows: the stages, and each stage's own report."""
        lines = [f"run in stages, as {self.why}"]
        if self.prefix is not None:
            lines.append("prefix:")
            lines.extend("  " + line for line in self.prefix.report().splitlines())
        for k, s in enumerate(self.rests.values()):
            lines.append(f"rest {k + 1}:")
            lines.extend("  " + line for line in s.report().splitlines())
        return lines


def _host(n: Node, values: list, opset: int) -> list:
    """The outputs of the data-dependent op ``n`` for ``values``: numpy's where it
    computes the same, else onnx's reference implementation."""
    x = values[0]
    if n.op == "NonZero" and np.ndim(x) >= 1:
        return [np.array(np.nonzero(x), np.int64).reshape(np.ndim(x), -1)]
    if n.op == "Compress":
        return [np.compress(np.asarray(values[1], bool), x, axis=n.attr("axis"))]
    from .passes import evaluate

    return evaluate(n, values, opset)
