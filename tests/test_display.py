"""Rich Jupyter display of the compiler's stages and of ONNX sessions (polytc.display)."""
from __future__ import annotations

import importlib.util
import json
import pickle
import re
import sys

import islpy as isl
import numpy as np
import pytest

import polytc
from polytc.display import (CodeStage, DependenceStage, ScheduleStage, ScopStage, TcStage,
                            TextStage, session_html, stage, stages_html, wrap)
from polytc.display.html import code_html
from polytc.display.stages import sections
from polytc.poly.deprows import DepRow, dependence_rows, schedule_map

MMR = """def mmr(float(M,K) A, float(K,N) B) -> (C, D) {
    C(m,n) +=! A(m,k) * B(k,n)
    D(m,n) = fmax(C(m,n), 0)
}"""
STENCIL = """def st(float(N) A) -> (B, C) {
    B(i) = A(i) + A(i+1) where i in 0:N-1
    C(i) = B(i) + B(i+1) where i in 0:N-2
}"""


@pytest.fixture(scope="module")
def mmr():
    k = polytc.tc(MMR)
    return k.specialize(np.ones((64, 32), np.float32), np.ones((32, 48), np.float32))


@pytest.fixture(scope="module")
def stencil():
    return polytc.tc(STENCIL).specialize(np.ones((64,), np.float32))


def text_of(html: str) -> str:
    return re.sub(r"<[^>]+>", " ", html)


# --- stages stay their text -------------------------------------------------------------
def test_wrapped_stages_are_the_same_text(mmr):
    w = wrap(mmr.stages)
    assert set(w) == set(mmr.stages)
    for name, text in mmr.stages.items():
        assert w[name] == text and str(w[name]) == text and type(str(w[name])) is str
    assert json.dumps(w, sort_keys=True) == json.dumps(dict(mmr.stages), sort_keys=True)
    assert pickle.loads(pickle.dumps(w))["c"] == mmr.stages["c"]
    kinds = {n: type(s) for n, s in w.items()}
    assert kinds["tc"] is TcStage and kinds["scop"] is ScopStage
    assert kinds["dependences"] is DependenceStage and kinds["schedule"] is ScheduleStage
    assert kinds["c"] is CodeStage and kinds["ast"] is CodeStage
    assert type(stage("something-new", "x")) is TextStage


def test_schedule_tree(mmr):
    h = wrap(mmr.stages)["schedule"]._repr_html_()
    assert "parallel" in h and "coincident" in h and "permutable" in h
    assert "ptc-mark-parallel" in h and "ptc-mark-simd" in h and "sequence" in h
    assert re.search(r"S0: x0 - \(x0\) mod \d+", h)  # a partial schedule: x0's tile loop
    # the packing copy's filter beside the contraction's (D's epilogue is folded into
    # C's register tiles: it has no loops of its own)
    assert "filter</span> <span class=\"ptc-mono\">pack0" in h


def test_scop_table(mmr):
    t = text_of(wrap(mmr.stages)["scop"]._repr_html_())
    assert "iteration domain" in t and "A[x0, x2]" in t and "B[x2, x1]" in t
    assert t.index("I0") < t.index("S0") < t.index("S1")


def test_tc_and_tiling(mmr):
    w = wrap(mmr.stages)
    h = w["tc"]._repr_html_()
    assert 'ptc-kw">def' in h and 'ptc-ty">float' in h and "ptc-ln" in h
    assert "contraction" in text_of(w["tiling"]._repr_html_())


def test_stages_html_sections(mmr):
    h = stages_html(mmr.stages, title="mmr <kernel>")
    assert "mmr &lt;kernel&gt;" in h
    for name in mmr.stages:
        assert f"<summary>{name}</summary>" in h
    assert "<details open><summary>tc</summary>" in h
    assert "<details open><summary>c</summary>" in h
    assert "<details><summary>schedule</summary>" in h


