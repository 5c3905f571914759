"""One pass over a matrix read along its rows and down its columns (``shared_pass``),
or along its rows only, several at a time.

``tmp(i) +=! A(i, j) * x(j)`` then ``y(j) +=! A(i, j) * tmp(i)`` (atax), or
``s(j) +=! r(i) * A(i, j)`` beside ``q(i) +=! A(i, j) * p(j)`` (bicg): isl's schedule runs
each statement in its own nest, so the matrix comes from memory twice, and the second
statement's loop over ``i`` carries its reduction into ``y``.  Fused over ``i``, each row
of ``A`` is read from memory once: the row statement's dot product, then the column
statement's update of all of ``y`` with the row, still in L1.  The fused loop carries the
column statement's reduction only, so it runs in parallel with a private copy of ``y``
per thread, summed at the end (OpenMP's array reduction; ``private:<tensors>`` mark above
the band, see ``schedule.mark_parallel`` and the C emitter).  Two passes over a 16 MB
matrix on two threads: 0.25 ms, one pass 0.15 ms.

A program of row reductions alone (GEMV: ``y(i) +=! A(i, j) * x(j)``) takes the same
schedule without the private copies: its rows in tiles of ``ROWS``, their dot products
side by side (4096 x 4096 on two threads: 1.5 -> 1.1-1.2 ms, numpy 1.0-1.35 ms).
"""
from __future__ import annotations

import islpy as isl

from ..lang import program as P
from .fusion import _insert_rest, respects
from .schedule import Dependences, insert_mark
from .scop import Scop

#: the most elements of a private copy per thread (16K floats: 64 KiB, L2-resident)
MAX_PRIVATE = 16384

#: rows of the matrix per step of the fused loop: a row reduction's dot products run
#: side by side (independent accumulators, each load of ``x`` shared), and a column
#: reduction updates its result once per tile (one pass over a 16 MB matrix on one
#: thread: 0.44 ms a row at a time, 0.33 ms in tiles of four)
ROWS = 4

#: the shortest rows that a program of row reductions alone reads several at a time
#: (rows of 64 or 1000 elements gained nothing, or lost 10%; of 4096, 20-30%)
MIN_ROW = 2048

#: reductions OpenMP combines the way polytc's semantics do (max/min have NaN rules)
OPS = ("+", "*")


def shared_pass(scop: Scop, deps: Dependences) -> isl.Schedule | None:
    """The fused schedule, or None where it does not apply: every statement a ``+``/``*``
    reduction (or its init) reading one 2-d tensor ``A(i, j)`` with plain indices, over
    all its rows; some reduce along a row (``i`` a result index, ``j`` reduced), the
    others down the columns (``i`` reduced) into a tensor that no other statement reads
    and that is at most ``MAX_PRIVATE`` elements; no dependence crosses rows but those
    column reductions'."""
    bodies = [s for s in scop.stmts if s.kind == "body"]
    if not bodies or any(s.stmt.op not in OPS or not s.stmt.reduction_vars
                         for s in bodies):
        return None
    found = _matrix(scop, bodies)
    if found is None:
        return None
    tensor, rows, columns, extent = found  # statement -> index of its row variable;
    # column statements; the matrix's rows
    if not columns and (any(len(s.vars) != 2 for s in bodies) or extent % ROWS or
                        scop.shapes[tensor][1] < MIN_ROW):
        return None  # rows alone: dot products of the matrix's long rows (GEMV), not
        # a contraction with other result indices (the micro-kernel's)
    private = sorted({s.stmt.tensor for s in bodies if s.name in columns})
    for t in private:
        if sum(s.stmt.tensor == t for s in bodies) > 1 or \
                _read_by_others(bodies, t) or \
                scop.program.tensor(t).dtype.c_name not in ("float", "double", "int", "long") \
                or _size(scop, t) > MAX_PRIVATE:
            return None
    if len(columns) == len(bodies):  # nothing shares the pass: the columns' own nest
        return None
    schedule = _build(scop, bodies, rows, columns, extent, private)
    if not respects(schedule, deps.validity) or \
            not _crossing_only(deps.validity, rows, columns):
        return None
    return schedule


def _matrix(scop: Scop, bodies: list):
    """``(tensor, {statement: its row variable's index}, {column statements}, rows)``
    for the 2-d tensor every body statement reads once as ``A(i, j)`` (plain, distinct
    indices) over all of its rows, or None."""
    candidates = None
    for s in bodies:
        reads: dict = {}
        for r in P.reads(s.stmt.rhs):
            reads.setdefault(r.tensor, []).append(r)
        mine = {t for t, rs in reads.items() if len(rs) == 1 and len(rs[0].indices) == 2}
        candidates = mine if candidates is None else candidates & mine
    for t in sorted(candidates or ()):
        rows, columns, ok = {}, set(), True
        extent = scop.shapes[t][0]
        for s in bodies:
            r = next(r for r in P.reads(s.stmt.rhs) if r.tensor == t)
            if not all(isinstance(e, P.Index) for e in r.indices) or \
                    r.indices[0].name == r.indices[1].name:
                ok = False
                break
            i, j = r.indices[0].name, r.indices[1].name
            reduced = set(s.stmt.reduction_vars)
            if i in reduced and j not in reduced:
                columns.add(s.name)
            elif i not in reduced and j in reduced:
                pass
            else:
                ok = False
                break
            v = s.vars.index(i)
            lo, hi = s.domain.dim_min_val(v), s.domain.dim_max_val(v)
            if not (lo.is_zero() and hi.is_int() and hi.to_python() == extent - 1):
                ok = False
                break
            rows[s.name] = v
        if ok:
            return t, rows, columns, extent
    return None


