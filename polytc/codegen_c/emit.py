"""The isl AST as a C function, built with cgen.

Loops come only from isl's AST generator.  A ``parallel`` mark puts
``#pragma omp parallel for`` on the loop under it.  Temporaries are ``calloc``-ed in the
function.  The function returns 0, or the number of the first run-time check that failed.
"""
from __future__ import annotations

import cgen as c
import islpy as isl

from ..lang import sizes as S
from .cexpr import PRELUDE, ExprPrinter, div_helpers, statement_code

_OP = isl.ast_expr_op_type
_BINARY = {
    _OP.add: "+", _OP.sub: "-", _OP.mul: "*", _OP.div: "/", _OP.pdiv_q: "/",
    _OP.pdiv_r: "%", _OP.zdiv_r: "%", _OP.eq: "==", _OP.le: "<=", _OP.lt: "<",
    _OP.ge: ">=", _OP.gt: ">", _OP.and_: "&&", _OP.and_then: "&&", _OP.or_: "||",
    _OP.or_else: "||",
}


def isl_expr(e) -> str:
    """An isl AST expression as C (loop bounds and statement arguments: all ``long``)."""
    t = e.get_type()
    if t == isl.ast_expr_type.int:
        return f"{e.int_get_val().to_python()}L"
    if t == isl.ast_expr_type.id:
        return e.id_get_id().get_name()
    op = e.op_get_type()
    args = [isl_expr(e.op_get_arg(i)) for i in range(e.op_get_n_arg())]
    if op in _BINARY:
        return f"({args[0]} {_BINARY[op]} {args[1]})"
    if op == _OP.minus:
        return f"(-{args[0]})"
    if op in (_OP.min, _OP.max):
        f = "PT_MIN" if op == _OP.min else "PT_MAX"
        out = args[0]
        for a in args[1:]:
            out = f"{f}({out}, {a})"
        return out
    if op == _OP.fdiv_q:
        a, b = args
        return f"(({a}) >= 0 ? ({a}) / ({b}) : -((-({a}) + ({b}) - 1) / ({b})))"
    if op in (_OP.cond, _OP.select):
        return f"({args[0]} ? {args[1]} : {args[2]})"
    raise NotImplementedError(f"isl AST operator {op}")


def _strip(text: str) -> str:
    """``(a <= b)`` -> ``a <= b`` (OpenMP wants a bare loop condition)."""
    if not (text.startswith("(") and text.endswith(")")):
        return text
    depth = 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and i < len(text) - 1:
            return text
    return text[1:-1]


class CEmitter:
    def __init__(self, scop, num_threads=None):
        self.scop = scop
        self.by_name = {s.name: s for s in scop.stmts}
        self.sites: list = []  # (Span, what) for every run-time check, 1-based
        self.num_threads = num_threads

    def node(self, n, parallel=False) -> list:
        t = n.get_type()
        T = isl.ast_node_type
        if t == T.block:
            kids = n.block_get_children()
            out = []
            for i in range(kids.n_ast_node()):
                out += self.node(kids.get_at(i))
            return out
        if t == T.mark:
            par = n.mark_get_id().get_name() == "parallel"
            return self.node(n.mark_get_node(), parallel=par)
        if t == T.for_:
            it = n.for_get_iterator().id_get_id().get_name()
            init, cond = isl_expr(n.for_get_init()), _strip(isl_expr(n.for_get_cond()))
            inc = isl_expr(n.for_get_inc())
            body = c.Block(self.node(n.for_get_body()))
            loop = c.For(f"long {it} = {init}", cond, f"{it} += {inc}", body)
            if parallel:
                nt = f" num_threads({self.num_threads})" if self.num_threads else ""
                return [c.Pragma(f"omp parallel for{nt}"), loop]
            return [loop]
        if t == T.if_:
            cond = isl_expr(n.if_get_cond())
            then = c.Block(self.node(n.if_get_then_node()))
            other = c.Block(self.node(n.if_get_else_node())) if n.if_has_else_node() else None
            return [c.If(cond, then, other)]
        if t == T.user:
            call = n.user_get_expr()
            name = call.op_get_arg(0).id_get_id().get_name()
            sst = self.by_name[name]
            args = [isl_expr(call.op_get_arg(i + 1)) for i in range(call.op_get_n_arg() - 1)]
            printer = ExprPrinter(self.scop.shapes, self.scop.env, dict(zip(sst.vars, args)),
                                  sst.guarded, self.sites)
            return [c.Statement(statement_code(sst, printer).rstrip(";"))]
        raise NotImplementedError(f"isl AST node {t}")

    def function(self, ast, fname: str) -> str:
        prog = self.scop.program
        params = []
        for t in prog.inputs:
            params.append(f"const {t.dtype.c_name} *restrict {t.name}")
        for t in prog.outputs:
            params.append(f"{t.dtype.c_name} *restrict {t.name}")
        body = [c.Statement("int err = 0")]
        for t in prog.temporaries:
            n = 1
            for d in t.shape:
                n *= max(1, S.evaluate(d, self.scop.env))
            body.append(c.Statement(
                f"{t.dtype.c_name} *restrict {t.name} = calloc({n}, sizeof({t.dtype.c_name}))"))
            body.append(c.Statement(f"if (!{t.name}) return -1"))
        body += self.node(ast)
        for t in prog.temporaries:
            body.append(c.Statement(f"free({t.name})"))
        body.append(c.Statement("return err"))
        fn = c.FunctionBody(c.FunctionDeclaration(c.Value("int", fname),
                                                  [c.Value("", p) for p in params] or
                                                  [c.Value("void", "")]),
                            c.Block(body))
        return PRELUDE + div_helpers() + "\n" + str(fn) + "\n"
