"""Fusion of outer loops, distribution of inner ones (``Options.fusion == "max"``).

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
from .schedule import has_contraction
from .scop import Scop


def fuse_outer(schedule: isl.Schedule, scop: Scop, validity: isl.UnionMap) -> isl.Schedule:
    band = schedule.get_root().child(0)
    if band.get_type() != isl.schedule_node_type.band or band.band_n_member() < 2 or \
            not band.band_member_get_coincident(0) or not _shifted(band) or \
            has_contraction(scop):
        return schedule  # a contraction needs isl's whole band to be tiled
    leaf = band.band_split(1).child(0).cut()  # keep the fused outer member only
    ssts = sorted(scop.stmts, key=lambda s: (s.index, s.kind != "init"))
    filters = isl.UnionSetList.alloc(scop.ctx, len(ssts))
    for s in ssts:
        filters = filters.add(isl.UnionSet.from_set(s.domain))
    seq = leaf.insert_sequence(filters)
    for i, s in enumerate(ssts):
        seq = _insert_rest(seq.child(i).child(0), [s], scop).parent().parent()
    fused = seq.get_schedule()
    if not respects(fused, validity):
        config.log(1, "max fusion: rebuilt schedule violates a dependence; keeping isl's")
        return schedule
    return fused


def _shifted(band) -> bool:
    """Whether isl shifted statements against each other in the inner members (a member
    that is not just one index, or zero, of every statement)."""
    from .schedule import member_coefficients

    for members in member_coefficients(band).values():
        for c in members[1:]:
            if c is None or c[1] != 0 or sorted(c[0])[-1:] not in ([0], [1], []) or \
                    sum(abs(x) for x in c[0]) > 1:
                return True
    return False


def _insert_rest(leaf, ssts, scop):
    """A band over each statement's indices but the first (the fused one), padded with
    zeros; coincident where a statement has no dependence on itself but through a
    reordered reduction index; permutable when no member has such a dependence."""
    depth = max(len(s.vars) - 1 for s in ssts)
    if depth <= 0:
        return leaf
    umap = isl.UnionMap.empty(isl.Space.params_alloc(scop.ctx, 0))
    for s in ssts:
        xs = [f"x{n}" for n in range(len(s.vars))]
        dims = xs[1:] + ["0"] * (depth - len(xs) + 1)
        m = isl.Map.read_from_str(scop.ctx, f"{{ {s.name}[{', '.join(xs)}] -> [{', '.join(dims)}] }}")
        umap = umap.union(isl.UnionMap.from_map(m))
    node = leaf.insert_partial_schedule(isl.MultiUnionPwAff.from_union_map(umap))
    alone = len(ssts) == 1
    s = ssts[0]
    reads_self = any(r.tensor == s.stmt.tensor for r in P.reads(s.stmt.rhs))
    for m in range(depth):
        var = s.vars[m + 1] if m + 1 < len(s.vars) else None
        par = alone and var is not None and (s.kind == "init" or (
            not reads_self and var not in s.stmt.reduction_vars))
        node = node.band_member_set_coincident(m, 1 if par else 0)
    node = node.band_set_permutable(1 if alone and not reads_self else 0)
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
