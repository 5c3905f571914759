"""polytc.autotune: the candidate generator, isolated evaluation, the tuning cache."""
import hashlib
import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import polytc
from polytc.lang import reference
from polytc.options import FUSIONS, Options
from polytc import backends as targets
from polytc.runtime import tuning
from polytc.tuner.search import Search, crossover, mutate
from polytc.tuner.space import ACCEL_FIELDS, BLOCK_THREADS, Space
from tests.kernels_small import MATMUL, SOFTMAX

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

OPENCL = targets.available("opencl")
needs_opencl = pytest.mark.skipif(not OPENCL, reason="no OpenCL device")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("POLYTC_CACHE_DIR", str(d))
    monkeypatch.delenv("POLYTC_NO_DISK_CACHE", raising=False)
    monkeypatch.delenv("POLYTC_NO_TUNING_CACHE", raising=False)
    tuning.clear_memo()
    yield d
    tuning.clear_memo()


def _matmul_inputs(n=64, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, n)).astype(np.float32),
            rng.standard_normal((n, n)).astype(np.float32))


def _oracle(kernel, *inputs):
    got = reference.run(kernel.program, inputs)
    return [got[t.name] for t in kernel.program.outputs]


# --- the candidate generator ------------------------------------------------------------
def _drive(seed, space, generations=5, population=6):
    """The candidates a search proposes, scored by a fixed fake timer (no compiling)."""
    s = Search(space, seed=seed, population=population)
    seq = []
    for _ in range(generations):
        cands = s.ask()
        seq += [o.to_json() for o in cands]
        for o in cands:
            fake = int(hashlib.sha256(o.to_json().encode()).hexdigest()[:8], 16)
            s.tell(o, math.inf if fake % 7 == 0 else fake)
    return seq


def test_same_seed_same_candidates():
    space = Space(lanes=16, cores=2, max_extent=64)
    a, b = _drive(0, space), _drive(0, space)
    assert a == b
    assert a != _drive(1, space)
    assert len(set(a)) == len(a)  # deduplicated by JSON
    assert a[0] == Options().to_json()  # generation 0 starts from the cost model


def test_candidates_stay_in_the_space():
    space = Space(lanes=8, cores=2, max_extent=100)
    for j in _drive(3, space, generations=8, population=8):
        o = Options.from_json(j)
        assert o.fusion in FUSIONS
        assert o.num_threads in (None, 1, 2)
        if o.register_tile:
            mr, nr = o.register_tile
            assert 1 <= mr <= 8 and nr % 8 == 0 and nr <= 32
        if o.tile:
            ti, tj, tk = o.tile
            assert max(ti, tj, tk) <= 100
    # without a contraction the tile fields are not searched
    flat = Space(lanes=8, cores=2, contraction=False)
    for j in _drive(0, flat, generations=4):
        o = Options.from_json(j)
        assert o.tile is None and o.register_tile is None


def test_mutate_and_crossover():
    import random

    space, rng = Space(lanes=16, cores=4), random.Random(5)
    base = Options()
    kids = [mutate(base, space, rng) for _ in range(50)]
    assert all(k != base for k in kids)
    a, b = Options(fusion="max", vectorize=False), Options(fusion="min", tile=(8, 16, 32))
    for _ in range(20):
        c = crossover(a, b, space, rng)
        assert c.fusion in ("max", "min") and c.tile in (None, (8, 16, 32))


# --- the accelerator space ---------------------------------------------------------------
#: spaces as the probe builds them: PoCL (a CPU device), GPUs of one, two, three mapped
#: loops (known and unknown extents), a device of 256 threads per block, CUDA
ACCEL_SPACES = [
    Space(target="opencl", device_kind="cpu", max_block=4096, compute_units=2, dims=2,
          extents=(64, 100)),
    Space(target="opencl", device_kind="gpu", compute_units=80, dims=1, extents=(5000,)),
    Space(target="opencl", device_kind="gpu", max_block=256, dims=3, extents=(0, 4, 1000)),
    Space(target="cuda", device_kind="gpu", compute_units=132, dims=2, extents=(7, 3)),
    Space(target="cuda", device_kind="gpu", dims=3, contraction=False),
    Space(target="opencl", device_kind="cpu", dims=2, pinned_mapping="threads"),
]


