"""Typed program expressions and statements as C text.

Semantics match the reference interpreter (``polytc.lang.reference``): integers wrap in
their declared width (results of narrow types are cast back; gcc runs with ``-fwrapv``),
``/`` and ``%`` on integers truncate as in C and are checked for division by zero,
``min``/``max`` are ``a < b ? a : b``, reads whose subscripts isl could not prove in
bounds are checked at run time.  A failed check records its site number in ``err`` and
the runtime raises a ``KernelRuntimeError`` quoting the site's source.
"""
from __future__ import annotations

import functools
import math
import re

import islpy as isl
import numpy as np

from ..diagnostics import UnsupportedError
from ..lang import program as P
from ..lang.types import BOOL, FLOAT64, ScalarType
from .halves import conversion

INT_TYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")

PRELUDE = r"""
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#define __FAST_MATH__ 1  /* only so that glibc declares its vector math (libmvec) */
#include <math.h>
#undef __FAST_MATH__
#define PT_MIN(a, b) ({ __typeof__(a) _a = (a); __typeof__(b) _b = (b); _a < _b ? _a : _b; })
#define PT_MAX(a, b) ({ __typeof__(a) _a = (a); __typeof__(b) _b = (b); _a > _b ? _a : _b; })
/* fmax/fmin (a NaN operand loses to a number) as selects, which vectorise: gcc calls
   libm's fmaxf for each element (a bias + ReLU epilogue ran 3x slower) */
#define PT_FMAX(a, b) ({ __typeof__(a) _a = (a); __typeof__(b) _b = (b); (_a >= _b || _b != _b) ? _a : _b; })
#define PT_FMIN(a, b) ({ __typeof__(a) _a = (a); __typeof__(b) _b = (b); (_a <= _b || _b != _b) ? _a : _b; })
/* a vector value held in a register where it is made (codegen_c/chains.py: pinned) */
#if defined(__x86_64__) || defined(__i386__)
#define PT_PIN(x) __asm__("" : "+v"(x))
#elif defined(__aarch64__)
#define PT_PIN(x) __asm__("" : "+w"(x))
#else
#define PT_PIN(x) ((void)0)
#endif
static inline long pt_chk(long i, long n, int site, int *err) {
  if (__builtin_expect(i < 0 || i >= n, 0)) { __atomic_store_n(err, site, __ATOMIC_RELAXED); return 0; }
  return i;
}
"""

_DIV = r"""
{q} {t} pt_div_{n}({t} a, {t} b, int site, int *err) {{
  if ({zero}) {{ {fail}; return 0; }}
  {ovf}return a / b;
}}
{q} {t} pt_rem_{n}({t} a, {t} b, int site, int *err) {{
  if ({zero}) {{ {fail}; return 0; }}
  {rovf}return a % b;
}}
"""

def div_helpers(code: str, q="static inline", zero="__builtin_expect(b == 0, 0)",
                fail="__atomic_store_n(err, site, __ATOMIC_RELAXED)") -> str:
    """Checked integer division for the types ``code`` divides: a zero divisor records
    the site in ``*err`` (the defaults are the C target's, whose OpenMP threads share
    ``err``; a GPU dialect gives its function qualifier ``q`` and a plain store)."""
    out = []
    used = set(re.findall(r"\bpt_(?:div|rem)_(\w+?)\(", code))
    for n in INT_TYPES:
        if n not in used:
            continue
        t = f"{n}_t"
        if n.startswith("u"):
            ovf = rovf = ""
        else:
            ovf = f"if (b == -1) return ({t})(0 - (uint64_t)a);\n  "
            rovf = "if (b == -1) return 0;\n  "
        out.append(_DIV.format(q=q, zero=zero, fail=fail, t=t, n=n, ovf=ovf, rovf=rovf))
    return "".join(out)


_DOT4 = """
{q} int pt_dot4(int a, int b) {{
  unsigned int ua = (unsigned int)a, ub = (unsigned int)b;
  return (int)(ua & 255u) * ((int)(ub << 24) >> 24) + (int)((ua >> 8) & 255u) * ((int)(ub << 16) >> 24)
       + (int)((ua >> 16) & 255u) * ((int)(ub << 8) >> 24) + (int)(ua >> 24) * ((int)ub >> 24);
}}
"""

