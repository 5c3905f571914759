"""polytc's own ops for quantised products on int8 words (``graph/quantised.py``): four
8-bit values to an int32 word, multiplied with the language's ``dot4`` builtin (one
``vpdpbusd`` per vector on CPUs with VNNI).

* ``QuantWords(x)``: an 8-bit ``[..., K]`` viewed as ``[..., K / 4]`` words.
* ``MatMulWords(A, B)``: rows of uint8 words times columns of int8 words.
* ``ConvWords(x, W, x0)``: a convolution of uint8 ``x`` by int8 weight words, four input
  channels to a word.
"""
from __future__ import annotations

import numpy as np

from .nn import _inside, _kernel, _positions, _reach, _window
from .registry import idx, op


@op("QuantWords")
def _words(ctx):
    """An 8-bit tensor ``[..., K]`` viewed as ``[..., K / 4]`` int32 words, each holding
    four consecutive values (no computation)."""
    x = ctx.input(0)
    if x.dtype.itemsize != 1 or x.dtype.kind not in "iu" or not x.rank or x.shape[-1] % 4:
        ctx.fail(f"{x.dtype.name} of shape {list(x.shape)}: expected 8-bit integers whose "
                 "last dimension is a multiple of 4")
    ctx.view(0, x, x.shape[:-1] + (x.shape[-1] // 4,), np.int32)


@op("MatMulWords")
def _matmul_words(ctx):
    """``A(.., i, k) B(k, j)`` summed in int32 over words: ``A`` holds four uint8 values
    of a row per int32 word (``QuantWords``), ``B`` four int8 values of a column per
    word, both ``[.., K / 4]``; one ``dot4`` per word (vpdpbusd on CPUs with VNNI)."""
    a, b = ctx.input(0), ctx.input(1)
    if a.dtype != np.int32 or b.dtype != np.int32 or a.rank < 2 or b.rank != 2 or \
            a.shape[-1] != b.shape[0]:
        ctx.fail(f"expected int32 words [..., M, K] and [K, N], got {a.dtype.name} "
                 f"{list(a.shape)} and {b.dtype.name} {list(b.shape)}")
    shape = a.shape[:-1] + b.shape[1:]
    y = ctx.out(0, shape, np.int32)
    i = idx(len(shape))
    ctx.result.kind = "contraction"
    ctx.emit(y, i, f"dot4({a(*i[:-1], 'r0')}, {b('r0', i[-1])})", op="+=!",
             ranges={"r0": (0, a.shape[-1])})


@op("ConvWords")
def _conv_words(ctx):
    """polytc's quantised convolution (``graph/quantised.py``): ``x`` uint8 ``[N, C, H,
    W..]`` (with the zero point ``x0``, input 2, one value or none), ``w`` int32 words
    ``[M, ceil(C / 4), K..]``, each holding the int8 weights of four consecutive input
    channels; the int32 sums of ``x`` times the weights, ``[N, M, O..]``, ONNX's
    window attributes (no groups).  ``x`` is copied once into words of four channels
    at each position (``P(n, c, ..) = x(n, 4c, ..) + 256 x(n, 4c + 1, ..) + ..``, in
    int32, wrapping), padded with ``x0`` in every byte where a window leaves it (the
    centred input's zeros) and where the channels run out, so that each product is one
    ``dot4`` of a word of ``P`` and a word of ``w`` (vpdpbusd)."""
    x, w, z = ctx.input(0), ctx.input(1), ctx.input(2, required=False)
    if x.dtype != np.uint8 or x.rank < 3 or w.dtype != np.int32 or w.rank != x.rank or \
            w.shape[1] != -(-x.shape[1] // 4) or ctx.attr("group", 1) != 1:
        ctx.fail(f"expected uint8 [N, C, ..] and int32 words [M, C / 4, ..], got "
                 f"{x.dtype.name} {list(x.shape)} and {w.dtype.name} {list(w.shape)}")
    nd = x.rank - 2
    (N, C), M, C4 = x.shape[:2], w.shape[0], w.shape[1]
    kernel = _kernel(ctx, w)
    strides, dil, begin, out = _window(ctx, x.shape[2:], kernel)
    y = ctx.out(0, (N, M, *out), np.int32)
    ctx.result.kind = "contraction"
    if y.size == 0:
        return
    need = _reach((kernel, strides, dil, begin, out))
    p = ctx.temp((N, C4, *need), np.int32)
    pi = idx(x.rank)
    zero = "0" if z is None else f"int32({z(*[0] * z.rank) if z.rank else z.name})"
    at = [f"{v} - {o}" if o else v for v, o in zip(pi[2:], begin)]
    terms = []
    for r in range(4):
        byte = f"int32({x(pi[0], f'4 * {pi[1]} + {r}' if r else f'4 * {pi[1]}', *at)})"
        if C % 4 and r >= C % 4:  # the last word's missing channels
            byte = f"(4 * {pi[1]} + {r} < {C} ? {byte} : {zero})"
        terms.append(byte if r == 0 else f"{byte} * {1 << (8 * r)}")
    cond = []
    for d in range(nd):
        end = begin[d] + x.shape[d + 2]
        cond += _inside(pi[d + 2], begin[d], end, begin[d] > 0, need[d] > end)
    word = " + ".join(terms)
    ctx.emit(p, pi, f"({' && '.join(cond)}) ? ({word}) : {zero} * 16843009" if cond else word)
    i = idx(y.rank)
    ranges = {"r0": (0, C4), **{f"k{d}": (0, kernel[d]) for d in range(nd)}}
    read = p(i[0], "r0", *_positions(strides, dil, [0] * nd, nd))
    ctx.emit(y, i, f"dot4({read}, {w(i[1], 'r0', *[f'k{d}' for d in range(nd)])})", "+=!",
             ranges)
