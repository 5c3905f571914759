"""DFT and STFT as comprehensions: each frequency a sum over the signal, ``X(k) = sum_n x(n)
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


def _angle(a, b, n) -> str:
    """``2 pi a b / n`` in double, of ``(a b) % n`` so that it stays exact."""
    return f"double(({a} * {b}) % {n}) * {2 * math.pi / n!r}"


@op("STFT")
def _stft(ctx):
    """Frames of ``frame_length`` every ``frame_step`` samples, each times the window,
    transformed: ``Y(b, f, k) = sum_n x(b, f step + n) w(n) e^(-2 pi i k n / N)``, summed
    in double (one-sided: the first ``N/2 + 1`` frequencies)."""
    x = ctx.input(0)
    _float_only(ctx, x)
    if x.rank != 3 or x.shape[-1] not in (1, 2):
        ctx.fail(f"signal of shape {list(x.shape)}: it must be (batch, length, 1 or 2)")
    step = int(np.asarray(ctx.const_input(1)).reshape(-1)[0])
    win = ctx.input(2, required=False) if len(ctx.inputs) > 2 else None
    n = ctx.const_input(3, required=False) if len(ctx.inputs) > 3 else None
    n = int(np.asarray(n).reshape(-1)[0]) if n is not None else \
        win.shape[0] if win is not None and win.rank == 1 else None
    if n is None or n < 1 or step < 1 or n > x.shape[1] or \
            (win is not None and win.shape != (n,)):
        ctx.fail(f"frame_length {n}, frame_step {step} and a window of shape "
                 f"{list(win.shape) if win is not None else None} do not frame a signal "
                 f"of {x.shape[1]} samples")
    onesided = bool(ctx.attr("onesided", 1))
    bins = n // 2 + 1 if onesided else n
    frames = (x.shape[1] - n) // step + 1
    out = ctx.out(0, (x.shape[0], frames, bins, 2), x.dtype)
    ctx.result.kind = "opaque"
    y = ctx.temp(out.shape, np.float64)
    i = idx(4)
    at = f"{i[1]} * {step} + r"
    re = f"double({x(i[0], at, 0)})"
    im = f"double({x(i[0], at, 1)})" if x.shape[-1] == 2 else literal(0, np.float64)
    w = f" * double({win('r')})" if win is not None else ""
    cos, sin = (f"{f}({_angle(i[2], 'r', n)})" for f in ("cos", "sin"))
    ctx.emit(y, i, f"({i[3]} == 0 ? {re} * {cos} + {im} * {sin} : "
                   f"{im} * {cos} - {re} * {sin}){w}", "+=!", {"r": (0, n)})
    ctx.emit(out, i, f"{tc_type(x.dtype)}({y(*i)})")


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
        return _angle(a, b, n)

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
