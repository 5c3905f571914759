"""Property tests on random programs (strategies in tests/progen.py).

1. Well-formed programs compile, run and agree with the numpy oracle
   (``polytc.lang.reference``) on every target: tests/test_differential.py; here, that
   they compile for CUDA without a GPU.
2. Malformed text (token mutations of well-formed programs) and malformed arguments
   never raise anything but a ``polytc.PolytcError``, and never an ``InternalError``.

Bugs found this way have deterministic regression tests at the end of this file, marked
``xfail(strict=True, reason="polytc bug: ...")`` while they are open (a property that hits
an open bug recognises that bug, and only it, so that it stays green until the fix).
"""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

import polytc
from polytc.lang import reference

from . import progen
from .test_differential import BUG_ERRORS, MAPPING_OPTIONS, SETTINGS, choices, differences

F32 = np.float32


def mismatches(outputs, names, expected: dict) -> list:
    """What differs from the oracle's outputs (``outputs``: one array or a tuple)."""
    got = outputs if isinstance(outputs, tuple) else (outputs,)
    return differences(dict(zip(names, got)), {n: expected[n] for n in names})


# --- 1. well-formed programs agree with the oracle -----------------------------------------
# on every target, with every option: tests/test_differential.py


def _nvcc() -> bool:
    from polytc.codegen_cuda import nvcc_available

    return nvcc_available()


@pytest.mark.skipif(not _nvcc(), reason="nvcc not found")
@settings(max_examples=12, **SETTINGS)
@given(g=progen.programs(), sizes=progen.sizes(), options=choices(MAPPING_OPTIONS))
def test_random_programs_compile_for_cuda(g, sizes, options):
    from polytc.codegen_cuda import compile_ptx
    from polytc.compiler import pipeline
    from polytc.runtime.args import bind_sizes
    from polytc.runtime.cuda import default_device

    note(g.src)
    kernel = polytc.tc(g.src)
    inputs = g.make_inputs(sizes, np.random.default_rng(0))
    env = bind_sizes(kernel.program, [np.asarray(a) for a in inputs])
    options = polytc.Options(**dict(options, mapping="threads"))
    code = pipeline.run(kernel.program, env, options, "cuda",
                        default_device()).code
    assert ".entry polytc_k0" in compile_ptx(code)


# --- 2. malformed text and arguments raise PolytcErrors only --------------------------------
def expect_polytc_error_or_nothing(fn):
    """Run ``fn``: its result, or None when it raised a PolytcError that is not a bug."""
    try:
        return fn()
    except BUG_ERRORS as e:
        raise AssertionError(f"polytc bug: {type(e).__name__}: {e}") from None
    except polytc.PolytcError:
        return None


def inputs_for(program, sizes, rng) -> list | None:
    """Arrays matching ``program``'s declared inputs for ``sizes`` (None if too big)."""
    if any(np.prod(t.extents(sizes), dtype=float) > 1e5 for t in program.inputs):
        return None
    return progen.arrays_for(program, sizes, rng)


@settings(max_examples=200, **SETTINGS)
@given(data=st.data())
def test_mutated_programs_raise_only_polytc_errors(data):
    g = data.draw(progen.programs(max_statements=3), label="original")
    src = data.draw(progen.mutations(g.src), label="mutated")
    kernel = expect_polytc_error_or_nothing(lambda: polytc.tc(src))
    if kernel is None or isinstance(kernel, dict):
        return
    program = kernel.program
    sizes = {n: data.draw(st.integers(0, 4), label=f"size {n}") for n in program.sizes}
    inputs = inputs_for(program, sizes, np.random.default_rng(0))
    if inputs is None:
        return
    # arguments that are wrong before anything compiles: cheap, always
    expect_polytc_error_or_nothing(lambda: kernel(*inputs, None))
    if inputs:
        expect_polytc_error_or_nothing(lambda: kernel(*inputs[:-1]))
        expect_polytc_error_or_nothing(lambda: kernel(*inputs[:-1], [[1.5]]))
    # a real call compiles (~0.1 s): only a few of them
    if data.draw(st.integers(0, 7), label="compile") == 0:
        expect_polytc_error_or_nothing(lambda: kernel(*inputs))


