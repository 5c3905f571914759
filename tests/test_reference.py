"""The numpy reference interpreter (the oracle), on hand-built programs."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polytc.diagnostics import KernelRuntimeError, Source, Span
from polytc.lang import program as P
from polytc.lang import reference
from polytc.lang import sizes as S
from polytc.lang.types import BOOL, FLOAT32, FLOAT64, INT8, INT32, INT64, UINT8


# --- builders ----------------------------------------------------------------------------
def dims(*ds):
    return tuple(S.name(d) if isinstance(d, str) else S.const(d) for d in ds)


def T(name, dtype, *shape, role="input"):
    return P.TensorInfo(name, dtype, dims(*shape), role)


def rng(var, lo, hi):
    def conv(x):
        if isinstance(x, int):
            return S.const(x)
        if isinstance(x, str):
            return S.name(x)
        return x

    return P.Range(var, conv(lo), conv(hi))


def I(name):  # noqa: E743
    return P.Index(name)


def C(value, dtype):
    return P.Const(value, dtype)


def R(tensor, dtype, *indices):
    return P.Read(tensor, tuple(indices), dtype)


def B(op, lhs, rhs, dtype=None):
    if dtype is None:
        dtype = BOOL if op in P.COMPARE_OPS + P.LOGIC_OPS else lhs.dtype
    return P.Bin(op, lhs, rhs, dtype)


def stmt(tensor, indices, op, init, rhs, ranges, red=()):
    return P.Stmt(tensor, tuple(indices), op, init, rhs, tuple(ranges), tuple(red))


def prog(inputs, outputs, statements, temps=()):
    size_names = []
    for t in inputs:
        for d in t.shape:
            for n, _ in d.terms:
                if n not in size_names:
                    size_names.append(n)
    return P.Program("f", tuple(inputs), tuple(outputs), tuple(temps), tuple(size_names),
                     tuple(statements))


def elementwise(rhs, out_dtype, *inputs, n="N"):
    """O(i) = rhs where i in 0:N, inputs all 1-d of size N."""
    return prog(inputs, [T("O", out_dtype, n, role="output")],
                [stmt("O", ["i"], None, False, rhs, [rng("i", 0, n)])])


def run1(p, *arrays, **kw):
    return reference.run(p, list(arrays), **kw)["O"]


# --- reductions --------------------------------------------------------------------------
def test_matmul():
    p = prog([T("A", FLOAT32, "M", "K"), T("B", FLOAT32, "K", "N")],
             [T("C", FLOAT32, "M", "N", role="output")],
             [stmt("C", ["m", "n"], "+", True,
                   B("*", R("A", FLOAT32, I("m"), I("k")), R("B", FLOAT32, I("k"), I("n"))),
                   [rng("m", 0, "M"), rng("n", 0, "N"), rng("k", 0, "K")], red=["k"])])
    r = np.random.default_rng(0)
    a = r.standard_normal((64, 48)).astype(np.float32)
    b = r.standard_normal((48, 40)).astype(np.float32)
    out = reference.run(p, [a, b])
    assert out["C"].dtype == np.float32 and out["C"].shape == (64, 40)
    np.testing.assert_allclose(out["C"], a @ b, rtol=1e-4, atol=1e-4)


def test_matmul_64_cubed_is_fast():
    import time

    p = prog([T("A", FLOAT32, "N", "N"), T("B", FLOAT32, "N", "N")],
             [T("C", FLOAT32, "N", "N", role="output")],
             [stmt("C", ["m", "n"], "+", True,
                   B("*", R("A", FLOAT32, I("m"), I("k")), R("B", FLOAT32, I("k"), I("n"))),
                   [rng("m", 0, "N"), rng("n", 0, "N"), rng("k", 0, "N")], red=["k"])])
    a = np.ones((64, 64), np.float32)
    t = time.perf_counter()
    out = reference.run(p, [a, a])
    assert time.perf_counter() - t < 2.0
    assert (out["C"] == 64).all()


def _max_program(dtype, init=True):
    return prog([T("X", dtype, "N", "M")], [T("O", dtype, "N", role="output")],
                [stmt("O", ["i"], "max", init, R("X", dtype, I("i"), I("j")),
                      [rng("i", 0, "N"), rng("j", 0, "M")], red=["j"])])


def test_max_reduction_with_init():
    x = np.array([[-5, -3, -9], [1, 7, 2]], np.int32)
    np.testing.assert_array_equal(run1(_max_program(INT32), x), [-3, 7])
    xf = -np.abs(np.random.default_rng(1).standard_normal((5, 7))).astype(np.float32)
    np.testing.assert_array_equal(run1(_max_program(FLOAT32), xf), xf.max(1))


def test_max_without_init_starts_from_the_identity():
    x = np.array([[-5, -3, -9], [1, 7, 2]], np.int32)
    np.testing.assert_array_equal(run1(_max_program(INT32, init=False), x), [-3, 7])
    o = np.array([0, 0], np.int32)  # an out= array is the initial value
    np.testing.assert_array_equal(run1(_max_program(INT32, init=False), x, outputs={"O": o}),
                                  [0, 7])


def test_min_max_nan_propagates():
    # acc = (v > acc || v != v) ? v : acc: a NaN value is taken, a NaN accumulator stays
    x = np.array([[np.nan, 1.0, 3.0], [2.0, np.nan, 1.0], [1.0, 2.0, 0.5]], np.float32)
    np.testing.assert_array_equal(run1(_max_program(FLOAT32), x), [np.nan, np.nan, 2.0])
    o = np.array([np.nan, 0.0, np.nan], np.float32)
    got = run1(_max_program(FLOAT32, init=False), x, outputs={"O": o})
    np.testing.assert_array_equal(got, [np.nan, np.nan, np.nan])
    # of equal values the first stays: max=! over (-0.0, +0.0) is -0.0
    z = np.array([[-0.0, 0.0]], np.float32)
    assert math.copysign(1, run1(_max_program(FLOAT32), z)[0]) == -1


def test_plus_equal_without_init_accumulates_into_given_output():
    p = prog([T("X", FLOAT64, "N", "M")], [T("O", FLOAT64, "N", role="output")],
             [stmt("O", ["i"], "+", False, R("X", FLOAT64, I("i"), I("j")),
                   [rng("i", 0, "N"), rng("j", 0, "M")], red=["j"])])
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    o = np.full(3, 10.0)
    res = reference.run(p, [x], outputs={"O": o})
    assert res["O"] is o
    np.testing.assert_array_equal(o, 10 + x.sum(1))
    # a non-contiguous given output is written back too
    big = np.zeros(6)
    res = reference.run(p, [x], outputs={"O": big[::2]})
    np.testing.assert_array_equal(big[::2], x.sum(1))


def test_float32_accumulates_in_float32_in_order():
    # 2^24 + 1 + 1 + ... stays 2^24 in float32
    p = prog([T("X", FLOAT32, "N")], [T("O", FLOAT32, role="output")],
             [stmt("O", [], "+", True, R("X", FLOAT32, I("i")), [rng("i", 0, "N")],
                   red=["i"])])
    x = np.array([2.0 ** 24] + [1.0] * 8, np.float32)
    assert reference.run(p, [x])["O"] == np.float32(2.0 ** 24)


def test_triangular_range():
    # O(i) +=! X(i, j) where j in 0:i+1 ; P(i) +=! X(i, j) where j in 0:i (empty for i=0)
    def p(hi):
        return prog([T("X", INT64, "N", "N")], [T("O", INT64, "N", role="output")],
                    [stmt("O", ["i"], "+", True, R("X", INT64, I("i"), I("j")),
                          [rng("i", 0, "N"), P.Range("j", S.const(0), hi)], red=["j"])])

    x = np.arange(1, 50, dtype=np.int64).reshape(7, 7)
    np.testing.assert_array_equal(run1(p(S.add(S.name("i"), S.const(1))), x),
                                  np.tril(x).sum(1))
    o = np.full(7, 99, np.int64)
    got = run1(p(S.name("i")), x, outputs={"O": o})
    np.testing.assert_array_equal(got, np.tril(x, -1).sum(1))
    assert got[0] == 0  # the init covers the left-hand range, also with no reduction


def test_domain_chunks_keep_order():
    ranges = [rng("i", 0, 5), P.Range("j", S.const(0), S.add(S.name("i"), S.const(1))),
              rng("k", 0, 3)]
    whole = list(reference.domain(ranges, {}, chunk=1 << 20))
    assert len(whole) == 1
    pts = [tuple(int(pt[v][q]) for v in "ijk") for pt, n in whole for q in range(n)]
    expect = [(i, j, k) for i in range(5) for j in range(i + 1) for k in range(3)]
    assert pts == expect
    chunks = list(reference.domain(ranges, {}, chunk=4))
    assert len(chunks) > 1
    assert [tuple(int(pt[v][q]) for v in "ijk") for pt, n in chunks for q in range(n)] \
        == expect


def test_assignment_with_duplicates_last_point_wins():
    p = prog([T("X", INT32, "N", "M")], [T("O", INT32, "N", role="output")],
             [stmt("O", ["i"], None, False, R("X", INT32, I("i"), I("j")),
                   [rng("i", 0, "N"), rng("j", 0, "M")], red=["j"])])
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    np.testing.assert_array_equal(run1(p, x), x[:, -1])


# --- sequential semantics ----------------------------------------------------------------
def test_prefix_sum_is_sequential():
    # A(i) = X(i) where i in 0:1 ; A(i) = A(i-1) + X(i) where i in 1:N
    prev = B("-", I("i"), C(1, INT32))
    p = prog([T("X", INT32, "N")], [T("A", INT32, "N", role="output")],
             [stmt("A", ["i"], None, False, R("X", INT32, I("i")), [rng("i", 0, 1)]),
              stmt("A", ["i"], None, False,
                   B("+", R("A", INT32, prev), R("X", INT32, I("i"))), [rng("i", 1, "N")])])
    x = np.arange(1, 40, dtype=np.int32)
    np.testing.assert_array_equal(reference.run(p, [x])["A"], np.cumsum(x))


def test_reduction_reading_its_output_is_sequential():
    # O(i) += O(i) where j in 0:3: doubles three times
    p = prog([T("X", INT32, "N")], [T("O", INT32, "N", role="output")],
             [stmt("O", ["i"], None, False, R("X", INT32, I("i")), [rng("i", 0, "N")]),
              stmt("O", ["i"], "+", False, R("O", INT32, I("i")),
                   [rng("i", 0, "N"), rng("j", 0, 3)], red=["j"])])
    assert reference.needs_sequential(p.statements[1])
    x = np.array([1, 2, 3], np.int32)
    np.testing.assert_array_equal(reference.run(p, [x])["O"], x * 8)


def test_elementwise_self_read_is_vectorised():
    p = prog([T("X", INT32, "N")], [T("O", INT32, "N", role="output")],
             [stmt("O", ["i"], None, False,
                   B("*", R("O", INT32, I("i")), R("X", INT32, I("i"))), [rng("i", 0, "N")])])
    assert not reference.needs_sequential(p.statements[0])
    o = np.array([1, 2, 3], np.int32)
    run1(p, np.array([4, 5, 6], np.int32), outputs={"O": o})
    np.testing.assert_array_equal(o, [4, 10, 18])


def test_temporaries_are_returned():
    p = prog([T("X", FLOAT32, "N")], [T("O", FLOAT32, "N", role="output")],
             [stmt("Tmp", ["i"], None, False, B("*", R("X", FLOAT32, I("i")),
                                                 C(2.0, FLOAT32)), [rng("i", 0, "N")]),
              stmt("O", ["i"], None, False, B("+", R("Tmp", FLOAT32, I("i")),
                                               C(1.0, FLOAT32)), [rng("i", 0, "N")])],
             temps=[T("Tmp", FLOAT32, "N", role="temp")])
    out = reference.run(p, [np.arange(3, dtype=np.float32)])
    np.testing.assert_array_equal(out["Tmp"], [0, 2, 4])
    np.testing.assert_array_equal(out["O"], [1, 3, 5])


# --- integer arithmetic ------------------------------------------------------------------
def test_int8_wraps():
    a = np.array([100, -100, 127, 16], np.int8)
    b = np.array([100, -100, 1, 16], np.int8)
    for op, expect in (("+", [-56, 56, -128, 32]), ("*", [16, 16, 127, 0]),
                       ("-", [0, 0, 126, 0])):
        p = elementwise(B(op, R("A", INT8, I("i")), R("B", INT8, I("i"))), INT8,
                        T("A", INT8, "N"), T("B", INT8, "N"))
        got = run1(p, a, b)
        assert got.dtype == np.int8
        np.testing.assert_array_equal(got, expect, err_msg=op)
    # every node wraps: (100 + 100) / 2 in int8 is -28, not 100
    p = elementwise(B("/", B("+", R("A", INT8, I("i")), R("B", INT8, I("i"))),
                      C(2, INT8)), INT8, T("A", INT8, "N"), T("B", INT8, "N"))
    assert run1(p, a, b)[0] == -28


def _divmod_program(dtype):
    a, b = R("A", dtype, I("i")), R("B", dtype, I("i"))
    return prog([T("A", dtype, "N"), T("B", dtype, "N")],
                [T("Q", dtype, "N", role="output"), T("R", dtype, "N", role="output")],
                [stmt("Q", ["i"], None, False, B("/", a, b), [rng("i", 0, "N")]),
                 stmt("R", ["i"], None, False, B("%", a, b), [rng("i", 0, "N")])])


def test_c_integer_division_and_remainder():
    a = np.array([-7, 7, -7, 7, 0, -1], np.int32)
    b = np.array([2, 2, -2, -2, 3, 5], np.int32)
    out = reference.run(_divmod_program(INT32), [a, b])
    np.testing.assert_array_equal(out["Q"], [-3, 3, 3, -3, 0, 0])
    np.testing.assert_array_equal(out["R"], [-1, 1, -1, 1, 0, -1])
    # MIN / -1 wraps, MIN % -1 is 0
    out = reference.run(_divmod_program(INT8), [np.array([-128], np.int8),
                                                np.array([-1], np.int8)])
    assert out["Q"][0] == -128 and out["R"][0] == 0
    out = reference.run(_divmod_program(UINT8), [np.array([250], np.uint8),
                                                 np.array([7], np.uint8)])
    assert out["Q"][0] == 35 and out["R"][0] == 5


def _c_div(a, b):
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-2 ** 63, 2 ** 63 - 1),
                          st.integers(-2 ** 63, 2 ** 63 - 1).filter(lambda v: v != 0)),
                min_size=1, max_size=8))
def test_int64_divmod_matches_c(pairs):
    pairs = [(x, y) for x, y in pairs if not (x == -2 ** 63 and y == -1)]
    if not pairs:
        return
    a = np.array([x for x, _ in pairs], np.int64)
    b = np.array([y for _, y in pairs], np.int64)
    out = reference.run(_divmod_program(INT64), [a, b])
    for k, (x, y) in enumerate(pairs):
        q = _c_div(x, y)
        assert out["Q"][k] == q and out["R"][k] == x - q * y


def test_integer_division_by_zero_raises():
    src = Source("O(i) = A(i) / B(i)", "t.tc")
    span = Span(src, 7, 18)
    p = elementwise(P.Bin("/", R("A", INT32, I("i")), R("B", INT32, I("i")), INT32, span),
                    INT32, T("A", INT32, "N"), T("B", INT32, "N"))
    with pytest.raises(KernelRuntimeError, match="integer division by zero") as e:
        run1(p, np.array([1, 2], np.int32), np.array([1, 0], np.int32))
    assert "t.tc:1:8" in str(e.value)
    for op in ("%",):
        p = elementwise(B(op, R("A", INT32, I("i")), R("B", INT32, I("i"))), INT32,
                        T("A", INT32, "N"), T("B", INT32, "N"))
        with pytest.raises(KernelRuntimeError):
            run1(p, np.array([1, 2], np.int32), np.array([1, 0], np.int32))
    # floats divide by zero to inf, no error
    p = elementwise(B("/", R("A", FLOAT32, I("i")), C(0.0, FLOAT32)), FLOAT32,
                    T("A", FLOAT32, "N"))
    assert np.isinf(run1(p, np.array([1.0], np.float32))[0])


def test_guarded_division_does_not_raise():
    a, b = R("A", INT32, I("i")), R("B", INT32, I("i"))
    p = elementwise(P.Select(B("!=", b, C(0, INT32)), B("/", a, b), C(-1, INT32)), INT32,
                    T("A", INT32, "N"), T("B", INT32, "N"))
    got = run1(p, np.array([6, 6, -6], np.int32), np.array([3, 0, 4], np.int32))
    np.testing.assert_array_equal(got, [2, -1, -1])


def test_float_remainder_is_fmod():
    p = elementwise(B("%", R("A", FLOAT64, I("i")), C(2.0, FLOAT64)), FLOAT64,
                    T("A", FLOAT64, "N"))
    np.testing.assert_array_equal(run1(p, np.array([-7.5, 7.5])), [-1.5, 1.5])


# --- reads -------------------------------------------------------------------------------
def _gather(guard=None):
    idx = R("IDX", INT32, I("i"))
    read = R("X", FLOAT32, idx)
    rhs = read if guard is None else P.Select(guard(idx), read, C(-1.0, FLOAT32))
    return prog([T("X", FLOAT32, "M"), T("IDX", INT32, "N")],
                [T("O", FLOAT32, "N", role="output")],
                [stmt("O", ["i"], None, False, rhs, [rng("i", 0, "N")])])


def test_indirect_read():
    x = np.arange(5, dtype=np.float32) * 10
    np.testing.assert_array_equal(run1(_gather(), x, np.array([4, 0, 2], np.int32)),
                                  [40, 0, 20])


@pytest.mark.parametrize("bad", [5, -1])
def test_out_of_bounds_indirect_read_raises(bad):
    x = np.arange(5, dtype=np.float32)
    with pytest.raises(KernelRuntimeError, match="index out of bounds reading X"):
        run1(_gather(), x, np.array([0, bad, 1], np.int32))


def test_guarded_ternary_out_of_bounds_branch_not_taken():
    x = np.arange(5, dtype=np.float32) * 10
    ix = np.array([4, 7, -3, 1], np.int32)
    guard = lambda idx: B("&&", B(">=", idx, C(0, INT32)),  # noqa: E731
                          B("<", idx, P.Size("M")))
    np.testing.assert_array_equal(run1(_gather(guard), x, ix), [40, -1, -1, 10])


def test_logical_operators_are_lazy():
    # O(i) = (IDX(i) < M && X(IDX(i)) > 15) ? 1 : 0 ; || likewise
    idx = R("IDX", INT32, I("i"))
    big = B(">", R("X", FLOAT32, idx), C(15.0, FLOAT32))
    x = np.arange(5, dtype=np.float32) * 10
    ix = np.array([4, 9, 1], np.int32)
    for op, cond, expect in (("&&", B("<", idx, P.Size("M")), [1, 0, 0]),
                             ("||", B(">=", idx, P.Size("M")), [1, 1, 0])):
        p = prog([T("X", FLOAT32, "M"), T("IDX", INT32, "N")],
                 [T("O", INT32, "N", role="output")],
                 [stmt("O", ["i"], None, False,
                       P.Select(B(op, cond, big), C(1, INT32), C(0, INT32)),
                       [rng("i", 0, "N")])])
        np.testing.assert_array_equal(run1(p, x, ix), expect, err_msg=op)


def test_zero_dim_input_and_output():
    # s +=! X(i) ; O(i) = X(i) * k()
    p = prog([T("X", FLOAT64, "N"), T("k", FLOAT64)],
             [T("s", FLOAT64, role="output"), T("O", FLOAT64, "N", role="output")],
             [stmt("s", [], "+", True, R("X", FLOAT64, I("i")), [rng("i", 0, "N")],
                   red=["i"]),
              stmt("O", ["i"], None, False, B("*", R("X", FLOAT64, I("i")),
                                              R("k", FLOAT64)), [rng("i", 0, "N")])])
    x = np.arange(5, dtype=np.float64)
    out = reference.run(p, [x, np.array(3.0)])
    assert out["s"].shape == () and out["s"] == 10.0
    np.testing.assert_array_equal(out["O"], x * 3)
    # a 0-d statement with no ranges at all
    p = prog([T("k", FLOAT64)], [T("s", FLOAT64, role="output")],
             [stmt("s", [], None, False, R("k", FLOAT64), [])])
    assert reference.run(p, [np.array(2.5)])["s"] == 2.5


def test_index_and_size_values():
    # O(i) = i * 10 + N
    p = elementwise(B("+", B("*", I("i"), C(10, INT32)), P.Size("N")), INT32,
                    T("X", INT32, "N"))
    np.testing.assert_array_equal(run1(p, np.zeros(3, np.int32)), [3, 13, 23])


# --- conversions and functions -----------------------------------------------------------
def test_casts():
    x = np.array([-2.7, 2.7, -0.5, 0.0, 0.25], np.float32)
    p = elementwise(P.Convert(R("X", FLOAT32, I("i")), INT32), INT32, T("X", FLOAT32, "N"))
    np.testing.assert_array_equal(run1(p, x), [-2, 2, 0, 0, 0])
    p = elementwise(P.Convert(R("X", FLOAT32, I("i")), BOOL), BOOL, T("X", FLOAT32, "N"))
    np.testing.assert_array_equal(run1(p, x), [True, True, True, False, True])
    p = elementwise(P.Convert(P.Convert(R("X", FLOAT32, I("i")), BOOL), FLOAT32), FLOAT32,
                    T("X", FLOAT32, "N"))
    np.testing.assert_array_equal(run1(p, x), [1, 1, 1, 0, 1])
    p = elementwise(P.Convert(R("X", INT32, I("i")), INT8), INT8, T("X", INT32, "N"))
    np.testing.assert_array_equal(run1(p, np.array([300, -129], np.int32)), [44, 127])


def _fn(func, dtype, *args):
    return P.Apply(func, tuple(args), dtype)


def test_round_half_away_from_zero():
    vals = [0.5, 1.5, 2.5, -0.5, -2.5, 0.49999999999999994, -0.3, 3.7, np.inf]
    for dt, st_ in ((np.float64, FLOAT64), (np.float32, FLOAT32)):
        p = elementwise(_fn("round", st_, R("X", st_, I("i"))), st_, T("X", st_, "N"))
        x = np.array(vals, dt)
        got = run1(p, x)
        assert got.dtype == dt
        expect = [1, 2, 3, -1, -3, 0 if dt == np.float64 else 1, -0.0, 4, np.inf]
        np.testing.assert_array_equal(got, np.array(expect, dt))
        assert math.copysign(1, got[6]) == -1


def test_math_functions_keep_float32():
    x = np.array([0.25, 0.5, 1.0, 2.0], np.float32)
    for func, ref in (("exp", np.exp), ("sqrt", np.sqrt), ("tanh", np.tanh),
                      ("rsqrt", lambda v: 1 / np.sqrt(v)), ("log", np.log),
                      ("erf", np.vectorize(math.erf)), ("lgamma", np.vectorize(math.lgamma)),
                      ("tgamma", np.vectorize(math.gamma))):
        p = elementwise(_fn(func, FLOAT32, R("X", FLOAT32, I("i"))), FLOAT32,
                        T("X", FLOAT32, "N"))
        got = run1(p, x)
        assert got.dtype == np.float32, func
        np.testing.assert_allclose(got, ref(x.astype(np.float64)), rtol=1e-6, err_msg=func)


def test_binary_functions():
    a = np.array([1.0, np.nan, -0.0, 5.0, 3.0])
    b = np.array([np.nan, 2.0, 0.0, 2.0, 2.0])

    def f(func):
        p = elementwise(_fn(func, FLOAT64, R("A", FLOAT64, I("i")), R("B", FLOAT64, I("i"))),
                        FLOAT64, T("A", FLOAT64, "N"), T("B", FLOAT64, "N"))
        return run1(p, a, b)

    np.testing.assert_array_equal(f("fmax"), [1, 2, 0, 5, 3])
    # min(a, b) = a < b ? a : b
    np.testing.assert_array_equal(f("min"), [np.nan, 2, 0, 2, 2])
    np.testing.assert_array_equal(f("max"), [np.nan, 2, 0, 5, 3])
    np.testing.assert_array_equal(f("remainder")[3:], [1.0, -1.0])  # 2.5 and 1.5 to even
    np.testing.assert_array_equal(f("fdim")[3:], [3.0, 1.0])
    np.testing.assert_array_equal(f("fmod")[3:], [1.0, 1.0])


def test_fma_is_fused():
    # a*b+c with a*b exact only in more than 53 bits
    e = 2.0 ** -30
    p = elementwise(_fn("fma", FLOAT64, R("A", FLOAT64, I("i")), R("A", FLOAT64, I("i")),
                        C(-1.0, FLOAT64)), FLOAT64, T("A", FLOAT64, "N"))
    # (1 + e)^2 - 1 = 2e + e^2 exactly; unfused, e^2 is lost in the product
    assert (1 + e) * (1 + e) - 1 == 2 * e
    assert run1(p, np.array([1 + e]))[0] == 2 * e + e * e
    q = elementwise(_fn("fma", FLOAT32, R("A", FLOAT32, I("i")), R("B", FLOAT32, I("i")),
                        C(-1.0, FLOAT32)), FLOAT32, T("A", FLOAT32, "N"),
                    T("B", FLOAT32, "N"))
    e32 = np.float32(2.0 ** -13)
    got = run1(q, np.array([1 + e32], np.float32), np.array([1 - e32], np.float32))
    assert got[0] == np.float32(-(2.0 ** -26))


def test_unknown_function_is_not_implemented():
    p = elementwise(_fn("bessel_j0", FLOAT32, R("X", FLOAT32, I("i"))), FLOAT32,
                    T("X", FLOAT32, "N"))
    with pytest.raises(NotImplementedError, match="bessel_j0"):
        run1(p, np.ones(2, np.float32))
