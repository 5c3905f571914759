"""A compiled model as numbers: what the exported C needs to run it without Python.

A plan's native entry point (``graph/native.py``) is data: the executor's instructions,
the kernels it calls and what each position of its pointer table ``p`` holds (a size, a
weight, a packed weight, a slice of the arena, a kernel's scratch, a feed, an output).
``snapshot`` reads that off a ``Plan``.  A model with symbolic input dimensions (a batch
``N``) has one plan per value, all calling the same generic kernels (``dynamic.py``):
what changes between them is numbers — sizes, byte counts, offsets in the arena, fill
counts, output shapes — each a product of the dimensions' values with constants.
``fit`` reads those numbers off the plans at the corners of a box (every dimension at 2
and 3: 2^d plans) and writes each as the multilinear polynomial through them, then checks
the polynomials against one more plan (``VERIFY``); a number that is not multilinear in
the dimensions, or a plan whose structure differs (a group specialised at each value),
makes the model unexportable with symbolic dimensions: the caller fixes them instead.

The arena's buffers are sized at run time: a buffer is as large as the largest value it
holds at the dimensions of the run.  The first plan's assignment of values to buffers is
kept: values that share a buffer are never alive at once, whatever their sizes, so the
assignment stays valid at every value of the dimensions.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ..diagnostics import UnsupportedError
from ..graph.group import Group
from ..runtime.executor import FILL, fill_word

#: the values of each symbolic dimension at which plans are sampled; one more plan, at
#: ``VERIFY + 2 * j`` for dimension ``j``, checks the polynomials
CORNERS, VERIFY = (2, 3), 5


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
    """``sum(c * prod(d[j] for j in S))`` over its terms ``(S, c)``: a number at the
    run's dimensions ``d``."""

    terms: tuple

    def __call__(self, values) -> int:
        return sum(c * int(np.prod([values[j] for j in s], dtype=np.int64))
                   for s, c in self.terms)

    @property
    def constant(self) -> int | None:
        """Its value where it depends on no dimension, else None."""
        if not self.terms:
            return 0
        return self.terms[0][1] if len(self.terms) == 1 and not self.terms[0][0] else None

    def c(self, dims: str = "d") -> str:
        """The polynomial as a C expression over ``dims[j]`` (int64_t)."""
        parts = [" * ".join(([f"INT64_C({c})"] if c != 1 or not s else []) +
                            [f"{dims}[{j}]" for j in s]) for s, c in self.terms]
        return " + ".join(parts) or "INT64_C(0)"


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
    while at < len(code):  # only fill counts vary; every other word is structure
        op = code[at].v
        width = 6 if op == FILL else 3 + code[at + 2].v
        for i in range(at, at + width):
            if not (op == FILL and i == at + 3):
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
    """The structure of ``snapshots`` (taken at ``points``, the corners of the box in the
    order of ``corners``) with every ``Num`` a ``Poly``, checked against ``check``
    (``(snapshot, point)``); raises UnsupportedError where the plans differ."""
    def walk(items, path):
        first = items[0]
        if isinstance(first, Num):
            return _poly([x.v for x in items], len(points[0]), path)
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


def corners(ndims: int) -> list:
    """The points at which plans are sampled, in the order ``fit`` expects."""
    return [tuple(CORNERS[b] for b in bits)
            for bits in itertools.product((0, 1), repeat=ndims)]


def verify_point(ndims: int) -> tuple:
    return tuple(VERIFY + 2 * j for j in range(ndims))


def _poly(values: list, ndims: int, path: str) -> Poly:
    """The multilinear polynomial through ``values`` at ``corners(ndims)``.  Around the
    first corner (the corners are 1 apart), the coefficient of ``prod(d[j] - 2 for j in
    S)`` is the alternating sum of the values at the corners inside S; expanded, the
    terms are plain products of dimensions."""
    origin = CORNERS[0]
    coef: dict = {}
    for bits in itertools.product((0, 1), repeat=ndims):
        s = tuple(j for j, b in enumerate(bits) if b)
        c = 0
        for sub in itertools.product((0, 1), repeat=len(s)):
            at = [0] * ndims
            for j, b in zip(s, sub):
                at[j] = b
            k = int("".join(map(str, at)), 2) if ndims else 0
            c += (-1) ** (len(s) - sum(sub)) * values[k]
        for keep in itertools.product((0, 1), repeat=len(s)):  # prod(d[j] - origin)
            t = tuple(j for j, b in zip(s, keep) if b)
            coef[t] = coef.get(t, 0) + c * (-origin) ** (len(s) - len(t))
    return Poly(tuple((t, c) for t, c in sorted(coef.items()) if c))


def _check(fitted, other, values, path):
    if isinstance(other, First):
        return
    if isinstance(fitted, Poly):
        if not isinstance(other, Num) or fitted(values) != other.v:
            raise UnsupportedError(
                f"{path}: a number of the compiled model is not a multilinear function of "
                "its symbolic dimensions", hint=_FIX)
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


_FIX = "give the symbolic dimensions fixed values (export(..., shapes=...) or --shape)"


def _differs(path) -> UnsupportedError:
    group = path.split(".kernels.", 1)[1].rsplit("[", 1)[0] if ".kernels." in path else None
    what = f"the group {group} is compiled for each value" if group else \
        f"its plans differ ({path})"
    return UnsupportedError(f"one library cannot serve every value of the model's symbolic "
                            f"dimensions: {what}", hint=_FIX)
