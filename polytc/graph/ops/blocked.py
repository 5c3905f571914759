"""Ops on images in blocked channels, ``[N, C / c, H, W, c]`` (NCHWc), which the
``blocked_layout`` graph pass (``graph/layout.py``) writes: ``BlockedConv``,
``BlockedMaxPool``, ``BlockedAveragePool``, the global pools and ``Unblock`` (back to
NCHW).

With the ``c`` channels of a pixel contiguous, a pooling or a depthwise convolution runs
its vectors along the channels, each window point one unit-stride load whatever the
stride; in NCHW the vectors run along an image row, which a stride-2 window reads with
gathers or through a copy split by phase, per plane of a few hundred pixels.  The window
points outside the image are guarded by a condition on the pixel alone, the same for
every lane, instead of a padded copy.  A convolution over blocked channels reads its
weights reordered by the pass, ``[M / c, C / c, kh, kw, c_in, c_out]`` (``[M / c, C, kh,
kw, c_out]`` when it reads an NCHW image, ``[C / c, kh, kw, c]`` depthwise), so that its
register tiles' lanes run over ``c_out``, contiguous in the weights and the result.
"""
from __future__ import annotations

from .nn import _padded, _positions, _window
from .pool import _divide_by_count, _guard
from .registry import idx, literal, op


def _geometry(ctx, x, kernel, ceil_mode=False):
    spatial = x.shape[2:4]
    strides, dil, begin, out = _window(ctx, spatial, kernel, ceil_mode)
    return (list(kernel), strides, dil, begin, out)


def _guarded(x, geo, pos, fill, dtype) -> str:
    """The read of ``x`` at window positions ``pos`` (rows, columns), ``fill`` where a
    window point leaves the image."""
    cond = _guard(x, geo, pos)
    read = x("i0", "i1", *pos, "i4")
    return f"({' && '.join(cond)}) ? {read} : {literal(fill, dtype)}" if cond else read


@op("BlockedConv")
def _blocked_conv(ctx):
    """``Conv`` writing blocked channels; its weights and bias come reordered (module
    docstring), its input blocked (rank 5) or NCHW (rank 4)."""
    x, w, b = ctx.input(0), ctx.input(1), ctx.input(2, required=False)
    kernel = list(ctx.attr("kernel_shape"))
    depthwise = ctx.attr("group", 1) != 1
    c = w.shape[-1]
    geo = _geometry(ctx, x, kernel)
    out = geo[4]
    y = ctx.out(0, (x.shape[0], w.shape[0], *out, c), x.dtype)
    ctx.result.kind = "contraction"
    if y.size == 0:
        return
    i = idx(5)
    ks = ["k0", "k1"]
    ranges = {"k0": (0, kernel[0]), "k1": (0, kernel[1])}
    # (an NCHW image's plane filled, then copied into; a blocked one's by a select per
    # pixel, the same for every lane)
    src, offset = _padded(ctx, x, geo, 0, fill_first=x.rank == 4)
    pos = _positions(geo[1], geo[2], offset, 2)
    if x.rank == 4:  # an NCHW image: the channels are a reduction index of their own
        read = src(i[0], "r0", *pos)
        wread = w(i[1], "r0", *ks, i[4])
        ranges["r0"] = (0, x.shape[1])
    elif depthwise:
        read = src(i[0], i[1], *pos, i[4])
        wread = w(i[1], *ks, i[4])
    else:
        read = src(i[0], "r0", *pos, "r1")
        wread = w(i[1], "r0", *ks, "r1", i[4])
        ranges.update({"r0": (0, x.shape[1]), "r1": (0, c)})
    ctx.emit(y, i, f"{read} * {wread}", "+=!", ranges)
    if b is not None:
        ctx.emit(y, i, f"{y(*i)} + {b(i[1], i[4])}")


@op("BlockedMaxPool", "BlockedAveragePool")
def _blocked_pool(ctx):
    """``MaxPool`` (one output) or ``AveragePool`` over blocked channels."""
    x = ctx.input(0)
    kernel = list(ctx.attr("kernel_shape"))
    geo = _geometry(ctx, x, kernel, bool(ctx.attr("ceil_mode", 0)))
    y = ctx.out(0, (*x.shape[:2], *geo[4], x.shape[4]), x.dtype)
    ctx.result.kind = "reduction"
    if y.size == 0:
        return
    i = idx(5)
    ranges = {"k0": (0, kernel[0]), "k1": (0, kernel[1])}
    pos = _positions(geo[1], geo[2], geo[3], 2)
    if ctx.node.op == "BlockedMaxPool":
        ctx.emit(y, i, _guarded(x, geo, pos, -float("inf"), x.dtype), "max=!", ranges)
        return
    ctx.emit(y, i, _guarded(x, geo, pos, 0, x.dtype), "+=!", ranges)
    _divide_by_count(ctx, x, y, i, geo, 2)


@op("BlockedGlobalAveragePool", "BlockedGlobalMaxPool")
def _blocked_global(ctx):
    """The global pools over blocked channels: ``[N, C / c, 1, 1, c]``, its vectors
    along the channels."""
    x = ctx.input(0)
    y = ctx.out(0, (*x.shape[:2], 1, 1, x.shape[4]), x.dtype)
    ctx.result.kind = "reduction"
    if y.size == 0:
        return
    i = idx(5)
    ranges = {"r0": (0, x.shape[2]), "r1": (0, x.shape[3])}
    read = x(i[0], i[1], "r0", "r1", i[4])
    if ctx.node.op == "BlockedGlobalMaxPool":
        ctx.emit(y, i, read, "max=!", ranges)
    else:
        ctx.emit(y, i, read, "+=!", ranges)
        ctx.emit(y, i, f"{y(*i)} / {literal(x.shape[2] * x.shape[3], x.dtype)}")


@op("Unblock")
def _unblock(ctx):
    """``[N, C / c, H, W, c]`` -> ``[N, C, H, W]``."""
    x = ctx.input(0)
    c = x.shape[4]
    y = ctx.out(0, (x.shape[0], x.shape[1] * c, *x.shape[2:4]), x.dtype)
    ctx.result.kind = "movement"
    i = idx(4)
    ctx.emit(y, i, x(i[0], f"{i[1]} / {c}", i[2], i[3], f"{i[1]} % {c}"))
