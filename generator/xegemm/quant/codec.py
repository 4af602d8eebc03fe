"""quantize, dequantize and the reference GEMM, in numpy, with the kernels' rounding.

The math, written once for every format (on the formats' common picture, xegemm.quant.formats.Unpacked):

    w = round_to_compute((q - z) * s)

``q - z`` is exact: integers, or for f16/bf16 zeros the difference rounded once to the zero's type (q, at most 8
bits, is exact there); the product is exact in float64 (``q - z`` has at most 10 significant bits, the scale at
most 24); then one round-to-nearest-even to the compute type (f16 or bf16).  Never ``q*s - z*s``, which rounds
differently.  8- and 4-bit floats are exact in f16 and bf16, so FP8/FP4 weights are converted exactly, then
scaled.  The GEMM reference multiplies the compute-type operands in float64; the f32 accumulation is the
verifier's tolerance (that of an f16/bf16 GEMM of the same K).

Quantizing (for tests and for users preparing data): per group, integers are symmetric (s = max|w| / qmax) without
a zero point and asymmetric (s = (max - min) / (qmax - qmin), z = qmin - min / s) with one; the scale is rounded up
to its type first (no value clips), then ``q = clip(round(w / s) + z)``.  Floats take s = max|w| / (largest value), e8m0 scales the
next power of two up, and ``mx`` the OCP rule 2^(floor(log2 max|w|) - emax) with values saturated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from xegemm.library.dtypes import dtype
from xegemm.errors import XegemmError
from xegemm.quant.formats import FORMATS, Unpacked
from xegemm.quant.rules import shape_violations, spec_violations
from xegemm.quant.spec import COMPUTE_TYPES, FLOAT_ZEROS, QuantSpec, expand
from xegemm.quant.values import NUMPY_DTYPES, finfo, largest, round_to


class QuantError(XegemmError, ValueError):
    """A quantization description, arrays or shapes that do not fit together."""


@dataclass(frozen=True)
class QuantizedMatrix:
    """One quantized operand: its description, its logical size (``k`` x ``n``, K-first; for A ``n`` is M) and
    the format's arrays by name (:attr:`xegemm.quant.formats.Format.arrays`)."""

    spec: QuantSpec
    k: int
    n: int
    arrays: Mapping[str, np.ndarray] = field(hash=False)
    operand: str = "b"          # "b": the logical matrix is [K, N]; "a": [M, K] (stored K-first as its transpose)

    @classmethod
    def from_arrays(cls, spec: QuantSpec, k: int, n: int, arrays: Mapping[str, np.ndarray],
                    operand: str = "b") -> QuantizedMatrix:
        """Arrays from elsewhere (a checkpoint), checked against the format: names, dtypes and shapes."""
        check_spec(spec, k, n)
        want = FORMATS[spec.format].arrays(spec, k, n)
        problems = [f"missing array {name!r} ({w.dtype} {list(w.shape)})" for name, w in want.items()
                    if name not in arrays]
        problems += [f"unexpected array {name!r}" for name in arrays if name not in want]
        for name, w in want.items():
            if name in arrays:
                got = np.asarray(arrays[name])
                if got.dtype != w.dtype or got.shape != w.shape:
                    problems.append(f"{name} is {got.dtype} {list(got.shape)}, {spec.format} needs {w.dtype} "
                                    f"{list(w.shape)} for K = {k}, {'N' if operand == 'b' else 'M'} = {n}")
        if problems:
            raise QuantError(f"{spec.describe()}: " + "; ".join(problems))
        return cls(spec, k, n, {name: np.asarray(arrays[name]) for name in want}, operand)

    @property
    def qweight(self) -> np.ndarray:
        return self.arrays["qweight"]

    @property
    def scales(self) -> np.ndarray:
        return self.arrays["scales"]

    @property
    def zeros(self) -> np.ndarray | None:
        return self.arrays.get("zeros", self.arrays.get("qzeros"))

    def unpacked(self) -> Unpacked:
        """The common picture (codes, scales, zeros), K-first."""
        return FORMATS[self.spec.format].unpack(self.spec, self.arrays, self.k, self.n)


def check_spec(spec: QuantSpec, k: int, n: int) -> None:
    """Raise QuantError naming every rule the description or the shape breaks."""
    problems = [f"{key}: {message}" for key, message in spec_violations(spec)]
    if not problems:
        problems = shape_violations(spec, k, n)
    if problems:
        raise QuantError(f"{spec.describe()}: " + "; ".join(problems))


