"""``Options``: the one value that decides everything after the polyhedral model.

Immutable and JSON-serialisable, so it can key caches, be stored by the tuner, be shown
and be shipped.  ``Options.replace(**changes)`` returns a new value.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from .diagnostics import PolytcError

FUSIONS = ("auto", "max", "preserve", "min")


class OptionsError(PolytcError):
    pass


@dataclass(frozen=True)
class Options:
    #: isl scheduler strategy: ``max`` fuses the outer loops of all statements,
    #: ``preserve`` fuses only where no outer parallel loop is lost, ``min`` never fuses
    #: statements; ``auto`` (the cost model) takes ``max`` for programs without a
    #: contraction (row-wise: softmax, norms) and ``preserve`` for the others (fusing
    #: the rows of two matmuls would prevent tiling them), see docs/scheduling.md
    fusion: str = "auto"
    #: OpenMP on the outermost parallel loop
    parallel: bool = True
    #: no parallel region below this many statement instances (OpenMP start-up costs)
    parallel_min_points: int = 1 << 15
    #: OpenMP threads; ``None`` takes POLYTC_NUM_THREADS / OMP_NUM_THREADS / all cores
    num_threads: int | None = None
    #: cache tile sizes ``(Ti, Tj, Tk)`` of contraction bands; ``None``: cost model;
    #: ``()``: no tiling at all
    tile: tuple | None = None
    #: register tile ``(MR, NR)`` of contractions; ``None``: cost model
    register_tile: tuple | None = None
    #: ``omp simd`` on unit-stride parallel inner loops, vectorised ``+``/``*``
    #: reductions (which reassociate floating-point sums, as every BLAS does)
    vectorize: bool = True
    #: let the C compiler fuse ``a * b + c`` into one multiply-add (one rounding instead of
    #: two, as GNU C does by default); ``False`` gives bit-exact separate roundings at
    #: half the multiply-add throughput
    fp_contract: bool = True
    #: passes to skip by name (see ``polytc.runtime.pipeline.PASSES``)
    disable: tuple = ()

    def __post_init__(self):
        if self.fusion not in FUSIONS:
            raise OptionsError(f"unknown fusion strategy {self.fusion!r}",
                               hint=f"choose one of {', '.join(FUSIONS)}")
        if self.num_threads is not None and self.num_threads < 1:
            raise OptionsError("num_threads must be at least 1")
        object.__setattr__(self, "disable", tuple(self.disable))
        for name in ("tile", "register_tile"):
            v = getattr(self, name)
            if v is None:
                continue
            v = tuple(int(x) for x in v)
            want = 3 if name == "tile" else 2
            if (v or name == "register_tile") and (len(v) != want or min(v) < 1):
                raise OptionsError(f"{name} must be {want} positive sizes, got {v}")
            object.__setattr__(self, name, v)

    def replace(self, **changes) -> "Options":
        try:
            return dataclasses.replace(self, **changes)
        except TypeError as e:
            raise OptionsError(str(e)) from None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Options":
        return cls(**json.loads(text))

    def key(self) -> dict:
        return json.loads(self.to_json())
