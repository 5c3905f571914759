"""The numpy reference interpreter: the test oracle of the whole project.

Slow, obviously right and independent of the compiler: it reads the checked
:class:`~polytc.lang.program.Program` and nothing else.  ``run(program, inputs)`` returns
every output (and temporary) array by name.

Semantics (C semantics, since polytc generates C; the code generators must match them)
-----------------------------------------------------------------------------------------
* Outputs and temporaries not passed in start with every element equal to
  :func:`~polytc.lang.program.initial_value`: the identity of the first accumulating
  (non-``!``) statement writing them, else 0 (so ``O(i) += A(i,j)`` is a sum).  A
  dimension whose size comes out negative is 0.
* Statements run in order.  A statement's iteration domain is its ``ranges`` in order,
  outermost first; each range is ``[lo, hi)`` evaluated with the sizes and the current values
  of earlier indices (triangular ranges); an empty range (``lo >= hi``: a zero size, say)
  has no points.  Points are visited in lexicographic order.
* ``!`` forms first set ``T`` at every point of the *left-hand* ranges (the ranges of the
  non-reduction indices, also where the reduction range is empty) to
  :func:`~polytc.lang.program.identity`.
* Updates, with ``acc = T[idx]`` and ``v = rhs`` converted to ``T``'s dtype:
  ``=``: ``acc = v`` (when several points write one element, the last in iteration order
  wins); ``+``: ``acc = acc + v``; ``*``: ``acc = acc * v``; ``min``:
  ``acc = (v < acc || v != v) ? v : acc``; ``max``: ``acc = (v > acc || v != v) ? v : acc``.
  All arithmetic is in ``T``'s dtype (a float32 tensor accumulates in float32, in
  iteration order).  So a NaN propagates through ``min=``/``max=`` as in numpy (a NaN
  operand is taken, a NaN in the accumulator stays), and of two equal values (``-0.0``,
  ``+0.0``) the earlier one is kept.
* A statement whose right-hand side reads the tensor it writes runs point by point, in
  order, unless every such read is exactly ``T(lhs indices)`` and there are no reduction
  indices (then each point reads only the element it alone writes).
* Every expression node computes in its declared ``dtype``; integer results wrap around
  in that dtype after every operation (``int8`` ``100 + 100 == -56``), so C code must
  cast each integer node narrower than ``int`` back to its type (C's promotions to
  ``int`` must not leak).  Index variables and sizes have the value of the index.
* Integer ``/`` truncates toward zero, ``%`` has the sign of the dividend
  (``-7 / 2 == -3``, ``-7 % 2 == -1``); ``MIN / -1`` wraps to ``MIN`` and ``MIN % -1 == 0``.
  Integer division or remainder by zero raises :class:`KernelRuntimeError`.  Float ``/``
  is IEEE division in the dtype, float ``%`` is ``fmod``.  Arithmetic on ``bool`` operands
  computes in ``uint8`` and converts the result back to bool (``!= 0``).
* Conversions: to bool is ``x != 0``; bool to a number is 0/1; float to int truncates
  toward zero (out of range is undefined in C: whatever numpy does); int to int wraps;
  to float rounds to nearest.
* ``c ? a : b``, ``&&`` and ``||`` are lazy: a branch (right operand) is evaluated only at
  the points that take it, so a guarded out-of-bounds read or division does not fault.
  ``&&``, ``||``, ``!`` and conditions test ``!= 0``.
* Reads check their indices: out of ``[0, extent)`` raises :class:`KernelRuntimeError`
  (writes too).
* Functions: ``min(a, b) = a < b ? a : b``, ``max(a, b) = a > b ? a : b`` (any dtype;
  ``min(NaN, x) == x``, ``min(x, NaN) == NaN``); ``fmin``/``fmax`` ignore NaN (C);
  ``rsqrt(x) = 1 / sqrt(x)``; ``round`` rounds half away from zero (C, not numpy),
  ``rint`` half to even;
  ``remainder`` is the IEEE remainder (quotient rounded half to even); ``fdim``;
  ``fma`` is fused (rounded once); ``erf erfc lgamma tgamma`` are computed in double and
  rounded to the dtype; ``abs`` is C ``abs`` on ints (wraps at MIN) and ``fabs`` on floats.
  Float functions compute in the node's float dtype (float32 stays float32: results may
  differ from libm by an ulp or so, compare floats with a tolerance).  A float function
  with an integer result dtype computes in double and converts.  Anything else raises
  ``NotImplementedError`` naming the function.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..diagnostics import ArgumentError, KernelRuntimeError
from . import program as P
from . import sizes as S
from .types import FLOAT32

#: points evaluated at once (bounds the memory of expression evaluation)
CHUNK = 1 << 20


# --- entry point -------------------------------------------------------------------------
def run(program: P.Program, inputs, outputs=None) -> dict:
    """Run ``program`` on ``inputs`` (in ``program.inputs`` order).  Arrays named in
    ``outputs`` are used (and written in place) instead of fresh ones.  Returns every
    output and temporary array by name."""
    inputs = list(inputs)
    if len(inputs) != len(program.inputs):
        raise ArgumentError(f"{program.name} takes {len(program.inputs)} inputs, "
                            f"got {len(inputs)}")
    inputs = [np.asarray(a) for a in inputs]
    for t, a in zip(program.inputs, inputs):
        if a.ndim != t.rank:
            raise ArgumentError(f"input {t.name} has rank {a.ndim}, expected {t.rank}")
    sizes = program.bind_sizes([a.shape for a in inputs])
    arrays = {}
    for t, a in zip(program.inputs, inputs):
        want = tuple(int(S.evaluate(d, sizes)) for d in t.shape)
        if a.shape != want:
            raise ArgumentError(f"input {t.name} has shape {a.shape}, expected {want}")
        arrays[t.name] = a
    given = dict(outputs or {})
    written = program.outputs + program.temporaries
    unknown = set(given) - {t.name for t in written}
    if unknown:
        raise ArgumentError(f"not an output or temporary of {program.name}: "
                            f"{', '.join(sorted(unknown))}")
    for t in written:
        shape = t.extents(sizes)
        dt = t.dtype.np_dtype
        if t.name in given:
            g = given[t.name]
            if not isinstance(g, np.ndarray) or g.shape != shape or g.dtype != dt:
                raise ArgumentError(f"output {t.name} must be a {dt} array of shape {shape}")
            # work on a C-contiguous array (flat views); copied back at the end
            arrays[t.name] = g if g.flags.c_contiguous and g.flags.writeable else \
                np.array(g, order="C")
        else:
            arrays[t.name] = np.full(shape, P.initial_value(program, t.name), dt)
    with np.errstate(all="ignore"):
        interp = _Interpreter(program, arrays, sizes)
        for stmt in program.statements:
            interp.statement(stmt)
    for name, g in given.items():
        if arrays[name] is not g:
            g[...] = arrays[name]
            arrays[name] = g
    return {t.name: arrays[t.name] for t in written}


# --- iteration domains -------------------------------------------------------------------
def _size_value(e, env):
    """``sizes.evaluate`` over numpy arrays (names may be index arrays)."""
    if isinstance(e, S.Lin):
        v = e.const
        for n, c in e.terms:
            v = v + c * env[n]
        return v
    k = e.kind
    if k == "min":
        return np.minimum(_size_value(e.args[0], env), _size_value(e.args[1], env))
    if k == "max":
        return np.maximum(_size_value(e.args[0], env), _size_value(e.args[1], env))
    if k == "floordiv":
        return np.floor_divide(_size_value(e.args[0], env), e.args[1])
    if k == "ceildiv":
        return -np.floor_divide(-_size_value(e.args[0], env), e.args[1])
    if k == "add":
        return _size_value(e.args[0], env) + _size_value(e.args[1], env)
    if k == "mul":
        return _size_value(e.args[0], env) * e.args[1]
    raise ValueError(f"unknown size expression {k!r}")


def _bound(e, sizes, pts, n):
    if not (S.names(e) & set(pts)):
        v = np.int64(S.evaluate(e, sizes))
    else:
        v = np.asarray(_size_value(e, {**sizes, **pts}), dtype=np.int64)
    return np.broadcast_to(v, (n,))


def _expand(r, pts, n, lo, hi):
    counts = np.maximum(hi - lo, 0)
    total = int(counts.sum())
    out = {k: np.repeat(v, counts) for k, v in pts.items()}
    starts = np.cumsum(counts) - counts
    out[r.var] = np.repeat(lo, counts) + (np.arange(total, dtype=np.int64)
                                          - np.repeat(starts, counts))
    return out, total


def domain(ranges, sizes, chunk: int = CHUNK):
    """Yield ``(points, n)`` chunks of the iteration domain in lexicographic order;
    ``points`` maps each index name to an int64 array of length ``n``."""

    def rec(k, pts, n):
        if n == 0:
            return
        if k == len(ranges):
            yield pts, n
            return
        r = ranges[k]
        lo, hi = _bound(r.lo, sizes, pts, n), _bound(r.hi, sizes, pts, n)
        counts = np.maximum(hi - lo, 0)
        total = int(counts.sum())
        if total <= chunk or n == 1:
            out, m = _expand(r, pts, n, lo, hi)
            yield from rec(k + 1, out, m)
            return
        group = (np.cumsum(counts) - counts) // chunk
        cuts = [0, *(np.flatnonzero(np.diff(group)) + 1).tolist(), n]
        for a, b in zip(cuts[:-1], cuts[1:]):
            sub = {v: x[a:b] for v, x in pts.items()}
            out, m = _expand(r, sub, b - a, lo[a:b], hi[a:b])
            yield from rec(k + 1, out, m)

    yield from rec(0, {}, 1)


# --- scalar helpers ----------------------------------------------------------------------
def convert(x, st):
    """C conversion of the values ``x`` to the scalar type ``st``."""
    x = np.asarray(x)
    dt = st.np_dtype
    if x.dtype == dt:
        return x
    if st.is_half and x.dtype != np.float32:  # (through float32, as the C code rounds)
        x = convert(x, FLOAT32)
    if st.kind == "bool":
        return np.asarray(x != 0)
    with np.errstate(all="ignore"):
        return np.asarray(x.astype(dt))


def _truthy(x):
    x = np.asarray(x)
    return x if x.dtype == np.bool_ else np.asarray(x != 0)


def _c_divmod(a, b, dt, span):
    """C ``a / b`` and ``a % b`` on integer arrays of dtype ``dt``, exactly."""
    if np.any(b == 0):
        raise KernelRuntimeError("integer division by zero", span=span)
    if dt.kind == "u":
        return np.asarray(a // b).astype(dt), np.asarray(a % b).astype(dt)
    neg1 = np.asarray(b == -1)
    bs = np.where(neg1, dt.type(1), b).astype(dt)
    r = np.fmod(a, bs).astype(dt)  # C remainder: sign of the dividend
    q = ((a - r) // bs).astype(dt)  # exact: a - r is a multiple of b
    q = np.where(neg1, np.negative(q), q).astype(dt)  # MIN / -1 wraps to MIN
    r = np.where(neg1, dt.type(0), r).astype(dt)
    return q, r


def _c_round(x):
    t = np.trunc(x)
    frac = x - t  # exact
    one = np.asarray(1, dtype=x.dtype)
    return np.where(np.abs(frac) >= 0.5, t + np.copysign(one, x), t).astype(x.dtype)


def _vectorize(fn, dt):
    def apply(*args):
        args = np.broadcast_arrays(*[np.asarray(a, dtype=np.float64) for a in args])
        out = np.empty(args[0].shape, dtype=np.float64)
        for i, vals in enumerate(zip(*[a.ravel() for a in args])):
            out.flat[i] = fn(*[float(v) for v in vals])
        return out.astype(dt)

    return apply


def _safe(fn, on_error):
    def f(*a):
        try:
            return fn(*a)
        except (ValueError, OverflowError):
            return on_error(*a)

    return f


def _lgamma_err(x):
    return math.inf if not math.isnan(x) else math.nan


def _tgamma_err(x):
    if x == 0:
        return math.copysign(math.inf, x)
    if math.isnan(x) or x < 0:  # negative integers, -inf
        return math.nan
    return math.inf  # overflow


def _round_fraction(fr: Fraction, dt) -> float:
    """``fr`` rounded to nearest (ties to even) in the float dtype ``dt``."""
    x = float(fr)  # correctly rounded to double
    if dt == np.float64 or math.isinf(x):
        return x
    r = np.float32(x)
    if np.isinf(r):
        return float(r)
    best = None
    for c in (np.nextafter(r, np.float32(-np.inf)), r, np.nextafter(r, np.float32(np.inf))):
        if np.isinf(c):
            continue
        d = abs(Fraction(float(c)) - fr)
        even = (int(np.asarray(c).view(np.uint32)) & 1) == 0
        key = (d, not even)
        if best is None or key < best[0]:
            best = (key, c)
    assert best is not None  # r itself is finite
    return float(best[1])


def _fma(dt):
    def f(a, b, c):
        if not all(math.isfinite(v) for v in (a, b, c)):
            return a * b + c
        if a == 0 or b == 0:  # the product is an exact (signed) zero: a*b+c is exact
            return a * b + c
        exact = Fraction(a) * Fraction(b) + Fraction(c)
        if exact == 0:  # x + (-x) rounds to +0
            return 0.0
        return _round_fraction(exact, dt)

    return f


def _fdim(x, y):
    r = np.where(x > y, x - y, np.zeros((), x.dtype))
    return np.where(np.isnan(x) | np.isnan(y), x + y, r).astype(x.dtype)


_UNARY = {
    "exp": np.exp, "log": np.log, "tanh": np.tanh, "sqrt": np.sqrt, "fabs": np.abs,
    "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "exp2": np.exp2,
    "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "expm1": np.expm1,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "cbrt": np.cbrt, "round": _c_round, "rint": np.rint,
    "rsqrt": lambda x: np.asarray(1, x.dtype) / np.sqrt(x),
    "exp10": lambda x: np.power(np.asarray(10, x.dtype), x),
}
_BINARY = {
    "pow": np.power, "atan2": np.arctan2, "hypot": np.hypot, "copysign": np.copysign,
    "fmod": np.fmod, "fmax": np.fmax, "fmin": np.fmin, "fdim": _fdim,
}
#: computed in double by Python's math module, then rounded to the dtype
_MATH = {
    "erf": (math.erf, None), "erfc": (math.erfc, None),
    "lgamma": (math.lgamma, _lgamma_err), "tgamma": (math.gamma, _tgamma_err),
    "remainder": (math.remainder, lambda x, y: math.nan),
}
FUNCTIONS = frozenset(_UNARY) | frozenset(_BINARY) | frozenset(_MATH) | \
    {"fma", "min", "max", "abs", "dot4"}


def _dot4(a, b):
    """``dot4``: the four unsigned bytes of ``a`` times the four signed bytes of ``b``,
    summed, in int32 (wrapping)."""
    a = np.asarray(a).astype(np.int64) & 0xFFFFFFFF
    b = np.asarray(b).astype(np.int64) & 0xFFFFFFFF
    total = np.zeros(np.broadcast(a, b).shape, np.int64)
    for s in (0, 8, 16, 24):
        x, y = (a >> s) & 0xFF, (b >> s) & 0xFF
        total = total + x * np.where(y > 127, y - 256, y)
    return ((total + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)


def _apply(func, args, st, span):
    dt = st.np_dtype
    if func == "dot4":
        return _dot4(*args)
    if func in ("min", "max"):
        a, b = (convert(x, st) for x in args)
        return np.asarray(np.where(a < b, a, b) if func == "min" else np.where(a > b, a, b))
    if func == "abs" and not st.is_float:
        return convert(np.abs(convert(args[0], st)), st)
    if func == "abs":
        func = "fabs"
    if func not in FUNCTIONS:
        raise NotImplementedError(f"reference: function {func!r}")
    fdt = dt if st.is_float else np.dtype(np.float64)
    fargs = [np.asarray(a).astype(fdt) for a in args]
    if func in _UNARY:
        res = _UNARY[func](*fargs)
    elif func in _BINARY:
        res = _BINARY[func](*fargs)
    elif func in _MATH:
        fn, err = _MATH[func]
        res = _vectorize(_safe(fn, err) if err else fn, fdt)(*fargs)
    else:  # fma
        res = _vectorize(_fma(fdt), fdt)(*fargs)
    res = np.asarray(res).astype(fdt)
    return res if st.is_float else convert(res, st)


def _arith(op, a, b, st, span):
    if st.kind == "bool":
        from .types import UINT8

        return convert(_arith(op, convert(a, UINT8), convert(b, UINT8), UINT8, span), st)
    dt = st.np_dtype
    a, b = convert(a, st), convert(b, st)
    if op == "+":
        r = np.add(a, b)
    elif op == "-":
        r = np.subtract(a, b)
    elif op == "*":
        r = np.multiply(a, b)
    elif op == "/":
        r = np.true_divide(a, b) if st.is_float else _c_divmod(a, b, dt, span)[0]
    elif op == "%":
        r = np.fmod(a, b) if st.is_float else _c_divmod(a, b, dt, span)[1]
    else:
        raise ValueError(f"unknown arithmetic operator {op!r}")
    return np.asarray(r).astype(dt, copy=False)


_COMPARE = {"==": np.equal, "!=": np.not_equal, "<": np.less, ">": np.greater,
            "<=": np.less_equal, ">=": np.greater_equal}


def _subset(pts, mask):
    return {k: v[mask] for k, v in pts.items()}


def _point_text(pts, i):
    if not pts:
        return ""
    return " at " + ", ".join(f"{k}={int(v[i])}" for k, v in pts.items())


def _plain_index(e, var):
    while isinstance(e, P.Convert) and not e.dtype.is_float and e.dtype.kind == "int" \
            and e.dtype.bits >= 32:
        e = e.value
    return isinstance(e, P.Index) and e.name == var


def needs_sequential(stmt: P.Stmt) -> bool:
    """Whether the statement must run point by point (it reads what it writes)."""
    own = [e for e in P.walk(stmt.rhs) if isinstance(e, P.Read) and e.tensor == stmt.tensor]
    if not own:
        return False
    if stmt.reduction_vars:
        return True
    return not all(len(r.indices) == len(stmt.indices)
                   and all(_plain_index(x, v) for x, v in zip(r.indices, stmt.indices))
                   for r in own)


# --- the interpreter ---------------------------------------------------------------------
class _Interpreter:
    def __init__(self, program, arrays, sizes):
        self.program = program
        self.arrays = arrays
        self.sizes = sizes

    # statements
    def statement(self, stmt: P.Stmt):
        info = self.program.tensor(stmt.tensor)
        arr = self.arrays[stmt.tensor]
        if stmt.init and stmt.op is not None:
            ident = convert(np.asarray(P.identity(stmt.op, info.dtype)), info.dtype)
            lhs_ranges = [r for r in stmt.ranges if r.var not in stmt.reduction_vars]
            for pts, n in domain(lhs_ranges, self.sizes):
                fi = self._target(stmt, arr, pts, n)
                arr.reshape(-1)[fi] = ident
        sequential = needs_sequential(stmt)
        for pts, n in domain(stmt.ranges, self.sizes):
            if sequential:
                for i in range(n):
                    self._update(stmt, info, arr, {k: v[i:i + 1] for k, v in pts.items()}, 1)
            else:
                self._update(stmt, info, arr, pts, n)

    def _target(self, stmt, arr, pts, n):
        """Flat indices into ``arr`` of the left-hand side at the points."""
        if arr.ndim == 0:
            return np.zeros(n, dtype=np.int64)
        idx = [pts[v] for v in stmt.indices]
        for d, (x, extent) in enumerate(zip(idx, arr.shape)):
            bad = (x < 0) | (x >= extent)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise KernelRuntimeError(
                    f"index out of bounds writing {stmt.tensor}: index {int(x[i])} of "
                    f"dimension {d} is outside [0, {extent}){_point_text(pts, i)}",
                    span=stmt.span)
        return np.ravel_multi_index(tuple(idx), arr.shape)

    def _update(self, stmt, info, arr, pts, n):
        val = np.broadcast_to(convert(self.eval(stmt.rhs, pts, n), info.dtype), (n,))
        fi = self._target(stmt, arr, pts, n)
        flat = arr.reshape(-1)
        op = stmt.op
        if op is None:
            # several points writing one element: the last in iteration order wins
            _, first_rev = np.unique(fi[::-1], return_index=True)
            last = n - 1 - first_rev
            flat[fi[last]] = val[last]
        elif op == "+":
            np.add.at(flat, fi, val)
        elif op == "*":
            np.multiply.at(flat, fi, val)
        elif op in ("min", "max"):
            if info.dtype.is_float:  # a NaN is taken, and then nothing replaces it
                nan = np.isnan(val)
                if nan.any():
                    self._update_extremum(op, flat, fi[~nan], val[~nan])
                    flat[fi[nan]] = np.nan
                    return
            self._update_extremum(op, flat, fi, val)
        else:
            raise ValueError(f"unknown reduction operator {op!r}")

    @staticmethod
    def _update_extremum(op, flat, fi, val):
        """``flat[fi] = v < flat[fi] ? v : flat[fi]`` (``>`` for max) for every ``(fi, v)``
        in order; no NaN in ``val``."""
        if not len(fi):
            return
        # per element, the first of the extreme values; then compare with acc
        _, rank = np.unique(val, return_inverse=True)
        rank = rank.reshape(-1)
        key = rank if op == "min" else -rank
        order = np.lexsort((np.arange(len(fi)), key, fi))
        fs = fi[order]
        first = np.ones(len(fs), dtype=bool)
        first[1:] = fs[1:] != fs[:-1]
        pick = order[first]
        tgt, cand = fi[pick], val[pick]
        acc = flat[tgt]
        better = cand < acc if op == "min" else cand > acc
        flat[tgt] = np.where(better, cand, acc)

    # expressions: each returns an array of e.dtype, of shape () or (n,)
    def eval(self, e, pts, n):
        return convert(self._eval(e, pts, n), e.dtype)

    def _eval(self, e, pts, n):
        if isinstance(e, P.Const):
            return convert(np.asarray(e.value), e.dtype)
        if isinstance(e, P.Index):
            return pts[e.name]
        if isinstance(e, P.Size):
            return np.asarray(self.sizes[e.name], dtype=np.int64)
        if isinstance(e, P.Read):
            return self._read(e, pts, n)
        if isinstance(e, P.Convert):
            return convert(self.eval(e.value, pts, n), e.dtype)
        if isinstance(e, P.Neg):
            v = self.eval(e.value, pts, n)
            if e.dtype.kind == "bool":
                return v
            return np.negative(v)
        if isinstance(e, P.Not):
            return ~_truthy(self.eval(e.value, pts, n))
        if isinstance(e, P.Apply):
            args = [self.eval(a, pts, n) for a in e.args]
            return _apply(e.func, args, e.dtype, e.span)
        if isinstance(e, P.Bin):
            return self._bin(e, pts, n)
        if isinstance(e, P.Select):
            return self._select(e, pts, n)
        raise TypeError(f"not an expression: {e!r}")

    def _read(self, e, pts, n):
        arr = self.arrays[e.tensor]
        if not e.indices:
            return np.asarray(arr[()])
        idx = [np.asarray(self.eval(i, pts, n)).astype(np.int64) for i in e.indices]
        for d, (x, extent) in enumerate(zip(idx, arr.shape)):
            bad = (x < 0) | (x >= extent)
            if np.any(bad):
                i = int(np.flatnonzero(np.broadcast_to(bad, (n,)))[0])
                val = int(np.broadcast_to(x, (n,))[i])
                raise KernelRuntimeError(
                    f"index out of bounds reading {e.tensor}: index {val} of dimension "
                    f"{d} is outside [0, {extent}){_point_text(pts, i)}", span=e.span)
        return np.asarray(arr[tuple(np.broadcast_arrays(*idx))])

    def _bin(self, e, pts, n):
        op = e.op
        if op in P.LOGIC_OPS:
            lhs = np.broadcast_to(_truthy(self.eval(e.lhs, pts, n)), (n,))
            need = lhs if op == "&&" else ~lhs  # points where the rhs decides
            out = lhs.copy()
            if need.any():
                sub = _subset(pts, need)
                out[need] = _truthy(self.eval(e.rhs, sub, int(need.sum())))
            return out
        a, b = self.eval(e.lhs, pts, n), self.eval(e.rhs, pts, n)
        if op in _COMPARE:
            return np.asarray(_COMPARE[op](a, b))
        return _arith(op, a, b, e.dtype, e.span)

    def _select(self, e, pts, n):
        cond = np.broadcast_to(_truthy(self.eval(e.cond, pts, n)), (n,))
        if cond.all():
            return self.eval(e.then, pts, n)
        if not cond.any():
            return self.eval(e.other, pts, n)
        out = np.empty(n, dtype=e.dtype.np_dtype)
        other = ~cond
        out[cond] = self.eval(e.then, _subset(pts, cond), int(cond.sum()))
        out[other] = self.eval(e.other, _subset(pts, other), int(other.sum()))
        return out
