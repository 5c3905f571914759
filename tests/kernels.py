"""A catalogue of TC kernels with independent numpy expectations.

Each :class:`Entry` holds the TC text, a function making small inputs from a numpy
``Generator`` (sizes 1-40 per dimension, many of them odd or prime) and a plain numpy
expression of the expected outputs that does not use polytc.  ``tests/test_kernels.py``
compiles every entry, runs it, and compares the result with both the reference
interpreter (``polytc.lang.reference``) and the numpy expression.

``make(rng, **sizes)`` takes the sizes as keyword arguments with defaults; ``sizes`` lists
size sets to try (the first, usually ``{}``, means the defaults).  ``expect(*inputs)``
returns one array or a tuple of arrays, in the order of the def's outputs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
from scipy import special as sps


@dataclass(frozen=True)
class Entry:
    name: str
    tc: str
    make: Callable  # (rng, **sizes) -> tuple of inputs
    expect: Callable  # (*inputs) -> array or tuple of arrays
    rtol: float = 1e-5
    atol: float = 1e-5
    sizes: tuple = ({},)  # size sets for make(); the first is the one the main test uses
    def_name: Optional[str] = None  # for texts with several defs: polytc.tc(tc, def_name)
    xfail: Optional[str] = None  # reason, when a known polytc bug breaks this entry

    def __repr__(self):
        return f"Entry({self.name})"


# --- input helpers -----------------------------------------------------------------------
def f32(r, *shape, lo=-1.0, hi=1.0):
    return r.uniform(lo, hi, shape).astype(np.float32)


def f64(r, *shape, lo=-1.0, hi=1.0):
    return r.uniform(lo, hi, shape).astype(np.float64)


def ints(r, *shape, lo=-100, hi=100, dtype=np.int32):
    return r.integers(lo, hi, shape, endpoint=True).astype(dtype)


def nonzero(x):
    return np.where(x == 0, 3, x).astype(x.dtype)


def d(x):
    """float64 copy, for computing float32 expectations accurately."""
    return np.asarray(x, dtype=np.float64)


def scalar(v, dtype=np.float32):
    return np.array(v, dtype=dtype)


# --- numpy references ----------------------------------------------------------------------
def conv2d_ref(I, W, stride=1):
    """I (N,C,H,W) * W (M,C,KH,KW), valid, no padding."""
    I, W = d(I), d(W)
    n, c, h, w = I.shape
    m, _, kh, kw = W.shape
    oh, ow = (h - kh) // stride + 1, (w - kw) // stride + 1
    out = np.zeros((n, m, oh, ow))
    for a in range(kh):
        for b in range(kw):
            patch = I[:, :, a:a + stride * (oh - 1) + 1:stride, b:b + stride * (ow - 1) + 1:stride]
            out += np.einsum("nchw,mc->nmhw", patch, W[:, :, a, b])
    return out


def depthwise_ref(I, W):
    I, W = d(I), d(W)
    n, c, h, w = I.shape
    _, kh, kw = W.shape
    oh, ow = h - kh + 1, w - kw + 1
    out = np.zeros((n, c, oh, ow))
    for a in range(kh):
        for b in range(kw):
            out += I[:, :, a:a + oh, b:b + ow] * W[None, :, a, b, None, None]
    return out


def grouped_ref(I, W):
    """I (N,G,C,H,W), W (G,M,C,KH,KW) -> (N,G,M,OH,OW)."""
    I, W = d(I), d(W)
    n, g, c, h, w = I.shape
    _, m, _, kh, kw = W.shape
    oh, ow = h - kh + 1, w - kw + 1
    out = np.zeros((n, g, m, oh, ow))
    for a in range(kh):
        for b in range(kw):
            out += np.einsum("ngchw,gmc->ngmhw", I[:, :, :, a:a + oh, b:b + ow], W[:, :, :, a, b])
    return out


def pool_ref(I, k, stride, fn):
    n, c, h, w = I.shape
    oh, ow = (h - k) // stride + 1, (w - k) // stride + 1
    win = np.lib.stride_tricks.sliding_window_view(d(I), (k, k), axis=(2, 3))
    win = win[:, :, ::stride, ::stride][:, :, :oh, :ow]
    return fn(win, axis=(-2, -1))


def softmax_ref(X, axis=-1):
    X = d(X)
    e = np.exp(X - X.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def trunc_div(a, b):
    """C integer division and remainder (toward zero)."""
    a, b = a.astype(np.int64), b.astype(np.int64)
    q = np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))
    return q, a - q * b


def first_argmax(A):
    return np.argmax(A, axis=1).astype(np.int32)


def last_argmin(A):
    n = A.shape[1]
    return (n - 1 - np.argmin(A[:, ::-1], axis=1)).astype(np.int32)


# --- the catalogue -------------------------------------------------------------------------
CATALOGUE: list = []


def add(name, tc, make, expect, **kw):
    CATALOGUE.append(Entry(name, tc, make, expect, **kw))


# linear algebra -----------------------------------------------------------------------------
add("matmul",
    "def matmul(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }",
    lambda r, M=7, K=13, N=5: (f32(r, M, K), f32(r, K, N)),
    lambda A, B: d(A) @ d(B),
    sizes=({}, {"M": 1, "K": 17, "N": 31}, {"M": 23, "K": 1, "N": 2}))
def _dot4_ref(A, B):
    """``dot4`` products: the unsigned bytes of A's words times the signed bytes of B's."""
    a = np.ascontiguousarray(A).view(np.uint8).reshape(A.shape + (4,)).astype(np.int64)
    b = np.ascontiguousarray(B).view(np.int8).reshape(B.shape + (4,)).astype(np.int64)
    return np.einsum("mkr,knr->mn", a, b).astype(np.int32)


def _words(r, *shape, dtype=np.int32):
    return r.integers(0, 1 << 32, shape, dtype=np.uint64).astype(np.uint32).view(dtype)


add("quantised_matmul",  # int8 words: one vpdpbusd per vector with VNNI
    "def quantised_matmul(int32(M,K) A, int32(K,N) B) -> (C) { C(m, n) +=! dot4(A(m, k), B(k, n)) }",
    lambda r, M=37, K=29, N=53: (_words(r, M, K), _words(r, K, N)),
    _dot4_ref,
    sizes=({}, {"M": 64, "K": 64, "N": 96}, {"M": 1, "K": 1, "N": 1}, {"M": 3, "K": 5, "N": 8}))
add("quantised_matvec_uint32",
    "def quantised_matvec_uint32(uint32(M,K) A, int32(K) x) -> (y) { y(m) +=! dot4(A(m, k), x(k)) }",
    lambda r, M=19, K=77: (_words(r, M, K, dtype=np.uint32), _words(r, K)),
    lambda A, x: _dot4_ref(A, x.reshape(-1, 1)).reshape(-1))
add("matmul_tn",
    "def matmul_tn(float(K,M) A, float(K,N) B) -> (C) { C(m, n) +=! A(k, m) * B(k, n) }",
    lambda r, M=11, K=7, N=3: (f32(r, K, M), f32(r, K, N)),
    lambda A, B: d(A).T @ d(B))
add("matmul_nt",
    "def matmul_nt(float(M,K) A, float(N,K) B) -> (C) { C(m, n) +=! A(m, k) * B(n, k) }",
    lambda r, M=5, K=19, N=9: (f32(r, M, K), f32(r, N, K)),
    lambda A, B: d(A) @ d(B).T)
add("matmul_tt",
    "def matmul_tt(float(K,M) A, float(N,K) B) -> (C) { C(m, n) +=! A(k, m) * B(n, k) }",
    lambda r, M=13, K=6, N=7: (f32(r, K, M), f32(r, N, K)),
    lambda A, B: d(A).T @ d(B).T)
add("matmul_const_k",
    "def matmul_const_k(float(M,4) A, float(4,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }",
    lambda r, M=9, N=11: (f32(r, M, 4), f32(r, 4, N)),
    lambda A, B: d(A) @ d(B))
add("batch_matmul",
    """def batch_matmul(float(B,M,K) X, float(B,K,N) Y) -> (Z) {
        Z(b, m, n) +=! X(b, m, k) * Y(b, k, n)
    }""",
    lambda r, B=3, M=5, K=7, N=4: (f32(r, B, M, K), f32(r, B, K, N)),
    lambda X, Y: d(X) @ d(Y),
    sizes=({}, {"B": 1, "M": 2, "K": 29, "N": 3}))
add("matvec",
    "def matvec(float(M,N) A, float(N) x) -> (y) { y(i) +=! A(i, j) * x(j) }",
    lambda r, M=17, N=23: (f32(r, M, N), f32(r, N)),
    lambda A, x: d(A) @ d(x),
    sizes=({}, {"M": 1, "N": 1}, {"M": 37, "N": 2}))
add("dot",
    "def dot(float(N) x, float(N) y) -> (s) { s +=! x(i) * y(i) }",
    lambda r, N=31: (f32(r, N), f32(r, N)),
    lambda x, y: np.array(d(x) @ d(y)),
    sizes=({}, {"N": 1}, {"N": 40}))
add("dot_double",
    "def dot_double(double(N) x, double(N) y) -> (s) { s +=! x(i) * y(i) }",
    lambda r, N=29: (f64(r, N), f64(r, N)),
    lambda x, y: np.array(x @ y), rtol=1e-12, atol=1e-12)
add("outer",
    "def outer(float(M) x, float(N) y) -> (O) { O(i, j) = x(i) * y(j) }",
    lambda r, M=7, N=3: (f32(r, M), f32(r, N)),
    lambda x, y: np.outer(d(x), d(y)))
add("trace",
    "def trace(float(N,N) A) -> (t) { t +=! A(i, i) }",
    lambda r, N=13: (f32(r, N, N),),
    lambda A: np.array(np.trace(d(A))))
add("diag",
    "def diag(float(N,N) A) -> (v) { v(i) = A(i, i) }",
    lambda r, N=11: (f32(r, N, N),),
    lambda A: np.diag(A).copy())
add("tensordot2",
    "def tensordot2(float(I,K,L) A, float(K,L,J) B) -> (C) { C(i, j) +=! A(i, k, l) * B(k, l, j) }",
    lambda r, I=5, K=3, L=7, J=6: (f32(r, I, K, L), f32(r, K, L, J)),
    lambda A, B: np.tensordot(d(A), d(B), axes=([1, 2], [0, 1])))
add("int32_matmul",
    "def int32_matmul(int32(M,K) A, int32(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }",
    lambda r, M=6, K=13, N=7: (ints(r, M, K), ints(r, K, N)),
    lambda A, B: (A.astype(np.int64) @ B.astype(np.int64)).astype(np.int32))
add("double_matmul",
    "def double_matmul(double(M,K) A, double(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }",
    lambda r, M=9, K=8, N=3: (f64(r, M, K), f64(r, K, N)),
    lambda A, B: A @ B, rtol=1e-12, atol=1e-12)

# reductions ---------------------------------------------------------------------------------
add("sum_rows",
    "def sum_rows(float(M,N) A) -> (S) { S(i) +=! A(i, j) }",
    lambda r, M=7, N=19: (f32(r, M, N),),
    lambda A: d(A).sum(1))
add("sum_cols",
    "def sum_cols(float(M,N) A) -> (S) { S(j) +=! A(i, j) }",
    lambda r, M=19, N=7: (f32(r, M, N),),
    lambda A: d(A).sum(0))
add("prod_rows",
    "def prod_rows(float(M,N) A) -> (P) { P(i) *=! A(i, j) }",
    lambda r, M=5, N=13: (f32(r, M, N, lo=0.8, hi=1.25),),
    lambda A: d(A).prod(1))
add("min_rows",
    "def min_rows(float(M,N) A) -> (m) { m(i) min=! A(i, j) }",
    lambda r, M=11, N=3: (f32(r, M, N),),
    lambda A: A.min(1))
add("max_cols",
    "def max_cols(float(M,N) A) -> (m) { m(j) max=! A(i, j) }",
    lambda r, M=11, N=3: (f32(r, M, N),),
    lambda A: A.max(0))
add("sum_all",
    "def sum_all(float(M,N) A) -> (s) { s +=! A(i, j) }",
    lambda r, M=9, N=14: (f32(r, M, N),),
    lambda A: np.array(d(A).sum()))
add("sum_bias_init",  # non-! reduction after an explicit initialisation
    """def sum_bias_init(float(M,N) A, float(M) b) -> (S) {
        S(i) = b(i)
        S(i) += A(i, j)
    }""",
    lambda r, M=7, N=5: (f32(r, M, N), f32(r, M)),
    lambda A, b: d(A).sum(1) + b)
add("explicit_init_where",  # init with an explicit range, then += and *=
    """def explicit_init_where(float(M,N) A) -> (S, P) {
        S(i) = 0.0 where i in 0:M
        S(i) += A(i, j)
        P(i) = 1.0 where i in 0:M
        P(i) *= A(i, j)
    }""",
    lambda r, M=6, N=7: (f32(r, M, N, lo=0.8, hi=1.2),),
    lambda A: (d(A).sum(1), d(A).prod(1)))
add("max_init_first",
    """def max_init_first(float(R,Q) A) -> (mx, mn) {
        mx(i) = A(i, 0)
        mx(i) max= A(i, j)
        mn(i) = A(i, 0)
        mn(i) min= A(i, j)
    }""",
    lambda r, R=9, Q=4: (f32(r, R, Q),),
    lambda A: (A.max(1), A.min(1)))
add("row_stats",  # several outputs
    """def row_stats(float(M,N) A) -> (total, hi, lo, mean) {
        total(i) +=! A(i, j)
        hi(i) max=! A(i, j)
        lo(i) min=! A(i, j)
        mean(i) = total(i) / N
    }""",
    lambda r, M=5, N=17: (f32(r, M, N),),
    lambda A: (d(A).sum(1), A.max(1), A.min(1), d(A).mean(1)))
add("prefix_sum",  # triangular reduction
    "def prefix_sum(float(N) A) -> (S) { S(i) +=! A(j) where i in 0:N, j in 0:i+1 }",
    lambda r, N=23: (f32(r, N),),
    lambda A: np.cumsum(d(A)),
    sizes=({}, {"N": 1}, {"N": 8}))
add("int8_wrap_sum",
    "def int8_wrap_sum(int32(M,N) X) -> (int8(M) S) { S(i) +=! int8(X(i, j)) }",
    lambda r, M=7, N=29: (ints(r, M, N, lo=-1000, hi=1000),),
    lambda X: X.astype(np.int8).sum(1, dtype=np.int8))
add("int64_sum_squares",
    "def int64_sum_squares(int32(N) A) -> (s) { s +=! int64(A(i)) * int64(A(i)) }",
    lambda r, N=37: (ints(r, N, lo=-200000, hi=200000),),
    lambda A: np.array((A.astype(np.int64) ** 2).sum(), dtype=np.int64))
add("bool_count",
    "def bool_count(bool(M,N) m) -> (c) { c(i) +=! int32(m(i, j)) }",
    lambda r, M=5, N=13: (r.random((M, N)) < 0.4,),
    lambda m: m.sum(1).astype(np.int32))

# normalisation --------------------------------------------------------------------------------
add("softmax",
    """def softmax(float(N,D) X) -> (Y) {
        mx(n) max=! X(n, d)
        e(n, d) = exp(X(n, d) - mx(n))
        s(n) +=! e(n, d)
        Y(n, d) = e(n, d) / s(n)
    }""",
    lambda r, N=7, D=13: (f32(r, N, D, lo=-5, hi=5),),
    softmax_ref, rtol=1e-4, atol=1e-6,
    sizes=({}, {"N": 1, "D": 1}, {"N": 3, "D": 37}))
add("log_softmax",
    """def log_softmax(float(N,D) X) -> (Y) {
        mx(n) max=! X(n, d)
        s(n) +=! exp(X(n, d) - mx(n))
        Y(n, d) = X(n, d) - mx(n) - log(s(n))
    }""",
    lambda r, N=5, D=11: (f32(r, N, D, lo=-5, hi=5),),
    lambda X: np.log(softmax_ref(X)), rtol=1e-4, atol=1e-5)
add("causal_mask",
    "def causal_mask(float(N,N) S) -> (O) { O(i, j) = i >= j ? S(i, j) : -1e30 }",
    lambda r, N=9: (f32(r, N, N),),
    lambda S: np.where(np.tril(np.ones(S.shape, bool)), S, np.float32(-1e30)))
add("causal_softmax",
    """def causal_softmax(float(N,N) S) -> (P) {
        m(i, j) = i >= j ? S(i, j) : -1e30
        mx(i) max=! m(i, j)
        e(i, j) = exp(m(i, j) - mx(i))
        s(i) +=! e(i, j)
        P(i, j) = e(i, j) / s(i)
    }""",
    lambda r, N=8: (f32(r, N, N, lo=-3, hi=3),),
    lambda S: softmax_ref(np.where(np.tril(np.ones(S.shape, bool)), d(S), -1e30)),
    rtol=1e-4, atol=1e-6)
add("layernorm",
    """def layernorm(float(N,D) X, float(D) gamma, float(D) beta) -> (Y) {
        mean(n) +=! X(n, d) / D
        xc(n, d) = X(n, d) - mean(n)
        var(n) +=! xc(n, d) * xc(n, d) / D
        Y(n, d) = xc(n, d) * rsqrt(var(n) + 1e-5) * gamma(d) + beta(d)
    }""",
    lambda r, N=6, D=17: (f32(r, N, D, lo=-2, hi=3), f32(r, D), f32(r, D)),
    lambda X, g, b: ((d(X) - d(X).mean(1, keepdims=True))
                     / np.sqrt(d(X).var(1, keepdims=True) + 1e-5) * g + b),
    rtol=1e-4, atol=1e-5)
add("groupnorm",
    """def groupnorm(float(N,G,C,H,W) X, float(G,C) gamma, float(G,C) beta) -> (Y) {
        mean(n, g) +=! X(n, g, c, h, w) / (C * H * W)
        var(n, g) +=! (X(n, g, c, h, w) - mean(n, g)) * (X(n, g, c, h, w) - mean(n, g)) / (C * H * W)
        Y(n, g, c, h, w) = (X(n, g, c, h, w) - mean(n, g)) * rsqrt(var(n, g) + 1e-5) * gamma(g, c) + beta(g, c)
    }""",
    lambda r, N=2, G=3, C=2, H=5, W=3: (f32(r, N, G, C, H, W, lo=-1, hi=2), f32(r, G, C),
                                       f32(r, G, C)),
    lambda X, g, b: ((d(X) - d(X).mean((2, 3, 4), keepdims=True))
                     / np.sqrt(d(X).var((2, 3, 4), keepdims=True) + 1e-5)
                     * g[None, :, :, None, None] + b[None, :, :, None, None]),
    rtol=1e-4, atol=1e-5)

# convolutions and pooling -------------------------------------------------------------------
add("conv2d",
    """def conv2d(float(N,C,H,W) I, float(M,C,KH,KW) Wt) -> (O) {
        O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * Wt(m, c, kh, kw)
    }""",
    lambda r, N=2, C=3, H=7, W=9, M=4, KH=3, KW=2: (f32(r, N, C, H, W), f32(r, M, C, KH, KW)),
    conv2d_ref, rtol=1e-4, atol=1e-5,
    sizes=({}, {"N": 1, "C": 1, "H": 5, "W": 5, "M": 1, "KH": 5, "KW": 1}))
add("conv2d_strided",
    """def conv2d_strided(float(N,C,H,W) I, float(M,C,KH,KW) Wt) -> (O) {
        O(n, m, h, w) +=! I(n, c, 2*h + kh, 2*w + kw) * Wt(m, c, kh, kw)
    }""",
    lambda r, N=2, C=2, H=11, W=8, M=3, KH=3, KW=3: (f32(r, N, C, H, W), f32(r, M, C, KH, KW)),
    lambda I, W: conv2d_ref(I, W, stride=2), rtol=1e-4, atol=1e-5,
    sizes=({}, {"H": 3, "W": 4, "KH": 3, "KW": 2}))
add("conv2d_strided_sum_form",  # stride 2 written h + h (works around BUG_MUL)
    """def conv2d_strided_sum_form(float(N,C,H,W) I, float(M,C,KH,KW) Wt) -> (O) {
        O(n, m, h, w) +=! I(n, c, h + h + kh, w + w + kw) * Wt(m, c, kh, kw)
    }""",
    lambda r, N=2, C=2, H=11, W=8, M=3, KH=3, KW=3: (f32(r, N, C, H, W), f32(r, M, C, KH, KW)),
    lambda I, W: conv2d_ref(I, W, stride=2), rtol=1e-4, atol=1e-5)
add("conv2d_depthwise",
    """def conv2d_depthwise(float(N,C,H,W) I, float(C,KH,KW) Wt) -> (O) {
        O(n, c, h, w) +=! I(n, c, h + kh, w + kw) * Wt(c, kh, kw)
    }""",
    lambda r, N=2, C=5, H=7, W=6, KH=3, KW=3: (f32(r, N, C, H, W), f32(r, C, KH, KW)),
    depthwise_ref, rtol=1e-4, atol=1e-5)
add("conv2d_grouped",
    """def conv2d_grouped(float(N,G,C,H,W) I, float(G,M,C,KH,KW) Wt) -> (O) {
        O(n, g, m, h, w) +=! I(n, g, c, h + kh, w + kw) * Wt(g, m, c, kh, kw)
    }""",
    lambda r, N=2, G=3, C=2, H=6, W=5, M=2, KH=2, KW=3: (f32(r, N, G, C, H, W),
                                                        f32(r, G, M, C, KH, KW)),
    grouped_ref, rtol=1e-4, atol=1e-5)
add("conv1d",
    "def conv1d(float(N) x, float(K) w) -> (y) { y(i) +=! x(i + k) * w(k) }",
    lambda r, N=31, K=5: (f32(r, N), f32(r, K)),
    lambda x, w: np.correlate(d(x), d(w), mode="valid"),
    sizes=({}, {"N": 5, "K": 5}, {"N": 2, "K": 1}))
add("rgb_to_gray",  # constant dimension
    "def rgb_to_gray(float(3,H,W) I, float(3) w) -> (O) { O(h, x) +=! w(c) * I(c, h, x) }",
    lambda r, H=7, W=5: (f32(r, 3, H, W), f32(r, 3)),
    lambda I, w: np.einsum("c,chw->hw", d(w), d(I)))
add("maxpool2d",
    """def maxpool2d(float(N,C,H,W) I) -> (O) {
        O(n, c, h, w) max=! I(n, c, 2*h + kh, 2*w + kw) where kh in 0:2, kw in 0:2
    }""",
    lambda r, N=2, C=3, H=7, W=10: (f32(r, N, C, H, W),),
    lambda I: pool_ref(I, 2, 2, np.max).astype(np.float32))
add("avgpool2d",
    """def avgpool2d(float(N,C,H,W) I) -> (O) {
        O(n, c, h, w) +=! I(n, c, h + kh, w + kw) / 9.0 where kh in 0:3, kw in 0:3
    }""",
    lambda r, N=1, C=3, H=8, W=5: (f32(r, N, C, H, W),),
    lambda I: pool_ref(I, 3, 1, np.mean), rtol=1e-4, atol=1e-6)

# MLP layers ---------------------------------------------------------------------------------
add("mlp_fmax",
    """def mlp_fmax(float(B,I) X, float(O,I) Wt, float(O) bias) -> (Y) {
        Y(b, o) +=! X(b, i) * Wt(o, i)
        Y(b, o) = fmax(Y(b, o) + bias(o), 0.0)
    }""",
    lambda r, B=3, I=13, O=7: (f32(r, B, I), f32(r, O, I), f32(r, O)),
    lambda X, W, b: np.maximum(d(X) @ d(W).T + b, 0), rtol=1e-4, atol=1e-6,
    sizes=({}, {"B": 1, "I": 2, "O": 1}))
add("mlp_ternary",
    """def mlp_ternary(float(B,I) X, float(O,I) Wt, float(O) bias) -> (Y) {
        H(b, o) +=! X(b, i) * Wt(o, i)
        Y(b, o) = H(b, o) + bias(o) > 0.0 ? H(b, o) + bias(o) : 0.0
    }""",
    lambda r, B=4, I=9, O=5: (f32(r, B, I), f32(r, O, I), f32(r, O)),
    lambda X, W, b: np.maximum(d(X) @ d(W).T + b, 0), rtol=1e-4, atol=1e-6)
add("mlp2",
    """def mlp2(float(B,I) X, float(H,I) W1, float(H) b1, float(O,H) W2, float(O) b2) -> (Y) {
        hid(b, h) +=! X(b, i) * W1(h, i)
        act(b, h) = fmax(hid(b, h) + b1(h), 0.0)
        Y(b, o) +=! act(b, h) * W2(o, h)
        Y(b, o) = Y(b, o) + b2(o)
    }""",
    lambda r, B=3, I=11, H=7, O=5: (f32(r, B, I), f32(r, H, I), f32(r, H), f32(r, O, H),
                                   f32(r, O)),
    lambda X, W1, b1, W2, b2: np.maximum(d(X) @ d(W1).T + b1, 0) @ d(W2).T + b2,
    rtol=1e-4, atol=1e-5,
    sizes=({}, {"B": 2, "I": 3, "H": 17, "O": 1}))
add("relu6_minmax",  # min and max builtins, a clamp
    "def relu6_minmax(float(N) A) -> (O) { O(i) = min(max(A(i), 0.0), 6.0) }",
    lambda r, N=29: (f32(r, N, lo=-10, hi=10),),
    lambda A: np.clip(A, 0, 6))

# Kronecker -----------------------------------------------------------------------------------
add("kron_product",
    "def kron_product(float(I,K) A, float(J,L) B) -> (Kr) { Kr(i, j, k, l) = A(i, k) * B(j, l) }",
    lambda r, I=3, K=2, J=5, L=3: (f32(r, I, K), f32(r, J, L)),
    lambda A, B: np.kron(d(A), d(B)).reshape(A.shape[0], B.shape[0], A.shape[1], B.shape[1]))
add("kron_matvec2",
    """def kron_matvec2(float(I,K) A, float(J,L) B, float(K,L) X) -> (Y) {
        T(k, j) +=! B(j, l) * X(k, l)
        Y(i, j) +=! A(i, k) * T(k, j)
    }""",
    lambda r, I=4, K=3, J=5, L=7: (f32(r, I, K), f32(r, J, L), f32(r, K, L)),
    lambda A, B, X: (np.kron(d(A), d(B)) @ d(X).reshape(-1)).reshape(A.shape[0], B.shape[0]),
    rtol=1e-4, atol=1e-5)
add("kronecker3",  # TC's Kronecker benchmark, three chained contractions
    """def kronecker3(float(D0,N0) W0, float(D1,N1) W1, float(D2,N2) W2, float(M,N0,N1,N2) X) -> (Y) {
        XW2(m, n0, n1, d2) +=! X(m, n0, n1, n2) * W2(d2, n2)
        XW1(m, n0, d1, d2) +=! XW2(m, n0, n1, d2) * W1(d1, n1)
        Y(m, d0, d1, d2) +=! XW1(m, n0, d1, d2) * W0(d0, n0)
    }""",
    lambda r, M=2, D0=3, N0=2, D1=2, N1=3, D2=4, N2=3: (
        f32(r, D0, N0), f32(r, D1, N1), f32(r, D2, N2), f32(r, M, N0, N1, N2)),
    lambda W0, W1, W2, X: np.einsum(
        "mn,dn->md", d(X).reshape(X.shape[0], -1), np.kron(np.kron(d(W0), d(W1)), d(W2))
    ).reshape(X.shape[0], W0.shape[0], W1.shape[0], W2.shape[0]),
    rtol=1e-4, atol=1e-5)

# layout ---------------------------------------------------------------------------------------
add("transpose2d",
    "def transpose2d(float(M,N) A) -> (T) { T(j, i) = A(i, j) }",
    lambda r, M=7, N=12: (f32(r, M, N),),
    lambda A: A.T.copy())
add("permute4d",
    "def permute4d(float(A,B,C,D) X) -> (Y) { Y(d, a, c, b) = X(a, b, c, d) }",
    lambda r, A=2, B=3, C=5, D=7: (f32(r, A, B, C, D),),
    lambda X: np.transpose(X, (3, 0, 2, 1)).copy())
add("flip",
    "def flip(float(N) A) -> (O) { O(i) = A(N - 1 - i) }",
    lambda r, N=13: (f32(r, N),),
    lambda A: A[::-1].copy())
add("upsample2",
    "def upsample2(float(N) A) -> (O) { O(i) = A(i / 2) }",
    lambda r, N=7: (f32(r, N),),
    lambda A: np.repeat(A, 2))
add("downsample2",
    "def downsample2(float(N) A) -> (O) { O(i) = A(2 * i) }",
    lambda r, N=11: (f32(r, N),),
    lambda A: A[::2].copy())
add("downsample2_sum_form",  # the stride written i + i (works around BUG_MUL)
    "def downsample2_sum_form(float(N) A) -> (O) { O(i) = A(i + i) }",
    lambda r, N=11: (f32(r, N),),
    lambda A: A[::2].copy())
add("concat_ternary",
    "def concat_ternary(float(N) A, float(M) B) -> (O) { O(i) = i < N ? A(i) : B(i - N) where i in 0:N+M }",
    lambda r, N=5, M=7: (f32(r, N), f32(r, M)),
    lambda A, B: np.concatenate([A, B]))
add("concat2d_ternary",
    """def concat2d_ternary(float(R,N) A, float(R,M) B) -> (O) {
        O(i, j) = j < N ? A(i, j) : B(i, j - N) where j in 0:N+M
    }""",
    lambda r, R=3, N=4, M=5: (f32(r, R, N), f32(r, R, M)),
    lambda A, B: np.concatenate([A, B], axis=1))
add("concat_ranges",  # the same without a guarded read: three statements with ranges
    """def concat_ranges(float(N) A, float(M) B) -> (O) {
        O(i) = 0.0 where i in 0:N+M
        O(i) = A(i) where i in 0:N
        O(i) = B(i - N) where i in N:N+M
    }""",
    lambda r, N=5, M=7: (f32(r, N), f32(r, M)),
    lambda A, B: np.concatenate([A, B]))

# stencils ----------------------------------------------------------------------------------------
add("shift1d",
    "def shift1d(float(N) A) -> (O) { O(i) = A(i + 1) }",
    lambda r, N=17: (f32(r, N),),
    lambda A: A[1:].copy())
add("shift1d_where",
    "def shift1d_where(float(N) A) -> (O) { O(i) = A(i + 1) where i in 0:N-1 }",
    lambda r, N=17: (f32(r, N),),
    lambda A: A[1:].copy())
add("shift1d_back",  # negative offset: 0 <= i - 2 < N gives i in 2:N+2, so O has N+2 entries
    "def shift1d_back(float(N) A) -> (O) { O(i) = A(i - 2) }",
    lambda r, N=9: (f32(r, N),),
    lambda A: np.concatenate([[0, 0], A]).astype(np.float32))
add("stencil3",
    "def stencil3(float(N) A) -> (O) { O(i) = (A(i) + A(i + 1) + A(i + 2)) / 3.0 }",
    lambda r, N=19: (f32(r, N),),
    lambda A: (d(A)[:-2] + d(A)[1:-1] + d(A)[2:]) / 3)
add("laplace1d",  # centred, explicit range starting at 1
    "def laplace1d(float(N) A) -> (O) { O(i) = A(i - 1) - 2.0 * A(i) + A(i + 1) where i in 1:N-1 }",
    lambda r, N=13: (f32(r, N),),
    lambda A: np.concatenate([[0.0], d(A)[:-2] - 2 * d(A)[1:-1] + d(A)[2:]]))


def _jacobi_ref(A):
    A = d(A)
    out = np.zeros((A.shape[0] - 1, A.shape[1] - 1))
    out[1:, 1:] = 0.2 * (A[1:-1, 1:-1] + A[:-2, 1:-1] + A[2:, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:])
    return out


add("jacobi2d_5pt",
    """def jacobi2d_5pt(float(N,M) A) -> (O) {
        O(i, j) = 0.2 * (A(i, j) + A(i - 1, j) + A(i + 1, j) + A(i, j - 1) + A(i, j + 1))
            where i in 1:N-1, j in 1:M-1
    }""",
    lambda r, N=9, M=7: (f32(r, N, M),),
    _jacobi_ref, rtol=1e-5, atol=1e-6)

# argmin / argmax ---------------------------------------------------------------------------------
add("argmax_first",
    """def argmax_first(float(M,N) A) -> (idx) {
        mx(i) max=! A(i, j)
        idx(i) min=! A(i, j) == mx(i) ? j : N
    }""",
    lambda r, M=9, N=7: (r.integers(0, 4, (M, N)).astype(np.float32),),  # ties on purpose
    first_argmax)
add("argmin_last",
    """def argmin_last(float(M,N) A) -> (idx) {
        mn(i) min=! A(i, j)
        idx(i) max=! A(i, j) == mn(i) ? j : -1
    }""",
    lambda r, M=9, N=7: (r.integers(0, 4, (M, N)).astype(np.float32),),
    last_argmin)

# gathers -----------------------------------------------------------------------------------------
add("gather1d",
    "def gather1d(float(V) T, int32(N) idx) -> (O) { O(i) = T(idx(i)) }",
    lambda r, V=17, N=23: (f32(r, V), ints(r, N, lo=0, hi=V - 1)),
    lambda T, idx: T[idx])
add("embedding",
    "def embedding(float(V,D) E, int32(B) idx) -> (O) { O(b, k) = E(idx(b), k) }",
    lambda r, V=11, D=5, B=7: (f32(r, V, D), ints(r, B, lo=0, hi=V - 1)),
    lambda E, idx: E[idx])
add("lut_uint8",
    "def lut_uint8(float(256) T, uint8(N) x) -> (O) { O(i) = T(x(i)) }",
    lambda r, N=19: (f32(r, 256), ints(r, N, lo=0, hi=255, dtype=np.uint8)),
    lambda T, x: T[x])

# casts and integer / bool / uint8 kernels ------------------------------------------------------------
add("cast_f2i",
    "def cast_f2i(float(N) A) -> (O) { O(i) = int32(A(i)) }",
    lambda r, N=31: (f32(r, N, lo=-50, hi=50),),
    lambda A: np.trunc(A).astype(np.int32))
add("cast_i2f",
    "def cast_i2f(int32(N) A) -> (O) { O(i) = float(A(i)) * 0.5 }",
    lambda r, N=13: (ints(r, N, lo=-1000, hi=1000),),
    lambda A: A.astype(np.float32) * np.float32(0.5), rtol=0, atol=0)
add("cast_d2f",
    "def cast_d2f(double(N) A) -> (O) { O(i) = float(A(i) * 3.0) }",
    lambda r, N=13: (f64(r, N),),
    lambda A: (A * 3.0).astype(np.float32), rtol=0, atol=0)
add("int_divmod",
    """def int_divmod(int32(N) A, int32(N) B) -> (Q, R) {
        Q(i) = A(i) / B(i)
        R(i) = A(i) % B(i)
    }""",
    lambda r, N=23: (ints(r, N, lo=-50, hi=50), nonzero(ints(r, N, lo=-7, hi=7))),
    lambda A, B: tuple(x.astype(np.int32) for x in trunc_div(A, B)))
add("int8_mul_wrap",
    "def int8_mul_wrap(int8(N) A) -> (O) { O(i) = A(i) * 3 + 1 }",
    lambda r, N=17: (ints(r, N, lo=-128, hi=127, dtype=np.int8),),
    lambda A: (A.astype(np.int64) * 3 + 1).astype(np.int8))
add("uint8_ops",
    """def uint8_ops(uint8(N) A, uint8(N) B) -> (S, Mx, Avg) {
        S(i) = A(i) + B(i)
        Mx(i) = max(A(i), B(i))
        Avg(i) = uint8((int32(A(i)) + int32(B(i)) + 1) / 2)
    }""",
    lambda r, N=21: (ints(r, N, lo=0, hi=255, dtype=np.uint8),
                     ints(r, N, lo=0, hi=255, dtype=np.uint8)),
    lambda A, B: ((A.astype(np.int64) + B).astype(np.uint8), np.maximum(A, B),
                  ((A.astype(np.int64) + B + 1) // 2).astype(np.uint8)))
add("bool_compare",
    """def bool_compare(float(N) A, float(N) B) -> (gt, both) {
        gt(i) = A(i) > B(i)
        both(i) = A(i) > 0.0 && B(i) <= 0.5
    }""",
    lambda r, N=15: (f32(r, N), f32(r, N)),
    lambda A, B: (A > B, (A > 0) & (B <= 0.5)))
add("bool_select",
    "def bool_select(bool(N) m, float(N) A, float(N) B) -> (O) { O(i) = m(i) ? A(i) : B(i) }",
    lambda r, N=15: (r.random(N) < 0.5, f32(r, N), f32(r, N)),
    lambda m, A, B: np.where(m, A, B))
add("index_values",  # indices and sizes used as values
    "def index_values(float(M,N) A) -> (O) { O(i, j) = A(i, j) + float(i * N + j) - float(M) }",
    lambda r, M=5, N=7: (f32(r, M, N),),
    lambda A: d(A) + np.arange(A.size).reshape(A.shape) - A.shape[0])
add("let_clause",
    "def let_clause(float(N) A) -> (O) { O(i) = t * t + t where t = A(i) + 1.0 }",
    lambda r, N=11: (f32(r, N),),
    lambda A: (d(A) + 1) ** 2 + d(A) + 1)
add("exists_clause",
    "def exists_clause(float(N) A, float(M) B) -> (O) { O(i) = A(i) where exists B(i) }",
    lambda r, N=9, M=6: (f32(r, N), f32(r, M)),
    lambda A, B: A[:min(len(A), len(B))].copy())

# scalar inputs -----------------------------------------------------------------------------------
add("axpy",
    "def axpy(float alpha, float(N) x, float(N) y) -> (z) { z(i) = alpha * x(i) + y(i) }",
    lambda r, N=19: (scalar(r.uniform(-2, 2)), f32(r, N), f32(r, N)),
    lambda a, x, y: d(a) * d(x) + d(y))
add("int_scale",
    "def int_scale(int32 s, int32(N) A) -> (O) { O(i) = A(i) * s() - s }",
    lambda r, N=9: (scalar(r.integers(-9, 9), np.int32), ints(r, N)),
    lambda s, A: (A * s - s).astype(np.int32))

# Polybench ---------------------------------------------------------------------------------------
add("gemm",
    """def gemm(float alpha, float beta, float(NI,NK) A, float(NK,NJ) B, float(NI,NJ) C) -> (O) {
        O(i, j) +=! alpha() * A(i, k) * B(k, j)
        O(i, j) = O(i, j) + beta * C(i, j)
    }""",
    lambda r, NI=7, NK=9, NJ=5: (scalar(1.5), scalar(-0.75), f32(r, NI, NK), f32(r, NK, NJ),
                                 f32(r, NI, NJ)),
    lambda al, be, A, B, C: d(al) * d(A) @ d(B) + d(be) * d(C), rtol=1e-4, atol=1e-5)
add("2mm",
    """def mm2(float alpha, float beta, float(NI,NK) A, float(NK,NJ) B, float(NJ,NL) C, float(NI,NL) D) -> (O) {
        tmp(i, j) +=! alpha * A(i, k) * B(k, j)
        O(i, l) +=! tmp(i, j) * C(j, l)
        O(i, l) = O(i, l) + beta * D(i, l)
    }""",
    lambda r, NI=5, NK=7, NJ=3, NL=6: (scalar(0.5), scalar(2.0), f32(r, NI, NK), f32(r, NK, NJ),
                                       f32(r, NJ, NL), f32(r, NI, NL)),
    lambda al, be, A, B, C, D: d(al) * d(A) @ d(B) @ d(C) + d(be) * d(D),
    rtol=1e-4, atol=1e-5)
add("3mm",
    """def mm3(float(NI,NK) A, float(NK,NJ) B, float(NJ,NM) C, float(NM,NL) D) -> (G) {
        E(i, j) +=! A(i, k) * B(k, j)
        F(j, l) +=! C(j, m) * D(m, l)
        G(i, l) +=! E(i, j) * F(j, l)
    }""",
    lambda r, NI=4, NK=5, NJ=6, NM=7, NL=3: (f32(r, NI, NK), f32(r, NK, NJ), f32(r, NJ, NM),
                                             f32(r, NM, NL)),
    lambda A, B, C, D: (d(A) @ d(B)) @ (d(C) @ d(D)), rtol=1e-4, atol=1e-5)
add("atax",
    """def atax(float(M,N) A, float(N) x) -> (y) {
        tmp(i) +=! A(i, j) * x(j)
        y(j) +=! A(i, j) * tmp(i)
    }""",
    lambda r, M=9, N=11: (f32(r, M, N), f32(r, N)),
    lambda A, x: d(A).T @ (d(A) @ d(x)), rtol=1e-4, atol=1e-5)
add("bicg",
    """def bicg(float(N,M) A, float(N) rr, float(M) p) -> (s, q) {
        s(j) +=! rr(i) * A(i, j)
        q(i) +=! A(i, j) * p(j)
    }""",
    lambda r, N=8, M=13: (f32(r, N, M), f32(r, N), f32(r, M)),
    lambda A, rr, p: (d(rr) @ d(A), d(A) @ d(p)), rtol=1e-4, atol=1e-5)
add("mvt",
    """def mvt(float(N,N) A, float(N) x1i, float(N) x2i, float(N) v1, float(N) v2) -> (x1, x2) {
        x1(i) = x1i(i)
        x1(i) += A(i, j) * v1(j)
        x2(i) = x2i(i)
        x2(i) += A(j, i) * v2(j)
    }""",
    lambda r, N=11: (f32(r, N, N), f32(r, N), f32(r, N), f32(r, N), f32(r, N)),
    lambda A, x1, x2, y1, y2: (d(x1) + d(A) @ d(y1), d(x2) + d(A).T @ d(y2)),
    rtol=1e-4, atol=1e-5)
add("gesummv",
    """def gesummv(float alpha, float beta, float(N,N) A, float(N,N) B, float(N) x) -> (O) {
        tmp(i) +=! A(i, j) * x(j)
        y(i) +=! B(i, j) * x(j)
        O(i) = alpha * tmp(i) + beta * y(i)
    }""",
    lambda r, N=13: (scalar(1.25), scalar(-0.5), f32(r, N, N), f32(r, N, N), f32(r, N)),
    lambda al, be, A, B, x: d(al) * d(A) @ d(x) + d(be) * d(B) @ d(x), rtol=1e-4, atol=1e-5)
add("syrk",
    """def syrk(float alpha, float beta, float(N,M) A, float(N,N) C) -> (O) {
        O(i, j) = beta * C(i, j) where j in 0:i+1
        O(i, j) += alpha * A(i, k) * A(j, k) where j in 0:i+1
    }""",
    lambda r, N=9, M=5: (scalar(0.75), scalar(1.5), f32(r, N, M), f32(r, N, N)),
    lambda al, be, A, C: np.tril(d(be) * d(C) + d(al) * d(A) @ d(A).T), rtol=1e-4, atol=1e-5)
add("trmv_lower",
    "def trmv_lower(float(N,N) L, float(N) x) -> (y) { y(i) +=! L(i, j) * x(j) where j in 0:i+1 }",
    lambda r, N=12: (f32(r, N, N), f32(r, N)),
    lambda L, x: np.tril(d(L)) @ d(x), rtol=1e-4, atol=1e-5)
add("trisolv_unit",  # forward substitution: x(i) depends on x(j), j < i, of the same statement
    """def trisolv_unit(double(N,N) L, double(N) b) -> (x) {
        x(i) = b(i)
        x(i) += -L(i, j) * x(j) where j in 0:i
    }""",
    lambda r, N=13: (f64(r, N, N, lo=-0.3, hi=0.3), f64(r, N)),
    lambda L, b: np.linalg.solve(np.tril(L, -1) + np.eye(len(b)), b), rtol=1e-10, atol=1e-10,
    sizes=({}, {"N": 1}, {"N": 6}))

# dependences: recurrences, anti-dependences, reuse of temporaries ----------------------------
def _seidel_ref(A0):
    A = d(A0).copy()
    n, m = A.shape
    for i in range(1, n - 1):
        for j in range(1, m - 1):
            A[i, j] = (A[i - 1, j] + A[i, j - 1] + A[i, j] + A[i + 1, j] + A[i, j + 1]) / 5
    return A


add("scan_recurrence",  # S(i) reads S(i - 1) of the same statement: a sequential scan
    """def scan_recurrence(float(N) A) -> (S) {
        S(i) = A(i)
        S(i) = S(i - 1) + A(i) where i in 1:N
    }""",
    lambda r, N=19: (f32(r, N),),
    lambda A: np.cumsum(d(A)), rtol=1e-5, atol=1e-5,
    sizes=({}, {"N": 2}, {"N": 3}))
add("anti_dependence",  # S(i) reads S(i + 1) before it is overwritten (i ascending)
    """def anti_dependence(float(N) A) -> (S) {
        S(i) = A(i)
        S(i) = S(i + 1) + A(i) where i in 0:N-1
    }""",
    lambda r, N=13: (f32(r, N),),
    lambda A: np.concatenate([d(A)[1:] + d(A)[:-1], d(A)[-1:]]))
add("seidel2d",  # in-place Gauss-Seidel sweep: reads new values above/left, old below/right
    """def seidel2d(float(N,M) A0) -> (A) {
        A(i, j) = A0(i, j)
        A(i, j) = (A(i - 1, j) + A(i, j - 1) + A(i, j) + A(i + 1, j) + A(i, j + 1)) / 5.0
            where i in 1:N-1, j in 1:M-1
    }""",
    lambda r, N=8, M=7: (f32(r, N, M),),
    _seidel_ref, rtol=1e-5, atol=1e-6)
add("temp_reuse",  # a temporary overwritten between its uses (WAR / WAW across statements)
    """def temp_reuse(float(N) A) -> (O1, O2) {
        T(i) = A(i) * 2.0
        O1(i) = T(i) + 1.0
        T(i) = A(i) - 3.0
        O2(i) = T(i) * T(i)
    }""",
    lambda r, N=11: (f32(r, N),),
    lambda A: (d(A) * 2 + 1, (d(A) - 3) ** 2))
add("reinit_reduction",  # a later +=! starts over, a later += accumulates
    """def reinit_reduction(float(M,N) A, float(M,N) B) -> (O, P) {
        O(i) +=! A(i, j)
        O(i) +=! B(i, j)
        P(i) +=! A(i, j)
        P(i) += B(i, j)
    }""",
    lambda r, M=5, N=6: (f32(r, M, N), f32(r, M, N)),
    lambda A, B: (d(B).sum(1), d(A).sum(1) + d(B).sum(1)))
add("partial_reduction",  # explicit reduction range smaller than the tensor
    "def partial_reduction(float(M,N) A) -> (S) { S(i) +=! A(i, k) where k in 0:3 }",
    lambda r, M=7, N=8: (f32(r, M, N),),
    lambda A: d(A)[:, :3].sum(1))
add("half_range",  # a range bound divided by a constant
    "def half_range(float(N) A) -> (O) { O(i) = A(i + i) + A(i + i + 1) where i in 0:N/2 }",
    lambda r, N=13: (f32(r, N),),
    lambda A: d(A)[0:len(A) // 2 * 2:2] + d(A)[1:len(A) // 2 * 2:2])
add("modulo_subscript",
    "def modulo_subscript(float(3) A, float(N) B) -> (O) { O(i) = A(i % 3) * B(i) }",
    lambda r, N=10: (f32(r, 3), f32(r, N)),
    lambda A, B: d(np.resize(A, len(B))) * d(B))
add("max_nan_propagates",  # max=! takes a NaN and keeps it, as numpy's max
    "def max_nan_propagates(float(M,N) A) -> (m) { m(i) max=! A(i, j) }",
    lambda r, M=6, N=5: (np.where(r.random((M, N)) < 0.1, np.nan, f32(r, M, N))
                         .astype(np.float32),),
    lambda A: A.max(1))
add("int_minmax_identity",  # identities of min=!/max=! on integers
    """def int_minmax_identity(int32(M,N) A, uint8(M,N) B) -> (mx, mn) {
        mx(i) max=! A(i, j)
        mn(i) min=! B(i, j)
    }""",
    lambda r, M=5, N=7: (ints(r, M, N, lo=-2**31, hi=-2**31 + 20),
                         ints(r, M, N, lo=240, hi=255, dtype=np.uint8)),
    lambda A, B: (A.max(1), B.min(1)))
add("mixed_u8_i8",  # signed and unsigned 8-bit meet in int8 (TC's match_types)
    "def mixed_u8_i8(uint8(N) A, int8(N) B) -> (O) { O(i) = A(i) + B(i) }",
    lambda r, N=17: (ints(r, N, lo=0, hi=255, dtype=np.uint8),
                     ints(r, N, lo=-128, hi=127, dtype=np.int8)),
    lambda A, B: (A.astype(np.int64) + B).astype(np.int8))
add("widen_typed_output",
    "def widen_typed_output(float(N) A) -> (double(N) O) { O(i) = A(i) * A(i) }",
    lambda r, N=7: (f32(r, N),),
    lambda A: (A * A).astype(np.float64), rtol=0, atol=0)

def _minplus_ref(D0):
    D = d(D0).copy()
    n = D.shape[0]
    for i in range(n):
        for j in range(n):
            for k in range(n):
                D[i, j] = min(D[i, j], D[i, k] + D[k, j])
    return D


def _chol_like_ref(A0):
    A = A0.copy()
    n = A.shape[0]
    for i in range(n):
        for j in range(i + 1):
            for k in range(j):
                A[i, j] += -A[i, k] * A[j, k]
    return A


add("scan_cols_2d",  # recurrence along the outer dimension, parallel along the inner one
    """def scan_cols_2d(float(M,N) A) -> (S) {
        S(i, j) = A(i, j)
        S(i, j) = S(i - 1, j) + A(i, j) where i in 1:M
    }""",
    lambda r, M=9, N=6: (f32(r, M, N),),
    lambda A: np.cumsum(d(A), axis=0))
add("blur_chain_2d",  # producer/consumer with shifted reads (fusion needs a shift)
    """def blur_chain_2d(float(N,M) A) -> (O) {
        T(i, j) = A(i, j) + A(i + 1, j) + A(i, j + 1) where i in 0:N-1, j in 0:M-1
        O(i, j) = T(i, j) * T(i + 1, j + 1) where i in 0:N-2, j in 0:M-2
    }""",
    lambda r, N=9, M=8: (f32(r, N, M),),
    lambda A: (lambda T: T[:-1, :-1] * T[1:, 1:])(d(A)[:-1, :-1] + d(A)[1:, :-1] + d(A)[:-1, 1:]),
    rtol=1e-5, atol=1e-6)
add("minplus_inplace",  # min= reading the tensor it writes at other points
    """def minplus_inplace(float(N,N) D0) -> (D) {
        D(i, j) = D0(i, j)
        D(i, j) min= D(i, k) + D(k, j) where k in 0:N
    }""",
    lambda r, N=7: (f32(r, N, N, lo=0, hi=10),),
    _minplus_ref, rtol=1e-6, atol=1e-6)
add("cholesky_like",  # triangular in-place update, k innermost
    """def cholesky_like(double(N,N) A0) -> (A) {
        A(i, j) = A0(i, j)
        A(i, j) += -A(i, k) * A(j, k) where j in 0:i+1, k in 0:j
    }""",
    lambda r, N=8: (f64(r, N, N, lo=-0.5, hi=0.5),),
    _chol_like_ref, rtol=1e-12, atol=1e-12)
add("output_order",  # outputs come back in declaration order, not in the order written
    """def output_order(float(N) A) -> (second, first) {
        first(i) = A(i) + 1.0
        second(i) = first(i) * 2.0
    }""",
    lambda r, N=5: (f32(r, N),),
    lambda A: ((d(A) + 1) * 2, d(A) + 1))
add("contraction_perm",  # permuted 5-index contraction
    "def contraction_perm(float(D,A,E) X, float(C,E,D,B) Y) -> (Z) { Z(a, b, c) +=! X(d, a, e) * Y(c, e, d, b) }",
    lambda r, A=3, B=4, C=2, D=5, E=3: (f32(r, D, A, E), f32(r, C, E, D, B)),
    lambda X, Y: np.einsum("dae,cedb->abc", d(X), d(Y)), rtol=1e-5, atol=1e-5)

# math builtins ---------------------------------------------------------------------------------
add("unary_math",
    """def unary_math(float(N) A) -> (o_exp, o_log, o_tanh, o_sqrt, o_erf, o_log1p, o_expm1,
                                      o_floor, o_ceil, o_fabs) {
        o_exp(i) = exp(A(i))
        o_log(i) = log(A(i) * A(i) + 0.1)
        o_tanh(i) = tanh(A(i))
        o_sqrt(i) = sqrt(fabs(A(i)))
        o_erf(i) = erf(A(i))
        o_log1p(i) = log1p(fabs(A(i)))
        o_expm1(i) = expm1(A(i))
        o_floor(i) = floor(A(i) * 3.0)
        o_ceil(i) = ceil(A(i) * 3.0)
        o_fabs(i) = fabs(A(i))
    }""",
    lambda r, N=37: (f32(r, N, lo=-2, hi=2),),
    lambda A: (np.exp(d(A)), np.log(d(A * A) + 0.1), np.tanh(d(A)), np.sqrt(np.abs(d(A))),
               sps.erf(d(A)), np.log1p(np.abs(d(A))), np.expm1(d(A)),
               np.floor(A * np.float32(3)), np.ceil(A * np.float32(3)), np.abs(A)),
    rtol=1e-5, atol=1e-6)
add("binary_math",
    """def binary_math(float(N) A, float(N) B) -> (o_pow, o_fmax, o_fmin, o_min, o_max) {
        o_pow(i) = pow(A(i), B(i))
        o_fmax(i) = fmax(A(i), B(i))
        o_fmin(i) = fmin(A(i), B(i))
        o_min(i) = min(A(i), B(i) * 2.0)
        o_max(i) = max(A(i), B(i) * 2.0)
    }""",
    lambda r, N=23: (f32(r, N, lo=0.1, hi=3), f32(r, N, lo=-2, hi=2)),
    lambda A, B: (np.power(d(A), d(B)), np.maximum(A, B), np.minimum(A, B),
                  np.minimum(A, B * np.float32(2)), np.maximum(A, B * np.float32(2))),
    rtol=1e-5, atol=1e-6)
add("double_math",
    "def double_math(double(N) A) -> (O) { O(i) = exp(A(i)) + log(1.0 + A(i) * A(i)) - tanh(A(i)) }",
    lambda r, N=17: (f64(r, N, lo=-3, hi=3),),
    lambda A: np.exp(A) + np.log(1 + A * A) - np.tanh(A), rtol=1e-12, atol=1e-12)

# several defs in one text ---------------------------------------------------------------------
MULTI_DEF = """
def scale2(float(N) A) -> (O) { O(i) = 2.0 * A(i) }
def add_vec(float(N) A, float(N) B) -> (O) { O(i) = A(i) + B(i) }
def row_norm2(float(M,N) A) -> (O) { O(i) +=! A(i, j) * A(i, j) }
"""
add("multi_def_scale2", MULTI_DEF,
    lambda r, N=9: (f32(r, N),),
    lambda A: 2 * d(A), def_name="scale2")
add("multi_def_add_vec", MULTI_DEF,
    lambda r, N=9: (f32(r, N), f32(r, N)),
    lambda A, B: d(A) + d(B), def_name="add_vec")
add("multi_def_row_norm2", MULTI_DEF,
    lambda r, M=3, N=9: (f32(r, M, N),),
    lambda A: (d(A) ** 2).sum(1), def_name="row_norm2")

BY_NAME = {e.name: e for e in CATALOGUE}
assert len(BY_NAME) == len(CATALOGUE), "duplicate catalogue names"
