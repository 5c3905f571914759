"""``kernel.explain()``: its sentences on known programs, checked word for word."""
import numpy as np
import pytest

import polytc
from polytc import Options

MMR = """def mmr(float(M,K) A, float(K,N) B) -> (C, D) {
    C(m, n) +=! A(m, k) * B(k, n)
    D(m, n) = fmax(C(m, n), 0)
}"""

SOFTMAX = """def softmax(float(N,D) X) -> (Y) {
    mx(n) max=! X(n, d)
    e(n, d) = exp(X(n, d) - mx(n))
    s(n) +=! e(n, d)
    Y(n, d) = e(n, d) / s(n)
}"""

STENCIL = """def stencil(float(N) A) -> (B, C) {
    B(i) = A(i) + A(i + 1) where i in 0:N-1
    C(i) = B(i) + B(i + 1) where i in 0:N-2
}"""


def one(sentences, *parts):
    """The one sentence containing every part."""
    found = [s for s in sentences if all(p in s for p in parts)]
    assert found, f"no sentence with {parts} in:\n" + "\n".join(sentences)
    return found[0]


@pytest.fixture(scope="module")
def ab():
    rng = np.random.default_rng(0)
    return rng.random((64, 32), dtype=np.float32), rng.random((32, 48), dtype=np.float32)


def test_fused_matmul_relu(ab):
    e = polytc.tc(MMR, options=Options(fusion="max")).explain(*ab)
    fusion = e.about("fusion")
    assert one(fusion, "Loop structure from isl's scheduler with fusion='max' (your option)")
    one(fusion, "I0 (init of line 2: C(m, n) = init) and S0 (line 2: C(m, n) += A(m, k) * "
                "B(k, n)) and S1 (line 3: D(m, n) = fmax(C(m, n), 0.0)) are fused: one loop "
                "nest runs them over (m)")
    par = e.about("parallel")
    one(par, "The loop over m (I0, S0, S1) runs in parallel (omp parallel for)")
    one(par, "The loop over k (S0) is sequential: it carries the flow (read after write) "
             "dependence S0(m=0, n=0, k=0) -> S0(m=0, n=0, k=1) on 'C' (line 2)")
    one(e.about("tiling"), "Nothing is cache-tiled")
    one(e.about("vectorize"), "S0 (line 2", "accumulated in a register")
    one(e.about("vectorize"), "gcc vectorised", "using 64 byte vectors") if \
        polytc.machine.host().vector_bytes == 64 else None
    text = str(e)
    assert text.startswith("mmr for M=64, K=32, N=48\nfusion:")
    assert "isl: " in text and "<h4" in e._repr_html_()


def test_matmul_relu_with_the_cost_model(ab):
    e = polytc.tc(MMR).explain(*ab, vectorizer=False)
    fusion = e.about("fusion")
    one(fusion, "fusion='auto', which chose 'preserve', as the program has a contraction")
    one(fusion, "S0 (line 2: C(m, n) += A(m, k) * B(k, n)) folds its init and epilogue into "
                "its register tiles", "S1 (line 3: D(m, n) = fmax(C(m, n), 0.0)) runs on each "
                "register tile right after its last reduction tile")
    unfolded = polytc.tc(MMR, options=Options(disable=("fold",))).explain(*ab, vectorizer=False)
    one(unfolded.about("fusion"), "S1 (line 3: D(m, n) = fmax(C(m, n), 0.0)) runs in its own "
        "loop nest after S0 (line 2: C(m, n) += A(m, k) * B(k, n)). Fusing them would be legal")
    tiling = one(e.about("tiling"), "S0 (line 2: C(m, n) += A(m, k) * B(k, n)) is a "
                                    "contraction: cache tiles")
    assert "sizes from the cost model (register tile from" in tiling
    assert not [f for f in e.facts if "gcc" in f.text]
    e2 = polytc.tc(MMR, options=Options(tile=(16, 16, 16), register_tile=(4, 16))) \
        .explain(*ab, vectorizer=False)
    one(e2.about("tiling"), "cache tiles 16x16x16 and register tiles 4x16x1",
        "sizes from your Options")
    e3 = polytc.tc(MMR, options=Options(fusion="min")).explain(*ab, vectorizer=False)
    one(e3.about("fusion"), "fusion='min' never fuses statements")


@pytest.mark.parametrize("body", ["A(i, j) * t(i)", "A(i, j)"])
def test_a_reduction_down_the_columns_is_not_fused_row_by_row(body):
    """y(j) += A(i, j) * t(i) fused row by row (over j) strides through A in its reduction
    loop (75x slower at 2048x2048): 'auto' keeps isl's band, which the tiler interchanges
    so that the loop over j is the vector loop."""
    rng = np.random.default_rng(0)
    A, t = rng.random((67, 45), dtype=np.float32), rng.random(67, dtype=np.float32)
    src = f"def vm(float(M,N) A, float(M) t) -> (y) {{ y(j) +=! {body} }}"
    k = polytc.tc(src)
    e = k.explain(A, t, vectorizer=False)
    one(e.about("fusion"), "fusion='auto', which chose 'preserve', as S0 (line 1: y(j) += "
                           "A(i, j)", "reduces down the columns of 'A' (fused row by row")
    one(e.about("parallel"), "The loop over j mod", "(S0) is parallel and vectorised")
    want = t @ A if "t(i)" in body else A.sum(0)
    np.testing.assert_allclose(k(A, t), want, rtol=1e-5)


