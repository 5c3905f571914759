"""Graph passes that do not depend on input shapes, each ``Graph -> Graph``.

``PASSES`` is the pipeline, in order; ``run`` applies it (``disable`` switches passes
off by name, ``POLYTC_DEBUG=1`` logs each one's time and node count).
"""
from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .. import config
from ..diagnostics import ModelError
from . import control, halves, quantised
from .layout import UNARY as _UNARY, blocked_layout
from .ir import Graph, Node, TensorType

#: ops whose result is not a function of their inputs: never folded or merged
NONDETERMINISTIC = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                    "Multinomial", "Bernoulli"}


# --- helpers ------------------------------------------------------------------------------
def node_proto(node: Node) -> onnx.NodeProto:
    attrs = {}
    for k, v in node.attrs:
        if isinstance(v, np.ndarray):
            v = numpy_helper.from_array(v)
        elif isinstance(v, tuple):
            v = list(v)
        attrs[k] = v
    return helper.make_node(node.op, list(node.inputs), list(node.outputs), name=node.name,
                            domain=node.domain or None, **attrs)


def _constant(node: Node, values: list):
    for name, dtype in (("value", None), ("value_float", np.float32),
                        ("value_floats", np.float32), ("value_int", np.int64),
                        ("value_ints", np.int64)):
        v = node.attr(name)
        if v is not None:
            return [np.asarray(v) if dtype is None else np.array(v, dtype)]
    return None  # strings, sparse: the reference


def _range(node: Node, values: list):
    start, limit, delta = values
    if start.dtype not in (np.float32, np.float64, np.int16, np.int32, np.int64):
        return None
    return [np.arange(start.item(), limit.item(), delta.item()).astype(start.dtype)]


def _gather(node: Node, values: list):
    x, indices = (v if v.flags.c_contiguous else np.ascontiguousarray(v) for v in values)
    if indices.dtype not in (np.int32, np.int64):
        return None
    return [np.take(x, indices, axis=node.attr("axis", 0))]


#: ops folded here, in numpy, as onnx's reference implementation computes them (its
#: import and a ReferenceEvaluator per node took 70 ms of BERT-2L's cold compile, for
#: 13 Constant nodes, a Range and a Gather); None: the reference decides
_FOLDERS = {"Constant": _constant, "Range": _range, "Gather": _gather,
            "DequantizeLinear": quantised.fold_dequantize,
            "QuantizeLinear": quantised.fold_quantize}


