"""Printing programs back as TC text.

* :func:`expr_to_tc` / :func:`program_to_tc` print the checked, typed program
  (:mod:`polytc.lang.program`) as canonical TC;
* :func:`ast_expr_to_tc` / :func:`ast_to_tc` print the untyped syntax tree
  (:mod:`polytc.lang.ast`) so that parsing the text gives the same tree back.

Parentheses are added only where the grammar needs them: around an operand whose
operator binds more loosely than its parent's, and on the right of a left-associative
operator of the same precedence (``a - (b - c)``).
"""
from __future__ import annotations

import math

from . import ast
from . import program as P
from . import sizes as S

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


def _binary(op: str, lhs: tuple, rhs: tuple) -> tuple:
    p = _PREC[op]
    return f"{_paren(*lhs, p)} {op} {_paren(*rhs, p + 1)}", p


def _ternary(cond: tuple, then: tuple, other: tuple) -> tuple:
    return f"{_paren(*cond, _TERNARY + 1)} ? {then[0]} : {other[0]}", _TERNARY


def _unary(op: str, operand: tuple) -> tuple:
    text = _paren(*operand, _UNARY)
    sep = " " if op == "-" and text.startswith("-") else ""
    return f"{op}{sep}{text}", _UNARY


def _literal_prec(text: str) -> int:
    return _UNARY if text.startswith("-") else _ATOM


# --- typed program ---------------------------------------------------------------------
def _texpr(e) -> tuple:
    """(text, precedence) of a typed expression."""
    if isinstance(e, P.Const):
        if e.dtype.kind == "bool":
            return f"bool({int(bool(e.value))})", _ATOM
        text = _float_literal(e.value) if e.dtype.is_float else str(int(e.value))
        return text, (_ATOM if text.startswith("(") else _literal_prec(text))
    if isinstance(e, (P.Index, P.Size)):
        return e.name, _ATOM
    if isinstance(e, P.Read):
        if not e.indices:
            return e.tensor, _ATOM
        return f"{e.tensor}({', '.join(expr_to_tc(i) for i in e.indices)})", _ATOM
    if isinstance(e, P.Apply):
        return f"{e.func}({', '.join(expr_to_tc(a) for a in e.args)})", _ATOM
    if isinstance(e, P.Convert):
        return f"{e.dtype.name}({expr_to_tc(e.value)})", _ATOM
    if isinstance(e, P.Neg):
        return _unary("-", _texpr(e.value))
    if isinstance(e, P.Not):
        return _unary("!", _texpr(e.value))
    if isinstance(e, P.Bin):
        return _binary(e.op, _texpr(e.lhs), _texpr(e.rhs))
    if isinstance(e, P.Select):
        return _ternary(_texpr(e.cond), _texpr(e.then), _texpr(e.other))
    raise TypeError(f"not a program expression: {e!r}")


def expr_to_tc(e) -> str:
    """TC text of a typed program expression."""
    return _texpr(e)[0]


def _shape(dtype, shape) -> str:
    if not shape:
        return dtype.name
    return f"{dtype.name}({','.join(S.to_tc(d) for d in shape)})"


def _decl(t: P.TensorInfo) -> str:
    return f"{_shape(t.dtype, t.shape)} {t.name}"


def _stmt_to_tc(p: P.Program, s: P.Stmt) -> str:
    lhs = s.tensor if not s.indices else f"{s.tensor}({', '.join(s.indices)})"
    op = "=" if s.op is None else s.op + "=" + ("!" if s.init else "")
    try:
        shape = p.tensor(s.tensor).shape
    except KeyError:
        shape = ()
    shown = []
    for r in s.ranges:
        if r.var in s.indices and r.var not in s.reduction_vars:
            d = s.indices.index(r.var)
            if d < len(shape) and r.lo == S.const(0) and r.hi == shape[d]:
                continue
        shown.append(f"{r.var} in {S.to_tc(r.lo)}:{S.to_tc(r.hi)}")
    where = f" where {', '.join(shown)}" if shown else ""
    equivalent = f" <=> {s.equivalent}" if s.equivalent else ""
    return f"{lhs} {op} {expr_to_tc(s.rhs)}{equivalent}{where}"


def program_to_tc(p: P.Program) -> str:
    """Canonical TC text of a checked program (temporaries listed in a comment)."""
    ins = ", ".join(_decl(t) for t in p.inputs)
    outs = ", ".join(_decl(t) for t in p.outputs)
    lines = [f"def {p.name}({ins}) -> ({outs}) {{"]
    if p.temporaries:
        lines.append(f"    # temporaries: {', '.join(_decl(t) for t in p.temporaries)}")
    lines.extend(f"    {_stmt_to_tc(p, s)}" for s in p.statements)
    lines.append("}")
    return "\n".join(lines)


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
