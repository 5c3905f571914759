"""``Options``: the one value that decides everything after the polyhedral model.

Immutable and JSON-serialisable, so it can key caches, be stored by the tuner, be shown
and be shipped.  ``Options.replace(**changes)`` returns a new value.
"""
from __future__ import annotations

import dataclasses
import json
import numbers
import operator
from dataclasses import dataclass

from .diagnostics import PolytcError

FUSIONS = ("auto", "max", "preserve", "min")
MAPPINGS = ("auto", "threads", "groups")
#: most OpenMP threads ``num_threads`` may ask for (a team that size already costs
#: more to start than it saves; libgomp runs out of memory long before ``2 ** 31``)
MAX_THREADS = 4096
#: the passes ``disable`` can switch off: the optional ones of
#: ``polytc.compiler.pipeline.PASSES`` (listed here as options.py may not import the
#: compiler; tests/test_options_errors.py checks that the two agree)
OPTIONAL_PASSES = ("schedule", "fuse_outer", "tile", "fold", "parallel", "contract",
                   "few_rows")


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
    #: passes to skip by name: optional ones of ``polytc.compiler.pipeline.PASSES``
    #: (``OPTIONAL_PASSES``); a sequence, as ``constants``: a lone string is refused
    disable: tuple = ()
    #: inputs (by name) whose values are the same at every call, as a model's weights:
    #: a contraction packs such an operand into its micro-panels once
    #: (``CompiledKernel.prepack``, which ``polytc.onnx`` calls when it makes a plan)
    #: instead of at every call; a kernel's call packs the array it is given and keeps the
    #: copy while later calls pass the same array (C target; values changed in place are
    #: not read again: pass another array)
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

    def __new__(cls, *args, **fields):
        # (dataclass's __init__ would raise a bare TypeError for these; ``replace`` and
        # ``from_json`` come through here too)
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(fields) - set(names))
        if unknown:
            raise OptionsError(f"Options has no field {', '.join(map(repr, unknown))}",
                               hint=f"the fields are {', '.join(names)}")
        if len(args) > len(names):
            raise OptionsError(f"Options takes at most {len(names)} values, got "
                               f"{len(args)}", hint="name them: Options(tile=..., ...)")
        return super().__new__(cls)

    def __post_init__(self):
        """Every value checked (and normalised: sizes to tuples of ``int``, names to sorted
        tuples) here, so a bad one is an ``OptionsError`` naming it, not a crash or a
        different meaning in some pass later."""
        for f in dataclasses.fields(self):
            if f.type == "bool" and not isinstance(getattr(self, f.name), bool):
                raise OptionsError(f"{f.name} must be True or False, got "
                                   f"{getattr(self, f.name)!r}")
        for name, what, choices in (("fusion", "fusion strategy", FUSIONS),
                                    ("mapping", "mapping", MAPPINGS)):
            v = getattr(self, name)
            if not isinstance(v, str) or v not in choices:
                raise OptionsError(f"unknown {what} {_short(v)}",
                                   hint=f"choose one of {', '.join(choices)}")
        if self.num_threads is not None:
            _set(self, "num_threads", _int("num_threads", self.num_threads, 1, MAX_THREADS))
        _set(self, "parallel_min_points",
             _int("parallel_min_points", self.parallel_min_points, 0))
        if self.reduction_tile is not None:
            _set(self, "reduction_tile", _int("reduction_tile", self.reduction_tile, 0))
        _set(self, "unroll", _int("unroll", self.unroll, 0))
        disable = _names("disable", self.disable, "pass names")
        unknown = [n for n in disable if n not in OPTIONAL_PASSES]
        if unknown:
            raise OptionsError(f"disable: there is no pass {unknown[0]!r} to switch off",
                               hint=f"optional passes: {', '.join(OPTIONAL_PASSES)}")
        _set(self, "disable", disable)
        _set(self, "constants", _names("constants", self.constants, "input names"))
        _set(self, "aligned", _names("aligned", self.aligned, "input names"))
        _set(self, "symbolic", _names("symbolic", self.symbolic, "size names"))
        _set(self, "schedule", _steps(self.schedule))
        for name in ("block", "block_tile", "grid"):
            if getattr(self, name) is not None:
                _set(self, name, _sizes(name, getattr(self, name), (1, 2, 3)))
        if self.block is not None:
            n = 1
            for x in self.block:
                n *= x
            if n > 1024:
                raise OptionsError(f"block {self.block} has {n} threads; at most 1024")
        if self.tile is not None:  # (``()``: no tiling)
            _set(self, "tile", _sizes("tile", self.tile, (0, 3)))
        if self.register_tile is not None:
            _set(self, "register_tile", _sizes("register_tile", self.register_tile, (2,)))

    def replace(self, **changes) -> "Options":
        return dataclasses.replace(self, **changes)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Options":
        try:
            data = json.loads(text)
        except (TypeError, ValueError) as e:
            raise OptionsError(f"Options.from_json takes the text of Options.to_json(), "
                               f"got {_short(text)} ({e})") from None
        if not isinstance(data, dict):
            raise OptionsError(f"Options.from_json takes a JSON object, got {_short(text)}")
        return cls(**data)

    def key(self) -> dict:
        return json.loads(self.to_json())


