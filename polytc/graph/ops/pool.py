"""Pooling: ``MaxPool`` (and its ``Indices``), ``AveragePool`` and ``LpPool`` over a
sliding window (the window's geometry and padded copies are ``nn.py``'s, shared with
``Conv``).  The global pools are reductions, in ``reduce.py``; pools over blocked
channels are ``blocked.py``'s."""
from __future__ import annotations

import math

import numpy as np

from .nn import (_float_only, _in_place, _inside, _numeric, _padded, _positions, _reach,
                 _scaled, _small_plane, _split_read, _window)
from .registry import equal, idx, literal, op, tc_type


def _pool_setup(ctx):
    """Output, indices, kernel ranges and window geometry of a pooling node.  (The
    global pools are reductions, in ``reduce.py``.)"""
    x = ctx.input(0)
    if x.rank < 3:
        ctx.fail(f"pooling takes (N, C, spatial...) input, not {list(x.shape)}")
    nd = x.rank - 2
    kernel = ctx.attr("kernel_shape")
    if kernel is None:
        ctx.fail("kernel_shape is required")
    kernel = list(kernel)
    strides, dil, begin, out = _window(ctx, x.shape[2:], kernel,
                                       bool(ctx.attr("ceil_mode", 0)))
    y = ctx.out(0, (*x.shape[:2], *out), x.dtype)
    ctx.result.kind = "reduction"
    ranges = {f"k{d}": (0, kernel[d]) for d in range(nd)}
    return x, y, idx(y.rank), ranges, (kernel, strides, dil, begin, out)


def _window_read(ctx, x, i, geo, fill, fill_first=False):
    """The read of window element k.. of output i..: from a copy of X padded with
    ``fill`` where a window leaves it (``_padded``), so that the window reads no guard
    and its rows vectorise (the tiler sinks them below the window loops:
    ``Tiler.sink_rows``; ResNet-18's 3x3/2 max pooling 0.44 -> 0.24 ms)."""
    kernel, strides, dil, begin, out = geo
    nd = x.rank - 2
    if strides[-1] > 1 and dil[-1] == 1 and out[-1] > 1 and _small_plane(x, geo):
        return _split_read(ctx, x, geo, fill, fill_first)
    src, offset = _padded(ctx, x, geo, fill, fill_first)
    return src(i[0], i[1], *_positions(strides, dil, offset, nd))


def _guard(x, geo, pos) -> list:
    """The conditions under which window positions ``pos`` (of X's spatial dimensions,
    after its first two) are inside X."""
    kernel, strides, dil, begin, out = geo
    guard = []
    for d in range(len(pos)):
        n = x.shape[d + 2]
        last = (out[d] - 1) * strides[d] + dil[d] * (kernel[d] - 1) - begin[d]
        guard += _inside(pos[d], 0, n, begin[d] > 0, last >= n)
    return guard


@op("MaxPool")
def _maxpool(ctx):
    _numeric(ctx, ctx.input(0))
    x, y, i, ranges, geo = _pool_setup(ctx)
    if y.size == 0:
        return
    lowest = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    wide = None if ctx.wants(1) else _lane_rounded(x, geo)
    if wide is not None:
        # output rows of whole vectors, from a copy padded as far as they read (its
        # extra lanes read ``lowest``), then the result's rows cut from them
        kernel, strides, dil, begin, out = geo
        src, offset = _padded(ctx, x, (kernel, strides, dil, begin, (*out[:-1], wide)),
                              lowest, fill_first=any(begin))
        part = ctx.temp((*y.shape[:-1], wide), x.dtype)
        pos = _positions(strides, dil, offset, x.rank - 2)
        ctx.emit(part, i, src(i[0], i[1], *pos), "max=!", ranges)
        ctx.emit(y, i, part(*i))
        return
    ctx.emit(y, i, _window_read(ctx, x, i, geo, lowest, fill_first=True), "max=!", ranges)
    if ctx.wants(1):
        _argmax_indices(ctx, x, y, i, ranges, geo)


