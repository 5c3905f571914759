"""Recursive-descent parser for Tensor Comprehensions text (after TC's ``tc/lang/parser.h``).

::

    def NAME ( params ) -> ( outputs ) { statements }
    param      := TYPE [ ( dim, ... ) ] NAME          dim := NAME | INTEGER
    output     := param | NAME                       (an untyped output)
    statement  := NAME [ ( NAME, ... ) ] OP expr [ where clause, ... ]    [;]
    clause     := NAME in expr : expr  |  NAME = expr  |  exists expr

Expressions, loosest first: ``? :`` (right associative), ``||``, ``&&``, comparisons,
``+ -``, ``* / %``, unary ``- !``; primaries are numbers, names, ``T(args)`` accesses,
builtin calls, ``TYPE(expr)`` casts and parenthesised expressions.
"""
from __future__ import annotations

import dataclasses
from typing import NoReturn

from ..diagnostics import Source, Span, TCSyntaxError
from . import ast
from .lexer import TYPE_KEYWORDS, Token, tokenize

_UNARY = ("acos acosh asin asinh atan atanh cbrt ceil cos cosh cospi cyl_bessel_i0 "
          "cyl_bessel_i1 erf erfc erfcinv erfcx erfinv exp exp10 exp2 expm1 fabs floor j0 j1 "
          "lgamma log log10 log1p log2 logb normcdf normcdfinv rcbrt rint round rsqrt sin sinh "
          "sinpi sqrt tan tanh tgamma trunc y0 y1")
_BINARY = ("atan2 copysign fdim fdivide fmax fmin fmod hypot nextafter pow remainder rhypot "
           "min max")
#: builtin function name -> number of arguments (TC's ``builtins.h``, plus min and max)
BUILTINS: dict = {
    **{f: 1 for f in _UNARY.split()}, **{f: 2 for f in _BINARY.split()},
    "fma": 3, "norm3d": 3, "rnorm3d": 3, "norm4d": 4, "rnorm4d": 4,
    "dot4": 2,  # polytc's: the int8 dot product of two 32-bit words (sema.py)
}

BINARY_PREC = {
    "||": 2, "&&": 3,
    "<": 4, ">": 4, "<=": 4, ">=": 4, "==": 4, "!=": 4,
    "+": 5, "-": 5, "*": 6, "/": 6, "%": 6,
}
TERNARY_PREC = 1
UNARY_PREC = 7
#: parentheses / unary operators nested deeper than this are refused
MAX_NESTING = 200
#: expression trees deeper than this (e.g. a sum of 300 terms) are refused, so that the
#: recursive passes after the parser never hit Python's recursion limit
MAX_DEPTH = 256

_STMT_HINT = ("a statement looks like 'C(i, j) = expr' (or +=, *=, min=, max= and their "
              "'!' forms); if this was meant to continue the previous expression, an "
              "operator is missing")


def parse(text: str, filename: str = "<tc>") -> tuple:
    """The definitions in ``text``, as a tuple of :class:`ast.Def`."""
    source = Source(text, filename)
    tokens = tokenize(text, filename, source)
    return _Parser(tokens, source).parse_all()


def _children(e) -> tuple:
    if isinstance(e, ast.Access):
        return e.indices
    if isinstance(e, ast.Call):
        return e.args
    if isinstance(e, ast.Cast):
        return (e.value,)
    if isinstance(e, ast.Unary):
        return (e.operand,)
    if isinstance(e, ast.Binary):
        return (e.lhs, e.rhs)
    if isinstance(e, ast.Ternary):
        return (e.cond, e.then, e.other)
    return ()


def check_depth(e) -> None:
    """Refuse expression trees deeper than :data:`MAX_DEPTH` (iteratively)."""
    stack = [(e, 1)]
    while stack:
        node, d = stack.pop()
        if d > MAX_DEPTH:
            raise TCSyntaxError(
                f"expression nested too deeply (more than {MAX_DEPTH} levels)", node.span,
                "split the expression into several statements through a temporary tensor")
        stack.extend((c, d + 1) for c in _children(node))


