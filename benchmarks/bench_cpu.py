"""polytc against numpy, PyTorch (eager and torch.compile) and onnxruntime on the CPU.

    python benchmarks/bench_cpu.py [--only name,name] [--repeats N] [--tune-budget SECONDS]
                                   [--quick] [--in-process] [--targets c,opencl]
                                   [--isa avx2|sse]

One table: per kernel the median milliseconds of one whole call (inputs ready, output
allocated by the callee) of polytc with default options, polytc after ``polytc.autotune``
(when that exists and ``--tune-budget`` > 0), numpy (OpenBLAS for the matmuls), PyTorch
eager, ``torch.compile`` and onnxruntime, the best contender, polytc's time over the best,
and polytc's GFLOP/s (and GB/s of compulsory traffic for memory-bound kernels).  The fp32
peak of the machine, measured by ``benchmarks/peak.c``, is printed above it.

Every library runs in a persistent worker process of its own (polytc, numpy, torch eager,
torch.compile, onnxruntime), so their thread pools (torch's libgomp, the system libgomp
of polytc's kernels, OpenBLAS's, onnxruntime's) never share a process.  This process
generates the inputs, computes numpy's reference and interleaves the samples: in each
round it asks each worker in turn for one sample and waits for the answer, so one worker
runs at a time while the others block on their pipe.  ``--in-process`` times everything
in this one process instead (the old way, for comparison).

Every library runs on the thread count polytc's kernels use (POLYTC_NUM_THREADS /
OMP_NUM_THREADS, else every core).  Contenders are timed round-robin (see ``common``).
polytc's output, and every contender's, is checked against numpy's once per kernel
(allclose, rtol=atol=1e-3); a wrong result reads ``WRONG`` and is never timed; a
contender that raises, or whose worker dies, reads ``fail``.  torch and onnxruntime are
optional: their columns read ``n/a`` when they are not installed.

``--targets c,opencl`` (or ``c,cuda``) also runs every kernel on polytc's other targets,
each in a worker of its own, interleaved with the rest: the same TC and options through
``Kernel.to(target)``, timed as the whole call (numpy in, numpy out: upload, launches,
download) and as ``CompiledKernel.benchmark()`` (the launches alone, data in place; for
C the function alone).  A second table gives these times and each target's over C's.

``--isa avx2`` (or ``sse``) holds every library to a narrower vector ISA than the host's
(``ISAS``: polytc's ``POLYTC_ISA``, OpenBLAS's core type, PyTorch's CPU capability and
oneDNN's ISA; onnxruntime has no such switch and is left out) and measures the peak at
that width: an AVX2 machine's figures on an AVX-512 one.
"""
from __future__ import annotations

import argparse
import codecs
import collections
import math
import os
import pickle
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402

COLUMNS = ["kernel", "polytc", "tuned", "numpy", "torch", "torch.compile", "ort", "best",
           "polytc/best", "tuned/best", "GFLOP/s", "GB/s", "1T polytc", "1T best", "1T ratio"]
CONTENDERS = ["numpy", "torch", "torch.compile", "ort"]  # what "best" is the best of
#: the families timed on one thread too (the "1T" columns; torch.compile's compile is
#: too slow to pay for twice)
SINGLE = ["polytc", "numpy", "torch", "ort"]
RTOL = ATOL = 1e-3


@dataclass
class Bench:
    name: str
    tc: str
    inputs: callable            # rng -> [arrays], in the TC signature's order
    names: list                 # the inputs' names in the ONNX graph
    numpy: callable             # (*arrays) -> array or tuple of arrays
    torch: callable | None      # (*tensors) -> tensor or tuple
    onnx: callable | None       # (*arrays) -> (nodes, opset); outputs named Y0, Y1, ...
    flops: callable             # (*arrays) -> flop count
    membound: bool = False      # print GB/s of compulsory traffic
    repeats: int | None = None  # at most this many samples (large naive kernels)
    quick: bool = True          # part of --quick
    sizes: str = ""