#: vector bytes -> the guard and the builtin of x86's vpdpbusd on that width
_VPDPBUSD = {
    64: ("defined(__AVX512VNNI__)", "__builtin_ia32_vpdpbusd_v16si"),
    32: ("defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__))",
         "__builtin_ia32_vpdpbusd_v8si"),
    16: ("defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__))",
         "__builtin_ia32_vpdpbusd_v4si"),
}


def dot4_helper(code: str, q: str = "static inline") -> str:
    """``pt_dot4``, the builtin ``dot4`` on two words, when ``code`` calls it."""
    return _DOT4.format(q=q) if re.search(r"\bpt_dot4\(", code) else ""


def vdot4_helpers(code: str) -> str:
    """``pt_vdot4_vNi`` (``acc + dot4`` lane by lane on N-lane int32 vectors ``pt_vNi``:
    one vpdpbusd where the CPU has VNNI, else exact shifts and products) for those
    ``code`` calls."""
    out = []
    for lanes in sorted({int(n) for n in re.findall(r"\bpt_vdot4_v(\d+)i\(", code)}):
        v = f"pt_v{lanes}i"
        guard, builtin = _VPDPBUSD.get(lanes * 4, ("0", ""))
        slow = "".join(f"  acc += (pt_v)((ua >> {k}) & 255u) * ((pt_v)(ub << {24 - k}) >> 24);\n"
                       for k in (0, 8, 16, 24))
        out.append(
            f"static inline {v} pt_vdot4_v{lanes}i({v} acc, {v} a, {v} b)\n{{\n"
            f"#if {guard}\n  return {builtin}(acc, a, b);\n#else\n"
            f"  typedef int pt_v __attribute__((vector_size({lanes * 4})));\n"
            f"  typedef unsigned int pt_u __attribute__((vector_size({lanes * 4})));\n"
            f"  pt_u ua = (pt_u)a, ub = (pt_u)b;\n{slow}  return acc;\n#endif\n}}\n")
    return "".join(out)


_FUNCS = {  # builtin -> C name for float (f suffix added) / double
    "acos": "acos", "acosh": "acosh", "asin": "asin", "asinh": "asinh", "atan": "atan",
    "atan2": "atan2", "atanh": "atanh", "cbrt": "cbrt", "ceil": "ceil", "copysign": "copysign",
    "cos": "cos", "cosh": "cosh", "erf": "erf", "erfc": "erfc", "exp": "exp", "exp2": "exp2",
    "exp10": "exp10", "expm1": "expm1", "fabs": "fabs", "fdim": "fdim", "floor": "floor",
    "fma": "fma", "fmax": "fmax", "fmin": "fmin", "fmod": "fmod", "hypot": "hypot",
    "lgamma": "lgamma", "log": "log", "log10": "log10", "log1p": "log1p", "log2": "log2",
    "logb": "logb", "nextafter": "nextafter", "pow": "pow", "remainder": "remainder",
    "rint": "rint", "round": "round", "sin": "sin", "sinh": "sinh", "sqrt": "sqrt", "tan": "tan",
    "tanh": "tanh", "tgamma": "tgamma", "trunc": "trunc",
}
_DOUBLE_ONLY = {"j0": "j0", "j1": "j1", "y0": "y0", "y1": "y1"}


def c_type(t: ScalarType) -> str:
    return t.c_name


def literal(value, t: ScalarType) -> str:
    if t.is_float:
        v = float(value) if t == FLOAT64 else float(np.float32(value))  # 1e40 -> inf
        if math.isnan(v):
            return "NAN" if t == FLOAT64 else "((float)NAN)"
        if math.isinf(v):
            s = "INFINITY" if v > 0 else "(-INFINITY)"
            return s if t != FLOAT64 else f"((double){s})"
        return repr(v) if t == FLOAT64 else repr(v) + "f"
    v = int(value)
    if t == BOOL:
        return "1" if v else "0"
    if t.name == "int64":
        return f"({v + 1}LL - 1)" if v == -(1 << 63) else f"{v}LL"
    if t.name == "uint64":
        return f"{v}ULL"
    if t.name == "int32" and v == -(1 << 31):
        return "(-2147483647 - 1)"
    return f"(({t.c_name}){v})" if t.bits < 32 else (f"{v}U" if t.kind == "uint" else str(v))


