"""Packed operands in C (see ``tiling/pack.py`` for the layout and the copy statement).

A ``pack`` decision gives the buffer (``pt_packN``, one per thread: ``__thread``,
64-byte aligned), its copy statement ``packN[t..., p, k..., l]`` and the reads that go
to it: the contraction's reads of the packed tensor.  Such a read at indices
``(j, k...)`` is ``pt_packN[((j % Tj) / NR * Kt + koff) * NR + j % NR]`` with ``koff``
the reduction offsets ``k % Tk`` in mixed radix.  Inside the micro-kernel's vector loop
(iterator ``lane``, running over the ``NR`` lanes of a register tile that starts at a
multiple of ``NR``) the lane is split off: ``j = base + lane`` and the index is affine
in ``lane``, so the loads are contiguous vectors; so are the reduction loops' iterators.

A prepacked operand (facts ``_box``) has no copy statement: its buffer is a parameter of
the kernel, after the temporaries, holding every tile (``tile * Tj * Kt`` plus the offset
above, ``tile`` the tile's position in row-major order over ``j`` and the reductions),
and the same shared object exports ``void polytc_prepackN(const T *src, T *dst)``, which
fills it from the operand (zeros where a partial tile has no element).
"""
from __future__ import annotations

import re

from ..lang import program as P
from ..machine import host
from ..tiling.pack import STREAM_ROWS, unit_stride
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
        self.read = P.reads(sst.stmt.rhs)[f["_read"]]
        #: packed once, before the first call (``tiling.pack.prepack_box``)
        self.box = f.get("_box")
        self.tiles = f.get("_tiles", ())
        self.size = f.get("_size", 0)
        #: prepacked into another one's buffer, laid out alike (``packs_of``)
        self.alias = False
        #: copied along the operand's unit-stride reduction index (``codegen_c/tcopy.py``)
        self.transposing = f.get("copy") == "transposing"

    @property
    def function(self) -> str:
        """The name of the function that fills a prepacked buffer."""
        return f"polytc_pre{self.name}"

    @property
    def parameter(self) -> str:
        return f"const {self.ctype} *restrict {self.buffer}"

    def declaration(self) -> str:
        if self.box is not None:  # a parameter
            return ""
        n = self.tj * self.kt
        return f"static __thread {self.ctype} {self.buffer}[{n}] __attribute__((aligned(64)));"

    def _tile(self, positions) -> str:
        """The row-major position of a tile from its position along ``j`` and each
        reduction (C), times the elements of a tile."""
        out = None
        for q, n in zip(positions, self.tiles):
            out = q if out is None else f"({out}) * {n}L + {q}"
        return f"({out}) * {self.tj * self.kt}L + "

    def _koff(self, offsets) -> str:
        out = None
        for off, (_v, t) in zip(offsets, self.red):
            out = off if out is None else f"({out}) * {t}L + {off}"
        return out or "0L"

    def element(self, panel: str, koff: str, lane: str, tile: str = "",
                buffer: str | None = None) -> str:
        return f"{buffer or self.buffer}[{tile}(({panel}) * {self.kt}L + {koff}) * " \
               f"{self.nr}L + {lane}]"

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
        offs, tile = [], [f"(({base}) / {self.tj}L)"]
        for v, t in self.red:
            b, o = split(vars[self.sst.vars[v]])
            offs.append(f"(({b}) % {t}L)" + (f" + {o}" if o else ""))
            tile.append(f"(({b}) / {t}L)")
        return self.element(panel, self._koff(offs), lane,
                            self._tile(tile) if self.box is not None else "")

    def prepack(self, shapes, env) -> str:
        """The C function filling a prepacked buffer from the operand (see the module
        docstring): the tiles in parallel, each as the kernel's copy would write it."""
        sizes = [self.tj] + [t for _v, t in self.red]
        names = [self.sst.vars[self.jvar]] + [self.sst.vars[v] for v, _ in self.red]
        tv = [f"pt_t{d}" for d in range(len(sizes))]
        ks = [f"pt_k{d}" for d in range(len(self.red))]
        dom = self.sst.domain  # indices of one value (``prepack_box``) at that value
        vars = {n: f"{dom.dim_min_val(v).to_python()}L" for v, n in enumerate(self.sst.vars)
                if n not in names}
        vars[names[0]] = f"({tv[0]} * {self.tj}L + {self.nr}L * pt_p + pt_l)"
        for d, (n, k) in enumerate(zip(names[1:], ks)):
            vars[n] = f"({tv[d + 1]} * {sizes[d + 1]}L + {k})"
        # the bounds a loop's values can cross (a partial tile): full tiles need no test
        ends = [t * s - 1 for t, s in zip(self.tiles, sizes)]
        inside = " && ".join(f"{vars[n]} >= {lo}L && {vars[n]} <= {hi}L"
                             for n, (lo, hi), end in zip(names, self.box, ends)
                             if lo > 0 or hi < end)
        src = ExprPrinter(shapes, env, vars, frozenset(), []).expr(self.read)
        dst = self.element("pt_p", self._koff(ks), "pt_l", self._tile(tv), "pt_dst")
        red = [(k, t) for k, (_v, t) in zip(ks, self.red)]
        # the lanes outermost of a panel when the operand's rows do not run along them
        # (a convolution's weights W(co, ci, kh, kw), lanes along co): the reads follow
        # the rows, the writes stay in a panel's lines (ResNet-18's 45 MB: 2x faster)
        lanes = [("pt_l", self.nr)]
        inner = red + lanes if unit_stride(self.read, names[0]) else lanes + red
        loops = list(zip(tv, self.tiles)) + [("pt_p", self.tj // self.nr)] + inner
        lines = [f"void {self.function}(const {self.ctype} *restrict {self.tensor}, "
                 f"{self.ctype} *restrict pt_dst)", "{"]
        if self.tiles[0] > 1:
            lines.append("  #pragma omp parallel for")
        for d, (it, n) in enumerate(loops):
            lines.append("  " * (d + 1) + f"for (long {it} = 0; {it} < {n}L; ++{it})")
        lines.append("  " * (len(loops) + 1) +
                     (f"{dst} = ({inside}) ? {src} : 0;" if inside else f"{dst} = {src};"))
        return "\n".join(lines) + "\n}\n"

    def copy(self, args: list, em) -> str:
        """The copy statement of one instance ``packN[t..., p, k..., l]`` (``em``: the
        ``CEmitter``; the operand may be a contracted temporary of the statement)."""
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
        printer = ExprPrinter(em.shapes, em.env, vars, frozenset(), em.sites)
        em.localised(printer, self.sst, vars)
        return f"{self.element(p, self._koff(ks), lane)} = {printer.expr(self.read)}"


class PackPrinter(ExprPrinter):
    """An expression printer whose reads of packed tensors go to their buffers."""

    def __init__(self, packed: dict, *args):
        super().__init__(*args)
        self.packed = packed  # tensor -> Packed (of one of its reads)
        #: iterators of the loops of a register tile (see ``Packed.read_at``)
        self.inner: tuple = ()

    def read(self, e) -> str:
        p = self.packed.get(e.tensor)
        if p is not None and e is p.read:
            return p.read_at(self.vars, self.inner)
        return super().read(e)


def packs_of(decisions, scop) -> dict:
    """``pack`` decisions as ``Packed`` by copy-statement name.  Prepacked operands laid
    out alike (the same read of the same tensor in tiles of the same sizes: the
    recurrent product of every step of an LSTM) share the first one's buffer; only that
    one is a parameter (``alias`` is False) with a prepack function."""
    by_name = {s.name: s for s in scop.stmts}
    out: dict = {}
    first: dict = {}  # layout -> the first prepacked Packed with it
    for d in decisions:
        if d.kind == "pack":
            sst = by_name[d.subject]
            ctype = scop.program.tensor(d.facts["tensor"]).dtype.c_name
            p = out[d.facts["_name"]] = Packed(d, sst, ctype)
            if p.box is not None:
                key = (p.tensor, str(p.read.indices), p.tj, p.nr,
                       tuple(t for _v, t in p.red), p.box, p.tiles)
                same = first.setdefault(key, p)
                p.alias = same is not p
                p.buffer = same.buffer
    return out


def direct_below(packs: dict, scop) -> tuple | None:
    """``(C condition, copy-statement names, rows)``: in a kernel with symbolic sizes, the
    run-time test that the rows which each element of an operand packed at every call
    serves are too few for the copy to pay (at most ``STREAM_ROWS``, as the tiler
    decides for known sizes: ``tiling.pack.streamed``), and the packs the code then
    skips, reading the operand where it lies; None where no pack's reuse is symbolic.
    Only operands read with unit stride along the lanes (a transposed one still needs
    its copy).  A GEMM of one row packed all of its 512 x 512 matrix for one pass over
    it: 2.5x the specialised matrix-vector product; of 17 rows 1.6x.  ``rows``: the C
    expressions of those rows, one per distinct count."""
    names, rows = [], []
    for name, p in packs.items():
        jname = p.sst.vars[p.jvar]
        if p.box is not None or p.transposing or not unit_stride(p.read, jname):
            continue
        used = P.index_names(*p.read.indices)
        extents = [dim_extent(p.sst.domain, d, scop.context) for d, v in enumerate(p.sst.vars)
                   if v not in used]
        if not extents or not any(e[1] for e in extents):
            continue  # a reuse known at compile time: the tiler chose for it
        n, symbolic = dim_extent(p.sst.domain, p.jvar, scop.context)
        lanes = host().lanes(p.read.dtype.np_dtype.itemsize)
        if not symbolic and int(n.rstrip("L")) < 32 * lanes:
            continue  # narrow rows: packed whatever the reuse (``streamed``)
        names.append(name)
        rows.append(" * ".join(e[0] for e in extents))
    if not names:
        return None
    rows = list(dict.fromkeys(rows))
    return " || ".join(f"({r}) <= {STREAM_ROWS}L" for r in rows), set(names), rows


def dim_extent(dom, d: int, context) -> tuple:
    """``(C, symbolic)``: the extent of set dimension ``d`` of ``dom`` over its
    parameters (under the kernel's assumptions ``context``)."""
    import islpy as isl

    from .cexpr import isl_expr

    n = dom.dim_max(d).sub(dom.dim_min(d)).add_constant_val(isl.Val.one(dom.get_ctx()))
    n = n.gist_params(context).coalesce()
    # (a constant per piece is not one constant: ``K == 1 ? 1 : 2`` of a range that
    # ends at min(2, K), whose text an int() had taken: the differential fuzzer's find)
    constant = n.is_cst() and n.n_piece() == 1
    return isl_expr(isl.AstBuild.from_context(context).expr_from_pw_aff(n)), not constant
