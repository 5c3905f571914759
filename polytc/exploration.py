"""``polytc.explore``: compile, check and time a few schedule variants side by side.

>>> ex = polytc.explore(k, A, B, fusion=["max", "min"], tile=[None, ()])  # doctest: +SKIP
>>> ex.best, ex.diff(0, 1)                                                 # doctest: +SKIP

Each keyword maps an :class:`~polytc.options.Options` field to a *list* of values; the
variants are the cartesian product (in the order given, first values first), at most
:data:`MAX_VARIANTS`.  Every combination is validated before anything is compiled: an
unknown field, a value that is not a list or a value ``Options`` rejects raises at once.
A variant that then fails to compile or to run becomes a row with its ``error``; one
whose outputs differ from the numpy oracle (:func:`polytc.lang.reference.run`) is a
row with ``correct=False``.  Variants start from the kernel's own options (for a kernel
created without options: the defaults, not options the tuner stored).
"""
from __future__ import annotations

import base64
import dataclasses
import html
import io
import itertools
import math
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from .diagnostics import PolytcError, user_boundary
from .loopdiff import LoopDiff, diff  # noqa: F401 - polytc.diff is exported from here
from .options import Options, OptionsError
from .tuner.units import time_unit as _unit

MAX_VARIANTS = 64
#: (rtol, atol) per float dtype: a float output passes when
#: ``|got - ref| <= atol * max(1, max|ref|) + rtol * |ref|``; integers must be equal
TOLERANCES = {"float32": (1e-4, 1e-4), "float64": (1e-10, 1e-10)}
DEFAULT_TOLERANCE = (1e-3, 1e-3)
#: a progress bar is shown (``progress=None``) for more variants than this
BAR_ABOVE = 4


def _show(v) -> str:
    return v if isinstance(v, str) else repr(v)


@dataclass(frozen=True)
class Variant:
    """One row of an :class:`Exploration`.  ``changes``: the chosen options (those
    explored); ``compiled``: the CompiledKernel (``None`` when ``error``); ``correct``:
    outputs match the oracle (``None``: not checked); times in seconds (``None`` when not
    measured); ``speedup``: the baseline's median over this one's."""

    index: int
    changes: dict
    options: Options
    compiled: object = None
    error: str | None = None
    correct: bool | None = None
    max_error: float | None = None
    rel_error: float | None = None
    median_s: float | None = None
    min_s: float | None = None
    compile_s: float | None = None
    speedup: float | None = None
    stages: dict = field(default_factory=dict, repr=False)

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={_show(v)}" for k, v in self.changes.items()) or "defaults"

    @property
    def ok(self) -> bool:
        """Compiled, ran and (if checked) correct."""
        return self.error is None and self.correct is not False


