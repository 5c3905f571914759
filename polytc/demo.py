"""``polytc demo``: compile and run real kernels and a small model, check them against
numpy, and show what the compiler did."""
from __future__ import annotations

import time

import numpy as np

import polytc

KERNELS = """
def matmul(float(M,K) A, float(K,N) B) -> (C) {
    C(m, n) +=! A(m, k) * B(k, n)
}
def softmax(float(N,D) X) -> (Y) {
    mx(n) max=! X(n, d)
    e(n, d) = exp(X(n, d) - mx(n))
    s(n) +=! e(n, d)
    Y(n, d) = e(n, d) / s(n)
}
def conv2d(float(B,C,H,W) I, float(F,C,KH,KW) Wt) -> (O) {
    O(b, f, h, w) +=! I(b, c, h + kh, w + kw) * Wt(f, c, kh, kw)
}
def layernorm(float(N,D) X, float(D) g, float(D) bta) -> (Y) {
    mean(n) +=! X(n, d) / D
    var(n) +=! (X(n, d) - mean(n)) * (X(n, d) - mean(n)) / D
    Y(n, d) = (X(n, d) - mean(n)) * rsqrt(var(n) + 1e-5) * g(d) + bta(d)
}
"""


@polytc.kernel
def mlp(X: "float(B,I)", W1: "float(H,I)", b1: "float(H)", W2: "float(O,H)", b2: "float(O)"):
    """A 2-layer perceptron with a softmax head: the demo's model."""
    h[b, j] += X[b, i] * W1[j, i]
    a[b, j] = fmax(h[b, j] + b1[j], 0.0)
    z[b, o] += a[b, j] * W2[o, j]
    logits[b, o] = z[b, o] + b2[o]
    mx[b] = max(mx[b], logits[b, o])
    e[b, o] = exp(logits[b, o] - mx[b])
    s[b] += e[b, o]
    P[b, o] = e[b, o] / s[b]
    return P


def _np_softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _time(f, *args, repeat=7):
    f(*args)
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f(*args)
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2]


def _conv_ref(I, Wt):
    B, C, H, W = I.shape
    F, _, KH, KW = Wt.shape
    out = np.zeros((B, F, H - KH + 1, W - KW + 1), np.float32)
    for kh in range(KH):
        for kw in range(KW):
            out += np.einsum("bchw,fc->bfhw", I[:, :, kh:kh + H - KH + 1, kw:kw + W - KW + 1],
                             Wt[:, :, kh, kw])
    return out


def _onnx_demo():
    """A whole ONNX model: a transformer encoder layer, against onnx's reference (and
    onnxruntime when it is installed)."""
    from onnx.reference import ReferenceEvaluator

    from polytc.graph import examples

    model = examples.transformer_layer(batch=1, seq=32, d_model=64, heads=4, ffn=128)
    feeds = examples.example_inputs(model, seed=0)
    print("\nONNX model: a transformer encoder layer (attention, softmax, layernorm, GELU)")
    t0 = time.perf_counter()
    sess = polytc.onnx.compile(model)
    compile_s = time.perf_counter() - t0
    got = sess.run(None, feeds)[0]
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    err = float(np.max(np.abs(got - want)))
    assert err < 1e-3, err
    line = (f"  {len(sess.graph.nodes)} ops in {sum(len(p.kernels) for p in sess._plans.values())}"
            f" fused groups, compiled in {compile_s:.2f} s; run "
            f"{_time(lambda: sess.run(None, feeds)) * 1e3:.3f} ms; max |err| vs onnx "
            f"reference {err:.1e}")
    try:
        import onnxruntime as ort

        o = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        line += f"; onnxruntime {_time(lambda: o.run(None, feeds)) * 1e3:.3f} ms"
    except ImportError:
        pass
    print(line)
    print("\n".join("  " + r for r in sess.report().splitlines()[2:8]) + "\n  ...")
    _export_demo(sess, feeds, got)


def _export_demo(sess, feeds, want) -> None:
    """The same model exported ahead of time (docs/export.md): built with make, run by
    its own command-line program in a process without Python."""
    import os
    import shutil
    import subprocess
    import tempfile

    if shutil.which("make") is None:
        print("\nexport: no make here, skipped")
        return
    with tempfile.TemporaryDirectory(prefix="polytc-export-") as d:
        t0 = time.perf_counter()
        e = sess.export(d)
        export_s = time.perf_counter() - t0
        paths = []
        for i, v in enumerate(sess.graph.inputs):
            paths.append(os.path.join(d, f"in{i}.npy"))
            np.save(paths[-1], feeds[v])
        r = subprocess.run([e.program, "-r", "20", "-o", os.path.join(d, "out")] + paths,
                           capture_output=True, text=True, env={}, check=True)
        got = np.load(os.path.join(d, "out", sess.graph.outputs[0] + ".npy"))
        assert np.array_equal(got, want)
        print(f"\nexported (polytc export): C sources, weights and a Makefile, built in "
              f"{export_s:.1f} s; run_model, no Python: {r.stdout.strip()}, outputs equal")


