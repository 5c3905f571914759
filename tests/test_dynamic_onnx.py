"""Models with a symbolic batch: each group compiles once with the batch symbolic (at the
first run, or at the second when the first batch is 1) and serves every later batch
without a compile (``polytc/graph/dynamic.py``, docs/dynamic.md)."""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

import polytc
from polytc.compiler import pipeline
from polytc.graph import examples as ex
from polytc.graph.dynamic import Generaliser, skeleton

from .onnx_check import reference

CASES = {
    "mlp": lambda: ex.mlp("N", sizes=(32, 64, 48, 10)),
    "small_cnn": lambda: ex.small_cnn("N", image=16),
    "resnet_block_down": lambda: ex.resnet_block("N", channels=8, image=15, out_channels=16,
                                                 stride=2),
    # a flattened batch of sequences: N * 8 rows get a size of their own
    "transformer_layer": lambda: ex.transformer_layer("N", seq=8, d_model=16, heads=2,
                                                      ffn=32),
}


def _close(got, want):
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(w).max()))


@pytest.mark.parametrize("name", sorted(CASES))
def test_new_batch_sizes_compile_nothing(name, monkeypatch):
    m = CASES[name]()
    sess = polytc.onnx.compile(m)
    for k, batch in enumerate((4, 3, 1, 7, 2)):
        feeds = ex.example_inputs(m, seed=k, batch=batch)
        _close(sess.run(None, feeds), reference(m, feeds))
        plan = sess.plan({v: a.shape for v, a in feeds.items()})
        assert any(ck.symbolic for ck in plan.kernels.values()), "no group is generic"
        if k == 0:  # every later batch: the same kernels, viewed at its sizes
            monkeypatch.setattr(pipeline, "run", _no_compile)
    # the Python executor agrees with the native entry point on a generic plan
    feeds = ex.example_inputs(m, seed=9, batch=5)
    native = sess.run(None, feeds)
    plan = sess.plan({v: a.shape for v, a in feeds.items()})
    py = plan._execute(dict(feeds))
    for v, a in zip(m.graph.output, native):
        np.testing.assert_array_equal(py[v.name], a)


def test_batch_and_sequence_both_symbolic(monkeypatch):
    """A transformer layer exported with a symbolic batch and sequence length: compiled
    once, then every (batch, sequence) pair is a plan around the same kernels."""
    m = ex.transformer_layer("N", seq="S", d_model=16, heads=2, ffn=32)
    sess = polytc.onnx.compile(m)
    for k, (b, s) in enumerate(((2, 8), (3, 8), (2, 5), (4, 7))):
        rng = np.random.default_rng(k)
        feeds = {i.name: rng.standard_normal([b if d == "N" else s if d == "S" else d
                                              for d in i.shape]).astype(np.float32)
                 for i in sess.get_inputs()}
        feeds["mask"] = np.zeros_like(feeds["mask"])
        _close(sess.run(None, feeds), reference(m, feeds))
        if k == 0:
            monkeypatch.setattr(pipeline, "run", _no_compile)


