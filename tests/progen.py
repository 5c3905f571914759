"""Hypothesis strategies for random TC programs (used by tests/test_fuzz.py).

``programs()`` draws WELL-FORMED programs: every one parses, checks, compiles and runs
without a fault for every size in ``SIZE_RANGE``:

* 1-3 inputs (float, int32 or a mix) of rank 0-3 over the sizes ``M N K`` and small
  constants;
* 1-4 statements, each writing a fresh tensor ``T<n>`` with ``=``, ``+=!``, ``max=!``,
  ``min=!`` or ``*=!``; the right-hand side combines accesses of the inputs and of earlier
  tensors with ``+ - *``, ``/`` (and ``%`` on integers) by positive constants, unary minus,
  ``c ? a : b`` on comparisons, ``min``/``max``, ``fabs``/``exp``, casts, constants, and
  indices and sizes used as values;
* outputs are a subset of the written tensors (the rest are temporaries), some declared
  with a type and shape;
* subscripts are plain indices, so ranges infer, or ``i + c`` with an explicit
  ``where i in 0:D - c`` that keeps the access in bounds;
* every index appears in some subscript, so its range infers (or is given); the indices
  not on the left are reduction indices and the statement then uses a ``!`` reduction.

With ``full=True`` (the differential fuzzer, tests/test_differential.py) programs also use
every assignment operator with and without ``!`` (an accumulating first write starts from
the operator's identity), update tensors written before (``T0(i) += ...`` after
``T0(i) = ...``, possibly reading ``T0`` itself), constant subscripts, and ranges that
start above 0 (``where i in 1:N``: outputs partly written).  ``sizes(full=True)`` adds
zero and odd sizes, for which a program may be out of bounds (then every target must
raise a polytc error), and ``arrays_for`` adds NaN and infinities to float inputs.

Values stay small (a bound on ``|value|`` is tracked through every expression) so that
float32 results compare to the numpy oracle with a tolerance, and comparisons only look at
inputs, indices and constants, never at computed floats (so the few ulps by which compiled
code may differ can never flip a branch).

``mutations(src)`` draws malformed variants of a text, token by token.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

SIZE_NAMES = ("M", "N", "K")
CONST_DIMS = (1, 2, 3, 4)
#: the values the sizes M, N, K take at call time
SIZE_RANGE = (2, 5)
INDEX_NAMES = ("i", "j", "k", "l", "p", "q", "r", "s", "t", "u", "v", "w", "x", "y", "z")
INPUT_NAMES = ("A", "B", "C")
#: |value| of every tensor and every subexpression stays below this
LIMIT = 16.0
INT_INPUT_MAX = 3  # int32 inputs are drawn from [-3, 3]


# --- dimensions --------------------------------------------------------------------------
@dataclass(frozen=True)
class Dim:
    """The extent ``min(atoms) - sub``; an atom is a size name or an int."""

    atoms: frozenset
    sub: int = 0

    def min_value(self) -> int:
        return min(a if isinstance(a, int) else SIZE_RANGE[0] for a in self.atoms) - self.sub

    def max_value(self) -> int:
        return min(a if isinstance(a, int) else SIZE_RANGE[1] for a in self.atoms) - self.sub

    def text(self) -> str:
        atoms = sorted(self.atoms, key=str)
        out = str(atoms[0])
        for a in atoms[1:]:
            out = f"min({out}, {a})"
        return f"{out} - {self.sub}" if self.sub else out

    def single(self):
        """The atom when this is one size or constant (declarable in a signature)."""
        if self.sub == 0 and len(self.atoms) == 1:
            return next(iter(self.atoms))
        return None

    def value(self, sizes: dict) -> int:
        return min(sizes[a] if isinstance(a, str) else a for a in self.atoms) - self.sub


def atom_dim(a) -> Dim:
    return Dim(frozenset([a]))


@dataclass
class Tensor:
    name: str
    dtype: str  # "float" | "int32"
    dims: tuple  # tuple[Dim, ...]
    bound: float  # |every element| <= bound
    is_input: bool = False

    def read(self, subs) -> str:
        if not self.dims:
            return self.name
        return f"{self.name}({', '.join(subs)})"


@dataclass
class Var:
    name: str
    dim: Dim
    offset: int = 0  # > 0: 'where v in 0:dim - offset', subscripts 'v + o', o <= offset
    lo: int = 0  # > 0: 'where v in lo:...'
    given: bool = False  # its range is always written out (an update's left-hand side)

    def where(self) -> str | None:
        if not (self.offset or self.lo or self.given):
            return None
        hi = f"{self.dim.text()} - {self.offset}" if self.offset else self.dim.text()
        return f"{self.name} in {self.lo}:{hi}"

    def out_dim(self) -> Dim:
        return Dim(self.dim.atoms, self.dim.sub + self.offset)


@dataclass
class Expr:
    text: str
    dtype: str
    bound: float
    atomic: bool = False  # needs no parentheses


@dataclass
class Generated:
    """A generated program: its text and what a test needs to call it."""

    src: str
    name: str
    inputs: list  # [Tensor]
    outputs: list  # [str]
    tensors: dict = field(default_factory=dict)  # every tensor by name

    def make_inputs(self, sizes: dict, rng: np.random.Generator) -> list:
        arrays = []
        for t in self.inputs:
            shape = tuple(d.value(sizes) for d in t.dims)
            if t.dtype == "float":
                a = rng.uniform(-1, 1, shape)
            else:
                a = rng.integers(-INT_INPUT_MAX, INT_INPUT_MAX + 1, shape)
            arrays.append(np.asarray(a, dtype=np.float32 if t.dtype == "float" else np.int32))
        return arrays

    def __str__(self):
        return self.src


# --- expressions -------------------------------------------------------------------------
def _join(op, a: Expr, b: Expr, bound) -> Expr:
    dt = "float" if "float" in (a.dtype, b.dtype) else "int32"
    lt = a.text if a.atomic else f"({a.text})"
    rt = b.text if b.atomic else f"({b.text})"
    return Expr(f"{lt} {op} {rt}", dt, bound)


class _Statement:
    """State while drawing one statement."""

    def __init__(self, draw, tensors: list, kind: str, full: bool = False):
        self.draw = draw
        self.tensors = tensors  # readable tensors, inputs first
        self.kind = kind  # "float" | "int" | "mixed"
        self.full = full
        self.vars: dict = {}  # name -> Var
        self.mixed: set = set()  # vars whose uses have different extents
        self.reads: set = set()  # names of the tensors read
        self.sizes = {a for t in tensors if t.is_input for d in t.dims for a in d.atoms
                      if isinstance(a, str)}

    # -- subscripts
    def subscript(self, dim: Dim) -> str:
        draw = self.draw
        same = [v for v in self.vars.values() if v.dim == dim]
        mixable = [v for v in self.vars.values()
                   if v.offset == 0 and v.dim.sub == 0 and dim.sub == 0 and v.dim != dim]
        # a new index when none fits, or (while there are few) sometimes
        fresh = not (same or mixable) or len(self.vars) < 4
        const = self.full and dim.min_value() >= 1
        choice = draw(st.sampled_from(
            (["same"] * 3 if same else []) + (["mix"] if mixable else []) +
            (["new"] * 2 if fresh else []) + (["const"] if const else [])))
        if choice == "const":
            return str(draw(st.integers(0, min(2, dim.min_value() - 1))))
        if choice == "same":
            v = draw(st.sampled_from(same))
            if v.offset:
                o = draw(st.integers(0, v.offset))
                return f"{v.name} + {o}" if o else v.name
            return v.name
        if choice == "mix":
            v = draw(st.sampled_from(mixable))
            v.dim = Dim(v.dim.atoms | dim.atoms)
            self.mixed.add(v.name)
            return v.name
        name = draw(st.sampled_from([n for n in INDEX_NAMES if n not in self.vars]))
        offset = 0
        room = dim.min_value() - 1
        if room >= 1 and draw(st.integers(0, 3)) == 0:
            offset = draw(st.integers(1, min(2, room)))
        lo = 1 if self.full and not offset and dim.min_value() >= 2 and \
            draw(st.integers(0, 5)) == 0 else 0
        self.vars[name] = Var(name, dim, offset, lo)
        if offset:
            o = draw(st.integers(0, offset))
            return f"{name} + {o}" if o else name
        return name

    def access(self, inputs_only=False) -> Expr:
        pool = [t for t in self.tensors if t.is_input or not inputs_only]
        t = self.draw(st.sampled_from(pool))
        self.reads.add(t.name)
        subs = [self.subscript(d) for d in t.dims]
        return Expr(t.read(subs), t.dtype, t.bound, atomic=True)

    def constant(self, dtype) -> Expr:
        if dtype == "int32" or self.kind == "int":
            v = self.draw(st.integers(0, 3))
            return Expr(str(v), "int32", float(v), atomic=True)
        v = self.draw(st.sampled_from([0.5, 1.0, 1.5, 2.0, 0.25, 3.0]))
        return Expr(repr(v), "float", v, atomic=True)

    def leaf(self, inputs_only=False) -> Expr:
        r = self.draw(st.integers(0, 11))
        if r < 7 or not self.vars:
            return self.access(inputs_only)
        if r < 9:
            return self.constant("float" if self.kind != "int" else "int32")
        if r < 11 or not self.sizes:
            v = self.draw(st.sampled_from(sorted(self.vars)))  # an index as a value
            return Expr(v, "int32", float(max(self.vars[v].dim.max_value(), 0)), atomic=True)
        n = self.draw(st.sampled_from(sorted(self.sizes)))  # a size as a value
        return Expr(n, "int32", float(SIZE_RANGE[1]), atomic=True)

    def condition(self) -> str:
        a = self.leaf(inputs_only=True)
        b = self.draw(st.sampled_from(["leaf", "const"]))
        b = self.leaf(inputs_only=True) if b == "leaf" else self.constant(a.dtype)
        op = self.draw(st.sampled_from(["<", ">", "<=", ">=", "==", "!="]))
        return f"{a.text} {op} {b.text}"

    def expr(self, depth: int) -> Expr:
        draw = self.draw
        if depth <= 0:
            return self.leaf()
        ops = ["leaf", "leaf", "+", "-", "*", "?:", "minmax", "neg", "div", "cast"]
        if self.kind != "int":
            ops += ["fabs", "exp"]
        op = draw(st.sampled_from(ops))
        if op == "leaf":
            return self.leaf()
        if op in ("+", "-", "*"):
            a, b = self.expr(depth - 1), self.expr(depth - 1)
            if op == "*" and a.bound * b.bound <= LIMIT:
                return _join("*", a, b, a.bound * b.bound)
            if a.bound + b.bound <= LIMIT and op != "*":
                return _join(op, a, b, a.bound + b.bound)
            f = draw(st.sampled_from(["min", "max"]))
            return self._call(f, a, b)
        if op == "minmax":
            a, b = self.expr(depth - 1), self.expr(depth - 1)
            return self._call(draw(st.sampled_from(["min", "max"])), a, b)
        if op == "?:":
            c = self.condition()
            a, b = self.expr(depth - 1), self.expr(depth - 1)
            dt = "float" if "float" in (a.dtype, b.dtype) else "int32"
            return Expr(f"({c}) ? {a.text} : {b.text}", dt, max(a.bound, b.bound))
        if op == "div":  # by a positive constant; '%' too on integers
            a = self.expr(depth - 1)
            if a.dtype == "float":
                return _join("/", a, Expr(draw(st.sampled_from(["2.0", "4.0"])), "float", 1,
                                          True), a.bound / 2)
            return _join(draw(st.sampled_from(["/", "%"])), a,
                         Expr(draw(st.sampled_from(["2", "3"])), "int32", 1, True), a.bound)
        if op == "cast":  # int to float is exact; float to int could round differently
            a = self.expr(depth - 1)
            if a.dtype == "float":
                return Expr(f"float({a.text})", "float", a.bound, atomic=True)
            dt = draw(st.sampled_from(["float", "int32", "int64", "double"]))
            if dt == "double" and self.kind != "float":
                dt = "int32"
            # int64 meets int32 as int64, double meets float as double: keep the tensors'
            # types by casting back
            back = {"int64": "int32", "double": "float"}.get(dt)
            text = f"{dt}({a.text})"
            if back:
                text = f"{back}({text} + {dt}(1)) - 1"
                return Expr(text, "float" if back == "float" else "int32", a.bound + 1)
            return Expr(text, "float" if dt == "float" else "int32", a.bound, atomic=True)
        if op == "neg":
            a = self.expr(depth - 1)
            return Expr(f"-{a.text if a.atomic else '(' + a.text + ')'}", a.dtype, a.bound)
        if op == "fabs":
            a = self.expr(depth - 1)
            return Expr(f"fabs({a.text})", "float", a.bound, atomic=True)
        # exp of an input element or a small constant: at most e
        a = self.access(inputs_only=True) if draw(st.booleans()) else \
            Expr(draw(st.sampled_from(["0.5", "-1.0", "0.0"])), "float", 1.0, True)
        if a.bound > 1:  # int inputs are up to 3: scale them down
            a = Expr(f"{a.text} * 0.25", "float", a.bound * 0.25)
        return Expr(f"exp({a.text})", "float", math.e ** a.bound, atomic=True)

    def _call(self, f, a, b) -> Expr:
        dt = "float" if "float" in (a.dtype, b.dtype) else "int32"
        return Expr(f"{f}({a.text}, {b.text})", dt, max(a.bound, b.bound), atomic=True)


#: the assignment operators of a statement with reduction indices and without
REDUCE_OPS = ("+=!", "max=!", "min=!", "*=!")
ALL_REDUCE_OPS = REDUCE_OPS + ("+=", "max=", "min=", "*=")
PLAIN_OPS = ("=", "=", "=", "+=!")
ALL_PLAIN_OPS = ("=", "=", "+=!", "+=", "max=", "min=", "*=", "max=!")


def _bound_after(op: str, rhs: float, count: int, old: float | None) -> float:
    """A bound on |T| after ``T op rhs`` reducing ``count`` values (``old``: T's bound
    before, for an update: the elements it does not write keep it)."""
    start = 0.0 if old is None or op.endswith("!") else old
    if op.startswith("+"):
        new = start + rhs * count
    elif op.startswith("*"):
        new = max(start, 1.0) * (rhs ** min(count, 64) if rhs > 1 else 1.0)
    else:
        new = max(start, rhs)
    return new if old is None else max(new, old)


@st.composite
def programs(draw, max_statements: int = 4, full: bool = False):
    kind = draw(st.sampled_from(["float", "float", "int", "mixed"]))
    dim_atoms = list(SIZE_NAMES) + list(CONST_DIMS)
    n_in = draw(st.integers(1, 3))
    inputs = []
    for n in INPUT_NAMES[:n_in]:
        rank = draw(st.sampled_from([0, 1, 1, 2, 2, 3, 3]))
        dims = tuple(atom_dim(draw(st.sampled_from(dim_atoms))) for _ in range(rank))
        dtype = {"float": "float", "int": "int32"}.get(kind) or \
            draw(st.sampled_from(["float", "int32"]))
        bound = 1.0 if dtype == "float" else float(INT_INPUT_MAX)
        inputs.append(Tensor(n, dtype, dims, bound, is_input=True))
    tensors = list(inputs)
    lines, written, read_later = [], [], set()
    n_st = draw(st.integers(1, max_statements))
    for s in range(n_st):
        gen = _Statement(draw, tensors, kind, full)
        # an update of a tensor written before (full programs): its indices come first
        target = draw(st.sampled_from(written)) if full and written and \
            draw(st.integers(0, 3)) == 0 else None
        preset = []
        for d in target.dims if target is not None else ():
            v = draw(st.sampled_from([n for n in INDEX_NAMES if n not in gen.vars]))
            gen.vars[v] = Var(v, d, given=True)
            preset.append(v)
        rhs = gen.expr(draw(st.integers(0, 3)))
        read_later |= gen.reads
        names = list(gen.vars)
        if target is not None and rhs.dtype != target.dtype:
            target = None  # no narrowing assignment: a fresh tensor over the same indices
        if target is not None:
            lhs = preset
            read_later.add(target.name)
        else:
            lhs = draw(st.lists(st.sampled_from(names), unique=True,
                                max_size=min(3, len(names)))) if names else []
        red = [v for v in names if v not in lhs]
        count = 1
        for v in red:
            count *= max(gen.vars[v].out_dim().max_value(), 1)
        ops = (ALL_REDUCE_OPS if full else REDUCE_OPS) if red else \
            (ALL_PLAIN_OPS if full else PLAIN_OPS)  # '+=!' alone means '='
        op = draw(st.sampled_from(ops))
        old = target.bound if target is not None else None
        bound = _bound_after(op if red or op != "=" else "max=", rhs.bound, count, old)
        if bound > LIMIT:
            op = draw(st.sampled_from(["max=!", "min=!"] if target is None else
                                      ["max=", "min="]))
            bound = _bound_after(op, rhs.bound, count, old)
        where = [w for w in (v.where() for v in gen.vars.values()) if w]
        if where and draw(st.booleans()):
            where.reverse()
        if target is not None:
            target.bound = bound
            lhs_text = target.read(lhs)
            line = f"    {lhs_text} {op} {rhs.text}"
            if where:
                line += " where " + ", ".join(where)
            lines.append(line)
            continue
        name = f"T{s}"
        out_dims = tuple(gen.vars[v].out_dim() for v in lhs)
        lhs_text = f"{name}({', '.join(lhs)})" if lhs else name
        line = f"    {lhs_text} {op} {rhs.text}"
        if where:
            line += " where " + ", ".join(where)
        lines.append(line)
        t = Tensor(name, rhs.dtype, out_dims, bound)
        tensors.append(t)
        written.append(t)
    # the last statement's tensor is always an output; any others may be
    outs = [t for t in written[:-1] if draw(st.integers(0, 2)) == 0] + [written[-1]]
    if draw(st.booleans()):
        outs = draw(st.permutations(outs))
    out_decls = []
    for t in outs:
        declarable = all(d.single() is not None and (isinstance(d.single(), int) or
                         d.single() in _input_sizes(inputs)) for d in t.dims)
        if declarable and draw(st.integers(0, 3)) == 0:
            dims = ", ".join(str(d.single()) for d in t.dims)
            # the declared type may widen int32 to float (never narrow), when no later
            # statement reads the tensor (their types were drawn assuming int32)
            dt = t.dtype
            if dt == "int32" and t.name not in read_later:
                dt = draw(st.sampled_from(["int32", "float"]))
            t.dtype = dt
            out_decls.append(f"{dt}({dims}) {t.name}" if t.dims else f"{dt} {t.name}")
        else:
            out_decls.append(t.name)
    params = ", ".join(f"{t.dtype}({', '.join(d.text() for d in t.dims)}) {t.name}"
                       if t.dims else f"{t.dtype} {t.name}" for t in inputs)
    fname = draw(st.sampled_from(["f", "kernel_fn", "prog"]))
    src = (f"def {fname}({params}) -> ({', '.join(out_decls)}) {{\n" + "\n".join(lines) +
           "\n}\n")
    return Generated(src, fname, inputs, [t.name for t in outs],
                     {t.name: t for t in tensors})


def _input_sizes(inputs) -> set:
    return {a for t in inputs for d in t.dims for a in d.atoms if isinstance(a, str)}


def sizes(full: bool = False):
    lo, hi = SIZE_RANGE
    values = st.integers(lo, hi)
    if full:  # zero, one and odd sizes too (mostly the generator's own range)
        values = st.one_of(values, values, st.sampled_from([0, 1, 7]))
    return st.fixed_dictionaries({n: values for n in SIZE_NAMES})


#: values sprinkled into float inputs by ``arrays_for(..., specials=True)``
SPECIALS = (np.nan, np.inf, -np.inf)


def arrays_for(program, sizes: dict, rng: np.random.Generator, specials=False) -> list:
    """Inputs for a checked program (``polytc.Kernel.program``) as the generator assumes
    them: floats in [-1, 1], integers in [-3, 3]; with ``specials`` about one float
    element in six is NaN or an infinity."""
    arrays = []
    for t in program.inputs:
        shape = t.extents(sizes)
        dt = t.dtype.np_dtype
        if dt.kind == "f":
            a = rng.uniform(-1, 1, shape)
            if specials:
                pick = rng.random(shape) < 1 / 6
                a = np.where(pick, rng.choice(SPECIALS, shape), a)
        elif dt.kind == "b":
            a = rng.integers(0, 2, shape)
        else:
            a = rng.integers(-INT_INPUT_MAX, INT_INPUT_MAX + 1, shape)
        arrays.append(np.asarray(a).astype(dt))
    return arrays


# --- malformed text ----------------------------------------------------------------------
_TOKEN = re.compile(r"\s+|min=!|max=!|\+=!|\*=!|min=|max=|\+=|\*=|->|&&|\|\||[<>=!]=|"
                    r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+(?:\.[0-9]*)?|\S")
VOCAB = (
    "def", "where", "in", "exists", "min", "max", "float", "double", "int32", "int8",
    "uint8", "bool", "float16", "half", "exp", "fabs", "tanh", "pow", "fma", "foo",
    "A", "B", "C", "M", "N", "K", "T0", "T1", "O", "i", "j", "k", "l",
    "(", ")", "{", "}", ",", ":", ";", "?", "->", "=", "+=!", "+=", "*=!", "max=!", "min=!",
    "min=", "<=>", "+", "-", "*", "/", "%", "<", ">", "==", "!=", "&&", "||", "!",
    "0", "1", "2", "3", "-1", "0.5", "1e3", "1.", ".5", "0x10", "99999999999999999999999",
    "@", "&", "|", "^", "~", "#", "\n", "$", "'", '"', "\\", "é", "\t", "[", "]",
)
_OPS = ("=", "+=!", "*=!", "max=!", "min=!", "+=", "*=", "max=", "min=")
#: tokens of the same kind, for replacements that keep the text parseable more often
_SIMILAR = (
    ("A", "B", "C", "T0", "T1", "T2", "O", "M", "N", "K", "i", "j", "k", "l", "exp", "fabs",
     "max", "min", "float", "int32", "where", "foo", "pow"),
    ("0", "1", "2", "3", "-1", "0.5", "2.0", "1e3", "1e40", "0x10", "4294967296"),
    ("+", "-", "*", "/", "%", "<", ">", "==", "!=", "&&", "||"),
    _OPS,
)


def tokens(src: str) -> list:
    return _TOKEN.findall(src)


@st.composite
def mutations(draw, src: str):
    """``src`` with 1-3 random token edits (delete, duplicate, swap, replace, change an
    operator, rename)."""
    toks = tokens(src)
    n = draw(st.integers(1, 3))
    for _ in range(n):
        real = [i for i, t in enumerate(toks) if not t.isspace()]
        if not real:
            break
        i = draw(st.sampled_from(real))
        how = draw(st.sampled_from(["similar"] * 4 + ["op", "rename"] * 2 +
                                   ["delete", "duplicate", "swap", "replace", "truncate"]))
        if how == "delete":
            del toks[i]
        elif how == "duplicate":
            toks.insert(i, toks[i])
        elif how == "swap":
            j = draw(st.sampled_from(real))
            toks[i], toks[j] = toks[j], toks[i]
        elif how == "replace":
            toks[i] = draw(st.sampled_from(VOCAB))
        elif how == "similar":
            group = next((g for g in _SIMILAR if toks[i] in g), None)
            if group is None:
                group = _SIMILAR[0] if re.fullmatch(r"[A-Za-z_]\w*", toks[i]) else \
                    _SIMILAR[1] if toks[i][:1].isdigit() else _SIMILAR[2]
            toks[i] = draw(st.sampled_from(group))
        elif how == "op":
            ops = [k for k in real if toks[k] in _OPS]
            if ops:
                toks[draw(st.sampled_from(ops))] = draw(st.sampled_from(_OPS))
            else:
                toks.insert(i, " " + draw(st.sampled_from(_OPS)) + " ")
        elif how == "rename":
            names = sorted({t for t in toks if re.fullmatch(r"[A-Za-z_]\w*", t)})
            a = draw(st.sampled_from(names))
            b = draw(st.sampled_from(VOCAB[:33]))
            toks = [b if t == a else t for t in toks]
        else:
            toks = toks[:i]
    return "".join(toks)
