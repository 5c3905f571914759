"""Contractions and neural-network ops: MatMul, Gemm, Einsum and Conv (pooling, which
shares the sliding window, is ``pool.py``).
Reductions, Softmax and the normalisations are in ``reduce.py``.

A contraction is one ``+=!`` statement whose right-hand side is the plain product of the
operands (``Y(m, n) +=! A(m, k) * B(k, n)``): the tiler recognises that form and
register-tiles it.  Scaling and bias follow in separate statements.
"""
from __future__ import annotations

import math

import numpy as np

from .registry import PadCopy, broadcast_shapes, idx, literal, op


def _float_only(ctx, *refs):
    for r in refs:
        if r is not None and r.dtype.kind != "f":
            ctx.fail(f"{ctx.node.op} of {r.dtype.name} is not supported", unsupported=True)


def _numeric(ctx, *refs):
    for r in refs:
        if r is not None and r.dtype.kind not in "fiu":
            ctx.fail(f"{ctx.node.op} of {r.dtype.name} is not supported", unsupported=True)


def _scaled(term: str, k: int) -> str:
    """``term * k`` as short text (``term`` alone when ``k`` is 1)."""
    return term if k == 1 else f"{term} * {k}"


# --- contractions ----------------------------------------------------------------------------
#: transpose an operand whose rows do not run along the result's rows when at least this
#: many result rows reuse it (Gemm transB 1000x512: the copy costs more than it saves at
#: 32 rows, breaks even at 64, halves the time at 256).  Not a constant (weights): the
#: tiler packs it once, before the first call, transposing it into its micro-panels
#: (ResNet-18's classifier at batch 64: 540 -> 275 us, the copy gone from every run)
TRANSPOSE_REUSE = 64


def _contract(ctx, y, lhs, operands, ranges):
    """``y(lhs) +=! A(..) * B(..) ...`` for ``operands`` [(ref, subscripts)]: the plain
    product the tiler register-tiles.  An operand that holds the result's last
    (unit-stride) index but not as its own last subscript (B in ``A(m, k) * B(n, k)``)
    is first copied so that the index is last, when enough result rows reuse it and it
    is not a constant."""
    j = lhs[-1] if lhs and y.shape[-1] > 1 else None
    reads = []
    for ref, subs in operands:
        subs = list(subs)
        rows = int(np.prod([d for v, d in zip(lhs, y.shape) if v not in subs],
                           dtype=np.int64))
        if j is not None and ref.value is None and subs.count(j) == 1 and subs[-1] != j \
                and rows >= TRANSPOSE_REUSE:
            perm = [d for d in range(ref.rank) if subs[d] != j] + [subs.index(j)]
            t = ctx.temp([ref.shape[d] for d in perm], ref.dtype)
            ti = idx(ref.rank, "i")
            src = [None] * ref.rank
            for k, d in enumerate(perm):
                src[d] = ti[k]
            ctx.emit(t, ti, ref(*src))
            ref, subs = t, [subs[d] for d in perm]
        reads.append(ref(*subs))
    ctx.emit(y, lhs, " * ".join(reads), "+=!" if ranges else "=", ranges)


@op("MatMul")
def _matmul(ctx):
    a, b = ctx.input(0), ctx.input(1)
    _numeric(ctx, a, b)
    if a.dtype != b.dtype:
        ctx.fail(f"inputs have different types ({a.dtype.name}, {b.dtype.name})")
    if a.rank == 0 or b.rank == 0:
        ctx.fail("MatMul does not take scalars")
    # numpy: a 1-D A is a row (1, K), a 1-D B a column (K, 1); the unit dim is dropped
    sa = a.shape if a.rank > 1 else (1,) + a.shape
    sb = b.shape if b.rank > 1 else b.shape + (1,)
    if sa[-1] != sb[-2]:
        ctx.fail(f"cannot multiply {list(a.shape)} by {list(b.shape)}: "
                 f"{sa[-1]} != {sb[-2]}")
    batch = broadcast_shapes(ctx.node, sa[:-2], sb[:-2])
    nb = len(batch)
    shape = batch + ((sa[-2],) if a.rank > 1 else ()) + ((sb[-1],) if b.rank > 1 else ())
    y = ctx.out(0, shape, a.dtype)
    i = idx(len(shape))
    bi = i[:nb]
    m = i[nb] if a.rank > 1 else None
    n = i[-1] if b.rank > 1 else None
    ra = [m, "r0"] if a.rank > 1 else ["r0"]
    rb = ["r0", n] if b.rank > 1 else ["r0"]
    ra = _batch_read(a, bi, ra, batch)
    rb = _batch_read(b, bi, rb, batch)
    ctx.result.kind = "contraction"
    _contract(ctx, y, i, [(a, ra), (b, rb)], {"r0": (0, sa[-1])})


