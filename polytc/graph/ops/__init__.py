"""Op lowering: every ONNX op is written as comprehensions in polytc's own language.

``REGISTRY`` maps an op type to a function ``lower(ctx)``.  The function reads the node's
inputs (``ctx.inputs``: ``Ref``s with concrete shapes, dtypes and, for constants, values)
and attributes (``ctx.attr``), declares its outputs (``ctx.out``) and emits TC statements
(``ctx.emit``) — or says that an output is a view of an input (``ctx.view``) or a value
known at compile time (``ctx.const``).  It also says what kind of op it is (``ctx.kind``),
which the fusion pass reads.  A fused group's program is the statements of its nodes, in
order, so isl schedules (and fuses) across ops.

Shapes are concrete here: a model compiles once per distinct set of input shapes.
"""
from __future__ import annotations

# importing the op modules registers their lowerings
from . import (blocked, deconv, elementwise, indexing, movement, nn, pool, quant,  # noqa: F401
               reduce, resize, rnn, sample, scan, spectral, words)
from .registry import (KINDS, REGISTRY, Ctx, Lowered, Ref, broadcast_shapes,  # noqa: F401
                       equal, idx, literal, lower, op, supported, tc_type)
