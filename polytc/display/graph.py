"""An ONNX session's graph as inline SVG, coloured by fusion group.

The layout is a plain layered one: a node's layer is the longest path to it from the
graph inputs, nodes sit left to right within their layer (ordered once by the mean
position of their predecessors, to untangle the edges), and edges are straight arrows.
Each compiled form of the session (one per set of input shapes) gets the graph with one
fill colour per group, a legend, and a table of its groups; a session whose inputs
have symbolic shapes and that has not run yet shows the bare graph.
"""
from __future__ import annotations

from .html import details, escape, fallback, table, with_css

W, H, GAP_X, GAP_Y, MARGIN = 150, 34, 18, 30, 10
SIDE = 60  # room left and right for the edges that bend past layers
PALETTE = ("#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69",
           "#fccde5", "#bc80bd", "#ccebc5", "#ffed6f", "#d9d9d9")
PLAIN, VIEW, FOLDED, IO = "#ffffff", "#eeeeee", "#f6f6f6", "#e8eef6"


def colour(k: int) -> str:
    """A distinct fill for group number ``k``."""
    if k < len(PALETTE) - 1:  # the last entry is kept for views
        return PALETTE[k]
    return f"hsl({(k * 137.508) % 360:.0f},70%,78%)"


def layout(graph) -> tuple:
    """``(boxes, edges, widest, layers)``: boxes are ``(key, x, y)``, a key being
    ``("in", value)``, ``("node", index)`` or ``("out", value)``; edges are pairs of
    keys; ``widest`` the most boxes in a layer."""
    producer, layer, preds = {}, {}, {}
    for v in graph.inputs:
        layer[("in", v)] = 0
        producer[v] = ("in", v)
    for k, n in enumerate(graph.nodes):
        ps = []
        for i in n.inputs:
            if i and i in producer and producer[i] not in ps:
                ps.append(producer[i])
        preds[("node", k)] = ps
        layer[("node", k)] = 1 + max((layer[p] for p in ps), default=-1)
        for o in n.outputs:
            if o:
                producer[o] = ("node", k)
    for v in graph.outputs:
        if v in producer:
            preds[("out", v)] = [producer[v]]
            layer[("out", v)] = layer[producer[v]] + 1
    rows: dict = {}
    for key in layer:  # insertion order: inputs, nodes, outputs
        rows.setdefault(layer[key], []).append(key)
    col: dict = {}  # key -> horizontal slot, layers centred
    widest = max((len(r) for r in rows.values()), default=1)
    for d in sorted(rows):  # by the mean column of the predecessors, else as listed
        first = {key: i for i, key in enumerate(rows[d])}

        def centre(key, first=first):
            ps = [col[p] for p in preds.get(key, []) if p in col]
            return (sum(ps) / len(ps) if ps else first[key], first[key])
        rows[d].sort(key=centre)
        col.update({key: (widest - len(rows[d])) / 2 + i for i, key in enumerate(rows[d])})
    boxes = []
    for d in sorted(rows):
        for key in rows[d]:
            boxes.append((key, SIDE + col[key] * (W + GAP_X), MARGIN + d * (H + GAP_Y)))
    edges = [(p, key) for key, ps in preds.items() for p in ps]
    return boxes, edges, widest, len(rows)


