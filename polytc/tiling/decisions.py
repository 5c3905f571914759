"""``Decision``: one thing the tiler did to a band of the schedule, as a frozen record
that prints itself (the ``tiling`` stage, explain() and the tuner read them)."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

#: what a decision can be
KINDS = ("split", "contraction", "simd", "promote")
_SIZES = ("cache", "register")  # facts printed as tile sizes, 32x32


@dataclass(frozen=True)
class Decision:
    kind: str  # one of KINDS
    statements: tuple  # the statements it concerns
    #: ``contraction``: ``order`` (loops outside in), ``cache`` and ``register`` tile
    #: sizes; ``split``: ``groups`` (statement names per new band)
    facts: Mapping = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self):
        object.__setattr__(self, "statements", tuple(self.statements))
        object.__setattr__(self, "facts", MappingProxyType(dict(self.facts)))

    @property
    def statement(self) -> str:
        """The statement of a one-statement decision (contraction, promote)."""
        return self.statements[0]

    def __str__(self):
        facts = "".join(f"; {k} {'x'.join(map(str, v)) if k in _SIZES else v}"
                        for k, v in self.facts.items())
        return f"{self.kind} {', '.join(self.statements)}{facts}"

