"""A few programs, and the oracle comparison, shared by several test files."""
import numpy as np

import polytc
from polytc.lang import reference

MATMUL = """
def matmul(float(M,K) A, float(K,N) B) -> (C) {
    C(m, n) +=! A(m, k) * B(k, n)
}"""

SOFTMAX = """
def softmax(float(N,D) X) -> (Y) {
    mx(n) max=! X(n, d)
    e(n, d) = exp(X(n, d) - mx(n))
    s(n) +=! e(n, d)
    Y(n, d) = e(n, d) / s(n)
}"""


def np_softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def check(src, shapes, options, dtype=np.float32, seed=0, rtol=1e-4, atol=1e-4):
    """Compile ``src`` with ``options``, run it on random inputs of ``shapes`` and
    compare every output with the reference interpreter; the specialised kernel."""
    k = polytc.tc(src, options=options)
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(s).astype(dtype) for s in shapes]
    got = k(*args)
    want = reference.run(k.program, args)
    got = got if isinstance(got, tuple) else (got,)
    for t, g in zip(k.program.outputs, got):
        np.testing.assert_allclose(g, want[t.name], rtol=rtol, atol=atol)
    return k.specialize(*args)
