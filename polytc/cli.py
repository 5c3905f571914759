"""The ``polytc`` command line."""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="polytc", description="polyhedral tensor compiler")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("demo", help="compile and run example kernels and a small model")
    c = sub.add_parser("show", help="compile a TC file for given sizes and print its stages")
    c.add_argument("file")
    c.add_argument("--name", help="which def (when the file has several)")
    c.add_argument("--sizes", required=True,
                   help="input shapes, e.g. '64x32,32x48' (one per input; '' for 0-d)")
    c.add_argument("--stage", default="c", help="tc | scop | dependences | schedule | ast | c")
    args = parser.parse_args(argv)
    from .diagnostics import PolytcError

    try:
        if args.cmd == "demo":
            from .demo import main as demo

            return demo()
        return _show(args)
    except PolytcError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


def _show(args) -> int:
    import numpy as np

    import polytc

    with open(args.file) as f:
        text = f.read()
    k = polytc.tc(text, args.name, filename=args.file)
    if isinstance(k, dict):
        print(f"error: {args.file} defines {', '.join(k)}; pick one with --name", file=sys.stderr)
        return 1
    shapes = [tuple(int(x) for x in s.split("x") if x) for s in args.sizes.split(",")]
    arrays = [np.zeros(s, t.dtype.np_dtype) for s, t in zip(shapes, k.program.inputs)]
    ck = k.specialize(*arrays)
    print(ck.stages[args.stage])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
