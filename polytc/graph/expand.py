"""Ops that ONNX defines as functions, written out in the ops of their bodies.

Many newer ONNX ops (Attention, RMSNormalization, RotaryEmbedding, the losses, the window
functions, CenterCropPad, Swish, ...) come with a function body in onnx's op schema: a
small graph of primitive ops that is the op's meaning, or for a context-dependent
function, a body that onnx builds from the node's attributes and input types.  An op that
polytc has no lowering for, but that has such a body for the model's opset, is replaced
by its body before the graph is imported (every name of the body prefixed by the node's
own, attribute references resolved), and the body's ops are lowered as any others, so
they fuse and schedule with their neighbours.  Bodies that use further function ops are
expanded in turn; a branch of a body's ``If`` is renamed like the body (``control.py``
writes it out when the condition is constant).
"""
from __future__ import annotations

import onnx
from onnx import helper

from ..diagnostics import ModelError, UnsupportedError

#: ops polytc evaluates itself (from shapes, or folds), without a lowering
BUILTIN_OPS = frozenset({"Shape", "Size", "Constant"})

#: how deep bodies may nest function ops (Attention -> Softmax is one level)
MAX_DEPTH = 8


def lowerable(op_type: str, domain: str = "") -> bool:
    """Whether polytc lowers ``op_type`` itself (a registered lowering or a builtin)."""
    from .ops import supported

    return supported(op_type, domain) or (domain in ("", "ai.onnx") and
                                          op_type in BUILTIN_OPS)


def _schema(node: onnx.NodeProto, opset: int):
    try:
        return onnx.defs.get_schema(node.op_type, opset, node.domain or "")
    except Exception:  # noqa: BLE001 - SchemaError: no such op at this opset
        return None


def _version(schema, opset: int) -> tuple | None:
    """``(version, context_dependent)`` of the newest body not newer than ``opset``."""
    found = [(v, False) for v in schema.function_opset_versions if v <= opset]
    found += [(v, True) for v in schema.context_dependent_function_opset_versions
              if v <= opset]
    return max(found) if found else None


def expandable(node: onnx.NodeProto, opset: int, typed: bool = True) -> bool:
    """``node``'s op has no polytc lowering but an ONNX function body at ``opset``
    (with ``typed`` False: a body that does not depend on the input types)."""
    if lowerable(node.op_type, node.domain):
        return False
    schema = _schema(node, opset)
    version = _version(schema, opset) if schema is not None else None
    return version is not None and (typed or not version[1])


def _with_defaults(node: onnx.NodeProto, schema) -> onnx.NodeProto:
    """A copy of ``node`` with every attribute it leaves out at the schema's default."""
    full = onnx.NodeProto()
    full.CopyFrom(node)
    have = {a.name for a in node.attribute}
    for name, attr in schema.attributes.items():
        if name not in have and attr.default_value.name:
            full.attribute.append(attr.default_value)
    return full


def _body(node: onnx.NodeProto, schema, opset: int, types: dict) -> onnx.FunctionProto:
    version, dependent = _version(schema, opset)
    fn = onnx.FunctionProto()
    if dependent:
        missing = [i for i in node.input if i and i not in types]
        if missing:
            raise ModelError(f"node {node.name or node.op_type} ({node.op_type}): the type "
                             f"of input '{missing[0]}' is unknown, so its ONNX function "
                             "body cannot be built")
        fn.ParseFromString(schema.get_context_dependent_function_with_opset_version(
            version, node.SerializeToString(),
            [types[i].SerializeToString() if i else onnx.TypeProto().SerializeToString()
             for i in node.input]))
    else:
        fn.ParseFromString(schema.get_function_with_opset_version(version))
    return fn


