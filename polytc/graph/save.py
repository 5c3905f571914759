"""A compiled model's optimised graph, written back as an ONNX model.

``save_optimized(session, path)`` (what ``SessionOptions.optimized_model_filepath`` asks
onnxruntime for) writes the graph after polytc's graph passes (``session.graph``): the
constants, folded ones included, as initialisers; every value's type (symbolic dimensions
stay names) as value_info; the graph's inputs and outputs as the original model has them.
The fusion groups of the session's first compiled plan are model-local functions of the
domain ``FUSED``, one per group, named after the group and its ops (``g3_Conv_Relu``), the
main graph calling them: a viewer such as Netron shows polytc's kernels as boxes, and the
importer inlines them again (``onnx.inliner.inline_local_functions``).

Groups are formed from the plan's bound graph, whose nodes are ``session.graph``'s
(binding drops the nodes that fold for the shapes and keeps the others as they are):
a group's nodes map back by name.  The unbound graph still holds the nodes that folded,
which may sit between a group's nodes (a ``Mul`` by ``ConstantOfShape(Shape(r))`` of a
value ``r`` the group made); a group that does not map, or around which the unbound graph
would form a cycle, is written unfused rather than as a wrong model.  A session with no
compiled plan yet (symbolic input dimensions, never run) is written without functions.

The passes introduce a few forms that ONNX does not define: ``Conv`` in int32 (a
quantised product, ``quantised.py``), ``QuantizeLinear`` to float (or with
``output_dtype`` before opset 21), ``Upsample`` in an opset that no longer has it
(``onnx_import._resize10``), the ops on blocked channels (``layout.py``).  Every node that onnx's
checker or type inference rejects at the model's opset is written in the domain
``INTERNAL``, which polytc's importer reads as the standard domain; a model holding
such nodes is for polytc only (``onnx.checker.check_model`` accepts it, the custom
domain unchecked).  float16 and bfloat16 models, computed in float32 (``halves.py``),
get their half-precision inputs and outputs back through a ``Cast`` at each.
"""
from __future__ import annotations

import heapq
import os

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..diagnostics import ModelError
from .group import Group
from .ir import Graph, Node, TensorType
from .onnx_import import INTERNAL_DOMAIN as INTERNAL
from .passes import node_proto

#: the functions that stand for the fusion groups
FUSED = "ai.polytc.fused"
#: the constants' bytes from which they are saved in a file of their own
EXTERNAL_BYTES = 1 << 30
#: the IR version of FunctionProto.value_info (the types inside a group's function)
_FUNCTION_IR = 10


def save_optimized(session, path) -> None:
    """Write ``session``'s optimised graph, its fusion groups as functions, to ``path``
    (see the module); constants of ``EXTERNAL_BYTES`` or more go to ``path + ".data"``
    (a protobuf holds at most 2 GB)."""
    model = optimized_model(session)
    path = os.fspath(path)
    external = sum(len(t.raw_data) for t in model.graph.initializer) >= EXTERNAL_BYTES
    try:
        onnx.save(model, path, save_as_external_data=external,
                  location=os.path.basename(path) + ".data")
    except OSError as e:  # a directory that does not exist, no permission
        raise ModelError(f"{path}: cannot write the optimised model "
                         f"({e.strerror or e})") from None


def optimized_model(session) -> onnx.ModelProto:
    """``session``'s optimised graph as an ``onnx.ModelProto`` (see the module)."""
    g = session.graph
    (widen, narrow), renamed = _boundary(g)
    protos = [_renamed(_proto(n, g), renamed) for n in g.nodes]
    uses = [_uses(p) for p in protos]
    read_by: dict = {}  # value -> the nodes that read it; -1: the narrowing Casts, the user
    for k, u in enumerate(uses):
        for v in u:
            read_by.setdefault(v, set()).add(k)
    for v in [renamed.get(v, v) for v in g.outputs]:
        read_by.setdefault(v, set()).add(-1)
    types = _types(g, renamed)
    items, functions = list(protos), []
    for group, nodes in _groups(session, g, protos, uses):
        fn = _function(group, nodes, protos, read_by, g.opset, types)
        if fn is None:
            continue
        functions.append(fn)
        for k in nodes:
            items[k] = None
        items[nodes[0]] = helper.make_node(fn.name, list(fn.input), list(fn.output),
                                           name=fn.name, domain=FUSED)
    body = widen + _ordered([p for p in items if p is not None]) + narrow
    outputs = set(g.outputs)
    graph = helper.make_graph(
        body, g.name, [_value_info(v, g.types.get(v), g.boundary.get(v)) for v in g.inputs],
        [_value_info(v, _output_type(session, v), g.boundary.get(v)) for v in g.outputs],
        _initialisers(g, body),
        value_info=[_value_info(v, types[v]) for p in body for v in p.output
                    if v and v not in outputs and v in types])
    opsets = _opsets(g.opset, {p.domain for p in body} |
                     {n.domain for f in functions for n in f.node})
    model = helper.make_model(graph, opset_imports=opsets, functions=functions,
                              producer_name="polytc", doc_string="optimised by polytc")
    model.ir_version = max(helper.find_min_ir_version_for(opsets, ignore_unknown=True),
                           _FUNCTION_IR if functions else 0)
    return model


