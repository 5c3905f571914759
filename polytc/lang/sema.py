"""Semantic analysis: an untyped ``ast.Def`` in, a checked ``program.Program`` out.

Follows Tensor Comprehensions' ``tc/lang/sema.h``: names resolve to indices, lets, sizes
and tensors; an identifier that is none of these becomes a reduction index; inputs are
read-only; the types combine with TC's ``match_types``.  Two deliberate differences:

* literals are *weakly* typed: ``A(i) * 2`` keeps ``A``'s type (int8 stays int8) and
  ``x * 0.5`` with a double ``x`` stays double, as in numpy; a float literal meets an
  integer as float.
* a tensor written but not in the output list is a temporary (TC rejects it): the runtime
  allocates it, so a program can name its intermediate results.
"""
from __future__ import annotations

from ..diagnostics import TCSemanticError, TCTypeError, UndefinedNameError
from . import ast as A
from . import program as P
from . import ranges as R
from . import sizes as S
from .printer import ast_expr_to_tc
from .types import (BOOL, FLOAT32, INT32, TYPE_NAMES, ScalarType, is_narrowing,
                    match_types)

_REDUCE = {"+=": "+", "*=": "*", "min=": "min", "max=": "max"}


def builtins() -> dict:
    from .parser import BUILTINS

    return BUILTINS


def scalar_type(name: str, span) -> ScalarType:
    return TYPE_NAMES[name]


class _Typed:
    """A typed expression and whether it is a bare literal (weakly typed)."""

    __slots__ = ("e", "weak")

    def __init__(self, e, weak=False):
        self.e, self.weak = e, weak

    @property
    def dtype(self):
        return self.e.dtype


def convert(e, dtype: ScalarType):
    if e.dtype == dtype:
        return e
    if dtype.is_half:  # (the rounding of a constant too is the code's: no 16-bit literal)
        if isinstance(e, P.Convert) and e.value.dtype == dtype:
            return e.value  # a value of the type, widened: exactly itself
        return P.Convert(e if e.dtype.is_float else convert(e, FLOAT32), dtype, e.span)
    if isinstance(e, P.Const):
        v = e.value
        if dtype.is_float:
            v = float(v)
        elif dtype == BOOL:
            v = bool(v)
        else:
            v = int(v)
        return P.Const(v, dtype, e.span)
    return P.Convert(e, dtype, e.span)


def _unify(a: _Typed, b: _Typed) -> ScalarType:
    if a.weak and not b.weak:
        if a.dtype.is_float and not b.dtype.is_float:
            return FLOAT32
        return b.dtype if b.dtype != BOOL else match_types(a.dtype, b.dtype)
    if b.weak and not a.weak:
        return _unify(b, a)
    return match_types(a.dtype, b.dtype)


