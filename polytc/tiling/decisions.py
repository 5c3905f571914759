"""``Decision``: one thing the tiler did to a band of the schedule, or the GPU mapper did
to a kernel, as a frozen record that prints itself (the ``tiling`` and ``mapping``
stages, explain() and the tuner read them)."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

#: what a decision can be: the tiler's, then the mapper's
KINDS = ("split", "contraction", "pack", "contract", "alias", "fold", "simd", "promote",
         "sink", "window", "transpose", "threads",
         "one block", "groups")
_SIZES = ("cache", "register", "panel", "tile", "block", "reduction_tile")  # printed as 32x32


@dataclass(frozen=True)
class Decision:
    kind: str  # one of KINDS
    #: what it concerns: statement names (the tiler), the kernel's name (the mapper)
    subjects: tuple
    #: ``contraction``: ``order`` (loops outside in), ``cache`` and ``register`` tile
    #: sizes, ``lanes`` (over a strided index), ``panels`` ("outermost": the packed
    #: panels' loop outside the kept outer loops); ``pack``: ``tensor``, ``buffer``,
    #: ``panel`` (Kt x NR), ``panels``, ``copy`` (and, for the code generator, the
    #: layout in facts named ``_...``, not printed);
    #: ``contract`` (a temporary kept per parallel iteration): ``loop``, ``buffer``;
    #: ``alias`` (a contraction's partial sums in its epilogue's result): ``into``;
    #: ``fold`` (a contraction's init and epilogue in its register tiles): ``init``,
    #: ``epilogue`` (statement names or None);
    #: ``sink`` and ``window`` (a small window reduction's rows sunk below the window
    #: loops, or a vector loop around the spelt-out window): ``member``, ``window``;
    #: ``transpose`` (square tiles of a band that writes along one index and reads
    #: along another): ``tile``;
    #: ``split``: ``groups`` (statement names per new band); ``threads``:
    #: ``tile``, ``block``, ``reduction_tile``; ``one block``: ``block``; ``groups``: ``grid``
    facts: Mapping = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self):
        object.__setattr__(self, "subjects", tuple(self.subjects))
        object.__setattr__(self, "facts", MappingProxyType(dict(self.facts)))

    @property
    def subject(self) -> str:
        """The statement (or kernel) of a decision about one."""
        return self.subjects[0]

    def __str__(self):
        facts = "".join(f"; {k} {'x'.join(map(str, v)) if k in _SIZES and v else v}"
                        for k, v in self.facts.items() if not k.startswith("_"))
        return f"{self.kind} {', '.join(self.subjects)}{facts}"
