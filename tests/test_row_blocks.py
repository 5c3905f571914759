"""A chain of products over the same rows, fused over blocks of rows, one per thread
(``poly/fusion.row_blocks``): one parallel loop runs the whole chain, and the results
match the reference (numpy, or onnxruntime for the recurrent layers) whatever the rows
and the team."""
from __future__ import annotations

import numpy as np
import pytest

import polytc
from polytc.graph import examples as ex

CHAIN = """
def chain(float(M, K) X, float(N, K) A, float(N, N) B, float(N, N) C) -> (Z) {
    T1(m, n) +=! X(m, k) * A(n, k)
    U1(m, n) = tanh(T1(m, n))
    T2(m, n) +=! U1(m, k) * B(n, k)
    U2(m, n) = max(T2(m, n), 0.0)
    Z(m, n) +=! U2(m, k) * C(k, n)
}
"""

# the second product reads a column of U1 (rows of other blocks): no blocks
CROSSING = CHAIN.replace("U1(m, k) * B(n, k)", "U1(k, m) * B(n, k)").replace(
    "float(M, K) X", "float(N, K) X")


def inputs(m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) / 4
            for s in ((m, k), (n, k), (n, n), (n, n))]


def chain_reference(x, a, b, c, crossing=False):
    u1 = np.tanh(x @ a.T)
    u2 = np.maximum((u1.T if crossing else u1) @ b.T, 0)
    return u2 @ c


def parallel_loops(code: str) -> int:
    return code.count("#pragma omp parallel for")


@pytest.mark.parametrize("rows,team", [(13, 2), (13, 3), (64, 2), (8, 2)])
def test_chain_in_blocks_of_rows(rows, team):
    args = inputs(rows, 64, 32)
    k = polytc.tc(CHAIN, options=polytc.Options(num_threads=team))
    z = k(*args)
    np.testing.assert_allclose(z, chain_reference(*args), rtol=1e-4, atol=1e-5)
    ck = k.specialize(*args)
    assert parallel_loops(ck.code) == 1, ck.code
    assert "one block of rows per thread" in str(ck.explain())


@pytest.mark.parametrize("rows,team", [(7, 2), (13, 4), (13, 1)])
def test_too_few_rows_per_thread_keep_their_loops(rows, team):
    """Under 4 rows a thread (or one thread): each product keeps its own nest."""
    args = inputs(rows, 64, 32)
    k = polytc.tc(CHAIN, options=polytc.Options(num_threads=team))
    z = k(*args)
    np.testing.assert_allclose(z, chain_reference(*args), rtol=1e-4, atol=1e-5)
    assert "one block of rows per thread" not in str(k.specialize(*args).explain())


def test_a_product_that_reads_other_rows_is_not_blocked():
    args = inputs(64, 64, 32)
    k = polytc.tc(CROSSING, options=polytc.Options(num_threads=2))
    z = k(*args)
    np.testing.assert_allclose(z, chain_reference(*args, crossing=True), rtol=1e-4,
                               atol=1e-5)
    assert "one block of rows per thread" not in str(k.specialize(*args).explain())


RECURRENT = {
    "lstm": lambda b: ex.lstm_model(seq=5, batch=b, input=16, hidden=24),
    "gru": lambda b: ex.gru_model(seq=5, batch=b, input=16, hidden=24),
    "gru_reset_after": lambda b: ex.gru_model(seq=5, batch=b, input=16, hidden=24,
                                              linear_before_reset=0),
}


@pytest.mark.parametrize("name", list(RECURRENT))
@pytest.mark.parametrize("batch,team", [(13, 2), (16, 3)])
def test_recurrent_layers_in_blocks_of_rows(name, batch, team):
    from polytc import onnx as ponnx

    onnxruntime = pytest.importorskip("onnxruntime")
    m = RECURRENT[name](batch)
    feeds = ex.example_inputs(m, seed=3)
    sess = ponnx.compile(m, options=polytc.Options(num_threads=team))
    got = sess.run(None, feeds)
    ref = onnxruntime.InferenceSession(m.SerializeToString(),
                                       providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)
    plan = sess.plan({k: v.shape for k, v in feeds.items()})
    assert any("one block of rows per thread" in str(ck.explain())
               for ck in plan.kernels.values())
