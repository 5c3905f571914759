"""The rows of a partial cache tile shared by the threads (a ``rowsplit`` mark).

A contraction whose rows are symbolic (a dynamic batch) runs its full cache tiles of
rows in the parallel loop of tiles, and isl puts the rows they leave (fewer than a
tile: all of them below one tile) in a partial tile outside that loop, which ran on
one thread where the columns are one panel (a 10-statement row program's 128 -> 64
product: all 64 rows of a batch of 64 on one core).  ``tiling/strategy`` marks the
inside of the cache tile with the loop of its register tiles over the rows
(``poly/transform.rows_split``); where the mark is met outside every parallel loop (the
partial tile), its code runs as one parallel region: every thread packs its own copy
of the operand (the packed buffers are the threads' own), the register tiles of rows
are shared (``omp for``), and what follows them (the rows past the last whole register
tile) shares its register tiles of columns where the mark names their loop, or runs on
one thread (``omp single``), once all are done.  A parallel loop of tiles (of rows
whose count is symbolic; of columns that do not split evenly among the threads, from
the rows the mark names) may run as one region in which every thread runs every tile
(``tiles_split``).
"""
from __future__ import annotations

import re

import cgen as c
import islpy as isl

from ..tiling.pack import STREAM_ROWS
from .cexpr import ast_nodes, isl_expr, span


def rows_split(em, node, it: str, least: int | None = None, cols: str | None = None):
    """The code of the marked ``node`` (``em``: the ``emit.CEmitter``) as a parallel
    region sharing the loop ``it``, or None where it is not one: inside a parallel loop
    (the full tiles, but for ``tiles_split``'s), on one thread, in a kernel of fixed
    sizes, with buffers of the loops around it, or where the loop is not a child of the
    node's block after nothing but copies into packed buffers.  In ``tiles_split``'s
    region, the code that shares it, without a region of its own (``least``: the rows
    from which that pays in a loop of a fixed count of tiles).  ``cols``: the loop over
    register tiles of columns, which the threads share in the rows past the last whole
    register tile of rows (else they run on one thread)."""
    T = isl.ast_node_type
    if em.outlining != em.splitting or em.team < 2 or not em.scop.symbolic or \
            any(lcs for _, lcs in em.scoped):
        return None
    if node.get_type() == T.block:
        kids = node.block_get_children()
        kids = [kids.get_at(i) for i in range(kids.n_ast_node())]
    else:
        kids = [node]
    at, found = next(((i, f) for i, f in enumerate(_loop(em, k, it) for k in kids)
                      if f is not None), (None, None))
    if found is None or not all(_copies(em, k) for k in kids[:at]):
        return None
    guard, loop_node, after = found
    em.outlining += 1  # (nothing inside forks a region of its own)
    try:
        pre = [x for k in kids[:at] for x in em.node(k)]
        loop = em.node(loop_node)
        after = [x for k in after for x in em.node(k)]
        rest = [x for k in kids[at + 1:] for x in em.node(k)]
    finally:
        em.outlining -= 1
    if len(loop) != 1 or not isinstance(loop[0], c.For):  # (as it was: one thread)
        return pre + ([c.If(guard, c.Block(loop + after))] if guard else loop) + rest
    shared = [c.Pragma("omp for schedule(static)"), loop[0]] + _rest(after, cols)
    # (the guard depends on sizes only: every thread takes the same branch)
    region = pre + ([c.If(guard, c.Block(shared))] if guard else shared) + _rest(rest, cols)
    if em.splitting:  # (inside tiles_split's region already)
        em.split_hits += 1
        header = em.for_header(loop_node)[1]  # (rows: the span and the step less one)
        step = re.fullmatch(r"c\d+ \+= (\d+)L?", header[2])
        em.split_rows.append((span(header), least and step and least + 1 - int(step[1])))
        return region
    call = em.outline(region, list(em.iters))
    enough = _enough(em, em.for_header(loop_node)[1])
    if enough is None:  # (the loop's count not understood: as it was, on one thread)
        return [call]
    tests = [t for t in (em.parallel_if, enough) if t]
    # (the same function, alone where it would not pay: its ``omp for`` and ``omp
    # single`` then run on the calling thread)
    return [c.If(" && ".join(f"({t})" for t in tests), c.Block([
        c.Pragma("omp parallel" + em.team_clause(test=False)), c.Block([call])]),
        c.Block([call]))]