def test_a_flattened_batch_of_sequences_compiles_once(monkeypatch):
    """``Reshape(x, [-1, d])`` of an [N, S, d] input before a MatMul: its N * S rows are
    a size of their own (``D0xD1``), not a group compiled for each pair of values."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    vi = helper.make_tensor_value_info
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["f"]),
         helper.make_node("MatMul", ["f", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "flat", [vi("x", TensorProto.FLOAT, ["N", "S", 8])],
        [vi("y", TensorProto.FLOAT, ["M", 16])],
        [numpy_helper.from_array(np.array([-1, 8], np.int64), "shape"),
         numpy_helper.from_array(rng.normal(size=(8, 16)).astype(np.float32), "w")]),
        opset_imports=[helper.make_opsetid("", 17)])
    sess = polytc.onnx.compile(m)
    for k, (b, s) in enumerate(((2, 8), (3, 8), (2, 5), (1, 1), (4, 7))):
        feeds = {"x": rng.normal(size=(b, s, 8)).astype(np.float32)}
        _close(sess.run(None, feeds), reference(m, feeds))
        if k == 0:
            plan = sess.plan({"x": (b, s, 8)})
            assert any("D0xD1" in ck.symbolic for ck in plan.kernels.values())
            monkeypatch.setattr(pipeline, "run", _no_compile)


def test_a_first_batch_of_one_is_specialised(monkeypatch):
    """A batch of one seen first keeps its specialised kernels (a one-row product, a
    one-image convolution on every thread); the next batch makes the generic ones."""
    m = CASES["small_cnn"]()
    sess = polytc.onnx.compile(m)
    for k, batch in enumerate((1, 3, 5)):
        feeds = ex.example_inputs(m, seed=k, batch=batch)
        _close(sess.run(None, feeds), reference(m, feeds))
        plan = sess.plan({v: a.shape for v, a in feeds.items()})
        assert any(ck.symbolic for ck in plan.kernels.values()) == (k > 0)
        if k == 1:
            monkeypatch.setattr(pipeline, "run", _no_compile)


def _no_compile(*a, **k):
    raise AssertionError("a new batch size compiled a group")


def test_generaliser_names_only_numbers_that_follow_the_dimension():
    class G:  # a graph with input x [N, 4]
        inputs = ["x"]
        types = {"x": type("T", (), {"shape": ("N", 4)})()}

    gen = Generaliser(G())
    t8 = "def group(float(8, 4) a0) -> (float(8, 4) a1) {\n a1(i0, i1) = a0(i0, i1) * 8.0 " \
         "where i0 in 0:8, i1 in 0:4\n}"
    t3 = t8.replace("(8, 4)", "(3, 4)").replace("0:8", "0:3")
    assert skeleton(t8) == skeleton(t3)
    assert gen.generic(t8, {"N": 8}) is None  # the first binding: its reference
    text, names = gen.generic(t3, {"N": 3})
    assert names == ("D0",) and "float(D0, 4)" in text and "0:D0" in text
    assert "* 8.0" in text  # a float literal is never a size
    # a multiple (2 * N rows: a flattened batch) gets a size name of its own
    t16 = t8.replace("float(8, 4) a0", "float(16, 4) a0")
    t6 = t3.replace("float(3, 4) a0", "float(6, 4) a0")
    gen2 = Generaliser(G())
    assert gen2.generic(t16, {"N": 8}) is None
    text, names = gen2.generic(t6, {"N": 3})
    assert names == ("D0", "D0x2") and "float(D0x2, 4) a0" in text
    # a product of two dimensions (N * S rows) gets one too
    class G2:  # x [N, S, 4]
        inputs = ["x"]
        types = {"x": type("T", (), {"shape": ("N", "S", 4)})()}

    gen4 = Generaliser(G2())
    t40 = t8.replace("float(8, 4) a0", "float(40, 4) a0")  # N = 8, S = 5
    t21 = t3.replace("float(3, 4) a0", "float(21, 4) a0")  # N = 3, S = 7
    assert gen4.generic(t40, {"N": 8, "S": 5}) is None
    text, names = gen4.generic(t21, {"N": 3, "S": 7})
    assert "float(D0xD1, 4) a0" in text and "D0xD1" in names
    # a number that follows the dimension otherwise (N + 1) keeps the group specialised
    t9 = t8.replace("float(8, 4) a0", "float(9, 4) a0")
    t4 = t3.replace("float(3, 4) a0", "float(4, 4) a0")
    gen3 = Generaliser(G())
    assert gen3.generic(t9, {"N": 8}) is None and gen3.generic(t4, {"N": 3}) is None


def test_plans_of_a_dynamic_model_share_one_arena():
    """A model run at many batch sizes keeps one arena (grown when a batch needs more),
    not one per size, and its plans run one at a time on it."""
    m = CASES["mlp"]()
    sess = polytc.onnx.compile(m)
    plans = []
    for k, batch in enumerate((16, 3, 9, 16)):
        feeds = ex.example_inputs(m, seed=k, batch=batch)
        _close(sess.run(None, feeds), reference(m, feeds))
        plans.append(sess.plan({v: a.shape for v, a in feeds.items()}))
    assert plans[0] is plans[3]
    assert len({id(p._memory) for p in plans}) == 1 and len({id(p._lock) for p in plans}) == 1
    buffers = list(plans[0]._memory._buffers.values())  # the smaller batches' values lie in them
    for p in plans[1:3]:
        assert all(any(np.shares_memory(a, b) for b in buffers) for a in p.placed.values())
    # the earlier plan still runs right after the others used the arena
    feeds = ex.example_inputs(m, seed=5, batch=16)
    _close(sess.run(None, feeds), reference(m, feeds))


def test_a_generic_kernel_at_a_batch_of_one_runs_its_inner_loops_in_parallel():
    """A group's loop over the symbolic batch forks only with an image per thread; below
    it, the loops a batch of one runs fork instead (a generic ResNet at batch 1 had run
    its convolutions on one thread: 2x its specialised time)."""
    from polytc.machine import threads

    if threads() < 2:
        pytest.skip("one thread: no parallel loops")
    m = ex.resnet_block("N", channels=16, image=14)
    sess = polytc.onnx.compile(m)
    for k, batch in enumerate((3, 1, 2)):
        feeds = ex.example_inputs(m, seed=k, batch=batch)
        _close(sess.run(None, feeds), reference(m, feeds))
    plan = sess.plan({v: a.shape for v, a in feeds.items()})
    codes = [ck.code for ck in plan.kernels.values() if ck.symbolic]
    assert any(re.search(r"if \(\(D0\) - \(0L\) >= \d+\)", c) for c in codes)
    assert any(re.search(r"if \(!\(\(D0\) - \(0L\) >= \d+\)\)\s*\{\s*#pragma omp parallel for",
                         c) for c in codes)


def test_growing_batches_grow_the_arena_in_place():
    """A shared arena's buffers are reservations of address space: a larger batch uses
    more of the same buffer (the pages touched before stay; a transformer layer's new
    batch of 64 after 32: 44 -> 27 ms), and the plans share their generic kernels'
    packed weights and one buffer of the kernels' temporaries."""
    from polytc.graph.arena import Arena
    from polytc.runtime import memory

    arena = Arena(grow=True)
    first = arena.take(0, 1000)
    if memory.reserve(1000) is not None:
        assert first.size >= 64 * 1000 and arena.take(0, 60000) is first
    fixed = Arena()  # a plan's own arena: each buffer as large as asked, grown twofold
    small = fixed.take(0, 1000)
    grown = fixed.take(0, 1200)
    assert small.size == 1000 and grown.size >= 2000 and fixed.take(0, 1900) is grown
    m = CASES["mlp"]()
    sess = polytc.onnx.compile(m)
    plans = []
    for batch in (4, 5, 6, 7):
        feeds = ex.example_inputs(m, seed=batch, batch=batch)
        _close(sess.run(None, feeds), reference(m, feeds))
        plans.append(sess.plan({v: a.shape for v, a in feeds.items()}))
    generic = [p for p in plans[1:] if p.prepacked]
    assert generic
    for g, arrays in generic[0].prepacked.items():
        assert all(p.prepacked[g] is arrays for p in generic)
    # the groups' temporaries: one buffer, whatever the groups and plans
    buffers = plans[0]._memory._buffers
    assert [k for k in buffers if not isinstance(k, int)] == ["scratch"]
    if memory.reserve(1000) is not None:  # every plan's values in the same buffers
        base = {b: buffers[b].ctypes.data for b in buffers}
        for p in plans:
            for v, (b, at) in p.slot.items():
                assert p.placed[v].ctypes.data == base[b] + at


