"""Dependences from isl's flow analysis and a schedule from isl's scheduler."""
from __future__ import annotations

from dataclasses import dataclass

import os

import islpy as isl

from . import schedworker
from .scop import Scop


@dataclass
class Dependences:
    raw: isl.UnionMap  # flow: write -> read
    war: isl.UnionMap  # anti: read -> write
    waw: isl.UnionMap  # output: write -> write
    #: validity with the self-dependences of reductions relaxed (see ``relax``)
    relaxed: isl.UnionMap | None = None
    #: tensor elements read before any statement writes them
    live_in: isl.UnionSet | None = None

    def reads_before_write(self, tensor: str) -> bool:
        names: list = []
        if self.live_in is None:  # not computed: every tensor may be read first
            return True
        self.live_in.foreach_set(lambda s: names.append(s.get_tuple_name()))
        return tensor in names

    @property
    def validity(self) -> isl.UnionMap:
        return self.raw.union(self.war).union(self.waw)

    @property
    def scheduling_validity(self) -> isl.UnionMap:
        """What the scheduler must respect: ``relaxed`` where reductions may reorder."""
        return self.relaxed if self.relaxed is not None else self.validity

    def __str__(self):
        out = f"RAW: {self.raw}\nWAR: {self.war}\nWAW: {self.waw}"
        if self.relaxed is not None:
            out += f"\nvalidity with reductions reordered: {self.relaxed}"
        return out


def original_schedule(scop: Scop) -> isl.UnionMap:
    """Program order: statements in sequence, each over its indices lexicographically."""
    depth = max((len(s.vars) for s in scop.stmts), default=0)
    out = isl.UnionMap.empty(isl.Space.params_alloc(scop.ctx, 0))
    for pos, s in enumerate(scop.stmts):
        xs = [f"x{n}" for n in range(len(s.vars))]
        dims = [str(pos)] + xs + ["0"] * (depth - len(xs))
        text = f"{{ {s.name}[{', '.join(xs)}] -> [{', '.join(dims)}] }}"
        m = isl.Map.read_from_str(scop.ctx, text)
        out = out.union(isl.UnionMap.from_map(m.intersect_domain(s.domain)))
    return out


def _program_tree(scop: Scop) -> isl.Schedule:
    """``original_schedule`` as a tree: a sequence of the statements, each a band over
    its indices.  isl's dataflow analysis takes the sequence's order without comparing
    the statements' loops (a convolution group's dependences 17 -> 14 ms)."""
    filters = isl.UnionSetList.alloc(scop.ctx, len(scop.stmts))
    for s in scop.stmts:
        filters = filters.add(isl.UnionSet.from_set(s.domain))
    node = isl.Schedule.from_domain(scop.domain).get_root().child(0)
    if len(scop.stmts) > 1:
        node = node.insert_sequence(filters)
    for k, s in enumerate(scop.stmts):
        if not s.vars:
            continue
        xs = ", ".join(f"x{n}" for n in range(len(s.vars)))
        band = isl.MultiUnionPwAff.from_union_map(
            isl.UnionMap.read_from_str(scop.ctx, f"{{ {s.name}[{xs}] -> [{xs}] }}"))
        if len(scop.stmts) > 1:
            node = node.child(k).child(0).insert_partial_schedule(band).parent().parent()
        else:
            node = node.insert_partial_schedule(band)
    return node.get_schedule()


def dependences(scop: Scop) -> Dependences:
    tree = _program_tree(scop)
    flow_raw = (isl.UnionAccessInfo.from_sink(scop.reads)
                .set_must_source(scop.writes)
                .set_schedule(tree)
                .compute_flow())
    raw = flow_raw.get_may_dependence()
    live_in = flow_raw.get_may_no_source()  # reads of values no statement wrote
    flow = (isl.UnionAccessInfo.from_sink(scop.writes)
            .set_must_source(scop.writes)
            .set_may_source(scop.reads)
            .set_schedule(tree)
            .compute_flow())
    waw = flow.get_must_dependence()
    war = flow.get_may_dependence().subtract(waw)
    deps = Dependences(raw.coalesce(), war.coalesce(), waw.coalesce())
    deps.live_in = live_in.range()
    deps.relaxed = relax(scop, deps.validity)
    return deps


