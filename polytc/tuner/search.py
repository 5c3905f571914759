"""The search of ``polytc.autotune``: the candidate generator and the ranking of what
was measured.

:class:`Search` is the generator: generation 0 is the default ``Options()`` (the cost
model; on OpenCL also the other mapping's defaults, ``Space.seeds``), any options given as
starting points, and mutations of the defaults; every later
generation mutates and crosses over the best candidates so far.  It draws from one
``random.Random(seed)`` and skips options it has proposed before (by their JSON), so the
sequence of candidates is a function of the seed and of the ranking of measured times.
The mutation of a candidate (:func:`mutate`) changes only fields that matter to its
mapping (a switch of mapping comes with a change of the new mapping's fields).

A candidate's record (a dict: ``n``, ``generation``, ``options``, ``time`` in seconds,
``inf`` when it failed) ranks by its time, ties by its number (:func:`ranked`); the best
few and the default are timed a second time at the end (:func:`to_confirm`).
"""
from __future__ import annotations

import math
import random

from ..options import Options
from .space import ACCEL_FIELDS, Space

__all__ = ["Search", "mutate", "crossover", "ranked", "to_confirm"]

#: the share of the budget kept to time the best CONFIRM_TOP candidates and the default
#: a second time (each keeps its better measurement)
CONFIRM_SHARE, CONFIRM_TOP = 0.1, 3


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


def ranked(history) -> list:
    """The finished candidates' records, best first (ties: the earlier one)."""
    return sorted((r for r in history if math.isfinite(r["time"])),
                  key=lambda r: (r["time"], r["n"]))


def to_confirm(history) -> list:
    """The records to time again: the best ``CONFIRM_TOP`` that were timed themselves
    (not reusing another's time), then the default (candidate 0) if it finished."""
    again = sorted((r for r in history
                    if math.isfinite(r["time"]) and "same_as" not in r),
                   key=lambda r: (r["time"], r["n"]))[:CONFIRM_TOP]
    again += [r for r in history if r["n"] == 0 and math.isfinite(r["time"])
              and r not in again]
    return again
