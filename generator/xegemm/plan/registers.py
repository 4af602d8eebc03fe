"""The register model: GRFs per thread a plan's native k-step needs, and its verdict against the budget.

Fitted to what Debian's IGC allocates (docs/registers.md); its calibration tool is
:mod:`xegemm.evaluate.spills`, which builds drawn plans with ocloc and records the ISA's spills in
tests/data/register_spills.tsv (tests/test_registers.py keeps the bands below equal to that table).  The
planner (:func:`xegemm.plan.planner.plan`) asks :func:`register_estimate` and :func:`register_verdict` and rejects a
plan whose verdict is "spills".
"""

from __future__ import annotations

import math

from xegemm.plan.operands import reorder_cost
from xegemm.library.targets import targets_at

# The register estimate (:func:`register_estimate`), fitted to what Debian's IGC allocates for the native k-step
# on pvc (docs/registers.md; the measured table is tests/data/register_spills.tsv):
RESERVED_GRF = {128: 20, 256: 18}   # by GRF mode: kernel arguments, loop counters, addresses beside the tiles
SUBGROUPS_GRF = 8                   # more reserved when a work-group has several sub-groups (their positions)
NEXT_CHUNK_SHARE = 8                # 1/8 of the copy tiles the next k-chunk adds are live early (hoisted loads)
PREFETCH_GRF = 2                    # per 2D block copy tile of a k-step, when prefetching: the prefetch's addresses
# Where the estimate cannot tell: IGC's allocation is not monotonic in the tile, so builds estimated alike spill
# or not.  By DPAS width (16: pvc, 8: dg2), GRF mode and DPAS k-chunks per k-step (the largest key takes more), the
# band (FITS, MAY) of estimate minus budget: up to FITS a plan "fits" (below every measured build that spilled),
# up to MAY it "may spill" (MAY: the largest excess of a measured build without spills, at least 0) and is kept
# for the ISA to decide; beyond MAY every measured build spilled and the plan is rejected.  Fitted to
# tests/data/register_spills.tsv (tests/test_registers.py keeps them equal to it): pvc by 1, 2, 3+ k-chunks, all
# at FITS 0; dg2 with its own rows (fewer, one group), where builds estimated up to 80 GRF under the budget spilled.
MAY_SPILL_GRF = {16: {128: {1: (0, 14), 2: (0, 23), 3: (0, 34)}, 256: {1: (0, 10), 2: (0, 23), 3: (0, 60)}},
                 8: {128: {1: (-16, 0)}, 256: {1: (-81, 69)}}}
REGISTER_VERDICTS = ("fits", "may spill", "spills")     # the estimate's word on a plan, docs/registers.md


def grf_bytes(simd: int) -> int:
    """Register width of the targets whose DPAS runs at ``simd`` (xegemm.library.targets: 64 B at 16, 32 B at 8)."""
    (width,) = {t.grf_bytes for t in targets_at(simd)}
    return width


def may_spill_band(simd: int, budget: int, chunks: int) -> tuple[int, int]:
    """(FITS, MAY): how far from ``budget`` an estimate still fits / may spill, at DPAS width ``simd`` with
    ``chunks`` DPAS k-chunks per k-step (:data:`MAY_SPILL_GRF`)."""
    modes = MAY_SPILL_GRF[simd]
    bands = modes.get(budget, modes[256])
    return bands[min(chunks, max(bands))]


def chunk_group(simd: int, budget: int, chunks: int) -> str:
    """The k-chunk group whose band :func:`may_spill_band` takes, in words ("2 k-chunks", "3 or more k-chunks")."""
    modes = MAY_SPILL_GRF[simd]
    keys = sorted(modes.get(budget, modes[256]))
    group = min(chunks, keys[-1])
    if len(keys) == 1:
        return "any number of k-chunks"
    if group == keys[-1]:
        return f"{group} or more k-chunks"
    return f"{group} k-chunk{'s' if group > 1 else ''}"


def register_verdict(total: int, budget: int, chunks: int, simd: int) -> str:
    """"fits", "may spill" or "spills": where ``total - budget`` lies against :func:`may_spill_band`."""
    fits, may = may_spill_band(simd, budget, chunks)
    return REGISTER_VERDICTS[0 if total - budget <= fits else 1 if total - budget <= may else 2]


def register_estimate(config, mma, a_plan, b_plan, sgm, sgn) -> dict:
    """GRFs per thread of the native k-step, as Debian's IGC allocates them on pvc (fitted to the ISA's spills,
    docs/registers.md): accumulators; for A and B, the copy tiles one DPAS k-chunk reads (the k-step loads
    each tile just before its first chunk; the last chunk reading it frees it) plus an eighth of those the
    next chunk adds (loads the scheduler hoists); the address state of each 2D block tile's prefetch; reorder
    temporaries (one A fragment, or a k-chunk's B fragments, built before their DPAS; twice that for a
    cross-lane gather, which on dg2's 1D block tiles is built for every fragment of the k-step at once); and
    the registers kept beside them (more with several sub-groups per work-group).  On dg2 the same terms with
    32-byte GRFs tell its spills poorly (its rows in tests/data/register_spills.tsv), hence its own, wider
    band in :data:`MAY_SPILL_GRF`.
    """
    lanes, width = config.tile.subgroup_size, grf_bytes(mma.n)
    grf = lambda nbytes: -(-nbytes // width)  # noqa: E731
    acc = grf(sgm * sgn * mma.d_type.bits // 8)
    live = {}
    for op in (a_plan, b_plan):
        tile = grf(op.atom.register_bytes * lanes)
        one, two = op.live_tiles(1), op.live_tiles(2)
        live[op.operand] = tile * one + -(-tile * (two - one) // NEXT_CHUNK_SHARE)
    # 2D block tiles only: dg2's 1D block prefetches carry no per-tile address payload (its rows fit without it)
    block2d = a_plan.atom.block2d
    prefetch = PREFETCH_GRF * (a_plan.per_kstep + b_plan.per_kstep) if config.pipeline.prefetch and block2d else 0
    reorder = 0
    grid_m, grid_n, chunks = sgm // mma.m, sgn // mma.n, config.tile.workgroup[2] // mma.k
    for op, fragments, kstep in ((a_plan, 1, grid_m * chunks), (b_plan, grid_n, grid_n * chunks)):
        cost = reorder_cost(op.fragments)
        if cost:
            # dg2: IGC builds every cross-lane gather of the k-step before its first DPAS (measured)
            built = kstep if cost == 2 and not block2d else fragments
            reorder += cost * built * grf(mma.register_bytes(op.operand) * lanes)
    reserved = RESERVED_GRF[config.target.grf] + (SUBGROUPS_GRF if math.prod(config.tile.subgroups) > 1 else 0)
    total = acc + live["a"] + live["b"] + prefetch + reorder + reserved
    return {"acc_grf": acc, "a_grf": live["a"], "b_grf": live["b"], "prefetch_grf": prefetch, "reorder_grf": reorder,
            "reserved_grf": reserved, "total_grf": total, "budget_grf": config.target.grf}
