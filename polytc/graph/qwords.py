"""Quantised products on int8 words (``graph/quantised.py`` calls these): where the CPU
has an int8 dot-product instruction (``Machine.int8_dot``, or ``POLYTC_INT8_DOT``), a
product of uint8 activations by constant weights whose centred values are int8 runs as
polytc's ``MatMulWords``/``ConvWords`` (``ops/words.py``: four 8-bit values to an int32
word, one ``dot4`` each), and the QDQ patterns of statically quantised models are
recognised: a product of two dequantised values, and an activation's quantise-dequantise
round trip.  Each function takes the quantised pass's rewrite of one node (``r``) and
returns the value it made, True, or None/False when it does not apply (then nothing is
made).
"""
from __future__ import annotations

import math

import numpy as np
import onnx

from .. import config
from ..machine import host

I32, F32 = onnx.TensorProto.INT32, onnx.TensorProto.FLOAT


def words_enabled() -> bool:
    """Whether integer products run as ``dot4`` of words (``config.int8_dot``)."""
    return config.int8_dot(host().int8_dot)


def unsigned(r, a: str, za: str):
    """``(a, za)`` as uint8 values: ``a`` itself when it is uint8; an int8 ``a`` that
    a QuantizeLinear makes with the constant zero point ``za`` is made again with
    ``za + 128`` as a uint8 zero point (the same values plus 128: the clip ranges
    shift alike; ``quantize_static``'s default int8 activations).  None otherwise."""
    t = r.type_of(a)
    if t is not None and t.dtype == np.uint8:
        return a, za
    q, zv = r.remade.get(a) or r.producers.get(a), r.value(za) if za else None
    if t is None or t.dtype != np.int8 or zv is None or zv.size != 1 or q is None or \
            q.op != "QuantizeLinear" or q.domain or len(q.inputs) < 3 or \
            not _same(r, q.inputs[2], za) or q.attr("block_size", 0):
        return None
    z8 = r.const((zv.astype(np.int32) + 128).astype(np.uint8))
    attrs = {k: v for k, v in q.attrs if k != "output_dtype"}
    return r.op("QuantizeLinear", [q.inputs[0], q.inputs[1], z8], np.uint8, **attrs), z8


