"""Elementwise ops (numpy broadcasting): arithmetic, math functions, activations,
comparisons and logic, Where, Clip, Cast, variadic Sum/Mean/Max/Min."""
from __future__ import annotations

import numpy as np
from onnx import helper

from .registry import broadcast_shapes, idx, literal, op, tc_type

# --- unary math: x -> TC text, for float inputs -----------------------------------------
_FLOAT_UNARY = {
    "Exp": "exp({x})", "Log": "log({x})", "Sqrt": "sqrt({x})", "Tanh": "tanh({x})",
    "Erf": "erf({x})", "Sin": "sin({x})", "Cos": "cos({x})", "Tan": "tan({x})",
    "Asin": "asin({x})", "Acos": "acos({x})", "Atan": "atan({x})", "Sinh": "sinh({x})",
    "Cosh": "cosh({x})", "Asinh": "asinh({x})", "Acosh": "acosh({x})",
    "Atanh": "atanh({x})", "Floor": "floor({x})", "Ceil": "ceil({x})",
    "Reciprocal": "{one} / {x}", "Sigmoid": "{one} / ({one} + exp(-{x}))",
    "Softplus": "log1p(exp({x}))", "Softsign": "{x} / ({one} + fabs({x}))",
    "Round": "rint({x})",  # half to even, as ONNX wants
    "Mish": "{x} * tanh(log1p(exp({x})))",
}
# --- unary ops that are defined for every numeric type ----------------------------------
_ANY_UNARY = {
    "Neg": "-{x}", "Abs": "({x} < {zero} ? -{x} : {x})", "Relu": "max({x}, {zero})",
    "Sign": "({x} > {zero} ? {one} : ({x} < {zero} ? -{one} : {zero}))",
    "Identity": "{x}",
}


def _consts(dtype) -> dict:
    return {"zero": literal(0, dtype), "one": literal(1, dtype)}


def _unary(template):
    def lower(ctx):
        x = ctx.input(0)
        if x.dtype.kind not in "fiu" or (template in _FLOAT_UNARY.values() and
                                          x.dtype.kind != "f"):
            ctx.fail(f"{ctx.node.op} of {x.dtype.name} is not supported", unsupported=True)
        c = _consts(x.dtype)
        ctx.elementwise(0, lambda xs: template.format(x=xs, **c))
    return lower


for _name, _t in {**_FLOAT_UNARY, **_ANY_UNARY}.items():
    op(_name)(_unary(_t))


@op("Not")
def _not(ctx):
    ctx.elementwise(0, lambda x: f"!{x}")


@op("IsNaN")
def _isnan(ctx):
    ctx.elementwise(0, lambda x: f"{x} != {x}", dtype=np.bool_)


@op("IsInf")
def _isinf(ctx):
    pos, neg = ctx.attr("detect_positive", 1), ctx.attr("detect_negative", 1)
    inf = literal(np.inf, ctx.input(0).dtype)
    tests = ([f"{{x}} == {inf}"] if pos else []) + ([f"{{x}} == -{inf}"] if neg else [])
    cond = " || ".join(tests) or "(1 == 0)"
    ctx.elementwise(0, lambda x: cond.format(x=x), dtype=np.bool_)


# --- parametrised activations -----------------------------------------------------------
def _activation(template, **defaults):
    def lower(ctx):
        x = ctx.input(0)
        params = {k: literal(ctx.attr(k, v), x.dtype) for k, v in defaults.items()}
        ctx.elementwise(0, lambda xs: template.format(x=xs, **params, **_consts(x.dtype)))
    return lower


op("LeakyRelu")(_activation("({x} >= {zero} ? {x} : {alpha} * {x})", alpha=0.01))
op("Elu")(_activation("({x} >= {zero} ? {x} : {alpha} * expm1({x}))", alpha=1.0))
op("Celu")(_activation("max({zero}, {x}) + min({zero}, {alpha} * expm1({x} / {alpha}))",
                       alpha=1.0))
op("Selu")(_activation("({x} > {zero} ? {gamma} * {x} : {gamma} * {alpha} * expm1({x}))",
                       alpha=1.67326319217681884765625, gamma=1.05070102214813232421875))
op("ThresholdedRelu")(_activation("({x} > {alpha} ? {x} : {zero})", alpha=1.0))
op("HardSigmoid")(_activation("max({zero}, min({one}, {alpha} * {x} + {beta}))",
                              alpha=0.2, beta=0.5))
op("Shrink")(_activation("({x} < -{lambd} ? {x} + {bias} : ({x} > {lambd} ? {x} - {bias} : "
                         "{zero}))", lambd=0.5, bias=0.0))
op("HardSwish")(_activation("{x} * max({zero}, min({one}, {x} / {six} + {half}))",
                            six=6.0, half=0.5))


@op("Gelu")
def _gelu(ctx):
    x = ctx.input(0)
    c = {k: literal(v, x.dtype) for k, v in
         {"half": 0.5, "one": 1.0, "r2": 0.7071067811865476, "k": 0.7978845608028654,
          "a": 0.044715}.items()}
    if ctx.attr("approximate", "none") == "tanh":
        t = "{half} * {x} * ({one} + tanh({k} * ({x} + {a} * {x} * {x} * {x})))"
    else:
        t = "{half} * {x} * ({one} + erf({x} * {r2}))"
    ctx.elementwise(0, lambda xs: t.format(x=xs, **c))


