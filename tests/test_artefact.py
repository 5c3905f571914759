"""A model file's imported graph comes from the disk cache on a later load
(``polytc.graph.artefact``): the same outputs, the weights mapped read-only and aligned,
and a rewritten file imported again."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

import polytc
import polytc.onnx
from polytc.graph import artefact
from polytc.graph import examples as ex
from polytc.runtime.memory import is_aligned


@pytest.fixture
def imports(monkeypatch):
    """How many times a model was really imported."""
    calls = []
    real = artefact.import_model

    def counted(*a, **k):
        calls.append(a[0])
        return real(*a, **k)

    monkeypatch.setattr(artefact, "import_model", counted)
    return calls


def _graph_entries() -> set:
    """The cached graphs."""
    root = os.environ["POLYTC_CACHE_DIR"]
    return {os.path.join(root, shard, key) for shard in os.listdir(root) if len(shard) == 2
            for key in os.listdir(os.path.join(root, shard))
            if os.path.exists(os.path.join(root, shard, key, "graph.pickle"))}


def _save(m, path, seed):
    rng = np.random.default_rng(seed)
    for init in m.graph.initializer:  # other weights, the same sizes
        a = onnx.numpy_helper.to_array(init)
        init.CopyFrom(onnx.numpy_helper.from_array(
            rng.uniform(0.5, 1.5, a.shape).astype(a.dtype), init.name))  # (BN variances > 0)
    onnx.save(m, path)


def test_a_second_load_comes_from_the_cache(tmp_path, imports):
    m = ex.small_cnn(2, 8)
    path = str(tmp_path / "cnn.onnx")
    _save(m, path, 0)
    feeds = ex.example_inputs(m, seed=1)
    first = polytc.onnx.compile(path)
    want = first.run(None, feeds)
    second = polytc.onnx.compile(path)
    assert len(imports) == 1  # the second load imported nothing
    for a, b in zip(second.run(None, feeds), want):
        np.testing.assert_array_equal(a, b)
    weights = [c for c in second.graph.constants.values() if c.size > 16]
    assert weights and all(not c.flags.writeable and is_aligned(c) for c in weights)
    assert second.stages["fold_batchnorm"] == first.stages["fold_batchnorm"]
    assert list(second.stages) == list(first.stages)


def test_a_rewritten_file_is_imported_again(tmp_path, imports):
    m = ex.mlp(3, (12, 8, 4))
    path = str(tmp_path / "mlp.onnx")
    _save(m, path, 0)
    feeds = ex.example_inputs(m, seed=2)
    known = _graph_entries()
    before = polytc.onnx.compile(path).run(None, feeds)[0]
    (first,) = _graph_entries() - known
    st = os.stat(path)
    _save(m, path, 1)  # same size, other weights
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # even with the old mtime
    assert os.stat(path).st_size == st.st_size
    after = polytc.onnx.compile(path).run(None, feeds)[0]
    assert len(imports) == 2 and not np.array_equal(before, after)
    assert first not in _graph_entries()  # the first version's entry went
    assert len(_graph_entries() - known) == 1
    want = polytc.onnx.compile(onnx.load(path)).run(None, feeds)[0]
    np.testing.assert_array_equal(after, want)


def test_models_not_on_disk_and_disabled_passes(tmp_path, imports, monkeypatch):
    m = ex.mlp(2, (6, 5, 3))
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    polytc.onnx.compile(m)
    polytc.onnx.compile(m.SerializeToString())
    assert len(imports) == 2  # objects and bytes: imported each time
    polytc.onnx.compile(path)
    polytc.onnx.compile(path, disable=("cse",))  # another graph: its own entry
    polytc.onnx.compile(path)
    assert len(imports) == 4
    monkeypatch.setenv("POLYTC_NO_DISK_CACHE", "1")
    polytc.onnx.compile(path)
    assert len(imports) == 5


def test_weights_in_a_file_of_their_own(tmp_path, imports):
    """A model whose weights are external data: a change of that file alone (the model
    file untouched) is seen."""
    m = ex.mlp(3, (12, 8, 4))
    feeds = ex.example_inputs(m, seed=4)
    want = polytc.onnx.compile(m).run(None, feeds)[0]
    path = str(tmp_path / "ext.onnx")
    onnx.save(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)  # (m refers to the file now)
    np.testing.assert_allclose(polytc.onnx.compile(path).run(None, feeds)[0], want,
                               rtol=1e-6)
    np.testing.assert_allclose(polytc.onnx.compile(path).run(None, feeds)[0], want,
                               rtol=1e-6)
    assert len(imports) == 2  # the model object, then the file once
    weights = tmp_path / "weights.bin"
    raw = np.fromfile(weights, np.float32)
    (raw * 2).tofile(weights)  # other weights, same size, same model file
    got = polytc.onnx.compile(path).run(None, feeds)[0]
    assert len(imports) == 3 and not np.allclose(got, want)


@pytest.fixture
def parses(monkeypatch):
    """The group texts a plan really parsed (``graph.programs``)."""
    from polytc.graph import programs

    calls = []
    real = programs.checked

    def counted(name, text):
        calls.append(text)
        return real(name, text)

    monkeypatch.setattr(programs, "checked", counted)
    return calls


def test_a_second_load_parses_no_group(tmp_path, parses, monkeypatch):
    """The plan's programs come from the disk cache, and run as the parsed ones did."""
    from polytc.backends import base

    monkeypatch.setenv("POLYTC_CACHE_DIR", str(tmp_path / "cache"))
    base.forget_loaded()
    m = ex.small_cnn(2, 8)
    feeds = ex.example_inputs(m, seed=1)
    first = polytc.onnx.compile(m)
    want = first.run(None, feeds)
    assert parses  # the first plan parsed its groups
    texts = len(parses)
    parses.clear()
    base.forget_loaded()  # (a fresh process: the kernels come from the disk cache too)
    second = polytc.onnx.compile(m)
    assert parses == [] and texts > 1
    for a, b in zip(second.run(None, feeds), want):
        np.testing.assert_array_equal(a, b)


def test_an_unreadable_programs_entry_is_parsed_again(tmp_path, parses, monkeypatch):
    from polytc.cache import DiskCache
    from polytc.graph.programs import FILE, Programs

    monkeypatch.setenv("POLYTC_CACHE_DIR", str(tmp_path / "cache"))
    texts = ["def f(float(N) A) -> (B) { B(i) = A(i) + 1.0 }",
             "def g(float(N) A) -> (B) { B(i) = A(i) * 2.0 }"]
    p = Programs(texts)
    DiskCache().put(p.key, {FILE: b"not a pickle"}, {"kind": "group-programs"})
    again = Programs(texts)
    assert again.found == {}
    for t in texts:
        assert again.get("g0", t).name in ("f", "g")
    assert parses == texts