def test_the_kernels_temporaries_start_with_anything():
    """The groups' temporaries share a buffer (``Arena.scratch``): a kernel must not
    count on what it left there, nor on zeros.  The plan's scratch filled with NaN
    between runs changes no output."""
    m = CASES["mlp"]()
    sess = polytc.onnx.compile(m)
    feeds = ex.example_inputs(m, seed=1)
    want = sess.run(None, feeds)
    plan = sess.plan({v: a.shape for v, a in feeds.items()})
    temps = [a for arrays in plan.scratch.values() for a in arrays]
    assert temps, "the MLP's groups have no temporaries any more: pick another model"
    for a in temps:
        a.fill(np.nan) if a.dtype.kind == "f" else a.fill(-1)
    got = sess.run(None, feeds)
    for x, y in zip(got, want):
        np.testing.assert_array_equal(x, y)



def _linux_at_least(major, minor):
    try:
        got = tuple(int(x) for x in os.uname().release.split(".")[:2])
    except (AttributeError, ValueError):
        return False
    return got >= (major, minor)


@pytest.mark.skipif(not _linux_at_least(5, 14), reason="MADV_POPULATE_WRITE: Linux 5.14")
def test_a_grown_arena_faults_its_new_pages_in_at_once():
    """The part of a reserved buffer that a plan uses first is faulted in when the plan
    is made, over the threads (``Arena.populate``): the run then touches no new page."""
    import resource

    from polytc.graph.arena import Arena
    from polytc.runtime import memory

    if memory.reserve(1 << 20) is None:
        pytest.skip("no address space to reserve here")
    arena = Arena(grow=True)
    for k, nbytes in ((0, 3 << 20), (1, 3 << 19), (0, 5 << 20)):  # the last grows 0
        buf = arena.take(k, nbytes)
        arena.populate()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        buf[:nbytes:4096] = 1
        assert resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before < 16
    ranges = [(buf, 0, 3 << 20), (buf, 7 << 20, 8 << 20)]  # split over 4 threads
    memory.populate(ranges, 4)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    buf[7 << 20:8 << 20:4096] = 2
    assert resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before < 16