class StatementChecker:
    """Types one statement and collects what range inference needs."""

    def __init__(self, fn: "FunctionChecker", stmt: A.Statement):
        self.fn = fn
        self.stmt = stmt
        self.lhs = [n.name for n in stmt.indices]
        self.reduction: list = []
        self.lets: dict = {}
        self.spans: dict = {}
        self.accesses: list = []  # (subscripts, shape, Read-or-None)

    # --- names -------------------------------------------------------------------
    def index(self, name: str, span):
        if name in self.fn.builtins:
            raise TCSemanticError(f"'{name}' is a built-in function and cannot be redefined",
                                  span, hint="rename the index")
        if name not in self.lhs and name not in self.reduction:
            self.reduction.append(name)
        self.spans.setdefault(name, span)
        return _Typed(P.Index(name, span))

    def name(self, n: A.Name) -> _Typed:
        if n.name in self.lhs:
            self.spans.setdefault(n.name, n.span)
            return _Typed(P.Index(n.name, n.span))
        if n.name in self.lets:
            return self.lets[n.name]
        if n.name in self.fn.sizes:
            return _Typed(P.Size(n.name, n.span))
        t = self.fn.readable(n.name, n.span, self.stmt)
        if t is not None:
            if t.rank:
                raise TCSemanticError(
                    f"expected a scalar but '{n.name}' is a tensor of rank {t.rank}", n.span,
                    hint=f"index it: {n.name}({', '.join('i' + str(k) for k in range(t.rank))})")
            return _Typed(P.Read(n.name, (), t.dtype, n.span))
        return self.index(n.name, n.span)

    # --- expressions -------------------------------------------------------------
    def expr(self, e, bound=False) -> _Typed:
        if isinstance(e, A.Number):
            if e.type is not None:
                return _Typed(P.Const(e.value, e.type, e.span))
            if e.is_float:
                return _Typed(P.Const(float(e.value), FLOAT32, e.span), weak=True)
            return _Typed(P.Const(int(e.value), INT32, e.span), weak=True)
        if isinstance(e, A.Bool):
            return _Typed(P.Const(bool(e.value), BOOL, e.span))
        if isinstance(e, A.Name):
            return self.name(e)
        if isinstance(e, A.Access):
            if bound:
                raise TCSemanticError(
                    "tensor accesses cannot be used in a range bound", e.span,
                    hint="range bounds may use sizes, constants and other indices only")
            return self.access(e)
        if isinstance(e, A.Call):
            return self.call(e, bound)
        if isinstance(e, A.Cast):
            v = self.expr(e.value, bound)
            t = scalar_type(e.type_name, e.span)
            if t.is_half:  # rounded to 16 bits, computed on in float32
                return _Typed(P.Convert(convert(v.e, t), FLOAT32, e.span))
            return _Typed(convert(v.e, t))
        if isinstance(e, A.Unary):
            v = self.expr(e.operand, bound)
            if e.op == "!":
                self.expect_bool(v, e.operand)
                return _Typed(P.Not(v.e, e.span))
            t = v.e
            if t.dtype == BOOL:
                t = convert(t, INT32)
            if isinstance(t, P.Const):
                return _Typed(P.Const(-t.value, t.dtype, e.span), v.weak)
            return _Typed(P.Neg(t, e.span), v.weak)
        if isinstance(e, A.Binary):
            return self.binary(e, bound)
        if isinstance(e, A.Ternary):
            c = self.expr(e.cond, bound)
            self.expect_bool(c, e.cond)
            a, b = self.expr(e.then, bound), self.expr(e.other, bound)
            t = _unify(a, b)
            return _Typed(P.Select(c.e, convert(a.e, t), convert(b.e, t), e.span),
                          a.weak and b.weak)
        raise TCSemanticError(f"unexpected expression {type(e).__name__}", getattr(e, "span", None))

    def expect_bool(self, v: _Typed, node):
        if v.dtype != BOOL:
            raise TCTypeError(f"expected a boolean but found {v.dtype}", node.span,
                              hint="compare it, e.g. 'x != 0'")

    def binary(self, e: A.Binary, bound) -> _Typed:
        a, b = self.expr(e.lhs, bound), self.expr(e.rhs, bound)
        if e.op in P.LOGIC_OPS:
            self.expect_bool(a, e.lhs)
            self.expect_bool(b, e.rhs)
            return _Typed(P.Bin(e.op, a.e, b.e, BOOL, e.span))
        t = _unify(a, b)
        if e.op in P.COMPARE_OPS:
            return _Typed(P.Bin(e.op, convert(a.e, t), convert(b.e, t), BOOL, e.span))
        if t == BOOL:  # arithmetic on booleans happens in int32, as in C
            t = INT32
        x, y = convert(a.e, t), convert(b.e, t)
        if isinstance(x, P.Const) and isinstance(y, P.Const) and not t.is_float \
                and e.op in ("+", "-", "*"):
            v = {"+": x.value + y.value, "-": x.value - y.value, "*": x.value * y.value}[e.op]
            return _Typed(P.Const(v, t, e.span), a.weak and b.weak)
        return _Typed(P.Bin(e.op, x, y, t, e.span), a.weak and b.weak)

    def call(self, e: A.Call, bound) -> _Typed:
        arity = self.fn.builtins.get(e.func)
        if arity is None:
            raise UndefinedNameError(f"unknown function '{e.func}'", e.span,
                                     hint="see the list of builtin functions in docs/language.md")
        if arity != len(e.args):
            raise TCSemanticError(
                f"'{e.func}' expects {arity} argument{'s' * (arity != 1)} but got {len(e.args)}",
                e.span)
        args = [self.expr(a, bound) for a in e.args]
        if e.func in ("min", "max"):
            t = _unify(args[0], args[1])
            t = INT32 if t == BOOL else t
            return _Typed(P.Apply(e.func, tuple(convert(a.e, t) for a in args), t, e.span),
                          all(a.weak for a in args))
        if e.func == "dot4":
            # the four unsigned bytes of the first word times the four signed bytes of
            # the second, summed in int32 (x86's vpdpbusd: quantised products)
            for a in args:
                if a.dtype.is_float or a.dtype.np_dtype.itemsize != 4:
                    raise TCTypeError(
                        f"'dot4' takes 32-bit integer words but got {a.dtype.name}",
                        a.e.span or e.span,
                        hint="pack four 8-bit values in an int32 or uint32 word")
            return _Typed(P.Apply(e.func, tuple(convert(a.e, INT32) for a in args), INT32,
                                  e.span))
        t = FLOAT32
        for a in args:
            t = match_types(t, a.dtype) if not a.weak else t
        return _Typed(P.Apply(e.func, tuple(convert(a.e, t) for a in args), t, e.span))

    def access(self, e: A.Access) -> _Typed:
        t = self.fn.readable(e.tensor, e.name_span or e.span, self.stmt)
        if t is None:
            if e.tensor in self.fn.builtins:
                raise TCSemanticError(f"'{e.tensor}' is a built-in function", e.span)
            import difflib

            known = list(self.fn.tensors) + list(self.fn.builtins)
            close = difflib.get_close_matches(e.tensor, known, n=3)
            raise UndefinedNameError(
                f"'{e.tensor}' is neither a tensor nor a builtin function",
                e.name_span or e.span,
                hint=(f"did you mean {', '.join(repr(c) for c in close)}? " if close else "")
                + "tensors must be parameters or written by an earlier statement; the "
                "builtins are listed in docs/language.md")
        if len(e.indices) != t.rank:
            raise TCSemanticError(
                f"'{e.tensor}' has {t.rank} dimension{'s' * (t.rank != 1)} but is indexed "
                f"with {len(e.indices)}", e.span,
                hint=f"{e.tensor} is declared {t.dtype}({', '.join(S.to_tc(d) for d in t.shape)})")
        subs = []
        for i in e.indices:
            v = self.expr(i)
            if v.dtype.is_float:
                raise TCTypeError(f"subscripts must be integers but this one is {v.dtype}",
                                  i.span, hint="cast it: int32(...)")
            subs.append(v.e)
        read = P.Read(e.tensor, tuple(subs), t.dtype, e.span)
        self.accesses.append((tuple(subs), t.shape))
        # a 16-bit float is a storage type: read as float (computed in float32)
        return _Typed(P.Convert(read, FLOAT32, e.span) if t.dtype.is_half else read)

    def size_expr(self, e) -> S.SizeExpr:
        """A where-bound as a symbolic size expression."""
        v = self.expr(e, bound=True).e
        out = _to_size(v)
        if out is None:
            raise TCSemanticError(
                "a range bound must be an affine integer expression of sizes and indices",
                e.span, hint="use +, -, * by a constant, / by a constant, min and max")
        return out


