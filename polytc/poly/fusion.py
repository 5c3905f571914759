"""The fusion strategy: which of isl's schedules to take (``isl_schedule``, resolving
``Options.fusion == "auto"``), and the ``fuse_outer`` pass.

Fusion of outer loops, distribution of inner ones (``Options.fusion == "max"``):

isl's whole-component scheduler fuses the outer parallel loop of a row-wise program
(softmax, layernorm: every statement iterates over the rows ``n``) but then also fuses the
inner loops by shifting them against each other (``d``, ``D - 1 + d``, ...), which leaves
no loop a vectoriser can use.  This pass keeps isl's outer member and replaces the rest by
the statements in sequence, each over its own remaining indices: per row, each inner loop
runs on data that is still in the L1 cache.  The result is checked against every validity
dependence with isl; when the check fails, isl's schedule is kept.
"""
from __future__ import annotations

import islpy as isl

from .. import config
from ..lang import program as P
from .schedule import (Dependences, has_contraction, member_coefficients, program_order,
                       reduction_members_serial, run_scheduler, strided_reduction)
from .scop import Scop

#: the padded plane of one image channel (its points) from which a depthwise convolution
#: is fused over its channels (``_batch_indices``): ShuffleNet at batch 64, its 3x3
#: depthwise convolutions reading 30 x 30 planes 0.94 -> 0.56 ms, 58 x 58 1.68 -> 1.43;
#: 16 x 16 ones were 0.40 -> 0.50 ms
PLANE = 28 * 28


def isl_schedule(scop: Scop, deps: Dependences, fusion: str = "preserve",
                 team: int = 1) -> tuple:
    """``(schedule, strategy)``: isl's schedule and the strategy that made it, before
    the ``fuse_outer`` and ``serial_reductions`` passes.  ``auto`` is ``preserve`` for
    programs with a contraction (fusing the rows of two matmuls prevents tiling them),
    else ``max`` unless a reduction reads a tensor down its columns (``strided_reduction``:
    fused row by row, its inner loop would stride through memory) or ``max`` makes the
    outermost loop sequential (a reduction fused outside: atax), then ``preserve``.  When
    isl runs out of budget, ``max`` falls back to ``preserve`` and the others to program
    order (always legal; strategy ``program``).  ``team``: the threads of the parallel
    loops, among which a chain of products may share its rows (``row_blocks``: strategy
    ``rows``)."""
    if fusion == "auto":
        if has_contraction(scop):
            batched = batch_fused(scop, deps)
            if batched is not None:
                return batched, "max"
            blocked = row_blocks(scop, deps, team)
            if blocked is not None:
                return blocked, "rows"
            pieces = in_pieces(scop, deps)
            if pieces is not None:
                return pieces, "preserve"
            return isl_schedule(scop, deps, "preserve")
        if strided_reduction(scop) is not None:
            return isl_schedule(scop, deps, "preserve")
        fused, used = isl_schedule(scop, deps, "max")
        if used != "max":
            return fused, used
        outer = finish(fused, scop, deps, used).get_root().child(0)
        if outer.get_type() == isl.schedule_node_type.band and \
                outer.band_member_get_coincident(0):
            return fused, used
        return isl_schedule(scop, deps, "preserve")
    schedule = shared_rows(scop, deps) if fusion == "max" and not has_contraction(scop) \
        else None
    if schedule is None:
        schedule = run_scheduler(scop, deps, fusion)
    if schedule is None:
        if fusion == "max":
            return isl_schedule(scop, deps, "preserve")
        return program_order(scop), "program"
    return schedule, fusion