def shared_matrix(scop: Scop) -> tuple[str, bool]:
    """The matrix a ``shared_pass`` schedule reads once, and whether some statement
    reduces down its columns (for explain())."""
    found = _matrix(scop, [s for s in scop.stmts if s.kind == "body"])
    return (found[0], bool(found[2])) if found is not None else ("?", False)


def _read_by_others(bodies: list, tensor: str) -> bool:
    return any(r.tensor == tensor for s in bodies if s.stmt.tensor != tensor
               for r in P.reads(s.stmt.rhs))


def _size(scop: Scop, tensor: str) -> int:
    n = 1
    for e in scop.shapes[tensor]:
        n *= e
    return n


def _build(scop: Scop, bodies: list, rows: dict, columns: set, extent: int,
           private: list) -> isl.Schedule:
    """The inits in program order, each its own nest, then one band over the rows, in
    tiles of ``ROWS`` where they divide them, with the body statements in program order
    below it, each over its other indices and then the tile's rows (``rows`` mark: the
    code generator unrolls them), under a ``private:`` mark.  Marks are set here (the
    tiler leaves the subtree alone): ``promote`` on a row reduction (its accumulators),
    ``simd`` on a column reduction's loop."""
    inits = [s for s in scop.stmts if s.kind == "init"]
    tile = ROWS if extent % ROWS == 0 and extent >= 2 * ROWS else 1
    filters = isl.UnionSetList.alloc(scop.ctx, len(inits) + 1)
    for s in inits:
        filters = filters.add(isl.UnionSet.from_set(s.domain))
    fused = isl.UnionSet.empty(scop.domain.get_space())
    for s in bodies:
        fused = fused.union(isl.UnionSet.from_set(s.domain))
    filters = filters.add(fused)
    node = isl.Schedule.from_domain(scop.domain).get_root().child(0)
    node = node.insert_sequence(filters)
    for k, s in enumerate(inits):
        node = _insert_rest(node.child(k).child(0), s, list(range(len(s.vars))), scop)
        node = node.parent().parent()
    node = node.child(len(inits)).child(0).insert_partial_schedule(
        _band(scop, bodies, rows, f"{tile} * floor(({{}}) / {tile})"))
    node = node.band_set_permutable(1)
    below = isl.UnionSetList.alloc(scop.ctx, len(bodies))
    for s in bodies:
        below = below.add(isl.UnionSet.from_set(s.domain))
    seq = node.child(0).insert_sequence(below)
    for k, s in enumerate(bodies):
        rest = [v for v in range(len(s.vars)) if v != rows[s.name]]
        leaf = _insert_rest(seq.child(k).child(0), s, rest, scop)
        leaf = insert_mark(leaf, "simd" if s.name in columns else "promote")
        if tile > 1:
            leaf = leaf.child(0).insert_partial_schedule(
                _band(scop, [s], rows, f"({{}}) - {tile} * floor(({{}}) / {tile})"))
            name = f"rows:{leaf.get_schedule_depth()}:{tile}"
            leaf = leaf.insert_mark(isl.Id(name, context=scop.ctx)).child(0)
        seq = _up_to_sequence(leaf)
    node = seq.parent().insert_mark(isl.Id("private:" + ",".join(private),
                                           context=scop.ctx))
    return node.get_schedule()


def _band(scop: Scop, stmts: list, rows: dict, expr: str) -> isl.MultiUnionPwAff:
    """A one-member partial schedule: ``expr`` of each statement's row index."""
    parts = []
    for s in stmts:
        xs = [f"x{n}" for n in range(len(s.vars))]
        row = xs[rows[s.name]]
        parts.append(f"{s.name}[{', '.join(xs)}] -> [{expr.format(row, row)}]")
    return isl.MultiUnionPwAff.from_union_map(
        isl.UnionMap.read_from_str(scop.ctx, "{ " + "; ".join(parts) + " }"))


def _up_to_sequence(node):
    while node.get_type() != isl.schedule_node_type.sequence:
        node = node.parent()
    return node


def _crossing_only(validity: isl.UnionMap, rows: dict, columns: set) -> bool:
    """Whether every dependence between different rows is a column statement's on
    itself (its reduction into the tensor it writes, which each thread keeps a private
    copy of)."""
    maps: list = []
    validity.foreach_map(maps.append)
    for m in maps:
        src = m.get_tuple_name(isl.dim_type.in_)
        snk = m.get_tuple_name(isl.dim_type.out)
        if src not in rows or snk not in rows:
            continue  # an init: it runs before the fused band
        same = m.equate(isl.dim_type.in_, rows[src], isl.dim_type.out, rows[snk])
        if not m.is_subset(same) and not (src == snk and src in columns):
            return False
    return True
