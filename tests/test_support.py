"""docs/support.md's supported matrix is the output of `xegemm support`: asked of the planner, never hand-written."""

from __future__ import annotations

import re
from pathlib import Path

from xegemm.jobs.support import check, check_quantized, columns_of, markdown, type_combinations

SUPPORT_DOC = Path(__file__).resolve().parent.parent / "docs" / "support.md"


def test_documented_matrix_is_the_generated_one():
    text = SUPPORT_DOC.read_text()
    found = re.search(r"<!-- xegemm support: begin -->\n(.*)<!-- xegemm support: end -->", text, re.S)
    assert found, "docs/support.md lacks the supported-matrix markers"
    assert found.group(1) == markdown(), "docs/support.md's matrix is stale: paste `xegemm support` between the markers"


def test_cells_are_the_planners_verdicts():
    assert check("pvc", "bf16", "bf16", "f32", layout="CCR").ok
    no_tf32 = check("dg2", "tf32", "tf32", "f32")
    assert not no_tf32.ok and "tf32 DPAS exists only at SIMD16" in no_tf32.reason
    assert check("dg2", "s8", "u8", "s32", c="s8", epilogue="epilogue: {beta: 1, activation: gelu_tanh}\n").ok


def test_cells_differ_per_compiler_where_the_compilers_do():
    """tf32's 8-wide 32-bit reads exist with the current compiler only (no other atom reaches tf32's operands); Xe2
    and Xe3 have columns for the current compiler only."""
    assert check("pvc", "tf32", "tf32", "f32", compiler="current").ok
    old = check("pvc", "tf32", "tf32", "f32", compiler="system")
    assert not old.ok and "igc-1.0.12504 cannot issue XE_2D_TF32x32x16_LD_N" in old.reason
    u4_col = "types: {a: f16, b: u4, c: f16}\nlayout: {b: col}\nquant: {format: plain, group: 32}\n"
    assert check_quantized(u4_col, "native", "bmg", compiler="current").ok
    assert check_quantized(u4_col, "native", "pvc", compiler="system").ok      # plain rows reordered (below)
    for target in ("bmg", "lnl", "ptl"):
        assert check(target, "bf16", "bf16", "f32", layout="CCR").ok
    assert [t for t, _ in columns_of("system")] == ["pvc", "dg2"]
    assert [t for t, _ in columns_of("current")] == ["pvc", "bmg", "lnl", "ptl", "dg2"]
    system_only = markdown(compilers=("system",))
    assert "bmg" not in system_only.split("### Quantized")[0] and "igc-2.40.14" not in system_only


def test_every_dpas_input_pair_is_listed():
    combos = type_combinations()
    assert ("s8", "u8", "s32") in combos and ("bf16", "bf16", "bf16") in combos and ("tf32", "tf32", "f32") in combos
    assert ("s8", "s4", "s32") not in combos and ("bf16", "f16", "f32") not in combos