# --- nodes ----------------------------------------------------------------------------------
def _proto(n: Node, g: Graph) -> onnx.NodeProto:
    """``n`` as a NodeProto, in the domain ``INTERNAL`` when ONNX does not define it."""
    empty = [k for k, v in n.attrs if isinstance(v, tuple) and not v]
    p = node_proto(Node(n.op, n.name, n.inputs, n.outputs,
                        tuple(a for a in n.attrs if a[0] not in empty), n.domain))
    schema = _schema(n.op, n.domain, g.opset)
    for k in empty:  # the attribute type an empty list has: the schema's (else ints)
        kind = schema.attributes[k].type if schema is not None and k in schema.attributes \
            else onnx.AttributeProto.INTS
        p.attribute.append(helper.make_attribute(k, [], attr_type=kind))
    if not n.domain and not _standard(p, schema, g):
        p.domain = INTERNAL
    return p


def _schema(op: str, domain: str, opset: int):
    try:
        return onnx.defs.get_schema(op, opset, domain)
    except onnx.defs.SchemaError:
        return None


def _standard(p: onnx.NodeProto, schema, g: Graph) -> bool:
    """Whether onnx's checker and type inference accept ``p`` at the graph's opset (type
    inference only when every input's type is known)."""
    if schema is None or schema.deprecated:
        return False
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = onnx.IR_VERSION
    ctx.opset_imports = {"": g.opset}
    known = {v: g.type_of(v) for v in p.input if v}
    try:
        onnx.checker.check_node(p, ctx)
        if all(t is not None for t in known.values()):
            onnx.shape_inference.infer_node_outputs(
                schema, p, {v: _type_proto(t) for v, t in known.items()})
    except Exception:  # noqa: BLE001 - ValidationError, InferenceError
        return False
    return True


def _boundary(g: Graph) -> tuple:
    """The half-precision inputs and outputs (``g.boundary``): ``([Casts to float32],
    [Casts back])`` and the float32 values' new names (value -> name)."""
    renamed = {v: f"{v}__float" for v in g.boundary}
    widen = [helper.make_node("Cast", [v], [renamed[v]], name=f"{v}__widen",
                              to=onnx.TensorProto.FLOAT) for v in g.inputs if v in renamed]
    narrow = [helper.make_node("Cast", [renamed[v]], [v], name=f"{v}__narrow",
                               to=helper.np_dtype_to_tensor_dtype(g.boundary[v]))
              for v in g.outputs if v in renamed]
    return (widen, narrow), renamed


def _renamed(p: onnx.NodeProto, renamed: dict) -> onnx.NodeProto:
    if renamed and any(v in renamed for v in list(p.input) + list(p.output)):
        p.input[:] = [renamed.get(v, v) for v in p.input]
        p.output[:] = [renamed.get(v, v) for v in p.output]
    return p


def _uses(p: onnx.NodeProto) -> set:
    """The values ``p`` reads: its inputs, and those its subgraphs read (a superset:
    an outer value a body reads by name is not a node input)."""
    out = {v for v in p.input if v}
    for a in p.attribute:
        for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            for n in sub.node:
                out |= _uses(n)
    return out


def _ordered(nodes: list) -> list:
    """``nodes`` in topological order, each as early as its place in the list allows (a
    group's call stands where its first node stood, unless it reads something made
    later)."""
    made = {o: k for k, p in enumerate(nodes) for o in p.output if o}
    waits = [{made[v] for v in _uses(p) if v in made and made[v] != k}
             for k, p in enumerate(nodes)]
    readers: dict = {}
    for k, w in enumerate(waits):
        for j in w:
            readers.setdefault(j, []).append(k)
    ready = [k for k, w in enumerate(waits) if not w]
    heapq.heapify(ready)
    out = []
    while ready:
        k = heapq.heappop(ready)
        out.append(nodes[k])
        for j in readers.get(k, ()):
            waits[j].discard(k)
            if not waits[j]:
                heapq.heappush(ready, j)
    assert len(out) == len(nodes), "the groups left a cycle"  # _groups rules them out
    return out


# --- fusion groups --------------------------------------------------------------------------
def _first_plan(session):
    """The session's first compiled plan (the first input shapes it ran at), or None."""
    return next(iter(session._plans.values()), None)


