"""The checked program: what semantic analysis hands to the oracle and to ``poly``.

Typed expressions (every node has ``dtype`` and ``span``):

``Const(value, dtype)``           a literal, already converted to its type
``Index(name)``                   an index variable (int32 in the language, int64 in C)
``Size(name)``                    a size used as a value (``/ K``)
``Read(tensor, indices, dtype)``  a tensor element; ``indices`` are typed integer exprs,
                                  ``()`` for a 0-d tensor
``Apply(func, args, dtype)``      builtin math function, ``min`` or ``max``
``Convert(value, dtype)``         an explicit cast, or an implicit one inserted by sema
``Neg(value)`` / ``Not(value)``   unary minus, logical not
``Bin(op, lhs, rhs, dtype)``      ``+ - * / %`` arithmetic (operands already converted to
                                  ``dtype``); ``== != < > <= >=`` comparisons (operands
                                  converted to a common type, result bool); ``&& ||``
``Select(cond, then, other)``     ``cond ? then : other``

``let`` clauses are substituted into the expressions that use them; ``exists`` clauses
only feed range inference and are gone here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from ..diagnostics import Source, Span
from . import sizes as S
from .printer import _ATOM, _binary, _float_literal, _literal_prec, _ternary, _unary
from .types import BOOL, INDEX, ScalarType


@dataclass(frozen=True)
class Const:
    value: Union[int, float, bool]
    dtype: ScalarType
    span: Span | None = field(repr=False, default=None)


@dataclass(frozen=True)
class Index:
    name: str
    span: Span | None = field(repr=False, default=None)
    dtype: ScalarType = INDEX


@dataclass(frozen=True)
class Size:
    name: str
    span: Span | None = field(repr=False, default=None)
    dtype: ScalarType = INDEX


@dataclass(frozen=True)
class Read:
    tensor: str
    indices: tuple
    dtype: ScalarType
    span: Span | None = field(repr=False, default=None)


@dataclass(frozen=True)
class Apply:
    func: str
    args: tuple
    dtype: ScalarType
    span: Span | None = field(repr=False, default=None)


@dataclass(frozen=True)
class Convert:
    value: "TExpr"
    dtype: ScalarType
    span: Span | None = field(repr=False, default=None)


@dataclass(frozen=True)
class Neg:
    value: "TExpr"
    span: Span | None = field(repr=False, default=None)

    @property
    def dtype(self):
        return self.value.dtype


@dataclass(frozen=True)
class Not:
    value: "TExpr"
    span: Span | None = field(repr=False, default=None)
    dtype: ScalarType = BOOL


@dataclass(frozen=True)
class Bin:
    op: str
    lhs: "TExpr"
    rhs: "TExpr"
    dtype: ScalarType
    span: Span | None = field(repr=False, default=None)


@dataclass(frozen=True)
class Select:
    cond: "TExpr"
    then: "TExpr"
    other: "TExpr"
    span: Span | None = field(repr=False, default=None)

    @property
    def dtype(self):
        return self.then.dtype


TExpr = Union[Const, Index, Size, Read, Apply, Convert, Neg, Not, Bin, Select]

ARITH_OPS = ("+", "-", "*", "/", "%")
COMPARE_OPS = ("==", "!=", "<", ">", "<=", ">=")
LOGIC_OPS = ("&&", "||")
#: reduction operator -> name of its identity (see ``identity``)
REDUCTIONS = ("+", "*", "min", "max")


def children(e) -> tuple:
    if isinstance(e, Read):
        return e.indices
    if isinstance(e, Apply):
        return e.args
    if isinstance(e, (Convert, Neg, Not)):
        return (e.value,)
    if isinstance(e, Bin):
        return (e.lhs, e.rhs)
    if isinstance(e, Select):
        return (e.cond, e.then, e.other)
    return ()


def walk(e):
    yield e
    for c in children(e):
        yield from walk(c)


def index_names(*exprs) -> set:
    """The names of the indices the expressions use."""
    return {x.name for e in exprs for x in walk(e) if isinstance(x, Index)}


def offset_index(e):
    """``(name, c)`` when the subscript ``e`` is an index plus a constant (``i``,
    ``i + 1``, ``i - 2``, ``-1 + i``), else None."""
    if isinstance(e, Index):
        return e.name, 0
    if not (isinstance(e, Bin) and e.op in ("+", "-")):
        return None
    a, b = e.lhs, e.rhs
    if e.op == "+" and isinstance(a, Const):
        a, b = b, a
    if isinstance(a, Index) and isinstance(b, Const) and type(b.value) is int:
        return a.name, b.value if e.op == "+" else -b.value
    return None


def reads(e) -> list:
    """Every tensor read in ``e``, subscripts included."""
    return [x for x in walk(e) if isinstance(x, Read)]


def identity(op: str, dtype: ScalarType):
    """The identity of a reduction operator in ``dtype`` (for the ``!`` forms)."""
    import numpy as np

    if op == "+":
        return 0
    if op == "*":
        return 1
    if dtype.is_float:
        return float("inf") if op == "min" else float("-inf")
    if dtype.kind == "bool":
        return 1 if op == "min" else 0
    info = np.iinfo(dtype.np_dtype)
    return int(info.max) if op == "min" else int(info.min)


def initial_value(program, tensor: str):
    """What every element of an output or temporary holds before the first statement,
    when polytc allocates it: the identity of the first accumulating (non-``!``)
    statement that writes it (``+=`` 0, ``*=`` 1, ``max=`` -inf or the lowest integer,
    ``min=`` +inf or the highest), else 0.  So ``O(i) += A(i,j)`` sums as numpy does."""
    for s in program.statements:
        if s.tensor == tensor and s.op is not None and not s.init:
            return identity(s.op, program.tensor(tensor).dtype)
    return 0


@dataclass(frozen=True)
class Range:
    var: str
    lo: S.SizeExpr  # inclusive
    hi: S.SizeExpr  # exclusive


@dataclass(frozen=True)
class Stmt:
    """One comprehension.  ``op`` is ``None`` for ``=``, else a reduction operator; ``init``
    is the ``!`` form (TC turns ``+=!`` without reduction indices into ``=``, and so do we).
    ``ranges`` holds every index: the left-hand ones first, in order, then the reduction
    indices.  A range's bounds may name sizes and earlier indices (``where j in 0:i``)."""

    tensor: str
    indices: tuple  # tuple[str, ...]
    op: Union[str, None]
    init: bool
    rhs: TExpr
    ranges: tuple  # tuple[Range, ...]
    reduction_vars: tuple  # tuple[str, ...]
    span: Span | None = field(repr=False, default=None)
    #: TC's ``<=> name(args)`` annotation, as TC text (documentation, never compiled)
    equivalent: Union[str, None] = None

    @property
    def index_vars(self) -> tuple:
        return tuple(r.var for r in self.ranges)

    def range_of(self, var: str) -> Range:
        for r in self.ranges:
            if r.var == var:
                return r
        raise KeyError(var)


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: ScalarType
    shape: tuple  # tuple[SizeExpr, ...]
    role: str  # "input" | "output" | "temp"
    span: Span | None = field(repr=False, default=None)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def extents(self, env: dict) -> tuple:
        """The shape for these sizes; a dimension that comes out negative (``N - K + 1``
        with ``K > N``) is empty."""
        return tuple(max(0, S.evaluate(d, env)) for d in self.shape)


