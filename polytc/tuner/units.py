"""Times in seconds as text and on plot axes (shared by the tuner's summary, its live
plot and ``polytc.explore``)."""
from __future__ import annotations

import math


def fmt_seconds(t) -> str:
    """``t`` seconds with a unit (s, ms, us) and three digits; ``-`` for none or inf."""
    if t is None or not math.isfinite(t):
        return "-"
    if t >= 1:
        return f"{t:.3g} s"
    if t >= 1e-3:
        return f"{t * 1e3:.3g} ms"
    return f"{t * 1e6:.3g} us"


def time_unit(t: float):
    """The unit to show ``t`` seconds in and its scale: ``(name, factor)``."""
    for unit, scale in (("s", 1.0), ("ms", 1e3), ("us", 1e6)):
        if t >= 1 / scale:
            return unit, scale
    return "ns", 1e9
