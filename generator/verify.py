"""Inputs, the numpy reference and the verdict: every kernel that runs is checked before it is timed.

Inputs are seeded random values rounded to their storage type first, so the device and the reference see
the same numbers; the reference sums the exact products in float64 (int64 for integers).  The tolerance is
derived from the accumulator type and K: summing K products in the accumulator type errs by at most about
K unit roundoffs of the sum of magnitudes (Higham, "Accuracy and Stability of Numerical Algorithms", thm 3.1),
so an element passes when |C - ref| <= 2 (K + 1) u_acc (|A| |B|)_ij (doubled to admit truncating adds).
Integer GEMMs must match exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xegemm.atoms.mma import decode, encode, round_to
from xegemm.config import Config

CODE = {"bf16": "BF16", "f16": "F16", "tf32": "TF32", "f32": "F32", "s8": "S8", "u8": "U8", "s32": "S32",
        "s4": "S4", "u4": "U4"}
BITS = {"bf16": 16, "f16": 16, "tf32": 32, "f32": 32, "s8": 8, "u8": 8, "s32": 32, "s4": 4, "u4": 4, "f64": 64}
UNIT_ROUNDOFF = {"f32": 2.0 ** -24, "f16": 2.0 ** -11, "bf16": 2.0 ** -8, "f64": 2.0 ** -53}
INT_RANGE = {"s8": (-128, 128), "u8": (0, 256), "s4": (-8, 8), "u4": (0, 16)}
GUARD_BYTES = 4096
GUARD_BYTE = 0xA5


@dataclass
class Operands:
    """One problem's inputs: logical values (batch x rows x cols) and their storage images in bytes."""

    a: np.ndarray            # (batch, M, K) values as the device reads them
    b: np.ndarray            # (batch, K, N)
    a_bytes: np.ndarray      # storage of A (row-major M x K per batch), uint8
    b_bytes: np.ndarray      # storage of B: row-major K x N, or column-major = row-major N x K
    lda: int                 # leading dimensions (pitches) in bytes
    ldb: int
    ldc: int


def _values(rng, dtype: str, shape) -> np.ndarray:
    if dtype in INT_RANGE:
        lo, hi = INT_RANGE[dtype]
        return rng.integers(lo, hi, size=shape).astype(np.int64)
    return round_to(CODE[dtype], rng.uniform(-1.0, 1.0, size=shape))


def _storage(dtype: str, values: np.ndarray) -> np.ndarray:
    """Little-endian element bytes of ``values`` (the last axis is the contiguous one)."""
    bits = encode(CODE[dtype], values)
    nbytes = BITS[dtype] // 8
    return np.ascontiguousarray(bits.astype(f"<u{nbytes}")).view(np.uint8)


def make_operands(config: Config, seed: int | None = None) -> Operands:
    """Seeded inputs for a config's problem, laid out as its layouts say."""
    p, t = config.problem, config.types
    rng = np.random.default_rng(config.verify.seed if seed is None else seed)
    a = _values(rng, t.a, (p.batch, p.m, p.k))
    b = _values(rng, t.b, (p.batch, p.k, p.n))
    a_bytes = _storage(t.a, a if config.layout.a == "row" else np.swapaxes(a, 1, 2))
    b_bytes = _storage(t.b, b if config.layout.b == "row" else np.swapaxes(b, 1, 2))
    return Operands(a, b, a_bytes, b_bytes, lda=a_bytes.shape[2], ldb=b_bytes.shape[2],
                    ldc=p.n * BITS[t.c] // 8)


def reference(ops: Operands) -> np.ndarray:
    """C = A B for every batch, exact products summed in float64 (int64 for integers)."""
    return np.matmul(ops.a, ops.b)


def tolerance(config: Config, ops: Operands) -> np.ndarray | float:
    """Per-element absolute tolerance: 2 (K + 1) u_acc (|A| |B|)_ij for floats; 0 for integers."""
    acc = config.types.acc
    if acc not in UNIT_ROUNDOFF:
        return 0.0
    gamma = 2 * (config.problem.k + 1) * UNIT_ROUNDOFF[acc]
    return gamma * np.matmul(np.abs(ops.a), np.abs(ops.b)) + np.finfo(np.float32).tiny


def poison_c(config: Config) -> np.ndarray:
    """The bytes C is filled with before every run (all-ones: NaN for floats, -1 for ints) plus guard bytes."""
    p = config.problem
    nbytes = p.batch * p.m * p.n * BITS[config.types.c] // 8
    return np.concatenate([np.full(nbytes, 0xFF, np.uint8), np.full(GUARD_BYTES, GUARD_BYTE, np.uint8)])


@dataclass(frozen=True)
class Verdict:
    """The outcome of one check."""

    ok: bool
    max_abs_err: float | None
    max_rel_err: float | None
    bad_elements: int
    reason: str | None

    def as_dict(self) -> dict:
        return {"ok": self.ok, "max_abs_err": self.max_abs_err, "max_rel_err": self.max_rel_err,
                "bad_elements": self.bad_elements, "reason": self.reason}


def check(config: Config, ops: Operands, c_raw: np.ndarray, expected: np.ndarray | None = None) -> Verdict:
    """Compare the raw C buffer (with its guard bytes) against the reference."""
    p, t = config.problem, config.types
    nbytes = p.batch * p.m * p.n * BITS[t.c] // 8
    guard = c_raw[nbytes:]
    if np.any(guard != GUARD_BYTE):
        first = int(np.argmax(guard != GUARD_BYTE))
        return Verdict(False, None, None, int((guard != GUARD_BYTE).sum()),
                       f"out-of-bounds write: guard byte {first} after C was overwritten")
    bits = c_raw[:nbytes].view(f"<u{BITS[t.c] // 8}").astype(np.uint64)
    got = decode(CODE[t.c], bits).reshape(p.batch, p.m, p.n)
    want = reference(ops) if expected is None else expected
    err = np.abs(got - want)
    tol = tolerance(config, ops)
    bad = ~(err <= tol)          # NaN (an element never written) counts as bad
    n_bad = int(bad.sum())
    max_abs = float(np.nanmax(err)) if np.isfinite(err).any() else float("inf")
    denom = np.maximum(np.abs(want), 1e-30)
    max_rel = float(np.nanmax(err / denom)) if np.isfinite(err).any() else float("inf")
    if n_bad:
        idx = np.unravel_index(int(np.argmax(np.where(bad, 1, 0))), bad.shape)
        never = int(np.isnan(got).sum()) if got.dtype.kind == "f" else 0
        reason = (f"{n_bad} of {bad.size} elements out of tolerance; first at (batch, row, col) = {tuple(map(int, idx))}:"
                  f" got {got[idx]!r}, want {want[idx]!r}" + (f"; {never} elements never written" if never else ""))
        return Verdict(False, max_abs, max_rel, n_bad, reason)
    return Verdict(True, max_abs, max_rel, 0, None)