@dataclass(frozen=True)
class Program:
    name: str
    inputs: tuple  # tuple[TensorInfo, ...] in parameter order
    outputs: tuple  # tuple[TensorInfo, ...] in the order of the output list
    temporaries: tuple  # tensors written but not returned (polytc extension)
    sizes: tuple  # size names bound by the inputs' shapes, in order of first appearance
    statements: tuple  # tuple[Stmt, ...]
    source: Source | None = field(repr=False, compare=False, default=None)

    def tensor(self, name: str) -> TensorInfo:
        for t in self.inputs + self.outputs + self.temporaries:
            if t.name == name:
                return t
        raise KeyError(name)

    @property
    def tensors(self) -> tuple:
        return self.inputs + self.outputs + self.temporaries

    def bind_sizes(self, shapes) -> dict:
        """Size name -> value from the inputs' shapes (checked by the runtime first)."""
        env: dict = {}
        for t, shape in zip(self.inputs, shapes):
            for d, n in zip(t.shape, shape):
                if isinstance(d, S.Lin) and len(d.terms) == 1 and d.const == 0 \
                        and d.terms[0][1] == 1:
                    env.setdefault(d.terms[0][0], int(n))
        return env

    def __str__(self) -> str:
        return program_to_tc(self)

    def _repr_markdown_(self) -> str:
        return f"```\n{self}\n```"