def _batch_read(ref, batch_idx, tail, batch):
    """Subscripts of ``ref``: its batch dimensions broadcast against ``batch_idx`` over
    the result's ``batch`` (right-aligned), then ``tail``.  A dimension of 1 that the
    result has too reads its index, not 0: the program is then the same at every size of
    it (a dynamic batch of 1, ``graph/dynamic.py``)."""
    nb = ref.rank - len(tail)
    lead = batch_idx[len(batch_idx) - nb:] if nb else []
    full = batch[len(batch) - nb:] if nb else ()
    lead = [0 if d == 1 and f != 1 else v for v, d, f in zip(lead, ref.shape[:nb], full)]
    return lead + list(tail)


@op("Gemm")
def _gemm(ctx):
    a, b, c = ctx.input(0), ctx.input(1), ctx.input(2, required=False)
    _numeric(ctx, a, b, c)
    if a.rank != 2 or b.rank != 2:
        ctx.fail(f"Gemm takes 2-D A and B, not {list(a.shape)} and {list(b.shape)}")
    ta, tb = ctx.attr("transA", 0), ctx.attr("transB", 0)
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    M, K = (a.shape[1], a.shape[0]) if ta else a.shape
    K2, N = (b.shape[1], b.shape[0]) if tb else b.shape
    if K != K2:
        ctx.fail(f"inner dimensions differ: {K} != {K2}")
    if a.dtype.kind != "f" and (alpha != 1.0 or (c is not None and beta != 1.0)):
        ctx.fail(f"Gemm of {a.dtype.name} with alpha or beta other than 1",
                 unsupported=True)
    y = ctx.out(0, (M, N), a.dtype)
    ctx.result.kind = "contraction"
    ra = ("r0", "i0") if ta else ("i0", "r0")
    rb = ("i1", "r0") if tb else ("r0", "i1")
    _contract(ctx, y, ["i0", "i1"], [(a, ra), (b, rb)], {"r0": (0, K)})
    if c is not None:
        broadcast_shapes(ctx.node, (M, N), c.shape)
    use_c = c is not None and beta != 0.0
    if alpha == 1.0 and not use_c:
        return
    rhs = y("i0", "i1")
    if alpha != 1.0:
        rhs = f"{literal(alpha, y.dtype)} * {rhs}"
    if use_c:
        cc = c.bcast(["i0", "i1"])
        rhs += f" + {cc}" if beta == 1.0 else f" + {literal(beta, y.dtype)} * {cc}"
    ctx.emit(y, ["i0", "i1"], rhs)