def _check_accel(o: Options, space: Space):
    """``o`` is a valid candidate of ``space``: the checks of Options itself passed (it
    exists), and the mapping fields are in range."""
    Options.from_json(o.to_json())  # round-trips, validates again
    mapping = space.resolve(o)
    assert mapping in space.mappings
    if o.block is not None:
        assert len(o.block) == space.dims and min(o.block) >= 1
        assert math.prod(o.block) <= min(1024, space.max_block)
        x = o.block[-1]
        cap_x = space._caps()[-1]
        assert x in BLOCK_THREADS or x == cap_x or x == math.prod(o.block), o.block
    if o.block_tile is not None:
        block = space._effective_block(o.block)
        assert len(o.block_tile) == space.dims
        assert all(t % b == 0 and t >= b for t, b in zip(o.block_tile, block)), o
    assert o.reduction_tile in (None, 0, 8, 16, 32, 64)
    assert o.unroll in (0, 4, 8, 16)
    assert o.num_threads is None  # no OpenMP threads on a device
    if mapping == "threads":  # the other mapping's fields stay at their defaults
        assert (o.tile, o.register_tile, o.grid, o.vectorize, o.parallel) == \
            (None, None, None, True, True)
    else:
        assert (o.block, o.block_tile, o.reduction_tile, o.unroll) == (None, None, None, 0)
        assert o.shared_memory and o.private_memory
    if not space.contraction:
        assert o.tile is None and o.register_tile is None and o.reduction_tile is None


@pytest.mark.parametrize("space", ACCEL_SPACES, ids=lambda s: f"{s.target}-{s.dims}d")
def test_accelerator_space_samples_valid_options(space):
    import random

    rng = random.Random(7)
    assert set(space.fields) <= set(ACCEL_FIELDS) and "num_threads" not in space.fields
    assert ("mapping" in space.fields) == (space.target == "opencl"
                                          and space.pinned_mapping is None)
    seen, pool = set(), [space.base, *space.seeds]
    for i in range(300):  # mutations of mutations, and crossovers
        if i % 3 == 2 and len(pool) >= 2:
            child = crossover(rng.choice(pool), rng.choice(pool), space, rng)
        else:
            child = mutate(rng.choice(pool[-8:] + [space.base]), space, rng)
        _check_accel(child, space)
        pool.append(child)
        seen.add(child.to_json())
        for f in ("block", "block_tile"):  # each field sampled directly, too
            v = space.sample(f, getattr(child, f), rng, child)
            _check_accel(space.fix(child.replace(**{f: v})), space)
    assert len(seen) > 100  # it explores
    blocks = {Options.from_json(j).block for j in seen} - {None}
    assert len(blocks) >= (3 if space.dims > 1 and min(space._caps()) >= 32 else 2)
    mappings = {space.resolve(Options.from_json(j)) for j in seen}
    assert mappings == set(space.mappings)
    # the generator over this space: deterministic, deduplicated, all valid
    a, b = _drive(0, space, generations=4), _drive(0, space, generations=4)
    assert a == b and len(set(a)) == len(a)
    assert Options.from_json(a[0]) == space.base
    for j in a:
        _check_accel(Options.from_json(j), space)


def test_c_space_has_no_mapping_fields():
    space = Space(lanes=8, cores=4)
    assert not space.accelerator and space.seeds == () and space.base == Options()
    assert not {"mapping", "block", "block_tile", "unroll"} & set(space.fields)
    for j in _drive(2, space, generations=4):
        o = Options.from_json(j)
        assert (o.mapping, o.block, o.block_tile, o.unroll) == ("auto", None, None, 0)


