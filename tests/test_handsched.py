"""Schedules by hand (``polytc.Schedule``): immutable steps, legality checked against
the dependences with errors naming the dependence, compiled results equal numpy's."""
import json

import numpy as np
import pytest

import polytc
from polytc import Options, ScheduleError

MMR = """def mmr(float(M,K) A, float(K,N) B) -> (C, D) {
    C(m, n) +=! A(m, k) * B(k, n)
    D(m, n) = fmax(C(m, n), 0)
}"""

SKEW = """def skew(float(N,M) A) -> (B, C) {
  B(i, j) = A(i, j) * 2
  C(i, j) = B(i - 1, j + 1) where i in 1:N, j in 0:M-1
}"""


@pytest.fixture(scope="module")
def mm():
    rng = np.random.default_rng(0)
    A = rng.random((37, 20), dtype=np.float32)
    B = rng.random((20, 29), dtype=np.float32) - 0.5
    return polytc.tc(MMR), A, B


def check_mm(k, A, B):
    C, D = k(A, B)
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(D, np.maximum(A @ B, 0), rtol=1e-5, atol=1e-5)


def test_illegal_interchange_is_rejected_naming_the_dependence():
    k = polytc.tc(SKEW)
    A = np.ones((8, 9), np.float32)
    fused = k.schedule(A, start="program").fuse(0, 1)
    with pytest.raises(ScheduleError) as e:
        fused.interchange(0, 0, 1)
    msg = str(e.value)
    assert "interchange(0, 0, 1) is illegal" in msg
    assert "flow (read after write) dependence S0(i=0, j=1) -> S1(i=1, j=0) on 'B'" in msg
    assert "C(i, j) = B(i - 1, j + 1)" in msg and "^~~" in msg  # the sink's line, quoted
    assert "<tc>:3:3" in msg
    # the same step is legal before fusing (the nests run one after the other)
    k.schedule(A, start="program").interchange(0, 0, 1).interchange(1, 0, 1)


def test_parallel_on_a_carried_loop_is_rejected():
    k = polytc.tc(SKEW)
    fused = k.schedule(np.ones((8, 9), np.float32), start="program").fuse(0, 1)
    with pytest.raises(ScheduleError, match=r"parallel\(0, 0\): the loop marked parallel "
                       r"is not parallel: it carries the flow .* on 'B'"):
        fused.parallel(0, 0)
    loops = fused.loops
    assert [d["parallel"] for d in loops] == [False, True]
    assert "S0(i=0, j=1) -> S1(i=1, j=0)" in loops[0]["carries"]


def test_steps_are_immutable_and_printed(mm):
    k, A, B = mm
    s = k.schedule(A, B)
    before = str(s)
    t = s.tile(1, (8, 8))
    assert str(s) == before and len(s.steps) == 1 and len(t.steps) == 2
    assert "steps: tile(1, (8, 8))" in str(t)
    assert "8*floor(m/8)" in str(t) and "m mod 8" in str(t)
    assert "loop 2: for k   [serial: carries the flow" not in before  # phrasing below
    assert "for k   [serial: carries flow (read after write) dependence" in before
    assert t.undo().steps == s.steps
    assert "<b>band 0</b>" in t._repr_html_()


def test_hand_schedules_compile_and_match_numpy(mm):
    k, A, B = mm
    prog = k.schedule(A, B, start="program")
    fused = prog.split(1, 2).fuse(1, 3)  # relu fused into the (m, n) loops of the matmul
    recipes = [
        prog,
        fused,
        fused.tile(1, (16, 8)).parallel(1),
        fused.interchange(1, 0, 1).parallel(1, 1),
        prog.interchange(1, 1, 2).interchange(1, 0, 1),  # k outermost: reordered reduction
        prog.tile(1, (8, 8, 4)).unroll(2, 2).vectorize(3),
        k.schedule(A, B).tile(1, 16).parallel(1),
        k.schedule(A, B, start="program").split(1, 1),
    ]
    for s in recipes:
        hk = k.with_schedule(s)
        check_mm(hk, A, B)
        # the recipe replays for other sizes
        A2 = np.random.default_rng(1).random((50, 13), dtype=np.float32)
        B2 = np.random.default_rng(2).random((13, 17), dtype=np.float32)
        check_mm(hk, A2, B2)
    code = k.with_schedule(recipes[2]).specialize(A, B).code
    assert "omp parallel for" in code
    assert "omp simd" in k.with_schedule(recipes[5]).specialize(A, B).code


