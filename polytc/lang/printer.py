"""Printing programs back as TC text.

* :func:`ast_expr_to_tc` / :func:`ast_to_tc` print the untyped syntax tree
  (:mod:`polytc.lang.ast`) so that parsing the text gives the same tree back;
* the precedence and literal helpers here also print the checked, typed program
  (``expr_to_tc`` / ``program_to_tc`` in :mod:`polytc.lang.program`, which owns it).

Parentheses are added only where the grammar needs them: around an operand whose
operator binds more loosely than its parent's, and on the right of a left-associative
operator of the same precedence (``a - (b - c)``).
"""
from __future__ import annotations

import math

from . import ast

_PREC = {
    "||": 2, "&&": 3,
    "<": 4, ">": 4, "<=": 4, ">=": 4, "==": 4, "!=": 4,
    "+": 5, "-": 5, "*": 6, "/": 6, "%": 6,
}
_TERNARY, _UNARY, _ATOM = 1, 7, 8


def _float_literal(x: float) -> str:
    """A literal that lexes back as a float of value ``x`` (inf as a huge literal)."""
    if math.isnan(x):
        return "(0.0/0.0)"
    if math.isinf(x):
        return "1e999" if x > 0 else "-1e999"
    s = repr(float(x))
    return s if any(c in s for c in ".eE") else s + ".0"


def _paren(text: str, prec: int, need: int) -> str:
    return f"({text})" if prec < need else text


def _binary(op: str, lhs: tuple[str, int], rhs: tuple[str, int]) -> tuple[str, int]:
    p = _PREC[op]
    return f"{_paren(*lhs, p)} {op} {_paren(*rhs, p + 1)}", p


def _ternary(cond: tuple[str, int], then: tuple[str, int],
             other: tuple[str, int]) -> tuple[str, int]:
    return f"{_paren(*cond, _TERNARY + 1)} ? {then[0]} : {other[0]}", _TERNARY


def _unary(op: str, operand: tuple[str, int]) -> tuple[str, int]:
    text = _paren(*operand, _UNARY)
    sep = " " if op == "-" and text.startswith("-") else ""
    return f"{op}{sep}{text}", _UNARY


def _literal_prec(text: str) -> int:
    return _UNARY if text.startswith("-") else _ATOM


# --- untyped syntax tree ---------------------------------------------------------------
def _aexpr(e) -> tuple:
    """(text, precedence) of an untyped expression."""
    if isinstance(e, ast.Number):
        text = _float_literal(e.value) if e.is_float else str(int(e.value))
        if e.type is not None:
            return f"{e.type.name}({text})", _ATOM
        return text, (_ATOM if text.startswith("(") else _literal_prec(text))
    if isinstance(e, ast.Bool):
        return f"bool({int(e.value)})", _ATOM
    if isinstance(e, ast.Name):
        return e.name, _ATOM
    if isinstance(e, (ast.Access, ast.Call)):
        name = e.tensor if isinstance(e, ast.Access) else e.func
        args = e.indices if isinstance(e, ast.Access) else e.args
        return f"{name}({', '.join(ast_expr_to_tc(a) for a in args)})", _ATOM
    if isinstance(e, ast.Cast):
        return f"{e.type_name}({ast_expr_to_tc(e.value)})", _ATOM
    if isinstance(e, ast.Unary):
        return _unary(e.op, _aexpr(e.operand))
    if isinstance(e, ast.Binary):
        return _binary(e.op, _aexpr(e.lhs), _aexpr(e.rhs))
    if isinstance(e, ast.Ternary):
        return _ternary(_aexpr(e.cond), _aexpr(e.then), _aexpr(e.other))
    raise TypeError(f"not a syntax tree expression: {e!r}")


def ast_expr_to_tc(e) -> str:
    """TC text of an untyped expression."""
    return _aexpr(e)[0]


def _bound(e) -> str:  # range bounds: a conditional gets parentheses for readability
    text, prec = _aexpr(e)
    return _paren(text, prec, _TERNARY + 1)


def _clause_to_tc(c) -> str:
    if isinstance(c, ast.RangeClause):
        return f"{c.var} in {_bound(c.lo)}:{_bound(c.hi)}"
    if isinstance(c, ast.LetClause):
        return f"{c.var} = {ast_expr_to_tc(c.value)}"
    if isinstance(c, ast.ExistsClause):
        return f"exists {ast_expr_to_tc(c.expr)}"
    raise TypeError(f"not a where clause: {c!r}")


def _tensor_decl_to_tc(d: ast.TensorDecl) -> str:
    if d.type_name is None:
        return d.name
    if not d.dims:
        return f"{d.type_name} {d.name}"
    return f"{d.type_name}({','.join(str(x.value) for x in d.dims)}) {d.name}"


def statement_to_tc(s: ast.Statement) -> str:
    lhs = s.tensor if not s.indices else f"{s.tensor}({', '.join(i.name for i in s.indices)})"
    text = f"{lhs} {s.op} {ast_expr_to_tc(s.rhs)}"
    if s.equivalent is not None:
        text += f" <=> {ast_expr_to_tc(s.equivalent)}"
    if s.where:
        text += " where " + ", ".join(_clause_to_tc(c) for c in s.where)
    return text


def ast_to_tc(d: ast.Def) -> str:
    """TC text of an untyped definition; ``parse`` of it gives ``d`` back."""
    ins = ", ".join(_tensor_decl_to_tc(t) for t in d.params)
    outs = ", ".join(_tensor_decl_to_tc(t) for t in d.outputs)
    lines = [f"def {d.name}({ins}) -> ({outs}) {{"]
    lines.extend(f"    {statement_to_tc(s)}" for s in d.body)
    lines.append("}")
    return "\n".join(lines)
