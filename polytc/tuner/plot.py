"""A live plot of an autotuning run: ``polytc.autotune(..., progress="plot")``.

:class:`TunePlot` takes the records of finished candidates (``n``, ``generation``,
``time``; ``inf`` for a failure) and draws candidate time against candidate number with
the running best.  In a Jupyter kernel the plot is one output, redrawn in place through
``IPython.display.display(..., display_id=True).update(...)`` at most every
``interval`` seconds (and once more at :meth:`TunePlot.close`).  Anywhere else (a
script, a terminal IPython) it degrades to the same tqdm bar as ``progress="bar"``; the
figure is still available from :meth:`TunePlot.figure`.  It can also be passed as
``autotune(..., on_result=TunePlot())``.
"""
from __future__ import annotations

import io
import math
import sys
import time

from .units import fmt_seconds, time_unit


def in_notebook() -> bool:
    """Whether this runs in an IPython kernel (Jupyter), where rich outputs show."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


class TunePlot:
    """Candidate time vs candidate number, with the running best.  ``live``: draw in the
    notebook (``None``: when in one), else show a tqdm bar of ``total`` candidates."""

    def __init__(self, desc: str = "autotune", total: int | None = None,
                 interval: float = 0.5, live: bool | None = None):
        self.desc, self.total, self.interval = desc, total, interval
        self.records: list = []  # (n, generation, seconds or inf)
        self.live = in_notebook() if live is None else bool(live)
        self._handle = None  # the notebook output updated in place
        self._drawn = 0  # records in the last drawing
        self._last = 0.0
        self._bar = None
        if not self.live:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc=desc, unit="cand", leave=True,
                             file=sys.stderr, dynamic_ncols=True)

    @property
    def best(self) -> float:
        return min((t for _, _, t in self.records), default=math.inf)

    def _summary(self) -> str:
        failed = sum(1 for *_, t in self.records if not math.isfinite(t))
        gen = self.records[-1][1] if self.records else 0
        return f"best {fmt_seconds(self.best)}, gen {gen}, failed {failed}"

    def __call__(self, rec) -> None:
        t = rec.get("time")
        t = math.inf if t is None else float(t)
        self.records.append((rec["n"], rec.get("generation", 0), t))
        if self._bar is not None:
            self._bar.set_postfix_str(self._summary(), refresh=False)
            self._bar.update(1)
        elif time.monotonic() - self._last >= self.interval:
            self._show()

    def figure(self):
        """A matplotlib Figure of the records so far (not registered with pyplot)."""
        from matplotlib.figure import Figure

        fig = Figure(figsize=(7, 3.2), layout="constrained")
        ax = fig.add_subplot()
        ok = [(n, t) for n, _, t in self.records if math.isfinite(t)]
        bad = [n for n, _, t in self.records if not math.isfinite(t)]
        unit, scale = time_unit(max((t for _, t in ok), default=1.0))
        if ok:
            ax.scatter([n for n, _ in ok], [t * scale for _, t in ok], s=14,
                       color="#607d8b", label="candidate")
            steps, best = [], math.inf
            for n, _, t in sorted(self.records):
                best = min(best, t)
                if math.isfinite(best):
                    steps.append((n, best * scale))
            ax.step([n for n, _ in steps], [b for _, b in steps], where="post",
                    color="#4caf50", label="best so far")
            lo, hi = min(t for _, t in ok), max(t for _, t in ok)
            if 0 < lo and hi > 20 * lo:  # a wide range of times
                ax.set_yscale("log")
        if bad:
            top = max((t for _, t in ok), default=1.0) * scale * 1.05
            ax.scatter(bad, [top] * len(bad), marker="x", color="#e53935",
                       label="failed")
        if self.total:
            ax.set_xlim(-0.5, max(self.total, len(self.records)) - 0.5)
        ax.set_xlabel("candidate")
        ax.set_ylabel(f"time ({unit})")
        ax.set_title(f"{self.desc}: {len(self.records)} candidates, {self._summary()}",
                     fontsize=10)
        if self.records:
            ax.legend(loc="upper right", fontsize=8)
        return fig

    def png(self) -> bytes:
        buf = io.BytesIO()
        self.figure().savefig(buf, format="png", dpi=90)
        return buf.getvalue()

    def _show(self) -> None:
        from IPython.display import Image, display

        img = Image(data=self.png(), format="png")
        if self._handle is None:
            self._handle = display(img, display_id=True)
        else:
            self._handle.update(img)
        self._drawn, self._last = len(self.records), time.monotonic()

    def close(self) -> None:
        """The last drawing (in a notebook) or the end of the bar."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self.live and self.records and self._drawn != len(self.records):
            self._show()

