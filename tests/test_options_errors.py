"""Bad ``Options`` values (from an API-misuse sweep): each is an ``OptionsError`` naming
the option, the value and what is allowed, never a raw Python exception, a crash in
OpenMP or a silently different meaning; and valid sizes of 0 replay hand schedules."""
import math

import numpy as np
import pytest

import polytc
from polytc.compiler.pipeline import PASSES
from polytc.options import MAX_THREADS, OPTIONAL_PASSES, Options, OptionsError

MM = "def matmul(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"


def raises(match: str, **fields):
    with pytest.raises(OptionsError, match=match) as e:
        Options(**fields)
    return str(e.value)


@pytest.mark.parametrize("value", [2 ** 31 - 1, MAX_THREADS + 1, 0, -3, 2.5, "4", True])
def test_num_threads(value):
    text = raises("num_threads must be an int from 1 to 4096", num_threads=value,
                  parallel_min_points=1)
    assert repr(value) in text


def test_num_threads_accepts_ints():
    assert Options(num_threads=np.int64(4)).num_threads == 4
    assert type(Options(num_threads=np.int64(4)).num_threads) is int  # (JSON-serialisable)
    assert Options(num_threads=MAX_THREADS).num_threads == MAX_THREADS


def test_unknown_fields():
    text = raises("Options has no field 'bogus'", bogus=1)
    assert "num_threads" in text and "tile" in text  # the valid fields are listed
    with pytest.raises(OptionsError, match="no field 'tiles'"):
        Options().replace(tiles=(8, 8, 8))
    with pytest.raises(OptionsError, match="at most"):
        Options(*range(40))


@pytest.mark.parametrize("name, value, match", [
    ("tile", "abc", "tile must be 3 positive sizes"),
    ("tile", "888", "tile must be 3 positive sizes"),
    ("tile", (math.nan, 1, 1), "tile must be 3 positive sizes"),
    ("tile", (math.inf, 1, 1), "tile must be 3 positive sizes"),
    ("tile", (None, 8, 8), "tile must be 3 positive sizes"),
    ("tile", (1.7, 8, 8), "tile must be 3 positive sizes"),
    ("tile", (8, 8), "tile must be 3 positive sizes"),
    ("tile", (0, 8, 8), "tile must be 3 positive sizes"),
    ("tile", 5, "tile must be 3 positive sizes"),
    ("tile", {}, "tile must be 3 positive sizes"),
    ("register_tile", "ab", "register_tile must be 2 positive sizes"),
    ("register_tile", (), "register_tile must be 2 positive sizes"),
    ("block", "ab", "block must be 1 to 3 positive sizes"),
    ("block", 5, "block must be 1 to 3 positive sizes"),
    ("block_tile", (True,), "block_tile must be 1 to 3 positive sizes"),
    ("grid", ("x",), "grid must be 1 to 3 positive sizes"),
    ("disable", 5, "disable must be a sequence of pass names"),
    ("disable", (5,), "disable must be a sequence of pass names"),
    ("constants", 5, "constants must be a sequence of input names"),
    ("constants", (1, [2]), "constants must be a sequence of input names"),
    ("aligned", 5, "aligned must be a sequence of input names"),
    ("symbolic", 5, "symbolic must be a sequence of size names"),
    ("schedule", 5, "schedule must be a recipe"),
    ("schedule", "tile", "schedule must be a recipe"),
    ("reduction_tile", "x", "reduction_tile must be an int >= 0"),
    ("reduction_tile", -1, "reduction_tile must be an int >= 0"),
    ("unroll", "x", "unroll must be an int >= 0"),
    ("unroll", None, "unroll must be an int >= 0"),
    ("parallel_min_points", "x", "parallel_min_points must be an int >= 0"),
    ("parallel_min_points", 1.5, "parallel_min_points must be an int >= 0"),
    ("fusion", ["max"], "unknown fusion strategy"),
    ("mapping", 5, "unknown mapping"),
])
def test_bad_values(name, value, match):
    text = raises(match, **{name: value})
    assert repr(value)[:50] in text
    with pytest.raises(OptionsError, match=match):  # the same through replace
        Options().replace(**{name: value})


