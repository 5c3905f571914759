"""The language's contract on every target (docs/language.md, "What a program means"),
against numpy and the reference interpreter: accumulating first writes, ``out=``, TC's
``<=>``, zero sizes, NaN in ``max=``/``min=``.  Every case runs on each target available
here (``c`` always; ``opencl`` with pocl; ``cuda`` with a GPU)."""
from __future__ import annotations

import numpy as np
import pytest

import polytc
from polytc.lang import reference
from polytc.backends import available

from tests.kernels_small import check

from .test_onnx_nn_ops import _model

F32 = np.float32
TARGETS = [t for t in ("c", "opencl", "cuda") if available(t)]


def run(src, *args, target="c", out=None, **kw):
    k = polytc.tc(src, target=target, **kw)
    return k(*args) if out is None else k(*args, out=out)


def dirty_heap(nbytes: int):
    """Leave freed memory full of garbage where numpy allocates next."""
    for _ in range(4):
        a = np.empty(nbytes // 4 + 16, F32)
        a.fill(np.float32(1234.5))
        del a


# --- 1. an accumulating first write starts from the operator's identity --------------------
NUMPY_REDUCE = {"+=": np.sum, "*=": np.prod, "max=": np.max, "min=": np.min}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op", list(NUMPY_REDUCE))
@pytest.mark.parametrize("dtype", ["float", "int32"])
def test_accumulating_first_write_starts_from_the_identity(target, op, dtype):
    src = f"def rs({dtype}(M, N) A) -> (O) {{\n    O(i) {op} A(i, j)\n}}"
    rng = np.random.default_rng(1)
    A = rng.uniform(0.5, 1.5, (37, 9)) if dtype == "float" else rng.integers(-3, 4, (37, 9))
    A = A.astype(F32 if dtype == "float" else np.int32)
    want = NUMPY_REDUCE[op](A, axis=1).astype(A.dtype)  # int32 accumulates in int32
    k = polytc.tc(src, target=target)
    for _ in range(3):  # fresh allocations over garbage, each call
        dirty_heap(A.nbytes)
        got = k(A)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_allclose(reference.run(k.program, [A])["O"], k(A), rtol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_accumulating_temporary_is_refilled_on_every_call(target):
    """Temporaries are scratch buffers reused across calls: the kernel refills them."""
    src = ("def f(float(M, N) A) -> (O) {\n    T(i) max= A(i, j)\n    T(i) max= 0.5\n"
           "    O(i) = T(i) * 2.0\n}")
    k = polytc.tc(src, target=target)
    for scale in (1.0, -1.0, 0.25):  # a stale maximum would survive the next call
        A = (scale * np.arange(12, dtype=F32).reshape(3, 4))
        np.testing.assert_array_equal(k(A), np.maximum(A.max(1), 0.5) * 2)


def test_initial_values_are_a_stage():
    k = polytc.tc("def f(float(M, N) A) -> (O, P) {\n    O(i) min= A(i, j)\n"
                  "    P(i) +=! A(i, j)\n}")
    ck = k.specialize(np.ones((2, 3), F32))
    assert ck.stages["initial_values"] == "O = inf"


@pytest.mark.parametrize("target", TARGETS)
def test_partly_written_output_is_zero_elsewhere(target):
    src = "def f(float(N) A) -> (O) {\n    O(i) = A(i) where i in 2:N\n}"
    got = run(src, np.full(6, 3, F32), target=target)
    np.testing.assert_array_equal(got, [0, 0, 3, 3, 3, 3])


# --- 2. out= arrays are the initial values, on every target ---------------------------------
@pytest.mark.parametrize("target", TARGETS)
def test_out_array_is_accumulated_into(target):
    A = np.arange(15, dtype=F32).reshape(5, 3)
    out = np.full(5, 10, F32)
    got = run("def acc(float(M, N) A) -> (O) {\n    O(i) += A(i, j)\n}", A, target=target,
              out=out)
    assert got is out
    np.testing.assert_array_equal(out, A.sum(1) + 10)
    out = np.full((5, 2), 7, F32)  # written everywhere: its contents do not matter
    run("def f(float(M, N) A) -> (O) {\n    O(i, j) = A(i, j)\n}", A[:, :2].copy(),
        target=target, out=out)
    np.testing.assert_array_equal(out, A[:, :2])


# --- 3. TC's '<=>' annotation ---------------------------------------------------------------
MM_EQ = ("def mm(float(M, K) A, float(K, N) B) -> (C) {\n"
         "    C(m, n) +=! A(m, k) * B(k, n) <=> matmul(A, B)\n}")


def numpy_equivalent(stmt, env: dict):
    """The value of a ``<=> name(args)`` annotation when numpy has ``name`` and every
    argument is a tensor name; else None."""
    import re

    m = re.fullmatch(r"(\w+)\((.*)\)", stmt.equivalent or "")
    if not m or not hasattr(np, m.group(1)):
        return None
    args = [a.strip() for a in m.group(2).split(",")]
    if not all(a in env for a in args):
        return None
    return getattr(np, m.group(1))(*[env[a] for a in args])


@pytest.mark.parametrize("target", TARGETS)
def test_equivalent_annotation_is_kept_and_checked(target):
    k = polytc.tc(MM_EQ, target=target)
    stmt = k.program.statements[0]
    assert stmt.equivalent == "matmul(A, B)"
    assert "<=> matmul(A, B)" in str(k.program)
    assert polytc.tc(str(k.program)).program.statements[0].equivalent == "matmul(A, B)"
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((6, 5)).astype(F32), rng.standard_normal((5, 4)).astype(F32)
    want = numpy_equivalent(stmt, {"A": A, "B": B})
    np.testing.assert_allclose(k(A, B), want, rtol=1e-5, atol=1e-5)


def test_equivalent_annotation_before_where():
    src = ("def f(float(N) A) -> (O) {\n    O(i) = A(i + 1) <=> foo(A, 1) where i in 0:N - 1\n}")
    k = polytc.tc(src)
    assert k.program.statements[0].equivalent == "foo(A, 1)"
    np.testing.assert_array_equal(k(np.arange(4, dtype=F32)), [1, 2, 3])


def test_equivalent_annotation_must_be_a_call():
    src = "def f(float(N) A) -> (O) {\n    O(i) = A(i) <=> 3\n}"
    with pytest.raises(polytc.TCSyntaxError) as e:
        polytc.tc(src)
    assert "expected 'name(arguments)' after '<=>'" in str(e.value)


# --- 4. zero sizes and empty ranges ---------------------------------------------------------
MM = "def mm(float(M, K) A, float(K, N) B) -> (C) {\n    C(m, n) +=! A(m, k) * B(k, n)\n}"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("m,k", [(0, 4), (4, 0), (0, 0)])
def test_zero_sizes_give_numpy_results(target, m, k):
    A, B = np.ones((m, k), F32), np.ones((k, 3), F32)
    got = run(MM, A, B, target=target)
    assert got.shape == (m, 3) and got.dtype == F32
    np.testing.assert_array_equal(got, A @ B)
    red = run("def r(float(M, K) A) -> (O) {\n    O(i) max=! A(i, k)\n}", A, target=target)
    np.testing.assert_array_equal(red, np.full(m, -np.inf, F32))  # the identity


@pytest.mark.parametrize("target", TARGETS)
def test_empty_constant_range_runs_no_iteration(target):
    got = run("def e(float(N) A) -> (O) {\n    O(i) = A(i) where i in 8:4\n}",
              np.ones(10, F32), target=target)
    np.testing.assert_array_equal(got, np.zeros(4, F32))


def test_window_longer_than_the_input_gives_an_empty_output():
    conv = polytc.tc("def conv(float(N) I, float(K) W) -> (O) {\n"
                     "    O(i) +=! I(i + k) * W(k)\n}")
    np.testing.assert_array_equal(conv(np.ones(5, F32), np.ones(3, F32)), [3, 3, 3])
    for n in (2, 1, 0):  # N - K + 1 <= 0 outputs, as numpy.correlate(..., "valid") on N < K
        assert conv(np.ones(n, F32), np.ones(3, F32)).shape == (0,)


def test_contraction_over_an_empty_domain():
    """Sizes of 0 under a contraction with a leading index (found by hypothesis: the
    batch-fusion check read the empty domain's bounds as integers)."""
    src = ("def f(float(1) A, float(M, N, 2) B) -> (float(1, M, N) T0, T1) {\n"
           "    T0(i, j, k) +=! A(i) + B(j, k, l)\n"
           "    T1(i, j) = T0(i, i, j) where j in 0:N\n}")
    for m in (0, 3):
        check(src, [(1,), (m, m, 2)], polytc.Options())  # against the reference


# --- 5. NaN propagates through max= and min= ------------------------------------------------
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op", ["max=!", "min=!", "max=", "min="])
@pytest.mark.parametrize("n", [7, 1000])
def test_nan_propagates_through_extremum_reductions(target, op, n):
    X = np.random.default_rng(n).uniform(-1, 1, (6, n)).astype(F32)
    X[1, 0] = X[2, n // 2] = X[3, n - 1] = np.nan
    X[4, :] = np.nan
    X[5, 1 % n] = np.inf if "max" in op else -np.inf
    src = f"def r(float(M, N) A) -> (O) {{\n    O(i) {op} A(i, j)\n}}"
    got = run(src, X, target=target)
    want = (np.max if "max" in op else np.min)(X, axis=1)
    np.testing.assert_array_equal(got, want)  # NaN == NaN here


def test_nan_flag_keeps_the_reduction_vectorised():
    k = polytc.tc("def r(float(M, N) A) -> (O) {\n    O(i) max=! A(i, j)\n}")
    code = k.specialize(np.ones((64, 1000), F32)).code
    assert "omp simd reduction(max:pt_acc0) reduction(|:pt_nan0)" in code


@pytest.mark.parametrize("stride", [1, 2])
def test_nan_test_stays_off_the_accumulators_chain(stride):
    """A max pooling's NaN test stays off the accumulator's dependence chain (one
    nested ternary on it made 3x3/2 pooling 2.2x slower).  With unit stride the window
    offsets update rows of results (``sink``): a named max, then the NaN select, which
    gcc keeps as one masked vmaxps; strided, each lane of a vector loop accumulates its
    window in a register with a NaN flag beside it (``window``).  A NaN anywhere in a
    window makes its result NaN either way."""
    col = "j" if stride == 1 else f"{stride} * j"
    k = polytc.tc("def p(float(N, H, W) A) -> (O) {\n"
                  f"    O(n, i, j) max=! A(n, i + a, {col} + b)"
                  f" where a in 0:3, b in 0:3, j in 0:(W - 3) / {stride} + 1\n}}")
    a = np.random.default_rng(1).standard_normal((4, 34, 35)).astype(F32)
    a[1, 5, 7] = a[3, 33, 34] = a[0, 10, 20] = a[0, 10, 21] = np.nan
    a[2, 0, :] = -np.inf
    code = k.specialize(a).code
    if stride == 1:
        assert "float _m = _v > " in code and "= _v != _v ? _v : _m;" in code
    else:
        # window points in pairs, one NaN test for both; the ninth alone
        assert "pt_nan0 |= __builtin_isunordered(_v, _w);" in code
        assert "pt_acc0 = _v > pt_acc0 ? _v : pt_acc0; pt_nan0 |= _v != _v;" in code
    win = np.lib.stride_tricks.sliding_window_view(a, (3, 3), axis=(1, 2))
    want = win[:, :, ::stride].max(axis=(3, 4))
    np.testing.assert_array_equal(k(a), want)  # NaN == NaN here


def test_strided_integer_window_max_is_spelt_out():
    """An integer max over a strided window: the vector loop around the spelt-out
    window, each lane's accumulator updated in place (no NaN flag), as numpy."""
    k = polytc.tc("def p(int32(N, H, W) A) -> (O) {\n"
                  "    O(n, i, j) max=! A(n, i + a, 2 * j + b)"
                  " where a in 0:3, b in 0:3, j in 0:(W - 3) / 2 + 1\n}")
    a = np.random.default_rng(2).integers(-100, 100, (3, 20, 41)).astype(np.int32)
    ck = k.specialize(a)
    assert "window " in ck.stages["tiling"] and "reduction(" not in ck.code
    assert "pt_nan0" not in ck.code
    win = np.lib.stride_tricks.sliding_window_view(a, (3, 3), axis=(1, 2))[:, :, ::2]
    np.testing.assert_array_equal(k(a), win.max(axis=(3, 4)))


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin", "ReduceMax", "ReduceMin", "Hardmax"])
def test_onnx_extremum_ops_propagate_nan(op):
    from polytc import onnx as ponnx

    x = np.random.default_rng(0).uniform(-1, 1, (3, 5)).astype(F32)
    x[1, 2] = x[1, 4] = np.nan
    attrs = {"axis": 1} if op in ("ArgMax", "ArgMin", "Hardmax") else {"axes": [1]}
    if op.startswith("Reduce"):  # axes became an input in opset 18
        m, feeds = _model(op, [x, np.array([1], np.int64)], {"keepdims": 0}, consts=(1,))
    else:
        m, feeds = _model(op, [x], dict(attrs, keepdims=0) if op != "Hardmax" else attrs)
    got = ponnx.compile(m).run(None, feeds)[0]
    want = {"ArgMax": lambda: np.argmax(x, 1), "ArgMin": lambda: np.argmin(x, 1),
            "ReduceMax": lambda: np.max(x, 1), "ReduceMin": lambda: np.min(x, 1),
            "Hardmax": lambda: np.eye(5, dtype=F32)[np.argmax(x, 1)]}[op]()
    np.testing.assert_array_equal(got, want)


def test_onnx_maxpool_propagates_nan_with_its_index():
    from polytc import onnx as ponnx

    x = np.random.default_rng(1).uniform(-1, 1, (1, 2, 4, 4)).astype(F32)
    x[0, 1, 2, 1] = np.nan
    m, feeds = _model("MaxPool", [x], {"kernel_shape": [2, 2]}, n_out=2)
    y, ind = ponnx.compile(m).run(None, feeds)
    assert np.isnan(y[0, 1, 1:3, 0:2]).all() and not np.isnan(y[0, 0]).any()
    assert (ind[0, 1, 1:3, 0:2] == 16 + 2 * 4 + 1).all()  # the flat index of the NaN


@pytest.mark.parametrize("shapes", [((2, 0), (0, 3)), ((0, 4), (4, 3))])
def test_onnx_zero_sized_matmul(shapes):
    from polytc import onnx as ponnx

    a, b = (np.ones(s, F32) for s in shapes)
    m, feeds = _model("MatMul", [a, b], {})
    np.testing.assert_array_equal(ponnx.compile(m).run(None, feeds)[0], a @ b)
