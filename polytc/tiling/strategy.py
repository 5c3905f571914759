"""The tiling pass: what to do with each band of isl's schedule.

* A **contraction band** (coincident members and reduction members, every statement a
  reduction over it, e.g. matmul, batched matmul, convolution) is split from its init and
  consumer statements (program order is always legal for that), its members are ordered
  ``[outer..., i, j, reductions...]`` where ``j`` is the unit-stride dimension of the
  result and ``i`` a dimension with reuse, then tiled twice: cache tiles
  ``(Ti, Tj, Tk)`` with full tiles isolated, and register tiles ``(MR, NR)`` whose ``i``
  loop is unrolled, whose ``j`` loop is ``simd`` and whose reduction loops are marked
  ``promote`` so the code generator keeps the ``MR x NR`` accumulators in registers.
* In any other **innermost band**, the last member gets ``simd`` when it is parallel and
  unit-stride for the writes, or ``promote`` when it is a reduction whose result is
  invariant in it (the accumulator becomes a scalar; ``+``/``*`` also vectorise).

Sizes come from ``Options`` when given, else from the cost model (``sizes.py``).
"""
from __future__ import annotations

import math

import islpy as isl

from ..lang import program as P
from ..poly import transform as T
from .decisions import Decision
from .pack import batch_index, outer_indices, pack, streamed, unit_stride, vector_operand
from ..machine import Machine
from . import extents as X
from .transpose import transpose_tiles
from .sizes import (Sizes, _round_up, _strided_sizes, all_rows, choose_sizes, generic_rows,
                    loose_tiles)

SPAN_MOST = 4  # the most elements of a constant batch a tile of symbolic rows spans


