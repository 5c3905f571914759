"""Inits and epilogues folded into a contraction's register tiles (``tiling/fold.py``):
results equal the oracle, folding happens where it is legal and not where it is not."""
from __future__ import annotations

import numpy as np
import pytest

import polytc
from polytc.lang import reference
from tests.kernels_small import check

SMALL = polytc.Options(tile=(12, 32, 8), register_tile=(3, 16), parallel_min_points=1)
OPTIONS = [SMALL, polytc.Options(), polytc.Options(vectorize=False)]
IDS = ["small-tiles", "model", "scalar"]

MLP = """def layer(float(B,I) X, float(I,O) W, float(O) b) -> (Y) {
    T(m, o) +=! X(m, i) * W(i, o)
    Y(m, o) = fmax(T(m, o) + b(o), 0.0)
}"""
IN_PLACE = """def mm2(float beta, float(M,K) A, float(K,N) B, float(M,N) D) -> (O) {
    O(m, n) +=! A(m, k) * B(k, n)
    O(m, n) = O(m, n) + beta * D(m, n)
}"""
TRANSPOSED = """def mmt(float(M,K) A, float(K,N) B) -> (O) {
    T(m, n) +=! A(m, k) * B(k, n)
    O(n, m) = T(m, n) * 2.0
}"""
CONV = """def conv(float(N,C,H,W) I, float(F,C,KH,KW) Wt, float(F) b) -> (O) {
    T(n, f, h, w) +=! I(n, c, h + kh, w + kw) * Wt(f, c, kh, kw)
    O(n, f, h, w) = fmax(T(n, f, h, w) + b(f), 0.0)
}"""


def folds(ck):
    return ck.stages["fold"]


@pytest.mark.parametrize("m,k,n", [(24, 16, 64), (25, 17, 65), (7, 3, 5), (40, 70, 33)])
@pytest.mark.parametrize("options", OPTIONS, ids=IDS)
def test_init_and_epilogue_fold(m, k, n, options):
    ck = check(MLP, [(m, k), (k, n), (n,)], options)
    if "contraction S0" in ck.stages["tiling"]:
        assert "fold S0; init I0; epilogue S1" in folds(ck)
        assert "fmaxf(" not in ck.code  # a select, not a call of libm's fmaxf


def test_epilogue_takes_the_accumulators_of_a_dead_result():
    # T is read by the epilogue only: the last reduction tile does not store it
    ck = check(MLP, [(24, 40), (40, 64), (64,)], polytc.Options())
    assert "pt_s0[" in ck.code and "fmax(T(m, o) + b(o), 0.0)" in ck.stages["tc"]
    # an output read by the epilogue is stored as before
    src = MLP.replace("-> (Y)", "-> (T, Y)")
    ck = check(src, [(24, 40), (40, 64), (64,)], polytc.Options())
    assert "pt_s0[" not in ck.code


@pytest.mark.parametrize("options", OPTIONS, ids=IDS)
def test_in_place_and_transposed_epilogues(options):
    ck = check(IN_PLACE, [(), (21, 19), (19, 37), (21, 37)], options)
    assert "epilogue S1" in folds(ck)
    ck = check(TRANSPOSED, [(21, 19), (19, 37)], options)
    assert "epilogue S1" in folds(ck)


@pytest.mark.parametrize("options", OPTIONS, ids=IDS)
def test_convolution_epilogue(options):
    ck = check(CONV, [(2, 5, 10, 37), (7, 5, 3, 3), (7,)], options)
    assert "fold S0; init I0; epilogue S1" in folds(ck)


PADDED = """def padded(float(N,C,H,W) I, float(F,C,KH,KW) Wt, float(F) b) -> (O) {
    T(n, f, h, w) +=! I(n, c, h + kh, w + kw) * Wt(f, c, kh, kw)
    O(n, f, h, w) = fmax(T(n, f, h - 1, w - 2) + b(f), 0.0) where h in 1:H-KH+2, w in 2:W-KW+3
}"""


@pytest.mark.parametrize("options", OPTIONS, ids=IDS)
def test_shifted_epilogue_writes_the_inside_of_a_padded_result(options):
    # the epilogue reads T at its indices plus constants: it writes O from (1, 2) on, as
    # a convolution writes the inside of its reader's padded input (graph/padplace.py)
    ck = check(PADDED, [(2, 5, 10, 37), (7, 5, 3, 3), (7,)], options)
    assert "fold S0; init I0; epilogue S1" in folds(ck)