# --- printing: canonical TC text -------------------------------------------------------
def _texpr(e) -> tuple:
    """(text, precedence) of a typed expression."""
    if isinstance(e, Const):
        if e.dtype.kind == "bool":
            return f"bool({int(bool(e.value))})", _ATOM
        text = _float_literal(e.value) if e.dtype.is_float else str(int(e.value))
        return text, (_ATOM if text.startswith("(") else _literal_prec(text))
    if isinstance(e, (Index, Size)):
        return e.name, _ATOM
    if isinstance(e, Read):
        if not e.indices:
            return e.tensor, _ATOM
        return f"{e.tensor}({', '.join(expr_to_tc(i) for i in e.indices)})", _ATOM
    if isinstance(e, Apply):
        return f"{e.func}({', '.join(expr_to_tc(a) for a in e.args)})", _ATOM
    if isinstance(e, Convert):
        return f"{e.dtype.name}({expr_to_tc(e.value)})", _ATOM
    if isinstance(e, Neg):
        return _unary("-", _texpr(e.value))
    if isinstance(e, Not):
        return _unary("!", _texpr(e.value))
    if isinstance(e, Bin):
        return _binary(e.op, _texpr(e.lhs), _texpr(e.rhs))
    if isinstance(e, Select):
        return _ternary(_texpr(e.cond), _texpr(e.then), _texpr(e.other))
    raise TypeError(f"not a program expression: {e!r}")


def expr_to_tc(e) -> str:
    """TC text of a typed program expression."""
    return _texpr(e)[0]


def _shape(dtype, shape) -> str:
    if not shape:
        return dtype.name
    return f"{dtype.name}({','.join(S.to_tc(d) for d in shape)})"


def _decl(t: TensorInfo) -> str:
    return f"{_shape(t.dtype, t.shape)} {t.name}"


def _stmt_to_tc(p: Program, s: Stmt) -> str:
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


def _output_decl(t: TensorInfo) -> str:
    """An output's declaration, or its bare name where a dimension is an expression of
    the sizes (a valid convolution's ``H - KH + 1``): TC declares dimensions by size
    names and numbers only, and such an output was declared bare (so the text parses
    back to the same program: ``polytc.autotune``'s workers parse it)."""
    def declarable(d) -> bool:  # a number, or a size name alone
        return S.is_const(d) or isinstance(d, S.Lin) and d.const == 0 and \
            len(d.terms) == 1 and d.terms[0][1] == 1

    return _decl(t) if all(declarable(d) for d in t.shape) else t.name


def program_to_tc(p: Program) -> str:
    """Canonical TC text of a checked program (temporaries listed in a comment)."""
    ins = ", ".join(_decl(t) for t in p.inputs)
    outs = ", ".join(_output_decl(t) for t in p.outputs)
    lines = [f"def {p.name}({ins}) -> ({outs}) {{"]
    if p.temporaries:
        lines.append(f"    # temporaries: {', '.join(_decl(t) for t in p.temporaries)}")
    lines.extend(f"    {_stmt_to_tc(p, s)}" for s in p.statements)
    lines.append("}")
    return "\n".join(lines)