def _to_size(v):
    if isinstance(v, P.Apply) and v.func in ("min", "max"):
        a, b = _to_size(v.args[0]), _to_size(v.args[1])
        if a is None or b is None:
            return None
        return S.smin(a, b) if v.func == "min" else S.smax(a, b)
    if isinstance(v, P.Bin) and v.op in ("+", "-"):
        a, b = _to_size(v.lhs), _to_size(v.rhs)
        if a is None or b is None:
            return None
        return S.add(a, b) if v.op == "+" else S.sub(a, b)
    f = R.affine_of(v)
    if isinstance(f, tuple):
        return S.floordiv(f[1], f[2])
    return f


class FunctionChecker:
    def __init__(self, d: A.Def, source):
        self.d = d
        self.source = source
        self.builtins = builtins()
        self.sizes: list = []
        self.tensors: dict = {}  # name -> TensorInfo (inputs and written so far)
        self.declared: dict = {}  # output name -> TensorDecl
        self.written: set = set()

    def readable(self, name, span, stmt):
        return self.tensors.get(name)

    def check_name(self, name, span, what):
        if name in self.builtins:
            raise TCSemanticError(f"'{name}' is a built-in function and cannot be redefined",
                                  span, hint=f"rename the {what}")

    def declare_shape(self, decl: A.TensorDecl, role):
        shape = []
        for dim in decl.dims or ():
            if isinstance(dim.value, int):
                if dim.value < 0:
                    raise TCSemanticError("sizes cannot be negative", dim.span)
                shape.append(S.const(dim.value))
            else:
                self.check_name(dim.value, dim.span, "size")
                if role == "input" and dim.value not in self.sizes:
                    if dim.value in self.tensors:
                        raise TCSemanticError(f"'{dim.value}' is already a tensor", dim.span)
                    self.sizes.append(dim.value)
                elif dim.value not in self.sizes:
                    raise TCSemanticError(
                        f"size '{dim.value}' of output '{decl.name}' is not the size of any "
                        "input", dim.span, hint="output sizes must come from input shapes")
                shape.append(S.name(dim.value))
        return tuple(shape)

    def run(self) -> P.Program:
        d = self.d
        inputs = []
        for p in d.params:
            self.check_name(p.name, p.span, "parameter")
            if p.name in self.tensors:
                raise TCSemanticError(f"duplicate parameter '{p.name}'", p.span,
                                      hint="every parameter needs its own name")
            t = P.TensorInfo(p.name, scalar_type(p.type_name, p.span),
                             self.declare_shape(p, "input"), "input", p.span)
            self.tensors[p.name] = t
            inputs.append(t)
        for p in inputs:
            if p.name in self.sizes:
                raise TCSemanticError(f"'{p.name}' is both a tensor and a size", p.span)
        for o in d.outputs:
            self.check_name(o.name, o.span, "output")
            if o.name in self.tensors or o.name in self.declared:
                raise TCSemanticError(f"'{o.name}' is already defined", o.span,
                                      hint="outputs need names of their own")
            if o.name in self.sizes:
                raise TCSemanticError(f"'{o.name}' is already a size", o.span)
            self.declared[o.name] = o
        statements = [self.statement(s) for s in d.body]
        for o in d.outputs:
            if o.name not in self.written:
                raise TCSemanticError(f"output '{o.name}' is never written", o.span,
                                      hint=f"add a statement that writes {o.name}, or remove "
                                      "it from the outputs")
        outputs = tuple(self.tensors[o.name] for o in d.outputs)
        temps = tuple(t for t in self.tensors.values()
                      if t.role != "input" and t.name not in self.declared)
        return P.Program(d.name, tuple(inputs), tuple(P.TensorInfo(
            t.name, t.dtype, t.shape, "output", t.span) for t in outputs),
            tuple(P.TensorInfo(t.name, t.dtype, t.shape, "temp", t.span) for t in temps),
            tuple(self.sizes), tuple(statements), self.source)

    def statement(self, st: A.Statement) -> P.Stmt:
        name = st.tensor
        tspan = st.tensor_span or st.span
        if name in self.tensors and self.tensors[name].role == "input":
            raise TCSemanticError(f"'{name}' is an input and inputs are immutable", tspan,
                                  hint="write the result to an output tensor")
        if name in self.sizes:
            raise TCSemanticError(f"'{name}' is a size, not a tensor", tspan)
        self.check_name(name, tspan, "tensor")
        c = StatementChecker(self, st)
        seen = set()
        for n in st.indices:
            if n.name in seen:
                raise TCSemanticError(f"index '{n.name}' appears twice on the left", n.span,
                                      hint="each left-hand index names one dimension")
            seen.add(n.name)
            self.check_name(n.name, n.span, "index")
            if n.name in self.sizes or n.name in self.tensors or n.name in self.declared:
                raise TCSemanticError(f"index '{n.name}' has the name of a size or tensor",
                                      n.span, hint="rename the index")
            c.spans.setdefault(n.name, n.span)
        explicit, bounds = {}, []
        for w in st.where:
            if isinstance(w, A.LetClause):
                self.check_name(w.var, w.span, "let")
                if w.var in c.lhs or w.var in self.sizes or w.var in self.tensors \
                        or w.var in c.lets:
                    raise TCSemanticError(f"'{w.var}' is already defined", w.span,
                                          hint="give each let its own name")
                c.lets[w.var] = c.expr(w.value)
            elif isinstance(w, A.ExistsClause):
                c.expr(w.expr)
            else:
                if w.var in explicit:
                    raise TCSemanticError(f"index '{w.var}' has two ranges", w.span)
                if w.var in c.lets or w.var in self.sizes or w.var in self.tensors:
                    raise TCSemanticError(f"'{w.var}' is not an index", w.span,
                                          hint="only indices take 'in lo:hi' ranges")
                c.index(w.var, w.span) if w.var not in c.lhs else None
                explicit[w.var] = (c.size_expr(w.lo), c.size_expr(w.hi))
                bounds.append(w)
        rhs = c.expr(st.rhs)
        op, init = _REDUCE.get(st.op.rstrip("!")), st.op.endswith("!")
        if c.reduction and op is None:
            raise TCSemanticError(
                f"this statement has the reduction index '{c.reduction[-1]}' but does not "
                "specify a reduction", st.span,
                hint=f"use +=!, *=!, min=! or max=!, or put '{c.reduction[-1]}' on the left")
        if init and not c.reduction:
            op, init = None, False  # TC: +=! without reduction indices is '='
        # the target's type and shape
        if name in self.tensors:
            target = self.tensors[name]
        else:
            target = None
            decl = self.declared.get(name)
            if decl is not None and decl.type_name is not None:
                if len(decl.dims) != len(st.indices):
                    raise TCSemanticError(
                        f"'{name}' is written with {len(st.indices)} indices but declared as "
                        f"an output with {len(decl.dims)} dimensions", st.span)
                target = P.TensorInfo(name, scalar_type(decl.type_name, decl.span),
                                      self.declare_shape(decl, "output"), "output", decl.span)
        if target is not None:
            if target.rank != len(st.indices):
                raise TCSemanticError(
                    f"'{name}' has {target.rank} dimensions but is written with "
                    f"{len(st.indices)} indices", st.span)
            if target.dtype.is_half and op is not None:
                raise TCTypeError(
                    f"'{name}' is {target.dtype}: a reduction into it would round at every "
                    "step", st.span, hint=f"reduce into a float tensor, then assign it to "
                    f"'{name}'")
            if is_narrowing(rhs.dtype, target.dtype) and not rhs.weak and \
                    not target.dtype.is_half:  # (a 16-bit float stores rounded)
                raise TCTypeError(
                    f"assigning {rhs.dtype} to '{name}' of the narrower type {target.dtype} "
                    "needs an explicit cast", st.span,
                    hint=f"wrap the right-hand side in {target.dtype}(...)")
            c.accesses.append((tuple(P.Index(v) for v in c.lhs), target.shape))
        all_vars = c.lhs + c.reduction
        for w in bounds:
            for n in S.names(explicit[w.var][0]) | S.names(explicit[w.var][1]):
                if n in c.reduction and w.var in c.lhs:
                    raise TCSemanticError(
                        f"the range of '{w.var}' cannot depend on the reduction index '{n}'",
                        w.span)
                if n == w.var:
                    raise TCSemanticError(f"the range of '{w.var}' refers to itself", w.span)
        nonneg = frozenset(c.lhs) if target is None else frozenset()
        known = R.infer(all_vars, explicit, c.accesses, set(all_vars), c.spans, nonneg)
        order = _order(all_vars, known, st.span)
        ranges = tuple(P.Range(v, *known[v]) for v in order)
        dtype = target.dtype if target is not None else rhs.dtype
        if target is None and op is None and isinstance(rhs.e, P.Convert) and \
                rhs.e.value.dtype.is_half:
            dtype = rhs.e.value.dtype  # a 16-bit value (a read, a cast) stays 16-bit
        if target is None:
            iv = R.Interval(known)
            shape = tuple(S.add(iv.hi(S.name(v)), S.const(1)) for v in c.lhs)
            for v, dim in zip(c.lhs, shape):
                if S.names(dim) - set(self.sizes):
                    raise TCSemanticError(f"cannot size '{name}' along '{v}'", st.span)
            role = "output" if name in self.declared else "temp"
            target = P.TensorInfo(name, dtype, shape, role, st.tensor_span or st.span)
        self.tensors[name] = target
        self.written.add(name)
        equivalent = None if st.equivalent is None else ast_expr_to_tc(st.equivalent)
        return P.Stmt(name, tuple(c.lhs), op, init, convert(rhs.e, dtype), ranges,
                      tuple(c.reduction), st.span, equivalent)


def _order(all_vars, known, span):
    """Order indices so that a range only refers to indices before it."""
    out, pending = [], list(all_vars)
    while pending:
        for v in pending:
            lo, hi = known[v]
            if not ((S.names(lo) | S.names(hi)) & (set(pending) - {v})):
                out.append(v)
                pending.remove(v)
                break
        else:
            raise TCSemanticError("the ranges of these indices depend on each other: "
                                  + ", ".join(pending), span)
    return out


def check(d: A.Def, source=None) -> P.Program:
    return FunctionChecker(d, source).run()