class ExprPrinter:
    """Prints one statement's expressions.  ``vars`` maps index names to C expressions
    (loop iterators of the isl AST); ``sites`` collects (site id, Span, what) of every
    run-time check."""

    #: signed ``+ - *`` wrap only when computed in unsigned (a dialect compiled without
    #: ``-fwrapv``: OpenCL C, CUDA), else the compiler may assume they never overflow
    unsigned_wrap = False
    #: fmax/fmin as the PRELUDE's vectorisable selects (C); else the dialect's functions
    select_fminmax = True

    def __init__(self, shapes: dict, env: dict, vars: dict, guarded: frozenset, sites: list):
        #: ``shapes``: tensor -> extents, ``env``: size -> value; a symbolic size's value
        #: (and an extent depending on one) is its C text (``c_sizes``)
        self.shapes, self.env, self.vars = shapes, env, vars
        self.guarded, self.sites = guarded, sites
        #: reads (by ``id``) printed as loads of ``vector_type`` from their element's
        #: address (the micro-kernel's lane-dependent reads, ``microkernel.py``)
        self.vector_reads: frozenset = frozenset()
        self.vector_type = ""
        #: reads printed as masked loads: (helper, lanes) (a partial last vector)
        self.masked_reads: frozenset = frozenset()
        self.masked_load = ("", 0)
        #: when a dict: each distinct read is loaded once into a local, named here by
        #: its text, declared in ``hoisted_decls`` (the type of a vector or masked load:
        #: ``hoisted_vector``); a micro-kernel's reduction step, where every row's
        #: update repeats the same loads and address arithmetic (gcc folded them, in
        #: a quarter more compile time)
        self.hoisted: dict | None = None
        self.hoisted_decls: list = []
        self.hoisted_vector = ""
        #: contracted temporaries: tensor -> (buffer, box extents, box offsets as C)
        self.locals: dict = {}
        #: temporaries kept in another tensor's array, element for element: tensor ->
        #: that tensor (``tiling/alias.py``)
        self.aliases: dict = {}
        #: the iterators of the loops the instance is innermost in: a float division
        #: by a divisor that none of them changes is a multiplication by its reciprocal
        #: (computed once, outside the loop: ``Options.reciprocal``); empty: never
        self.varying: tuple = ()
        #: tensor -> the C value its one read takes instead of a load (a folded
        #: epilogue reading the contraction's accumulators, ``fold.py``)
        self.substitute: dict = {}

    def literal(self, value, t: ScalarType) -> str:
        return literal(value, t)

    def math(self, name: str, t: ScalarType) -> str:
        """The C name of a math function for type ``t`` (``expf`` for float)."""
        return name if t == FLOAT64 else name + "f"

    def site(self, span, what) -> int:
        self.sites.append((span, what))
        return len(self.sites)

    def element(self, tensor: str, subs, checked=False, span=None) -> str:
        """``tensor[linear index]`` from subscript C expressions (row-major)."""
        tensor = self.aliases.get(tensor, tensor)
        if tensor in self.locals:
            tensor, shape, offs = self.locals[tensor]
            subs = [s if o in ("0L", "0") else f"({s}) - ({o})" for s, o in zip(subs, offs)]
            subs, shape = [s for s, n in zip(subs, shape) if n > 1], [n for n in shape if n > 1]
            checked = False  # contraction needs every access affine: proven in bounds
        else:
            shape = self.shapes[tensor]
        if not shape:
            return f"{tensor}[0]"
        lin = None
        for d, (s, n) in enumerate(zip(subs, shape)):
            cn = f"{n}L" if isinstance(n, int) else f"({n})"  # a number or a size's C
            if checked:
                what = f"read out of bounds: subscript {d} of '{tensor}' is outside 0:{n}"
                s = f"pt_chk({s}, {cn}, {self.site(span, what)}, &err)"
            lin = s if lin is None else f"({lin}) * {cn} + ({s})"
        return f"{tensor}[{lin}]"

    def read(self, e: P.Read) -> str:
        """The element a read takes."""
        if e.tensor in self.substitute:
            return self.substitute[e.tensor]
        return self.element(e.tensor, [self.sub(s) for s in e.indices], id(e) in self.guarded,
                            e.span)

    def sub(self, e) -> str:
        return f"(long)({self.expr(e, subscript=True)})"

    def expr(self, e, subscript=False) -> str:
        if isinstance(e, P.Const):
            return self.literal(e.value, e.dtype)
        if isinstance(e, P.Index):
            v = self.vars[e.name]
            return f"({v})" if subscript else f"((int32_t)({v}))"
        if isinstance(e, P.Size):
            v = self.env[e.name]  # a symbolic size is a C long: in a value, of its type
            return f"(({e.dtype.c_name})({v}))" if isinstance(v, str) and not subscript \
                else str(v)
        if isinstance(e, P.Read):
            text, ctype = self.read(e), e.dtype.c_name
            if id(e) in self.vector_reads:
                text, ctype = f"(*(const {self.vector_type} *)&{text})", self.hoisted_vector
            elif id(e) in self.masked_reads:
                text = f"{self.masked_load[0]}(&{text}, {self.masked_load[1]})"
                ctype = self.hoisted_vector
            if self.hoisted is None:
                return text
            name = self.hoisted.get(text)
            if name is None:
                name = self.hoisted[text] = f"pt_r{len(self.hoisted)}"
                self.hoisted_decls.append(f"const {ctype} {name} = {text}")
            return name
        if isinstance(e, P.Convert):
            inner = self.expr(e.value, subscript)
            half = conversion(inner, e.value.dtype, e.dtype)
            if half is not None:
                return half
            if e.dtype == BOOL:
                return f"((unsigned char)(({inner}) != 0))"
            return f"(({e.dtype.c_name})({inner}))"
        if isinstance(e, P.Neg):
            x = self.expr(e.value, subscript)
            if self.wraps(e.dtype, subscript):
                return self.arith("-", "0", x, e.dtype)
            return self._wrap(f"(-{x})", e.dtype)
        if isinstance(e, P.Not):
            return f"(!{self.expr(e.value)})"
        if isinstance(e, P.Select):
            return (f"({self.expr(e.cond)} ? {self.expr(e.then, subscript)} : "
                    f"{self.expr(e.other, subscript)})")
        if isinstance(e, P.Bin):
            return self.binary(e, subscript)
        if isinstance(e, P.Apply):
            return self.apply(e)
        raise TypeError(type(e).__name__)

    def _wrap(self, text: str, t: ScalarType) -> str:
        if t.is_integral and t.bits < 32:
            return f"(({t.c_name}){text})"
        return text

    def wraps(self, t: ScalarType, subscript=False) -> bool:
        """Whether ``+ - *`` in ``t`` go through unsigned arithmetic here."""
        return self.unsigned_wrap and t.kind == "int" and t.bits >= 32 and not subscript

    def arith(self, op: str, a: str, b: str, t: ScalarType, subscript=False) -> str:
        """``a op b`` (``+ - *``) in ``t``, wrapping around as the language says."""
        if self.wraps(t, subscript):
            u = f"uint{t.bits}_t"
            return f"(({t.c_name})(({u})({a}) {op} ({u})({b})))"
        return self._wrap(f"({a} {op} {b})", t)

    def binary(self, e: P.Bin, subscript) -> str:
        a, b = self.expr(e.lhs, subscript), self.expr(e.rhs, subscript)
        t = e.lhs.dtype
        if e.op in ("/", "%") and not t.is_float:
            d = e.rhs.value if isinstance(e.rhs, P.Const) else \
                self.env[e.rhs.name] if isinstance(e.rhs, P.Size) else 0
            # a positive constant divisor needs no check, nor a symbolic size (at least 1)
            if isinstance(d, str) or d > 0:
                return self._wrap(f"({a} {e.op} {b})", t)
            kind = "div" if e.op == "/" else "rem"
            site = self.site(e.span, "integer division by zero")
            return f"pt_{kind}_{t.name}({a}, {b}, {site}, &err)"
        if e.op == "%":
            return f"{self.math('fmod', t)}({a}, {b})"
        if e.op == "/" and t.is_float and self.varying and \
                not any(re.search(rf"\b{v}\b", b) for v in self.varying):
            return f"({a} * ({self.literal(1.0, t)} / {b}))"
        if e.op in ("+", "-", "*"):
            return self.arith(e.op, a, b, e.dtype, subscript)
        return self._wrap(f"({a} {e.op} {b})", e.dtype)

    def apply(self, e: P.Apply) -> str:
        args = [self.expr(a) for a in e.args]
        f, t = e.func, e.dtype
        if f == "dot4":
            return f"pt_dot4({args[0]}, {args[1]})"
        if f == "min":
            return f"PT_MIN({args[0]}, {args[1]})"
        if f == "max":
            return f"PT_MAX({args[0]}, {args[1]})"
        if f in ("fmax", "fmin") and self.select_fminmax:
            return f"PT_{f.upper()}({args[0]}, {args[1]})"
        one = "1.0" if t == FLOAT64 else "1.0f"
        m = functools.partial(self.math, t=t)
        if f in _FUNCS:
            return f"{m(_FUNCS[f])}({', '.join(args)})"
        if f in _DOUBLE_ONLY:
            return f"(({t.c_name}){self.math(_DOUBLE_ONLY[f], FLOAT64)}((double)({args[0]})))"
        ct = t.c_name
        special = {
            "rsqrt": lambda a: f"({one} / {m('sqrt')}({a[0]}))",
            "rcbrt": lambda a: f"({one} / {m('cbrt')}({a[0]}))",
            "rhypot": lambda a: f"({one} / {m('hypot')}({a[0]}, {a[1]}))",
            "fdivide": lambda a: f"({a[0]} / {a[1]})",
            "cospi": lambda a: f"{m('cos')}(({ct})M_PI * {a[0]})",
            "sinpi": lambda a: f"{m('sin')}(({ct})M_PI * {a[0]})",
            "normcdf": lambda a: f"(({ct})0.5 * {m('erfc')}(-{a[0]} * ({ct})M_SQRT1_2))",
            "norm3d": lambda a: f"{m('sqrt')}({a[0]}*{a[0]} + {a[1]}*{a[1]} + {a[2]}*{a[2]})",
            "rnorm3d": lambda a: f"({one} / {m('sqrt')}({a[0]}*{a[0]} + {a[1]}*{a[1]} + "
                                 f"{a[2]}*{a[2]}))",
            "norm4d": lambda a: f"{m('sqrt')}({a[0]}*{a[0]} + {a[1]}*{a[1]} + {a[2]}*{a[2]} + "
                                f"{a[3]}*{a[3]})",
            "rnorm4d": lambda a: f"({one} / {m('sqrt')}({a[0]}*{a[0]} + {a[1]}*{a[1]} + "
                                 f"{a[2]}*{a[2]} + {a[3]}*{a[3]}))",
        }
        if f in special:
            return special[f](args)
        raise UnsupportedError(f"the builtin '{f}' is not supported by the C target", e.span,
                               hint="express it with other builtins")