class Exploration:
    """The result of :func:`explore`: ``rows`` (a tuple of :class:`Variant`), ``best``,
    ``diff(a, b)``, ``plot()``; a plain-text table as ``str()``, an HTML one in Jupyter."""

    def __init__(self, kernel, env: dict, rows):
        self.kernel, self.env, self.rows = kernel, dict(env), tuple(rows)

    def __len__(self):
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def __getitem__(self, i) -> Variant:
        return self._row(i)

    @property
    def best(self) -> Variant | None:
        """The fastest (median) variant that compiled and is correct; ``None`` if none."""
        timed = [r for r in self.rows if r.ok and r.median_s is not None]
        return min(timed, key=lambda r: (r.median_s, r.index)) if timed else None

    def _row(self, key) -> Variant:
        if isinstance(key, Variant):
            return key
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            if not -len(self.rows) <= key < len(self.rows):
                raise PolytcError(f"no variant {key}; there are {len(self.rows)}",
                                  hint=f"variants are numbered 0 to {len(self.rows) - 1}")
            return self.rows[int(key)]
        if isinstance(key, str):
            want = {p.strip() for p in key.split(",") if p.strip()}
            hits = [r for r in self.rows if want <= set(r.label.split(", "))]
            if len(hits) == 1:
                return hits[0]
            raise PolytcError(f"{len(hits)} variants match {key!r}",
                              hint="variants: " + "; ".join(r.label for r in self.rows))
        raise PolytcError(f"a variant is an index, a label or a Variant, not {key!r}")

    def diff(self, a=0, b=1, stage: str = "ast") -> LoopDiff:
        """The diff of ``stage`` (``ast``: the loop nest; ``schedule``, ``c``, ...)
        between two variants, given by index, label (``"fusion=min"``) or row."""
        return diff(self._row(a), self._row(b), stage)

    def __repr__(self):
        best = self.best
        return (f"<Exploration {self.kernel.program.name}: {len(self.rows)} variants, best "
                f"{'none' if best is None else f'#{best.index} ({best.label})'}>")

    def _cells(self):
        """(row, status, [#, variant, median, min, speedup, max error, status])."""
        best = self.best
        for r in self.rows:
            status = ("best" if r is best else "ok") if r.ok else \
                (r.error or f"wrong result (max error {r.max_error:.2g})")
            err = "-" if r.max_error is None else f"{r.max_error:.2g}"
            speed = "-" if r.speedup is None else f"{r.speedup:.2f}x"
            yield r, status, [str(r.index), r.label, _seconds(r.median_s),
                              _seconds(r.min_s), speed, err, status]

    def _title(self) -> str:
        sizes = ", ".join(f"{k}={v}" for k, v in self.env.items())
        return f"explore {self.kernel.program.name} [{sizes}]: {len(self.rows)} variants"

    def __str__(self) -> str:
        table = [_HEAD] + [cells for _, _, cells in self._cells()]
        widths = [max(len(row[c]) for row in table) for c in range(len(_HEAD) - 1)]
        lines = ["  ".join(x.ljust(w) for x, w in zip(row, widths)) + "  " + row[-1]
                 for row in table]
        return "\n".join([self._title()] + lines)

    def _repr_html_(self) -> str:
        escape = html.escape
        head = "".join(f"<th style='text-align:left'>{h}</th>" for h in _HEAD)
        body = []
        for r, status, cells in self._cells():
            style = "background:#d9f2d9;font-weight:bold" if status == "best" else \
                "background:#fbdada" if not r.ok else ""
            cells[-1] = cells[-1] if len(cells[-1]) < 90 else cells[-1][:87] + "..."
            tds = "".join(f"<td style='text-align:left'>{escape(c)}</td>" for c in cells)
            body.append(f"<tr style='{style}' title='{escape(status)}'>{tds}</tr>")
        out = (f"<div><b>{escape(self._title())}</b><table><thead><tr>{head}</tr></thead>"
               f"<tbody>{''.join(body)}</tbody></table>")
        try:
            import matplotlib

            fig = self.plot()
        except ImportError:  # no matplotlib: the table alone
            return out + "</div>"
        buf = io.BytesIO()
        with matplotlib.rc_context({"svg.fonttype": "none"}):  # text, not paths: small
            fig.savefig(buf, format="svg", bbox_inches="tight")
        data = base64.b64encode(buf.getvalue()).decode("ascii")
        return out + f"<img src='data:image/svg+xml;base64,{data}'/></div>"

    def plot(self, ax=None):
        """Horizontal bars of the median time of each variant that ran (the best in
        green, wrong ones in red, ``|`` at the minimum) on ``ax`` or a new figure (not
        left open in pyplot); returns the Figure."""
        import matplotlib.pyplot as plt

        rows = [r for r in self.rows if r.error is None and r.median_s is not None]
        if ax is None:
            fig = plt.figure(figsize=(7, 1.2 + 0.3 * max(1, len(rows))),
                             layout="constrained")
            plt.close(fig)  # returned, not also shown at the end of a notebook cell
            ax = fig.add_subplot()
        unit, scale = _unit(max((r.median_s for r in rows), default=1.0))
        best = self.best
        colors = ["#4caf50" if r is best else "#e57373" if not r.ok else "#90a4ae"
                  for r in rows]
        y = list(range(len(rows)))
        ax.barh(y, [r.median_s * scale for r in rows], color=colors)
        ax.scatter([r.min_s * scale for r in rows], y, marker="|", color="black", s=120,
                   zorder=3)
        ax.set_yticks(y, [f"#{r.index} {r.label}" for r in rows])
        ax.invert_yaxis()
        ax.set_xlabel(f"median time ({unit})")
        ax.set_title(self._title(), fontsize=10)
        return ax.figure


_HEAD = ["#", "variant", "median", "min", "speedup", "max error", "status"]


def _seconds(t) -> str:
    if t is None:
        return "-"
    unit, scale = _unit(t)
    return f"{t * scale:.3g} {unit}"


def _variants(kernel, choices: dict) -> list:
    """The validated change dicts, in order."""
    fields = [f.name for f in dataclasses.fields(Options)]
    for name, values in choices.items():
        if name not in fields:
            raise OptionsError(f"explore: {name!r} is not an option",
                               hint="options: " + ", ".join(fields))
        if not isinstance(values, list) or not values:
            raise OptionsError(f"explore: {name} must be a non-empty list of values, got "
                               f"{values!r}",
                               hint=None if isinstance(values, list) else
                               f"for one value: {name}=[{values!r}]")
    n = math.prod(len(v) for v in choices.values())
    if n > MAX_VARIANTS:
        raise PolytcError(f"explore: {n} variants, at most {MAX_VARIANTS}",
                          hint="explore fewer values, or fewer options at once")
    out = []
    for combo in itertools.product(*choices.values()):
        changes = dict(zip(choices, combo))
        try:
            kernel.options.replace(**changes)
        except OptionsError as e:
            raise OptionsError(f"explore: invalid variant {changes}: {e.message}",
                               hint=e.hint) from None
        out.append(changes)
    return out