class Tiler:
    def __init__(self, scop, options, machine: Machine, pack: bool = False, validity=None,
                 constants=frozenset()):
        self.scop, self.options, self.machine = scop, options, machine
        self.validity = validity  # the dependences: bands split off regain parallel loops
        self.pack = pack  # copy contractions' vector operands into micro-panels
        self.packs = 0
        #: inputs the same at every call: packed once, before it (``pack.prepack_box``)
        self.constants = frozenset(constants) & {t.name for t in scop.program.inputs}
        self.by_name = {s.name: s for s in scop.stmts}
        self.report: list = []  # Decisions: what was done, for explain() and tests

    # --- facts about statements ------------------------------------------------------
    def extent(self, sst, d) -> int:  # (see ``extents.py``)
        return X.extent(sst, sst.vars[d], self.scop.env, self.scop.symbolic)

    def symbolic(self, sst, d) -> bool:  # whether its range depends on a symbolic size
        return X.symbolic(sst, sst.vars[d], self.scop.symbolic)

    def target_var(self, sst, pos_from_end=1):
        st = sst.stmt
        if len(st.indices) < pos_from_end:
            return None
        return sst.vars.index(st.indices[-pos_from_end])

    # --- traversal -----------------------------------------------------------------
    def run(self, schedule):
        while True:  # splitting splices filters into parent sequences: restart each time
            node = self.find_split(schedule.get_root())
            if node is None:
                break
            schedule = node.get_schedule()
        return self.visit(schedule.get_root()).get_schedule()

    def facts(self, node):
        names = T.statements_below(node)
        ssts = [self.by_name[n] for n in names]
        n = node.band_n_member()
        coinc = [node.band_member_get_coincident(i) for i in range(n)]
        return ssts, T.member_vars(node), coinc

    def contraction_of(self, node, ssts, mv, coinc):
        """The one reduction statement a tileable band contracts, or None."""
        if self.options.tile == () or not node.band_get_permutable() or all(coinc) \
                or not any(coinc):
            return None
        found = [s for s in ssts if s.kind == "body" and s.stmt.op is not None and
                 all(v is not None for v in mv[s.name])]
        return found[0] if len(found) == 1 else None

    def find_split(self, node):
        """Split the first band (top-down) that needs it; the new tree's root, or None."""
        if _shared_pass(node):
            return None
        if node.get_type() == isl.schedule_node_type.band:
            groups = self.split_groups(node)
            if groups:
                for g in groups[:-1]:
                    node = node.order_before(self.filter_of(g))
                self.report.append(Decision("split", [s.name for g in groups for s in g],
                                            {"groups": [[s.name for s in g] for g in groups]}))
                return node.root()
        for i in range(node.n_children()):
            found = self.find_split(node.child(i))
            if found is not None:
                return found
        return None

    def split_groups(self, node):
        """Groups of statements, in program order, to distribute the band over (always
        legal: a statement depends on a later one only through loops both share, and
        cutting the band only serialises): a contraction is cut from the statements
        around it, and the init of a reduction from the reduction."""
        ssts, mv, coinc = self.facts(node)
        if len(ssts) < 2:
            return None
        ordered = sorted(ssts, key=_program_order)
        main = self.contraction_of(node, ssts, mv, coinc)
        if main is not None:
            groups = [[s for s in ordered if s.index < main.index],
                      [s for s in ordered if s.index == main.index and s.kind == "init"],
                      [main], [s for s in ordered if s.index > main.index]]
        elif any(s.kind == "init" for s in ssts) and not all(coinc) and \
                any(s.kind == "body" for s in ssts):
            groups = [[]]
            for st in ordered:
                if st.kind == "init":
                    groups += [[st], []]
                else:
                    groups[-1].append(st)
        else:
            return None
        groups = [g for g in groups if g]
        return groups if len(groups) > 1 else None

    def visit(self, node):
        if node.get_type() == isl.schedule_node_type.band:
            return self.band(node)
        if _shared_pass(node):
            return node
        for i in range(node.n_children()):
            node = self.visit(node.child(i)).parent()
        return node

    def band(self, node):
        depth = node.get_tree_depth()
        node = T.refresh_coincidence(node, self.validity, self.by_name)
        ssts, mv, coinc = self.facts(node)
        main = self.contraction_of(node, ssts, mv, coinc)
        p = sum(coinc)
        if main is not None and len(ssts) == 1 and \
                len({r.tensor for r in P.reads(main.stmt.rhs)}) < 2 and \
                all(coinc[:p]) and self.window_rows(main, mv[main.name][p - 1]) is not None:
            # a window over one tensor (pooling): its reduction members split off, then
            # the rows sunk below them
            first = node.band_split(p)
            sunk = self.sink_rows(first, ssts, T.member_vars(first),
                                  [first.band_member_get_coincident(i)
                                   for i in range(first.band_n_member())])
            if sunk is not None:
                return self.climb(self.visit(sunk), depth)
            node = first
            ssts, mv, coinc = self.facts(node)
            main = None
        if main is not None and len(ssts) == 1:
            tiled = self.contraction(node, main, mv[main.name], coinc)
            if tiled is not None:
                return self.climb(tiled, depth)
        sunk = self.sink_rows(node, ssts, mv, coinc)
        if sunk is not None:  # the tree changed below this position: visit it anew
            return self.climb(self.visit(sunk), depth)
        inner = self.innermost(node)
        for i in range(node.n_children()):
            node = self.visit(node.child(i)).parent()
        if inner:
            node = transpose_tiles(self, node, ssts, mv, coinc)
            ssts, mv, coinc = self.facts(node)
        if inner and self.options.vectorize:
            node = self.mark_inner(node, ssts, mv, coinc)
        return self.climb(node, depth)

    def climb(self, node, depth):
        while node.get_tree_depth() > depth:
            node = node.parent()
        return node

    def innermost(self, node) -> bool:
        found = []

        def check(n):
            if n.get_type() == isl.schedule_node_type.band:
                found.append(1)
            return True

        for i in range(node.n_children()):
            node.child(i).foreach_descendant_top_down(check)
        return not found

    def filter_of(self, ssts):
        out = isl.UnionSet.empty(isl.Space.params_alloc(self.scop.ctx, 0))
        for s in ssts:
            out = out.union(isl.UnionSet.from_set(s.domain))
        return out

    # --- contractions ----------------------------------------------------------------
    def contraction(self, node, sst, vars_, coinc):
        """Tile a contraction band; ``None`` when no operand can be loaded as vectors
        along the result's unit-stride dimension ``j``."""
        n = len(coinc)
        j_var = self.target_var(sst)
        par = [m for m in range(n) if coinc[m]]
        red = [m for m in range(n) if not coinc[m]]
        j = next((m for m in par if vars_[m] == j_var), None)
        if j is None:
            return None
        reads = P.reads(sst.stmt.rhs)

        def uses(r, m):
            return sst.vars[vars_[m]] in P.index_names(*r.indices)

        def broadcast(m, j):
            """How far from the last index a read broadcast along rows ``m`` (one along
            ``m``, not along ``j``) runs ``m`` (0: unit stride), or None for none."""
            far = [len(r.indices) - 1 - k for r in reads if uses(r, m) and not uses(r, j)
                   for k, x in enumerate(r.indices)
                   if sst.vars[vars_[m]] in P.index_names(x)]
            return min(far) if far else None

        def rows(j):
            """The candidates for i: parallel members some read does not depend on
            (register reuse).  First those of an outer product, along which a read not
            along j varies (broadcast per row; the images of a batch are not, every
            read along them is along the image columns too: ResNet-18's 3x3
            convolutions at batch 64 ran 8 images x 48 columns, 5x slower than 8 output
            channels), of at least 4 iterations, the one the broadcast read runs with
            the smallest stride first (image columns before rows, rows before images:
            lanes over 512 channels at batch 64 59 -> 34 ms, at batch 1 0.44 -> 0.37
            ms over 256 channels), then the largest first."""
            def key(m):  # (not a symbolic size, which may be 1: a dynamic batch; but
                far = broadcast(m, j)  # before a constant one of under 4, which is
                ext = self.extent(sst, vars_[m])  # small: a batch of 2 sequences of a
                sym = self.symbolic(sst, vars_[m])  # symbolic length ran 2 x 64 tiles,
                return (far is None, ext < 4 and not sym, sym, far or 0, -ext)  # 1.7x)
            return sorted((m for m in par if m != j and any(not uses(r, m) for r in reads)),
                          key=key)

        def row(j):
            found = rows(j)
            return found[0] if found else None

        def packed_operand(j, i, values=False):
            if not (self.pack and self.options.vectorize and self.nonnegative(sst)):
                return None, None
            # the indices batch loops run (``values``: or that take one value; packing
            # the unit-stride convolution image of a batch of one was slower)
            batch = outer_indices(node, sst, vars_, values)
            if batch is None:
                return None, None
            found = vector_operand(sst, sst.vars[vars_[j]],
                                   sst.vars[vars_[i]] if i is not None else None)
            if found is not None and i is not None and found.tensor not in self.constants \
                    and unit_stride(found, sst.vars[vars_[j]]) and streamed(
                        self.extent(sst, vars_[j]), self.extent(sst, vars_[i]), math.prod(
                            self.extent(sst, vars_[m]) for m in red),
                        self.machine.lanes(sst.stmt.rhs.dtype.np_dtype.itemsize)):
                return None, None
            one = i is None or (self.extent(sst, vars_[i]) == 1 and
                                not self.symbolic(sst, vars_[i]))
            if one and (found is None or found.tensor not in self.constants or
                        not unit_stride(found, sst.vars[vars_[j]])):
                # no rows (a matrix-vector product), or one (a global pooling's sum
                # of a contracted buffer, whose copy per call ran as long as the sum):
                # weights only, packed once (one sequential stream per core: 784 -> 512
                # at batch 1 27 -> 13 us), and not a transposed W(j, k), whose rows the
                # dot products already stream
                return None, None
            return found, batch

        i = row(j)
        operand, batch = packed_operand(j, i)
        if operand is None:  # a constant operand (weights) through a batch of one: its
            cand, cand_batch = packed_operand(j, i, values=True)  # packing costs nothing
            if cand is not None and cand.tensor in self.constants:
                operand, batch = cand, cand_batch
        gathered = operand is None and not any(unit_stride(r, sst.vars[j_var]) for r in reads)
        if gathered:
            # no read is unit-stride along j (a convolution of stride 2): the i for which
            # some operand can be packed, through a batch of one too
            for m in rows(j):
                cand, cand_batch = packed_operand(j, m, values=True)
                if cand is not None:
                    i, operand, batch = m, cand, cand_batch
                    break
        strided = False
        lanes = self.machine.lanes(sst.stmt.rhs.dtype.np_dtype.itemsize)
        narrow = self.extent(sst, j_var)
        depth = math.prod(self.extent(sst, vars_[m]) for m in red) * X.products(sst)
        window = any(_windowed(r) for r in reads)
        # a convolution over more than a vector whose rows end in a partial one (56 or
        # 28 wide), with a deep reduction: the lanes over the channels too (below),
        # where the row's partial vector cost its 8 rows a broadcast per partial-vector
        # FMA (ResNet-18's 64-channel 3x3 convolutions on 56 x 56: 0.60 -> 0.52 ms, its
        # 128-channel ones on 28 x 28, as 7 x 2 vectors, 0.515 -> 0.465 ms); a reduction
        # of 8 vectors' worth is enough once the tiles were stored transposed
        # (SqueezeNet's 16 -> 64 channels on 55 x 55, 144 points: 0.138 -> 0.124 ms; its
        # 32 -> 128 on 27 x 27, 288 points, 0.130 -> 0.113 ms as 9 x 2 vectors)
        tail = window and narrow % lanes and narrow > lanes and depth >= 8 * lanes
        # likewise a strided window (a convolution of stride 2) with a reduction of 8
        # vectors' worth, whose image would be packed again for every row of output
        # channels, with the result's stride (ResNet-18's 64 -> 128 3x3/2 on 28 x 28:
        # 0.40-0.45 -> 0.35 ms, timed in the native run), or for every image row (its
        # 3-channel 7x7/2 stem, 147 points: 0.68 -> 0.56 ms once the tiles were stored
        # transposed, at batch 64 41 -> 35 ms); the pixels are then broadcast from the
        # image as it is, and the channels may be fewer than the pixels of a row
        strided_window = window and not any(unit_stride(r, sst.vars[j_var]) for r in reads)
        if narrow < lanes or tail or (strided_window and depth >= 8 * lanes):
            # the result's unit-stride index is narrower than a vector (the 7 or 14 wide
            # images of ResNet's later convolutions): the lanes run over the
            # widest other index of the result along which an operand can be packed
            # (the output channels: the packed weights are contiguous vectors), the
            # accumulators are loaded and stored with the result's stride, once per
            # register tile (3x3 convolutions of 512 channels on 7 x 7: 48 -> 163
            # GFLOP/s, 256 on 14 x 14: 60 -> 248; wider images are faster with
            # unit-stride tiles ending in a partial vector: SqueezeNet's 27 x 27 ones
            # 0.46 -> 0.30 ms, and 14 x 14 on AVX-512 2.5x slower; so is a pointwise
            # one over 13 x 13 pixels: SqueezeNet's 512 -> 1000 classifier 0.69 ->
            # 0.47 ms, once partial tiles ran in micro-kernels)
            wide = sorted((m for m in par if m != j and sst.vars[vars_[m]] in
                           sst.stmt.indices and not self.symbolic(sst, vars_[m]) and
                           self.extent(sst, vars_[m]) >= 2 * lanes
                           and (strided_window or self.extent(sst, vars_[m]) > narrow)),
                          key=lambda m: -self.extent(sst, vars_[m]))
            for m in wide:
                r = row(m)
                alt, alt_batch = packed_operand(m, r, values=True)
                if alt is not None and (self.extent(sst, vars_[m]) > narrow or
                                        not _windowed(alt)):  # (the weights, not the image)
                    j, i, operand, batch, strided = m, r, alt, alt_batch, True
                    break
        jname = sst.vars[vars_[j]]
        if operand is None and not any(
                r.indices and jname in P.index_names(r.indices[-1]) for r in reads):
            # no input is unit-stride along j (A B^T, or a dot product per row), and none
            # to pack: vector loads along j would be gathers; the reduction is vectorised
            return None
        lead = [i] if i is not None else []
        outer = [m for m in par if m not in (i, j)]
        # the iterations of the loops around the i tiles (a batch) that keep cores busy
        around = [vars_[m] for m in outer] + list((outer_indices(node, sst, vars_) or {}))
        work = math.prod(max(1, self.extent(sst, v)) for v in around)
        # a symbolic batch may be 1: the cores share the tiles too (its loop and theirs
        # collapse into one parallel loop) where no tile packs an operand (a transformer's
        # projections at batch 1 ran on one core, 2x slower)
        shared = any(self.symbolic(sst, v) for v in around) and (
            operand is None or operand.tensor in self.constants)
        # or an even share per core (4 heads on 2: rows split too only cut partial tiles)
        even = work > 1 and work % self.machine.cores == 0
        cores = 1 if (work >= 4 * self.machine.cores or even) and not shared else None
        order = outer + lead + [j] + red
        node = T.permute(node, order)
        ext = [self.extent(sst, vars_[m]) for m in order]
        p_red = len(outer) + len(lead) + 1
        k_big = max(range(len(red)), key=lambda r: ext[p_red + r])
        if operand is not None and not strided and ext[p_red - 1] % lanes and \
                operand.tensor not in self.constants and unit_stride(operand, jname) and \
                _windowed(operand):
            # an image (a window read) whose rows end in a partial vector, read with unit
            # stride anyway (a batch of images): unpacked, its partial vector stays in the
            # micro-kernel (packed panels are whole vectors, the rest of the row left
            # them: ResNet-18's 28 and 56 wide convolutions at batch 4 1.3x slower)
            operand = None
        itemsize = sst.stmt.rhs.dtype.np_dtype.itemsize
        per_call = operand is not None and operand.tensor not in self.constants
        sz = choose_sizes(ext[len(outer)] if lead else 1, ext[p_red - 1], ext[p_red + k_big],
                          itemsize, self.machine, operand is not None, cores, per_call,
                          bool(lead) and self.symbolic(sst, vars_[i]))
        if strided and lead:
            rest = math.prod(ext[p_red + r] for r in range(len(red)) if r != k_big)
            sz = _strided_sizes(sz, ext[len(outer)], ext[p_red - 1], ext[p_red + k_big],
                                self.machine.lanes(itemsize), self.machine.cores, rest,
                                itemsize, self.machine.l2, self.machine.vector_registers)
        if self.options.tile:
            sz = Sizes(tuple(self.options.tile), sz.register)
        if self.options.register_tile:
            sz = Sizes(sz.cache, tuple(self.options.register_tile))
        mr, nr = sz.register
        ti, tj, tk = sz.cache
        sym = [self.symbolic(sst, vars_[m]) for m in order]
        if lead and sym[len(outer)] and not sym[p_red - 1] and not self.options.tile:
            ti, tj, tk = generic_rows(mr, nr, tk, ext[p_red - 1], ext[p_red + k_big],
                                      itemsize, self.machine, per_call,
                                      operand is not None and not per_call)
        tj = _round_up(tj, nr)
        if operand is None:  # packed: Ti divides i evenly (full cache tiles, one loop)
            ti = _round_up(ti, mr)
        # an outer loop the packed operand does not depend on (the image rows of a
        # convolution, for its weights) runs inside the cache tile, each panel serving all
        # its iterations; not a batch (``batch_index``; a symbolic one: its loop parallel)
        keep = [1 if operand is None or sym[k] or batch_index(reads, sst.vars[vars_[m]]) or
                sst.vars[vars_[m]] in P.index_names(*operand.indices) else ext[k]
                for k, m in enumerate(outer)]
        cache = keep + ([ti] if lead else []) + [tj] + [  # (a symbolic reduction besides
            tk if r == k_big else 1 if sym[p_red + r] else ext[p_red + r]  # k's: one at a
            for r in range(len(red))]  # time, the panels stay Tk deep)
        cache = [min(c, e) if e > 0 and not y else c for c, e, y in zip(cache, ext, sym)]
        if operand is not None and ext[p_red - 1] < nr:
            operand = None  # narrower than one panel: nothing to gain
        if operand is not None:  # whole panels: a partial one is padded, not cut
            cache[p_red - 1] = min(tj, _round_up(ext[p_red - 1], nr))
        reg = [1] * len(outer) + ([mr] if lead else []) + [nr] + [1] * len(red)
        # a constant batch of a few around symbolic rows over a constant operand (two
        # sequences through weights): the register tile spans the batch, one pass over
        # the operand for all (a pass per sequence had run length 1 at 1.48x specialised)
        span = bool(lead) and sym[len(outer)] and len(outer) == 1 and not sym[0] and \
            2 <= ext[0] <= SPAN_MOST and operand is not None and not per_call and \
            not strided and not self.options.register_tile
        if span:
            cache[0] = reg[0] = ext[0]
            reg[1] = max(1, mr // ext[0])
        reg = [min(r, c) for r, c in zip(reg, cache)]
        packed = operand is not None and reg[p_red - 1] == nr and cache[p_red - 1] % nr == 0
        # j's register tiles outside i's when the packed operand's micro-panel (Tk x NR)
        # fits half of L1: it stays there while i's register tiles pass over it (BLIS).
        # A deeper Tk (the result block leaves L2) streams it from L2 instead: then i's
        # tiles outside, so the broadcast operand's MR x Tk rows stay in L1 across the
        # panels (sgemm 2048^3 11%, 1024^3 2%, A B^T 4% faster; with a shallow Tk the
        # other order is 3-6% faster: mm_bias_relu, mlp2, bmm)
        kt = math.prod(cache[p_red + r] for r in range(len(red)))
        swapped = operand is not None and lead and kt * nr * itemsize <= self.machine.l1 // 2
        # outer loops kept inside the cache tile (an image's rows, for the weights), whose
        # panels together leave L2: the panels outermost, each read from memory once and
        # kept in L2 while the rows pass over it, not every panel again for every row
        # (ResNet-18's 512-channel 3x3 convolutions on 7 x 7, 8 panels of 147 KB a core)
        panels_first = not swapped and packed and math.prod(cache[:len(outer)]) > 1 and \
            cache[p_red - 1] * kt * itemsize > self.machine.l2 // 2
        whole = packed and lead and sym[len(outer)] and not swapped and \
            not self.options.tile and (not per_call or ext[p_red - 1] > cache[p_red - 1])
        least = None  # (one cache tile of all the symbolic rows: ``sizes.all_rows``)
        if whole:
            cache[len(outer)], least = all_rows(mr, ext[p_red - 1], cache[p_red - 1],
                                                self.machine.cores, per_call)
        node = T.tile(node, cache)
        loose = (len(outer), p_red - 1) if whole else \
            loose_tiles(ext, cache, sym, len(outer) * (cores is None), p_red, self.machine)
        node = T.isolate_full_tiles(node, cache, loose)
        point = node.child(0)
        if packed:
            point, decision = pack(point, sst, operand, [vars_[m] for m in order], cache,
                                   p_red - 1, nr, self.packs, batch,
                                   constant=operand.tensor in self.constants)
            self.packs += 1
            self.report.append(decision)
        if lead and sym[len(outer)]:  # (i's register tiles: after j's where permuted)
            later = swapped or panels_first
            point = T.rows_split(point, packed, p_red - 2 + later, least,
                                 None if later else p_red - 1)
        regn = T.tile(point, reg)
        if swapped:
            swap = list(range(n))
            swap[p_red - 2], swap[p_red - 1] = swap[p_red - 1], swap[p_red - 2]
            regn = T.permute(regn, swap)
        elif panels_first:
            regn = T.permute(regn, [p_red - 1] + list(range(p_red - 1)) + list(range(p_red, n)))
        regn = T.isolate_full_tiles(regn, reg)  # full register tiles in partial cache tiles
        regn = regn.band_split(p_red).child(0)  # the reduction loops of a register tile
        regn = T.mark(regn, "promote")
        inner = regn.child(0)  # (outer_r..., [ir,] jr, red_r...): only ir and jr are loops
        if span:  # the batch's loop and the rows' under one mark (``Promotion._rows``)
            inner = inner.band_split(1)
            name = f"rows:{inner.get_schedule_depth()}:{reg[1]}:span"
            inner = inner.insert_mark(isl.Id(name, context=inner.get_ctx())).child(0)
            inner = inner.child(0).band_split(1).child(0)
        elif outer:
            inner = inner.band_split(len(outer)).child(0)
        if lead and not span:  # the rows: a loop the code generator unrolls (isl's
            # unrolling took half of its AST time: ResNet-18's 21 groups 1.4 -> 0.7 s)
            inner = inner.band_split(1)
            name = f"rows:{inner.get_schedule_depth()}:{reg[len(outer)]}"
            inner = inner.insert_mark(isl.Id(name, context=inner.get_ctx())).child(0)
            inner = inner.child(0)
        inner = T.mark(inner, "simd")
        facts = {"order": order, "cache": cache, "register": reg, "_j": jname,
                 "_mr": reg[len(outer)] if lead else None, "_nr": reg[p_red - 1],
                 "_symrows": bool(lead and sym[len(outer)])}
        if whole:
            facts["rows"] = least
        if strided:
            facts["lanes"] = jname
        if panels_first:
            facts["panels"] = "outermost"
        self.report.append(Decision("contraction", [sst.name], facts))
        return inner

    def nonnegative(self, sst) -> bool:
        """Whether every index of the statement is >= 0 (tiles then start at multiples
        of their size, and offsets in a tile are indices modulo the tile size)."""
        dom = sst.domain
        return all(dom.dim_min_val(d).is_nonneg() for d in range(dom.dim(isl.dim_type.set)))

    # --- innermost loops -------------------------------------------------------------
    def sink_rows(self, node, ssts, mv, coinc):
        """A small window reduction (pooling, a depthwise convolution) below a band whose
        last member runs the result's last index: that member moves below the window
        loops (isl's band sink), so the rows of results are vectors updated once per
        window offset instead of each result reducing its window in a loop of 9 (3x3/2
        max pooling of 8x16x33x33: 98 -> 33 us, 3x3/1 of 8x16x34x34: 390 -> 30 us).
        Legal: the member is parallel, and the init still runs before the reduction for
        the whole row.  The node at the band's position afterwards, or None when the
        band stays."""
        n = len(coinc)
        if not coinc or not coinc[-1] or self.innermost(node) or not self.options.vectorize:
            return None
        bodies = [s for s in ssts if s.kind == "body"]
        if len(bodies) != 1 or bodies[0].stmt.op is None or \
                any(s.index != bodies[0].index for s in ssts):
            return None
        body = bodies[0]
        if any(mv[s.name][-1] is None or mv[s.name][-1] != self.target_var(s) for s in ssts):
            return None
        window = self.window_rows(body, mv[body.name][-1])
        if window is None:
            return None
        member = body.vars[mv[body.name][-1]]
        row = node.band_split(n - 1).child(0) if n > 1 else node
        if body.stmt.op in ("max", "min") and window <= 16 and \
                not all(unit_stride(r, member) for r in P.reads(body.stmt.rhs)):
            # a max or min over a small strided window: the member stays outside the
            # window loops as a vector loop, the window loops (promoted, then spelt out
            # by the code generator: ``Promotion``) accumulate each result in a register
            # with a NaN flag beside it: one max and one compare per window point, not a
            # NaN-propagating select on a row in memory, read with a stride per offset
            # (3x3/2 max pooling of 64 x 111 x 111: 88 -> 63 us, ResNet-18's of 64 x 112
            # x 112 160 -> 140 us; with unit stride the sunk rows stayed faster: 3x3/1
            # over 112 x 112 79 -> 89 us)
            self.report.append(Decision("window", [s.name for s in ssts],
                                        {"member": member, "window": window}))
            return T.mark(row, "simd").child(0)
        self.report.append(Decision("sink", [s.name for s in ssts],
                                    {"member": member, "window": window}))
        return row.band_sink().parent() if n > 1 else row.band_sink()

    def window_rows(self, body, last) -> int | None:
        """The window points (<= 64) of a reduction ``body`` over rows along its result's
        last index ``last``, a vector or more, unguarded (``sink_rows``)."""
        reads = P.reads(body.stmt.rhs)
        if last is None or last != self.target_var(body) or not all(
                r.indices and body.vars[last] in P.index_names(r.indices[-1]) for r in reads):
            return None  # some read would not be a row along ``last`` (a dot product)
        if all(P.index_names(r.indices[-1]) == {body.vars[last]} for r in reads):
            return None  # no window slides along the rows (blocked channels): registers
        if any(isinstance(e, P.Select) for e in P.walk(body.stmt.rhs)):
            return None  # a guarded read (a select) would not vectorise well
        window = math.prod(self.extent(body, v) for v, name in enumerate(body.vars)
                           if name in body.stmt.reduction_vars)
        lanes = self.machine.lanes(body.stmt.rhs.dtype.np_dtype.itemsize)
        return window if self.extent(body, last) >= lanes and window <= 64 else None

    def mark_inner(self, node, ssts, mv, coinc):
        n = len(coinc)
        last = n - 1
        bodies = [s for s in ssts if s.kind == "body"]
        if coinc[last]:
            if all(mv[s.name][last] is not None and mv[s.name][last] == self.target_var(s)
                   for s in ssts if s.stmt.indices):
                node = node.band_split(last).child(0) if n > 1 else node
                self.report.append(Decision("simd", [s.name for s in ssts]))
                return T.mark(node, "simd")
            return node
        if len(ssts) == 1 and bodies and bodies[0].stmt.op is not None:
            s = bodies[0]
            # the trailing members that each run one reduction index: one accumulator
            # across all of them (a 3-d group-norm sum is one vector reduction, not one
            # per row of 32)
            first = n
            while first > 0 and mv[s.name][first - 1] is not None and \
                    s.vars[mv[s.name][first - 1]] in s.stmt.reduction_vars:
                first -= 1
            if first < n:
                node = node.band_split(first).child(0) if first > 0 else node
                self.report.append(Decision("promote", [s.name]))
                return T.mark(node, "promote")
        return node


def _shared_pass(node) -> bool:
    """Whether ``node`` is a ``private:`` mark: one pass over a matrix for several
    statements, its loops and marks set by ``poly/privatize.py``."""
    return node.get_type() == isl.schedule_node_type.mark and \
        node.mark_get_id().get_name().startswith("private:")


def _windowed(read) -> bool:
    """Whether a subscript of ``read`` is more than an index or a constant (a window of
    a convolution: ``h + kh``)."""
    return not all(isinstance(x, (P.Index, P.Const)) for x in read.indices)


def _program_order(s):
    return (s.index, 0 if s.kind == "init" else 1)


def tile_schedule(schedule, scop, options, machine, pack=False, validity=None,
                  constants=()):
    t = Tiler(scop, options, machine, pack, validity, constants)
    return t.run(schedule), t.report
