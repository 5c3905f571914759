"""The on-disk artifact cache and the C compiler driver."""
from __future__ import annotations

import ctypes
import json
import math
import os
import platform
import subprocess
import sys
import textwrap
import time
import uuid

import numpy as np
import pytest

from polytc.codegen_c import compiler
from polytc.codegen_c.cexpr import PRELUDE
from polytc.diagnostics import CompilationError
from polytc import cache as cache_mod
from polytc.cache import DiskCache, cache_key, polytc_fingerprint

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("POLYTC_CACHE_DIR", str(d))
    monkeypatch.delenv("POLYTC_NO_DISK_CACHE", raising=False)
    return d


@pytest.fixture
def count_builds(monkeypatch):
    calls = []
    real = compiler._run_compiler

    def counting(cmd, cwd, timeout=compiler.BUILD_TIMEOUT_S):
        calls.append(cmd)
        return real(cmd, cwd, timeout)

    monkeypatch.setattr(compiler, "_run_compiler", counting)
    return calls


def unique_source(body: str) -> str:
    """A C source no other test run has compiled (so the cache cannot already hold it)."""
    return f"/* {uuid.uuid4().hex} */\n{body}"


ADD = "int add(int a, int b) { return a + b; }\n"


# --- keys ------------------------------------------------------------------------------
def test_key_is_deterministic_and_order_independent():
    k = cache_key(a=1, b=[1, 2], c={"x": 1, "y": 2})
    assert k == cache_key(c={"y": 2, "x": 1}, b=[1, 2], a=1)
    assert len(k) == 64 and all(ch in "0123456789abcdef" for ch in k)


@pytest.mark.parametrize("change", [
    dict(a=2), dict(b=[2, 1]), dict(c={"x": 1, "y": 3}), dict(d=None), dict(a="1"),
])
def test_key_changes_when_any_part_changes(change):
    base = dict(a=1, b=[1, 2], c={"x": 1, "y": 2})
    assert cache_key(**base) != cache_key(**{**base, **change})


def test_key_depends_on_polytc_source(monkeypatch):
    k = cache_key(source="x")
    fp = polytc_fingerprint()
    assert len(fp) == 64 and fp == polytc_fingerprint()
    monkeypatch.setattr(cache_mod, "_fingerprint", "0" * 64)
    assert cache_key(source="x") != k


# --- the disk cache ----------------------------------------------------------------------
def test_put_get_round_trip(tmp_path):
    c = DiskCache(tmp_path / "c")
    key = cache_key(test="round-trip")
    assert c.get(key) is None
    entry = c.put(key, {"a.bin": b"\x00\x01\x02", "b.txt": b"hello"}, {"flags": ["-O3"]})
    assert entry["meta"] == {"flags": ["-O3"]}
    assert entry["dir"] == str(tmp_path / "c" / key[:2] / key)
    with open(os.path.join(entry["dir"], "a.bin"), "rb") as f:
        assert f.read() == b"\x00\x01\x02"
    again = DiskCache(tmp_path / "c").get(key)
    assert again == entry
    # a second put of the same key keeps the first entry
    assert c.put(key, {"a.bin": b"other"}, {"flags": []}) == entry
    # no temporary directories are left behind
    assert sorted(os.listdir(tmp_path / "c" / key[:2])) == [key]


