"""The pipeline: the ordered, named list of passes and the one way to run it.

``run(program, env, options, target, until=None)`` runs the passes in order under the
compile lock (isl's state is not shared between threads; gcc and device compilers run
outside it), logs and times each at ``POLYTC_DEBUG=1`` and dumps the stages a pass made
at ``POLYTC_DEBUG=2``.  ``until="schedule"`` stops after that pass: explain(), hand
schedules and the tuner take the prefix they need.  Optional passes can be switched
off with ``Options(disable=("name", ...))``.  Each pass says when it applies (``when``):
the target-specific ones ask the build's backend.
"""
from __future__ import annotations

import threading
import time
from types import MappingProxyType
from typing import Callable, NamedTuple

from .. import backends, config
from ..diagnostics import InternalError
from ..codegen_c.fewrows import kept, variant_tile
from ..lang import program as P
from ..options import Options
from . import passes as ps
from .build import Build

#: the compile lock: held while passes run (isl is not used from two threads at once)
LOCK = threading.RLock()


class Pass(NamedTuple):
    name: str
    fn: Callable[[Build], Build]
    optional: bool  # may be switched off by ``Options(disable=...)``
    when: Callable[[Build], bool]  # whether it applies to this build

    def __str__(self):
        return self.name + (" (optional)" if self.optional else "")


def _always(b: Build) -> bool:
    return True


def _grid(b: Build) -> bool:
    return b.backend.grid


def _few_rows(b: Build) -> Build:
    """The ``few_rows`` pass (a pass here, as it runs passes): the kernel tiled again
    for a few rows (``codegen_c/fewrows.py``), which its code runs for the rows beyond
    one register tile's and up to the variant's (``codegen_c/emit.py``)."""
    found = variant_tile(b)
    if found is None:
        return b
    tile, rows, least = found  # (its AST for those rows only: simpler, and sooner made)
    v = rerun(b.but(schedule=b.untiled, tiling=(), stages={}, timings={}, passes=(),
                    scop=b.scop.within(rows, least, tile[0]),
                    options=b.options.replace(register_tile=tile)), "tile", "ast")
    if kept(v) != kept(b) or any(d.facts.get("_box") is not None for d in v.tiling) or \
            not any(d.kind == "contraction" for d in v.tiling):
        return b  # (its temporaries would differ from the kernel's: no variant)
    return b.stage("few_rows", "\n".join(str(d) for d in v.tiling), few=v)


#: the whole compiler after sema, in order
PASSES = (
    Pass("source", ps.p_source, False, _always),
    Pass("scop", ps.p_scop, False, _always),
    Pass("dependences", ps.p_dependences, False, _always),
    Pass("initial_values", ps.p_initial_values, False, _always),
    Pass("schedule", ps.p_schedule, True, _always),
    Pass("fuse_outer", ps.p_fuse_outer, True, lambda b: b.fusion == "max"),
    Pass("serial_reductions", ps.p_serial_reductions, False,
         lambda b: b.schedule is not None and b.fusion != "hand"),
    Pass("tile", ps.p_tile, True, ps.cpu_loops),
    Pass("fold", ps.p_fold, True, lambda b: b.backend.folding and ps.cpu_loops(b) and
         b.options.fusion != "min"),  # fusion="min": no statement runs in another's loops
    Pass("parallel", ps.p_parallel, True, ps.cpu_loops),
    Pass("contract", ps.p_contract, True, lambda b: b.backend.contracting and ps.cpu_loops(b)),
    Pass("map", ps.p_map, False, _grid),
    Pass("ast", ps.p_ast, False, _always),
    Pass("few_rows", _few_rows, True, lambda b: b.backend.symbolic and
         bool(b.scop.symbolic) and ps.cpu_loops(b)),
    Pass("codegen", ps.p_codegen, False, _always),
)
NAMES = tuple(p.name for p in PASSES)


def run(program: P.Program, env: dict, options: Options, target: str = "c",
        device=None, until: str | None = None) -> Build:
    """The build of ``program`` at sizes ``env`` for ``target``, through pass ``until``
    (the whole pipeline by default).  ``device``: the accelerator's ``tiling.gpu.Device``
    (default: the backend's own device)."""
    if until is not None and until not in NAMES:
        raise InternalError(f"no pass named {until!r}", hint=f"passes: {', '.join(NAMES)}")
    backend = backends.get(target)
    if device is None and backend.grid:
        device = backend.device()
    b = Build(program, MappingProxyType(dict(env)), options, target, backend, device)
    with LOCK:
        for p in PASSES:
            if p.when(b):
                b = _one(p, b)
            if p.name == until:
                break
    return b


def rerun(b: Build, first: str, last: str) -> Build:
    """``b`` through the passes from ``first`` to ``last`` (those that apply): a
    variant of a build (``_few_rows``)."""
    on = False
    for p in PASSES:
        on = on or p.name == first
        if on and p.when(b):
            b = _one(p, b)
        if p.name == last:
            break
    return b


def _one(p: Pass, b: Build) -> Build:
    if p.optional and p.name in b.options.disable:
        config.log(1, f"pass {p.name}: disabled")
        return b
    before = set(b.stages)
    t0 = time.perf_counter()
    b = p.fn(b)
    b = b.timed(p.name, time.perf_counter() - t0).but(passes=b.passes + (p.name,))
    config.log(1, f"pass {p.name}: {b.timings[p.name] * 1e3:.1f} ms")
    for stage in b.stages:
        if stage not in before:
            config.log(2, f"--- stage {stage} ---\n{b.stages[stage]}")
    return b