class _Parser:
    def __init__(self, tokens: list, source: Source):
        self.toks = tokens
        self.source = source
        self.i = 0
        self.nesting = 0

    # --- token helpers -------------------------------------------------------------------
    @property
    def cur(self) -> Token:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> Token:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> Token:
        tok = self.toks[self.i]
        if tok.kind != "eof":
            self.i += 1
        return tok

    def error(self, message: str, tok: Token | None = None, hint: str | None = None,
              span: Span | None = None) -> NoReturn:
        tok = tok or self.cur
        raise TCSyntaxError(message, span or tok.span, hint)

    def expect(self, kind: str, hint: str | None = None) -> Token:
        if self.cur.kind != kind:
            self.error(f"expected '{kind}' but found {self.cur.describe()}", hint=hint)
        return self.next()

    def ident(self, what: str) -> Token:
        tok = self.cur
        if tok.kind == "ident":
            return self.next()
        if tok.kind != "eof" and (tok.text[:1].isalpha() or tok.text[:1] == "_"):
            self.error(f"expected {what} but found the keyword {tok.describe()}",
                       hint=f"'{tok.text}' is a keyword of TC and cannot be used as a name")
        self.error(f"expected {what} but found {tok.describe()}")

    # --- definitions ---------------------------------------------------------------------
    def parse_all(self) -> tuple:
        try:
            if not any(t.kind == "def" for t in self.toks):
                self.error("no 'def' found", self.toks[0],
                           "a TC program is 'def name(float(N) A) -> (B) { B(i) = A(i) }'")
            defs = []
            while self.cur.kind != "eof":
                defs.append(self.definition())
            return tuple(defs)
        except RecursionError:
            raise TCSyntaxError("expression nested too deeply", self.cur.span,
                                "split the expression into several statements") from None

    def definition(self) -> ast.Def:
        start = self.expect("def", hint="a TC program is a sequence of 'def name(...) -> "
                                        "(...) { ... }' definitions")
        name = self.ident("the name of the definition").text
        self.expect("(", hint="the inputs of a definition are listed in parentheses")
        params = []
        if self.cur.kind != ")":
            params.append(self.decl(output=False))
            while self.cur.kind == ",":
                self.next()
                params.append(self.decl(output=False))
        self.expect(")", hint="separate inputs with ','")
        self.expect("->", hint="the inputs are followed by '-> (outputs)'")
        self.expect("(", hint="the outputs of a definition are listed in parentheses")
        if self.cur.kind == ")":
            self.error("expected an output but found ')'",
                       hint="a definition returns at least one tensor: '-> (C)'")
        outputs = [self.decl(output=True)]
        while self.cur.kind == ",":
            self.next()
            outputs.append(self.decl(output=True))
        self.expect(")", hint="separate outputs with ','")
        self.expect("{", hint="the statements of a definition go between '{' and '}'")
        body = []
        while self.cur.kind == ";":
            self.next()
        if self.cur.kind == "}":
            self.error("expected a statement but found '}'",
                       hint="a definition needs at least one statement, e.g. 'C(i) = A(i)'")
        while self.cur.kind != "}":
            body.append(self.statement())
            while self.cur.kind == ";":
                self.next()
        end = self.next()
        return ast.Def(name, tuple(params), tuple(outputs), tuple(body), start.span.to(end.span))

    def decl(self, output: bool) -> ast.TensorDecl:
        tok = self.cur
        if tok.kind == "ident":
            if output:
                self.next()
                return ast.TensorDecl(tok.text, None, None, tok.span)
            self.error(f"input '{tok.text}' needs a type", hint=f"declare it as e.g. "
                       f"'float(N) {tok.text}' or 'int32 {tok.text}' for a scalar")
        if tok.kind not in TYPE_KEYWORDS:
            what = "an output" if output else "an input declaration"
            self.error(f"expected {what} but found {tok.describe()}",
                       hint="declare a tensor as 'float(M, N) A'")
        self.next()
        dims = []
        if self.cur.kind == "(":
            self.next()
            if self.cur.kind != ")":
                dims.append(self.dim())
                while self.cur.kind == ",":
                    self.next()
                    dims.append(self.dim())
            self.expect(")", hint="separate dimensions with ','")
        name = self.ident("a tensor name")
        return ast.TensorDecl(name.text, tok.text, tuple(dims), tok.span.to(name.span))

    def dim(self) -> ast.Dim:
        tok = self.cur
        if tok.kind == "ident":
            self.next()
            return ast.Dim(tok.text, tok.span)
        if tok.kind == "number" and not tok.is_float:
            self.next()
            return ast.Dim(int(tok.value or 0), tok.span)
        self.error(f"expected a dimension but found {tok.describe()}",
                   hint="a dimension is a size name such as 'N' or an integer such as '3'")

    # --- statements ----------------------------------------------------------------------
    def statement(self) -> ast.Statement:
        if self.cur.kind != "ident":
            hint = _STMT_HINT
            if self.cur.kind == "where":
                hint = "separate the clauses of one 'where' with ','"
            elif self.cur.kind in TYPE_KEYWORDS:
                hint = "temporaries need no declaration: just assign to them"
            if self.cur.kind == "eof":
                self.error("the definition is not closed: expected '}' but found end of input",
                           hint="end the definition's statements with '}'")
            self.error(f"expected a statement but found {self.cur.describe()}", hint=hint)
        name = self.next()
        indices = []
        if self.cur.kind == "(":
            self.next()
            if self.cur.kind != ")":
                indices.append(self.lhs_index())
                while self.cur.kind == ",":
                    self.next()
                    indices.append(self.lhs_index())
            self.expect(")", hint="separate the left-hand side's indices with ','")
        if self.cur.kind not in ast.ASSIGN_OPS:
            self.error(f"expected an assignment operator but found {self.cur.describe()}",
                       hint=_STMT_HINT)
        op = self.next().text
        rhs = self.expr()
        check_depth(rhs)
        end = rhs.span
        clauses = []
        equivalent = None
        if self.cur.kind == "<=>":
            self.next()
            equivalent = self.expr()
            if not isinstance(equivalent, (ast.Access, ast.Call)):
                self.error(f"expected 'name(arguments)' after '<=>' but found "
                           f"'{equivalent.span.text}'", span=equivalent.span,
                           hint="'<=>' names an equivalent library call, as in "
                                "'<=> matmul(A, B)'")
            end = equivalent.span
        if self.cur.kind == "where":
            self.next()
            clauses.append(self.clause())
            while self.cur.kind == ",":
                self.next()
                clauses.append(self.clause())
            end = clauses[-1].span
        return ast.Statement(name.text, tuple(indices), op, rhs, tuple(clauses),
                             name.span.to(end), name.span, equivalent)

    def lhs_index(self) -> ast.Name:
        tok = self.cur
        if tok.kind in ("eof", ")", ","):
            self.error(f"expected an index variable but found {tok.describe()}",
                       hint="write the left-hand side as 'C(i, j)'")
        e = self.expr()
        if isinstance(e, ast.Name):
            return e
        self.error(f"expected an index variable but found '{e.span.text}'", span=e.span,
                   hint="the left-hand side takes index variables only; put expressions "
                        "on the right")

    def clause(self):
        tok = self.cur
        if tok.kind == "exists":
            self.next()
            e = self.expr()
            check_depth(e)
            return ast.ExistsClause(e, tok.span.to(e.span))
        var = self.ident("a where clause ('i in 0:N', 'x = expr' or 'exists expr')")
        if self.cur.kind == "=":
            self.next()
            e = self.expr()
            check_depth(e)
            return ast.LetClause(var.text, e, var.span.to(e.span))
        self.expect("in", hint=f"a range is written 'where {var.text} in 0:N'; a "
                               f"definition 'where {var.text} = expr'")
        lo = self.expr()
        self.expect(":", hint=f"a range is written 'where {var.text} in lo:hi' (hi excluded)")
        hi = self.expr()
        check_depth(lo)
        check_depth(hi)
        return ast.RangeClause(var.text, lo, hi, var.span.to(hi.span))

    # --- expressions ---------------------------------------------------------------------
    def expr(self, min_prec: int = 0):
        """An expression whose operators all bind tighter than ``min_prec``."""
        self.nesting += 1
        if self.nesting > MAX_NESTING:
            self.error(f"expression nested too deeply (more than {MAX_NESTING} levels)",
                       hint="split the expression into several statements")
        tok = self.cur
        if tok.kind in ("-", "!"):
            self.next()
            operand = self.expr(UNARY_PREC)
            lhs: ast.Expr = ast.Unary(tok.kind, operand, tok.span.to(operand.span))
        else:
            lhs = self.primary()
        while True:
            k = self.cur.kind
            if k == "?" and TERNARY_PREC > min_prec:
                self.next()
                then = self.expr()
                self.expect(":", hint="a conditional is written 'cond ? a : b'")
                other = self.expr(TERNARY_PREC - 1)
                lhs = ast.Ternary(lhs, then, other, lhs.span.to(other.span))
            elif k in BINARY_PREC and BINARY_PREC[k] > min_prec:
                self.next()
                rhs = self.expr(BINARY_PREC[k])
                lhs = ast.Binary(k, lhs, rhs, lhs.span.to(rhs.span))
            else:
                break
        self.nesting -= 1
        return lhs

    def args(self) -> tuple:
        """``( expr, ... )`` after a name; returns (args, closing token)."""
        self.expect("(")
        args = []
        if self.cur.kind != ")":
            args.append(self.expr())
            while self.cur.kind == ",":
                self.next()
                args.append(self.expr())
        close = self.expect(")", hint="separate arguments with ','")
        return tuple(args), close

    def primary(self):
        tok = self.cur
        if tok.kind == "number":
            self.next()
            return ast.Number(tok.value, tok.is_float, tok.span)
        if tok.kind == "(":
            self.next()
            e = self.expr()
            close = self.expect(")", hint="a '(' is not closed")
            return dataclasses.replace(e, span=tok.span.to(close.span))
        if tok.kind in TYPE_KEYWORDS:
            self.next()
            if self.cur.kind != "(":
                self.error(f"expected '(' after the type '{tok.text}' but found "
                           f"{self.cur.describe()}",
                           hint=f"a cast is written '{tok.text}(expr)'")
            args, close = self.args()
            if len(args) != 1:
                self.error(f"a cast to '{tok.text}' takes one value, not {len(args)}",
                           span=tok.span.to(close.span), hint=f"write '{tok.text}(expr)'")
            return ast.Cast(tok.text, args[0], tok.span.to(close.span))
        if tok.kind in ("min", "max"):
            self.next()
            if self.cur.kind != "(":
                self.error(f"expected '(' after '{tok.text}' but found {self.cur.describe()}",
                           hint=f"'{tok.text}' is a function: write '{tok.text}(a, b)'")
            args, close = self.args()
            return ast.Call(tok.text, args, tok.span.to(close.span))
        if tok.kind == "ident":
            self.next()
            if self.cur.kind != "(":
                return ast.Name(tok.text, tok.span)
            args, close = self.args()
            span = tok.span.to(close.span)
            if tok.text in BUILTINS:
                return ast.Call(tok.text, args, span)
            return ast.Access(tok.text, args, span, tok.span)
        hint = None
        if tok.kind == "eof":
            hint = "the text ends in the middle of an expression"
        elif tok.kind in ast.ASSIGN_OPS or tok.kind == "=":
            hint = "an expression cannot contain an assignment; compare with '=='"
        self.error(f"expected an expression but found {tok.describe()}", hint=hint)
