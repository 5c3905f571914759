"""16-bit floats in the language: ``float16`` (``half``) and ``bfloat16`` tensors are
stored as 16 bits and computed on in float32 (read widened, stored rounded to nearest
even), on the C target; against the reference interpreter, numpy and ml_dtypes."""
import ml_dtypes
import numpy as np
import pytest

import polytc
from polytc.diagnostics import UnsupportedError
from polytc.lang import reference

BF16 = np.dtype(ml_dtypes.bfloat16)


def _f32(*arrays):
    return [np.asarray(a, np.float32) for a in arrays]


def _check(k, inputs, expected):
    outs = k(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    oracle = reference.run(k.program, inputs)
    for o, t, e in zip(outs, k.program.outputs, expected):
        assert o.dtype == t.dtype.np_dtype == np.asarray(e).dtype, (o.dtype, t.dtype)
        bits = o.view(np.uint16) if o.dtype.itemsize == 2 else o
        for want in (oracle[t.name], np.asarray(e)):
            w = want.view(np.uint16) if want.dtype.itemsize == 2 else want
            np.testing.assert_array_equal(bits, w)


def _values(rng, n, dtype, scale=1.0):
    """Normal values and the edges of 16-bit floats: subnormals, the largest finite,
    values that round to infinity, infinities and NaN."""
    x = (rng.standard_normal(n) * scale).astype(np.float32)
    edges = np.array([0.0, -0.0, 6e-8, -3e-8, 1e-5, 65504, 65519, 65520, 3.3e38, np.inf,
                      -np.inf, np.nan], np.float32)
    with np.errstate(over="ignore"):
        return np.concatenate([x, edges]).astype(dtype)


@pytest.mark.parametrize("dtype,name", [(np.float16, "float16"), (np.float16, "half"),
                                        (BF16, "bfloat16")])
def test_elementwise_reads_widen_and_stores_round(dtype, name):
    k = polytc.tc(f"""
    def f({name}(N) A, float(N) B) -> ({name}(N) O, P, Q) {{
      O(i) = A(i) * B(i) + 1
      P(i) = A(i)
      Q(i) = {name}(B(i) * 3) + A(i)
    }}""")
    rng = np.random.default_rng(1)
    a = _values(rng, 200, dtype, 300.0)
    b = rng.standard_normal(a.size).astype(np.float32)
    af, bf = _f32(a, b)
    with np.errstate(all="ignore"):
        want = ((af * bf + 1).astype(dtype), a, (bf * 3).astype(dtype).astype(np.float32) + af)
    _check(k, [a, b], want)


def test_double_rounds_to_half_through_float():
    """A double stored to a float16 rounds to float first (the C code's conversion)."""
    k = polytc.tc("def f(double(N) A) -> (float16(N) O) { O(i) = A(i) }")
    a = np.array([1 + 2 ** -11 + 2 ** -40, 1 + 2 ** -11, 65519.99999999], np.float64)
    with np.errstate(over="ignore"):
        _check(k, [a], [a.astype(np.float32).astype(np.float16)])


@pytest.mark.parametrize("dtype", [np.float16, BF16])
def test_contraction_and_softmax_accumulate_in_float(dtype):
    name = "float16" if dtype == np.float16 else "bfloat16"
    k = polytc.tc(f"""
    def f({name}(M, K) A, {name}(K, N) B) -> (float(M, N) C, {name}(M, K) S) {{
      C(m, n) +=! A(m, k) * B(k, n)
      mx(m) max=! A(m, k)
      e(m, k) = exp(A(m, k) - mx(m))
      s(m) +=! e(m, k)
      S(m, k) = e(m, k) / s(m)
    }}""")
    rng = np.random.default_rng(2)
    a = rng.standard_normal((37, 70)).astype(dtype)
    b = rng.standard_normal((70, 45)).astype(dtype)
    c, s = k(a, b)
    af, bf = _f32(a, b)
    np.testing.assert_allclose(c, af @ bf, rtol=1e-5, atol=1e-4)
    e = np.exp(af - af.max(1, keepdims=True))
    np.testing.assert_allclose(s.astype(np.float32), e / e.sum(1, keepdims=True),
                               rtol=1e-2 if dtype == BF16 else 1e-3, atol=1e-3)
    oracle = reference.run(k.program, [a, b])
    np.testing.assert_allclose(c, oracle["C"], rtol=1e-5, atol=1e-4)


def test_a_reduction_of_half_values_into_a_temporary_is_float():
    k = polytc.tc("def f(float16(N, K) A) -> (O) {\n  s(i) +=! A(i, k)\n  O(i) = s(i)\n}")
    assert {t.name: t.dtype.name for t in k.program.tensors}["s"] == "float"
    a = np.full((3, 4000), 0.1, np.float16)
    np.testing.assert_allclose(k(a), a.astype(np.float32).sum(1), rtol=1e-5)


def test_gpu_targets_refuse_half_tensors():
    from polytc.compiler import pipeline
    from polytc.runtime.cuda import default_device

    k = polytc.tc("def f(float16(N) A) -> (O) { O(i) = A(i) * 2 }")
    with pytest.raises(UnsupportedError) as e:
        pipeline.run(k.program, {"N": 8}, polytc.Options(), "cuda", default_device())
    assert "'A' is float16: 16-bit float tensors run on the C target only" in str(e.value)


def test_wrong_dtype_is_named():
    k = polytc.tc("def f(bfloat16(N) A) -> (O) { O(i) = A(i) * 2 }")
    with pytest.raises(Exception) as e:
        k(np.ones(4, np.float16))
    assert "bfloat16" in str(e.value)
