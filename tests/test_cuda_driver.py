"""polytc's CUDA driver binding (runtime/cuda_driver.py) on the tests' CUDA emulator
(tests/cuda_emulator.c, a libcuda that runs kernels on the host): what crosses ctypes
(device memory, fills of every width, views, kernel parameters, the driver's error
names and its compiler's log), and the emulator's own promises (barriers, barrier
divergence).  The other cuda tests run on the emulator or a GPU through the runtime."""
import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

from polytc import PolytcError
from polytc.runtime.cuda_driver import DeviceArray, Driver

from . import cuda_emu
from .test_onnx_errors import raises

ADD_ONE = """extern "C" __global__ void __launch_bounds__(4) add_one(
    const float *__restrict__ a, float *__restrict__ b) {
  long i = blockIdx.x * blockDim.x + threadIdx.x;
  b[i] = a[i] + 1.0f;
}
"""
# each block reverses its 8 values through shared memory: right only with the barrier
REVERSE = """extern "C" __global__ void __launch_bounds__(8) rev(const float *a, float *b) {
  __shared__ float s[8];
  s[threadIdx.x] = a[blockIdx.x * 8 + threadIdx.x];
  __syncthreads();
  b[blockIdx.x * 8 + threadIdx.x] = s[7 - threadIdx.x];
  if (threadIdx.x == 0 && a[0] < 0) __syncthreads();  /* a barrier some threads skip */
}
"""


@pytest.fixture(scope="module")
def emulator():
    path = cuda_emu.build()
    if path is None:
        pytest.skip("the CUDA emulator does not build here")
    return path


@pytest.fixture(scope="module")
def drv(emulator):
    return Driver(ctypes.CDLL(emulator))


def test_the_device_and_its_attributes(drv):
    assert drv.name() == "polytc CUDA emulator" and drv.version() == 13000
    assert drv.capability() == (9, 0) and drv.emulated


@pytest.mark.parametrize("dtype,value", [(np.float32, 1.5), (np.int8, -3),
                                         (np.float16, 2.25), (np.float64, -0.5),
                                         (np.int64, 1 << 40), (np.bool_, True)])
def test_device_memory_round_trip_and_fill(drv, dtype, value):
    host = (np.arange(24) % 7).astype(dtype).reshape(2, 3, 4)
    d = DeviceArray(drv, host.shape, host.dtype).set(host)
    assert d.shape == (2, 3, 4) and d.ndim == 3 and d.nbytes == host.nbytes
    cai = d.__cuda_array_interface__
    assert cai["shape"] == (2, 3, 4) and cai["typestr"] == np.dtype(dtype).str
    assert cai["data"][0] == d.ptr and cai["version"] == 3
    np.testing.assert_array_equal(d.get(), host)
    d.fill(value)
    into = np.zeros_like(host)
    assert d.get(into) is into
    np.testing.assert_array_equal(into, np.full_like(host, value))


def test_an_empty_array_has_memory_all_the_same(drv):
    """A kernel whose index check fails on an empty array reads its element 0 before
    the run raises: the pointer is never null (the fuzzer's cuda-empty-* cases)."""
    d = DeviceArray(drv, (0, 5), np.float32)
    assert d.ptr != 0 and d.nbytes == 0 and d.get().shape == (0, 5)
    d.fill(1.0)
    d.set(np.zeros((0, 5), np.float32))


def test_a_launch_passes_device_pointers(drv):
    f = drv.functions(ADD_ONE, ["add_one"])["add_one"]
    a = DeviceArray(drv, (8,), np.float32).set(np.arange(8, dtype=np.float32))
    b = DeviceArray(drv, (8,), np.float32)
    b.fill(0.0)
    drv.launch(f, [2], [4], [a.ptr, b.ptr])
    drv.synchronize()
    np.testing.assert_array_equal(b.get(), np.arange(8) + 1)