# --- Einsum ---------------------------------------------------------------------------------
def _einsum_terms(ctx, equation, refs):
    """Each operand's labels (letters, or ``("...", k)`` for the ``k``-th broadcast
    dimension), the output's labels and the number of broadcast dimensions."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(refs):
        ctx.fail(f"equation '{equation}' has {len(terms)} operand(s) for {len(refs)} inputs")

    def labels(term, rank):
        if term.count("...") > 1 or any(ch not in "." and not ch.isalpha() for ch in term):
            ctx.fail(f"cannot parse the einsum term '{term}' of '{equation}'")
        pre, ell, post = term.partition("...")
        if "." in pre + post:
            ctx.fail(f"cannot parse the einsum term '{term}' of '{equation}'")
        n_ell = rank - len(pre) - len(post) if ell else 0
        if n_ell < 0 or (not ell and len(pre) != rank):
            ctx.fail(f"einsum term '{term}' does not match an input of rank {rank}")
        return list(pre), n_ell, list(post)

    parsed = [labels(t, r.rank) for t, r in zip(terms, refs)]
    n_ell = max([p[1] for p in parsed] + [0])
    ins = [pre + [("...", n_ell - k + j) for j in range(k)] + post for pre, k, post in parsed]
    if arrow:
        pre, ell, post = rhs.partition("...")
        if any(not ch.isalpha() for ch in pre + post):
            ctx.fail(f"cannot parse the einsum output '{rhs}' of '{equation}'")
        out = list(pre) + ([("...", j) for j in range(n_ell)] if ell else []) + list(post)
        if not ell and n_ell:
            ctx.fail(f"einsum '{equation}': the output needs '...' for the broadcast "
                     "dimensions (as numpy says)")
    else:
        letters = [ch for t in ins for ch in t if isinstance(ch, str)]
        out = [("...", j) for j in range(n_ell)] + sorted(
            ch for ch in set(letters) if letters.count(ch) == 1)
    if len(set(out)) != len(out):
        ctx.fail(f"einsum '{equation}': an output label appears twice")
    return ins, out


@op("Einsum")
def _einsum(ctx):
    equation = ctx.attr("equation")
    if isinstance(equation, bytes):
        equation = equation.decode()
    refs = [ctx.input(k) for k in range(len(ctx.inputs))]
    _numeric(ctx, *refs)
    if len({r.dtype for r in refs}) != 1:
        ctx.fail("inputs have different types")
    ins, out = _einsum_terms(ctx, equation, refs)
    size: dict = {}
    for labs, r in zip(ins, refs):
        for lab, d in zip(labs, r.shape):
            if size.get(lab, 1) == 1:
                size[lab] = d
            elif d not in (1, size[lab]):
                ctx.fail(f"einsum '{equation}': label {lab if isinstance(lab, str) else '...'}"
                         f" has sizes {size[lab]} and {d}")
    for lab in out:
        if lab not in size:
            ctx.fail(f"einsum '{equation}': output label '{lab}' is not in any input")
    name = {lab: f"i{k}" for k, lab in enumerate(out)}
    red = [lab for lab in dict.fromkeys(lab for labs in ins for lab in labs) if lab not in name]
    name.update({lab: f"r{k}" for k, lab in enumerate(red)})
    y = ctx.out(0, [size[lab] for lab in out], refs[0].dtype)
    subs = [[0 if d == 1 and size[lab] != 1 else name[lab] for lab, d in zip(labs, r.shape)]
            for labs, r in zip(ins, refs)]
    ranges = {name[lab]: (0, size[lab]) for lab in red}
    if red:
        ctx.result.kind = "contraction" if len(refs) > 1 else "reduction"
    _contract(ctx, y, [name[lab] for lab in out], list(zip(refs, subs)), ranges)


# --- windows: Conv and pooling ------------------------------------------------------------
def _kernel(ctx, w) -> list:
    """The spatial extents of a convolution's weights ``w``, checked against
    ``kernel_shape``."""
    kernel = list(w.shape[2:])
    if ctx.attr("kernel_shape") is not None and list(ctx.attr("kernel_shape")) != kernel:
        ctx.fail(f"kernel_shape {list(ctx.attr('kernel_shape'))} differs from the weights' "
                 f"{kernel}")
    return kernel


def _window_attrs(ctx, nd, kernel):
    """``strides``, ``dilations`` and ``auto_pad`` of a window of ``kernel`` over ``nd``
    spatial dimensions, checked."""
    strides = list(ctx.attr("strides", None) or [1] * nd)
    dil = list(ctx.attr("dilations", None) or [1] * nd)
    auto = ctx.attr("auto_pad", "NOTSET")
    if isinstance(auto, bytes):
        auto = auto.decode()
    if len(strides) != nd or len(dil) != nd or len(kernel) != nd:
        ctx.fail(f"strides {strides}, dilations {dil} or kernel {list(kernel)} do not "
                 f"match {nd} spatial dimension(s)")
    if any(s < 1 for s in strides) or any(d < 1 for d in dil):
        ctx.fail("strides and dilations must be positive")
    return strides, dil, auto


def _window(ctx, spatial, kernel, ceil_mode=False):
    """Strides, dilations, begin pads and output sizes of a sliding window over the
    spatial dimensions ``spatial`` (``auto_pad``, ``pads``, ``ceil_mode`` as ONNX says)."""
    nd = len(spatial)
    strides, dil, auto = _window_attrs(ctx, nd, kernel)
    span = [d * (k - 1) + 1 for d, k in zip(dil, kernel)]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = [-(-n // s) for n, s in zip(spatial, strides)]
        total = [max(0, (o - 1) * s + w - n) for o, s, w, n in zip(out, strides, span, spatial)]
        begin = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
        return strides, dil, begin, out
    if auto == "VALID":
        pads = [0] * (2 * nd)
    elif auto in ("NOTSET", ""):
        pads = list(ctx.attr("pads", None) or [0] * (2 * nd))
    else:
        ctx.fail(f"unknown auto_pad '{auto}'")
    if len(pads) != 2 * nd:
        ctx.fail(f"pads {pads} do not match {nd} spatial dimension(s)")
    if any(p < 0 for p in pads):
        ctx.fail(f"negative pads {pads} are not supported", unsupported=True)
    begin, end = pads[:nd], pads[nd:]
    out = []
    for n, b, e, w, s in zip(spatial, begin, end, span, strides):
        room = n + b + e - w
        o = (-(-room // s) if ceil_mode else room // s) + 1
        if ceil_mode and (o - 1) * s >= n + b:  # the last window must start inside
            o -= 1
        out.append(o)
    return strides, dil, begin, out


def _positions(strides, dil, begin, nd, first=2):
    """Input positions read by output index ``i{first+d}`` and kernel index ``k{d}``."""
    pos = []
    for d in range(nd):
        t = _scaled(f"i{first + d}", strides[d]) + " + " + _scaled(f"k{d}", dil[d])
        pos.append(f"{t} - {begin[d]}" if begin[d] else t)
    return pos


def _inside(pos, lo, hi, lo_needed=True, hi_needed=True) -> list:
    out = []
    if lo_needed:
        out.append(f"{pos} >= {lo}")
    if hi_needed:
        out.append(f"{pos} < {hi}")
    return out


def _reach(geo) -> list:
    """The extent of the input (padded) that the windows span, per spatial dimension."""
    kernel, strides, dil, begin, out = geo
    return [(o - 1) * s + d * (k - 1) + 1 for o, s, d, k in zip(out, strides, dil, kernel)]


def _in_place(x, geo) -> bool:
    """Whether every window lies inside ``x`` (no padded copy is needed)."""
    return not any(geo[3]) and all(n <= e for n, e in zip(_reach(geo), x.shape[2:]))


def _padded(ctx, x, geo, fill, fill_first=False):
    """The input of a sliding window and the begin pads to read it with: ``x`` itself
    when no window leaves it, else a copy padded with ``fill`` to the extent the windows
    need (so the window statement reads without guards, and vectorises).
    ``fill_first``: a plane that fits in half of L1 is filled, then the input is copied
    into its part (max pooling, and convolutions of whole channels).  The spatial
    dimensions follow the first two; a blocked image's lanes after them stay whole."""
    kernel, strides, dil, begin, out = geo
    nd = len(kernel)
    need = _reach(geo)
    if _in_place(x, geo):
        return x, begin
    p = ctx.temp((*x.shape[:2], *need, *x.shape[2 + nd:]), x.dtype)
    first = len(ctx.result.stmts)
    _copy(ctx, x, p, begin, need, fill, fill_first)
    ctx.result.pads.append(PadCopy(p.name, x.name, tuple(begin), tuple(need), fill,
                                   tuple(ctx.result.stmts[first:])))
    return p, [0] * nd


