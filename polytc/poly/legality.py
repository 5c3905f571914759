"""Is a schedule legal, and if not, which dependence does it break?

Two questions, both answered with isl on the dependences of ``poly.schedule``:

* **order**: every dependence must run its source before its sink.  The reorderable
  reductions' self-dependences are relaxed as in the scheduler (``Dependences.relaxed``),
  so reordering the iterations of a ``+=`` is legal.
* **parallel loops**: a loop may run its iterations at once only when no dependence
  between two instances inside one iteration of the loops around it crosses from one of
  its iterations to another ("carried" by the loop).  Here the reductions' own
  dependences count: updating one accumulator from two threads is a race.

Answers name the dependence (kind, statements, tensor, one pair of instances) and quote the
user's line of its sink, which is what a hand-made schedule's error message shows.
"""
from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from .schedule import Dependences
from .scop import Scop

KINDS = (("flow", "raw"), ("anti", "war"), ("output", "waw"))


@dataclass(frozen=True)
class Dependence:
    """One piece of a dependence relation between two statements, with an example pair
    of instances (``source``/``sink`` are points as ``{name: value}`` of the indices)."""

    kind: str  # flow | anti | output | order (a reduction's element-wise ordering)
    source: str  # statement names, e.g. "S0", "I1"
    sink: str
    tensor: str
    source_point: dict
    sink_point: dict

    def describe(self, scop: Scop | None = None) -> str:
        def inst(name, pt):
            return f"{name}({', '.join(f'{k}={v}' for k, v in pt.items())})"

        what = {"flow": "flow (read after write)", "anti": "anti (write after read)",
                "output": "output (write after write)",
                "order": "ordering"}.get(self.kind, self.kind)
        text = (f"{what} dependence {inst(self.source, self.source_point)} -> "
                f"{inst(self.sink, self.sink_point)} on '{self.tensor}'")
        if scop is not None:
            lines = [_line(scop, self.source), _line(scop, self.sink)]
            text += f" ({lines[0]} -> {lines[1]})" if lines[0] != lines[1] else f" ({lines[0]})"
        return text


def _stmt(scop: Scop, name: str):
    return next(s for s in scop.stmts if s.name == name)


def _line(scop: Scop, name: str) -> str:
    s = _stmt(scop, name)
    what = "init of " if s.kind == "init" else ""
    if s.stmt.span is None:
        return f"{what}statement {s.index}"
    return f"{what}line {s.stmt.span.location().rsplit(':', 2)[-2]}"


def span_of(scop: Scop, name: str):
    return _stmt(scop, name).stmt.span


def _point(scop: Scop, name: str, values) -> dict:
    return dict(zip(_stmt(scop, name).vars, values))


def _example(scop: Scop, kind: str, pairs: isl.Map) -> Dependence:
    """A ``Dependence`` for one pair of instances of the map ``pairs`` (src -> sink)."""
    src, dst = pairs.get_tuple_name(isl.dim_type.in_), pairs.get_tuple_name(isl.dim_type.out)
    pt = pairs.wrap().lexmin().sample_point()
    n_in = pairs.dim(isl.dim_type.in_)
    vals = [pt.get_coordinate_val(isl.dim_type.set, i).to_python()
            for i in range(n_in + pairs.dim(isl.dim_type.out))]
    tensor = _stmt(scop, dst if kind == "anti" else src).stmt.tensor
    return Dependence(kind, src, dst, tensor, _point(scop, src, vals[:n_in]),
                      _point(scop, dst, vals[n_in:]))


def _maps(umap: isl.UnionMap) -> list:
    out: list = []
    umap.foreach_map(out.append)
    return out


def _kind_of(deps: Dependences, piece: isl.Map) -> str:
    u = isl.UnionMap.from_map(piece)
    for kind, attr in KINDS:
        if not getattr(deps, attr).intersect(u).is_empty():
            return kind
    return "order"


def order_violation(schedule: isl.Schedule, scop: Scop, deps: Dependences):
    """The first dependence ``schedule`` runs backwards (or at the same time), or None."""
    smap = schedule.get_map().intersect_domain(scop.domain)
    not_after = smap.lex_ge_union_map(smap)  # pairs (x, y) with time(x) >= time(y)
    validity = deps.relaxed if deps.relaxed is not None else deps.validity
    for piece in _maps(validity.intersect(not_after)):
        if piece.is_empty():
            continue
        kind = _kind_of(deps, piece)
        if kind != "order":  # the example from the original relation where there is one
            orig = getattr(deps, dict(KINDS)[kind]).intersect(isl.UnionMap.from_map(piece))
            piece = _maps(orig)[0]
        return _example(scop, kind, piece)
    return None


def _across(node: isl.ScheduleNode, member: int):
    """The statements below the band ``node``, the pairs of their instances in the same
    iteration of the loops around member ``member``, and those in the same iteration of
    the member itself."""
    dom = node.get_domain()
    outer = node.get_prefix_schedule_union_map().intersect_domain(dom)
    band = node.band_get_partial_schedule_union_map().intersect_domain(dom)
    n = node.band_n_member()
    for m in range(member):
        outer = outer.flat_range_product(member_map(band, m, n))
    this = member_map(band, member, n)
    return dom, outer.apply_range(outer.reverse()), this.apply_range(this.reverse())


def carried(node: isl.ScheduleNode, member: int, scop: Scop, deps: Dependences) -> list:
    """The dependences (``Dependence``s, one per statement pair and kind) that member
    ``member`` of the band ``node`` carries: an empty list means the loop is parallel."""
    dom, same_outer, same_here = _across(node, member)
    out = []
    for kind, attr in KINDS:
        d = getattr(deps, attr).intersect_domain(dom).intersect_range(dom)
        for piece in _maps(d.intersect(same_outer).subtract(same_here)):
            if not piece.is_empty():
                out.append(_example(scop, kind, piece))
    return out


def carried_relation(node, member: int, deps: Dependences) -> isl.UnionMap:
    """The dependences ``carried`` finds, as one relation."""
    dom, same_outer, same_here = _across(node, member)
    d = deps.validity.intersect_domain(dom).intersect_range(dom)
    return d.intersect(same_outer).subtract(same_here).coalesce()


def member_map(band: isl.UnionMap, m: int, n: int) -> isl.UnionMap:
    """The band's partial schedule restricted to its member ``m``."""
    out = []

    def one(mp):
        out.append(mp.project_out(isl.dim_type.out, m + 1, n - m - 1)
                   .project_out(isl.dim_type.out, 0, m))

    band.foreach_map(one)
    if not out:
        return isl.UnionMap.empty(band.get_space())
    res = isl.UnionMap.from_map(out[0])
    for mp in out[1:]:
        res = res.union(isl.UnionMap.from_map(mp))
    return res
