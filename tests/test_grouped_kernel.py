"""The grouped and MoE kernel (templates/grouped.cl.j2) on the CPU device: one launch computes every group from
the device problem table, verified group by group (xegemm.evaluate.grouped); broken kernels must fail and name
the failing group.  Few builds: each device kernel costs seconds on the CPU runtime."""

import re

import numpy as np
import pytest

from xegemm import evaluate
from xegemm.kernel.arguments import KernelCall
from xegemm.config import config_from_text
from xegemm.evaluate import Evaluator, plan_variants
from xegemm.evaluate.device import DeviceBuilder, VerifyObserver
from xegemm.kernel.grouped_launch import grouped_launch, persistent_workgroups
from xegemm.grouped.problem import GroupedProblem
from xegemm.plan.kernel_name import parse_kernel_name
from xegemm.lowering import Lowering

# ragged groups (M, N, K not multiples of the 8 x 16 x 16 tile, the smallest: the CPU runtime builds it
# fastest), an empty group, a 1 x 1 group, a group larger than the rest; 3 work-groups walk them (fewer than
# the tiles)
GROUPED = """\
problem:
  groups: [40x40x40, 0x32x32, 17x9x33, 1x1x8, 70x33x64]
types: {a: bf16, b: bf16, acc: f32, c: bf16}
tile: {workgroup: [8, 16, 16], subgroups: [1, 1], persistent: 3}
epilogue: {alpha: 0.5, beta: 1.0, bias: row, activation: relu}
"""
MOE = """\
problem: {m: 203, n: 72, k: 48}
moe: {experts: 8, rows: [0, 70, 3, 0, 0, 129, 1, 0]}
types: {a: f16, b: f16, acc: f32, c: f16}
layout: {b: col}
tile: {workgroup: [8, 16, 16], subgroups: [1, 1], walk: dynamic}
epilogue: {bias: col, activation: silu}
"""



def verified(session, text: str, overrides=None, mutate=None, monkeypatch=None):
    (pv,) = plan_variants(config_from_text(text).with_overrides(overrides or {}))
    lowering = Lowering("portable")
    if mutate:
        original = evaluate.render_variant
        monkeypatch.setattr(evaluate, "render_variant", lambda p, low: mutate(original(p, low)))
    return Evaluator(lowering, DeviceBuilder(session, lowering), [VerifyObserver()]).evaluate(pv)


@pytest.mark.device
@pytest.mark.parametrize("layout_a, layout_b, walk", [("col", "row", "static"), ("row", "col", "dynamic")])
def test_every_group_of_one_launch_verifies(session, layout_a, layout_b, walk):
    result = verified(session, GROUPED, {"layout.a": layout_a, "layout.b": layout_b, "tile.walk": walk})
    assert result.status == "ok", result.reason
    assert result.extra["groups"] == ["40x40x40", "0x32x32", "17x9x33", "1x1x8", "70x33x64"]


@pytest.mark.device
def test_an_moe_layer_with_empty_experts_verifies(session):
    result = verified(session, MOE)
    assert result.status == "ok", result.reason
    assert result.name.endswith("_biascol_silu_groupeddynamic")


# name -> (the bug it stands for, the mutation of the portable kernel's source)
MUTANTS = {
    "last tile skipped": ("the walk stopping one tile short: the last group's last tile never computed",
                          (r"t < total_tiles; t \+=", "t < total_tiles - 1; t +=")),
    "group offset ignored": ("every group's D written at the first group's place",
                             (r"C_all \+ c_offset \* 2;", "C_all;")),
}


@pytest.mark.device
@pytest.mark.parametrize("name", MUTANTS)
def test_a_broken_grouped_kernel_fails_and_names_the_group(session, name, monkeypatch):
    pattern, repl = MUTANTS[name][1]

    def mutate(source):
        mutated, n = re.subn(pattern, repl, source, count=1)
        assert n, f"mutant pattern {pattern!r} did not apply"
        return mutated
    result = verified(session, GROUPED, None, mutate, monkeypatch)
    assert result.status == "failed_verify", (name, result.status, result.reason)
    assert re.match(r"group \d+ \(\d+x\d+x\d+\) failed", result.reason), result.reason
    if name == "last tile skipped":
        assert result.reason.startswith("group 4 (70x33x64) failed")


def test_the_plan_refuses_what_the_walk_cannot_do():
    def reason(text, overrides):
        (v,) = plan_variants(config_from_text(text).with_overrides(overrides))
        return v.reason or ""
    assert "split_k" in reason(GROUPED, {"tile.split_k": 2})
    assert "A must be row-major" in reason(MOE, {"layout.a": "col"})
    assert "4-bit" in reason(GROUPED, {"types.a": "s4", "types.b": "s4", "types.acc": "s32", "types.c": "s32",
                                       "epilogue.activation": "none", "epilogue.bias": "none", "tile.workgroup": [8, 16, 64]})


def test_the_kernel_name_says_the_walk_and_the_call_binds_the_table():
    (pv,) = plan_variants(config_from_text(GROUPED))
    assert parse_kernel_name(pv.plan.name).walk == "static" and str(parse_kernel_name(pv.plan.name)) == pv.plan.name
    call = KernelCall.of(pv.plan)
    names = [a.name for a in call.launches[0].arguments]
    assert names[-4:] == ["table", "groups", "total_tiles", "tile_counter"] and len(call.launches) == 1
    layout = grouped_launch(pv.plan, GroupedProblem.of(pv.config.problem.groups), compute_units=2)
    assert layout.sizes == {"groups": 5, "total_tiles": 5 * 3 + 0 + 3 * 1 + 1 + 9 * 3, "workgroups": 3}
    assert call.grouped_sizes(5, 46, 3)["global0"] == (3 * 16, 1, 1)
    # D's groups one after another, each from a 64-byte boundary (bf16: 32 elements)
    assert layout.byte_offsets("D") == [0, 3200, 3200, 3520, 3584]
    packed = layout.pack("D", [np.full(3200, 1, np.uint8), None, np.full(306, 2, np.uint8), None, None])
    assert packed[3199] == 1 and packed[3200] == 2 and packed[3506] == 0


def test_the_persistent_grid_is_compute_units_times_occupancy():
    assert persistent_workgroups(1000, 8, subgroups=4, grf=256, gpu=False) == 8         # a CPU: one per core
    assert persistent_workgroups(1000, 448, subgroups=32, grf=256, gpu=True) == 56      # 4 threads per engine
    assert persistent_workgroups(1000, 448, subgroups=32, grf=128, gpu=True) == 112
    assert persistent_workgroups(5, 448, subgroups=32, grf=128, gpu=True) == 5          # never more than tiles
    assert persistent_workgroups(5, 8, subgroups=4, grf=256, gpu=False, fixed=7) == 7
