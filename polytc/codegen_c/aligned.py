"""Loops versioned on the alignment of the caller's arrays.

numpy places a large array 16 bytes past a 64-byte boundary (malloc's header), so every
512-bit load from a caller's array straddles two cache lines, and the loads of a
memory-bound loop cost twice (measured on Zen 5, 1 thread: a matrix-vector product
1.36 -> 2.20 ms, a layer norm 0.85 -> 1.29 ms).  Half-width vectors straddle only every
other line.  A vectorised loop that reads the kernel's inputs is therefore emitted twice:
as it is when all those inputs start on a 64-byte boundary, and with ``simdlen`` half the
register's lanes otherwise (at offset 16: the layer norm 1.37 -> 0.88 ms, the
matrix-vector product 2.26 -> 1.75 ms; aligned unchanged).  polytc's own buffers
(outputs, temporaries, a model's arena) are aligned: inputs the caller declares aligned
(``Options.aligned``, which a model's plan sets for its arena's values and weights) are
left out of the test, and a loop reading only such inputs is emitted once.

Not versioned: loops calling a vector math function (``expf`` costs more at half width
than the straddling loads) or choosing between values (``?``: a padding copy, a
running maximum, twice the selects at half width: ResNet-18's padded input 6% slower),
loops of explicit vector types (micro-kernels, whose operands are packed or copied
aligned), loops converting 16-bit floats (8 lanes of 16-bit values are a quarter of a
register: 1M products of float16 0.15 -> 0.6 ms), and code on hosts whose vectors are
narrower than 512 bits (at 256 bits, half the loads straddle a line either way)."""
from __future__ import annotations

import re

import cgen as c

from .cexpr import _FUNCS

_SIMD = re.compile(r"^(\s*#pragma omp simd)\b", re.M)
#: calls of libm's vector functions (not those gcc inlines as instructions)
_MATH = re.compile(r"\b(?:%s)f?\(" % "|".join(
    sorted(set(_FUNCS) - {"fabs", "fmax", "fmin", "fma", "sqrt", "ceil", "floor", "round", "rint",
                          "trunc", "copysign"})))


def by_alignment(stmts: list, inputs, lanes: int) -> list:
    """``stmts`` (loops with ``omp simd`` pragmas) as ``if (inputs aligned) stmts else
    stmts at half width``, or unchanged where that does not apply (see above).
    ``inputs``: the names of the kernel's input arrays; ``lanes``: floats per vector."""
    if lanes < 16:
        return stmts
    text = "\n".join(str(s) for s in stmts)
    if not _SIMD.search(text) or "simdlen(" in text or _MATH.search(text) or "?" in text \
            or re.search(r"\bpt_v\d+|\bpt_[hb]2f\(|\bpt_f2[hb]\(", text):
        return stmts
    names = [n for n in inputs if re.search(rf"\b{re.escape(n)}\[", text)]
    if not names:
        return stmts
    bits = " | ".join(f"(uintptr_t){n}" for n in names)
    narrow = _SIMD.sub(rf"\1 simdlen({lanes // 2})", text)
    return [c.If(f"(({bits}) & 63) == 0", c.Block(stmts),
                 c.Block([c.LiteralLines("\n" + narrow)]))]
