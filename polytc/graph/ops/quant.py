"""Linear quantisation, elementwise: ``QuantizeLinear`` (``y = saturate(round(x / s) +
z)``, rounding half to even, as onnxruntime computes it in the input's float type) and
``DequantizeLinear`` (``y = float(int32(x) - int32(z)) * s``).  The scale and zero point
are per tensor (one element), per axis (1-D along ``axis``) or per block (``block_size``
elements of ``axis`` share one).  The integer products of quantised models are rewritten
into int32 ops before lowering (``graph/quantised.py``); ``DynamicQuantizeLinear`` runs
as its ONNX function body (``graph/expand.py``)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from .registry import idx, literal, op, tc_type

#: the integer types a quantised value may have, with their ranges
_RANGES = {np.dtype(t): (np.iinfo(t).min, np.iinfo(t).max)
           for t in (np.int8, np.uint8, np.int16, np.uint16, np.int32)}


def _param_read(ctx, ref, x, i, what):
    """The read of a scale or zero point ``ref`` at element ``i`` of ``x``."""
    if ref.size == 1:
        return ref(*[0] * ref.rank) if ref.rank else ref.name
    axis = ctx.attr("axis", 1)
    axis = axis + x.rank if axis < 0 else axis
    block = ctx.attr("block_size", 0) or 0
    if not 0 <= axis < x.rank:
        ctx.fail(f"axis {ctx.attr('axis', 1)} out of range for an input of rank {x.rank}")
    if block > 0:
        want = tuple(-(-d // block) if k == axis else d for k, d in enumerate(x.shape))
        if ref.shape != want:
            ctx.fail(f"{what} of shape {list(ref.shape)} for blocks of {block} along axis "
                     f"{axis} of {list(x.shape)}: expected {list(want)}")
        return ref(*[f"{v} / {block}" if k == axis else v for k, v in enumerate(i)])
    if ref.rank != 1 or ref.shape[0] != x.shape[axis]:
        ctx.fail(f"{what} of shape {list(ref.shape)}: expected one element, or "
                 f"{x.shape[axis]} along axis {axis} of {list(x.shape)}")
    return ref(i[axis])


@op("QuantizeLinear")
def _quantize(ctx):
    x, s = ctx.input(0), ctx.input(1)
    z = ctx.input(2, required=False) if len(ctx.inputs) > 2 else None
    to = ctx.attr("output_dtype", 0)
    # polytc's own float output (graph/quantised.py): the quantised value as a float of
    # the input's type, in the zero point's range; a conversion to uint8 and back kept
    # gcc from vectorising the loop (4x slower)
    as_float = to == onnx.TensorProto.FLOAT and z is not None and z.dtype.kind in "iu"
    dtype = z.dtype if z is not None else \
        np.dtype(helper.tensor_dtype_to_np_dtype(to)) if to else np.dtype(np.uint8)
    if dtype not in _RANGES or dtype == np.int32:
        ctx.fail(f"quantising to {dtype.name} is not supported (int8, uint8, int16, "
                 "uint16 are)", unsupported=True)
    if x.dtype.kind not in "fi" or s.dtype.kind != "f":
        ctx.fail(f"quantising {x.dtype.name} with a {s.dtype.name} scale is not supported",
                 unsupported=True)
    ft = x.dtype if x.dtype.kind == "f" else s.dtype
    t, lo, hi = tc_type(ft), *_RANGES[dtype]
    y = ctx.out(0, x.shape, ft if as_float else dtype)
    i = idx(x.rank)
    xs = x(*i) if x.rank else x.name
    # fdivide: the quotient itself, never a product with the reciprocal (Options.
    # reciprocal), which moves ties: -2.5 / (5 / 255.0f) is -127.49999, not -127.5
    v = f"fdivide({t}({xs}), {t}({_param_read(ctx, s, x, i, 'scale')}))"
    r = f"rint({v})"  # half to even
    if z is not None:
        r = f"{r} + {t}({_param_read(ctx, z, x, i, 'zero point')})"
    r = f"max({literal(lo, ft)}, min({literal(hi, ft)}, {r}))"
    ctx.emit(y, i, r if as_float else f"{tc_type(dtype)}({r})")
    ctx.result.kind = "elementwise"


@op("DequantizeLinear")
def _dequantize(ctx):
    x, s = ctx.input(0), ctx.input(1)
    z = ctx.input(2, required=False) if len(ctx.inputs) > 2 else None
    # a float x: polytc's QuantizeLinear to a float, whole numbers in the zero point's
    # range (graph/qwords.py: a round trip in float)
    if (x.dtype not in _RANGES and x.dtype != s.dtype) or s.dtype.kind != "f":
        ctx.fail(f"dequantising {x.dtype.name} with a {s.dtype.name} scale is not "
                 "supported", unsupported=True)
    y = ctx.out(0, x.shape, s.dtype)
    i = idx(x.rank)
    xs = x(*i) if x.rank else x.name
    t = tc_type(s.dtype)
    cast = t if x.dtype.kind == "f" else "int32"
    d = f"{cast}({xs})" if x.dtype != np.int32 else xs
    if z is not None:
        d = f"({d} - {cast}({_param_read(ctx, z, x, i, 'zero point')}))"
    ctx.emit(y, i, f"{t}({d}) * {_param_read(ctx, s, x, i, 'scale')}")
    ctx.result.kind = "elementwise"
