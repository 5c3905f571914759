"""Reductions along axes: the Reduce* ops, ArgMax/ArgMin, Softmax, LogSoftmax, Hardmax
and the normalisations (BatchNormalization, LayerNormalization, InstanceNormalization,
GroupNormalization, LpNormalization, LRN).

Conventions: index ``i{d}`` names dimension ``d`` of the input, ``r{d}`` the reduction
over it.  A reduction always writes a *compact* result, indexed by the kept dimensions
only; a result with keepdims is then written from it by a pointwise statement.  (Reducing
straight into the size-1 dimensions would need either a left-hand index that no read
uses, which is how the scheduler recognises a contraction, or reads such as
``X(i2 + r2)``, which look like a stencil and make isl's fusing scheduler take minutes.)
"""
from __future__ import annotations

import numpy as np

from .registry import equal, idx, literal, op, tc_type


def _axis(ctx, a, rank):
    a = int(a)
    if not -rank <= a < max(rank, 1):
        ctx.fail(f"axis {a} is out of range for rank {rank}")
    return a + rank if a < 0 else a


def _float_only(ctx, *refs):
    for r in refs:
        if r is not None and r.dtype.kind != "f":
            ctx.fail(f"{ctx.node.op} of {r.dtype.name} is not supported", unsupported=True)


class _Red:
    """Index bookkeeping for a reduction of ``x`` over ``axes``."""

    def __init__(self, x, axes):
        self.x, self.axes = x, sorted(set(axes))
        self.i = idx(x.rank)  # x's indices
        self.lhs = [f"i{d}" for d in range(x.rank) if d not in self.axes]  # compact
        self.ranges = {f"r{d}": (0, x.shape[d]) for d in self.axes}
        self.n = int(np.prod([x.shape[d] for d in self.axes], dtype=np.int64))

    @property
    def read(self) -> str:
        """The read of ``x`` inside the reduction."""
        return self.x(*[f"r{d}" if d in self.axes else f"i{d}" for d in range(self.x.rank)])

    def shape(self, keep: bool = False) -> tuple:
        return tuple(1 if d in self.axes else self.x.shape[d] for d in range(self.x.rank)
                     if keep or d not in self.axes)

    def temp(self, ctx, dtype=None):
        """A compact temporary."""
        return ctx.temp(self.shape(), dtype or self.x.dtype)

    def at(self, ref) -> str:
        """A read of compact ``ref`` from a statement over all of x's indices."""
        return ref(*self.lhs)

    def finish(self, ctx, y, keep, text):
        """``y`` (compact, or with the reduced dimensions kept) = ``text``, an expression
        of the compact indices."""
        ctx.emit(y, [f"i{d}" for d in range(self.x.rank) if keep or d not in self.axes],
                 text)


def _reduce_axes(ctx, x):
    """The axes to reduce, or None for 'no reduction' (noop_with_empty_axes)."""
    axes = None
    if len(ctx.inputs) > 1 and ctx.inputs[1] is not None:
        axes = [int(a) for a in np.asarray(ctx.const_input(1)).reshape(-1)]
    elif ctx.attr("axes") is not None:
        axes = [int(a) for a in ctx.attr("axes")]
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0):
            return None
        return list(range(x.rank))
    axes = [_axis(ctx, a, x.rank) for a in axes]
    if len(set(axes)) != len(axes):
        ctx.fail(f"axes {axes} repeat an axis")
    return axes


_KINDS = {  # op -> (reduction, term template, final template, allowed dtype kinds)
    "ReduceSum": ("+=!", "{x}", None, "fiu"),
    "ReduceMean": ("+=!", "{x}", "{y} / {n}", "fiu"),
    "ReduceMax": ("max=!", "{x}", None, "fiub"),
    "ReduceMin": ("min=!", "{x}", None, "fiub"),
    "ReduceProd": ("*=!", "{x}", None, "fiu"),
    "ReduceSumSquare": ("+=!", "{x} * {x}", None, "fiu"),
    "ReduceL1": ("+=!", "({x} < {zero} ? -{x} : {x})", None, "fiu"),
    "ReduceL2": ("+=!", "{x} * {x}", "sqrt({y})", "f"),
    "ReduceLogSum": ("+=!", "{x}", "log({y})", "f"),
    "ReduceLogSumExp": ("+=!", "exp({x} - {shift})", "log({y}) + {shift}", "f"),
    "GlobalLpPool": ("+=!", "pow(fabs({x}), {p})", "pow({y}, {invp})", "f"),
}