def make_spec(format: str = "plain", **keys) -> QuantSpec:
    """A QuantSpec with the format's defaults for the keys not given (None counts as not given)."""
    fmt = FORMATS.get(format)
    if fmt is None:
        raise QuantError(f"unknown format {format!r}; formats: {', '.join(FORMATS)}")
    given = {key: value for key, value in keys.items() if value is not None}
    return QuantSpec(**{"format": format, "group": 128, **fmt.defaults, **given})


# ---- quantize -------------------------------------------------------------------------------------------------

def _group_reduce(w: np.ndarray, spec: QuantSpec, reduce) -> np.ndarray:
    """``reduce`` (np.nanmax, np.nanmin) over each group of the K-first ``w``: a [Gk, Gn] array."""
    k, n = w.shape
    gk, gn = spec.group_extent(k, n)
    groups_k, groups_n = spec.groups(k, n)
    padded = np.full((groups_k * gk, groups_n * gn), np.nan)
    padded[:k, :n] = w
    return reduce(padded.reshape(groups_k, gk, groups_n, gn), axis=(1, 3))


def _scale_in_range(s: np.ndarray, name: str) -> np.ndarray:
    """Scales rounded up to their type (so w / s stays in the value range), kept finite and non-zero (an
    all-zero group gets the smallest normal)."""
    info = finfo(name)
    return round_to(np.clip(s, float(info.smallest_normal), float(info.max)), name, upward=True)


def _quantize_kfirst(w: np.ndarray, spec: QuantSpec) -> Unpacked:
    t = dtype(spec.weight)
    k, n = w.shape
    wmax, wmin = _group_reduce(w, spec, np.nanmax), _group_reduce(w, spec, np.nanmin)
    if not t.is_int:
        top = largest(spec.weight)
        amax = np.maximum(np.abs(wmax), np.abs(wmin))
        if spec.format == "mx":     # OCP MX v1.0 section 6.3: X = 2^(floor(log2(max|w|)) - emax_elem)
            exponent = np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - np.floor(np.log2(top))
            scales = np.exp2(np.clip(exponent, -127, 127))
        else:
            scales = _scale_in_range(amax / top, spec.scale)
        codes = round_to(np.clip(w / expand(scales, spec, k, n), -top, top), spec.weight)
        return Unpacked(codes, scales, None)
    lo, hi = t.value_range
    if not spec.has_zero:
        scales = _scale_in_range(np.maximum(np.abs(wmax), np.abs(wmin) if t.signed else 0.0) / hi, spec.scale)
        codes = np.clip(np.rint(w / expand(scales, spec, k, n)), lo, hi).astype(np.int64)
        return Unpacked(codes, scales, None)
    top, bottom = np.maximum(wmax, 0.0), np.minimum(wmin, 0.0)
    scales = _scale_in_range((top - bottom) / (hi - lo), spec.scale)
    if spec.zero in FLOAT_ZEROS:
        zeros = round_to(lo - bottom / scales, spec.zero)
        shifted = np.rint(w / expand(scales, spec, k, n) + expand(zeros, spec, k, n))
    else:
        zlo, zhi = dtype(spec.zero).value_range
        zeros = np.clip(np.rint(lo - bottom / scales), zlo, zhi).astype(np.int64)
        shifted = np.rint(w / expand(scales, spec, k, n)) + expand(zeros, spec, k, n)
    return Unpacked(np.clip(shifted, lo, hi).astype(np.int64), scales, zeros)


def quantize(w, format: str = "plain", *, weight: str | None = None, group: int | str | None = None,
             scale: str | None = None, zero: str | None = None, scale_layout: str | None = None,
             layout: str | None = None, operand: str = "b") -> QuantizedMatrix:
    """Quantize a matrix into ``format``'s arrays (keys left out take the format's defaults; group 128).

    ``operand="b"``: ``w`` is B, ``[K, N]``; ``layout`` row stores it ``[K, N]``, col ``[N, K]``.
    ``operand="a"``: ``w`` is A, ``[M, K]``, grouped along K (per-token groups); stored ``[M, K]``."""
    values = np.asarray(w, dtype=np.float64)
    if values.ndim != 2 or not np.all(np.isfinite(values)):
        raise QuantError(f"quantize takes a finite 2-D matrix, got shape {list(values.shape)}"
                         + ("" if values.ndim != 2 else " with non-finite values"))
    if operand not in ("a", "b"):
        raise QuantError(f"operand {operand!r}: a or b")
    kfirst = values if operand == "b" else values.T
    if operand == "a":
        if layout not in (None, "row"):
            raise QuantError(f"layout {layout!r}: a quantized A is stored row-major, [M, K]")
        layout = "col"          # A's rows (M x K, K contiguous) are the K-first view's columns
    spec = make_spec(format, weight=weight, group=group, scale=scale, zero=zero, scale_layout=scale_layout,
                     layout=layout)
    k, n = kfirst.shape
    check_spec(spec, k, n)
    arrays = FORMATS[spec.format].pack(spec, _quantize_kfirst(kfirst, spec))
    return QuantizedMatrix(spec, k, n, arrays, operand)