def reassociable(sst) -> bool:
    """A body statement ``T(lhs) op= f(...)`` with an associative, commutative ``op``
    whose right-hand side does not read ``T``."""
    from ..lang import program as P

    st = sst.stmt
    return (sst.kind == "body" and st.op in ("+", "*", "min", "max") and bool(st.reduction_vars)
            and not any(e.tensor == st.tensor for e in P.reads(st.rhs)))


def relax(scop: Scop, validity: isl.UnionMap) -> isl.UnionMap:
    """Validity constraints that let the iterations of reductions run in any order, as
    Tensor Comprehensions does: a reduction's dependences on itself are dropped and its
    value-based dependences with other statements become memory-based ones (every
    instance of an earlier statement touching an element precedes every reduction
    instance updating it, and every later one follows).  The self-dependences stay
    coincidence constraints, so a reduction loop is never made parallel."""
    order = {s.name: (s.index, 0 if s.kind == "init" else 1) for s in scop.stmts}
    out = validity
    for s in scop.stmts:
        if not reassociable(s):
            continue
        dom = isl.UnionSet.from_set(s.domain)
        out = out.subtract(validity.intersect_domain(dom).intersect_range(dom))
        target = isl.UnionSet.from_set(scop.read_set("{ " + scop._whole(s.stmt.tensor) + " }"))
        mine = s.writes.intersect_range(target)
        for x in scop.stmts:
            if x is s:
                continue
            theirs = x.writes.union(x.reads).intersect_range(target)
            pairs = theirs.apply_range(mine.reverse())  # x -> s on the same element
            if pairs.is_empty():
                continue
            out = out.union(pairs if order[x.name] < order[s.name] else pairs.reverse())
    return out.coalesce()


def has_contraction(scop: Scop) -> bool:
    """A reduction into a result of two or more dimensions with an input that does not
    depend on one of them (matmul, convolution: reuse that register tiles exploit)."""
    from ..lang import program as P

    for s in scop.stmts:
        st = s.stmt
        if len(st.indices) < 2 or not st.reduction_vars:
            continue
        for r in P.reads(st.rhs):
            used = P.index_names(*r.indices)
            if set(st.indices) - used:
                return True
    return False


def strided_reduction(scop: Scop) -> tuple | None:
    """``(statement, tensor)`` of a reduction that reads a tensor down its columns: the
    tensor's last (contiguous) subscript uses result indices only and another subscript
    a reduced one (``y(j) +=! A(i, j) * t(i)``, a column sum).  Fused row by row, each
    result's reduction loop would stride through the tensor a row length at a time (a
    vector-matrix product 75x slower than isl's own band, which the tiler interchanges);
    None when no reduction does so."""
    from ..lang import program as P

    for s in scop.stmts:
        st = s.stmt
        reduced = set(st.reduction_vars)
        if s.kind != "body" or not reduced:
            continue
        for r in P.reads(st.rhs):
            if len(r.indices) < 2:
                continue
            last = P.index_names(r.indices[-1])
            if last and not last & reduced and reduced & P.index_names(*r.indices[:-1]):
                return s.name, r.tensor
    return None


