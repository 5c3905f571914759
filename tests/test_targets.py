"""The conformance catalogue on the accelerator targets.

* ``opencl`` runs everywhere (PoCL's CPU device in CI): every kernel with the device's
  own mapping, with the GPU mapping (tiles on work-groups, points on work-items, shared
  memory), and with odd sizes that force cyclic distribution of tiles and points.
* ``cuda``: every kernel's CUDA source is compiled to PTX with nvcc (no GPU needed);
  on a machine with a GPU (and its driver's libcuda) the kernels also run, with every
  mapping, and take and give device arrays (polytc's own, PyTorch's).
"""
import numpy as np
import pytest

import polytc
from polytc import KernelRuntimeError, PolytcError, UnsupportedError
from polytc import backends as targets

from .kernels import BY_NAME, CATALOGUE
from .test_kernels import as_tuple, check, params, rng_for

OPENCL = targets.available("opencl")
needs_opencl = pytest.mark.skipif(not OPENCL, reason="no OpenCL device")


def _cuda_ready() -> bool:
    try:
        return targets.available("cuda")
    except PolytcError:
        return False


def _nvcc() -> bool:
    from polytc.codegen_cuda import nvcc_available

    return nvcc_available()


MAPPINGS = {
    "device": polytc.Options(),
    "threads": polytc.Options(mapping="threads"),
    # blocks and tiles that divide nothing, fewer blocks than tiles: every loop cyclic
    "cyclic": polytc.Options(mapping="threads", block=(3, 5), block_tile=(7, 11),
                             grid=(2, 3), reduction_tile=4),
}


def run_on(entry, target, options, salt=0):
    k = polytc.tc(entry.tc, entry.def_name, target=target, options=options)
    inputs = entry.make(rng_for(entry, salt), **entry.sizes[0])
    copies = [np.copy(a) for a in inputs]
    outs = k(*inputs)
    for a, c in zip(inputs, copies):
        np.testing.assert_array_equal(a, c)
    check(entry, k, inputs, outs)
    return k


@needs_opencl
@pytest.mark.parametrize("mapping", list(MAPPINGS))
@pytest.mark.parametrize("entry", params(CATALOGUE))
def test_opencl(entry, mapping):
    run_on(entry, "opencl", MAPPINGS[mapping])


@needs_opencl
@pytest.mark.parametrize("name", ["matmul", "softmax", "conv2d", "prefix_sum", "mlp2"])
def test_opencl_several_sizes(name):
    entry = BY_NAME[name]
    k = polytc.tc(entry.tc, entry.def_name, target="opencl")
    for n, sizes in enumerate(entry.sizes):
        inputs = entry.make(rng_for(entry, 1 + n), **sizes)
        check(entry, k, inputs, k(*inputs))


@needs_opencl
def test_opencl_out_and_device_arrays():
    import pyopencl.array as cla

    from polytc.runtime import opencl

    entry = BY_NAME["matmul"]
    k = polytc.tc(entry.tc, entry.def_name, target="opencl")
    A, B = entry.make(rng_for(entry), **entry.sizes[0])
    want = A @ B
    out = np.full(want.shape, 7, np.float32)
    assert k(A, B, out=out) is out
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    q = opencl._state()["queue"]
    dA, dB = cla.to_device(q, A), cla.to_device(q, B)
    dC = k(dA, dB)  # device in, device out: the data stays on the device
    assert isinstance(dC, cla.Array) and dC.shape == want.shape
    np.testing.assert_allclose(dC.get(), want, rtol=1e-4, atol=1e-5)
    with pytest.raises(polytc.ArgumentError, match="dtype"):
        k(cla.to_device(q, A.astype(np.float64)), dB)


@needs_opencl
def test_opencl_shared_memory_and_stages():
    entry = BY_NAME["matmul"]
    k = polytc.tc(entry.tc, entry.def_name, target="opencl",
                  options=polytc.Options(mapping="threads"))
    A, B = entry.make(rng_for(entry), M=70, K=50, N=90)
    ck = k.specialize(A, B)
    assert {"tc", "schedule", "mapping", "opencl"} <= set(ck.stages)
    assert "__local float pt_shared_A" in ck.code and "barrier(" in ck.code
    assert "get_group_id(1)" in ck.code and "get_local_id(0)" in ck.code
    assert "shared [('A', [32, 32]), ('B', [32, 32])]" in ck.stages["mapping"]
    no_shared = k.with_options(mapping="threads", shared_memory=False).specialize(A, B)
    assert "__local" not in no_shared.code
    np.testing.assert_allclose(k(A, B), A @ B, rtol=1e-4, atol=1e-4)
    assert "target=opencl" in repr(ck)


