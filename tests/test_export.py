"""Ahead-of-time export (polytc.aot): exported models and kernels build with make and run
without Python, giving the outputs of polytc.onnx / the kernel itself."""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from onnx import TensorProto, helper, numpy_helper

import polytc
import polytc.onnx as ponnx
from polytc import aot
from polytc.diagnostics import ModelError, UnsupportedError
from polytc.graph import examples as E

from . import progen

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def run_exported(program: str, d, *arrays, threads: int | None = None) -> tuple:
    """``(returncode, stderr, outputs by name)`` of ``run_model`` on ``arrays``, run with
    an empty environment: no Python, no PATH."""
    d = str(d)
    paths = []
    for i, a in enumerate(arrays):
        paths.append(os.path.join(d, f"in{i}.npy"))
        np.save(paths[-1], a)
    out = os.path.join(d, "out")
    shutil.rmtree(out, ignore_errors=True)
    r = subprocess.run([program, "-o", out] + (["-t", str(threads)] if threads else []) +
                       paths, capture_output=True, text=True, env={}, timeout=120)
    got = {f[:-4]: np.load(os.path.join(out, f)) for f in os.listdir(out)} \
        if r.returncode == 0 else {}
    return r.returncode, r.stderr, got


def check_model(model, d, batches, exact: bool = True):
    sess = ponnx.compile(model)
    e = aot.export_session(sess, d)
    for n in batches:
        feeds = E.example_inputs(model, batch=n)
        rc, err, got = run_exported(e.program, d, *[feeds[v] for v in sess.graph.inputs])
        assert rc == 0, err
        for name, want in zip(sess.graph.outputs, sess.run(None, feeds)):
            assert got[name].shape == want.shape and got[name].dtype == want.dtype
            if exact:
                np.testing.assert_array_equal(got[name], want)
            else:
                np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-5)
    return e


def test_dynamic_batch_mlp_runs_without_python(tmp_path):
    e = check_model(E.mlp(batch="N", sizes=(64, 32, 10)), tmp_path, [1, 3, 8])
    assert e.dims == ("N",)
    ldd = subprocess.run(["ldd", e.program], capture_output=True, text=True).stdout
    assert "libpolytc_model.so" in ldd and "python" not in ldd.lower()
    assert "python" not in subprocess.run(["ldd", e.library], capture_output=True,
                                          text=True).stdout.lower()
    # the directory rebuilds from its sources with make alone
    subprocess.run(["make", "-s", "clean"], cwd=tmp_path, check=True)
    subprocess.run(["make", "-s"], cwd=tmp_path, check=True, env={"PATH": "/usr/bin:/bin"})
    x = np.random.default_rng(1).normal(size=(5, 64)).astype(np.float32)
    rc, err, got = run_exported(e.program, tmp_path, x, threads=1)
    want = ponnx.compile(E.mlp(batch="N", sizes=(64, 32, 10))).run(None, {"input": x})[0]
    assert rc == 0, err
    np.testing.assert_array_equal(got["probs"], want)


def test_dynamic_batch_bert(tmp_path):
    model = E.bert_encoder(batch="N", seq=16, vocab=50, d_model=32, heads=2, ffn=64,
                           layers=1)
    assert check_model(model, tmp_path, [1, 4]).dims == ("N",)


def test_static_cnn_and_recurrent_models(tmp_path):
    check_model(E.small_cnn(batch=2, image=16), tmp_path / "cnn", [2])
    check_model(E.lstm_model(), tmp_path / "lstm", [2])


def test_padded_in_place_border_runs(tmp_path):
    # the executor writes the borders of padded buffers (graph/padplace.py) in C too
    model = E.resnet_block(1, 8, 28)
    (plan,) = ponnx.compile(model)._plans.values()
    assert plan.restore
    check_model(model, tmp_path, [1])