# --- the tuning cache ---------------------------------------------------------------------
def test_tuning_cache_store_lookup(cache_dir, monkeypatch):
    k = polytc.tc(MATMUL)
    env = {"M": 8, "K": 4, "N": 16}
    assert tuning.lookup(k.program, env) is None
    opts = Options(fusion="max", tile=(8, 16, 4), register_tile=(2, 16))
    path = tuning.store(k.program, env, opts, {"time": 1e-6})
    assert path and os.path.isfile(path) and path.startswith(str(cache_dir))
    assert json.load(open(path))["options"]["tile"] == [8, 16, 4]
    assert tuning.lookup(k.program, env) == opts
    assert tuning.lookup(k.program, {"M": 8, "K": 4, "N": 32}) is None  # other sizes
    tuning.clear_memo()  # as a new process would: read from disk
    assert tuning.lookup(k.program, env) == opts
    assert tuning.get(k.program, env)[1]["time"] == 1e-6
    # a later store replaces it
    tuning.store(k.program, env, Options(fusion="min"))
    tuning.clear_memo()
    assert tuning.lookup(k.program, env) == Options(fusion="min")
    # switched off
    monkeypatch.setenv("POLYTC_NO_TUNING_CACHE", "1")
    assert tuning.lookup(k.program, env) is None
    monkeypatch.delenv("POLYTC_NO_TUNING_CACHE")
    # a damaged entry is a miss
    with open(path, "w") as f:
        f.write("{not json")
    tuning.clear_memo()
    assert tuning.lookup(k.program, env) is None
    assert tuning.remove(k.program, env)
    assert not os.path.exists(path)


@needs_opencl
def test_tuning_cache_is_per_target(cache_dir):
    k = polytc.tc(MATMUL)
    env = {"M": 8, "K": 4, "N": 16}
    c_opts, cl_opts = Options(fusion="max"), Options(mapping="threads", block=(4, 32))
    tuning.store(k.program, env, c_opts)
    assert tuning.lookup(k.program, env, target="opencl") is None
    tuning.store(k.program, env, cl_opts, target="opencl")
    assert tuning.lookup(k.program, env) == c_opts
    assert tuning.lookup(k.program, env, target="opencl") == cl_opts
    assert tuning.tuning_key(k.program, env) != tuning.tuning_key(k.program, env, "opencl")
    tuning.clear_memo()  # from disk
    assert tuning.lookup(k.program, env, target="opencl") == cl_opts
    assert tuning.remove(k.program, env, target="opencl")
    assert tuning.lookup(k.program, env, target="opencl") is None
    assert tuning.lookup(k.program, env) == c_opts


def test_kernel_uses_tuned_options_unless_explicit(cache_dir):
    A, B = _matmul_inputs(16)
    k = polytc.tc(MATMUL)
    env = {"M": 16, "K": 16, "N": 16}
    tuned = Options(tile=(8, 16, 8), register_tile=(2, 16))
    tuning.store(k.program, env, tuned)
    assert polytc.tc(MATMUL).specialize(A, B).options == tuned
    np.testing.assert_allclose(polytc.tc(MATMUL)(A, B), A @ B, rtol=1e-4, atol=1e-4)
    assert polytc.tc(MATMUL, options=Options()).specialize(A, B).options == Options()
    assert k.with_options(fusion="max").specialize(A, B).options == Options(fusion="max")
    C = np.ones((16, 8), np.float32)
    assert polytc.tc(MATMUL).specialize(A, C).options == Options()  # other sizes


# --- the tuner ------------------------------------------------------------------------------
def test_autotune_matmul(cache_dir, capsys):
    A, B = _matmul_inputs(64)
    k = polytc.tc(MATMUL)
    best = polytc.autotune(k, A, B, budget=30, population=4, generations=2, seed=0)
    assert isinstance(best, polytc.Kernel) and best._explicit
    rec = best.tuning
    assert rec["candidates"] == 8 and rec["failed"] == 0
    assert rec["time"] <= rec["default_time"]
    assert best.options == Options.from_json(json.dumps(rec["options"]))
    np.testing.assert_allclose(best(A, B), _oracle(k, A, B)[0], rtol=1e-3, atol=1e-3)
    assert "autotune matmul: best" in capsys.readouterr().err
    # stored, and used by kernels created without options
    assert tuning.lookup(k.program, {"M": 64, "K": 64, "N": 64}) == best.options
    tuning.clear_memo()
    assert polytc.tc(MATMUL).specialize(A, B).options == best.options
    assert polytc.tc(MATMUL, options=Options()).specialize(A, B).options == Options()


