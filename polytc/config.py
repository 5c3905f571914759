"""Every environment setting polytc reads, in one place.

=====================  ===========================================================
``POLYTC_CACHE_DIR``    on-disk kernel cache (default: the user cache dir, platformdirs)
``POLYTC_NO_DISK_CACHE`` ``1`` disables the on-disk cache (the in-memory one stays)
``POLYTC_DEBUG``        0 quiet; 1 log passes and timings; 2 also dump every stage to
                        stderr; 3 also let internal exceptions through with tracebacks
``POLYTC_CC``           the C compiler (default ``gcc``)
``POLYTC_CFLAGS``       extra flags appended to the C compiler's command line
``POLYTC_ISA``          build for a narrower vector ISA than the host's: ``avx2`` (256-bit
                        vectors, 16 registers) or ``sse`` (128-bit); ``native`` or unset:
                        the host's own (machine.py)
``POLYTC_NUM_THREADS``  OpenMP threads for kernels (default: ``OMP_NUM_THREADS`` or all)
``POLYTC_ADAPTIVE_THREADS`` ``0``: a model's runs always use all threads (default: one
                        thread while that is faster, a busy machine; graph/governor.py)
``POLYTC_PIN_THREADS``  ``0``: runs leave OpenMP's worker threads where Linux puts them
                        (default: each on a CPU other than the calling thread's while
                        the machine is quiet, unless ``OMP_PROC_BIND``, ``OMP_PLACES``
                        or ``GOMP_CPU_AFFINITY`` binds them; runtime/placement.py)
``GOMP_SPINCOUNT``      how long libgomp's idle threads spin before they sleep; polytc
                        sets 10000 before it loads libgomp unless this or
                        ``OMP_WAIT_POLICY`` is set (libgomp's default spins ~30x longer:
                        with a busy process on one core, BERT-2L ran 134 instead of 16 ms)
``POLYTC_ARENA_HEADROOM`` MiB that a model with symbolic input dimensions faults into its
                        arena beyond its first plan's need, up to 4 times that need, so
                        that larger batches find their pages touched (default 64; ``0``
                        none; graph/arena.py)
``POLYTC_NO_TUNING_CACHE`` ``1``: kernels created without options ignore the options
                        ``polytc.autotune`` stored (it still stores them)
``POLYTC_OPENCL_DEVICE`` the OpenCL device: an index or part of its name (default: the
                        first GPU, else the first device)
``POLYTC_NVCC``         the CUDA compiler (default ``nvcc``)
``POLYTC_CUDA_ARCH``    the ``compute_XY`` to compile for without a GPU (default 90)
``POLYTC_CUDA_DRIVER``  the CUDA driver library the cuda target loads (default
                        ``libcuda.so.1``, which the NVIDIA driver installs)
``POLYTC_INT8_DOT``     ``1``/``0``: quantised products as ``dot4`` of int8 words, or as
                        float products (default: ``dot4`` where the CPU has VNNI;
                        graph/quantised.py)
``POLYTC_FUZZ_EXAMPLES`` programs the differential fuzzer of the test suite draws
                        (tests/test_differential.py; default 200: about half a minute)
``POLYTC_FUZZ_RANDOM``  ``1``: the property tests draw new examples at each run (by
                        default the same ones: tests/conftest.py)
=====================  ===========================================================
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import sys


def cache_dir() -> str:
    d = os.environ.get("POLYTC_CACHE_DIR")
    if d:
        return d
    import platformdirs

    return platformdirs.user_cache_dir("polytc")


def disk_cache_enabled() -> bool:
    return os.environ.get("POLYTC_NO_DISK_CACHE", "0") not in ("1", "true", "yes")


def tuning_cache_enabled() -> bool:
    return os.environ.get("POLYTC_NO_TUNING_CACHE", "0") not in ("1", "true", "yes")


def debug_level() -> int:
    try:
        return int(os.environ.get("POLYTC_DEBUG", "0"))
    except ValueError:
        return 0


def isa() -> str:
    """``POLYTC_ISA``, lower case; '' for the host's own."""
    v = os.environ.get("POLYTC_ISA", "").strip().lower()
    return "" if v == "native" else v


