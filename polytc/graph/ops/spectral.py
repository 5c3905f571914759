"""DFT as a comprehension: each frequency a sum over the signal, ``X(k) = sum_n x(n)
e^(-2 pi i k n / N)`` (the inverse with ``+`` and ``1/N``), its real and imaginary parts
in the last dimension as ONNX stores them.  The angle is taken of ``(k n) % N`` in double,
so it stays exact for long signals.  A signal longer than ``dft_length`` is truncated and
a shorter one zero-padded (the sum's range).  One-sided: the first ``N/2 + 1``
frequencies; its inverse (a real signal from one side of a Hermitian spectrum) reads
frequency ``N - k`` conjugated for the other side.  That is O(N^2) per signal, no FFT:
fine for the short frames of audio front ends, slow for long signals.
"""
from __future__ import annotations

import math

import numpy as np

from .nn import _float_only
from .registry import idx, literal, op, tc_type


@op("DFT")
def _dft(ctx):
    x = ctx.input(0)
    _float_only(ctx, x)
    if x.rank < 2 or x.shape[-1] not in (1, 2):
        ctx.fail(f"input of shape {list(x.shape)}: the last dimension must be 1 (real) or "
                 "2 (complex)")
    axis = ctx.attr("axis")
    if len(ctx.inputs) > 2 and ctx.inputs[2] is not None:  # opset 20: an input
        axis = int(np.asarray(ctx.const_input(2)).reshape(-1)[0])
    if axis is None:  # (a lowering does not know the opset)
        ctx.fail("DFT without an axis: its default is 1 before opset 20 and -2 since; "
                 "give it", unsupported=True)
    if not -x.rank <= axis < x.rank or axis % x.rank == x.rank - 1:
        ctx.fail(f"axis {axis} is not a signal axis of an input of rank {x.rank}")
    axis %= x.rank
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    length = x.shape[axis]
    n = ctx.const_input(1, required=False) if len(ctx.inputs) > 1 and \
        ctx.inputs[1] is not None else None
    n = int(np.asarray(n).reshape(-1)[0]) if n is not None else \
        2 * (length - 1) if inverse and onesided else length
    if n < 1:
        ctx.fail(f"dft_length {n} must be positive")
    if inverse and onesided and (x.shape[-1] != 2 or n > 2 * length - 1):
        ctx.fail(f"a one-sided inverse takes a complex spectrum of at least {n // 2 + 1} "
                 f"frequencies, not {list(x.shape)}")
    bins = n // 2 + 1 if onesided and not inverse else n
    real_out = inverse and onesided
    shape = x.shape[:axis] + (bins,) + x.shape[axis + 1:-1] + (1 if real_out else 2,)
    out = ctx.out(0, shape, x.dtype)
    ctx.result.kind = "opaque"
    if out.size == 0:
        return
    y = ctx.temp(shape, np.float64)  # the sums in double, then rounded once
    i = idx(y.rank)
    k, c, t = i[axis], i[-1], np.dtype(np.float64)

    def part(m, p):  # x's part p (0 real, 1 imaginary) at position m of the axis
        if p == 1 and x.shape[-1] == 1:
            return literal(0, t)
        return f"double({x(*i[:axis], m, *i[axis + 1:-1], p)})"

    def angle(a, b):
        return f"double(({a} * {b}) % {n}) * {2 * math.pi / n!r}"

    scale = f" * {literal(1 / n, t)}" if inverse else ""
    cos, sin = (f"{f}({angle(k, 'r')})" for f in ("cos", "sin"))
    if not real_out:
        sign, other = ("+", "-") if inverse else ("-", "+")
        re = f"{part('r', 0)} * {cos} {other} {part('r', 1)} * {sin}"
        im = f"{part('r', 1)} * {cos} {sign} {part('r', 0)} * {sin}"
        ctx.emit(y, i, f"({c} == 0 ? {re} : {im}){scale}", "+=!",
                 {"r": (0, min(length, n))})
        ctx.emit(out, i, f"{tc_type(x.dtype)}({y(*i)})")
        return
    # a real signal from one side of its spectrum: frequencies below n/2 + 1 as given,
    # the others the conjugates of frequencies n - k
    ctx.emit(y, i, f"({part('r', 0)} * {cos} - {part('r', 1)} * {sin}){scale}", "+=!",
             {"r": (0, min(length, n // 2 + 1))})
    mirrored = f"{n} - r"
    ctx.emit(y, i, f"({part(mirrored, 0)} * {cos} + {part(mirrored, 1)} * {sin}){scale}",
             "+=", {"r": (n // 2 + 1, n)})
    ctx.emit(out, i, f"{tc_type(x.dtype)}({y(*i)})")
