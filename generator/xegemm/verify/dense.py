"""Inputs, the numpy reference and the verdict: every kernel that runs is checked before it is timed.

Inputs are seeded random values rounded to their storage type first, so the device and the reference see
the same numbers; the reference sums the exact products in float64 (int64 for integers).  The tolerance is
derived from the accumulator type and K: summing K products in the accumulator type errs by at most about
K unit roundoffs of the sum of magnitudes (Higham, "Accuracy and Stability of Numerical Algorithms", thm 3.1),
so an element passes when |C - ref| <= 2 (K + 1) u_f32 (|A| |B|)_ij (doubled to admit truncating adds);
bf16/f16 accumulators are checked against a reference that rounds like them (see :func:`reference`).
Integer GEMMs must match exactly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from xegemm.config import Config
from xegemm.library.dtypes import dtype
from xegemm.epilogues.fixed import EpilogueSpec, reference_bounds
from xegemm.epilogues.outputs import Bounds
from xegemm.epilogues.config import graph_of
from xegemm.epilogues.reference import reference as graph_reference, within
from xegemm.plan.planner import k_slice
from xegemm.quant import compute_type, dequantize, operand_spec, random_quantized
from xegemm.plan.stream_k import tile_pieces
from xegemm.epilogues.graph import Graph, kind_shape

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
    c_in: np.ndarray | None = None        # (batch, M, N) values of C the epilogue reads (beta != 0), else None
    c_in_bytes: np.ndarray | None = None  # their storage, laid out as D
    bias: np.ndarray | None = None        # f32 bias vector (length M or N), else None
    named: dict = field(default_factory=dict)        # a traced epilogue's named inputs: values (f32 vectors and
    named_bytes: dict = field(default_factory=dict)  # scalars, matrices batch x M x N) and the matrices' storage
    quant: dict | None = None             # a quantized B: {"scales", "zeros"} bytes, batch after batch (else None);
                                          # with an FP8 A also "a_scales"
    graph: Graph | None = None            # the traced epilogue's graph the inputs were made for (None: the fixed one)


def _values(rng, name: str, shape) -> np.ndarray:
    """Seeded inputs of a type: every value of a narrow integer type, else uniform in [-1, 1) rounded."""
    t = dtype(name)
    if t.is_int:
        lo, hi = t.value_range
        return rng.integers(lo, hi + 1, size=shape).astype(np.int64)
    return t.round(rng.uniform(-1.0, 1.0, size=shape))


def pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """4-bit codes (uint8, the last axis the contiguous one) packed two per byte, the lower index in the low
    nibble; a row's odd last element is padded with a zero nibble."""
    if codes.shape[-1] % 2:
        codes = np.concatenate([codes, np.zeros(codes.shape[:-1] + (1,), np.uint8)], axis=-1)
    return np.ascontiguousarray(codes[..., 0::2] | (codes[..., 1::2] << 4))


def _storage(name: str, values: np.ndarray) -> np.ndarray:
    """Little-endian element bytes of ``values`` (the last axis is the contiguous one)."""
    t = dtype(name)
    if t.bits == 4:
        return pack_nibbles(t.encode(values).astype(np.uint8))
    return np.ascontiguousarray(t.encode(values).astype(f"<u{t.bits // 8}")).view(np.uint8)


_OF_CONFIG = object()


