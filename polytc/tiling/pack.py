"""Packing of a contraction's vector operand into contiguous micro-panels (the C target).

In a register-tiled contraction ``C(i, j) += A(i, k) * B(k, j)`` the micro-kernel reads,
at every ``k``, ``NR`` consecutive ``j`` of the *vector operand* ``B`` (the read that
depends on ``j`` and not on ``i``) and broadcasts ``MR`` elements of ``A``.  Read in
place, ``B``'s rows lie a whole row apart: the ``Tk`` rows of one micro-panel map to a
few cache sets and evict each other, and a transposed operand (``B(j, k)``) cannot be
loaded as vectors at all.  So, as BLIS and Polly's matmul optimisation do, each cache
tile of ``B`` is copied into a buffer laid out as the micro-kernel reads it:

    pack[p][k][l] = B at (j = tile_j + NR * p + l, k = tile_k + k)      (p < Tj / NR)

The copy is an isl *extension* grafted below the cache-tile band (the machinery of the
GPU backend's shared-memory promotion): for every cache tile, the statement ``packN``
with instances ``packN[t..., p, k..., l]`` (``t``: the tile's prefix, i.e. its origin;
then the offsets inside it) runs before the tile's compute, in loops isl generates
with exact bounds for partial tiles.  Its band puts the operand's unit-stride dimension
innermost, so the copy reads memory contiguously (and ``l`` innermost writes the buffer
contiguously).  The code generator writes reads of the operand by the contraction as
``pt_packN[...]`` (``codegen_c/pack.py``).  The offsets in a tile equal the indices
modulo the tile sizes: tiles start at multiples of their size, and the indices are
non-negative.

A *constant* operand (``Options.constants``: a model's weights) is packed once instead,
before the first call: ``prepack_box`` admits a read that depends on ``j`` and the
reductions only, over a rectangular range of them; then no copy is grafted and the
kernel reads the whole operand, already laid out tile after tile (the same panels, tile
``(j / Tj, k / Tk...)`` at ``tile * Tj * Kt``), from an extra parameter that the
generated ``polytc_prepackN`` function fills (``codegen_c/pack.py``).
"""
from __future__ import annotations

import islpy as isl

from ..lang import program as P
from ..poly.transform import whole
from .decisions import Decision


def vector_operand(sst, j, i):
    """The read of a contraction that packing copies: the one read depending on the
    index ``j`` (and not on ``i``), with no run-time check; else None."""
    reads = P.reads(sst.stmt.rhs)
    found = [r for r in reads if j in P.index_names(*r.indices)]
    if len(found) != 1:
        return None
    r = found[0]
    if i in P.index_names(*r.indices) or id(r) in sst.guarded or not r.indices:
        return None
    return r


def read_position(sst, read) -> int:
    """Which of the statement's reads ``read`` is (a tensor may be read twice: the
    packed read of ``C(i, j) += A(i, k) * A(j, k)`` is the second)."""
    return next(n for n, r in enumerate(P.reads(sst.stmt.rhs)) if r is read)


def prepack_box(sst, read, j, red) -> tuple | None:
    """For a constant operand's ``read`` (see the module docstring): ``(lo, hi)`` of the
    statement indices ``j`` and ``red`` (positions in ``sst.vars``), in that order, when
    the read depends on no other index (but indices of one value: the direction of a
    one-way LSTM) and the domain's projection onto them is a box (the prepacked copy
    covers it); else None."""
    keep = [j] + [v for v, _ in red]
    for v, name in enumerate(sst.vars):  # any other index it reads must take one value
        if v not in keep and name in P.index_names(*read.indices) and \
                not sst.domain.dim_min_val(v).eq(sst.domain.dim_max_val(v)):
            return None
    proj = sst.domain
    for d in reversed(range(len(sst.vars))):
        if d not in keep:
            proj = proj.project_out(isl.dim_type.set, d, 1)
    if not proj.is_box():
        return None
    at = sorted(keep)  # the projection keeps the statement's order of indices
    box = []
    for v in keep:
        lo, hi = proj.dim_min_val(at.index(v)), proj.dim_max_val(at.index(v))
        if not (lo.is_int() and hi.is_int()) or lo.to_python() < 0:
            return None
        box.append((lo.to_python(), hi.to_python()))
    return tuple(box)


def batch_index(reads, name: str) -> bool:
    """Whether index ``name`` is a batch of ``reads``: some read uses it and each takes it
    as a whole subscript (its iterations read disjoint data)."""
    subs = [x for r in reads for x in r.indices if name in P.index_names(x)]
    return bool(subs) and all(isinstance(x, P.Index) for x in subs)


