"""polytc's vector expf (codegen_c/vmath.py): within 2 ulp of the exact value, the
special values as libm's, also under a condition and in loops of every vector width."""
import numpy as np

import polytc

EXP = "def e(float(N) X) -> (Y) { Y(i) = exp(X(i)) }"
ELU = "def elu(float(N) X) -> (Y) { Y(i) = X(i) > 0 ? X(i) : exp(X(i)) - 1 }"
ROWS = "def r(float(M,N) X) -> (Y) { Y(i, j) = exp(X(i, j)) }"


def _exact(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.exp(x.astype(np.float64)).astype(np.float32)


def test_exp_within_two_ulp_over_the_range():
    rng = np.random.default_rng(0)
    x = np.concatenate([
        rng.uniform(-104, 89, 200_000), rng.uniform(-1, 1, 20_000),
        np.linspace(-88, -80, 4001), np.linspace(80, 88.7, 4001)]).astype(np.float32)
    got = polytc.tc(EXP)(x)
    want = _exact(x)
    normal = np.abs(want) >= np.finfo(np.float32).tiny
    np.testing.assert_array_max_ulp(got[normal], want[normal], maxulp=2)
    # subnormal results: within one subnormal step
    assert np.max(np.abs(got[~normal].astype(np.float64) - want[~normal])) <= 1.5e-45


def test_exp_special_values():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 88.72, 88.73, 1e30, -1e30, -87.0,
                  -100.0, -103.9, -104.5, 1e-10, -1e-10, 0.5] * 4, np.float32)
    got = polytc.tc(EXP)(x)
    want = _exact(x)
    assert np.isnan(got[0]) and np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_max_ulp(got[ok], want[ok], maxulp=2)


def test_exp_under_a_condition_and_odd_lengths():
    rng = np.random.default_rng(1)
    for n in (1, 3, 7, 15, 17, 33, 100, 1000):
        x = rng.uniform(-20, 20, n).astype(np.float32)
        np.testing.assert_allclose(polytc.tc(ELU)(x), np.where(x > 0, x, np.expm1(x)),
                                   rtol=1e-5, atol=1e-6)
    x = rng.uniform(-20, 20, (7, 5)).astype(np.float32)  # a short nest (narrow vectors)
    np.testing.assert_array_max_ulp(polytc.tc(ROWS)(x), _exact(x), maxulp=2)


def test_only_kernels_calling_exp_define_it():
    x = np.ones(64, np.float32)
    assert "_ZGVeN16v_expf" in polytc.tc(EXP).specialize(x).code
    add = polytc.tc("def a(float(N) X) -> (Y) { Y(i) = X(i) + 1 }")
    assert "_ZGVeN16v_expf" not in add.specialize(x).code


def test_explain_says_which_expf():
    from polytc.machine import host

    text = str(polytc.tc(EXP).explain(np.ones(64, np.float32), vectorizer=False))
    assert ("polytc's vector expf" in text) == (host().lanes(4) >= 16)
