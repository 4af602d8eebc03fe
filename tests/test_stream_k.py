"""Stream-K: the G work-groups of a batch share its tiles x k-tiles MAC-loop iterations in even ranges.

A tile one work-group covers whole is stored by the GEMM kernel's epilogue; the pieces of a tile cut between
work-groups are stored raw and added in contributor order by a second kernel, which applies the epilogue: no
atomics, deterministic, exact for integers; the verifier's bound counts K + pieces additions and a bf16/f16
accumulator's roundings per piece, following each tile's own pieces (xegemm.verify.dense.k_pieces).
"""

from __future__ import annotations

import pytest
from conftest import assert_fails_verification, assert_verifies, one_variant

from xegemm.plan import stream_k
from xegemm.config import ConfigError, config_from_text
from xegemm.evaluate import params_of, plan_variants
from xegemm.plan.planner import PlanRejected, plan
from xegemm.library.record import tile_label
from xegemm.tune.model import Machine, predict

FAST = "profile: {warmup: 1, repeats: 2}\n"
# ragged M and N: 4 x 3 tiles of 32x64, 10 k-tiles of 32 (the last one short): I = 120 iterations per batch
RAGGED = "problem: {m: 100, n: 130, k: 300, batch: 2}\n"


def _tile(groups: int, sg: int = 16, bk: int = 32, swizzle: int = 1) -> str:
    shape = "[16, 32, %d], subgroups: [1, 2]" % bk if sg == 8 else "[32, 64, %d], subgroups: [2, 2]" % bk
    return (f"tile: {{workgroup: {shape}, subgroup_size: {sg}, stream_k: {groups}, swizzle: {swizzle}}}\n")


CASES = {
    "f32_g5_spans_several_tiles": _tile(5),                      # 24 iterations each: whole tiles between pieces
    "f32_g7_uneven_swizzle2": _tile(7, swizzle=2),              # 120 / 7: ranges of 17 and 18
    "f32_g16_more_than_tiles": _tile(16),                        # 16 > 12 tiles: every tile cut
    "bf16_acc_g7": _tile(7) + "types: {acc: bf16, c: bf16}\n",
    "s8_exact_saturating_g9": _tile(9, bk=64) + "types: {a: s8, b: s8, acc: s32, c: s8}\nepilogue: {alpha: 3}\n",
    "bf16_out_epilogue_g6": _tile(6) + "types: {c: bf16}\n"
                            "epilogue: {alpha: 0.5, beta: 1, bias: row, activation: gelu_erf}\n",
    "sg8_g11": _tile(11, sg=8) + "types: {c: bf16}\nepilogue: {beta: -1, bias: col}\n",
}


@pytest.mark.device
@pytest.mark.parametrize("name", sorted(CASES))
def test_stream_k_verifies_on_the_device(name, session):
    pv = one_variant(RAGGED + CASES[name] + FAST)
    assert pv.plan.stream_k > 0 and pv.name.endswith(f"_streamk{pv.plan.stream_k}")
    assert_verifies(pv, session)


MUTANTS = {
    "the last piece of a tile is dropped": ("g <= last; ++g", "g < last; ++g"),
    "a piece is added twice": ("sum += as_float(w[tn]);", "sum += as_float(w[tn]) + as_float(w[tn]);"),
    "every piece is read from slot 0": ("const int slot = g * iters / 5 < tile_first;", "const int slot = 0;"),
    "whole tiles are not stored": ("if (whole) {", "if (0) {"),
}


@pytest.mark.device
@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_wrong_stream_k_fails_verification(mutant, session, monkeypatch):
    pv = one_variant(RAGGED + CASES["f32_g5_spans_several_tiles"] + FAST)
    assert_fails_verification(monkeypatch, MUTANTS[mutant], pv, session)


@pytest.mark.parametrize("m, n, k, groups", [(100, 130, 300, 5), (100, 130, 300, 7), (100, 130, 300, 120),
                                             (31, 17, 97, 3), (256, 256, 4096, 1), (64, 640, 64, 9)])
