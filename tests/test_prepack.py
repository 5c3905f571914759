"""Constant operands packed once (``Options.constants``, ``tiling/pack.prepack_box``,
``codegen_c/pack.Packed.prepack``): the kernel reads the whole packed operand from a
parameter that ``CompiledKernel.prepack`` fills, instead of packing it at every call."""
from __future__ import annotations

from types import SimpleNamespace

import re

import islpy as isl
import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

import polytc
import polytc.onnx
from polytc.compiler import pipeline
from polytc.graph import examples as ex
from polytc.lang import program as P
from polytc.options import OptionsError
from polytc.tiling.pack import prepack_box
from tests.kernels_small import check
from tests.test_tiling import BMM, CONV_B, MATMUL, MATMUL_NT, QKT, SMALL

CASES = [
    (MATMUL, [(70, 33), (33, 150)], dict(M=70, K=33, N=150), "B"),
    (MATMUL, [(1, 333), (333, 150)], dict(M=1, K=333, N=150), "B"),  # one row: a GEMV
    (MATMUL_NT, [(70, 33), (150, 33)], dict(M=70, K=33, N=150), "B"),  # transposed
    (CONV_B, [(1, 5, 9, 9), (40, 5, 3, 3), (40,)], dict(N=1, C=5, H=9, W=9, F=40, KH=3,
                                                     KW=3), "Wt"),  # three reductions
]


@pytest.mark.parametrize("src,shapes,env,tensor", CASES)
@pytest.mark.parametrize("options", [SMALL, polytc.Options()], ids=["small-tiles", "model"])
def test_constant_operand_packed_once(src, shapes, env, tensor, options):
    """No copy in the kernel (no isl extension, no per-thread buffer), a prepack
    function instead; partial tiles padded; results match the reference interpreter,
    with the packed copy made at each call or once and passed in."""
    options = options.replace(constants=(tensor,), parallel_min_points=1)
    ck = check(src, shapes, options)
    b = pipeline.run(polytc.tc(src, options=options).program, env, options)
    (d,) = [d for d in b.tiling if d.kind == "pack"]
    assert d.facts["tensor"] == tensor and d.facts["copy"] == "once"
    assert "extension" not in b.stages["schedule"] and "static __thread" not in ck.code
    assert "void polytc_prepack0(" in ck.code and len(ck.prepacked) == 1
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    packed = ck.prepack(args)
    assert packed[0].size == ck.prepacked[0][1] and packed[0].ctypes.data % 64 == 0
    np.testing.assert_array_equal(ck.run(args, packed=packed), ck.run(args))
    text = str(polytc.tc(src, options=options).explain(*args, vectorizer=False))
    assert "a copy packed once, before the first call" in text and tensor in text


def test_a_kernel_call_packs_the_same_constant_array_once(monkeypatch):
    """A kernel called with the same array for a constant input packs it at its first
    call only; another array (new weights) is packed again, and at unaligned addresses
    (the kernel's aligned copies are the same buffers at every call) too."""
    k = polytc.tc(MATMUL, options=polytc.Options(constants=("B",), parallel_min_points=1))
    rng = np.random.default_rng(5)
    A = rng.standard_normal((70, 33)).astype(np.float32)
    B1, B2 = (rng.standard_normal((33, 150)).astype(np.float32) for _ in range(2))
    ck = k.specialize(A, B1)
    packs = []
    prepack = type(ck).prepack
    monkeypatch.setattr(type(ck), "prepack", lambda self, x: packs.append(1) or prepack(self, x))
    for B in (B1, B1, B2, B2, B1):
        np.testing.assert_allclose(k(A, B), A @ B, rtol=1e-4, atol=1e-4)
    assert len(packs) == 3
    buf = np.empty(33 * 150 + 4, np.float32)
    for off in (1, 2):  # the same buffer, other contents at another offset: other arrays
        B3 = buf[off:off + 33 * 150].reshape(33, 150)
        B3[...] = rng.standard_normal((33, 150))
        np.testing.assert_allclose(k(A, B3), A @ B3, rtol=1e-4, atol=1e-4)
    assert len(packs) == 5