def _copy(ctx, x, p, begin, need, fill, fill_first):
    """The statements that make ``p``, ``x`` padded with ``fill`` (``_padded``)."""
    from ...machine import host

    nd = len(begin)
    pi = idx(x.rank)
    read = x(*pi[:2], *[f"{v} - {o}" if o else v for v, o in zip(pi[2:], begin)],
             *pi[2 + nd:])
    if fill_first and math.prod(need) * x.dtype.itemsize <= host().l1 // 2:
        # filled, then the input copied into its part: two plain vector loops where the
        # select below reads the input one element off a vector and masks it (the small
        # CNN's 3x3/2 max pool 19.6 -> 16.9 us, its first convolution 23 -> 20 us,
        # SqueezeNet's 27 x 27 pool 40 -> 36 us); a larger plane is written twice so,
        # from L2 (112 x 112 max pools +15%), and depthwise convolutions and average
        # pools lost 6-25%
        ctx.emit(p, pi, literal(fill, x.dtype))
        inside = {pi[d + 2]: (begin[d], min(begin[d] + x.shape[d + 2], need[d]))
                  for d in range(nd)}
        ctx.emit(p, pi, read, ranges=inside)
        return
    cond = []
    for d in range(nd):
        end = begin[d] + x.shape[d + 2]
        cond += _inside(pi[d + 2], begin[d], end, begin[d] > 0, need[d] > end)
    ctx.emit(p, pi, f"({' && '.join(cond)}) ? {read} : {literal(fill, x.dtype)}"
             if cond else read)


