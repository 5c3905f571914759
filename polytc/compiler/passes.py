"""The passes of the pipeline, each a function ``Build -> Build`` (see ``pipeline.py``
for their order and when each applies)."""
from __future__ import annotations

import islpy as isl

from ..diagnostics import UnsupportedError
from ..lang import program as P
from ..poly import fusion as F
from ..poly import schedule as sched
from ..poly.handsched import replay
from ..poly.privatize import shared_pass
from ..poly.scop import Scop
from ..tiling.alias import aliases
from ..tiling.contract import contract
from ..tiling.extents import least_symbolic, statement_points
from ..tiling.contract import text as contract_text
from ..tiling.fold import fold
from ..tiling.gpu import map_schedule, strategy
from ..machine import host, threads
from ..tiling.strategy import tile_schedule
from .build import Build


def p_source(b: Build) -> Build:
    return b.stage("tc", str(b.program))


def p_scop(b: Build) -> Build:
    ctx = isl.Context()
    scop = Scop(b.program, b.env, ctx, b.options.symbolic)
    return b.stage("scop", str(scop), ctx=ctx, scop=scop)


def p_dependences(b: Build) -> Build:
    deps = sched.dependences(b.scop)
    return b.stage("dependences", str(deps), deps=deps)


def p_initial_values(b: Build) -> Build:
    """The outputs and temporaries whose initial contents matter, and what they are: an
    output some element of which no statement writes, or any tensor some element of
    which is read before a statement writes it (``O(i) += A(i,j)``)."""
    prog, fills = b.program, {}
    for t in prog.outputs + prog.temporaries:
        if b.deps.reads_before_write(t.name) or (
                t.role == "output" and not b.scop.fully_written(t.name)):
            fills[t.name] = P.initial_value(prog, t.name)
    text = "\n".join(f"{k} = {v}" for k, v in fills.items()) or \
        "(none: the statements write every element before reading it)"
    return b.stage("initial_values", text, fills=fills)


def p_schedule(b: Build) -> Build:
    """isl's schedule for the fusion strategy of the options (``auto`` resolved; on a
    target with private reductions, one pass over a matrix first: strategy ``shared``,
    ``poly/privatize.py``), or a hand schedule (``polytc.Schedule``), replayed and
    checked."""
    if b.options.schedule:
        if b.backend.grid:
            raise UnsupportedError(f"hand schedules compile for the C target, not "
                                   f"'{b.target}'", hint="use kernel.to('c')")
        s = replay(b.scop, b.deps, b.options.schedule)
        return b.but(schedule=s, isl_schedule=s, fusion="hand")
    if b.options.fusion == "auto" and b.backend.private_reductions:
        one = shared_pass(b.scop, b.deps)  # one pass over a matrix, before isl's
        if one is not None:  # strategies
            return b.but(schedule=one, isl_schedule=one, fusion="shared")
    team = threads(b.options.num_threads) if b.options.parallel and cpu_loops(b) else 1
    s, fusion = F.isl_schedule(b.scop, b.deps, b.options.fusion, team)
    return b.but(schedule=s, isl_schedule=s, fusion=fusion)


def p_fuse_outer(b: Build) -> Build:
    """Fuse the outer loops of statement groups isl left apart (``fusion="max"``)."""
    assert b.schedule is not None  # the pass applies after isl's schedule only
    s = F.fuse_outer(b.schedule, b.scop, b.deps.scheduling_validity)
    return b.but(schedule=s, isl_schedule=s)


def p_serial_reductions(b: Build) -> Build:
    """Loops that move a reordered reduction along a reduction index are not parallel."""
    assert b.schedule is not None  # the pass applies after isl's schedule only
    s = sched.reduction_members_serial(b.schedule, b.scop)
    return b.but(schedule=s, isl_schedule=s)


def current_schedule(b: Build) -> isl.Schedule:
    """The schedule so far; program order when the scheduler was switched off."""
    return b.schedule if b.schedule is not None else sched.program_order(b.scop)


