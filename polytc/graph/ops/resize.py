"""Resize (and the old Upsample) as comprehensions.

Interpolation is separable, so everything is decided per resized axis, at lowering time,
in numpy (float64, the spec's formulas in the spec's order): the source coordinate of
every output position, then its *taps* (source indices, clamped into the axis as the
spec's edge padding does) and their weights (1 tap for nearest, 2 for linear, 4 for
cubic, more when antialiasing widens the filter), and for ``tf_crop_and_resize`` which
positions fall outside the input (they get ``extrapolation_value``).

The tables then become TC text:

* an index column that is ``c + floor((q * o + b) / p)`` of the output index ``o`` (any
  rational scale: 2x nearest is ``o / 2``, 2x bilinear ``(o + 1) / 2 - 1``) is written
  into the subscript, clamped with ``min``/``max`` only where it leaves the axis: the
  read stays affine;
* any other index column, and every weight column that is not constant, is computed into
  a small temporary ``T(tap, o % period)`` by a statement that looks the value up with a
  balanced tree of ``o < k ? ... : ...`` over runs of equal values, and read from there
  (a gather for indices, whose values are in range by construction).

Each axis of several taps gets its own statement, ``Y(.., o, ..) = w(0, o) * X(.., idx0,
..) + w(1, o) * X(.., idx1, ..) + ...``, reading the previous statement's result; the
axes of one tap (nearest) are plain reads, folded into the first statement.  Separate
statements measured faster than one sum over all combinations of taps (bilinear 2x up of
(1, 64, 56, 56) on one thread: 0.28 ms against 1.07 ms), and they round as the spec does
(axis by axis).  But when a later statement would read the earlier one's result through
a large divisor (align_corners: ``(55 * o + 110) / 111``) or a gather, isl takes seconds
to schedule the pair (9 s for 224 -> 299), so such axes share one statement, which sums
every combination of taps (up to ``_MAX_TERMS`` terms).

Upsample (deprecated since opset 10) has Resize-10's semantics: ``asymmetric`` coordinates
and a nearest pixel that is the floor when upsampling and the ceiling when downsampling
(onnxruntime's rule).  A model older than opset 13 reaches polytc converted by onnx's
version converter, which turns Upsample and Resize-10 into Resize-13 without setting its
``coordinate_transformation_mode``: such a node then has Resize-13's defaults.
"""
from __future__ import annotations

import math

import numpy as np

from .registry import idx, literal, op

_MAX_TERMS = 16  # taps of one statement over several axes (product over the axes)
_SPLIT_DIVISOR = 8  # the largest divisor in a read of another statement's result
_MAX_PERIOD = 4096  # the largest p tried for an affine index column or a periodic table
_MAX_TABLE = 1 << 16  # entries of a looked-up table (runs of equal values)
_COORDS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
           "asymmetric", "tf_crop_and_resize")
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