def f32(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def scalar(x):
    return np.array(x, np.float32)


# --- the kernels ------------------------------------------------------------------------

MATMUL = """
def sgemm(float(M,K) A, float(K,N) B) -> (C) {
    C(m, n) +=! A(m, k) * B(k, n)
}"""

MATMUL_NT = """
def sgemm_nt(float(M,K) A, float(N,K) B) -> (C) {
    C(m, n) +=! A(m, k) * B(n, k)
}"""

QKT = """
def qkt(float(B,S,D) Q, float(B,T,D) K) -> (P) {
    P(b, s, t) +=! Q(b, s, d) * K(b, t, d)
}"""

GEVM = """
def gevm(float(K,N) A, float(K) x) -> (y) {
    y(n) +=! x(k) * A(k, n)
}"""

GEMV = """
def gemv(float(M,K) A, float(K) x) -> (y) {
    y(m) +=! A(m, k) * x(k)
}"""

BMM = """
def bmm(float(B,M,K) X, float(B,K,N) Y) -> (Z) {
    Z(b, m, n) +=! X(b, m, k) * Y(b, k, n)
}"""

MM_BIAS_RELU = """
def mm_bias_relu(float(M,K) X, float(K,N) W, float(N) b) -> (O) {
    T(m, n) +=! X(m, k) * W(k, n)
    O(m, n) = fmax(T(m, n) + b(n), 0.0)
}"""

MLP2 = """
def mlp2(float(B,D) X, float(D,H) W1, float(H) b1, float(H,E) W2, float(E) b2) -> (Y) {
    T1(i, h) +=! X(i, d) * W1(d, h)
    A1(i, h) = fmax(T1(i, h) + b1(h), 0.0)
    T2(i, e) +=! A1(i, h) * W2(h, e)
    Y(i, e) = T2(i, e) + b2(e)
}"""

SOFTMAX = """
def softmax(float(N,D) X) -> (Y) {
    mx(n) max=! X(n, d)
    ex(n, d) = exp(X(n, d) - mx(n))
    s(n) +=! ex(n, d)
    Y(n, d) = ex(n, d) / s(n)
}"""

LAYERNORM = """
def layernorm(float(N,D) X, float(D) gamma, float(D) beta) -> (Y) {
    mean(n) +=! X(n, d) / D
    xc(n, d) = X(n, d) - mean(n)
    var(n) +=! xc(n, d) * xc(n, d) / D
    Y(n, d) = xc(n, d) * rsqrt(var(n) + 1e-5) * gamma(d) + beta(d)
}"""

CONV2D = """
def conv2d(float(N,C,H,W) I, float(F,C,KH,KW) Wt) -> (O) {
    O(n, f, h, w) +=! I(n, c, h + kh, w + kw) * Wt(f, c, kh, kw)
}"""

# the input is N x (G*CG) x H x W seen as N x G x CG x H x W (the same memory)
GROUPNORM = """
def groupnorm(float(N,G,CG,H,W) X, float(G,CG) gamma, float(G,CG) beta) -> (Y) {
    mean(n, g) +=! X(n, g, c, h, w) / (CG * H * W)
    xc(n, g, c, h, w) = X(n, g, c, h, w) - mean(n, g)
    var(n, g) +=! xc(n, g, c, h, w) * xc(n, g, c, h, w) / (CG * H * W)
    Y(n, g, c, h, w) = xc(n, g, c, h, w) * rsqrt(var(n, g) + 1e-5) * gamma(g, c) + beta(g, c)
}"""

# Y(m, i0, i1) = sum_{j0, j1} W0(i0, j0) W1(i1, j1) X(m, j0, j1), factored as TC's
# kronecker benchmarks are (one contraction per factor); j0/j1 are Bessel builtins in TC,
# so the summed indices are b0/b1
KRON2 = """
def kron2(float(I0,J0) W0, float(I1,J1) W1, float(M,J0,J1) X) -> (Y) {
    T(m, i0, b1) +=! W0(i0, b0) * X(m, b0, b1)
    Y(m, i0, i1) +=! T(m, i0, b1) * W1(i1, b1)
}"""

MM2 = """
def mm2(float alpha, float beta, float(NI,NK) A, float(NK,NJ) B, float(NJ,NL) C, float(NI,NL) D) -> (O) {
    tmp(i, j) +=! alpha * A(i, k) * B(k, j)
    O(i, l) +=! tmp(i, j) * C(j, l)
    O(i, l) = O(i, l) + beta * D(i, l)
}"""

MM3 = """
def mm3(float(NI,NK) A, float(NK,NJ) B, float(NJ,NM) C, float(NM,NL) D) -> (G) {
    E(i, j) +=! A(i, k) * B(k, j)
    F(j, l) +=! C(j, m) * D(m, l)
    G(i, l) +=! E(i, j) * F(j, l)
}"""

ATAX = """
def atax(float(M,N) A, float(N) x) -> (y) {
    tmp(i) +=! A(i, j) * x(j)
    y(j) +=! A(i, j) * tmp(i)
}"""

BICG = """
def bicg(float(N,M) A, float(N) r, float(M) p) -> (s, q) {
    s(j) +=! r(i) * A(i, j)
    q(i) +=! A(i, j) * p(j)
}"""


def _node(op, ins, outs, **attrs):
    from onnx import helper

    return helper.make_node(op, ins, outs, **attrs)


def _conv_numpy(I, W):
    win = np.lib.stride_tricks.sliding_window_view(I, W.shape[2:], axis=(2, 3))
    # win: N, C, OH, OW, KH, KW; contract C, KH, KW with W's (the BLAS does it)
    return np.ascontiguousarray(np.tensordot(win, W, axes=([1, 4, 5], [1, 2, 3]))
                                .transpose(0, 3, 1, 2))


def _layernorm_numpy(X, g, b):
    mean = X.mean(1, keepdims=True)
    xc = X - mean
    var = (xc * xc).mean(1, keepdims=True)
    return xc / np.sqrt(var + np.float32(1e-5)) * g + b


def _groupnorm_numpy(X, g, b):
    xg = X.reshape(X.shape[0], X.shape[1], -1)
    mean = xg.mean(2, keepdims=True)
    xc = xg - mean
    var = (xc * xc).mean(2, keepdims=True)
    y = (xc / np.sqrt(var + np.float32(1e-5))).reshape(X.shape)
    return y * g[None, :, :, None, None] + b[None, :, :, None, None]


def _softmax_numpy(X):
    e = np.exp(X - X.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def _t():
    import torch

    return torch


def _tnn():
    import torch.nn.functional as F

    return F


def _onnx_groupnorm(X, g, b):
    # LayerNormalization over the flattened group (axis 2 of N x G x CG*H*W), then the
    # per-channel affine: the same math as GroupNormalization-21 with per-channel scale
    from onnx import TensorProto, helper

    N, G, CG, H, W = X.shape
    shape1 = helper.make_tensor("s1", TensorProto.INT64, [3], [N, G, CG * H * W])
    shape2 = helper.make_tensor("s2", TensorProto.INT64, [5], [N, G, CG, H, W])
    ones = helper.make_tensor("one", TensorProto.FLOAT, [CG * H * W], [1.0] * (CG * H * W))
    g5 = helper.make_tensor("g5", TensorProto.INT64, [5], [1, G, CG, 1, 1])
    nodes = [
        _node("Constant", [], ["S1"], value=shape1),
        _node("Constant", [], ["S2"], value=shape2),
        _node("Constant", [], ["ONE"], value=ones),
        _node("Constant", [], ["G5"], value=g5),
        _node("Reshape", ["X", "S1"], ["Xg"]),
        _node("LayerNormalization", ["Xg", "ONE"], ["Yg"], axis=2, epsilon=1e-5),
        _node("Reshape", ["Yg", "S2"], ["Y5"]),
        _node("Reshape", ["gamma", "G5"], ["gm"]),
        _node("Reshape", ["beta", "G5"], ["bt"]),
        _node("Mul", ["Y5", "gm"], ["Ys"]),
        _node("Add", ["Ys", "bt"], ["Y0"]),
    ]
    return nodes, 18


def benches() -> list:
    b = []

    def mm_flops(A, B):
        return 2 * A.shape[0] * A.shape[1] * B.shape[1]

    for n, reps, quick in ((1024, None, True), (2048, 3, False)):
        b.append(Bench(
            f"sgemm{n}", MATMUL, lambda r, n=n: [f32(r, n, n), f32(r, n, n)], ["A", "B"],
            lambda A, B: A @ B, lambda A, B: _t().matmul(A, B),
            lambda A, B: ([_node("MatMul", ["A", "B"], ["Y0"])], 18), mm_flops,
            repeats=reps, quick=quick, sizes=f"M=N=K={n}"))
    b.append(Bench(
        "sgemm_nt", MATMUL_NT, lambda r: [f32(r, 1024, 1024), f32(r, 1024, 1024)], ["A", "B"],
        lambda A, B: A @ B.T, lambda A, B: _t().matmul(A, B.T),
        lambda A, B: ([_node("Gemm", ["A", "B"], ["Y0"], transB=1)], 18),
        lambda A, B: 2 * A.shape[0] * A.shape[1] * B.shape[0], sizes="A B^T, M=N=K=1024"))
    b.append(Bench(
        "tall_skinny", MATMUL, lambda r: [f32(r, 8192, 256), f32(r, 256, 64)], ["A", "B"],
        lambda A, B: A @ B, lambda A, B: _t().matmul(A, B),
        lambda A, B: ([_node("MatMul", ["A", "B"], ["Y0"])], 18), mm_flops,
        sizes="M=8192 K=256 N=64"))
    b.append(Bench(
        "qkt", QKT, lambda r: [f32(r, 16, 256, 64), f32(r, 16, 256, 64)], ["Q", "K"],
        lambda Q, K: np.matmul(Q, K.transpose(0, 2, 1)),
        lambda Q, K: _t().bmm(Q, K.transpose(1, 2)),
        lambda Q, K: ([_node("Einsum", ["Q", "K"], ["Y0"], equation="bsd,btd->bst")], 18),
        lambda Q, K: 2 * Q.shape[0] * Q.shape[1] * K.shape[1] * Q.shape[2],
        sizes="batched Q K^T, B=16 S=T=256 D=64"))
    b.append(Bench(
        "gemv", GEMV, lambda r: [f32(r, 4096, 4096), f32(r, 4096)], ["A", "x"],
        lambda A, x: A @ x, lambda A, x: _t().mv(A, x),
        lambda A, x: ([_node("MatMul", ["A", "x"], ["Y0"])], 18),
        lambda A, x: 2 * A.size, membound=True, sizes="M=K=4096"))
    b.append(Bench(
        "gevm", GEVM, lambda r: [f32(r, 4096, 4096), f32(r, 4096)], ["A", "x"],
        lambda A, x: x @ A, lambda A, x: _t().mv(A.t(), x),
        lambda A, x: ([_node("MatMul", ["x", "A"], ["Y0"])], 18),
        lambda A, x: 2 * A.size, membound=True, sizes="x A, K=N=4096"))
    b.append(Bench(
        "bmm", BMM, lambda r: [f32(r, 64, 128, 128), f32(r, 64, 128, 128)], ["X", "Y"],
        np.matmul, lambda X, Y: _t().bmm(X, Y),
        lambda X, Y: ([_node("MatMul", ["X", "Y"], ["Y0"])], 18),
        lambda X, Y: 2 * X.shape[0] * X.shape[1] * X.shape[2] * Y.shape[2],
        sizes="B=64 M=N=K=128"))
    b.append(Bench(
        "mm_bias_relu", MM_BIAS_RELU,
        lambda r: [f32(r, 512, 1024), f32(r, 1024, 1024, scale=1 / 32), f32(r, 1024)],
        ["X", "W", "b"],
        lambda X, W, bb: np.maximum(X @ W + bb, np.float32(0)),
        lambda X, W, bb: _t().relu(_t().addmm(bb, X, W)),
        lambda X, W, bb: ([_node("Gemm", ["X", "W", "b"], ["G"]),
                           _node("Relu", ["G"], ["Y0"])], 18),
        lambda X, W, bb: 2 * X.shape[0] * X.shape[1] * W.shape[1] + 2 * X.shape[0] * W.shape[1],
        sizes="M=512 K=N=1024"))
    b.append(Bench(
        "mlp2", MLP2,
        lambda r: [f32(r, 128, 1024), f32(r, 1024, 1024, scale=1 / 32), f32(r, 1024),
                   f32(r, 1024, 1024, scale=1 / 32), f32(r, 1024)],
        ["X", "W1", "b1", "W2", "b2"],
        lambda X, W1, b1, W2, b2: np.maximum(X @ W1 + b1, np.float32(0)) @ W2 + b2,
        lambda X, W1, b1, W2, b2: _t().addmm(b2, _t().relu(_t().addmm(b1, X, W1)), W2),
        lambda *a: ([_node("Gemm", ["X", "W1", "b1"], ["G1"]), _node("Relu", ["G1"], ["R1"]),
                     _node("Gemm", ["R1", "W2", "b2"], ["Y0"])], 18),
        lambda X, W1, b1, W2, b2: (2 * X.shape[0] * X.shape[1] * W1.shape[1]
                                   + 2 * X.shape[0] * W1.shape[1] * W2.shape[1]
                                   + 3 * X.shape[0] * W1.shape[1]),
        sizes="batch 128, 1024->1024 (ReLU) ->1024"))
    b.append(Bench(
        "softmax", SOFTMAX, lambda r: [f32(r, 4096, 1024, scale=3)], ["X"], _softmax_numpy,
        lambda X: _t().softmax(X, 1),
        lambda X: ([_node("Softmax", ["X"], ["Y0"], axis=1)], 18),
        lambda X: 5 * X.size, membound=True, sizes="4096x1024, rows"))
    b.append(Bench(
        "layernorm", LAYERNORM, lambda r: [f32(r, 4096, 1024), f32(r, 1024), f32(r, 1024)],
        ["X", "gamma", "beta"], _layernorm_numpy,
        lambda X, g, bb: _tnn().layer_norm(X, (X.shape[1],), g, bb, 1e-5),
        lambda *a: ([_node("LayerNormalization", ["X", "gamma", "beta"], ["Y0"], axis=1,
                           epsilon=1e-5)], 17),
        lambda X, g, bb: 8 * X.size, membound=True, sizes="4096x1024, rows"))
    b.append(Bench(
        "conv2d", CONV2D, lambda r: [f32(r, 1, 64, 58, 58), f32(r, 64, 64, 3, 3, scale=1 / 24)],
        ["I", "Wt"], _conv_numpy, lambda I, W: _tnn().conv2d(I, W),
        lambda *a: ([_node("Conv", ["I", "Wt"], ["Y0"], kernel_shape=[3, 3])], 18),
        lambda I, W: (2 * I.shape[0] * W.shape[0] * (I.shape[2] - 2) * (I.shape[3] - 2)
                      * W.shape[1] * W.shape[2] * W.shape[3]),
        sizes="1x64x58x58 * 64x64x3x3 -> 56x56 (valid)"))
    b.append(Bench(
        "groupnorm", GROUPNORM,
        lambda r: [f32(r, 16, 8, 8, 32, 32), f32(r, 8, 8), f32(r, 8, 8)],
        ["X", "gamma", "beta"], _groupnorm_numpy,
        lambda X, g, bb: _tnn().group_norm(X.reshape(X.shape[0], -1, *X.shape[3:]),
                                           X.shape[1], g.reshape(-1), bb.reshape(-1),
                                           1e-5).reshape(X.shape),
        _onnx_groupnorm, lambda X, g, bb: 8 * X.size, membound=True,
        sizes="16x64x32x32, 8 groups"))
    b.append(Bench(
        "kron2", KRON2,
        lambda r: [f32(r, 32, 32, scale=0.2), f32(r, 32, 32, scale=0.2), f32(r, 256, 32, 32)],
        ["W0", "W1", "X"],
        lambda W0, W1, X: np.matmul(np.matmul(W0, X), W1.T),
        lambda W0, W1, X: _t().matmul(_t().matmul(W0, X), W1.t()),
        lambda *a: ([_node("Einsum", ["W0", "X"], ["T"], equation="ij,mjl->mil"),
                     _node("Einsum", ["T", "W1"], ["Y0"], equation="mil,kl->mik")], 18),
        lambda W0, W1, X: 2 * X.shape[0] * W0.shape[0] * X.shape[1] * X.shape[2]
        + 2 * X.shape[0] * W0.shape[0] * X.shape[2] * W1.shape[0],
        sizes="M=256, 32x32 factors"))
    n = 1024  # (every lambda below binds its n as a default: n changes further down)
    b.append(Bench(
        "2mm", MM2,
        lambda r, n=n: [scalar(1.5), scalar(1.2), f32(r, n, n, scale=1 / 32), f32(r, n, n),
                        f32(r, n, n, scale=1 / 32), f32(r, n, n)],
        ["alpha", "beta", "A", "B", "C", "D"],
        lambda al, be, A, B, C, D: (al * (A @ B)) @ C + be * D,
        lambda al, be, A, B, C, D: _t().addmm(be * D, al * (A @ B), C),
        lambda *a: ([_node("MatMul", ["A", "B"], ["AB"]), _node("Mul", ["AB", "alpha"], ["T"]),
                     _node("MatMul", ["T", "C"], ["TC"]), _node("Mul", ["D", "beta"], ["bD"]),
                     _node("Add", ["TC", "bD"], ["Y0"])], 18),
        lambda al, be, A, B, C, D: (2 * A.shape[0] * A.shape[1] * B.shape[1]
                                    + 2 * A.shape[0] * B.shape[1] * C.shape[1]
                                    + 3 * D.size),
        sizes="NI=NJ=NK=NL=1024"))
    b.append(Bench(
        "3mm", MM3, lambda r, n=n: [f32(r, n, n, scale=1 / 32) for _ in range(4)],
        ["A", "B", "C", "D"],
        lambda A, B, C, D: (A @ B) @ (C @ D),
        lambda A, B, C, D: (A @ B) @ (C @ D),
        lambda *a: ([_node("MatMul", ["A", "B"], ["E"]), _node("MatMul", ["C", "D"], ["F"]),
                     _node("MatMul", ["E", "F"], ["Y0"])], 18),
        lambda A, B, C, D: 2 * (A.shape[0] * A.shape[1] * B.shape[1]
                                + C.shape[0] * C.shape[1] * D.shape[1]
                                + A.shape[0] * B.shape[1] * D.shape[1]),
        sizes="all 1024"))
    n = 2048
    b.append(Bench(
        "atax", ATAX, lambda r, n=n: [f32(r, n, n, scale=1 / 45), f32(r, n)], ["A", "x"],
        lambda A, x: (A @ x) @ A,
        lambda A, x: (A @ x) @ A,
        lambda *a: ([_node("MatMul", ["A", "x"], ["T"]), _node("MatMul", ["T", "A"], ["Y0"])],
                    18),
        lambda A, x: 4 * A.size, membound=True, sizes="M=N=2048"))
    b.append(Bench(
        "bicg", BICG, lambda r, n=n: [f32(r, n, n), f32(r, n), f32(r, n)], ["A", "r", "p"],
        lambda A, rr, p: (rr @ A, A @ p),
        lambda A, rr, p: (rr @ A, A @ p),
        lambda *a: ([_node("MatMul", ["r", "A"], ["Y0"]), _node("MatMul", ["A", "p"], ["Y1"])],
                    18),
        lambda A, rr, p: 4 * A.size, membound=True, sizes="N=M=2048"))
    return b


# --- contenders -------------------------------------------------------------------------

# a family is one library; each runs in a worker process of its own (one process for
# both polytc columns), in this order (the order of the columns)
FAMILIES = {"polytc": ["polytc", "tuned"], "numpy": ["numpy"], "torch": ["torch"],
            "torch.compile": ["torch.compile"], "ort": ["ort"]}
MODULES = {"polytc": "polytc", "numpy": "numpy", "torch": "torch", "torch.compile": "torch",
           "ort": "onnxruntime"}
# --targets: polytc's accelerator targets, each a family of its own ("polytc.opencl"), in a
# worker of its own (PoCL's thread pool never shares a process with libgomp's)
ACCEL_TARGETS = ("opencl", "cuda")


def families(targets=("c",)) -> dict:
    """FAMILIES plus, for every accelerator target in ``targets``, a family
    ``polytc.<target>`` with the columns ``<target>`` (the whole call, numpy in and out)
    and ``<target> launch`` (``CompiledKernel.benchmark()``: the launches alone, data on
    the device); then the C family also gets ``c launch``.  ``("c",)``: FAMILIES."""
    accel = [t for t in targets if t != "c"]
    fams = dict(FAMILIES)
    if accel:
        fams["polytc"] = FAMILIES["polytc"] + ["c launch"]
        for t in accel:
            fams[f"polytc.{t}"] = [t, f"{t} launch"]
    return fams


def accel_target(family: str) -> str | None:
    """``opencl`` for the family ``polytc.opencl``; None for the others."""
    return family.split(".", 1)[1] if family.startswith("polytc.") else None


def as_tuple(x):
    if isinstance(x, (tuple, list)):
        return tuple(x)
    return (x,)


def to_numpy(x):
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "detach"):  # a torch tensor
        return x.detach().cpu().numpy()
    return np.asarray(x)


def check(out, ref) -> str | None:
    """None when ``out`` matches ``ref`` (allclose, rtol=atol=1e-3), else why not."""
    outs, refs = as_tuple(out), as_tuple(ref)
    if len(outs) != len(refs):
        return f"{len(outs)} outputs, expected {len(refs)}"
    for o, r in zip(outs, refs):
        o = to_numpy(o)
        if o.shape != r.shape:
            return f"shape {o.shape}, expected {r.shape}"
        if not np.allclose(o, r, rtol=RTOL, atol=ATOL):
            err = np.abs(o.astype(np.float64) - r)
            return f"max abs error {np.nanmax(err):.3g} (max |ref| {np.abs(r).max():.3g})"
    return None


def onnx_session(bench, arrays, refs, threads):
    import onnxruntime as ort
    from onnx import helper

    nodes, opset = bench.onnx(*arrays)
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in zip(bench.names, arrays)]
    outs = [helper.make_tensor_value_info(f"Y{i}", helper.np_dtype_to_tensor_dtype(r.dtype),
                                          r.shape) for i, r in enumerate(refs)]
    graph = helper.make_graph(nodes, bench.name, ins, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 9)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    feeds = dict(zip(bench.names, arrays))
    run = sess.run

    def call():
        out = run(None, feeds)
        return out[0] if len(out) == 1 else tuple(out)

    return call