@pytest.mark.parametrize("offset", [0, cache_mod.LARGE_FILE, 3 * cache_mod.LARGE_FILE - 1])
def test_large_files_are_checked_by_crc(tmp_path, offset):
    """A file over ``LARGE_FILE`` (a model's weights) is recorded by its CRC-32; one
    flipped byte anywhere in it, or a byte cut off, makes the entry a miss."""
    c = DiskCache(tmp_path / "c")
    key = cache_key(test="large", offset=offset)
    data = os.urandom(3 * cache_mod.LARGE_FILE)
    entry = c.put(key, {"w.bin": data, "small": b"x"}, {})
    with open(os.path.join(entry["dir"], "meta.json")) as f:
        digests = json.load(f)["files"]
    assert digests["w.bin"].startswith("crc32:") and not digests["small"].startswith("crc")
    assert DiskCache(tmp_path / "c").get(key) is not None
    with open(os.path.join(entry["dir"], "w.bin"), "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x01]))
    assert DiskCache(tmp_path / "c").get(key) is None
    entry = c.put(key, {"w.bin": data}, {})
    with open(os.path.join(entry["dir"], "w.bin"), "r+b") as f:
        f.truncate(len(data) - 1)
    assert DiskCache(tmp_path / "c").get(key) is None


def test_corrupt_meta_is_a_miss(tmp_path):
    c = DiskCache(tmp_path / "c")
    key = cache_key(test="corrupt-meta")
    entry = c.put(key, {"f": b"data"}, {})
    meta = os.path.join(entry["dir"], "meta.json")
    with open(meta, "r+b") as f:
        f.truncate(os.path.getsize(meta) // 2)
    assert c.get(key) is None
    assert not os.path.exists(entry["dir"])
    assert c.put(key, {"f": b"data"}, {}) is not None


def test_missing_file_is_a_miss(tmp_path):
    c = DiskCache(tmp_path / "c")
    key = cache_key(test="missing-file")
    entry = c.put(key, {"f": b"data", "g": b"more"}, {})
    os.unlink(os.path.join(entry["dir"], "g"))
    assert c.get(key) is None


def test_unwritable_cache_dir_falls_back(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where a directory should be")
    c = DiskCache(blocker / "cache")
    key = cache_key(test="unwritable")
    assert c.get(key) is None
    entry = c.put(key, {"f": b"data"}, {"m": 1})
    assert entry is not None and entry["meta"] == {"m": 1}
    assert not entry["dir"].startswith(str(blocker))
    assert c.get(key) == entry
    with c.lock(key):
        pass


def test_disabled_disk_cache_uses_private_dir(cache_dir, monkeypatch):
    monkeypatch.setenv("POLYTC_NO_DISK_CACHE", "1")
    c = DiskCache()
    assert not c.root.startswith(str(cache_dir))
    path = compiler.build_shared_object(unique_source(ADD), {})
    assert ctypes.CDLL(path).add(2, 3) == 5
    assert not cache_dir.exists()


# --- the compiler driver ---------------------------------------------------------------
def test_compiler_identity_and_flags():
    ident = compiler.compiler_identity()
    assert ident and "[" in ident
    flags = compiler.default_flags()
    for f in ("-O2", "-fPIC", "-shared", "-lm"):
        assert f in flags
    assert "-ffast-math" not in flags
    if os.path.basename(compiler._cc()[0]) == "gcc" and platform.machine() == "x86_64":
        assert "-fno-schedule-insns2" in flags  # (out-of-order cores: gcc's CPU -7%)


def test_kernels_link_without_the_c_librarys_script_where_they_load(monkeypatch):
    """Kernels link without libc's linker script (``FAST_LINK``: 12-15 ms a build) where
    a test build so linked loads, every symbol bound (gcc and glibc here); where it does
    not, with the usual libraries.  A kernel so built calls libc, libm's vector math and
    OpenMP."""
    monkeypatch.setattr(compiler, "_memo", {})
    monkeypatch.setenv("POLYTC_NO_DISK_CACHE", "1")
    flags = compiler.default_flags()
    if os.path.basename(compiler._cc()[0]) == "gcc" and sys.platform.startswith("linux"):
        assert flags[-len(compiler.FAST_LINK):] == compiler.FAST_LINK
    src = unique_source("""
#include <math.h>
#include <string.h>
float probe(int n) {
    float a[64], b[64], s = 0;
    for (int i = 0; i < 64; ++i) a[i] = i * 0.01f;
    memcpy(b, a, sizeof a);
    #pragma omp parallel for reduction(+:s)
    for (int i = 0; i < n; ++i) s += erff(b[i % 64]);
    return s;
}
""")
    lib = ctypes.CDLL(compiler.build_shared_object(src, {}))
    lib.probe.restype = ctypes.c_float
    want = sum(math.erf(np.float32(i % 64 * 0.01)) for i in range(1000))
    assert abs(lib.probe(1000) - want) < 1e-4 * want
    real = compiler._probe_compiles
    monkeypatch.setattr(compiler, "_probe_compiles",
                        lambda cc, f, src, run=False: (False, "no") if run else
                        real(cc, f, src))
    monkeypatch.setattr(compiler, "_memo", {})
    assert not set(compiler.FAST_LINK) & set(compiler.default_flags())


@pytest.fixture
def count_probes(monkeypatch):
    """The compiler queries (``_run_quiet``) run from then on."""
    runs: list = []
    real = compiler._run_quiet

    def counting(cmd, *a, **k):
        runs.append(cmd)
        return real(cmd, *a, **k)

    monkeypatch.setattr(compiler, "_run_quiet", counting)
    return runs


def test_compiler_probes_come_from_the_disk_cache(cache_dir, monkeypatch, count_probes):
    """A fresh process (an empty memo) reads the compiler's identity, flags and native
    target from the disk cache, without running the compiler; another compiler binary or
    CPU (another host stamp) probes again."""
    monkeypatch.setattr(compiler, "_memo", {})
    want = (compiler.compiler_identity(), compiler.default_flags(),
            compiler._native_target(compiler.default_flags()))
    runs = count_probes
    runs.clear()
    monkeypatch.setattr(compiler, "_memo", {})
    got = (compiler.compiler_identity(), compiler.default_flags(),
           compiler._native_target(compiler.default_flags()))
    assert got == want and runs == []
    stamp = compiler._host_stamp()
    monkeypatch.setattr(compiler, "_host_stamp", lambda: stamp + ["another CPU"])
    monkeypatch.setattr(compiler, "_memo", {})
    assert compiler.compiler_identity() == want[0] and runs  # probed again


def test_missing_compiler_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("POLYTC_CC", "polytc-no-such-compiler-xyz")
    with pytest.raises(CompilationError) as e:
        compiler.compiler_identity()
    assert "POLYTC_CC" in str(e.value)


def test_build_and_call(cache_dir, count_builds):
    src = unique_source(ADD)
    path = compiler.build_shared_object(src, {"entry": "add"})
    assert path.startswith(str(cache_dir)) and path.endswith("kernel.so")
    lib = ctypes.CDLL(path)
    lib.add.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.add.restype = ctypes.c_int
    assert lib.add(40, 2) == 42
    assert len(count_builds) == 1
    entry = DiskCache().get(os.path.basename(os.path.dirname(path)))
    assert entry["meta"]["flags"] == compiler.default_flags()
    with open(os.path.join(entry["dir"], "kernel.c")) as f:
        assert f.read() == src

    # second build: served from the cache, no compiler run
    assert compiler.build_shared_object(src, {"entry": "add"}) == path
    assert len(count_builds) == 1
    # different key parts: a different entry
    assert compiler.build_shared_object(src, {"entry": "other"}) != path
    assert len(count_builds) == 2


@pytest.fixture
def fresh_memo(monkeypatch):
    """An empty probe memo (as in a new process), once the background probes are done."""
    for t in compiler._warming:
        t.join()
    monkeypatch.setattr(compiler, "_memo", {})


def _exp_kernel(src):
    lib = ctypes.CDLL(compiler.build_shared_object(src, {"entry": "f"}))
    a = (ctypes.c_float * 1)(1.0)
    lib.f(a)
    assert abs(a[0] - 2.7182817) < 1e-6


def test_kernels_build_with_the_precompiled_prelude(cache_dir, fresh_memo, count_builds):
    """A kernel's prelude comes precompiled (built once, kept in the disk cache)."""
    src = PRELUDE + unique_source("void f(float *a) { a[0] = expf(a[0]); }\n")
    _exp_kernel(src)
    header, kernel = count_builds
    assert "c-header" in header
    pch = kernel[kernel.index("-I") + 1]
    assert os.path.exists(os.path.join(pch, compiler.PCH_HEADER + ".gch"))
    _exp_kernel(PRELUDE + unique_source("void f(float *a) { a[0] = expf(a[0]); }\n"))
    assert len(count_builds) == 3  # the header once


def test_one_test_build_probes_the_flags(cache_dir, fresh_memo, count_probes):
    """Where the full flags work, a cold start probes them with one test build (then
    the precompiled prelude is the first compile): each costs a cold compile 30-50 ms."""
    flags = compiler.default_flags()
    assert "-pipe" in flags and "-fopenmp" in flags
    assert sum("probe.c" in cmd for cmd in count_probes) == 1


def test_builds_do_not_wait_for_a_prelude_being_made(fresh_memo, monkeypatch):
    """While another thread makes the precompiled prelude, a build reads the header's
    text (15 ms) instead of waiting for it (~80 ms)."""
    import threading

    cc, flags = compiler._cc(), compiler.default_flags()
    memo = ("pch", tuple(cc), tuple(flags))
    making = threading.Event()  # never set: that thread is still at work
    monkeypatch.setitem(compiler._making, memo, making)
    assert compiler.precompiled_prelude(cc, flags, wait=False) is None
    assert memo not in compiler._memo


def test_kernels_build_without_a_precompiled_prelude(cache_dir, fresh_memo, monkeypatch):
    real = compiler._run_compiler

    def no_headers(cmd, cwd, timeout=compiler.BUILD_TIMEOUT_S):
        if "c-header" in cmd:
            return subprocess.CompletedProcess(cmd, 1, "", "no precompiled headers here")
        return real(cmd, cwd, timeout)

    monkeypatch.setattr(compiler, "_run_compiler", no_headers)
    _exp_kernel(PRELUDE + unique_source("void f(float *a) { a[0] = expf(a[0]); }\n"))
    assert compiler.precompiled_prelude(compiler._cc(), compiler.default_flags()) is None


def test_openmp_kernel(cache_dir):
    src = unique_source(textwrap.dedent("""\
        long sum(long n) {
            long s = 0;
            #pragma omp parallel for reduction(+:s)
            for (long i = 0; i < n; ++i) s += i;
            return s;
        }
        """))
    lib = ctypes.CDLL(compiler.build_shared_object(src, {}))
    lib.sum.argtypes = [ctypes.c_long]
    lib.sum.restype = ctypes.c_long
    assert lib.sum(1000) == 499500


def test_corrupt_so_is_rebuilt(cache_dir, count_builds):
    src = unique_source("int mul(int a, int b) { return a * b; }\n")
    path = compiler.build_shared_object(src, {})
    key = os.path.basename(os.path.dirname(path))
    with open(path, "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0xFF]))
    assert DiskCache().get(key) is None
    path2 = compiler.build_shared_object(src, {})
    assert path2 == path
    assert len(count_builds) == 2
    assert DiskCache().get(key) is not None
    assert ctypes.CDLL(path2).mul(6, 7) == 42


def test_truncated_meta_is_rebuilt(cache_dir, count_builds):
    src = unique_source(ADD)
    path = compiler.build_shared_object(src, {})
    meta = os.path.join(os.path.dirname(path), "meta.json")
    with open(meta, "r+b") as f:
        f.truncate(10)
    assert compiler.build_shared_object(src, {}) == path
    assert len(count_builds) == 2
    with open(meta) as f:
        json.load(f)


def test_syntax_error_raises_compilation_error(cache_dir):
    src = unique_source("int broken(int a) { return a +; }\n")
    with pytest.raises(CompilationError) as e:
        compiler.build_shared_object(src, {})
    msg = str(e.value)
    assert "expected expression" in msg
    assert "kernel.c" in msg
    assert "polytc bug" in msg and "POLYTC_DEBUG=2" in msg
    # nothing was stored
    key_dirs = [p for p in cache_dir.rglob("*") if p.is_dir() and len(p.name) == 64]
    assert key_dirs == []


_CHILD = textwrap.dedent("""\
    import ctypes, json, os, sys, time
    sys.path.insert(0, {repo!r})
    from polytc.codegen_c import compiler
    compiler.default_flags(); compiler.compiler_identity()   # warm up before the race
    built = []
    real = compiler._run_compiler
    def counting(cmd, cwd, timeout=compiler.BUILD_TIMEOUT_S):
        built.append(1)
        time.sleep(0.3)   # widen the race window
        return real(cmd, cwd, timeout)
    compiler._run_compiler = counting
    go = {go!r}
    while not os.path.exists(go):
        time.sleep(0.005)
    path = compiler.build_shared_object(open({src!r}).read(), {{}})
    lib = ctypes.CDLL(path)
    print(json.dumps({{"built": len(built), "path": path, "result": lib.add(1, 2)}}))
""")


def test_concurrent_builds_compile_once(cache_dir, tmp_path):
    src_file = tmp_path / "kernel_src.c"
    src_file.write_text(unique_source(ADD))
    go = tmp_path / "go"
    script = _CHILD.format(repo=REPO, go=str(go), src=str(src_file))
    env = dict(os.environ, POLYTC_CACHE_DIR=str(cache_dir))
    env.pop("POLYTC_NO_DISK_CACHE", None)
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    time.sleep(0.5)
    go.write_text("go")
    results = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sum(r["built"] for r in results) == 1
    assert len({r["path"] for r in results}) == 1
    assert all(r["result"] == 3 for r in results)
    key = os.path.basename(os.path.dirname(results[0]["path"]))
    assert DiskCache(cache_dir).get(key) is not None


def test_put_race_keeps_the_winner(tmp_path, monkeypatch):
    root = tmp_path / "c"
    key = cache_key(test="race")
    real_rename = os.rename
    state = {"raced": False}

    def racing_rename(src, dst):
        if not state["raced"] and os.path.basename(dst) == key:
            state["raced"] = True  # another process stores the entry just before us
            monkeypatch.setattr(os, "rename", real_rename)
            DiskCache(root).put(key, {"f": b"theirs"}, {"who": "them"})
            monkeypatch.setattr(os, "rename", racing_rename)
        return real_rename(src, dst)

    monkeypatch.setattr(os, "rename", racing_rename)
    entry = DiskCache(root).put(key, {"f": b"ours"}, {"who": "us"})
    assert state["raced"]
    assert entry["meta"] == {"who": "them"}
    with open(os.path.join(entry["dir"], "f"), "rb") as f:
        assert f.read() == b"theirs"
    assert sorted(os.listdir(root / key[:2])) == [key]


def test_thread_count_from_the_environment_keys_the_kernel(monkeypatch):
    """POLYTC_NUM_THREADS shapes the parallel loops and tiles and is the team size each
    call sets (libgomp may have read another count before): a kernel built for one count
    is never served for another."""
    import numpy as np

    import polytc
    from polytc.runtime.native import _pin_openmp

    src = "def addone(float(N) X) -> (Y) { Y(i) = X(i) + 1.0 }"
    X = np.zeros(1 << 16, np.float32)
    kernels = []
    for n in ("1", "2"):
        monkeypatch.setenv("POLYTC_NUM_THREADS", n)
        ck = polytc.tc(src, options=polytc.Options(parallel_min_points=1)).specialize(X)
        kernels.append(ck)
        assert ck.threads == int(n)
        ck.run([X])
        if _pin_openmp() is not None:
            assert _pin_openmp().omp_get_max_threads() == int(n)
    assert kernels[0] is not kernels[1] and "num_threads" not in kernels[0].code


@pytest.fixture
def narrowed(monkeypatch):
    """``POLYTC_ISA`` set for one test: the machine read again, and again after it."""
    from polytc import machine

    def narrow(isa):
        monkeypatch.setenv("POLYTC_ISA", isa)
        machine.host.cache_clear()
        return machine.host()

    yield narrow
    monkeypatch.delenv("POLYTC_ISA", raising=False)
    machine.host.cache_clear()


def test_a_narrower_isa_builds_narrower_vectors_and_keys_the_kernel(narrowed):
    """``POLYTC_ISA=avx2`` on an AVX-512 host: 256-bit vectors in 16 registers, gcc told
    to leave AVX-512 out, and a kernel of its own in the cache (the same program, sizes
    and options were built for the host's ISA first).  The result is the same."""
    import numpy as np

    import polytc
    from polytc.backends import c as cback
    from polytc.machine import _cpu_flags, host

    if not {"avx2", "fma"} <= _cpu_flags():
        pytest.skip("no AVX2 on this CPU")
    if os.environ.get("POLYTC_ISA"):
        pytest.skip("the whole run is narrowed already (POLYTC_ISA)")
    src = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(i, j) +=! A(i, k) * B(k, j) }"
    rng = np.random.default_rng(0)
    A, B = rng.random((96, 80), np.float32), rng.random((80, 112), np.float32)
    native = polytc.tc(src).specialize(A, B)
    key = cback.BACKEND.key("x", {}, polytc.Options())
    m = narrowed("avx2")
    assert (m.vector_bytes, m.vector_registers) == (32, 16) and m.lanes(4) == 8
    assert "-mno-avx512f" in polytc.codegen_c.compiler.default_flags()
    assert cback.BACKEND.key("x", {}, polytc.Options()) != key
    ck = polytc.tc(src).specialize(A, B)
    assert ck is not native and "vector_size(64)" not in ck.code
    np.testing.assert_allclose(ck.run([A, B]), A @ B, rtol=1e-5)
    assert host().vector_bytes == 32


def test_an_unknown_isa_is_a_clear_error(narrowed):
    from polytc.diagnostics import UnsupportedError

    with pytest.raises(UnsupportedError, match="(?s)POLYTC_ISA='avx3' is no vector ISA.*"
                                               "one of native, avx512, avx2, sse"):
        narrowed("avx3")
