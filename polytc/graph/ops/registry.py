"""The op registry and what every lowering shares: ``op`` (the decorator that registers a
lowering), ``Ref``, ``Lowered``, ``lower``, ``supported`` and the index and literal helpers
(see the package docstring).  The op modules import this, never the package."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...diagnostics import ModelError, NeedsValue, UnsupportedError
from ...lang.types import from_numpy

REGISTRY: dict = {}

#: kinds of ops, for fusion: ``elementwise`` (output index = input index, with
#: broadcasting), ``reduction``, ``contraction`` (MatMul, Conv: register-tiled), ``movement``
#: (a gather of elements: Transpose, Slice, Concat, Pad), ``opaque`` (compiled alone)
KINDS = ("elementwise", "reduction", "contraction", "movement", "opaque")


def op(*names):
    """Register a lowering for the op types ``names``."""

    def deco(fn):
        for n in names:
            REGISTRY[n] = fn
        return fn

    return deco


def tc_type(dtype) -> str:
    t = from_numpy(np.dtype(dtype))
    if t is None:
        raise UnsupportedError(f"polytc has no {np.dtype(dtype).name} type")
    return t.name


def equal(a: str, b: str, dtype) -> str:
    """TC for ``a == b`` where NaN equals NaN: finds the position of a ``max=``/``min=``
    result, which is NaN when the reduced values hold one (ArgMax, MaxPool's Indices)."""
    if np.dtype(dtype).kind != "f":
        return f"{a} == {b}"
    return f"({a} == {b} || ({a} != {a} && {b} != {b}))"


def literal(value, dtype) -> str:
    """A TC expression for one constant of ``dtype``, typed exactly (``float(0.5)``)."""
    dtype = np.dtype(dtype)
    v = np.asarray(value, dtype).item()
    if dtype.kind == "b":
        return "(1 == 1)" if v else "(1 == 0)"
    if dtype.kind == "f":
        if math.isnan(v):
            text = "0.0 / 0.0"
        elif math.isinf(v):
            text = "1.0 / 0.0" if v > 0 else "-1.0 / 0.0"
        else:
            text = repr(float(v))
    else:
        text = str(int(v))
    return f"{tc_type(dtype)}({text})"


class Ref:
    """A tensor as a lowering sees it: its TC name, concrete shape, dtype and (for a
    constant) its value.  ``X("i", "j")`` is the TC text of a read."""

    __slots__ = ("name", "shape", "dtype", "value")

    def __init__(self, name, shape, dtype, value=None):
        self.name, self.shape, self.dtype, self.value = name, tuple(shape), np.dtype(dtype), value

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(math.prod(self.shape))

    @property
    def scalar(self):
        """The value of a one-element constant, else None (it is then inlined)."""
        if self.value is not None and self.value.size == 1:
            return self.value.reshape(()).item()
        return None

    def __call__(self, *idx) -> str:
        if self.scalar is not None:
            return literal(self.scalar, self.dtype)
        assert len(idx) == self.rank, (self.name, self.shape, idx)
        return f"{self.name}({', '.join(map(str, idx))})" if idx else self.name

    def bcast(self, idx, shape=None) -> str:
        """A read under numpy broadcasting for output indices ``idx`` (right-aligned;
        dimensions of extent 1 read index 0, or the output's own index where the output
        ``shape`` has extent 1 there too: the read is then the element the statement
        writes, which lets a contraction fold the statement as its epilogue)."""
        keep = [False] * len(idx) if shape is None else [d == 1 for d in shape]
        if self.rank:
            idx, keep = list(idx)[len(idx) - self.rank:], keep[len(keep) - self.rank:]
        else:
            idx = []
        return self(*[i if d != 1 or k else 0 for i, d, k in zip(idx, self.shape, keep)])

    def __repr__(self):
        return f"Ref({self.name}, {self.shape}, {self.dtype.name})"


def broadcast_shapes(node, *shapes) -> tuple:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ModelError(f"node {node.label}: input shapes "
                         f"{', '.join(str(list(s)) for s in shapes)} do not broadcast") from None


def idx(n: int, prefix: str = "i") -> list:
    """Index names ``i0 .. i{n-1}``."""
    return [f"{prefix}{k}" for k in range(n)]


@dataclass(frozen=True)
class PadCopy:
    """A sliding window's copy ``temp`` of its input ``source`` (TC names) padded with
    ``fill``: spatial dimension ``d`` (dimension ``2 + d``) of the copy has extent
    ``need[d]`` and holds the source from ``begin[d]`` on; ``stmts`` are the statements
    that make it (``graph/padplace.py`` may have the source's producer write it)."""
    temp: str
    source: str
    begin: tuple
    need: tuple
    fill: float
    stmts: tuple


class Lowered:
    """What one node lowers to."""

    def __init__(self):
        self.kind = "elementwise"
        self.stmts: list = []  # TC statement texts
        self.outputs: dict = {}  # output position -> Ref
        self.temps: list = []  # Refs of temporaries
        self.views: dict = {}  # output position -> (input Ref, shape)
        self.consts: dict = {}  # output position -> np.ndarray
        self.pads: list = []  # PadCopy of each padded copy of an input


class Ctx:
    """The lowering context of one node."""

    def __init__(self, node, inputs, names):
        self.node = node
        self.inputs = inputs  # list of Ref or None (absent optional input)
        self._names = names  # value name -> TC name; also makes fresh temporaries
        self.result = Lowered()

    # --- reading the node ----------------------------------------------------------
    def attr(self, name, default=None):
        return self.node.attr(name, default)

    def input(self, k: int, required: bool = True) -> Ref | None:
        r = self.inputs[k] if k < len(self.inputs) else None
        if r is None and required:
            self.fail(f"input {k} is missing")
        return r

    def const_input(self, k: int, required: bool = True):
        """The value of input ``k``, which must be known at compile time."""
        r = self.input(k, required)
        if r is None:
            return None
        if r.value is None:
            raise NeedsValue(
                f"node {self.node.label}: input {k} ('{self.node.inputs[k]}') must be known "
                "at compile time (a constant, or computed from shapes only)",
                (self.node.inputs[k],))
        return r.value

    @property
    def n_outputs(self) -> int:
        return sum(1 for o in self.node.outputs if o)

    def wants(self, k: int) -> bool:
        """Whether optional output ``k`` is used."""
        return k < len(self.node.outputs) and bool(self.node.outputs[k])

    def fail(self, message, unsupported=False):
        cls = UnsupportedError if unsupported else ModelError
        raise cls(f"node {self.node.label}: {message}")

    # --- declaring the result --------------------------------------------------------
    def out(self, k: int, shape, dtype) -> Ref:
        ref = Ref(self._names(self.node.outputs[k]) if self.wants(k) else self._names(None),
                  tuple(int(d) for d in shape), dtype)
        if any(d < 0 for d in ref.shape):
            self.fail(f"output {k} would have the negative shape {list(ref.shape)}")
        tc_type(dtype)
        if self.wants(k):
            self.result.outputs[k] = ref
        else:
            self.result.temps.append(ref)
        return ref

    def temp(self, shape, dtype) -> Ref:
        ref = Ref(self._names(None), tuple(int(d) for d in shape), dtype)
        self.result.temps.append(ref)
        return ref

    def view(self, k: int, src: Ref, shape, dtype=None):
        """Output ``k`` is ``src``'s memory with ``shape`` (and, given ``dtype``, its
        bytes read as that type: four int8 values as one int32 word)."""
        shape = tuple(int(d) for d in shape)
        dtype = np.dtype(dtype or src.dtype)
        if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize != \
                src.size * src.dtype.itemsize:
            self.fail(f"cannot view {list(src.shape)} as {list(shape)}")
        self.result.views[k] = (src, shape, dtype)

    def const(self, k: int, value):
        self.result.consts[k] = np.asarray(value)

    def emit(self, target: Ref, indices, rhs: str, op: str = "=", ranges: dict | None = None):
        """``target(indices) op rhs`` with every left-hand index ranging over the target's
        shape and the reduction indices over ``ranges`` ({name: (lo, hi)}).  A statement
        with an empty domain is dropped; a ``!`` reduction over an empty range becomes
        its initialisation."""
        indices = list(indices)
        assert len(indices) == target.rank, (target, indices)
        if target.size == 0:
            return
        ranges = dict(ranges or {})
        # a left-hand index in ``ranges`` writes that part of the target only
        part = {i: ranges.pop(i) for i in indices if isinstance(i, str) and i in ranges}
        if any(hi <= lo for lo, hi in part.values()):
            return
        lhs = target(*indices) if target.rank else target.name
        if any(hi <= lo for lo, hi in ranges.values() if isinstance(hi, int)):
            if not op.endswith("!"):
                return
            init = {"+=!": 0, "*=!": 1, "max=!": -math.inf, "min=!": math.inf}[op]
            if target.dtype.kind != "f" and abs(init) == math.inf:
                info = np.iinfo(target.dtype) if target.dtype.kind in "iu" else None
                init = (info.min if init < 0 else info.max) if info else bool(init > 0)
            rhs, op, ranges = literal(init, target.dtype), "=", {}
        where = [f"{i} in {part.get(i, (0, d))[0]}:{part.get(i, (0, d))[1]}"
                 for i, d in zip(indices, target.shape) if isinstance(i, str) and i.isidentifier()]
        where += [f"{i} in {lo}:{hi}" for i, (lo, hi) in ranges.items()]
        text = f"{lhs} {op} {rhs}"
        if where:
            text += " where " + ", ".join(where)
        self.result.stmts.append(text)

    def elementwise(self, k: int, fn, dtype=None, shape=None) -> Ref:
        """Output ``k`` as a broadcast elementwise function of the inputs: ``fn`` gets
        the read text of each input (broadcast to the output's indices)."""
        ins = [r for r in self.inputs]
        shape = shape if shape is not None else broadcast_shapes(
            self.node, *[r.shape for r in ins if r is not None])
        y = self.out(k, shape, dtype or ins[0].dtype)
        i = idx(len(shape))
        self.emit(y, i, fn(*[r.bcast(i, shape) if r is not None else None for r in ins]))
        return y


def lower(node, inputs, names) -> Lowered:
    """Lower one node (its inputs already have concrete shapes)."""
    fn = REGISTRY.get(node.op) if node.domain in ("", "ai.onnx") else None
    if fn is None:
        raise UnsupportedError(f"node {node.label}: op {node.op} is not supported")
    ctx = Ctx(node, inputs, names)
    fn(ctx)
    return ctx.result


def supported(op_type: str, domain: str = "") -> bool:
    return domain in ("", "ai.onnx") and op_type in REGISTRY


# the modules that register lowerings
