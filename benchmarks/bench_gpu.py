"""polytc's cuda target on a GPU against PyTorch (cuBLAS, cuDNN and its own kernels).

    python benchmarks/bench_gpu.py [--only name,name] [--repeats N] [--quick]
                                   [--options JSON] [--target cuda|opencl]

One table: per kernel the median milliseconds of one call of polytc's kernel (torch cuda
tensors in, torch cuda tensors out, as ``target="cuda"`` takes and gives them), of its
launches alone (``CompiledKernel.benchmark()``), and of PyTorch eager on the same tensors;
polytc's time over PyTorch's, both GFLOP/s (and polytc's GB/s of compulsory traffic for
memory-bound kernels), and the first call's seconds (compile, or load from the disk
cache).  fp32 throughout: TF32 is off in cuBLAS and cuDNN.

Kernels: sgemm 4096^3 against ``torch.matmul``; softmax and layernorm (4096 rows) against
``torch.softmax`` / ``F.layer_norm``; the benchmarks of the Tensor Comprehensions paper at
its sizes: transposed matmul, transposed batch matmul, group convolution (with bias), the
three-factor Kronecker chain and group normalisation.

Timing: each call is timed with CUDA events around a loop of calls (enough for a sample
to last ``--min-sample`` seconds), after ``torch.cuda.synchronize()``; contenders are
sampled round-robin, the order rotating every round, and the median sample is reported.
Every output is checked against PyTorch's once (allclose, rtol 1e-3, atol 1e-3 times the
reference's largest magnitude when above 1); a wrong one reads ``WRONG`` and is not timed.

Without a GPU (and its driver), nvcc or a CUDA build of PyTorch it says so and exits with status 0.
``--target opencl`` runs the same kernels on polytc's OpenCL device (inputs as pyopencl
arrays on it) against PyTorch on the CPU: on a machine with PoCL that exercises the
script (``--target opencl --quick``), it is not a GPU measurement.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402
# the kernels both benchmarks time, in one place
from bench_cpu import GROUPNORM, LAYERNORM, MATMUL as SGEMM, SOFTMAX  # noqa: E402

RTOL = ATOL = 1e-3


@dataclass
class GBench:
    name: str
    tc: str
    full: dict                  # size name -> value (the default sizes)
    quick: dict                 # the sizes of --quick
    inputs: callable            # (rng, **sizes) -> [numpy arrays], in the TC's order
    torch: callable             # (*tensors, **sizes) -> tensor (PyTorch eager)
    flops: callable             # (**sizes) -> flop count
    membound: bool = False      # print GB/s (inputs and output once)
    what: str = ""


def f32(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# --- the kernels (sgemm, softmax, layernorm, groupnorm: bench_cpu's) ----------------------

# the TC paper's benchmarks (its tc/benchmarks and the sizes of its autotuner runs)
TMM = """
def tmm(float(M,K) A, float(N,K) B) -> (C) {
    C(m, n) +=! A(m, k) * B(n, k)
}"""

TBMM = """
def tbmm(float(B,M,K) X, float(B,N,K) Y) -> (Z) {
    Z(b, m, n) +=! X(b, m, k) * Y(b, n, k)
}"""

GROUP_CONV = """
def group_convolution(float(N,G,C,H,W) I, float(G,F,C,KH,KW) W1, float(G,F) B) -> (O) {
    O(n, g, f, h, w) +=! I(n, g, c, h + kh, w + kw) * W1(g, f, c, kh, kw)
    O(n, g, f, h, w) = O(n, g, f, h, w) + B(g, f)
}"""

# TC's Kronecker3_1, _2, _3 chained in one def (j0..j2 are Bessel builtins in TC, so the
# summed indices are r0..r2)
KRON3 = """
def kronecker3(float(D0,N0) W0, float(D1,N1) W1, float(D2,N2) W2, float(M,N0,N1,N2) X) -> (Y) {
    XW2(m, n0, n1, d2) +=! X(m, n0, n1, r2) * W2(d2, r2)
    XW1(m, n0, d1, d2) +=! XW2(m, n0, r1, d2) * W1(d1, r1)
    Y(m, d0, d1, d2) +=! XW1(m, r0, d1, d2) * W0(d0, r0)
}"""


def _torch():
    import torch

    return torch


def _F():
    import torch.nn.functional as F

    return F


def _group_conv_torch(I, W1, B, N, G, C, H, W, F, KH, KW):
    out = _F().conv2d(I.reshape(N, G * C, H, W), W1.reshape(G * F, C, KH, KW),
                      B.reshape(G * F), groups=G)
    return out.reshape(N, G, F, H - KH + 1, W - KW + 1)


def _kron3_torch(W0, W1, W2, X, M, D0, D1, D2, N0, N1, N2):
    t = _torch()
    xw2 = t.matmul(X, W2.t())                                  # M, N0, N1, D2
    xw1 = t.matmul(W1, xw2)                                    # M, N0, D1, D2
    y = t.matmul(W0, xw1.reshape(M, N0, D1 * D2))              # M, D0, D1*D2
    return y.reshape(M, D0, D1, D2)


def _groupnorm_torch(I, gamma, beta, N, G, CG, H, W):
    return _F().group_norm(I.reshape(N, G * CG, H, W), G, gamma.reshape(-1),
                           beta.reshape(-1), 1e-5).reshape(N, G, CG, H, W)


def benches() -> list:
    return [
        GBench("sgemm", SGEMM, dict(M=4096, N=4096, K=4096), dict(M=256, N=256, K=256),
               lambda r, M, N, K: [f32(r, M, K), f32(r, K, N)],
               lambda A, B, **s: _torch().matmul(A, B),
               lambda M, N, K: 2 * M * N * K, what="torch.matmul"),
        GBench("softmax", SOFTMAX, dict(N=4096, D=4096), dict(N=256, D=1024),
               lambda r, N, D: [f32(r, N, D, scale=3)],
               lambda X, **s: _torch().softmax(X, 1),
               lambda N, D: 5 * N * D, membound=True, what="torch.softmax"),
        GBench("layernorm", LAYERNORM, dict(N=32 * 128, D=1024), dict(N=256, D=1024),
               lambda r, N, D: [f32(r, N, D), f32(r, D), f32(r, D)],
               lambda X, g, b, N, D: _F().layer_norm(X, (D,), g, b, 1e-5),
               lambda N, D: 8 * N * D, membound=True, what="F.layer_norm"),
        GBench("tmm", TMM, dict(M=128, K=1024, N=1024), dict(M=128, K=32, N=256),
               lambda r, M, K, N: [f32(r, M, K), f32(r, N, K)],
               lambda A, B, **s: _torch().matmul(A, B.t()),
               lambda M, K, N: 2 * M * N * K, what="torch.matmul(A, B.t())"),
        GBench("tmm_large", TMM, dict(M=128, K=4096, N=16384), dict(M=64, K=256, N=512),
               lambda r, M, K, N: [f32(r, M, K, scale=1 / 8), f32(r, N, K, scale=1 / 8)],
               lambda A, B, **s: _torch().matmul(A, B.t()),
               lambda M, K, N: 2 * M * N * K, what="torch.matmul(A, B.t())"),
        GBench("tbmm", TBMM, dict(B=500, M=72, K=26, N=26), dict(B=50, M=72, K=26, N=26),
               lambda r, B, M, K, N: [f32(r, B, M, K), f32(r, B, N, K)],
               lambda X, Y, **s: _torch().bmm(X, Y.transpose(1, 2)),
               lambda B, M, K, N: 2 * B * M * N * K, what="torch.bmm(X, Y^T)"),
        GBench("group_conv", GROUP_CONV,
               dict(N=32, G=32, C=4, F=4, H=56, W=56, KH=3, KW=3),
               dict(N=2, G=8, C=4, F=4, H=16, W=16, KH=3, KW=3),
               lambda r, N, G, C, F, H, W, KH, KW: [
                   f32(r, N, G, C, H, W), f32(r, G, F, C, KH, KW, scale=1 / 6), f32(r, G, F)],
               _group_conv_torch,
               lambda N, G, C, F, H, W, KH, KW: (2 * N * G * F * C * KH * KW
                                                 * (H - KH + 1) * (W - KW + 1)),
               what="F.conv2d(groups=G)"),
        GBench("kron3", KRON3,
               dict(M=256, D0=16, D1=16, D2=16, N0=32, N1=32, N2=32),
               dict(M=16, D0=8, D1=8, D2=8, N0=16, N1=16, N2=16),
               lambda r, M, D0, D1, D2, N0, N1, N2: [
                   f32(r, D0, N0, scale=0.2), f32(r, D1, N1, scale=0.2),
                   f32(r, D2, N2, scale=0.2), f32(r, M, N0, N1, N2)],
               _kron3_torch,
               lambda M, D0, D1, D2, N0, N1, N2: 2 * M * (N0 * N1 * N2 * D2
                                                          + N0 * N1 * D1 * D2
                                                          + N0 * D0 * D1 * D2),
               what="three torch.matmul"),
        GBench("groupnorm", GROUPNORM, dict(N=32, G=32, CG=16, H=48, W=48),
               dict(N=2, G=8, CG=4, H=16, W=16),
               lambda r, N, G, CG, H, W: [f32(r, N, G, CG, H, W), f32(r, G, CG),
                                          f32(r, G, CG)],
               _groupnorm_torch,
               lambda N, G, CG, H, W: 8 * N * G * CG * H * W, membound=True,
               what="F.group_norm"),
    ]


def sizes_text(s: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in s.items())


# --- the device ---------------------------------------------------------------------------

class Skip(Exception):
    """This machine cannot run the benchmark (no GPU, no nvcc, ...): the reason."""


class CudaSide:
    """polytc's cuda target and PyTorch on the same GPU; CUDA events time both."""

    target = "cuda"

    def __init__(self):
        try:
            import torch
        except ImportError:
            raise Skip("PyTorch is not installed (pip install torch, a CUDA build)") from None
        if not torch.cuda.is_available():
            why = ("this PyTorch is a CPU-only build" if torch.version.cuda is None
                   else "PyTorch sees no CUDA GPU")
            raise Skip(f"no CUDA GPU: {why} (torch {torch.__version__})")
        import polytc
        from polytc.codegen_cuda import nvcc_available, nvcc_command
        from polytc.backends import get as backend

        if not nvcc_available():
            raise Skip(f"nvcc does not run ({' '.join(nvcc_command())}): install the CUDA "
                       f"toolkit or set POLYTC_NVCC")
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 cuBLAS, as polytc computes
        torch.backends.cudnn.allow_tf32 = False
        torch.set_grad_enabled(False)
        self.torch = torch
        self.dev = torch.device("cuda")
        torch.zeros(1, device=self.dev)  # initialise the primary context first
        try:
            self.device = backend("cuda").device()
        except polytc.PolytcError as e:
            raise Skip(f"polytc's cuda target cannot run: {common.short(e)}") from None
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def describe(self) -> str:
        t = self.torch
        from polytc.runtime import cuda

        return (f"{t.cuda.get_device_name()} ({self.device.compute_units} SMs), torch "
                f"{t.__version__} (CUDA {t.version.cuda}, cuDNN "
                f"{t.backends.cudnn.version()}), driver {cuda.device_key()['driver']}; TF32 "
                f"off in cuBLAS and cuDNN")

    def polytc_inputs(self, arrays):
        return [self.torch.from_numpy(a).to(self.dev) for a in arrays]

    def torch_inputs(self, arrays, polytc_inputs):
        return polytc_inputs  # the same tensors

    def host(self, out):
        return out.detach().cpu().numpy()

    def sync(self):
        self.torch.cuda.synchronize()

    def time_polytc(self, fn, inner):
        return self._events(fn, inner)

    def time_torch(self, fn, inner):
        return self._events(fn, inner)

    def _events(self, fn, inner):
        self.torch.cuda.synchronize()
        self.start.record()
        for _ in range(inner):
            fn()
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end) * 1e-3 / inner


