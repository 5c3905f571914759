"""Mapping a schedule onto a GPU or an OpenCL device, shared by both accelerator targets.

The schedule tree is cut into **kernels** (each child of the outermost sequence is one
launch: a launch boundary is the only global barrier a device has) and each kernel's
loops are mapped with marks that the code generator (``codegen_c/gpu.py``) turns into
loops over block and thread ids:

* ``threads`` (GPUs): the leading coincident members of a kernel's outermost band are
  tiled; up to three tile loops run on blocks (work-groups), the point loops of the
  same members on threads (work-items), the member that is unit-stride for the writes on
  x so that neighbouring threads touch neighbouring addresses.  A permutable
  contraction band is tiled along its reduction members too, so the reduction tile loop
  sits between the block and the thread loops: that is where shared memory is filled
  (``tiling/promote.py``).  Reductions below the threads keep their accumulator in a
  register (``promote`` marks).  A kernel whose outer loop is sequential (a scan, a
  time loop) runs on one block, its inner parallel loops on threads, with a barrier
  after each.
* ``groups`` (CPU devices such as PoCL, where a work-group is one core's loop): the CPU
  schedule (cache and register tiles of ``tiling/strategy.py``) is kept and its outer
  parallel loop runs on work-groups of one work-item each.

Marks: ``kernel:<k>``, ``block:<d>:<m>`` and ``thread:<d>:<m>`` (the ``m`` members of
the band below, from schedule dimension ``d``, map to axes ``m-1 .. 0``; axis 0 is x).
Every mapped loop is distributed cyclically (``c = lo + step*id; c += step*count``), so
any grid and block size is correct; the sizes only decide speed.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from ..poly import transform as T
from ..poly.schedule import member_coefficients
from .decisions import Decision
from .promote import promote

_BAND = isl.schedule_node_type.band
_MARK = isl.schedule_node_type.mark


@dataclass(frozen=True)
class Device:
    """What the cost model knows about an accelerator."""
    kind: str  # "gpu" | "cpu"
    name: str
    compute_units: int = 1
    max_block: int = 1024  # threads per block
    local_memory: int = 48 * 1024  # bytes of shared memory per block

    def key(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Launch:
    """One kernel launch: its grid (blocks per axis) and block (threads per axis),
    axis 0 (x) first."""
    name: str
    grid: list = field(default_factory=lambda: [1, 1, 1])
    block: list = field(default_factory=lambda: [1, 1, 1])
    shared: list = field(default_factory=list)  # (tensor, sizes) promoted in this kernel

    def to_json(self) -> dict:
        return {"name": self.name, "grid": list(self.grid), "block": list(self.block),
                "shared": [[t, list(s)] for t, s in self.shared]}


def strategy(options, device: Device) -> str:
    if options.mapping != "auto":
        return options.mapping
    return "groups" if device.kind == "cpu" else "threads"


# --- kernels -------------------------------------------------------------------------
def kernel_paths(schedule) -> list:
    """Child-index paths (from the root) of the kernels: the nodes below the filters of
    the outermost sequences, or the root's child when there is no sequence."""
    out = []

    def walk(node, path):
        if node.get_type() in (isl.schedule_node_type.sequence, isl.schedule_node_type.set):
            for i in range(node.n_children()):
                walk(node.child(i).child(0), path + [i, 0])
        else:
            out.append(path)

    walk(schedule.get_root().child(0), [0])
    return out


def _at(schedule, path):
    node = schedule.get_root()
    for i in path:
        node = node.child(i)
    return node


def map_schedule(schedule, scop, options, device: Device):
    """The schedule with kernel and mapping marks, the launches, and a report."""
    how = strategy(options, device)
    mapper = (ThreadMapper if how == "threads" else GroupMapper)(scop, options, device)
    launches = []
    for k, path in enumerate(kernel_paths(schedule)):
        launch = Launch(f"polytc_k{k}")
        node = mapper.kernel(_at(schedule, path), launch)
        node = node.insert_mark(isl.Id(f"kernel:{k}", context=node.get_ctx()))
        schedule = node.get_schedule()
        launches.append(launch)
    return schedule, launches, mapper.report


