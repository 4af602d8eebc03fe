"""The plan's register estimate against the ISA's spills (xegemm.evaluate.spills, docs/registers.md).

tests/data/register_spills.tsv records, for variants around the register limit in every layout, several types,
GRF modes, sub-group layouts and prefetch distances, the spill bytes of their native kernels built for pvc and
dg2 by Debian's ocloc.  Without a compiler: the estimate's verdict ("fits", "may spill", "spills": the planner
rejects only "spills") must never say "fits" where the ISA spilled nor "spills" where it did not, the "may spill"
margins are the table's own largest excesses without spills, and the counts are those docs/registers.md gives.  With
ocloc: the variants nearest the limit are built again and still spill (or not) as recorded and as estimated.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from xegemm.evaluate.spills import SpillCase, debian_lowering, read_table
from xegemm.plan.planner import PlanRejected, plan
from xegemm.plan.registers import MAY_SPILL_GRF
from xegemm.library.targets import get_target

TABLE = Path(__file__).parent / "data" / "register_spills.tsv"
CASES = read_table(TABLE).cases
# docs/registers.md quotes these: update both together.  target -> verdict -> (ISA clean, ISA spilled)
COUNTS = {"pvc": {"fits": (685, 0), "may spill": (267, 233), "spills": (0, 446)},
          "dg2": {"fits": (8, 0), "may spill": (38, 93), "spills": (0, 23)}}


@pytest.fixture(scope="module")
def verdicts():
    """(case, estimated total GRF, the estimate's verdict, DPAS k-chunks) for every row (about 11 s here)."""
    out = []
    for case in CASES:
        p = case.plan()
        out.append((case, p.registers["total_grf"], p.registers["verdict"], p.mma_grid[2]))
    return out


def test_the_table_parses_back_and_covers_the_space():
    assert all(SpillCase.parse(c.row()) == c for c in CASES)
    assert all(c.spill_bytes is not None for c in CASES)
    for target in ("pvc", "dg2"):
        rows = [c for c in CASES if c.target == target]
        assert {c.layout for c in rows} == {"RRR", "RCR", "CRR", "CCR"} and {c.grf for c in rows} == {128, 256}
        assert {c.types[0] for c in rows} >= {"bf16", "f16", "s8", "u8"} and {c.prefetch for c in rows} == {0, 1, 2, 3}
        spilled = sum(c.spill_bytes > 0 for c in rows)
        assert 0.2 < spilled / len(rows) < 0.8            # around the limit: both verdicts, in numbers (dg2: 72%)
    assert {c.subgroups for c in CASES if c.target == "pvc"} > {(1, 1), (8, 4), (4, 8)}
    assert "s4" in {c.types[0] for c in CASES if c.target == "dg2"}


def test_estimate_never_says_fits_where_the_isa_spills_nor_spills_where_it_does_not(verdicts):
    wrong = [f"{c.row()} (estimate {total} GRF: {verdict})" for c, total, verdict, _ in verdicts
             if verdict == ("fits" if c.spill_bytes else "spills")]
    assert not wrong, wrong


def test_may_spill_bands_lie_just_below_the_deepest_spill_and_at_the_largest_excess_without_one(verdicts):
    """Per DPAS width, GRF mode and k-chunk group: "fits" up to one GRF below the lowest estimate (minus budget)
    of a build that spilled, at most 0; "may spill" up to the largest of a build that did not, at least 0."""
    found = {}
    for c, total, _, chunks in verdicts:
        simd = get_target(c.target).simd
        key = (simd, c.grf, min(chunks, max(MAY_SPILL_GRF[simd][c.grf])))
        fits, may = found.get(key, (0, 0))
        found[key] = (min(fits, total - c.grf - 1), may) if c.spill_bytes else (fits, max(may, total - c.grf))
    assert found == {(simd, grf, chunks): band for simd, modes in MAY_SPILL_GRF.items()
                     for grf, bands in modes.items() for chunks, band in bands.items()}


@pytest.mark.parametrize("target", sorted(COUNTS))
def test_verdicts_against_the_isa_as_documented(target, verdicts):
    counts = {v: [0, 0] for v in COUNTS[target]}
    for c, _, verdict, _ in verdicts:
        if c.target == target:
            counts[verdict][c.spill_bytes > 0] += 1
    assert {v: tuple(n) for v, n in counts.items()} == COUNTS[target]


@pytest.mark.parametrize("layout", ["RRR", "RCR", "CRR", "CCR"])
def test_the_large_tiles_fit_and_do_not_spill(layout, verdicts):
    """sycl-tla's PVC tiles (256x256x32 over 8x4 sub-groups of 32x64, 128x512x32 over 4x8) in 256-GRF mode."""
    rows = [(c, verdict) for c, _, verdict, _ in verdicts if c.target == "pvc" and c.layout == layout
            and c.subgroup_tile == (32, 64, 32) and c.subgroups in ((8, 4), (4, 8)) and c.grf == 256
            and c.types == ("bf16", "bf16", "f32", "f32")]
    assert len(rows) == 2 and all(c.spill_bytes == 0 and verdict == "fits" for c, verdict in rows)


@pytest.mark.parametrize("target", ["pvc", "dg2"])
def test_a_variant_estimated_to_spill_is_rejected_before_it_is_built(target, verdicts):
    case, total, _, _ = min((v for v in verdicts if v[2] == "spills" and v[0].target == target),
                            key=lambda v: v[1] - v[0].grf)
    issues = debian_lowering(target).issues
    with pytest.raises(PlanRejected, match=rf"^registers: accumulators .* = {total} GRF > {case.grf} GRF per thread"):
        plan(case.config(), issues)
    for verdict in ("fits", "may spill"):
        kept = next((c for c, _, v, _ in verdicts if v == verdict and c.target == target), None)
        if kept is not None:       # kept and flagged; the ISA decides a "may spill"
            assert plan(kept.config(), issues).registers["verdict"] == verdict


def _nearest_pair(rows):
    """The row estimated just within its budget and the one rejected nearest to it."""
    return [max((v for v in rows if v[2] == "fits"), key=lambda v: v[1] - v[0].grf),
            min((v for v in rows if v[2] == "spills"), key=lambda v: v[1] - v[0].grf)]


@pytest.mark.ocloc
def test_variants_nearest_the_limit_spill_as_recorded_and_as_estimated(verdicts, tmp_path):
    """pvc, per GRF mode: the bf16 variant (one sub-group) estimated just within the budget and the one
    estimated just over it; dg2: the same pair among its rows.  Built with ocloc, each spills as the table
    says and as the estimate says."""
    picks = []
    for grf in (128, 256):
        picks += _nearest_pair([v for v in verdicts if v[0].target == "pvc" and v[0].grf == grf
                                and v[0].subgroups == (1, 1) and v[0].types[0] == "bf16"])
    picks += _nearest_pair([v for v in verdicts if v[0].target == "dg2"])
    for i, (case, total, verdict, _) in enumerate(picks):
        spill = case.measure(tmp_path / str(i))
        assert (spill > 0) == (case.spill_bytes > 0) == (verdict == "spills"), (case.row(), spill, total)


@pytest.mark.ocloc
def test_a_may_spill_variant_is_built_and_the_isa_decides(tmp_path):
    """32x64x64 bf16 CRR at 256 GRF: the estimate (260 GRF) may spill, the ISA does not; `xegemm build` says both."""
    from xegemm.jobs.pipeline import build_config

    (case,) = [c for c in CASES if c.row().startswith("pvc\tbf16,bf16,f32,f32\tCRR\t32x64x64\t1x1\t2\t256\t")]
    path = tmp_path / "c.yaml"
    path.write_text(case.config_text())
    (v,) = build_config(path, "pvc", out_dir=tmp_path / "out")["variants"]
    assert v["status"] == "ok" and v["isa"]["spill_bytes"] == case.spill_bytes == 0, v["reason"]
    assert "register estimate 260 GRF > 256: may spill; the ISA does not spill" in v["reason"]
