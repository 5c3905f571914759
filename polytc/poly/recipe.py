"""``polytc.Schedule``: a hand schedule users build step by step in a notebook.

>>> s = mm.schedule(A, B)                  # isl's schedule for these sizes, bands numbered
>>> s2 = s.tile(0, (32, 32)).parallel(0)   # every step returns a new Schedule (s unchanged)
>>> mm2 = mm.with_schedule(s2)             # a kernel compiled with it, for any sizes

Each step is checked against the dependences at once; an illegal one raises
``ScheduleError`` naming the dependence it would break (``poly.legality``).
"""
from __future__ import annotations

import html
import re

import islpy as isl

from ..diagnostics import ScheduleError, user_boundary
from . import handsched as H
from . import legality as L

STARTS = ("isl", "program")


class Schedule:
    """An immutable recipe (start + steps) for one program, replayed for the sizes of
    ``base``: the pipeline's build of the program through its ``dependences`` pass."""

    def __init__(self, base, steps: tuple):
        self.base, self.steps = base, tuple(steps)
        self.program, self.env = base.program, dict(base.env)
        self._tree: isl.Schedule | None = None

    @classmethod
    def start(cls, base, start: str = "isl", fusion: str = "auto") -> "Schedule":
        if start not in STARTS:
            raise ScheduleError(f"unknown start {start!r}", hint=f"choose {' or '.join(STARTS)}")
        first = ("from", "isl", fusion) if start == "isl" else ("from", "program")
        s = cls(base, (first,))
        s._build()
        return s

    # --- the isl objects, built once -----------------------------------------------------
    def _build(self):
        if self._tree is None:
            self._tree = H.replay(self.base.scop, self.base.deps, self.steps)
        return self.base.scop, self.base.deps, self._tree

    @property
    def isl(self) -> isl.Schedule:
        """The isl schedule tree."""
        return self._build()[2]

    @user_boundary
    def _then(self, *step) -> "Schedule":
        scop, deps, tree = self._build()
        new = Schedule(self.base, self.steps + (step,))
        new._tree = H.apply(tree, step, scop, deps)
        return new

    # --- the transformations -----------------------------------------------------------
    def tile(self, band: int, sizes) -> "Schedule":
        """Tile the first ``len(sizes)`` loops of ``band`` (a tile band, then a point band)."""
        return self._then("tile", band, tuple(sizes) if isinstance(sizes, list) else sizes)

    def interchange(self, band: int, a: int = 0, b: int = 1) -> "Schedule":
        """Swap loops ``a`` and ``b`` of ``band``."""
        return self._then("interchange", band, a, b)

    def split(self, band: int, at: int) -> "Schedule":
        """Cut ``band`` into two nested bands before its loop ``at``."""
        return self._then("split", band, at)

    def fuse(self, band: int, other: int) -> "Schedule":
        """One loop nest for ``band`` and ``other``, the band of the next statement group."""
        return self._then("fuse", band, other)

    def distribute(self, band: int) -> "Schedule":
        """One copy of ``band`` per statement, in program order (loop fission)."""
        return self._then("distribute", band)

    def parallel(self, band: int, loop: int = 0) -> "Schedule":
        """Run loop ``loop`` of ``band`` on OpenMP threads."""
        return self._then("parallel", band, loop)

    def vectorize(self, band: int) -> "Schedule":
        """``omp simd`` on the last loop of ``band`` (an innermost band)."""
        return self._then("vectorize", band)

    def unroll(self, band: int, loop: int = 0) -> "Schedule":
        """Unroll loop ``loop`` of ``band`` completely."""
        return self._then("unroll", band, loop)

    def undo(self) -> "Schedule":
        """This schedule without its last step."""
        if len(self.steps) < 2:
            raise ScheduleError("nothing to undo: this is the starting schedule")
        return Schedule(self.base, self.steps[:-1])

    # --- what it looks like -------------------------------------------------------------
    @property
    def loops(self) -> list:
        """One dict per loop: ``band``, ``loop``, ``expr`` (per statement), ``parallel``
        and, when it is not, ``carries`` (the dependence that forbids it)."""
        scop, deps, tree = self._build()
        out = []
        for k, node in enumerate(H.bands(tree)):
            exprs = member_exprs(node, scop)
            for m in range(node.band_n_member()):
                found = L.carried(node, m, scop, deps)
                out.append({"band": k, "loop": m, "expr": exprs[m], "parallel": not found,
                            "carries": found[0].describe(scop) if found else None})
        return out

    def tree(self) -> list:
        """``(depth, text)`` lines of the schedule tree with numbered bands."""
        scop, deps, tree = self._build()
        loops = {(d["band"], d["loop"]): d for d in self.loops}
        lines, count = [], [0]

        def visit(node, depth):
            t = node.get_type()
            N = isl.schedule_node_type
            if t == N.band:
                k = count[0]
                count[0] += 1
                perm = " permutable" if node.band_get_permutable() and \
                    node.band_n_member() > 1 else ""
                lines.append((depth, f"band {k}{perm}"))
                for m in range(node.band_n_member()):
                    d = loops[(k, m)]
                    unroll = node.band_member_get_ast_loop_type(m) == isl.ast_loop_type.unroll
                    why = "parallel" if d["parallel"] else f"serial: carries {d['carries']}"
                    lines.append((depth + 1, f"loop {m}: for {_expr_text(d['expr'])}"
                                  f"{'  (unrolled)' if unroll else ''}   [{why}]"))
                depth += 1
            elif t == N.sequence:
                lines.append((depth, "sequence"))
                depth += 1
            elif t == N.set:
                lines.append((depth, "set (any order)"))
                depth += 1
            elif t == N.filter:
                names = []
                node.filter_get_filter().foreach_set(lambda s: names.append(s.get_tuple_name()))
                lines.append((depth, "statements " + ", ".join(
                    f"{n} ({_stmt_text(scop, n)})" for n in _sorted(scop, names))))
                depth += 1
            elif t == N.mark:
                lines.append((depth, "mark " + node.mark_get_id().get_name().partition(":")[0]))
                depth += 1
            for i in range(node.n_children()):
                visit(node.child(i), depth)

        visit(tree.get_root(), 0)
        return lines

    def __str__(self):
        steps = ", ".join(H.describe(s) for s in self.steps[1:]) or "none"
        head = (f"schedule of {self.program.name} for "
                f"{', '.join(f'{k}={v}' for k, v in self.env.items())}, from "
                f"{self.steps[0][1]}; steps: {steps}")
        return "\n".join([head] + ["  " * d + t for d, t in self.tree()])

    def __repr__(self):
        return f"<polytc.Schedule {self.program.name}: {len(self.steps) - 1} steps>"

    def _repr_html_(self):
        rows = str(self).split("\n")
        body = "\n".join(html.escape(r) for r in rows[1:])
        body = re.sub(r"(band \d+)", r"<b>\1</b>", body)
        body = body.replace("[parallel]", '<span style="color:#080">[parallel]</span>')
        return (f"<div><b>{html.escape(rows[0])}</b><pre style='line-height:1.3'>"
                f"{body}</pre></div>")


