"""``tile.register_block``: the portable k loop run once per block of accumulators, so that a CPU keeps the
block in vector registers.  The results stay bit for bit those of the atom-by-atom kernel
(tests/test_portable_staged.py runs blocked variants); here: the name, the tuning axis, and the static model's
registers factor on both CPU code paths (xegemm.runtime.cpu_path)."""

import pytest

from xegemm.config import SearchSpace, config_from_text
from xegemm.lowering import Lowering
from xegemm.plan import plan
from xegemm.runtime.cpu_path import PATHS, cpu_code_path
from xegemm.tune.model import Machine, predict, register_block_fit
from xegemm.tune.shapes import Shape
from xegemm.tune.space import TuneSpace
from xegemm.tune.strategies import model_order

SWEEP = """
problem: {m: 1024, n: 1024, k: 1024}
tile: {workgroup: [32, 64, 32], subgroups: [1, 2]}
sweep:
  tile.register_block: [[0, 0], [8, 2], [4, 2], [2, 2], [1, 1]]
"""
AVX512 = Machine(2, 2 << 20, PATHS["avx512"].vector_registers, PATHS["avx512"].f32_lanes)
AVX2 = Machine(2, 2 << 20, PATHS["avx2"].vector_registers, PATHS["avx2"].f32_lanes)


def test_the_code_path_follows_the_runtime_setting_then_the_host():
    assert cpu_code_path({"CL_CONFIG_CPU_TARGET_ARCH": "core-avx2"}, {"avx512f", "avx2"}) == PATHS["avx2"]
    assert cpu_code_path({}, {"avx512f", "avx2"}) == PATHS["avx512"]
    assert cpu_code_path({}, {"avx", "avx2"}) == PATHS["avx2"]
    assert cpu_code_path({"CL_CONFIG_CPU_TARGET_ARCH": "unknown"}, {"sse4_2"}) == PATHS["sse4.2"]


def test_the_name_says_the_block_and_the_default_adds_nothing():
    space = TuneSpace(config_from_text(SWEEP), Shape(1024, 1024, 1024), Lowering("portable"))
    assert space.candidate({"tile.register_block": "[4,2]"}).planned.name.endswith("_rb4x2")
    assert "_rb" not in space.candidate({"tile.register_block": "[0,0]"}).planned.name
    assert SearchSpace(config_from_text(SWEEP)).axes["tile.register_block"][1] == (8, 2)


def test_the_model_keeps_the_block_in_the_code_paths_registers():
    space = TuneSpace(config_from_text(SWEEP), Shape(1024, 1024, 1024), Lowering("portable"))
    # AVX-512: 4x2 (8 accumulators + 2 B rows + 1 broadcast of 32 zmm) loads less per FMA than 2x2 and 1x1;
    # the whole 32x32 tile (64 accumulators) spills.  AVX2: a 16-lane vector is two ymm of 16, so 4x2 spills.
    best512 = model_order(space, AVX512)[0]["tile.register_block"]
    assert best512 in ("[8,2]", "[4,2]")
    assert model_order(space, AVX512)[-1]["tile.register_block"] in ("[0,0]", "[1,1]")
    assert model_order(space, AVX2)[0]["tile.register_block"] == "[2,2]"
    whole = plan(space.candidate({"tile.register_block": "[0,0]"}).planned.config)
    assert whole.register_block == (32, 2)
    assert register_block_fit(whole, AVX512) == pytest.approx(32 / (64 + 2 + 1))
    assert predict(whole, Machine(2, 2 << 20)).registers == 1.0       # a GPU: not modelled


def test_a_block_beyond_the_tile_is_pruned_with_the_reason():
    text = SWEEP.replace("[1, 1]]", "[1, 1], [8, 4]]")
    space = TuneSpace(config_from_text(text), Shape(1024, 1024, 1024), Lowering("portable"))
    assert "exceeds the sub-group tile's 32 rows x 2 N-fragments" in space.candidate(
        {"tile.register_block": "[8,4]"}).reason