class OpenCLSide:
    """polytc's opencl target (inputs as pyopencl arrays on its device) and PyTorch on
    the CPU: to exercise this script where there is no GPU (PoCL), not to measure one."""

    target = "opencl"

    def __init__(self, threads):
        if not os.environ.get("POCL_MAX_PTHREAD_COUNT"):
            os.environ["POCL_MAX_PTHREAD_COUNT"] = str(threads)
        try:
            import torch
        except ImportError:
            raise Skip("PyTorch is not installed (pip install torch==2.13.0, the CPU "
                       "build)") from None
        import polytc
        from polytc.runtime import opencl

        try:
            self.device = opencl.device()
            self.queue = opencl._state()["queue"]
        except polytc.PolytcError as e:
            raise Skip(f"polytc's opencl target cannot run: {common.short(e)}") from None
        import pyopencl.array as cla

        self.cla = cla
        torch.set_num_threads(threads)
        torch.set_grad_enabled(False)
        self.torch, self.threads = torch, threads
        self.cpu = self.device.kind == "cpu"

    def describe(self) -> str:
        import pyopencl

        return (f"OpenCL device {self.device.name} ({self.device.kind}, "
                f"{self.device.compute_units} compute units), pyopencl "
                f"{pyopencl.VERSION_TEXT}; torch {self.torch.__version__} on the CPU, "
                f"{self.threads} threads")

    def polytc_inputs(self, arrays):
        return [self.cla.to_device(self.queue, a) for a in arrays]

    def torch_inputs(self, arrays, polytc_inputs):
        return [self.torch.from_numpy(a.copy()) for a in arrays]

    def host(self, out):
        if hasattr(out, "get"):
            return out.get(queue=self.queue)
        return out.detach().numpy() if hasattr(out, "detach") else np.asarray(out)

    def sync(self):
        self.queue.finish()

    def time_polytc(self, fn, inner):
        if self.cpu:
            common.settle()  # PoCL's and torch's threads share the CPU
        self.queue.finish()
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        self.queue.finish()
        return (time.perf_counter() - t0) / inner

    def time_torch(self, fn, inner):
        if self.cpu:
            common.settle()
        return common.time_sample(fn, inner)