def _reduce(ctx, name, x, axes, keep):
    """Output 0 = reduction ``name`` of ``x`` over ``axes``."""
    red_op, term, final, kinds = _KINDS[name]
    if x.dtype.kind not in kinds:
        ctx.fail(f"{ctx.node.op} of {x.dtype.name} is not supported", unsupported=True)
    r = _Red(x, axes)
    y = ctx.out(0, r.shape(keep), x.dtype)
    ctx.result.kind = "reduction"
    if name == "ReduceMean" and x.dtype.kind != "f" and r.n == 0:
        ctx.fail("integer ReduceMean over an empty set", unsupported=True)
    exact = x.dtype.kind == "f"
    c = {"zero": literal(0, x.dtype), "x": r.read,
         "n": literal(r.n, x.dtype if exact else np.int64)}  # int8 cannot count to 300
    if name == "GlobalLpPool":
        p = float(ctx.attr("p", 2))
        c.update(p=literal(p, x.dtype), invp=literal(1 / p, x.dtype))
    if name == "ReduceLogSumExp":  # shifted by the maximum (by 0 where it is infinite)
        m = r.temp(ctx)
        ctx.emit(m, r.lhs, r.read, "max=!", r.ranges)
        inf, mk = literal(np.inf, x.dtype), r.at(m)
        c["shift"] = f"(({mk} > -{inf} && {mk} < {inf}) ? {mk} : {c['zero']})"
    if name == "ReduceMean" and not exact:  # as onnx's reference: the (wrapped) sum / n
        final = f"{tc_type(x.dtype)}({final})"
    acc = r.temp(ctx) if keep else y
    ctx.emit(acc, r.lhs, term.format(**c), red_op, r.ranges)
    if final or keep:
        r.finish(ctx, y, keep, final.format(y=r.at(acc), **c) if final else r.at(acc))


def _reduction(name):
    def lower(ctx):
        x = ctx.input(0)
        axes = _reduce_axes(ctx, x)
        if axes is None:  # noop_with_empty_axes: a copy
            y = ctx.out(0, x.shape, x.dtype)
            ctx.emit(y, idx(x.rank), x(*idx(x.rank)))
            return
        _reduce(ctx, name, x, axes, bool(ctx.attr("keepdims", 1)))

    return lower


for _name in _KINDS:
    if _name.startswith("Reduce"):
        op(_name)(_reduction(_name))


