"""Compile times and the per-call overhead of a cached kernel.

    python benchmarks/bench_compile.py

Cold compiles run in a fresh cache directory (isl + gcc); "disk" reloads the same kernel
in a new process-level table (no isl, no gcc); the overhead is a whole call of a cached
kernel minus the C function alone, on a 16-element add (median of many calls), next to a
numpy ufunc call for scale.
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

import numpy as np

MATMUL = """
def matmul(float(M,K) A, float(K,N) B) -> (C) {
    C(m, n) +=! A(m, k) * B(k, n)
}"""

TEN = """
def ten(float(N,D) X, float(D) g, float(D) b, float(D,E) W) -> (Y) {
    mean(n) +=! X(n, d) / D
    xc(n, d) = X(n, d) - mean(n)
    var(n) +=! xc(n, d) * xc(n, d) / D
    xn(n, d) = xc(n, d) * rsqrt(var(n) + 1e-5) * g(d) + b(d)
    h(n, e) +=! xn(n, d) * W(d, e)
    r(n, e) = fmax(h(n, e), 0.0)
    mx(n) max=! r(n, e)
    ex(n, e) = exp(r(n, e) - mx(n))
    s(n) +=! ex(n, e)
    Y(n, e) = ex(n, e) / s(n)
}"""


def cold_compile(src, arrays, reps=3):
    import polytc

    times = []
    for _ in range(reps):
        os.environ["POLYTC_CACHE_DIR"] = tempfile.mkdtemp(prefix="polytc-bench-")
        polytc.clear_cache(disk=False)
        k = polytc.tc(src)
        t0 = time.perf_counter()
        k.specialize(*arrays)
        times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        polytc.clear_cache(disk=False)
        polytc.tc(src).specialize(*arrays)
        disk = time.perf_counter() - t0
    return statistics.median(times), disk


def overhead():
    import polytc

    k = polytc.tc("def add(float(N) A, float(N) B) -> (C) { C(i) = A(i) + B(i) }")
    a, b = np.ones(16, np.float32), np.ones(16, np.float32)
    k(a, b)
    ck = k.specialize(a, b)
    calls, alone, npy = [], [], []
    for _ in range(7):
        n = 20000
        t0 = time.perf_counter()
        for _ in range(n):
            k(a, b)
        calls.append((time.perf_counter() - t0) / n)
        alone.append(ck.benchmark(a, b, repeat=n)["median"])
        t0 = time.perf_counter()
        for _ in range(n):
            np.add(a, b)
        npy.append((time.perf_counter() - t0) / n)
    return statistics.median(calls), statistics.median(alone), statistics.median(npy)


def main():
    rng = np.random.default_rng(0)
    f = np.float32
    mm = cold_compile(MATMUL, [rng.random((512, 256), f), rng.random((256, 384), f)])
    ten = cold_compile(TEN, [rng.random((256, 128), f), rng.random(128, f), rng.random(128, f),
                             rng.random((128, 64), f)])
    call, alone, npy = overhead()
    print(f"{'what':<44} {'time':>10}")
    print(f"{'cold compile, matmul (isl + gcc)':<44} {mm[0] * 1e3:8.0f}ms")
    print(f"{'   from the disk cache (no isl, no gcc)':<44} {mm[1] * 1e3:8.1f}ms")
    print(f"{'cold compile, 10-statement program':<44} {ten[0] * 1e3:8.0f}ms")
    print(f"{'   from the disk cache':<44} {ten[1] * 1e3:8.1f}ms")
    print(f"{'cached call, 16-element add (whole call)':<44} {call * 1e6:8.2f}us")
    print(f"{'   the C function alone':<44} {alone * 1e6:8.2f}us")
    print(f"{'   per-call overhead':<44} {(call - alone) * 1e6:8.2f}us")
    print(f"{'   numpy np.add on the same arrays':<44} {npy * 1e6:8.2f}us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