def unit_stride(read, name: str) -> bool:
    """Whether ``read``'s last subscript is ``name`` plus terms without it (consecutive
    values of the index read consecutive elements)."""
    last = read.indices[-1] if read.indices else None
    while isinstance(last, P.Convert):
        last = last.value
    if isinstance(last, P.Index):
        return last.name == name
    if isinstance(last, P.Bin) and last.op in ("+", "-"):
        a, b = last.lhs, last.rhs
        if isinstance(a, P.Index) and a.name == name:
            return name not in P.index_names(b)
        return last.op == "+" and isinstance(b, P.Index) and b.name == name and \
            name not in P.index_names(a)
    return False


def outer_indices(node, sst, members, values=False) -> dict | None:
    """Statement index -> position in ``node``'s prefix schedule, for each index of
    ``sst`` that the band ``node`` does not schedule (``members``): the outer loop that
    runs exactly that index (a batch loop around the contraction), or with ``values``
    ``("value", v)`` for an index with the one value ``v`` (a batch of one, which needs
    no loop); None when one has neither."""
    try:
        prefix = node.get_prefix_schedule_union_map()
    except isl.Error:
        return None
    found: list = []
    prefix.intersect_domain(isl.UnionSet.from_set(sst.domain)).foreach_map(found.append)
    out = {}
    for v in range(len(sst.vars)):
        if v in members:
            continue
        lo, hi = sst.domain.dim_min_val(v), sst.domain.dim_max_val(v)
        if values and lo.is_int() and lo.eq(hi):
            out[v] = ("value", lo.to_python())
            continue
        if len(found) != 1:
            return None
        m = found[0]
        d = next((d for d in range(m.dim(isl.dim_type.out)) if m.is_subset(
            m.equate(isl.dim_type.in_, v, isl.dim_type.out, d))), None)
        if d is None:
            return None
        out[v] = d
    return out


