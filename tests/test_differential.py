"""The differential fuzzer: random programs on every target available here (``c``, and
``c`` with every size symbolic; ``opencl`` with pocl; ``cuda`` with a GPU) against each
other and the numpy reference interpreter (``polytc.lang.reference``, the language's
definition).

A case is a program from ``progen.programs(full=True)`` (every assignment operator with
and without ``!``, updates of earlier tensors, several outputs, affine and constant
subscripts, ``where`` ranges), sizes with zeros and odd values, inputs with NaN and
infinities, ``out=`` arrays or not, and compiler options per target.  Every target must
give the reference's outputs, or, where the reference raises (an access out of bounds
for these sizes), a polytc error that is not a bug.  Hypothesis shrinks a failure to a
minimal case; its final replay is written to ``tests/fuzz_corpus/`` (commit it: every
file there is replayed as a regression test, ``test_corpus``).

``POLYTC_FUZZ_EXAMPLES`` (polytc/config.py) sets how many cases a run draws; the default
keeps the suite's budget, a night's run takes thousands.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import polytc
from polytc import config
from polytc.lang import reference
from polytc.backends import available

from . import progen

TARGETS = [t for t in ("c", "opencl", "cuda") if available(t)]
CORPUS = Path(__file__).parent / "fuzz_corpus"
SETTINGS = dict(deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
#: errors that are polytc bugs even though they are PolytcErrors
BUG_ERRORS = (polytc.InternalError, polytc.CompilationError)

#: option values worth mixing in: small tiles make the tiler act on the tiny sizes here
C_OPTIONS = {
    "fusion": ["preserve", "max", "min"],
    "parallel_min_points": [0, 1 << 15],
    "tile": [None, (), (2, 2, 2), (1, 3, 2), (4, 1, 3)],
    "register_tile": [None, (2, 2), (1, 1), (3, 2)],
    "vectorize": [True, False],
    "fp_contract": [True, False],
}
MAPPING_OPTIONS = {
    "mapping": ["threads", "groups"],
    "fusion": ["auto", "max", "min"],
    "block": [None, (1,), (3, 5), (2, 2, 4), (64,)],
    "block_tile": [None, (2, 3), (7, 11), (1, 1, 5)],
    "grid": [None, (1,), (2, 3), (1, 2, 2)],
    "reduction_tile": [None, 0, 1, 3],
    "shared_memory": [True, False],
    "private_memory": [True, False],
    "unroll": [0, 4],
}


def choices(table):
    return st.fixed_dictionaries({k: st.sampled_from(v) for k, v in table.items()})


@st.composite
def cases(draw) -> dict:
    g = draw(progen.programs(full=True))
    gpu = draw(choices(MAPPING_OPTIONS))
    return {"src": g.src, "sizes": draw(progen.sizes(full=True)),
            "seed": draw(st.integers(0, 2 ** 32 - 1)), "specials": draw(st.booleans()),
            "out": draw(st.integers(0, 3)) == 0,
            "options": {"c": draw(choices(C_OPTIONS)), "opencl": gpu,
                        "cuda": dict(gpu, mapping="threads")}}


def _options(kwargs: dict) -> polytc.Options:
    return polytc.Options(**{k: tuple(v) if isinstance(v, list) else v
                             for k, v in kwargs.items()})


def _attempt(fn):
    """``("ok", value)`` or ``("error", exception)`` for a polytc error that is no bug."""
    try:
        return "ok", fn()
    except BUG_ERRORS:
        raise
    except polytc.PolytcError as e:
        return "error", e


def differences(got: dict, want: dict) -> list:
    bad = []
    for name, w in want.items():
        g = got[name]
        if g.shape != w.shape or g.dtype != w.dtype:
            bad.append(f"{name}: {g.dtype}{list(g.shape)}, expected {w.dtype}{list(w.shape)}")
        elif w.dtype.kind == "f":
            if not np.allclose(g, w, rtol=1e-4, atol=1e-4, equal_nan=True):
                where = np.argwhere(~np.isclose(g, w, rtol=1e-4, atol=1e-4, equal_nan=True))
                i = tuple(where[0])
                bad.append(f"{name}: {len(where)} elements differ, at {list(i)} {g[i]} "
                           f"instead of {w[i]}")
        elif not np.array_equal(g, w):
            bad.append(f"{name}: {int((g != w).sum())} elements differ")
    return bad


def check(case: dict) -> list:
    """What differs from the reference, per target (an empty list: all agree)."""
    program = polytc.tc(case["src"]).program
    rng = np.random.default_rng(case["seed"])
    inputs = progen.arrays_for(program, case["sizes"], rng, case["specials"])
    outs = None
    if case["out"]:  # random initial contents, NaN and infinities too
        env = program.bind_sizes([a.shape for a in inputs])
        outs = {t.name: np.asarray(rng.uniform(-1, 1, t.extents(env))).astype(
            t.dtype.np_dtype) for t in program.outputs}
        for a in outs.values():
            if case["specials"] and a.dtype.kind == "f" and a.size:
                a.reshape(-1)[rng.integers(a.size)] = rng.choice(progen.SPECIALS)

    def copies():
        return None if outs is None else {n: a.copy() for n, a in outs.items()}

    names = [t.name for t in program.outputs]
    given = copies()
    kind, expected = _attempt(lambda: reference.run(program, inputs, given))
    problems = []
    # and the C kernel with every size symbolic (one kernel for all sizes: dynamic.md)
    for target in TARGETS + ["c/symbolic"] * ("c" in TARGETS):
        k = polytc.tc(case["src"], target=target.split("/")[0],
                      options=_options(case["options"].get(target.split("/")[0], {})),
                      dynamic=program.sizes if target == "c/symbolic" else "auto")
        mine = copies()
        args = {} if mine is None else {
            "out": tuple(mine[n] for n in names) if len(names) > 1 else mine[names[0]]}
        tkind, result = _attempt(lambda k=k, args=args: k(*inputs, **args))
        if kind == "error" or tkind == "error":
            if kind != tkind:
                problems.append(f"{target}: {result if tkind == 'error' else 'no error'}, "
                                f"reference: {expected if kind == 'error' else 'no error'}")
            continue
        got = mine if mine is not None else dict(zip(
            names, result if isinstance(result, tuple) else (result,)))
        problems += [f"{target}: {p}" for p in differences(
            got, {n: expected[n] for n in names})]
    return problems


def _record(case: dict, problems: list) -> None:
    """Keep the minimal failing case Hypothesis replays last in the corpus."""
    from hypothesis.control import current_build_context

    try:
        final = current_build_context().is_final
    except Exception:  # not under Hypothesis (a corpus replay), or its API changed
        return
    if not final:
        return
    text = json.dumps(dict(case, problems=problems), indent=1, sort_keys=True)
    CORPUS.mkdir(exist_ok=True)
    name = hashlib.sha256(case["src"].encode()).hexdigest()[:12]
    (CORPUS / f"found-{name}.json").write_text(text + "\n")


@settings(max_examples=config.fuzz_examples(), **SETTINGS)
@given(case=cases())
def test_targets_agree_with_the_reference(case):
    note(case["src"])
    note(json.dumps({k: v for k, v in case.items() if k != "src"}))
    problems = check(case)
    if problems:
        _record(case, problems)
    assert not problems, problems


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.json")), ids=lambda p: p.stem)
def test_corpus(path):
    """Every case the fuzzer (or a user) found wrong once."""
    case = json.loads(path.read_text())
    problems = check(case)
    assert not problems, f"{case['src']}\n{problems}"


def test_generated_cases_use_every_feature():
    """The generator keeps its promises (checked on a fixed sample, compiled nowhere)."""
    import re

    seen = set()

    @settings(max_examples=300, database=None, **SETTINGS)
    @given(g=progen.programs(full=True))
    def collect(g):
        polytc.tc(g.src)  # parses and checks
        for op in progen.ALL_REDUCE_OPS + ("=",):
            if re.search(rf"\) {re.escape(op)} |^    T\d+ {re.escape(op)} ", g.src, re.M):
                seen.add(op)
        for feature, pattern in [("update", r"^    (T\d+).*\n(.*\n)*    \1[ (]"),
                                 ("constant subscript", r"[A-Z]\d?\([^)]*\b\d\b"),
                                 ("range from 1", r" in 1:"), ("offset", r" \+ [12]\b")]:
            if re.search(pattern, g.src, re.M):
                seen.add(feature)
        if len(g.outputs) > 1:
            seen.add("several outputs")

    collect()
    want = set(progen.ALL_REDUCE_OPS) | {"=", "update", "constant subscript", "range from 1",
                                         "offset", "several outputs"}
    assert seen >= want, want - seen