def make_operands(config: Config, seed: int | None = None, graph=_OF_CONFIG) -> Operands:
    """Seeded inputs for a config's problem, laid out as its layouts say; ``graph`` is its traced epilogue's
    (the plan's ``graph``; by default traced from the config) and travels with them to :func:`reference`."""
    if graph is _OF_CONFIG:
        graph = graph_of(config)
    p, t = config.problem, config.types
    rng = np.random.default_rng(config.verify.seed if seed is None else seed)
    a_spec = operand_spec(config, "a")
    if a_spec is None:
        a = _values(rng, t.a, (p.batch, p.m, p.k))
        a_bytes = _storage(t.a, a if config.layout.a == "row" else np.swapaxes(a, 1, 2))
    else:                   # an FP8 A (W8A8): values and bytes as for a quantized B, A's scales beside
        a, a_bytes, a_quant = _quantized(config, a_spec, rng, "a")
    qspec, quant = operand_spec(config, "b"), None
    if qspec is not None:
        b, b_bytes, quant = _quantized(config, qspec, rng, "b")
        if a_spec is not None:
            quant["a_scales"] = a_quant["scales"]
    else:
        b = _values(rng, t.b, (p.batch, p.k, p.n))
        b_bytes = _storage(t.b, b if config.layout.b == "row" else np.swapaxes(b, 1, 2))
    spec = EpilogueSpec.of(config)
    c_in = _values(rng, t.c, (p.batch, p.m, p.n)) if (graph.reads("c") if graph else spec.reads_c) else None
    bias = None
    if spec.bias != "none":
        bias = dtype("f32").round(rng.uniform(-1.0, 1.0, size=p.m if spec.bias == "row" else p.n))
    named = {}
    for i in graph.inputs if graph else ():
        if i.name not in ("acc", "c"):     # vectors and scalars f32 in [-1, 1), matrices as A's values
            shape = kind_shape(i.kind, p.m, p.n, (p.batch,) if i.kind == "matrix" else ())
            named[i.name] = _values(rng, i.type, shape)
    return Operands(a, b, a_bytes, b_bytes, lda=a_bytes.shape[2], ldb=b_bytes.shape[2],
                    ldc=p.n * dtype(t.c).bits // 8, c_in=c_in,
                    c_in_bytes=None if c_in is None else _storage(t.c, c_in), bias=bias, quant=quant, named=named,
                    named_bytes={name: _storage(graph.input(name).type, v) for name, v in named.items()
                                 if graph.input(name).kind == "matrix"}, graph=graph)


def _quantized(config: Config, spec, rng, operand: str) -> tuple[np.ndarray, np.ndarray, dict]:
    """A quantized B (or FP8 A) per batch, straight in its format (xegemm.quant.random_quantized: every code,
    random scales and zeros): its values as the kernel dequantizes them (xegemm.quant.dequantize, in the compute
    type), the values' bytes (batch, rows, bytes per row) and the scales' and zeros' bytes, batch after batch."""
    p = config.problem
    matrices = [random_quantized(spec, p.k, p.n if operand == "b" else p.m, rng, operand) for _ in range(p.batch)]
    values = np.stack([dequantize(q, compute_type(config.types)).astype(np.float64) for q in matrices])
    stored = np.stack([np.ascontiguousarray(q.qweight).view(np.uint8).reshape(q.qweight.shape[0], -1)
                       for q in matrices])

    def flat(name: str) -> np.ndarray:
        return np.concatenate([np.ascontiguousarray(q.arrays[name]).view(np.uint8).reshape(-1) for q in matrices])
    zeros = next((name for name in ("zeros", "qzeros") if name in matrices[0].arrays), None)
    return values, stored, {"scales": flat("scales"), "zeros": flat(zeros) if zeros else None}


@dataclass(frozen=True)
class Reference:
    """What D must be: the value it should hold, and per element the lowest and highest it may hold."""

    expected: np.ndarray          # (batch, M, N), float64
    low: np.ndarray
    high: np.ndarray
    outputs: dict = field(default_factory=dict)    # a traced epilogue's extra outputs: name -> (type, Bounds)


def reference(config: Config, ops: Operands) -> Reference:
    """The numpy reference of D: the accumulator's (:func:`accumulator_reference`) through the epilogue
    (:func:`xegemm.epilogues.fixed.reference_bounds`: the same operations in float64, with the tolerance carried
    through them, then the output type's conversion of each end of the interval)."""
    acc, tol = accumulator_reference(config, ops)
    graph = ops.graph
    if graph is not None:     # a traced epilogue: its graph in float64 with the tolerance of each op
        bounds = graph_reference(graph, acc, tol, {"c": ops.c_in, **ops.named})
        d = bounds["d"]
        return Reference(d.expected, d.low, d.high, {o.name: (o.type, bounds[o.name]) for o in graph.outputs[1:]})
    bounds = reference_bounds(EpilogueSpec.of(config), acc, tol, ops.c_in, ops.bias)
    return Reference(bounds.expected, bounds.low, bounds.high)


