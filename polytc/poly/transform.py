"""Schedule-tree transformations.  Each takes an ``isl.ScheduleNode`` and returns the
node at the same position of the new tree (isl trees are immutable values)."""
from __future__ import annotations

import islpy as isl

from .schedule import insert_mark, member_coefficients, moves_reduction


def mark(node, kind: str):
    """A mark above the band ``node`` (see ``poly.schedule.insert_mark``); returns the
    band below the mark."""
    return insert_mark(node, kind)


def multi_val(node, values):
    mv = isl.MultiVal.zero(node.band_get_space())
    for i, v in enumerate(values):
        mv = mv.set_val(i, isl.Val.int_from_si(node.get_ctx(), int(v)))
    return mv


def tile(node, sizes):
    """Tile a band: returns the tile band (its child is the point band)."""
    ctx = node.get_ctx()
    ctx.set_tile_scale_tile_loops(1)
    ctx.set_tile_shift_point_loops(1)
    return node.band_tile(multi_val(node, sizes))


#: isl's budget for finding a band's full tiles; past it, the tiles are not isolated
ISOLATE_OPERATIONS = 5_000_000


def isolate_full_tiles(tile_node, sizes, loose: tuple = ()):
    """Ask the AST generator to emit full tiles separately (constant trip counts inside);
    unchanged when isl runs past ``ISOLATE_OPERATIONS`` working them out (the guards
    stay in every tile: correct, slower).  ``loose``: band members whose tiles count as
    full when partial (their loop keeps all its tiles together)."""
    ctx = tile_node.get_ctx()
    ctx.set_max_operations(ISOLATE_OPERATIONS)
    ctx.reset_operations()
    try:
        opts = _isolated(tile_node, sizes, loose)
    except isl.Error:
        return tile_node
    finally:
        ctx.set_max_operations(0)
    if opts is None:
        return tile_node
    return tile_node.band_set_ast_build_options(opts)


def _isolated(tile_node, sizes, loose: tuple = ()):
    """The ``isolate`` AST build option of ``isolate_full_tiles``; None when every tile
    is full: then the option changes no loop but costs the AST generator a separation
    of each band below it (a ResNet-18 convolution group's AST: 40 -> 27 ms)."""
    ctx = tile_node.get_ctx()
    dom = tile_node.get_domain()
    prefix = tile_node.get_prefix_schedule_union_map()
    tmap = tile_node.band_get_partial_schedule_union_map()
    pmap = tile_node.child(0).band_get_partial_schedule_union_map()
    image = prefix.range_product(tmap).range_product(pmap).intersect_domain(dom).range()
    pairs = isl.Set.from_union_set(image).unwrap()  # [prefix -> tile] -> point
    tiles = pairs.domain()
    for d in sorted(loose, reverse=True):  # (a tile is full whatever it holds of them)
        pairs = pairs.project_out(isl.dim_type.out, d, 1)
    sizes = [s for d, s in enumerate(sizes) if d not in loose]
    names = [f"o{i}" for i in range(len(sizes))]
    cons = " and ".join(f"0 <= {n} < {s}" for n, s in zip(names, sizes))
    box = isl.Set.read_from_str(ctx, "{ [" + ", ".join(names) + "] : " + cons + " }")
    full = whole(pairs, box)
    if full.is_equal(tiles):
        return None
    # isl replaces an isolated set by its simple hull: full tiles found as a union
    # (those of a full cache tile and those of the partial one) would become their
    # hull, partial tiles included, and the partial cache tile's register tiles would
    # all run with guards.  One convex set says the same where it is exact.
    hull = isl.Set.from_basic_set(full.polyhedral_hull()).intersect(tiles)
    if hull.is_subset(full):
        full = hull
    return isl.UnionSet.from_set(full.set_tuple_name("isolate"))


def whole(pairs, box):
    """The points of ``pairs``' domain whose image holds all of ``box`` (full tiles:
    every point of the box is an instance)."""
    dom = pairs.domain()
    missing = isl.Map.from_domain_and_range(dom, box).subtract(pairs)
    return dom.subtract(missing.domain())


def permute(node, order):
    """Reorder the members of a permutable band (legal for any order)."""
    n = node.band_n_member()
    if list(order) == list(range(n)):
        return node
    mupa = node.band_get_partial_schedule()
    coincident = [node.band_member_get_coincident(i) for i in range(n)]
    lst = isl.UnionPwAffList.alloc(node.get_ctx(), n)
    for i in order:
        lst = lst.add(mupa.get_union_pw_aff(i))
    space = mupa.get_space()
    new = isl.MultiUnionPwAff.from_union_pw_aff_list(space, lst)
    node = node.delete().insert_partial_schedule(new)
    node = node.band_set_permutable(1)
    for pos, i in enumerate(order):
        node = node.band_member_set_coincident(pos, coincident[i])
    return node


