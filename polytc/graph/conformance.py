"""ONNX's backend node tests on polytc, counted per op.

``python -m polytc.graph.conformance [OP ...] [-v]`` runs the node tests of the given ops
(default: every op polytc lowers) in this process and prints, per op, how many pass.
``-v`` also prints each failure's first line.
"""
from __future__ import annotations

import sys
import time
from collections import defaultdict

import numpy as np


def node_cases(ops=None) -> list:
    """(op, TestCase) for ONNX's node tests whose model uses only ``ops``' nodes."""
    from onnx.backend.test.loader import load_model_tests

    from .ops import supported

    out = []
    for t in load_model_tests(kind="node"):
        kinds = {n.op_type for n in t.model.graph.node}
        main = t.model.graph.node[-1].op_type if t.model.graph.node else "?"
        if ops is None:
            if kinds and all(supported(k) or k in ("Shape", "Size", "Constant") for k in kinds):
                out.append((main, t))
        elif main in ops:
            out.append((main, t))
    return out


def run_case(t) -> str | None:
    """None if the test passes, else the first line of what went wrong."""
    from onnx.backend.test.runner import Runner

    from .backend import PolytcBackend

    try:
        rep = PolytcBackend.prepare(t.model)
        for inputs, ref in t.data_sets:
            outs = rep.run([np.asarray(x) if not isinstance(x, list) else x for x in inputs])
            Runner.assert_similar_outputs([np.asarray(r) for r in ref], list(outs),
                                          rtol=t.rtol, atol=t.atol)
    except Exception as e:  # noqa: BLE001 - a report, not a crash
        text = str(e).strip().splitlines()
        return f"{type(e).__name__}: {text[0] if text else ''}"
    return None


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = "-v" in argv
    ops = [a for a in argv if not a.startswith("-")] or None
    counts: dict = defaultdict(lambda: [0, 0])
    failures = []
    t0 = time.perf_counter()
    for op, t in node_cases(ops):
        err = run_case(t)
        counts[op][1] += 1
        if err is None:
            counts[op][0] += 1
        else:
            failures.append((t.name, err))
    for op in sorted(counts):
        ok, n = counts[op]
        print(f"{op:28} {ok:4d} / {n:<4d}{'' if ok == n else '  <-'}")
    total_ok = sum(c[0] for c in counts.values())
    total = sum(c[1] for c in counts.values())
    print(f"{'total':28} {total_ok:4d} / {total:<4d} ({time.perf_counter() - t0:.0f} s)")
    if verbose:
        for name, err in failures:
            print(f"FAIL {name}: {err}")
    return 0 if total_ok == total else 1


if __name__ == "__main__":
    raise SystemExit(main())