def k_pieces(config: Config) -> list[tuple[slice, slice, list[tuple[int, int]], int]]:
    """How the kernel sums K, per region of D: (rows, columns, the [k_begin, k_end) ranges summed from zero
    one by one and added in order, additions per element beside the K products).  One region and piece
    unsplit (K + 1 additions); split K: one region, the slices (K + S); stream-K: each work-group tile with
    the pieces its work-groups computed (xegemm.plan.stream_k.tile_pieces; K + pieces)."""
    p, tile = config.problem, config.tile
    everything = (slice(0, p.m), slice(0, p.n))
    if tile.stream_k:
        bm, bn, _ = tile.workgroup
        return [(slice(tm * bm, (tm + 1) * bm), slice(tn * bn, (tn + 1) * bn), pieces, p.k + len(pieces))
                for (tm, tn), pieces in tile_pieces(config)]
    if tile.split_k > 1:
        step = k_slice(config)
        return [(*everything, [(s, min(p.k, s + step)) for s in range(0, p.k, step)], p.k + tile.split_k)]
    return [(*everything, [(0, p.k)], p.k + 1)]


def reference_key(config: Config) -> tuple:
    """What of a config besides the problem, types, layouts and epilogue its reference depends on: how the
    kernel cuts K (the same key, the same reference)."""
    tile = config.tile
    return (tile.split_k,) + ((tile.stream_k, tile.workgroup, tile.swizzle) if tile.stream_k else ())


def accumulator_reference(config: Config, ops: Operands) -> tuple[np.ndarray, np.ndarray | float]:
    """The numpy reference of a config's GEMM with its tolerance, derived from the types and K.

    f32 accumulators: exact products summed in float64; |C - ref| <= 2 (K + 1) u_f32 (|A| |B|)_ij.
    bf16 / f16 accumulators: a bound from |A| |B| would exceed the result itself once K u_acc nears 1 (K >= 128
    for bf16), passing kernels that drop whole k-steps; so the reference rounds its running sum to the
    accumulator type after every DPAS (each K_atom = 256 / input bits products, as the atom returns D in the
    accumulator type), and an element passes when it is within one rounding per DPAS of that sum:
    ceil(K / K_atom) * 2 u_acc * max_j |S_j| (the running sums S_j), plus the f32 term above.
    Integers: exact.
    Split K and stream-K (:func:`k_pieces`): each piece's running sum starts from zero and the pieces' sums are
    added in f32, so the f32 term counts K + pieces additions and the roundings are those of every piece.
    """
    acc = dtype(config.types.acc)
    exact = np.matmul(ops.a, ops.b)
    if acc.is_int:
        return exact, 0.0
    magnitude = np.matmul(np.abs(ops.a), np.abs(ops.b))
    additions = np.zeros_like(exact)
    for rows, cols, _, count in k_pieces(config):
        additions[:, rows, cols] = count
    f32_term = 2 * additions * dtype("f32").unit_roundoff * magnitude + np.finfo(np.float32).tiny
    if acc.name == "f32":
        return exact, f32_term
    chunk = 256 // max(dtype(config.types.a).bits, dtype(config.types.b).bits)
    total, tolerance = np.zeros_like(exact), f32_term
    for rows, cols, pieces, _ in k_pieces(config):
        a, b = ops.a[:, rows, :], ops.b[:, :, cols]
        for start, end in pieces:
            running = np.zeros_like(total[:, rows, cols])
            peak = np.zeros_like(running)
            for k0 in range(start, end, chunk):
                k1 = min(k0 + chunk, end)
                running = acc.round(running + np.matmul(a[:, :, k0:k1], b[:, k0:k1, :]))
                peak = np.maximum(peak, np.abs(running))
            total[:, rows, cols] += running
            tolerance[:, rows, cols] += -(-(end - start) // chunk) * 2 * acc.unit_roundoff * peak
    return total, tolerance


def host_bytes(config: Config) -> int:
    """About how much host memory :func:`make_operands` and :func:`reference` need for a config's problem: the
    inputs' values (float64/int64) and storage, the reference, its tolerance and magnitudes (float64), and C."""
    p = config.problem
    a, b, c = p.batch * p.m * p.k, p.batch * p.k * p.n, p.batch * p.m * p.n
    storage = a * dtype(config.types.a).bytes + b * dtype(config.types.b).bytes + c * dtype(config.types.c).bytes
    return int(8 * (2 * a + 2 * b + 4 * c) + storage)


def check_fits(config: Config, device_bytes: int | None = None) -> str | None:
    """Why a config's problem cannot be verified on this machine (host memory, or the device's global memory
    for A, B and C), or None when it fits."""
    need = host_bytes(config)
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):   # pragma: no cover - not on Linux
        available = None
    p = config.problem
    shape = p.label
    if available is not None and need > available:
        return (f"problem {shape} needs about {need / 2**30:.1f} GiB of host memory for its inputs and numpy "
                f"reference; {available / 2**30:.1f} GiB are available: choose a smaller problem")
    on_device = (p.batch * (p.m * p.k * dtype(config.types.a).bytes + p.k * p.n * dtype(config.types.b).bytes
                            + p.m * p.n * dtype(config.types.c).bytes))
    if device_bytes is not None and on_device > device_bytes:
        return (f"problem {shape} needs {on_device / 2**30:.1f} GiB of device memory for A, B and C; the device has "
                f"{device_bytes / 2**30:.1f} GiB: choose a smaller problem")
    return None


