"""GridSample: ``X`` read at positions a tensor gives (a spatial transformer's sampler),
as comprehensions whose reads are indexed by data.

For each output position the grid holds normalised coordinates in [-1, 1], the last one
first (x along the last axis, then y, ...).  Each is unnormalised into a pixel position
(``align_corners``: -1 and 1 are the centres of the corner pixels, else their outer
edges) into a temporary ``P_d``, for nearest and linear interpolation after the padding
mode moved it (``border``: clipped into the image, ``reflection``: reflected at its
borders, then clipped).  The result sums the taps around it: one (nearest: ``rint``,
ties to even), two per axis (linear) or four (cubic, the convolution with ``A = -0.75``,
whose taps each get the padding mode).  A tap outside the image reads zero
(``zeros``); the read's index is clamped into the image, so it never leaves it.
"""
from __future__ import annotations

import itertools

from .nn import _float_only
from .registry import idx, literal, op

_CUBIC_A = -0.75


@op("GridSample")
def _grid_sample(ctx):
    x, grid = ctx.input(0), ctx.input(1)
    _float_only(ctx, x, grid)
    r = x.rank - 2
    if r < 1 or grid.rank != r + 2 or grid.shape[0] != x.shape[0] or grid.shape[-1] != r:
        ctx.fail(f"grid of shape {list(grid.shape)} for an input of shape {list(x.shape)}: "
                 f"it must be (N, out..., {r})")
    mode = ctx.attr("mode", "linear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)  # opset 16's names
    pad = ctx.attr("padding_mode", "zeros")
    align = bool(ctx.attr("align_corners", 0))
    if mode not in ("nearest", "linear", "cubic"):
        ctx.fail(f"mode '{mode}' is not supported", unsupported=True)
    if pad not in ("zeros", "border", "reflection"):
        ctx.fail(f"padding_mode '{pad}' is not supported", unsupported=True)
    out = grid.shape[:-1]
    y = ctx.out(0, (x.shape[0], x.shape[1]) + out[1:], x.dtype)
    ctx.result.kind = "opaque"
    if y.size == 0:
        return
    dt, f = x.dtype, (lambda v: literal(v, x.dtype))
    i = idx(y.rank)
    at = [i[0]] + i[2:]  # the grid's and the positions' indices
    sizes = x.shape[2:]
    pos = []
    for d, size in enumerate(sizes):
        g = grid(*at, r - 1 - d)
        p = f"({g} + {f(1)}) / {f(2)} * {f(size - 1)}" if align else \
            f"(({g} + {f(1)}) * {f(size)} - {f(1)}) / {f(2)}"
        if mode != "cubic":
            p = _padded(p, pad, size, align, f)
        t = ctx.temp(out, dt)
        ctx.emit(t, at, p)
        pos.append(t(*at))

    def tap(index, d):
        """(subscript, condition or None) of the tap at float ``index`` along ``d``: a
        cubic tap moved by the padding mode, else read only inside the image (a
        linear tap past a clipped position has weight 0; a nearest one never leaves)."""
        size = sizes[d]
        if mode == "cubic" and pad != "zeros":
            return _clamped(_padded(index, pad, size, align, f), size, f), None
        return _clamped(index, size, f), f"{index} >= {f(0)} && {index} <= {f(size - 1)}"

    def read(taps):
        subs, conds = zip(*taps)
        conds = [c for c in conds if c]
        value = x(i[0], i[1], *subs)
        return f"(({' && '.join(conds)}) ? {value} : {f(0)})" if conds else value

    if mode == "nearest":
        ctx.emit(y, i, read([tap(f"rint({p})", d) for d, p in enumerate(pos)]))
        return
    offsets = (0, 1) if mode == "linear" else (-1, 0, 1, 2)
    terms = []
    for corner in itertools.product(offsets, repeat=r):
        weights, taps = [], []
        for d, (p, o) in enumerate(zip(pos, corner)):
            base, frac = f"floor({p})", f"({p} - floor({p}))"
            weights.append(_weight(mode, o, frac, f))
            taps.append(tap(f"({base} + {f(o)})", d))
        terms.append(f"{' * '.join(weights)} * {read(taps)}")
    ctx.emit(y, i, " + ".join(terms))


def _clamped(index, size, f) -> str:
    """The int32 subscript of a float pixel ``index``, clamped into ``[0, size)``."""
    return f"int32(max({f(0)}, min({f(size - 1)}, {index})))"


def _padded(p, pad, size, align, f) -> str:
    """Pixel position ``p`` moved by the padding mode (``zeros``: unchanged)."""
    if pad == "border":
        return f"max({f(0)}, min({f(size - 1)}, {p}))"
    if pad != "reflection":
        return p
    lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    span = hi - lo
    if span <= 0:
        return f(0)
    a = f"fabs({p} - {f(lo)})"
    extra = f"fmod({a}, {f(span)})"
    flips = f"floor({a} / {f(span)})"
    reflected = f"(fmod({flips}, {f(2)}) == {f(0)} ? {extra} + {f(lo)} : " \
                f"{f(span)} - {extra} + {f(lo)})"
    return f"max({f(0)}, min({f(size - 1)}, {reflected}))"


def _weight(mode, o, t, f) -> str:
    """The weight of the tap at offset ``o`` from ``floor(p)``, ``t`` the fraction."""
    if mode == "linear":
        return f"({f(1)} - {t})" if o == 0 else t
    a = _CUBIC_A
    s = {-1: f"({t} + {f(1)})", 0: t, 1: f"({f(1)} - {t})", 2: f"({f(2)} - {t})"}[o]
    if o in (0, 1):  # |s| <= 1
        return f"(({f(a + 2)} * {s} - {f(a + 3)}) * {s} * {s} + {f(1)})"
    return f"((({f(a)} * {s} - {f(5 * a)}) * {s} + {f(8 * a)}) * {s} - {f(4 * a)})"
