"""Misuse of the public API (exports, ONNX sessions, the onnxruntime surface, the onnx
backend adapter, explore, autotune): each is a polytc error that says what is wrong and
where, never an internal error, a raw Python exception or a silently ignored argument."""
from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper

import polytc
import polytc.onnx as ort
from polytc import ModelError, PolytcError, UnsupportedError
from polytc.exploration import Exploration, Variant
from polytc.graph import examples
from polytc.options import Options, OptionsError

MATMUL = "def matmul(float(M,K) A, float(K,N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"


def _not_internal(e) -> None:
    assert not isinstance(e.value, polytc.InternalError), str(e.value)
    assert "internal error" not in str(e.value)


@pytest.fixture(scope="module")
def model():
    return examples.mlp(2, sizes=(8, 4))  # input 'input' [2, 8] -> 'probs'


@pytest.fixture(scope="module")
def session(model):
    return ort.compile(model)


@pytest.fixture(scope="module")
def inference(model):
    return ort.InferenceSession(model)


@pytest.fixture(scope="module")
def mm():
    return polytc.tc(MATMUL)


@pytest.fixture(scope="module")
def ab():
    return np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)


# --- exports ------------------------------------------------------------------------
def _bad_directories(tmp_path):
    file = tmp_path / "a-file"
    file.write_text("not a directory")
    return [(str(file), "cannot write the export to"),
            (str(file / "sub"), "cannot write the export to"),
            (None, "must be a path"), (5, "must be a path")]


def test_export_kernel_to_a_bad_directory(mm, ab, tmp_path):
    for d, words in _bad_directories(tmp_path):
        with pytest.raises(PolytcError, match=words) as e:
            mm.export(d, *ab, build=False)
        _not_internal(e)
        if isinstance(d, str):
            assert d in str(e.value)


def test_export_model_to_a_bad_directory(model, session, tmp_path):
    for d, words in _bad_directories(tmp_path):
        with pytest.raises(PolytcError, match=words) as e:
            session.export(d, build=False)
        _not_internal(e)
    with pytest.raises(PolytcError, match="must be a path .* not int"):
        ort.export(model, 5, build=False)


@pytest.mark.parametrize("shapes, words", [
    ({"input": [-1, 8]}, "input 'input' is given \\[-1, 8\\]; a shape is a list of sizes"),
    ({"input": "ab"}, "input 'input' is given 'ab'"),
    ({"input": None}, "input 'input' is given None"),
    ({"input": [2.5, 8]}, "a shape is a list of sizes >= 0"),
    ({"input": [2]}, "is given \\[2\\], of rank 1; it has rank 2"),
    ({"input": [2**62, 8]}, "more than a process can address"),
    ({"nope": [2, 8]}, "the model has no input 'nope'"),
    (5, "shapes must be a dict"),
])
def test_export_shapes_are_checked(session, tmp_path, shapes, words):
    with pytest.raises(ModelError, match=words) as e:
        session.export(tmp_path / "out", shapes, build=False)
    _not_internal(e)


# --- compiling a model ------------------------------------------------------------------
@pytest.mark.parametrize("options", ["x", {"num_threads": 2}])
def test_compile_takes_options(model, options):
    with pytest.raises(OptionsError, match="options must be a polytc.Options, not "
                       + type(options).__name__):
        ort.compile(model, options=options)


@pytest.mark.parametrize("disable, words", [
    (5, "disable must be a list of pass names, not int"),
    (("bogus",), "disable: 'bogus' is not a pass"),
    ("cs", "disable: 'cs' is not a pass"),  # one name, not its characters
])
def test_compile_checks_disable(model, disable, words):
    with pytest.raises(OptionsError, match=words) as e:
        ort.compile(model, disable=disable)
    assert "cse" in str(e.value) and "pads_in_place" in str(e.value)  # the names listed


def test_compile_takes_one_pass_name(model):
    s = ort.compile(model, disable="cse")
    assert s.disable == ("cse",)
    assert "cse" not in s.stages


def test_run_with_takes_a_dict_of_outputs(session):
    x = np.ones((2, 8), np.float32)
    with pytest.raises(ModelError, match="out must be a dict of output name -> array, "
                       "not int"):
        session.run_with(None, {"input": x}, out=5)


