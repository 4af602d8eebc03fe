"""The format registry: one :class:`Format` per way quantized weights are stored (``plain``, ``gptq``, ``awq``,
``mx``), with the arrays it has (names, dtypes, shapes as functions of K, N and the group), the types it takes
and how its arrays pack and unpack.  docs/quantization.md describes each with its public sources.

Every format packs from, and unpacks to, the same :class:`Unpacked` picture, K-first: ``codes[K, N]`` (the
quantized values: int64 integers, or float64 values of an 8- or 4-bit float), ``scales[Gk, Gn]`` (float64 values of
the scale type, layout ``kn``) and ``zeros[Gk, Gn]`` (the zero points in quantized units, int64 or float64, or
None).  Dequantization (xegemm.quant.codec) works on that picture only, so it is written once for all formats.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from xegemm.library.dtypes import dtype
from xegemm.quant.packing import (
    AWQ_ORDER,
    pack_nibbles,
    pack_words,
    unpack_nibbles,
    unpack_words,
)
from xegemm.quant.spec import (
    FP8,
    SCALE_LAYOUTS,
    SCALE_TYPES,
    WEIGHT_TYPES,
    ZERO_TYPES,
    QuantSpec,
)
from xegemm.quant.values import NUMPY_DTYPES, stored, values_of


@dataclass(frozen=True)
class Unpacked:
    """A quantized matrix in the formats' common picture (see the module docstring)."""

    codes: np.ndarray               # [K, N]
    scales: np.ndarray              # [Gk, Gn], layout kn, float64
    zeros: np.ndarray | None        # [Gk, Gn] or None


@dataclass(frozen=True)
class ArraySpec:
    """One array of a format: numpy dtype and shape."""

    dtype: np.dtype
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Format:
    """One storage format of quantized weights."""

    name: str
    summary: str
    weights: tuple[str, ...]         # element types of the values it stores
    scales: tuple[str, ...]
    zeros: tuple[str, ...]           # zero-point types ("none": no zero point)
    layouts: tuple[str, ...]         # how the values lie: row = [K, N], col = [N, K]
    groups: str                      # which groups: "any" (integers, channel, tensor, block128), "int", or one size
    defaults: Mapping[str, object]   # QuantSpec fields quantize() fills in when not given
    arrays: Callable[[QuantSpec, int, int], dict[str, ArraySpec]]
    pack: Callable[[QuantSpec, Unpacked], dict[str, np.ndarray]]
    unpack: Callable[[QuantSpec, Mapping[str, np.ndarray], int, int], Unpacked]
    scale_layouts: tuple[str, ...] = SCALE_LAYOUTS


# ---- element values <-> stored elements (4-bit ones as one code per byte, before packing) --------------------

def _store_elements(values: np.ndarray, name: str) -> np.ndarray:
    t = dtype(name)
    if t.bits == 4:
        return t.encode(values).astype(np.uint8)
    return stored(values, name)


def _element_values(elements: np.ndarray, name: str) -> np.ndarray:
    t = dtype(name)
    if t.bits == 4:
        return t.decode(elements)
    return values_of(elements)


def _scale_store(spec: QuantSpec, values: np.ndarray, name: str) -> np.ndarray:
    """Per-group values (kn) as stored: the type's dtype, in the spec's scale layout."""
    array = stored(values, name)
    return np.ascontiguousarray(array if spec.scale_layout == "kn" else array.T)


def _scale_values(spec: QuantSpec, array: np.ndarray) -> np.ndarray:
    a = np.asarray(array)
    return values_of(a if spec.scale_layout == "kn" else a.T)


# ---- plain and mx: the values in B's own layout --------------------------------------------------------------

