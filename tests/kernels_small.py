"""A few programs shared by several test files."""
import numpy as np

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