def test_the_schedule_covers_each_iteration_once_and_the_fixup_finds_each_piece(m, n, k, groups):
    wg = (32, 64, 32)
    iters, k_tiles = stream_k.iterations(m, n, k, wg), -(-k // 32)
    pieces = stream_k.schedule(m, n, k, wg, groups)
    covered = [[(p["tile"], kt) for p in ps for kt in range(p["k_begin"] // 32, -(-p["k_end"] // 32))]
               for ps in pieces]
    assert sorted(sum(covered, [])) == [(t, kt) for t in range(iters // k_tiles) for kt in range(k_tiles)]
    sizes = [len(c) for c in covered]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) > 0     # even ranges, none empty
    stored = {}
    for g, ps in enumerate(pieces):
        cut = [p for p in ps if not p["whole"]]
        assert len(cut) <= 2 and len({p["slot"] for p in cut}) == len(cut)     # slots 0 and 1 at most, once each
        assert all(p is ps[0] or p is ps[-1] for p in cut)                     # only a range's ends are cut
        for p in ps:
            stored.setdefault(p["tile"], []).append((g, p["slot"], p["whole"]))
    for tile, contributions in stored.items():
        fixup = stream_k.contributors(m, n, k, wg, groups, tile)
        if len(contributions) == 1:
            assert contributions[0][2] and len(fixup) == 1      # whole: D stored by its work-group, no fix-up
        else:
            assert fixup == [(g, slot) for g, slot, _ in contributions]     # each piece, in contributor order


def test_plan_names_and_grid():
    p = plan(config_from_text(RAGGED + _tile(5)))
    assert p.name.endswith("_streamk5") and p.reduces
    assert p.global_size() == (5 * 32, 2, 2)                    # G work-groups along x, batches along z
    assert p.partial.atom.name == "XE_2D_U32x8x16_ST_N"          # pieces are stored as the f32 accumulator
    assert p.c.atom.name == "XE_2D_U32x8x16_ST_N"


def test_params_labels_and_the_model_know_stream_k():
    config = config_from_text(RAGGED + _tile(5))
    params = params_of(config)
    assert params["stream_k"] == 5 and "streamk5" in tile_label(params).split()
    # 2 batches x 5 work-groups of 24 iterations on 8 compute units: two waves of 24, 240 of 384 slots busy
    assert predict(plan(config), Machine(8, 0)).waves == pytest.approx(240 / 384)


def test_more_work_groups_than_iterations_is_rejected_with_the_numbers():
    with pytest.raises(PlanRejected, match=r"stream_k = 121 work-groups but a batch has 120 MAC-loop iterations "
                                           r"\(4 x 3 tiles of 32x64 x 10 k-tiles of 32\)"):
        plan(config_from_text(RAGGED + _tile(121)))


def test_stream_k_with_split_k_is_rejected_in_the_file_and_in_a_sweep():
    text = RAGGED + "tile:\n  workgroup: [32, 64, 32]\n  subgroups: [2, 2]\n  split_k: 2\n  stream_k: 3\n"
    with pytest.raises(ConfigError, match=r"s\.yaml:6: tile\.stream_k: .*choose one"):
        config_from_text(text, "s.yaml")
    swept = RAGGED + _tile(0) + "sweep: {tile.split_k: [1, 2], tile.stream_k: [0, 3]}\n"
    reasons = {(v.config.tile.split_k, v.config.tile.stream_k): v.reason
               for v in plan_variants(config_from_text(swept))}
    assert "choose one" in reasons[(2, 3)] and not reasons[(1, 0)] and not reasons[(1, 3)]


@pytest.mark.ocloc
@pytest.mark.parametrize("target, sg", [("pvc", 16), ("dg2", 8)])
def test_stream_k_builds_natively_with_the_predicted_messages(target, sg, tmp_path):
    from xegemm.jobs.pipeline import build_config
    path = tmp_path / "streamk.yaml"
    path.write_text("problem: {m: 64, n: 128, k: 1024, batch: 2}\n" + _tile(6, sg=sg)
                    + "types: {c: bf16}\nepilogue: {beta: 0.5, bias: col, activation: silu}\n")
    result = build_config(path, target=target, out_dir=tmp_path / "out")
    (v,) = result["variants"]
    assert v["status"] == "ok", v["reason"]
    assert v["isa"]["spill_bytes"] == 0 and v["isa"]["dpas"] == v["predicted"]["dpas"]