def target_code(sst, printer: ExprPrinter) -> str:
    """The element a statement instance writes."""
    return printer.element(sst.stmt.tensor, [f"({printer.vars[v]})" for v in sst.stmt.indices])


def statement_code(sst, printer: ExprPrinter, target: str | None = None) -> str:
    """The C statement of one isl statement instance (``sst`` a ``ScopStmt``), writing
    ``target`` instead of the tensor element when given (a promoted accumulator)."""
    st = sst.stmt
    target = target or target_code(sst, printer)
    if sst.kind == "init":
        return f"{target} = {printer.literal(P.identity(st.op, st.rhs.dtype), st.rhs.dtype)};"
    rhs = printer.expr(st.rhs)
    if st.op is None:
        return f"{target} = {rhs};"
    if st.op in ("+", "*"):
        t = st.rhs.dtype
        if t.is_integral and (t.bits < 32 or printer.wraps(t)):
            return f"{target} = {printer.arith(st.op, target, rhs, t)};"
        return f"{target} {st.op}= {rhs};"
    return extremum_update(st.op, st.rhs.dtype, rhs, target)


def extremum_update(op: str, t, rhs: str, target: str, nan_flag: str | None = None) -> str:
    """``target min= rhs`` / ``max=``: a ternary, so that it vectorises (to one min/max
    instruction).  A float NaN propagates (as in numpy): it is taken, and once taken
    nothing replaces it; the NaN test is a select of a named ternary's result, which gcc
    keeps as one masked ``vmaxps`` (AVX-512) or a max and a blend (AVX2); written as one
    expression, ``v != v ? v : (v > t ? v : t)``, it became three compares and a mask
    ``or`` on the accumulator's dependence chain (a 3x3 max pool 52 -> 23 us on Zen 5,
    104 -> 93 us with AVX2 only).  With
    ``nan_flag`` (an ``omp simd reduction(|:flag)``, whose partial maxima a NaN must not
    reach) the NaN is recorded in the flag instead; the caller stores NaN when it is set."""
    cmp = "<" if op == "min" else ">"
    update, flag = f"_v {cmp} {target} ? _v : {target}", ""
    if t.is_float and nan_flag:
        flag = f" {nan_flag} |= _v != _v;"
    elif t.is_float:
        return (f"{{ {t.c_name} _v = {rhs}; {t.c_name} _m = {update}; "
                f"{target} = _v != _v ? _v : _m; }}")
    return f"{{ {t.c_name} _v = {rhs}; {target} = {update};{flag} }}"