class Timed:
    """A contender for ``common.time_interleaved``: ``timer(fn, inner)`` seconds/call."""

    def __init__(self, fn, timer):
        self.fn, self.timer = fn, timer

    def once(self) -> float:
        return self.timer(self.fn, 1)

    def sample(self, inner: int) -> float:
        return self.timer(self.fn, inner)


class Launches:
    """polytc's launches alone: ``CompiledKernel.benchmark()`` (its inputs uploaded
    once per sample, outputs preallocated, synchronised around each launch sequence); a
    sample of ``inner`` is the median of ``inner`` timed runs after one warm-up."""

    def __init__(self, compiled, host_arrays):
        self.compiled, self.arrays = compiled, host_arrays

    def once(self) -> float:
        return self.sample(1)

    def sample(self, inner: int) -> float:
        return self.compiled.benchmark(*self.arrays, repeat=inner, warmup=1)["median"]


def check(out, ref) -> str | None:
    """None when ``out`` matches ``ref`` (allclose), else why not."""
    if out.shape != ref.shape:
        return f"shape {out.shape}, expected {ref.shape}"
    scale = max(1.0, float(np.abs(ref).max())) if ref.size else 1.0
    if not np.allclose(out, ref, rtol=RTOL, atol=ATOL * scale):
        err = np.abs(out.astype(np.float64) - ref)
        return f"max abs error {np.nanmax(err):.3g} (max |ref| {np.abs(ref).max():.3g})"
    return None