@needs_opencl
def test_opencl_code_for_llvm_vectoriser():
    """On a CPU device the register tile's accumulator loops are unrolled (an indexed
    array stays on the stack otherwise) and a reduction into a scalar carries clang's
    licence to reassociate, as the C target's omp simd reduction does."""
    mm = BY_NAME["matmul"]
    A, B = mm.make(rng_for(mm), M=64, K=64, N=64)
    k = polytc.tc(mm.tc, mm.def_name, target="opencl", options=polytc.Options(mapping="groups"))
    assert "#pragma unroll" in k.specialize(A, B).code
    mv = BY_NAME["matvec"]
    args = mv.make(rng_for(mv), **mv.sizes[0])
    k = polytc.tc(mv.tc, mv.def_name, target="opencl", options=polytc.Options(mapping="groups"))
    assert "#pragma clang loop vectorize(enable)" in k.specialize(*args).code
    strict = k.with_options(mapping="groups", vectorize=False).specialize(*args).code
    assert "vectorize(enable)" not in strict


@needs_opencl
def test_opencl_takes_torch_tensors():
    torch = pytest.importorskip("torch")
    entry = BY_NAME["matmul"]
    k = polytc.tc(entry.tc, entry.def_name, target="opencl")
    A, B = entry.make(rng_for(entry), **entry.sizes[0])
    for _ in range(2):  # the second call looks the signature up again
        np.testing.assert_allclose(k(torch.from_numpy(A), torch.from_numpy(B)), A @ B,
                                   rtol=1e-4, atol=1e-5)


GATHER = "def gather(float(N) T, int32(M) idx) -> (O) {\n    O(i) = T(idx(i))\n}"
DIV = "def div(int32(N) A, int32(N) B) -> (O) {\n    O(i) = A(i) / B(i)\n}"


@pytest.mark.parametrize("mapping", ["device", "threads"])
@pytest.mark.parametrize("target", [pytest.param("opencl", marks=needs_opencl), pytest.param(
    "cuda", marks=pytest.mark.skipif(not _cuda_ready(), reason="no CUDA GPU"))])
def test_runtime_faults(target, mapping):
    g = polytc.tc(GATHER, target=target, options=MAPPINGS[mapping])
    T = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(g(T, np.array([4, 0], np.int32)), [4, 0])
    with pytest.raises(KernelRuntimeError, match="out of bounds.*'T'") as info:
        g(T, np.array([1, 99], np.int32))
    assert "<tc>:2:" in str(info.value) and "T(idx(i))" in str(info.value)
    # the fault word is cleared for the next call (its buffer is reused)
    np.testing.assert_array_equal(g(T, np.array([3, 1], np.int32)), [3, 1])
    d = polytc.tc(DIV, target=target, options=MAPPINGS[mapping])
    A = np.array([6, 7, 8], np.int32)
    np.testing.assert_array_equal(d(A, np.array([2, 7, -8], np.int32)), [3, 1, -1])
    with pytest.raises(KernelRuntimeError, match="division by zero"):
        d(A, np.array([1, 0, 1], np.int32))


def test_unknown_target_and_unsupported_builtin():
    with pytest.raises(PolytcError, match="unknown target 'metal'") as info:
        polytc.tc(GATHER, target="metal")
    assert "opencl" in info.value.hint
    if OPENCL:
        k = polytc.tc("def f(double(N) A) -> (O) { O(i) = j0(A(i)) }", target="opencl")
        with pytest.raises(UnsupportedError, match="'j0' is not supported by OpenCL"):
            k(np.ones(3))


def test_opencl_device_that_cannot_build_is_not_available(monkeypatch):
    """pocl 3 on a CPU newer than its LLVM (a Zen 5) fails every build with "unknown
    target CPU 'generic'": the target is then unavailable, with the reason, not an error
    in every kernel."""
    pytest.importorskip("pyopencl")
    from polytc.runtime import opencl

    class BuildError(Exception):
        pass

    class FakeCL:
        Error = BuildError

        class Program:
            def __init__(self, ctx, src):
                pass

            def build(self):
                raise BuildError("Build on <Device 'pthread'>:\n"
                                 "error: unknown target CPU 'generic'")

    dev = type("Dev", (), {"name": "pthread-CPU"})()
    with pytest.raises(PolytcError, match="'pthread-CPU' cannot build kernels: error: "
                                          "unknown target CPU 'generic'") as info:
        opencl._probe(FakeCL, None, dev)
    assert "POLYTC_OPENCL_DEVICE" in info.value.hint
    monkeypatch.setattr(opencl, "_STATE", {"broken": info.value})
    assert not targets.available("opencl")


def test_kernel_to_target_keeps_options():
    k = polytc.tc(GATHER, options=polytc.Options(block=(64,)))
    g = k.to("opencl")
    assert g.target == "opencl" and k.target == "c" and g.options == k.options
    assert "target=opencl" in repr(g)