# --- dependence rows --------------------------------------------------------------------
def stencil_relations(ck):
    writes = sections(ck.stages["scop"])["writes"]
    raw = sections(ck.stages["dependences"])["RAW"]
    return writes, raw


def test_stencil_flow_dependence(stencil):
    writes, raw = stencil_relations(stencil)
    ctx = isl.Context()
    program_order = isl.UnionMap.read_from_str(ctx, "{ S0[i] -> [0, i]; S1[i] -> [1, i] }")
    rows = dependence_rows(writes, raw, None, None, program_order)
    assert [(r.kind, r.source, r.sink, r.tensor) for r in rows] == [("flow", "S0", "S1", "B")]
    assert rows[0].distance == "(1, 0-)" and rows[0].carried == 0
    assert rows[0].describe() == ("flow dependence S0 -> S1 on B, distance (1, 0-), "
                                  "carried by dimension 0")
    # fused with a shift of one: C(i) runs with B(i + 1), after it in the sequence
    shifted = isl.Schedule.read_from_str(ctx, """\
domain: "{ S0[i] : 0 <= i <= 62; S1[i] : 0 <= i <= 61 }"
child:
  schedule: "[{ S0[i] -> [(i)]; S1[i] -> [(i + 1)] }]"
  child:
    sequence:
    - filter: "{ S0[i] }"
    - filter: "{ S1[i] }"
""")
    (row,) = dependence_rows(writes, raw, None, None, shifted)
    assert (row.source, row.sink, row.tensor, row.distance, row.carried) == \
        ("S0", "S1", "B", "(0+, 1)", 0)
    (row,) = dependence_rows(writes, raw, None, None)  # no schedule: not measured
    assert row.distance == "-" and row.carried is None
    assert isinstance(row, DepRow) and "S0[x0] -> S1[x0']" in row.relation


def test_reduction_self_dependence(mmr):
    parts = sections(mmr.stages["dependences"])
    writes = sections(mmr.stages["scop"])["writes"]
    rows = dependence_rows(writes, parts["RAW"], parts["WAR"], parts["WAW"])
    self_flow = [r for r in rows if r.kind == "flow" and r.source == r.sink == "S0"]
    assert self_flow and self_flow[0].distance == "(0, 0, 1)" and self_flow[0].carried == 2
    assert {r.tensor for r in rows} == {"C"} and {r.kind for r in rows} == {"flow", "output"}
    h = wrap(mmr.stages)["dependences"]._repr_html_()
    assert "S0 → S1" in h and "flow" in h and "final schedule" in h


def test_schedule_with_extension():
    text = """domain: "{ S0[i] : 0 <= i <= 9; S1[i] : 0 <= i <= 9 }"
child:
  schedule: "[{ S0[i] -> [(i)]; S1[i] -> [(i)] }]"
  child:
    extension: "{ [i] -> copy_A[i] }"
    child:
      sequence:
      - filter: "{ copy_A[a] }"
        child:
          mark: "copy"
          child:
            schedule: "[{ copy_A[a] -> [(a)] }]"
      - filter: "{ S0[i] }"
        child:
          mark: "shared:A"
          child:
            schedule: "[{ S0[i] -> [(0)] }]"
      - filter: "{ S1[i] }"
"""
    s = isl.Schedule.read_from_str(isl.Context(), text)
    want = "{ S0[i] -> [i, 1, 0] : 0 <= i <= 9; S1[i] -> [i, 2, 0] : 0 <= i <= 9 }"
    assert schedule_map(s).is_equal(isl.UnionMap.read_from_str(s.get_ctx(), want))
    (row,) = dependence_rows("{ S0[i] -> B[i]; S1[i] -> C[i] }", "{ S0[i] -> S1[i] }",
                             None, None, s)
    assert row.distance == "(0, 1, 0)" and row.carried == 1
    h = ScheduleStage(text)._repr_html_()
    assert "extension" in h and "copy_A" in h and "ptc-mark-copy" in h and "shared (local)" in h


