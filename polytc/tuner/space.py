"""The search space of ``polytc.autotune``: the values each searched ``Options`` field can
take (:class:`Space`).

The space covers the options that change the generated code:
the isl fusion strategy, the cache tile ``(Ti, Tj, Tk)`` of contractions (from grids, or
``None`` = the cost model, or ``()`` = untiled), the register tile ``(MR, NR)`` (``MR`` in
1..8, ``NR`` a multiple of the vector lanes), ``omp simd`` vectorisation, OpenMP on or off,
the thread count and the parallel threshold.  (Options has no separate unroll factor,
vector width or parallel depth: the register tile's ``MR`` is the unrolled loop, its
``NR`` the vector width, the threshold decides which nests go parallel.)

On an accelerator target (``opencl``, ``cuda``) the space ranges over the mapping
options instead (see docs/gpu.md): the ``mapping`` (``threads`` or ``groups`` on
OpenCL, ``threads`` only on CUDA), and for ``threads`` the ``block`` (32 to 1024 threads,
x a multiple of 32 where the loop is that long, each axis at most the loop's extent
rounded up to a power of two), the ``block_tile`` (a multiple of the block per axis),
the ``reduction_tile`` (0, 8 .. 64), ``shared_memory``, ``private_memory`` and
``unroll`` (0, 4, 8, 16); for ``groups`` (which keeps the CPU schedule) the CPU fields
above but the thread count, and the ``grid`` (work-groups).  A kernel whose options name
a mapping (``threads`` or ``groups``, not ``auto``) is tuned within that mapping.  The
number of mapped loops and their extents come from a probe of the mapper in a worker
(after the reference; nothing is compiled: ``evaluate.probe_mapping``).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

from ..options import FUSIONS, Options

__all__ = ["Space", "FIELDS", "ACCEL_FIELDS", "BLOCK_THREADS", "TARGET_MAPPINGS"]

#: the Options fields the search changes, in a fixed order (reproducibility)
FIELDS = ("fusion", "tile", "register_tile", "vectorize", "parallel", "num_threads",
          "parallel_min_points")
_CONTRACTION_FIELDS = ("tile", "register_tile")

#: the Options fields the search changes on an accelerator target, in a fixed order
ACCEL_FIELDS = ("fusion", "mapping", "block", "block_tile", "reduction_tile",
                "shared_memory", "private_memory", "unroll", "tile", "register_tile",
                "vectorize", "parallel", "parallel_min_points", "grid")
#: the fields that matter only to one mapping (``gpu.ThreadMapper``, ``gpu.GroupMapper``
#: and the CPU tiling it keeps)
_THREAD_FIELDS = ("block", "block_tile", "reduction_tile", "shared_memory",
                  "private_memory", "unroll")
_GROUP_FIELDS = ("tile", "register_tile", "vectorize", "parallel", "parallel_min_points",
                 "grid")
#: the mappings searched on each accelerator target
TARGET_MAPPINGS = {"opencl": ("threads", "groups"), "cuda": ("threads",)}
#: threads per block; x (innermost) takes one of these where its loop is that long
BLOCK_THREADS = (32, 64, 128, 256, 512, 1024)
BLOCK_TILE_FACTORS = (1, 2, 4, 8)
REDUCTION_TILES = (0, 8, 16, 32, 64)
UNROLLS = (0, 4, 8, 16)
#: work-groups of the ``groups`` mapping, in compute units (8: the mapper's default)
GRID_FACTORS = (1, 2, 4, 16, 32)
#: the mapper's default block per number of mapped loops (``gpu.ThreadMapper.sizes``)
_DEFAULT_BLOCK = {1: (256,), 2: (8, 32), 3: (2, 4, 32)}


@dataclass(frozen=True)
class Space:
    """The values each searched field can take.  ``lanes``: vector lanes of the element
    type; ``cores``: threads to consider; ``max_extent``: the largest size (tile grids are
    capped there); ``contraction``: whether the program has a contraction band (else the
    tile fields, which only shape contractions, are not searched)."""

    lanes: int = 8
    cores: int = 1
    max_extent: int = 1 << 30
    contraction: bool = True
    #: the kernel's target; on ``opencl`` and ``cuda`` the mapping options are searched
    target: str = "c"
    #: the accelerator's kind (``gpu``/``cpu``: what ``mapping="auto"`` means there), its
    #: most threads per block and its compute units
    device_kind: str = "gpu"
    max_block: int = 1024
    compute_units: int = 1
    #: how many loops the ``threads`` mapping maps (1 to 3) and their extents, innermost
    #: last (0: unknown)
    dims: int = 2
    extents: tuple = ()
    #: the one mapping to search (the kernel's options named it), else ``None``: all of
    #: the target's
    pinned_mapping: str | None = None

    @classmethod
    def for_problem(cls, program, env: dict, machine, contraction: bool = True,
                    target: str = "c", device=None, dims=None, extents=None,
                    pinned_mapping=None) -> "Space":
        """``device``: the accelerator (``tiling.gpu.Device`` or its ``key()``);
        ``dims``, ``extents``: the loops the ``threads`` mapping maps (see
        ``evaluate.probe_mapping``); ``pinned_mapping``: search only this mapping."""
        import numpy as np

        itemsize = max([np.dtype(t.dtype.np_dtype).itemsize for t in program.outputs]
                       or [4])
        extra = {}
        if target != "c":
            if device is not None and not isinstance(device, dict):
                device = device.key()
            device = device or {}
            extra = dict(device_kind=device.get("kind", "gpu"),
                         max_block=max(1, int(device.get("max_block", 1024))),
                         compute_units=max(1, int(device.get("compute_units", 1))),
                         dims=max(1, min(3, int(dims or 2))),
                         extents=tuple(int(e or 0) for e in (extents or ())),
                         pinned_mapping=pinned_mapping if pinned_mapping != "auto" else None)
        return cls(lanes=machine.lanes(itemsize), cores=max(1, machine.cores),
                   max_extent=max([int(v) for v in env.values()] or [1]),
                   contraction=contraction, target=target, **extra)

    def _cap(self, grid) -> tuple:
        return tuple(v for v in grid if v <= self.max_extent) or tuple(grid[:1])

    @property
    def ti(self) -> tuple:
        return self._cap((4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256))

    @property
    def tj(self) -> tuple:
        return self._cap(tuple(self.lanes * m for m in (1, 2, 3, 4, 6, 8, 12, 16, 32)))

    @property
    def tk(self) -> tuple:
        return self._cap((8, 16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024))

    @property
    def mr(self) -> tuple:
        return tuple(range(1, 9))

    @property
    def nr(self) -> tuple:
        return tuple(self.lanes * m for m in (1, 2, 3, 4))

    @property
    def threads(self) -> tuple:
        return (None,) + tuple(range(1, self.cores + 1))

    @property
    def min_points(self) -> tuple:
        return (1 << 10, 1 << 12, 1 << 15, 1 << 18, 1 << 21)

    @property
    def fields(self) -> tuple:
        if not self.accelerator:
            return tuple(f for f in FIELDS
                         if self.contraction or f not in _CONTRACTION_FIELDS)
        out = ["fusion"]
        if len(self.mappings) > 1:
            out.append("mapping")
        if "threads" in self.mappings:
            out += [f for f in _THREAD_FIELDS if self.contraction or f != "reduction_tile"]
        if "groups" in self.mappings:
            out += [f for f in _GROUP_FIELDS
                    if self.contraction or f not in _CONTRACTION_FIELDS]
        return tuple(out)

    # --- accelerator targets ----------------------------------------------------------
    @property
    def accelerator(self) -> bool:
        return self.target != "c"

    @property
    def mappings(self) -> tuple:
        if self.pinned_mapping is not None:
            return (self.pinned_mapping,)
        return TARGET_MAPPINGS.get(self.target, ())

    @property
    def base(self) -> Options:
        """The cost model's options: the first candidate, and the one all others are
        mutations of (in the pinned mapping, if there is one)."""
        if not self.accelerator or self.pinned_mapping is None:
            return Options()
        return Options(mapping=self.pinned_mapping)

    def resolve(self, options: Options):
        """The mapping ``options`` get on this target's device (``None`` on C)."""
        if not self.accelerator:
            return None
        if options.mapping != "auto":
            return options.mapping
        return "groups" if self.device_kind == "cpu" else "threads"

    def active(self, options: Options) -> tuple:
        """The searched fields that matter to ``options`` (on an accelerator: those of its
        mapping)."""
        if not self.accelerator:
            return self.fields
        other = _GROUP_FIELDS if self.resolve(options) == "threads" else _THREAD_FIELDS
        return tuple(f for f in self.fields if f not in other)

    @property
    def seeds(self) -> tuple:
        """Starting points besides the default: each other mapping with its defaults."""
        if not self.accelerator:
            return ()
        default = self.resolve(self.base)
        return tuple(Options(mapping=m) for m in self.mappings if m != default)

    @property
    def block_limit(self) -> int:
        return max(1, min(1024, self.max_block))

    def _caps(self) -> list:
        """The largest useful block size of each mapped loop, innermost last: its extent
        rounded up to a power of two (unbounded where unknown)."""
        ext = list(self.extents)[-self.dims:]
        ext = [0] * (self.dims - len(ext)) + ext
        return [_pow2_at_least(e) if e > 0 else 1 << 30 for e in ext]

    def _effective_block(self, block) -> list:
        """The block the mapper takes for ``block`` (``None``: its default)."""
        b = _pad(block if block is not None else _DEFAULT_BLOCK[self.dims], self.dims)
        return [max(1, min(v, c)) for v, c in zip(b, self._caps())]

    def _new_block(self, rng) -> tuple:
        caps, limit = self._caps(), self.block_limit
        total = rng.choice([t for t in BLOCK_THREADS if t <= limit] or [_pow2_at_most(limit)])
        out, rest = [], total
        for i, cap in enumerate(reversed(caps)):  # innermost (x) first
            hi = min(rest, cap)
            if i == len(caps) - 1:
                v = hi  # the outermost takes the threads left
            elif i == 0:
                v = rng.choice([t for t in BLOCK_THREADS if t <= hi] or [hi])
            else:
                v = rng.choice([1 << j for j in range(11) if 1 << j <= hi])
            out.append(v)
            rest = max(1, rest // v)
        return tuple(reversed(out))

    def _nudge_block(self, cur, rng) -> tuple:
        """``cur`` with one axis doubled or halved (within its cap and the limit); a
        fresh block when no axis can move."""
        caps, limit = self._caps(), self.block_limit
        b = _pad(cur, self.dims)
        for i in rng.sample(range(self.dims), self.dims):
            for up in rng.sample((True, False), 2):
                v = b[i] * 2 if up else b[i] // 2
                if v < 1 or v > caps[i] or (i == self.dims - 1 and v < min(32, caps[i])):
                    continue  # (x stays a multiple of 32 where its loop is that long)
                new = b[:i] + [v] + b[i + 1:]
                if math.prod(new) <= limit:
                    return tuple(new)
        return self._new_block(rng)

    def _new_block_tile(self, block, rng) -> tuple:
        out = []
        for b, cap in zip(self._effective_block(block), self._caps()):
            out.append(b * rng.choice([f for f in BLOCK_TILE_FACTORS
                                       if b * f <= max(b, cap)]))
        return tuple(out)

    def fix(self, options: Options) -> Options:
        """``options`` made canonical (accelerator targets): the fields of the mapping it
        does not use at their defaults (they would not change the code, but would make
        a candidate look new; ``grid`` would even change the other mapping's meaning),
        the ``block_tile`` a multiple of the block on each axis."""
        if not self.accelerator:
            return options
        default = Options()  # (the searched fields of the base are at their defaults)
        other = _GROUP_FIELDS if self.resolve(options) == "threads" else _THREAD_FIELDS
        changes = {f: getattr(default, f) for f in other
                   if getattr(options, f) != getattr(default, f)}
        if options.block_tile is not None and "block_tile" not in changes:
            block = self._effective_block(options.block)
            tile = tuple(max(b, t // b * b) for b, t in
                         zip(block, _pad(options.block_tile, self.dims)))
            if tile != options.block_tile:
                changes["block_tile"] = tile
        return options.replace(**changes) if changes else options

    # --- sampling ----------------------------------------------------------------------
    def sample(self, field: str, current, rng: random.Random, options: Options | None = None):
        """A value of ``field`` other than ``current`` (when there is one); ``options``:
        the candidate it is for (``block_tile`` and ``mapping`` depend on it)."""
        for _ in range(20):
            v = self._sample(field, current, rng, options)
            if v != current:
                return v
        return current

    def _sample(self, field, cur, rng, options=None):
        options = options if options is not None else Options()
        if field == "mapping":
            now = self.resolve(options.replace(mapping=cur))
            m = rng.choice([m for m in self.mappings if m != now] or [now])
            return "auto" if m == self.resolve(Options()) else m  # one name per mapping
        if field == "block":
            if rng.random() < 0.1:
                return None
            if cur and rng.random() < 0.5:
                return self._nudge_block(cur, rng)
            return self._new_block(rng)
        if field == "block_tile":
            if rng.random() < 0.1:
                return None
            return self._new_block_tile(options.block, rng)
        if field == "reduction_tile":
            if rng.random() < 0.1:
                return None  # the cost model
            return rng.choice(REDUCTION_TILES)
        if field in ("shared_memory", "private_memory"):
            return not cur
        if field == "unroll":
            return rng.choice(UNROLLS)
        if field == "grid":
            return rng.choice((None,) + tuple((self.compute_units * f,)
                                              for f in GRID_FACTORS))
        return self._sample_cpu(field, cur, rng)

    def _sample_cpu(self, field, cur, rng):
        if field == "fusion":
            return rng.choice(FUSIONS)
        if field in ("vectorize", "parallel"):
            return not cur
        if field == "num_threads":
            return rng.choice(self.threads)
        if field == "parallel_min_points":
            return rng.choice(self.min_points)
        if field == "tile":
            grids = (self.ti, self.tj, self.tk)
            r = rng.random()
            if r < 0.1:
                return None
            if r < 0.18:
                return ()
            if cur and rng.random() < 0.7:
                return _nudge(cur, grids, rng)
            return tuple(rng.choice(g) for g in grids)
        if field == "register_tile":
            grids = (self.mr, self.nr)
            if rng.random() < 0.12:
                return None
            if cur and rng.random() < 0.7:
                return _nudge(cur, grids, rng)
            return tuple(rng.choice(g) for g in grids)
        raise ValueError(f"not a searched field: {field}")


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _pow2_at_most(n: int) -> int:
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def _pad(values, m, fill=1) -> list:
    """The last ``m`` entries of ``values``, padded in front with ``fill`` (as the mapper,
    ``gpu._pad``, reads ``block`` and ``block_tile``)."""
    v = list(values)[-m:]
    return [fill] * (m - len(v)) + v


def _nudge(cur: tuple, grids: tuple, rng: random.Random) -> tuple:
    """``cur`` with one component moved one or two steps along its grid."""
    i = rng.randrange(len(grids))
    grid = grids[i]
    pos = min(range(len(grid)), key=lambda p: (abs(grid[p] - cur[i]), p))
    pos = max(0, min(len(grid) - 1, pos + rng.choice((-2, -1, 1, 2))))
    out = list(cur)
    out[i] = grid[pos]
    return tuple(out)
