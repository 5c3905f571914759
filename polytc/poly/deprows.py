"""Dependences as rows of a table: who depends on whom, on which tensor, how far.

``dependence_rows`` splits the flow (RAW), anti (WAR) and output (WAW) relations into
one ``DepRow`` per (source, sink) statement pair and measures each one's distance: in
a schedule's time space when a schedule is given (sink time minus source time, per
schedule dimension), else in the iteration space of a statement that depends on itself.
Every isl object is re-read into a fresh context, so callers' contexts are never mixed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import islpy as isl


@dataclass(frozen=True)
class DepRow:
    """One dependence between two statements, as a row of a table."""

    kind: str  # "flow" | "anti" | "output"
    source: str  # statement names, e.g. "S0", "I1"
    sink: str
    tensor: str  # the tensor the dependence is on ("?" when writes do not say)
    relation: str  # isl text of the map source -> sink
    distance: str  # e.g. "(0, 1)", "(0, 0+)", or "-" when not measured
    carried: int | None = None  # first dimension whose distance is not always 0

    def describe(self) -> str:
        """One line of English, e.g. ``flow dependence S0 -> S1 on C, distance (0, +)``."""
        text = f"{self.kind} dependence {self.source} -> {self.sink} on {self.tensor}"
        if self.distance != "-":
            text += f", distance {self.distance}"
        if self.carried is not None:
            text += f", carried by dimension {self.carried}"
        return text


def dependence_rows(writes, raw, war, waw, schedule=None) -> list:
    """One ``DepRow`` per statement pair of each relation, flow first.

    ``writes``: statement -> tensor accesses (each statement writes one tensor);
    ``raw``/``war``/``waw``: ``isl.UnionMap``s (``None`` counts as empty); isl objects
    and their text are both accepted;
    ``schedule``: an ``isl.Schedule`` (or a statement -> time ``isl.UnionMap``) in
    whose time space distances are measured.  Without one, a statement's dependence on
    itself is measured in its iteration space and other pairs get ``"-"``."""
    ctx = isl.Context()
    target = _written_tensors(_reread(ctx, writes, isl.UnionMap))
    sched = None
    if schedule is not None:
        smap = schedule_map(schedule) if isinstance(schedule, isl.Schedule) else schedule
        sched = _padded(_reread(ctx, smap, isl.UnionMap))
    rows = []
    for kind, rel in zip(("flow", "anti", "output"), (raw, war, waw)):
        maps: list = []
        _reread(ctx, rel, isl.UnionMap).foreach_map(maps.append)
        for m in maps:
            src = m.get_tuple_name(isl.dim_type.in_) or "?"
            snk = m.get_tuple_name(isl.dim_type.out) or "?"
            tensor = target.get(snk if kind == "anti" else src, "?")
            if sched is not None:
                delta = _deltas(isl.UnionMap.from_map(m).apply_domain(sched)
                                .apply_range(sched))
            elif src == snk:
                delta = _deltas(isl.UnionMap.from_map(m))
            else:
                delta = None
            distance, carried = _describe_deltas(delta)
            rows.append(DepRow(kind, src, snk, tensor, str(m), distance, carried))
    order = {"flow": 0, "anti": 1, "output": 2}
    return sorted(rows, key=lambda r: (order[r.kind], statement_key(r.source),
                                       statement_key(r.sink)))


def statement_key(name: str):
    """Sort key putting polytc's statement names in program order: ``I<k>`` (a
    reduction's init) before ``S<k>``, by ``k``; other names after, by name."""
    m = re.fullmatch(r"([A-Za-z_]+)(\d+)", name or "")
    return (int(m.group(2)), m.group(1) != "I", name) if m else (1 << 30, True, name or "")