def in_pieces(scop: Scop, deps: Dependences) -> isl.Schedule | None:
    """isl's ``preserve`` schedule of a program with a contraction, one piece at a time:
    the statements in program order, cut before and after every reduction (with its
    init), each piece scheduled by isl alone, the pieces in sequence.  On the whole
    program isl's scheduler tries to fuse every reduction with its neighbours, which
    ``preserve`` then refuses (the contraction keeps a nest of its own, to be tiled): a
    convolution group (a padded copy, the window, bias and ReLU) took 35 ms, 6 in
    pieces (ResNet-18's 19 groups: 0.6 s of CPU in a cold compile), and the kernels of
    the benchmark models are the same but for the recurrent ones, whose many small
    products isl had fused in places (as fast either way).  None where the program is
    one piece, isl runs out of budget on a piece, or the sequence breaks a dependence."""
    order = sorted(scop.stmts, key=lambda s: (s.index, s.kind != "init"))
    pieces: list = []  # [[is a reduction, statements]]
    for s in order:
        reduction = bool(s.stmt.reduction_vars)
        last = pieces[-1] if pieces else None
        if last is not None and last[1][-1].index == s.index:
            last[1].append(s)  # a reduction's body after its init
        elif last is not None and not reduction and not last[0]:
            last[1].append(s)  # a run of statements that reduce nothing
        else:
            pieces.append([reduction, [s]])
    if len(pieces) < 2:
        return None
    schedule = None
    for _reduction, stmts in pieces:
        domain = isl.UnionSet.empty(scop.domain.get_space())
        for s in stmts:
            domain = domain.union(isl.UnionSet.from_set(s.domain))
        part = run_scheduler(scop, deps, "preserve", domain)
        if part is None:
            return None
        schedule = part if schedule is None else schedule.sequence(part)
    assert schedule is not None  # (two pieces or more)
    return schedule if respects(schedule, deps.scheduling_validity) else None


def finish(schedule: isl.Schedule, scop: Scop, deps: Dependences, strategy: str):
    """What the pipeline's ``fuse_outer`` and ``serial_reductions`` passes make of
    ``isl_schedule``'s result."""
    if strategy == "program":
        return schedule
    if strategy == "max":
        schedule = fuse_outer(schedule, scop, deps.scheduling_validity)
    return reduction_members_serial(schedule, scop)


def compute_schedule(scop: Scop, deps: Dependences, fusion: str = "preserve") -> isl.Schedule:
    """isl's schedule after the fusion passes (the start of a hand schedule)."""
    schedule, strategy = isl_schedule(scop, deps, fusion)
    return finish(schedule, scop, deps, strategy)


def fuse_outer(schedule: isl.Schedule, scop: Scop, validity: isl.UnionMap) -> isl.Schedule:
    band = schedule.get_root().child(0)
    if band.get_type() != isl.schedule_node_type.band or \
            not band.band_member_get_coincident(0) or has_contraction(scop):
        return schedule  # a contraction needs isl's whole band to be tiled
    fused = _clean_prefix(band)  # statement -> the index each fused member runs over
    k = len(next(iter(fused.values()), []))
    if k == 0 or not _shifted_below(band, k):
        return schedule
    node = band.band_split(k) if k < band.band_n_member() else band
    leaf = node.child(0).cut()  # keep the fused outer members only
    rebuilt = _in_sequence(leaf, scop, fused)
    if not respects(rebuilt, validity):
        config.log(1, "max fusion: rebuilt schedule violates a dependence; keeping isl's")
        return schedule
    return rebuilt


def _in_sequence(leaf, scop: Scop, fused: dict) -> isl.Schedule:
    """Below ``leaf``: the statements in program order, each over its indices that the
    bands above do not run (``fused``: statement -> those indices)."""
    ssts = sorted(scop.stmts, key=lambda s: (s.index, s.kind != "init"))
    filters = isl.UnionSetList.alloc(scop.ctx, len(ssts))
    for s in ssts:
        filters = filters.add(isl.UnionSet.from_set(s.domain))
    seq = leaf.insert_sequence(filters) if len(ssts) > 1 else leaf
    for i, s in enumerate(ssts):
        rest = [v for v in range(len(s.vars)) if v not in fused.get(s.name, [])]
        at = seq.child(i).child(0) if len(ssts) > 1 else seq
        seq = _insert_rest(at, s, rest, scop)
        seq = seq.parent().parent() if len(ssts) > 1 else seq
    return seq.get_schedule()


