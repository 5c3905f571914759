"""Compile times and the per-call overhead of a cached kernel.

    python benchmarks/bench_compile.py [--dynamic]

Cold compiles run in a fresh cache directory (isl + gcc); "disk" reloads the same kernel
in a new process-level table (no isl, no gcc); the overhead is a whole call of a cached
kernel minus the C function alone, on a 16-element add (median of many calls), next to a
numpy ufunc call for scale.

``--dynamic``: a matmul whose rows vary (K = N = 512), one whose columns no register
tile divides (K = 256, N = 784) and a 10-statement row program whose rows vary, each
with its rows symbolic (docs/dynamic.md): the first compile and
call (at 64 rows: it also makes the process's thread pool), the cost of a call at each
new size after it (cold: nothing was compiled for that size), and
the run time of the generic kernel against a kernel specialised to each size (interleaved,
median of 7 rounds; specialised kernels compile in a fresh cache, their compile time shown).
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


ROWS = (1, 3, 8, 17, 40, 64, 100, 256, 1000)


def dynamic(name, src, make, rows=ROWS):
    """The --dynamic table of one program: ``make(rows, rng)`` gives its inputs."""
    import polytc

    os.environ["POLYTC_CACHE_DIR"] = tempfile.mkdtemp(prefix="polytc-bench-")
    polytc.clear_cache(disk=False)
    rng = np.random.default_rng(0)
    size = polytc.tc(src).program.sizes[0]
    gen = polytc.tc(src, dynamic=(size,))
    t0 = time.perf_counter()
    gen(*make(64, rng))  # (its first call too: the process's first parallel region makes
    first = time.perf_counter() - t0  # the thread pool, 3-8 ms, no new size's cost)
    print(f"\n{name}: {size} symbolic; first compile and call {first * 1e3:.0f} ms "
          f"(at {size}=64)")
    print(f"{size:>6} {'new size':>10} {'generic':>10} {'specialised':>12} {'ratio':>6} "
          f"{'its compile':>12}")
    news, ratios = [], []
    for m in rows:
        args = make(m, rng)
        t0 = time.perf_counter()
        gen(*args)
        new = time.perf_counter() - t0
        spec = polytc.tc(src, dynamic=())
        t0 = time.perf_counter()
        spec(*args)
        compile_s = time.perf_counter() - t0
        reps = max(5, min(2000, int(0.02 / max(new, 1e-5))))
        res: dict = {0: [], 1: []}
        for _ in range(7):
            for k, f in ((0, gen), (1, spec)):
                ts = []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    f(*args)
                    ts.append(time.perf_counter() - t0)
                res[k].append(statistics.median(ts))
        g, sp = statistics.median(res[0]), statistics.median(res[1])
        news.append(new)
        ratios.append(g / sp)
        print(f"{m:>6} {new * 1e3:>8.2f}ms {g * 1e6:>8.1f}us {sp * 1e6:>10.1f}us "
              f"{g / sp:>6.2f} {compile_s * 1e3:>10.0f}ms")
    geo = float(np.exp(np.mean(np.log(ratios))))
    print(f"new size: median {statistics.median(news) * 1e3:.2f} ms, worst "
          f"{max(news) * 1e3:.2f} ms; generic / specialised geomean {geo:.2f}")


def main_dynamic():
    f = np.float32
    dynamic("matmul", MATMUL, lambda m, r: [r.random((m, 512), f), r.random((512, 512), f)])
    # columns that no register tile divides (784 = 12 x 64 + 16): partial column tiles
    dynamic("matmul, 784 columns", MATMUL,
            lambda m, r: [r.random((m, 256), f), r.random((256, 784), f)])
    dynamic("10-statement row program", TEN, lambda m, r: [
        r.random((m, 128), f), r.random(128, f), r.random(128, f), r.random((128, 64), f)])
    return 0


def main():
    if "--dynamic" in sys.argv[1:]:
        return main_dynamic()
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