# --- one kernel ---------------------------------------------------------------------------

def run_bench(b: GBench, side, args, options, rng, notes) -> list:
    import polytc

    sz = b.quick if args.quick else b.full
    arrays = b.inputs(rng, **sz)
    pin = side.polytc_inputs(arrays)
    tin = side.torch_inputs(arrays, pin)
    tfn = b.torch

    cells, contenders = {}, {}
    # PyTorch first: its output is the reference
    try:
        ref = side.host(tfn(*tin, **sz)).astype(np.float64)
        contenders["torch"] = Timed(lambda: tfn(*tin, **sz), side.time_torch)
    except Exception as e:  # noqa: BLE001 -- reported
        ref = None
        cells["torch"] = "fail"
        notes.append(f"{b.name} torch: {common.short(e)}")

    first = math.nan
    try:
        k = polytc.tc(b.tc, options=options, target=side.target)
        t0 = time.perf_counter()
        out = k(*pin)  # compiles (or loads from the disk cache)
        side.sync()
        first = time.perf_counter() - t0
        out = side.host(out)
    except Exception as e:  # noqa: BLE001 -- reported
        k = None
        cells["polytc"] = cells["launch"] = "fail"
        notes.append(f"{b.name} polytc: {common.short(e)}")
    if k is not None:
        why = check(out, ref) if ref is not None else None
        if why is not None:
            cells["polytc"] = cells["launch"] = "WRONG"
            notes.append(f"{b.name} polytc: WRONG, {why}")
        else:
            contenders["polytc"] = Timed(lambda: k(*pin), side.time_polytc)
            ck = k.specialize(*arrays)
            contenders["launch"] = Launches(ck, arrays)
            if args.show_code:
                print(f"--- {b.name}: mapping\n{ck.stages.get('mapping', '')}\n"
                      f"--- {b.name}: {side.target}\n{ck.code}", file=sys.stderr)

    timings = common.time_interleaved(contenders, args.repeats, warm=True,
                                      min_sample=args.min_sample, slow=1.0,
                                      slow_repeats=1 if args.quick else 3)
    times = {}
    for col, t in timings.items():
        if args.verbose:
            print(f"  {b.name} {col}: {t.inner} call(s) a sample, ms "
                  + " ".join(common.fmt_ms(x) for x in t.samples), file=sys.stderr)
        if t.error is not None:
            cells[col] = "fail"
            notes.append(f"{b.name} {col}: {t.error}")
        else:
            times[col] = t.median

    flops = b.flops(**sz)
    nbytes = sum(a.nbytes for a in arrays) + (ref.size * 4 if ref is not None else 0)

    def ms(col):
        return cells.get(col) or common.fmt_ms(times.get(col))

    def gflops(col):
        return common.fmt_num(flops / times[col] * 1e-9) if col in times else "-"

    ratio = (times["polytc"] / times["torch"] if "polytc" in times and "torch" in times
             else math.nan)
    poly = times.get("polytc", math.nan)
    return [b.name, ms("polytc"), ms("launch"), ms("torch"), common.fmt_ratio(ratio),
            gflops("polytc"), gflops("torch"),
            common.fmt_num(nbytes / poly * 1e-9) if b.membound and math.isfinite(poly)
            else "",
            common.fmt_num(first, 2) if math.isfinite(first) else "-"]


