"""Split K: the K range cut into slices computed by separate work-groups, added in order by a second kernel.

The reduction is a second small kernel, not atomics: the slices are added in slice order every run, so
results are deterministic and integer GEMMs stay exact; the verifier's f32 bound counts K + S additions and
a bf16/f16 accumulator's roundings per slice (xegemm.verify.dense.accumulator_reference).
"""

from __future__ import annotations

import pytest
from conftest import assert_fails_verification, assert_verifies, one_variant

from xegemm.config import config_from_text
from xegemm.plan.planner import PlanRejected, plan

FAST = "profile: {warmup: 1, repeats: 2}\n"
TALL_SKINNY = "problem: {m: 24, n: 40, k: 700, batch: 2}\n"      # small M x N, large K: what split K is for


def _tile(split: int, sg: int = 16, bk: int = 32) -> str:
    shape = "[16, 32, %d], subgroups: [1, 2]" % bk if sg == 8 else "[32, 64, %d], subgroups: [2, 2]" % bk
    return f"tile: {{workgroup: {shape}, subgroup_size: {sg}, split_k: {split}}}\n"


CASES = {
    "f32_split3": _tile(3),
    "f32_split7_uneven": _tile(7),          # 22 k-tiles over 7 slices of 4: the last slice is short
    "bf16_out_epilogue_split4": _tile(4) + "types: {c: bf16}\n"
                                "epilogue: {alpha: 0.5, beta: 1, bias: row, activation: gelu_erf}\n",
    "bf16_acc_split3": _tile(3) + "types: {acc: bf16, c: bf16}\n",
    "f16_acc_to_f32_split2": _tile(2) + "types: {a: f16, b: f16, acc: f16, c: f32}\n",
    "s8_exact_split5": _tile(5, bk=64) + "types: {a: s8, b: s8, acc: s32, c: s8}\nepilogue: {activation: relu}\n",
    "u8_s32_split2_col_b": _tile(2, bk=64) + "types: {a: u8, b: u8, acc: s32, c: s32}\nlayout: {b: col}\n",
    "sg8_split3": _tile(3, sg=8) + "types: {c: bf16}\nepilogue: {beta: -1}\n",
}


def _variant(text: str):
    return one_variant(TALL_SKINNY + text + FAST)


@pytest.mark.device
@pytest.mark.parametrize("name", sorted(CASES))
def test_split_k_verifies_on_the_device(name, session):
    pv = _variant(CASES[name])
    assert pv.plan.split_k > 1 and pv.name.endswith(f"_splitk{pv.plan.split_k}")
    assert_verifies(pv, session)


MUTANTS = {
    "the last slice is not added": ("f32_split3", ("slice < 3; ++slice", "slice < 2; ++slice")),
    "every slice runs to K": ("s8_exact_split5", ("k_end = min(K, k_begin + k_slice)", "k_end = K")),
    "slices read the first batch's A": ("f32_split3", ("A += get_group_id(2) / 3 * batch_stride_a",
                                                       "A += 0 * batch_stride_a")),
}


@pytest.mark.device
@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_wrong_split_fails_verification(mutant, session, monkeypatch):
    case, mutation = MUTANTS[mutant]
    assert_fails_verification(monkeypatch, mutation, _variant(CASES[case]), session)


def test_slices_are_whole_k_tiles_and_the_grid_covers_them():
    p = plan(config_from_text(TALL_SKINNY + _tile(3)))
    assert p.k_slice() == 256                       # ceil(700 / 3) = 234 -> 8 k-tiles of 32
    assert p.global_size()[2] == 2 * 3             # batch x slices
    assert p.c.atom.name == "XE_2D_U32x8x16_ST_N"   # the partial sums are stored as the accumulator
    assert p.c_in is None                           # the reduction reads C, not the GEMM kernel


def test_more_slices_than_k_tiles_is_rejected_with_the_numbers():
    with pytest.raises(PlanRejected, match="split_k = 30 slices but K = 700 has 22 k-tiles of 32"):
        plan(config_from_text(TALL_SKINNY + _tile(30)))


@pytest.mark.ocloc
@pytest.mark.parametrize("target, sg, bk", [("pvc", 16, 32), ("dg2", 8, 32)])
def test_split_k_builds_natively_with_the_predicted_messages(target, sg, bk, tmp_path):
    from xegemm.jobs.pipeline import build_config
    path = tmp_path / "split.yaml"
    path.write_text("problem: {m: 64, n: 64, k: 1024, batch: 2}\n" + _tile(4, sg=sg, bk=bk)
                    + "types: {c: bf16}\nepilogue: {beta: 0.5, bias: col, activation: silu}\n")
    result = build_config(path, target=target, out_dir=tmp_path / "out")
    (v,) = result["variants"]
    assert v["status"] == "ok", v["reason"]
    assert v["isa"]["spill_bytes"] == 0 and v["isa"]["dpas"] == v["predicted"]["dpas"]
