"""Vector loops versioned on the alignment of the caller's arrays (codegen_c/aligned.py):
both versions give the reference's results, and only loops that stream inputs are
versioned."""
import re

import cgen as c
import numpy as np
import pytest

import polytc
from polytc.codegen_c.aligned import by_alignment
from polytc.machine import host
from tests.kernels import CATALOGUE
from tests.kernels_small import SOFTMAX

LAYERNORM = next(e.tc for e in CATALOGUE if e.name == "layernorm")


def placed(a: np.ndarray, offset: int) -> np.ndarray:
    """A copy of ``a`` starting ``offset`` bytes past a 64-byte boundary."""
    buf = np.empty(a.nbytes + 64, np.uint8)
    start = (offset - buf.ctypes.data) % 64
    out = buf[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def _layernorm(X, g, b):
    m = X.mean(1, keepdims=True)
    v = ((X - m) ** 2).mean(1, keepdims=True)
    return (X - m) / np.sqrt(v + 1e-5) * g + b


@pytest.mark.parametrize("shape", [(8, 256), (5, 100), (3, 1000)])
def test_every_offset_gives_the_same_result(shape):
    rng = np.random.default_rng(0)
    k = polytc.tc(LAYERNORM)
    X = rng.standard_normal(shape).astype(np.float32)
    g, b = (rng.standard_normal(shape[1]).astype(np.float32) for _ in range(2))
    want = _layernorm(X, g, b)
    got = {}
    for off in (0, 4, 16, 32, 48):
        got[off] = k(placed(X, off), placed(g, 0), placed(b, off))
        np.testing.assert_allclose(got[off], want, rtol=1e-4, atol=1e-4)
    for off in got:  # half and full width sum in the same order of lanes' blocks
        np.testing.assert_allclose(got[off], got[0], rtol=1e-5, atol=1e-6)


def test_loops_reading_inputs_are_versioned():
    X = np.ones((64, 256), np.float32)
    code = polytc.tc(LAYERNORM).specialize(X, X[0], X[0]).code
    if host().lanes(4) < 16:
        assert "simdlen(" not in code  # 256-bit vectors: nothing to gain
        return
    assert "(((uintptr_t)X) & 63) == 0" in code  # the mean and the centring
    assert "(((uintptr_t)gamma | (uintptr_t)beta) & 63) == 0" in code
    assert code.count("simdlen(8)") >= 3
    # the variance reads only the row buffer (aligned): one version
    assert code.count("pt_l_xc[(long)((c1))] * pt_l_xc[(long)((c1))]") == 1


def test_inputs_declared_aligned_are_not_versioned():
    """``Options.aligned``: loops reading only inputs every call passes aligned are
    emitted once; the others keep both versions.  Unaligned arrays passed all the same
    still give the right result."""
    X = np.ones((64, 256), np.float32)
    k = polytc.tc(LAYERNORM, options=polytc.Options(aligned=("X",)))
    code = k.specialize(X, X[0], X[0]).code
    if host().lanes(4) >= 16:
        assert "(uintptr_t)X)" not in code
        assert "(((uintptr_t)gamma | (uintptr_t)beta) & 63) == 0" in code
    Xr = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    g, b = np.linspace(0.5, 1.5, 256, dtype=np.float32), np.zeros(256, np.float32)
    np.testing.assert_allclose(k(placed(Xr, 16), g, b), _layernorm(Xr, g, b),
                               rtol=1e-4, atol=1e-5)
    with pytest.raises(polytc.OptionsError, match="aligned must be a sequence"):
        polytc.Options(aligned="X")


def test_a_models_own_buffers_are_not_versioned():
    """A model's groups read its intermediate values (the arena's aligned buffers, and
    reshapes of them) and its weights aligned: their loops are not versioned; a group
    reading the model's input keeps both versions; identical groups, one reading the
    input and one an intermediate, still share one kernel (with both versions)."""
    from polytc.graph import examples as ex

    m = ex.transformer_layer(1, 16, 256, 4, 512)  # (its layer norms and softmax were
    sess = polytc.onnx.compile(m)  # versioned: 13 loops in three groups)
    (plan,) = sess._plans.values()
    groups = [s for s in plan.steps if hasattr(s, "stmts")]
    if host().lanes(4) >= 16:
        for s in groups:
            if not any(v in sess.graph.inputs for v in s.inputs):
                assert "uintptr_t" not in plan.kernels[s.name].code, s.name
    feeds = ex.example_inputs(m, seed=1)
    np.testing.assert_allclose(sess.run(None, feeds)[0],
                               polytc.onnx.compile(m, native=False).run(None, feeds)[0],
                               rtol=1e-5, atol=1e-5)


def test_vector_math_loops_are_not_versioned():
    X = np.ones((64, 256), np.float32)
    code = polytc.tc(SOFTMAX).specialize(X).code
    lines = code.splitlines()
    at = next(i for i, line in enumerate(lines) if re.search(r"\bexpf\(", line))
    assert len(re.findall(r"\bexpf\(", code)) == 1  # one version of the exp loop
    assert "#pragma omp simd" in "\n".join(lines[at - 3:at]) and \
        "simdlen" not in "\n".join(lines[at - 3:at])


def _loop(body: str) -> list:
    return [c.Pragma("omp simd"), c.For("long i = 0", "i < 64", "i += 1",
                                         c.Block([c.Statement(body)]))]


def test_by_alignment_rules():
    loop = _loop("y[i] = A[i] * 2.0f")
    out = "\n".join(map(str, by_alignment(loop, ["A"], 16)))
    assert "(((uintptr_t)A) & 63) == 0" in out and "#pragma omp simd simdlen(8)" in out
    assert by_alignment(loop, ["A"], 8) is loop  # AVX2: unchanged
    assert by_alignment(loop, ["B"], 16) is loop  # reads no input
    select = _loop("y[i] = i > 0 ? A[i] : 0.0f")  # a padding copy: twice the selects
    assert by_alignment(select, ["A"], 16) is select
    math = _loop("y[i] = expf(A[i])")
    assert by_alignment(math, ["A"], 16) is math
    tile = _loop("pt_a0 += A[i] * (*(const pt_v16fu *)&B[i])")
    assert by_alignment(tile, ["A"], 16) is tile


def test_explain_names_the_versioned_inputs():
    X = np.ones((64, 256), np.float32)
    text = str(polytc.tc(LAYERNORM).explain(X, X[0], X[0], vectorizer=False))
    if host().lanes(4) < 16:
        assert "emitted twice" not in text
    else:
        assert "reading X, beta, gamma are emitted twice" in text