def _rename(body_node: onnx.NodeProto, names, attrs: dict, name: str) -> onnx.NodeProto:
    out = onnx.NodeProto()
    out.CopyFrom(body_node)
    del out.input[:], out.output[:], out.attribute[:]
    out.input.extend(names(i) for i in body_node.input)
    out.output.extend(names(o) for o in body_node.output)
    out.name = name
    for a in body_node.attribute:
        if a.ref_attr_name:  # an attribute of the function: the node's value, if it has one
            if a.ref_attr_name in attrs:
                new = onnx.AttributeProto()
                new.CopyFrom(attrs[a.ref_attr_name])
                new.name = a.name
                out.attribute.append(new)
        elif a.type == onnx.AttributeProto.GRAPH:  # a branch (If): its names likewise
            new = onnx.AttributeProto()
            new.CopyFrom(a)
            new.g.CopyFrom(_rename_graph(a.g, names, attrs, name))
            out.attribute.append(new)
        elif a.type == onnx.AttributeProto.GRAPHS:
            raise UnsupportedError(f"node {name}: the ONNX function body of its op uses "
                                   f"{body_node.op_type} with several subgraphs, which "
                                   "polytc does not expand")
        else:
            out.attribute.append(a)
    return out


def _rename_graph(g: onnx.GraphProto, names, attrs: dict, name: str) -> onnx.GraphProto:
    """A subgraph of a body with every value named as ``names`` names the body's."""
    out = onnx.GraphProto()
    out.CopyFrom(g)
    del out.node[:]
    out.node.extend(_rename(n, names, attrs, f"{name}__{n.op_type}_{k}")
                    for k, n in enumerate(g.node))
    for vi in list(out.input) + list(out.output) + list(out.value_info):
        vi.name = names(vi.name)
    for t in out.initializer:
        t.name = names(t.name)
    return out


def expand_node(node: onnx.NodeProto, opset: int, types: dict) -> list:
    """The nodes of ``node``'s function body, written for this node: its inputs and
    outputs for the body's, every other value and node name prefixed by the node's."""
    schema = _schema(node, opset)
    full = _with_defaults(node, schema)
    fn = _body(full, schema, opset, types)
    prefix = f"{node.name or node.op_type + '_' + (node.output[0] or 'out')}__"
    io = {f: a for f, a in zip(fn.input, full.input)}
    io.update({f: a for f, a in zip(fn.output, full.output) if a})
    for f in fn.input[len(full.input):]:
        io[f] = ""  # an optional input the node leaves out

    def names(v: str) -> str:
        if not v:
            return ""
        return io.get(v, prefix + v)

    attrs = {a.name: a for a in full.attribute}
    return [_rename(n, names, attrs, f"{prefix}{n.op_type}_{k}")
            for k, n in enumerate(fn.node)]


def _types(g: onnx.GraphProto) -> dict:
    """value name -> TypeProto, from the graph's inputs, value infos, outputs and
    initialisers."""
    out = {vi.name: vi.type for vi in list(g.input) + list(g.value_info) + list(g.output)
           if vi.type.WhichOneof("value")}
    for t in g.initializer:
        out.setdefault(t.name, helper.make_tensor_type_proto(t.data_type, list(t.dims)))
    return out


def needs_expansion(model: onnx.ModelProto, opset: int, typed: bool = True) -> bool:
    return any(expandable(n, opset, typed) for n in model.graph.node)


def expand_functions(model: onnx.ModelProto, opset: int, where: str,
                     typed: bool = True) -> onnx.ModelProto:
    """A copy of ``model`` whose expandable nodes are their bodies, one level deep; the
    caller infers shapes again and repeats while any are left.  ``typed``: the model's
    shapes are inferred, so context-dependent bodies can be built too (onnx's shape
    inference fails on some static bodies whose node leaves out an attribute, so those
    are written out first, before inference)."""
    types = _types(model.graph)
    nodes = []
    for n in model.graph.node:
        if not expandable(n, opset, typed):
            nodes.append(n)
            continue
        try:
            nodes.extend(expand_node(n, opset, types))
        except (ModelError, UnsupportedError):
            raise
        except Exception as e:  # noqa: BLE001 - onnx's builder rejects the node
            first = " ".join(str(e).split())[:300]
            raise ModelError(f"{where}: node {n.name or n.op_type} ({n.op_type}): onnx "
                             f"cannot build its function body ({first})") from None
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out
