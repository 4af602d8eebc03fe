"""``tile.register_block``: the portable k loop run once per block of accumulators, so that a CPU can keep the
block in vector registers.  The results stay bit for bit those of the atom-by-atom kernel
(tests/test_portable_staged.py runs blocked variants); here: the name, the tuning axis, the planner's
rejection, and the CPU code path the runtime generates (xegemm.runtime.cpu_path), which decides what fits."""

from xegemm.config import SearchSpace, config_from_text
from xegemm.lowering import Lowering
from xegemm.evaluate import params_of
from xegemm.evaluate.timing import conditions
from xegemm.reporting.model import Group
from xegemm.library.record import Evaluation, tile_label
from xegemm.runtime.cpu_path import PATHS, cpu_code_path
from xegemm.config.shapes import Shape
from xegemm.tune.space import TuneSpace

SWEEP = """
problem: {m: 1024, n: 1024, k: 1024}
tile: {workgroup: [32, 64, 32], subgroups: [1, 2]}
sweep:
  tile.register_block: [[0, 0], [8, 2], [4, 2], [2, 2], [8, 4]]
"""


def test_the_code_path_follows_the_runtime_setting_then_the_host():
    assert cpu_code_path({"CL_CONFIG_CPU_TARGET_ARCH": "core-avx2"}, {"avx512f", "avx2"}) == PATHS["avx2"]
    assert cpu_code_path({"CL_CONFIG_CPU_TARGET_ARCH": "skx"}, {"avx2"}) == PATHS["avx512"]
    assert cpu_code_path({}, {"avx512f", "avx2"}) == PATHS["avx512"]
    assert cpu_code_path({}, {"avx", "avx2"}) == PATHS["avx2"]
    assert cpu_code_path({"CL_CONFIG_CPU_TARGET_ARCH": "unknown"}, {"sse4_2"}) == PATHS["sse4.2"]
    assert conditions()["cpu_code_path"] == cpu_code_path().name


def test_the_name_says_the_block_and_the_default_adds_nothing():
    space = TuneSpace(config_from_text(SWEEP), Shape(1024, 1024, 1024), Lowering("portable"))
    assert space.candidate({"tile.register_block": "4x2"}).planned.name.endswith("_rb4x2")
    assert "_rb" not in space.candidate({"tile.register_block": "0x0"}).planned.name
    assert SearchSpace(config_from_text(SWEEP)).axes["tile.register_block"][1] == (8, 2)
    assert space.candidate({"tile.register_block": "0x0"}).planned.plan.register_block == (32, 2)


def test_a_block_beyond_the_tile_is_pruned_with_the_reason():
    space = TuneSpace(config_from_text(SWEEP), Shape(1024, 1024, 1024), Lowering("portable"))
    assert "exceeds the sub-group tile's 32 rows x 2 N-fragments" in space.candidate(
        {"tile.register_block": "8x4"}).reason


def test_reports_tell_register_blocks_apart():
    space = TuneSpace(config_from_text(SWEEP), Shape(1024, 1024, 1024), Lowering("portable"))
    blocked = params_of(space.candidate({"tile.register_block": "4x2"}).planned.config)
    whole = params_of(space.candidate({"tile.register_block": "0x0"}).planned.config)
    assert (blocked["register_block"], whole["register_block"]) == ("4x2", "all")
    assert tile_label(blocked).endswith("rb4x2") and "rb" not in tile_label(whole)
    axes = dict(Group(("r",), variants=[Evaluation("k", "ok", None, p, gflops=g)
                                        for p, g in ((blocked, 2.0), (whole, 1.0))]).swept_axes())
    assert axes["register block"] == ["4x2", "all"]