# --- facts ---------------------------------------------------------------------------
def member_range(node, member) -> tuple:
    """(min, max) of one band member's values over the band's domain."""
    upa = node.band_get_partial_schedule().get_union_pw_aff(member)
    img = isl.UnionMap.from_union_pw_aff(upa).intersect_domain(node.get_domain()).range()
    s = isl.Set.from_union_set(img)
    return s.dim_min_val(0).to_python(), s.dim_max_val(0).to_python()


def leading_coincident(node, start=0) -> int:
    n = 0
    while start + n < node.band_n_member() and node.band_member_get_coincident(start + n):
        n += 1
    return n


def map_mark(band, kind: str, m: int):
    """A ``kind:<d>:<m>`` mark above ``band`` (``d`` its schedule depth); returns the
    band below the mark."""
    name = f"{kind}:{band.get_schedule_depth()}:{m}"
    return band.insert_mark(isl.Id(name, context=band.get_ctx())).child(0)


def _runs_once(band) -> bool:
    """Whether a statement of ``band`` sits at one value of its first member among
    others that loop over it (``T3 = T1(2)`` beside ``T1(i) = ...``): isl generates it
    next to the loop, so on a grid it would run in block 0 and read what another block
    writes, which no barrier orders; on one block, barriers do (the differential
    fuzzer's find)."""
    coefs = member_coefficients(band)
    return len(coefs) > 1 and any(
        members[0] is not None and not any(members[0][0]) for members in coefs.values())


def _before_fixed(band, n: int) -> int:
    """How many of the first ``n`` members of ``band`` can be mapped on the threads of
    one block: up to the first at one value of which a statement sits while others loop
    over it (``T0 += T1(1, 1, 1)`` beside the loops that write ``T1``).  isl generates
    the statement inside the loops of the members before it, where one thread runs it
    and reads what others write, and no barrier can order them there (the loops'
    iteration counts differ between threads: the differential fuzzer's find)."""
    coefs = list(member_coefficients(band).values())
    for m in range(n):
        col = [members[m] for members in coefs]
        if any(c is not None and not any(c[0]) for c in col) and \
                any(c is None or any(c[0]) for c in col):
            return m
    return n


def _pad(values, m, fill=1) -> list:
    """The last ``m`` entries of ``values``, padded in front with ``fill``."""
    v = list(values)[-m:]
    return [fill] * (m - len(v)) + v


class _Mapper:
    def __init__(self, scop, options, device: Device):
        self.scop, self.options, self.device = scop, options, device
        self.by_name = {s.name: s for s in scop.stmts}
        self.report: list = []

    def x_last(self, node, n) -> list:
        """An order of the first ``n`` (coincident) members with the one that is unit
        stride for the writes last, so that it maps to x."""
        ranks = self.stride_rank(node, n)
        return sorted(range(n), key=lambda i: (-ranks[i], i))

    def stride_rank(self, node, n) -> list:
        """For each of the first ``n`` members, how far from unit stride its writes are
        (0: it is the last subscript of every write it appears in)."""
        mv = T.member_vars(node)
        ranks = []
        for m in range(n):
            worst = 0
            for name, members in mv.items():
                s = self.by_name[name]
                v = members[m]
                if v is None or s.vars[v] not in s.stmt.indices:
                    worst = max(worst, 8)
                    continue
                worst = max(worst, len(s.stmt.indices) - 1 - s.stmt.indices.index(s.vars[v]))
            ranks.append(worst)
        return ranks