def cpu_loops(b: Build) -> bool:
    """Whether the loops keep the CPU's tiling and parallel loop (C, and the ``groups``
    mapping of OpenCL CPU devices); never under a hand schedule."""
    if b.options.schedule:
        return False
    return not b.backend.grid or strategy(b.options, b.device) == "groups"


def p_tile(b: Build) -> Build:
    s, decisions = tile_schedule(current_schedule(b), b.scop, b.options, host(),
                                 pack=b.backend.packing, validity=b.deps.validity,
                                 constants=b.options.constants if b.backend.prepacking else ())
    return b.stage("tiling", "\n".join(str(d) for d in decisions), schedule=s,
                   tiling=tuple(decisions), untiled=current_schedule(b))


def p_fold(b: Build) -> Build:
    """Inits and epilogues of tiled contractions run in their register tiles
    (``tiling/fold.py``)."""
    s, found = fold(current_schedule(b), b.scop, b.tiling)
    gone = {d.facts[k] for d in found for k in ("init", "epilogue")}
    kept = tuple(d for d in b.tiling  # what the tiler did to the folded statements' nests
                 if d.kind not in ("simd", "promote") or not set(d.subjects) <= gone)
    return b.stage("fold", "\n".join(str(d) for d in found) or "(none)", schedule=s,
                   tiling=kept + tuple(found))


def p_parallel(b: Build) -> Build:
    if not b.options.parallel:
        return b
    points = sum(statement_points(s, b.env, b.scop.symbolic) for s in b.scop.stmts)
    team = threads(b.options.num_threads)
    # operands packed at each call go to each thread's own buffer (``codegen_c/pack.py``)
    per_call = any(d.kind == "pack" and d.facts.get("_box") is None for d in b.tiling)
    # the loops inside a loop over a symbolic size run in parallel where it has fewer
    # iterations than threads: never, where the kernel has too little work to fork at
    # such a size (its run-time test, ``backends/c.py``), and their marks would cost the
    # loops their vector code (a generic 64-wide softmax's rows ran 10x slower, one call
    # of an outlined body per element)
    idle = len(b.scop.symbolic) == 1 and least_symbolic(
        b.scop.stmts, b.env, b.scop.symbolic, b.options.parallel_min_points) >= team
    s = sched.mark_parallel(current_schedule(b), b.options.parallel_min_points, points,
                            team, nested=not per_call and not idle)
    return b.but(schedule=s)


def p_contract(b: Build) -> Build:
    """Temporaries that live within one iteration of a parallel loop become buffers of
    that iteration (``tiling/contract.py``)."""
    packed = {d.facts["tensor"] for d in b.tiling if d.kind == "pack"}
    folds = [d for d in b.tiling if d.kind == "fold"]
    # a contraction's partial sums kept in its epilogue's result need no buffer at all
    kept = aliases(b.scop, folds, b.fills, packed)
    # an operand packed at each call may be contracted (its copy reads it where it is);
    # one packed once, before the first call, is a constant
    once = {d.facts["tensor"] for d in b.tiling if d.kind == "pack" and d.facts.get("_box")}
    found = contract(current_schedule(b), b.scop, b.fills,
                     once | {d.subject for d in kept}, host().l2, folds, packed - once)
    found += kept
    return b.stage("contraction", contract_text(found), tiling=b.tiling + tuple(found))


def p_map(b: Build) -> Build:
    s, launches, report = map_schedule(current_schedule(b), b.scop, b.options, b.device)
    text = "\n".join(str(entry) for entry in report) + "\n" + "\n".join(
        f"{l.name}: grid {l.grid} block {l.block} shared {l.shared}" for l in launches)
    return b.stage("mapping", text, schedule=s, launches=tuple(launches),
                   mapping=tuple(report))


def p_ast(b: Build) -> Build:
    s = current_schedule(b)
    b = b.stage("schedule", sched.schedule_tree_text(s), schedule=s)
    assert b.ctx is not None
    ast = sched.build_ast(s, b.scop.context)
    return b.stage("ast", ast.to_C_str(), ast=ast)


def p_codegen(b: Build) -> Build:
    """The target's code (``c``, ``opencl``, ``cuda`` stage): its backend's generator."""
    return b.backend.generate(b)


