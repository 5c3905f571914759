"""A compiled model as numbers: what the exported C needs to run it without Python.

A plan's native entry point (``graph/native.py``) is data: the executor's instructions,
the kernels it calls and what each position of its pointer table ``p`` holds (a size, a
weight, a packed weight, a slice of the arena, a kernel's scratch, a feed, an output).
``snapshot`` reads that off a ``Plan``.  A model with symbolic input dimensions (a batch
``N``, a sequence length ``S``) has one plan per value, all calling the same generic
kernels (``dynamic.py``): what changes between them is numbers — sizes, byte counts,
offsets in the arena, fill counts, output shapes — each a polynomial in the dimensions'
values (``N * S * 256 * 4`` bytes; attention scores ``N * H * S * S``).  ``fit`` reads
those numbers off the plans on a grid (each dimension at three values of its own,
``samples``: 3^d plans) and writes each as the polynomial of degree at most 2 in every
dimension through them (exactly, in rationals), then checks the polynomials against one
more plan (``verify_point``).  A number that is no such polynomial, or a plan whose
structure differs (a group specialised at each value), makes the model unexportable with
symbolic dimensions: the caller fixes them instead.  The dimensions take values apart
from each other's, so that a number in a group's text names one dimension only.

The arena's buffers are sized at run time: a buffer is as large as the largest value it
holds at the dimensions of the run.  The first plan's assignment of values to buffers is
kept: values that share a buffer are never alive at once, whatever their sizes, so the
assignment stays valid at every value of the dimensions.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..diagnostics import UnsupportedError
from ..graph.group import Group
from ..runtime.executor import FILL, RUNS, fill_word

#: the degree of the polynomials in each dimension (3 samples per dimension)
DEGREE = 2
#: what to do about a model that one library cannot serve at every value
FIX_HINT = "give the symbolic dimensions fixed values (export(..., shapes=...) or --shape)"


@dataclass(frozen=True)
class Num:
    """A number that may depend on the symbolic dimensions (fitted)."""

    v: int


@dataclass(frozen=True)
class First:
    """A value taken from the first plan (the arena's assignment of buffers)."""

    v: object


@dataclass(frozen=True)
class Poly:
    """``sum(c * prod(d[j] ** e[j])) / den`` over its terms ``(e, c)``: a number at the
    run's dimensions ``d`` (``den`` divides the sum at every integer point it fits)."""

    terms: tuple
    den: int = 1

    def __call__(self, values) -> int:
        total = sum(c * math.prod(v ** e for v, e in zip(values, exps))
                    for exps, c in self.terms)
        return total // self.den if total % self.den == 0 else None

    @property
    def constant(self) -> int | None:
        """Its value where it depends on no dimension, else None."""
        if not self.terms:
            return 0
        if len(self.terms) == 1 and not any(self.terms[0][0]):
            return self.terms[0][1] // self.den
        return None

    def c(self, dims: str = "d") -> str:
        """The polynomial as a C expression over ``dims[j]`` (int64_t)."""
        parts = []
        for exps, c in self.terms:
            factors = [f"{dims}[{j}]" for j, e in enumerate(exps) for _ in range(e)]
            parts.append(" * ".join(([f"INT64_C({c})"] if c != 1 or not factors else []) +
                                    factors))
        text = " + ".join(parts) or "INT64_C(0)"
        return f"({text}) / {self.den}" if self.den != 1 else text


def snapshot(plan, inputs: list) -> dict:
    """The numbers and structure of ``plan``'s native entry point (see the module
    docstring); ``inputs``: the graph's input names in order."""
    d = plan.driver
    refs, consts = plan.bound.refs, plan.constants
    kinds: list = [None] * len(d.index)
    fixed = dict(d.fixed)
    for key, k in d.index.items():
        if isinstance(key, str):
            if key in plan.placed:
                kinds[k] = ("arena", key)
            elif key in consts:
                kinds[k] = ("const", key)
            elif key in inputs:
                kinds[k] = ("feed", inputs.index(key))
            else:
                kinds[k] = ("fresh", key)
        elif key[1] == "size":
            kinds[k] = ("size", Num(int(fixed[k][0])))
        else:
            packed = plan.prepacked.get(key[0], [])
            j = next((j for j, a in enumerate(packed) if a is fixed[k]), None)
            kinds[k] = ("packed", key[0], j) if j is not None else \
                ("scratch", Num(fixed[k].nbytes))
    code = [Num(int(x)) for x in d._code]
    at = 1
    while at < len(code):  # only fill counts and runs vary; every other word is structure
        op = code[at].v
        width = 6 if op == FILL else 11 if op == RUNS else 3 + code[at + 2].v
        for i in range(at, at + width):
            if not (op == FILL and i == at + 3 or op == RUNS and at + 3 <= i < at + 9):
                code[i] = code[i].v
        at += width
    code[0] = code[0].v
    # value -> (its buffer, its byte offset there, where it ends): the buffers are the
    # first plan's, the offsets (a concatenation's parts) and ends each plan's
    arena = {v: (First(b), Num(at), Num(at + refs[v].size * refs[v].dtype.itemsize))
             for v, (b, at) in plan.slot.items()}
    fills = {v: f for s in plan.steps if isinstance(s, Group)
             for v, f in zip(s.outputs, plan.kernels[s.name].out_fill) if f is not None}
    outputs = []
    for n in plan.outputs:
        r = d.root.get(n, n)
        shape = d.shape.get(n) or (refs[n].shape if n in refs else
                                   consts[r].shape if r in consts else None)
        dtype = refs[n].dtype if n in refs else consts[r].dtype if r in consts else None
        outputs.append((n, r, tuple(Num(int(x)) for x in shape), np.dtype(dtype).str))
    return {"kernels": {f"{s.name} ({' + '.join(s.ops)})": (ck.code, tuple(ck.sites))
                        for s, ck in zip(d.steps, d.kernels)},
            "code": code, "p": kinds,
            "arena": arena,
            "fills": sorted((v, fill_word(refs[v].dtype, f), Num(refs[v].size))
                            for v, f in fills.items() if v in refs),
            "aligned": sorted(d.aligned & set(inputs)), "outputs": outputs}


def fit(snapshots: list, points: list, check: tuple, where: str = "") -> object:
    """The structure of ``snapshots`` (taken at ``points``: ``grid``'s) with every
    ``Num`` a ``Poly``, checked against ``check`` (``(snapshot, point)``); raises
    UnsupportedError where the plans differ."""
    def walk(items, path):
        first = items[0]
        if isinstance(first, Num):
            return _poly([x.v for x in items], points, path)
        if isinstance(first, First):
            return first.v
        if isinstance(first, (list, tuple)) and not isinstance(first, str):
            if any(type(x) is not type(first) or len(x) != len(first) for x in items):
                raise _differs(path)
            return type(first)(walk([x[k] for x in items], f"{path}[{k}]")
                               for k in range(len(first)))
        if isinstance(first, dict):
            if any(x.keys() != first.keys() for x in items):
                raise _differs(path)
            return {k: walk([x[k] for x in items], f"{path}.{k}") for k in first}
        if any(x != first for x in items):
            raise _differs(path)
        return first

    fitted = walk(snapshots, where)
    other, values = check
    _check(fitted, other, values, where)
    return fitted


def samples(ndims: int) -> list:
    """The ``DEGREE + 1`` values of each dimension at which plans are taken: apart from
    every other dimension's (``2, 3, 4`` for the first, ``7, 8, 9`` for the second)."""
    return [tuple(2 + 5 * j + k for k in range(DEGREE + 1)) for j in range(ndims)]


def grid(ndims: int) -> list:
    """The points at which plans are taken (every combination of ``samples``)."""
    return list(itertools.product(*samples(ndims)))


def verify_point(ndims: int) -> tuple:
    """A point off the grid whose plan checks the polynomials."""
    return tuple(2 + 5 * j + DEGREE + 2 + j for j in range(ndims))


def _poly(values: list, points: list, path: str) -> Poly:
    """The polynomial of degree at most ``DEGREE`` in each dimension through ``values``
    at ``points`` (``grid``'s): the sum of each value times the product of Lagrange's
    basis polynomials of its point, in exact rationals, expanded into monomials."""
    ndims = len(points[0]) if points else 0
    axes = samples(ndims)
    # per dimension and sample: the basis polynomial's coefficients, by power
    basis = []
    for xs in axes:
        one = []
        for i, xi in enumerate(xs):
            coef = [Fraction(1)]
            for k, xk in enumerate(xs):
                if k != i:  # times (x - xk) / (xi - xk)
                    coef = [(coef[p - 1] if p else 0) - xk * (coef[p] if p < len(coef)
                                                              else 0)
                            for p in range(len(coef) + 1)]
                    coef = [c / (xi - xk) for c in coef]
            one.append(coef)
        basis.append(one)
    terms: dict = {}
    for value, point in zip(values, points):
        if not value:
            continue
        index = [axes[j].index(x) for j, x in enumerate(point)]
        for exps in itertools.product(*[range(DEGREE + 1)] * ndims):
            c = Fraction(value)
            for j, e in enumerate(exps):
                c *= basis[j][index[j]][e]
            if c:
                terms[exps] = terms.get(exps, 0) + c
    den = math.lcm(*[t.denominator for t in terms.values()]) if terms else 1
    return Poly(tuple((e, int(c * den)) for e, c in sorted(terms.items()) if c), den)


def _check(fitted, other, values, path):
    if isinstance(other, First):
        return
    if isinstance(fitted, Poly):
        if not isinstance(other, Num) or fitted(values) != other.v:
            raise UnsupportedError(
                f"{path}: a number of the compiled model is not a polynomial of degree "
                f"{DEGREE} at most in each of its symbolic dimensions", hint=FIX_HINT)
    elif isinstance(fitted, dict):
        if not isinstance(other, dict) or fitted.keys() != other.keys():
            raise _differs(path)
        for k in fitted:
            _check(fitted[k], other[k], values, f"{path}.{k}")
    elif isinstance(fitted, (list, tuple)) and not isinstance(fitted, str):
        if not isinstance(other, (list, tuple)) or len(fitted) != len(other):
            raise _differs(path)
        for k, (a, b) in enumerate(zip(fitted, other)):
            _check(a, b, values, f"{path}[{k}]")
    elif fitted != other:
        raise _differs(path)



def _differs(path) -> UnsupportedError:
    group = path.split(".kernels.", 1)[1].rsplit("[", 1)[0] if ".kernels." in path else None
    what = f"the group {group} is compiled for each value" if group else \
        f"its plans differ ({path})"
    return UnsupportedError(f"one library cannot serve every value of the model's symbolic "
                            f"dimensions: {what}", hint=FIX_HINT)