def tuned_kernel(polytc, k, arrays, budget):
    """``polytc.autotune``'s result as a kernel: it may return a kernel, options, or a
    tuple holding one of them."""
    res = polytc.autotune(k, *arrays, budget=budget)
    for cand in (res if isinstance(res, (tuple, list)) else (res,)):
        if isinstance(cand, polytc.Kernel):
            return cand
        if isinstance(cand, polytc.Options):
            return k.with_options(cand)
        if callable(cand):
            return cand
    if res is None:
        return k
    raise TypeError(f"polytc.autotune returned {type(res).__name__}")


short = common.short


#: ``--isa``: the environment that narrows each library's vector ISA (onnxruntime has no
#: such switch: it is left out)
ISAS = {"avx2": {"POLYTC_ISA": "avx2", "OPENBLAS_CORETYPE": "Haswell",
                 "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
        "sse": {"POLYTC_ISA": "sse", "OPENBLAS_CORETYPE": "Nehalem",
                "ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41"}}


def init_family(family, threads) -> str:
    """Import a family's library and set its thread count; its version.  ImportError
    when it is not installed (or, under ``--isa``, cannot be narrowed)."""
    if family == "ort" and os.environ.get("POLYTC_ISA"):
        raise ImportError("onnxruntime cannot be held to a narrower ISA (--isa)")
    target = accel_target(family)
    if target is not None:
        return init_target(target, threads)
    mod = __import__(MODULES[family])
    if family in ("torch", "torch.compile"):
        mod.set_num_threads(threads)
        mod.set_grad_enabled(False)  # inference: no autograd bookkeeping in the timings
    return getattr(mod, "__version__", "?")


def init_target(target: str, threads: int) -> str:
    """Start polytc's ``target`` runtime (pyopencl and its device, the CUDA driver and
    the GPU); the version line: pyopencl's (or the driver's) and the device.  ImportError
    when the target cannot run here (no package, no device)."""
    if target == "opencl" and not os.environ.get("POCL_MAX_PTHREAD_COUNT"):
        # PoCL's CPU device starts one thread per core; the same count as everyone else
        os.environ["POCL_MAX_PTHREAD_COUNT"] = str(threads)
    import polytc
    from polytc.backends import get as backend

    try:
        be = backend(target)
        dev = be.device()
    except polytc.PolytcError as e:
        raise ImportError(f"polytc target {target}: {short(e)}") from None
    if target == "opencl":
        import pyopencl
        ver = pyopencl.VERSION_TEXT
    else:
        ver = be.cache_facts()["device"]["driver"]
    return f"{ver} on {dev.name}"


class LaunchTimer:
    """A contender timed by ``CompiledKernel.benchmark()``: the kernel's launches (or the
    C function) alone, inputs already in place, outputs preallocated, no checks.  A
    sample of ``inner`` calls is the median of ``inner`` launches after one warm-up
    launch (``benchmark`` times each launch itself); ``quiet``: ``settle`` first (only
    in --in-process mode; workers settle after every answer)."""

    def __init__(self, compiled, arrays, quiet: bool = False):
        self.compiled, self.arrays, self.quiet = compiled, arrays, quiet

    def once(self) -> float:
        return self.sample(1)

    def sample(self, inner: int) -> float:
        if self.quiet:
            common.settle()
        return self.compiled.benchmark(*self.arrays, repeat=inner, warmup=1)["median"]


def setup_family(family, bench, arrays, refs, threads, tune_budget=0.0, verbose=False,
                 launch=False, quiet=False):
    """Build a family's contenders for one kernel, run each once (warm-up, JIT compile)
    and check its output.  Returns (column -> callable to time, or a ``LaunchTimer``;
    column -> marker string instead of a time; notes).  ``launch``: the polytc families
    add their ``<target> launch`` column (``quiet``: its ``settle``, in-process)."""
    calls, cells, notes = {}, {}, []

    def add(col, make):
        t0 = time.perf_counter()
        try:
            fn = make()
            out = fn()
        except Exception as e:  # noqa: BLE001 -- a contender that fails is reported
            cells[col] = "fail"
            notes.append(f"{bench.name} {col}: {short(e)}")
            return
        why = check(out, refs)
        if why is not None:
            cells[col] = "WRONG"
            notes.append(f"{bench.name} {col}: WRONG, {why}")
            return
        calls[col] = fn
        if verbose:
            print(f"  {bench.name} {col}: ready in {time.perf_counter() - t0:.2f}s",
                  file=sys.stderr)

    if family == "polytc":
        import polytc

        kern = {}

        def make_default():
            kern["k"] = k = polytc.tc(bench.tc)
            k.specialize(*arrays)  # compile (or load from the disk cache)
            return lambda: k(*arrays)

        add("polytc", make_default)
        if launch and "polytc" in calls:
            calls["c launch"] = LaunchTimer(kern["k"].specialize(*arrays), arrays, quiet)
        elif launch:
            cells["c launch"] = cells["polytc"]
        if tune_budget > 0 and hasattr(polytc, "autotune"):
            def make_tuned():
                kt = tuned_kernel(polytc, kern.get("k") or polytc.tc(bench.tc), arrays,
                                  tune_budget)
                return lambda: kt(*arrays)

            add("tuned", make_tuned)
        else:
            cells["tuned"] = "-"
    elif accel_target(family) is not None:
        import polytc

        target = accel_target(family)
        kern = {}

        def make_target():
            # the same kernel as the polytc column's, on another target
            kern["k"] = k = polytc.tc(bench.tc).to(target)
            k.specialize(*arrays)  # compile (or load from the disk cache)
            return lambda: k(*arrays)

        add(target, make_target)
        col = f"{target} launch"
        if target in calls:
            calls[col] = LaunchTimer(kern["k"].specialize(*arrays), arrays, quiet)
        else:
            cells[col] = cells.get(target, "fail")
    elif family == "numpy":
        add("numpy", lambda: (lambda: bench.numpy(*arrays)))
    elif family in ("torch", "torch.compile"):
        if bench.torch is None:
            cells[family] = "n/a"
        else:
            import torch

            tens = [torch.from_numpy(a) for a in arrays]
            fn = bench.torch

            def eager():
                return lambda: fn(*tens)

            def compiled():
                torch._dynamo.reset()
                c = torch.compile(fn, dynamic=False)
                return lambda: c(*tens)

            add(family, eager if family == "torch" else compiled)
    elif family == "ort":
        if bench.onnx is None:
            cells["ort"] = "n/a"
        else:
            add("ort", lambda: onnx_session(bench, arrays, refs, threads))
    else:
        raise ValueError(f"unknown family {family!r}")
    return calls, cells, notes


# --- worker processes -------------------------------------------------------------------
#
# The parent sends pickled requests on a worker's stdin and reads pickled answers on its
# stdout (the worker points its fd 1 at stderr, so what libraries print cannot corrupt
# the answers):
#   (at start)                        <- ("hello", version) | ("missing", why)
#   ("setup", kernel, arrays, refs, opts) -> ("ok", ready columns, cells, notes)
#   ("once", column)                  -> ("ok", seconds of one call)
#   ("sample", column, inner)         -> ("ok", seconds per call over inner calls)
#                                        (a LaunchTimer column: the median launch time)
#   ("quit",)
# Any request may be answered ("error", why).  Before answering a request that ran the
# kernel the worker waits until its own threads stop spinning (common.settle), so the
# next worker starts on an idle machine.

class WorkerError(Exception):
    pass


# glibc's malloc serves big blocks with mmap and adapts its threshold to the blocks freed
# so far, and gives memory back to the system past another threshold that adapts too:
# whether a call's 4 MB output (or polytc's aligned copy of an input) reuses freed memory
# or takes ~1000 fresh page faults depends on what the process did before.  Measured:
# polytc's sgemm1024 10.5 ms in one process, 13-16 ms in another with the same code.
# Workers fix both thresholds (as a long-running process that reuses its memory sees it)
# unless --default-malloc.
MALLOC_MMAP_THRESHOLD = 32 << 20  # glibc's largest; the kernels' arrays are at most 16 MB
MALLOC_TRIM_THRESHOLD = 1 << 30


def steady_malloc() -> bool:
    """Set glibc's mmap and trim thresholds (see above); False where there is no mallopt."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(mallopt(m_mmap_threshold, MALLOC_MMAP_THRESHOLD)
                and mallopt(m_trim_threshold, MALLOC_TRIM_THRESHOLD))


def placed(a: np.ndarray, offset: int) -> np.ndarray:
    """A copy of ``a`` in a fresh buffer whose address is ``offset`` modulo 64.  polytc
    copies contraction inputs that are not 64-byte aligned (16 MB a call for atax), so
    where an input lies matters: the inputs are placed at --input-offset, and a worker
    places its copies as the parent's arrays are."""
    if a.ndim == 0 or a.nbytes == 0:
        return np.array(a, copy=True)
    buf = np.empty(a.nbytes + 64, np.uint8)
    off = (offset - buf.ctypes.data) % 64
    out = buf[off:off + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def worker_main(family: str, threads: int, malloc: bool = True) -> int:
    """The loop of a worker process (see above)."""
    if malloc:
        steady_malloc()
    send, receive = common.worker_channel()

    try:
        version = init_family(family, threads)
    except ImportError as e:
        send(("missing", short(e)))
        return 0
    except Exception as e:  # noqa: BLE001 -- a broken install
        send(("error", short(e)))
        return 1
    send(("hello", version))
    by_name = {b.name: b for b in benches()}
    calls: dict = {}
    quiet = True
    for msg in receive():
        op = msg[0]
        try:
            if op == "setup":
                _, name, arrays, refs, opts = msg
                calls = {}
                # unpickled arrays live inside the pickle's buffer: copy them to the
                # parent's alignment
                arrays = [placed(a, off) for a, off in zip(arrays, opts["offsets"])]
                msg = None
                quiet = opts.get("quiet", True)
                calls, cells, notes = setup_family(
                    family, by_name[name], arrays, refs, threads,
                    opts.get("tune_budget", 0.0), opts.get("verbose", False),
                    opts.get("launch", False))
                reply = ("ok", list(calls), cells, notes)
            elif op == "once":
                fn = calls[msg[1]]
                reply = ("ok", fn.once() if isinstance(fn, LaunchTimer)
                         else common.time_once(fn))
            elif op == "sample":
                fn = calls[msg[1]]
                reply = ("ok", fn.sample(msg[2]) if isinstance(fn, LaunchTimer)
                         else common.time_sample(fn, msg[2]))
            else:
                reply = ("error", f"unknown request {op!r}")
            if quiet:
                common.settle()
        except Exception as e:  # noqa: BLE001 -- answered, the parent reports it
            reply = ("error", short(e))
        send(reply)
    return 0


class Worker:
    """The parent's handle on one family's worker process."""

    def __init__(self, family: str, threads: int, malloc: bool = True):
        self.family, self.threads, self.malloc = family, threads, malloc
        self.proc = None
        self.version = None   # after hello
        self.missing = None   # why the library is not installed
        self.tail = collections.deque(maxlen=20)  # the worker's last stderr lines

    def code(self) -> str:
        """The worker process's program."""
        return (f"import bench_cpu; sys.exit(bench_cpu.worker_main({self.family!r}, "
                f"{self.threads}, {self.malloc}))")

    def start(self):
        self.tail.clear()
        env = dict(os.environ)  # every thread pool at the worker's count, before imports
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "POLYTC_NUM_THREADS"):
            env[var] = str(self.threads)
        self.proc = subprocess.Popen(common.child_command(HERE, self.code()),
                                     stdin=subprocess.PIPE, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # forward the worker's stderr (warnings, autotune's progress) and keep its tail
        threading.Thread(target=self._forward, args=(self.proc.stderr,),
                         daemon=True).start()

    def _forward(self, pipe):
        fd, last = pipe.fileno(), ""
        decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode
        while True:  # chunks, not lines: progress bars that redraw with \r stay live
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            text = decode(chunk)
            sys.stderr.write(text)
            sys.stderr.flush()
            lines = (last + text).replace("\r", "\n").split("\n")
            last = lines.pop()
            self.tail.extend(ln for ln in lines if ln.strip())
        if last.strip():
            self.tail.append(last)

    def hello(self):
        """Wait for the worker's first message (after its imports)."""
        try:
            kind, what = self._recv(300)
        except WorkerError as e:
            self.version, self.missing = None, None
            raise WorkerError(f"{self.family} worker did not start: {e}") from None
        if kind == "hello":
            self.version = what
        elif kind == "missing":
            self.missing = what
            self._reap()
        else:
            self._reap()
            raise WorkerError(f"{self.family}: {what}")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def call(self, msg, timeout: float | None):
        """Send one request, return its answer's payload; WorkerError when the worker
        answers an error, dies or does not answer within ``timeout`` seconds (then it is
        killed: it is started again for the next kernel)."""
        if self.proc is None:
            raise WorkerError(f"{self.family} worker was not started")
        if self.proc.poll() is not None:
            raise WorkerError(self._death())
        try:
            pickle.dump(msg, self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise WorkerError(self._death()) from None
        reply = self._recv(timeout)
        if reply[0] == "error":
            raise WorkerError(reply[1])
        return reply[1:] if len(reply) > 2 else reply[1]

    def _recv(self, timeout):
        fd = self.proc.stdout.fileno()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:  # wait in slices, so a worker that died is noticed
            left = 5.0 if deadline is None else min(5.0, deadline - time.monotonic())
            if left <= 0:
                self.kill()
                raise WorkerError(f"{self.family} worker gave no answer in {timeout:.0f}s "
                                  f"(killed)")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                break
        try:
            return pickle.load(self.proc.stdout)
        except (EOFError, pickle.UnpicklingError, OSError):
            raise WorkerError(self._death()) from None

    def _death(self) -> str:
        rc = self._reap()
        how = (f"killed by signal {-rc}" if rc is not None and rc < 0
               else f"exit code {rc}")
        time.sleep(0.05)  # let the forwarding thread read the last lines
        last = next((ln for ln in reversed(self.tail) if ln.strip()), "")
        return f"{self.family} worker died ({how})" + (f": {last[:160]}" if last else "")

    def _reap(self):
        try:
            return self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.returncode

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        if self.alive:
            try:
                pickle.dump(("quit",), self.proc.stdin)
                self.proc.stdin.close()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()


class Remote:
    """A contender timed in its worker (``common.time_interleaved`` calls these)."""

    def __init__(self, worker: Worker, col: str, timeout: float = 600.0):
        self.worker, self.col, self.timeout = worker, col, timeout

    def once(self) -> float:
        return self.worker.call(("once", self.col), self.timeout)

    def sample(self, inner: int) -> float:
        return self.worker.call(("sample", self.col, inner), self.timeout)


def start_workers(threads, malloc: bool = True, fams=None) -> dict:
    workers = {f: Worker(f, threads, malloc) for f in (fams or FAMILIES)}
    for w in workers.values():   # start them all, then wait: the imports overlap
        w.start()
    return workers


# --- one kernel -------------------------------------------------------------------------

def setup_workers(bench, arrays, refs, opts, fams, workers, suffix, args, contenders, cells,
                  notes):
    """Set ``bench`` up in each family's worker; its columns (named with ``suffix``)
    go to ``contenders`` (ready to time) or ``cells`` (a marker instead of a time)."""
    setup_timeout = 1800 + 3 * opts["tune_budget"]
    for family, cols in fams.items():
        w = workers[family]
        if w.missing is not None:
            for col in cols:
                cells[col + suffix] = "n/a"
            continue
        if opts["tune_budget"] <= 0 and "tuned" in cols:
            cells["tuned" + suffix] = "-"
        try:
            if not w.alive:  # it died with an earlier kernel (or never started)
                w.start()
                w.hello()
            if w.missing is not None:
                for col in cols:
                    cells[col + suffix] = "n/a"
                continue
            t0 = time.perf_counter()
            ready, c, n = w.call(("setup", bench.name, arrays, refs, opts), setup_timeout)
        except WorkerError as e:
            for col in cols:
                cells.setdefault(col + suffix, "fail")
            notes.append(f"{bench.name} {family}{suffix}: {e}")
            continue
        if args.verbose:
            print(f"  {bench.name} {family}{suffix}: set up in "
                  f"{time.perf_counter() - t0:.2f}s", file=sys.stderr)
        cells.update({k + suffix: v for k, v in c.items()})
        notes.extend(n)
        for col in ready:
            if col in cols:
                contenders[col + suffix] = Remote(w, col)


def run_bench(bench, args, threads, rng, notes, workers=None, target_rows=None,
              single=False):
    """One row of the table.  ``workers``: family -> Worker (each library in its own
    process); None: every library in this process (``--in-process``).  With accelerator
    ``--targets``, the row of the targets table is appended to ``target_rows``.
    ``single``: the one-thread pass instead (``workers`` run on one thread): the row's
    three 1T cells."""
    fams = {f: FAMILIES[f][:1] for f in SINGLE} if single else families(args.targets)
    arrays = [placed(a, args.input_offset) for a in bench.inputs(rng)]
    ref = bench.numpy(*arrays)
    refs = tuple(np.asarray(r) for r in as_tuple(ref))
    contenders = {}  # column -> what to time (a callable, or a Remote)
    cells = {}       # column -> marker string instead of a time
    if workers is None:
        for family, cols in fams.items():
            if family not in _READY:
                for col in cols:
                    cells[col] = ("-" if col == "tuned" and args.tune_budget <= 0
                                  else _READY_CELL.get(family, "n/a"))
                continue
            calls, c, n = setup_family(family, bench, arrays, refs, threads,
                                       args.tune_budget, args.verbose,
                                       len(fams) > len(FAMILIES), not args.no_settle)
            contenders.update(calls)
            cells.update(c)
            notes.extend(n)
    else:
        common.settle()  # this process's OpenBLAS threads, from the reference
        opts = {"tune_budget": args.tune_budget, "verbose": args.verbose,
                "quiet": not args.no_settle, "offsets": [a.ctypes.data % 64 for a in arrays],
                "launch": len(fams) > len(FAMILIES)}
        if single:
            opts = {**opts, "tune_budget": 0.0, "launch": False}
        setup_workers(bench, arrays, refs, opts, fams, workers, " 1T" if single else "", args,
                      contenders, cells, notes)

    repeats = args.repeats if bench.repeats is None else min(args.repeats, bench.repeats)
    timings = common.time_interleaved(
        contenders, repeats, warm=True, min_sample=args.min_sample, slow=1.0,
        slow_repeats=1 if args.quick else 3, quiet=not args.no_settle)
    times = {}
    for col, t in timings.items():
        if args.verbose:
            print(f"  {bench.name} {col}: {t.inner} call(s) a sample, ms "
                  + " ".join(common.fmt_ms(x) for x in t.samples), file=sys.stderr)
        if t.error is not None:
            cells[col] = "fail"
            notes.append(f"{bench.name} {col}: {t.error}")
        else:
            times[col] = t.median

    if single:
        best1 = min((c for c in (f + " 1T" for f in SINGLE[1:]) if c in times),
                    key=times.get, default=None)
        return [cells.get("polytc 1T") or common.fmt_ms(times.get("polytc 1T")),
                f"{common.fmt_ms(times[best1])} {best1[:-3]}" if best1 else "-",
                common.fmt_ratio(times["polytc 1T"] / times[best1])
                if best1 and "polytc 1T" in times else "-"]
    best_col = min((c for c in CONTENDERS if c in times), key=times.get, default=None)
    best = times[best_col] if best_col else math.nan
    poly = min((times[c] for c in ("polytc", "tuned") if c in times), default=math.nan)
    flops = bench.flops(*arrays)
    nbytes = sum(a.nbytes for a in arrays) + sum(r.nbytes for r in refs)

    def ratio(col):
        return times[col] / best if col in times and best_col else math.nan

    row = [bench.name]
    for col in COLUMNS[1:7]:
        row.append(cells.get(col) or common.fmt_ms(times.get(col)))
    row.append(f"{common.fmt_ms(best)} {best_col}" if best_col else "-")
    row.append(common.fmt_ratio(ratio("polytc")))
    row.append(common.fmt_ratio(ratio("tuned")))
    row.append(common.fmt_num(flops / poly * 1e-9) if math.isfinite(poly) else "-")
    row.append(common.fmt_num(nbytes / poly * 1e-9)
               if bench.membound and math.isfinite(poly) else "")
    row += ["-", "-", "-"]  # the 1T cells: a pass of their own (report)
    samples = {c: len(t.samples) for c, t in timings.items() if t.error is None}
    if any(n != args.repeats for n in samples.values()):
        notes.append(f"{bench.name}: samples per column "
                     + ", ".join(f"{c} {n}" for c, n in samples.items()))
    if target_rows is not None and len(fams) > len(FAMILIES):
        target_rows.append(target_row(bench.name, args.targets, times, cells, notes))
    return row


def target_cols(targets) -> list:
    """The targets table's columns (after ``kernel``)."""
    cols = ["c"]
    for t in targets:
        if t != "c":
            cols += [t, f"{t}/c"]
    cols.append("c launch")
    for t in targets:
        if t != "c":
            cols += [f"{t} launch", f"{t}/c launch"]
    return cols


def target_row(name, targets, times, cells, notes) -> list:
    """One row of the targets table: polytc's times on each target, whole call and
    launches alone, and each accelerator target's time over C's."""
    def ms(col):
        return cells.get(col) or common.fmt_ms(times.get(col))

    def ratio(col, base):
        return (times[col] / times[base] if col in times and base in times
                else math.nan)

    row = [name, ms("polytc")]
    for t in targets:
        if t != "c":
            r = ratio(t, "polytc")
            row += [ms(t), common.fmt_ratio(r)]
            if r > 2:
                notes.append(f"{name}: {t} takes {r:.1f} times as long as c (whole call)")
    row.append(ms("c launch"))
    for t in targets:
        if t != "c":
            row += [ms(f"{t} launch"), common.fmt_ratio(ratio(f"{t} launch", "c launch"))]
    return row


_READY: dict = {}       # --in-process: family -> version, for the libraries that import
_READY_CELL: dict = {}  # --in-process: family -> "n/a" (not installed) or "fail"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated kernel names")
    ap.add_argument("--repeats", type=int, default=None,
                    help="timed samples per contender (default 15, 5 with --quick)")
    ap.add_argument("--tune-budget", type=float, default=0.0,
                    help="seconds for polytc.autotune per kernel (0: no tuned column)")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke test: fewer repeats, shorter samples, no 2048^3 sgemm")
    ap.add_argument("--min-sample", type=float, default=None,
                    help="seconds a sample lasts at least (short kernels loop; default "
                         "0.02, 0.005 with --quick)")
    ap.add_argument("--in-process", action="store_true",
                    help="time every library in this one process (the old way: their "
                         "thread pools disturb one another) instead of one worker "
                         "process per library")
    ap.add_argument("--no-settle", action="store_true",
                    help="do not wait for a contender's threads to stop spinning before "
                         "the next one runs (to see what that wait is worth)")
    ap.add_argument("--input-offset", type=int, default=16, choices=range(0, 64, 16),
                    metavar="{0,16,32,48}",
                    help="every input array starts this many bytes past a 64-byte "
                         "boundary (default 16: where numpy's allocator puts big arrays; "
                         "0: 64-byte aligned)")
    ap.add_argument("--default-malloc", action="store_true",
                    help="leave glibc malloc's adaptive thresholds in the workers (by "
                         "default they are fixed, so repeated big allocations reuse memory "
                         "instead of faulting in fresh pages)")
    ap.add_argument("--targets", default="c",
                    help="comma-separated polytc targets: c (always), opencl, cuda; each "
                         "accelerator target times the same kernels in a worker of its "
                         "own (whole call, numpy in and out, and the launches alone) and "
                         "a second table gives its times over c's (default: c)")
    ap.add_argument("--no-single", action="store_true",
                    help="no 1T columns (polytc and the best of numpy, torch and ort, each "
                         "on one thread, timed in workers of their own)")
    ap.add_argument("--isa", choices=list(ISAS), default=None,
                    help="hold every library to a narrower vector ISA than the host's "
                         "(polytc: POLYTC_ISA; numpy: OPENBLAS_CORETYPE; torch: "
                         "ATEN_CPU_CAPABILITY and ONEDNN_MAX_CPU_ISA; onnxruntime left "
                         "out), and measure the peak at that width: an AVX2 machine's "
                         "figures on an AVX-512 one")
    ap.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    args = ap.parse_args(argv)
    if args.isa:  # before any worker starts (they inherit it) or polytc reads the CPU
        os.environ.update(ISAS[args.isa])
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    bad = [t for t in targets if t != "c" and t not in ACCEL_TARGETS]
    if bad:
        ap.error(f"unknown target(s) {', '.join(bad)}; choose from c, "
                 + ", ".join(ACCEL_TARGETS))
    # c is the reference of every ratio: always there, first
    args.targets = ["c"] + [t for t in dict.fromkeys(targets) if t != "c"]
    if args.repeats is None:
        args.repeats = 5 if args.quick else 15
    if args.min_sample is None:
        args.min_sample = 0.005 if args.quick else 0.02
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")

    all_benches = benches()
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        names = [bb.name for bb in all_benches]
        unknown = [w for w in wanted if w not in names]
        if unknown:
            ap.error(f"unknown kernel(s) {', '.join(unknown)}; choose from {', '.join(names)}")
        chosen = [bb for bb in all_benches if bb.name in wanted]
    else:
        chosen = [bb for bb in all_benches if bb.quick or not args.quick]

    threads = common.default_threads()
    fams = families(args.targets)
    workers = None
    try:
        early_notes = []
        if args.in_process:
            for family in fams:
                try:
                    _READY[family] = init_family(family, threads)
                except ImportError:
                    _READY_CELL[family] = "n/a"
                except Exception as e:  # noqa: BLE001 -- a broken install
                    _READY_CELL[family] = "fail"
                    early_notes.append(f"{family}: {short(e)}")
            versions = dict(_READY)
            missing = {f for f in fams if _READY_CELL.get(f) == "n/a"}
        else:
            workers = start_workers(threads, not args.default_malloc, fams)
            for w in workers.values():
                try:
                    w.hello()
                except WorkerError as e:
                    early_notes.append(str(e))
            versions = {f: w.version for f, w in workers.items() if w.version}
            missing = {f for f, w in workers.items() if w.missing is not None}
        return report(args, chosen, threads, workers, versions, missing, early_notes)
    finally:
        for w in (workers or {}).values():
            w.stop()


def single_pass(args, chosen, rows, notes, workers):
    """The 1T cells of ``rows``: the same kernels and inputs again, with polytc, numpy,
    torch and onnxruntime each in a worker on one thread, after the main pass's
    ``workers`` are stopped (timed side by side with them, polytc's two threads ran as
    slowly as one: some worker's pool kept a core)."""
    for w in workers.values():
        w.stop()
    single = start_workers(1, not args.default_malloc, SINGLE)
    try:
        for w in single.values():
            try:
                w.hello()
            except WorkerError as e:
                notes.append(f"{e} (one thread)")
        rng = np.random.default_rng(0)  # the main pass's inputs, in the same order
        for bench, row in zip(chosen, rows):
            try:
                row[-3:] = run_bench(bench, args, 1, rng, notes, single, single=True)
            except Exception as e:  # noqa: BLE001 -- one broken kernel does not end the run
                notes.append(f"{bench.name} (one thread): {short(e)}")
    finally:
        for w in single.values():
            w.stop()


def report(args, chosen, threads, workers, versions, missing, notes):
    vers = [f"numpy {np.__version__}"]
    for family, lib in (("torch", "torch"), ("ort", "onnxruntime")):
        v = versions.get(family) or (versions.get("torch.compile") if lib == "torch" else None)
        if v:
            vers.append(f"{lib} {v}")
        elif family in missing:
            vers.append(f"{lib} left out (--isa)" if family == "ort" and args.isa
                        else f"{lib} not installed")
        else:
            vers.append(f"{lib} failed to import")
    for t in args.targets[1:]:
        family = f"polytc.{t}"
        if versions.get(family):
            vers.append(f"{t}: {'pyopencl' if t == 'opencl' else 'driver'} "
                        f"{versions[family]}")
        else:
            vers.append(f"{t}: " + ("not available" if family in missing
                                    else "failed to start"))

    load0 = common.load_average()
    from polytc.machine import NARROWER  # (the gcc flags polytc narrows its own with)

    peak = common.measure_peak(threads, narrow=list(NARROWER[args.isa][1]) if args.isa
                               else [])
    nthr = f"{threads} thread{'s' if threads != 1 else ''}"
    print(f"polytc CPU benchmark: {common.cpu_model()}, {nthr} for every library"
          + (f", held to {args.isa} (--isa)" if args.isa else ""))
    if peak and "gflops" in peak:
        print(f"fp32 peak (benchmarks/peak.c, {peak['vector_bits']}-bit FMA x "
              f"{peak['chains']} chains x {nthr}): "
              f"{peak['gflops']:.0f} GFLOP/s")
    else:
        print(f"fp32 peak: not measured ({(peak or {}).get('error')})")
    where = ("all libraries in one process (--in-process)" if workers is None
             else "each library in a worker process of its own")
    print(f"{', '.join(vers)}; median ms of one call over {args.repeats} interleaved "
          f"samples{' (--quick)' if args.quick else ''}, {where}")
    sys.stdout.flush()

    rng = np.random.default_rng(0)
    rows = []
    target_rows = [] if len(args.targets) > 1 else None
    t_start = time.perf_counter()
    for bench in chosen:
        t0 = time.perf_counter()
        try:
            rows.append(run_bench(bench, args, threads, rng, notes, workers, target_rows))
        except Exception as e:  # noqa: BLE001 -- one broken kernel does not end the run
            rows.append([bench.name] + ["fail"] + [""] * (len(COLUMNS) - 2))
            notes.append(f"{bench.name}: {short(e)}")
        if args.verbose:
            print(f"{bench.name}: {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    single = workers is not None and threads > 1 and not args.no_single
    if single:
        single_pass(args, chosen, rows, notes, workers)
    print()
    print(common.table(COLUMNS, rows))
    print()
    if target_rows is not None:
        print(common.table(["kernel"] + target_cols(args.targets), target_rows))
        print()
        print("polytc on each target, the same kernels and options: whole call (numpy in, "
              "numpy out: upload, launches, download) and launch = "
              "CompiledKernel.benchmark(), the launches (C: the function) alone with the "
              "data in place, median of each sample's launches; <t>/c: that time over c's "
              "(above 1: slower than c)")
    print("sizes: " + "; ".join(f"{bb.name} {bb.sizes}" for bb in chosen))
    print("best = fastest of numpy, torch, torch.compile, ort; GFLOP/s and GB/s (compulsory "
          "traffic: inputs + outputs once) are polytc's (the faster of default and tuned); "
          "1T: polytc and the best of numpy, torch, ort, each on one thread"
          + ("" if single else " (not measured: --no-single, --in-process or one thread)"))
    print(f"inputs start {args.input_offset} bytes past a 64-byte boundary (--input-offset)"
          + ("" if workers is None or args.default_malloc
             else "; workers' malloc keeps freed memory (--default-malloc)"))
    common.print_footer(notes, load0, t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