def words(r, a: str, za: str, b: str, zb: str, out: str | None = None, split=False):
    """The int32 product ``(A - a0)(B - b0)`` as ``MatMulWords(QuantWords(A), Bw) -
    a0 * colsum(B - b0)`` where the CPU has an int8 dot-product instruction
    (``Machine.int8_dot``): ``A`` uint8 (``unsigned``) of rows of a multiple of 4,
    ``a0`` one value, ``B`` a constant matrix whose centred values are int8, packed four
    rows to a word (``Bw(k, j)`` holds ``B(4k..4k+3, j)``).  Its name (``out`` when
    given), or None (nothing done) otherwise; ``split``: ``(product, a0 * colsum or
    None)`` instead (``scaled`` takes them)."""
    at = r.type_of(a)
    bv, zbv = r.value(b), r.value(zb) if zb else np.zeros((), np.int32)
    if not words_enabled() or at is None or at.dtype.itemsize != 1 or at.shape is None \
            or at.rank < 2 or not isinstance(at.shape[-1], int) or at.shape[-1] % 4 or \
            bv is None or bv.ndim != 2 or bv.dtype.itemsize != 1 or zbv is None or \
            zbv.size not in (1, bv.shape[1]) or (za and not _one(r, za)):
        return None
    centred = bv.astype(np.int32) - zbv.reshape(-1).astype(np.int32)
    if not _int8(centred) or centred.shape[0] != at.shape[-1]:
        return None
    made = unsigned(r, a, za)
    if made is None:
        return None
    a, za = made
    k, n = centred.shape
    packed = np.ascontiguousarray(centred.astype(np.int8).reshape(k // 4, 4, n)
                                  .transpose(0, 2, 1)).view(np.int32).reshape(k // 4, n)
    aw = r.op("QuantWords", [a], np.int32)
    if not za and not split:
        return r.op("MatMulWords", [aw, r.const(packed)], np.int32, out=out)
    prod = r.op("MatMulWords", [aw, r.const(packed)], np.int32)
    corr = _zero_sums(r, za, centred.sum(axis=0, dtype=np.int32)) if za else None
    return (prod, corr) if split else r.op("Sub", [prod, corr], np.int32, out=out)


def _zero_sums(r, zero: str, sums) -> str:
    """``zero * sums`` in int32 (``sums``: the centred weights' sums, a constant; the
    zero point one value, constant or not): what the zero point takes off the sums."""
    zv = r.value(zero)
    return r.const(zv.astype(np.int32).reshape(()) * sums) if zv is not None else \
        r.op("Mul", [r.op("Cast", [zero], np.int32, to=I32), r.const(sums)], np.int32)


def scaled(r, made, scale: str, axis: int, n: int, out: str) -> None:
    """``out = float(product - zero sums) * scale`` of a ``split`` product ``made``, as
    a DequantizeLinear along ``axis`` (``n`` elements): the scale and the zero sums are
    the kernel's inputs, not numbers in its code (a literal scale per layer made every
    layer's kernel another: a QDQ BERT-2L compiled 29 kernels where 11 serve)."""
    prod, corr = made
    sv = r.value(scale)
    if corr is None and sv is not None and sv.size == 1:
        r.op("DequantizeLinear", [prod, r.const(sv.reshape(()))], np.float32, out=out)
        return
    if sv is not None:
        scale = r.const(np.broadcast_to(sv.reshape(-1), (n,)).astype(np.float32))
    zero = corr or r.const(np.zeros(n, np.int32))
    r.op("DequantizeLinear", [prod, scale, zero], np.float32, out=out, axis=axis)


def conv_words(r, x: str, zx: str, w: str, zw: str, attrs: tuple,
               out: str | None = None, split=False):
    """The int32 convolution of ``x - x0`` by ``w - w0`` as ``ConvWords(x, Ww, x0) -
    x0 * sums(w - w0)`` (``ops/words.py``: four input channels to a word) where the CPU
    has an int8 dot-product instruction: ``x`` uint8 (``unsigned``) with one zero
    point, ``w`` a constant whose centred values are int8 (``w0`` per tensor or per
    output channel), no groups.  Its name (``out`` when given), or None (nothing
    done); ``split``: as ``words``'s."""
    xt = r.type_of(x)
    wv, zwv = r.value(w), r.value(zw) if zw else np.zeros((), np.int32)
    if not words_enabled() or xt is None or xt.dtype.itemsize != 1 or wv is None or \
            wv.ndim < 3 or wv.dtype.itemsize != 1 or (xt.shape is not None and (
                xt.rank != wv.ndim or xt.shape[1] != wv.shape[1])) or \
            zwv is None or zwv.size not in (1, wv.shape[0]) or \
            dict(attrs).get("group", 1) != 1 or (zx and not _one(r, zx)):
        return None
    lead = (-1,) + (1,) * (wv.ndim - 1)
    centred = wv.astype(np.int32) - zwv.reshape(lead if zwv.size > 1 else ()).astype(
        np.int32)
    made = unsigned(r, x, zx) if _int8(centred) else None
    if made is None:
        return None
    x, zx = made
    m, c = centred.shape[:2]
    c4 = -(-c // 4)
    padded = np.zeros((m, 4 * c4) + centred.shape[2:], np.int8)
    padded[:, :c] = centred
    packed = np.ascontiguousarray(np.moveaxis(padded.reshape(
        (m, c4, 4) + centred.shape[2:]), 2, -1)).view(np.int32).reshape(
        (m, c4) + centred.shape[2:])
    ins = [x, r.const(packed)] + ([zx] if zx else [])
    if not zx and not split:
        return r.op("ConvWords", ins, np.int32, out=out, **dict(attrs))
    acc = r.op("ConvWords", ins, np.int32, **dict(attrs))
    sums = centred.reshape(m, -1).sum(axis=1, dtype=np.int32)
    if split:
        return acc, _zero_sums(r, zx, sums) if zx else None
    corr = _zero_sums(r, zx, sums.reshape(lead[:-1]))
    return r.op("Sub", [acc, corr], np.int32, out=out)


def dequantised_matmul(r) -> bool:
    """A QDQ model's ``MatMul(DequantizeLinear(xq, sx, zx), DequantizeLinear(wq, sw,
    zw))`` (``quantize_static``) with one scale ``sx`` and constant int8 weights ``wq``
    (``sw`` per tensor or per column) as onnxruntime runs it: ``float(MatMulWords(..) -
    zx * colsum) * (sx * sw)`` (``words``); False (nothing done) otherwise."""
    pair = _dequantised(r, axis=1)
    if pair is None:
        return False
    (xq, sx, zx), (wq, sw, zw) = pair
    made = words(r, xq, zx, wq, zw, split=True)
    if made is None:
        return False
    n = r.value(wq).shape[1]
    scaled(r, made, r.multiplier(sx, sw, "", 0), -1, n, r.node.outputs[0])
    return True


def dequantised_conv(r) -> bool:
    """A QDQ model's ``Conv(DequantizeLinear(xq, sx, zx), DequantizeLinear(wq, sw, zw),
    bias)`` as onnxruntime runs it: ``float(ConvWords(..) - zx * sums) * (sx * sw) +
    bias`` (``conv_words``; ``sw`` per tensor or per output channel); False
    (nothing done) otherwise."""
    pair = _dequantised(r, axis=0)
    if pair is None:
        return False
    (xq, sx, zx), (wq, sw, zw) = pair
    made = conv_words(r, xq, zx, wq, zw, r.node.attrs, split=True)
    if made is None:
        return False
    wv = r.value(wq)
    column = wv.ndim - 2
    y = r.node.outputs[0] if not r.input(2) else r._name()
    scaled(r, made, r.multiplier(sx, sw, "", 0), 1, wv.shape[0], y)
    if r.input(2):
        b = r.op("Unsqueeze", [r.input(2), r.const(np.arange(1, column + 1))], np.float32)
        r.op("Add", [y, b], np.float32, out=r.node.outputs[0])
    return True


def _dequantised(r, axis: int):
    """``((xq, sx, zx), (wq, sw, zw))`` when the node's first two inputs are
    ``DequantizeLinear`` outputs, ``sx`` one value and ``sw`` a constant, one value or
    one per element of ``wq``'s ``axis``; else None."""
    pa, pb = (r.producers.get(v) for v in r.node.inputs[:2])
    if pa is None or pb is None or any(p.op != "DequantizeLinear" or p.domain or
                                       p.attr("block_size", 0) for p in (pa, pb)):
        return None
    (xq, sx, zx), (wq, sw, zw) = ((p.inputs + ("", ""))[:3] for p in (pa, pb))
    swv, wt = r.value(sw), r.type_of(wq)
    if not _one(r, sx) or swv is None or wt is None or wt.rank is None or wt.rank < 2 or \
            (swv.size > 1 and (swv.ndim != 1 or pb.attr("axis", 1) % wt.rank != axis)):
        return None
    return (xq, sx, zx), (wq, sw, zw)


def requantised_pair(r) -> bool:
    """``DequantizeLinear(QuantizeLinear(x, s, z), s, z)`` (a QDQ model's round trip
    of an activation, per tensor) in float: ``(QuantizeLinear(x, s, z) as a float in
    ``z``'s range) - z) * s``, the same values (whole numbers, exact in float) without
    the 8-bit value in between, whose conversions kept gcc from vectorising the loops
    they were in (a QDQ ResNet-18's epilogues ran scalar).  The 8-bit value stays for
    its other readers (a product on int8 words).  False (nothing done) otherwise, and
    for a constant ``x`` (folded as it is)."""
    q = r.producers.get(r.input(0))
    if q is None or q.op != "QuantizeLinear" or q.domain or len(q.inputs) < 3 or \
            not q.inputs[2] or len(r.node.inputs) < 3 or q.attr("output_dtype", 0) or \
            any(n.attr("block_size", 0) for n in (q, r.node)):
        return False
    (s, z), (s2, z2) = q.inputs[1:3], r.node.inputs[1:3]
    zt, xt = r.type_of(z), r.type_of(q.inputs[0])
    if zt is None or zt.dtype.itemsize != 1 or xt is None or xt.dtype != np.float32 or \
            r.value(q.inputs[0]) is not None or \
            not (_same(r, s, s2) and _same(r, z, z2)) or not _one(r, z) or not _one(r, s):
        return False
    f = r.op("QuantizeLinear", q.inputs[:3], np.float32, output_dtype=F32)
    r.op("DequantizeLinear", [f, s, z], np.float32, out=r.node.outputs[0])  # (of a float)
    return True


def _int8(centred: np.ndarray) -> bool:
    """Whether the centred weights fit int8 (the signed operand of ``dot4``)."""
    return centred.min(initial=0) >= -128 and centred.max(initial=0) <= 127


def _same(r, a: str, b: str) -> bool:
    """Whether the values ``a`` and ``b`` are one (a name, or equal constants)."""
    if a == b:
        return True
    va, vb = r.value(a), r.value(b)
    return va is not None and vb is not None and va.dtype == vb.dtype and \
        va.shape == vb.shape and bool(np.array_equal(va, vb))


def _one(r, v: str) -> bool:
    """Whether the value ``v`` has one element (its shape known)."""
    t = r.type_of(v)
    return t is not None and t.static and math.prod(t.shape) == 1
