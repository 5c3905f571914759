"""16-bit floats in C: ``float16`` and ``bfloat16`` tensors are stored as their bits
(``uint16_t``) and converted where they are read and written (the language computes on
them in float32, ``lang/sema.py``), by the helpers below, emitted when the code calls
them.  Each is branch-free integer and float arithmetic, which gcc vectorises (its
``_Float16`` conversions are scalar without AVX512-FP16), and each is exact:

* ``pt_h2f``: the half's exponent and mantissa moved into a float's and scaled by 2^112
  (the bias between the two), which makes subnormal halves normal floats; infinities and
  NaNs keep an all-ones exponent.
* ``pt_f2h``: round to nearest even, as ``numpy.float16``: a subnormal result by one float
  addition of 0.5 (the float unit rounds), a normal one by adding the exponent's new bias,
  half an ulp less one and the kept mantissa's lowest bit; overflow to infinity, NaN to a
  quiet NaN (after Fabian Giesen's ``float_to_half_fast3_rtne``).
* ``pt_b2f``: the bits moved up; ``pt_f2b``: round to nearest even, NaN to a quiet NaN, as
  ``ml_dtypes.bfloat16``.
"""
from __future__ import annotations

import re

_HELPERS = {
    "pt_h2f": """static inline float pt_h2f(uint16_t h) {
  union { uint32_t u; float f; } v, w;
  uint32_t em = (uint32_t)(h & 0x7fffu) << 13;
  v.u = em;
  w.f = v.f * 0x1p112f;
  w.u = (em >= 0x0f800000u ? (em | 0x7f800000u) : w.u) | ((uint32_t)(h & 0x8000u) << 16);
  return w.f;
}
""",
    "pt_f2h": """static inline uint16_t pt_f2h(float x) {
  union { uint32_t u; float f; } v, d;
  v.f = x;
  uint32_t sign = v.u & 0x80000000u, f = v.u ^ sign;
  uint32_t inf_nan = f > 0x7f800000u ? 0x7e00u : 0x7c00u;
  d.u = f;
  d.f += 0.5f;
  uint32_t sub = d.u - 0x3f000000u;
  uint32_t nrm = (f + 0xc8000fffu + ((f >> 13) & 1u)) >> 13;
  return (uint16_t)((f >= 0x47800000u ? inf_nan : f < 0x38800000u ? sub : nrm) | (sign >> 16));
}
""",
    "pt_b2f": """static inline float pt_b2f(uint16_t b) {
  union { uint32_t u; float f; } v;
  v.u = (uint32_t)b << 16;
  return v.f;
}
""",
    "pt_f2b": """static inline uint16_t pt_f2b(float x) {
  union { uint32_t u; float f; } v;
  v.f = x;
  uint32_t r = (v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16;
  return (uint16_t)((v.u & 0x7fffffffu) > 0x7f800000u ? ((v.u >> 16) | 0x40u) : r);
}
""",
}


def conversion(inner: str, src, dst) -> str | None:
    """The C text converting ``inner`` from ``src`` to ``dst`` (ScalarTypes) when one of
    them is a 16-bit float, else None."""
    if src.is_half:
        return f"pt_{_LETTER[src.name]}2f({inner})"
    if dst.is_half:
        return f"pt_f2{_LETTER[dst.name]}((float)({inner}))"
    return None


_LETTER = {"float16": "h", "bfloat16": "b"}


def half_helpers(code: str) -> str:
    """The conversion helpers ``code`` calls."""
    used = set(re.findall(r"\b(pt_[hb]2f|pt_f2[hb])\(", code))
    return "".join(text for name, text in _HELPERS.items() if name in used)
