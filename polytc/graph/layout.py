"""The ``blocked_layout`` graph pass: regions of a convolutional network whose time goes
to memory-bound window ops run in blocked channels, ``[N, C / c, H, W, c]`` (NCHWc, ``c``
the vector's float32 lanes), as onnxruntime's NCHWc transformer does.

A pooling or a depthwise convolution in NCHW vectorises along an image row: a stride-2
window reads it with gathers or through a copy split by phase, per plane of a few hundred
pixels, and small planes leave vectors half empty.  In NCHWc each window point is one
unit-stride vector load over ``c`` channels (the small CNN's 3x3/2 depthwise convolution
at batch 64: 33 -> 9 us; ops/blocked.py).  A convolution with many filters is another
matter: blocked, its register tiles' lanes span one block of ``c`` filters where NCHW
lets them span 32 (ResNet's 64-filter 3x3: 463 -> 594 us), so a region is rewritten only
when its memory-bound window ops weigh more than its wide convolutions (``_pays``).

The pass, ``Graph -> Graph``:
* picks the ops that have a blocked form (``_kind``): 2-D Conv with ``c | M`` (any
  input: it may read an NCHW image), depthwise Conv, MaxPool (one output), AveragePool
  and the global pools with ``c | C``, the unary elementwise ops, Add of two images of one shape,
  Concat of channels; an op other than a Conv joins only when all its images are blocked;
* groups them into connected regions, split where a wide convolution reads an image (a
  region's entry: it reads the image blocked where the region before it is kept, else
  NCHW), and keeps the regions that pay;
* rewrites them (``BlockedConv`` with reordered weights, ``BlockedMaxPool``,
  ``BlockedAveragePool``, ``BlockedGlobalAveragePool``, ``BlockedGlobalMaxPool``, the
  elementwise ops and Concat on the blocked values), with an ``Unblock`` for each value
  read outside its region or output by the graph.
"""
from __future__ import annotations

import numpy as np

from .ir import Graph, Node, TensorType

#: unary elementwise ops (their other inputs are parameters): they commute with a Reshape
#: and run on blocked channels as they are
UNARY = {"Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Elu",
         "Selu", "Softplus", "Abs", "Neg"}

#: multiply-adds of wide blocked convolutions a region may hold per byte its memory-bound
#: window ops read (the small CNN's last region: 2.1; SqueezeNet's stem with its max
#: pooling: 6.8, 5-9% faster; ResNet-18's: 37)
WIDE_PER_BYTE = 8


def blocked_layout(g: Graph) -> Graph:
    from ..machine import host

    c = host().lanes(4)
    if c < 4:
        return g
    kinds = {id(n): k for n in g.nodes if (k := _kind(n, g, c))}
    if not any(k in ("depthwise", "pool") for k in kinds.values()):
        return g
    producer: dict = {}  # a blocked value -> its node
    chosen = []
    for n in g.nodes:
        k = kinds.get(id(n))
        if k is not None and (k == "conv" or all(a in producer for a in _images(n, k))):
            chosen.append(n)
            producer[n.outputs[0]] = n
    # a wide convolution starts a region, so that regions split at them and each
    # pays on its own (SqueezeNet's stem and first pool in blocked channels: 5-9% of
    # the model; its fire modules, whose wide convolutions outweigh their pools, not)
    entry = {id(n) for n in chosen if _wide(n, g, kinds, c)}
    root = {id(n): id(n) for n in chosen}

    def find(a):
        while root[a] != a:
            root[a] = root[root[a]]
            a = root[a]
        return a

    for n in chosen:
        if id(n) in entry:
            continue
        for a in _images(n, kinds[id(n)]):
            if a in producer:
                root[find(id(n))] = find(id(producer[a]))
    regions: dict = {}
    for n in chosen:
        regions.setdefault(find(id(n)), []).append(n)
    keep = [n for r in regions.values() if _pays(r, g, kinds, c) for n in r]
    return _rewrite(g, keep, kinds, c) if keep else g


