"""polytc.explore (variants side by side), polytc.diff (loop-nest diffs), and the
progress hooks of polytc.autotune (on_result, the live plot)."""
import math

import numpy as np
import pytest

import polytc
from polytc.exploration import Exploration, Variant, _compare
from polytc.loopdiff import LoopDiff
from polytc.options import OptionsError
from polytc.tuner.plot import TunePlot

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

MMRELU = """
def mmrelu(float(M,K) A, float(K,N) B) -> (C, R) {
    C(m, n) +=! A(m, k) * B(k, n)
    R(m, n) = fmax(C(m, n), 0.0)
}"""
ADD = "def add(float(N) A, float(N) B) -> (C) { C(i) = A(i) + B(i) }"


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((24, 16)).astype(np.float32),
            rng.standard_normal((16, 20)).astype(np.float32))


@pytest.fixture(scope="module")
def ex():
    return polytc.explore(polytc.tc(MMRELU), *_inputs(), repeat=5,
                          fusion=["max", "min"], tile=[None, ()])


def test_explore_variants_are_correct_and_timed(ex):
    assert isinstance(ex, Exploration) and len(ex) == 4
    assert [r.label for r in ex] == ["fusion=max, tile=None", "fusion=max, tile=()",
                                     "fusion=min, tile=None", "fusion=min, tile=()"]
    for r in ex.rows:
        assert isinstance(r, Variant) and r.error is None and r.correct is True, r
        assert r.options.fusion == r.changes["fusion"] and r.options.tile == r.changes["tile"]
        assert 0 < r.min_s <= r.median_s and r.max_error < 1e-4
        assert {"ast", "schedule", "c"} <= set(r.stages)
    assert ex.rows[0].speedup == 1.0
    assert ex.best in ex.rows and ex.best.median_s == min(r.median_s for r in ex.rows)
    text = str(ex)
    assert "mmrelu" in text and all(r.label in text for r in ex.rows)


def test_explore_diff_of_fusion(ex):
    d = ex.diff("fusion=max, tile=None", "fusion=min, tile=None")
    assert isinstance(d, LoopDiff) and d.changed and d.stage == "ast"
    text = str(d)
    assert text.startswith("--- fusion=max, tile=None (ast)") and "for (int c0" in text
    assert "<table" in d._repr_html_()
    assert not ex.diff(0, 0).changed and "no difference" in str(ex.diff(0, 0))
    assert ex.diff(0, 2, stage="c").changed
    # polytc.diff on compiled kernels; the schedule stage too
    ca, cb = ex[0].compiled, ex[2].compiled
    assert polytc.diff(ca, cb, stage="schedule").changed
    with pytest.raises(polytc.PolytcError, match="no stage 'loops'"):
        polytc.diff(ca, cb, stage="loops")
    with pytest.raises(polytc.PolytcError, match="2 variants match"):
        ex.diff("fusion=max", 1)


def test_explore_html_and_plot(ex):
    html = ex._repr_html_()
    assert html.count("<tr") == 1 + len(ex)  # the header and a row per variant
    assert "background:#d9f2d9" in html  # the best row
    assert "data:image/svg+xml;base64," in html
    fig = ex.plot()
    ax = fig.axes[0]
    assert len(ax.patches) == len(ex)
    assert [t.get_text() for t in ax.get_yticklabels()][0] == "#0 fusion=max, tile=None"


def test_explore_rejects_bad_choices():
    k = polytc.tc(ADD)
    x = np.ones(8, np.float32)
    with pytest.raises(polytc.PolytcError, match="'fusoin' is not an option") as e:
        polytc.explore(k, x, x, fusoin=["max"])
    assert "fusion" in str(e.value)  # the valid names are listed
    with pytest.raises(polytc.PolytcError, match="must be a non-empty list"):
        polytc.explore(k, x, x, tile=(32, 32, 32))
    # an invalid value is an Options validation error: raised before compiling anything
    with pytest.raises(OptionsError, match="tile must be 3 positive sizes"):
        polytc.explore(k, x, x, tile=[None, (0, 1, 1)])
    with pytest.raises(polytc.PolytcError, match="at most 64"):
        polytc.explore(k, x, x, unroll=list(range(9)), num_threads=list(range(1, 9)))
    with pytest.raises(polytc.PolytcError, match="takes a polytc kernel"):
        polytc.explore("add", x, x, fusion=["max"])