def test_autotune_survives_crashes_and_hangs(cache_dir, capsys):
    X = np.random.default_rng(1).standard_normal((32, 48)).astype(np.float32)
    k = polytc.tc(SOFTMAX)
    faults = {1: "crash", 2: "hang", 3: "compile:crash", 4: "raise", 5: "wrong"}
    best = polytc.autotune(k, X, budget=40, population=6, generations=2, timeout=1.5,
                           seed=0, verbose=False, _faults=faults)
    hist = {r["n"]: r for r in best.tuning["history"]}
    assert "SIGSEGV" in hist[1]["error"]
    assert hist[2]["error"] == "timed out"
    assert "SIGSEGV" in hist[3]["error"] and hist[3]["error"].startswith("compile")
    assert "injected failure" in hist[4]["error"]
    assert "differs from the reference" in hist[5]["error"]
    assert all(math.isinf(hist[n]["time"]) for n in faults)
    # it went on: the second generation was evaluated, with working candidates
    assert len(hist) == 12 and any(math.isfinite(hist[n]["time"]) for n in range(6, 12))
    assert best.tuning["options"] not in [hist[n]["options"] for n in faults]
    np.testing.assert_allclose(best(X), _oracle(k, X)[0], rtol=1e-4, atol=1e-5)
    assert capsys.readouterr().err == ""  # verbose=False


def _cl_matmul_inputs(n=48, seed=2):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, n + 8)).astype(np.float32),
            rng.standard_normal((n + 8, n)).astype(np.float32))


@needs_opencl
def test_autotune_opencl_matmul(cache_dir, capsys):
    """Both mappings are searched; the result runs on OpenCL, is stored for OpenCL only."""
    A, B = _cl_matmul_inputs()
    k = polytc.tc(MATMUL, target="opencl")
    best = polytc.autotune(k, A, B, budget=60, population=5, generations=2, seed=0,
                           timeout=20)
    assert isinstance(best, polytc.Kernel) and best._explicit and best.target == "opencl"
    rec = best.tuning
    assert rec["target"] == "opencl" and rec["candidates"] == 10 and rec["failed"] == 0
    assert rec["time"] <= rec["default_time"]
    assert rec["space"]["dims"] == 2 and rec["space"]["extents"] == [48, 48]
    assert {"mapping", "block", "block_tile", "unroll", "tile"} <= set(rec["space"]["fields"])
    assert best.options == Options.from_json(json.dumps(rec["options"]))
    space = Space(target="opencl", device_kind=rec["space"]["device_kind"], dims=2,
                  extents=(48, 48))
    tried = [Options(**r["options"]) for r in rec["history"]]
    for o in tried[1:]:
        _check_accel(o, space)
    # the mapping options were searched: both mappings, and fields of each
    assert {space.resolve(o) for o in tried} == {"threads", "groups"}
    assert any(o.mapping != "auto" for o in tried)
    assert sum(o != Options() and space.resolve(o) == "threads" for o in tried) >= 2
    np.testing.assert_allclose(best(A, B), _oracle(k, A, B)[0], rtol=1e-3, atol=1e-3)
    assert "autotune matmul: best" in capsys.readouterr().err
    # stored for OpenCL on this device, not for C
    env = {"M": 48, "K": 56, "N": 48}
    assert tuning.lookup(k.program, env, target="opencl") == best.options
    assert tuning.lookup(k.program, env) is None


@needs_opencl
def test_autotune_opencl_threads_searches_blocks(cache_dir):
    """A kernel whose options name the ``threads`` mapping is tuned within it: blocks,
    their tiles, the reduction tile, promotion and unrolling (as on a GPU)."""
    A, B = _cl_matmul_inputs()
    k = polytc.tc(MATMUL, target="opencl", options=Options(mapping="threads"))
    best = polytc.autotune(k, A, B, budget=60, population=6, generations=2, seed=0,
                           timeout=20, verbose=False)
    rec = best.tuning
    assert rec["candidates"] == 12 and rec["failed"] == 0
    assert "mapping" not in rec["space"]["fields"]
    tried = [Options(**r["options"]) for r in rec["history"]]
    assert tried[0] == Options(mapping="threads")  # the cost model's sizes first
    assert all(o.mapping == "threads" for o in tried)
    blocks = {o.block for o in tried} - {None}
    assert len(blocks) >= 2, blocks
    assert all(math.prod(b) <= 1024 for b in blocks)
    changed = {f for o in tried for f in ACCEL_FIELDS
               if getattr(o, f) != getattr(Options(mapping="threads"), f)}
    assert {"block", "block_tile"} <= changed and len(changed) >= 4, changed
    assert best.options.mapping == "threads" and best.target == "opencl"
    assert rec["time"] <= rec["default_time"]
    np.testing.assert_allclose(best(A, B), A @ B, rtol=1e-3, atol=1e-3)


