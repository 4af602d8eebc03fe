"""A call's quantized B: the arrays as its format stores them (xegemm.quant.formats), checked and turned into the
bytes the dequantizing kernel reads (docs/quantization.md, docs/use.md).

``b`` is the format's ``qweight`` exactly as :func:`xegemm.quant.quantize` makes it and checkpoints hold it
(int32 for gptq and awq, uint8 two-per-byte for plain 4-bit values, int8/uint8 for 8-bit ones, ml_dtypes float8
for FP8), ``scales`` its scales and ``zeros`` its zero points (``qzeros`` of gptq and awq), each optionally with a
leading batch dimension; N follows from the qweight's shape and K from A.  Host (numpy) arrays only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xegemm.api.errors import DTypeMismatchError, RankError, ShapeMismatchError
from xegemm.quant import FORMATS, QuantSpec
from xegemm.quant.stored import StoredError, as_stored, n_of, per_group


@dataclass(frozen=True)
class QuantizedB:
    """A call's quantized B: (batch, N), whether it came batched, and the bytes of its three arrays."""

    batch: int
    n: int
    batched: bool
    qweight: np.ndarray          # uint8, batch after batch
    scales: np.ndarray
    zeros: np.ndarray | None
    a_scales: np.ndarray | None = None   # an FP8 A's scales (W8A8), batch after batch
    perm: np.ndarray | None = None       # act-order: A's columns in the order B's K rows were repacked
    notes: tuple[str, ...] = ()          # what was converted on the host (xegemm.quant.stored)


FIX = {"qweight": "pass the checkpoint's qweight as stored (b=...)", "scales": "pass the checkpoint's scales as stored",
       "qzeros": "pass the checkpoint's qzeros as stored", "zeros": "pass the zero points as stored"}


def _array(name: str, array, batched: bool, batch: int | None) -> np.ndarray:
    if not isinstance(array, np.ndarray):
        raise RankError(f"{name} is a {type(array).__name__}: a quantized B's arrays are numpy arrays (or tensors "
                        "with __dlpack__) - convert it with numpy.asarray")
    want = 3 if batched else 2
    if array.ndim != want:
        raise RankError(f"{name} has {array.ndim} dimensions {list(array.shape)}; expected {want} "
                        f"({'batch x ' if batched else ''}rows x columns, as the format stores it)")
    if batched and batch is not None and array.shape[0] != batch:
        raise ShapeMismatchError(f"{name} has {array.shape[0]} batches, b has {batch}: stack the same experts on all")
    return array


def quantized_b(spec: QuantSpec, b, scales, zeros, k: int, batched: bool, *, g_idx=None,
                gptq_version: int = 1) -> QuantizedB:
    """Check ``b``, ``scales`` and ``zeros`` (and ``g_idx``) against the format for K = ``k``, taking what
    checkpoints store (xegemm.quant.stored: uint32 words, 0-d and [N] scales, gpt-oss blocks, uint8 e8m0, GPTQ
    v2 zeros, act-order) and return their bytes; ShapeMismatchError, DTypeMismatchError, RankError name the
    array, what it has, what the format stores and the fix."""
    what = spec.describe()
    if scales is None:
        raise ShapeMismatchError(f"B is quantized ({what}): pass its scales, scales=...")
    if spec.has_zero and zeros is None:
        raise ShapeMismatchError(f"B is quantized with zero points ({what}): pass them, zeros=...")
    if not spec.has_zero and zeros is not None:
        raise ShapeMismatchError(f"B is quantized without zero points ({what}): zeros must be None (or load a "
                                 "config with quant.zero: the zeros' type)")
    if not isinstance(b, np.ndarray):
        _array("b", b, batched, None)
    try:
        stored = as_stored(spec, b, scales, zeros, k, batched, g_idx=g_idx, gptq_version=gptq_version)
    except StoredError as exc:
        raise ShapeMismatchError(str(exc)) from None
    qweight = _array("b", stored.qweight, batched, None)
    batch = qweight.shape[0] if batched else 1
    try:
        n = n_of(spec, "b", qweight.shape, k)
    except StoredError as exc:
        raise ShapeMismatchError(str(exc)) from None
    want = FORMATS[spec.format].arrays(spec, k, n)
    zero_name = next((name for name in want if name in ("zeros", "qzeros")), None)
    given = {"qweight": ("b", qweight), "scales": ("scales", _array("scales", stored.scales, batched, batch))}
    if zero_name:
        given[zero_name] = ("zeros", _array("zeros", stored.zeros, batched, batch))
    for name, (arg, array) in given.items():
        need = want[name]
        if array.dtype != need.dtype:
            raise DTypeMismatchError(f"{arg} ({name}) has dtype {array.dtype}; {what} stores {name} as {need.dtype}"
                                     f" - {FIX[name]}, or load a config whose quant: section matches it")
        if tuple(array.shape[-2:]) != tuple(need.shape):
            raise ShapeMismatchError(f"{arg} is {' x '.join(map(str, array.shape[-2:]))}; {what} needs {name} "
                                     f"{' x '.join(map(str, need.shape))} for K = {k} (A's columns), N = {n} - "
                                     f"{FIX[name]}, or load a config whose quant.group and quant.scale_layout match "
                                     "the checkpoint")

    def flat(array: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    return QuantizedB(batch, n, batched, flat(qweight), flat(given["scales"][1]),
                      flat(given[zero_name][1]) if zero_name else None, perm=stored.perm, notes=stored.notes)


def quantized_a_scales(spec: QuantSpec | None, a_scales, m: int, k: int, batch: int, batched: bool) -> np.ndarray | None:
    """Check an FP8 A's scales (W8A8, ``quant_a:``; ``spec`` None: A is not quantized, so there must be none)
    against its description for an M x K A and return their bytes (per tensor: a 0-d value, [1] or [1, 1];
    per token: [M], [M, 1] or [1, M])."""
    if spec is None:
        if a_scales is not None:
            raise ShapeMismatchError("a_scales are for an FP8 A (a quant_a: section); the loaded kernels take A as it is")
        return None
    what = f"FP8 A ({spec.weight}, group {spec.group}, {spec.scale} scales, {spec.scale_layout})"
    if a_scales is None:
        raise ShapeMismatchError(f"A is quantized ({what}): pass its scales, a_scales=...")
    if isinstance(a_scales, np.ndarray):
        a_scales = per_group("a_scales", a_scales, spec, k, m, batch if batched else None, [])
    array = _array("a_scales", a_scales, batched, batch)
    need = FORMATS[spec.format].arrays(spec, k, m)["scales"]
    if array.dtype != need.dtype:
        raise DTypeMismatchError(f"a_scales has dtype {array.dtype}; the {what} stores its scales as {need.dtype} - "
                                 "pass the activation scales as the quantizer wrote them, or load a config whose "
                                 "quant_a.scale matches")
    if tuple(array.shape[-2:]) != tuple(need.shape):
        raise ShapeMismatchError(f"a_scales is {' x '.join(map(str, array.shape[-2:]))}; the {what} needs "
                                 f"{' x '.join(map(str, need.shape))} for M = {m}, K = {k} - load a config whose "
                                 "quant_a.group and quant_a.scale_layout match them")
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)