def _image(g: Graph, v: str, c: int) -> TensorType | None:
    """The type of ``v`` if it is a float32 NCHW image of ``c | C`` channels (not a
    constant)."""
    t = g.type_of(v) if v and v not in g.constants else None
    if t is None or t.shape is None or len(t.shape) != 4 or np.dtype(t.dtype) != np.float32 \
            or not isinstance(t.shape[1], int) or t.shape[1] % c:
        return None
    return t


def _kind(n: Node, g: Graph, c: int) -> str | None:
    """``conv``, ``depthwise``, ``pool``, ``global``, ``unary``, ``add`` or ``concat`` for a node
    with a blocked form, else None."""
    outs = [o for o in n.outputs if o]
    if n.domain or len(outs) != 1 or len(n.outputs) != 1 or _image(g, outs[0], c) is None:
        return None
    if n.op == "Conv":
        x = g.type_of(n.inputs[0])
        w = g.constants.get(n.inputs[1]) if len(n.inputs) > 1 else None
        bias = n.inputs[2] if len(n.inputs) > 2 else ""
        if w is None or w.ndim != 4 or w.dtype != np.float32 or x is None or \
                x.shape is None or len(x.shape) != 4 or np.dtype(x.dtype) != np.float32 or \
                (bias and bias not in g.constants):
            return None
        kernel = n.attr("kernel_shape")
        if kernel is not None and tuple(kernel) != w.shape[2:]:
            return None  # (the Conv's own lowering says what is wrong)
        group = n.attr("group", 1)
        if group == 1:
            return "conv" if x.shape[1] == w.shape[1] else None
        if w.shape[1] == 1 and group == w.shape[0] == x.shape[1] and \
                _image(g, n.inputs[0], c) is not None:
            return "depthwise"
        return None
    if n.op in ("MaxPool", "AveragePool"):
        kernel = n.attr("kernel_shape")
        if kernel is None or len(kernel) != 2 or _image(g, n.inputs[0], c) is None:
            return None
        return "pool"
    if n.op in ("GlobalAveragePool", "GlobalMaxPool"):
        return "global" if _image(g, n.inputs[0], c) is not None else None
    if n.op in UNARY:
        ok = _image(g, n.inputs[0], c) is not None and all(
            not i or i in g.constants for i in n.inputs[1:])
        return "unary" if ok else None
    if n.op == "Add" and len(n.inputs) == 2:
        a, b = (_image(g, i, c) for i in n.inputs)
        return "add" if a is not None and b is not None and a.shape == b.shape else None
    if n.op == "Concat" and n.attr("axis") in (1, -3) and \
            all(_image(g, i, c) is not None for i in n.inputs):
        return "concat"
    return None


def _images(n: Node, kind: str) -> list:
    """The images a node of ``kind`` reads."""
    return list(n.inputs) if kind in ("add", "concat") else [n.inputs[0]]


def _elements(t: TensorType | None) -> int | None:
    """The elements of ``t``, a symbolic dimension counted as 1; None if unknown."""
    if t is None or t.shape is None or any(d is None for d in t.shape):
        return None
    return int(np.prod([d if isinstance(d, int) else 1 for d in t.shape], dtype=np.int64))


def _wide(n: Node, g: Graph, kinds: dict, c: int) -> bool:
    """Whether ``n`` is a convolution of more than one block of filters."""
    return kinds[id(n)] == "conv" and g.constants[n.inputs[1]].shape[0] > c


def _pays(region: list, g: Graph, kinds: dict, c: int) -> bool:
    """Whether the region's memory-bound window ops outweigh its wide convolutions
    (``WIDE_PER_BYTE``)."""
    window, wide = 0, 0
    for n in region:
        k = kinds[id(n)]
        if k in ("depthwise", "pool"):
            window += 4 * (_elements(g.type_of(n.inputs[0])) or 0)
        elif _wide(n, g, kinds, c):
            out = _elements(g.type_of(n.outputs[0]))
            if out is None:
                return False
            wide += out * int(np.prod(g.constants[n.inputs[1]].shape[1:]))
    return window > 0 and wide <= WIDE_PER_BYTE * window


