"""Folding a reduction's init and its epilogue into the contraction's register tiles.

``T(m, n) +=! X(m, k) * W(k, n)`` is two statements, the init ``T = 0`` and the update;
a following ``O(m, n) = fmax(T(m, n) + b(n), 0)`` is a third.  Run as they come, each is
a pass over memory: the init writes all of ``T``, the contraction reads it back, the
epilogue reads ``T`` once more and writes ``O``.  BLIS-class libraries do neither: the
micro-kernel starts its accumulators at zero on the first ``k`` block and applies the
epilogue to the tile it has just finished (the ``beta = 0`` and fused-epilogue paths of
oneDNN and Inductor's GEMM templates).  This pass does the same to a contraction the
tiler tiled (a ``contraction`` decision): it drops the init and the epilogue from the
schedule and records, in a ``fold`` decision, what the code generator does instead
(``codegen_c/fold.py``): a register tile whose reduction loops start at the first value
of every reduction index starts its accumulators at the identity instead of loading
them, and one whose loops end at the last values runs the epilogue's instances for its
elements right after storing them (they are in L1).

A ``max=!`` or ``min=!`` reduction folds its init alike, its accumulators starting at
-inf or +inf (a blocked max pooling at batch 64 wrote its 12 MB result once more, then
read it back, in a pass of its own).

The init ``I`` of ``S`` folds when it writes exactly the elements ``S`` reduces into and
``S``'s reduction indices run over the same box for every element (so "the first value
of every reduction index" is the first update of each element).  The statement ``E``
right after ``S`` folds as its epilogue when
* it is a plain assignment (no reduction), whose instances are in one-to-one
  correspondence with the elements ``S`` writes: it reads ``T`` at its own indices,
  each plus a constant (``T(m, n)``, or ``T(m - 1, n - 1)`` where ``E`` writes a
  result into the inside of a padded buffer: ``graph/padplace.py``; every read of ``T``
  alike) and runs over exactly those elements;
* it reads nothing else that a statement writes (inputs and constants): moving it
  earlier cannot read a value before it is made;
* it writes ``T`` in place at the same indices, or a tensor no other statement writes
  and no earlier statement reads, element by element (no two instances write one
  element): moving it earlier cannot overtake a read or a write of that tensor.

When ``T`` is a temporary that only the epilogue reads (``_dead``), the micro-kernel's
last reduction tile hands its accumulators to the epilogue instead of storing them to
``T`` and reading them back: a convolution's bias and ReLU then write only the result
(SqueezeNet's stem: storing ``T`` besides the result cost 0.34 -> 0.79 ms).
"""
from __future__ import annotations

import islpy as isl

from ..lang import program as P
from .decisions import Decision


def fold(schedule, scop, decisions) -> tuple:
    """``(schedule without the folded statements, fold decisions)`` for the tiled
    contractions among ``decisions``."""
    by_name = {s.name: s for s in scop.stmts}
    out, gone = [], []
    for d in decisions:
        if d.kind != "contraction":
            continue
        sst = by_name[d.subject]
        if any(r.tensor == sst.stmt.tensor for r in P.reads(sst.stmt.rhs)) or not _box(sst):
            continue  # (an update reading other elements of its target sees them early)
        init = _init(sst, by_name)
        epi = _epilogue(scop, sst)
        if init is None and epi is None:
            continue
        facts = {"init": init.name if init else None, "epilogue": epi.name if epi else None,
                 "_bounds": _bounds(sst), "_dead": epi is not None and _dead(scop, sst, epi)}
        out.append(Decision("fold", [sst.name], facts))
        gone += [s for s in (init, epi) if s is not None]
    if gone:
        keep = scop.domain
        for s in gone:
            keep = keep.subtract(isl.UnionSet.from_set(s.domain))
        schedule = schedule.intersect_domain(keep)
    return schedule, out


def _bounds(sst) -> tuple:
    """``(index, first, last)`` per reduction index of ``sst`` (constants)."""
    out = []
    for v in sst.stmt.reduction_vars:
        d = sst.vars.index(v)
        lo, hi = sst.domain.dim_min_val(d), sst.domain.dim_max_val(d)
        out.append((v, lo.to_python(), hi.to_python()))
    return tuple(out)


