"""The register tile of a contraction as an explicit-vector micro-kernel.

Under a ``promote`` mark the tiler leaves ``MR`` unrolled rows, each a ``simd`` loop of
``NR`` lanes inside the reduction loops (``tiling/strategy.py``).  When ``NR`` is a
multiple of the machine's vector length and the update is ``acc += expr`` over ``+ - *``
of reads and constants, the tile is written with GCC vector types instead of loops:
``MR x NR / V`` accumulator variables (which gcc keeps in registers, where accumulator
arrays end up on the stack as soon as anything else in the loop is less simple), and
per reduction step one vector load per lane-dependent read and one broadcast per
lane-independent read, combined by FMAs.  A read depends on the lanes when its index
varies with them, and it must then be unit-stride: its last subscript is the lane
dimension plus terms without it, and no other subscript mentions it (a packed operand
always is).  The accumulators are rows of the result when the lanes run along its last
index, else (a narrow image, lanes over channels) they are loaded and stored element by
element with the result's stride, once per tile, through one buffer in one loop over the
lanes for all the tile's rows (``strided_tile``).  Factors that neither the reduction
indices nor the lanes move multiply the tile's sum at its end (the accumulators then
start at zero).  A folded init and epilogue (``fold.py``) are applied per tile.  A row
whose width is not a multiple of the vector length (55 image columns) ends in a partial
vector: half a vector when the tail fits, else a masked one (``masked_moves``: loads and
stores that leave the other lanes' memory alone), instead of leaving the micro-kernel
for loops over arrays (SqueezeNet's 3x3 convolutions on 55 x 55: 0.52 -> 0.35 ms).  The
vector length comes from the CPU (``polytc.machine``); with no vector unit, or when the
pattern does not hold, ``None`` and the loops are generated as they are.
"""
from __future__ import annotations

import re
from typing import NamedTuple

import cgen as c

from ..lang import program as P
from ..machine import host
from ..tiling.pack import unit_stride
from .cexpr import target_code
from .chains import const_bounds, interleave, pinned
from .pack import PackPrinter
from .prefetch import ahead_along, during, next_tile, streamed

_OPS = ("+", "-", "*")


def vector_type(ctype: str, lanes: int) -> tuple[str, str]:
    """The names of the aligned and the unaligned vector type of ``lanes`` x ``ctype``."""
    base = f"pt_v{lanes}{ctype[0]}"
    return base, base + "u"


def masked_names(vtype: str) -> tuple[str, str]:
    """The masked load and store helpers of the vector type ``vtype``."""
    short = vtype.removeprefix("pt_")
    return f"pt_mload_{short}", f"pt_mstore_{short}"


def masked_moves(ctype: str, lanes: int, itemsize: int) -> str:
    """``pt_mload_V(p, n)`` and ``pt_mstore_V(p, v, n)``: the first ``n`` lanes of a
    vector ``V`` from and to memory, the others' memory untouched (a register tile's
    partial last vector: 7 of 55 image columns).  AVX-512's masked moves and AVX's
    ``vmaskmov`` do not fault on the lanes they leave out; a loop elsewhere."""
    v, _ = vector_type(ctype, lanes)
    n = lanes * itemsize
    sfx = "ps" if itemsize == 4 else "pd"
    if n == 64 and itemsize == 4 and ctype == "int32_t":  # (quantised products' sums)
        guard = "__AVX512F__"
        load = "return __builtin_ia32_loaddqusi512_mask(p, ({v}){{}}, " \
               "(unsigned short)((1u << n) - 1));".format(v=v)
        store = "__builtin_ia32_storedqusi512_mask(p, v, (unsigned short)((1u << n) - 1));"
    elif n == 32 and itemsize == 4 and ctype == "int32_t":
        guard = "__AVX2__"
        mask = (f"typedef int pt_m __attribute__((vector_size(32))); pt_m pt_i = {{"
                f"{', '.join(map(str, range(lanes)))}}}; pt_m m = pt_i < n;")
        load = f"{mask} return __builtin_ia32_maskloadd256((const {v} *)p, m);"
        store = f"{mask} __builtin_ia32_maskstored256(({v} *)p, m, v);"
    elif ctype not in ("float", "double"):
        guard = load = store = None
    elif n == 64 and itemsize in (4, 8):
        mask = f"({'unsigned short' if lanes == 16 else 'unsigned char'})((1u << n) - 1)"
        guard = "__AVX512F__"
        load = f"return __builtin_ia32_loadu{sfx}512_mask(p, ({v}){{}}, {mask});"
        store = f"__builtin_ia32_storeu{sfx}512_mask(p, v, {mask});"
    elif n == 32 and itemsize in (4, 8):
        it = "int" if itemsize == 4 else "long long"
        guard = "__AVX__"
        mask = (f"typedef {it} pt_m __attribute__((vector_size(32))); pt_m pt_i = {{"
                f"{', '.join(map(str, range(lanes)))}}}; pt_m m = pt_i < n;")
        load = f"{mask} return __builtin_ia32_maskload{sfx}256((const {v} *)p, m);"
        store = f"{mask} __builtin_ia32_maskstore{sfx}256(({v} *)p, m, v);"
    else:
        guard = load = store = None
    loop_load = f"{v} v = {{}}; for (int l = 0; l < n; l++) v[l] = p[l]; return v;"
    loop_store = "for (int l = 0; l < n; l++) p[l] = v[l];"

    def body(fast, slow):
        if fast is None:
            return f"{{ {slow} }}"
        return f"{{\n#if defined({guard})\n  {fast}\n#else\n  {slow}\n#endif\n}}"
    mload, mstore = masked_names(v)
    return (f"static inline {v} {mload}(const {ctype} *p, int n)\n"
            f"{body(load, loop_load)}\n"
            f"static inline void {mstore}({ctype} *p, {v} v, int n)\n"
            f"{body(store, loop_store)}\n")