def _wrong_dtype(a: np.ndarray, rng) -> np.ndarray:
    choices = [d for d in (np.float64, np.float16, np.int64, np.int32, np.uint8, np.bool_,
                           np.complex64, np.float32) if np.dtype(d) != a.dtype]
    return a.astype(choices[int(rng.integers(len(choices)))])


@settings(max_examples=40, **SETTINGS)
@given(g=progen.programs(max_statements=2), seed=st.integers(0, 2 ** 32 - 1),
       how=st.sampled_from(["count+", "count-", "dtype", "rank+", "rank-", "none", "str",
                            "list", "shape", "shape"]),
       which=st.integers(0, 2))
def test_malformed_arguments_raise_argument_errors(g, seed, how, which):
    note(g.src)
    rng = np.random.default_rng(seed)
    kernel = polytc.tc(g.src)
    good = g.make_inputs({n: 3 for n in progen.SIZE_NAMES}, rng)
    args = list(good)
    i = which % len(args)
    a = args[i]
    if how == "count+":
        args.append(a)
    elif how == "count-":
        args.pop(i)
    elif how == "dtype":
        args[i] = _wrong_dtype(a, rng)
    elif how == "rank+":
        args[i] = a[None]
    elif how == "rank-":
        args[i] = a.reshape(-1)[0] if a.ndim == 1 else \
            a.reshape(a.shape[:-2] + (-1,)) if a.ndim > 1 else a.reshape(1)
        if a.ndim == 1:
            args[i] = np.asarray(args[i])  # a 0-d array: the wrong rank
    elif how == "none":
        args[i] = None
    elif how == "str":
        args[i] = "A"
    elif how == "list":
        args[i] = a.tolist()
    if how in ("count+", "count-", "dtype", "rank+", "rank-", "none", "str") or \
            (how == "list" and a.ndim > 0):
        with pytest.raises(polytc.ArgumentError):
            kernel(*args)
        return
    if how == "shape" and a.ndim:
        shape = list(a.shape)
        d = int(rng.integers(len(shape)))
        shape[d] = int(rng.integers(0, 7))
        args[i] = rng.uniform(-1, 1, shape).astype(a.dtype)
    # maybe valid, maybe not: a PolytcError or the oracle's answer
    out = expect_polytc_error_or_nothing(lambda: kernel(*args))
    if out is not None:
        expected = reference.run(kernel.program, args)
        bad = mismatches(out, g.outputs, expected)
        assert not bad, bad


def test_generated_programs_are_well_formed_and_varied():
    """The generator itself: programs check, and the features it promises appear."""
    seen = set()

    @settings(max_examples=150, database=None, **SETTINGS)
    @given(progen.programs())
    def collect(g):
        k = polytc.tc(g.src)  # parses and checks
        assert [t.name for t in k.program.outputs] == g.outputs
        for feature, pattern in [("reduction", r"[+*]=!|max=!|min=!"), ("where", "where"),
                                 ("ternary", r"\?"), ("minmax", r"\b(min|max)\("),
                                 ("exp", r"exp\("), ("fabs", r"fabs\("), ("temp", r"T0\(|T0 ")]:
            if re.search(pattern, g.src):
                seen.add(feature)
        if len(g.outputs) > 1:
            seen.add("several outputs")
        if len(k.program.statements) > 2:
            seen.add("3+ statements")

    collect()
    assert seen >= {"reduction", "where", "ternary", "minmax", "exp", "fabs",
                    "several outputs", "3+ statements"}, seen


# --- regressions: bugs found by the properties above (and around them) ----------------------
def test_four_index_reduction():
    """Found by the first property: isl linearised the four serial loops into one band
    member [8x0 + 4x1 + 2x2 + x3] and the AST for it visited half the points (8, not 16)."""
    k = polytc.tc("def sum4(float(A, B, C, D) X) -> (S) {\n    S +=! X(i, j, k, l)\n}")
    assert float(k(np.ones((2, 2, 2, 2), F32))) == 16.0


def test_product_of_two_full_reductions():
    A = np.array([[1, 2], [3, 4]], F32)
    k = polytc.tc("def f(float(N, K) A) -> (S) {\n    S +=! A(i, j) * A(k, l)\n}")
    assert float(k(A)) == float(A.sum()) ** 2