def test_sizes_are_normalised():
    assert Options(tile=[np.int32(4), 8, 16]).tile == (4, 8, 16)
    assert Options(tile=()).tile == ()
    assert Options(block=[32]).block == (32,)


@pytest.mark.parametrize("name", ["parallel", "vectorize", "fp_contract", "reciprocal",
                                  "shared_memory", "private_memory"])
@pytest.mark.parametrize("value", ["no", 0, 1, None])
def test_bool_fields_take_bools(name, value):
    text = raises(f"{name} must be True or False", **{name: value})
    assert repr(value) in text
    assert getattr(Options(**{name: False}), name) is False


def test_disable_names_passes():
    text = raises("disable: there is no pass 'bogus_pass' to switch off",
                  disable=("bogus_pass",))
    assert "fold" in text and "few_rows" in text  # the known ones are listed
    raises("no pass 'codegen' to switch off", disable=("codegen",))  # not optional
    text = raises("disable must be a sequence of pass names, got the string 'tile'",
                  disable="tile")
    assert "disable=('tile',)" in text
    assert Options(disable=["fold", "tile", "fold"]).disable == ("fold", "tile")


def test_optional_passes_are_the_pipelines():
    assert OPTIONAL_PASSES == tuple(p.name for p in PASSES if p.optional)


@pytest.mark.parametrize("text, match", [
    ("not json", "from_json takes the text of Options.to_json"),
    (None, "from_json takes the text of Options.to_json"),
    ("[1]", "from_json takes a JSON object"),
    ('{"bogus": 1}', "no field 'bogus'"),
    ('{"tile": "abc"}', "tile must be 3 positive sizes"),
])
def test_from_json(text, match):
    with pytest.raises(OptionsError, match=match):
        Options.from_json(text)


def test_with_options_bad_value():
    mm = polytc.tc(MM)
    with pytest.raises(OptionsError, match="tile must be 3 positive sizes .*, got 'abc'"):
        mm.with_options(tile="abc")


@pytest.mark.parametrize("steps, match", [
    ((("from",),), r"\('from',\): a recipe starts from"),
    ((("from", "bogus"),), r"\('from', 'bogus'\): a recipe starts from"),
    ((("from", "isl", "bogusfusion"),), "a recipe starts from .* FUSION one of auto"),
    ((("from", "program", "max"),), "a recipe starts from"),
    ((("from", "isl", "auto"), ("tile",)), r"\('tile',\): tile takes a band and 1 more"),
    ((("tile", 0, (4, 4), 9),), r"tile takes a band and 1 more argument"),
    ((("interchange", 0),), r"interchange takes a band and 2 more argument"),
    ((("tile", 0, (4.0, 4)),), "its band, loops and sizes must be ints"),
    ((("parallel", "0", 0),), "its band, loops and sizes must be ints"),
    ((("tile", 0, (4, 4)), ("from", "isl")), r"step \('from', 'isl'\) is not a known step"),
    (((5,),), "is not a known step"),
])
def test_malformed_recipes(steps, match):
    raises(match, schedule=steps)


def test_recipes_from_json_still_load():
    o = Options(schedule=[["from", "program"], ["tile", 0, [4, 4]], ["parallel", 0, 0]])
    assert o.schedule == (("from", "program"), ("tile", 0, (4, 4)), ("parallel", 0, 0))
    assert Options.from_json(o.to_json()) == o


@pytest.mark.parametrize("a, b", [((0, 3), (3, 4)), ((5, 0), (0, 4)), ((5, 3), (3, 0)),
                                  ((0, 0), (0, 0))])
def test_hand_schedules_replay_at_size_0(a, b):
    """A recipe numbers the bands of the sizes it was made at; a size 0 removes some."""
    mm = polytc.tc(MM)
    A, B = np.ones((5, 3), np.float32), np.ones((3, 4), np.float32)
    s = mm.schedule(A, B).tile(0, (4, 4)).tile(2, (2,))
    k = mm.with_schedule(s)
    np.testing.assert_array_equal(k(A, B), A @ B)
    A0, B0 = np.ones(a, np.float32), np.ones(b, np.float32)
    np.testing.assert_array_equal(k(A0, B0), A0 @ B0)
