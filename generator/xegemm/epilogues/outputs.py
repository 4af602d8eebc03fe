"""The epilogue's output side: the types D (and auxiliary outputs) can be stored as, their OpenCL C conversions
(round to nearest even; integers saturate), the same conversions on the numpy side, and :class:`Bounds`, the
interval a reference gives each element of an output.  Every epilogue (fixed or traced) converts through here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xegemm.library.dtypes import UNSIGNED_CTYPE, DType, c_spelling, dtype

U32 = 2.0 ** -24        # unit roundoff of f32, the compute type
OUTPUT_TYPES = ("f32", "f16", "bf16", "s32", "s8", "u8")   # what the epilogue can store D as


def load_float(type_name: str, bits: str) -> str:
    """C expression: the value of storage bits ``bits`` (an unsigned scalar) of ``type_name`` as a float."""
    return c_spelling(type_name, "load", bits)


def store_float(type_name: str, value: str) -> str:
    """C expression: the storage bits of float ``value`` converted to ``type_name`` (RNE; integers saturate)."""
    return c_spelling(type_name, "store", value)


def store_int(type_name: str, value: str) -> str:
    """C expression: the storage bits of int ``value`` converted to integer ``type_name`` with saturation."""
    return c_spelling(type_name, "store_int", value)


def storage_ctype(type_name: str) -> str:
    return UNSIGNED_CTYPE[dtype(type_name).bits]


def round_to(out: DType, values: np.ndarray) -> np.ndarray:
    """``values`` (float64) as ``out`` stores them: round to nearest even; integers saturate."""
    if out.is_int:               # OpenCL C's saturating conversions: NaN -> 0, infinities saturate
        lo, hi = out.value_range
        return np.clip(np.nan_to_num(np.rint(values), nan=0.0, posinf=hi, neginf=lo), lo, hi)
    with np.errstate(over="ignore", invalid="ignore"):
        return out.round(values)


@dataclass(frozen=True)
class Bounds:
    """Per element, the lowest and highest value D may hold, and the value it should hold."""

    expected: np.ndarray
    low: np.ndarray
    high: np.ndarray
