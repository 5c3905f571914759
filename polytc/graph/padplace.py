"""Padded inputs written in place: ``pads_in_place(bound, steps) -> (bound, steps)``.

A convolution whose windows leave its input reads a copy of it padded with zeros
(``ops/nn._padded``), made at the start of its group: a pass over the whole input that
onnxruntime does not make (ResNet-18 at batch 1: 11-20 us of each 480 us 3x3 convolution
of the 56 x 56 stage).  Here the copy goes: the input's producer writes its result into
the inside of a buffer with the border, and the convolution reads that buffer as it read
the copy.

For a value ``x`` that a group ``P`` makes, every reader of which is another group (not
a view or an in-place concatenation) and which is not returned to the user, the padded
copies of it made for convolutions (``PadCopy``: not a pooling's, which reads its copy
from L1 at a stride) agree on the fill.  The buffer holds ``x`` from ``B[d]``, the
largest begin pad of any copy, along each spatial dimension (one or two), and extends to
the largest end any copy needs.  Then:
* in ``P``, the statements that wrote ``x`` write a new temporary ``z`` instead, and one
  more statement, right after the last of them, copies ``z`` into the inside of ``x``:
  ``x(.., i2, i3) = z(.., i2 - B0, i3 - B1) where i2 in B0:B0+H, ..``.  Inlining
  (``lang/inline.py``) substitutes ``z``'s definition into that read (a shifted box is
  still read once per element), so a convolution's bias, residual and activation stay
  one epilogue of its register tiles (``tiling/fold.py``), which stores into the inside.
  (A pooling's result would be copied in a pass of its own: such a ``P`` is left alone.)
* in each reader, the copy's statements go, its reads of the copy read ``x`` shifted by
  ``B[d] - begin[d]``, and its other reads of ``x`` (a residual) by ``B[d]``.

No kernel writes the border.  Buffers are shared by values as before
(``Plan._plan_memory``), so the executor writes the border right after the producer's
kernel (``Border.runs``, the ``RUNS`` instruction: a run of an element or two per row,
whose cache lines the kernel has just written), unless the buffer's last value left the
same border.  (Written before the kernel, the lines came from the other core's cache:
30-40 us a value; kept in buffers of their own, ResNet-18's arena grew from 4.8 to 9 MB
and the cache misses cost more than the copies.)  The pass takes a value only where the
border is at most ``MAX_BORDER`` of the buffer and the buffer fits in L2: a larger
one's copy, contracted to an image at a time, is the convolution's input in L2
(ResNet-18 at batch 64 lost 1.7% without the bound).  ResNet-18 at batch 1: its
56 x 56 and 28 x 28 stages, 9 values, 7 borders written per run (15 us in all); the
groups 80-380 us faster in all, the run 0-3%, depending on how busy the machine is.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from ..machine import host
from .group import Group
from .ops import Ref

#: the name that switches this pass off (``polytc.onnx.compile(disable=...)``)
PADS_IN_PLACE = "pads_in_place"
#: spatial dimensions of an image start here (N, C, H, W[, lanes])
FIRST = 2
#: the largest part of its buffer a border may be (ResNet-18's 14 x 14 and 7 x 7 stages,
#: borders of 23% and 40%, gained nothing measurable)
MAX_BORDER = 0.15
#: the kind of node whose padded copies go
CONTRACTION = "contraction"


@dataclass(frozen=True)
class Border:
    """What a padded buffer holds around its value: ``value`` along each spatial
    dimension ``d`` outside ``begin[d]:begin[d] + inside[d]``."""
    value: float
    begin: tuple
    inside: tuple

    def fill(self, a) -> None:
        """Write the border of the array ``a`` (the Python executor's)."""
        for d, (lo, n) in enumerate(zip(self.begin, self.inside)):
            for part in (slice(0, lo), slice(lo + n, None)):
                a[(slice(None),) * (FIRST + d) + (part,)] = self.value

    def runs(self, shape) -> list:
        """The border of a buffer of ``shape`` as runs of elements, ``(start, count,
        inner, istride, outer, ostride)`` (the executor's ``RUNS``): one run before the
        first plane's inside, one from each inside row to the next, one from each plane's
        last inside row to the next plane's first, one after the last."""
        nd = len(self.begin)
        outer = math.prod(shape[:FIRST])
        lanes = math.prod(shape[FIRST + nd:])
        hp, wp = (1, *shape[FIRST:FIRST + 1]) if nd == 1 else shape[FIRST:FIRST + 2]
        (b0, b1), (h, w) = ((0, *self.begin), (1, *self.inside)) if nd == 1 else \
            (self.begin, self.inside)
        row, plane = wp * lanes, hp * wp * lanes
        first = (b0 * wp + b1) * lanes  # a plane's first inside element
        last = ((b0 + h - 1) * wp + b1 + w) * lanes  # just after its last one
        out = [(0, first, 1, 0, 1, 0),
               (first + w * lanes, (wp - w) * lanes, h - 1, row, outer, plane),
               (last, plane - last + first, 1, 0, outer - 1, plane),
               ((outer - 1) * plane + last, plane - last, 1, 0, 1, 0)]
        return [r for r in out if r[1] > 0 and r[2] > 0 and r[4] > 0]


def pads_in_place(bound, steps) -> tuple:
    """``(bound, steps)`` with the padded copies of group outputs made in place; the
    new bound's ``bordered`` maps each such value to its ``Border``."""
    values = {r.name: v for v, r in bound.refs.items()}
    made = {v: s for s in steps if isinstance(s, Group) for v in s.outputs}
    readers: dict = {}
    for s in steps:
        for v in _reads(s):
            readers.setdefault(v, []).append(s)
    copies: dict = {}  # value -> [(reading group, PadCopy)]
    for s in steps:
        if isinstance(s, Group):
            for n in s.nodes:
                low = bound.lowered.get(n.name)
                for pc in low.pads if low is not None else ():
                    v = values.get(pc.source)
                    if v is not None:
                        copies.setdefault(v, []).append((s, pc if low.kind == CONTRACTION
                                                         else None))
    refs, bordered = dict(bound.refs), dict(bound.bordered)
    new = {id(s): s for s in steps}
    texts = "\n".join(t for s in steps if isinstance(s, Group) for t in s.stmts)
    fresh = 1 + max((int(k) for k in re.findall(r"\bt(\d+)\b", texts)), default=0)
    for v, found in copies.items():
        producer = made.get(v)
        if producer is None or v in bound.graph.outputs or refs[v].dtype.kind != "f" or \
                any(not isinstance(s, Group) or s is producer for s in readers.get(v, ())) or \
                any(s is producer or pc is None for s, pc in found) or \
                len({float(pc.fill) for _, pc in found}) != 1 or \
                len({len(pc.begin) for _, pc in found}) != 1:
            continue
        r = refs[v]
        nd = len(found[0][1].begin)
        if r.rank < FIRST + nd or nd > 2:  # (``Border.runs``: lines and planes)
            continue
        inside = r.shape[FIRST:FIRST + nd]
        begin = [max(pc.begin[d] for _, pc in found) for d in range(nd)]
        extent = [max([begin[d] + inside[d]] + [begin[d] - pc.begin[d] + pc.need[d]
                                                for _, pc in found]) for d in range(nd)]
        padded = (*r.shape[:FIRST], *extent, *r.shape[FIRST + nd:])
        if math.prod(inside) < (1 - MAX_BORDER) * math.prod(extent) or \
                math.prod(padded) * r.dtype.itemsize > host().l2:
            continue
        made_by = _write_inside(new[id(producer)], r, begin, f"t{fresh}")
        if made_by is None:
            continue
        fresh += 1
        new[id(producer)] = made_by
        for s in {id(s): s for s in readers[v]}.values():
            new[id(s)] = _read_inside(new[id(s)], r.name, begin,
                                      [pc for g, pc in found if g is s])
        refs[v] = Ref(r.name, padded, r.dtype)
        bordered[v] = Border(found[0][1].fill, tuple(begin), tuple(inside))
    if not bordered:
        return bound, steps
    return replace(bound, refs=refs, bordered=bordered), [new[id(s)] for s in steps]


def _reads(step) -> list:
    if isinstance(step, Group):
        return step.inputs
    return list(getattr(step, "sources", None) or [step.source])


def _write_inside(group: Group, r: Ref, begin, z: str) -> Group | None:
    """``group`` writing ``r`` into the inside (from ``begin``) of its padded buffer
    through the new temporary ``z`` (see the module's docstring), or None where it
    cannot."""
    name = r.name
    writes = [k for k, t in enumerate(group.stmts) if _target(t) == name]
    if not writes:
        return None
    if CONTRACTION not in group.kinds and _op(group.stmts[writes[-1]]) != "=":
        return None  # a pooling's result: its copy would be a pass of its own
    word = re.compile(rf"\b{name}\b")
    stmts = [word.sub(z, t) for t in group.stmts]
    i = [f"i{k}" for k in range(r.rank)]
    off = [0] * FIRST + list(begin) + [0] * (r.rank - FIRST - len(begin))
    src = ", ".join(f"{v} - {o}" if o else v for v, o in zip(i, off))
    where = ", ".join(f"{v} in {o}:{o + n}" for v, o, n in zip(i, off, r.shape))
    copy = f"{name}({', '.join(i)}) = {z}({src}) where {where}"
    stmts.insert(writes[-1] + 1, copy)
    return replace(group, stmts=stmts, temps=group.temps + [Ref(z, r.shape, r.dtype)])


def _target(stmt: str) -> str:
    m = re.match(r"\s*(\w+)", stmt)
    return m.group(1) if m else ""


def _op(stmt: str) -> str:
    """The assignment operator of a statement (``=``, ``+=!``, ``max=!``, ...)."""
    _, end = _arguments(stmt, stmt.index("(") + 1)
    return stmt[end:].split()[0]


def _read_inside(group: Group, name: str, begin, pads) -> Group:
    """``group`` reading ``name`` from the inside (from ``begin``) of its padded buffer:
    the padded copies ``pads`` of it dropped, their reads made reads of ``name``."""
    drop = {t for pc in pads for t in pc.stmts}
    temps = {pc.temp: pc for pc in pads}
    stmts = []
    for t in group.stmts:
        if t in drop:
            continue
        rhs_at = t.index("=") + 1 if "=" in t else 0
        head, rhs = t[:rhs_at], _shift_reads(t[rhs_at:], name, name, begin)
        for temp, pc in temps.items():  # (after the reads of ``name`` of its own)
            rhs = _shift_reads(rhs, temp, name, [b - o for b, o in zip(begin, pc.begin)])
        stmts.append(head + rhs)
    return replace(group, stmts=stmts, temps=[r for r in group.temps if r.name not in temps])


def _shift_reads(text: str, tensor: str, to: str, shift) -> str:
    """``text`` with each read ``tensor(a0, .., ak)`` made ``to(..)`` with ``shift[d]``
    added to subscript ``FIRST + d``."""
    out, at = [], 0
    pattern = re.compile(rf"\b{tensor}\(")
    while True:
        m = pattern.search(text, at)
        if m is None:
            out.append(text[at:])
            return "".join(out)
        args, end = _arguments(text, m.end())
        for d, c in enumerate(shift):
            if c:
                args[FIRST + d] = f"{args[FIRST + d]} + {c}"
        out.append(text[at:m.start()] + f"{to}({', '.join(args)})")
        at = end


def _arguments(text: str, start: int) -> tuple:
    """The comma-separated arguments of the call whose ``(`` ends at ``start``, stripped,
    and the position after its ``)``."""
    args, depth, k0 = [], 0, start
    for k in range(start, len(text)):
        ch = text[k]
        if ch == "(":
            depth += 1
        elif ch == ")":
            if depth == 0:
                args.append(text[k0:k].strip())
                return args, k + 1
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(text[k0:k].strip())
            k0 = k + 1
    raise ValueError(f"unbalanced read in {text!r}")