def typedefs(ctype: str, lanes: int, itemsize: int) -> str:
    v, u = vector_type(ctype, lanes)
    n = lanes * itemsize
    return (f"typedef {ctype} {v} __attribute__((vector_size({n})));\n"
            f"typedef {ctype} {u} __attribute__((vector_size({n}), aligned({itemsize}), "
            f"may_alias));\n")


def _lane_stride(read, jname: str):
    """0 when the read does not depend on ``jname``, 1 when it is unit-stride along it,
    None otherwise."""
    names = P.index_names
    subs = read.indices
    if not subs or not any(jname in names(s) for s in subs):
        return 0
    if any(jname in names(s) for s in subs[:-1]):
        return None
    return 1 if unit_stride(read, jname) else None


def _vectorisable(e) -> bool:
    if isinstance(e, (P.Read, P.Const)):
        return True
    if isinstance(e, P.Bin):
        return e.op in _OPS and _vectorisable(e.lhs) and _vectorisable(e.rhs)
    if isinstance(e, P.Neg):
        return _vectorisable(e.value)
    return False


def _dot4(e):
    """The operands of ``e`` when it is ``dot4(x, y)`` of reads and constants, else None:
    a quantised product, one ``vpdpbusd`` per vector (``cexpr.vdot4_helpers``)."""
    if isinstance(e, P.Apply) and e.func == "dot4" and \
            all(isinstance(a, (P.Read, P.Const)) for a in e.args):
        return e.args
    return None


def _factors(e) -> list:
    """The factors of a product tree (``e`` itself when it is no product)."""
    if isinstance(e, P.Bin) and e.op == "*":
        return _factors(e.lhs) + _factors(e.rhs)
    return [e]


def _window(r, reduction) -> bool:
    """Whether a broadcast read takes a window: a subscript with a reduction index and
    another (``X(c, h + kh, 2 w + kw)``), whose element at one reduction step is another
    row's at a later one.  gcc's predictive commoning then carries the broadcasts of
    one step into the next in registers, which the tile's accumulators need: it spilled
    two of them in ResNet-18's 7x7/2 stem (0.58 -> 0.54 ms, 39 -> 34 ms at batch 64
    without it, ``backends.c``)."""
    red = set(reduction)
    for s in r.indices:
        names = set(P.index_names(s))
        if names & red and names - red:
            return True
    return False


