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

import numpy as np

from xegemm.library.formula import evaluate
from xegemm.grouped.problem import GroupedProblem, GroupedProblemError

FIELDS = ("m", "n", "k", "tiles_m", "tiles_n", "tile_begin", "a_offset", "b_offset", "c_offset",
          "lda", "ldb", "ldc", "bias_offset")
FIELD = {name: index for index, name in enumerate(FIELDS)}
# (name, expression) over a group's M, N and the work-group tile BM x BN: raster along N within a group
TILES = (("tiles_m", "(M + BM - 1) / BM"), ("tiles_n", "(N + BN - 1) / BN"), ("tiles", "tiles_m * tiles_n"))
MAX_TILES = 2**31 - 1          # the scheduler's tile index is a C int (and atomic_inc's counter)


def group_tiles(problem: GroupedProblem, workgroup) -> list[dict[str, int]]:
    """Per group: tiles_m, tiles_n, tiles (0 for an empty group), by the TILES formula."""
    bm, bn = workgroup[0], workgroup[1]
    return [evaluate(TILES, {"M": g.m, "N": g.n, "BM": bm, "BN": bn}) for g in problem.groups]


def tile_begins(problem: GroupedProblem, workgroup) -> list[int]:
    """The exclusive prefix sum of the groups' tile counts, length groups + 1 (the last: all tiles)."""
    begins = [0]
    for counts in group_tiles(problem, workgroup):
        begins.append(begins[-1] + counts["tiles"])
    return begins


def _aligned(offset: int, bits: int, align_bytes: int) -> int:
    per = align_bytes * 8 // bits if bits < 8 * align_bytes else 1
    return -(-offset // per) * per


def packed_offsets(problem: GroupedProblem, bits: tuple[int, int, int], align_bytes: int = 64) -> np.ndarray:
    """Element offsets (groups x 3: A, B, D) of the groups' operands packed one after another in one buffer
    each, every group's start rounded up to ``align_bytes`` (a 2D block load's base must be 64-byte aligned,
    docs/grouped.md); MoE: A and D rows at the expert's row offset, B at e x K x N (no padding)."""
    offsets = np.zeros((len(problem.groups), 3), np.int64)
    if problem.experts:
        rows = problem.row_offsets
        for e, g in enumerate(problem.groups):
            offsets[e] = (rows[e] * g.k, e * g.k * g.n, rows[e] * g.n)
        return offsets
    ends = [0, 0, 0]
    for index, g in enumerate(problem.groups):
        for operand, (count, b) in enumerate(zip((g.m * g.k, g.k * g.n, g.m * g.n), bits)):
            offsets[index, operand] = _aligned(ends[operand], b, align_bytes)
            ends[operand] = int(offsets[index, operand]) + count
    return offsets


def bias_offsets(problem: GroupedProblem, bias: str) -> list[int]:
    """Each group's offset in the f32 bias buffer (``bias``: none, row (M_g values) or col (N_g values)), and
    the buffer's length last (MoE: per row at the expert's row offset, per column at e x N)."""
    sizes = [0 if bias == "none" else g.m if bias == "row" else g.n for g in problem.groups]
    return [sum(sizes[:g]) for g in range(len(sizes) + 1)]


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
    begins = tile_begins(problem, workgroup)
    if begins[-1] > MAX_TILES:
        raise GroupedProblemError(f"{problem.label} has {begins[-1]} tiles of {workgroup[0]}x{workgroup[1]}; the "
                                  f"scheduler counts at most {MAX_TILES}: choose a larger work-group tile")
    table = np.zeros((len(problem.groups), len(FIELDS)), np.int64)
    biases = bias_offsets(problem, bias)
    for index, (g, counts) in enumerate(zip(problem.groups, group_tiles(problem, workgroup))):
        for operand, (name, b) in enumerate(zip("ABD", bits)):
            if b < 8 and (int(offsets[index, operand]) * b) % 8:
                raise GroupedProblemError(
                    f"group {index} ({g.label}): {name} starts at element {int(offsets[index, operand])}, inside a "
                    f"byte of {b}-bit elements; sub-byte operands need byte-aligned groups (an even element "
                    "count before each group, e.g. even M*K or N*K)")
        pitches = (g.k if layouts[0] == "row" else g.m, g.n if layouts[1] == "row" else g.k,
                   g.n if layouts[2] == "row" else g.m)
        table[index] = (g.m, g.n, g.k, counts["tiles_m"], counts["tiles_n"], begins[index], *offsets[index],
                        *pitches, biases[index])
    return table
