"""The portable GEMM k-step composes DPAS atoms for the CPU (operands staged through local memory, one scalar
accumulator per row and lane: xegemm.lowering.portable.StagedKstep).  It must compute exactly what calling
each DPAS atom's portable function in turn computes (the composition the native lowering spells with the
builtin, and the atom functions tests/test_mma_portable_device.py checks against numpy): for every variant
of the shipped configs, on a ragged batched problem, both kernels verify and their C is the same bit for bit.
The staged kernel is built as production builds it; the atom-by-atom one without optimisation (0.2 s instead of
5 s for the large tiles), the most literal reading of the atoms' code.
"""

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import run_portable

from xegemm.config import config_from_text, load_config
from xegemm.config.schema import Moe, Problem
from xegemm.evaluate import plan_variants
from xegemm.lowering.portable import RolledBlocks, register_blocks, staged_kstep
from xegemm.plan.planner import PlanRejected, plan

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


def _ragged(config):
    """The variant's config on a problem that is not a multiple of its tile: edges in M, N and K, batch 2
    (split K: at most as many slices as the 3 k-tiles)."""
    bm, bn, bk = config.tile.workgroup
    tile = dataclasses.replace(config.tile, split_k=min(config.tile.split_k, 3))
    packed = config.quant.format != "none"     # a quantized B's packing: N and K multiples of 8 (GPTQ, AWQ)
    return dataclasses.replace(config, problem=Problem(m=bm + 24 + 3, n=bn + 16 + (8 if packed else 5),
                                                       k=2 * bk + (8 if packed else 7), batch=2), tile=tile)


def _main_loop(name: str) -> str:
    """A kernel name without what the staged k-step does not touch: the prefetch distance (nothing in the
    portable lowering), C's type and store atom, the epilogue and split K (the same code after the loop in
    both kernels; their own tests verify them: test_epilogue.py, test_split_k.py), how many sub-groups share
    the work-group (the GEMM tests verify every shipped tile), and integer signedness."""
    loop = re.sub(r"_pf\d+", "", name[: name.index("_grf") + len("_grf") + 3])
    loop = re.sub(r"^(xegemm_[^_]+_[^_]+_[^_]+)_[^_]+_", r"\1_", loop)          # C's type
    loop = re.sub(r"_c[a-z]+\d+x\d+x\d+[a-z0-9]*(?=_)", "", loop)              # C's store atom
    # the work-group tile: one sub-group's k-step is the same whatever the number of sub-groups beside it
    loop = re.sub(r"_(\d+)x(\d+)x(\d+)_sg(\d+)x(\d+)_",
                  lambda t: f"_sub{int(t[1]) // int(t[4])}x{int(t[2]) // int(t[5])}x{t[3]}_", loop)
    return re.sub(r"[su](4|8)_[su](4|8)_", r"x\1_x\2_", loop)   # signedness: only the decode (test_types.py)


def _variants():
    """One per distinct portable main loop of the shipped configs (an MoE layer's k-step is the single GEMM's:
    its experts verify in tests/test_grouped_*.py, and its rows per expert do not fit the ragged problem)."""
    seen = {}
    for path in CONFIGS:
        for pv in plan_variants(load_config(path)):
            if pv.plan is not None and pv.config.moe == Moe():
                seen.setdefault(_main_loop(pv.name), pv)
    return [pytest.param(_ragged(pv.config), id=key) for key, pv in seen.items()]


# every DPAS type family, padded M, column-major B and SIMD8 (dg2) atoms, each on a ragged problem
TYPED = {
    "f16_acc_f16": "types: {a: f16, b: f16, acc: f16, c: f16}\ntile: {workgroup: [32, 32, 32], subgroups: [1, 2]}",
    "bf16_acc_bf16": "types: {a: bf16, b: bf16, acc: bf16, c: bf16}\ntile: {workgroup: [32, 32, 32], subgroups: [1, 2]}",
    "s8_u8_s32": "types: {a: s8, b: u8, acc: s32, c: s32}\ntile: {workgroup: [32, 32, 64], subgroups: [1, 2]}",
    "tf32": "types: {a: tf32, b: tf32, acc: f32, c: f32}\ntile: {workgroup: [32, 32, 16], subgroups: [2, 1]}",
    "bf16_mma_m4_col_b": "layout: {b: col}\ntile: {workgroup: [4, 32, 16], subgroups: [1, 2]}",
    "simd8_u8_mma_m4": "types: {a: u8, b: u8, acc: s32, c: s32}\n"
                       "tile: {workgroup: [4, 16, 32], subgroups: [1, 2], subgroup_size: 8}",
    "simd8_f16": "types: {a: f16, b: f16}\ntile: {workgroup: [16, 16, 16], subgroups: [1, 2], subgroup_size: 8}",
    # register blocks that cut across fragments (3 of 8 rows) and a half-precision accumulator's rounding
    "register_block_3x1": "tile: {workgroup: [32, 64, 32], subgroups: [1, 2], register_block: [3, 1]}",
    # blocks run by a loop (lowering.portable.RolledBlocks) across the N-fragments too
    "rolled_register_block_4x1": "tile: {workgroup: [32, 64, 32], subgroups: [1, 2], register_block: [4, 1]}",
    "f16_acc_f16_register_block_8x1": "types: {a: f16, b: f16, acc: f16, c: f16}\n"
                                      "tile: {workgroup: [16, 64, 32], subgroups: [1, 2], register_block: [8, 1]}",
    "simd8_s8_register_block_2x2": "types: {a: s8, b: s8, acc: s32, c: s32}\n"
                                   "tile: {workgroup: [16, 32, 32], subgroups: [1, 2], subgroup_size: 8, "
                                   "register_block: [2, 2]}",
}
VARIANTS = _variants() + [pytest.param(_ragged(config_from_text(f"problem: {{m: 8, n: 8, k: 8}}\n{text}\n")), id=name)
                          for name, text in TYPED.items()]





