"""Bit packings of sub-byte values, each written once and shared by the formats (xegemm.quant.formats).

* Two 4-bit values per byte along an axis, **low nibble first**: element 2i in bits 0-3 of byte i, element
  2i + 1 in bits 4-7 (sycl-tla, GPTQ, AWQ and the vLLM/SGLang XPU kernels all order nibbles so).
* ``32 / bits`` values per 32-bit word along an axis, value ``order[j]`` of each run of ``32 / bits`` in bits
  ``[j * bits, (j + 1) * bits)``: GPTQ packs 8 consecutive K (identity order), AWQ packs 8 columns in the
  order [0, 2, 4, 6, 1, 3, 5, 7] (AutoAWQ ``packing_utils.py``).

Values go in as integers (any sign: their low ``bits`` bits are stored) and come out as unsigned codes; the
caller reads codes as signed where its type is.
"""

from __future__ import annotations

import numpy as np

IDENTITY8 = (0, 1, 2, 3, 4, 5, 6, 7)
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)          # word slot j holds column 8c + AWQ_ORDER[j]


def _last(array: np.ndarray, axis: int) -> np.ndarray:
    return np.moveaxis(np.asarray(array), axis, -1)


def pack_nibbles(codes, axis: int = -1) -> np.ndarray:
    """uint8 bytes of 4-bit ``codes``, two per byte along ``axis`` (whose length must be even)."""
    c = _last(codes, axis).astype(np.int64) & 0xF
    if c.shape[-1] % 2:
        raise ValueError(f"4-bit values pack two per byte: {c.shape[-1]} along the packed axis is odd")
    packed = (c[..., 0::2] | (c[..., 1::2] << 4)).astype(np.uint8)
    return np.ascontiguousarray(np.moveaxis(packed, -1, axis))


def unpack_nibbles(packed, axis: int = -1) -> np.ndarray:
    """The 4-bit codes (int64, 0..15) of bytes packed by :func:`pack_nibbles`."""
    p = _last(packed, axis).astype(np.int64)
    codes = np.stack([p & 0xF, p >> 4], axis=-1).reshape(*p.shape[:-1], 2 * p.shape[-1])
    return np.moveaxis(codes, -1, axis)


def pack_words(values, bits: int, axis: int, order=IDENTITY8) -> np.ndarray:
    """int32 words of ``bits``-bit ``values``, ``32 / bits`` per word along ``axis`` in ``order``."""
    per = 32 // bits
    order = tuple(order)[:per] if bits == 4 else tuple(range(per))
    v = _last(values, axis).astype(np.int64) & ((1 << bits) - 1)
    if v.shape[-1] % per:
        raise ValueError(f"{bits}-bit values pack {per} per 32-bit word: {v.shape[-1]} along the packed axis is "
                         f"not a multiple of {per}")
    runs = v.reshape(*v.shape[:-1], v.shape[-1] // per, per)
    words = np.zeros(runs.shape[:-1], np.uint64)
    for slot, element in enumerate(order):
        words |= runs[..., element].astype(np.uint64) << np.uint64(slot * bits)
    return np.ascontiguousarray(np.moveaxis(words.astype(np.uint32).view(np.int32), -1, axis))


def unpack_words(words, bits: int, axis: int, order=IDENTITY8) -> np.ndarray:
    """The codes (int64, unsigned) of words packed by :func:`pack_words` with the same ``order``."""
    per = 32 // bits
    order = tuple(order)[:per] if bits == 4 else tuple(range(per))
    w = _last(np.asarray(words).astype(np.int32).view(np.uint32), axis).astype(np.int64)
    runs = np.zeros((*w.shape, per), np.int64)
    for slot, element in enumerate(order):
        runs[..., element] = (w >> (slot * bits)) & ((1 << bits) - 1)
    return np.moveaxis(runs.reshape(*w.shape[:-1], w.shape[-1] * per), -1, axis)
