"""Symbolic integer expressions for ranges and shapes.

An expression is affine in names (sizes such as ``N``, or other index variables in a
triangular ``where j in 0:i``) plus ``min``, ``max`` and division by a positive constant.
Sizes are specialised to numbers at call time with :func:`evaluate`; ``to_isl`` writes the
same expression in isl's syntax.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, TypeGuard, Union


@dataclass(frozen=True)
class Lin:
    """``sum(c * name) + const``, terms sorted by name, no zero coefficients."""

    terms: tuple  # tuple[tuple[str, int], ...]
    const: int = 0


@dataclass(frozen=True)
class Op:
    kind: str  # "min" | "max" | "floordiv" | "ceildiv"
    args: tuple  # (SizeExpr, SizeExpr) for min/max; (SizeExpr, int) for the divisions


SizeExpr = Union[Lin, Op]


def const(c: int) -> Lin:
    return Lin((), int(c))


def name(n: str, coeff: int = 1) -> Lin:
    return Lin(((n, coeff),), 0) if coeff else const(0)


def is_const(e: SizeExpr) -> TypeGuard[Lin]:
    return isinstance(e, Lin) and not e.terms


def add(a: SizeExpr, b: SizeExpr) -> SizeExpr:
    if isinstance(a, Lin) and isinstance(b, Lin):
        d = dict(a.terms)
        for n, c in b.terms:
            d[n] = d.get(n, 0) + c
        return Lin(tuple(sorted((n, c) for n, c in d.items() if c)), a.const + b.const)
    if isinstance(b, Lin) and is_const(b) and b.const == 0:
        return a
    if isinstance(a, Lin) and is_const(a) and a.const == 0:
        return b
    if isinstance(a, Op) and a.kind in ("min", "max") and is_const(b):
        return Op(a.kind, (add(a.args[0], b), add(a.args[1], b)))
    if isinstance(b, Op) and b.kind in ("min", "max") and is_const(a):
        return Op(b.kind, (add(b.args[0], a), add(b.args[1], a)))
    return Op("add", (a, b))


def scale(a: SizeExpr, c: int) -> SizeExpr:
    if isinstance(a, Lin):
        return Lin(tuple((n, k * c) for n, k in a.terms if k * c), a.const * c)
    if c == 1:
        return a
    if a.kind in ("min", "max") and c > 0:
        return Op(a.kind, (scale(a.args[0], c), scale(a.args[1], c)))
    if a.kind in ("min", "max") and c < 0:
        flip = "max" if a.kind == "min" else "min"
        return Op(flip, (scale(a.args[0], c), scale(a.args[1], c)))
    return Op("mul", (a, c))


def sub(a: SizeExpr, b: SizeExpr) -> SizeExpr:
    return add(a, scale(b, -1))


def smin(a: SizeExpr, b: SizeExpr) -> SizeExpr:
    if a == b:
        return a
    if is_const(a) and is_const(b):
        return const(min(a.const, b.const))
    if isinstance(a, Lin) and isinstance(b, Lin) and a.terms == b.terms:
        return a if a.const <= b.const else b
    return Op("min", (a, b))


def smax(a: SizeExpr, b: SizeExpr) -> SizeExpr:
    if a == b:
        return a
    if is_const(a) and is_const(b):
        return const(max(a.const, b.const))
    if isinstance(a, Lin) and isinstance(b, Lin) and a.terms == b.terms:
        return a if a.const >= b.const else b
    return Op("max", (a, b))


def floordiv(a: SizeExpr, d: int) -> SizeExpr:
    if d == 1:
        return a
    if is_const(a):
        return const(a.const // d)
    if isinstance(a, Lin) and all(c % d == 0 for _, c in a.terms) and a.const % d == 0:
        return Lin(tuple((n, c // d) for n, c in a.terms), a.const // d)
    return Op("floordiv", (a, d))


def ceildiv(a: SizeExpr, d: int) -> SizeExpr:
    return scale(floordiv(scale(a, -1), d), -1)


def names(e: SizeExpr) -> set:
    if isinstance(e, Lin):
        return {n for n, _ in e.terms}
    out = set()
    for a in e.args:
        if not isinstance(a, int):
            out |= names(a)
    return out


def evaluate(e: SizeExpr, env: dict) -> int:
    """The value of ``e`` with every name taken from ``env``."""
    if isinstance(e, Lin):
        return e.const + sum(c * env[n] for n, c in e.terms)
    k = e.kind
    if k == "min":
        return min(evaluate(e.args[0], env), evaluate(e.args[1], env))
    if k == "max":
        return max(evaluate(e.args[0], env), evaluate(e.args[1], env))
    if k == "floordiv":
        return evaluate(e.args[0], env) // e.args[1]
    if k == "add":
        return evaluate(e.args[0], env) + evaluate(e.args[1], env)
    if k == "mul":
        return evaluate(e.args[0], env) * e.args[1]
    raise ValueError(k)


def substitute(e: SizeExpr, env: dict) -> SizeExpr:
    """Replace the names in ``env`` (name -> SizeExpr) and simplify."""
    if isinstance(e, Lin):
        out: SizeExpr = const(e.const)
        for n, c in e.terms:
            out = add(out, scale(env[n], c) if n in env else name(n, c))
        return out
    a = [x if isinstance(x, int) else substitute(x, env) for x in e.args]
    ops: dict[str, Callable[..., SizeExpr]] = {"min": smin, "max": smax, "floordiv": floordiv,
                                               "add": add, "mul": scale}
    return ops[e.kind](*a)


def _fmt(e: SizeExpr, isl: bool) -> str:
    if isinstance(e, Lin):
        parts = []
        for n, c in e.terms:
            term = n if abs(c) == 1 else f"{abs(c)}*{n}"
            parts.append(("- " if c < 0 else "+ ") + term)
        if e.const or not parts:
            parts.append(("- " if e.const < 0 else "+ ") + str(abs(e.const)))
        s = " ".join(parts)
        return s[2:] if s.startswith("+ ") else "-" + s[2:]
    k = e.kind
    if k in ("min", "max"):
        return f"{k}({_fmt(e.args[0], isl)}, {_fmt(e.args[1], isl)})"
    if k == "floordiv":
        return f"floor(({_fmt(e.args[0], isl)})/{e.args[1]})" if isl else \
            f"({_fmt(e.args[0], isl)}) / {e.args[1]}"
    if k == "add":
        return f"({_fmt(e.args[0], isl)}) + ({_fmt(e.args[1], isl)})"
    if k == "mul":
        return f"{e.args[1]}*({_fmt(e.args[0], isl)})"
    raise ValueError(k)


def to_tc(e: SizeExpr) -> str:
    return _fmt(e, isl=False)


def to_isl(e: SizeExpr) -> str:
    return _fmt(e, isl=True)
