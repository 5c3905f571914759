"""The Python-syntax front end: a decorated Python function in, the same ``ast.Def`` that the
equivalent Tensor Comprehensions text gives out.

The function body is never executed: its source is read with :mod:`inspect`, parsed with
Python's own :mod:`ast` module and translated node by node.  Every node of the result
carries a span into the user's real file (``Source.line_offset`` shifts the line numbers),
so errors from later passes point at the Python line that caused them.

The spelling is documented side by side with TC in ``docs/python_syntax.md``::

    def matmul(A: "float(M,K)", B: "float(K,N)"):
        C[m, n] += A[m, k] * B[k, n]          # C(m, n) +=! A(m, k) * B(k, n)
        return C

Rules in short:

* parameters are annotated with a TC type in a string: ``"float(M,K)"``, ``"int32"``;
* the last statement ``return C`` / ``return C, D`` lists the outputs; an optional return
  annotation (``-> "float(M,N)"`` or a tuple of such strings) types them;
* ``T[i, j] = e`` is ``=``; ``+=`` and ``*=`` are ``+=!`` / ``*=!`` on the first write of
  ``T`` in the function and ``+=`` / ``*=`` after it; ``T[i] = max(T[i], e)`` is
  ``max=!`` / ``max=`` (same for ``min``);
* ``for k in range(lo, hi):`` adds ``where k in lo:hi`` to every statement in its body;
* ``x = e`` for a name ``x`` that is not an output is a let: ``where x = e`` on every later
  statement (same block or nested) that uses ``x``;
* ``exists(A[i + k])`` adds ``where exists A(i + k)`` to every later statement of its block.
"""
from __future__ import annotations

import ast as pyast
import difflib
from typing import NoReturn

from ..diagnostics import Span, TCSyntaxError
from . import ast as A
from .pysource import (_BINOP_SYMBOLS, _BINOPS, _CAST_ALIASES, _CMPOPS, _TC_HINT, _TYPES,
                       _parse_type, _Positions, _read_source)

__all__ = ["function_to_def"]

#: numpy spellings of builtins
_FUNC_ALIASES = {"maximum": "max", "minimum": "min", "power": "pow", "absolute": "fabs"}

#: TC's builtin functions, used only while ``polytc.lang.parser`` cannot be imported
_FALLBACK_BUILTINS = {
    **{f: 1 for f in (
        "acos acosh asin asinh atan atanh cbrt ceil cos cosh cospi cyl_bessel_i0f "
        "cyl_bessel_i1f erf erfc erfcinv erfcx erfinv exp exp10 exp2 expm1 fabs floor j0 "
        "j1 lgamma log log10 log1p log2 logb normcdf normcdfinv rcbrt rint round rsqrt sin "
        "sinh sinpi sqrt tan tanh tgamma trunc y0 y1").split()},
    **{f: 2 for f in ("atan2 copysign fdim fdivide fmax fmin fmod hypot nextafter pow "
                      "remainder rhypot scalbln scalbn min max").split()},
    "fma": 3, "norm3d": 3, "rnorm3d": 3, "norm4d": 4, "rnorm4d": 4, "dot4": 2,
}



def _builtins() -> dict:
    try:
        from .parser import BUILTINS
    except Exception:  # noqa: BLE001 - the parser is optional for this module
        return _FALLBACK_BUILTINS
    return BUILTINS


def _check_depth(e) -> None:
    """The parser's limit on expression depth, so both front ends refuse the same trees."""
    try:
        from .parser import check_depth
    except Exception:  # noqa: BLE001
        return
    check_depth(e)


# --------------------------------------------------------------------------------------
# The translator
# --------------------------------------------------------------------------------------
class _Entry:
    """A where clause in scope, in program order."""

    __slots__ = ("kind", "clause", "var", "mentions")

    def __init__(self, kind, clause, var, mentions):
        self.kind, self.clause, self.var, self.mentions = kind, clause, var, mentions


