"""Hand schedules against polytc's own schedule and numpy, and what exploring costs.

    python benchmarks/bench_schedules.py [--repeats R] [--size N]

Contenders on a dense layer ``relu(A @ B + bias)`` (N x N x N, float32), timed
interleaved (A B C A B C ...), medians: numpy (OpenBLAS), polytc's default schedule, and
two hand schedules (``polytc.Schedule``): the relu fused into the matmul's row loop,
parallel and vectorised, with and without tiling.  Then the seconds ``explain()`` and an
``explore`` of fusion x tiling (4 variants) take.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

DENSE = """def dense(float(M,K) A, float(K,N) B, float(N) bias) -> (C, Y) {
    C(m, n) +=! A(m, k) * B(k, n)
    Y(m, n) = fmax(C(m, n) + bias(n), 0)
}"""


def hand(k, args, tiled: bool):
    """Program order (bands: 0 init (m, n), 1 matmul (m, n, k), 2 relu (m, n)) with the
    matmul's loops as (m, k, n): n, unit stride for C and B, is the vector loop.  Steps
    run from the last band to the first, so that splits do not renumber the ones still
    to come."""
    s = k.schedule(*args, start="program").interchange(1, 1, 2)
    if tiled:  # 32 x 32 tiles of (m, k): a block of B rows reused by 32 rows of A
        s = s.tile(1, (32, 32))  # bands: 1 tiles (m, k), 2 points (m, k), 3 (n), 4 relu
        s = s.parallel(4).vectorize(4).vectorize(3).parallel(1)
    else:
        s = s.parallel(2).vectorize(2).parallel(1).vectorize(1)
    return s.parallel(0).vectorize(0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--size", type=int, default=512)
    args = ap.parse_args(argv)
    import polytc
    from common import fmt_ms, table, time_interleaved

    n = args.size
    rng = np.random.default_rng(0)
    A, B = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    bias = rng.random(n, dtype=np.float32) - 0.5
    k = polytc.tc(DENSE)
    want = np.maximum(A @ B + bias, 0)
    kernels = {"polytc default": k}
    for name, tiled in (("hand: rows parallel, k outside n", False),
                        ("hand: + 32x32 tiles of (m, k)", True)):
        kernels[name] = k.with_schedule(hand(k, (A, B, bias), tiled))
    for name, kk in kernels.items():
        got = kk(A, B, bias)[1]
        assert np.allclose(got, want, rtol=1e-3, atol=1e-3), name
    contenders = {"numpy": lambda: np.maximum(A @ B + bias, 0)}
    contenders.update({name: (lambda kk=kk: kk(A, B, bias)) for name, kk in kernels.items()})
    t = time_interleaved(contenders, args.repeats)
    base = t["numpy"].median
    rows = [[name, fmt_ms(x.median), f"{x.median / base:.2f}x"] for name, x in t.items()]
    print(f"dense {n}x{n}x{n} float32, median of {args.repeats}, time / numpy")
    print(table(["contender", "ms", "vs numpy"], rows))
    t0 = time.perf_counter()
    k.explain(A, B, bias)
    t1 = time.perf_counter()
    ex = polytc.explore(k, A, B, bias, fusion=["auto", "max"], tile=[None, ()], repeat=5,
                        progress=False)
    t2 = time.perf_counter()
    print(f"\nexplain(): {t1 - t0:.2f} s; explore (4 variants, compiled, checked, timed): "
          f"{t2 - t1:.2f} s")
    print(ex)
    return 0


if __name__ == "__main__":
    sys.exit(main())