def pack(node, sst, read, members, cache, jpos, nr, count, outer=None, constant=False):
    """Graft the copy of ``read``'s tile at ``node`` (the child of the cache-tile band,
    whose member ``m`` schedules the statement's index ``members[m]`` in tiles of
    ``cache[m]``; ``jpos``: the ``j`` member, whose ``nr`` consecutive values are a
    panel's lanes, the reductions follow it; ``outer``: where the indices that outer
    loops run are in the prefix, see ``outer_indices``; ``constant``: the operand is the
    same at every call, so it may be packed once, see ``prepack_box``); returns the node
    at the same position and the ``pack`` Decision (the facts whose name starts with
    ``_`` tell the code generator the layout)."""
    ctx = node.get_ctx()
    name = f"pack{count}"
    depth = node.get_schedule_depth()
    base = depth - len(members)  # prefix position of the tile band's first member
    pos = dict(outer or {})  # statement index -> prefix position (``outer_indices``)
    pos.update({v: base + p for p, v in enumerate(members)})
    j, tj = members[jpos], cache[jpos]
    red = list(zip(members[jpos + 1:], cache[jpos + 1:]))
    kt = 1
    for _v, t in red:
        kt *= t
    box = prepack_box(sst, read, j, red) if constant else None
    if box is not None:  # packed once, before the first call: no copy in the kernel
        tiles = [-(-(hi + 1) // t) for (_lo, hi), t in zip(box, [tj] + [t for _v, t in red])]
        size = tj * kt
        for n in tiles:
            size *= n
        facts = {"tensor": read.tensor, "buffer": f"pt_{name}", "panel": (kt, nr),
                 "panels": tj // nr, "copy": "once", "_name": name, "_j": j,
                 "_read": read_position(sst, read),
                 "_red": tuple(red), "_tj": tj, "_nr": nr, "_pos": (), "_box": box,
                 "_tiles": tuple(tiles), "_size": size}
        return node, Decision("pack", [sst.name], facts)
    # { [t] -> X[j, reductions] } for this node's instances, then offsets in the tile
    xs = ", ".join(f"x{d}" for d in range(len(sst.vars)))
    absm = isl.UnionMap.read_from_str(
        ctx, f"{{ {sst.name}[{xs}] -> X[x{j}{''.join(f', x{v}' for v, _ in red)}] }}")
    prefix = node.get_prefix_schedule_union_map().intersect_domain(node.get_domain())
    ext_abs = prefix.reverse().apply_range(absm)
    ts = [f"t{d}" for d in range(depth)]
    ks = [f"k{r}" for r in range(len(red))]
    off_j = f"(aj - t{pos[j]})"
    rel = [f"floor({off_j}/{nr})"] + [f"{k} - t{pos[v]}" for k, (v, _) in zip(ks, red)] + \
        [f"{off_j} - {nr}*floor({off_j}/{nr})"]
    to_rel = isl.UnionMap.read_from_str(
        ctx, f"{{ [[{', '.join(ts)}] -> X[aj{''.join(', ' + k for k in ks)}]] -> "
             f"[[{', '.join(ts)}] -> {name}[{', '.join(ts + rel)}]] }}")
    ext = ext_abs.wrap().apply(to_rel).unwrap()
    # the copy's loops: panels, the reductions, lanes innermost; when the operand is
    # contiguous along a reduction index instead (B(j, k)), that one innermost
    last = P.index_names(read.indices[-1])
    contig_j = sst.vars[j] in last
    inner = [r for r, (v, _) in enumerate(red) if sst.vars[v] in last]
    if contig_j or not inner:
        band = ["p"] + ks + ["l"]
    else:  # a transposing copy, in blocks of a cache line along k: the lines it reads
        kin = ks[inner[0]]  # and the lines it writes stay in L1 (sgemm A B^T: 7.2 -> 6.3 ms)
        line = max(1, 64 // read.dtype.np_dtype.itemsize)
        band = ["p"] + [k for r, k in enumerate(ks) if r != inner[0]] + \
            [f"floor({kin}/{line})", "l", kin]
    tup = ", ".join(ts + ["p"] + ks + ["l"])
    sched = isl.UnionMap.read_from_str(ctx, f"{{ {name}[{tup}] -> [{', '.join(band)}] }}")
    graft = isl.ScheduleNode.from_extension(ext).child(0)
    graft = graft.insert_partial_schedule(isl.MultiUnionPwAff.from_union_map(sched))
    if band[-1] == "l":
        graft = _isolate_full_panels(graft, ext, depth, len(ks), nr)
    node = node.graft_before(graft.root())
    facts = {"tensor": read.tensor, "buffer": f"pt_{name}", "panel": (kt, nr),
             "panels": tj // nr, "copy": "contiguous" if contig_j or not inner else
             "transposing", "_name": name, "_j": j, "_read": read_position(sst, read),
             "_red": tuple(red), "_tj": tj,
             "_nr": nr, "_pos": tuple(sorted(pos.items()))}
    return node, Decision("pack", [sst.name], facts)


def _isolate_full_panels(band, ext, depth: int, nks: int, nr: int):
    """The copy's band with its full panels (all ``nr`` lanes) isolated, so that the AST
    generator gives them a lane loop of constant bounds, which gcc vectorises (a partial
    last panel made every panel's lane loop run to a ``PT_MIN`` bound, element by
    element: SqueezeNet's 3x3/2 stem 0.160 -> 0.128 ms).  ``ext``: the extension
    ``[t...] -> packN[t..., p, k..., l]`` (``t``: the prefix of ``depth`` loops); the band
    schedules ``[p, k..., l]``."""
    dt = isl.dim_type
    points = isl.Set.from_union_set(ext.range()).reset_tuple_id()
    n = depth + 1 + nks  # t..., p, k...: a panel's row; then its lane l
    lanes_of = isl.Map.from_range(points).move_dims(dt.in_, 0, dt.out, 0, n)
    rows = lanes_of.domain()
    box = isl.Set.universe(lanes_of.range().get_space()) \
        .lower_bound_val(dt.set, 0, 0).upper_bound_val(dt.set, 0, nr - 1)
    full = whole(lanes_of, box)
    if full.is_empty() or full.is_equal(rows):
        return band  # no full panel, or no partial one: one loop is what is wanted
    full = full.add_dims(dt.set, 1)  # any lane of a full panel's row
    opt = isl.Map.from_range(full).move_dims(dt.in_, 0, dt.out, 0, depth).wrap()
    return band.band_set_ast_build_options(
        isl.UnionSet.from_set(opt.set_tuple_name("isolate")))


#: rows of a contraction up to which an operand that is not a constant is read as it is
#: rather than packed (``streamed``; in generic code, a run-time test: ``codegen_c/pack.
#: direct_below``)
STREAM_ROWS = 32


def streamed(n: int, m: int, k: int, lanes: int) -> bool:
    """Whether a contraction reads a vector operand that is not a constant as it is
    rather than packed: ``n`` of at least 32 vectors (the pixels of a pointwise
    convolution) reused by at most 32 rows or over a reduction of at most 32 (``m``,
    ``k``): the copy costs more than the panels save.  SqueezeNet at batch 64, timed
    from memory: 128 -> 16 channels over 55 x 55 6.7 -> 4.2 ms, 128 -> 32 and 256 -> 32
    over 27 x 27 2.0 -> 1.3 and 4.1 -> 3.2 ms, 32 -> 128 1.39 -> 1.21 (64 -> 16 over
    55 x 55 2.0 -> 2.1)."""
    return n >= 32 * lanes and (m <= STREAM_ROWS or k <= 32)