@pytest.mark.parametrize("src,why", [
    # the epilogue reads a tensor another statement writes: it could run before it
    ("""def f(float(M,K) A, float(K,N) B, float(N) b) -> (O, U) {
        U(n) = b(n) * 2.0
        T(m, n) +=! A(m, k) * B(k, n)
        O(m, n) = T(m, n) + U(n)
    }""", "written input"),
    # an earlier statement reads the epilogue's target: moving it earlier overtakes it
    ("""def f(float(M,K) A, float(K,N) B) -> (O, P) {
        O(m, n) = 1.0 where m in 0:M, n in 0:N
        P(m, n) = O(m, n) + 1.0
        T(m, n) +=! A(m, k) * B(k, n)
        O(m, n) = T(m, n)
    }""", "earlier read"),
    # the epilogue does not run once per element of T
    ("""def f(float(M,K) A, float(K,N) B) -> (O) {
        T(m, n) +=! A(m, k) * B(k, n)
        O(m) +=! T(m, n)
    }""", "reduction"),
    ("""def f(float(M,K) A, float(K,N) B) -> (O) {
        T(m, n) +=! A(m, k) * B(k, n)
        O(m, n) = T(m, 0) + T(m, n)
    }""", "other element"),
    # a concatenation: half its instances read T (shifted), the others X
    ("""def f(float(M,K) A, float(K,N) B, float(M,N) X) -> (O) {
        T(m, n) +=! A(m, k) * B(k, n)
        O(m, c) = c < N ? X(m, c) : T(m, c - N) where c in 0:2*N
    }""", "read at half the instances"),
])
def test_epilogue_not_folded_where_illegal(src, why):
    k = polytc.tc(src, options=polytc.Options(parallel_min_points=1))
    rng = np.random.default_rng(1)
    shapes = {"A": (23, 17), "B": (17, 40), "b": (40,), "X": (23, 40)}
    args = [rng.standard_normal(shapes[t.name]).astype(np.float32) for t in k.program.inputs]
    got = k(*args)
    got = got if isinstance(got, tuple) else (got,)
    want = reference.run(k.program, args)
    for t, g in zip(k.program.outputs, got):
        np.testing.assert_allclose(g, want[t.name], rtol=1e-4, atol=1e-4)
    assert "epilogue None" in k.specialize(*args).stages["fold"], why


def test_triangular_reduction_keeps_its_init():
    src = """def tri(float(N,N) A, float(N,N) B) -> (C) {
        C(i, j) +=! A(i, k) * B(k, j) where k in 0:i+1
    }"""
    ck = check(src, [(37, 37), (37, 37)], polytc.Options(parallel_min_points=1))
    assert "fold" not in ck.stages["fold"]


def test_fold_can_be_switched_off():
    ck = check(MLP, [(24, 16), (16, 64), (64,)], polytc.Options(disable=("fold",)))
    assert "fold" not in ck.stages
    assert "fold S0" not in ck.stages["tiling"]


def test_fmax_fmin_keep_nan_rules():
    """fmax/fmin print as selects (vectorised) and still ignore a NaN operand."""
    src = """def mm(float(N) A, float(N) B) -> (X, Y) {
        X(i) = fmax(A(i), B(i))
        Y(i) = fmin(A(i), B(i))
    }"""
    a = np.array([np.nan, 1, np.nan, -2, 3, 0] * 5, np.float32)
    b = np.array([2, np.nan, np.nan, 5, -1, -0.0] * 5, np.float32)
    x, y = polytc.tc(src)(a, b)
    np.testing.assert_array_equal(x, np.fmax(a, b))
    np.testing.assert_array_equal(y, np.fmin(a, b))


# --- partial last vectors (masked loads and stores) --------------------------------------
_MASK_CHECK = """
static int check_%(name)s(void)
{
  %(ct)s src[%(lanes)d], dst[%(lanes)d];
  for (int n = 1; n < %(lanes)d; n++) {
    for (int l = 0; l < %(lanes)d; l++) { src[l] = l + 1; dst[l] = -1; }
    %(v)s v = %(load)s(src, n);
    for (int l = 0; l < %(lanes)d; l++)
      if (v[l] != (l < n ? l + 1 : 0)) return 1;
    %(store)s(dst, v * 2, n);
    for (int l = 0; l < %(lanes)d; l++)
      if (dst[l] != (l < n ? 2 * (l + 1) : -1)) return 2;
  }
  return 0;
}
"""