def schedule_map(schedule):
    """Statement instance -> time for an ``isl.Schedule``: isl's ``get_map``, or, for a
    tree with extension nodes (shared-memory copies), the same flattening done here:
    band members and sequence positions, top down, zeros padding the shorter paths.
    Statements added by extensions are left out."""
    try:
        return schedule.get_map()
    except isl.Error:
        pass
    out = []
    T = isl.schedule_node_type

    def walk(node, prefix):
        t = node.get_type()
        if prefix.is_empty():
            return
        if t == T.leaf:
            out.append(prefix)
            return
        if t == T.filter:
            prefix = prefix.intersect_domain(node.filter_get_filter())
        elif t == T.band:
            part = node.band_get_partial_schedule_union_map()
            prefix = prefix.flat_range_product(part.intersect_domain(prefix.domain()))
        for k in range(node.n_children()):
            sub = prefix
            if t in (T.sequence, T.set):
                pos = isl.Set.read_from_str(prefix.get_ctx(), f"{{ [{k}] }}")
                sub = prefix.flat_range_product(isl.UnionMap.from_domain_and_range(
                    prefix.domain(), isl.UnionSet.from_set(pos)))
            walk(node.child(k), sub)

    root = schedule.get_root()
    walk(root, isl.UnionMap.from_domain(schedule.get_domain()))
    res = isl.UnionMap.empty(schedule.get_domain().get_space())
    for m in out:
        res = res.union(m)
    return _padded(res)


def _reread(ctx, obj, cls):
    """``obj`` (an isl object, its text, or None for empty) as a ``cls`` in ``ctx``."""
    if obj is None:
        return cls.read_from_str(ctx, "{ }")
    return cls.read_from_str(ctx, str(obj))


def _written_tensors(writes) -> dict:
    """Statement name -> the tensor it writes."""
    out: dict = {}

    def one(m):
        name = m.get_tuple_name(isl.dim_type.out)
        if name:
            out.setdefault(m.get_tuple_name(isl.dim_type.in_), name)
    writes.foreach_map(one)
    return out


def _padded(sched):
    """``sched`` with every range in one anonymous space: shorter ones padded with 0s."""
    maps = []
    sched.foreach_map(maps.append)
    depth = max((m.dim(isl.dim_type.out) for m in maps), default=0)
    out = isl.UnionMap.empty(sched.get_space())
    for m in maps:
        n = m.dim(isl.dim_type.out)
        if n < depth:
            m = m.add_dims(isl.dim_type.out, depth - n)
            for pos in range(n, depth):
                m = m.fix_val(isl.dim_type.out, pos, isl.Val.zero(m.get_ctx()))
        m = m.reset_tuple_id(isl.dim_type.out)
        out = out.union(isl.UnionMap.from_map(m))
    return out


def _deltas(umap):
    """The one set of differences of ``umap`` (same space on both sides), or None."""
    sets = []
    umap.deltas().foreach_set(sets.append)
    if not sets:
        return None
    out = sets[0]
    for s in sets[1:]:  # cannot happen for padded schedules; keep the first space
        if s.get_space().is_equal(out.get_space()):
            out = out.union(s)
    return out


def _describe_deltas(delta):
    """``("(0, +)", carried dimension)`` for a set of distance vectors."""
    if delta is None or delta.is_empty():
        return "-", None
    parts, carried = [], None
    for d in range(delta.dim(isl.dim_type.set)):
        lo, hi = _bound(delta.dim_min_val(d)), _bound(delta.dim_max_val(d))
        if lo is not None and lo == hi:
            parts.append(str(lo))
        elif lo is not None and lo > 0:
            parts.append("+")
        elif hi is not None and hi < 0:
            parts.append("-")
        elif lo is not None and lo == 0:
            parts.append("0+")
        elif hi is not None and hi == 0:
            parts.append("0-")
        else:
            parts.append("*")
        if carried is None and parts[-1] != "0":
            carried = d
    return "(" + ", ".join(parts) + ")", carried


def _bound(val):
    """An isl ``Val`` as an int, or None when infinite, NaN or not an integer."""
    if val.is_nan() or val.is_infty() or val.is_neginfty() or not val.is_int():
        return None
    return int(val.to_python())