def _accelerator_demo(ks, cases) -> None:
    """The same kernels on the OpenCL device (PoCL's CPU device when there is no GPU)
    and, where a GPU and its driver are present, on CUDA."""
    from . import backends as targets

    for target in ("opencl", "cuda"):
        if not targets.available(target):
            print(f"\n{target}: no device here, skipped")
            continue
        print(f"\nthe same kernels on target={target} "
              f"({targets.get(target).device().name})")
        for name, args, expected in cases:
            k = ks[name].to(target)
            t0 = time.perf_counter()
            got = k(*args)
            compile_s = time.perf_counter() - t0
            err = float(np.max(np.abs(got - expected)))
            assert err < 1e-3 * max(1.0, float(np.max(np.abs(expected)))), (target, name, err)
            print(f"{name:<10} {compile_s * 1e3:7.0f}ms {_time(k, *args) * 1e3:8.3f}ms "
                  f"{err:10.2e}  {got.shape}")
    A, B = cases[0][1]
    gpu = ks["matmul"].to("opencl").with_options(mapping="threads")
    if targets.available("opencl"):
        ck = gpu.specialize(A, B)
        print("\nmatmul mapped as for a GPU (tiles on work-groups, points on work-items, "
              "tiles of A and B in local memory):")
        print("\n".join("  " + line for line in ck.stages["mapping"].splitlines()))
        np.testing.assert_allclose(gpu(A, B), cases[0][2], rtol=1e-3, atol=1e-3)


def main() -> int:
    rng = np.random.default_rng(0)
    f32 = np.float32
    ks = polytc.tc(KERNELS, filename="demo.tc")
    A, B = rng.standard_normal((256, 384), f32), rng.standard_normal((384, 192), f32)
    X = rng.standard_normal((512, 256), f32)
    I, Wt = rng.standard_normal((2, 16, 32, 32), f32), rng.standard_normal((32, 16, 3, 3), f32)
    g, bt = rng.standard_normal(256, f32), rng.standard_normal(256, f32)
    mean = X.mean(1, keepdims=True)
    cases = [
        ("matmul", (A, B), A @ B),
        ("softmax", (X,), _np_softmax(X)),
        ("conv2d", (I, Wt), _conv_ref(I, Wt)),
        ("layernorm", (X, g, bt),
         (X - mean) / np.sqrt(((X - mean) ** 2).mean(1, keepdims=True) + 1e-5) * g + bt),
    ]
    print(f"polytc {polytc.__version__}: TC kernels compiled with isl + gcc\n")
    print(f"{'kernel':<10} {'compile':>9} {'run':>10} {'max |err|':>10}  output shape")
    for name, args, expected in cases:
        k = ks[name]
        t0 = time.perf_counter()
        ck = k.specialize(*args)
        compile_s = time.perf_counter() - t0
        got = k(*args)
        err = float(np.max(np.abs(got - expected)))
        assert err < 1e-3 * max(1.0, float(np.max(np.abs(expected)))), (name, err)
        print(f"{name:<10} {compile_s * 1e3:7.0f}ms {_time(k, *args) * 1e3:8.3f}ms "
              f"{err:10.2e}  {got.shape}  [{ck.options.fusion} fusion]")

    print("\nmodel: 2-layer MLP + softmax written with @polytc.kernel (8 statements)")
    Xb = rng.standard_normal((64, 256), f32)
    W1, b1 = rng.standard_normal((512, 256), f32) * 0.05, rng.standard_normal(512, f32)
    W2, b2 = rng.standard_normal((10, 512), f32) * 0.05, rng.standard_normal(10, f32)
    t0 = time.perf_counter()
    P = mlp(Xb, W1, b1, W2, b2)
    compile_s = time.perf_counter() - t0
    ref = _np_softmax(np.maximum(Xb @ W1.T + b1, 0) @ W2.T + b2)
    err = float(np.max(np.abs(P - ref)))
    assert err < 1e-4, err
    run_s = _time(mlp, Xb, W1, b1, W2, b2)
    print(f"  compile+first run {compile_s * 1e3:.0f} ms, run {run_s * 1e3:.3f} ms"
          f", max |err| vs numpy {err:.2e}, predicted classes {P.argmax(1)[:8]}...")

    _accelerator_demo(ks, cases)
    _onnx_demo()

    ck = ks["softmax"].specialize(X)
    print("\nwhat the compiler made of softmax (schedule tree, then C):")
    print("\n".join("  " + line for line in ck.stages["schedule"].splitlines()[:24]))
    body = ck.code[ck.code.index("int polytc_kernel"):]
    print("\n".join("  " + line for line in body.splitlines()[:40]))
    print("\ndemo ok")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