def configure(ctx: isl.Context, fusion: str, contraction: bool = False) -> dict:
    """isl scheduler options for a fusion strategy (see docs/scheduling.md); a program
    with a contraction gets no shifts (its band is tiled as it is).  The options, set
    on ``ctx`` and returned by name (``schedworker.OPTIONS``)."""
    options = {
        "schedule_maximize_coincidence": 1,
        "schedule_outer_coincidence": 1 if fusion == "preserve" else 0,
        "schedule_serialize_sccs": 1 if fusion == "min" else 0,
        "schedule_whole_component": 1 if fusion == "max" else 0,
        "schedule_treat_coalescing": 1,
        "schedule_max_coefficient": 16,
        # sizes are constants here: unbounded constant terms let the whole-component ILP
        # explore shifts as large as the loops (mlp2 at 1024 ran for minutes); small
        # shifts still fuse stencils.  A contraction's program gets none: with them, the
        # 7x7/2 convolution of ResNet (a padding copy, then the window) took isl 2.3 s,
        # 25 ms without
        "schedule_max_constant_term": 0 if contraction else 4,
    }
    for name, value in options.items():
        getattr(ctx, f"set_{name}")(value)
    return options


#: isl's budget for one scheduling problem; past it, program order is used
MAX_OPERATIONS = 20_000_000


#: seconds isl's scheduler may take; some whole-component problems never finish and its
#: operation budget is not checked everywhere
DEADLINE = 8.0


def _within_deadline(ctx, sc, options: dict, fusion: str):
    """``sc.compute_schedule()``, or None when it takes longer than ``DEADLINE``.  A
    whole-component problem (``fusion`` max) runs in the helper process of
    ``schedworker`` (isl cannot be interrupted from outside), the constraints and the
    schedule as text; the others, whose operation budget isl checks, here (ResNet-18's
    19 conv groups: 0.82 -> 0.60 s of its cold compile).  Where there is no ``select``
    on pipes (Windows) every problem runs here, unguarded."""
    if DEADLINE is None or not options["schedule_whole_component"] or os.name != "posix":
        return sc.compute_schedule()
    text = schedworker.schedule(dict(options, max_operations=MAX_OPERATIONS), sc.to_str(),
                                DEADLINE)
    if text is None:
        from .. import config

        config.log(1, f"isl scheduler ({fusion}) ran past {DEADLINE:.0f} s; falling back")
        return None
    return isl.Schedule.read_from_str(ctx, text)


def run_scheduler(scop: Scop, deps: Dependences, fusion: str,
                  domain: isl.UnionSet | None = None) -> isl.Schedule | None:
    """isl's schedule for one fusion strategy (``max``, ``preserve``, ``min``; see
    ``configure``), or None when isl runs out of budget (``MAX_OPERATIONS``, ``DEADLINE``).
    ``poly.fusion.isl_schedule`` resolves ``auto`` and falls back.  ``domain``: the
    statement instances to schedule (default: all), with the dependences among them."""
    options = configure(scop.ctx, fusion, has_contraction(scop))
    validity = deps.scheduling_validity
    proximity = deps.raw.union(deps.waw)
    if deps.relaxed is not None:  # no pull towards skewing reductions
        proximity = proximity.intersect(deps.relaxed)
    if domain is None:
        domain = scop.domain
    else:
        validity = validity.intersect_domain(domain).intersect_range(domain)
        proximity = proximity.intersect_domain(domain).intersect_range(domain)
    sc = (isl.ScheduleConstraints.on_domain(domain)
          .set_validity(validity)
          .set_proximity(proximity)
          .set_coincidence(validity))
    scop.ctx.set_max_operations(MAX_OPERATIONS)
    scop.ctx.reset_operations()
    try:
        schedule = _within_deadline(scop.ctx, sc, options, fusion)
    except isl.Error as e:
        schedule = None
        from .. import config

        config.log(1, f"isl scheduler gave up ({e}); using program order")
    scop.ctx.set_max_operations(0)
    return schedule


def member_coefficients(node) -> dict:
    """Statement name -> for each member of the band ``node``: ``(coefficients of the
    statement's indices, constant)`` when the member is one affine piece, else None."""
    out = {}

    def one(m):
        n_in = m.dim(isl.dim_type.in_)
        pma = isl.PwMultiAff.from_map(m)
        members = []
        for k in range(m.dim(isl.dim_type.out)):
            pieces: list = []
            pma.get_pw_aff(k).foreach_piece(lambda _s, a, pieces=pieces: pieces.append(a))
            if len(pieces) != 1:
                members.append(None)
                continue
            a = pieces[0]
            members.append(([a.get_coefficient_val(isl.dim_type.in_, d).to_python()
                             for d in range(n_in)], a.get_constant_val().to_python()))
        out[m.get_tuple_name(isl.dim_type.in_)] = members

    node.band_get_partial_schedule_union_map().foreach_map(one)
    return out


