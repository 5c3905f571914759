"""Shared (local) memory promotion for the accelerator targets.

At the position of a kernel's ``thread`` mark (below the block loops and the reduction
tile loop), a tensor is promoted when

* no statement of the kernel writes it and none of its reads needs a run-time check,
* its reads below the mark have **reuse**: for a fixed value of the loops above, two
  statement instances read the same element (the access relation is not injective), as
  a matmul tile's rows are read by every column, or a stencil's neighbours;
* its **footprint** for a fixed value of the loops above fits a box of constant size
  (computed by isl: the largest difference of two elements read in one instance of the
  outer loops), and all promoted boxes fit the device's shared memory.

The copy is an isl *extension*: ``{ [outer loops] -> copy_A[a] : a in footprint }``,
grafted before the compute and scheduled by an identity band on the array's dimensions
(the innermost on x, so the copy reads global memory coalesced).  isl generates the copy
loops; the code generator writes ``A_shared[a mod box]``, which is one-to-one on a box,
so no offsets need to be expressed in the loop iterators.  Marks: ``copy`` above the
copies (a barrier before them, for the reads of the previous tile) and ``shared:<A,B>``
above the compute (a barrier before it, reads of A and B go to shared memory).
"""
from __future__ import annotations

import islpy as isl

from ..lang import program as P


def _guarded(sst, tensor) -> bool:
    """Whether some read of ``tensor`` by ``sst`` is checked at run time (its access is
    a may-access of the whole tensor)."""
    return sst.kind == "body" and any(e.tensor == tensor and id(e) in sst.guarded
                                      for e in P.reads(sst.stmt.rhs))


def _reads_of(sst, tensor):
    """The read relation of ``tensor`` by ``sst`` (None when it reads none)."""
    out = None

    def keep(m):
        nonlocal out
        if m.get_tuple_name(isl.dim_type.out) == tensor:
            out = m if out is None else out.union(m)

    sst.reads.foreach_map(keep)
    return out


def box_sizes(footprint: isl.Map) -> list | None:
    """Per array dimension, the most elements one instance of the outer loops reads
    (None when unbounded)."""
    sizes = []
    n = footprint.dim(isl.dim_type.out)
    for d in range(n):
        fd = footprint.project_out(isl.dim_type.out, d + 1, n - d - 1) \
            .project_out(isl.dim_type.out, 0, d)
        deltas = fd.reverse().apply_range(fd).deltas()
        if deltas.is_empty():
            return None
        hi = deltas.dim_max_val(0)
        if not hi.is_int():
            return None
        sizes.append(hi.to_python() + 1)
    return sizes


def promote(node, scop, launch, device, written: set):
    """Promote at ``node`` (a ``thread`` mark); returns the node at the same position.
    ``written``: tensors some statement of this kernel writes."""
    prefix = node.get_prefix_schedule_union_map()
    dom = node.get_domain()
    names = []
    dom.foreach_set(lambda s: names.append(s.get_tuple_name()))
    ssts = [s for s in scop.stmts if s.name in names]
    tensors = sorted({e.tensor for s in ssts if s.kind == "body" for e in P.reads(s.stmt.rhs)
                      if scop.shapes[e.tensor] and e.tensor not in written})
    budget = device.local_memory - 1024
    chosen = []
    for t in tensors:
        if any(_guarded(s, t) for s in ssts):
            continue
        acc = None
        for r in (_reads_of(s, t) for s in ssts):
            if r is not None:
                acc = isl.UnionMap.from_map(r) if acc is None else acc.union(r)
        if acc is None:
            continue
        acc = acc.intersect_domain(dom)
        if prefix.range_product(acc).is_injective():
            continue  # no element read twice in one tile: nothing to gain
        fp = isl.Map.from_union_map(prefix.reverse().apply_range(acc))
        sizes = box_sizes(fp)
        if sizes is None:
            continue
        itemsize = scop.program.tensor(t).dtype.np_dtype.itemsize
        nbytes = itemsize
        for x in sizes:
            nbytes *= x
        if nbytes > budget:
            continue
        budget -= nbytes
        chosen.append((t, sizes, fp))
    if not chosen:
        return node
    depth = node.get_schedule_depth()
    ext = None
    filters = isl.UnionSetList.alloc(node.get_ctx(), len(chosen))
    for t, sizes, fp in chosen:
        m = fp.set_tuple_name(isl.dim_type.out, f"copy_{t}")
        ext = isl.UnionMap.from_map(m) if ext is None else ext.union(m)
        filters = filters.add(isl.UnionSet.from_set(isl.Set.universe(m.range().get_space())))
        launch.shared.append((t, sizes))
    graft = isl.ScheduleNode.from_extension(ext).child(0)
    if len(chosen) > 1:
        graft = graft.insert_sequence(filters)
    for i, (t, sizes, _fp) in enumerate(chosen):
        g = graft.child(i).child(0) if len(chosen) > 1 else graft
        r = len(sizes)
        names_ = ", ".join(f"a{d}" for d in range(r))
        ident = isl.UnionMap.read_from_str(
            node.get_ctx(), f"{{ copy_{t}[{names_}] -> [{names_}] }}")
        g = g.insert_partial_schedule(isl.MultiUnionPwAff.from_union_map(ident))
        m = min(r, 3)
        if r > m:
            g = g.band_split(r - m).child(0)
        # named for its depth in the final tree (the graft's own depth starts at 0)
        name = f"thread:{depth + (r - m)}:{m}"
        g = g.insert_mark(isl.Id(name, context=node.get_ctx()))
        graft = g
        while graft.get_tree_depth() > 1:  # back to the sequence (or the single copy)
            graft = graft.parent()
    graft = graft.insert_mark(isl.Id("copy", context=node.get_ctx()))
    node = node.graft_before(graft.root())
    names_ = ",".join(t for t, _, _ in chosen)
    node = node.insert_mark(isl.Id(f"shared:{names_}", context=node.get_ctx())).child(0)
    return node
