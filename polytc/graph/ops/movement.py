"""Data movement: views (Reshape, Flatten, Squeeze, Unsqueeze), Transpose, Concat, Split,
Slice, Gather, Expand, Pad, Constant, ConstantOfShape, Range."""
from __future__ import annotations

from . import op  # noqa: F401