def evaluate(node: Node, values: list, opset: int) -> list:
    """Run one node on numpy values with onnx's reference implementation (or, for the
    ops of ``_FOLDERS``, the same computation here)."""
    fold = _FOLDERS.get(node.op) if not node.domain else None
    if fold is not None and all(v is not None for v in values):
        try:
            res = fold(node, values)
        except (IndexError, ValueError, TypeError) as e:
            raise ModelError(f"node {node.label}: cannot be evaluated on its constant "
                             f"inputs ({str(e).strip().splitlines()[0]})") from None
        if res is not None:
            return res
    from onnx.reference import ReferenceEvaluator

    feeds = dict(zip([n for n in node.inputs if n], values))  # values: present inputs
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for n, v in feeds.items()]
    outs = [helper.make_empty_tensor_value_info(o) for o in node.outputs if o]
    g = helper.make_graph([node_proto(node)], "fold", ins, outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    try:
        res = ReferenceEvaluator(m).run(None, feeds)
    except Exception as e:  # noqa: BLE001 - the reference rejects the node's inputs
        msg = str(e).strip().splitlines()
        raise ModelError(f"node {node.label}: cannot be evaluated on its constant inputs "
                         f"({msg[0] if msg else type(e).__name__})") from None
    return [np.asarray(r) for r in res]


def substitute(g: Graph, old: str, new: str, drop: Node) -> Graph:
    """Remove ``drop`` (whose output ``old`` equals value ``new``) and read ``new`` instead
    of ``old``.  When ``old`` is a graph output, ``new``'s producer is renamed instead."""
    nodes = [n for n in g.nodes if n is not drop]
    if old in _by_name(g):
        return g  # a subgraph (an If's branch) reads it by name: the node stays
    if old in g.outputs:
        prod = next((n for n in nodes if new in n.outputs), None)
        if prod is None or new in g.outputs:
            return g  # a graph input or constant returned as it is: the node stays
        old, new = new, old  # rename the producer's output to the graph output's name
        nodes = [n.__class__(n.op, n.name, n.inputs, tuple(new if o == old else o
                                                             for o in n.outputs),
                             n.attrs, n.domain) if n is prod else n for n in nodes]
    nodes = [n if old not in n.inputs else
             Node(n.op, n.name, tuple(new if i == old else i for i in n.inputs), n.outputs,
                  n.attrs, n.domain) for n in nodes]
    types = dict(g.types)
    if old in types and new not in types:
        types[new] = types[old]
    return g.replace(nodes=tuple(nodes), types=types)


# --- the passes ---------------------------------------------------------------------------
def fold_constants(g: Graph) -> Graph:
    """Evaluate every node whose inputs are all constants (with onnx's reference
    implementation, so each op's meaning is onnx's own)."""
    consts = dict(g.constants)
    nodes = []
    for n in g.nodes:
        if n.op not in NONDETERMINISTIC and not _has_subgraph(n) and \
                all(not i or i in consts for i in n.inputs):
            vals = evaluate(n, [consts[i] for i in n.inputs if i], g.opset)
            for o, v in zip([o for o in n.outputs if o], vals):
                consts[o] = v
        elif n.op == "CastLike" and n.inputs[0] in consts and \
                g.type_of(n.inputs[1]) is not None:
            # CastLike reads only the type of its second input: a Cast of a constant
            to = helper.np_dtype_to_tensor_dtype(g.type_of(n.inputs[1]).dtype)
            cast = Node("Cast", n.name, n.inputs[:1], n.outputs,
                        tuple(sorted(n.attrs + (("to", int(to)),))))
            consts[n.outputs[0]] = evaluate(cast, [consts[n.inputs[0]]], g.opset)[0]
        else:
            nodes.append(n)
    return g.replace(nodes=tuple(nodes), constants=consts)


def control_flow(g: Graph) -> Graph:
    """If, Loop and Scan whose decisions are known, written out (``control.py``)."""
    return control.control_flow(g, fold_constants)


def _has_subgraph(n: Node) -> bool:
    return any(isinstance(v, onnx.GraphProto) for _, v in n.attrs)


def _by_name(g: Graph) -> set:
    """The values that subgraphs (an If's branches) read from ``g`` by name."""
    return {v for n in g.nodes if _has_subgraph(n) for v in n.reads() - set(n.inputs)}


def remove_identities(g: Graph) -> Graph:
    """Identity, inference-mode Dropout (mask unused), Cast to the same type."""
    for n in g.nodes:
        src = n.inputs[0] if n.inputs else ""
        same = False
        if n.op == "Identity":
            same = True
        elif n.op == "Dropout":
            training = n.inputs[2] if len(n.inputs) > 2 else ""
            same = (len(n.outputs) < 2 or not n.outputs[1]) and \
                (not training or (training in g.constants and not g.constants[training]))
        elif n.op == "Cast":
            t = g.type_of(src)
            same = t is not None and np.dtype(helper.tensor_dtype_to_np_dtype(
                n.attr("to"))) == t.dtype
        if same and src:
            g2 = substitute(g, n.outputs[0], src, n)
            if g2 is not g:
                return remove_identities(g2)
    return g


def fold_batchnorm(g: Graph) -> Graph:
    """``BatchNormalization(Conv(x, W, b))`` with constant parameters becomes one Conv
    with scaled weights and a shifted bias.  Every such pair of the graph in one sweep
    (the pairs are disjoint: the Conv has no other reader), again while a sweep folds
    one (a BN after a folded BN)."""
    while True:
        folded = _fold_batchnorms(g)
        if folded is g:
            return g
        g = folded


def _fold_batchnorms(g: Graph) -> Graph:
    cons = g.consumers()
    prods = g.producers()
    fused_of: dict = {}  # id(conv) -> its fused Conv
    gone: set = set()  # id(bn) of the folded ones
    consts = None
    for bn in g.nodes:
        if bn.op != "BatchNormalization" or len([o for o in bn.outputs if o]) != 1:
            continue
        conv = prods.get(bn.inputs[0])
        params = bn.inputs[1:5]
        if conv is None or conv.op != "Conv" or len(cons.get(conv.outputs[0], [])) != 1 or \
                conv.outputs[0] in g.outputs or \
                not all(p in g.constants for p in list(params) + [conv.inputs[1]]) or \
                (len(conv.inputs) > 2 and conv.inputs[2] and conv.inputs[2] not in g.constants):
            continue
        scale, beta, mean, var = (g.constants[p].astype(np.float64) for p in params)
        w = g.constants[conv.inputs[1]]
        b = g.constants[conv.inputs[2]].astype(np.float64) if len(conv.inputs) > 2 and \
            conv.inputs[2] else np.zeros(w.shape[0])
        s = scale / np.sqrt(var + bn.attr("epsilon", 1e-5))
        consts = dict(g.constants) if consts is None else consts
        wn, bname = f"{bn.outputs[0]}__W", f"{bn.outputs[0]}__B"
        # in the weights' type (ORT's fusion likewise): a product in float64, rounded
        # once, took 5x longer (ResNet-18's 11M weights: 9 vs 2 ms, more in page faults)
        consts[wn] = w * s.astype(w.dtype).reshape((-1,) + (1,) * (w.ndim - 1))
        consts[bname] = ((b - mean) * s + beta).astype(w.dtype)
        fused_of[id(conv)] = Node("Conv", conv.name, (conv.inputs[0], wn, bname), bn.outputs,
                                  conv.attrs)
        gone.add(id(bn))
    if not fused_of:
        return g
    nodes = tuple(fused_of.get(id(n), n) for n in g.nodes if id(n) not in gone)
    return g.replace(nodes=nodes, constants=consts)


def pointwise_convs(g: Graph) -> Graph:
    """A Conv with a 1x1 constant kernel, stride 1, no padding and one group is a matrix
    product over the flattened image: ``Reshape(x, [0, C, H*W...])``, ``MatMul(W[M, C], .)``,
    ``Add(., b[M, 1])``, the unary elementwise ops that alone follow it (a Relu), then
    ``Reshape(., [0, M, H...])``.  The product is then tiled along the image's ``H * W``
    contiguous pixels instead of an image row (SqueezeNet's 512 -> 1000 classifier on
    13 x 13: 1.49 -> 0.89 ms; 232 channels on 14 x 14: 0.19 -> 0.09 ms).  Needs the
    input's spatial dimensions known (shape inference); the batch may be symbolic."""
    cons = g.consumers()
    for n in g.nodes:
        if n.op != "Conv" or len(n.inputs) < 2 or n.inputs[1] not in g.constants:
            continue
        w = g.constants[n.inputs[1]]
        t = g.type_of(n.inputs[0])
        bias = n.inputs[2] if len(n.inputs) > 2 and n.inputs[2] else None
        if w.ndim < 3 or any(d != 1 for d in w.shape[2:]) or n.attr("group", 1) != 1 or \
                any(s != 1 for s in n.attr("strides") or ()) or \
                any(p != 0 for p in n.attr("pads") or ()) or \
                t is None or t.shape is None or len(t.shape) != w.ndim or \
                not all(isinstance(d, int) for d in t.shape[1:]) or t.shape[1] != w.shape[1] \
                or (bias is not None and bias not in g.constants):
            continue
        m, c = w.shape[:2]
        tail, out = [], n.outputs[0]  # the unary ops that alone read the result
        while out not in g.outputs and len(cons.get(out, [])) == 1 and \
                cons[out][0].op in _UNARY and cons[out][0].inputs[0] == out and \
                len([o for o in cons[out][0].outputs if o]) == 1:
            tail.append(cons[out][0])
            out = tail[-1].outputs[0]
        name = n.outputs[0]
        consts = dict(g.constants)
        types = dict(g.types)
        pixels = int(np.prod(t.shape[2:], dtype=np.int64))
        consts[f"{name}__W"] = w.reshape(m, c)
        # the pixels spelled out: a -1 could not be inferred for an empty batch
        consts[f"{name}__xshape"] = np.array([0, c, pixels], np.int64)
        consts[f"{name}__yshape"] = np.array([0, m, *t.shape[2:]], np.int64)
        flat = TensorType(t.dtype, (t.shape[0], m, pixels))
        new = [Node("Reshape", f"{n.name}__flatten", (n.inputs[0], f"{name}__xshape"),
                    (f"{name}__x",)),
               Node("MatMul", n.name, (f"{name}__W", f"{name}__x"), (f"{name}__mm",))]
        types[f"{name}__x"] = TensorType(t.dtype, (t.shape[0], c, pixels))
        types[f"{name}__mm"] = flat
        prev = f"{name}__mm"
        if bias is not None:
            consts[f"{name}__B"] = g.constants[bias].reshape(m, 1)
            new.append(Node("Add", f"{n.name}__bias", (prev, f"{name}__B"), (f"{name}__mmb",)))
            prev = f"{name}__mmb"
            types[prev] = flat
        for u in tail:
            new.append(Node(u.op, u.name, (prev,) + u.inputs[1:], (f"{u.outputs[0]}__flat",),
                            u.attrs, u.domain))
            prev = f"{u.outputs[0]}__flat"
            types[prev] = flat
        new.append(Node("Reshape", f"{n.name}__unflatten", (prev, f"{name}__yshape"), (out,)))
        nodes = []
        for k in g.nodes:
            if k is n:
                nodes += new
            elif not any(k is u for u in tail):
                nodes.append(k)
        return pointwise_convs(g.replace(nodes=tuple(nodes), constants=consts, types=types))
    return g


def global_pools(g: Graph) -> Graph:
    """A GlobalAveragePool or GlobalMaxPool over more than one spatial axis reduces the
    flattened image instead: ``Reshape(x, [0, C, H*W...])``, the pool, ``Reshape(.,
    [0, C, 1...])``: one unit-stride loop per channel, where the nest of an H and a W
    loop, collapsed into one vector reduction, read with computed offsets (SqueezeNet's
    1000 channels of 13 x 13 2.2x faster; ResNet-18's 512 x 7 x 7 30 -> 12 us).  Needs
    the spatial dimensions known.  Not after a pooling, which computes the image in the
    same group (the reshape between them would split it: the small CNN 4% slower)."""
    made = {o: k.op for k in g.nodes for o in k.outputs}
    for n in g.nodes:
        if n.op not in ("GlobalAveragePool", "GlobalMaxPool") or n.inputs[0] in g.constants \
                or made.get(n.inputs[0]) in ("AveragePool", "MaxPool", "LpPool"):
            continue
        t = g.type_of(n.inputs[0])
        if t is None or t.shape is None or len(t.shape) < 4 or \
                not all(isinstance(d, int) for d in t.shape[1:]):
            continue
        name, out = n.outputs[0], n.outputs[0]
        c, pixels = t.shape[1], int(np.prod(t.shape[2:], dtype=np.int64))
        consts, types = dict(g.constants), dict(g.types)
        consts[f"{name}__xshape"] = np.array([0, c, pixels], np.int64)
        consts[f"{name}__yshape"] = np.array([0, c] + [1] * (len(t.shape) - 2), np.int64)
        types[f"{name}__x"] = TensorType(t.dtype, (t.shape[0], c, pixels))
        types[f"{name}__pool"] = TensorType(t.dtype, (t.shape[0], c, 1))
        new = [Node("Reshape", f"{n.name}__flatten", (n.inputs[0], f"{name}__xshape"),
                    (f"{name}__x",)),
               Node(n.op, n.name, (f"{name}__x",), (f"{name}__pool",), n.attrs, n.domain),
               Node("Reshape", f"{n.name}__unflatten", (f"{name}__pool", f"{name}__yshape"),
                    (out,))]
        nodes = []
        for k in g.nodes:
            nodes += new if k is n else [k]
        return global_pools(g.replace(nodes=tuple(nodes), constants=consts, types=types))
    return g


def simplify(g: Graph) -> Graph:
    """Transpose chains become one Transpose (none if the identity); reshape-like chains
    ending in a Reshape with a constant shape read the first input directly."""
    cons, prods = g.consumers(), g.producers()
    for n in g.nodes:
        p = prods.get(n.inputs[0]) if n.inputs else None
        only = p is not None and len(cons.get(p.outputs[0], [])) == 1 and \
            p.outputs[0] not in g.outputs
        if n.op == "Transpose" and n.attr("perm") is not None:
            perm = list(n.attr("perm"))
            if perm == sorted(perm):
                g2 = substitute(g, n.outputs[0], n.inputs[0], n)
                if g2 is not g:
                    return simplify(g2)
            if only and p.op == "Transpose" and p.attr("perm") is not None:
                inner = list(p.attr("perm"))
                new = Node("Transpose", n.name, p.inputs, n.outputs,
                           (("perm", tuple(inner[i] for i in perm)),))
                return simplify(g.replace(nodes=tuple(new if m is n else m for m in g.nodes
                                                      if m is not p)))
        if n.op == "Reshape" and only and p.op in ("Reshape", "Flatten", "Squeeze",
                                                   "Unsqueeze") and \
                n.inputs[1] in g.constants and not n.attr("allowzero", 0) and \
                0 not in g.constants[n.inputs[1]].tolist():
            new = Node("Reshape", n.name, (p.inputs[0], n.inputs[1]), n.outputs, n.attrs)
            return simplify(g.replace(nodes=tuple(new if m is n else m for m in g.nodes
                                                  if m is not p)))
    return g


def _attr_key(v):
    if isinstance(v, np.ndarray):
        return (v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, onnx.GraphProto):
        return v.SerializeToString()
    return v


def cse(g: Graph) -> Graph:
    """Nodes with the same op, inputs and attributes compute the same values once."""
    seen: dict = {}
    for n in g.nodes:
        if n.op in NONDETERMINISTIC:
            continue
        key = (n.op, n.domain, n.inputs, tuple((k, _attr_key(v)) for k, v in n.attrs))
        first = seen.get(key)
        if first is None:
            seen[key] = n
            continue
        if any(o in g.outputs or o in _by_name(g) for o in n.outputs):
            continue  # (or read by name in a subgraph: the node stays)
        for old, new in zip(n.outputs, first.outputs):
            if old:
                g = substitute(g, old, new, n)
        return cse(g)
    return g


def dce(g: Graph) -> Graph:
    """Drop nodes and constants that no graph output needs."""
    live = set(g.outputs)
    keep = []
    for n in reversed(g.nodes):
        if any(o in live for o in n.outputs if o):
            keep.append(n)
            live.update(n.reads())
    consts = {k: v for k, v in g.constants.items() if k in live}
    return g.replace(nodes=tuple(reversed(keep)), constants=consts)


PASSES = [
    ("widen_halves", halves.widen),
    ("quantised_ops", quantised.decompose),
    ("fold_constants", fold_constants),
    ("control_flow", control_flow),
    ("remove_identities", remove_identities),
    ("fold_batchnorm", fold_batchnorm),
    ("blocked_layout", blocked_layout),
    ("pointwise_convs", pointwise_convs),
    ("global_pools", global_pools),
    ("simplify", simplify),
    ("cse", cse),
    ("dce", dce),
]


class GraphStages(Mapping):
    """``{pass: graph text}``: the graph after each pass, rendered when first read
    (ShuffleNet's nine texts took 50 ms of every load).  A stage keeps its graph with
    shape-only stand-ins for the constants (zero-stride views: the text shows only their
    types), so the weights of earlier passes are not kept alive."""

    def __init__(self):
        self._graphs: dict = {}
        self._texts: dict = {}

    def add(self, name: str, g: Graph) -> None:
        self._graphs[name] = g.replace(constants={
            k: np.broadcast_to(np.zeros((), v.dtype), np.shape(v))
            for k, v in g.constants.items()})

    def __getstate__(self):  # the stand-ins as (dtype, shape): a view pickles whole
        return self._texts, {n: g.replace(constants={k: (v.dtype, v.shape) for k, v in
                                                     g.constants.items()})
                             for n, g in self._graphs.items()}

    def __setstate__(self, state):
        self._texts, graphs = state
        self._graphs = {n: g.replace(constants={k: np.broadcast_to(np.zeros((), d), s)
                                                for k, (d, s) in g.constants.items()})
                        for n, g in graphs.items()}

    def __getitem__(self, name: str) -> str:
        if name not in self._texts:
            self._texts[name] = str(self._graphs[name])
        return self._texts[name]

    def __iter__(self):
        return iter(self._graphs)

    def __len__(self) -> int:
        return len(self._graphs)


def run(g: Graph, disable=()) -> tuple:
    """Apply ``PASSES``; returns the final graph and its ``GraphStages``."""
    stages = GraphStages()
    stages.add("import", g)
    for name, fn in PASSES:
        if name in disable:
            continue
        t0 = time.perf_counter()
        g = fn(g)
        config.log(1, f"graph pass {name}: {len(g.nodes)} nodes, "
                      f"{(time.perf_counter() - t0) * 1e3:.1f} ms")
        stages.add(name, g)
    return g, stages
