"""``LoopDiff``: how the loop nests (or any other stage) of two compiled variants differ.

``polytc.diff(ck_a, ck_b, stage="ast")`` compares the text of one stage of two
:class:`~polytc.runtime.native.CompiledKernel` objects (or two rows of a
:func:`polytc.explore` result) line by line with :mod:`difflib`.  ``str()`` gives a
unified diff, Jupyter shows the two texts side by side.
"""
from __future__ import annotations

import difflib
import html

from .diagnostics import PolytcError, user_boundary

#: the stage compared by default: isl's loop nest (the AST before C is printed)
DEFAULT_STAGE = "ast"

_CSS = """<style>
.polytc-diff table.diff {font-family: monospace; font-size: 12px; border-collapse: collapse;
  border: 1px solid #ccc}
.polytc-diff td, .polytc-diff th {padding: 0 4px; text-align: left; vertical-align: top;
  white-space: pre}
.polytc-diff .diff_header {color: #999; background: #f6f6f6}
.polytc-diff td.diff_next {display: none}
.polytc-diff .diff_add {background: #d4f8d4}
.polytc-diff .diff_chg {background: #fff3b0}
.polytc-diff .diff_sub {background: #ffd6d6}
</style>"""


def stage_text(compiled, stage: str) -> str:
    """The text of ``stage`` of a compiled kernel (``code``: the generated source)."""
    stages = getattr(compiled, "stages", None)
    if stages is None:
        raise PolytcError(f"diff compares compiled kernels, got {type(compiled).__name__}",
                          hint="pass what kernel.specialize(...) returned, or rows of "
                               "polytc.explore(...)")
    if stage == "code":
        return compiled.code
    if stage not in stages:
        raise PolytcError(f"no stage {stage!r} in this compiled kernel",
                          hint="choose one of " + ", ".join(sorted(stages)) + ", code")
    return stages[stage]


class LoopDiff:
    """The line diff of one stage of two compiled kernels.  ``changed``: whether the
    texts differ; ``lines``: the unified diff lines; ``a``, ``b``: the two texts."""

    def __init__(self, a: str, b: str, label_a: str = "a", label_b: str = "b",
                 stage: str = DEFAULT_STAGE):
        self.a, self.b = a, b
        self.label_a, self.label_b, self.stage = label_a, label_b, stage
        self.lines = tuple(difflib.unified_diff(
            a.splitlines(), b.splitlines(), fromfile=f"{label_a} ({stage})",
            tofile=f"{label_b} ({stage})", lineterm=""))

    @property
    def changed(self) -> bool:
        return self.a != self.b

    def __bool__(self) -> bool:
        return self.changed

    def __repr__(self):
        what = "differ" if self.changed else "are the same"
        return f"<LoopDiff {self.stage}: {self.label_a!r} and {self.label_b!r} {what}>"

    def __str__(self) -> str:
        if not self.changed:
            return f"no difference in the {self.stage} stage of {self.label_a} and " \
                   f"{self.label_b}"
        return "\n".join(self.lines)

    def _repr_html_(self) -> str:
        if not self.changed:
            return f"<p><i>{html.escape(str(self))}</i></p>"
        a, b = self.a.splitlines(), self.b.splitlines()
        long = max(len(a), len(b)) > 80  # long texts: the changed parts with context
        table = difflib.HtmlDiff(tabsize=4).make_table(
            a, b, html.escape(self.label_a), html.escape(self.label_b),
            context=long, numlines=3)
        head = f"<b>{html.escape(self.stage)}</b> stage"
        return f'{_CSS}<div class="polytc-diff">{head}{table}</div>'


@user_boundary
def diff(a, b, stage: str = DEFAULT_STAGE) -> LoopDiff:
    """The diff of ``stage`` (``ast``: the loop nest, ``schedule``, ``c``, ``code``, any
    key of ``stages``) between two compiled kernels or two rows of an exploration."""
    texts, labels = [], []
    for x, default in ((a, "a"), (b, "b")):
        label = getattr(x, "label", None)  # an explore Variant
        if label is not None:
            if x.compiled is None:
                raise PolytcError(f"variant {label} did not compile: {x.error}")
            x = x.compiled
        texts.append(stage_text(x, stage))
        labels.append(label or default)
    return LoopDiff(texts[0], texts[1], labels[0], labels[1], stage)
