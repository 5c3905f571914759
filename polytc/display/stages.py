"""The compiler's stages as ``str`` subclasses that render themselves in Jupyter.

Each stage stays exactly its text (``==``, ``print``, ``json.dumps`` and pickling work as
for a ``str``) and adds ``_repr_html_``.  Rendering never raises: on any error the text
is shown escaped.  ``wrap`` gives a stage access to the others (the dependence table
takes the tensors from the ``scop`` stage and measures distances in the ``schedule``).
"""
from __future__ import annotations

import ast as _ast
import re

import islpy as isl

from ..poly.deprows import dependence_rows, statement_key
from .html import (code_html, details, escape, fallback, numbered, pre, table,
                   with_css)

#: the stages shown open in ``stages_html``
OPEN = ("tc", "c", "opencl", "cuda")
CODE = ("c", "opencl", "cuda", "ast")


class TextStage(str):
    """A stage shown as escaped, preformatted text (and the base of the others)."""

    #: other stages of the same kernel (name -> text), set by ``wrap``
    context: dict = {}

    def __str__(self):
        return str.__str__(self)

    def html(self) -> str:
        """The HTML fragment (without CSS); may raise, ``_repr_html_`` guards it."""
        return pre(self)

    def _repr_html_(self) -> str:
        try:
            return with_css(self.html())
        except Exception:  # noqa: BLE001 - a display must never fail
            return fallback(self)


class CodeStage(TextStage):
    """Generated code (or isl's AST) with line numbers, highlighted by Pygments."""

    language = "c"

    def html(self):
        return code_html(str(self), self.language)


_TC_TOKEN = re.compile(r"(?P<com>#.*)|(?P<num>\b\d+(?:\.\d*)?(?:[eE][+-]?\d+)?\b)|"
                       r"(?P<op>[+*]=!?|(?:min|max)=!?|->)|(?P<word>\b[A-Za-z_]\w*\b)")


class TcStage(TextStage):
    """The program as TC text, with keywords, types and reductions highlighted."""

    def html(self):
        from ..lang.lexer import KEYWORDS, TYPE_KEYWORDS

        def token(m):
            kind, text = m.lastgroup, m.group(0)
            if kind == "word":
                kind = "ty" if text in TYPE_KEYWORDS else "kw" if text in KEYWORDS else None
            return f'<span class="ptc-{kind}">{escape(text)}</span>' if kind else escape(text)

        def line(text):
            out, pos = [], 0
            for m in _TC_TOKEN.finditer(text):
                out.append(escape(text[pos:m.start()]) + token(m))
                pos = m.end()
            return "".join(out) + escape(text[pos:])
        return numbered(line(t) for t in str(self).rstrip("\n").split("\n"))


def sections(text: str) -> dict:
    """``key:\\n  value`` blocks (the scop's text) or ``KEY: value`` lines (the
    dependences') as a dict key -> value."""
    out, key = {}, None
    for raw in text.split("\n"):
        if raw[:1] in (" ", "\t") and key is not None:
            out[key] = (out[key] + " " + raw.strip()).strip()
        elif raw.strip():
            key, _, rest = raw.partition(":")
            out[key.strip()] = rest.strip()
    return out


def _pieces(ctx, text, cls):
    """The sets or maps of a union's text, in text order."""
    items = []
    union = cls.read_from_str(ctx, text or "{ }")
    (union.foreach_set if cls is isl.UnionSet else union.foreach_map)(items.append)
    return items


def _access(m, domain) -> str:
    """``A[x0, x2]``: a map's range, with the constraints its domain implies dropped."""
    text = str(m.gist_domain(domain) if domain is not None else m)
    inner = re.sub(r"^\{\s*\w*\[[^\]]*\]\s*->\s*", "", text)
    return inner[:-1].strip() if inner != text and inner.endswith("}") else text


class ScopStage(TextStage):
    """Statements with their iteration domains, reads and writes."""

    def html(self):
        parts, ctx = sections(str(self)), isl.Context()
        doms = {s.get_tuple_name(): s for s in _pieces(ctx, parts["domain"], isl.UnionSet)}
        acc: dict = {}
        for kind in ("reads", "writes"):
            for m in _pieces(ctx, parts.get(kind, ""), isl.UnionMap):
                name = m.get_tuple_name(isl.dim_type.in_)
                acc.setdefault((name, kind), []).append(_access(m, doms.get(name)))
        rows = []
        for name in sorted(doms, key=statement_key):
            cells = [escape(name), f'<span class="ptc-mono">{escape(doms[name])}</span>']
            for kind in ("reads", "writes"):
                cells.append("<br>".join(f'<span class="ptc-mono">{escape(a)}</span>'
                                         for a in sorted(acc.get((name, kind), []))))
            rows.append(cells)
        return table(["statement", "iteration domain", "reads", "writes"], rows, raw=True)


