"""The device-side problem table of a grouped launch: one row of int64 fields per group (docs/grouped.md).

Row g holds, in this order (``FIELDS``): M, N, K; the group's tile counts along M and N (a formula, TILES,
the same text the kernel would print); ``tile_begin``, the exclusive prefix sum of the groups' tile counts
(the persistent scheduler searches it, xegemm.grouped.schedule); the element offsets of the group's A, B and
D in their operand buffers; the pitches (leading dimensions) of A, B and D in elements; and the offset of the
group's bias vector in one f32 buffer (the groups' vectors one after another: M_g values each for a bias per
row, N_g for one per column; 0 without a bias).  The table is
``groups x len(FIELDS)`` int64, row-major: field f of group g is ``table[g * FIELDS + f]``.

Sub-byte operands (4-bit) hold two elements per byte: a group's element offset must be even or its base
pointer would fall inside a byte and the packed pointer truncates silently (sycl-tla CHANGELOG 0.9.1,
https://github.com/intel/sycl-tla/pull/790); :func:`problem_table` refuses such a table and names the group.
"""

from __future__ import annotations

from itertools import accumulate

import numpy as np

from xegemm.library.formula import evaluate
from xegemm.grouped.problem import GroupedProblem, GroupedProblemError

FIELDS = ("m", "n", "k", "tiles_m", "tiles_n", "tile_begin", "a_offset", "b_offset", "c_offset",
          "lda", "ldb", "ldc", "bias_offset")
FIELD = {name: index for index, name in enumerate(FIELDS)}
# (name, expression) over a group's M, N and the work-group tile BM x BN: raster along N within a group
TILES = (("tiles_m", "(M + BM - 1) / BM"), ("tiles_n", "(N + BN - 1) / BN"), ("tiles", "tiles_m * tiles_n"))
MAX_TILES = 2**31 - 1          # the scheduler's tile index is a C int (and atomic_inc's counter)


def _sizes(problem: GroupedProblem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The groups' M, N and K as int64 arrays."""
    mnk = np.array([(g.m, g.n, g.k) for g in problem.groups], np.int64).reshape(-1, 3)
    return mnk[:, 0], mnk[:, 1], mnk[:, 2]


def tile_counts(problem: GroupedProblem, workgroup) -> dict[str, np.ndarray]:
    """Per group (arrays): tiles_m, tiles_n, tiles (0 for an empty group), by the TILES formula evaluated on
    every group at once (linear in the groups)."""
    m, n, _ = _sizes(problem)
    return evaluate(TILES, {"M": m, "N": n, "BM": int(workgroup[0]), "BN": int(workgroup[1])})


def group_tiles(problem: GroupedProblem, workgroup) -> list[dict[str, int]]:
    """Per group: tiles_m, tiles_n, tiles (0 for an empty group), by the TILES formula."""
    counts = tile_counts(problem, workgroup)
    return [{"tiles_m": int(tm), "tiles_n": int(tn), "tiles": int(t)}
            for tm, tn, t in zip(counts["tiles_m"], counts["tiles_n"], counts["tiles"])]


def tile_begins(problem: GroupedProblem, workgroup) -> list[int]:
    """The exclusive prefix sum of the groups' tile counts, length groups + 1 (the last: all tiles)."""
    return [0, *np.cumsum(tile_counts(problem, workgroup)["tiles"]).tolist()]


def _aligned(offset, bits: int, align_bytes: int):
    per = align_bytes * 8 // bits if bits < 8 * align_bytes else 1
    return -(-offset // per) * per


def packed_offsets(problem: GroupedProblem, bits: tuple[int, int, int], align_bytes: int = 64) -> np.ndarray:
    """Element offsets (groups x 3: A, B, D) of the groups' operands packed one after another in one buffer
    each, every group's start rounded up to ``align_bytes`` (a 2D block load's base must be 64-byte aligned,
    docs/grouped.md); MoE: A and D rows at the expert's row offset, B at e x K x N (no padding).  A running sum:
    as every start is aligned, a group starts at the sum of the aligned sizes before it."""
    m, n, k = _sizes(problem)
    if problem.experts:
        rows = np.concatenate([[0], np.cumsum(m)[:-1]])
        return np.stack([rows * k, np.arange(len(m), dtype=np.int64) * k * n, rows * n], axis=1)
    counts = (m * k, k * n, m * n)
    columns = [np.concatenate([[0], np.cumsum(_aligned(c, b, align_bytes))[:-1]]) for c, b in zip(counts, bits)]
    return np.stack(columns, axis=1).astype(np.int64)


def bias_offsets(problem: GroupedProblem, bias: str) -> list[int]:
    """Each group's offset in the f32 bias buffer (``bias``: none, row (M_g values) or col (N_g values)), and
    the buffer's length last (MoE: per row at the expert's row offset, per column at e x N)."""
    sizes = [0 if bias == "none" else g.m if bias == "row" else g.n for g in problem.groups]
    return [0, *accumulate(sizes)]          # a running sum: linear in the groups


def problem_table(problem: GroupedProblem, workgroup, bits: tuple[int, int, int],
                  layouts: tuple[str, str, str] = ("row", "row", "row"), offsets: np.ndarray | None = None,
                  align_bytes: int = 64, bias: str = "none") -> np.ndarray:
    """The table (groups x FIELDS, int64) for a work-group tile [BM, BN, ...], the operands' element bits
    (A, B, D), their layouts (``row``/``col``; MoE B ``col`` is E x N x K), element offsets (default:
    :func:`packed_offsets`) and the epilogue's bias kind (:func:`bias_offsets`).  Raises GroupedProblemError for a sub-byte offset that is not byte-aligned or more
    tiles than a C int counts."""
    offsets = packed_offsets(problem, bits, align_bytes) if offsets is None else np.asarray(offsets, np.int64)
    if offsets.shape != (len(problem.groups), 3):
        raise GroupedProblemError(f"offsets must be groups x 3 (A, B, D), found shape {offsets.shape}")
    counts = tile_counts(problem, workgroup)
    begins = np.concatenate([[0], np.cumsum(counts["tiles"])])
    if begins[-1] > MAX_TILES:
        raise GroupedProblemError(f"{problem.label} has {begins[-1]} tiles of {workgroup[0]}x{workgroup[1]}; the "
                                  f"scheduler counts at most {MAX_TILES}: choose a larger work-group tile")
    m, n, k = _sizes(problem)
    for operand, (name, b) in enumerate(zip("ABD", bits)):
        inside = np.flatnonzero((offsets[:, operand] * b) % 8) if b < 8 else ()
        if len(inside):
            index = int(inside[0])
            raise GroupedProblemError(
                f"group {index} ({problem.groups[index].label}): {name} starts at element "
                f"{int(offsets[index, operand])}, inside a byte of {b}-bit elements; sub-byte operands need "
                "byte-aligned groups (an even element count before each group, e.g. even M*K or N*K)")
    pitches = [k if layouts[0] == "row" else m, n if layouts[1] == "row" else k, n if layouts[2] == "row" else m]
    table = np.stack([m, n, k, counts["tiles_m"], counts["tiles_n"], begins[:-1], offsets[:, 0], offsets[:, 1],
                      offsets[:, 2], *pitches, np.asarray(bias_offsets(problem, bias)[:-1], np.int64)],
                     axis=1).astype(np.int64)
    return table
