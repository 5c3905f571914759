"""The integer ops of quantised models, written as ordinary ops on int32 and float values
before the other graph passes (so constant weights fold once, and the rest fuses):

* ``MatMulInteger(A, B, a0, b0)`` is ``MatMul(int32(A) - a0, int32(B) - b0)`` in int32;
  a per-row zero point of A (1-D, one per row) is read as a column.
* ``ConvInteger(x, w, x0, w0)`` is ``Conv(int32(x) - x0, int32(w) - w0)`` in int32 (the
  zero padding of the centred input is the input padded with its zero point, as ONNX
  wants); a per-channel ``w0`` is read along the output channels.
* ``QLinearMatMul`` and ``QLinearConv`` are the same products, plus QLinearConv's int32
  bias, requantised as onnxruntime does: ``QuantizeLinear(float(acc) * (sa * sb / sy),
  1, y0)`` (the multiplier computed in float32).
* onnxruntime's QOperator contrib ops (``com.microsoft``, from ``quantize_static``):
  ``QGemm`` likewise; ``QLinearAdd``, ``QLinearMul``, ``QLinearAveragePool``,
  ``QLinearGlobalAveragePool``, ``QLinearSigmoid``, ``QLinearLeakyRelu``,
  ``QLinearSoftmax``, ``QLinearConcat`` as their float op between DequantizeLinear and
  QuantizeLinear (onnxruntime computes them in float too; NHWC ``channels_last`` is
  refused).

With a constant operand (the weights) and constant zero points, the centred int32
operand is computed here, once.  Where the CPU has an int8 dot-product instruction, the
products (and QDQ models' ``MatMul``/``Conv`` of dequantised values, and onnxruntime's
``MatMulIntegerToFloat``/``DynamicQuantizeMatMul``) run on int8 words instead
(``qwords.py``).  ``QuantizeLinear``/``DequantizeLinear`` themselves are
elementwise lowerings (ops/quant.py).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from .ir import Graph, Node, TensorType
from .qwords import (conv_words, dequantised_conv, dequantised_matmul, requantised_pair,
                     scaled, words, words_enabled)

I32, F32 = onnx.TensorProto.INT32, onnx.TensorProto.FLOAT


class _Rewrite:
    """The nodes and constants that replace one node (names prefixed by its output's)."""

    def __init__(self, g: Graph, node: Node, producers: dict, made: dict | None = None,
                 remade: dict | None = None):
        self.g, self.node, self.producers = g, node, producers
        self.made = made or {}  # the types of values earlier rewrites made
        self.remade = remade or {}  # value -> the node an earlier rewrite makes it with
        self.prefix = f"{node.outputs[0] or node.name}__q"
        self.nodes: list = []
        self.consts: dict = {}
        self.types: dict = {}
        self.exact: dict = {}  # an int32 output -> the float value it converts exactly
        self.k = 0

    def type_of(self, v: str) -> TensorType | None:
        t = self.types.get(v) or self.made.get(v)
        return t if t is not None else self.g.type_of(v)

    def input(self, k: int) -> str:
        n = self.node.inputs
        return n[k] if k < len(n) else ""

    def value(self, name: str):
        if name in self.consts:
            return self.consts[name]
        return self.g.constants.get(name)

    def _name(self) -> str:
        self.k += 1
        return f"{self.prefix}{self.k}"

    def const(self, v) -> str:
        name = self._name()
        self.consts[name] = np.asarray(v)
        return name

    def op(self, op: str, inputs, dtype, out: str | None = None, **attrs) -> str:
        out = out or self._name()
        self.nodes.append(Node(op, f"{self.prefix}_{op}{len(self.nodes)}", tuple(inputs),
                               (out,), tuple(sorted(attrs.items()))))
        # the replaced node's own output keeps its shape (a graph output's is the user's)
        old = self.g.types.get(out) if out in self.node.outputs else None
        keep = old is not None and np.dtype(old.dtype) == np.dtype(dtype)
        self.types[out] = TensorType(np.dtype(dtype), old.shape if keep else None)
        return out

    def centred(self, x: str, zero: str, column: int = 0, dtype=np.int32) -> str:
        """``int32(x) - int32(zero)`` (or in ``dtype``); a 1-D ``zero`` of more than one
        element gets ``column`` trailing unit dimensions (per-row or per-channel zero
        points)."""
        xv = self.value(x)
        zv = self.value(zero) if zero else np.zeros((), np.int32)
        to = I32 if np.dtype(dtype) == np.int32 else F32
        if zv is not None:
            zv = zv.astype(np.int32)
            if zv.ndim == 1 and zv.size > 1:
                zv = zv.reshape((-1,) + (1,) * column)
            if xv is not None:
                return self.const((xv.astype(np.int32) - zv).astype(dtype))
        made = self.producers.get(x) if to == F32 else None
        if made is not None and made.op == "QuantizeLinear" and not made.domain and \
                len(made.inputs) > 2 and made.inputs[2]:
            # quantised here (DynamicQuantizeLinear's body): the same in float
            x32 = self.op("QuantizeLinear", made.inputs, dtype, output_dtype=F32,
                          **{k: v for k, v in made.attrs if k != "output_dtype"})
        else:
            x32 = self.op("Cast", [x], dtype, to=to)
        if zero and zv is None:
            zt = self.type_of(zero)
            z32 = self.op("Cast", [zero], dtype, to=to)
            if zt is not None and zt.rank == 1 and column:
                z32 = self.op("Unsqueeze", [z32, self.const(np.arange(1, column + 1))],
                              dtype)
            return self.op("Sub", [x32, z32], dtype)
        if zv is not None and zv.any():
            return self.op("Sub", [x32, self.const(zv.astype(dtype))], dtype)
        return x32

    def exact_in_float(self, a: tuple, b: tuple, axis) -> bool:
        """Whether the product of the centred operands ``a`` (any values of its type)
        and ``b`` (a constant with a constant zero point) is computed exactly in
        float32: every partial sum is an integer below 2^24 when the largest
        ``|a - a0|`` times the largest sum of ``|b - b0|`` over the reduced ``axis`` is
        (the products are below 2^15)."""
        at = self.type_of(a[0])
        bv = self.value(b[0])
        if at is None or at.dtype.kind not in "iu" or at.dtype.itemsize != 1 or \
                bv is None or (b[1] and self.value(b[1]) is None):
            return False
        lo, hi = np.iinfo(at.dtype).min, np.iinfo(at.dtype).max
        za = self.value(a[1]) if a[1] else np.zeros((), np.int64)
        amax = int(np.max(np.maximum(np.abs(lo - za.astype(np.int64)),
                                     np.abs(hi - za.astype(np.int64))))) \
            if za is not None else hi - lo
        zb = self.value(b[1]) if b[1] else np.zeros((), np.int64)
        zb = zb.astype(np.int64)
        if zb.ndim == 1 and zb.size > 1:
            zb = zb.reshape((-1,) + (1,) * b[2])
        sums = np.abs(bv.astype(np.int64) - zb).sum(axis=axis)
        return sums.size == 0 or int(sums.max()) * amax < 1 << 24

    def multiplier(self, sa: str, sb: str, sy: str, column: int) -> str:
        """``sa * sb / sy`` in float32 (``sa * sb`` without ``sy``), a 1-D ``sb`` (per
        output channel) read along ``column`` trailing unit dimensions; ``sa`` may be per
        row (QLinearMatMul)."""
        va, vb = self.value(sa), self.value(sb)
        vy = self.value(sy) if sy else np.float32(1)
        if va is not None and vb is not None and vy is not None:
            va = va.reshape(-1, 1) if va.ndim == 1 and va.size > 1 else va
            vb = vb.reshape((-1,) + (1,) * column) if vb.ndim == 1 and vb.size > 1 else vb
            return self.const((va.astype(np.float32) * vb.astype(np.float32)) /
                              vy.astype(np.float32))
        if column and vb is not None and vb.ndim == 1 and vb.size > 1:
            sb = self.const(vb.reshape((-1,) + (1,) * column))
        product = self.op("Mul", [sa, sb], np.float32)
        return self.op("Div", [product, sy], np.float32) if sy else product

    def requantised(self, acc: str, mult: str, zero: str, made=None, n: int = 0,
                    axis: int = -1) -> None:
        """The node's output: ``QuantizeLinear(float(acc) * mult, 1, zero)``; of a
        ``split`` product on words ``made`` instead of ``acc`` (its ``n`` scales along
        ``axis``), scaled as ``qwords.scaled`` scales it."""
        if made is None:
            f = self.op("Mul", [self.op("Cast", [acc], np.float32, to=F32), mult],
                        np.float32)
        else:
            f = self._name()
            scaled(self, made, mult, axis, n, f)
        zt = self.type_of(zero) if zero else None
        self.op("QuantizeLinear", [f, self.const(np.float32(1.0)), zero],
                zt.dtype if zt is not None else np.uint8, out=self.node.outputs[0])

    def product(self, op: str, a: tuple, b: tuple, out: str | None = None,
                attrs: tuple = (), dtype=np.int32) -> str:
        """``op`` (MatMul or Conv) of the centred operands ``a`` and ``b`` ((value, zero
        point, trailing dimensions of a 1-D zero point)), in ``dtype``."""
        ca, cb = self.centred(*a, dtype=dtype), self.centred(*b, dtype=dtype)
        out = out or self._name()
        self.nodes.append(Node(op, f"{self.prefix}_{op}{len(self.nodes)}", (ca, cb), (out,),
                               attrs))
        self.types[out] = TensorType(np.dtype(dtype), None)
        return out

    def integer_product(self, op: str, a: tuple, b: tuple, axis, attrs: tuple = ()):
        """The node's int32 output, ``op`` of the centred ``a`` and ``b``: in float32
        when that is exact (``exact_in_float``: polytc's float micro-kernels, prepacked
        weights), then converted, and the float result kept in ``self.exact`` for a
        consumer that converts it back (onnxruntime's quantize_dynamic writes
        ``Cast(MatMulInteger(..), float)``)."""
        out = self.node.outputs[0]
        if not self.exact_in_float(a, b, axis):
            self.product(op, a, b, out=out, attrs=attrs)
            return
        f = self.product(op, a, b, attrs=attrs, dtype=np.float32)
        self.op("Cast", [f], np.int32, out=out, to=I32)
        self.exact[out] = f


def _matmul_integer(r: _Rewrite) -> None:
    a, b, za, zb = (r.input(k) for k in range(4))
    if words(r, a, za, b, zb, out=r.node.outputs[0]) is None:
        r.integer_product("MatMul", (a, za, 1), (b, zb, 0), axis=-2)


def _conv_integer(r: _Rewrite) -> None:
    if conv_words(r, r.input(0), r.input(2), r.input(1), r.input(3), r.node.attrs,
                    out=r.node.outputs[0]) is not None:
        return
    w = r.type_of(r.input(1))
    nd = (w.rank - 1) if w is not None and w.rank else 3
    r.integer_product("Conv", (r.input(0), r.input(2), 0), (r.input(1), r.input(3), nd),
                      axis=tuple(range(1, nd + 1)), attrs=r.node.attrs)


def _qlinear_matmul(r: _Rewrite) -> None:
    a, sa, za, b, sb, zb, sy, zy = (r.input(k) for k in range(8))
    made = words(r, a, za, b, zb, split=True)
    if made is not None:
        r.requantised(None, r.multiplier(sa, sb, sy, 0), zy, made, r.value(b).shape[1])
        return
    acc = r.product("MatMul", (a, za, 1), (b, zb, 0))
    r.requantised(acc, r.multiplier(sa, sb, sy, 0), zy)


def _qlinear_conv(r: _Rewrite) -> None:
    x, sx, zx, w, sw, zw, sy, zy = (r.input(k) for k in range(8))
    t = r.type_of(w)
    nd = (t.rank - 1) if t is not None and t.rank else 3
    bias = r.input(8)
    made = conv_words(r, x, zx, w, zw, r.node.attrs, split=True)
    if made is not None:  # the bias joins the zero point's sums: acc - (sums - bias)
        acc, corr = made
        m = r.value(w).shape[0]
        if bias:
            bv, cv = r.value(bias), r.value(corr) if corr else np.zeros(m, np.int32)
            corr = r.const((cv - bv.astype(np.int32)).reshape(-1)) \
                if bv is not None and cv is not None else \
                r.op("Sub", [corr or r.const(np.zeros(m, np.int32)), bias], np.int32)
        r.requantised(None, r.multiplier(sx, sw, sy, 0), zy, (acc, corr), m, axis=1)
        return
    acc = r.product("Conv", (x, zx, 0), (w, zw, nd), attrs=r.node.attrs)
    if bias:
        bv = r.value(bias)
        b = r.const(bv.astype(np.int32).reshape((-1,) + (1,) * (nd - 1))) \
            if bv is not None else r.op("Unsqueeze", [bias, r.const(np.arange(1, nd))],
                                        np.int32)
        acc = r.op("Add", [acc, b], np.int32)
    r.requantised(acc, r.multiplier(sx, sw, sy, nd - 1), zy)


def _qgemm(r: _Rewrite) -> None:
    """com.microsoft.QGemm: ``alpha * A' B' + C`` (C int32, at scale ``sa * sb``),
    requantised when the output's scale is given, else float."""
    a, sa, za, b, sb, zb, bias, sy, zy = (r.input(k) for k in range(9))
    if r.node.attr("transA", 0):
        a = r.op("Transpose", [a], r.type_of(a).dtype if r.type_of(a) else np.uint8)
    if r.node.attr("transB", 0):
        bv = r.value(b)
        b = r.const(bv.T) if bv is not None else \
            r.op("Transpose", [b], r.type_of(b).dtype if r.type_of(b) else np.int8)
    acc = words(r, a, za, b, zb) or r.product("MatMul", (a, za, 1), (b, zb, 0))
    if bias:
        acc = r.op("Add", [acc, bias], np.int32)
    alpha = r.const(np.float32(r.node.attr("alpha", 1.0)))
    scale = r.op("Mul", [r.op("Mul", [sa, sb], np.float32), alpha], np.float32)
    if sy:
        r.requantised(acc, r.op("Div", [scale, sy], np.float32), zy)
    else:
        f = r.op("Cast", [acc], np.float32, to=F32)
        r.op("Mul", [f, scale], np.float32, out=r.node.outputs[0])


def _matmul_to_float(r: _Rewrite, a: str, za: str, sa: str, b: str, zb: str, sb: str,
                     bias: str) -> None:
    """The node's float output: ``float((A - za)(B - zb)) * (sa * sb) + bias``, the
    product on int8 words where it can (``qwords.words``, scaled by ``qwords.scaled``),
    else in int32."""
    y = r.node.outputs[0] if not bias else r._name()
    made = words(r, a, za, b, zb, split=True)
    if made is not None:
        scaled(r, made, r.multiplier(sa, sb, "", 0), -1, r.value(b).shape[1], y)
    else:
        acc = r.product("MatMul", (a, za, 1), (b, zb, 0))
        r.op("Mul", [r.op("Cast", [acc], np.float32, to=F32), r.multiplier(sa, sb, "", 0)],
             np.float32, out=y)
    if bias:
        r.op("Add", [y, bias], np.float32, out=r.node.outputs[0])


def _matmul_integer_to_float(r: _Rewrite) -> None:
    """com.microsoft.MatMulIntegerToFloat(A, B, sa, sb, za, zb, bias)."""
    a, b, sa, sb, za, zb, bias = (r.input(k) for k in range(7))
    _matmul_to_float(r, a, za, sa, b, zb, sb, bias)


def _dynamic_quantize_matmul(r: _Rewrite) -> None:
    """com.microsoft.DynamicQuantizeMatMul(A, B, sb, zb, bias): ``A`` quantised to uint8
    at run time by DynamicQuantizeLinear's ONNX function body (``expand.py``), then
    ``MatMulIntegerToFloat``."""
    from .expand import expand_node
    from .onnx_import import nodes_of

    a, b, sb, zb, bias = (r.input(k) for k in range(5))
    q, scale, zero = (r._name() for _ in range(3))
    dql = helper.make_node("DynamicQuantizeLinear", [a], [q, scale, zero],
                           name=f"{r.prefix}_dql")
    r.nodes += nodes_of(helper.make_graph(expand_node(dql, r.g.opset, {}), "dql", [], []))
    at = r.type_of(a)  # (what the product on words reads)
    r.types.update({scale: TensorType(np.dtype(np.float32), ()),
                    zero: TensorType(np.dtype(np.uint8), ()),
                    q: TensorType(np.dtype(np.uint8), at.shape if at is not None else None)})
    _matmul_to_float(r, q, zero, scale, b, zb, sb, bias)


def _through_float(op: str, operands: int, drop=("channels_last", "opset")):
    """onnxruntime's QLinear* op of ``operands`` quantised inputs ``(x, scale, zero)``
    then the output's ``(scale, zero)``: ``op`` on the dequantised inputs, quantised
    (onnxruntime computes them in float too)."""
    def rewrite(r: _Rewrite) -> None:
        xs = [r.op("DequantizeLinear", [r.input(3 * k), r.input(3 * k + 1),
                                        r.input(3 * k + 2)], np.float32)
              for k in range(operands)]
        attrs = {k: v for k, v in r.node.attrs if k not in drop}
        f = r.op(op, xs, np.float32, **attrs)
        _quantise(r, f, r.input(3 * operands), r.input(3 * operands + 1))
    return rewrite


def _qconcat(r: _Rewrite) -> None:
    """com.microsoft.QLinearConcat(y_scale, y_zero, (x, scale, zero)...)."""
    ins = r.node.inputs
    xs = [r.op("DequantizeLinear", list(ins[k:k + 3]), np.float32)
          for k in range(2, len(ins) - 2, 3)]
    f = r.op("Concat", xs, np.float32, axis=r.node.attr("axis", 0))
    _quantise(r, f, ins[0], ins[1])


def _quantise(r: _Rewrite, f: str, scale: str, zero: str) -> None:
    zt = r.type_of(zero) if zero else None
    r.op("QuantizeLinear", [f, scale, zero], zt.dtype if zt is not None else np.uint8,
         out=r.node.outputs[0])


#: float products of dequantised values (QDQ models) run as int8 words where they can
_DEQUANTISED = {"MatMul": dequantised_matmul, "Conv": dequantised_conv}
_REWRITES = {"MatMulInteger": _matmul_integer, "ConvInteger": _conv_integer,
             "QLinearMatMul": _qlinear_matmul, "QLinearConv": _qlinear_conv}
#: onnxruntime's QOperator format (quantize_static): its contrib ops
_MS = "com.microsoft"
_MS_REWRITES = {
    "QGemm": _qgemm, "QLinearConcat": _qconcat,
    "MatMulIntegerToFloat": _matmul_integer_to_float,
    "DynamicQuantizeMatMul": _dynamic_quantize_matmul,
    "QLinearAdd": _through_float("Add", 2), "QLinearMul": _through_float("Mul", 2),
    "QLinearAveragePool": _through_float("AveragePool", 1),
    "QLinearGlobalAveragePool": _through_float("GlobalAveragePool", 1),
    "QLinearSigmoid": _through_float("Sigmoid", 1),
    "QLinearLeakyRelu": _through_float("LeakyRelu", 1),
    "QLinearSoftmax": _through_float("Softmax", 1),
}


def _rewrite_of(n: Node):
    if n.domain in ("", "ai.onnx"):
        if n.op in _DEQUANTISED and words_enabled():
            return _DEQUANTISED[n.op]
        if n.op == "DequantizeLinear":
            return requantised_pair
        return _REWRITES.get(n.op)
    if n.domain == _MS and not n.attr("channels_last", 0):  # NHWC: refused as the op
        return _MS_REWRITES.get(n.op)
    return None


def decompose(g: Graph) -> Graph:
    """Every integer product of the graph written as int32 ops, and onnxruntime's
    QLinear* contrib ops as float ops between DequantizeLinear and QuantizeLinear (see
    the module)."""
    if not any(_rewrite_of(n) for n in g.nodes):
        return g
    nodes, consts, types, exact, remade = [], dict(g.constants), dict(g.types), {}, {}
    producers = g.producers()
    for n in g.nodes:
        fn = _rewrite_of(n)
        if fn is None:
            # the float conversion of a product computed exactly in float: that value
            if n.op == "Cast" and n.inputs[0] in exact and n.attr("to") == F32:
                n = Node("Identity", n.name, (exact[n.inputs[0]],), n.outputs)
            nodes.append(n)
            continue
        r = _Rewrite(g, n, producers, types, remade)
        if fn(r) is False:  # (declined: the node as it is)
            nodes.append(n)
            continue
        nodes += r.nodes
        remade.update({o: m for m in r.nodes for o in m.outputs if o in n.outputs})
        consts.update(r.consts)
        types.update(r.types)
        exact.update(r.exact)
    return g.replace(nodes=tuple(nodes), constants=consts, types=types)


def _per_axis(node: Node, p: np.ndarray, x: np.ndarray) -> np.ndarray:
    """A scale or zero point broadcast to ``x``: per tensor, per axis or per block."""
    if p.size == 1:
        return p.reshape(())
    axis = node.attr("axis", 1) % x.ndim
    block = node.attr("block_size", 0) or 0
    if block:
        return np.repeat(p, block, axis=axis)[tuple(slice(0, d) for d in x.shape)]
    return p.reshape((-1,) + (1,) * (x.ndim - axis - 1))


def fold_dequantize(node: Node, values: list):
    """DequantizeLinear of constants (a quantised model's weights, or polytc's float
    form of a quantised value), as the lowering computes it (onnx's reference has no
    implementation before opset 19)."""
    x, s = values[0], values[1]
    if x.dtype.kind not in "iuf" or s.dtype.kind != "f" or x.dtype.itemsize > 4:
        return None
    d = x.astype(s.dtype if x.dtype.kind == "f" else np.int32)
    if len(values) > 2 and values[2] is not None:
        d = d - _per_axis(node, values[2], x).astype(np.int32)
    return [d.astype(s.dtype) * _per_axis(node, s, x)]


def fold_quantize(node: Node, values: list):
    """polytc's QuantizeLinear to a float (``output_dtype`` FLOAT, a zero point given:
    the value in the zero point's range, as ops/quant.py computes it) of constants;
    None for ONNX's own (onnx's reference computes those)."""
    if node.attr("output_dtype", 0) != F32 or len(values) < 3 or values[2] is None:
        return None
    x, s, z = values[:3]
    info = np.iinfo(z.dtype)
    q = np.rint(x.astype(np.float32) / _per_axis(node, s, x).astype(np.float32)) + \
        _per_axis(node, z, x).astype(np.float32)
    return [np.clip(q, info.min, info.max).astype(np.float32)]
