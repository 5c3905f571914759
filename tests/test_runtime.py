"""The runtime's contract: specialisation per signature, the two caches, out=, options,
introspection, named passes."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import polytc
from polytc.compiler import pipeline

from tests.kernels_small import MATMUL as MM


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYTC_CACHE_DIR", str(tmp_path / "cache"))
    polytc.clear_cache(disk=False)
    yield
    polytc.clear_cache(disk=False)


def rand(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def test_second_call_touches_neither_isl_nor_gcc(monkeypatch):
    mm = polytc.tc(MM)
    A, B = rand(8, 5), rand(5, 7)
    np.testing.assert_allclose(mm(A, B), A @ B, rtol=1e-5, atol=1e-5)

    def boom(*a, **k):
        raise AssertionError("compiled again")

    monkeypatch.setattr(pipeline, "run", boom)
    import polytc.codegen_c.compiler as compiler

    monkeypatch.setattr(compiler, "build_shared_object", boom)
    for _ in range(3):
        np.testing.assert_allclose(mm(A, B), A @ B, rtol=1e-5, atol=1e-5)
    # a new Kernel object for the same program shares the process table
    np.testing.assert_allclose(polytc.tc(MM)(A, B), A @ B, rtol=1e-5, atol=1e-5)


def test_disk_cache_serves_a_new_process_table(monkeypatch):
    A, B = rand(6, 4), rand(4, 3)
    polytc.tc(MM)(A, B)
    polytc.clear_cache(disk=False)
    monkeypatch.setattr(pipeline, "run", lambda *a, **k: pytest.fail("isl ran again"))
    ck = polytc.tc(MM).specialize(A, B)
    assert ck._build is None  # loaded, not built
    assert "omp" in ck.code or "for (" in ck.code
    np.testing.assert_allclose(ck.run([A, B]), A @ B, rtol=1e-5, atol=1e-5)


def test_disk_cache_across_processes(tmp_path):
    script = "\n".join([
        "import sys, numpy as np, polytc",
        "from polytc.compiler import pipeline",
        f"mm = polytc.tc({MM!r})",
        "A = np.ones((4, 3), np.float32); B = np.ones((3, 2), np.float32)",
        "if sys.argv[1] == 'second':",
        "    pipeline.run = None  # any compile would crash",
        "print(mm(A, B).sum())",
    ])
    env = {**__import__("os").environ, "POLYTC_CACHE_DIR": str(tmp_path / "shared")}
    for which in ("first", "second"):
        out = subprocess.run([sys.executable, "-c", script, which], env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "24.0"


@pytest.mark.parametrize("user,want", [({}, "10000"), ({"GOMP_SPINCOUNT": "5"}, "5"),
                                       ({"OMP_WAIT_POLICY": "passive"}, "unset")])
def test_openmp_wait_policy_is_set_before_libgomp_loads(user, want):
    script = "\n".join([
        "import os, numpy as np, polytc",
        f"mm = polytc.tc({MM!r})",
        "mm(np.ones((4, 3), np.float32), np.ones((3, 2), np.float32))",
        "print(os.environ.get('GOMP_SPINCOUNT', 'unset'))",
    ])
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    out = subprocess.run([sys.executable, "-c", script], env={**env, **user},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == want


def test_corrupt_disk_entry_is_rebuilt():
    import glob

    A, B = rand(5, 5), rand(5, 5)
    polytc.tc(MM)(A, B)
    polytc.clear_cache(disk=False)
    for so in glob.glob(str(__import__("os").environ["POLYTC_CACHE_DIR"]) + "/**/kernel.so",
                        recursive=True):
        with open(so, "r+b") as f:
            f.seek(100)
            f.write(b"\0garbage\0")
    np.testing.assert_allclose(polytc.tc(MM)(A, B), A @ B, rtol=1e-5, atol=1e-5)


def test_specialises_per_size_and_out():
    mm = polytc.tc(MM)
    for m, k, n in [(3, 4, 5), (17, 1, 9), (3, 4, 5)]:
        A, B = rand(m, k), rand(k, n)
        np.testing.assert_allclose(mm(A, B), A @ B, rtol=1e-5, atol=1e-5)
    A, B = rand(4, 6), rand(6, 2)
    C = np.empty((4, 2), np.float32)
    assert mm(A, B, out=C) is C
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)


def test_out_on_the_fast_path_is_checked_as_on_the_first_call(monkeypatch):
    """A call with ``out=`` whose inputs' signature was seen before skips the slow
    checks, not the ones that matter: a wrong shape, dtype, layout or an out= that
    overlaps an input still fail as on a first call, and nothing is written then."""
    mm = polytc.tc(MM)
    A, B = rand(6, 5), rand(5, 4)
    C = np.empty((6, 4), np.float32)
    assert mm(A, B, out=C) is C
    C2 = np.zeros((6, 4), np.float32)
    with monkeypatch.context() as m:  # the fast path: the checked one is not taken
        m.setattr(mm, "_call_slow", lambda *a: pytest.fail("out= took the slow path"))
        assert mm(A, B, out=C2) is C2
    np.testing.assert_allclose(C2, A @ B, rtol=1e-5, atol=1e-5)
    for bad, words in [(np.empty((6, 5), np.float32), "[6, 4]"),
                       (np.empty((6, 4), np.float64), "float64"),
                       (np.empty((4, 6), np.float32).T, "C-contiguous")]:
        with pytest.raises(polytc.PolytcError) as e:
            mm(A, B, out=bad)
        assert "out= for 'C'" in str(e.value) and words in str(e.value)
    buf = np.zeros(40, np.float32)  # an A of the same signature and an out= in one buffer
    a, o = buf[:30].reshape(6, 5), buf[10:34].reshape(6, 4)
    a[...] = A
    with pytest.raises(polytc.PolytcError, match="overlaps the input 'A'"):
        mm(a, B, out=o)
    np.testing.assert_array_equal(a, A)  # (nothing written)


def test_accumulate_into_out():
    acc = polytc.tc("def acc(float(N,K) A) -> (s) { s(n) += A(n, k) }")
    A = rand(3, 4)
    s = np.full(3, 10.0, np.float32)
    acc(A, out=s)
    np.testing.assert_allclose(s, 10 + A.sum(1), rtol=1e-5)


def test_non_contiguous_inputs_are_handled():
    mm = polytc.tc(MM)
    A, B = rand(8, 6), rand(16, 4)
    At, Bs = A.T, B[::2]  # transposed view, strided view
    np.testing.assert_allclose(mm(At, Bs), At @ Bs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mm(np.ascontiguousarray(At), np.ascontiguousarray(Bs)),
                               At @ Bs, rtol=1e-5, atol=1e-5)


def test_scalar_inputs_and_several_outputs():
    k = polytc.tc("""
    def axpy(float a, float(N) x, float(N) y) -> (z, n2) {
        z(i) = a * x(i) + y(i)
        n2 +=! z(i) * z(i)
    }""")
    x, y = rand(7), rand(7, seed=1)
    z, n2 = k(2.5, x, y)
    np.testing.assert_allclose(z, 2.5 * x + y, rtol=1e-5)
    assert n2.shape == ()
    np.testing.assert_allclose(n2, np.sum((2.5 * x + y) ** 2), rtol=1e-4)
    z2, _ = k(np.float32(2.5), x, y)
    np.testing.assert_array_equal(z, z2)


def test_options_are_immutable_and_change_the_code():
    mm = polytc.tc(MM)
    A, B = rand(300, 300), rand(300, 300)
    serial = mm.with_options(parallel=False)
    assert mm.options.parallel and not serial.options.parallel
    assert "omp parallel" in mm.specialize(A, B).code
    assert "omp parallel" not in serial.specialize(A, B).code
    np.testing.assert_allclose(serial(A, B), A @ B, rtol=1e-4, atol=1e-4)
    with pytest.raises(polytc.PolytcError, match="unknown fusion strategy"):
        polytc.Options(fusion="everything")
    assert polytc.Options.from_json(mm.options.to_json()) == mm.options


@pytest.mark.parametrize("fusion", ["max", "preserve", "min"])
def test_fusion_strategies_agree(fusion):
    from tests.kernels_small import SOFTMAX, np_softmax

    k = polytc.tc(SOFTMAX, options=polytc.Options(fusion=fusion))
    X = rand(40, 33)
    np.testing.assert_allclose(k(X), np_softmax(X), rtol=1e-5, atol=1e-6)


def test_passes_are_named_and_can_be_switched_off():
    assert pipeline.NAMES == ("source", "scop", "dependences", "initial_values", "schedule",
                              "fuse_outer", "serial_reductions", "tile", "fold",
                              "parallel", "contract", "map", "ast", "few_rows", "codegen")
    mm = polytc.tc(MM, options=polytc.Options(disable=("schedule", "parallel")))
    A, B = rand(64, 64), rand(64, 64)
    ck = mm.specialize(A, B)
    assert "omp parallel" not in ck.code
    assert "schedule" not in ck.timings and "gcc" in ck.timings
    np.testing.assert_allclose(mm(A, B), A @ B, rtol=1e-4, atol=1e-4)


def test_pipeline_prefix_and_immutable_builds():
    """``until`` stops after a pass; every pass returns a new Build, so a prefix held by
    someone is never changed by the passes after it."""
    import dataclasses

    from tests.kernels_small import SOFTMAX

    program = polytc.tc(SOFTMAX).program
    env = {"N": 8, "D": 16}
    head = pipeline.run(program, env, polytc.Options(fusion="max"), until="schedule")
    assert head.passes == ("source", "scop", "dependences", "initial_values", "schedule")
    assert head.fusion == "max" and head.ast is None and head.code == ""
    whole = pipeline.run(program, env, polytc.Options(fusion="max"))
    assert whole.passes[-4:] == ("parallel", "contract", "ast", "codegen")
    assert "fuse_outer" in whole.passes
    assert set(whole.timings) == set(whole.passes)
    assert "softmax [N=8, D=16] target=c" in repr(whole)
    with pytest.raises(dataclasses.FrozenInstanceError):
        whole.code = ""
    off = pipeline.run(program, env, polytc.Options(fusion="max", disable=("fuse_outer",)))
    assert "fuse_outer" not in off.passes and "fuse_outer" not in off.timings
    with pytest.raises(polytc.InternalError, match="no pass named 'shedule'"):
        pipeline.run(program, env, polytc.Options(), until="shedule")


def test_clear_cache_forgets_loaded_and_disk_kernels(monkeypatch):
    A, B = rand(6, 4), rand(4, 3)
    k = polytc.tc(MM)
    k(A, B)
    assert polytc.clear_cache() >= 1
    calls = []
    run = pipeline.run
    monkeypatch.setattr(pipeline, "run", lambda *a, **kw: calls.append(1) or run(*a, **kw))
    np.testing.assert_allclose(k(A, B), A @ B, rtol=1e-5, atol=1e-5)  # the same object
    assert calls == [1]  # compiled again: neither its table nor the disk served it
    assert polytc.clear_cache(disk=False) == 0


def test_introspection_stages():
    mm = polytc.tc(MM)
    ck = mm.specialize(rand(4, 3), rand(3, 2))
    assert set(ck.stages) >= {"tc", "scop", "dependences", "schedule", "ast", "c"}
    assert "C(m, n) +=! A(m, k) * B(k, n)" in ck.stages["tc"]
    assert "S0[x0, x1, x2]" in ck.stages["scop"]
    assert "RAW" in ck.dependences and "S0" in ck.dependences
    assert "schedule:" in ck.schedule
    assert "int polytc_kernel" in ck.code
    assert str(mm).startswith("def matmul(float(M,K) A, float(K,N) B) -> (float(M,N) C)")
    assert "matmul" in repr(ck) and "M=4" in repr(ck)


def test_debug_logging(monkeypatch, capsys):
    monkeypatch.setenv("POLYTC_DEBUG", "2")
    polytc.tc(MM).specialize(rand(2, 2), rand(2, 2))
    err = capsys.readouterr().err
    for name in ("scop", "dependences", "schedule", "serial_reductions", "codegen"):
        assert f"pass {name}:" in err
    assert "--- stage c ---" in err


def test_python_front_end_end_to_end():
    @polytc.kernel
    def matmul(A: "float(M,K)", B: "float(K,N)"):
        C[m, n] += A[m, k] * B[k, n]  # noqa: F821 - TC names, never executed
        return C  # noqa: F821

    A, B = rand(5, 6), rand(6, 4)
    np.testing.assert_allclose(matmul(A, B), A @ B, rtol=1e-5, atol=1e-5)
    assert str(matmul.program) == str(polytc.tc(MM).program)


def test_several_defs():
    both = polytc.tc(MM + "\ndef neg(float(N) x) -> (y) { y(i) = -x(i) }")
    assert set(both) == {"matmul", "neg"}
    neg = polytc.tc(MM + "\ndef neg(float(N) x) -> (y) { y(i) = -x(i) }", "neg")
    np.testing.assert_array_equal(neg(np.arange(3, dtype=np.float32)), -np.arange(3))
    with pytest.raises(polytc.PolytcError, match="no def named 'nope'"):
        polytc.tc(MM, "nope")


def test_scheduler_budget_falls_back_to_program_order(monkeypatch):
    from polytc.poly import schedule as sched
    from tests.kernels_small import SOFTMAX, np_softmax

    monkeypatch.setattr(sched, "MAX_OPERATIONS", 1)
    X = rand(9, 13)
    k = polytc.tc(SOFTMAX, options=polytc.Options(fusion="max"))
    np.testing.assert_allclose(k(X), np_softmax(X), rtol=1e-5, atol=1e-6)


def test_threads_share_a_kernel_with_temporaries():
    from concurrent.futures import ThreadPoolExecutor

    from tests.kernels_small import SOFTMAX, np_softmax

    k = polytc.tc(SOFTMAX)
    xs = [rand(50, 70, seed=s) for s in range(16)]
    k(xs[0])
    with ThreadPoolExecutor(4) as ex:
        outs = list(ex.map(k, xs))
    for x, y in zip(xs, outs):
        np.testing.assert_allclose(y, np_softmax(x), rtol=1e-5, atol=1e-6)


def test_process_exits_cleanly_after_parallel_kernels():
    """Unloading the last kernel library at exit used to unload libgomp under its own
    spinning worker threads (SIGSEGV); the OpenMP runtime is now pinned."""
    script = ("import numpy as np, polytc\n"
              "k = polytc.tc('def mm(float(M,K) A, float(K,N) B) -> (C) "
              "{ C(m,n) +=! A(m,k)*B(k,n) }')\n"
              "A = np.ones((256, 256), np.float32)\n"
              "for _ in range(3): k(A, A)\n")
    env = dict(os.environ, OMP_WAIT_POLICY="active")
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, (r.returncode, r.stderr[-2000:])


def test_a_long_kernel_compiles_in_parts(monkeypatch):
    """A kernel's C past ``SPLIT_BYTES`` compiles as several translation units (its
    parallel regions shared out, the driver alone), linked into one shared object that
    computes what the one-part build does."""
    from polytc.codegen_c import compiler

    src = """
    def four(float(N,M) A) -> (B, C, D, E) {
        B(i, j) = A(i, j) * 2
        C(j, i) = B(i, j) + 1
        D(i, j) = C(j, i) * B(i, j)
        E(j, i) = exp(D(i, j) / 64) + A(i, j)
    }"""
    A = np.random.default_rng(0).normal(size=(256, 192)).astype(np.float32)
    B = A * 2
    C = B.T + 1
    D = C.T * B
    want = [B, C, D, (np.exp(D / 64) + A).T]
    real = compiler._run_compiler
    commands = []

    def counting(cmd, *a, **k):
        commands.append(cmd)
        return real(cmd, *a, **k)

    monkeypatch.setattr(compiler, "SPLIT_BYTES", 0)
    monkeypatch.setattr(compiler, "_run_compiler", counting)
    # (a program no other test compiles; unfused: a parallel region per statement)
    got = polytc.tc(src, options=polytc.Options(fusion="min"))(A)
    parts = [c for c in commands if "-c" in c]
    assert len(parts) >= 2 and any("-O0" in c for c in parts), commands
    # (the link; in a fresh cache the executor's build may come after it)
    assert any("-Wl,--allow-multiple-definition" in c for c in commands), commands
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_full_tiles_past_isls_budget_keep_their_guards(monkeypatch):
    """isl's work on a band's full tiles is bounded (``ISOLATE_OPERATIONS``): past the
    budget the tiles are not isolated, and the kernel still computes the product."""
    from polytc.poly import transform

    src = "def mmb(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
    rng = np.random.default_rng(1)
    A = rng.normal(size=(70, 45)).astype(np.float32)
    B = rng.normal(size=(45, 53)).astype(np.float32)
    isolated = polytc.tc(src).specialize(A, B).stages["ast"]
    monkeypatch.setattr(transform, "ISOLATE_OPERATIONS", 1)
    k = polytc.tc(src.replace("mmb", "mmb_budget"))
    assert k.specialize(A, B).stages["ast"] != isolated.replace("mmb", "mmb_budget")
    np.testing.assert_allclose(k(A, B), A @ B, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux's /proc")
def test_arena_memory_is_a_private_mapping():
    """The plans' arena (``huge_empty``) maps private memory: a shared mapping is shmem
    to Linux, whose pages fault in 4 KiB and whose huge pages are off."""
    from polytc.runtime.memory import HUGE, huge_empty

    a = huge_empty(3 * HUGE + 123)
    assert a.nbytes == 3 * HUGE + 123 and a.ctypes.data % HUGE == 0
    a[:] = 7
    assert a[-1] == 7
    with open("/proc/self/maps") as f:
        rows = [line.split() for line in f]
    lo, perms = next((int(r[0].split("-")[0], 16), r[1]) for r in rows
                     if int(r[0].split("-")[0], 16) <= a.ctypes.data
                     < int(r[0].split("-")[1], 16))
    assert perms.startswith("rw") and perms.endswith("p"), perms