def test_explore_records_compile_errors(monkeypatch):
    from polytc.backends.base import Backend

    build = Backend._load_or_build

    def failing(self, program, env, options, key):
        if options.parallel_min_points == 12345:
            raise polytc.CompilationError("gcc said no")
        return build(self, program, env, options, key)

    monkeypatch.setattr(Backend, "_load_or_build", failing)
    x = np.arange(8, dtype=np.float32)
    ex = polytc.explore(polytc.tc(ADD), x, x, repeat=3, parallel_min_points=[1 << 15, 12345])
    good, bad = ex.rows
    assert good.ok and good.correct and bad.compiled is None and not bad.ok
    assert bad.error == "compile: CompilationError: gcc said no"
    assert bad.median_s is None and bad.speedup is None and ex.best is good
    assert "background:#fbdada" in ex._repr_html_()
    assert len(ex.plot().axes[0].patches) == 1  # failures are not plotted
    with pytest.raises(polytc.PolytcError, match="did not compile"):
        ex.diff(0, 1)


def test_explore_marks_wrong_results(monkeypatch):
    from polytc import exploration

    monkeypatch.setattr(exploration, "_compare", lambda outs, refs, rtol, atol: (False, 0.5, 0.5))
    x = np.arange(8, dtype=np.float32)
    ex = polytc.explore(polytc.tc(ADD), x, x, repeat=3, vectorize=[True])
    (row,) = ex.rows
    assert row.correct is False and not row.ok and row.error is None
    assert row.median_s > 0 and ex.best is None
    assert "wrong result (max error 0.5)" in str(ex)


def test_compare_tolerances():
    ref = np.array([1.0, 100.0, np.nan], np.float32)
    assert _compare([ref + np.float32(1e-3)], [ref], None, None)[0]  # within 1e-4 * 100
    ok, err, rel = _compare([ref + np.float32(0.5)], [ref], None, None)
    assert not ok and err == pytest.approx(0.5) and rel == pytest.approx(0.005)
    assert not _compare([np.array([1, 2])], [np.array([1, 3])], None, None)[0]
    assert _compare([np.array([1, 2])], [np.array([1, 2])], None, None)[:2] == (True, 0.0)


def test_autotune_on_result_and_plot_progress(capsys):
    x = np.ones(64, np.float32)
    seen = []
    best = polytc.autotune(polytc.tc(ADD), x, x, budget=10, population=2, generations=1,
                           store=False, progress="plot", on_result=seen.append)
    assert [r["n"] for r in seen] == [0, 1] == [r["n"] for r in best.tuning["history"]]
    assert all(isinstance(r["options"], polytc.Options) and r["time"] > 0 for r in seen)
    assert "autotune add: best" in capsys.readouterr().err  # no notebook: the bar
    with pytest.raises(polytc.PolytcError, match="progress must be"):
        polytc.autotune(polytc.tc(ADD), x, x, budget=1, progress="bars")


def test_tuneplot_headless_and_live(monkeypatch):
    recs = [{"n": n, "generation": n // 2, "time": t}
            for n, t in enumerate([2e-3, math.inf, 1e-3, 1.5e-3])]
    p = TunePlot("demo", total=4, live=False)  # headless: a tqdm bar, figure on demand
    for r in recs:
        p(r)
    p.close()
    assert p.best == 1e-3
    ax = p.figure().axes[0]
    assert "4 candidates" in ax.get_title() and ax.get_ylabel() == "time (ms)"
    assert p.png().startswith(b"\x89PNG")

    import IPython.display

    shown = []

    class Handle:
        def update(self, obj):
            shown.append(("update", obj))

    def display(obj, display_id=False):
        assert display_id is True
        shown.append(("display", obj))
        return Handle()

    monkeypatch.setattr(IPython.display, "display", display)
    live = TunePlot("demo", live=True, interval=0.0)
    for r in recs:
        live(r)
    live.close()  # everything drawn already: nothing more
    assert [kind for kind, _ in shown] == ["display", "update", "update", "update"]
    assert isinstance(shown[-1][1], IPython.display.Image)