COLUMNS = ["kernel", "polytc", "launch", "torch", "polytc/torch", "GFLOP/s", "torch GFLOP/s",
           "GB/s", "first call s"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="cuda", choices=("cuda", "opencl"),
                    help="polytc's target: cuda (default; PyTorch on the same GPU) or "
                         "opencl (PyTorch on the CPU; to test this script without a GPU)")
    ap.add_argument("--only", default="", help="comma-separated kernel names")
    ap.add_argument("--quick", action="store_true",
                    help="small sizes, 5 samples, shorter samples (a smoke test)")
    ap.add_argument("--repeats", type=int, default=None,
                    help="timed samples per contender (default 21, 5 with --quick)")
    ap.add_argument("--min-sample", type=float, default=None,
                    help="seconds a sample lasts at least (default 0.02, 0.005 --quick)")
    ap.add_argument("--options", default="",
                    help='polytc.Options as JSON, e.g. \'{"block": [8, 32]}\' '
                         "(default: polytc's defaults)")
    ap.add_argument("--show-code", action="store_true",
                    help="print each kernel's mapping and generated code on stderr")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="every sample of every contender, on stderr")
    args = ap.parse_args(argv)
    if args.repeats is None:
        args.repeats = 5 if args.quick else 21
    if args.min_sample is None:
        args.min_sample = 0.005 if args.quick else 0.02
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")

    all_benches = benches()
    chosen = all_benches
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        names = [b.name for b in all_benches]
        unknown = [w for w in wanted if w not in names]
        if unknown:
            ap.error(f"unknown kernel(s) {', '.join(unknown)}; choose from {', '.join(names)}")
        chosen = [b for b in all_benches if b.name in wanted]

    try:
        import polytc
    except ImportError as e:
        print(f"bench_gpu: cannot import polytc ({e})", file=sys.stderr)
        return 1
    options = None
    if args.options:
        try:
            options = polytc.Options(**json.loads(args.options))
        except (ValueError, TypeError, polytc.PolytcError) as e:
            ap.error(f"--options: {e}")

    threads = common.default_threads()
    try:
        side = CudaSide() if args.target == "cuda" else OpenCLSide(threads)
    except Skip as e:
        print(f"bench_gpu: skipped ({args.target}): {e}")
        return 0

    load0 = common.load_average()
    print(f"polytc {args.target} benchmark: {side.describe()}")
    opts = f"polytc options: {options.to_json() if options else 'defaults'}"
    if args.target == "cuda":
        from polytc import config

        opts = f"nvcc: {shutil.which(config.nvcc()) or config.nvcc()}; {opts}"
    print(opts)
    print(f"median ms of one call over {args.repeats} interleaved samples"
          + (" (--quick: small sizes)" if args.quick else ""))
    sys.stdout.flush()

    rng = np.random.default_rng(0)
    rows, notes = [], []
    t_start = time.perf_counter()
    for b in chosen:
        t0 = time.perf_counter()
        try:
            rows.append(run_bench(b, side, args, options, rng, notes))
        except Exception as e:  # noqa: BLE001 -- one broken kernel does not end the run
            rows.append([b.name, "fail"] + [""] * (len(COLUMNS) - 2))
            notes.append(f"{b.name}: {common.short(e)}")
        if args.verbose:
            print(f"{b.name}: {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    print()
    print(common.table(COLUMNS, rows))
    print()
    for b in chosen:
        print(f"{b.name}: {sizes_text(b.quick if args.quick else b.full)}; torch: {b.what}")
    print("polytc: k(*inputs), inputs and outputs on the device"
          + (" (torch cuda tensors)" if args.target == "cuda" else " (pyopencl arrays)")
          + ", output allocated by polytc, and the kernel's error flag read back; launch: "
            "CompiledKernel.benchmark(), the launches alone; polytc/torch below 1: polytc "
            "is faster; GB/s: inputs + output once over polytc's time; first call: "
            "compile (or disk-cache load) and run")
    common.print_footer(notes, load0, t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