def reduction_members_serial(schedule: isl.Schedule, scop: Scop) -> isl.Schedule:
    """Clear the coincident flag of band members that move a reorderable reduction along
    one of its reduction indices: such a loop updates the same element in different
    iterations, so it is not parallel (the scheduler did not see those dependences)."""
    by_name = {s.name: s for s in scop.stmts}

    def fix(node):
        if node.get_type() == isl.schedule_node_type.band:
            coefs = member_coefficients(node)
            for m in range(node.band_n_member()):
                if node.band_member_get_coincident(m) and moves_reduction(coefs, m, by_name):
                    node = node.band_member_set_coincident(m, 0)
        for i in range(node.n_children()):
            node = fix(node.child(i)).parent()
        return node

    return fix(schedule.get_root()).get_schedule()


def moves_reduction(coefs: dict, m: int, by_name: dict) -> bool:
    """Whether member ``m`` of a band (``coefs``: its ``member_coefficients``) moves a
    reorderable reduction along one of its reduction indices: that loop updates one
    element in several iterations, so it is not parallel, whatever the dependences
    between neighbouring instances say (a reordered reduction's are not transitive)."""
    for name, members in coefs.items():
        s = by_name[name]
        if not reassociable(s):
            continue
        red = [d for d, v in enumerate(s.vars) if v in s.stmt.reduction_vars]
        c = members[m]
        if c is None or any(c[0][d] for d in red):
            return True
    return False


def program_order(scop: Scop) -> isl.Schedule:
    """The original schedule as a schedule tree."""
    return isl.Schedule.from_domain(scop.domain).insert_partial_schedule(
        isl.MultiUnionPwAff.from_union_map(original_schedule(scop)))


def mark_parallel(schedule: isl.Schedule, min_points: int, points: int,
                  threads: int = 1, nested: bool = True) -> isl.Schedule:
    """Put a ``parallel`` mark above the outermost coincident loop of each band that is
    not nested in a parallel loop already (nothing for kernels under ``min_points``
    instances).  A parallel loop that is also the innermost ``simd`` loop is cut into
    ``threads`` chunks: the chunks run in parallel, each a vector loop (not one call of
    the outlined body per element: a 1-d bias + ReLU over 2^20 elements took 418 us,
    141 us in chunks).  ``nested``: the bands inside a parallel loop over a symbolic
    count may get marks of their own (not when an operand is packed per call into each
    thread's buffer: the packing and the products that read it must stay on one thread)."""
    if points < min_points:
        return schedule
    node = schedule.get_root()
    node = _mark(node, False, max(1, threads), nested, min_points)
    return node.get_schedule()