@op("PRelu")
def _prelu(ctx):
    z = literal(0, ctx.input(0).dtype)
    ctx.elementwise(0, lambda x, s: f"({x} >= {z} ? {x} : {s} * {x})")


# --- binary arithmetic ------------------------------------------------------------------
def _binary(sym):
    def lower(ctx):
        a, b = ctx.input(0), ctx.input(1)
        if a.dtype != b.dtype:
            ctx.fail(f"inputs have different types ({a.dtype.name}, {b.dtype.name})")
        ctx.elementwise(0, lambda x, y: f"({x} {sym} {y})")
    return lower


for _name, _sym in {"Add": "+", "Sub": "-", "Mul": "*"}.items():
    op(_name)(_binary(_sym))


@op("Div")
def _div(ctx):
    if ctx.input(1).dtype.kind in "iu" and ctx.input(1).value is None:
        pass  # integer division by zero is caught at run time by the kernel
    ctx.elementwise(0, lambda x, y: f"({x} / {y})")


@op("Mod")
def _mod(ctx):
    a = ctx.input(0)
    z = literal(0, a.dtype)
    rem = (lambda x, y: f"fmod({x}, {y})") if a.dtype.kind == "f" else \
        (lambda x, y: f"({x} % {y})")
    if ctx.attr("fmod", 0):
        ctx.elementwise(0, rem)
    else:  # the result takes the divisor's sign, as Python's %
        ctx.elementwise(0, lambda x, y: f"({rem(x, y)} != {z} && ({rem(x, y)} < {z}) != "
                        f"({y} < {z}) ? {rem(x, y)} + {y} : {rem(x, y)})")


@op("BitShift")
def _bitshift(ctx):
    """Shifts as arithmetic on integers (the language has no bit operators): ``x *
    2^y``, wrapping, to the left; ``floor(x / 2^y)`` to the right, the sign kept.  A
    shift that is negative or at least the width gives what the sign alone gives: -1 to
    the right of a negative x, else 0."""
    x, y = ctx.input(0), ctx.input(1)
    if x.dtype.kind not in "iu" or y.dtype != x.dtype:
        ctx.fail(f"BitShift of {x.dtype.name} by {y.dtype.name} is not supported",
                 unsupported=True)
    t, bits, signed = tc_type(x.dtype), 8 * x.dtype.itemsize, x.dtype.kind == "i"
    z, one = literal(0, x.dtype), literal(1, x.dtype)
    left = ctx.attr("direction", "") == "LEFT"
    if not left and ctx.attr("direction", "") != "RIGHT":
        ctx.fail(f"direction '{ctx.attr('direction', '')}' is not LEFT or RIGHT")
    # the largest shift computed as a division (a signed 2^(bits-1) is negative: a
    # right shift that far gives the sign alone)
    cap = bits - 1 if left or not signed else bits - 2

    def text(xs, ys):
        p = f"{t}(uint64(pow(2.0, double(min(max({ys}, {z}), {literal(cap, x.dtype)})))))"
        inside = f"{ys} >= {z} && {ys} <= {literal(cap, x.dtype)}" if signed else \
            f"{ys} <= {literal(cap, x.dtype)}"
        if left:
            return f"(({inside}) ? {xs} * {p} : {z})"
        floor = f"{xs} / {p}" if not signed else \
            f"({xs} / {p} - ({xs} % {p} != {z} && {xs} < {z} ? {one} : {z}))"
        fill = f"({xs} < {z} ? -{one} : {z})" if signed else z
        return f"(({inside}) ? {floor} : {fill})"
    ctx.elementwise(0, text)


#: bitwise ops of two bits (0 or 1) as arithmetic
_BITS = {"BitwiseAnd": "{a} * {b}", "BitwiseOr": "max({a}, {b})",
         "BitwiseXor": "({a} + {b}) % uint64(2)"}


@op(*_BITS)
def _bitwise(ctx):
    """A bitwise op as a sum over the bits ``r`` of the two operands' bits (``x / 2^r %
    2`` of their two's complement as uint64) times ``2^r``, converted back to the type:
    the language has no bit operators, and these ops are rare."""
    a, b = ctx.input(0), ctx.input(1)
    if a.dtype.kind not in "iu" or b.dtype != a.dtype:
        ctx.fail(f"{ctx.node.op} of {a.dtype.name} and {b.dtype.name} is not supported",
                 unsupported=True)
    shape = broadcast_shapes(ctx.node, a.shape, b.shape)
    y = ctx.out(0, shape, a.dtype)
    i = idx(len(shape))
    acc = ctx.temp(shape, np.uint64)
    p = "uint64(pow(2.0, double(r)))"
    bit = [f"uint64({r.bcast(i, shape)}) / {p} % uint64(2)" for r in (a, b)]
    ctx.emit(acc, i, f"({_BITS[ctx.node.op].format(a=bit[0], b=bit[1])}) * {p}", "+=!",
             {"r": (0, 8 * a.dtype.itemsize)})
    ctx.emit(y, i, f"{tc_type(a.dtype)}({acc(*i)})")