def extremum_pair(op: str, t, rhs: str, other: str, target: str, nan_flag: str) -> str:
    """Two float updates of ``extremum_update`` with ``nan_flag``, their NaN test one
    ``isunordered`` of both values (one compare for two: a 3x3/2 max pool of 64 x 111 x
    111 57 -> 52 us)."""
    cmp = "<" if op == "min" else ">"
    return (f"{{ {t.c_name} _v = {rhs}, _w = {other}; "
            f"{target} = _v {cmp} {target} ? _v : {target}; "
            f"{target} = _w {cmp} {target} ? _w : {target}; "
            f"{nan_flag} |= __builtin_isunordered(_v, _w); }}")


_OP = isl.ast_expr_op_type
_BINARY = {
    _OP.add: "+", _OP.sub: "-", _OP.mul: "*", _OP.div: "/", _OP.pdiv_q: "/",
    _OP.pdiv_r: "%", _OP.zdiv_r: "%", _OP.eq: "==", _OP.le: "<=", _OP.lt: "<",
    _OP.ge: ">=", _OP.gt: ">", _OP.and_: "&&", _OP.and_then: "&&", _OP.or_: "||",
    _OP.or_else: "||",
}


def mentions(text: str, names) -> bool:
    """Whether the C ``text`` holds any of ``names`` as a word (an iterator, a size)."""
    return any(re.search(rf"\b{n}\b", text) for n in names)


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