@needs_opencl
def test_autotune_opencl_isolates_failures(cache_dir):
    """Crashing, raising and wrong candidates on OpenCL score inf, as on C."""
    A, B = _cl_matmul_inputs(16)
    k = polytc.tc(MATMUL, target="opencl")
    faults = {1: "crash", 2: "compile:crash", 3: "raise", 4: "wrong"}
    best = polytc.autotune(k, A, B, budget=60, population=5, generations=2, seed=1,
                           timeout=20, verbose=False, _faults=faults)
    hist = {r["n"]: r for r in best.tuning["history"]}
    assert "SIGSEGV" in hist[1]["error"]
    assert "SIGSEGV" in hist[2]["error"] and hist[2]["error"].startswith("compile")
    assert "injected failure" in hist[3]["error"]
    assert "differs from the reference" in hist[4]["error"]
    assert all(math.isinf(hist[n]["time"]) for n in faults)
    assert len(hist) == 10 and any(math.isfinite(hist[n]["time"]) for n in range(5, 10))
    assert best.tuning["options"] not in [hist[n]["options"] for n in faults]
    np.testing.assert_allclose(best(A, B), A @ B, rtol=1e-4, atol=1e-4)


def test_autotune_cuda_without_a_gpu(cache_dir, no_gpu):
    """Where CUDA kernels cannot run, every candidate fails in its worker; the search
    ends and keeps the kernel's options on the cuda target."""
    A, B = _matmul_inputs(8)
    k = polytc.tc(MATMUL, target="cuda")
    best = polytc.autotune(k, A, B, budget=30, population=3, generations=1,
                           timeout=20, verbose=False)
    rec = best.tuning
    assert best.target == "cuda" and best.options == k.options
    assert rec["candidates"] == 3 and rec["failed"] == 3 and rec["options"] is None
    assert rec["space"]["target"] == "cuda" and "mapping" not in rec["space"]["fields"]
    assert "block" in rec["space"]["fields"]
    assert all("error" in r for r in rec["history"])


