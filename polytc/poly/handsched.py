"""Schedules by hand: transformations of a schedule tree, replayed from a recipe.

A hand schedule is a *recipe*: where it starts (isl's schedule, or program order with
nothing fused) and a list of steps, each naming a band by its number in a pre-order walk
of the tree (``polytc.Schedule`` prints the numbers).  The recipe is plain data, so it
lives in ``Options.schedule``, keys the cache like any option and replays for other sizes.

Every step is checked against the dependences (``poly.legality``) as it is applied: a
step that runs a dependence backwards, or marks parallel a loop that carries one, raises
``ScheduleError`` naming the dependence and quoting the user's line.
"""
from __future__ import annotations

from typing import Callable

import islpy as isl

from ..diagnostics import ScheduleError
from . import transform as T
from . import legality as L
from .fusion import compute_schedule
from .schedule import Dependences, insert_mark
from .scop import Scop

#: most iterations ``unroll`` copies
MAX_UNROLL = 256


def bands(schedule: isl.Schedule) -> list:
    """The band nodes of a schedule tree in pre-order (how steps number them)."""
    out = []

    def visit(node):
        if node.get_type() == isl.schedule_node_type.band:
            out.append(node.copy())
        for i in range(node.n_children()):
            visit(node.child(i))

    visit(schedule.get_root())
    return out


def program_order(scop: Scop) -> isl.Schedule:
    """Each statement its own loop nest over its indices, in program order."""
    ctx = scop.ctx
    ssts = sorted(scop.stmts, key=lambda s: (s.index, s.kind != "init"))
    filters = isl.UnionSetList.alloc(ctx, len(ssts))
    for s in ssts:
        filters = filters.add(isl.UnionSet.from_set(s.domain))
    node = isl.Schedule.from_domain(scop.domain).get_root().child(0)
    if len(ssts) > 1:
        node = node.insert_sequence(filters)
    for i, s in enumerate(ssts):
        leaf = node.child(i).child(0) if len(ssts) > 1 else node
        if s.vars:
            xs = ", ".join(f"x{n}" for n in range(len(s.vars)))
            parts = ", ".join(f"{{ {s.name}[{xs}] -> [(x{n})] }}" for n in range(len(s.vars)))
            mupa = isl.MultiUnionPwAff.read_from_str(ctx, f"[{parts}]")
            leaf = leaf.insert_partial_schedule(mupa).band_set_permutable(1)
        node = leaf.parent().parent() if len(ssts) > 1 else leaf
    return node.get_schedule()


def start(scop: Scop, deps: Dependences, step) -> isl.Schedule:
    if step[1] == "program":
        return program_order(scop)
    return compute_schedule(scop, deps, step[2] if len(step) > 2 else "auto")


def replay(scop: Scop, deps: Dependences, steps) -> isl.Schedule:
    """The schedule of a recipe, every step checked.

    A recipe numbers the bands of the sizes it was made at.  At sizes where a statement
    runs no instance (a size is 0) its bands are gone, so a step may name a band that no
    longer exists, or another one: a recipe that fails there replays as its start
    schedule alone (legal, and the same result), as a size may be 0."""
    steps = list(steps)
    if not steps or steps[0][0] != "from":
        steps.insert(0, ("from", "isl", "auto"))
    first = schedule = start(scop, deps, steps[0])
    try:
        for step in steps[1:]:
            schedule = apply(schedule, step, scop, deps)
    except ScheduleError:
        if not any(s.domain.is_empty() for s in scop.stmts):
            raise
        return first
    return schedule


def describe(step) -> str:
    name, *args = step
    return f"{name}({', '.join(repr(tuple(a)) if isinstance(a, list) else repr(a) for a in args)})"