def test_four_index_reduction_program_order_is_right():
    """The same program with isl's scheduler off is right: the bug is in scheduling."""
    k = polytc.tc("def sum4(float(A, B, C, D) X) -> (S) {\n    S +=! X(i, j, k, l)\n}",
                  options=polytc.Options(disable=("schedule",)))
    assert float(k(np.ones((2, 2, 2, 2), F32))) == 16.0


def _cpu_has_fma() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " fma" in line for line in f)
    except OSError:
        return False


@pytest.mark.skipif(not _cpu_has_fma(), reason="contraction needs a CPU with FMA")
def test_float_multiply_add_contraction_is_an_option():
    """a*b + c may be fused (one rounding: GNU C's default, for speed); with
    fp_contract=False each operation rounds on its own, exactly as numpy does."""
    src = ("def muladd(float(N) A, float(N) B, float(N) C) -> (O) {\n"
           "    O(i) = A(i) * B(i) + C(i)\n}")
    rng = np.random.default_rng(1)
    A, B, C = (rng.uniform(-1, 1, 4096).astype(F32) for _ in range(3))
    exact = polytc.tc(src, options=polytc.Options(fp_contract=False))
    np.testing.assert_array_equal(exact(A, B, C), A * B + C)
    fused = polytc.tc(src)(A, B, C)  # one rounding: off by at most an ulp of a*b
    assert np.all(np.abs(fused - (A * B + C)) <= np.spacing(np.abs(A * B)) + np.spacing(
        np.abs(A * B + C)))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("expr", ["A(i) * 1e40", "A(i) * -1e40", "A(i) > 1e39 ? 1.0 : 0.0"])
def test_float_literal_overflowing_float32(expr):
    k = polytc.tc("def f(float(N) A) -> (O) {\n    O(i) = " + expr + "\n}")
    A = np.ones(3, F32)
    np.testing.assert_array_equal(k(A), reference.run(k.program, [A])["O"])


# --- hand schedules: an accepted step never changes the answer -------------------------------
_STEP = st.tuples(st.sampled_from(["tile", "interchange", "split", "fuse", "distribute",
                                   "parallel", "vectorize", "unroll"]),
                  st.integers(0, 5), st.integers(0, 3), st.integers(1, 3))


def _step(s, step):
    """Apply a drawn step, its band and loop numbers taken modulo the schedule's."""
    name, band, a, b = step
    sizes = [0] * (1 + max([d["band"] for d in s.loops], default=-1))
    if not sizes:
        return s
    for d in s.loops:
        sizes[d["band"]] += 1
    band %= len(sizes)
    n = sizes[band]
    a, b = a % n, (b % n if name == "interchange" else b)
    a = max(1, a) if name == "split" else a
    call = {"tile": lambda: s.tile(band, (b,) * max(1, a)),
            "interchange": lambda: s.interchange(band, a, b),
            "split": lambda: s.split(band, a),
            "fuse": lambda: s.fuse(band, band + b),
            "distribute": lambda: s.distribute(band),
            "parallel": lambda: s.parallel(band, a),
            "vectorize": lambda: s.vectorize(band),
            "unroll": lambda: s.unroll(band, a)}[name]
    return call()


@settings(max_examples=60, **SETTINGS)
@given(g=progen.programs(), sizes=progen.sizes(), seed=st.integers(0, 2 ** 32 - 1),
       start=st.sampled_from(["isl", "program"]), steps=st.lists(_STEP, max_size=6))
def test_random_hand_schedules_agree_with_the_oracle(g, sizes, seed, start, steps):
    """Random steps on random programs: each is either refused with a ScheduleError, or
    the kernel compiled with the schedule so far gives the oracle's results (legality
    checks are sound)."""
    note(g.src)
    kernel = polytc.tc(g.src)
    inputs = g.make_inputs(sizes, np.random.default_rng(seed))
    expected = reference.run(kernel.program, inputs)
    s = kernel.schedule(*inputs, start=start)
    for step in steps:
        try:
            s = _step(s, step)
        except polytc.ScheduleError:
            continue
    note(str(s))
    bad = mismatches(kernel.with_schedule(s)(*inputs), g.outputs, expected)
    assert not bad, bad