def _box(sst) -> bool:
    """Whether the reduction indices of ``sst`` run over one box for every element."""
    dom = sst.domain
    if sst.stmt.op not in ("+", "max", "min") or not sst.stmt.reduction_vars or dom.is_empty():
        return False
    box = dom
    for v in sst.stmt.reduction_vars:
        d = sst.vars.index(v)
        lo, hi = dom.dim_min_val(d), dom.dim_max_val(d)
        if not (lo.is_int() and hi.is_int()):
            return False
        box = box.eliminate(isl.dim_type.set, d, 1)
        box = box.lower_bound_val(isl.dim_type.set, d, lo).upper_bound_val(
            isl.dim_type.set, d, hi)
    return box.is_equal(dom)


def _elements(sst) -> isl.Set:
    """The elements ``sst`` writes."""
    return isl.Set.from_union_set(sst.writes.range())


def _init(sst, by_name):
    init = by_name.get(f"I{sst.index}")
    if init is None:
        return None
    return init if _elements(init).is_equal(_elements(sst)) else None


def _epilogue(scop, sst):
    stmts = scop.program.statements
    if sst.index + 1 >= len(stmts):
        return None
    e = next((s for s in scop.stmts if s.index == sst.index + 1 and s.kind == "body"), None)
    t = sst.stmt.tensor
    if e is None or e.stmt.op is not None or e.stmt.init or e.guarded:
        return None
    own = list(e.stmt.indices)
    if len(set(own)) != len(own) or sorted(own) != sorted(e.vars):
        return None
    reads = P.reads(e.stmt.rhs)
    mine = [r for r in reads if r.tensor == t]
    offsets = {offsets_of(r) for r in mine}
    if not mine or None in offsets or len(offsets) != 1:
        return None
    at = [name for name, _ in offsets.pop()]
    if sorted(at) != sorted(e.vars):
        return None  # an instance per element of T: its indices are E's, once each
    written = {s.tensor for s in stmts}
    if any(r.tensor != t and r.tensor in written for r in reads):
        return None
    target = e.stmt.tensor
    if target == t:
        if [(v, 0) for v in own] != list(offsets_of(mine[0])):
            return None
    elif any(s is not e.stmt and s.tensor == target for s in stmts) or any(
            r.tensor == target for s in stmts[:e.index + 1] for r in P.reads(s.rhs)) or \
            not e.writes.is_injective():
        return None
    # every instance reads T (at its own indices, plus constants): one per element of
    # T when they read exactly the elements S writes, all of them reading it (a read
    # under a select, ``c < 8 ? X(.., c, ..) : T(.., c - 8, ..)``, a concatenation's
    # second part, reads T at half the instances)
    elements = _elements(sst)
    reads_t = e.reads.intersect_range(
        isl.UnionSet.from_set(isl.Set.universe(elements.get_space())))
    if reads_t.is_empty():  # (its read of T is never taken: ``k > 3 ? T(k) : ..``, k < 3)
        return None
    if not isl.Set.from_union_set(reads_t.domain()).is_equal(e.domain):
        return None
    return e if isl.Set.from_union_set(reads_t.range()).is_equal(elements) else None


def _dead(scop, sst, epi) -> bool:
    """Whether the contraction's result ``T`` is a temporary that only the epilogue
    ``epi`` reads and that it does not overwrite: on a register tile's last reduction tile
    the epilogue may then take the accumulators as they are, and ``T`` is not stored."""
    t = sst.stmt.tensor
    return epi.stmt.tensor != t and any(x.name == t for x in scop.program.temporaries) and \
        not any(r.tensor == t for s in scop.program.statements if s is not epi.stmt
                for r in P.reads(s.rhs))


def offsets_of(read):
    """``((index, constant), ...)`` of a read whose subscripts are each an index plus a
    constant, else None."""
    out = tuple(P.offset_index(i) for i in read.indices)
    return None if None in out else out
