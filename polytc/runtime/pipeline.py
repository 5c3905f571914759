"""The compiler after semantic analysis, as one readable list of named passes.

Each pass takes and returns a ``Build`` (the state of one specialisation).  Passes are
logged and timed at ``POLYTC_DEBUG=1``, their stage is dumped at ``POLYTC_DEBUG=2``, and
the optional ones can be switched off with ``Options(disable=("name", ...))``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import islpy as isl

from .. import config
from ..codegen_c.emit import CEmitter
from ..lang import program as P
from ..lang import sizes as S
from ..lang.ranges import Interval
from ..options import Options
from ..poly import schedule as sched
from ..poly.scop import Scop

FUNCTION_NAME = "polytc_kernel"


@dataclass
class Build:
    program: P.Program
    env: dict  # size name -> value
    options: Options
    target: str = "c"
    device: object = None  # tiling.gpu.Device of an accelerator target
    launches: list = field(default_factory=list)  # tiling.gpu.Launch per kernel
    ctx: isl.Context = None
    scop: Scop = None
    deps: sched.Dependences = None
    schedule: isl.Schedule = None
    isl_schedule: isl.Schedule = None  # the scheduler's (or hand) schedule, before tiling
    ast: isl.AstNode = None
    code: str = None
    tiling: list = field(default_factory=list)  # what the tiling pass did
    sites: list = field(default_factory=list)  # (Span, what) per run-time check
    stages: dict = field(default_factory=dict)  # stage name -> text
    timings: dict = field(default_factory=dict)  # pass name -> seconds
    #: output or temporary -> the value every element must hold before the kernel runs
    #: (``lang.program.initial_value``); absent when the kernel never sees its contents
    fills: dict = field(default_factory=dict)


def p_source(b: Build) -> Build:
    b.stages["tc"] = str(b.program)
    return b


def p_scop(b: Build) -> Build:
    b.ctx = isl.Context()
    b.scop = Scop(b.program, b.env, b.ctx)
    b.stages["scop"] = str(b.scop)
    return b


def p_dependences(b: Build) -> Build:
    b.deps = sched.dependences(b.scop)
    b.stages["dependences"] = str(b.deps)
    return b


def p_initial_values(b: Build) -> Build:
    """The outputs and temporaries whose initial contents matter, and what they are: an
    output some element of which no statement writes, or any tensor some element of
    which is read before a statement writes it (``O(i) += A(i,j)``)."""
    prog = b.program
    for t in prog.outputs + prog.temporaries:
        if b.deps.reads_before_write(t.name) or (
                t.role == "output" and not b.scop.fully_written(t.name)):
            b.fills[t.name] = P.initial_value(prog, t.name)
    b.stages["initial_values"] = "\n".join(f"{k} = {v}" for k, v in b.fills.items()) or \
        "(none: the statements write every element before reading it)"
    return b


def p_schedule(b: Build) -> Build:
    if b.options.schedule:  # a hand schedule (polytc.Schedule): replayed and checked
        from ..diagnostics import UnsupportedError
        from ..poly.handsched import replay

        if b.target != "c":
            raise UnsupportedError(f"hand schedules compile for the C target, not "
                                   f"'{b.target}'", hint="use kernel.to('c')")
        b.schedule = b.isl_schedule = replay(b.scop, b.deps, b.options.schedule)
        return b
    b.schedule = b.isl_schedule = sched.compute_schedule(b.scop, b.deps, b.options.fusion)
    return b


def _schedule(b: Build):
    """The schedule so far; program order when the scheduler was switched off."""
    return b.schedule if b.schedule is not None else sched.program_order(b.scop)


def _cpu_schedule(b: Build) -> bool:
    """Whether the loops keep the CPU's tiling and parallel loop (C, and the ``groups``
    mapping of OpenCL CPU devices)."""
    from ..tiling.gpu import strategy

    return b.target == "c" or strategy(b.options, b.device) == "groups"


def p_tile(b: Build) -> Build:
    from ..tiling.machine import host
    from ..tiling.strategy import tile_schedule

    if not _cpu_schedule(b) or b.options.schedule:
        return b
    b.schedule, b.tiling = tile_schedule(_schedule(b), b.scop, b.options, host())
    b.stages["tiling"] = "\n".join(str(entry) for entry in b.tiling)
    return b


def p_parallel(b: Build) -> Build:
    if b.options.parallel and _cpu_schedule(b) and not b.options.schedule:
        b.schedule = _schedule(b)
        points = sum(statement_points(s, b.env) for s in b.scop.stmts)
        b.schedule = sched.mark_parallel(b.schedule, b.options.parallel_min_points, points)
    return b


def p_map(b: Build) -> Build:
    from ..tiling.gpu import map_schedule

    b.schedule, b.launches, report = map_schedule(_schedule(b), b.scop, b.options, b.device)
    b.stages["mapping"] = "\n".join(str(entry) for entry in report) + "\n" + "\n".join(
        f"{l.name}: grid {l.grid} block {l.block} shared {l.shared}" for l in b.launches)
    return b


def p_ast(b: Build) -> Build:
    b.schedule = _schedule(b)
    b.stages["schedule"] = sched.schedule_tree_text(b.schedule)
    b.ast = sched.build_ast(b.schedule, b.ctx)
    b.stages["ast"] = b.ast.to_C_str()
    return b


def p_codegen_c(b: Build) -> Build:
    em = CEmitter(b.scop, b.options.num_threads or config.num_threads(), b.options.vectorize)
    b.code = em.function(b.ast, FUNCTION_NAME, b.fills)
    if not b.options.fp_contract:
        b.code = '#pragma GCC optimize ("fp-contract=off")\n' + b.code
    b.sites = em.sites
    b.stages["c"] = b.code
    return b


def p_codegen_gpu(b: Build) -> Build:
    from ..codegen_c.gpu import GpuEmitter
    from .targets import dialect

    em = GpuEmitter(b.scop, dialect(b.target), b.launches, b.options.vectorize)
    b.code = em.source(b.ast)
    # a kernel whose statements have no instance for these sizes (M = 0) has no code
    b.launches = [l for l in b.launches if l.name in em.emitted]
    b.sites = em.sites
    b.stages[b.target] = b.code
    return b


def statement_points(s, env) -> int:
    """An upper bound on the number of instances of a statement (for the parallel
    threshold): the product of its index ranges, triangular ones widened to boxes."""
    known, n = {}, 1
    for r in s.stmt.ranges:
        if r.var not in s.vars:
            continue
        iv = Interval(known)
        lo = S.evaluate(iv.lo(r.lo), env)
        hi = S.evaluate(iv.hi(S.sub(r.hi, S.const(1))), env) + 1
        known[r.var] = (S.const(lo), S.const(hi))
        n *= max(0, hi - lo)
    return n


ALL = ("c", "opencl", "cuda")
GPU = ("opencl", "cuda")

#: (name, pass, optional, targets): the whole compiler after sema, in order
PASSES = [
    ("source", p_source, False, ALL),
    ("scop", p_scop, False, ALL),
    ("dependences", p_dependences, False, ALL),
    ("initial_values", p_initial_values, False, ALL),
    ("schedule", p_schedule, True, ALL),
    ("tile", p_tile, True, ALL),
    ("parallel", p_parallel, True, ALL),
    ("map", p_map, False, GPU),
    ("ast", p_ast, False, ALL),
    ("codegen_c", p_codegen_c, False, ("c",)),
    ("codegen_gpu", p_codegen_gpu, False, GPU),
]


def run(program: P.Program, env: dict, options: Options, target: str = "c",
        device=None) -> Build:
    b = Build(program, env, options, target, device)
    for name, fn, optional, targets in PASSES:
        if target not in targets:
            continue
        if optional and name in options.disable:
            config.log(1, f"pass {name}: disabled")
            continue
        before = set(b.stages)
        t0 = time.perf_counter()
        b = fn(b)
        b.timings[name] = time.perf_counter() - t0
        config.log(1, f"pass {name}: {b.timings[name] * 1e3:.1f} ms")
        for stage in set(b.stages) - before:
            config.log(2, f"--- stage {stage} ---\n{b.stages[stage]}")
    return b
