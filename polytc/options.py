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
MAPPINGS = ("auto", "threads", "groups")


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
    #: divide by a float divisor that does not change along the innermost loop (a row's
    #: sum, a size) as a multiplication by its reciprocal, computed once (as onnxruntime's
    #: and PyTorch's softmax do; within 1.5 ulp of the quotient): a vector division costs
    #: 10-20 multiplications; ``False`` divides each element (IEEE's correctly rounded
    #: quotient)
    reciprocal: bool = True
    #: passes to skip by name (see ``polytc.compiler.pipeline.PASSES``)
    disable: tuple = ()
    #: inputs (by name) whose values are the same at every call, as a model's weights:
    #: a contraction packs such an operand into its micro-panels once
    #: (``CompiledKernel.prepack``, which ``polytc.onnx`` calls when it makes a plan)
    #: instead of at every call; a call given no packed copy packs it itself (C target)
    constants: tuple = ()
    #: inputs (by name) that every call passes 64-byte aligned (a model's intermediate
    #: values in its arena, and its weights): vector loops reading only such inputs are
    #: emitted once, not also at half width for unaligned arrays
    #: (``codegen_c/aligned.py``); an input passed unaligned all the same is read
    #: correctly, its loads straddling cache lines
    aligned: tuple = ()
    #: sizes (by name) that stay isl parameters: one compiled kernel serves every value
    #: of them (the others are specialised to the call's values; see docs/dynamic.md).
    #: A kernel's size policy (``polytc.tc(..., dynamic=...)``) fills it
    symbolic: tuple = ()
    #: a hand schedule's recipe (``polytc.Schedule.steps``, see docs/jupyter.md): when
    #: given it replaces isl's scheduler and the tiling and parallel passes; C target only
    schedule: tuple = ()

    # --- accelerator targets (``opencl``, ``cuda``), see docs/gpu.md -------------------
    #: how loops map to the device: ``threads`` tiles the outer parallel loops, runs the
    #: tiles on blocks (work-groups) and the points of a tile on threads (work-items);
    #: ``groups`` keeps the CPU schedule (cache and register tiles) and runs its outer
    #: parallel loop on work-groups of one work-item; ``auto``: ``groups`` on CPU
    #: devices (PoCL), ``threads`` on GPUs
    mapping: str = "auto"
    #: threads per block (work-items per work-group) along the mapped loops, innermost
    #: (x, the coalesced one) last, at most 3; ``None``: cost model
    block: tuple | None = None
    #: tile sizes of the mapped loops, innermost last; each thread takes the points of a
    #: tile cyclically (``tile / block`` of them); ``None``: cost model
    block_tile: tuple | None = None
    #: most blocks per grid dimension, innermost last; tiles beyond it are distributed
    #: cyclically; ``None``: one block per tile
    grid: tuple | None = None
    #: tile size of the reduction loops of a contraction in a GPU kernel (the depth at
    #: which shared memory is filled); ``0``: not tiled, so nothing is promoted
    reduction_tile: int | None = None
    #: copy reused tiles of read-only tensors to shared (local) memory
    shared_memory: bool = True
    #: keep accumulators in registers (private memory) across reduction loops
    private_memory: bool = True
    #: fully unroll point loops of reductions with at most this many iterations
    unroll: int = 0

    def __post_init__(self):
        if self.fusion not in FUSIONS:
            raise OptionsError(f"unknown fusion strategy {self.fusion!r}",
                               hint=f"choose one of {', '.join(FUSIONS)}")
        if self.num_threads is not None and self.num_threads < 1:
            raise OptionsError("num_threads must be at least 1")
        object.__setattr__(self, "disable", tuple(self.disable))
        if isinstance(self.constants, str):
            raise OptionsError("constants must be a sequence of input names, "
                               f"got the string {self.constants!r}")
        object.__setattr__(self, "constants", tuple(sorted(set(self.constants))))
        if isinstance(self.aligned, str):
            raise OptionsError("aligned must be a sequence of input names, "
                               f"got the string {self.aligned!r}")
        object.__setattr__(self, "aligned", tuple(sorted(set(self.aligned))))
        if isinstance(self.symbolic, str) or not all(isinstance(n, str) for n in self.symbolic):
            raise OptionsError(f"symbolic must be a sequence of size names, got "
                               f"{self.symbolic!r}")
        object.__setattr__(self, "symbolic", tuple(sorted(set(self.symbolic))))
        object.__setattr__(self, "schedule", _steps(self.schedule))
        if self.mapping not in MAPPINGS:
            raise OptionsError(f"unknown mapping {self.mapping!r}",
                               hint=f"choose one of {', '.join(MAPPINGS)}")
        for name in ("block", "block_tile", "grid"):
            v = getattr(self, name)
            if v is None:
                continue
            v = tuple(int(x) for x in v)
            if not 1 <= len(v) <= 3 or min(v) < 1:
                raise OptionsError(f"{name} must be 1 to 3 positive sizes, got {v}")
            object.__setattr__(self, name, v)
        if self.block is not None:
            n = 1
            for x in self.block:
                n *= x
            if n > 1024:
                raise OptionsError(f"block {self.block} has {n} threads; at most 1024")
        if self.reduction_tile is not None and self.reduction_tile < 0:
            raise OptionsError("reduction_tile must be 0 or positive")
        if self.unroll < 0:
            raise OptionsError("unroll must be 0 or positive")
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


#: hand-schedule step name -> number of arguments after the band number (``from``, the
#: first step, takes none; ``poly/handsched.py`` applies them)
STEPS = {"tile": 1, "interchange": 2, "split": 1, "fuse": 1, "distribute": 0,
         "parallel": 1, "vectorize": 0, "unroll": 1}


def _steps(steps) -> tuple:
    """A schedule recipe as nested tuples (JSON gives lists), its step names checked."""
    if not steps:
        return ()

    def tup(x):
        return tuple(tup(y) for y in x) if isinstance(x, (list, tuple)) else x

    out = tup(steps or ())
    for k, step in enumerate(out):
        ok = isinstance(step, tuple) and step and (
            step[0] in STEPS or (step[0] == "from" and k == 0))
        if not ok:
            raise OptionsError(f"schedule step {step!r} is not a known step",
                               hint="build recipes with polytc.Schedule (kernel.schedule(...))")
    return out