def _small_plane(x, geo) -> bool:
    """Whether a padded plane of ``x`` and its split copy fit in a quarter of L1 (the
    split pays there: 13 x 13 and 16 x 16 max pooling 2x faster; on 56 x 56 and 112 x 112
    planes, which leave L1, the split's extra pass costs more than it saves)."""
    from ...machine import host

    kernel, strides, dil, begin, out = geo
    plane = 1
    for o, st, d, k in zip(out, strides, dil, kernel):
        plane *= (o - 1) * st + d * (k - 1) + 1 + st
    return 2 * plane * x.dtype.itemsize <= host().l1 // 4


def _split_read(ctx, x, geo, fill, fill_first=False):
    """The window read of a pooling strided along the last axis (stride ``s``): from the
    padded copy (``_padded``, its last axis rounded up to a multiple of ``s``) split
    into ``s`` phases, ``P(.., q, u) = X(.., s u + q)``, so window element ``k`` of output
    column ``j`` is ``P(.., k % s, j + k / s)``: unit-stride along ``j`` where ``X`` is
    read with stride ``s`` (the output row then vectorises without gathers; the split
    reads the copy once, unguarded; 3x3/2 max pooling of 8 x 16 x 32 x 32: 70 -> 40 us)."""
    kernel, strides, dil, begin, out = geo
    nd = x.rank - 2
    s = strides[-1]
    wide = list(out)  # one more output column, so the copy spans whole phases
    wide[-1] += ((out[-1] - 1) * s + kernel[-1]) % s != 0
    src, offset = _padded(ctx, x, (kernel, strides, dil, begin, wide), fill, fill_first)
    cols = src.shape[-1]
    phases = cols // s
    p = ctx.temp((*src.shape[:-1], s, phases), x.dtype)
    pi = idx(x.rank + 1)
    ctx.emit(p, pi, src(*pi[:-2], f"{pi[-1]} * {s} + {pi[-2]}"))
    rows = _positions(strides[:-1], dil[:-1], offset[:-1], nd - 1)
    last = f"k{nd - 1}"
    return p("i0", "i1", *rows, f"{last} % {s}", f"i{nd + 1} + {last} / {s}")


@op("Conv")
def _conv(ctx):
    x, w, b = ctx.input(0), ctx.input(1), ctx.input(2, required=False)
    _numeric(ctx, x, w, b)  # int32: ConvInteger (graph/quantised.py)
    if x.rank < 3 or w.rank != x.rank:
        ctx.fail(f"input {list(x.shape)} and weights {list(w.shape)} do not make a "
                 "convolution")
    nd = x.rank - 2
    N, C = x.shape[:2]
    M, Cg = w.shape[:2]
    kernel = _kernel(ctx, w)
    group = ctx.attr("group", 1)
    if group < 1 or C != Cg * group or M % group:
        ctx.fail(f"{C} input channels, {M} filters of {Cg} channels do not make "
                 f"{group} group(s)")
    Mg = M // group
    if b is not None and b.shape != (M,):
        ctx.fail(f"bias of shape {list(b.shape)} for {M} filters")
    strides, dil, begin, out = _window(ctx, x.shape[2:], kernel)
    y = ctx.out(0, (N, M, *out), x.dtype)
    ctx.result.kind = "contraction"
    if y.size == 0:
        return
    geo = (kernel, strides, dil, begin, out)
    # Y(n, m, o..) +=! P(n, channel, o * s + k * d ..) * W(m, c, k..)
    i = idx(y.rank)
    if group == 1:
        chan = "r0"
    elif Cg == 1:
        chan = i[1] if Mg == 1 else f"{i[1]} / {Mg}"
    else:
        chan = f"({i[1]} / {Mg}) * {Cg} + r0"
    if Cg == 1 and Mg == 1 and strides[-1] > 1 and dil[-1] == 1 and out[-1] > 1 and \
            _small_plane(x, geo):  # depthwise, strided: its window read unit-stride
        read = _split_read(ctx, x, geo, 0)
    else:
        src, offset = _padded(ctx, x, geo, 0, fill_first=group == 1)
        read = src(i[0], chan, *_positions(strides, dil, offset, nd))
    ranges = {"r0": (0, Cg)} if Cg != 1 else {}
    ranges.update({f"k{d}": (0, kernel[d]) for d in range(nd)})
    wread = w(i[1], "r0" if Cg != 1 else 0, *[f"k{d}" for d in range(nd)])
    ctx.emit(y, i, f"{read} * {wread}", "+=!", ranges)
    if b is not None:
        ctx.emit(y, i, f"{y(*i)} + {b(i[1])}")
