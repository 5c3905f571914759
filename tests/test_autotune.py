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
from polytc.runtime import tuning
from polytc.tiling.autotune import Search, Space, crossover, mutate

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from tests.kernels_small import MATMUL, SOFTMAX


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


def test_autotune_from_an_unguarded_script(tmp_path):
    """Workers are separate programs: a script without a __main__ guard is fine."""
    script = tmp_path / "tune.py"
    script.write_text(textwrap.dedent(f"""
        import numpy as np, polytc
        k = polytc.tc("def add(float(N) A, float(N) B) -> (C) {{ C(i) = A(i) + B(i) }}")
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


def test_autotune_errors(cache_dir):
    A, B = _matmul_inputs(8)
    k = polytc.tc(MATMUL)
    with pytest.raises(polytc.PolytcError, match="takes a polytc kernel"):
        polytc.autotune("not a kernel", A, B)
    with pytest.raises(polytc.PolytcError, match="budget"):
        polytc.autotune(k, A, B, budget=0)
    with pytest.raises(polytc.ArgumentError):
        polytc.autotune(k, A)