def c_sizes(scop) -> tuple:
    """``(shapes, env)`` for an ``ExprPrinter`` of ``scop``: numbers, except that a
    symbolic size is its name and an extent that depends on one is its C expression
    (isl's AST printer, under the assumptions of ``scop.context``)."""
    if not scop.symbolic:
        return scop.shapes, scop.env
    build = isl.AstBuild.from_context(scop.context)
    params = ", ".join(scop.symbolic)

    def c(d: str):
        if d.lstrip("-").isdigit():
            return int(d)
        aff = isl.PwAff.read_from_str(scop.ctx, f"[{params}] -> {{ [({d})] }}")
        return isl_expr(build.expr_from_pw_aff(aff))

    shapes = {t: tuple(c(d) for d in dims) for t, dims in scop.dims.items()}
    env = {k: (k if k in scop.symbolic else v) for k, v in scop.env.items()}
    return shapes, env


def ast_nodes(node):
    """``node`` and every isl AST node below it, before their children."""
    T = isl.ast_node_type
    yield node
    t = node.get_type()
    if t == T.for_:
        yield from ast_nodes(node.for_get_body())
    elif t == T.mark:
        yield from ast_nodes(node.mark_get_node())
    elif t == T.if_:
        yield from ast_nodes(node.if_get_then_node())
        if node.if_has_else_node():
            yield from ast_nodes(node.if_get_else_node())
    elif t == T.block:
        kids = node.block_get_children()
        for i in range(kids.n_ast_node()):
            yield from ast_nodes(kids.get_at(i))


def span(header) -> str | None:
    """The values a loop's iterator takes, from first to last (C; ``header``: its ``for``
    clauses), for bounds ``c <= e`` or ``c < e``; else None."""
    m = re.fullmatch(r"c\d+ (<=?) (.+)", header[1])
    if m is None:
        return None
    first = header[0].split(" = ", 1)[1]
    return f"({m.group(2)}) - ({first})" + (" + 1" if m.group(1) == "<=" else "")