def member_vars(node) -> dict:
    """Statement name -> for each band member, the index (position in the statement's
    tuple) it schedules, when the member is exactly that one index, else None."""
    out = {}
    for name, members in member_coefficients(node).items():
        found = []
        for c in members:
            ok = c is not None and c[1] == 0 and sorted(c[0]) == [0] * (len(c[0]) - 1) + [1]
            found.append(c[0].index(1) if ok else None)
        out[name] = found
    return out


def statements_below(node) -> list:
    """Names of the statements whose instances reach ``node`` (of a band below an
    extension, where isl cannot tell the domain: the statements the band schedules)."""
    names: list = []
    try:
        dom = node.get_domain()
    except isl.Error:
        if node.get_type() != isl.schedule_node_type.band:
            raise
        dom = node.band_get_partial_schedule_union_map().domain()
    dom.foreach_set(lambda s: names.append(s.get_tuple_name()))
    return names


def refresh_coincidence(node, validity, by_name=None):
    """Flag the members of a band that carry none of the dependences ``validity`` between
    the instances under it as coincident (parallel).  isl computed the flags for the band
    it built; a band split off it (a statement group distributed from the others) may
    have lost the dependences that made a member sequential.  ``by_name`` (statement
    name -> statement): no member that moves a reordered reduction along a reduction
    index (``schedule.moves_reduction``): isl's dependences link each instance to the
    next in program order only, and a band that reorders a reduction (``T max= B(i, r)``
    over ``r`` outside ``i``) carries none of them along ``i`` though every ``i`` updates
    ``T``: it ran in parallel and lost updates, now and then."""
    n = node.band_n_member()
    if validity is None or all(node.band_member_get_coincident(m) for m in range(n)):
        return node
    try:
        dom = node.get_domain()
        prefix = node.get_prefix_schedule_union_map()
    except isl.Error:  # below an extension: keep isl's flags
        return node
    sched = prefix.flat_range_product(node.band_get_partial_schedule_union_map())
    sched = sched.intersect_domain(dom)
    deps = validity.intersect_domain(dom).intersect_range(dom)
    if deps.is_empty():
        deltas = None
    else:
        deltas = isl.Set.from_union_set(deps.apply_domain(sched).apply_range(sched).deltas())
    first = _dims(prefix)
    coefs = member_coefficients(node) if by_name is not None else {}
    for m in range(n):
        if node.band_member_get_coincident(m) or (
                by_name is not None and moves_reduction(coefs, m, by_name)):
            continue
        if deltas is not None:
            carried = deltas
            for d in range(first + m):
                carried = carried.fix_val(isl.dim_type.set, d, isl.Val.zero(carried.get_ctx()))
            zero = carried.fix_val(isl.dim_type.set, first + m, isl.Val.zero(carried.get_ctx()))
            if not carried.is_subset(zero):
                continue
        node = node.band_member_set_coincident(m, 1)
    return node


def _dims(umap) -> int:
    """The number of output dimensions of a union map whose maps share one range space."""
    found = [0]

    def one(m):
        found[0] = m.dim(isl.dim_type.out)

    umap.foreach_map(one)
    return found[0]


def rows_split(point, packed: bool, row: int, least: int | None = None,
               cols: int | None = None):
    """A ``rowsplit:<d>:<least>:<j>`` mark above the inside of a contraction's cache
    tile at ``point`` (its packing too), ``d`` the dimension of the register tiles'
    loop over the symbolic rows (member ``row`` of the band ``point`` becomes): the
    rows that the full cache tiles leave, in a partial one outside the parallel loop of
    tiles, are shared by the threads there (``codegen_c/rowsplit.py``); with ``least``,
    in the parallel loop of tiles too, from ``least`` rows (``sizes.all_rows``); ``j``
    (member ``cols``): the loop over register tiles of columns, which the threads share
    in the rows past the last whole register tile of rows.  Returns ``point``."""
    depth = point.get_schedule_depth()
    name = f"rowsplit:{depth + row}:{'' if least is None else least}:" + \
        ("" if cols is None else str(depth + cols))
    ctx = point.get_ctx()
    # the packing's extension, sequence and filter above the cache tile's inside (none
    # above a band at the root)
    top = point.parent().parent().parent() if packed and point.get_tree_depth() >= 3 \
        else None
    if top is None or top.get_type() != isl.schedule_node_type.extension:  # (unpacked,
        return point.insert_mark(isl.Id(name, context=ctx)).child(0)  # or a constant
    return top.insert_mark(isl.Id(name, context=ctx)).child(0).child(0).child(1).child(0)
