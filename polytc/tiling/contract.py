"""Array contraction: temporaries that live within one iteration of a parallel loop.

A temporary (``ex(n, d)`` of a softmax, ``xc(n, d)`` of a layer norm, the row maximum
``mx(n)``) whose elements are each touched in one iteration of the parallel loop only,
and whose values no other iteration needs, does not need its whole array: each
iteration can keep the part it touches in a buffer of its own, on the stack of the
thread that runs it, where it stays in L1 or L2 instead of going to memory and back.

For a ``parallel`` mark, let ``P`` map the value of the schedule through the parallel
loop (outer dimensions included) to the elements of ``t`` the statements touch there.
``t`` is contracted when
* every statement that touches ``t`` runs under that loop;
* no element is touched at two values of ``P``'s domain (``P⁻¹ ∘ P`` is the identity);
* the runtime does not fill ``t`` before the kernel (no element is read before it is
  written) and it is not packed once, before the first call (a copy packed at each call
  reads it where it is: ``codegen_c/pack.py``);
* the part one iteration touches lies in a box of constant size (per dimension, the
  largest extent over all iterations) that fits the limit.
Each dimension ``k`` of the box starts at ``off_k(prefix)``, the smallest index the
iteration touches.  A statement instance ``x`` accesses the local element
``idx_k(x) - off_k(prefix(x))``: the decision records, per statement, ``off_k ∘ prefix``
as an isl piecewise affine expression of the statement's indices, which the code
generator prints as C.
"""
from __future__ import annotations

import islpy as isl

from ..lang import program as P
from .decisions import Decision

#: at most this many bytes of contracted buffers per parallel loop (on each thread's
#: stack: well inside the default 2-8 MiB thread stacks, and inside L2)
LIMIT = 256 << 10


