"""An isl schedule tree (its block-YAML text) as a nested HTML list.

The text is parsed with ``isl.Schedule.read_from_str`` in a fresh context and walked
node by node: domain, context, sequence/set, filter (statement names), band (one row
per member: its partial schedule per statement, coincident (parallel) flag and AST loop
type; the band's permutable flag and AST build options), mark (polytc's marks
highlighted and explained), extension, expansion and guard.  Leaves are not shown.
"""
from __future__ import annotations

import re

import islpy as isl

from ..poly.deprows import statement_key
from .html import details, escape, table

#: what each polytc mark means; ``{d}`` is the schedule dimension (AST loop ``c<d>``)
MARKS = {
    "parallel": "loop c{d} runs in parallel threads",
    "simd": "loop c{d} is the vectorised innermost loop",
    "promote": "below loop c{d}: the reduction accumulates in local variables",
    "rows": "loop c{d}: the rows of a register tile, unrolled by the code generator",
    "kernel": "accelerator kernel {d}",
    "block": "loops from c{d}: mapped to work-groups / thread blocks",
    "thread": "loops from c{d}: mapped to work-items / threads",
    "shared": "reads of {d} go to shared (local) memory",
    "copy": "copies into shared (local) memory",
}

_PIECE = re.compile(r"^\{ (\w+)\[[^\]]*\] -> \[\((.*)\)\] \}$")


def schedule_tree_html(text: str) -> str:
    """The schedule tree of ``text`` (isl block-YAML) as HTML; raises when isl cannot
    read it."""
    ctx = isl.Context()
    sched = isl.Schedule.read_from_str(ctx, text)
    root = _node(sched.get_root())
    return f'<ul class="ptc-tree" style="border-left:none;padding-left:0">{root}</ul>'


def _node(node) -> str:
    """One ``<li>`` for ``node`` and its subtree (nothing for a leaf)."""
    T = isl.schedule_node_type
    t = node.get_type()
    if t == T.leaf:
        return ""
    label = _label(node, t)
    kids = "".join(_node(node.child(k)) for k in range(node.n_children()))
    sub = f'<ul class="ptc-tree">{kids}</ul>' if kids else ""
    return f"<li>{label}{sub}</li>"


def _label(node, t) -> str:
    T = isl.schedule_node_type
    if t == T.domain:
        return _sets_label("domain", node.domain_get_domain())
    if t == T.filter:
        return _sets_label("filter", node.filter_get_filter(), short=True)
    if t == T.sequence:
        return _plain("sequence", "(children in order)")
    if t == T.set:
        return _plain("set", "(children in any order)")
    if t == T.band:
        return _band(node)
    if t == T.mark:
        return mark_html(node.mark_get_id().get_name())
    getter = {T.extension: "extension_get_extension", T.context: "context_get_context",
              T.guard: "guard_get_guard", T.expansion: "expansion_get_expansion"}.get(t)
    if getter is not None:
        kind = getter.partition("_")[0]
        return (f'<span class="ptc-node">{kind}</span> '
                f'<span class="ptc-mono">{escape(getattr(node, getter)())}</span>')
    return f'<span class="ptc-node">{escape(t)}</span>'


def _plain(kind: str, note: str) -> str:
    return f'<span class="ptc-node">{kind}</span> <span class="ptc-note">{escape(note)}</span>'


def mark_html(name: str) -> str:
    """A mark as a coloured badge plus what it means for polytc."""
    kind, _, rest = name.partition(":")
    css = f" ptc-mark-{kind}" if kind in MARKS else ""
    badge = f'<span class="ptc-mark{css}">mark {escape(name)}</span>'
    if kind not in MARKS:
        return badge
    depth = rest.partition(":")[0]
    if kind in ("block", "thread") and rest.count(":") == 1:
        depth, _, m = rest.partition(":")
        text = MARKS[kind].format(d=depth) + f" ({m} loop{'s' if m != '1' else ''})"
    else:
        text = MARKS[kind].format(d=depth or "?")
    return f'{badge} <span class="ptc-note">{escape(text)}</span>'


def _sets_label(what: str, uset, short: bool = False) -> str:
    """``domain``/``filter`` with its statement names; the sets themselves follow in
    a collapsed section (or inline, for a filter that is more than whole statements)."""
    sets = []
    uset.foreach_set(sets.append)
    sets.sort(key=lambda s: statement_key(s.get_tuple_name()))
    names = [s.get_tuple_name() or "[]" for s in sets]
    head = (f'<span class="ptc-node">{what}</span> '
            f'<span class="ptc-mono">{escape(", ".join(names))}</span>')
    if short and all(s.plain_is_universe() for s in sets):
        return head
    body = "".join(f'<div class="ptc-mono">{escape(s)}</div>' for s in sets)
    return head + details("sets", body)


def _band(node) -> str:
    """A band: its flags, then one table row per member."""
    n = node.band_n_member()
    perm = node.band_get_permutable()
    flag = (f' <span class="ptc-flag{" ptc-flag-on" if perm else ""}">'
            f'{"permutable" if perm else "not permutable"}</span>')
    partial = node.band_get_partial_schedule()
    rows = []
    for k in range(n):
        coinc = node.band_member_get_coincident(k)
        badge = (f'<span class="ptc-flag{" ptc-flag-on" if coinc else ""}">'
                 f'{"coincident" if coinc else "not coincident"}</span>')
        loop = node.band_member_get_ast_loop_type(k)
        loop_name = str(loop).rpartition(".")[2]
        rows.append((str(k), _member(partial.get_union_pw_aff(k)), badge,
                     escape(loop_name)))
    out = (f'<span class="ptc-node">band</span> <span class="ptc-note">({n} '
           f'member{"s" if n != 1 else ""}, schedule dimensions from '
           f'{node.get_schedule_depth()})</span>{flag}')
    out += table(["member", "partial schedule", "parallel", "loop type"], rows, raw=True)
    opts = node.band_get_ast_build_options()
    if not opts.is_empty():
        out += details("AST build options",
                       f'<div class="ptc-mono">{escape(opts)}</div>')
    return out


def _member(upa) -> str:
    """One band member: ``S0: x0 - (x0) mod 30`` per statement, or isl's text."""
    pieces = []
    upa.foreach_pw_aff(pieces.append)
    lines = []
    for p in pieces:
        text = str(p)
        m = _PIECE.match(text)
        lines.append(f"{m.group(1)}: {m.group(2)}" if m else text)
    return "<br>".join(f'<span class="ptc-mono">{escape(line)}</span>'
                       for line in sorted(lines))