@pytest.mark.skipif(not _linux_at_least(5, 14), reason="MADV_POPULATE_WRITE: Linux 5.14")
def test_a_larger_plan_has_its_expected_pages_faulted_in_while_it_is_made(monkeypatch):
    """At the start of a plan of a larger scale, the arena guesses its takes from the
    largest plan's, in proportion, and begins to fault in their new pages on another
    CPU (``Arena.expect``); ``populate`` finishes them, and faults in what the guess
    missed: the run touches no new page either way.  No guess on one thread, nor for a
    smaller plan.  (No headroom here: ``test_a_first_plan_faults_in_headroom``.)"""
    import resource

    from polytc import machine
    from polytc.graph.arena import Arena
    from polytc.runtime import memory

    if memory.reserve(1 << 20) is None:
        pytest.skip("no address space to reserve here")
    monkeypatch.setattr(machine, "threads", lambda: 2)
    monkeypatch.setenv("POLYTC_ARENA_HEADROOM", "0")
    arena = Arena(grow=True)
    arena.expect(2)  # the first plan: nothing to guess from
    assert arena._job is None
    for k, nbytes in ((0, 2 << 20), (1, 1 << 20)):
        arena.take(k, nbytes)
    arena.populate()
    arena.expect(6)  # three times as large: 6 and 3 MiB
    began = arena._job is not None  # (a machine of one CPU begins nothing)
    if began:
        assert [(start, stop) for _, start, stop in arena._job[1]] == \
            [(2 << 20, 6 << 20), (1 << 20, 3 << 20)]
    bufs = [arena.take(0, 7 << 20), arena.take(1, 3 << 20)]  # 0 takes more than guessed
    assert arena._new == ([(bufs[0], 6 << 20, 7 << 20)] if began else
                          [(bufs[0], 2 << 20, 7 << 20), (bufs[1], 1 << 20, 3 << 20)])
    arena.populate()
    assert arena._job is None and arena._largest == (6, {0: 7 << 20, 1: 3 << 20})
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    bufs[0][:7 << 20:4096] = 1
    bufs[1][:3 << 20:4096] = 1
    assert resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before < 16
    arena.expect(3)  # smaller: its pages were touched before
    assert arena._job is None
    arena.finish()  # (nothing begun: nothing to do)


@pytest.mark.skipif(not _linux_at_least(5, 14), reason="MADV_POPULATE_WRITE: Linux 5.14")
def test_a_first_plan_faults_in_headroom(monkeypatch):
    """The first plan of a shared arena faults in each reserved buffer up to
    ``HEADROOM`` times its take, within ``POLYTC_ARENA_HEADROOM`` MiB in all (scaled
    down alike): a larger batch then touches no new page and guesses none; the next
    plans add none."""
    import resource

    from polytc import machine
    from polytc.graph.arena import HEADROOM, Arena
    from polytc.runtime import memory

    if memory.reserve(1 << 20) is None:
        pytest.skip("no address space to reserve here")
    monkeypatch.setattr(machine, "threads", lambda: 2)
    monkeypatch.setenv("POLYTC_ARENA_HEADROOM", "9")  # MiB: less than 3 x (2 + 1) MiB
    arena = Arena(grow=True)
    arena.expect(2)
    bufs = [arena.take(0, 2 << 20), arena.take(1, 1 << 20)]
    arena.populate()
    assert HEADROOM == 4 and arena._used == {0: 8 << 20, 1: 4 << 20}  # 6 + 3 MiB more
    arena.expect(6)  # three times as large: within the headroom
    assert arena._job is None
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    bufs = [arena.take(0, 6 << 20), arena.take(1, 3 << 20)]
    assert arena._new == []
    bufs[0][:6 << 20:4096] = 1
    bufs[1][:3 << 20:4096] = 1
    assert resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before < 16
    arena.populate()
    assert arena._used == {0: 8 << 20, 1: 4 << 20}  # (the first plan's only)

    monkeypatch.setenv("POLYTC_ARENA_HEADROOM", "3")  # scaled down alike: 2 and 1 MiB
    arena = Arena(grow=True)
    arena.expect(2)
    arena.take(0, 2 << 20), arena.take(1, 1 << 20)
    arena.populate()
    assert arena._used == {0: 4 << 20, 1: 2 << 20}
    monkeypatch.setenv("POLYTC_ARENA_HEADROOM", "0")
    arena = Arena(grow=True)
    arena.expect(2)
    arena.take(0, 2 << 20)
    arena.populate()
    assert arena._used == {0: 2 << 20}


