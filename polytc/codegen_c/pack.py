"""Packed operands in C (see ``tiling/pack.py`` for the layout and the copy statement).

A ``pack`` decision gives the buffer (``pt_packN``, one per thread: ``__thread``,
64-byte aligned), its copy statement ``packN[t..., p, k..., l]`` and the reads that go
to it: the contraction's reads of the packed tensor.  Such a read at indices
``(j, k...)`` is ``pt_packN[((j % Tj) / NR * Kt + koff) * NR + j % NR]`` with ``koff``
the reduction offsets ``k % Tk`` in mixed radix.  Inside the micro-kernel's vector loop
(iterator ``lane``, running over the ``NR`` lanes of a register tile that starts at a
multiple of ``NR``) the lane is split off: ``j = base + lane`` and the index is affine
in ``lane``, so the loads are contiguous vectors; so are the reduction loops' iterators.
"""
from __future__ import annotations

import re

from ..lang import program as P
from .cexpr import ExprPrinter


class Packed:
    """One packed operand, as the code generator uses it."""

    def __init__(self, decision, sst, ctype: str):
        f = decision.facts
        self.name, self.tensor, self.buffer = f["_name"], f["tensor"], f["buffer"]
        self.nr, self.tj, self.sst, self.ctype = f["_nr"], f["_tj"], sst, ctype
        self.jvar = f["_j"]
        self.red = list(f["_red"])  # (statement index, tile size) per reduction member
        self.pos = dict(f["_pos"])  # statement index -> position in the tile's prefix
        self.kt = 1
        for _v, t in self.red:
            self.kt *= t
        self.read = next(r for r in P.reads(sst.stmt.rhs) if r.tensor == self.tensor)

    def declaration(self) -> str:
        n = self.tj * self.kt
        return f"static __thread {self.ctype} {self.buffer}[{n}] __attribute__((aligned(64)));"

    def _koff(self, offsets) -> str:
        out = None
        for off, (_v, t) in zip(offsets, self.red):
            out = off if out is None else f"({out}) * {t}L + {off}"
        return out or "0L"

    def element(self, panel: str, koff: str, lane: str) -> str:
        return f"{self.buffer}[(({panel}) * {self.kt}L + {koff}) * {self.nr}L + {lane}]"

    def read_at(self, vars: dict, inner) -> str:
        """The packed element a compute instance reads (``vars``: index -> C).
        ``inner``: iterators of loops inside the cache tile (the micro-kernel's reduction
        and lane loops), each an offset from the tile's start: ``k = base + it`` with
        ``base % Tk + it < Tk``, so ``k % Tk = base % Tk + it`` is affine in them."""
        def split(e):
            base = e
            for it in inner:
                base = re.sub(rf"\b{it}\b", "0L", base)
            return base, (None if base == e else f"(({e}) - ({base}))")

        base, off = split(vars[self.sst.vars[self.jvar]])
        panel = f"(({base}) % {self.tj}L) / {self.nr}L"
        lane = off if off else f"(({base}) % {self.nr}L)"
        offs = []
        for v, t in self.red:
            b, o = split(vars[self.sst.vars[v]])
            offs.append(f"(({b}) % {t}L)" + (f" + {o}" if o else ""))
        return self.element(panel, self._koff(offs), lane)

    def copy(self, args: list, shapes, env, sites) -> str:
        """The copy statement of one instance ``packN[t..., p, k..., l]``."""
        nk = len(self.red)
        t, p, ks, lane = args[:-(nk + 2)], args[-(nk + 2)], args[-(nk + 1):-1], args[-1]
        vars = {}
        for v, name in enumerate(self.sst.vars):
            at = self.pos[v]  # a position in the prefix, or ("value", v): one value
            vars[name] = f"{at[1]}L" if isinstance(at, tuple) else t[at]
        vars[self.sst.vars[self.jvar]] = f"({vars[self.sst.vars[self.jvar]]} + " \
                                         f"{self.nr}L * {p} + {lane})"
        for (v, _), k in zip(self.red, ks):
            vars[self.sst.vars[v]] = f"({vars[self.sst.vars[v]]} + {k})"
        src = ExprPrinter(shapes, env, vars, frozenset(), sites).expr(self.read)
        return f"{self.element(p, self._koff(ks), lane)} = {src}"


class PackPrinter(ExprPrinter):
    """An expression printer whose reads of packed tensors go to their buffers."""

    def __init__(self, packed: dict, *args):
        super().__init__(*args)
        self.packed = packed  # tensor -> Packed
        #: iterators of the loops of a register tile (see ``Packed.read_at``)
        self.inner: tuple = ()

    def read(self, e) -> str:
        if e.tensor in self.packed:
            return self.packed[e.tensor].read_at(self.vars, self.inner)
        return super().read(e)


def packs_of(decisions, scop) -> dict:
    """``pack`` decisions as ``Packed`` by copy-statement name."""
    by_name = {s.name: s for s in scop.stmts}
    out = {}
    for d in decisions:
        if d.kind == "pack":
            sst = by_name[d.subject]
            ctype = scop.program.tensor(d.facts["tensor"]).dtype.c_name
            out[d.facts["_name"]] = Packed(d, sst, ctype)
    return out