@op("BitwiseNot")
def _bitwise_not(ctx):
    """``-x - 1`` (wrapping) for a signed ``x``, ``max - x`` for an unsigned one."""
    x = ctx.input(0)
    if x.dtype.kind not in "iu":
        ctx.fail(f"BitwiseNot of {x.dtype.name} is not supported", unsupported=True)
    top = literal(np.iinfo(x.dtype).max, x.dtype)
    ctx.elementwise(0, lambda xs: f"(-{xs} - {literal(1, x.dtype)})" if x.dtype.kind == "i"
                    else f"({top} - {xs})")


@op("Pow")
def _pow(ctx):
    a, b = ctx.input(0), ctx.input(1)
    e, t = b.scalar, tc_type(a.dtype)
    if e == 2:
        ctx.elementwise(0, lambda x, y: f"({x} * {x})")
    elif e == 1:
        ctx.elementwise(0, lambda x, y: x)
    elif e == 0.5 and a.dtype.kind == "f":
        ctx.elementwise(0, lambda x, y: f"sqrt({x})")
    elif a.dtype.kind == "f":
        ctx.elementwise(0, lambda x, y: f"pow({x}, {t}({y}))")
    elif a.dtype.kind in "iu":  # exact in double for the values integers take here
        ctx.elementwise(0, lambda x, y: f"{t}(pow(double({x}), double({y})))")
    else:
        ctx.fail(f"Pow of {a.dtype.name} is not supported", unsupported=True)


# --- comparisons and logic ---------------------------------------------------------------
def _compare(sym):
    def lower(ctx):
        ctx.elementwise(0, lambda x, y: f"({x} {sym} {y})", dtype=np.bool_)
    return lower


for _name, _sym in {"Equal": "==", "Less": "<", "Greater": ">", "LessOrEqual": "<=",
                    "GreaterOrEqual": ">=", "And": "&&", "Or": "||", "Xor": "!="}.items():
    op(_name)(_compare(_sym))


@op("Where")
def _where(ctx):
    ctx.elementwise(0, lambda c, x, y: f"({c} ? {x} : {y})", dtype=ctx.input(1).dtype)


@op("Clip")
def _clip(ctx):
    x = ctx.input(0)
    lo = ctx.input(1, required=False) if len(ctx.inputs) > 1 else None
    hi = ctx.input(2, required=False) if len(ctx.inputs) > 2 else None
    if ctx.attr("min") is not None:  # opset < 11 form
        lo = literal(ctx.attr("min"), x.dtype)
    if ctx.attr("max") is not None:
        hi = literal(ctx.attr("max"), x.dtype)

    def text(xs):
        if lo is not None:
            xs = f"max({xs}, {lo if isinstance(lo, str) else lo(*[0] * lo.rank)})"
        if hi is not None:
            xs = f"min({xs}, {hi if isinstance(hi, str) else hi(*[0] * hi.rank)})"
        return xs
    ctx.inputs = ctx.inputs[:1]
    ctx.elementwise(0, text, shape=x.shape)


@op("Cast")
def _cast(ctx):
    to = np.dtype(helper.tensor_dtype_to_np_dtype(ctx.attr("to")))
    x = ctx.input(0)
    t = tc_type(to)
    if to.kind == "b":
        ctx.elementwise(0, lambda xs: f"({xs} != {literal(0, x.dtype)})", dtype=to)
    elif to.kind in "iu" and x.dtype.kind == "f":
        # out-of-range float -> integer is undefined in C; NaN becomes 0 like numpy's
        ctx.elementwise(0, lambda xs: f"({xs} != {xs} ? {literal(0, to)} : {t}({xs}))",
                        dtype=to)
    else:
        ctx.elementwise(0, lambda xs: f"{t}({xs})", dtype=to)


@op("CastLike")
def _cast_like(ctx):
    to = ctx.input(1).dtype
    t = tc_type(to)
    ctx.inputs = ctx.inputs[:1]
    ctx.elementwise(0, lambda xs: f"{t}({xs})", dtype=to)


# --- variadic -------------------------------------------------------------------------------
def _variadic(join):
    def lower(ctx):
        n = len(ctx.inputs)
        ctx.elementwise(0, lambda *xs: join(list(xs), n, ctx.input(0).dtype))
    return lower


def _fold(f):
    def join(xs, n, dtype):
        acc = xs[0]
        for x in xs[1:]:
            acc = f(acc, x)
        return acc
    return join


op("Sum")(_variadic(_fold(lambda a, b: f"({a} + {b})")))
op("Max")(_variadic(_fold(lambda a, b: f"max({a}, {b})")))
op("Min")(_variadic(_fold(lambda a, b: f"min({a}, {b})")))
op("Mean")(_variadic(lambda xs, n, dt: f"({_fold(lambda a, b: f'({a} + {b})')(xs, n, dt)}"
                                       f" / {literal(n, dt)})"))