def test_transposed_gemv_weights_keep_their_dot_products():
    """One row against weights W(j, k): every output is a dot product of a contiguous
    row, which streams already; nothing is packed."""
    options = polytc.Options(constants=("B",))
    ck = check(MATMUL_NT, [(1, 333), (150, 333)], options)
    assert "pack " not in ck.stages["tiling"]


@pytest.mark.parametrize("src,shapes,tensor", [
    (QKT, [(3, 21, 19), (3, 130, 19)], "K"), (BMM, [(3, 13, 9), (3, 9, 70)], "Y")])
def test_operand_varying_over_a_batch_is_packed_per_call(src, shapes, tensor):
    """A packed operand that depends on a batch index is copied tile by tile as before."""
    ck = check(src, shapes, polytc.Options(constants=(tensor,)))
    assert ck.prepacked == [] and "static __thread" in ck.code


def test_prepack_needs_a_rectangular_range():
    """A triangular range of the packed indices is packed per call: the whole-operand
    copy would read elements the kernel never does."""
    sst = SimpleNamespace(vars=["i", "j", "k"], domain=isl.Set(
        "{ S[i, j, k] : 0 <= i < 4 and 0 <= j < 8 and 0 <= k <= j }"))
    read = SimpleNamespace(indices=(P.Index("k"), P.Index("j")))
    assert prepack_box(sst, read, 1, [(2, 4)]) is None
    sst.domain = isl.Set("{ S[i, j, k] : 0 <= i < 4 and 0 <= j < 8 and 0 <= k < 5 }")
    assert prepack_box(sst, read, 1, [(2, 4)]) == ((0, 7), (0, 4))
    read.indices = (P.Index("k"), P.Index("i"))  # depends on another index (of 4 values)
    assert prepack_box(sst, read, 1, [(2, 4)]) is None
    sst.domain = isl.Set("{ S[i, j, k] : i = 2 and 0 <= j < 8 and 0 <= k < 5 }")
    assert prepack_box(sst, read, 1, [(2, 4)]) == ((0, 7), (0, 4))  # i takes one value


def test_constants_option_takes_names():
    with pytest.raises(OptionsError, match="sequence of input names"):
        polytc.Options(constants="B")
    assert polytc.Options(constants=["W", "B", "W"]).constants == ("B", "W")


@pytest.mark.parametrize("model", [
    lambda: ex.mlp_gemm(5, (40, 48, 7)),  # Gemm transB=1: a transposing prepack
    lambda: ex.bert_encoder(1, 8, 50, 32, 2, 64, 2),  # identical layers, other weights
    lambda: ex.lstm_model(5, 4, 8, 32),  # every step's product reads one packed R
    lambda: ex.gru_model(5, 4, 8, 32),
])
@pytest.mark.parametrize("native", [True, False])
def test_model_weights_packed_when_the_plan_is_made(model, native):
    m = model()
    feeds = ex.example_inputs(m, seed=2)
    sess = polytc.onnx.compile(m, native=native)
    got = sess.run(None, feeds)
    (plan,) = sess._plans.values()
    assert plan.prepacked  # group -> its weights' packed copies
    for name, ck in plan.kernels.items():  # one copy per weight, however many steps
        assert len(ck.prepacked) == len({i for i, _n, _f in ck.prepacked}), name
    want = ReferenceEvaluator(m).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_transposed_constant_weights_of_a_large_batch_are_not_copied_per_run():
    """Gemm transB=1 at 64 rows: the weights are packed once, transposing, into the
    micro-panels; no transposed copy of them runs in the group at every call."""
    m = ex.mlp_gemm(64, (40, 48, 7))
    feeds = ex.example_inputs(m, seed=3)
    sess = polytc.onnx.compile(m)
    got = sess.run(None, feeds)
    (plan,) = sess._plans.values()
    for ck in plan.kernels.values():  # the weights read as they are, W(i1, r0)
        assert not re.search(r"\(i0, i1\) = a\d+\(i1, i0\)", ck.stages["tc"]), ck.stages["tc"]
    assert any(ck.prepacked for ck in plan.kernels.values())
    want = ReferenceEvaluator(m).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