def poison_c(config: Config, type_name: str | None = None, elements: int | None = None) -> np.ndarray:
    """The bytes C (or an extra output of ``type_name`` and ``elements``) is filled with before every run
    (all-ones: NaN for floats, -1 for ints) plus guard bytes."""
    p = config.problem
    nbytes = (p.batch * p.m * p.n if elements is None else elements) * dtype(type_name or config.types.c).bits // 8
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


def check(config: Config, c_raw: np.ndarray, ref: Reference, outputs: dict | None = None) -> Verdict:
    """Compare the raw C buffer (with its guard bytes) against the reference; ``outputs``: a traced epilogue's
    extra outputs' raw buffers by name, each checked as C is."""
    verdict = _check_matrix(config, config.types.c, "C", c_raw, Bounds(ref.expected, ref.low, ref.high))
    for name, raw in (outputs or {}).items():
        if not verdict.ok:
            break
        type_name, bounds = ref.outputs[name]
        verdict = _check_matrix(config, type_name, f"output {name}", raw, bounds)
        if not verdict.ok:
            verdict = Verdict(False, verdict.max_abs_err, verdict.max_rel_err, verdict.bad_elements,
                              f"output {name}: {verdict.reason}")
    return verdict


def _check_matrix(config: Config, type_name: str, what: str, c_raw: np.ndarray, ref: Bounds) -> Verdict:
    c = dtype(type_name)
    nbytes = ref.expected.size * c.bits // 8
    guard = c_raw[nbytes:]
    if np.any(guard != GUARD_BYTE):
        first = int(np.argmax(guard != GUARD_BYTE))
        return Verdict(False, None, None, int((guard != GUARD_BYTE).sum()),
                       f"out-of-bounds write: guard byte {first} after {what} was overwritten")
    bits = c_raw[:nbytes].view(f"<u{c.bits // 8}").astype(np.uint64)
    got = c.decode(bits).reshape(ref.expected.shape)
    want = ref.expected
    bad = ~within(ref, got)         # NaN (an element never written) counts as bad, unless the reference is NaN
    n_bad = int(bad.sum())
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(np.isfinite(want) | np.isfinite(got) | bad, np.abs(got - want), 0.0)
        max_abs = float(np.nanmax(err)) if np.isfinite(err).any() else float("inf")
        denom = np.maximum(np.abs(want), 1e-30)
        max_rel = float(np.nanmax(err / denom)) if np.isfinite(err).any() else float("inf")
    if n_bad:
        idx = np.unravel_index(int(np.argmax(np.where(bad, 1, 0))), bad.shape)
        never = int(np.isnan(got).sum()) if got.dtype.kind == "f" else 0
        reason = (f"{n_bad} of {bad.size} elements out of tolerance; first at (batch, row, col) = {tuple(map(int, idx))}:"
                  f" got {got[idx]!r}, want {want[idx]!r} (allowed {ref.low[idx]!r} .. {ref.high[idx]!r})"
                  + (f"; {never} elements never written" if never else ""))
        return Verdict(False, max_abs, max_rel, n_bad, reason)
    return Verdict(True, max_abs, max_rel, 0, None)
