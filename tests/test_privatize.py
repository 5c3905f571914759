"""One pass over a matrix read along its rows and down its columns, the column
reductions' results in private copies per thread (``poly/privatize.py``): results equal
the oracle at odd sizes and with one or two threads, and the pass applies only where it
is legal."""
from __future__ import annotations

import numpy as np
import pytest

import polytc
from polytc.poly import privatize
from tests.kernels_small import check

ATAX = """def atax(float(M,N) A, float(N) x) -> (y) {
    tmp(i) +=! A(i, j) * x(j)
    y(j) +=! A(i, j) * tmp(i)
}"""
BICG = """def bicg(float(N,M) A, float(N) r, float(M) p) -> (s, q) {
    s(j) +=! r(i) * A(i, j)
    q(i) +=! A(i, j) * p(j)
}"""
ANY = polytc.Options(parallel_min_points=1)
TWO = polytc.Options(parallel_min_points=1, num_threads=2)
SCALAR = polytc.Options(parallel_min_points=1, vectorize=False)


def shared(ck) -> bool:
    return "private:" in ck.stages["schedule"]


@pytest.mark.parametrize("m,n", [(64, 96), (37, 53), (8, 8), (5, 100), (4, 3), (1, 40),
                                 (130, 1)])
@pytest.mark.parametrize("options", [ANY, TWO, SCALAR], ids=["default", "two", "scalar"])
def test_atax_one_pass(m, n, options):
    ck = check(ATAX, [(m, n), (n,)], options, rtol=1e-4, atol=1e-3)
    assert shared(ck)
    assert (f"reduction(+:y[:{n}])" in ck.stages["c"]) == (m > 1)  # one row: no loop
    if options is SCALAR:  # its marks set by privatize.py: no vector loop then either
        assert "omp simd" not in ck.stages["c"]
    if m % privatize.ROWS == 0 and m >= 2 * privatize.ROWS:
        assert f"rows:2:{privatize.ROWS}" in ck.stages["schedule"]


@pytest.mark.parametrize("n,m", [(64, 96), (33, 70), (3, 2)])
@pytest.mark.parametrize("options", [ANY, TWO], ids=["default", "two"])
def test_bicg_one_pass(n, m, options):
    ck = check(BICG, [(n, m), (n,), (m,)], options, rtol=1e-4, atol=1e-3)
    assert shared(ck) and f"reduction(+:s[:{m}])" in ck.stages["c"]


def test_unaligned_and_strided_inputs():
    k = polytc.tc(ATAX, options=TWO)
    rng = np.random.default_rng(3)
    big = rng.standard_normal((80, 130)).astype(np.float32)
    A = big[1:65, 1:129:2]  # not contiguous, not aligned
    x = rng.standard_normal(64).astype(np.float32)
    np.testing.assert_allclose(k(A, x), (A @ x) @ A, rtol=1e-4, atol=1e-3)


def test_result_read_by_another_statement_is_not_privatised():
    src = """def f(float(M,N) A, float(N) x) -> (z) {
        tmp(i) +=! A(i, j) * x(j)
        y(j) +=! A(i, j) * tmp(i)
        z(j) = y(j) * tmp(0)
    }"""
    ck = check(src, [(16, 24), (24,)], ANY, atol=1e-3)
    assert not shared(ck)


def test_column_reduction_alone_keeps_isl_schedule():
    src = """def gevm(float(K,N) A, float(K) x) -> (y) {
        y(n) +=! x(k) * A(k, n)
    }"""
    assert not shared(check(src, [(32, 48), (32,)], ANY))


def test_too_large_a_private_copy_is_not_made(monkeypatch):
    monkeypatch.setattr(privatize, "MAX_PRIVATE", 16)
    ck = check(ATAX, [(24, 40), (40,)], ANY, atol=1e-3)
    assert not shared(ck)


def test_explicit_fusion_option_is_kept():
    options = polytc.Options(parallel_min_points=1, fusion="preserve")
    assert not shared(check(ATAX, [(24, 40), (40,)], options, atol=1e-3))


def test_explain_says_one_pass():
    k = polytc.tc(ATAX, options=ANY)
    A = np.ones((16, 24), np.float32)
    text = str(k.explain(A, np.ones(24, np.float32)))
    assert "one pass over 'A'" in text
    assert "private copy of y" in text


@pytest.mark.parametrize("src", [
    """def prod(float(M,N) A, float(N) x) -> (t, y) {
        t(i) +=! A(i, j) * x(j)
        y(j) *=! 1.0 + 0.01 * A(i, j) * t(i)
    }""",
    """def f64(double(M,N) A, double(N) x) -> (y) {
        t(i) +=! A(i, j) * x(j)
        y(j) +=! A(i, j) * t(i)
    }""",
])
def test_product_and_double_reductions(src):
    dtype = np.float64 if "double" in src else np.float32
    ck = check(src, [(24, 36), (36,)], TWO, dtype=dtype, rtol=1e-3, atol=1e-3)
    assert shared(ck)


def test_random_sizes_against_numpy():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    k = polytc.tc(BICG, options=TWO)

    @settings(max_examples=12, deadline=None)
    @given(st.integers(1, 70), st.integers(1, 70), st.integers(0, 2**32 - 1))
    def run(n, m, seed):
        rng = np.random.default_rng(seed)
        A = rng.standard_normal((n, m)).astype(np.float32)
        r = rng.standard_normal(n).astype(np.float32)
        p = rng.standard_normal(m).astype(np.float32)
        s, q = k(A, r, p)
        np.testing.assert_allclose(s, r @ A, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(q, A @ p, rtol=1e-4, atol=1e-4)

    run()


GEMV = """def gemv(float(M,K) A, float(K) x) -> (y) {
    y(m) +=! A(m, k) * x(k)
}"""


@pytest.mark.parametrize("m,k", [(64, 200), (8, 257), (12, 64), (36, 131)])
@pytest.mark.parametrize("options", [ANY, TWO, SCALAR], ids=["default", "two", "scalar"])
def test_gemv_reads_its_long_rows_several_at_a_time(monkeypatch, m, k, options):
    monkeypatch.setattr(privatize, "MIN_ROW", 64)  # (2048 by default)
    ck = check(GEMV, [(m, k), (k,)], options, rtol=1e-4, atol=1e-3)
    assert shared(ck) and f"rows:2:{privatize.ROWS}" in ck.stages["schedule"]
    assert "reduction(+:y" not in ck.stages["c"]  # no private copies: rows only


def test_gemv_rows_only_where_they_pay(monkeypatch):
    monkeypatch.setattr(privatize, "MIN_ROW", 64)
    assert not shared(check(GEMV, [(64, 32), (32,)], ANY))  # short rows
    assert not shared(check(GEMV, [(66, 128), (128,)], ANY))  # no whole tiles of rows
    mm = """def mm(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"""
    assert not shared(check(mm, [(16, 128), (128, 16)], ANY, atol=1e-3))  # a contraction
    k = polytc.tc(GEMV, options=ANY)
    text = str(k.explain(np.ones((16, 128), np.float32), np.ones(128, np.float32)))
    assert f"one pass over 'A', {privatize.ROWS} rows at a time" in text