class DependenceStage(TextStage):
    """A table of the dependences: source -> sink, kind, tensor, distance, relation."""

    def html(self):
        parts = sections(str(self))
        rels = [parts.get(k, "{ }") for k in ("RAW", "WAR", "WAW")]
        writes = sections(self.context.get("scop", "")).get("writes") or "{ }"
        rows, where = None, "iteration space (a statement's dependence on itself)"
        sched = self.context.get("schedule")
        if sched:
            try:
                s = isl.Schedule.read_from_str(isl.Context(), sched)
                rows = dependence_rows(writes, *rels, schedule=s)
                where = "time space of the final schedule (sink time - source time)"
            except Exception:  # noqa: BLE001 - e.g. a tree isl cannot flatten
                rows = None
        if rows is None:
            rows = dependence_rows(writes, *rels)
        if not rows:
            out = '<p class="ptc-note">No dependences: the statements may run in any order.</p>'
        else:
            out = self._table(rows) + (
                f'<p class="ptc-note">Distances per dimension, in the {escape(where)}: a '
                "number when fixed, else a direction (+ / - / 0+ / 0- / *). Schedule "
                "dimensions count sequence positions too, so they are not the AST's "
                "c&lt;k&gt; loop numbers.</p>")
        relaxed = parts.get("validity with reductions reordered")
        if relaxed:
            out += details("validity with reductions reordered (what the scheduler "
                           "respects)", pre(relaxed))
        return out

    @staticmethod
    def _table(rows) -> str:
        cells = [(escape(f"{r.source} → {r.sink}"), escape(r.kind), escape(r.tensor),
                  f'<span class="ptc-mono">{escape(r.distance)}</span>',
                  escape("-" if r.carried is None else r.carried),
                  details("relation", f'<div class="ptc-mono">{escape(r.relation)}</div>'))
                 for r in rows]
        return table(["source → sink", "kind", "tensor", "distance", "carried by dim",
                      "relation"], cells, raw=True)


class ScheduleStage(TextStage):
    """The isl schedule tree as a nested list; the YAML text in a collapsed section."""

    def html(self):
        from .schedtree import schedule_tree_html

        return schedule_tree_html(str(self)) + details("isl text", pre(self))


class DecisionStage(TextStage):
    """Tiling or mapping decisions: one table row per ``('kind', what, ...)`` line;
    other lines as text."""

    def html(self):
        rows, rest = [], []
        for line in str(self).split("\n"):
            try:
                value = _ast.literal_eval(line.strip())
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                value = None
            if isinstance(value, tuple) and value and isinstance(value[0], str):
                rows.append([value[0]] + [_fmt(v) for v in value[1:3]])
            elif line.strip():
                rest.append(line)
        out = table(["decision", "on", "details"], [r + [""] * (3 - len(r)) for r in rows]) \
            if rows else ""
        return out + (pre("\n".join(rest)) if rest else "")


def _fmt(value) -> str:
    """A decision's argument: ``a, b`` for a list, ``a | b`` between groups, ``k=v``."""
    if isinstance(value, dict):
        return ", ".join(f"{k}={_fmt(v) if isinstance(v, dict) else v}"
                         for k, v in value.items())
    if isinstance(value, (list, tuple)):
        sep = " | " if any(isinstance(v, (list, tuple)) for v in value) else ", "
        return sep.join(_fmt(v) for v in value)
    return str(value)


_CLASSES = {"tc": TcStage, "scop": ScopStage, "dependences": DependenceStage,
            "schedule": ScheduleStage, "tiling": DecisionStage, "mapping": DecisionStage}


def stage(name: str, text: str, context: dict | None = None) -> str:
    """``text`` as the display class of stage ``name`` (unknown names: ``TextStage``);
    ``context``: the kernel's other stages, name -> text."""
    if name in CODE:
        obj = CodeStage(text)
        obj.language = name
    else:
        obj = _CLASSES.get(name, TextStage)(text)
    if context is not None:
        obj.context = {k: str(v) for k, v in context.items()}
    return obj


def wrap(stages: dict) -> dict:
    """Every stage of ``stages`` (name -> text) wrapped by ``stage``, in order."""
    plain = {k: str(v) for k, v in stages.items()}
    return {k: stage(k, v, plain) for k, v in plain.items()}


ORDER = ("tc", "scop", "dependences", "schedule", "tiling", "mapping", "ast", "c",
         "opencl", "cuda")


def stages_html(stages: dict, title: str = "polytc kernel") -> str:
    """All stages as collapsible sections (tc and the generated code open)."""
    try:
        wrapped = wrap(stages)
        names = sorted(wrapped, key=lambda k: (ORDER.index(k) if k in ORDER else len(ORDER), k))
        body = []
        for name in names:
            s = wrapped[name]
            try:
                inner = s.html()
            except Exception:  # noqa: BLE001
                inner = pre(s)
            body.append(details(name, inner, open_=name in OPEN))
        return with_css(f"<div><b>{escape(title)}</b></div>" + "".join(body))
    except Exception:  # noqa: BLE001
        return fallback("\n\n".join(f"{k}:\n{v}" for k, v in dict(stages).items()))