def test_autotune_from_an_unguarded_script(tmp_path):
    """Workers are separate programs: a script without a __main__ guard is fine."""
    script = tmp_path / "tune.py"
    script.write_text(textwrap.dedent("""
        import numpy as np, polytc
        k = polytc.tc("def add(float(N) A, float(N) B) -> (C) { C(i) = A(i) + B(i) }")
        a = np.arange(100, dtype=np.float32)
        t = polytc.autotune(k, a, a, budget=20, population=2, generations=1, verbose=False)
        assert np.array_equal(t(a, a), 2 * a)
        print("ok", t.tuning["candidates"])
    """))
    env = dict(os.environ, POLYTC_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ok", "2"]


def test_autotune_samples_must_be_tuples(cache_dir):
    A, B = _matmul_inputs(16)
    with pytest.raises(polytc.PolytcError, match=r"samples\[0\] is a ndarray"):
        polytc.autotune(polytc.tc(MATMUL), A, B, samples=[A])


def test_autotune_errors(cache_dir):
    A, B = _matmul_inputs(8)
    k = polytc.tc(MATMUL)
    with pytest.raises(polytc.PolytcError, match="takes a polytc kernel"):
        polytc.autotune("not a kernel", A, B)
    with pytest.raises(polytc.PolytcError, match="budget"):
        polytc.autotune(k, A, B, budget=0)
    with pytest.raises(polytc.ArgumentError):
        polytc.autotune(k, A)


def test_autotune_a_dynamic_kernel_serves_its_bucket(cache_dir):
    """A kernel with a symbolic size is tuned as its generic kernel (every candidate
    symbolic in M, timed at these inputs) and the best serves the sizes' bucket: a new
    kernel called at another M of the bucket (33..64) compiles its generic kernel with
    the tuned options."""
    rng = np.random.default_rng(3)
    A, B = (rng.standard_normal((40, 64)).astype(np.float32),
            rng.standard_normal((64, 48)).astype(np.float32))
    k = polytc.tc(MATMUL, dynamic=("M",))
    samples = [(rng.standard_normal((m, 64)).astype(np.float32), B) for m in (33, 64)]
    best = polytc.autotune(k, A, B, budget=30, population=3, generations=1, seed=0,
                           verbose=False, samples=samples)
    rec = best.tuning
    assert rec["symbolic"] == ["M"] and rec["bucket"] == {"M": 64, "K": 64, "N": 48}
    assert rec["samples"] == 3 and rec["failed"] == 0
    assert best.options.symbolic == ("M",)
    assert tuning.lookup(k.program, {"M": 64, "K": 64, "N": 48}) == best.options
    tuning.clear_memo()
    fresh = polytc.tc(MATMUL, dynamic=("M",))
    A2 = rng.standard_normal((57, 64)).astype(np.float32)
    np.testing.assert_allclose(fresh(A2, B), A2 @ B, rtol=1e-4, atol=1e-4)
    generic = [ck for ck in fresh._generic_kernels.values() if ck]
    assert [ck.options for ck in generic] == [best.options]


def test_the_default_options_stay_unless_beaten_by_the_margin():
    """A candidate replaces the default options only when it timed ``MARGIN`` faster:
    each is timed twice at most, and noise of a few percent would otherwise pick a
    candidate slower than the default (bench_cpu's sgemm tuned 5.33 against 4.82 ms)."""
    from polytc.tuner.result import MARGIN, _default_first_unless_beaten as pick

    default = {"n": 0, "time": 1.0}
    close = {"n": 7, "time": 1.0 - MARGIN / 2}
    fast = {"n": 9, "time": 1.0 - 2 * MARGIN}
    assert pick([close, default])[0] is default
    assert pick([fast, close, default])[0] is fast
    assert pick([default, close])[0] is default
    assert pick([close])[0] is close  # the default did not finish


def test_candidates_are_timed_as_a_call_pays_for_them(tmp_path, monkeypatch):
    """A kernel that wants an unaligned input aligned copies it at every call:
    ``benchmark`` times the copies too, and the tuner's workers hold the inputs as far
    past a 64-byte boundary as the user's arrays (timed on aligned copies, a 60 s tune
    of bench_cpu's mlp2 chose options 20% slower to call than the default)."""
    from polytc.runtime import native
    from polytc.runtime.memory import offset_copy
    from polytc.tuner.evaluate import INPUTS, WorkerState, dump, offset

    rng = np.random.default_rng(3)
    a = [offset_copy(rng.standard_normal(s).astype(np.float32), 16)
         for s in ((64, 96), (96, 80))]
    ck = polytc.tc(MATMUL, options=Options(vectorize=False)).specialize(*a)
    assert ck.align_inputs
    copies = []
    real = native.np.copyto
    monkeypatch.setattr(native.np, "copyto", lambda d, s: (copies.append(1), real(d, s)))
    ck.benchmark(*a, repeat=3, warmup=1)
    assert len(copies) == (1 + 3) * len(ck.align_inputs)  # the copy made, then each run's
    aligned = [offset_copy(x, 0) for x in a]
    copies.clear()
    ck.benchmark(*aligned, repeat=3, warmup=1)
    assert not copies
    monkeypatch.undo()
    dump(str(tmp_path / INPUTS), ([a + [np.float32(2)]], [[offset(x) for x in a] + [None]]))
    state = WorkerState(str(tmp_path), MATMUL, "matmul")
    assert [x.ctypes.data % 64 for x in state.inputs[:2]] == [16, 16]
    for x, y in zip(state.inputs, a):
        np.testing.assert_array_equal(x, y)