def apply(schedule: isl.Schedule, step, scop: Scop, deps: Dependences) -> isl.Schedule:
    name, band, *args = step
    found = bands(schedule)
    where = describe(step)
    if not isinstance(band, int) or not 0 <= band < len(found):
        raise ScheduleError(f"{where}: there is no band {band!r}; this schedule has bands "
                            f"0 to {len(found) - 1}" if found else
                            f"{where}: this schedule has no bands (no loops)")
    node = found[band]
    new = _STEPS[name](node, scop, deps, where, *args, bands=found).get_schedule()
    check(new, scop, deps, where)
    return new


def check(schedule: isl.Schedule, scop: Scop, deps: Dependences, where: str) -> None:
    """Raise ``ScheduleError`` unless ``schedule`` respects every dependence and every
    ``parallel``/``simd`` loop carries none."""
    bad = L.order_violation(schedule, scop, deps)
    if bad is not None:
        raise ScheduleError(f"{where} is illegal: it runs the {bad.describe(scop)} "
                            "backwards", L.span_of(scop, bad.sink),
                            hint="the sink must run after the source; undo the step or "
                                 "transform the loops so that the dependence points forward")
    for node, kind in _marked_loops(schedule):
        found = L.carried(node, 0, scop, deps)
        if found:
            raise ScheduleError(
                f"{where}: the loop marked {kind} is not parallel: it carries the "
                f"{found[0].describe(scop)}", L.span_of(scop, found[0].sink),
                hint="mark a loop whose iterations are independent (schedule.loops shows "
                     "which ones are)")


def _marked_loops(schedule):
    out = []

    def visit(node):
        if node.get_type() == isl.schedule_node_type.mark:
            kind = node.mark_get_id().get_name().partition(":")[0]
            if kind in ("parallel", "simd") and \
                    node.child(0).get_type() == isl.schedule_node_type.band:
                out.append((node.child(0).copy(), kind))
        for i in range(node.n_children()):
            visit(node.child(i))

    visit(schedule.get_root())
    return out


# --- the steps ------------------------------------------------------------------------
def _member(node, m, where):
    n = node.band_n_member()
    if not isinstance(m, int) or not 0 <= m < n:
        raise ScheduleError(f"{where}: the band has loops 0 to {n - 1}, not {m!r}")
    return m


def _isolate(node, m):
    """The band whose first member is member ``m`` of ``node``."""
    return node.band_split(m).child(0) if m > 0 else node


def _tile(node, scop, deps, where, sizes, bands):
    sizes = [sizes] if isinstance(sizes, int) else list(sizes) \
        if isinstance(sizes, (list, tuple)) else []
    n = node.band_n_member()
    if not sizes or len(sizes) > n or \
            any(not isinstance(s, int) or not 1 <= s < 2 ** 31 for s in sizes):
        raise ScheduleError(f"{where}: give 1 to {n} positive tile sizes for this band")
    if len(sizes) < n:
        node = node.band_split(len(sizes))
    return T.tile(node, sizes)


def _interchange(node, scop, deps, where, a, b, bands):
    a, b = _member(node, a, where), _member(node, b, where)
    order = list(range(node.band_n_member()))
    order[a], order[b] = order[b], order[a]
    permutable = node.band_get_permutable()
    return T.permute(node, order).band_set_permutable(permutable)


def _split(node, scop, deps, where, at, bands):
    n = node.band_n_member()
    if not isinstance(at, int) or not 0 < at < n:
        raise ScheduleError(f"{where}: split a band of {n} loops at 1 to {n - 1}")
    return node.band_split(at)