#: hand-schedule step name -> number of arguments after the band number (``from``, the
#: first step, takes none; ``poly/handsched.py`` applies them)
STEPS = {"tile": 1, "interchange": 2, "split": 1, "fuse": 1, "distribute": 0,
         "parallel": 1, "vectorize": 0, "unroll": 1}


def _steps(steps) -> tuple:
    """A schedule recipe as nested tuples (JSON gives lists), the shape of each step
    checked: its name, its number of arguments, ints for band, loops and sizes, the start
    and fusion of ``from`` (``poly/handsched.py`` checks the values against the tree)."""
    if isinstance(steps, (list, tuple)) and not steps:
        return ()
    if not isinstance(steps, (list, tuple)):
        raise OptionsError(f"schedule must be a recipe (polytc.Schedule.steps), got "
                           f"{_short(steps)}", hint=_RECIPES)

    def tup(x):
        return tuple(tup(y) for y in x) if isinstance(x, (list, tuple)) else x

    out = tup(steps)
    for k, step in enumerate(out):
        if not (isinstance(step, tuple) and step and isinstance(step[0], str) and
                (step[0] in STEPS or (step[0] == "from" and k == 0))):
            raise OptionsError(f"schedule step {_short(step)} is not a known step",
                               hint=_RECIPES)
        if step[0] == "from":
            if step[1:] not in STARTS:
                raise OptionsError(f"schedule step {_short(step)}: a recipe starts from "
                                   "('from', 'program') or ('from', 'isl', FUSION) with "
                                   f"FUSION one of {', '.join(FUSIONS)}", hint=_RECIPES)
            continue
        if len(step) != 2 + STEPS[step[0]]:
            raise OptionsError(f"schedule step {_short(step)}: {step[0]} takes a band and "
                               f"{STEPS[step[0]]} more argument(s)", hint=_RECIPES)
        ints = list(step[1:])  # the band, loops, sizes (a tile's sizes: one or a tuple)
        if step[0] == "tile" and isinstance(step[2], tuple):
            ints = [step[1], *step[2]]
        if not all(isinstance(a, int) and not isinstance(a, bool) for a in ints):
            raise OptionsError(f"schedule step {_short(step)}: its band, loops and sizes "
                               "must be ints", hint=_RECIPES)
    return out


_RECIPES = "build recipes with polytc.Schedule (kernel.schedule(...))"
#: what may follow ``from`` in a recipe's first step (``poly/handsched.py`` ``start``)
STARTS = (("program",), ("isl",)) + tuple(("isl", f) for f in FUSIONS)


def _set(options: Options, name: str, value) -> None:
    object.__setattr__(options, name, value)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_int(x) -> bool:
    """An integer (numpy's too), not a bool, a float or a string of digits."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _int(name: str, value, lo: int, hi: int | None = None) -> int:
    if not _is_int(value) or value < lo or (hi is not None and value > hi):
        bounds = f"from {lo} to {hi}" if hi is not None else f">= {lo}"
        raise OptionsError(f"{name} must be an int {bounds}, got {_short(value)}")
    return operator.index(value)


def _sizes(name: str, value, lengths: tuple) -> tuple:
    """``value`` as a tuple of positive ``int`` of one of these ``lengths`` (a string, a
    number, a dict or a float size is refused rather than read as something else)."""
    if not isinstance(value, (list, tuple)) or len(value) not in lengths or \
            not all(_is_int(x) and x >= 1 for x in value):
        sizes = [n for n in lengths if n]
        want = f"{sizes[0]} to {sizes[-1]}" if len(sizes) > 1 else f"{sizes[0]}"
        raise OptionsError(f"{name} must be {want} positive sizes"
                           f"{' (or () for no tiling)' if 0 in lengths else ''}, "
                           f"got {_short(value)}")
    return tuple(operator.index(x) for x in value)


def _names(name: str, value, what: str) -> tuple:
    """``value`` as a sorted tuple of distinct names."""
    if isinstance(value, str):
        raise OptionsError(f"{name} must be a sequence of {what}, got the string "
                           f"{value!r}", hint=f"{name}=({value!r},)")
    if not isinstance(value, (list, tuple, set, frozenset)) or \
            not all(isinstance(n, str) for n in value):
        raise OptionsError(f"{name} must be a sequence of {what}, got {_short(value)}")
    return tuple(sorted(set(value)))