class ThreadMapper(_Mapper):
    def kernel(self, node, launch: Launch):
        if node.get_type() == _BAND and node.band_member_get_coincident(0) and \
                not _runs_once(node):
            return self.blocks(node, launch)
        return self.one_block(node, launch)

    # --- a parallel outer band: tiles on blocks, points on threads ------------------
    def block(self, m) -> list:
        """Threads per block along ``m`` mapped members (x last)."""
        if self.options.block is not None:
            return _pad(self.options.block, m)
        return {1: [256], 2: [8, 32], 3: [2, 4, 32]}[m]

    def sizes(self, m, contraction):
        o = self.options
        block = self.block(m)
        if o.block_tile is not None:
            tile = _pad(o.block_tile, m)
        elif contraction and m >= 2:
            tile = [1] * (m - 2) + [4 * block[-2], block[-1]]
        else:
            tile = list(block)
        return block, tile

    def blocks(self, node, launch):
        depth = node.get_tree_depth()
        n = leading_coincident(node)
        m = min(n, 3)
        total = node.band_n_member()
        red_tile = self.options.reduction_tile
        if red_tile is None:
            red_tile = 32 if self.options.shared_memory else 0
        whole = node.band_get_permutable() and total > n and red_tile > 0 and \
            self.contraction(node, n)
        par = self.x_last(node, n)
        if whole:
            node = T.permute(node, par + list(range(n, total)))
        else:
            if total > n:
                node = node.band_split(n)
            node = T.permute(node, par)
        if n > m:  # outer parallel members beyond three: sequential loops in each thread
            node = node.band_split(n - m).child(0)
        block, tile = self.sizes(m, whole)
        ranges = [member_range(node, i) for i in range(m)]
        tile = [max(1, min(t, hi - lo + 1)) for t, (lo, hi) in zip(tile, ranges)]
        block = [max(1, min(b, t)) for b, t in zip(block, tile)]
        nred = node.band_n_member() - m
        sizes = tile + [max(1, min(red_tile, hi - lo + 1)) for lo, hi in
                        (member_range(node, m + r) for r in range(nred))]
        node = T.tile(node, sizes)
        if nred:
            node = node.band_split(m)
        grid = [hi // t - lo // t + 1 for (lo, hi), t in zip(ranges, tile)]
        if self.options.grid is not None:
            grid = [min(g, c) for g, c in zip(grid, _pad(self.options.grid, m, 1 << 30))]
        grid = [min(g, 65535) if a else g for g, a in zip(grid, range(m - 1, -1, -1))]
        launch.grid = list(reversed(grid)) + [1] * (3 - m)
        launch.block = list(reversed(block)) + [1] * (3 - m)
        node = map_mark(node, "block", m)
        # down to the point band: below the tile band (and the reduction tile band)
        node = node.child(0)
        if nred:
            node = node.child(0)
        if nred:
            node = node.band_split(m)
        node = map_mark(node, "thread", m)
        self.report.append(Decision("threads", [launch.name], {
            "tile": tile, "block": block, "reduction_tile": sizes[m:]}))
        node = self.inner(node)
        if self.options.shared_memory:
            node = promote(node.parent(), self.scop, launch, self.device,
                           self.written(node)).child(0)
        while node.get_tree_depth() > depth:
            node = node.parent()
        return node

    def written(self, node) -> set:
        """Tensors written by the statements below ``node``'s kernel."""
        top = node
        while top.get_type() != isl.schedule_node_type.domain and not (
                top.get_type() == _MARK and top.mark_get_id().get_name().startswith("kernel")):
            if top.get_parent_type() in (isl.schedule_node_type.filter,
                                         isl.schedule_node_type.domain):
                break
            top = top.parent()
        return {self.by_name[n].stmt.tensor for n in T.statements_below(top)}

    def contraction(self, node, n) -> bool:
        """One reduction statement whose every band member is one of its indices."""
        mv = T.member_vars(node)
        if len(mv) != 1:
            return False
        name, members = next(iter(mv.items()))
        s = self.by_name[name]
        return s.kind == "body" and s.stmt.op is not None and \
            all(v is not None for v in members)

    # --- below the threads: register promotion, unrolling -------------------------------
    def inner(self, node):
        """Mark reduction bands below ``node`` (a thread-mapped band) for register
        promotion and unrolling; returns the node at the same position."""
        depth = node.get_tree_depth()

        def visit(n):
            if n.get_type() == _BAND and n.get_tree_depth() > depth:
                marked = self.reduction_band(n)
                if marked is not None:
                    return marked
            for i in range(n.n_children()):
                n = visit(n.child(i)).parent()
            return n

        return visit(node)

    def reduction_band(self, node):
        mv = T.member_vars(node)
        if len(mv) != 1:
            return None
        name, members = next(iter(mv.items()))
        s = self.by_name[name]
        if s.kind != "body" or s.stmt.op is None or any(
                v is None or s.vars[v] not in s.stmt.reduction_vars for v in members):
            return None
        if self.options.unroll:
            for i in range(node.band_n_member()):
                lo, hi = member_range(node, i)
                if hi - lo + 1 <= self.options.unroll:
                    node = node.band_member_set_ast_loop_type(i, isl.ast_loop_type.unroll)
        if self.options.private_memory:
            node = T.mark(node, "promote").parent()
        return node

    # --- a sequential outer loop: one block, inner parallel loops on threads ----------
    def one_block(self, node, launch):
        """Map the outermost coincident members below ``node`` to the threads of the one
        block of this kernel; returns the node at the same position."""
        depth = node.get_tree_depth()
        if node.get_type() == _BAND:
            first = next((i for i in range(node.band_n_member())
                          if node.band_member_get_coincident(i)), None)
            if first is not None:
                if first:
                    node = node.band_split(first).child(0)
                n = _before_fixed(node, leading_coincident(node))
            if first is not None and n:
                if node.band_n_member() > n:
                    node = node.band_split(n)
                node = T.permute(node, self.x_last(node, n))
                m = min(n, 3)
                if n > m:
                    node = node.band_split(n - m).child(0)
                block = self.block(m)
                ext = [hi - lo + 1 for lo, hi in (member_range(node, i) for i in range(m))]
                block = [max(1, min(b, e)) for b, e in zip(block, ext)]
                for a, b in enumerate(reversed(block)):
                    launch.block[a] = max(launch.block[a], b)
                node = map_mark(node, "thread", m)
                self.report.append(Decision("one block", [launch.name], {"block": block}))
                node = self.inner(node)
                while node.get_tree_depth() > depth:
                    node = node.parent()
                return node
        for i in range(node.n_children()):
            node = self.one_block(node.child(i), launch).parent()
        while node.get_tree_depth() > depth:  # a band split above, nothing mapped
            node = node.parent()
        return node


class GroupMapper(_Mapper):
    """The CPU schedule as it is; its ``parallel`` mark at the top of a kernel becomes a
    loop over work-groups (one work-item each), other ``parallel`` marks are dropped."""

    def kernel(self, node, launch: Launch):
        top = node.get_tree_depth()
        if node.get_type() == _MARK and node.mark_get_id().get_name().startswith("parallel"):
            band = node.child(0)
            lo, hi = member_range(band, 0)
            count = hi - lo + 1
            if count <= 1 << 16:  # a tile loop's values are multiples of its tile size
                upa = band.band_get_partial_schedule().get_union_pw_aff(0)
                img = isl.UnionMap.from_union_pw_aff(upa).intersect_domain(
                    band.get_domain()).range()
                count = max(1, isl.Set.from_union_set(img).count_val().to_python())
            cap = _pad(self.options.grid, 1)[0] if self.options.grid else \
                8 * self.device.compute_units
            launch.grid = [max(1, min(count, cap)), 1, 1]
            depth = node.get_schedule_depth()
            node = node.delete()
            node = node.insert_mark(isl.Id(f"block:{depth}:1", context=node.get_ctx()))
            self.report.append(Decision("groups", [launch.name], {"grid": launch.grid[0]}))
            node = node.child(0)
        node = self.drop_parallel(node)
        while node.get_tree_depth() > top:
            node = node.parent()
        return node

    def drop_parallel(self, node):
        if node.get_type() == _MARK and node.mark_get_id().get_name().startswith("parallel"):
            node = node.delete()
        for i in range(node.n_children()):
            node = self.drop_parallel(node.child(i)).parent()
        return node