def _plain_arrays(spec: QuantSpec, k: int, n: int) -> dict[str, ArraySpec]:
    rows, cols = (k, n) if spec.layout == "row" else (n, k)
    four = dtype(spec.weight).bits == 4
    arrays = {"qweight": ArraySpec(np.dtype(np.uint8) if four else NUMPY_DTYPES[spec.weight],
                                   (rows, cols // 2 if four else cols)),
              "scales": ArraySpec(NUMPY_DTYPES[spec.scale], spec.scale_shape(k, n))}
    if spec.has_zero:
        arrays["zeros"] = ArraySpec(NUMPY_DTYPES[spec.zero], spec.scale_shape(k, n))
    return arrays


def _plain_pack(spec: QuantSpec, u: Unpacked) -> dict[str, np.ndarray]:
    elements = _store_elements(u.codes if spec.layout == "row" else u.codes.T, spec.weight)
    arrays = {"qweight": pack_nibbles(elements, axis=1) if dtype(spec.weight).bits == 4
              else np.ascontiguousarray(elements),
              "scales": _scale_store(spec, u.scales, spec.scale)}
    if spec.has_zero:
        arrays["zeros"] = _scale_store(spec, u.zeros, spec.zero)
    return arrays


def _plain_unpack(spec: QuantSpec, arrays: Mapping[str, np.ndarray], k: int, n: int) -> Unpacked:
    q = np.asarray(arrays["qweight"])
    elements = unpack_nibbles(q, axis=1) if dtype(spec.weight).bits == 4 else q
    codes = _element_values(elements, spec.weight)
    return Unpacked(codes if spec.layout == "row" else codes.T, _scale_values(spec, arrays["scales"]),
                    _scale_values(spec, arrays["zeros"]) if spec.has_zero else None)


# ---- GPTQ: int32 words of 32/bits consecutive K; zeros of 32/bits columns, stored as z - 1 ---------------------

GPTQ_ZERO_OFFSET = 1      # AutoGPTQ stores z - 1 and adds 1 back (modulo 2^bits) when it unpacks


def _gptq_arrays(spec: QuantSpec, k: int, n: int) -> dict[str, ArraySpec]:
    per = 32 // dtype(spec.weight).bits
    gk, _ = spec.groups(k, n)
    return {"qweight": ArraySpec(np.dtype(np.int32), (k // per, n)),
            "qzeros": ArraySpec(np.dtype(np.int32), (gk, n // per)),
            "scales": ArraySpec(NUMPY_DTYPES[spec.scale], (gk, n))}


def _gptq_pack(spec: QuantSpec, u: Unpacked) -> dict[str, np.ndarray]:
    bits = dtype(spec.weight).bits
    return {"qweight": pack_words(u.codes, bits, axis=0),
            "qzeros": pack_words(u.zeros - GPTQ_ZERO_OFFSET, bits, axis=1),
            "scales": _scale_store(spec, u.scales, spec.scale)}


def _gptq_unpack(spec: QuantSpec, arrays: Mapping[str, np.ndarray], k: int, n: int) -> Unpacked:
    bits = dtype(spec.weight).bits
    zeros = (unpack_words(arrays["qzeros"], bits, axis=1) + GPTQ_ZERO_OFFSET) & ((1 << bits) - 1)
    return Unpacked(unpack_words(arrays["qweight"], bits, axis=0), _scale_values(spec, arrays["scales"]), zeros)


# ---- AWQ: int32 words of 8 columns in the order [0, 2, 4, 6, 1, 3, 5, 7]; zeros alike, without the - 1 ---------

def _awq_arrays(spec: QuantSpec, k: int, n: int) -> dict[str, ArraySpec]:
    gk, _ = spec.groups(k, n)
    return {"qweight": ArraySpec(np.dtype(np.int32), (k, n // 8)),
            "qzeros": ArraySpec(np.dtype(np.int32), (gk, n // 8)),
            "scales": ArraySpec(NUMPY_DTYPES[spec.scale], (gk, n))}


def _awq_pack(spec: QuantSpec, u: Unpacked) -> dict[str, np.ndarray]:
    return {"qweight": pack_words(u.codes, 4, axis=1, order=AWQ_ORDER),
            "qzeros": pack_words(u.zeros, 4, axis=1, order=AWQ_ORDER),
            "scales": _scale_store(spec, u.scales, spec.scale)}


def _awq_unpack(spec: QuantSpec, arrays: Mapping[str, np.ndarray], k: int, n: int) -> Unpacked:
    return Unpacked(unpack_words(arrays["qweight"], 4, axis=1, order=AWQ_ORDER), _scale_values(spec, arrays["scales"]),
                    unpack_words(arrays["qzeros"], 4, axis=1, order=AWQ_ORDER))


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("plain", "the values in B's layout (4-bit: two per byte along the contiguous dimension, low nibble "
                    "first), scales and zeros as arrays of their own type",
           WEIGHT_TYPES, SCALE_TYPES, ZERO_TYPES,
           ("row", "col"), "any", {"weight": "s4", "scale": "f16", "zero": "none"},
           _plain_arrays, _plain_pack, _plain_unpack),
    Format("gptq", "AutoGPTQ: qweight int32 [K*bits/32, N], qzeros int32 [K/group, N*bits/32] stored as z - 1, "
                   "scales [K/group, N]",
           ("u4", "u8"), ("f16", "bf16", "f32"), ("u4", "u8"), ("row",), "int",
           {"weight": "u4", "scale": "f16", "zero": "u4"}, _gptq_arrays, _gptq_pack, _gptq_unpack, ("kn",)),
    Format("awq", "AutoAWQ: qweight int32 [K, N/8] and qzeros int32 [K/group, N/8], 8 columns per word in the "
                  "order [0, 2, 4, 6, 1, 3, 5, 7]; scales [K/group, N]",
           ("u4",), ("f16", "bf16", "f32"), ("u4",), ("row",), "int",
           {"weight": "u4", "scale": "f16", "zero": "u4"}, _awq_arrays, _awq_pack, _awq_unpack, ("kn",)),
    Format("mx", "OCP microscaling: e2m1 (MXFP4) or e4m3/e5m2 (MXFP8) values, one e8m0 scale (a power of two) per "
                 "32 K; stored as plain",
           ("e2m1", *FP8), ("e8m0",), ("none",), ("row", "col"), "32",
           {"weight": "e2m1", "scale": "e8m0", "zero": "none", "group": 32}, _plain_arrays, _plain_pack, _plain_unpack),
)}
