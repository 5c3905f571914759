"""``polytc.autotune``: an evolutionary search over ``Options``, measured in isolation.

The search space (:class:`Space`) covers the options that change the generated code:
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
above but the thread count, and the ``grid`` (work-groups).  The mutation of a
candidate changes only fields that matter to its mapping (a switch of mapping comes
with a change of the new mapping's fields).  A kernel whose options name a mapping
(``threads`` or ``groups``, not ``auto``) is tuned within that mapping.  The number of
mapped loops and their extents come from a probe of the mapper in a worker (after the
reference; nothing is compiled).

:class:`Search` is the generator: generation 0 is the default ``Options()`` (the cost
model; on OpenCL also the other mapping's defaults, ``Space.seeds``), any options given as
starting points, and mutations of the defaults; every later
generation mutates and crosses over the best candidates so far.  It draws from one
``random.Random(seed)`` and skips options it has proposed before (by their JSON), so the
sequence of candidates is a function of the seed and of the ranking of measured times.

Candidates are compiled and run in worker processes (``python -c``, talking pickles over
pipes: no ``if __name__ == "__main__"`` guard is needed in the user's script).  Up to two
workers compile a generation in parallel; then one worker times the candidates one at a
time, so no two timings overlap.  A candidate that raises, computes a wrong result,
crashes its worker (the worker is replaced) or runs past the per-candidate timeout (the
worker is killed and replaced) scores ``inf`` and the search goes on.  Candidates whose C
code equals an earlier candidate's reuse its time (on an accelerator: whose kernel source
and launch sizes do).  The reference result is computed once, with the default options
on the C target, in a worker (if that fails, by the numpy oracle in this process);
candidates are built and run on the kernel's own target.  The user's process only
parses, plans and waits: no candidate runs in it.

The best options go to the tuning cache (:mod:`polytc.runtime.tuning`), from which
kernels created without explicit options take them when they compile for the same
program, sizes, machine and target (and device).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import random
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from ..diagnostics import PolytcError, user_boundary
from ..options import FUSIONS, Options

__all__ = ["autotune", "Space", "Search", "mutate", "crossover", "FIELDS", "ACCEL_FIELDS"]

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

RTOL = ATOL = 1e-3
#: seconds of measurement per candidate (repeats = this / one run, clamped)
MEASURE_S = 0.15
MIN_REPEAT, MAX_REPEAT = 5, 200
#: a first run this many times slower than the best so far is not measured further
CUTOFF = 3.0
#: the share of the budget kept to time the best CONFIRM_TOP candidates and the default
#: a second time (each keeps its better measurement)
CONFIRM_SHARE, CONFIRM_TOP = 0.1, 3


# --- the search space ---------------------------------------------------------------------
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
        ``_probe_mapping``); ``pinned_mapping``: search only this mapping."""
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


def mutate(options: Options, space: Space, rng: random.Random) -> Options:
    """``options`` with one to three searched fields resampled (on an accelerator: of
    the fields that matter to its mapping; a new mapping comes with at least one change
    of its own fields)."""
    r = rng.random()
    n = 1 if r < 0.6 else 2 if r < 0.9 else 3
    if not space.accelerator:
        fields = space.fields
        chosen = rng.sample(fields, min(n, len(fields)))
        changes = {f: space.sample(f, getattr(options, f), rng) for f in chosen}
        return options.replace(**changes)
    fields = space.active(options)
    chosen = rng.sample(fields, min(n, len(fields)))
    out = options
    if "mapping" in chosen:
        chosen.remove("mapping")
        out = out.replace(mapping=space.sample("mapping", out.mapping, rng, out))
        if space.resolve(out) != space.resolve(options):
            pool = [f for f in space.active(out) if f != "mapping"]
            chosen = rng.sample(pool, min(max(1, len(chosen)), len(pool)))
    for f in sorted(chosen, key=ACCEL_FIELDS.index):  # the block before its tile
        out = out.replace(**{f: space.sample(f, getattr(out, f), rng, out)})
    return space.fix(out)