@op("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def _global_pool(ctx):
    x = ctx.input(0)
    if x.rank < 3:
        ctx.fail(f"pooling takes (N, C, spatial...) input, not {list(x.shape)}")
    name = {"GlobalAveragePool": "ReduceMean", "GlobalMaxPool": "ReduceMax"}.get(
        ctx.node.op, ctx.node.op)
    _reduce(ctx, name, x, range(2, x.rank), True)


# --- ArgMax, ArgMin -------------------------------------------------------------------------
@op("ArgMax", "ArgMin")
def _argminmax(ctx):
    x = ctx.input(0)
    if x.dtype.kind not in "fiu":
        ctx.fail(f"{ctx.node.op} of {x.dtype.name} is not supported", unsupported=True)
    a = _axis(ctx, ctx.attr("axis", 0), x.rank)
    keep = bool(ctx.attr("keepdims", 1))
    r = _Red(x, [a])
    y = ctx.out(0, r.shape(keep), np.int64)
    ctx.result.kind = "reduction"
    if y.size == 0:
        return
    if x.shape[a] == 0:
        ctx.fail(f"{ctx.node.op} over an empty axis")
    best = r.temp(ctx)
    ctx.emit(best, r.lhs, r.read, "max=!" if ctx.node.op == "ArgMax" else "min=!", r.ranges)
    pos = f"int64(r{a})"
    hit = equal(r.read, r.at(best), x.dtype)
    first = r.temp(ctx, np.int64) if keep else y
    if ctx.attr("select_last_index", 0):
        ctx.emit(first, r.lhs, f"({hit}) ? {pos} : {literal(-1, np.int64)}", "max=!",
                 r.ranges)
    else:
        ctx.emit(first, r.lhs, f"({hit}) ? {pos} : {literal(x.shape[a], np.int64)}",
                 "min=!", r.ranges)
    if keep:
        r.finish(ctx, y, keep, r.at(first))


# --- Softmax, LogSoftmax, Hardmax -----------------------------------------------------------
@op("Softmax", "LogSoftmax", "Hardmax")
def _softmax(ctx):
    x = ctx.input(0)
    _float_only(ctx, x)
    a = _axis(ctx, ctx.attr("axis", -1), x.rank)
    y = ctx.out(0, x.shape, x.dtype)
    ctx.result.kind = "reduction"
    if y.size == 0:
        return
    if x.rank == 0:
        ctx.emit(y, [], literal(0 if ctx.node.op == "LogSoftmax" else 1, x.dtype))
        return
    r = _Red(x, [a])
    i = r.i
    mx = r.temp(ctx)
    ctx.emit(mx, r.lhs, r.read, "max=!", r.ranges)
    m = r.at(mx)
    if ctx.node.op == "Hardmax":  # 1 at the first maximum
        first = r.temp(ctx, np.int32)
        ctx.emit(first, r.lhs, f"({equal(r.read, m, x.dtype)}) ? int32(r{a}) : "
                 f"int32({x.shape[a]})",
                 "min=!", r.ranges)
        one, zero = literal(1, x.dtype), literal(0, x.dtype)
        ctx.emit(y, i, f"(int32(i{a}) == {r.at(first)}) ? {one} : {zero}")
        return
    s = r.temp(ctx)
    if ctx.node.op == "Softmax":  # Y holds exp(x - max) first
        ctx.emit(y, i, f"exp({x(*i)} - {m})")
        ctx.emit(s, r.lhs, y(*[f"r{d}" if d == a else f"i{d}" for d in range(x.rank)]),
                 "+=!", r.ranges)
        ctx.emit(y, i, f"{y(*i)} / {r.at(s)}")
    else:
        ctx.emit(s, r.lhs, f"exp({r.read} - {m})", "+=!", r.ranges)
        ctx.emit(y, i, f"{x(*i)} - {m} - log({r.at(s)})")


# --- normalisations -------------------------------------------------------------------------
def _moments(ctx, r, eps=None):
    """Compact mean and variance of x over r's axes (two passes); with ``eps``, the
    second is 1 / sqrt(variance + eps)."""
    x = r.x
    mean, var = r.temp(ctx), r.temp(ctx)
    n = literal(r.n, x.dtype)
    ctx.emit(mean, r.lhs, r.read, "+=!", r.ranges)
    ctx.emit(mean, r.lhs, f"{r.at(mean)} / {n}")
    diff = f"({r.read} - {r.at(mean)})"
    ctx.emit(var, r.lhs, f"{diff} * {diff}", "+=!", r.ranges)
    if eps is None:
        ctx.emit(var, r.lhs, f"{r.at(var)} / {n}")
    else:
        one = literal(1, x.dtype)
        ctx.emit(var, r.lhs, f"{one} / sqrt({r.at(var)} / {n} + {literal(eps, x.dtype)})")
    return mean, var


@op("LayerNormalization")
def _layernorm(ctx):
    x, scale, bias = ctx.input(0), ctx.input(1), ctx.input(2, required=False)
    _float_only(ctx, x, scale, bias)
    a = _axis(ctx, ctx.attr("axis", -1), x.rank)
    r = _Red(x, range(a, x.rank))
    y = ctx.out(0, x.shape, x.dtype)
    ctx.result.kind = "reduction"
    mean, inv = _moments(ctx, r, float(ctx.attr("epsilon", 1e-5)))
    i = r.i
    rhs = f"({x(*i)} - {r.at(mean)}) * {r.at(inv)} * {scale.bcast(i)}"
    if bias is not None:
        rhs += f" + {bias.bcast(i)}"
    ctx.emit(y, i, rhs)
    for k, t in ((1, mean), (2, inv)):  # Mean and InvStdDev, reduced dimensions kept
        if ctx.wants(k):
            r.finish(ctx, ctx.out(k, r.shape(True), x.dtype), True, r.at(t))


@op("InstanceNormalization")
def _instancenorm(ctx):
    x, scale, bias = ctx.input(0), ctx.input(1), ctx.input(2)
    _float_only(ctx, x, scale, bias)
    if x.rank < 3:
        ctx.fail(f"the input must be (N, C, D...), not {list(x.shape)}")
    r = _Red(x, range(2, x.rank))
    y = ctx.out(0, x.shape, x.dtype)
    ctx.result.kind = "reduction"
    mean, inv = _moments(ctx, r, float(ctx.attr("epsilon", 1e-5)))
    i = r.i
    ctx.emit(y, i, f"({x(*i)} - {r.at(mean)}) * {r.at(inv)} * {scale('i1')} + {bias('i1')}")


@op("GroupNormalization")
def _groupnorm(ctx):
    x, scale, bias = ctx.input(0), ctx.input(1), ctx.input(2)
    _float_only(ctx, x, scale, bias)
    G = int(ctx.attr("num_groups"))
    if x.rank < 2 or G < 1 or x.shape[1] % G:
        ctx.fail(f"{G} groups do not divide the channels of {list(x.shape)}")
    N, C = x.shape[:2]
    Cg = C // G
    y = ctx.out(0, x.shape, x.dtype)
    ctx.result.kind = "reduction"
    mean, inv = ctx.temp((N, G), x.dtype), ctx.temp((N, G), x.dtype)
    sp = list(range(2, x.rank))
    ranges = {"c": (0, Cg), **{f"r{d}": (0, x.shape[d]) for d in sp}}
    read = x("i0", f"i1 * {Cg} + c", *[f"r{d}" for d in sp])
    n = literal(Cg * int(np.prod(x.shape[2:], dtype=np.int64)), x.dtype)
    ctx.emit(mean, ["i0", "i1"], read, "+=!", ranges)
    ctx.emit(mean, ["i0", "i1"], f"{mean('i0', 'i1')} / {n}")
    diff = f"({read} - {mean('i0', 'i1')})"
    ctx.emit(inv, ["i0", "i1"], f"{diff} * {diff}", "+=!", ranges)
    eps = literal(float(ctx.attr("epsilon", 1e-5)), x.dtype)
    ctx.emit(inv, ["i0", "i1"],
             f"{literal(1, x.dtype)} / sqrt({inv('i0', 'i1')} / {n} + {eps})")
    i = idx(x.rank)
    g = f"i1 / {Cg}" if Cg != 1 else "i1"
    if scale.shape == (C,):
        sc, bc = scale("i1"), bias("i1")
    elif scale.shape == (G,):  # opset 18: one scale and bias per group
        sc, bc = scale(g), bias(g)
    else:
        ctx.fail(f"scale of shape {list(scale.shape)} for {C} channels in {G} groups")
    ctx.emit(y, i, f"({x(*i)} - {mean('i0', g)}) * {inv('i0', g)} * {sc} + {bc}")


@op("BatchNormalization")
def _batchnorm(ctx):
    x = ctx.input(0)
    scale, bias, mean, var = (ctx.input(k) for k in range(1, 5))
    _float_only(ctx, x, scale, bias, mean, var)
    if x.rank < 2:
        ctx.fail(f"the input must be (N, C, ...), not {list(x.shape)}")
    C = x.shape[1]
    for p in (scale, bias, mean, var):
        if p.shape != (C,):
            ctx.fail(f"parameter of shape {list(p.shape)} for {C} channels")
    eps = float(ctx.attr("epsilon", 1e-5))
    training = bool(ctx.attr("training_mode", 0))
    if not training and any(ctx.wants(k) for k in range(1, 5)):
        ctx.fail("the optional outputs exist only in training mode", unsupported=True)
    y = ctx.out(0, x.shape, x.dtype)
    ctx.result.kind = "reduction" if training else "elementwise"
    dt = x.dtype
    if training:
        mu, v = _moments(ctx, _Red(x, [0] + list(range(2, x.rank))))
        mom = float(ctx.attr("momentum", 0.9))
        for k, run, cur in ((1, mean, mu), (2, var, v)):
            if ctx.wants(k):
                o = ctx.out(k, (C,), dt)
                ctx.emit(o, ["i0"], f"{run('i0')} * {literal(mom, dt)} + {cur('i0')} * "
                         f"{literal(1 - mom, dt)}")
        mean, var = mu, v
    # Y = X * s(c) + t(c): s = scale / sqrt(var + eps), t = bias - mean * s
    s, t = ctx.temp((C,), dt), ctx.temp((C,), dt)
    ctx.emit(s, ["i0"], f"{scale('i0')} / sqrt({var('i0')} + {literal(eps, dt)})")
    ctx.emit(t, ["i0"], f"{bias('i0')} - {mean('i0')} * {s('i0')}")
    i = idx(x.rank)
    ctx.emit(y, i, f"{x(*i)} * {s('i1')} + {t('i1')}")


@op("LpNormalization")
def _lpnorm(ctx):
    x = ctx.input(0)
    _float_only(ctx, x)
    p = int(ctx.attr("p", 2))
    if p not in (1, 2):
        ctx.fail(f"p = {p}: LpNormalization takes p = 1 or 2")
    r = _Red(x, [_axis(ctx, ctx.attr("axis", -1), x.rank)])
    y = ctx.out(0, x.shape, x.dtype)
    ctx.result.kind = "reduction"
    if y.size == 0:
        return
    norm = r.temp(ctx)
    ctx.emit(norm, r.lhs, f"fabs({r.read})" if p == 1 else f"{r.read} * {r.read}", "+=!",
             r.ranges)
    n, zero = r.at(norm), literal(0, x.dtype)
    # a zero norm (all of the slice is zero) gives zeros
    ctx.emit(y, r.i, f"{n} == {zero} ? {zero} : {x(*r.i)} / {n if p == 1 else f'sqrt({n})'}")


@op("LRN")
def _lrn(ctx):
    """Y = X / (bias + alpha / size * S) ^ beta, S the sum of squares over the channels
    from c - floor((size - 1) / 2) to c + ceil((size - 1) / 2), clipped to the axis."""
    x = ctx.input(0)
    _float_only(ctx, x)
    size = int(ctx.attr("size", 0))
    if size < 1:
        ctx.fail(f"size must be positive, not {size}")
    if x.rank < 2:
        ctx.fail(f"the input must be (N, C, D...), not {list(x.shape)}")
    y = ctx.out(0, x.shape, x.dtype)
    ctx.result.kind = "reduction"
    if y.size == 0:
        return
    i, C, before = idx(x.rank), x.shape[1], (size - 1) // 2
    sq = ctx.temp(x.shape, x.dtype)
    read = x(i[0], "r", *i[2:])
    ctx.emit(sq, i, f"{read} * {read}", "+=!",
             {"r": (f"max(0, i1 - {before})", f"min({C}, i1 + {size - before})")})
    dt = x.dtype
    scale, bias = literal(float(ctx.attr("alpha", 1e-4)) / size, dt), \
        literal(float(ctx.attr("bias", 1.0)), dt)
    ctx.emit(y, i, f"{x(*i)} / pow({bias} + {scale} * {sq(*i)}, "
                   f"{literal(float(ctx.attr('beta', 0.75)), dt)})")