def c_compiler() -> str:
    return os.environ.get("POLYTC_CC", "gcc")


def extra_cflags() -> list[str]:
    return os.environ.get("POLYTC_CFLAGS", "").split()


def opencl_device() -> str:
    return os.environ.get("POLYTC_OPENCL_DEVICE", "").strip()


def nvcc() -> str:
    return os.environ.get("POLYTC_NVCC", "nvcc")


def cuda_arch() -> str:
    return os.environ.get("POLYTC_CUDA_ARCH", "90")


def cuda_driver() -> str:
    return os.environ.get("POLYTC_CUDA_DRIVER", "libcuda.so.1")


def fuzz_examples(default: int = 200) -> int:
    try:
        return max(1, int(os.environ.get("POLYTC_FUZZ_EXAMPLES", default)))
    except ValueError:
        return default


def fuzz_random() -> bool:
    return os.environ.get("POLYTC_FUZZ_RANDOM", "") not in ("", "0")


def int8_dot(default: bool) -> bool:
    """Whether quantised products run as ``dot4`` (``POLYTC_INT8_DOT``, else ``default``:
    the CPU's answer)."""
    v = os.environ.get("POLYTC_INT8_DOT", "").strip()
    return default if v == "" else v not in ("0", "false", "no")


def num_threads() -> int | None:
    v = os.environ.get("POLYTC_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
    try:
        return int(v) if v else None
    except ValueError:
        return None


def arena_headroom(default: int = 64) -> int:
    """``POLYTC_ARENA_HEADROOM`` in bytes (``default`` MiB when unset or not a number)."""
    try:
        mib = float(os.environ.get("POLYTC_ARENA_HEADROOM", default))
    except ValueError:
        mib = default
    return max(0, int(mib * (1 << 20)))


def adaptive_threads() -> bool:
    return os.environ.get("POLYTC_ADAPTIVE_THREADS", "1") != "0"


def pin_threads() -> bool:
    """``POLYTC_PIN_THREADS``; unset, pinned unless the user binds OpenMP's threads
    (``OMP_PROC_BIND``, ``OMP_PLACES``, ``GOMP_CPU_AFFINITY``)."""
    v = os.environ.get("POLYTC_PIN_THREADS")
    if v is not None:
        return v != "0"
    return not any(os.environ.get(n) for n in ("OMP_PROC_BIND", "OMP_PLACES",
                                                "GOMP_CPU_AFFINITY"))


#: libgomp's spin count before an idle thread sleeps (see the table above): short
#: enough that a thread sharing its core with other work yields it between kernels, long
#: enough to cover the gaps between the parallel loops of one run
GOMP_SPINCOUNT = "10000"


def openmp_environment() -> None:
    """Set libgomp's wait policy (``GOMP_SPINCOUNT``) unless the user chose one; call
    before libgomp is loaded (it reads its environment once)."""
    if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = GOMP_SPINCOUNT
    n = num_threads()  # the team size of every parallel loop (kernels name none)
    if n and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(n)


#: the log level that replaces ``POLYTC_DEBUG``'s in this context (``log_level``)
_LOG_LEVEL: contextvars.ContextVar = contextvars.ContextVar("polytc_log_level",
                                                            default=None)


@contextlib.contextmanager
def log_level(level: int | None):
    """Within the block, ``log`` prints up to ``level`` instead of ``POLYTC_DEBUG``'s
    level (None: no change): an onnxruntime-style session's ``log_severity_level``
    (graph/ortapi.py).  A context variable, so other threads and sessions keep theirs; a
    thread the block starts (a pool's) starts without it.  ``POLYTC_DEBUG=3``'s
    tracebacks stay the environment's."""
    if level is None:
        yield
        return
    token = _LOG_LEVEL.set(level)
    try:
        yield
    finally:
        _LOG_LEVEL.reset(token)


def log(level: int, msg: str) -> None:
    """Print ``msg`` to stderr when ``POLYTC_DEBUG >= level`` (or ``log_level``'s)."""
    override = _LOG_LEVEL.get()
    if (debug_level() if override is None else override) >= level:
        print(f"[polytc] {msg}", file=sys.stderr)