def test_an_arena_without_room_to_reserve_grows_by_new_buffers(monkeypatch):
    """Where the address space cannot be reserved (a failed mapping: ``ulimit -v``), a
    shared arena makes buffers as large as asked, grown twofold, as a plan's own."""
    import mmap

    from polytc.graph.arena import Arena
    from polytc.runtime import memory

    def refuse(*a, **k):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(mmap, "mmap", refuse)
    assert memory.reserve(1 << 20) is None
    arena = Arena(grow=True)
    small = arena.take(0, 1000)
    assert small.size == 1000 and arena.take(0, 1200).size >= 2000
    big = arena.take(1, 8 << 20)  # (huge_empty's mapping refused too: plain memory)
    assert big.size >= 8 << 20


def test_a_plan_that_compiled_is_followed_by_a_full_collection(monkeypatch):
    """A compile leaves many objects for Python's collector; its first full collection
    after them is made at the end of the plan that compiled (where 10-20 ms are lost in
    seconds), not at a later new batch size, whose plans compile nothing, nor at a run
    of another model (a model of fixed shapes collects after its compile too)."""
    import gc

    from polytc.graph import session

    calls = []
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append(a) or 0)
    m = CASES["mlp"]()
    monkeypatch.setattr(session, "COLLECT_AFTER_S", float("inf"))
    sess = polytc.onnx.compile(m)
    monkeypatch.setattr(session, "COLLECT_AFTER_S", 0.0)  # any compile counts as long
    calls.clear()
    sess.run(None, ex.example_inputs(m, seed=0, batch=4))
    assert len(calls) == 1
    monkeypatch.setattr(session, "COLLECT_AFTER_S", float("inf"))
    sess.run(None, ex.example_inputs(m, seed=1, batch=3))
    assert len(calls) == 1
    fixed = ex.mlp(5, sizes=(32, 64, 48, 10))  # fixed shapes: its garbage is every model's
    monkeypatch.setattr(session, "COLLECT_AFTER_S", 0.0)
    polytc.onnx.compile(fixed).run(None, ex.example_inputs(fixed, seed=2))
    assert len(calls) == 2


def test_a_compile_runs_no_full_collection_and_restores_the_collector(monkeypatch):
    """While a plan compiles, Python's collector makes no full collection (each
    traversed every object of the process, tens of milliseconds of a cold compile); its
    thresholds are the user's again after it, and after a compile that fails."""
    import gc

    from polytc.graph import plan as plan_module

    seen = []
    real = plan_module.Plan.__init__

    def recording(self, *a, **k):
        seen.append(gc.get_threshold())
        return real(self, *a, **k)

    monkeypatch.setattr(plan_module.Plan, "__init__", recording)
    before = gc.get_threshold()
    polytc.onnx.compile(ex.mlp(3, sizes=(16, 24, 8)))
    assert seen and seen[0][:2] == before[:2] and seen[0][2] >= 1 << 30
    assert gc.get_threshold() == before

    def failing(self, *a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(plan_module.Plan, "__init__", failing)
    with pytest.raises((RuntimeError, polytc.InternalError), match="boom"):
        polytc.onnx.compile(ex.mlp(3, sizes=(16, 20, 8)))
    assert gc.get_threshold() == before