def test_string_inputs_are_refused_at_compile():
    x = helper.make_tensor_value_info("x", TensorProto.STRING, [2])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, [1])
    m = helper.make_model(helper.make_graph([helper.make_node("Shape", ["x"], ["y"])], "g",
                                            [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedError, match="input 'x' is a tensor of strings"):
        ort.compile(m)


# --- the onnxruntime surface -----------------------------------------------------------
@pytest.mark.parametrize("providers", [[["CPUExecutionProvider"]], [("CPUExecutionProvider",)],
                                       [5]])
def test_provider_entries_are_checked(model, providers):
    with pytest.raises(OptionsError, match="a provider is a name or a \\(name, options "
                       "dict\\) tuple"):
        ort.InferenceSession(model, providers=providers)


@pytest.mark.parametrize("element_type, shape, words", [
    (np.float32, [2**62, 8], "more than a process can address"),
    (np.float32, [2**31, 2**31, 2**31], "more than a process can address"),
    (object, [2, 8], "element_type .* is not a type of numbers"),
])
def test_bound_buffers_are_checked(inference, element_type, shape, words):
    b = inference.io_binding()
    with pytest.raises(ModelError, match=words):
        b.bind_input("input", "cpu", 0, element_type, shape, 4096)
    with pytest.raises(ModelError, match=words):
        b.bind_output("probs", "cpu", 0, element_type, shape, 4096)


def test_a_profile_it_cannot_write(model, tmp_path):
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "missing" / "p")
    s = ort.InferenceSession(model, so)
    with pytest.raises(OptionsError, match="cannot write the profile to .*missing") as e:
        s.end_profiling()
    assert "profile_file_prefix" in e.value.hint


# --- the onnx backend adapter --------------------------------------------------------------
def test_backend_checks_inputs_and_devices(model):
    backend = ort.Backend
    rep = backend.prepare(model)
    for inputs in (None, 5):
        with pytest.raises(ModelError, match="run takes a list of arrays .* not "
                           + type(inputs).__name__):
            rep.run(inputs)
    assert backend.supports_device("CPU") and not backend.supports_device("CUDA")
    for device in (5, "GPU", None):
        assert backend.supports_device(device) is False
    for device in ("GPU", 5, "CUDA"):
        with pytest.raises(UnsupportedError, match="runs models on the CPU, not on device"):
            backend.prepare(model, device=device)


# --- explore ---------------------------------------------------------------------------
@pytest.mark.parametrize("kw, words", [
    (dict(repeat="x"), "repeat must be an int of at least 1, not 'x'"),
    (dict(repeat=None), "repeat must be an int of at least 1, not None"),
    (dict(warmup=-1), "warmup must be an int of at least 0"),
    (dict(rtol="x"), "rtol must be None or a number >= 0, not 'x'"),
    (dict(atol=math.nan), "atol must be None or a number >= 0"),
    (dict(progress="x"), "progress must be True, False or None"),
])
def test_explore_checks_its_settings(mm, ab, kw, words):
    with pytest.raises(PolytcError, match=words) as e:
        polytc.explore(mm, *ab, fusion=["max"], **kw)
    _not_internal(e)


def test_exploration_variant_out_of_range(mm):
    ex = Exploration(mm, {}, [Variant(0, {}, Options()),
                              Variant(1, {"fusion": "min"}, Options(fusion="min"))])
    with pytest.raises(PolytcError, match="no variant 9; there are 2"):
        ex.diff(0, 9)
    with pytest.raises(PolytcError, match="no variant -3; there are 2"):
        ex[-3]
    assert ex[-1] is ex.rows[1]


# --- autotune ----------------------------------------------------------------------------
@pytest.mark.parametrize("kw, words", [
    (dict(budget="x"), "budget must be a positive number of seconds"),
    (dict(budget=math.nan), "budget must be a positive number of seconds"),
    (dict(budget=math.inf), "budget must be a positive number of seconds"),
    (dict(samples=5), "samples must be a list of tuples of inputs"),
    (dict(jobs="x"), "jobs must be None or an int of at least 1"),
    (dict(jobs=0), "jobs must be None or an int of at least 1"),
    (dict(timeout="x"), "timeout must be None or a positive number of seconds"),
    (dict(timeout=-1), "timeout must be None or a positive number of seconds"),
    (dict(population="x"), "population must be an int of at least 1"),
    (dict(population=0), "population must be an int of at least 1"),
    (dict(generations=-1), "generations must be None or an int of at least 1"),
    (dict(on_result=5), "on_result must be None or a function"),
    (dict(seed=[1]), "seed must be an int"),
])
def test_autotune_checks_its_settings(mm, ab, kw, words):
    with pytest.raises(PolytcError, match=words) as e:
        polytc.autotune(mm, *ab, verbose=False, store=False, **kw)
    _not_internal(e)
