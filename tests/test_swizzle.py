"""Work-group swizzle (``tile.swizzle``): the remapping is a bijection on ragged grids, the kernel prints the
formula the tests evaluate, swizzled kernels verify on the device (with split K too) and build for pvc and
dg2, and the tuner's space and static model know the axis."""

from __future__ import annotations

import pytest
from conftest import break_kernel, one_variant

from xegemm.config import ConfigError, SearchSpace, config_from_text
from xegemm.lowering import Lowering
from xegemm.jobs.pipeline import run_variant
from xegemm.plan.planner import plan
from xegemm.kernel.render import render_kernel
from xegemm.plan.swizzle import c_lines, tile_of
from xegemm.tune.model import Machine, memory_traffic, predict
from xegemm.config.shapes import Shape
from xegemm.tune.space import TuneSpace
from xegemm.tune.strategies import model_order

FAST = "profile: {warmup: 1, repeats: 2}\n"
RAGGED = "problem: {m: 200, n: 136, k: 72, batch: 2}\n"     # 7 x 5 tiles of 32x32, the last of each ragged


def _tile(swizzle: int, split: int = 1, sg: int = 16) -> str:
    return (f"tile: {{workgroup: [32, 32, 32], subgroups: [{2 if sg == 8 else 1}, 2], subgroup_size: {sg}, "
            f"swizzle: {swizzle}, split_k: {split}}}\n")


@pytest.mark.parametrize("nx, ny", [(1, 1), (5, 7), (7, 5), (3, 8), (1, 9), (9, 1), (4, 4)])
def test_the_remapping_is_a_bijection_on_ragged_grids(nx, ny):
    everything = sorted((m, n) for m in range(ny) for n in range(nx))
    for group in range(1, ny + 3):
        tiles = [tile_of(gx, gy, nx, ny, group) for gy in range(ny) for gx in range(nx)]
        assert sorted(tiles) == everything, (nx, ny, group)
    assert [tile_of(gx, gy, nx, ny, 1) for gy in range(ny) for gx in range(nx)] == everything   # today's order


def test_a_group_walks_its_rows_column_major():
    # 3 tile columns, 5 tile rows, groups of 2 rows: (0,0) (1,0) (0,1) (1,1) ..., the last group has one row
    order = [tile_of(wg % 3, wg // 3, 3, 5, 2) for wg in range(15)]
    assert order[:6] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    assert order[12:] == [(4, 0), (4, 1), (4, 2)]


def test_the_kernel_prints_the_formula_and_the_name_says_so():
    swizzled = plan(config_from_text(RAGGED + _tile(3)))
    source = render_kernel(swizzled, Lowering("portable"))
    assert swizzled.name.endswith("_swz3")
    for line in c_lines(3):
        assert line in source
    assert "const int m0 = tile_m * 32" in source
    plain = plan(config_from_text(RAGGED + _tile(1)))
    assert "_swz" not in plain.name and "tile_m" not in render_kernel(plain, Lowering("portable"))


def test_a_swizzle_below_one_is_a_config_error():
    with pytest.raises(ConfigError, match="tile.swizzle"):
        config_from_text(RAGGED + _tile(0))


@pytest.mark.device
@pytest.mark.parametrize("case", ["swizzle3", "swizzle4_split2", "sg8_swizzle2"])
def test_swizzled_kernels_verify_on_a_ragged_batched_problem(case, session):
    text = {"swizzle3": _tile(3), "swizzle4_split2": _tile(4, split=2), "sg8_swizzle2": _tile(2, sg=8)}[case]
    res = run_variant(one_variant(RAGGED + text + FAST), session)
    assert res.status == "ok", res.reason
    assert res.bad_elements == 0


@pytest.mark.device
def test_a_wrong_remapping_fails_verification(session, monkeypatch):
    # every group as if it had G rows: the last, shorter group computes tiles past M and skips some
    break_kernel(monkeypatch, "const int rows = min(ny - first_m, 3);", "const int rows = 3;")
    res = run_variant(one_variant(RAGGED + _tile(3) + FAST), session)
    assert res.status == "failed_verify", res.reason


@pytest.mark.ocloc
@pytest.mark.parametrize("target, sg", [("pvc", 16), ("dg2", 8)])
def test_swizzled_split_kernels_build_natively(target, sg, tmp_path):
    from xegemm.jobs.pipeline import build_config
    path = tmp_path / "swizzle.yaml"
    path.write_text("problem: {m: 256, n: 192, k: 512, batch: 2}\n" + _tile(4, split=2, sg=sg))
    (v,) = build_config(path, target=target, out_dir=tmp_path / "out")["variants"]
    assert v["status"] == "ok", v["reason"]
    assert v["isa"]["spill_bytes"] == 0 and v["isa"]["dpas"] == v["predicted"]["dpas"]


SWEEP = """\
problem: {m: 2048, n: 2048, k: 2048}
tile: {workgroup: [64, 64, 32], subgroups: [2, 2], subgroup_size: 16}
sweep:
  tile.swizzle: [1, 2, 4, 8]
"""


def test_the_tuning_space_has_the_swizzle_axis():
    config = config_from_text(SWEEP)
    assert SearchSpace(config).axes == {"tile.swizzle": (1, 2, 4, 8)}
    space = TuneSpace(config, Shape(2048, 2048, 2048), Lowering("portable"))
    assert space.grid() == {"tile.swizzle": [1, 2, 4, 8]}
    assert space.candidate({"tile.swizzle": 4}).planned.name.endswith("_swz4")


def test_the_model_prefers_the_swizzle_that_keeps_the_panels_in_cache():
    config = config_from_text(SWEEP)
    space = TuneSpace(config, Shape(2048, 2048, 2048), Lowering("portable"))
    two_mib = Machine(compute_units=2, cache_bytes=2 << 20)
    # 64-row A panels of 2048 bf16 are 256 KiB: four of them and a B panel fit in 2 MiB; eight do not, and then every tile fetches its A panel again
    assert [p["tile.swizzle"] for p in model_order(space, two_mib)] == [4, 2, 1, 8]
    plans = {g: space.candidate({"tile.swizzle": g}).planned.plan for g in (1, 4)}
    assert memory_traffic(plans[4], 2 << 20) < memory_traffic(plans[1], 2 << 20) / 3
    # a cache that holds all of B: the order no longer matters
    huge = Machine(compute_units=2, cache_bytes=64 << 20)
    assert predict(plans[1], huge).locality == pytest.approx(predict(plans[4], huge).locality)