def crossover(a: Options, b: Options, space: Space, rng: random.Random) -> Options:
    """Each searched field from ``a`` or ``b`` (the others from ``a``)."""
    return space.fix(
        a.replace(**{f: getattr(a if rng.random() < 0.5 else b, f) for f in space.fields}))


class Search:
    """The candidate generator: ``ask()`` the next generation, ``tell(options, seconds)``
    each result (``inf`` for a failure).  Deterministic given ``seed`` and the results."""

    def __init__(self, space: Space, seed=0, population: int = 8, initial=()):
        self.space = space
        self.rng = random.Random(seed)
        self.population = max(1, int(population))
        self.seeds = [space.base] + list(space.seeds)  # generation 0's parents
        self.initial = self.seeds + list(initial)
        self.elite_size = max(2, self.population // 2)
        self.generation = 0
        self.seen: set = set()
        self.scored: list = []  # (seconds, order told, options)

    def _fresh(self, options: Options) -> bool:
        j = options.to_json()
        if j in self.seen:
            return False
        self.seen.add(j)
        return True

    def elite(self) -> list:
        """The best options so far, best first (the default when nothing succeeded)."""
        ok = sorted((t, n, o) for t, n, o in self.scored if math.isfinite(t))
        return [o for _, _, o in ok[:self.elite_size]] or [self.space.base]

    def ask(self) -> list:
        out = []
        if self.generation == 0:
            out = [o for o in self.initial if self._fresh(o)]
            parents = self.seeds
        else:
            parents = self.elite()
        weights = list(range(len(parents), 0, -1))
        tries = 0
        while len(out) < self.population and tries < 50 * self.population:
            tries += 1
            if len(parents) >= 2 and self.rng.random() < 0.3:
                a, b = self.rng.sample(parents, 2)
                child = crossover(a, b, self.space, self.rng)
                if self.rng.random() < 0.5:
                    child = mutate(child, self.space, self.rng)
            else:
                parent = self.rng.choices(parents, weights)[0]
                child = mutate(parent, self.space, self.rng)
            if self._fresh(child):
                out.append(child)
        self.generation += 1
        return out

    def tell(self, options: Options, seconds: float) -> None:
        self.scored.append((float(seconds), len(self.scored), options))


# --- worker processes -----------------------------------------------------------------------
_WORKER_CMD = "from polytc.tiling.autotune import _worker_main; _worker_main()"
_HEADER = struct.Struct(">Q")


def _frame(obj) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


class _Failed(Exception):
    """A request that got no reply: the worker crashed or timed out."""


class _Worker:
    """One worker process; requests one at a time, replies read without blocking."""

    def __init__(self, session: str, number: int):
        import polytc

        self.log_path = os.path.join(session, f"worker-{number}.log")
        self._log = open(self.log_path, "ab")
        env = dict(os.environ)
        root = os.path.dirname(os.path.dirname(os.path.abspath(polytc.__file__)))
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"]
                                    if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen([sys.executable, "-c", _WORKER_CMD],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, env=env, close_fds=True)
        self.fd = self.proc.stdout.fileno()
        os.set_blocking(self.fd, False)
        self._buf = b""
        self.busy = None  # (tag, deadline) of the request in flight

    def send(self, msg, tag, timeout: float) -> None:
        self.busy = (tag, time.monotonic() + timeout)
        try:
            self.proc.stdin.write(_frame(msg))
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died: the read sees EOF

    def read(self):
        """The reply if a whole one has arrived, else None; raises _Failed on EOF."""
        while True:
            try:
                chunk = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                raise _Failed(self._death())
            self._buf += chunk
        if len(self._buf) >= _HEADER.size:
            (n,) = _HEADER.unpack_from(self._buf)
            if len(self._buf) >= _HEADER.size + n:
                msg = pickle.loads(self._buf[_HEADER.size:_HEADER.size + n])
                self._buf = self._buf[_HEADER.size + n:]
                self.busy = None
                return msg
        return None

    def _death(self) -> str:
        try:
            rc = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            rc = None
        if rc is not None and rc < 0:
            import signal

            try:
                return f"crashed ({signal.Signals(-rc).name})"
            except ValueError:
                return f"crashed (signal {-rc})"
        tail = self.log_tail()  # a Python-level death leaves its reason in the log
        return f"worker exited (status {rc})" + (f": {tail}" if tail else "")

    def log_tail(self, n: int = 300) -> str:
        try:
            self._log.flush()
            with open(self.log_path, "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - n))
                lines = f.read().decode("utf-8", "replace").strip().splitlines()
            return lines[-1] if lines else ""
        except OSError:
            return ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._close()

    def close(self) -> None:
        try:
            self.proc.stdin.close()  # the worker exits on EOF
            self.proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()

    def _close(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout, self._log):
            try:
                f.close()
            except OSError:
                pass


class _Pool:
    """Worker processes serving ``(tag, message, timeout)`` requests."""

    def __init__(self, session: str, init: tuple, jobs: int, start_timeout: float):
        self.session, self.init, self.start_timeout = session, init, start_timeout
        self.spawned = 0
        self.workers = []
        try:
            for _ in range(jobs):
                self.workers.append(self._spawn(wait=False))
            for w in self.workers:
                self._await_init(w)
        except BaseException:
            self.close()
            raise

    def _spawn(self, wait=True) -> _Worker:
        w = _Worker(self.session, self.spawned)
        self.spawned += 1
        w.send(self.init, "init", self.start_timeout)
        if wait:
            self._await_init(w)
        return w

    def _await_init(self, w: _Worker) -> None:
        try:
            while w.busy is not None:
                for _tag, ok, payload in self._poll([w]):
                    if not ok:
                        raise _Failed(payload)
        except _Failed as e:
            w.kill()
            raise PolytcError(f"autotune: a worker process failed to start: {e}",
                              hint=f"workers run `{sys.executable} -c "
                                   f"'{_WORKER_CMD}'`: polytc must import there") from None

    def _poll(self, busy) -> list:
        """Wait until a busy worker replies, fails or passes its deadline; the
        ``(tag, ok, payload)`` results (possibly none: a partial reply)."""
        wait = max(0.0, min(w.busy[1] for w in busy) - time.monotonic())
        ready, _, _ = select.select([w.fd for w in busy], [], [], wait)
        now = time.monotonic()
        out = []
        for w in busy:
            tag = w.busy[0]
            try:
                msg = w.read() if w.fd in ready else None
            except _Failed as e:
                w.busy = None
                out.append((tag, False, str(e)))
                continue
            if msg is not None:
                out.append((tag, msg[0] == "ok", msg[1]))
            elif now >= w.busy[1]:
                w.busy = None
                w.kill()
                out.append((tag, False, "timed out"))
        return out

    def run(self, requests, may_start, use=None):
        """Yield ``(tag, ok, payload)`` for each ``(tag, message, timeout)`` request that
        was started (``may_start()`` is asked before each), as they finish; workers that
        crashed or timed out are replaced before their next request."""
        pending = list(requests)
        idx = list(range(len(self.workers))) if use is None else list(use)
        while True:
            for i in idx:
                w = self.workers[i]
                if w.busy is None and pending and may_start():
                    if w.proc.poll() is not None:
                        w.kill()
                        self.workers[i] = w = self._spawn()
                    tag, msg, timeout = pending.pop(0)
                    w.send(msg, tag, timeout)
            busy = [self.workers[i] for i in idx if self.workers[i].busy is not None]
            if not busy:
                return
            yield from self._poll(busy)

    def close(self) -> None:
        for w in self.workers:
            w.close()
        self.workers = []


# --- the worker side ------------------------------------------------------------------------
def _inject(fault) -> None:
    """Test hook (``autotune(_faults={candidate number: fault})``): misbehave as asked,
    ``crash`` (SIGSEGV), ``abort``, ``hang`` or ``raise``; ``wrong`` (checked in
    ``measure``) corrupts the result.  ``compile:<fault>`` strikes while compiling."""
    if fault == "crash":
        import ctypes

        ctypes.string_at(0)  # SIGSEGV
    elif fault == "abort":
        os.abort()
    elif fault == "hang":
        while True:
            time.sleep(3600)
    elif fault == "raise":
        raise RuntimeError("injected failure")


def _split_fault(fault):
    """``"compile:hang"`` -> ("compile", "hang"); ``"hang"`` -> ("time", "hang")."""
    if not fault:
        return None, None
    stage, _, kind = fault.rpartition(":")
    return stage or "time", kind


class _WorkerState:
    def __init__(self, session, text, name, target="c"):
        import polytc

        self.session = session
        self.target = target
        self.program = polytc.tc(text, name).program
        with open(os.path.join(session, "inputs.pkl"), "rb") as f:
            self.inputs = pickle.load(f)
        self.reference = None
        if target != "c":  # the device's start-up belongs to the worker's, not a candidate's
            try:
                from ..runtime.targets import backend

                backend(target).device()
            except Exception:  # noqa: BLE001 - no device: each candidate fails on its own
                pass

    def kernel(self, options_json):
        from ..runtime.kernel import Kernel

        return Kernel(self.program, Options.from_json(options_json),
                      self.target)._specialize(self.inputs)

    def handle(self, msg):
        what = msg[0]
        if what == "compile":
            _, options_json, fault = msg
            stage, kind = _split_fault(fault)
            if stage == "compile":
                _inject(kind)
            t0 = time.perf_counter()
            ck = self.kernel(options_json)
            code = ck.code
            launches = getattr(ck, "launches", None)  # an accelerator's grid and blocks
            if launches is not None:
                code += "\n" + json.dumps(launches, sort_keys=True)
            return {"code": hashlib.sha256(code.encode()).hexdigest(),
                    "compile_s": time.perf_counter() - t0}
        if what == "reference":
            return self.make_reference()
        if what == "probe":
            from ..runtime import args as A

            return _probe_mapping(self.program, A.bind_sizes(self.program, self.inputs),
                                  self.target)
        if what == "time":
            _, options_json, best, fault = msg
            return self.measure(options_json, best, fault)
        raise ValueError(f"unknown request {what!r}")

    def make_reference(self):
        from ..runtime.kernel import Kernel

        # the default options on the C target (on an accelerator too: its candidates
        # are checked against the most tested code path)
        ck = Kernel(self.program, Options())._specialize(self.inputs)
        outs = _as_list(ck.run(list(self.inputs)))
        _dump(os.path.join(self.session, "reference.pkl"), outs)
        contraction = None
        try:  # whether the tiler found a contraction (decides the search space)
            build = ck._build
            if build is None:
                from ..runtime import pipeline

                build = pipeline.run(self.program, ck.env, Options())
            contraction = any(e[0] == "contraction" for e in build.tiling)
        except Exception:  # noqa: BLE001 - unknown: search everything
            pass
        return {"contraction": contraction}

    def measure(self, options_json, best, fault):
        import numpy as np

        if self.reference is None:
            with open(os.path.join(self.session, "reference.pkl"), "rb") as f:
                self.reference = pickle.load(f)
        ck = self.kernel(options_json)
        stage, kind = _split_fault(fault)
        if stage == "time":
            _inject(kind)
        t0 = time.perf_counter()
        outs = _as_list(ck.run(list(self.inputs)))
        first = time.perf_counter() - t0
        if kind == "wrong":
            outs = [o + 1 for o in outs]
        for out, ref in zip(outs, self.reference):
            out = np.asarray(out)
            if out.shape != ref.shape or not np.allclose(out, ref, rtol=RTOL, atol=ATOL,
                                                         equal_nan=True):
                err = float(np.nanmax(np.abs(out.astype(np.float64) - ref))) \
                    if out.shape == ref.shape else float("nan")
                return {"wrong": f"result differs from the reference (max error {err:.3g})"}
        if self.target != "c":
            # a call also copies to and from the device: time the launches alone
            first = ck.benchmark(*self.inputs, repeat=1, warmup=1)["min"]
        if best is not None and first > CUTOFF * best:
            # far slower than the best so far: one more run (the first may have been
            # unlucky), and no full measurement if it is still slow
            r = ck.benchmark(*self.inputs, repeat=1, warmup=0)
            if r["min"] > CUTOFF * best:
                return {"time": min(first, r["min"]), "note": "slow: two runs"}
        repeat = max(MIN_REPEAT, min(MAX_REPEAT, int(MEASURE_S / max(first, 1e-7))))
        r = ck.benchmark(*self.inputs, repeat=repeat, warmup=1)
        # the minimum: noise from other processes only ever adds time
        return {"time": r["min"], "median": r["median"], "repeat": repeat}


def _probe_mapping(program, env, target) -> dict:
    """What the search space of an accelerator target needs to know: the device
    (``Device.key()``), and the loops the ``threads`` mapping maps: how many (``dims``,
    the most over the kernels) and their extents, innermost last (``extents``, 0 where
    unknown).  The mapper runs with tiles larger than any loop, so the tile sizes it
    reports are the extents; nothing is compiled."""
    from ..runtime import pipeline
    from ..runtime.targets import backend
    from .gpu import map_schedule

    be = backend(target)
    try:
        device = be.device()
    except Exception:  # noqa: BLE001 - no device here (CUDA without a GPU)
        default = getattr(be, "default_device", None)
        if default is None:
            return {"device": None}
        device = default()
    info = {"device": device.key()}
    try:
        opts = Options(mapping="threads", block_tile=(1 << 30,) * 3, reduction_tile=0,
                       shared_memory=False, private_memory=False)
        b = pipeline.Build(program, env, opts, target, device)
        for name, fn, _optional, targets in pipeline.PASSES:
            if name == "map":
                break
            if target in targets:
                b = fn(b)
        _, _, report = map_schedule(pipeline._schedule(b), b.scop, opts, device)
        dims, ext = 0, {}  # axis (0: innermost) -> extent, None: unknown
        for kind, _name, facts in report:
            sizes = facts["tile"] if kind == "threads" else [None] * len(facts["block"])
            dims = max(dims, len(sizes))
            for axis, e in enumerate(reversed(sizes)):
                old = ext.get(axis, 0)
                ext[axis] = None if e is None or old is None else max(old, int(e))
        if dims:
            info["dims"] = dims
            info["extents"] = [ext.get(a) or 0 for a in reversed(range(dims))]
    except Exception as e:  # noqa: BLE001 - the space falls back to two loops of any size
        info["probe_error"] = f"{type(e).__name__}: {e}"
    return info


def _as_list(outs) -> list:
    return list(outs) if isinstance(outs, tuple) else [outs]


def _dump(path, obj) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)


def _worker_main() -> None:
    """The worker's loop: one pickled request in on stdin, one reply out."""
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # stray prints (and C stdio) go to the log, not into the protocol
    sys.stdout = sys.stderr
    inp = sys.stdin.buffer
    state = None
    while True:
        head = inp.read(_HEADER.size)
        if len(head) < _HEADER.size:
            return
        (n,) = _HEADER.unpack(head)
        msg = pickle.loads(inp.read(n))
        try:
            if msg[0] == "init":
                state = _WorkerState(*msg[1:])
                reply = ("ok", None)
            else:
                reply = ("ok", state.handle(msg))
        except Exception as e:  # noqa: BLE001 - every failure is the candidate's score
            text = str(e).strip().splitlines()
            reply = ("err", f"{type(e).__name__}: {text[0] if text else ''}")
        out.write(_frame(reply))


# --- the tuner -------------------------------------------------------------------------------
def _fmt(t) -> str:
    if t is None or not math.isfinite(t):
        return "-"
    if t >= 1:
        return f"{t:.3g} s"
    if t >= 1e-3:
        return f"{t * 1e3:.3g} ms"
    return f"{t * 1e6:.3g} us"


def _describe(o: Options) -> str:
    d = Options().key()
    changed = {k: v for k, v in o.key().items() if d.get(k) != v}
    return ", ".join(f"{k}={v}" for k, v in changed.items()) or "defaults"


@user_boundary
def autotune(kernel, *inputs, budget: float = 60.0, seed=0, population: int = 8,
             generations: int | None = None, verbose: bool = True,
             timeout: float | None = None, jobs: int | None = None, store: bool = True,
             progress: str | None = "bar", on_result=None, _faults: dict | None = None):
    """Search ``Options`` for ``kernel`` on these ``inputs`` (their sizes and dtypes) and
    return a new kernel with the fastest options found (explicit options).

    ``budget``: seconds of search (the last candidate may finish up to ``timeout``
    later); ``seed``: the random sequence of candidates; ``population``: candidates per
    generation; ``generations``: stop after this many (default: when the budget is
    spent); ``timeout``: seconds before a candidate's compile or run is killed (default
    ``min(60, max(2, budget / 4))``); ``jobs``: worker processes compiling in parallel
    (default ``min(2, cores)``; timings never overlap); ``store``: write the result to
    the tuning cache, where kernels created without options find it.

    ``progress`` (shown when ``verbose``): ``"bar"``, a tqdm bar; ``"plot"``, a live
    plot of each candidate's time and the best so far, redrawn in place in Jupyter (a
    bar elsewhere; :mod:`polytc.tiling.tuneplot`); ``None``, nothing but the summary
    line.  ``on_result``: called with a copy of each candidate's record as it finishes
    (a dict: ``n``, ``generation``, ``options``, ``time`` in seconds, ``inf`` when it
    failed, with its ``error``); an exception it raises ends the search.

    The returned kernel's ``tuning`` attribute records the search: best and default
    times, every candidate with its status."""
    from ..lang.reference import run as oracle
    from ..runtime import args as A
    from ..runtime import tuning
    from ..runtime.kernel import Kernel
    from .machine import host

    t_start = time.monotonic()
    if not isinstance(kernel, Kernel):
        raise PolytcError(f"autotune takes a polytc kernel, got {type(kernel).__name__}",
                          hint="pass what polytc.tc(...) or @polytc.kernel returned")
    if not budget or budget <= 0:
        raise PolytcError(f"autotune: budget must be a positive number of seconds, "
                          f"got {budget!r}")
    if progress not in ("bar", "plot", None):
        raise PolytcError(f"autotune: progress must be 'bar', 'plot' or None, "
                          f"got {progress!r}")
    program = kernel.program
    arrays = A.as_arrays(program, inputs)
    env = A.bind_sizes(program, arrays)
    machine = host()
    timeout = float(timeout) if timeout else min(60.0, max(2.0, budget / 4))
    jobs = max(1, int(jobs) if jobs else min(2, machine.cores))
    faults = dict(_faults or {})
    end = t_start + budget
    search_end = t_start + budget * (1 - CONFIRM_SHARE)  # the rest confirms the best

    def may_start():
        return time.monotonic() < search_end

    target = kernel.target
    initial = []
    previous = tuning.get(program, env, target=target)
    if previous is not None:
        initial.append(previous[0])
    if kernel._explicit:
        initial.append(kernel.options)

    bar = None
    space, probe = None, {}
    history: list = []  # one dict per evaluated candidate
    session = tempfile.mkdtemp(prefix="polytc-tune-")
    pool = None
    try:
        _dump(os.path.join(session, "inputs.pkl"), arrays)
        init = ("init", session, str(program), program.name, target)
        pool = _Pool(session, init, jobs, start_timeout=max(60.0, timeout))

        # the reference result and the shape of the search space
        contraction, ref_note = None, None
        for _tag, ok, payload in pool.run([(None, ("reference",), timeout)], lambda: True,
                                          use=[0]):
            if ok:
                contraction = payload["contraction"]
            else:
                ref_note = payload
        if target != "c":  # the device and the loops the mapping maps
            for _tag, ok, payload in pool.run([(None, ("probe",), timeout)],
                                              lambda: True, use=[0]):
                if ok:
                    probe = payload
        if ref_note is not None:  # the default options failed: the numpy oracle decides
            got = oracle(program, arrays)
            _dump(os.path.join(session, "reference.pkl"),
                  [got[t.name] for t in program.outputs])
        space = Space.for_problem(program, env, machine,
                                  contraction=contraction is not False, target=target,
                                  device=probe.get("device"), dims=probe.get("dims"),
                                  extents=probe.get("extents"),
                                  pinned_mapping=kernel.options.mapping)
        search = Search(space, seed=seed, population=population, initial=initial)

        if verbose and progress == "plot":
            from .tuneplot import TunePlot

            bar = TunePlot(f"autotune {program.name}",
                           total=population * generations if generations else None)
        elif verbose and progress == "bar":
            from tqdm.auto import tqdm

            bar = tqdm(total=population * generations if generations else None,
                       desc=f"autotune {program.name}", unit="cand", leave=True,
                       file=sys.stderr, dynamic_ncols=True)
        codes: dict = {}  # code hash -> the record that timed it
        best = [math.inf]

        def finish(rec):
            history.append(rec)
            search.tell(rec["options"], rec["time"])
            if math.isfinite(rec["time"]) and rec["time"] < best[0]:
                best[0] = rec["time"]
            if progress == "plot" and bar is not None:
                bar(rec)  # a TunePlot
            elif bar is not None:
                failed = sum(1 for r in history if not math.isfinite(r["time"]))
                bar.set_postfix_str(f"best {_fmt(best[0])}, gen {rec['generation']}, "
                                    f"failed {failed}", refresh=False)
                bar.update(1)
            if on_result is not None:
                on_result(dict(rec))

        number = 0
        gen = 0
        stopped = None
        try:
            while (generations is None or gen < generations) and may_start():
                cands = search.ask()
                if not cands:
                    break  # the space is exhausted
                recs = []
                for o in cands:
                    recs.append({"n": number, "generation": gen, "options": o,
                                 "json": o.to_json(), "fault": faults.get(number)})
                    number += 1
                # 1. compile, in parallel
                reqs = [(i, ("compile", r["json"], r["fault"]), timeout)
                        for i, r in enumerate(recs)]
                for i, ok, payload in pool.run(reqs, may_start):
                    recs[i].update(payload if ok else {"error": f"compile: {payload}"})
                # 2. time, one at a time
                for r in recs:
                    if "code" not in r and "error" not in r:
                        continue  # not started: out of budget
                    if "error" in r:
                        r["time"] = math.inf
                        finish(r)
                        continue
                    if r["code"] in codes and not r["fault"]:
                        same = codes[r["code"]]
                        r["time"], r["same_as"] = same["time"], same["n"]
                        if "error" in same:
                            r["error"] = f"same code as #{same['n']}: {same['error']}"
                        finish(r)
                        continue
                    if not may_start():
                        break
                    msg = ("time", r["json"], best[0] if math.isfinite(best[0]) else None,
                           r["fault"])
                    for _tag, ok, payload in pool.run([(None, msg, timeout)], lambda: True,
                                                      use=[0]):
                        if ok and "time" in payload:
                            r.update(payload)
                        else:
                            r["error"] = payload.get("wrong") if ok else payload
                            r["time"] = math.inf
                    codes[r["code"]] = r
                    finish(r)
                gen += 1

            # 3. time the best few and the default again (noise), while budget lasts
            again = sorted((r for r in history
                            if math.isfinite(r["time"]) and "same_as" not in r),
                           key=lambda r: (r["time"], r["n"]))[:CONFIRM_TOP]
            again += [r for r in history if r["n"] == 0 and math.isfinite(r["time"])
                      and r not in again]
            for r in again:
                if time.monotonic() >= end:
                    break
                msg = ("time", r["json"], None, None)
                for _tag, good, payload in pool.run([(None, msg, timeout)], lambda: True,
                                                    use=[0]):
                    if good and "time" in payload:
                        r["first_time"] = r["time"]
                        r["time"] = min(r["time"], payload["time"])
        except PolytcError as e:  # a replacement worker did not start: keep the results
            stopped = e.message
            if verbose:
                print(f"autotune {program.name}: stopped early: {e.message}", file=sys.stderr)
        by_n = {r["n"]: r for r in history}
        for r in history:
            if "same_as" in r:
                r["time"] = by_n[r["same_as"]]["time"]
    finally:
        if bar is not None:
            bar.close()
        if pool is not None:
            pool.close()
        shutil.rmtree(session, ignore_errors=True)

    ok = sorted((r for r in history if math.isfinite(r["time"])),
                key=lambda r: (r["time"], r["n"]))  # finished candidates, best first
    default = next((r for r in history if r["n"] == 0), None)
    base_t = default["time"] if default is not None else math.inf
    record = {
        "time": ok[0]["time"] if ok else None,
        "default_time": base_t if math.isfinite(base_t) else None,
        "speedup": (base_t / ok[0]["time"]) if ok and math.isfinite(base_t) else None,
        "options": ok[0]["options"].key() if ok else None,
        "candidates": len(history),
        "failed": sum(1 for r in history if not math.isfinite(r["time"])),
        "generations": gen,
        "stopped": stopped,
        "seed": seed, "population": population, "budget": budget, "target": target,
        "elapsed": time.monotonic() - t_start,
        "machine": machine.key(),
        "space": None if space is None else {
            "fields": list(space.fields), "target": space.target,
            **({"device_kind": space.device_kind, "dims": space.dims,
                "extents": list(space.extents)} if space.accelerator else {}),
            **({"probe_error": probe["probe_error"]} if "probe_error" in probe else {})},
        "top": [{"options": r["options"].key(), "time": r["time"]} for r in ok[:5]],
    }
    if not ok:
        if verbose:
            print(f"autotune {program.name}: no candidate finished "
                  f"({len(history)} tried); keeping the kernel's options", file=sys.stderr)
        tuned = kernel.with_options(kernel.options)
    else:
        best_options = ok[0]["options"]
        if store:
            record["path"] = tuning.store(program, env, best_options,
                                          {k: v for k, v in record.items() if k != "path"},
                                          target=target)
        tuned = kernel.with_options(best_options)
        if verbose:
            vs = (f", default {_fmt(base_t)}: {record['speedup']:.2f}x"
                  if record["speedup"] else "")
            print(f"autotune {program.name}: best {_fmt(ok[0]['time'])}{vs} after "
                  f"{len(history)} candidates ({record['failed']} failed) with "
                  f"{_describe(best_options)}", file=sys.stderr)
    record["history"] = [
        {k: (v.key() if isinstance(v, Options) else v) for k, v in r.items() if k != "json"}
        for r in history]
    tuned.tuning = record
    return tuned