def _names(expr) -> set:
    return {e.name for e in A.walk(expr) if isinstance(e, A.Name)}


class _Translator:
    def __init__(self, ctx: _Positions, fdef: pyast.FunctionDef):
        self.ctx = ctx
        self.fdef = fdef
        self.builtins = _builtins()
        self.inputs: set = set()
        self.outputs: list = []
        self.written: set = set()
        self.body: list = []

    # --- helpers ------------------------------------------------------------------
    def span(self, node) -> Span:
        return self.ctx.span(node)

    def error(self, msg, node, hint) -> NoReturn:
        raise TCSyntaxError(msg, self.span(node) if node is not None else None, hint=hint)

    # --- the function -------------------------------------------------------------
    def run(self) -> A.Def:
        f = self.fdef
        params = self.params(f.args)
        stmts = list(f.body)
        first = stmts[0] if stmts else None
        if isinstance(first, pyast.Expr) and isinstance(first.value, pyast.Constant) \
                and isinstance(first.value.value, str):
            stmts = stmts[1:]  # docstring
        if not stmts or not isinstance(stmts[-1], pyast.Return):
            where = stmts[-1] if stmts else f
            self.error(f"kernel '{f.name}' must end with a return statement", where,
                       "end the kernel with 'return C' (or 'return C, D') naming its outputs")
        ret = stmts.pop()
        assert isinstance(ret, pyast.Return)  # checked above
        self.outputs = self.returns(ret, f.returns)
        self.out_names = {o.name for o in self.outputs}
        self.block(stmts, [])
        return A.Def(f.name, tuple(params), tuple(self.outputs), tuple(self.body),
                     self.span(f))

    def params(self, args: pyast.arguments):
        for bad, what in ((args.vararg, "*" + (args.vararg.arg if args.vararg else "")),
                          (args.kwarg, "**" + (args.kwarg.arg if args.kwarg else ""))):
            if bad is not None:
                self.error(f"a kernel cannot take {what}", bad,
                           "list every input tensor as its own parameter")
        if args.kwonlyargs:
            self.error("a kernel cannot take keyword-only parameters", args.kwonlyargs[0],
                       "remove the '*' separator")
        if args.defaults:
            self.error("kernel parameters cannot have default values", args.defaults[0],
                       "remove the default; every input is passed when the kernel is called")
        out = []
        for a in list(args.posonlyargs) + list(args.args):
            if a.annotation is None:
                self.error(f"parameter '{a.arg}' has no type", a,
                           f'annotate it with a TC type in a string, e.g. {a.arg}: '
                           '"float(M, K)" (or "float" for a scalar)')
            if a.arg in self.inputs:  # pragma: no cover - Python rejects this itself
                self.error(f"duplicate parameter '{a.arg}'", a, "rename it")
            type_name, dims, _ = self._type(a.annotation, f"parameter '{a.arg}'")
            self.inputs.add(a.arg)
            out.append(A.TensorDecl(a.arg, type_name, dims, self.span(a)))
        return out

    def _type(self, node, what):
        return _parse_type(self.ctx, node, what, '"float(M, K)"')

    def returns(self, ret: pyast.Return, ann):
        v = ret.value
        hint = "return the output tensors by name: 'return C' or 'return C, D'"
        if v is None:
            self.error("the kernel returns nothing", ret, hint)
        elts = v.elts if isinstance(v, pyast.Tuple) else [v]
        if not elts:
            self.error("the kernel returns nothing", ret, hint)
        names: list[pyast.Name] = []
        for e in elts:
            if not isinstance(e, pyast.Name):
                self.error("a kernel can only return tensors by name", e,
                           "assign the value to an output first, e.g. 'C[i] = ...', then "
                           "'return C'")
            if e.id in self.inputs:
                self.error(f"'{e.id}' is an input and cannot be returned", e,
                           "inputs are read-only; copy it into a new tensor: "
                           f"'{e.id}_out[i] = {e.id}[i]'")
            if any(n.id == e.id for n in names):
                self.error(f"'{e.id}' is returned twice", e, "return each output once")
            names.append(e)
        types = [None] * len(names)
        if ann is not None:
            many = isinstance(ann, pyast.Tuple)
            anns = list(ann.elts) if many else [ann]
            if len(anns) != len(names):
                self.error(
                    f"the return annotation has {len(anns)} type{'s' * (len(anns) != 1)} but "
                    f"the kernel returns {len(names)} tensor{'s' * (len(names) != 1)}", ann,
                    "give one type per returned tensor, e.g. -> (\"float(M, N)\", "
                    "\"int32(M)\")" if len(names) > 1 else
                    "give the returned tensor's type, e.g. -> \"float(M, N)\"")
            for k, (a, n) in enumerate(zip(anns, names)):
                if isinstance(a, pyast.Constant) and a.value is None:
                    continue  # an untyped output in a tuple of types
                types[k] = self._type(a, f"output '{n.id}'")
        out = []
        for n, t in zip(names, types):
            if t is None:
                out.append(A.TensorDecl(n.id, None, None, self.span(n)))
            else:
                out.append(A.TensorDecl(n.id, t[0], t[1], self.span(n)))
        return out

    # --- statements ---------------------------------------------------------------
    def block(self, stmts, env: list):
        env = list(env)  # lets and exists of a block are invisible to its siblings
        for s in stmts:
            if isinstance(s, pyast.Assign):
                self.assign(s, env)
            elif isinstance(s, pyast.AugAssign):
                self.augassign(s, env)
            elif isinstance(s, pyast.For):
                self.loop(s, env)
            elif isinstance(s, pyast.Expr):
                self.expr_stmt(s, env)
            elif isinstance(s, pyast.Pass):
                continue
            elif isinstance(s, pyast.Return):
                self.error("return must be the last statement of the kernel", s,
                           "write all statements first, then one 'return' at the end, "
                           "outside any loop")
            elif isinstance(s, pyast.If):
                self.error("'if' statements are not supported in a kernel", s,
                           "use a conditional expression on the right-hand side: "
                           "C[i] = a if cond else b")
            elif isinstance(s, pyast.While):
                self.error("'while' loops are not supported in a kernel", s,
                           "give an index a range with 'for k in range(lo, hi):'")
            elif isinstance(s, pyast.AnnAssign):
                self.error("annotated assignments are not supported in a kernel body", s,
                           "annotate outputs with the return annotation, e.g. "
                           "-> \"float(M, N)\", and drop this annotation")
            else:
                kind = type(s).__name__.lower()
                self.error(f"'{kind}' statements are not supported in a kernel", s,
                           "a kernel body holds tensor assignments (C[i] = ..., +=, *=), "
                           "lets (x = ...), 'for k in range(...)' loops and exists(...)")

    def where_for(self, env, mentioned: set) -> tuple:
        """The clauses of ``env`` a statement mentioning ``mentioned`` needs, in program
        order: every range and exists clause, and the lets it uses (transitively)."""
        needed = set(mentioned)
        for e in env:
            if e.kind != "let":
                needed |= e.mentions
        keep = [False] * len(env)
        for k in range(len(env) - 1, -1, -1):
            e = env[k]
            if e.kind != "let":
                keep[k] = True
            elif e.var in needed:
                keep[k] = True
                needed |= e.mentions
        return tuple(e.clause for e, k in zip(env, keep) if k)

    def emit(self, node, tensor: str, tspan, indices, op, rhs, env):
        mentioned = _names(rhs) | {i.name for i in indices}
        where = self.where_for(env, mentioned)
        self.body.append(A.Statement(tensor, tuple(indices), op, rhs, where, self.span(node),
                                     tspan))
        self.written.add(tensor)

    def target(self, t):
        """``(tensor, tensor_span, indices)`` of an assignment target, or ``None`` when it
        is a bare name that is not an output (a let)."""
        if isinstance(t, pyast.Name):
            if t.id in self.out_names:
                return t.id, self.span(t), ()
            return None
        if isinstance(t, pyast.Subscript):
            if not isinstance(t.value, pyast.Name):
                self.error("the tensor written must be a plain name", t.value,
                           "write to an output by name, e.g. C[i, j] = ...")
            name = t.value.id
            if name in self.inputs:
                self.error(f"'{name}' is an input and inputs are immutable", t.value,
                           "write the result to an output tensor and return it")
            sl = t.slice
            elts = sl.elts if isinstance(sl, pyast.Tuple) else [sl]
            idx = []
            for e in elts:
                if isinstance(e, pyast.Slice):
                    self.error("slices are not supported", e,
                               "name every dimension with an index variable, e.g. C[i, j]")
                if not isinstance(e, pyast.Name):
                    self.error("indices on the left of an assignment must be plain index "
                               "names", e,
                               "TC allows only index variables on the left; move the "
                               "arithmetic to the right-hand side reads, e.g. "
                               "C[i] = A[i + 1] instead of C[i - 1] = A[i]")
                idx.append(A.Name(e.id, self.span(e)))
            return name, self.span(t.value), tuple(idx)
        if isinstance(t, (pyast.Tuple, pyast.List)):
            self.error("tuple assignment is not supported in a kernel", t,
                       "write one assignment per tensor")
        self.error("cannot assign to this", t,
                   "assign to an output element (C[i, j] = ...) or to a name (a let)")

    def assign(self, s: pyast.Assign, env):
        if len(s.targets) != 1:
            self.error("chained assignment is not supported in a kernel", s,
                       "write one assignment per tensor")
        t = self.target(s.targets[0])
        if t is None:
            self.let(s, env)
            return
        name, tspan, idx = t
        op, rhs = "=", None
        v = s.value
        fname = self.func_name(v.func) if isinstance(v, pyast.Call) else None
        fname = _FUNC_ALIASES.get(fname, fname) if fname is not None else None
        if isinstance(v, pyast.Call) and fname in ("max", "min") and len(v.args) == 2 \
                and not v.keywords \
                and not any(isinstance(a, pyast.Starred) for a in v.args):
            me = self.target_expr(s.targets[0])
            a, b = (self.expr(x) for x in v.args)
            if a == me or b == me:
                rhs = b if a == me else a
                op = fname + ("=" if name in self.written else "=!")
        if rhs is None:
            rhs = self.expr(v)
        _check_depth(rhs)
        self.emit(s, name, tspan, idx, op, rhs, env)

    def target_expr(self, t):
        """The target of an assignment as the expression reading it."""
        if isinstance(t, pyast.Name):
            return A.Name(t.id, self.span(t))
        return self.expr(t)

    def augassign(self, s: pyast.AugAssign, env):
        ops = {pyast.Add: "+=", pyast.Mult: "*="}
        op = ops.get(type(s.op))
        if op is None:
            sym = _BINOP_SYMBOLS.get(type(s.op), "?")
            hint = "TC reduces with +=, *=, and C[i] = max(C[i], e) / min(C[i], e)"
            if isinstance(s.op, pyast.Sub):
                hint = "accumulate the negation instead: C[i] += -(...)"
            self.error(f"'{sym}=' is not a TC reduction", s, hint)
        t = self.target(s.target)
        if t is None:
            assert isinstance(s.target, pyast.Name)  # what target() calls a let
            n = s.target.id
            self.error(f"'{n}' is not an output, so it cannot be accumulated into", s.target,
                       f"return {n} to make it a 0-d output, or write to a tensor element "
                       f"({n}[i] {op} ...)")
        name, tspan, idx = t
        if name not in self.written:
            op += "!"
        rhs = self.expr(s.value)
        _check_depth(rhs)
        self.emit(s, name, tspan, idx, op, rhs, env)

    def let(self, s: pyast.Assign, env):
        t = s.targets[0]
        assert isinstance(t, pyast.Name)  # what target() calls a let
        n = t.id
        if n in self.inputs:
            self.error(f"'{n}' is an input and inputs are immutable", t,
                       "use a new name for the value")
        for e in env:
            if e.var == n:
                what = "a loop index" if e.kind == "range" else "a let"
                self.error(f"'{n}' is already defined as {what}", t,
                           "a let names one value; use a new name")
        value = self.expr(s.value)
        _check_depth(value)
        if n in _names(value):
            self.error(f"let '{n}' refers to itself", s.value, "use a new name for the value")
        clause = A.LetClause(n, value, self.span(s))
        env.append(_Entry("let", clause, n, _names(value)))

    def loop(self, s: pyast.For, env):
        hint = "loops give an index its range: for k in range(K): or for k in range(lo, hi):"
        if s.orelse:
            self.error("'for ... else' is not supported in a kernel", s.orelse[0], hint)
        if not isinstance(s.target, pyast.Name):
            self.error("the loop variable must be a single name", s.target, hint)
        k = s.target.id
        it = s.iter
        if not (isinstance(it, pyast.Call) and isinstance(it.func, pyast.Name)
                and it.func.id == "range"):
            self.error("a kernel loop must iterate over range(...)", it, hint)
        if it.keywords:
            self.error("range() takes no keyword arguments here", it.keywords[0], hint)
        if not 1 <= len(it.args) <= 2:
            self.error("range() with a step is not supported" if len(it.args) == 3 else
                       "range() needs one or two arguments", it, hint)
        if k in self.inputs or k in self.out_names:
            self.error(f"'{k}' is a tensor and cannot be a loop index", s.target,
                       "use another name for the index")
        for e in env:
            if e.var == k:
                self.error(f"'{k}' is already defined as "
                           f"{'a loop index' if e.kind == 'range' else 'a let'}", s.target,
                           "use another name for the index")
        if len(it.args) == 1:
            lo = A.Number(0, False, self.span(it.func))
            hi = self.expr(it.args[0])
        else:
            lo, hi = self.expr(it.args[0]), self.expr(it.args[1])
        clause = A.RangeClause(k, lo, hi, self.span(s.target).to(self.span(it)))
        inner = list(env) + [_Entry("range", clause, k, _names(lo) | _names(hi))]
        self.block(s.body, inner)

    def expr_stmt(self, s: pyast.Expr, env):
        v = s.value
        if isinstance(v, pyast.Call) and self.func_name(v.func) == "exists":
            if len(v.args) != 1 or v.keywords or isinstance(v.args[0], pyast.Starred):
                self.error("exists() takes one access", v, "write exists(A[i + k])")
            e = self.expr(v.args[0])
            env.append(_Entry("exists", A.ExistsClause(e, self.span(s)), None, _names(e)))
            return
        if isinstance(v, pyast.Constant) and (isinstance(v.value, str) or v.value is ...):
            return  # a string used as a comment, or '...'
        self.error("this expression does nothing", s,
                   "assign it to a tensor element (C[i] = ...) or a let (x = ...); only "
                   "exists(A[...]) stands alone")

    # --- expressions --------------------------------------------------------------
    def func_name(self, f):
        """The bare name of a called function (``math.exp`` -> ``exp``), or None."""
        if isinstance(f, pyast.Name):
            return f.id
        if isinstance(f, pyast.Attribute):
            base = f.value
            while isinstance(base, pyast.Attribute):
                base = base.value
            if isinstance(base, pyast.Name):
                return f.attr
        return None

    def expr(self, e):
        sp = self.span(e)
        if isinstance(e, pyast.Constant):
            v = e.value
            if isinstance(v, bool):
                self.error(f"'{v}' is not a TC value", e,
                           "TC has no boolean literals; write a comparison such as 0 == 0 "
                           "or use 1 / 0")
            if isinstance(v, int):
                return A.Number(v, False, sp)
            if isinstance(v, float):
                return A.Number(v, True, sp)
            if isinstance(v, str):
                self.error("strings are not supported in a kernel", e,
                           "expressions hold numbers, indices and tensor reads")
            self.error(f"the constant {v!r} is not supported in a kernel", e,
                       "use an int or float literal")
        if isinstance(e, pyast.Name):
            return A.Name(e.id, sp)
        if isinstance(e, pyast.Subscript):
            if not isinstance(e.value, pyast.Name):
                self.error("only named tensors can be indexed", e.value,
                           "read a tensor by name, e.g. A[i, j]")
            sl = e.slice
            elts = sl.elts if isinstance(sl, pyast.Tuple) else [sl]
            idx = []
            for x in elts:
                if isinstance(x, pyast.Slice):
                    self.error("slices are not supported", x,
                               "name every dimension with an index expression, e.g. A[i, j]")
                if isinstance(x, pyast.Starred):
                    self.error("starred indices are not supported", x,
                               "write every index")
                idx.append(self.expr(x))
            return A.Access(e.value.id, tuple(idx), sp, self.span(e.value))
        if isinstance(e, pyast.UnaryOp):
            if isinstance(e.op, pyast.UAdd):
                return self.expr(e.operand)
            if isinstance(e.op, pyast.USub):
                return A.Unary("-", self.expr(e.operand), sp)
            if isinstance(e.op, pyast.Not):
                return A.Unary("!", self.expr(e.operand), sp)
            self.error("'~' is not supported", e, "use 'not x' for a logical negation")
        if isinstance(e, pyast.BinOp):
            op = _BINOPS.get(type(e.op))
            if isinstance(e.op, pyast.Pow):
                return A.Call("pow", (self.expr(e.left), self.expr(e.right)), sp)
            if op is None:
                sym = _BINOP_SYMBOLS.get(type(e.op), type(e.op).__name__)
                hint = "TC has + - * / % and comparisons"
                if isinstance(e.op, (pyast.BitAnd, pyast.BitOr)):
                    hint = f"use '{'and' if isinstance(e.op, pyast.BitAnd) else 'or'}' " \
                           "for logical operations"
                self.error(f"operator '{sym}' is not supported", e, hint)
            return A.Binary(op, self.expr(e.left), self.expr(e.right), sp)
        if isinstance(e, pyast.BoolOp):
            op = "&&" if isinstance(e.op, pyast.And) else "||"
            out = self.expr(e.values[0])
            for v in e.values[1:]:
                rhs = self.expr(v)
                out = A.Binary(op, out, rhs, out.span.to(rhs.span))
            return out
        if isinstance(e, pyast.Compare):
            operands = [e.left] + list(e.comparators)
            terms = [self.expr(x) for x in operands]
            out = None
            for k, cop in enumerate(e.ops):
                op = _CMPOPS.get(type(cop))
                if op is None:
                    self.error("'is' / 'in' comparisons are not supported", e,
                               "compare values with == != < > <= >=")
                a, b = terms[k], terms[k + 1]
                pair = A.Binary(op, a, b, a.span.to(b.span))
                out = pair if out is None else A.Binary("&&", out, pair, out.span.to(b.span))
            return out
        if isinstance(e, pyast.IfExp):
            return A.Ternary(self.expr(e.test), self.expr(e.body), self.expr(e.orelse), sp)
        if isinstance(e, pyast.Call):
            return self.call(e)
        if isinstance(e, pyast.Attribute):
            self.error("attribute access is not supported in a kernel", e,
                       "only function calls may be qualified (math.exp(x)); write constants "
                       "such as math.pi as number literals")
        kinds = {pyast.Lambda: "lambdas", pyast.List: "lists", pyast.Tuple: "tuples",
                 pyast.Dict: "dicts", pyast.Set: "sets", pyast.ListComp: "comprehensions",
                 pyast.SetComp: "comprehensions", pyast.DictComp: "comprehensions",
                 pyast.GeneratorExp: "generators", pyast.JoinedStr: "f-strings",
                 pyast.Starred: "starred expressions", pyast.NamedExpr: "':=' assignments",
                 pyast.Slice: "slices"}
        what = kinds.get(type(e), type(e).__name__)
        self.error(f"{what} are not supported in a kernel", e,
                   "expressions hold numbers, indices, tensor reads A[i], arithmetic, "
                   "comparisons, 'a if c else b' and builtin calls")

    def call(self, e: pyast.Call):
        sp = self.span(e)
        name = self.func_name(e.func)
        if name is None:
            self.error("only named functions can be called", e.func,
                       "call a builtin such as exp(x), math.exp(x) or np.exp(x)")
        if e.keywords:
            self.error("keyword arguments are not supported", e.keywords[0],
                       "pass arguments by position")
        for a in e.args:
            if isinstance(a, pyast.Starred):
                self.error("starred arguments are not supported", a,
                           "pass every argument explicitly")
        cast = _CAST_ALIASES.get(name, name)
        if cast in _TYPES:
            if len(e.args) != 1:
                self.error(f"the cast {name}() takes one argument", e, f"write {name}(x)")
            return A.Cast(cast, self.expr(e.args[0]), sp)
        if name == "exists":
            self.error("exists() must be a statement of its own", e,
                       "write exists(A[i + k]) on its own line before the statements it "
                       "applies to")
        if name == "range":
            self.error("range() may only appear in a for loop", e,
                       "write for k in range(K): around the statements")
        func = name
        if func not in self.builtins:
            func = _FUNC_ALIASES.get(name, name)
        if func not in self.builtins:
            close = difflib.get_close_matches(name, sorted(self.builtins), n=1)
            hint = "tensor reads use brackets: " + name + "[i]"
            if close:
                hint = f"did you mean '{close[0]}'? ({hint})"
            self.error(f"unknown function '{name}'", e.func, hint)
        args = [self.expr(a) for a in e.args]
        arity = self.builtins[func]
        if func in ("min", "max") and len(args) > 2:
            out = args[0]
            for a in args[1:]:  # n-ary min/max fold left
                out = A.Call(func, (out, a), out.span.to(a.span))
            return A.Call(func, out.args, sp)
        if len(args) != arity:
            self.error(f"'{name}' expects {arity} argument{'s' * (arity != 1)} but got "
                       f"{len(args)}", e, f"call it with {arity} argument{'s' * (arity != 1)}")
        return A.Call(func, tuple(args), sp)


def function_to_def(fn) -> A.Def:
    """The ``ast.Def`` of a kernel written as a Python function.

    The body is read from the function's source file and never executed.  Raises
    :class:`~polytc.diagnostics.TCSyntaxError` (with a span into the user's file) when the
    function is not in the kernel subset of Python described in docs/python_syntax.md.
    """
    module, ctx = _read_source(fn)
    fdef = None
    for node in module.body:
        if isinstance(node, (pyast.FunctionDef, pyast.AsyncFunctionDef)):
            fdef = node
            break
    if fdef is None:
        raise TCSyntaxError(f"cannot find the 'def' of '{getattr(fn, '__name__', fn)}'",
                            hint=_TC_HINT)
    if isinstance(fdef, pyast.AsyncFunctionDef):
        raise TCSyntaxError("a kernel cannot be 'async'", ctx.span(fdef),
                            hint="remove 'async'")
    try:
        return _Translator(ctx, fdef).run()
    except RecursionError:
        raise TCSyntaxError(f"an expression of '{fdef.name}' is nested too deeply",
                            ctx.span(fdef),
                            hint="split the expression into several statements through "
                            "a temporary tensor") from None