@pytest.mark.parametrize("isa", ["native", "-mno-avx512f", "-mno-avx"])
def test_masked_moves_touch_only_their_lanes(isa, tmp_path):
    """Every ISA path of the partial-vector helpers (AVX-512 masks, AVX vmaskmov, the
    plain loop) loads zeros into and stores nothing from the lanes it leaves out."""
    import ctypes
    import subprocess

    from polytc.codegen_c.microkernel import masked_moves, masked_names, typedefs

    src, calls = "", []
    for ct, size, lanes in [("float", 4, 16), ("double", 8, 8), ("float", 4, 8),
                            ("double", 8, 4)]:
        v = f"pt_v{lanes}{ct[0]}"
        load, store = masked_names(v)
        src += typedefs(ct, lanes, size) + masked_moves(ct, lanes, size)
        name = f"{ct}{lanes}"
        src += _MASK_CHECK % dict(name=name, ct=ct, lanes=lanes, v=v, load=load, store=store)
        calls.append(f"check_{name}()")
    src += "int check(void) { return " + " | ".join(f"({c} << {4 * k})" for k, c in
                                                     enumerate(calls)) + "; }\n"
    (tmp_path / "m.c").write_text(src)
    flags = ["-O2", "-march=native"] + ([] if isa == "native" else [isa])
    r = subprocess.run(["gcc", *flags, "-shared", "-fPIC", "m.c", "-o", "m.so"],
                       cwd=tmp_path, capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"gcc {' '.join(flags)} failed: {r.stderr[:200]}")
    assert ctypes.CDLL(str(tmp_path / "m.so")).check() == 0


def test_partial_last_vector_in_the_micro_kernel():
    # 55 columns: 3 whole vectors and a masked one (16 lanes), or 6 and a masked (8)
    ck = check(CONV, [(1, 4, 57, 57), (8, 4, 3, 3), (8,)], polytc.Options())
    from polytc.machine import host

    if host().vector_bytes >= 32:
        assert "pt_mload_" in ck.code and "pt_mstore_" in ck.code


def _alias(ck) -> str:
    return ck.stages.get("contraction", "")


@pytest.mark.parametrize("options", OPTIONS, ids=IDS)
@pytest.mark.parametrize("m,k,n", [(24, 600, 64), (25, 1031, 65)])
def test_partial_sums_kept_in_the_epilogues_result(options, m, k, n):
    # a reduction split into cache tiles keeps T's partial sums between them; T is
    # read by the epilogue only, so they live in Y's array and T has none of its own
    ck = check(MLP, [(m, k), (k, n), (n,)], options)
    assert "epilogue S1" in folds(ck) and "alias T; into Y" in _alias(ck)
    assert "restrict T" not in ck.code and ck.temps == []
    assert "partial sums" in str(ck.explain())


def test_partial_sums_alias_under_a_symbolic_batch():
    k = polytc.tc(MLP, dynamic=("B",))
    rng = np.random.default_rng(2)
    W, b = rng.standard_normal((700, 48)).astype(np.float32), \
        rng.standard_normal(48).astype(np.float32)
    for rows in (5, 33):
        X = rng.standard_normal((rows, 700)).astype(np.float32)
        want = reference.run(k.program, [X, W, b])["Y"]
        np.testing.assert_allclose(k(X, W, b), want, rtol=1e-4, atol=1e-4)
    assert "alias T; into Y" in _alias(k.specialize(X, W, b))


MM = [(9, 700), (700, 40)]


@pytest.mark.parametrize("src,shapes,why", [
    # the epilogue writes a transposed result: T's element is not Y's
    (TRANSPOSED, MM, "transposed"),
    # the epilogue writes the inside of a padded result: other indices
    (PADDED, [(1, 60, 8, 9), (7, 60, 3, 3), (7,)], "shifted"),
    # T is an output: the caller gets its values
    (MLP.replace("-> (Y)", "-> (T, Y)"), MM + [(40,)], "output"),
    # another statement reads T
    ("""def f(float(M,K) A, float(K,N) B, float(N) b) -> (O, P) {
        T(m, n) +=! A(m, k) * B(k, n)
        O(m, n) = T(m, n) + b(n)
        P(m, n) = T(m, n) * 2.0
    }""", MM + [(40,)], "read twice"),
])
def test_partial_sums_keep_their_array_where_they_must(src, shapes, why):
    ck = check(src, shapes, polytc.Options(parallel_min_points=1), rtol=1e-3, atol=1e-3)
    assert "alias" not in _alias(ck), why