def tiles_split(em, n, header) -> tuple | None:
    """``(C test, code)``: the parallel loop of a symbolic contraction's full tiles of
    rows (``n``, its ``for`` clauses ``header``) as one parallel region in which every
    thread runs every tile and the threads share each tile's register tiles of rows (as
    ``rows_split`` shares a partial tile's); the test holds where that costs less than
    the loop of tiles, which leaves a thread idle for a whole tile where their count is
    not a multiple of the threads' (the 96-row tiles of a generic 128 -> 64 product at
    100 rows: all on one core, 1.75x the time of a kernel made for 100 rows), each
    thread then packing every tile's operand (``PACK_SHARE``).  A loop of a fixed count
    of tiles (of columns, the rows one tile: ``sizes.all_rows``) runs so where the rows
    reach the least its marks name (else where a tile's rows are too few to share, or
    the columns split evenly, it stays the loop of tiles).  None where no tile has a
    ``rowsplit`` mark, its count is fixed and its marks name no rows, or its rows could
    not be shared."""
    stride = re.fullmatch(r"c\d+ \+= (\d+)L?", header[2])
    values = span(header)
    if em.team < 2 or stride is None or values is None or not _marked(n.for_get_body()):
        return None
    fixed = not any(re.search(rf"\b{x}\b", values) for x in em.scop.symbolic)
    hits, step, seen = em.split_hits, int(stride.group(1)), len(em.split_rows)
    em.splitting += 1
    em.outlining += 1  # (nothing inside forks a region of its own)
    try:
        loop = em.node(n)
    finally:
        em.outlining -= 1
        em.splitting -= 1
    rows = em.split_rows[seen:]
    if em.split_hits == hits:
        return None
    if fixed:  # (tiles of columns, which the tiler could not share evenly: the rows
        # from which each thread packs every tile, ``sizes.all_rows``)
        if any(least is None or v is None or not set(re.findall(r"\bc\d+\b", v)) <=
               set(em.iters) for v, least in rows) or \
                em.direct and all(least > STREAM_ROWS for _, least in rows):
            return None  # (nor in the code for too few rows to pack: ``pack.direct_below``)
        test = " && ".join(sorted({f"({v}) >= {least}L" for v, least in rows}))
        call = em.outline(loop, list(em.iters))
        return test, [c.Pragma("omp parallel" + em.team_clause(test=False)), c.Block([call])]
    tiles, t, k = f"((({values}) + {step - 1}L) / {step}L)", em.team, PACK_SHARE
    # T tiles shared (each thread all T packs and T / t of the products) against a
    # loop of tiles (ceil(T / t) packs and products), a pack 1 / k of a tile's work
    test = f"{tiles} * {t + k}L < ({tiles} + {t - 1}L) / {t}L * {t * (k + 1)}L"
    call = em.outline(loop, list(em.iters))
    return test, [c.Pragma("omp parallel" + em.team_clause(test=False)), c.Block([call])]


def _rest(code: list, cols: str | None) -> list:
    """``code`` (the rows past the last whole register tile of rows) in a parallel
    region: its loop over register tiles of columns ``cols`` shared, where it is one such
    loop under a test of sizes (the same branch on every thread), else on one thread."""
    if not code:
        return []
    if cols and len(code) == 1 and isinstance(code[0], c.If) and code[0].else_ is None:
        body = code[0].then_.contents if isinstance(code[0].then_, c.Block) else \
            [code[0].then_]
        if len(body) == 1 and isinstance(body[0], c.For) and \
                body[0].start.startswith(f"long {cols} = "):
            return [c.If(code[0].condition, c.Block([
                c.Pragma("omp for schedule(static)"), body[0]]))]
    return [c.Pragma("omp single"), c.Block(code)]


def _marked(node) -> bool:
    """Whether the AST ``node`` holds a ``rowsplit`` mark."""
    return any(x.get_type() == isl.ast_node_type.mark and
               x.mark_get_id().get_name().startswith("rowsplit") for x in ast_nodes(node))


#: a tile's products over the packing of its operand, at least (``tiles_split``): a
#: 96-row tile of a 128 -> 64 product computes 96 rows from each element it packs
PACK_SHARE = 16

#: register tiles of rows each thread gets at least, or the rows stay on one thread: each
#: thread packs its own copy of the operand first (a batch of 8 rows, one register tile
#: and two rows, ran 1 us slower shared)
LEAST_TILES = 2


def _enough(em, header) -> str | None:
    """C that holds where the loop of ``header`` (its ``for`` clauses) has
    ``LEAST_TILES`` iterations per thread; None where its bounds are not ``c <= e``
    or ``c < e`` with a constant step (``cexpr.span``)."""
    values, k = span(header), re.fullmatch(r"c\d+ \+= (\d+)L?", header[2])
    if values is None or k is None:
        return None
    return f"{values} > {(LEAST_TILES * em.team - 1) * int(k.group(1))}L"


def _loop(em, node, it: str):
    """``(C guard or None, the loop, what follows it under the guard)`` where ``node``
    is the loop ``it`` that is not a copy into a packed buffer (isl names the copy's
    loops by depth too), or a test without an else around that loop first (the full
    register tiles of rows: ``M % 128 >= 8``); else None."""
    T = isl.ast_node_type
    guard, after = None, []
    if node.get_type() == T.if_ and not node.if_has_else_node():
        guard, node = isl_expr(node.if_get_cond()), node.if_get_then_node()
        if node.get_type() == T.block:
            kids = node.block_get_children()
            node, after = kids.get_at(0), [kids.get_at(i) for i in range(1, kids.n_ast_node())]
    if node.get_type() == T.for_ and \
            node.for_get_iterator().id_get_id().get_name() == it and not _copies(em, node):
        return guard, node, after
    return None


def _copies(em, node) -> bool:
    """Whether the AST ``node`` does nothing but copy into packed buffers."""
    T = isl.ast_node_type
    t = node.get_type()
    if t == T.for_:
        return _copies(em, node.for_get_body())
    if t == T.block:
        kids = node.block_get_children()
        return all(_copies(em, kids.get_at(i)) for i in range(kids.n_ast_node()))
    if t == T.if_:  # (the partial panel of a loose tile of columns)
        return not node.if_has_else_node() and _copies(em, node.if_get_then_node())
    if t == T.user:
        return node.user_get_expr().op_get_arg(0).id_get_id().get_name() in em.packs
    return False