def _sorted(scop, names):
    order = {s.name: (s.index, s.kind != "init") for s in scop.stmts}
    return sorted(names, key=lambda n: order.get(n, (0, 0)))


def _stmt_text(scop, name) -> str:
    s = next(x for x in scop.stmts if x.name == name)
    st = s.stmt
    lhs = f"{st.tensor}({', '.join(st.indices)})"
    if s.kind == "init":
        return f"{lhs} = init"
    from ..lang.program import expr_to_tc

    op = "=" if st.op is None else f"{st.op}="
    text = f"{lhs} {op} {expr_to_tc(st.rhs)}"
    return text if len(text) <= 60 else text[:57] + "..."


def _expr_text(exprs: dict) -> str:
    if len(set(exprs.values())) == 1:
        return next(iter(exprs.values()))
    return " | ".join(f"{k}: {v}" for k, v in exprs.items())


def member_exprs(node, scop) -> list:
    """For each member of a band: statement name -> its affine expression written with
    the statement's index names (``m``, ``n + 1``, ``32*floor(m/32)``)."""
    by_name = {s.name: s for s in scop.stmts}
    out: list = [dict() for _ in range(node.band_n_member())]
    mupa = node.band_get_partial_schedule()
    for m in range(node.band_n_member()):
        def piece(pa, m=m):
            name = pa.get_domain_space().get_tuple_name(isl.dim_type.set)
            if name not in by_name:
                return
            text = str(pa.coalesce())
            body = text[text.find("->") + 2:].strip().rstrip("}").strip()
            body = body.strip("[]()").strip() if body.count("(") <= 1 else body[1:-1]
            names = by_name[name].vars
            body = re.sub(r"\bx(\d+)\b", lambda g: names[int(g.group(1))], body)
            out[m][name] = _tidy(body)
        mupa.get_union_pw_aff(m).foreach_pw_aff(piece)
    for d in out:
        for k in list(d):
            d[k] = d[k].strip("()") if d[k].count("(") == 1 and d[k].startswith("(") else d[k]
    return [dict(sorted(d.items(), key=lambda kv: _sorted(scop, [kv[0]])[0])) for d in out]


def _tidy(text: str) -> str:
    """isl's tile expressions the way people write them."""
    text = re.sub(r"\((\w+) - \(\1\) mod (\d+)\)", r"\2*floor(\1/\2)", text)
    text = re.sub(r"\(\((\w+)\) mod (\d+)\)", r"\1 mod \2", text)
    text = re.sub(r"^\((.*)\)$", r"\1", text) if text.count("(") == 1 else text
    return text