def graph_svg(graph, fills: dict | None = None, notes: dict | None = None) -> str:
    """The graph as SVG; ``fills``: node name -> colour, ``notes``: node name -> text
    added to the node's tooltip."""
    fills, notes = fills or {}, notes or {}
    boxes, edges, widest, depth = layout(graph)
    where = {key: (x, y) for key, x, y in boxes}
    width = 2 * SIDE + widest * (W + GAP_X) - GAP_X
    height = 2 * MARGIN + depth * (H + GAP_Y)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" '
           f'height="{height:.0f}" font-family="sans-serif" font-size="11">',
           '<defs><marker id="ptc-arrow" viewBox="0 0 10 10" refX="10" refY="5" '
           'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
           '<path d="M 0 0 L 10 5 L 0 10 z" fill="#57606a"/></marker></defs>']
    for a, b in edges:
        (x1, y1), (x2, y2) = where[a], where[b]
        x1, y1, x2 = x1 + W / 2, y1 + H, x2 + W / 2
        if y2 - y1 <= GAP_Y + 1:  # to the next layer: a straight arrow
            shape = f'<line x1="{x1:.0f}" y1="{y1:.0f}" x2="{x2:.0f}" y2="{y2:.0f}"'
        else:  # over layers: bend out to the side, past the boxes in between
            left = (x1 + x2) / 2 <= width / 2  # bend towards the nearer edge
            side = min(x1, x2) - 0.9 * W if left else max(x1, x2) + 0.9 * W
            shape = (f'<path d="M {x1:.0f} {y1:.0f} C {side:.0f} {y1 + H:.0f} '
                     f'{side:.0f} {y2 - H:.0f} {x2:.0f} {y2:.0f}" fill="none"')
        out.append(shape + ' stroke="#8c959f" marker-end="url(#ptc-arrow)"/>')
    for key, x, y in boxes:
        kind, ref = key
        if kind == "node":
            n = graph.nodes[ref]
            name = n.name or n.op
            fill = fills.get(n.name, PLAIN)
            tip = f"{n.op} {name}\n{n}" + (f"\n{notes[n.name]}" if n.name in notes else "")
            title, sub, rx, attr = n.op, name, 4, f' data-node="{escape(n.name)}"'
        else:
            fill, title, sub, rx = IO, "input" if kind == "in" else "output", ref, 14
            tip, attr = f"{title} {ref}", ""
        out.append(f'<g{attr}><title>{escape(tip)}</title><rect x="{x:.0f}" y="{y:.0f}" '
                   f'width="{W}" height="{H}" rx="{rx}" fill="{fill}" stroke="#57606a"/>'
                   f'<text x="{x + W / 2:.0f}" y="{y + 14:.0f}" text-anchor="middle" '
                   f'font-weight="bold">{escape(_short(title))}</text>'
                   f'<text x="{x + W / 2:.0f}" y="{y + 27:.0f}" text-anchor="middle" '
                   f'fill="#424a53">{escape(_short(sub))}</text></g>')
    out.append("</svg>")
    return "".join(out)


def _short(text: str, n: int = 24) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def plan_html(graph, plan) -> str:
    """The graph coloured by ``plan``'s groups, a legend and the table of groups."""
    from ..graph.group import Group, Join, View

    fills, notes, rows, legend = {}, {}, [], []
    groups = [s for s in plan.steps if isinstance(s, Group)]
    for k, g in enumerate(groups):
        c = colour(k)
        swatch = f'<span class="ptc-swatch" style="background:{c}"></span>'
        for n in g.nodes:
            fills[n.name] = c
            notes[n.name] = f"group {g.name}"
        legend.append(f"<div>{swatch}<b>{escape(g.name)}</b>: "
                      f"{escape(' + '.join(g.ops))}</div>")
        rows.append((swatch + escape(g.name), escape(", ".join(n.name or n.op for n in g.nodes)),
                     escape(" + ".join(g.ops)), escape(", ".join(g.inputs)),
                     escape(", ".join(g.outputs)), escape(len(g.stmts)),
                     escape("/".join(sorted(g.kinds)))))
    for s in plan.steps:
        if isinstance(s, (View, Join)) and s.node is not None:
            fills[s.node.name] = VIEW
            notes[s.node.name] = "a view (no computation)" if isinstance(s, View) else \
                "concatenated in place: its inputs are written into it (no copy)"
    for n in graph.nodes:
        if n.name not in fills:
            fills[n.name], notes[n.name] = FOLDED, "folded at compile time"
    legend.append(f'<div><span class="ptc-swatch" style="background:{VIEW}"></span>'
                  'views (reshapes, no code), concatenations written in place and folded '
                  'nodes</div>')
    tab = table(["group", "nodes", "ops", "inputs", "outputs", "statements", "kinds"],
                rows, raw=True)
    svg = f'<div style="max-height:640px;overflow:auto">{graph_svg(graph, fills, notes)}</div>'
    return (f'<div style="display:flex;gap:16px;align-items:flex-start">{svg}'
            f'<div>{"".join(legend)}</div></div>' + tab)


def session_html(session) -> str:
    """An ONNX ``Session`` as HTML: its graph per compiled input shape, coloured by
    fusion group.  Never raises (falls back to the session's repr)."""
    try:
        g = session.graph
        head = (f"<div><b>ONNX model {escape(g.name)}</b>: {len(g.nodes)} nodes after the "
                f"graph passes, target {escape(getattr(session, 'target', '?'))}</div>")
        plans = list(getattr(session, "_plans", {}).items())
        if not plans:
            note = ('<p class="ptc-note">Not compiled yet (symbolic input shapes): the '
                    "fusion groups appear once the session has run.</p>")
            return with_css(head + note + graph_svg(g))
        parts = []
        for k, (key, plan) in enumerate(plans):
            shapes = ", ".join(f"{v}: {list(s)}" for v, s in zip(g.inputs, key))
            parts.append(details(f"input shapes {shapes}", plan_html(g, plan),
                                 open_=k == len(plans) - 1))
        return with_css(head + "".join(parts))
    except Exception:  # noqa: BLE001 - a display must never fail
        try:
            return fallback(repr(session))
        except Exception:  # noqa: BLE001
            return fallback("<polytc.onnx.Session>")