def _chunked(node, threads: int):
    """``node``, a one-member band under a ``simd:<d>`` mark with nothing below it, as
    a band of ``threads`` chunks with the ``simd`` mark moved onto the point loop below
    it; or ``node`` unchanged (returned as the band to mark parallel)."""
    parent = node.parent()
    if parent.get_type() != isl.schedule_node_type.mark or \
            not parent.mark_get_id().get_name().startswith("simd:") or \
            node.band_n_member() != 1 or \
            node.child(0).get_type() != isl.schedule_node_type.leaf:
        return node
    sched = node.band_get_partial_schedule().intersect_domain(node.get_domain())
    upa = sched.get_union_pw_aff(0)
    lo, hi = upa.min_val(), upa.max_val()
    if not (lo.is_int() and hi.is_int()):
        return node
    ext = hi.to_python() - lo.to_python() + 1
    chunk = -(-ext // threads)
    chunk = -(-chunk // 64) * 64  # whole vectors and cache lines
    if chunk >= ext:
        return node
    node = parent.delete()  # the band again
    mv = isl.MultiVal.zero(node.band_get_space())
    node = node.band_tile(mv.set_val(0, isl.Val.int_from_si(node.get_ctx(), chunk)))
    point = insert_mark(node.child(0), "simd")
    return point.parent().parent()  # the tile band


#: a band of fewer instances than the kernel's threshold shifted right by this runs on
#: one thread (``_mark``): at a threshold of 2^15, 2^12 (with 2^15 itself ShuffleNet's
#: 19K-30K-instance groups and an LSTM's 8K-instance cell steps ran 1.04-1.09x slower)
BAND_SHIFT = 3


def _mark(node, inside, threads, nested=True, min_points: int = 0):
    """Mark the subtree at ``node``; returns the node at the same position.  The band
    under a ``private:`` mark (``privatize.py``) runs in parallel on its first member,
    which carries only reductions into the tensors the mark names.  A band of fewer
    than ``min_points >> BAND_SHIFT`` instances (of fixed sizes) gets no mark: its loop
    nest runs on one thread, where the region's fork and join cost more than it saves
    (the 10-statement row program of ``bench_compile.py``, its row statements 128
    wide, in-process A/B: at 8, 16, 32 and 64 rows 0.21x, 0.33x, 0.52x and 0.83x the
    time; models 0.99-1.01x).  A band whose sizes are symbolic keeps its mark (the
    kernel's run-time test, ``backends/c.py``, decides for all its loops)."""
    depth = 0
    if node.get_type() == isl.schedule_node_type.mark and not inside and \
            node.mark_get_id().get_name().startswith("private:"):
        band = node.child(0)
        if band.band_n_member() > 1:
            band = band.band_split(1)
        node = insert_mark(band, "parallel").parent().parent()
        inside = True
    if node.get_type() == isl.schedule_node_type.band and not inside:
        m = _first_coincident(node, threads)
        if m is not None and _box_points(node.get_domain()) < min_points >> BAND_SHIFT:
            m = None
        if m is not None:
            symbolic = _symbolic_member(node, m)
            if m > 0:
                node = node.band_split(m).child(0)
                depth += 1
            if node.band_n_member() > 1:
                node = node.band_split(1)
            elif threads > 1:
                before = node.get_tree_depth()
                node = _chunked(node, threads)
                depth += node.get_tree_depth() - before
            node = insert_mark(node, "parallel")
            depth += 1
            # a loop over a symbolic count (a dynamic batch) runs in parallel only when
            # it has an iteration per thread (the code generator's condition): the bands
            # inside get marks of their own, which run in parallel when it does not (a
            # generic ResNet's convolutions at a batch of one had run on one thread)
            inside = not (symbolic and nested)
    for i in range(node.n_children()):
        node = _mark(node.child(i), inside, threads, nested, min_points).parent()
    for _ in range(depth):
        node = node.parent()
    return node


def _box_points(domain) -> int:
    """The instances of ``domain`` (a union set), each statement's as its bounding box;
    a large number where a bound is symbolic."""
    total, sets = 0, domain.get_set_list()
    for k in range(sets.n_set()):
        st, n = sets.get_at(k), 1
        for d in range(st.dim(isl.dim_type.set)):
            lo, hi = st.dim_min_val(d), st.dim_max_val(d)
            if not (lo.is_int() and hi.is_int()):
                return 1 << 62
            n *= max(0, hi.to_python() - lo.to_python() + 1)
        total += n
    return total


def _symbolic_member(node, m: int) -> bool:
    """Whether member ``m`` of the band ``node`` runs a number of values that depends
    on a symbolic size."""
    try:
        sched = node.band_get_partial_schedule().intersect_domain(node.get_domain())
        upa = sched.get_union_pw_aff(m)
        lo, hi = upa.min_val(), upa.max_val()
    except isl.Error:
        return False
    return not (lo.is_int() and hi.is_int())


def _first_coincident(node, threads: int = 1) -> int | None:
    """The band's outermost coincident member that takes more than one value.  isl makes
    no loop of one that takes a single value, so a mark on it parallelises nothing, and
    the bands below get none: when every coincident member is such and the band's child
    is a band (the tile loops of a contraction under a batch of one), None, and the
    child is marked instead; otherwise the outermost coincident member (a row program
    of one row keeps its mark, and its temporaries are contracted), or None.  A member
    of a few consecutive values (not tiles, whose heights the tiler balances already)
    that ``threads`` share unevenly (a batch of 3 on 2 threads: one runs two, the other
    waits) gives way to a later one of a fixed count they share evenly, or of many
    values (``_balanced``)."""
    found = [m for m in range(node.band_n_member()) if node.band_member_get_coincident(m)]
    try:
        sched = node.band_get_partial_schedule().intersect_domain(node.get_domain())
    except isl.Error:
        return found[0] if found else None
    varying = []
    for m in found:
        upa = sched.get_union_pw_aff(m)
        lo, hi = upa.min_val(), upa.max_val()
        if not (lo.is_int() and hi.is_int() and lo.eq(hi)):
            varying.append((m, lo, hi))
    if varying:
        # a loop whose count depends on a symbolic size (a dynamic batch) may run once:
        # a later member with a fixed count of several values instead, when there is one
        m, lo, hi = varying[0]
        if not (lo.is_int() and hi.is_int()):
            fixed = [m2 for m2, lo2, hi2 in varying[1:] if lo2.is_int() and hi2.is_int()]
            if fixed:
                return fixed[0]
        elif threads > 1 and not _balanced(hi.to_python() - lo.to_python() + 1, threads) \
                and _values(sched, m) == hi.to_python() - lo.to_python() + 1:
            even = [m2 for m2, lo2, hi2 in varying[1:] if lo2.is_int() and hi2.is_int() and
                    _balanced(_values(sched, m2), threads)]
            if even:
                return even[0]
        return m
    chain = node.n_children() == 1 and \
        node.child(0).get_type() == isl.schedule_node_type.band
    return None if chain or not found else found[0]


def _values(sched, m: int) -> int | None:
    """How many values member ``m`` of the band schedule ``sched`` takes (None: not
    known)."""
    try:
        values = isl.UnionMap.from_union_pw_aff(sched.get_union_pw_aff(m)).range()
        n = isl.Set.from_union_set(values).count_val()
    except isl.Error:
        return None
    return n.to_python() if n.is_int() else None


def _balanced(n: int | None, threads: int) -> bool:
    """Whether ``n`` iterations share well among ``threads``: evenly, or at least 8 a
    thread (the last round's idle threads then wait a small part of the time)."""
    return n is None or n % threads == 0 or n >= 8 * threads


def insert_mark(node, kind: str):
    """A mark ``kind:<d>`` above the band ``node``; ``d`` is the schedule dimension of the
    band's first member, so the code generator applies the mark to that loop only (isl
    drops loops that run once, and the mark must not slide onto a deeper loop).
    Returns the band below the mark."""
    name = f"{kind}:{node.get_schedule_depth()}"
    return node.insert_mark(isl.Id(name, context=node.get_ctx())).child(0)


def build_ast(schedule: isl.Schedule, context: isl.Set):
    """The isl AST under ``context`` (what the symbolic sizes satisfy, ``Scop.context``).
    isl names the iterator of schedule dimension ``k`` ``c<k>``, which is how the code
    generator finds the loop a mark belongs to."""
    build = isl.AstBuild.from_context(context)
    return build.node_from_schedule(schedule)


def schedule_tree_text(schedule: isl.Schedule) -> str:
    """The block-YAML print of a schedule tree."""
    ctx = schedule.get_ctx()
    p = isl.Printer.to_str(ctx).set_yaml_style(isl.yaml_style.BLOCK)
    return p.print_schedule(schedule).get_str()