def test_the_emulator_keeps_barriers_and_fails_a_divergent_one(drv):
    f = drv.functions(REVERSE, ["rev"])["rev"]
    host = np.arange(16, dtype=np.float32)
    a = DeviceArray(drv, (16,), np.float32).set(host)
    b = DeviceArray(drv, (16,), np.float32)
    drv.launch(f, [2], [8], [a.ptr, b.ptr])
    np.testing.assert_array_equal(b.get(), host.reshape(2, 8)[:, ::-1].reshape(-1))
    a.set(host - 1)  # a[0] < 0: thread 0 waits at a barrier the others never reach
    with raises(PolytcError, "cuLaunchKernel failed with CUDA_ERROR_LAUNCH_FAILED"):
        drv.launch(f, [2], [8], [a.ptr, b.ptr])


def test_driver_errors_name_the_call_and_the_error(drv):
    with raises(PolytcError, r"cannot load the PTX \(CUDA_ERROR_INVALID_PTX\)",
                "the CUDA emulator runs CUDA source, not PTX"):
        drv.functions("//\n.version 8.0\n.target sm_90\n", ["add_one"])
    with raises(PolytcError, r"\(CUDA_ERROR_INVALID_SOURCE\): gcc failed: ",
                r"kernel.cu:4:\d+: error: expected"):
        drv.functions(ADD_ONE.replace("1.0f;", "1.0f"), ["add_one"])
    with raises(PolytcError, "cuModuleGetFunction failed with CUDA_ERROR_NOT_FOUND"):
        drv.functions(ADD_ONE, ["nope"])
    with raises(PolytcError, "cuLaunchKernel failed with CUDA_ERROR_INVALID_VALUE"):
        drv.launch(drv.functions(ADD_ONE, ["add_one"])["add_one"], [1], [2048], [0, 0])
    with raises(PolytcError, "cuDeviceGetAttribute failed with error 101"):
        drv.call("cuDeviceGetAttribute", ctypes.byref(ctypes.c_int()), 1, 1)


def _runtime(env: dict) -> subprocess.CompletedProcess:
    code = ("from polytc import backends\nfrom polytc.runtime import cuda\n"
            "print(backends.available('cuda'))\nprint(cuda.device_key())\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)


def test_the_cuda_runtime_finds_its_device_through_the_driver(emulator):
    r = _runtime({"POLYTC_CUDA_DRIVER": emulator})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "True"
    assert "'device': 'polytc CUDA emulator', 'arch': '90', 'driver': 13000" in r.stdout


def test_without_a_driver_the_cuda_target_says_so(tmp_path):
    r = _runtime({"POLYTC_CUDA_DRIVER": str(tmp_path / "libnothing.so")})
    assert r.stdout.splitlines()[0] == "False"
    assert "PolytcError: the cuda target needs the NVIDIA driver's libcuda" in r.stderr
    assert "POLYTC_CUDA_DRIVER names another library" in r.stderr


def test_views_share_memory_and_keep_it_alive(drv):
    host = np.arange(12, dtype=np.float32)
    d = DeviceArray(drv, host.shape, host.dtype).set(host)
    r = d.reshape(3, -1)
    assert r.shape == (3, 4) and r.ptr == d.ptr and r.base is d
    assert d.reshape((2, 2, 3)).reshape(-1).base is d
    i = r.view(np.int32)
    del d
    np.testing.assert_array_equal(i.get(), host.view(np.int32).reshape(3, 4))
    r.fill(2.0)
    np.testing.assert_array_equal(i.reshape(12).get().view(np.float32), np.full(12, 2.0))
    with pytest.raises(ValueError, match="cannot reshape a DeviceArray of size 12"):
        r.reshape(5, -1)
    with pytest.raises(ValueError, match="cannot be viewed as"):
        r.view(np.float64)
    assert DeviceArray(drv, (0, 3), np.float32).reshape(-1, 0).shape == (0, 0)


def test_a_library_that_is_no_cuda_driver_says_so():
    r = _runtime({"POLYTC_CUDA_DRIVER": "libm.so.6"})
    assert r.stdout.splitlines()[0] == "False"
    assert "CUDA is not usable here (libm.so.6 is no CUDA driver (it has no cuInit))" \
        in r.stderr
