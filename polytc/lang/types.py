"""Scalar types of the language and TC's rules for combining them."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ScalarType:
    name: str  # canonical TC spelling
    kind: str  # "bool" | "int" | "uint" | "float"
    bits: int
    c_name: str

    @property
    def np_dtype(self) -> np.dtype:
        if self.name == "bfloat16":  # numpy has none: ml_dtypes' (onnx depends on it)
            import ml_dtypes

            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(_NP[self.name])

    @property
    def is_half(self) -> bool:
        """A 16-bit float: a storage type, read as float and stored rounded (sema.py)."""
        return self.kind == "float" and self.bits == 16

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_integral(self) -> bool:
        return self.kind in ("int", "uint", "bool")

    def __str__(self):
        return self.name

    def __repr__(self):
        return self.name


BOOL = ScalarType("bool", "bool", 1, "unsigned char")
UINT8 = ScalarType("uint8", "uint", 8, "uint8_t")
UINT16 = ScalarType("uint16", "uint", 16, "uint16_t")
UINT32 = ScalarType("uint32", "uint", 32, "uint32_t")
UINT64 = ScalarType("uint64", "uint", 64, "uint64_t")
INT8 = ScalarType("int8", "int", 8, "int8_t")
INT16 = ScalarType("int16", "int", 16, "int16_t")
INT32 = ScalarType("int32", "int", 32, "int32_t")
INT64 = ScalarType("int64", "int", 64, "int64_t")
FLOAT32 = ScalarType("float", "float", 32, "float")
FLOAT64 = ScalarType("double", "float", 64, "double")
#: 16-bit floats, stored as their bits (the C code converts them with pt_h2f/pt_f2h and
#: pt_b2f/pt_f2b, codegen_c/halves.py)
FLOAT16 = ScalarType("float16", "float", 16, "uint16_t")
BFLOAT16 = ScalarType("bfloat16", "float", 16, "uint16_t")

_NP = {
    "bool": "bool", "uint8": "uint8", "uint16": "uint16", "uint32": "uint32",
    "uint64": "uint64", "int8": "int8", "int16": "int16", "int32": "int32",
    "int64": "int64", "float": "float32", "double": "float64", "float16": "float16",
}

#: every spelling the language accepts for a scalar type
TYPE_NAMES: dict[str, ScalarType] = {
    "bool": BOOL, "uint8": UINT8, "uint16": UINT16, "uint32": UINT32, "uint64": UINT64,
    "int8": INT8, "int16": INT16, "int32": INT32, "int64": INT64,
    "float": FLOAT32, "float32": FLOAT32, "double": FLOAT64, "float64": FLOAT64,
    "float16": FLOAT16, "half": FLOAT16, "bfloat16": BFLOAT16,
}

#: the type of index variables and sizes
INDEX = INT32


def from_numpy(dtype) -> ScalarType | None:
    return _from_numpy(np.dtype(dtype))


@functools.lru_cache(maxsize=None)  # (a plan asks for every value's type)
def _from_numpy(dt: np.dtype) -> ScalarType | None:
    for t in (BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FLOAT32, FLOAT64,
              FLOAT16):
        if t.np_dtype == dt:
            return t
    if dt.name == "bfloat16" and dt.itemsize == 2:  # (ml_dtypes')
        return BFLOAT16
    return None


def _int_of_bits(bits: int) -> ScalarType:
    return {8: INT8, 16: INT16, 32: INT32, 64: INT64}[max(8, bits)]


def match_types(a: ScalarType, b: ScalarType) -> ScalarType:
    """TC's promotion rule (tc/lang/sema.h ``match_types``)."""
    if a == b:
        return a
    if a.is_float and b.is_float:
        return a if a.bits > b.bits else b
    if a.is_float:
        return a
    if b.is_float:
        return b
    ua, ub = a.kind in ("uint", "bool"), b.kind in ("uint", "bool")
    if ua and ub:
        if a.bits > b.bits:
            return a
        return b if b.bits > 1 or a.bits == 1 else a
    return _int_of_bits(max(a.bits, b.bits))


def is_narrowing(src: ScalarType, dst: ScalarType) -> bool:
    """True when assigning ``src`` to ``dst`` needs an explicit cast (TC's rule: the
    promoted type of the two differs from ``dst``)."""
    return match_types(src, dst) != dst