def random_unpacked(spec: QuantSpec, k: int, n: int, rng: np.random.Generator) -> Unpacked:
    """Seeded test data in the formats' common picture: every finite code of the value type equally likely,
    scales 2^[-8, 2) rounded to their type (powers of two for e8m0), zero points anywhere in their type's range
    (float zeros: in the codes' range, rounded)."""
    t = dtype(spec.weight)
    if t.is_int:
        lo, hi = t.value_range
        codes = rng.integers(lo, hi + 1, (k, n))
    else:
        finite = t.decode(np.arange(1 << t.bits))
        codes = rng.choice(finite[np.isfinite(finite)], (k, n))
    shape = spec.groups(k, n)
    exponents = rng.uniform(-8, 2, shape)
    scales = round_to(np.exp2(np.floor(exponents) if spec.scale == "e8m0" else exponents), spec.scale)
    zeros = None
    if spec.zero in FLOAT_ZEROS:
        zeros = round_to(rng.uniform(*t.value_range, shape), spec.zero)
    elif spec.has_zero:
        lo, hi = dtype(spec.zero).value_range
        zeros = rng.integers(lo, hi + 1, shape)
    return Unpacked(codes, scales, zeros)


def random_quantized(spec: QuantSpec, k: int, n: int, rng: np.random.Generator,
                     operand: str = "b") -> QuantizedMatrix:
    """:func:`random_unpacked` packed in the format: test data straight in the format, with no rounding of a
    float matrix in between (for verifying kernels)."""
    check_spec(spec, k, n)
    return QuantizedMatrix(spec, k, n, FORMATS[spec.format].pack(spec, random_unpacked(spec, k, n, rng)), operand)


# ---- dequantize -----------------------------------------------------------------------------------------------

def dequantized_values(u: Unpacked, spec: QuantSpec, compute: str) -> np.ndarray:
    """The K-first float64 values ``round_to_compute((q - z) * s)`` of the common picture (the one place the
    dequantization order is written)."""
    if compute not in COMPUTE_TYPES:
        raise QuantError(f"compute type {compute!r}: the DPAS takes f16 or bf16")
    k, n = u.codes.shape
    if u.zeros is None:
        centred = u.codes.astype(np.float64)
    elif spec.zero in FLOAT_ZEROS:     # in the zero's type: q is exact there, the difference rounds once
        centred = round_to(u.codes.astype(np.float64) - expand(u.zeros, spec, k, n), spec.zero)
    else:                              # integers: exact
        centred = (u.codes.astype(np.int64) - expand(u.zeros, spec, k, n).astype(np.int64)).astype(np.float64)
    return round_to(centred * expand(u.scales, spec, k, n), compute)


def dequantize(matrix: QuantizedMatrix, compute: str = "f16") -> np.ndarray:
    """The operand in the compute type (numpy float16 or ml_dtypes bfloat16), ``[K, N]`` for B, ``[M, K]`` for A."""
    values = dequantized_values(matrix.unpacked(), matrix.spec, compute)
    values = values if matrix.operand == "b" else values.T
    return values.astype(NUMPY_DTYPES[compute])


def reference_gemm(a, b, compute: str = "f16") -> np.ndarray:
    """The float64 product of the compute-type operands: ``a`` is A ``[M, K]`` (values, f16/bf16 already, or a
    QuantizedMatrix of an FP8 A), ``b`` a QuantizedMatrix of B (or plain values).  Before the epilogue; the
    tolerance is the verifier's for an f16/bf16 GEMM with f32 accumulation of the same K."""
    def operand(x):
        if isinstance(x, QuantizedMatrix):
            return dequantize(x, compute).astype(np.float64)
        return round_to(np.asarray(x, dtype=np.float64), compute)
    return operand(a) @ operand(b)


def with_arrays(matrix: QuantizedMatrix, **arrays: np.ndarray) -> QuantizedMatrix:
    """A copy with some arrays replaced (checked again): for tests and for loading parts of a checkpoint."""
    return QuantizedMatrix.from_arrays(matrix.spec, matrix.k, matrix.n, {**matrix.arrays, **arrays},
                                       matrix.operand)

