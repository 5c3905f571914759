"""``Build``: the state of one specialisation as the pipeline makes it.

A build is immutable: every pass is a function ``Build -> Build`` that returns a new
record (``b.but(...)``, ``b.stage(...)``), so a build that explain(), a hand schedule
or the tuner holds never changes under it, and any prefix of the pipeline is a value.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Mapping

import islpy as isl

from ..lang import program as P
from ..options import Options



@dataclass(frozen=True)
class Build:
    program: P.Program
    env: Mapping  # size name -> value
    options: Options
    target: str = "c"
    backend: Any = None  # polytc.backends.Backend of ``target``
    device: Any = None  # tiling.gpu.Device of an accelerator target
    passes: tuple = ()  # names of the passes that ran, in order
    ctx: isl.Context | None = None
    scop: Any = None  # poly.scop.Scop
    deps: Any = None  # poly.schedule.Dependences
    #: the fusion strategy the scheduler used (``auto`` resolved), or ``hand``
    fusion: str = ""
    schedule: isl.Schedule | None = None
    isl_schedule: isl.Schedule | None = None  # the scheduler's (or hand) schedule, before tiling
    ast: isl.AstNode | None = None
    #: the schedule the ``tile`` pass tiled (a variant tiles it again: ``few_rows``)
    untiled: isl.Schedule | None = None
    #: a second tiling of the kernel for a few rows, through ``ast`` (the ``few_rows`` pass)
    few: Any = None
    code: str = ""
    tiling: tuple = ()  # tiling.decisions.Decision per band the tiler changed
    launches: tuple = ()  # tiling.gpu.Launch per accelerator kernel
    mapping: tuple = ()  # tiling.decisions.Decision: what the GPU mapper did, per kernel
    sites: tuple = ()  # (Span, what) per run-time check
    #: output or temporary -> the value every element must hold before the kernel runs
    #: (``lang.program.initial_value``); absent when the kernel never sees its contents
    fills: Mapping = field(default_factory=dict)
    stages: Mapping = field(default_factory=dict)  # stage name -> text
    timings: Mapping = field(default_factory=dict)  # pass name -> seconds

    def but(self, **changes) -> "Build":
        """This build with some fields replaced."""
        return replace(self, **changes)

    def stage(self, name: str, text: str, **changes) -> "Build":
        """This build with the text of stage ``name`` recorded (and ``changes``)."""
        return replace(self, stages=MappingProxyType({**self.stages, name: text}), **changes)

    def timed(self, name: str, seconds: float) -> "Build":
        return replace(self, timings=MappingProxyType({**self.timings, name: seconds}))

    def __repr__(self):
        sizes = ", ".join(f"{k}={v}" for k, v in self.env.items())
        ran = " > ".join(self.passes) or "nothing yet"
        return f"<Build {self.program.name} [{sizes}] target={self.target}: {ran}>"

    def __str__(self):
        lines = [repr(self)]
        lines += [f"  {name}: {self.timings[name] * 1e3:.1f} ms" for name in self.timings]
        return "\n".join(lines)