def _groups(session, g: Graph, protos: list, uses: list) -> list:
    """``(Group, node indices)`` of each fusion group of the first compiled plan that
    maps back to ``g``'s nodes and can stand as one node."""
    plan = _first_plan(session)
    if plan is None:
        return []
    at = {n.name: k for k, n in enumerate(g.nodes)}
    out = []
    for s in plan.steps:
        if not isinstance(s, Group):
            continue
        nodes = [at.get(n.name) for n in s.nodes]
        if any(k is None or (g.nodes[k].op, g.nodes[k].inputs, g.nodes[k].outputs) !=
               (n.op, n.inputs, n.outputs) for k, n in zip(nodes, s.nodes)):
            continue  # not the graph's node: left unfused
        if any(a.HasField("g") or a.graphs for k in nodes for a in protos[k].attribute):
            continue  # a body may read outer values by name, which a function cannot
        if _convex(sorted(nodes), protos, uses):
            out.append((s, sorted(nodes)))
    return out


def _convex(nodes: list, protos: list, uses: list) -> bool:
    """Whether no path leaves the group ``nodes`` (indices into the topologically
    ordered ``protos``) and comes back into it: then the group can be one node."""
    inside = set(nodes)
    made = {o for k in nodes for o in protos[k].output if o}
    after: set = set()  # values computed outside the group from what it makes
    for k in range(nodes[0], nodes[-1] + 1):
        if k in inside and uses[k] & after:
            return False
        if k not in inside and uses[k] & (made | after):
            after.update(o for o in protos[k].output if o)
    return True


def _function(group: Group, nodes: list, protos: list, read_by: dict, opset: int,
              types: dict) -> onnx.FunctionProto | None:
    """The function of one fusion group (``nodes``: indices into ``protos``): it takes
    what its nodes read from outside (constants included: a function sees no
    initialiser) and returns what is read outside it (``read_by``: value -> indices of
    its readers, -1 for the user) or is a graph output; named after the group and its
    ops (each once, in order)."""
    members = [protos[k] for k in nodes]
    made = [o for p in members for o in p.output if o]
    inputs: list = []
    for p in members:
        inputs += [v for v in p.input if v and v not in made and v not in inputs]
    inside = set(nodes)
    returned = [v for v in made if read_by.get(v, set()) - inside]
    if not returned:
        return None
    name = "_".join([group.name] + list(dict.fromkeys(p.op_type for p in members)))
    fn = helper.make_function(FUSED, name, inputs, returned, members,
                              _opsets(opset, {p.domain for p in members}))
    fn.value_info.extend(_value_info(v, types[v]) for v in made
                         if v not in returned and v in types)
    return fn


def _opsets(opset: int, domains: set) -> list:
    """The opset imports for nodes of ``domains``: the model's opset, version 1 of
    polytc's own domains."""
    return [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1)
                                               for d in sorted(domains - {""})]


# --- values ---------------------------------------------------------------------------------
def _types(g: Graph, renamed: dict) -> dict:
    """Value name (as written) -> TensorType."""
    out = dict(g.types)
    for v, new in renamed.items():
        if v in g.types:
            out[new] = g.types[v]
    return out


def _output_type(session, v: str) -> TensorType | None:
    """The type of the graph output ``v``: ONNX wants its rank, which a value a pass
    made may not have (``quantised.py``), then taken from the first compiled plan: its
    sizes where the graph's inputs have fixed shapes, else unknown sizes."""
    g = session.graph
    t, plan = g.type_of(v), _first_plan(session)
    if t is None or t.shape is not None or plan is None or v not in plan.bound.refs:
        return t
    shape = tuple(plan.bound.refs[v].shape)
    fixed = all(g.types[i].static for i in g.inputs)
    return TensorType(t.dtype, shape if fixed else (None,) * len(shape))


def _type_proto(t) -> onnx.TypeProto:
    shape = None if t.shape is None else list(t.shape)
    return helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype)),
                                         shape)


def _value_info(v: str, t, dtype=None) -> onnx.ValueInfoProto:
    """``v``'s type (``dtype``: its element type at the boundary, a half type)."""
    if t is None:
        return helper.make_empty_tensor_value_info(v)
    shape = None if t.shape is None else list(t.shape)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype if dtype is not None else t.dtype))
    return helper.make_tensor_value_info(v, elem, shape)


def _initialisers(g: Graph, body: list) -> list:
    """The constants the nodes read or the graph returns."""
    used = {v for p in body for v in _uses(p)} | set(g.outputs)
    return [numpy_helper.from_array(np.asarray(c), v) for v, c in g.constants.items()
            if v in used]