def _rewrite(g: Graph, nodes: list, kinds: dict, c: int) -> Graph:
    """The graph with ``nodes`` in their blocked forms.  A region's entry reads the
    blocked image where the region before it is kept too: the small CNN's pointwise
    convolution after its depthwise one, instead of an ``Unblock`` between them (at
    batch 64 0.420 -> 0.404 ms, at batch 8 0.063 -> 0.060)."""
    consts, types = dict(g.constants), dict(g.types)
    blocked = {n.outputs[0]: f"{n.outputs[0]}__blk" for n in nodes}
    mine = {id(n) for n in nodes}
    readers = g.consumers()
    out: list = []
    for n in g.nodes:
        if id(n) not in mine:
            out.append(n)
            continue
        v = n.outputs[0]
        t = g.type_of(v)
        types[blocked[v]] = TensorType(t.dtype, (t.shape[0], t.shape[1] // c, *t.shape[2:], c))
        k = kinds[id(n)]
        if k in ("conv", "depthwise"):
            out.append(_conv(n, g, consts, blocked, k, c, blocked[v]))
        elif k in ("pool", "global"):
            out.append(Node(f"Blocked{n.op}", n.name, (blocked[n.inputs[0]],),
                            (blocked[v],), n.attrs))
        else:
            ins = tuple(blocked.get(i, i) for i in n.inputs)
            out.append(Node(n.op, n.name, ins, (blocked[v],), n.attrs, n.domain))
        if v in g.outputs or any(id(r) not in mine for r in readers.get(v, [])):
            out.append(Node("Unblock", f"{n.name}__unblock", (blocked[v],), (v,)))
    return g.replace(nodes=tuple(out), constants=consts, types=types)


def _conv(n: Node, g: Graph, consts: dict, blocked: dict, kind: str, c: int, y: str) -> Node:
    """The ``BlockedConv`` of a Conv node, its weights reordered into ``consts``."""
    w = g.constants[n.inputs[1]]
    m, cin, kh, kw = w.shape
    x = blocked.get(n.inputs[0], n.inputs[0])
    if kind == "depthwise":  # [C / c, kh, kw, c]
        wt = w.reshape(m // c, c, kh, kw).transpose(0, 2, 3, 1)
    elif x in blocked.values():  # [M / c, C / c, kh, kw, c_in, c_out]
        wt = w.reshape(m // c, c, cin // c, c, kh, kw).transpose(0, 2, 4, 5, 3, 1)
    else:  # an NCHW image: [M / c, C, kh, kw, c_out]
        wt = w.reshape(m // c, c, cin, kh, kw).transpose(0, 2, 3, 4, 1)
    consts[f"{y}__W"] = np.ascontiguousarray(wt)
    ins = [x, f"{y}__W"]
    if len(n.inputs) > 2 and n.inputs[2]:
        consts[f"{y}__B"] = np.ascontiguousarray(g.constants[n.inputs[2]].reshape(m // c, c))
        ins.append(f"{y}__B")
    attrs = dict(n.attrs)
    attrs["kernel_shape"] = (kh, kw)
    return Node("BlockedConv", n.name, tuple(ins), (y,), tuple(sorted(attrs.items())))


def onnx_op(op: str) -> str:
    """The ONNX op type a profile names for ``op``: a blocked form by its op
    (``BlockedConv``: ``Conv``), ``Unblock`` as onnxruntime names its own
    (``ReorderOutput``)."""
    if op == "Unblock":
        return "ReorderOutput"
    return op[len("Blocked"):] if op.startswith("Blocked") else op