def batch_fused(scop: Scop, deps: Dependences) -> isl.Schedule | None:
    """A chain of contractions over a batch (``T(m, i, j) += W(i, k) * X(m, k, j)``, then
    ``Y(m, i, l) += T(m, i, j) * V(l, j)``: a Kronecker product, attention's two matrix
    products) fused over the batch indices they share, when each keeps two indices of its
    result for its own tiles (a ``Ti x Tj`` matrix product per batch element, and the
    temporary between them one batch element's worth: contracted).  Matrix products
    that share only their rows (an MLP) stay apart: fused over the rows, each would be a
    matrix-vector product per row.  One contraction with statements before or after it
    (a convolution's padded copy, its epilogue, a concatenation) is fused with them
    over its leading batch indices of two or more iterations (``_batch_indices``: the
    images, a batched product's batch and heads, a depthwise convolution's channels of
    large planes): one image's steps follow each other while its data is in the caches
    (SqueezeNet's fire modules at batch 64 wrote and read every image's temporaries in
    memory: three passes over 160 MB).  None when that does not apply."""
    bodies = [s for s in scop.stmts if s.kind == "body" and s.stmt.reduction_vars]
    if len(bodies) == 1 and any(s.kind == "body" and s is not bodies[0] for s in scop.stmts):
        cap = _batch_indices(bodies[0], [s for s in scop.stmts if s.kind == "body" and
                                         s is not bodies[0] and not s.stmt.reduction_vars])
        return shared_rows(scop, deps, cap) if cap >= 1 else None
    if len(bodies) < 2:
        return None
    # the batch of the products (a softmax's row reductions between them keep a row's
    # indices: attention's batch, heads and query)
    products = [s for s in bodies if len(P.reads(s.stmt.rhs)) > 1] or bodies
    cap = min(len(s.stmt.indices) - 2 for s in products)
    if all(_extent(s, d) == 1 for s in bodies for d in range(min(cap, len(s.vars)))):
        return None  # a batch of one: fused over it, nothing would run in parallel
    return shared_rows(scop, deps, cap, anchor=products[0]) if cap >= 1 else None