def _scale(sst, jvar: str):
    """``(scale, rest)``: the factors of the update that no reduction index and not the
    lanes move (``alpha`` in ``alpha * A(i, k) * B(k, j)``), multiplied once into the
    tile's sum at its end instead of into every term, and the product of the others; or
    None when there is no such factor (or nothing else)."""
    moving = set(sst.stmt.reduction_vars) | {jvar}
    fixed, rest = [], []
    for f in _factors(sst.stmt.rhs):
        names = {n for r in P.reads(f) for n in P.index_names(*r.indices)}
        still = isinstance(f, (P.Const, P.Read)) and not names & moving
        (fixed if still else rest).append(f)
    if not fixed or not rest:
        return None

    def product(fs):
        out = fs[0]
        for f in fs[1:]:
            out = P.Bin("*", out, f, sst.stmt.rhs.dtype)
        return out

    return product(fixed), product(rest)


class Row(NamedTuple):
    """One row of a register tile: its ``simd`` loop (None: a scalar row), the statement
    instance, the iterators the row fixes (iterator -> C text: ``Promotion._rows``) and
    the condition under which it is stored (None: always)."""
    inner: object
    user: object
    at: dict | None = None
    guard: str | None = None


def micro_kernel(em, loops, items, lanes_at: tuple | None = None):
    """The vector code of a register tile (the module's text), or None; ``lanes_at``:
    the lanes' bounds, where their loop's vary (``Promotion.full_lanes``)."""
    if not em.vectorize or not items or any(r.inner is None for r in items):
        return None
    bounds = {lanes_at or const_bounds(r.inner) for r in items}
    if len(bounds) != 1:
        return None
    lo, hi = bounds.pop()
    if lo is None:
        return None
    width = hi - lo + 1
    rows = []
    for inner, user, at, _ in items:
        sst, printer = em.instance(user, at)
        st = sst.stmt
        if sst.kind != "body" or st.op != "+" or any(r.tensor == st.tensor
                                                     for r in P.reads(st.rhs)):
            return None
        if _dot4(st.rhs) is None and not (st.rhs.dtype.is_float and _vectorisable(st.rhs)):
            return None
        rows.append((inner, sst, printer))
    itemsize = rows[0][1].stmt.rhs.dtype.np_dtype.itemsize
    ctype = rows[0][1].stmt.rhs.dtype.c_name
    lanes = host().lanes(itemsize)
    if lanes < 2 or len({r[1].stmt.rhs.dtype for r in rows}) != 1:
        return None
    # a partial last vector (the last register tile of a row whose width is not a
    # multiple of the vector length) loads and stores its first ``tail`` lanes only
    tail = width % lanes
    nvec = -(-width // lanes)
    vtype, utype = vector_type(ctype, lanes)
    # the partial vector's type: half a vector when the tail fits in one (a whole one,
    # no mask, for 8 of 56 columns on AVX-512: its masked 16 lanes were 4% slower), but
    # not below 32 bytes, where no masked move exists
    part_lanes = lanes // 2 if tail and tail <= lanes // 2 and lanes * itemsize >= 64 else lanes
    if tail == lanes // 2 and lanes >= 4:
        part_lanes = tail
    pvtype, putype = vector_type(ctype, part_lanes)
    mload, mstore = masked_names(pvtype)
    masked = tail % part_lanes  # lanes of a masked partial vector (0: none)
    iters = [em.for_header(lp)[0] for lp in loops]
    decls, body, epi, post = [], [], [], []
    hoisted: dict = {}  # the reduction step's loads, each once (``ExprPrinter.hoisted``)
    loads: list = []
    strided: list = []  # per row whose accumulators have the result's stride
    ahead: list = []  # prefetches of the next tile's streamed vectors (``streamed``)
    nexts: list = []  # the next tile's accumulator lines (``next_tile``)
    line = max(1, 64 // (lanes * itemsize))  # vectors a cache line holds
    direct, stores, accs = [], [], {}  # (see ``handover``); accumulator -> its type
    starts = []  # per row: where its code starts in epi, post, direct, stores
    for u, (inner, sst, printer) in enumerate(rows):
        starts.append((len(epi), len(post), len(direct), len(stores)))
        lane, header = em.for_header(inner)
        fold = em.folds.get(sst.name)  # the folded init and epilogue (``fold.py``)
        ends = fold.tile_conditions(em, loops, printer.vars) if fold else None
        if fold is not None and ends is None:
            return None
        jvars = [v for v, x in printer.vars.items() if re.search(rf"\b{lane}\b", x)]
        if len(jvars) != 1:
            return None
        vecs, whole = set(), set()  # lane-dependent reads; those of a packed copy
        for r in P.reads(sst.stmt.rhs):
            packed = printer.packed.get(r.tensor) if isinstance(printer, PackPrinter) else None
            if packed is not None and packed.read is not r:
                packed = None  # another read of the packed tensor
            stride = _lane_stride(r, jvars[0]) if packed is None else \
                int(packed.sst.vars[packed.jvar] == jvars[0])
            if stride is None:
                return None
            if not stride and _window(r, sst.stmt.reduction_vars):
                em.windows = True
            if stride:
                vecs.add(id(r))
                if packed is not None:  # its panels are whole vectors, padded
                    whole.add(id(r))
        idx = list(sst.stmt.indices)
        if idx.count(jvars[0]) != 1:
            return None
        ahead += [a for a in streamed(em, sst, printer, vecs - whole, lane, lo + width,
                                       range(0, nvec, max(1, 64 // (lanes * itemsize))),
                                       lanes, _steps(loops)) if a not in ahead]
        unit = idx[-1] == jvars[0]  # else the accumulators' lanes have the result's stride
        if tail and not unit:
            return None
        # the epilogue takes the accumulators of the last reduction tile as they are
        # when nothing else reads the result: they are not stored (``fold.py``)
        handover = fold is not None and fold.dead and unit and _scale(sst, jvars[0]) is None
        # likewise with the result's stride: the epilogue takes each lane's value as it
        # stores it, on the last reduction tile (lanes over 32 channels, 8 x 56 pixels
        # with a bias and ReLU: 0.69 -> 0.49 ms; the epilogue had read the result back
        # and written its own with gathers and scatters)
        scatter = fold is not None and fold.dead and not unit and _scale(sst, jvars[0]) is None
        if handover:
            buf = f"pt_s{u}"
            direct.append(c.Statement(
                f"{ctype} {buf}[{nvec * lanes}] __attribute__((aligned(64)))"))
            direct += [c.Statement(f"*({pvtype if tail and v == nvec - 1 else vtype} *)"
                                   f"&{buf}[{v * lanes}] = pt_a{u}_{v}") for v in range(nvec)]
            direct += fold.epilogue(em, printer.vars, header, f"{buf}[({lane}) - {lo}L]")
        elif fold is not None and not scatter and unit:
            post += fold.epilogue(em, printer.vars, header)
        for v in range(nvec):
            part = tail if tail and v == nvec - 1 else 0  # lanes of a partial vector
            vt, ut = (pvtype, putype) if part else (vtype, utype)
            part = masked if part else 0  # of a masked one
            at = f"{lo + v * lanes}L"
            vars_ = {k: re.sub(rf"\b{lane}\b", at, x) for k, x in printer.vars.items()}
            p = em.printer(sst, vars_)
            if isinstance(p, PackPrinter):
                p.inner = tuple(iters)
            target = target_code(sst, p)
            if any(re.search(rf"\b{i}\b", target) for i in iters):
                return None
            acc = f"pt_a{u}_{v}"
            first = ends[0] if fold is not None and fold.init else None
            p.vector_reads, p.vector_type = frozenset(whole if part else vecs), ut
            if part:
                p.masked_reads, p.masked_load = frozenset(vecs - whole), (mload, part)
            scaled = _scale(sst, jvars[0])
            scale = None if scaled is None else p.expr(scaled[0])
            p.hoisted, p.hoisted_decls, p.hoisted_vector = hoisted, loads, vt
            dot = _dot4(sst.stmt.rhs)
            if dot is not None:  # (each operand a vector, or broadcast to one)
                x, y = (f"({vt}){{}} + {p.expr(a)}" for a in dot)
                body.append(c.Statement(f"{acc} = pt_vdot4_{vt[3:]}({acc}, {x}, {y})"))
            else:
                update = p.expr(sst.stmt.rhs if scaled is None else scaled[1])
                body.append(c.Statement(f"{acc} += {update}"))
            p.hoisted = None
            if unit:
                load = f"{mload}(&{target}, {part})" if part else \
                    f"*(const {ut} *)&{target}"
                if first is not None:
                    load = f"(({first}) ? ({vt}){{}} : ({vt})({load}))"

                def store(value, ut=ut, part=part, target=target):
                    return c.Statement(f"{mstore}(&{target}, {value}, {part})" if part else
                                       f"*({ut} *)&{target} = {value}")
                if v % line == 0 and ahead_along(em, sst.stmt.tensor, width,
                                                 printer.vars[jvars[0]], first):
                    nxt = f"{lo + width + v * lanes}L"
                    nexts.append(target_code(sst, em.printer(sst, {
                        k: re.sub(rf"\b{lane}\b", nxt, x) for k, x in printer.vars.items()})))
                accs[acc] = vt
                if scaled is None:  # the accumulators start at the result's values
                    decls.append(c.Statement(f"{vt} {acc} = {load}"))
                    (stores if handover else epi).append(store(acc))
                else:  # at zero: the scale multiplies the tile's sum, added at the end
                    decls.append(c.Statement(f"{vt} {acc} = ({vt}){{}}"))
                    epi.append(store(f"{load} + ({scale}) * {acc}"))
                continue
            # the accumulator's lanes have the result's stride: the tile goes through a
            # buffer, element by element, in one loop over the lanes for all its rows
            # (``strided_tile``)
            decls.append(c.Statement(f"{vtype} {acc} = ({vtype}){{}}"))
            if v == 0:
                at_lane = {k: re.sub(rf"\b{lane}\b", f"({lo}L + pt_l)", x)
                           for k, x in printer.vars.items()}
                strided.append(_Strided(u, target_code(sst, em.printer(sst, at_lane)),
                                        first, scale, ends, fold, scatter, at_lane,
                                        items[u].guard))
    # the rows of a partial tile past its bound (``Row.guard``) compute the last row
    # again and store nothing
    parts = (epi, post, direct, stores)
    stops = starts[1:] + [tuple(map(len, parts))]
    for u in reversed(range(len(rows))):  # (last first: earlier slices keep their place)
        for part, start, end in zip(parts, starts[u], stops[u]):
            if items[u].guard and end > start:
                part[start:end] = [c.If(items[u].guard, c.Block(part[start:end]))]
    if strided:
        if len(strided) != len(rows):
            return None
        fill, keep = strided_tile(em, strided, ctype, vtype, lanes, nvec)
        decls += fill
        epi += keep
    em.vector_types.add((ctype, lanes, itemsize))
    if tail:
        em.vector_types.add((ctype, part_lanes, itemsize))
    if masked:
        em.masked_types.add((ctype, part_lanes, itemsize))
    nest = pinned(loads, len(rows), len(accs), host().vector_registers) + \
        [c.Statement(a) for a in ahead] + body
    # the epilogue's reads of other tensors, asked for while the tile computes
    spread = []
    if strided and strided[0].fold is not None and loops:
        spread = during(em, _row_loop(strided), len(strided),
                        (em.for_header(loops[0])[0], *const_bounds(loops[0])), nvec * lanes,
                        strided[0].ends[1])
    if loops and not strided:
        table, step = next_tile(nexts, (em.for_header(loops[0])[0], *const_bounds(loops[0])))
        decls += table
        spread += step
    split = interleave(em, loops[-1], nest, accs, host().vector_registers) \
        if loops and not spread else None
    if split is not None:  # (few accumulators: ``chains.py``)
        decls, nest, epi = decls + split.decls, split.loop, split.combine + epi
    for k, lp in enumerate(reversed(loops[:-1] if split else loops)):
        nest = [c.For(*em.for_header(lp)[1], c.Block(
            (spread if k == len(loops) - 1 else []) + nest))]
    if direct:  # ``ends`` is the same for every row: they share the loops
        epi.append(c.If(ends[1], c.Block(direct + post), c.Block(stores)))
    elif post:
        epi.append(c.If(ends[1], c.Block(post)))
    return [c.Block(decls + nest + epi)]


class _Strided(NamedTuple):
    """A register row whose accumulators have the result's stride (lanes over the
    channels of a narrow image): ``one`` is its element at lane ``pt_l`` (C text, the
    lanes from the tile's first), ``first`` the first reduction tile's condition (None:
    the accumulators always start from memory), ``scale`` the factor applied at the end
    (``_scale``: None when none; the accumulators then start at zero), ``fold`` the
    folded epilogue run on the last reduction tile (None: none), on the accumulator's
    value as it is stored when ``dead`` (nothing else reads the result, which is not
    stored), else on the stored element, ``at`` the row's iterators at lane ``pt_l``,
    ``guard`` its ``Row.guard``."""
    row: int
    one: str
    first: str | None
    scale: str | None
    ends: tuple | None
    fold: object
    dead: bool
    at: dict
    guard: str | None


def strided_tile(em, rows: list, ctype: str, vtype: str, lanes: int, nvec: int):
    """``(fill, keep)``: the code that loads a register tile whose accumulators have the
    result's stride (``_Strided`` rows) and the code that stores it, each one loop over
    the tile's lanes through a buffer of all its rows (``pt_t``, row after row), which
    loads or stores every row's element per lane: the rows run along the result's unit
    stride, so each lane's elements are adjacent in memory.  A loop per accumulator
    vector (16 elements, which gcc unrolls, or vectorises with gathers) took gcc 2x the
    time, as fast (ResNet-18's 3x3 convolutions: 0.37 -> 0.18 s a group).  When a
    vector holds the tile's rows (to a power of 2), the tile is stored transposed
    (``transposed``: a lane's rows adjacent) and, for a whole tile, the rows of a lane
    are one loop gcc vectorises (``_row_loop``): a vector store per lane, not an element
    per row (a 56 x 56 ResNet-18 convolution's group 4% faster, gcc 1.5% slower)."""
    width = nvec * lanes
    buf = c.Statement(f"{ctype} pt_t[{len(rows) * width}] __attribute__((aligned(64)))")
    lanes_loop = each_lane(width)
    # an empty asm statement keeps gcc from vectorising a loop over the lanes (gathers
    # and scatters with the result's stride, which ran no faster and took half of its
    # time for a ResNet-18 convolution: 0.26 -> 0.13 s); gcc 12 has no pragma for it
    scalar = c.Statement('__asm__("")')

    def acc(r, v):
        return f"pt_a{r.row}_{v}"

    def at(r, v=None):
        return f"pt_t[{r.row * width}L + {'pt_l' if v is None else f'{v * lanes}L'}]"

    def guarded(r, stmts):
        return [c.If(r.guard, c.Block(stmts))] if r.guard else stmts

    fill = []
    if rows[0].scale is None:  # the accumulators start at the result's values
        loads = c.Block([buf, c.For(*lanes_loop, c.Block(
            [scalar] + [c.Statement(f"{at(r)} = {r.one}") for r in rows]))] + [
            c.Statement(f"{acc(r, v)} = *({vtype} *)&{at(r, v)}")
            for r in rows for v in range(nvec)])
        first = rows[0].first
        fill.append(loads if first is None else c.If(f"!({first})", loads))
    scaled = {r.row: (lambda v, r=r: acc(r, v) if r.scale is None else
                      f"({r.scale}) * {acc(r, v)}") for r in rows}
    span = 1 << max(0, max(r.row for r in rows)).bit_length()  # rows, to a power of 2
    if span <= lanes:
        # the tile transposed in registers: each lane's elements of all rows adjacent in
        # the buffer (``pt_t[lane * span + row]``), so that gcc stores the rows of a lane
        # (adjacent in the result) as one vector, not an element each
        out = [c.Statement(f"{ctype} pt_t[{span * width}] __attribute__((aligned(64)))")]
        out += transposed(vtype, lanes, span, nvec, scaled)

        def at(r, v=None):  # noqa: F811 (the transposed buffer from here on)
            return f"pt_t[pt_l * {span}L + {r.row}]"
    else:
        out = [buf] + [c.Statement(f"*({vtype} *)&{at(r, v)} = {scaled[r.row](v)}")
                       for r in rows for v in range(nvec)]

    def value(r):
        if r.scale is None:
            return at(r)
        old = r.one if r.first is None else f"(({r.first}) ? 0 : {r.one})"
        return f"{old} + {at(r)}"

    def store(r):
        return [c.Statement(f"{r.one} = {value(r)}")]

    def epilogue(r):
        return r.fold.epilogue(em, r.at, value=value(r)) if r.dead else \
            store(r) + r.fold.epilogue(em, r.at)

    def per_lane(each):
        loop = _row_loop(rows) if span <= lanes else None
        if loop is None:
            return [s for r in rows for s in guarded(r, each(r))]
        # the rows of a lane are adjacent in the result and in the transposed buffer:
        # one loop over them, which gcc vectorises (a vector store per lane where there
        # was a store per element)
        return em.simd_loop(("long pt_r = 0", f"pt_r < {len(rows)}L", "pt_r += 1"),
                            c.Block(each(loop)))

    stored = c.For(*lanes_loop, c.Block([scalar] + per_lane(store)))
    if rows[0].fold is not None:  # on the last reduction tile, the epilogue per element
        # as it is stored (a loop per row after the tile's stores, over its lanes with
        # the result's stride, took gcc 2.5x the time: each was vectorised)
        stored = c.If(rows[0].ends[1], c.For(*lanes_loop, c.Block(
            [scalar] + per_lane(epilogue))), stored)
    out.append(stored)
    return fill, [c.Block(out)]


def _row_loop(rows: list):
    """A ``_Strided`` row standing for all of ``rows`` with the row iterator ``pt_r``
    (rows ``0, 1, ..`` of a whole tile, whose texts differ only in that iterator's
    value: ``5L`` in row 5), or None when they differ otherwise or a row is guarded."""
    if any(r.guard for r in rows) or [r.row for r in rows] != list(range(len(rows))) or \
            len(rows) < 2:
        return None

    def generic(texts):
        if all(t == texts[0] for t in texts):
            return texts[0]
        for m in re.finditer(r"\b0L\b", texts[0]):
            tpl = texts[0][:m.start()] + "\0" + texts[0][m.end():]
            if all(tpl.replace("\0", f"{u}L") == t for u, t in enumerate(texts)):
                return tpl.replace("\0", "pt_r")
        return None

    one = generic([r.one for r in rows])
    at = {k: generic([r.at[k] for r in rows]) for k in rows[0].at}
    if one is None or None in at.values() or any(set(r.at) != set(at) for r in rows):
        return None
    return rows[0]._replace(one=one, at=at, row="pt_r")


def transposed(vtype: str, lanes: int, span: int, nvec: int, value: dict,
               store=None) -> list:
    """Statements storing the accumulators ``value[row](v)`` of ``span`` rows (a power
    of 2 at most ``lanes``; rows not in ``value`` are zeros) transposed into
    ``pt_t``: element (row ``t``, lane ``l`` of vector ``v``) at ``pt_t[(v * lanes + l) *
    span + t]`` (``store(offset, vector)``: the statement storing a vector there
    instead).  ``log2(span)`` rounds of two-vector shuffles: after round ``s`` the
    vector of row group ``g`` and lane chunk ``h`` holds rows ``g 2^s + t`` of lanes ``h
    lanes / 2^s + k`` at ``k 2^s + t`` (8 rows of 16 lanes: 24 shuffles, where there
    were 128 scalar stores)."""
    store = store or (lambda at, vec: c.Statement(f"*({vtype} *)&pt_t[{at}L] = {vec}"))
    out = []
    for v in range(nvec):
        vecs = {(t, 0): value[t](v) if t in value else f"(({vtype}){{}})"
                for t in range(span)}
        size = 1
        while size < span:
            chunk = lanes // (2 * size)  # lanes per vector after this round
            nxt = {}
            for (g, h), first in vecs.items():
                if g % 2:
                    continue
                second = vecs[(g + 1, h)]
                for x in range(2):
                    idx = [(x * chunk + k) * size + t if t < size else
                           lanes + (x * chunk + k) * size + t - size
                           for k in range(chunk) for t in range(2 * size)]
                    name = f"pt_x{v}_{size}_{g // 2}_{2 * h + x}"
                    out.append(c.Statement(f"{vtype} {name} = __builtin_shufflevector("
                                           f"{first}, {second}, {', '.join(map(str, idx))})"))
                    nxt[(g // 2, 2 * h + x)] = name
            vecs, size = nxt, size * 2
        out += [store((v * lanes + h * (lanes // span)) * span, vecs[(0, h)])
                for h in range(span)]
    return out


def each_lane(width: int) -> tuple:
    """The header of a loop over ``pt_l`` in ``0:width``."""
    return ("long pt_l = 0", f"pt_l < {width}L", "pt_l += 1")


def _steps(loops):
    """The reduction steps of a register tile (its ``loops``' trip counts multiplied),
    or None where a bound is not constant."""
    n = 1
    for lp in loops:
        lo, hi = const_bounds(lp)
        if lo is None:
            return None
        n *= hi - lo + 1
    return n