# --- CUDA ------------------------------------------------------------------------------
def cuda_source(entry, options=None, **sizes):
    from polytc.compiler import pipeline
    from polytc.runtime.args import as_arrays, bind_sizes
    from polytc.runtime.cuda import default_device

    k = polytc.tc(entry.tc, entry.def_name)
    inputs = as_arrays(k.program, entry.make(rng_for(entry), **(sizes or entry.sizes[0])))
    env = bind_sizes(k.program, inputs)
    return pipeline.run(k.program, env, options or polytc.Options(), "cuda",
                        default_device()).code


@pytest.mark.skipif(not _nvcc(), reason="nvcc not found")
def test_ptx_is_compiled_once_then_read_from_the_disk_cache(monkeypatch):
    from polytc import codegen_cuda
    from polytc.runtime import cuda

    monkeypatch.setattr(cuda, "_arch", lambda: "90")
    calls = []
    real = codegen_cuda.compile_ptx
    monkeypatch.setattr(codegen_cuda, "compile_ptx",
                        lambda src, arch=None: calls.append(arch) or real(src, arch))
    src = 'extern "C" __global__ void polytc_k0(float *x) { x[threadIdx.x] += 1.0f; }\n'
    first, second = cuda.ptx(src), cuda.ptx(src)
    assert first == second and ".entry polytc_k0" in first and calls == ["90"]


@pytest.mark.skipif(not _nvcc(), reason="nvcc not found")
@pytest.mark.parametrize("entry", params(CATALOGUE))
def test_cuda_compiles_to_ptx(entry):
    from polytc.codegen_cuda import compile_ptx

    src = cuda_source(entry)
    assert 'extern "C" __global__' in src and "__launch_bounds__" in src
    ptx = compile_ptx(src)
    assert ".entry polytc_k0" in ptx


@pytest.mark.skipif(not _nvcc(), reason="nvcc not found")
def test_cuda_shared_memory_source():
    from polytc.codegen_cuda import compile_ptx

    src = cuda_source(BY_NAME["matmul"], M=70, K=50, N=90)
    assert "__shared__ float pt_shared_A" in src and "__syncthreads()" in src
    assert "blockIdx.y" in src and "threadIdx.x" in src
    assert ".shared" in compile_ptx(src)


@pytest.mark.skipif(not _cuda_ready(), reason="no CUDA GPU")
@pytest.mark.parametrize("mapping", list(MAPPINGS))
@pytest.mark.parametrize("entry", params(CATALOGUE))
def test_cuda(entry, mapping):
    run_on(entry, "cuda", MAPPINGS[mapping])


@pytest.mark.skipif(not _cuda_ready(), reason="no CUDA GPU")
def test_cuda_device_arrays():
    from polytc.runtime import cuda

    entry = BY_NAME["matmul"]
    k = polytc.tc(entry.tc, entry.def_name, target="cuda")
    A, B = entry.make(rng_for(entry), **entry.sizes[0])
    dC = k(cuda.to_device(A), cuda.to_device(B))
    assert isinstance(dC, cuda.DeviceArray) and dC.shape == (A.shape[0], B.shape[1])
    np.testing.assert_allclose(dC.get(), A @ B, rtol=1e-4, atol=1e-5)
    assert as_tuple(k(A, B))[0].shape == (A.shape[0], B.shape[1])
    torch = pytest.importorskip("torch")
    for _ in range(2):  # tensors on the CPU are host arrays: copied in, numpy out
        hC = k(torch.from_numpy(A), torch.from_numpy(B))
        assert isinstance(hC, np.ndarray)
        np.testing.assert_allclose(hC, A @ B, rtol=1e-4, atol=1e-5)
    if not torch.cuda.is_available():
        pytest.skip("no CUDA build of PyTorch")
    tC = k(torch.from_numpy(A).cuda(), torch.as_tensor(cuda.to_device(B), device="cuda"))
    assert isinstance(tC, torch.Tensor) and tC.is_cuda
    np.testing.assert_allclose(tC.cpu().numpy(), A @ B, rtol=1e-4, atol=1e-5)


@needs_opencl
def test_opencl_forces_vectorisation_of_float_reductions_only():
    """LLVM's licence to reassociate (``clang loop vectorize(enable)``) goes on float
    reductions; an integer one vectorises without it, and pocl's LLVM, forced over the 4
    steps of a reduction tile of ``dot4`` products, dropped the last rows' sums on a Zen 4
    (``test_opencl[quantised_matmul-cyclic]``)."""
    def code(name, mapping):
        entry = BY_NAME[name]
        k = polytc.tc(entry.tc, entry.def_name, target="opencl", options=MAPPINGS[mapping])
        return k.specialize(*entry.make(rng_for(entry), **entry.sizes[0])).code

    assert "clang loop vectorize" in code("softmax", "device")
    for mapping in ("threads", "cyclic"):
        assert "clang loop vectorize" not in code("quantised_matmul", mapping)