def contract(schedule, scop, fills, packed, l2: int, folds=(), copied=frozenset()) -> list:
    """``contract`` Decisions for the temporaries of ``scop`` that can live in one
    iteration of a parallel loop of ``schedule`` (see the module's doc).  ``folds``: the
    ``fold`` decisions (``tiling/fold.py``): a folded init writes what its contraction
    writes (its accesses add nothing); a folded epilogue runs no loops of its own, its
    instances in its contraction's register tiles: its accesses count as those of the
    contraction's instances that write the elements it reads (``_epilogues``).
    ``packed``: tensors packed once, before the first call (constants); ``copied``:
    those packed at each call, which are contracted onto the stack only (as a thread's
    part of the array, ShuffleNet's padded 225 x 225 images at batch 64 took its stem
    convolution 5.3 -> 6.3 ms)."""
    marks: list = []

    def find(node):
        if node.get_type() == isl.schedule_node_type.mark and \
                node.mark_get_id().get_name().startswith("parallel:"):
            marks.append(node.copy())
            return False
        return True

    schedule.get_root().foreach_descendant_top_down(find)
    inits = {d.facts["init"] for d in folds} - {None}
    epilogues = _epilogues(scop, folds)
    # a result only its folded epilogue reads is handed over in registers (its array
    # holds at most partial sums between reduction tiles: ``alias.py``)
    target = {x.name: x.stmt.tensor for x in scop.stmts}
    dead = {target[d.subject] for d in folds if d.facts.get("_dead")}
    temps = {t.name: (t, _accesses(scop, t.name, inits, epilogues))
             for t in scop.program.temporaries
             if t.name not in fills and t.name not in packed and t.name not in dead}
    out = []
    for mark in marks:
        budget = min(LIMIT, l2 // 2)
        try:
            dom = mark.child(0).get_domain()
        except isl.Error:
            continue
        loops = list(reversed(_loops(mark.child(0))))
        prefix = _Prefixes(loops, scop)
        for t, found in temps.values():
            if found is None or not found[1].domain().is_subset(dom):
                continue  # a statement outside the parallel loop touches it
            # the deepest loop of the bands under the mark first: the smallest buffer
            # (reused by the iterations of inner loops, which one thread runs in turn)
            chosen = slot = None
            for k in range(len(loops)):
                d = _one(mark, prefix[k], scop, t, *found, epilogues)
                if d is None:
                    continue
                if d.facts["_bytes"] <= budget:
                    budget -= d.facts["_bytes"]
                    chosen = (d, k, {})
                    break
                if slot is None and d.facts["_bytes"] <= l2 and t.name not in copied and \
                        _tiles(d, prefix[k], t, scop, found[1]):
                    slot = (d, k, {"slot": "thread"})
            d, k, more = chosen or slot or (None,) * 3
            if d is not None:  # (where the next iteration's copy reads: ``_source``)
                source = _source(prefix[k], scop, t)
                out.append(Decision("contract", d.subjects,
                                    {**d.facts, **more, "_source": source}))
    return out


class _Prefixes:
    """The prefix schedule of each of ``loops`` (``(band, members)``: ``_prefix``), made
    once for all the temporaries: over a recurrent layer's 97 statements, 2.5 ms each
    for each of its 64 temporaries had taken its contraction pass 0.73 s."""

    def __init__(self, loops: list, scop):
        self.loops, self.scop, self.made = loops, scop, {}

    def __getitem__(self, k: int):
        if k not in self.made:
            self.made[k] = _prefix(*self.loops[k], self.scop)
        return self.made[k]


def _tiles(d, prefix, t, scop, acc) -> bool:
    """Whether the boxes of ``d`` fit in ``t``'s array once per iteration (of the loops
    outside its loop and of its loop, ``prefix``'s values): a buffer too large for a
    thread's stack is then the box of ``t``'s own array at the thread's number
    (``slot``), which a thread runs an iteration only under (a static schedule gives
    thread ``k`` iterations only if ``k`` is below their count)."""
    if scop.symbolic:
        return False
    count = _count(prefix.intersect_domain(acc.domain()).range())
    full = 1
    for e in scop.shapes[t.name]:
        full *= e
    return count is not None and count * d.facts["_bytes"] <= full * t.dtype.np_dtype.itemsize


def text(decisions) -> str:
    """The ``contraction`` stage: the ``contract`` decisions among ``decisions``."""
    return "\n".join(str(d) for d in decisions if d.kind in ("contract", "alias")) or \
        "(none)"


def _epilogues(scop, folds) -> dict:
    """Folded epilogue -> ``(its contraction, the map from the contraction's instances
    to the epilogue's instances that read what they write, the tensors the epilogue
    touches)``: an epilogue instance runs in the register tile of those instances, at
    their loops' values."""
    out = {}
    target = {x.name: x.stmt.tensor for x in scop.stmts}
    for d in folds:
        e, t = d.facts.get("epilogue"), target[d.subject]
        w = _union([m for m in _maps(scop.writes, d.subject)
                    if m.get_tuple_name(isl.dim_type.out) == t])
        r = _union([m for m in _maps(scop.reads, e)
                    if m.get_tuple_name(isl.dim_type.out) == t]) if e else None
        if w is not None and r is not None:
            touched = {m.get_tuple_name(isl.dim_type.out)
                       for m in _maps(scop.reads.union(scop.writes), e)}
            out[e] = (d.subject, w.apply_range(r.reverse()), touched)
    return out


def _maps(accesses, name: str) -> list:
    """The maps of statement ``name`` among ``accesses`` (a union map)."""
    out: list = []
    accesses.foreach_map(
        lambda m: out.append(m) if m.get_tuple_name(isl.dim_type.in_) == name else None)
    return out


def _union(maps: list):
    if not maps:
        return None
    u = isl.UnionMap.from_map(maps[0])
    for m in maps[1:]:
        u = u.union(isl.UnionMap.from_map(m))
    return u


def _accesses(scop, tensor: str, inits=frozenset(), epilogues=None):
    """``(maps, union)``: the accesses of ``tensor``, one map per statement access
    (but the folded ``inits``'; a folded epilogue's as its contraction's, see
    ``_epilogues``), and their union; None when one has a subscript isl cannot
    describe (the whole array may be touched), or there is none."""
    touching: list = []
    epilogues = epilogues or {}

    def keep(m):
        if m.get_tuple_name(isl.dim_type.out) == tensor and \
                m.get_tuple_name(isl.dim_type.in_) not in inits:
            touching.append(m)

    scop.reads.union(scop.writes).foreach_map(keep)
    if not touching or any(_guarded(scop, m.get_tuple_name(isl.dim_type.in_), tensor)
                           for m in touching):
        return None
    moved = []
    for m in touching:
        e = m.get_tuple_name(isl.dim_type.in_)
        if e in epilogues:
            try:
                m = isl.Map.from_union_map(epilogues[e][1].apply_range(
                    isl.UnionMap.from_map(m)))
            except isl.Error:
                return None
        moved.append(m)
    touching = moved
    acc = isl.UnionMap.from_map(touching[0])
    for m in touching[1:]:
        acc = acc.union(isl.UnionMap.from_map(m))
    return touching, acc


def _loops(band) -> list:
    """``(band, members)`` for each loop of the chain of bands from ``band`` down (the
    loops through that band's first ``members`` members), outermost first."""
    out = []
    while band.get_type() == isl.schedule_node_type.band:
        out += [(band, m) for m in range(1, band.band_n_member() + 1)]
        if band.n_children() != 1:
            break
        band = band.child(0)
    return out


def _one(mark, prefix, scop, t, touching, acc, epilogues=None):
    """The ``contract`` decision for ``t`` (accessed by ``touching``, whose union is
    ``acc``) per iteration of the loops whose prefix schedule is ``prefix`` (``_prefix``:
    down to a member of a band at or below ``mark``), or None.  ``epilogues``:
    ``_epilogues``."""
    depth = int(mark.mark_get_id().get_name().partition(":")[2])
    if prefix is None:
        return None
    try:
        per = isl.Map.from_union_map(prefix.reverse().apply_range(acc))
    except isl.Error:
        return None
    same = per.apply_range(per.reverse()).deltas()
    if not same.is_subset(_zero(same)):
        return None  # an element is shared by two iterations
    extents, offsets = [], []
    for k in range(per.dim(isl.dim_type.out)):
        lo, hi = per.dim_min(k), per.dim_max(k)
        if lo.n_piece() != 1:
            return None
        size = hi.sub(lo).max_val()
        if not size.is_int():
            return None
        extents.append(size.to_python() + 1)
        offsets.append(lo)
    itemsize = t.dtype.np_dtype.itemsize
    n = 1
    for e in extents:
        n *= e
    # per statement: the box's offsets as affine expressions of its indices (a folded
    # epilogue's at the loops' values of the contraction instances it runs after)
    stmt_offsets = {}
    names = {m.get_tuple_name(isl.dim_type.in_): isl.UnionSet.from_set(m.domain())
             for m in touching}
    for e, (s, corr, touched) in (epilogues or {}).items():
        if s in names and t.name in touched:
            names[e] = corr
    for name, where in names.items():
        if isinstance(where, isl.UnionMap):
            sched = where.reverse().apply_range(prefix)
        else:
            sched = prefix.intersect_domain(where)
        try:
            pma = isl.PwMultiAff.from_map(isl.Map.from_union_map(sched))
        except isl.Error:
            return None
        stmt_offsets[name] = tuple(str(o.pullback_pw_multi_aff(pma).coalesce()) for o in offsets)
    return Decision("contract", [t.name], {
        "loop": f"c{depth}", "buffer": "x".join(map(str, extents)),
        "_extents": tuple(extents), "_bytes": n * itemsize,
        "_offsets": tuple(sorted(stmt_offsets.items()))})


def _prefix(band, members: int, scop):
    """The map from the statements' instances to the values of the loops down to the
    ``members``-th of ``band`` (their iterations), or None."""
    try:
        prefix = band.get_prefix_schedule_union_map()
    except isl.Error:
        return None
    first = isl.UnionMap.from_multi_union_pw_aff(
        band.band_get_partial_schedule().drop_dims(isl.dim_type.set, members,
                                                   band.band_n_member() - members))
    return prefix.flat_range_product(first).intersect_domain(scop.domain)


def _source(prefix, scop, t):
    """``(tensor, start, elements)``: the range of another tensor that the statements
    writing ``t`` read in one iteration (a pooling's padded copy of a plane: the
    plane), ``start`` its first element's linear index at the next iteration, an isl
    piecewise affine expression of the loops' values (named ``c0``, ``c1``, ...), for the
    code to prefetch while the iteration computes from ``t``; None when there is no one
    such tensor of constant shape, or its range is not one per iteration."""
    if prefix is None:
        return None
    writers = set()
    scop.writes.foreach_map(lambda m: writers.add(m.get_tuple_name(isl.dim_type.in_))
                            if m.get_tuple_name(isl.dim_type.out) == t.name else None)
    reads: list = []
    scop.reads.foreach_map(lambda m: reads.append(m) if m.get_tuple_name(isl.dim_type.in_)
                           in writers and m.get_tuple_name(isl.dim_type.out) != t.name
                           else None)
    names = {m.get_tuple_name(isl.dim_type.out) for m in reads}
    if len(names) != 1:
        return None
    x = names.pop()
    shape = scop.shapes.get(x)
    if not shape or scop.symbolic:
        return None
    acc = isl.UnionMap.from_map(reads[0])
    for m in reads[1:]:
        acc = acc.union(isl.UnionMap.from_map(m))
    strides, at = [], 1
    for e in reversed(shape):
        strides.insert(0, at)
        at *= e
    idx = [f"i{k}" for k in range(len(shape))]
    flat = " + ".join(f"{s} * {i}" for s, i in zip(strides, idx))
    lin = isl.UnionMap.read_from_str(scop.ctx, f"{{ {x}[{', '.join(idx)}] -> [{flat}] }}")
    try:
        per = isl.Map.from_union_map(prefix.reverse().apply_range(acc).apply_range(lin))
    except isl.Error:
        return None
    lo, hi = per.dim_min(0), per.dim_max(0)
    size = hi.sub(lo).max_val()
    if lo.n_piece() != 1 or not size.is_int():
        return None
    space = lo.get_domain_space()
    n = space.dim(isl.dim_type.set)
    step = isl.MultiAff.identity(space.map_from_set())
    step = step.set_aff(n - 1, step.get_aff(n - 1).add_constant_val(1))
    nxt = lo.pullback_multi_aff(step)
    for k in range(n):
        nxt = nxt.set_dim_id(isl.dim_type.in_, k, isl.Id(f"c{k}", context=scop.ctx))
    return x, str(nxt), size.to_python() + 1


def _count(iterations):
    """The number of points of ``iterations`` when it is a box of constant bounds, else
    None."""
    try:
        iterations = isl.Set.from_union_set(iterations)
    except isl.Error:
        return None
    n, box = 1, isl.Set.universe(iterations.get_space())
    for k in range(iterations.dim(isl.dim_type.set)):
        lo, hi = iterations.dim_min_val(k), iterations.dim_max_val(k)
        if not (lo.is_int() and hi.is_int()):
            return None
        n *= hi.to_python() - lo.to_python() + 1
        box = box.lower_bound_val(isl.dim_type.set, k, lo).upper_bound_val(
            isl.dim_type.set, k, hi)
    return n if box.is_subset(iterations) else None


def _zero(deltas):
    z = isl.Set.universe(deltas.get_space())
    for d in range(z.dim(isl.dim_type.set)):
        z = z.fix_val(isl.dim_type.set, d, isl.Val.zero(z.get_ctx()))
    return z


def _guarded(scop, stmt: str, tensor: str) -> bool:
    sst = next(s for s in scop.stmts if s.name == stmt)
    return any(id(r) in sst.guarded for r in P.reads(sst.stmt.rhs) if r.tensor == tensor)
