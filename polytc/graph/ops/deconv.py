"""ConvTranspose (a "deconvolution") as convolutions, one per phase of the output, and
Col2Im (blocks summed back into an image) at the end.

Input element ``i`` of X, weighted by kernel tap ``k``, lands on output position
``o = i * s + k * d - b`` (stride ``s``, dilation ``d``, begin pad ``b``), so

    Y(n, m, o) = sum over c, k of X(n, c, i) * W(c, m, k)  where  i * s = o + b - k * d.

Read as a gather over the output, the taps that reach ``o`` depend on its phase ``p = o
% s`` only: with ``o = q s + p``, tap ``k`` lands there iff ``(p + b - k d) % s == 0``,
and then reads ``i = q + (p + b - k d) / s``.  Those taps are every ``s / gcd(s, d)``-th
of the kernel, so each phase is a dense stride-1 convolution over X with its own part of
the kernel, one statement per phase (``s1 * s2 ..`` of them):

    T(n, m, p.., q..) +=! X(n, c, q + e_p + k d / gcd(s, d) ..) * W(c, m, t_p - k s / gcd ..)

(``e_p``, ``t_p``: the read and the tap of the phase's last tap; X padded with zeros where
the reads leave it).  Each is the plain product the tiler register-tiles (as Conv's),
and together they do exactly the transposed convolution's multiply-adds: inserting
``s - 1`` zeros between X's elements and convolving would do ``s^d`` times as many (a
4x4/2 decoder layer 1.3 ms, the phases 0.26 ms).  Left-hand indices are plain, so the
phases write T, one slice each, and a last statement gathers ``Y(n, m, o..) = T(n, m, o %
s.., o / s..)`` (plus the bias).  With every stride 1 there is one phase: Y directly.
Groups: W is (C, M / group, K..); output channel ``m`` reads the input channels of its
group ``m / (M / group)``.

Output sizes and begin pads follow the spec: ``output_shape`` (or ``auto_pad`` SAME_*:
``output_shape = in * s``) fixes the output and the pads are derived from it (the odd
pad at the end for SAME_UPPER, at the beginning otherwise); else ``pads`` do.  A derived
total pad may be negative (an ``output_shape`` larger than the full result): the extra
positions receive no input and hold the bias.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from .nn import _float_only, _kernel, _padded, _window_attrs
from .registry import idx, literal, op


def _geometry(ctx, spatial, kernel):
    """Strides, dilations, begin pads and output sizes of a transposed convolution."""
    nd = len(spatial)
    strides, dil, auto = _window_attrs(ctx, nd, kernel)
    adj = list(ctx.attr("output_padding", None) or [0] * nd)
    if len(adj) != nd:
        ctx.fail(f"output_padding {adj} does not match {nd} spatial dimension(s)")
    if any(a < 0 or (a >= s and a >= d) for a, s, d in zip(adj, strides, dil)):
        ctx.fail(f"output_padding {adj} must be less than the strides {strides} or "
                 f"the dilations {dil}")
    if auto not in ("NOTSET", "", "SAME_UPPER", "SAME_LOWER", "VALID"):
        ctx.fail(f"unknown auto_pad '{auto}'")
    # the extent of the full result: every input element's every tap
    full = [s * (n - 1) + a + d * (k - 1) + 1
            for n, s, a, d, k in zip(spatial, strides, adj, dil, kernel)]
    out = ctx.attr("output_shape", None)
    if out is None and auto in ("SAME_UPPER", "SAME_LOWER"):
        out = [n * s for n, s in zip(spatial, strides)]
    if out is not None:
        out = list(out)
        if len(out) != nd:
            ctx.fail(f"output_shape {out} does not match {nd} spatial dimension(s)")
        total = [f - o for f, o in zip(full, out)]
        begin = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
        return strides, dil, begin, out
    pads = [0] * (2 * nd) if auto == "VALID" else list(ctx.attr("pads", None) or [0] * (2 * nd))
    if len(pads) != 2 * nd:
        ctx.fail(f"pads {pads} do not match {nd} spatial dimension(s)")
    return strides, dil, pads[:nd], [f - b - e for f, b, e in zip(full, pads[:nd], pads[nd:])]


@op("ConvTranspose")
def _conv_transpose(ctx):
    x, w, b = ctx.input(0), ctx.input(1), ctx.input(2, required=False)
    _float_only(ctx, x, w, b)
    if x.rank < 3 or w.rank != x.rank:
        ctx.fail(f"input {list(x.shape)} and weights {list(w.shape)} do not make a "
                 "transposed convolution")
    if x.dtype != w.dtype or (b is not None and b.dtype != x.dtype):
        ctx.fail("inputs have different types")
    nd = x.rank - 2
    N, C = x.shape[:2]
    Cw, Mg = w.shape[:2]
    kernel = _kernel(ctx, w)
    group = ctx.attr("group", 1)
    if group < 1 or C != Cw or C % group:
        ctx.fail(f"{C} input channels and weights for {Cw} do not make {group} group(s)")
    Cg, M = C // group, Mg * group
    if b is not None and b.shape != (M,):
        ctx.fail(f"bias of shape {list(b.shape)} for {M} output channels")
    strides, dil, begin, out = _geometry(ctx, x.shape[2:], kernel)
    y = ctx.out(0, (N, M, *out), x.dtype)
    ctx.result.kind = "contraction"
    if y.size == 0:
        return
    i = idx(y.rank)
    if 0 in x.shape or 0 in kernel:  # nothing lands on the output
        ctx.emit(y, i, b(i[1]) if b is not None else literal(0, y.dtype))
        return
    phases = [_phases(s, d, k, p, o) for s, d, k, p, o in zip(strides, dil, kernel, begin, out)]
    steps = [d // math.gcd(s, d) for s, d in zip(strides, dil)]  # X's step between taps
    # the input positions the phases read, as far as they leave X: a copy padded with zeros
    lo = [min([0] + [e for _, ks, e, _ in ph if ks]) for ph in phases]
    hi = [max([n] + [e + (len(ks) - 1) * st + q for _, ks, e, q in ph if ks])
          for ph, st, n in zip(phases, steps, x.shape[2:])]
    geo = ([1] * nd, [1] * nd, [1] * nd, [-v for v in lo], [h - v for h, v in zip(hi, lo)])
    src, offset = _padded(ctx, x, geo, 0, fill_first=group == 1)
    shift = [-v - o for v, o in zip(lo, offset)]  # from a position in X to one in src
    # one phase only (every stride 1): Y itself, else T(n, m, p.., q..) = Y(n, m, q s + p ..)
    split = any(s > 1 for s in strides)
    if src is x and split:
        # read from a copy all the same: reading X itself, isl fuses the phases with the
        # gather into Y along the output channels, and the tiler then runs each channel
        # alone, W's values one at a time (2x2/2 of 256 x 14 x 14: 1.8 ms, with the copy
        # 0.25 ms)
        src = ctx.temp(x.shape, x.dtype)
        ctx.emit(src, idx(x.rank), x(*idx(x.rank)))
    t = ctx.temp((N, M, *strides, *[-(-o // s) for o, s in zip(out, strides)]), x.dtype) \
        if split else y
    ti = idx(t.rank)
    if split:  # a temporary takes its shape from its first write: make that its last
        # element (the phases write slices of it)
        ctx.emit(t, ti, literal(0, t.dtype), ranges={v: (n - 1, n) for v, n in zip(ti, t.shape)})
    ph_i, q_i = (ti[2:2 + nd], ti[2 + nd:]) if split else ([], ti[2:])
    if group == 1:
        chan, wm = "r0" if Cg > 1 else 0, ti[1]
    else:
        first = f"({ti[1]} / {Mg})" if Mg > 1 else ti[1]
        chan = f"{first} * {Cg} + r0" if Cg > 1 else first
        wm = f"{ti[1]} % {Mg}" if Mg > 1 else 0
    for combo in itertools.product(*phases):
        ranges = {"r0": (0, Cg)} if Cg > 1 else {}
        pos, taps = [], []
        for d, (p, ks, e, q) in enumerate(combo):
            if split:
                ranges[ph_i[d]] = (p, p + 1)
            ranges[q_i[d]] = (0, q)
            # the phase's taps, last first, so that the read advances with k (the window
            # form the tiler knows from Conv); no tap: an empty range, and the statement
            # sets its slice to zero
            k = [f"k{d}"] if len(ks) > 1 else []
            if len(ks) != 1:
                ranges[f"k{d}"] = (0, len(ks))
            pos.append(_lin(e + shift[d], (q_i[d], 1), *[(v, steps[d]) for v in k]))
            taps.append(_lin(ks[-1] if ks else 0, *[(v, ks[0] - ks[1]) for v in k]))
        ctx.emit(t, ti, f"{src(ti[0], chan, *pos)} * {w(chan, wm, *taps)}", "+=!", ranges)
    if split:
        rhs = t(i[0], i[1], *[f"{o} % {s}" if s > 1 else 0 for o, s in zip(i[2:], strides)],
                *[f"{o} / {s}" if s > 1 else o for o, s in zip(i[2:], strides)])
        ctx.emit(y, i, f"{rhs} + {b(i[1])}" if b is not None else rhs)
    elif b is not None:
        ctx.emit(y, i, f"{y(*i)} + {b(i[1])}")


def _phases(s, d, k, b, out):
    """The output phases ``p`` (positions ``o = q s + p``) along one axis: for each,
    ``(p, taps, e, n)``: the kernel taps that land on it, ascending, the input position
    that its last tap reads at ``q = 0`` and the number ``n`` of its positions."""
    res = []
    for p in range(min(s, out)):
        taps = [t for t in range(k) if (p + b - t * d) % s == 0]
        e = (p + b - taps[-1] * d) // s if taps else 0
        res.append((p, taps, e, -(-(out - p) // s)))
    return res


def _lin(c, *terms) -> str:
    """``c + k v ..`` for ``terms`` [(v, k)], as short TC text."""
    text = ""
    for v, k in terms:
        sign = (" - " if k < 0 else " + ") if text else "-" if k < 0 else ""
        text += sign + (v if abs(k) == 1 else f"{v} * {abs(k)}")
    if not text:
        return str(c)
    return text + (f" + {c}" if c > 0 else f" - {-c}" if c < 0 else "")


@op("Col2Im")
def _col2im(ctx):
    """The blocks of ``input`` (N, C * prod(block), L) summed back into an image, as a
    gather: image position ``y`` receives tap ``k`` of block ``b`` when ``y + pad - k d
    = b s``, one reduction over the taps per axis, the block read at a clamped index
    under that condition."""
    x = ctx.input(0)
    image = [int(v) for v in np.asarray(ctx.const_input(1)).reshape(-1)]
    block = [int(v) for v in np.asarray(ctx.const_input(2)).reshape(-1)]
    nd = len(image)
    strides = list(ctx.attr("strides", None) or [1] * nd)
    dil = list(ctx.attr("dilations", None) or [1] * nd)
    pads = list(ctx.attr("pads", None) or [0] * (2 * nd))
    if len(block) != nd or len(strides) != nd or len(dil) != nd or len(pads) != 2 * nd or \
            x.rank != 3 or min(block + strides + dil) < 1:
        ctx.fail(f"input {list(x.shape)}, image_shape {image}, block_shape {block}, strides "
                 f"{strides}, dilations {dil} and pads {pads} do not fit together")
    k_all = math.prod(block)
    blocks = [(n + pads[d] + pads[d + nd] - dil[d] * (k - 1) - 1) // strides[d] + 1
              for d, (n, k) in enumerate(zip(image, block))]
    if x.shape[1] % k_all or math.prod(blocks) != x.shape[2] or min(blocks) < 1:
        ctx.fail(f"input {list(x.shape)}: {x.shape[1]} is not channels x {k_all} taps, or "
                 f"{x.shape[2]} is not the {math.prod(blocks)} blocks of image {image}")
    y = ctx.out(0, (x.shape[0], x.shape[1] // k_all, *image), x.dtype)
    ctx.result.kind = "opaque"
    if y.size == 0:
        return
    i = idx(y.rank)
    taps = [f"k{d}" for d in range(nd)]
    conds, b_idx = [], []
    for d in range(nd):
        q = f"({i[d + 2]} + {pads[d]} - {taps[d]} * {dil[d]})"
        conds += [f"{q} >= 0", f"{q} % {strides[d]} == 0", f"{q} / {strides[d]} < {blocks[d]}"]
        b_idx.append(f"max(0, min({blocks[d] - 1}, {q} / {strides[d]}))")
    tap = " + ".join(f"{t} * {math.prod(block[d + 1:])}" for d, t in enumerate(taps))
    blk = " + ".join(f"{b} * {math.prod(blocks[d + 1:])}" for d, b in enumerate(b_idx))
    read = x(i[0], f"{i[1]} * {k_all} + {tap}", blk)
    ctx.emit(y, i, f"({' && '.join(conds)}) ? {read} : {literal(0, x.dtype)}", "+=!",
             {t: (0, k) for t, k in zip(taps, block)})