def test_distribute_is_checked():
    k = polytc.tc(SKEW, options=Options(fusion="max"))
    A = np.random.default_rng(0).random((8, 9), dtype=np.float32)
    s = k.schedule(A)
    d = s.distribute(0)
    B, C = k.with_schedule(d)(A)
    np.testing.assert_allclose(C[1:, :8], 2 * A[:-1, 1:9])


@pytest.mark.parametrize("step, msg", [
    (lambda s: s.tile(9, (4,)), "there is no band 9; this schedule has bands 0 to 2"),
    (lambda s: s.tile(1, (0, 4)), "give 1 to 3 positive tile sizes"),
    (lambda s: s.interchange(1, 0, 5), "the band has loops 0 to 2, not 5"),
    (lambda s: s.split(0, 2), "split a band of 2 loops at 1 to 1"),
    (lambda s: s.fuse(0, 2), "only a band and the band of the next statement group"),
    (lambda s: s.fuse(0, 1), "the bands have 2 and 3 loops; split the deeper one first"),
    (lambda s: s.vectorize(5), "there is no band 5"),
    (lambda s: s.distribute(2), "the band runs one statement; nothing to distribute"),
    (lambda s: s.undo(), "nothing to undo"),
    (lambda s: s.vectorize(2).vectorize(3), "vectorize(3): this loop is vectorised already"),
    (lambda s: s.vectorize(1), "vectorize(1): the loop marked simd is not parallel"),
])
def test_bad_steps_say_what_is_wrong(mm, step, msg):
    k, A, B = mm
    s = k.schedule(A, B, start="program")
    with pytest.raises(ScheduleError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        step(s)


def test_unroll_limit(mm, monkeypatch):
    from polytc.poly import handsched

    k, A, B = mm
    monkeypatch.setattr(handsched, "MAX_UNROLL", 8)
    with pytest.raises(ScheduleError, match="the loop runs 20 times; unroll at most 8"):
        k.schedule(A, B, start="program").unroll(1, 2)


def test_recipes_are_options(mm):
    k, A, B = mm
    s = k.schedule(A, B).tile(1, (16, 16)).parallel(1)
    o = k.with_schedule(s).options
    assert Options.from_json(o.to_json()) == o
    assert json.loads(o.to_json())["schedule"][1] == ["tile", 1, [16, 16]]
    with pytest.raises(polytc.PolytcError, match="schedule step .* is not a known step"):
        Options(schedule=(("spin", 0),))
    with pytest.raises(polytc.PolytcError, match="takes a polytc.Schedule"):
        k.with_schedule("tile everything")
    other = polytc.tc("def f(float(N) X) -> (Y) { Y(i) = X(i) }")
    with pytest.raises(polytc.PolytcError, match="made for 'mmr', not for 'f'"):
        other.with_schedule(s)
    with pytest.raises(ScheduleError, match="unknown start"):
        k.schedule(A, B, start="nowhere")


@pytest.mark.skipif(not polytc.backends.available("opencl"), reason="no OpenCL device")
def test_hand_schedules_are_for_c(mm):
    k, A, B = mm
    s = k.schedule(A, B)
    with pytest.raises(polytc.UnsupportedError, match="hand schedules compile for the C"):
        k.with_schedule(s).to("opencl").specialize(A, B)


@pytest.mark.parametrize("call", [
    lambda s: s.tile("0", (4,)), lambda s: s.tile(0, None), lambda s: s.tile(0, ("a",)),
    lambda s: s.interchange(0, 0.5, 1), lambda s: s.split(0, None), lambda s: s.fuse(0, "1"),
    lambda s: s.parallel(-1), lambda s: s.unroll(0, 7), lambda s: s.tile(0, 2 ** 70),
])
def test_garbage_arguments_raise_polytc_errors(mm, call):
    k, A, B = mm
    with pytest.raises(polytc.PolytcError) as e:
        call(k.schedule(A, B, start="program"))
    assert not isinstance(e.value, polytc.InternalError), e.value
