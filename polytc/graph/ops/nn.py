"""Contractions and neural-network ops: MatMul, Gemm, Einsum, Conv, pooling,
normalisations, Softmax, reductions."""
from __future__ import annotations

from . import op  # noqa: F401
