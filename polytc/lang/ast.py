"""The untyped syntax tree both front ends produce (TC text and ``@polytc.kernel``).

Frozen dataclasses with source spans.  Spans compare equal to each other, so two trees
are ``==`` when they have the same structure whatever text they came from; this is how the
tests check that the Python front end means the same as TC text.

Expression nodes
----------------
``Number``   literal; ``is_float`` tells ``1.0`` from ``1``; ``type`` is set for typed
             literals made by lowering code (never by the parsers)
``Bool``     ``true`` / ``false`` are not TC; only lowering code makes these
``Name``     any identifier in an expression: an index, a size, a let, a 0-d tensor
``Access``   ``A(i, j)``: a tensor read (``A()`` allowed for 0-d tensors)
``Call``     ``exp(x)``, ``min(a, b)``, ``max(a, b)``: builtin functions
``Cast``     ``int32(x)``
``Unary``    ``-x``, ``!x``
``Binary``   ``+ - * / % == != < > <= >= && ||``
``Ternary``  ``c ? a : b``

Everything carries ``span`` (its text) as its last field.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from ..diagnostics import Span
from .types import ScalarType


@dataclass(frozen=True)
class Number:
    value: Union[int, float]
    is_float: bool
    span: Span = field(repr=False)
    type: ScalarType | None = None  # only from lowering code


@dataclass(frozen=True)
class Bool:
    value: bool
    span: Span = field(repr=False)


@dataclass(frozen=True)
class Name:
    name: str
    span: Span = field(repr=False)


@dataclass(frozen=True)
class Access:
    tensor: str
    indices: tuple  # tuple[Expr, ...]
    span: Span = field(repr=False)
    name_span: Span | None = field(repr=False, default=None)


@dataclass(frozen=True)
class Call:
    func: str
    args: tuple
    span: Span = field(repr=False)


@dataclass(frozen=True)
class Cast:
    type_name: str
    value: "Expr"
    span: Span = field(repr=False)


@dataclass(frozen=True)
class Unary:
    op: str  # "-" | "!"
    operand: "Expr"
    span: Span = field(repr=False)


@dataclass(frozen=True)
class Binary:
    op: str
    lhs: "Expr"
    rhs: "Expr"
    span: Span = field(repr=False)


@dataclass(frozen=True)
class Ternary:
    cond: "Expr"
    then: "Expr"
    other: "Expr"
    span: Span = field(repr=False)


Expr = Union[Number, Bool, Name, Access, Call, Cast, Unary, Binary, Ternary]


# --- where clauses ---------------------------------------------------------------------
@dataclass(frozen=True)
class RangeClause:
    """``where i in lo:hi`` (half-open)."""

    var: str
    lo: Expr
    hi: Expr
    span: Span = field(repr=False)


@dataclass(frozen=True)
class LetClause:
    """``where x = e``."""

    var: str
    value: Expr
    span: Span = field(repr=False)


@dataclass(frozen=True)
class ExistsClause:
    """``where exists A(i + k)``: the access only feeds range inference."""

    expr: Expr
    span: Span = field(repr=False)


WhereClause = Union[RangeClause, LetClause, ExistsClause]

#: assignment operators; the ``!`` forms initialise to the reduction's identity first
ASSIGN_OPS = ("=", "+=", "*=", "min=", "max=", "+=!", "*=!", "min=!", "max=!")


@dataclass(frozen=True)
class Statement:
    """``T(i, j) op rhs [<=> name(args)] where ...``.  ``equivalent`` is TC's annotation
    naming a library function that computes the same (``<=> matmul(A, B)``): kept and
    printed, never compiled."""

    tensor: str
    indices: tuple  # tuple[Name, ...]: TC allows only identifiers on the left
    op: str  # one of ASSIGN_OPS
    rhs: Expr
    where: tuple  # tuple[WhereClause, ...]
    span: Span = field(repr=False)
    tensor_span: Span | None = field(repr=False, default=None)
    equivalent: "Access | Call | None" = None  # name(args): an Access or Call node, args unchecked


# --- definitions -----------------------------------------------------------------------
@dataclass(frozen=True)
class Dim:
    """One dimension of a declared shape: a size name or a constant."""

    value: Union[str, int]
    span: Span = field(repr=False)


@dataclass(frozen=True)
class TensorDecl:
    """``float(M, K) A``; ``dims`` is ``None`` for an untyped output, ``()`` for 0-d."""

    name: str
    type_name: Union[str, None]  # None for an untyped output
    dims: Union[tuple, None]  # tuple[Dim, ...] or None
    span: Span = field(repr=False)


@dataclass(frozen=True)
class Def:
    name: str
    params: tuple  # tuple[TensorDecl, ...]
    outputs: tuple  # tuple[TensorDecl, ...]
    body: tuple  # tuple[Statement, ...]
    span: Span = field(repr=False)


def walk(expr):
    """Yield ``expr`` and every sub-expression, parents first."""
    yield expr
    if isinstance(expr, Access):
        for i in expr.indices:
            yield from walk(i)
    elif isinstance(expr, Call):
        for a in expr.args:
            yield from walk(a)
    elif isinstance(expr, Cast):
        yield from walk(expr.value)
    elif isinstance(expr, Unary):
        yield from walk(expr.operand)
    elif isinstance(expr, Binary):
        yield from walk(expr.lhs)
        yield from walk(expr.rhs)
    elif isinstance(expr, Ternary):
        yield from walk(expr.cond)
        yield from walk(expr.then)
        yield from walk(expr.other)
