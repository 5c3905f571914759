"""Indexing by data: GatherND, ScatterND, ScatterElements (and the old Scatter), TopK,
OneHot, EyeLike, ReverseSequence.

A read may be indexed by data (``X(I(k0, 0), i1)``): the kernel checks such reads, so an
index out of range is a run-time error, never an out-of-bounds access.  Negative indices
are wrapped as Gather does; constant indices are checked here, at compile time.

A write may not: left-hand subscripts are plain index names.  So a **scatter** is written
as a gather over the updates: every output element looks at every update position ``k``
that could hit it and keeps those whose index equals its own.  Without a reduction the
last hit wins: ``K = max over k of (hit ? k : -1)``, then ``Y = K >= 0 ? U(K) : X``.  With
one, ``Y = X`` and then ``Y op= (hit ? U(k) : identity)`` over ``k``, in update order.
This costs (output size x number of updates) for ScatterND and (output size x extent of
the indices along ``axis``) for ScatterElements: fine for the small update counts of real
models (a KV-cache or embedding-row update), slow for a scatter of millions of updates.
An update whose run-time index is out of range hits nothing (onnxruntime reports an
error instead); it can never write or read out of bounds.

**TopK** ranks every element of a row (how many elements come before it: larger ones, or
equal ones at a lower index, so ties keep the lower index first), then gathers the
element of each rank ``r < K``.  That is O(n²) per row of n elements: fine for rows up to
a few thousand (a 50k-word vocabulary costs 2.5e9 comparisons per row).  The result is
always sorted, which ``sorted=0`` allows.
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from .movement import _axis, _wrapped
from .registry import equal, idx, literal, op

_REDUCTIONS = {"add": "+=", "mul": "*=", "max": "max=", "min": "min="}


def _int_indices(ctx, ind):
    if ind.dtype.kind not in "iu":
        ctx.fail(f"indices of type {ind.dtype.name}")


def _check_const(ctx, ind, extents):
    """Constant indices must lie in ``[-n, n)`` (``extents``: n per index, broadcast
    against ``ind``'s value); returns whether they need wrapping at run time."""
    if ind.value is None:
        return True
    v = np.asarray(ind.value).astype(np.int64)
    if v.size == 0:
        return False
    n = np.broadcast_to(np.asarray(extents, np.int64), v.shape)
    bad = (v < -n) | (v >= n)
    if bad.any():
        ctx.fail(f"index {v[bad][0]} is out of range for an axis of extent {n[bad][0]}")
    return bool((v < 0).any())


def _identity(red, dtype):
    """The value that reduction ``red`` ('add', ...) leaves unchanged, in ``dtype``."""
    if red in ("add", "mul"):
        return literal(0 if red == "add" else 1, dtype)
    if dtype.kind == "f":
        return literal(-np.inf if red == "max" else np.inf, dtype)
    info = np.iinfo(dtype)
    return literal(info.min if red == "max" else info.max, dtype)


def _reduction(ctx, dtype):
    red = ctx.attr("reduction", "none")
    if red != "none" and red not in _REDUCTIONS:
        ctx.fail(f"reduction '{red}' is not supported", unsupported=True)
    if red != "none" and dtype.kind == "b":
        ctx.fail(f"reduction '{red}' of bool data is not supported", unsupported=True)
    return red


# --- GatherND, ScatterND ----------------------------------------------------------------------
@op("GatherND")
def _gather_nd(ctx):
    x, ind = ctx.input(0), ctx.input(1)
    _int_indices(ctx, ind)
    b = int(ctx.attr("batch_dims", 0))
    m = ind.shape[-1] if ind.rank else 0
    if ind.rank < 1 or not 0 <= b < min(ind.rank, x.rank) or not 1 <= m <= x.rank - b:
        ctx.fail(f"indices of shape {list(ind.shape)} with batch_dims {b} for data of "
                 f"shape {list(x.shape)}")
    if ind.shape[:b] != x.shape[:b]:
        ctx.fail(f"batch dimensions differ: indices {list(ind.shape)}, data {list(x.shape)}")
    ctx.result.kind = "movement"
    y = ctx.out(0, ind.shape[:-1] + x.shape[b + m:], x.dtype)
    i = idx(y.rank)
    q = ind.rank - 1  # output index dimensions taken from the indices
    wrap = _check_const(ctx, ind, x.shape[b:b + m])
    sub = [ind(*i[:q], d) for d in range(m)]
    if wrap:
        sub = [_wrapped(s, x.shape[b + d]) for d, s in enumerate(sub)]
    ctx.emit(y, i, x(*i[:b], *sub, *i[q:]))


@op("ScatterND")
def _scatter_nd(ctx):
    x, ind, upd = ctx.input(0), ctx.input(1), ctx.input(2)
    _int_indices(ctx, ind)
    red = _reduction(ctx, x.dtype)
    m = ind.shape[-1] if ind.rank else 0
    if ind.rank < 1 or not 1 <= m <= x.rank or \
            upd.shape != ind.shape[:-1] + x.shape[m:] or upd.dtype != x.dtype:
        ctx.fail(f"indices of shape {list(ind.shape)} and updates {list(upd.shape)} "
                 f"({upd.dtype.name}) for data {list(x.shape)} ({x.dtype.name})")
    ctx.result.kind = "movement"
    y = ctx.out(0, x.shape, x.dtype)
    i = idx(x.rank)
    k = idx(ind.rank - 1, "k")  # the update positions
    ranges = {a: (0, n) for a, n in zip(k, ind.shape)}
    wrap = _check_const(ctx, ind, x.shape[:m])
    hit = []
    for d in range(m):
        s = ind(*k, d)
        hit.append(f"{_wrapped(s, x.shape[d]) if wrap else s} == int64({i[d]})")
    hit = " && ".join(hit)
    if red != "none":
        ctx.emit(y, i, x(*i))
        ctx.emit(y, i, f"({hit}) ? {upd(*k, *i[m:])} : {_identity(red, x.dtype)}",
                 _REDUCTIONS[red], ranges)
        return
    if not k:  # one update
        ctx.emit(y, i, f"({hit}) ? {upd(*i[m:])} : {x(*i)}")
        return
    # the last update that hits element i[:m], as a linear position (-1: none)
    last = ctx.temp(x.shape[:m], np.int64)
    ushape = ind.shape[:-1]
    strides = [int(np.prod(ushape[d + 1:], dtype=np.int64)) for d in range(len(k))]
    pos = " + ".join(f"int64({a}) * {s}" if s > 1 else f"int64({a})"
                     for a, s in zip(k, strides))
    ctx.emit(last, i[:m], f"({hit}) ? {pos} : int64(-1)", "max=!", ranges)
    kk = last(*i[:m])
    src = []
    for d, (s, n) in enumerate(zip(strides, ushape)):
        e = f"{kk} / {s}" if s > 1 else kk
        src.append(f"{e} % {n}" if d else e)
    ctx.emit(y, i, f"{kk} >= 0 ? {upd(*src, *i[m:])} : {x(*i)}")


# --- ScatterElements ----------------------------------------------------------------------------
@op("ScatterElements", "Scatter")
def _scatter_elements(ctx):
    x, ind, upd = ctx.input(0), ctx.input(1), ctx.input(2)
    _int_indices(ctx, ind)
    red = _reduction(ctx, x.dtype)
    a = _axis(ctx, ctx.attr("axis", 0), x.rank)
    if ind.rank != x.rank or upd.shape != ind.shape or upd.dtype != x.dtype or \
            any(p > q for d, (p, q) in enumerate(zip(ind.shape, x.shape)) if d != a):
        ctx.fail(f"indices of shape {list(ind.shape)} and updates {list(upd.shape)} "
                 f"({upd.dtype.name}) for data {list(x.shape)} ({x.dtype.name})")
    ctx.result.kind = "movement"
    y = ctx.out(0, x.shape, x.dtype)
    i = idx(x.rank)
    at_r = i[:a] + ["r"] + i[a + 1:]  # update position r along the axis, the rest at i
    read = ind(*at_r)
    hit = f"{_wrapped(read, x.shape[a]) if _check_const(ctx, ind, x.shape[a]) else read}" \
          f" == int64({i[a]})"
    # the indices may be smaller than the data in the other dimensions: only that part
    # of the output can be hit
    part = {i[d]: (0, n) for d, n in enumerate(ind.shape) if d != a and n < x.shape[d]}
    if red != "none":
        ctx.emit(y, i, x(*i))
        ctx.emit(y, i, f"({hit}) ? {upd(*at_r)} : {_identity(red, x.dtype)}",
                 _REDUCTIONS[red], {**part, "r": (0, ind.shape[a])})
        return
    last = ctx.temp([n if d != a else x.shape[a] for d, n in enumerate(ind.shape)], np.int64)
    ctx.emit(last, i, f"({hit}) ? int64(r) : int64(-1)", "max=!", {"r": (0, ind.shape[a])})
    src = list(i)
    src[a] = last(*i)
    if part:
        ctx.emit(y, i, x(*i))
    ctx.emit(y, i, f"{last(*i)} >= 0 ? {upd(*src)} : {x(*i)}", ranges=part)


# --- TensorScatter ------------------------------------------------------------------------------
@op("TensorScatter")
def _tensor_scatter(ctx):
    """A KV-cache update as a gather: cache position ``s`` of sample ``b`` reads the
    update at ``s - w(b)`` (modulo the cache's length when ``circular``) when that lies
    in the update, else the past cache."""
    past, upd = ctx.input(0), ctx.input(1)
    w = ctx.input(2, required=False) if len(ctx.inputs) > 2 else None
    a = _axis(ctx, ctx.attr("axis", -2), past.rank)
    mode = ctx.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        ctx.fail(f"mode '{mode}' is not linear or circular")
    if a == 0 or upd.rank != past.rank or upd.dtype != past.dtype or any(
            p != u for d, (p, u) in enumerate(zip(past.shape, upd.shape)) if d != a) or \
            upd.shape[a] > past.shape[a]:
        ctx.fail(f"update of shape {list(upd.shape)} for a cache of shape "
                 f"{list(past.shape)} along axis {a}")
    if w is not None:
        _int_indices(ctx, w)
        if w.shape != (past.shape[0],):
            ctx.fail(f"write_indices of shape {list(w.shape)} for a batch of {past.shape[0]}")
    ctx.result.kind = "movement"
    y = ctx.out(0, past.shape, past.dtype)
    i = idx(past.rank)
    n, length = past.shape[a], upd.shape[a]
    j = f"int64({i[a]})" + (f" - int64({w(i[0])})" if w is not None else "")
    if mode == "circular":
        j = f"(({j}) % {n} + {n}) % {n}"
    src = list(i)
    src[a] = f"max(0, min({length - 1}, {j}))"
    ctx.emit(y, i, f"({j} >= 0 && {j} < {length}) ? {upd(*src)} : {past(*i)}")


# --- TopK --------------------------------------------------------------------------------------
@op("TopK")
def _topk(ctx):
    x = ctx.input(0)
    if x.dtype.kind not in "fiu":
        ctx.fail(f"TopK of {x.dtype.name} is not supported", unsupported=True)
    if len(ctx.inputs) > 1:
        k = np.asarray(ctx.const_input(1)).reshape(-1)
        if k.size != 1:
            ctx.fail(f"K must have one element, not {k.size}")
        k = int(k[0])
    else:  # opset 1: an attribute
        k = int(ctx.attr("k"))
    a = _axis(ctx, ctx.attr("axis", -1), x.rank)
    n = x.shape[a]
    if not 0 <= k <= n:
        ctx.fail(f"K = {k} for an axis of extent {n}")
    shape = x.shape[:a] + (k,) + x.shape[a + 1:]
    ctx.result.kind = "reduction"
    vals, inds = ctx.out(0, shape, x.dtype), ctx.out(1, shape, np.int64)
    if vals.size == 0:
        return
    i = idx(x.rank)
    at_r = i[:a] + ["r"] + i[a + 1:]
    xi, xr = x(*i), x(*at_r)
    # x(r) comes before x(i) if it is better, or equal at a lower index; NaN is the
    # largest value, as in onnxruntime
    if ctx.attr("largest", 1):
        better = f"{xr} > {xi}"
        if x.dtype.kind == "f":
            better += f" || ({xr} != {xr} && {xi} == {xi})"
    else:
        better = f"{xr} < {xi}"
        if x.dtype.kind == "f":
            better += f" || ({xi} != {xi} && {xr} == {xr})"
    rank = ctx.temp(x.shape, np.int32)  # how many elements come before x(i)
    ctx.emit(rank, i, f"({better} || ({equal(xr, xi, x.dtype)} && r < {i[a]})) ? "
             "int32(1) : int32(0)", "+=!", {"r": (0, n)})
    # the position of the element of rank i[a]
    pos = ctx.temp(shape, np.int32)
    ctx.emit(pos, i, f"{rank(*at_r)} == int32({i[a]}) ? int32(r) : int32(-1)", "max=!",
             {"r": (0, n)})
    src = list(i)
    src[a] = pos(*i)
    ctx.emit(vals, i, x(*src))
    ctx.emit(inds, i, f"int64({pos(*i)})")


# --- OneHot, EyeLike ----------------------------------------------------------------------------
@op("OneHot")
def _one_hot(ctx):
    ind, values = ctx.input(0), ctx.input(2)
    depth = np.asarray(ctx.const_input(1)).reshape(-1)
    if depth.size != 1 or depth[0] < 1:
        ctx.fail(f"depth {depth.tolist()} is not one positive number")
    depth = int(depth[0])
    if values.size != 2:
        ctx.fail(f"values must hold two elements (off, on), not {values.size}")
    if ind.dtype.kind not in "fiu":
        ctx.fail(f"indices of type {ind.dtype.name}")
    a = int(ctx.attr("axis", -1))
    if not -ind.rank - 1 <= a <= ind.rank:
        ctx.fail(f"axis {a} is out of range for an output of rank {ind.rank + 1}")
    a = a + ind.rank + 1 if a < 0 else a
    ctx.result.kind = "movement"
    y = ctx.out(0, ind.shape[:a] + (depth,) + ind.shape[a:], values.dtype)
    i = idx(y.rank)
    v = f"int64({ind(*i[:a], *i[a + 1:])})"
    if values.value is not None:
        off, on = (literal(e, values.dtype) for e in np.asarray(values.value).reshape(-1))
    else:
        off, on = (values(*[0] * (values.rank - 1), e) for e in (0, 1))
    # an index outside [-depth, depth) matches nothing: all 'off'
    ctx.emit(y, i, f"{_wrapped(v, depth)} == int64({i[a]}) ? {on} : {off}")


@op("EyeLike")
def _eye_like(ctx):
    x = ctx.input(0)
    if x.rank != 2:
        ctx.fail(f"input of rank {x.rank}; EyeLike wants rank 2")
    to = ctx.attr("dtype")
    dtype = x.dtype if to is None else np.dtype(helper.tensor_dtype_to_np_dtype(to))
    y = ctx.out(0, x.shape, dtype)
    k = int(ctx.attr("k", 0))
    ctx.emit(y, ["i0", "i1"], f"i1 - i0 == {k} ? {literal(1, dtype)} : {literal(0, dtype)}")


# --- ReverseSequence ----------------------------------------------------------------------------
@op("ReverseSequence")
def _reverse_sequence(ctx):
    x, lens = ctx.input(0), ctx.input(1)
    b, t = int(ctx.attr("batch_axis", 1)), int(ctx.attr("time_axis", 0))
    if x.rank < 2 or {b, t} != {0, 1}:
        ctx.fail(f"batch_axis {b} and time_axis {t} for an input of shape {list(x.shape)}; "
                 "they must be 0 and 1")
    if lens.shape != (x.shape[b],) or lens.dtype.kind not in "iu":
        ctx.fail(f"sequence_lens of shape {list(lens.shape)} ({lens.dtype.name}) for a "
                 f"batch of {x.shape[b]}")
    n = x.shape[t]
    if lens.value is not None and (np.any(lens.value < 0) or np.any(lens.value > n)):
        ctx.fail(f"sequence_lens {np.asarray(lens.value).tolist()} outside 0:{n + 1}")
    ctx.result.kind = "movement"
    y = ctx.out(0, x.shape, x.dtype)
    i = idx(x.rank)
    length = f"int64({lens(i[b])})"
    src = list(i)
    src[t] = f"{length} - 1 - {i[t]}"  # a length beyond the time axis: a run-time error
    ctx.emit(y, i, f"int64({i[t]}) < {length} ? {x(*src)} : {x(*i)}")