def _fuse(node, scop, deps, where, other, bands):
    if not isinstance(other, int) or not 0 <= other < len(bands):
        raise ScheduleError(f"{where}: there is no band {other!r}")
    b = bands[other]
    a_filter, b_filter = node.parent(), b.parent()
    seq = a_filter.parent() if a_filter.has_parent() else None
    if seq is None or a_filter.get_type() != isl.schedule_node_type.filter or \
            seq.get_type() != isl.schedule_node_type.sequence or \
            not b_filter.has_parent() or not b_filter.parent().is_equal(seq) or \
            b_filter.get_child_position() != a_filter.get_child_position() + 1:
        raise ScheduleError(f"{where}: only a band and the band of the next statement "
                            "group in the same sequence can fuse",
                            hint="print the schedule to see which bands are siblings")
    if node.band_n_member() != b.band_n_member():
        raise ScheduleError(f"{where}: the bands have {node.band_n_member()} and "
                            f"{b.band_n_member()} loops; split the deeper one first")
    i = a_filter.get_child_position()
    filters = [seq.child(k).filter_get_filter() for k in range(seq.n_children())]
    pa, pb = node.band_get_partial_schedule(), b.band_get_partial_schedule()
    perm = node.band_get_permutable() and b.band_get_permutable()
    coinc = [node.band_member_get_coincident(m) and b.band_member_get_coincident(m)
             for m in range(node.band_n_member())]
    if i + 2 < len(filters):
        seq = seq.order_after(union_all(filters[i + 2:]))
    if i > 0:
        seq = seq.order_before(union_all(filters[:i]))
    seq = seq.child(1).child(0).delete().parent().parent()  # b's band, then a's
    seq = seq.child(0).child(0).delete().parent().parent()
    fused = seq.insert_partial_schedule(pa.union_add(pb)).band_set_permutable(int(perm))
    for m, c in enumerate(coinc):
        fused = fused.band_member_set_coincident(m, int(c))
    return fused


def union_all(sets):
    out = sets[0]
    for s in sets[1:]:
        out = out.union(s)
    return out


def _distribute(node, scop, deps, where, bands):
    """One copy of the band per statement group, in program order."""
    names = T.statements_below(node)
    order = sorted((s for s in scop.stmts if s.name in names),
                   key=lambda s: (s.index, s.kind != "init"))
    if len(order) < 2:
        raise ScheduleError(f"{where}: the band runs one statement; nothing to distribute")
    for s in order[:-1]:
        node = node.order_before(isl.UnionSet.from_set(s.domain))
    return node


def _parallel(node, scop, deps, where, m, bands):
    m = _member(node, m, where)
    return insert_mark(_isolate(node, m), "parallel")


def _vectorize(node, scop, deps, where, bands):
    if any(n.get_type() == isl.schedule_node_type.band for n in _descendants(node)):
        raise ScheduleError(f"{where}: only the innermost band's last loop can be "
                            "vectorised; this band has bands below it")
    last = _isolate(node, node.band_n_member() - 1)
    if last.parent().get_type() == isl.schedule_node_type.mark and \
            last.parent().mark_get_id().get_name().startswith("simd:"):
        raise ScheduleError(f"{where}: this loop is vectorised already")
    return insert_mark(last, "simd")


def _unroll(node, scop, deps, where, m, bands):
    m = _member(node, m, where)
    part = L.member_map(node.band_get_partial_schedule_union_map()
                         .intersect_domain(node.get_domain()), m, node.band_n_member())
    values = part.range()
    trips = 0
    if not values.is_empty():
        lo = values.lexmin().sample_point().get_coordinate_val(isl.dim_type.set, 0)
        hi = values.lexmax().sample_point().get_coordinate_val(isl.dim_type.set, 0)
        trips = hi.to_python() - lo.to_python() + 1
    if trips > MAX_UNROLL:
        raise ScheduleError(f"{where}: the loop runs {trips} times; unroll at most "
                            f"{MAX_UNROLL} (tile it first and unroll the point loop)")
    return node.band_member_set_ast_loop_type(m, isl.ast_loop_type.unroll)


def _descendants(node):
    out = []

    def visit(n):
        for i in range(n.n_children()):
            out.append(n.child(i))
            visit(n.child(i))

    visit(node)
    return out


_STEPS: dict[str, Callable[..., isl.ScheduleNode]] = {
    "tile": _tile, "interchange": _interchange, "split": _split, "fuse": _fuse,
    "distribute": _distribute, "parallel": _parallel, "vectorize": _vectorize,
    "unroll": _unroll}
