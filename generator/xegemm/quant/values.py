"""Values of quantized operands: exact round-to-nearest-even from float64 to every float type xegemm.quant uses,
and the numpy dtypes the arrays are stored in.

Why not ``astype``: ml_dtypes converts float64 to bfloat16 and to its 8-bit floats through float32, so a float64
value just above a tie rounds twice and lands on the even neighbour (1 + 2^-8 + 2^-40 becomes bf16 1.0, not
1 + 2^-7).  The dequantization reference needs one rounding of the exact (q - z) * s, so :func:`round_to`
rounds at the target's own precision: the exponent of the leading bit (at least the type's minimum, for
subnormals) fixes the spacing, and numpy's ``round`` (half to even) rounds the value divided by that power of
two, which is exact.  Overflow follows IEEE 754: a value at or past the largest finite value plus half an
ulp becomes infinity, or what ml_dtypes gives the formats without one: NaN for e4m3 and e8m0, the largest value
for e2m1 (saturation; quantizers clip before they round anyway).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from xegemm.library.dtypes import ML_DTYPES, dtype

# numpy dtypes of stored values, by xegemm type name (4-bit ones one per byte; packing is xegemm.quant.formats')
NUMPY_DTYPES = {"f16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16), "f32": np.dtype(np.float32),
                "s8": np.dtype(np.int8), "u8": np.dtype(np.uint8), "s4": np.dtype(np.int8), "u4": np.dtype(np.uint8),
                **{name: np.dtype(t) for name, t in ML_DTYPES.items()}}
FLOAT_FORMATS = ("f16", "bf16", "f32", *ML_DTYPES)
OVERFLOW = {"e4m3": np.nan, "e8m0": np.nan, "e2m1": 6.0}    # formats without an infinity


def finfo(name: str):
    """ml_dtypes' (or numpy's) description of a float type: nmant, minexp, max."""
    return ml_dtypes.finfo(NUMPY_DTYPES[name])


def largest(name: str) -> float:
    """The largest finite value of a type (integers: the highest one)."""
    t = dtype(name)
    return float(t.value_range[1]) if t.is_int else float(finfo(name).max)


def round_to(values, name: str, upward: bool = False) -> np.ndarray:
    """``values`` (float64) rounded once, to nearest even, to the float type ``name``; float64 results.
    ``upward``: to the nearest value at or above instead (scales, so that no value of a group clips)."""
    if name not in FLOAT_FORMATS:
        raise ValueError(f"{name} is not a float type xegemm.quant rounds to ({', '.join(FLOAT_FORMATS)})")
    x = np.asarray(values, dtype=np.float64)
    info = finfo(name)
    with np.errstate(invalid="ignore", over="ignore"):
        _, exponent = np.frexp(x)                    # x = m * 2**exponent with 1/2 <= |m| < 1
        spacing = np.ldexp(1.0, np.maximum(exponent - 1, info.minexp) - info.nmant)
        rounded = (np.ceil if upward else np.round)(x / spacing) * spacing   # x / spacing is exact (a power of two)
        too_big = np.abs(rounded) > float(info.max)
        rounded = np.where(too_big, np.copysign(OVERFLOW.get(name, np.inf), x), rounded)
        if not dtype(name).signed:                   # e8m0: no sign bit, no zero
            rounded = np.where(x < 0, np.nan, rounded)
    return rounded


def stored(values, name: str) -> np.ndarray:
    """Values of type ``name`` as their numpy storage dtype (floats rounded by :func:`round_to` first; integers
    must fit)."""
    if name in FLOAT_FORMATS:
        return round_to(values, name).astype(NUMPY_DTYPES[name])     # representable: the cast is exact
    return dtype(name).round(values).astype(NUMPY_DTYPES[name])


def values_of(array: np.ndarray) -> np.ndarray:
    """The values of a stored array as float64 (floats, exactly) or int64 (integers)."""
    a = np.asarray(array)
    return a.astype(np.int64) if a.dtype.kind in "iu" else a.astype(np.float64)
