"""Data movement: views (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout),
Transpose, Concat, Split, Slice, Gather, GatherElements, Expand, Tile, Pad, Trilu,
DepthToSpace, SpaceToDepth; ConstantOfShape and Range (folded when their inputs are
known, unsupported otherwise).

Every output is written by statements whose *first* write covers the output's whole
extent (its upper bounds): inside a fused program an output nobody else reads becomes an
untyped temporary, sized by its first write.
"""
from __future__ import annotations

import numpy as np

from .registry import idx, literal, op

_MAX_TERNARY = 8  # Concat of more inputs: one statement per input instead of one ?: chain


# --- helpers ----------------------------------------------------------------------------------
def _axis(ctx, axis, rank, what="axis"):
    """``axis`` in ``[-rank, rank)`` made non-negative."""
    axis = int(axis)
    if not -rank <= axis < rank:
        ctx.fail(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _axes(ctx, axes, rank):
    out = [_axis(ctx, a, rank, "axis") for a in axes]
    if len(set(out)) != len(out):
        ctx.fail(f"repeated axes {list(axes)}")
    return out


def _ints(value) -> list:
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _put(ctx, y, indices, rhs, ranges=None):
    """``y(indices) = rhs`` with left-hand index ``i`` over ``ranges.get(i)`` (default: the
    whole dimension).  Nothing when a range is empty."""
    ranges = ranges or {}
    where = []
    for i, d in zip(indices, y.shape):
        lo, hi = ranges.get(i, (0, d))
        if hi <= lo:
            return
        where.append(f"{i} in {lo}:{hi}")
    lhs = y(*indices) if y.rank else y.name
    text = f"{lhs} = {rhs}"
    if where:
        text += " where " + ", ".join(where)
    ctx.result.stmts.append(text)


def _shift(i, off):
    """The text ``i + off`` (``i`` an index name, ``off`` an int)."""
    return i if off == 0 else (f"{i} + {off}" if off > 0 else f"{i} - {-off}")


def _wrapped(read, n):
    """``read`` (an integer index read at run time) with negative values counted from the
    end of an axis of extent ``n``, as ONNX's Gather wants."""
    return f"({read} < 0 ? {read} + {n} : {read})"


# --- views ----------------------------------------------------------------------------------
@op("Reshape")
def _reshape(ctx):
    x = ctx.input(0)
    shape = _ints(ctx.const_input(1))
    allowzero = ctx.attr("allowzero", 0)
    out, unknown = [], None
    for k, s in enumerate(shape):
        if s == 0 and not allowzero:
            if k >= x.rank:
                ctx.fail(f"shape {shape}: 0 at position {k} copies a dimension the input "
                         f"{list(x.shape)} does not have")
            s = x.shape[k]
        elif s == -1:
            if unknown is not None:
                ctx.fail(f"shape {shape} has more than one -1")
            unknown = k
            s = 1
        elif s < -1:
            ctx.fail(f"shape {shape} has the invalid entry {s}")
        out.append(s)
    if unknown is not None:
        rest = int(np.prod(out, dtype=np.int64))
        if rest == 0 or x.size % rest:
            ctx.fail(f"cannot reshape {list(x.shape)} to {shape}")
        out[unknown] = x.size // rest
    ctx.view(0, x, out)


@op("Flatten")
def _flatten(ctx):
    x = ctx.input(0)
    axis = int(ctx.attr("axis", 1))
    if not -x.rank <= axis <= x.rank:
        ctx.fail(f"axis {axis} is out of range for rank {x.rank}")
    axis = axis + x.rank if axis < 0 else axis
    ctx.view(0, x, (int(np.prod(x.shape[:axis], dtype=np.int64)),
                    int(np.prod(x.shape[axis:], dtype=np.int64))))


def _axes_input(ctx, k):
    """Axes from input ``k`` (opset 13+) or the ``axes`` attribute (earlier opsets)."""
    if len(ctx.inputs) > k and ctx.inputs[k] is not None:
        return _ints(ctx.const_input(k))
    a = ctx.attr("axes")
    return None if a is None else [int(v) for v in a]


@op("Squeeze")
def _squeeze(ctx):
    x = ctx.input(0)
    axes = _axes_input(ctx, 1)
    if axes is None:
        axes = [k for k, d in enumerate(x.shape) if d == 1]
    axes = _axes(ctx, axes, x.rank)
    for a in axes:
        if x.shape[a] != 1:
            ctx.fail(f"cannot squeeze axis {a} of shape {list(x.shape)}: its extent is not 1")
    ctx.view(0, x, [d for k, d in enumerate(x.shape) if k not in axes])


@op("Unsqueeze")
def _unsqueeze(ctx):
    x = ctx.input(0)
    axes = _axes_input(ctx, 1)
    if axes is None:
        ctx.fail("no axes given")
    rank = x.rank + len(axes)
    axes = _axes(ctx, axes, rank)
    dims = iter(x.shape)
    ctx.view(0, x, [1 if k in axes else next(dims) for k in range(rank)])


@op("Identity")
def _identity(ctx):
    x = ctx.input(0)
    ctx.view(0, x, x.shape)


@op("Dropout")
def _dropout(ctx):
    x = ctx.input(0)
    ratio = ctx.input(1, required=False) if len(ctx.inputs) > 1 else None
    training = ctx.input(2, required=False) if len(ctx.inputs) > 2 else None
    if training is not None:
        if training.value is None:
            ctx.fail("training_mode must be known at compile time", unsupported=True)
        if bool(np.asarray(training.value).reshape(-1)[0]):
            r = 0.5 if ratio is None else ratio.value
            if r is None or float(np.asarray(r).reshape(-1)[0]) != 0.0:
                ctx.fail("training-mode Dropout is random; polytc compiles inference only",
                         unsupported=True)
    ctx.view(0, x, x.shape)
    if ctx.wants(1):
        ctx.const(1, np.ones(x.shape, np.bool_))


# --- permutations and pieces -----------------------------------------------------------------
@op("Transpose")
def _transpose(ctx):
    x = ctx.input(0)
    perm = ctx.attr("perm")
    perm = list(range(x.rank))[::-1] if perm is None else [int(p) for p in perm]
    if sorted(perm) != list(range(x.rank)):
        ctx.fail(f"perm {perm} is not a permutation of the {x.rank} axes")
    moved = [p for p in perm if x.shape[p] != 1]
    if moved == sorted(moved):
        ctx.view(0, x, [x.shape[p] for p in perm])  # only axes of extent 1 move
        return
    ctx.result.kind = "movement"
    y = ctx.out(0, [x.shape[p] for p in perm], x.dtype)
    i = idx(x.rank)
    src = [None] * x.rank
    for k, p in enumerate(perm):
        src[p] = i[k]
    ctx.emit(y, i, x(*src))


@op("Concat")
def _concat(ctx):
    xs = [r for r in ctx.inputs if r is not None]
    if not xs:
        ctx.fail("no inputs")
    rank = xs[0].rank
    axis = _axis(ctx, ctx.attr("axis", 0), rank)
    for r in xs:
        if r.rank != rank or any(a != b for k, (a, b) in enumerate(zip(r.shape, xs[0].shape))
                                 if k != axis):
            ctx.fail(f"inputs of shapes {[list(r.shape) for r in xs]} do not concatenate "
                     f"along axis {axis}")
        if r.dtype != xs[0].dtype:
            ctx.fail(f"inputs have different types ({r.dtype.name}, {xs[0].dtype.name})")
    shape = list(xs[0].shape)
    shape[axis] = sum(r.shape[axis] for r in xs)
    parts = [r for r in xs if r.size > 0]
    if len(parts) == 1:
        ctx.view(0, parts[0], shape)
        return
    ctx.result.kind = "movement"
    y = ctx.out(0, shape, xs[0].dtype)
    if not parts:
        return
    i = idx(rank)
    offs = np.cumsum([0] + [r.shape[axis] for r in parts]).tolist()

    def read(k):
        j = list(i)
        j[axis] = _shift(i[axis], -offs[k])
        return parts[k](*j)
    if len(parts) <= _MAX_TERNARY:
        rhs = read(len(parts) - 1)
        for k in range(len(parts) - 2, -1, -1):
            rhs = f"({i[axis]} < {offs[k + 1]} ? {read(k)} : {rhs})"
        _put(ctx, y, i, rhs)
    else:  # the last piece first: it sizes the output
        for k in range(len(parts) - 1, -1, -1):
            _put(ctx, y, i, read(k), {i[axis]: (offs[k], offs[k + 1])})


@op("Split")
def _split(ctx):
    x = ctx.input(0)
    axis = _axis(ctx, ctx.attr("axis", 0), x.rank)
    n = len(ctx.node.outputs)
    d = x.shape[axis]
    if len(ctx.inputs) > 1 and ctx.inputs[1] is not None:
        sizes = _ints(ctx.const_input(1))
    elif ctx.attr("split") is not None:
        sizes = [int(s) for s in ctx.attr("split")]
    elif ctx.attr("num_outputs") is not None:
        n = int(ctx.attr("num_outputs"))
        chunk = -(-d // n)
        sizes = [min(chunk, max(0, d - k * chunk)) for k in range(n)]
    else:
        if d % n:
            ctx.fail(f"axis {axis} of extent {d} does not split into {n} equal parts")
        sizes = [d // n] * n
    if len(sizes) != len(ctx.node.outputs) or sum(sizes) != d or min(sizes, default=0) < 0:
        ctx.fail(f"split sizes {sizes} do not split extent {d} into "
                 f"{len(ctx.node.outputs)} outputs")
    ctx.result.kind = "movement"
    i = idx(x.rank)
    off = 0
    for k, s in enumerate(sizes):
        shape = list(x.shape)
        shape[axis] = s
        if ctx.wants(k):
            if s == d:
                ctx.view(k, x, shape)
            elif s == 0:  # a constant, not an output the program never writes
                ctx.const(k, np.zeros(shape, x.dtype))
            else:
                y = ctx.out(k, shape, x.dtype)
                j = list(i)
                j[axis] = _shift(i[axis], off)
                ctx.emit(y, i, x(*j))
        off += s


def _slice_params(ctx, x):
    """(starts, steps, counts) per axis of ``x``."""
    if len(ctx.inputs) > 1:  # opset 10+: inputs
        starts = _ints(ctx.const_input(1))
        ends = _ints(ctx.const_input(2))
        axes = _ints(ctx.const_input(3)) if len(ctx.inputs) > 3 and ctx.inputs[3] is not None \
            else list(range(len(starts)))
        steps = _ints(ctx.const_input(4)) if len(ctx.inputs) > 4 and \
            ctx.inputs[4] is not None else [1] * len(starts)
    else:
        starts, ends = list(ctx.attr("starts")), list(ctx.attr("ends"))
        axes = list(ctx.attr("axes", range(len(starts))))
        steps = [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        ctx.fail(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} differ in "
                 "length")
    axes = _axes(ctx, axes, x.rank)
    first, step, count = [0] * x.rank, [1] * x.rank, list(x.shape)
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st == 0:
            ctx.fail("a step is 0")
        d = x.shape[a]
        big = 1 << 62  # INT64_MAX and friends: beyond any extent, clamped as Python does
        r = range(d)[slice(max(-big, min(big, s)), max(-big, min(big, e)), st)]
        first[a], step[a], count[a] = r.start, r.step, len(r)
    return first, step, count


@op("Slice")
def _slice(ctx):
    x = ctx.input(0)
    first, step, count = _slice_params(ctx, x)
    if list(count) == list(x.shape) and all(s == 1 for s in step):
        ctx.view(0, x, x.shape)
        return
    ctx.result.kind = "movement"
    y = ctx.out(0, count, x.dtype)
    i = idx(x.rank)
    src = []
    for a in range(x.rank):
        if count[a] == 1:
            src.append(str(first[a]))
        elif step[a] == 1:
            src.append(_shift(i[a], first[a]))
        else:
            t = f"{first[a]} + {step[a]} * {i[a]}" if step[a] > 0 else \
                f"{first[a]} - {-step[a]} * {i[a]}"
            src.append(t)
    ctx.emit(y, i, x(*src))


# --- gathers --------------------------------------------------------------------------------
@op("Gather")
def _gather(ctx):
    x, ind = ctx.input(0), ctx.input(1)
    if ind.dtype.kind not in "iu":
        ctx.fail(f"indices of type {ind.dtype.name}")
    axis = _axis(ctx, ctx.attr("axis", 0), x.rank)
    n = x.shape[axis]
    ctx.result.kind = "movement"
    y = ctx.out(0, x.shape[:axis] + ind.shape + x.shape[axis + 1:], x.dtype)
    i = idx(x.rank)
    j = idx(ind.rank, "k")  # not "j": j0 and j1 are builtins
    if ind.value is not None:
        v = np.asarray(ind.value).astype(np.int64)
        if v.size and (v.min() < -n or v.max() >= n):
            ctx.fail(f"indices {v.reshape(-1).tolist()[:8]} out of range for an axis of "
                     f"extent {n}")
    if ind.scalar is not None:
        k = int(ind.scalar)
        sub = str(k + n if k < 0 else k)
    elif ind.value is not None and (np.asarray(ind.value) >= 0).all():
        sub = ind(*j)
    else:
        sub = _wrapped(ind(*j), n)
    src = i[:axis] + [sub] + i[axis + 1:]
    ctx.emit(y, i[:axis] + j + i[axis + 1:], x(*src))


@op("GatherElements")
def _gather_elements(ctx):
    x, ind = ctx.input(0), ctx.input(1)
    axis = _axis(ctx, ctx.attr("axis", 0), x.rank)
    if ind.rank != x.rank:
        ctx.fail(f"indices of rank {ind.rank} for data of rank {x.rank}")
    for k, (a, b) in enumerate(zip(ind.shape, x.shape)):
        if k != axis and a > b:
            ctx.fail(f"indices of shape {list(ind.shape)} exceed data of shape "
                     f"{list(x.shape)} along axis {k}")
    ctx.result.kind = "movement"
    y = ctx.out(0, ind.shape, x.dtype)
    i = idx(x.rank)
    src = list(i)
    src[axis] = _wrapped(ind(*i), x.shape[axis])
    ctx.emit(y, i, x(*src))


# --- broadcasts and repeats ------------------------------------------------------------------
@op("Expand")
def _expand(ctx):
    x = ctx.input(0)
    shape = _ints(ctx.const_input(1))
    from .registry import broadcast_shapes
    out = broadcast_shapes(ctx.node, x.shape, tuple(shape))
    if out == x.shape:
        ctx.view(0, x, out)
        return
    ctx.result.kind = "movement"
    y = ctx.out(0, out, x.dtype)
    i = idx(len(out))
    ctx.emit(y, i, x.bcast(i))


@op("Tile")
def _tile(ctx):
    x = ctx.input(0)
    reps = _ints(ctx.const_input(1))
    if len(reps) != x.rank or min(reps, default=0) < 0:
        ctx.fail(f"repeats {reps} for an input of rank {x.rank}")
    out = [d * r for d, r in zip(x.shape, reps)]
    if out == list(x.shape):
        ctx.view(0, x, out)
        return
    ctx.result.kind = "movement"
    y = ctx.out(0, out, x.dtype)
    i = idx(x.rank)
    ctx.emit(y, i, x(*[f"{a} % {d}" if r > 1 and d > 1 else (a if d > 1 else 0)
                       for a, d, r in zip(i, x.shape, reps)]))


@op("Pad")
def _pad(ctx):
    x = ctx.input(0)
    mode = ctx.attr("mode", "constant")
    if len(ctx.inputs) > 1:
        pads = _ints(ctx.const_input(1))
        cv = ctx.input(2, required=False) if len(ctx.inputs) > 2 else None
        axes = _ints(ctx.const_input(3)) if len(ctx.inputs) > 3 and \
            ctx.inputs[3] is not None else list(range(x.rank))
    else:  # opset < 11: attributes
        pads = [int(p) for p in ctx.attr("pads")]
        cv = literal(ctx.attr("value", 0.0), x.dtype)
        axes = list(range(x.rank))
    axes = _axes(ctx, axes, x.rank)
    if len(pads) != 2 * len(axes):
        ctx.fail(f"{len(pads)} pads for {len(axes)} axes")
    before, after = [0] * x.rank, [0] * x.rank
    for k, a in enumerate(axes):
        before[a], after[a] = pads[k], pads[k + len(axes)]
    out = [d + b + e for d, b, e in zip(x.shape, before, after)]
    if not any(before) and not any(after):
        ctx.view(0, x, x.shape)
        return
    if mode not in ("constant", "reflect", "edge", "wrap"):
        ctx.fail(f"mode '{mode}' is not supported", unsupported=True)
    ctx.result.kind = "movement"
    y = ctx.out(0, out, x.dtype)
    i = idx(x.rank)
    if mode == "constant":
        if cv is None:
            value = literal(0, x.dtype)
        elif isinstance(cv, str):
            value = cv
        elif cv.value is not None:
            if cv.value.size != 1:
                ctx.fail("constant_value must have one element")
            value = literal(cv.value.reshape(-1)[0], x.dtype)
        else:
            if cv.size != 1:
                ctx.fail("constant_value must have one element")
            value = cv(*[0] * cv.rank)
        conds = []
        for a in range(x.rank):
            if before[a] > 0:
                conds.append(f"{i[a]} >= {before[a]}")
            if before[a] + x.shape[a] < out[a]:
                conds.append(f"{i[a]} < {before[a] + x.shape[a]}")
        read = x(*[_shift(i[a], -before[a]) for a in range(x.rank)])
        if x.size == 0:
            ctx.emit(y, i, value)
        elif conds:
            ctx.emit(y, i, f"({' && '.join(conds)}) ? {read} : {value}")
        else:
            ctx.emit(y, i, read)
        return
    if x.size == 0:
        ctx.fail(f"{mode} padding of an empty tensor")
    src = []
    for a in range(x.rank):
        # a negative pad first crops (as onnxruntime does): the data is [lo, lo + d)
        lo = max(0, -before[a])
        d = x.shape[a] - lo - max(0, -after[a])
        b = max(0, before[a])
        if d <= 0:
            ctx.fail(f"{mode} padding of axis {a} cropped to nothing")
        if b == 0 and after[a] <= 0:
            src.append(_shift(i[a], lo))
        elif d == 1:
            src.append(str(lo))
        elif mode == "edge":
            src.append(_shift(f"min(max({_shift(i[a], -b)}, 0), {d - 1})", lo))
        elif mode == "wrap":
            k = -(-b // d) + 1
            src.append(_shift(f"({i[a]} + {k * d - b}) % {d}", lo))
        else:  # reflect: period 2(d-1), mirrored in its second half
            p = 2 * (d - 1)
            k = -(-b // p) + 1
            m = f"(({i[a]} + {k * p - b}) % {p})"
            src.append(_shift(f"min({m}, {p} - {m})", lo))
    ctx.emit(y, i, x(*src))


@op("Trilu")
def _trilu(ctx):
    x = ctx.input(0)
    k = ctx.input(1, required=False) if len(ctx.inputs) > 1 else None
    k = 0 if k is None else _ints(ctx.const_input(1))[0]
    if x.rank < 2:
        ctx.fail(f"input of rank {x.rank}; Trilu wants rank 2 or more")
    ctx.result.kind = "movement"
    y = ctx.out(0, x.shape, x.dtype)
    i = idx(x.rank)
    r, c = i[-2], i[-1]
    keep = f"{c} - {r} >= {k}" if ctx.attr("upper", 1) else f"{c} - {r} <= {k}"
    ctx.emit(y, i, f"({keep}) ? {x(*i)} : {literal(0, x.dtype)}")


@op("DepthToSpace")
def _depth_to_space(ctx):
    x = ctx.input(0)
    b = int(ctx.attr("blocksize"))
    if x.rank != 4 or x.shape[1] % (b * b):
        ctx.fail(f"input of shape {list(x.shape)} with blocksize {b}")
    n, c, h, w = x.shape
    co = c // (b * b)
    ctx.result.kind = "movement"
    y = ctx.out(0, (n, co, h * b, w * b), x.dtype)
    i = idx(4)
    bh, bw = f"{i[2]} % {b}", f"{i[3]} % {b}"
    if ctx.attr("mode", "DCR") == "CRD":
        ch = f"{i[1]} * {b * b} + ({bh}) * {b} + {bw}"
    else:
        ch = f"(({bh}) * {b} + {bw}) * {co} + {i[1]}"
    ctx.emit(y, i, x(i[0], ch, f"{i[2]} / {b}", f"{i[3]} / {b}"))


@op("SpaceToDepth")
def _space_to_depth(ctx):
    x = ctx.input(0)
    b = int(ctx.attr("blocksize"))
    if x.rank != 4 or x.shape[2] % b or x.shape[3] % b:
        ctx.fail(f"input of shape {list(x.shape)} with blocksize {b}")
    n, c, h, w = x.shape
    ctx.result.kind = "movement"
    y = ctx.out(0, (n, c * b * b, h // b, w // b), x.dtype)
    i = idx(4)
    if ctx.attr("mode", "DCR") == "CRD":  # channel c * b * b + bh * b + bw
        blk = f"{i[1]} % {b * b}"
        ch = f"{i[1]} / {b * b}"
    else:  # channel (bh * b + bw) * C + c
        blk = f"{i[1]} / {c}"
        ch = f"{i[1]} % {c}"
    ctx.emit(y, i, x(i[0], ch, f"{i[2]} * {b} + ({blk}) / {b}",
                     f"{i[3]} * {b} + ({blk}) % {b}"))


# --- values known only at run time ------------------------------------------------------------
@op("ConstantOfShape")
def _constant_of_shape(ctx):
    ctx.const_input(0)  # folded before lowering when known: here it never is
    ctx.fail("the shape must be known at compile time", unsupported=True)


@op("Range")
def _range(ctx):
    for k in range(3):
        ctx.const_input(k)
    ctx.fail("the bounds must be known at compile time", unsupported=True)