def row_blocks(scop: Scop, deps: Dependences, team: int) -> isl.Schedule | None:
    """A chain of three or more products over the same rows, through statements that
    keep them (an unrolled recurrent layer: ``H(b, g) +=! h(b, k) * R(g, k)``, the gates
    of row ``b``, the next ``h(b, ...)``), fused over blocks of rows, one per thread: each
    thread runs the whole chain for its rows in one parallel loop, where each product in
    a parallel loop of its own forked and joined the team twice per time step (an LSTM
    of 32 steps: 64 parallel regions a run).  The rows are the first index of the product
    with the fewest result indices, matched in every statement through the dependences
    (``_matched``); each block keeps at least 4 rows (a register tile's worth: fewer, and
    each thread would read all the weights for a row or two, where cores that share the
    columns read half each).  None when that does not apply."""
    if team < 2:
        return None
    products = [s for s in scop.stmts if s.kind == "body" and s.stmt.reduction_vars and
                len(P.reads(s.stmt.rhs)) > 1]
    if len(products) < 3:
        return None
    anchor = min(products, key=lambda s: (len(s.stmt.indices), s.index))
    if not anchor.stmt.indices or anchor.stmt.indices[0] not in anchor.vars:
        return None
    rows = _extent(anchor, anchor.vars.index(anchor.stmt.indices[0]))
    if not rows or rows < 4 * team:
        return None
    maps: list = []
    deps.validity.foreach_map(maps.append)
    found = _matched(scop, maps, anchor, 1)
    if found is None:
        return None
    for s in scop.stmts:  # every statement over all the rows, from 0
        v = found[s.name][0]
        if s.domain.dim_min_val(v).to_python() != 0 or _extent(s, v) != rows:
            return None
    block = -(-rows // team)
    node = _parallel_band(scop, lambda s, xs: [f"floor(({xs[found[s.name][0]]}) / {block})"])
    schedule = _in_sequence(node.child(0), scop, {})
    return schedule if respects(schedule, deps.validity) else None


def _batch_indices(sst, others=()) -> int:
    """How many leading indices of a contraction's result are batch indices of two or
    more iterations: every read along one also runs along the result's last index (the
    images of a convolution), or every read runs along it and along another index of the
    result (a batched matrix product: attention's batch and heads), or along it and the
    window of an image whose padded plane, a statement of ``others`` (the contraction's
    copies), holds at least ``PLANE`` points (a depthwise convolution's channels)."""
    idx = sst.stmt.indices
    names = [set(P.index_names(*r.indices)) for r in P.reads(sst.stmt.rhs)]
    k = 0
    while k < len(idx) - 2 and idx[k] in sst.vars:
        e = _extent(sst, sst.vars.index(idx[k]))
        if e is not None and e < 2:
            break
        rest = set(idx[k + 1:])
        if len(names) > 1 and all(idx[k] in n for n in names):
            if all(n & rest for n in names) or \
                    any(_points(o, k + 1) >= PLANE for o in others):
                k += 1
                continue
        if not all(idx[-1] in n for n in names if idx[k] in n):
            break
        k += 1
    return k


def _extent(sst, d: int):
    """The number of values of dimension ``d`` of the statement's domain; None when that
    is symbolic (then it may be several) and 0 for an empty domain."""
    span = sst.domain.dim_max_val(d).sub(sst.domain.dim_min_val(d))
    if not span.is_int():
        return 0 if sst.domain.is_empty() else None
    return max(0, span.to_python() + 1)


def _points(sst, k: int) -> int:
    """The points of the statement's domain per value of its first ``k`` indices (0 where
    that is symbolic)."""
    n = 1
    for d in range(k, len(sst.vars)):
        e = _extent(sst, d)
        if not e:
            return 0
        n *= e
    return n


def shared_rows(scop: Scop, deps: Dependences, cap: int | None = None,
                anchor=None) -> isl.Schedule | None:
    """Max fusion by construction, without isl's scheduler, for a program whose
    statements, connected by their dependences, all run over the same leading indices
    (rows: ``n`` of a softmax, ``n, g`` of a group norm) and no dependence crosses from
    one row to another: the first ``k`` indices of every statement (``k`` as large as
    that holds, at most ``cap``) become one band of parallel loops, and below it the
    statements run in program order, each over its other indices (legal: within a row,
    program order is the original order).  isl's scheduler would find the same band, but
    on a 5-d group norm it runs for seconds.  ``anchor`` (a statement): where the
    leading indices fall short of ``cap``, each statement's band may run over the
    variables that the dependences relate to ``anchor``'s first ``cap`` result indices,
    in any position (``_matched``).  None when no leading index is shared so."""
    if len(scop.stmts) < 2:
        return None
    k = min([len(s.vars) for s in scop.stmts] + ([cap] if cap is not None else []))
    maps: list = []
    deps.validity.foreach_map(maps.append)
    if not _connected([s.name for s in scop.stmts], maps):
        return None  # unrelated statements: which of their indices to fuse is arbitrary
    for m in maps:
        while k > 0:
            same = m
            for d in range(k):
                same = same.equate(isl.dim_type.in_, d, isl.dim_type.out, d)
            if m.is_subset(same):
                break
            k -= 1
    fused = {s.name: list(range(k)) for s in scop.stmts}
    if anchor is not None and cap is not None and k < cap:
        found = _matched(scop, maps, anchor, cap)
        if found is not None:
            k, fused = cap, found
    if k == 0:
        return None
    node = _parallel_band(scop, lambda s, xs: [xs[v] for v in fused[s.name]])
    schedule = _in_sequence(node.child(0), scop, fused)
    return schedule if respects(schedule, deps.validity) else None


def _parallel_band(scop: Scop, members):
    """A permutable band of parallel members at the root of ``scop``'s schedule,
    ``members(statement, names of its variables)`` the expressions of a statement's
    members (as many for every statement)."""
    parts, n = [], 0
    for s in scop.stmts:
        xs = [f"x{v}" for v in range(len(s.vars))]
        exprs = members(s, xs)
        n = len(exprs)
        parts.append(f"{s.name}[{', '.join(xs)}] -> [{', '.join(exprs)}]")
    band = isl.UnionMap.read_from_str(scop.ctx, "{ " + "; ".join(parts) + " }")
    node = isl.Schedule.from_domain(scop.domain).get_root().child(0).insert_partial_schedule(
        isl.MultiUnionPwAff.from_union_map(band))
    node = node.band_set_permutable(1)
    for d in range(n):
        node = node.band_member_set_coincident(d, 1)
    return node


def _matched(scop: Scop, maps: list, first, k: int) -> dict | None:
    """Statement -> the positions of its variables that run along the first ``k`` indices
    of the result of ``first`` (a product), each dependence relating them one to one (a
    statement that transposes the batch and heads of attention's result back to the
    sequence's order runs the heads as its third variable), or None where some
    statement has no such variables."""
    out = {first.name: [first.vars.index(i) for i in first.stmt.indices[:k]]}
    by_name = {s.name: s for s in scop.stmts}
    grown = True
    while grown:
        grown = False
        for m in maps:
            a, b = m.get_tuple_name(isl.dim_type.in_), m.get_tuple_name(isl.dim_type.out)
            for src, dst, kind in ((a, b, isl.dim_type.out), (b, a, isl.dim_type.in_)):
                if src not in out or dst in out:
                    continue
                other = isl.dim_type.in_ if kind == isl.dim_type.out else isl.dim_type.out
                pos = []
                for v in out[src]:
                    hit = [q for q in range(len(by_name[dst].vars))
                           if m.is_subset(m.equate(other, v, kind, q))]
                    if len(hit) != 1:
                        break
                    pos.append(hit[0])
                if len(pos) == k and len(set(pos)) == k:
                    out[dst] = pos
                    grown = True
    if len(out) != len(scop.stmts):
        return None
    for m in maps:  # every dependence keeps the fused variables equal
        a, b = m.get_tuple_name(isl.dim_type.in_), m.get_tuple_name(isl.dim_type.out)
        same = m
        for v, q in zip(out[a], out[b]):
            same = same.equate(isl.dim_type.in_, v, isl.dim_type.out, q)
        if not m.is_subset(same):
            return None
    return out


def _clean_prefix(band) -> dict:
    """Statement -> indices of its variables run by the band's leading members that are
    plain, unshifted, coincident loops over one variable of every statement."""
    coeffs = member_coefficients(band)
    out: dict = {name: [] for name in coeffs}
    for m in range(band.band_n_member()):
        if not band.band_member_get_coincident(m):
            break
        picks = {}
        for name, members in coeffs.items():
            c = members[m]
            if c is None or c[1] != 0 or sorted(c[0]) != [0] * (len(c[0]) - 1) + [1]:
                return out
            picks[name] = c[0].index(1)
        for name, v in picks.items():
            out[name].append(v)
    return out


def _shifted_below(band, k) -> bool:
    """Whether isl shifted or reversed statements against each other below the first
    ``k`` members of ``band`` (a member that is not just one index, or zero, of every
    statement), in this band or any band under it."""
    def bad(node, first):
        if node.get_type() == isl.schedule_node_type.band:
            for members in member_coefficients(node).values():
                for c in members[first:]:
                    if c is None or c[1] != 0 or any(x < 0 for x in c[0]) or \
                            sum(c[0]) > 1:
                        return True
            first = 0
        return any(bad(node.child(i), 0) for i in range(node.n_children()))

    return bad(band, k)


def _insert_rest(leaf, s, rest, scop):
    """A band over statement ``s``'s variables ``rest`` (those the fused members do not
    run); coincident where the statement has no dependence on itself but through a
    reordered reduction index; permutable when no member has such a dependence."""
    if not rest:
        return leaf
    xs = [f"x{n}" for n in range(len(s.vars))]
    m = isl.Map.read_from_str(scop.ctx, f"{{ {s.name}[{', '.join(xs)}] -> "
                                        f"[{', '.join(xs[v] for v in rest)}] }}")
    node = leaf.insert_partial_schedule(
        isl.MultiUnionPwAff.from_union_map(isl.UnionMap.from_map(m)))
    reads_self = any(r.tensor == s.stmt.tensor for r in P.reads(s.stmt.rhs))
    for j, v in enumerate(rest):
        var = s.vars[v]
        par = s.kind == "init" or (not reads_self and var not in s.stmt.reduction_vars)
        node = node.band_member_set_coincident(j, 1 if par else 0)
    node = node.band_set_permutable(0 if reads_self else 1)
    return node


def respects(schedule: isl.Schedule, validity: isl.UnionMap) -> bool:
    """Every dependence goes from an earlier to a later point of the schedule."""
    smap = schedule.get_map()
    d = validity.apply_domain(smap).apply_range(smap)
    if d.is_empty():
        return True
    ok = [True]

    def check(m):
        lex = isl.Map.lex_lt(m.get_space().domain())
        if not m.is_subset(lex):
            ok[0] = False

    d.foreach_map(check)
    return ok[0]


def _connected(names: list, maps: list) -> bool:
    """Whether the dependences ``maps`` connect all the statements ``names``."""
    group = {n: n for n in names}

    def root(n):
        while group[n] != n:
            n = group[n]
        return n

    for m in maps:
        a, b = m.get_tuple_name(isl.dim_type.in_), m.get_tuple_name(isl.dim_type.out)
        group[root(a)] = root(b)
    return len({root(n) for n in names}) == 1