def test_softmax():
    X = np.random.default_rng(0).random((256, 128), dtype=np.float32)
    e = polytc.tc(SOFTMAX).explain(X, vectorizer=False)
    fusion = e.about("fusion")
    one(fusion, "fusion='auto', which chose 'max' (row-wise program: no contraction)")
    one(fusion, "I0 (init of line 2: mx(n) = init) and S0", "S3 (line 5: Y(n, d) = e(n, d) / "
                "s(n)) are fused: one loop nest runs them over (n)")
    par = e.about("parallel")
    one(par, "The loop over n (I0, S0, S1, I2, S2, S3) runs in parallel")
    one(par, "The loop over d (S0) is sequential: it carries the flow (read after write) "
             "dependence S0(n=0, d=0) -> S0(n=0, d=1) on 'mx' (line 2)")
    one(par, "The loop over d (S2) is sequential", "on 's' (line 4)")
    one(par, "The loop over d (S3) is parallel and vectorised (omp simd)")
    one(e.about("vectorize"), "S2 (line 4: s(n) += e(n, d)): its innermost loop is a "
                              "reduction into one element")


def test_stencil_fused_with_a_shift():
    A = np.random.default_rng(0).random(100000, dtype=np.float32)
    e = polytc.tc(STENCIL, options=Options(fusion="max")).explain(A, vectorizer=False)
    fusion = e.about("fusion")
    one(fusion, "S0 (line 2: B(i) = A(i) + A(i + 1)) and S1 (line 3: C(i) = B(i) + B(i + 1)) "
                "are fused", "aligned with a shift (S0: i | S1: 1 + i)")
    fused = next(f for f in e.facts if "are fused" in f.text)
    assert fused.isl.startswith("{ S0[x0] -> S1[x0'] : ")  # the dependences linking them
    one(fusion, "Without the shift, fusing them would be illegal: it would run the flow "
                "(read after write) dependence S0(i=1) -> S1(i=0) on 'B' (line 2 -> line 3) "
                "backwards")
    one(e.about("parallel"), "The loop over S0: i | S1: 1 + i (S0, S1) is sequential: it "
                             "carries the flow")
    # the cost model keeps the stencil apart, and says what fusing without a shift does
    e2 = polytc.tc(STENCIL).explain(A, vectorizer=False)
    one(e2.about("fusion"), "S1 (line 3", "runs in its own loop nest after S0",
        "Fusing their outer loops without a shift would be illegal")


def test_hand_schedule_and_small_kernels(ab):
    k = polytc.tc(MMR)
    s = k.schedule(*ab, start="program").split(1, 2).fuse(1, 3).parallel(1)
    e = k.with_schedule(s).explain(*ab, vectorizer=False)
    one(e.about("fusion"), "Loop structure from your hand schedule")
    one(e.about("fusion"), "S0 (line 2", "and S1 (line 3", "are fused")
    one(e.about("tiling"), "your hand schedule decides the tiles")
    tiny = [np.ones((4, 4), np.float32)] * 2
    e = polytc.tc(MMR, options=Options(fusion="max")).explain(*tiny, vectorizer=False)
    one(e.about("parallel"), "could run in parallel but runs sequentially: the kernel has",
        "fewer than parallel_min_points=32768")


def test_explain_on_other_targets_says_so(ab):
    with pytest.raises(polytc.PolytcError, match="explain\\(\\) describes the C target"):
        polytc.tc(MMR, target="opencl").explain(*ab)


def test_sizes_from_the_tuning_cache():
    from polytc.runtime import tuning

    rng = np.random.default_rng(3)
    A, B = rng.random((40, 24), dtype=np.float32), rng.random((24, 32), dtype=np.float32)
    k = polytc.tc(MMR)
    tuning.store(k.program, {"M": 40, "K": 24, "N": 32},
                 Options(tile=(8, 16, 8), register_tile=(4, 16)))
    e = k.explain(A, B, vectorizer=False)
    one(e.about("tiling"), "cache tiles 8x16x8", "sizes from the tuning cache (polytc.autotune)")


def test_quantised_product_says_how_its_steps_run():
    from polytc import machine

    k = polytc.tc("def q(int32(M,K) A, int32(K,N) B) -> (C) { C(m, n) +=! dot4(A(m, k), "
                  "B(k, n)) }")
    a, b = np.ones((64, 64), np.int32), np.ones((64, 256), np.int32)
    text = str(k.explain(a, b))
    assert "Each reduction step multiplies four 8-bit pairs per lane (dot4)" in text
    assert ("one vpdpbusd per vector" in text) == machine.host().int8_dot