def _lane_rounded(x, geo) -> int | None:
    """The width, a multiple of the vector's lanes, that a max pooling's output rows
    are computed in, where they are narrower or end in a partial vector and a padded
    copy of a plane that fits in half of L1 is made anyway (padding, or a small plane
    read with a stride: ``_split_read``); None elsewhere.  gcc vectorises a row of 13
    as 8 + 4 + 1 lanes, each window element a select to keep NaN: one vector of 16
    instead, over the copy padded to its reads, ran SqueezeNet's 3x3/2 pooling of 256 x
    27 x 27 in 11-13 us instead of 30 (onnxruntime's: 9), 512 x 13 x 13 10.6 instead
    of 15, 128 x 14 x 14 with pads 3.8 instead of 7.5, 2x2/2 of 64 x 28 x 28 3.4
    instead of 6.5, 3x3/2 of 32 x 56 x 56 with pads 6.8 instead of 8.2.  (Half a
    vector's width for rows of up to 8 was slower; planes read in place, 55 x 55
    unpadded, or too large to stay in L1, 112 x 112, were 4-25% slower so.)"""
    from ...machine import host

    kernel, strides, dil, begin, out = geo
    lanes = host().lanes(x.dtype.itemsize)
    if lanes < 2 or out[-1] % lanes == 0:
        return None
    need = _reach(geo)
    copied = not _in_place(x, geo) or (
        strides[-1] > 1 and dil[-1] == 1 and out[-1] > 1 and _small_plane(x, geo))
    wide = -(-out[-1] // lanes) * lanes
    need[-1] += (wide - out[-1]) * strides[-1]
    if not copied or math.prod(need) * x.dtype.itemsize > host().l1 // 2:
        return None
    return wide


def _argmax_indices(ctx, x, y, i, ranges, geo):
    """MaxPool's Indices: the flat index in X of each window's first maximum."""
    kernel, strides, dil, begin, out = geo
    nd = x.rank - 2
    spatial = x.shape[2:]
    pos = _positions(strides, dil, begin, nd)
    guard = _guard(x, geo, pos)  # reads of X itself, guarded where a window leaves it
    ind = ctx.out(1, y.shape, np.int64)
    plane = int(np.prod(spatial, dtype=np.int64))
    flat = f"int64({i[0]}) * {plane * x.shape[1]} + int64({i[1]}) * {plane}"
    # the row-major offset inside one (n, c) plane
    inner, stride = [], 1
    for d in reversed(range(nd)):
        inner.append(f"int64({pos[d]}) * {stride}" if stride != 1 else f"int64({pos[d]})")
        stride *= spatial[d]
    off = " + ".join(reversed(inner))
    cond = " && ".join(guard + [equal(x(i[0], i[1], *pos), y(*i), x.dtype)])
    ctx.emit(ind, i, f"(({cond}) ? {off} : {literal(plane, np.int64)})", "min=!", ranges)
    if ctx.attr("storage_order", 0):  # column-major offsets: recompute from the row-major
        coords, rest = [], ind(*i)
        for d in reversed(range(nd)):
            coords.append(f"(({rest}) % {spatial[d]})")
            rest = f"({rest}) / {spatial[d]}"
        coords.reverse()  # coords[d]: the coordinate along spatial dim d
        terms, stride = [], 1
        for d in range(nd):
            terms.append(f"{coords[d]} * {stride}")
            stride *= spatial[d]
        ctx.emit(ind, i, f"{flat} + {' + '.join(terms)}")
    else:
        ctx.emit(ind, i, f"{flat} + {ind(*i)}")


@op("AveragePool", "LpPool")
def _avgpool(ctx):
    _float_only(ctx, ctx.input(0))
    x, y, i, ranges, geo = _pool_setup(ctx)
    if y.size == 0:
        return
    read = _window_read(ctx, x, i, geo, 0)
    if ctx.node.op == "LpPool":
        p = int(ctx.attr("p", 2))
        term = {1: f"fabs({read})", 2: f"{read} * {read}"}.get(
            p, f"pow(fabs({read}), {literal(p, x.dtype)})")
        ctx.emit(y, i, term, "+=!", ranges)
        if p != 1:
            root = f"sqrt({y(*i)})" if p == 2 else \
                f"pow({y(*i)}, {literal(1.0 / p, x.dtype)})"
            ctx.emit(y, i, root)
        return
    ctx.emit(y, i, read, "+=!", ranges)
    _divide_by_count(ctx, x, y, i, geo, x.rank - 2)


def _divide_by_count(ctx, x, y, i, geo, nd):
    """``y(i) /=`` the number of window positions inside X (count_include_pad: inside
    the padded X), which varies with the position where windows leave it; X's ``nd``
    spatial dimensions follow its first two (NCHW, or blocked NCHWc)."""
    kernel, strides, dil, begin, out = geo
    inc = bool(ctx.attr("count_include_pad", 0))
    pos = _positions(strides, dil, begin, nd)
    count = []
    for d in range(nd):
        n = x.shape[d + 2]
        lo, hi = (-begin[d], n + _end_pad(ctx, d, nd, n, geo)) if inc else (0, n)
        last = (out[d] - 1) * strides[d] + dil[d] * (kernel[d] - 1) - begin[d]
        count += _inside(pos[d], lo, hi, -begin[d] < lo, last >= hi)
    if not count:
        ctx.emit(y, i, f"{y(*i)} / {literal(int(np.prod(kernel)), x.dtype)}")
        return
    if all(dd == 1 for dd in dil):
        # in closed form, per dimension: the window [start, start + K) clipped to
        # [lo, hi).  (As a reduction over the window, the count made isl's fusing
        # scheduler run into its deadline: 8 s for a 3x3 average pool.)
        factors, const = [], 1
        for d in range(nd):
            n = x.shape[d + 2]
            lo, hi = (-begin[d], n + _end_pad(ctx, d, nd, n, geo)) if inc else (0, n)
            last = (out[d] - 1) * strides[d] + kernel[d] - 1 - begin[d]
            if -begin[d] >= lo and last < hi:  # no window leaves the range
                const *= kernel[d]
                continue
            start = _scaled(f"i{d + 2}", strides[d]) + (f" - {begin[d]}" if begin[d] else "")
            factors.append(f"{tc_type(x.dtype)}(min({hi}, {start} + {kernel[d]}) - "
                           f"max({lo}, {start}))")
        if const != 1:
            factors.append(literal(const, x.dtype))
        ctx.emit(y, i, f"{y(*i)} / ({' * '.join(factors)})")
        return
    cnt = ctx.temp(out, x.dtype)
    ci = i[2:2 + nd]
    ranges = {f"k{d}": (0, kernel[d]) for d in range(nd)}
    one, zero = literal(1, x.dtype), literal(0, x.dtype)
    ctx.emit(cnt, ci, f"(({' && '.join(count)}) ? {one} : {zero})", "+=!", ranges)
    ctx.emit(y, i, f"{y(*i)} / {cnt(*ci)}")


def _end_pad(ctx, d, nd, n, geo):
    """The end pad of spatial dimension ``d`` (auto_pad included)."""
    kernel, strides, dil, begin, out = geo
    auto = ctx.attr("auto_pad", "NOTSET")
    if isinstance(auto, bytes):
        auto = auto.decode()
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        total = max(0, (out[d] - 1) * strides[d] + dil[d] * (kernel[d] - 1) + 1 - n)
        return total - begin[d]
    if auto == "VALID":
        return 0
    pads = list(ctx.attr("pads", None) or [0] * (2 * nd))
    return pads[nd + d]