def test_quantised_model_on_int8_words(tmp_path, monkeypatch):
    """A model from quantize_dynamic, its products on int8 words (the activation a view
    of the quantised bytes as words), exports exactly."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    import onnx

    monkeypatch.setenv("POLYTC_INT8_DOT", "1")
    src, dst = tmp_path / "f32.onnx", tmp_path / "int8.onnx"
    onnx.save(E.mlp(4, (64, 32, 10)), src)
    quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
    model = onnx.load(dst)
    assert "MatMulWords" in {n.op for n in ponnx.compile(model).graph.nodes}
    check_model(model, tmp_path / "q", [4])


def _edge_model():
    """Outputs that are an input, a constant, a view and a copy of another output."""
    vi = helper.make_tensor_value_info
    outs = [vi("xid", TensorProto.FLOAT, ["N", 4]), vi("c", TensorProto.FLOAT, [2, 3]),
            vi("y", TensorProto.FLOAT, ["N", 4]), vi("flat", TensorProto.FLOAT, ["M"]),
            vi("y2", TensorProto.FLOAT, ["N", 4])]
    nodes = [helper.make_node("Identity", ["x"], ["xid"]),
             helper.make_node("Identity", ["cw"], ["c"]),
             helper.make_node("Relu", ["x"], ["y"]),
             helper.make_node("Reshape", ["y", "shape"], ["flat"]),
             helper.make_node("Identity", ["y"], ["y2"])]
    inits = [numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "cw"),
             numpy_helper.from_array(np.array([-1], np.int64), "shape")]
    g = helper.make_graph(nodes, "edge", [vi("x", TensorProto.FLOAT, ["N", 4])], outs,
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_outputs_that_no_kernel_writes(tmp_path):
    sess = ponnx.compile(_edge_model())
    e = aot.export_session(sess, tmp_path)
    for n in (1, 3):
        x = np.random.default_rng(n).normal(size=(n, 4)).astype(np.float32)
        rc, err, got = run_exported(e.program, tmp_path, x)
        assert rc == 0, err
        for name, want in zip(sess.graph.outputs, sess.run(None, {"x": x})):
            np.testing.assert_array_equal(got[name], want)


def test_fixed_shapes_export_static(tmp_path):
    sess = ponnx.compile(E.mlp(batch="N", sizes=(16, 8, 4)))
    e = aot.export_session(sess, tmp_path, shapes={"input": (3, 16)})
    assert e.dims == ()
    x = np.ones((3, 16), np.float32)
    rc, err, got = run_exported(e.program, tmp_path, x)
    assert rc == 0, err
    np.testing.assert_array_equal(got["probs"], sess.run(None, {"input": x})[0])
    rc, err, _ = run_exported(e.program, tmp_path, np.ones((4, 16), np.float32))
    assert rc == 1 and "input 'input': axis 0 is 4; the model wants 3" in err


def test_run_model_rejects_bad_inputs(tmp_path):
    e = aot.export_session(ponnx.compile(E.mlp(batch="N", sizes=(16, 8, 4))), tmp_path)
    rc, err, _ = run_exported(e.program, tmp_path, np.ones((2, 16), np.float64))
    assert rc == 1 and "has dtype <f8; the model wants <f4" in err
    rc, err, _ = run_exported(e.program, tmp_path, np.ones(16, np.float32))
    assert rc == 1 and "has rank 1; the model wants rank 2" in err
    rc, err, _ = run_exported(e.program, tmp_path, np.ones((0, 16), np.float32))
    assert rc == 1 and "dimension 'N' is 0; it must be at least 1" in err
    np.save(tmp_path / "f.npy", np.asfortranarray(np.ones((3, 16), np.float32)))
    r = subprocess.run([e.program, "-o", str(tmp_path / "o"), str(tmp_path / "f.npy")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "a Fortran-ordered array" in r.stderr
    r = subprocess.run([e.program, "-o", str(tmp_path / "o")], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "usage:" in r.stderr and "input.npy" in r.stderr
    (tmp_path / "bad.npy").write_bytes(b"not numpy")
    r = subprocess.run([e.program, "-o", str(tmp_path / "o"), str(tmp_path / "bad.npy")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "is not a .npy file" in r.stderr


def test_two_inputs_must_agree_on_a_dimension(tmp_path):
    from .test_onnx_errors import small_model

    sess = ponnx.compile(small_model("symbolic"))
    e = aot.export_session(sess, tmp_path)
    rc, err, _ = run_exported(e.program, tmp_path, np.ones((2, 4), np.float32),
                              np.ones((3, 4), np.float32))
    assert rc == 1 and "axis 0 ('N') is 3, but 2 in an earlier input" in err
    x, b = np.ones((3, 4), np.float32), np.full((3, 4), -0.5, np.float32)
    rc, err, got = run_exported(e.program, tmp_path, x, b)
    assert rc == 0, err
    np.testing.assert_array_equal(got["y"], sess.run(None, {"x": x, "b": b})[0])


def test_batch_and_sequence_symbolic(tmp_path):
    """Two symbolic dimensions: attention's scores are N x H x S x S (a polynomial of
    degree 2 in S), a flattened batch of sequences N * S rows."""
    model = E.transformer_layer(batch="N", seq="S", d_model=16, heads=2, ffn=32, mask=None)
    sess = ponnx.compile(model)
    e = aot.export_session(sess, tmp_path / "tr")
    assert e.dims == ("N", "S")
    rng = np.random.default_rng(0)
    for n, seq in ((1, 1), (2, 9), (3, 4)):
        x = rng.normal(size=(n, seq, 16)).astype(np.float32)
        rc, err, got = run_exported(e.program, tmp_path, x)
        assert rc == 0, err
        np.testing.assert_array_equal(got["output"], sess.run(None, {"input": x})[0])
    vi = helper.make_tensor_value_info
    flat = helper.make_model(helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["f"]),
         helper.make_node("MatMul", ["f", "w"], ["y"])], "flat",
        [vi("x", TensorProto.FLOAT, ["N", "S", 4])], [vi("y", TensorProto.FLOAT, ["M", 4])],
        [numpy_helper.from_array(np.array([-1, 4], np.int64), "shape"),
         numpy_helper.from_array(rng.normal(size=(4, 4)).astype(np.float32), "w")]),
        opset_imports=[helper.make_opsetid("", 17)])
    sess = ponnx.compile(flat)
    e = aot.export_session(sess, tmp_path / "flat")
    x = rng.normal(size=(3, 5, 4)).astype(np.float32)
    rc, err, got = run_exported(e.program, tmp_path, x)
    assert rc == 0, err
    np.testing.assert_array_equal(got["y"], sess.run(None, {"x": x})[0])


def test_export_refusals():
    vi = helper.make_tensor_value_info
    pool = helper.make_model(helper.make_graph(  # H / 2 rows: no polynomial in H
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
        "pool", [vi("x", TensorProto.FLOAT, [1, 2, "H", 8])],
        [vi("y", TensorProto.FLOAT, [1, 2, "H2", 4])]),
        opset_imports=[helper.make_opsetid("", 17)])
    sess = ponnx.compile(pool)
    with pytest.raises(UnsupportedError, match="one library cannot serve every value of "
                       "the model's symbolic dimensions: the group g0 .* is compiled for "
                       "each value"):
        aot.export_session(sess, "/nonexistent", build=False)
    with pytest.raises(ModelError, match="shapes: the model has no input 'nope'"):
        aot.export_session(sess, "/nonexistent", shapes={"nope": (1,)}, build=False)


def test_kernel_export(tmp_path):
    k = polytc.tc("""
    def mm(float(M,K) A, float(K,N) B) -> (C, R) {
        C(m, n) +=! A(m, k) * B(k, n)
        R(m) max=! C(m, n)
    }""")
    rng = np.random.default_rng(0)
    A = rng.normal(size=(37, 19)).astype(np.float32)
    B = rng.normal(size=(19, 23)).astype(np.float32)
    e = k.export(tmp_path, A, B)
    rc, err, got = run_exported(e.program, tmp_path, A, B)
    assert rc == 0, err
    C, R = k(A, B)
    np.testing.assert_array_equal(got["C"], C)
    np.testing.assert_array_equal(got["R"], R)


def test_kernel_export_keeps_its_run_time_checks(tmp_path):
    g = polytc.tc("def g(float(N) X, int64(M) I) -> (Y) { Y(i) = X(I(i)) }")
    X = np.arange(5, dtype=np.float32)
    e = g.export(tmp_path, X, np.array([0, 4, 2]))
    rc, err, got = run_exported(e.program, tmp_path, X, np.array([4, 0, 1]))
    assert rc == 0 and got["Y"].tolist() == [4, 0, 1]
    rc, err, _ = run_exported(e.program, tmp_path, X, np.array([0, 9, 2]))
    assert rc == 1 and "read out of bounds: subscript 0 of 'X' is outside 0:5" in err


def test_cli_export(tmp_path, capsys):
    import onnx

    from polytc.cli import main

    onnx.save(E.mlp(batch="N", sizes=(16, 8, 4)), tmp_path / "m.onnx")
    assert main(["export", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    assert "symbolic dimensions N" in out and "run_model -o OUTDIR input.npy" in out
    x = np.ones((2, 16), np.float32)
    rc, err, got = run_exported(str(tmp_path / "d" / "run_model"), tmp_path, x)
    assert rc == 0, err
    assert got["probs"].shape == (2, 4)
    assert main(["export", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "e"), "--shape",
                 "input=3x16", "--no-build"]) == 0
    assert "build it: make -C" in capsys.readouterr().out
    assert not (tmp_path / "e" / "run_model").exists()
    assert "#define PT_NDIMS 0" in (tmp_path / "e" / "model.c").read_text()
    assert main(["export", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "f"), "--shape",
                 "nope=1"]) == 1
    assert "the model has no input 'nope'" in capsys.readouterr().err


def test_float16_inputs_and_outputs(tmp_path):
    """float16 at the graph's edges: widened and rounded by the exported C as polytc.onnx
    does in Python (the same bits), and a float16 input returned as it is."""
    from .test_onnx_halves import _mlp, _x

    m, _ = _mlp(TensorProto.FLOAT16, np.float16)
    m.graph.output.append(helper.make_tensor_value_info("xid", TensorProto.FLOAT16, [4, 16]))
    m.graph.node.append(helper.make_node("Identity", ["x"], ["xid"]))
    sess = ponnx.compile(m)
    e = aot.export_session(sess, tmp_path)
    x = _x(np.float16)
    rc, err, got = run_exported(e.program, tmp_path, x)
    assert rc == 0, err
    y, xid = sess.run(None, {"x": x})
    assert got["y"].dtype == np.float16 and got["xid"].dtype == np.float16
    np.testing.assert_array_equal(got["y"], y)
    np.testing.assert_array_equal(got["xid"], x)
    rc, err, _ = run_exported(e.program, tmp_path, x.astype(np.float32))
    assert rc == 1 and "has dtype <f4; the model wants <f2" in err


def test_bfloat16_inputs_and_outputs(tmp_path):
    """bfloat16 at the graph's edges (.npy files hold it as two bytes, ``<V2``): the
    float32 computation rounded to nearest even, the bits of polytc.onnx."""
    from .test_onnx_halves import BF16, _mlp, _x

    m, _ = _mlp(TensorProto.BFLOAT16, BF16)
    sess = ponnx.compile(m)
    e = aot.export_session(sess, tmp_path)
    x = _x(BF16)
    rc, err, got = run_exported(e.program, tmp_path, x)
    assert rc == 0, err
    (want,) = sess.run(None, {"x": x})
    np.testing.assert_array_equal(got["y"].view(np.uint16), want.view(np.uint16))
    lib = aot.load(tmp_path)
    np.testing.assert_array_equal(lib.run(None, {"x": x})[0].view(np.uint16),
                                  want.view(np.uint16))


def test_load_calls_the_library_from_python(tmp_path):
    """``polytc.aot.load``: the exported library's own description of its inputs, and
    its runs at new values of the dimensions, against the session."""
    model = E.mlp(batch="N", sizes=(16, 8, 4))
    sess = ponnx.compile(model)
    sess.export(tmp_path)
    lib = aot.load(tmp_path, threads=1)
    assert lib.dims == ["N"] and lib.inputs[0][0] == "input" and lib.inputs[0][2] == [-1, 16]
    for n in (1, 6, 2):
        x = np.random.default_rng(n).normal(size=(n, 16)).astype(np.float32)
        np.testing.assert_array_equal(lib.run(None, {"input": x})[0],
                                      sess.run(None, {"input": x})[0])
    with pytest.raises(ModelError, match="axis 1 is 3, not 16"):
        lib.run(None, {"input": np.ones((2, 3), np.float32)})
    with pytest.raises(polytc.PolytcError, match="dimension 'N' is 0; it must be at least 1"):
        lib.run(None, {"input": np.ones((0, 16), np.float32)})


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(g=progen.programs(max_statements=3), sizes=progen.sizes())
def test_random_kernels_export_exactly(tmp_path_factory, g, sizes):
    """Random TC programs (tests/progen.py), exported and run through their library: the
    bits of the kernel called in Python (fills, temporaries, several outputs)."""
    note(g.src)
    kernel = polytc.tc(g.src)
    inputs = g.make_inputs(sizes, np.random.default_rng(0))
    d = tmp_path_factory.mktemp("fuzz")
    kernel.export(d, *inputs)
    lib = aot.load(d)
    got = lib.run(None, {t.name: a for t, a in zip(kernel.program.inputs, inputs)})
    want = kernel(*inputs)
    want = list(want) if isinstance(want, tuple) else [want]
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
