"""Loops calling ``exp`` in explicit vectors with the exponential inlined
(``codegen_c/vloop.py``): results equal the oracle, with a remainder, unaligned and
strided inputs, and the form applies only where it may."""
from __future__ import annotations

import numpy as np
import pytest

import polytc
from polytc.machine import host
from tests.kernels_small import SOFTMAX, check

SIGMOID = """def sig(float(N,D) X, float(D) b) -> (Y) {
    Y(n, d) = 1.0 / (1.0 + exp(-(X(n, d) + b(d))))
}"""
AVX512 = host().lanes(4) == 16
ANY = polytc.Options(parallel_min_points=1)


def vectorised(ck) -> bool:
    return "#ifdef PT_EXPV16" in ck.stages["c"]


@pytest.mark.parametrize("n,d", [(7, 1024), (5, 1000), (3, 17), (4, 15), (2, 64)])
@pytest.mark.parametrize("src", [SOFTMAX, SIGMOID], ids=["softmax", "sigmoid"])
def test_results_and_form(src, n, d):
    shapes = [(n, d)] if src is SOFTMAX else [(n, d), (d,)]
    ck = check(src, shapes, ANY, rtol=2e-6, atol=1e-6)
    assert vectorised(ck) == (AVX512 and d >= 16)


def test_unaligned_and_strided_input():
    k = polytc.tc(SOFTMAX, options=ANY)
    rng = np.random.default_rng(2)
    big = rng.standard_normal((40, 300)).astype(np.float32) * 5
    X = big[3:35, 1:297:3]  # 32 x 99, neither contiguous nor aligned
    e = np.exp(X - X.max(1, keepdims=True))
    np.testing.assert_allclose(k(X), e / e.sum(1, keepdims=True), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("src", [
    # exp of a value the loop does not move, a select, a strided read: plain loops
    "def f(float(N,D) X, float(N) c) -> (Y) { Y(n, d) = X(n, d) * exp(c(n)) }",
    "def f(float(N,D) X) -> (Y) { Y(n, d) = X(n, d) > 0.0 ? exp(X(n, d)) : 0.0 }",
    "def f(float(D,N) X) -> (Y) { Y(n, d) = exp(X(d, n)) }",
])
def test_not_applied(src):
    ck = check(src, [(24, 40), (24,)] if "c(n)" in src else [(40, 40)], ANY)
    assert not vectorised(ck)


def test_nan_and_infinities_pass_through():
    k = polytc.tc("def f(float(N,D) X) -> (Y) { Y(n, d) = exp(X(n, d)) }", options=ANY)
    X = np.zeros((2, 32), np.float32)
    X[0, :4] = [np.nan, np.inf, -np.inf, 100.0]
    X[1, :3] = [-100.0, 88.0, -87.0]
    with np.errstate(over="ignore"):
        np.testing.assert_allclose(k(X), np.exp(X), rtol=2e-6)


@pytest.mark.parametrize("k,width", [(2, 56), (3, 20), (2, 7)])
def test_a_read_through_a_divided_index_runs_in_phases(k, width):
    """Nearest upsampling, ``Y(j) = X(j / k)``: the vector loop runs over ``j / k`` with
    the ``k`` phases spelt out (unit-stride reads, not gathers) when it covers whole
    phases; an odd number of columns keeps the plain loop.  Both give numpy's result."""
    odd = int(width % 2 == 1)  # one column short of whole phases
    src = f"""def up(float(C, H, W) X) -> (Y) {{
        Y(c, i, j) = X(c, i / {k}, j / {k}) where c in 0:C, i in 0:{k}*H, j in 0:{k}*W - {odd}
    }}"""
    kern = polytc.tc(src)
    X = np.random.default_rng(k).normal(size=(3, 5, width)).astype(np.float32)
    want = np.repeat(np.repeat(X, k, 1), k, 2)[:, :, :k * width - odd]
    np.testing.assert_array_equal(kern(X), want)
    phased = "pt_u" in kern.specialize(X).code
    assert phased == (width % 2 == 0)