def _compare(outs, refs, rtol, atol):
    """(ok, max abs error, max error / max |ref|) over all outputs."""
    ok, worst, worst_rel = True, 0.0, 0.0
    for got, ref in zip(outs, refs):
        got, ref = np.asarray(got), np.asarray(ref)
        if got.shape != ref.shape:
            return False, math.inf, math.inf
        if ref.size == 0:
            continue
        g, r = got.astype(np.float64), ref.astype(np.float64)
        with np.errstate(all="ignore"):
            d = np.where((g == r) | (np.isnan(g) & np.isnan(r)), 0.0, np.abs(g - r))
        d = np.where(np.isnan(d), np.inf, d)
        finite = np.isfinite(r)
        scale = float(np.max(np.abs(r[finite]), initial=0.0))
        if ref.dtype.kind in "fc":
            rt, at = TOLERANCES.get(ref.dtype.name, DEFAULT_TOLERANCE)
            rt, at = rtol if rtol is not None else rt, atol if atol is not None else at
            bound = np.where(finite, at * max(1.0, scale) + rt * np.abs(r), 0.0)
        else:
            bound = 0.0
        ok = ok and bool(np.all(d <= bound))
        worst = max(worst, float(d.max()))
        worst_rel = max(worst_rel, float(d.max()) / max(scale, np.finfo(float).tiny))
    return ok, worst, worst_rel


def _first_line(e: BaseException) -> str:
    text = str(getattr(e, "message", None) or e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


def _evaluate(index, kernel, changes, arrays, refs, repeat, warmup, rtol, atol) -> Variant:
    kv = kernel.with_options(**changes)
    row = {"index": index, "changes": changes, "options": kv.options}
    t0 = time.perf_counter()
    try:
        ck = kv.specialize(*arrays)
    except PolytcError as e:
        return Variant(**row, error=f"compile: {_first_line(e)}")
    row.update(compiled=ck, compile_s=time.perf_counter() - t0, stages=dict(ck.stages))
    try:
        if refs is not None:
            outs = ck.run(list(arrays))
            outs = list(outs) if isinstance(outs, tuple) else [outs]
            ok, err, rel = _compare(outs, refs, rtol, atol)
            row.update(correct=ok, max_error=err, rel_error=rel)
        t = ck.benchmark(*arrays, repeat=repeat, warmup=warmup)
    except PolytcError as e:
        return Variant(**row, error=f"run: {_first_line(e)}")
    return Variant(**row, median_s=t["median"], min_s=t["min"])


def _check_settings(repeat, warmup, rtol, atol, progress) -> None:
    def whole(v) -> bool:
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

    if not whole(repeat) or repeat < 1:
        raise PolytcError(f"explore: repeat must be an int of at least 1, not {repeat!r}")
    if not whole(warmup) or warmup < 0:
        raise PolytcError(f"explore: warmup must be an int of at least 0, not {warmup!r}")
    for name, v in (("rtol", rtol), ("atol", atol)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float, np.number))
                              or not 0 <= v < math.inf):
            raise PolytcError(f"explore: {name} must be None or a number >= 0, not {v!r}")
    if progress is not None and not isinstance(progress, bool):
        raise PolytcError(f"explore: progress must be True, False or None, not {progress!r}")


@user_boundary
def explore(kernel, *inputs, repeat: int = 20, warmup: int = 2, check: bool = True,
            rtol: float | None = None, atol: float | None = None,
            progress: bool | None = None, **choices) -> Exploration:
    """Compile ``kernel`` with every combination of the ``choices`` (option name -> list
    of values), check each against the numpy oracle on ``inputs`` (``check``; tolerances
    per dtype, see :data:`TOLERANCES`, or ``rtol``/``atol``) and time it
    (``CompiledKernel.benchmark(repeat=, warmup=)``).  ``progress``: a tqdm bar (``None``:
    when there are more than :data:`BAR_ABOVE` variants).  The ``speedup`` of each row is
    relative to the first row that ran (the first values of every list)."""
    from .lang.reference import run as oracle
    from .runtime import args as A
    from .kernel import Kernel

    if not isinstance(kernel, Kernel):
        raise PolytcError(f"explore takes a polytc kernel, got {type(kernel).__name__}",
                          hint="pass what polytc.tc(...) or @polytc.kernel returned")
    _check_settings(repeat, warmup, rtol, atol, progress)
    variants = _variants(kernel, choices)
    arrays = A.as_arrays(kernel.program, inputs)
    env = A.bind_sizes(kernel.program, arrays)
    refs = None
    if check:
        got = oracle(kernel.program, arrays)
        refs = [got[t.name] for t in kernel.program.outputs]
    bar = None
    if progress or (progress is None and len(variants) > BAR_ABOVE):
        from tqdm.auto import tqdm

        bar = tqdm(total=len(variants), desc=f"explore {kernel.program.name}",
                   unit="variant", leave=False, file=sys.stderr)
    rows = []
    try:
        for i, changes in enumerate(variants):
            rows.append(_evaluate(i, kernel, changes, arrays, refs, repeat, warmup,
                                  rtol, atol))
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    base = next((r.median_s for r in rows if r.median_s is not None), None)
    rows = [dataclasses.replace(r, speedup=base / r.median_s)
            if base is not None and r.median_s else r for r in rows]
    return Exploration(kernel, env, rows)