# --- the spec, per axis, in numpy -------------------------------------------------------------
def _source_coords(ctx, mode, n_in, n_out, scale, roi):
    """The source coordinate of each output position (float64) and the mask of positions
    outside the input (``tf_crop_and_resize``), else None."""
    o = np.arange(n_out, dtype=np.float64)
    width = scale * n_in  # the spec's output_width: fractional when scales are given
    outside = None
    if mode == "align_corners":
        x = np.zeros(n_out) if width == 1 else o * (n_in - 1) / (width - 1)
    elif mode == "asymmetric":
        x = o / scale
    elif mode == "tf_crop_and_resize":
        start, end = roi
        if width == 1:
            x = np.full(n_out, (end - start) * (n_in - 1) / 2)
        else:
            x = o * (end - start) * (n_in - 1) / (width - 1)
        x = x + start * (n_in - 1)
        outside = (x < 0) | (x > n_in - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(n_out, -0.5) if width == 1 else (o + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (o + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / width)
        x = offset + (o + 0.5) / scale - 0.5
    else:
        ctx.fail(f"coordinate_transformation_mode '{mode}' is not supported", unsupported=True)
    return x, outside


def _weights(kind, ratio, scale, a, antialias, nearest):
    """The filter's weights at the distances ``ratio`` (in (0, 1]) for one output
    position; the taps start at ``floor(x) + 1 - len(weights) / 2``."""
    if kind == "nearest":
        if ratio == 1:
            return [0.0, 1.0]
        up = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
              "floor": False, "ceil": True}[nearest]
        return [0.0, 1.0] if up else [1.0, 0.0]
    s = min(scale, 1.0) if antialias else 1.0
    if kind == "linear":
        first = math.floor(-1 / s) + 1 if antialias else 0
        w = [max(0.0, 1 - abs((k - ratio) * s)) for k in range(first, 2 - first)]
    else:
        first = math.floor(-2 / s) + 1 if antialias else -1

        def cubic(d):
            d = abs(d)
            if d <= 1:
                return ((a + 2) * d - (a + 3)) * d * d + 1
            return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a if d < 2 else 0.0
        w = [cubic((k - ratio) * s) for k in range(first, 2 - first)]
    total = sum(w)
    return [v / total for v in w] if antialias else w


def _axis_taps(ctx, kind, x, n_in, scale, attrs):
    """(indices, weights) of shape (n_out, taps) for source coordinates ``x``; indices
    clamped into [0, n_in)."""
    base = np.floor(x)
    ratio = np.where(x == base, 1.0, x - base)
    w = np.array([_weights(kind, float(r), scale, attrs["a"], attrs["antialias"],
                           attrs["nearest"]) for r in ratio]).reshape(len(x), -1)
    t = w.shape[1]
    # the t taps nearest x, ties to the left: for even t they start at floor(x) - t/2 + 1,
    # one earlier when x is an integer (its ratio is 1)
    start = base.astype(np.int64) - t // 2 + 1 - (x == base)
    src = start[:, None] + np.arange(t)[None, :]
    if attrs["exclude_outside"]:
        w = np.where((src < 0) | (src >= n_in), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    return src, w


def _legacy_nearest(x, scale):
    """Resize-10 / Upsample: floor when upsampling, ceiling when downsampling."""
    return (np.ceil(x) if scale < 1 else np.floor(x)).astype(np.int64)[:, None]


# --- tables as TC text ------------------------------------------------------------------------
def _affine(u):
    """(c, q, b, p) with ``u[o] == c + (q * o + b) // p`` for every o, q >= 0, 0 <= b < p;
    None when no p up to _MAX_PERIOD fits."""
    n = len(u)
    o = np.arange(n)
    d = u - u[0]
    for p in range(1, min(n, _MAX_PERIOD) + 1):
        q = int(d[p]) if p < n else 0
        if q < 0 or q * n + p >= 2 ** 31:  # decreasing, or beyond int32 subscripts
            return None
        # floor((q o + b) / p) == d  <=>  p d - q o <= b < p (d + 1) - q o
        lo = max(0, int((p * d - q * o).max()))
        hi = min(p, int((p * (d + 1) - q * o).min()))
        if lo < hi:
            return int(u[0]), q, lo, p
    return None


def _index_text(i, u, n_in):
    """(subscript, divisor) for the unclamped source indices ``u`` of output index ``i``,
    or None when they are no affine expression (of ``i`` or, for a mirrored crop, of
    ``-i``)."""
    clamped = np.clip(u, 0, n_in - 1)
    if (clamped == clamped[0]).all():
        return str(int(clamped[0])), 1
    sign = 1
    form = _affine(u)
    if form is None:
        sign, form = -1, _affine(-u)
    if form is None:
        return None
    c, q, b, p = form
    e = i if q == 1 else f"{q} * {i}"
    if b:
        e = f"{e} + {b}"
    if p > 1:
        e = f"({e}) / {p}" if " " in e else f"{e} / {p}"
    c *= sign
    if sign < 0:
        e = f"{c} - {e}" if e == i else f"{c} - ({e})"
    elif c:
        e = f"{e} + {c}" if c > 0 else f"{e} - {-c}"
    if u.min() < 0:
        e = f"max({e}, 0)"
    if u.max() > n_in - 1:
        e = f"min({e}, {n_in - 1})"
    return e, p


def _lookup(ctx, i, values, text):
    """TC text for ``values[i]``: a balanced tree of comparisons over runs of equal
    values; ``text`` writes one value."""
    cut = [0] + [k for k in range(1, len(values)) if values[k] != values[k - 1]]
    if len(cut) > _MAX_TABLE:
        ctx.fail(f"the interpolation table has {len(cut)} distinct runs (at most "
                 f"{_MAX_TABLE})", unsupported=True)

    def tree(lo, hi):  # runs lo .. hi-1
        if hi - lo == 1:
            return text(values[cut[lo]])
        mid = (lo + hi) // 2
        return f"({i} < {cut[mid]} ? {tree(lo, mid)} : {tree(mid, hi)})"
    return tree(0, len(cut))


def _period(rows):
    """The smallest p with rows[o] == rows[o % p] for every o that repeats at least
    once, else len(rows)."""
    n = len(rows)
    return next((p for p in range(1, min(n // 2, _MAX_PERIOD) + 1)
                 if (rows[p:] == rows[:n - p]).all()), n)


def _table(ctx, rows, dtype, text):
    """A temporary T(t, o) = rows[o][t], written by one statement, and the text of its
    read at output index ``{i}``: T(t, {i} % p) when the rows repeat with period p."""
    p = _period(rows)
    t = ctx.temp((rows.shape[1], p), dtype)
    k, o = "t", "o"
    rhs = _lookup(ctx, k, list(range(rows.shape[1])),
                  lambda c: _lookup(ctx, o, list(rows[:p, c]), text))
    ctx.emit(t, [k, o], rhs)
    at = "{i}" if p == len(rows) else f"{{i}} % {p}"
    return [f"{t.name}({c}, {at})" for c in range(rows.shape[1])]


# --- the op -----------------------------------------------------------------------------------
class _Axis:
    """One resized axis as TC text, per tap: its subscript and weight (``{i}`` stands for
    the output index), and the condition of the positions inside a crop."""

    def __init__(self, ctx, axis, n_in, n_out, src, w, outside, dtype):
        self.axis, self.n_out = axis, n_out
        w = w.astype(dtype)  # as the literals will be: repeats show in the rounded weights
        if (np.count_nonzero(w, axis=1) == 1).all() and (w.max(axis=1) == 1).all():
            src, w = src[np.arange(n_out), w.argmax(axis=1)][:, None], None  # one tap
        elif (w == w[0]).all():
            w = w[:1]  # the same weights everywhere: literals
        self.taps = src.shape[1]
        forms = [_index_text("{i}", src[:, t], n_in) for t in range(self.taps)]
        subs = [f and f[0] for f in forms]
        missing = [t for t, f in enumerate(forms) if f is None]
        # whether a statement may read this axis of another's result: isl's dependences
        # through large divisors or gathers cost seconds
        self.simple = all(f and f[1] <= _SPLIT_DIVISOR for f in forms)
        if missing:
            reads = _table(ctx, np.clip(src[:, missing], 0, n_in - 1), np.int32,
                           lambda v: str(int(v)))
            for t, read in zip(missing, reads):
                subs[t] = read
        self.subs = subs
        # a weight is None (1), a float (the same everywhere) or the text of a table read
        if w is None:
            self.weight = [None] * self.taps
        elif len(w) == 1:
            self.weight = [float(v) for v in w[0]]
        else:
            self.weight = _table(ctx, w, dtype, lambda v: literal(v, dtype))
        self.inside = None
        if outside is not None and outside.any():
            keep = np.flatnonzero(~outside)
            if len(keep) and (np.diff(keep) == 1).all():
                conds = ([f"{{i}} >= {keep[0]}"] if keep[0] > 0 else []) + \
                    ([f"{{i}} < {keep[-1] + 1}"] if keep[-1] + 1 < n_out else [])
                self.inside = " && ".join(conds)
            else:
                self.inside = _lookup(ctx, "{i}", list((~outside).astype(int)), str) + " == 1"


def _lower(ctx, x, out_shape, axes, taps_of, extrapolation):
    """Emit the statements that resize ``x`` to ``out_shape`` along ``axes``."""
    resized = []
    for a in axes:
        src, w, outside = taps_of(a)
        resized.append(_Axis(ctx, a, x.shape[a], out_shape[a], src, w, outside, x.dtype))
    # one statement per axis of several taps (measured faster than one statement over
    # all taps: the reads along the other axes stay contiguous) where isl schedules that
    # quickly or one statement would sum too many terms; the single-tap axes (plain reads)
    # go with the first.  Shrinking axes come first, from the outermost, growing ones
    # last, innermost first, so that the passes along inner axes, whose reads are
    # gathers, see the fewest rows.
    def order(ax):
        ratio = ax.n_out / x.shape[ax.axis]
        return ratio, ax.axis if ratio < 1 else -ax.axis
    multi = sorted((ax for ax in resized if ax.taps > 1), key=order)
    split = all(ax.simple for ax in multi[1:]) or \
        math.prod(ax.taps for ax in multi) > _MAX_TERMS
    passes = [[ax] for ax in multi] if split else [multi]
    passes = passes or [[]]
    passes[0] += [ax for ax in resized if ax.taps == 1]
    cur = x
    for k, group in enumerate(passes):
        shape = list(cur.shape)
        for ax in group:
            shape[ax.axis] = ax.n_out
        y = ctx.out(0, shape, x.dtype) if k == len(passes) - 1 else ctx.temp(shape, x.dtype)
        i = idx(x.rank)
        sums = []
        for combo in np.ndindex(*[ax.taps for ax in group]):
            sub, factors, const = list(i), [], 1.0
            for ax, t in zip(group, combo):
                sub[ax.axis] = ax.subs[t].format(i=i[ax.axis])
                w = ax.weight[t]
                if isinstance(w, float):
                    const *= w
                elif w is not None:
                    factors.append(w.format(i=i[ax.axis]))
            if const == 0:
                continue
            if const != 1:
                factors.insert(0, literal(const, x.dtype))
            sums.append(" * ".join(factors + [cur(*sub)]))
        rhs = " + ".join(sums) or literal(0, x.dtype)
        conds = [ax.inside.format(i=i[ax.axis]) for ax in group if ax.inside]
        if conds:
            rhs = f"({' && '.join(conds)}) ? {rhs} : {literal(extrapolation, x.dtype)}"
        ctx.emit(y, i, rhs)
        cur = y


def _floats(v):
    return [float(s) for s in np.asarray(v, np.float64).reshape(-1)]


@op("Resize", "Upsample")
def _resize(ctx):
    x = ctx.input(0)
    legacy = ctx.node.op == "Upsample"
    if legacy:
        if len(ctx.inputs) > 1:
            scales = _floats(ctx.const_input(1))
        elif ctx.attr("scales") is not None:  # Upsample-7
            scales = _floats(ctx.attr("scales"))
        else:
            ctx.fail("no scales given")
        roi = sizes = None
    else:
        def given(k):
            v = ctx.const_input(k, required=False) if len(ctx.inputs) > k else None
            return None if v is None or np.asarray(v).size == 0 else v
        roi, scales, sizes = given(1), given(2), given(3)
        if (scales is None) == (sizes is None):
            ctx.fail("exactly one of scales and sizes must be given")
        scales = None if scales is None else _floats(scales)
        sizes = None if sizes is None else [int(s) for s in np.asarray(sizes).reshape(-1)]
        roi = None if roi is None else _floats(roi)
    kind = ctx.attr("mode", "nearest")
    if kind not in ("nearest", "linear", "cubic"):
        ctx.fail(f"mode '{kind}' is not supported", unsupported=True)
    coord = "asymmetric" if legacy else ctx.attr("coordinate_transformation_mode", "half_pixel")
    if coord not in _COORDS:
        ctx.fail(f"coordinate_transformation_mode '{coord}' is not supported", unsupported=True)
    nearest = ctx.attr("nearest_mode", "round_prefer_floor")
    if nearest not in _NEAREST:
        ctx.fail(f"nearest_mode '{nearest}' is not supported", unsupported=True)
    policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
    if policy not in ("stretch", "not_larger", "not_smaller"):
        ctx.fail(f"keep_aspect_ratio_policy '{policy}' is not supported", unsupported=True)
    if kind != "nearest" and x.dtype.kind != "f":
        ctx.fail(f"{kind} interpolation of {x.dtype.name} data", unsupported=True)
    antialias = bool(ctx.attr("antialias", 0)) and kind != "nearest"

    rank = x.rank
    axes = ctx.attr("axes")
    if axes is None:
        axes = list(range(rank))
    else:
        axes = [int(a) + rank if int(a) < 0 else int(a) for a in axes]
        if any(not 0 <= a < rank for a in axes) or len(set(axes)) != len(axes):
            ctx.fail(f"axes {list(ctx.attr('axes'))} are invalid for rank {rank}")
    given = scales if sizes is None else sizes
    if len(given) != len(axes):
        ctx.fail(f"{len(given)} {'scales' if sizes is None else 'sizes'} for {len(axes)} axes")
    if roi is not None and len(roi) != 2 * len(axes):
        ctx.fail(f"roi has {len(roi)} values for {len(axes)} axes (wants {2 * len(axes)})")
    if coord == "tf_crop_and_resize" and roi is None:
        ctx.fail("tf_crop_and_resize needs roi")

    scale, out = {}, list(x.shape)
    if sizes is not None:
        if min(sizes) < 0:
            ctx.fail(f"negative sizes {sizes}")
        ratio = {a: s / x.shape[a] if x.shape[a] else 1.0 for a, s in zip(axes, sizes)}
        if policy == "stretch":
            scale = ratio
            out = [sizes[axes.index(a)] if a in axes else d for a, d in enumerate(x.shape)]
        else:
            s = (min if policy == "not_larger" else max)(ratio.values())
            scale = {a: s for a in axes}
            out = [int(s * d + 0.5) if a in axes else d for a, d in enumerate(x.shape)]
    else:
        if min(scales) <= 0:
            ctx.fail(f"scales {scales} must be positive")
        scale = dict(zip(axes, scales))
        out = [int(math.floor(scale[a] * d)) if a in axes else d
               for a, d in enumerate(x.shape)]
    roi_of = {a: (roi[k], roi[k + len(axes)]) for k, a in enumerate(axes)} if roi else {}
    attrs = {"a": float(ctx.attr("cubic_coeff_a", -0.75)), "antialias": antialias,
             "nearest": nearest, "exclude_outside": bool(ctx.attr("exclude_outside", 0))}

    def identity(a):
        return out[a] == x.shape[a] and math.isclose(scale[a], 1.0) and (
            coord != "tf_crop_and_resize" or roi_of[a] == (0.0, 1.0))
    moved = [a for a in axes if not identity(a)]
    if not moved:
        ctx.view(0, x, x.shape)
        return
    if x.size == 0 or any(out[a] == 0 for a in moved):
        ctx.const(0, np.zeros(out, x.dtype))
        return
    ctx.result.kind = "movement" if kind == "nearest" else "opaque"

    def taps_of(a):
        xs, outside = _source_coords(ctx, coord, x.shape[a], out[a], scale[a], roi_of.get(a))
        if legacy and kind == "nearest":
            u = _legacy_nearest(xs, scale[a])
            return u, np.ones_like(u, dtype=np.float64), outside
        return (*_axis_taps(ctx, kind, xs, x.shape[a], scale[a], attrs), outside)
    _lower(ctx, x, out, moved, taps_of, float(ctx.attr("extrapolation_value", 0.0)))