def test_schedule_map_matches_isl(mmr, monkeypatch):
    """The flattening used for trees with extensions agrees with isl's ``get_map`` (on a
    tiled tree without the packing extension, whose map isl cannot construct)."""
    flat = polytc.tc(MMR, options=polytc.Options(vectorize=False)).specialize(
        np.ones((64, 32), np.float32), np.ones((32, 48), np.float32))
    assert "extension" not in flat.stages["schedule"]
    s = isl.Schedule.read_from_str(isl.Context(), flat.stages["schedule"])
    want = s.get_map().intersect_domain(s.get_domain())

    def unsupported(self):
        raise isl.Error("as for a tree with extension nodes")
    monkeypatch.setattr(isl.Schedule, "get_map", unsupported)
    assert schedule_map(s).is_equal(want)


# --- code -------------------------------------------------------------------------------
def test_code_html_highlighted(mmr):
    h = wrap(mmr.stages)["c"]._repr_html_()
    n = mmr.stages["c"].count("\n") + 1
    assert h.count('class="ptc-ln"') == n
    if importlib.util.find_spec("pygments") is not None:
        assert 'style="color' in h  # Pygments' inline styles


def test_code_html_without_pygments(monkeypatch):
    for mod in [m for m in sys.modules if m == "pygments" or m.startswith("pygments.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "pygments", None)  # import pygments raises
    h = code_html("int main() {\n  return a < b;\n}", "c")
    assert h.count('class="ptc-ln"') == 3 and "a &lt; b" in h and 'style="color' not in h
    assert "x &lt;&lt;= 1" in CodeStage("for (;;) x <<= 1;")._repr_html_()


# --- never raises -----------------------------------------------------------------------
GARBAGE = ["", "<script>alert(1)</script> { S0[ : }", "RAW: {{{\nWAR: x\nWAW:",
           "domain: nope\nchild:\n  - - -", "\x00\x01 ] [", "('simd', [", "(" * 500,
           "domain:\n  { S0[x] : }\nreads:\n  {\nwrites:\n  }"]


@pytest.mark.parametrize("name", ["tc", "scop", "dependences", "schedule", "tiling",
                                  "mapping", "ast", "c", "opencl", "cuda", "other"])
def test_garbage_never_raises(name):
    for text in GARBAGE:
        h = stage(name, text, {"scop": text, "schedule": text})._repr_html_()
        assert isinstance(h, str) and "<script>" not in h
    h = stages_html({name: g for name, g in zip(("scop", "schedule", "c"), GARBAGE[1:])})
    assert "&lt;script&gt;" in h


# --- ONNX sessions ----------------------------------------------------------------------
def test_session_groups():
    from polytc.graph import examples

    sess = polytc.onnx.compile(examples.mlp(batch=4, sizes=(16, 8, 4)))
    h = sess._repr_html_()
    (plan,) = sess._plans.values()
    groups = [s for s in plan.steps if hasattr(s, "stmts")]
    assert len(groups) >= 2
    for n in sess.graph.nodes:
        assert n.name in h
    fills = {}
    for g in groups:
        for n in g.nodes:
            m = re.search(f'<g data-node="{re.escape(n.name)}"><title>[^<]*</title>'
                          '<rect [^>]*fill="([^"]+)"', h)
            fills.setdefault(g.name, set()).add(m.group(1))
    assert all(len(c) == 1 for c in fills.values())  # one colour per group
    assert len({c for cs in fills.values() for c in cs}) == len(groups)  # distinct
    for g in groups:
        assert f"<b>{g.name}</b>" in h and " + ".join(g.ops) in h
    assert "<svg" in h and "statements" in h


def test_session_symbolic_not_compiled():
    from polytc.graph import examples

    sess = polytc.onnx.compile(examples.mlp(batch="N", sizes=(16, 8, 4)))
    h = session_html(sess)
    assert "Not compiled yet" in h and "<svg" in h and 'class="ptc-swatch"' not in h
    for n in sess.graph.nodes:
        assert n.name in h
    assert "ptc-pre" in session_html(object())  # not a session: the repr