@pytest.mark.parametrize("config", VARIANTS)
def test_staged_kstep_is_bit_identical_to_atom_calls(config, session):
    p = plan(config)
    staged, atoms = run_portable(session, p, True), run_portable(session, p, False)
    assert np.array_equal(staged, atoms), f"{p.name}: {np.count_nonzero(staged != atoms)} bytes differ"


def test_every_shipped_config_is_covered():
    ids = [v.id for v in VARIANTS]
    for path in CONFIGS:
        assert any(pv.plan is not None and _main_loop(pv.name) in ids
                   for pv in plan_variants(load_config(path))), path


def test_register_blocks_cover_every_accumulator_once():
    blocks = register_blocks(8, 4, 2, (3, 1))        # 32 rows x 2 fragments in blocks of 3 rows x 1 fragment
    cells = [(i, r, j) for rows, frags in blocks for i, r in rows for j in frags]
    assert sorted(cells) == [(i, r, j) for i in range(4) for r in range(8) for j in range(2)]
    assert blocks[0] == (((0, 0), (0, 1), (0, 2)), (0,)) and blocks[-1] == (((3, 6), (3, 7)), (1,))
    assert register_blocks(8, 2, 2, (16, 2)) == ((tuple((g // 8, g % 8) for g in range(16)), (0, 1)),)


def _rolled(types: str, tile: str):
    return staged_kstep(plan(config_from_text(f"problem: {{m: 64, n: 64, k: 64}}\n{types}\ntile: {tile}\n")),
                        True).rolled


def test_which_register_blocks_run_as_a_loop():
    f32 = "types: {a: bf16, b: bf16, acc: f32, c: f32}"
    # the default: 8 accumulators, 4 rows x 2 fragments, or 8 rows where the tile is one fragment wide
    assert _rolled(f32, "{workgroup: [32, 64, 32], subgroups: [1, 2]}") == RolledBlocks(4, 2, 8, 1, 32 * 2 * 16)
    assert _rolled(f32, "{workgroup: [32, 32, 32], subgroups: [1, 2]}") == RolledBlocks(8, 1, 4, 1, 32 * 16)
    assert _rolled(f32, "{workgroup: [32, 64, 32], subgroups: [1, 2], register_block: [4, 1]}") == \
        RolledBlocks(4, 1, 8, 2, 32 * 2 * 16)
    # printed one by one: blocks of uneven size, one block, an accumulator rounded after each chunk
    assert _rolled(f32, "{workgroup: [32, 64, 32], subgroups: [1, 2], register_block: [3, 1]}") is None
    assert _rolled(f32, "{workgroup: [32, 64, 32], subgroups: [1, 2], register_block: [32, 2]}") is None
    assert _rolled("types: {a: f16, b: f16, acc: f16, c: f16}", "{workgroup: [32, 64, 32], subgroups: [1, 2]}") is None
    # and a work-group whose stage and accumulators would take more local memory than ROLLED_LOCAL_BYTES
    assert _rolled(f32, "{workgroup: [256, 256, 32], subgroups: [8, 4]}") is None


def test_register_block_larger_than_the_subgroup_tile_is_rejected():
    config = config_from_text("problem: {m: 64, n: 64, k: 64}\n"
                              "tile: {workgroup: [32, 64, 32], subgroups: [1, 2], register_block: [8, 3]}\n")
    with pytest.raises(PlanRejected, match=r"register_block \[8, 3\] exceeds the sub-group tile's 32 rows x 2 N"):
        plan(config)
