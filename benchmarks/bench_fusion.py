"""Which fusion strategy is fastest on the benchmark suite (decides Options.fusion's default).

    python benchmarks/bench_fusion.py [--threads N] [--repeats R]

Times every kernel of bench_cpu.py with each strategy, interleaved (A B C A B C ...), and
prints the medians, each strategy's time relative to the best one per kernel, and the
geometric mean of those ratios.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--only", default="")
    args = ap.parse_args(argv)
    import polytc
    from bench_cpu import benches

    strategies = ("auto", "preserve", "max", "min")
    rng = np.random.default_rng(0)
    rows, ratios = [], {s: [] for s in strategies}
    for b in benches():
        if args.only and b.name not in args.only.split(","):
            continue
        if b.name == "sgemm2048":
            continue
        arrays = b.inputs(rng)
        ks = {s: polytc.tc(b.tc, options=polytc.Options(fusion=s)) for s in strategies}
        cks = {s: k.specialize(*arrays) for s, k in ks.items()}
        times = {s: [] for s in strategies}
        for _ in range(args.repeats):
            for s in strategies:
                times[s].append(cks[s].benchmark(*arrays, repeat=1, warmup=1)["median"])
        med = {s: statistics.median(t) for s, t in times.items()}
        best = min(med.values())
        for s in strategies:
            ratios[s].append(med[s] / best)
        rows.append((b.name, med))
        print(f"{b.name:<14}" + "".join(f"{s:>10} {med[s] * 1e3:8.2f}ms" for s in strategies),
              flush=True)
    print("geomean of time / best:", "  ".join(
        f"{s} {math.exp(statistics.mean(math.log(r) for r in ratios[s])):.3f}"
        for s in strategies))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
