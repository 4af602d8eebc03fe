"""Every layout of A and B (CUTLASS RRR, RCR, CRR, CCR; C row-major) with every DPAS type the hardware allows.

- the planner finds each DPAS fragment in the copy registers by lane maps: a contiguous run (no code), a
  per-lane permutation or a cross-lane gather (xegemm.plan.operands.Reorder); the reorder is checked element by element
  against the lane maps, and on the device (a kernel that applies it to known registers);
- on the CPU device (portable lowering), ragged batched problems verify against numpy, and the staged k-step
  is bit for bit the atom-by-atom kernel (which runs the reorder's shuffles literally);
- ahead of time (ocloc), the native kernels issue the planned dpas and block loads without spilling.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import run_portable

from xegemm.library.dtypes import ctype_shape
from xegemm.config import config_from_text
from xegemm.config.schema import Problem
from xegemm.library.layouts import AB_LAYOUTS, from_letters
from xegemm.plan.operands import Fragment, Reorder, reorder_cost
from xegemm.plan.planner import PlanRejected, plan

LAYOUTS = {code.lower(): from_letters(code)[:2] for code in AB_LAYOUTS}   # rrr: (row, row), rcr, crr, ccr
# (types, SIMD16 work-group tile, SIMD8 work-group tile or None where DG2 has no such DPAS)
TYPES = {
    "bf16": ("{a: bf16, b: bf16, acc: f32, c: f32}", "[16, 32, 32]", "[16, 16, 32]"),
    "f16_acc_f16": ("{a: f16, b: f16, acc: f16, c: f16}", "[16, 32, 16]", None),
    "bf16_acc_bf16": ("{a: bf16, b: bf16, acc: bf16, c: bf16}", "[8, 32, 16]", None),
    "f16": ("{a: f16, b: f16, acc: f32, c: f32}", "[8, 32, 32]", "[8, 16, 16]"),
    "tf32": ("{a: tf32, b: tf32, acc: f32, c: f32}", "[16, 32, 16]", None),
    "s8_s8": ("{a: s8, b: s8, acc: s32, c: s32}", "[16, 32, 64]", "[16, 16, 32]"),
    "s8_u8": ("{a: s8, b: u8, acc: s32, c: s32}", "[8, 32, 32]", "[8, 16, 32]"),
    "u8_s8": ("{a: u8, b: s8, acc: s32, c: s32}", "[16, 32, 32]", None),
    "u8_u8": ("{a: u8, b: u8, acc: s32, c: s32}", "[4, 32, 32]", "[8, 16, 64]"),
    "s4_s4": ("{a: s4, b: s4, acc: s32, c: s32}", "[16, 32, 64]", None),
    "u4_s4": ("{a: u4, b: s4, acc: s32, c: s32}", "[8, 32, 128]", "[16, 32, 64]"),
    "s4_u4_n32": ("{a: s4, b: u4, acc: s32, c: s32}", "[16, 64, 64]", None),   # row-major B from 8-bit VNNI loads
}


def _config(types: str, layout: str, workgroup: str, sg: int = 16, extra: str = ""):
    a, b = LAYOUTS[layout]
    text = (f"problem: {{m: 64, n: 64, k: 128}}\ntypes: {types}\nlayout: {{a: {a}, b: {b}}}\n"
            f"tile: {{workgroup: {workgroup}, subgroups: [1, 2], subgroup_size: {sg}}}\n{extra}")
    return config_from_text(text)


def _ragged(config):
    """M, N, K not multiples of any tile, batch 2."""
    bm, bn, bk = config.tile.workgroup
    return dataclasses.replace(config, problem=Problem(m=bm + 8 + 3, n=bn + 5, k=2 * bk + 7, batch=2))


CASES = [pytest.param(name, layout, 16, id=f"{name}-{layout}-simd16") for name in TYPES for layout in LAYOUTS]
CASES += [pytest.param(name, layout, 8, id=f"{name}-{layout}-simd8") for name, (_, _, wg8) in TYPES.items()
          if wg8 for layout in LAYOUTS]


# On the device, a type pair that differs from another only in which operand is signed adds nothing but the
# decode, which tests/test_types.py checks on the device for every pair: u8_s8 (s8_u8 and u8_u8 run) and s4_s4
# (u4_s4 and s4_u4_n32 run).  Every pair still plans in every layout above and builds ahead of time below.
SIGN_TWINS = ("u8_s8", "s4_s4")
DEVICE_CASES = [case for case in CASES if case.values[0] not in SIGN_TWINS]


def _case(name, layout, sg):
    types, wg16, wg8 = TYPES[name]
    return _ragged(_config(types, layout, wg16 if sg == 16 else wg8, sg))


# ---- the plan: fragments by lane maps -------------------------------------------------------------------

def _check_sources(p, operand):
    """Every fragment element names a copy register element holding exactly that operand coordinate."""
    op = getattr(p, operand)
    transpose = getattr(p.config.layout, operand) == "col"
    frag_map = p.mma.lane_map(operand).map
    fr, fc = p.mma.operand_shape(operand)
    per_component = ctype_shape(p.mma.ctype(operand))[0] // p.mma.element(operand).bits
    for (i, j), frag in op.fragments.items():
        for lane, coords in enumerate(frag_map):
            for e, coord in enumerate(coords):
                if coord is None:
                    continue
                if isinstance(frag, Fragment):
                    tile, elem, src = frag.tile, frag.offset * per_component + e, lane
                else:
                    tile, elem, src = frag.sources[lane][e]
                want = (i * fr + coord[0], j * fc + coord[1])
                if transpose:
                    want = want[::-1]
                r0, c0 = op.tiles[tile]
                held = op.atom.lane_map.map[src][elem]
                assert held is not None and (r0 + held[0], c0 + held[1]) == want, (operand, (i, j), lane, e)


@pytest.mark.parametrize("name, layout, sg", CASES)
def test_every_layout_plans_and_its_fragments_hold_the_operand(name, layout, sg):
    p = plan(_case(name, layout, sg))
    for operand in ("a", "b"):
        _check_sources(p, operand)
    if sg == 16 and name in ("bf16", "f16", "f16_acc_f16", "bf16_acc_bf16", "tf32"):
        # 16-bit and tf32 A: the d32 transpose already deals the DPAS A layout (lane = k): no reorder
        assert reorder_cost(p.a.fragments) == 0, p.a.atom.name
    four_bit = p.mma.b_type.bits == 4
    if sg == 16 and (layout in ("rcr", "ccr") or not four_bit):
        # col-major B: the d32 transpose gives lane = n, dwords along k; row-major B: VNNI loads (8/16-bit)
        assert reorder_cost(p.b.fragments) == 0, p.b.atom.name
    if layout in ("rrr", "rcr"):   # row-major A: 16-bit rows, packed 8-bit rows, 4-bit rows as 8-bit messages
        assert reorder_cost(p.a.fragments) == 0, p.a.atom.name
    if four_bit and layout in ("rrr", "crr"):   # no 4-bit VNNI: lane n gathers its column from a packed load
        assert reorder_cost(p.b.fragments) == 2
    if four_bit and sg == 16 and layout in ("rrr", "crr"):   # B rows of 16 bytes: the 8-bit VNNI load's bytes
        assert p.b.atom.layout == ("V" if p.subgroup_tile[1] >= 32 else "N"), p.b.atom.name
    if four_bit and sg == 8 and layout in ("rrr", "rcr"):   # a uint block read per row: 8 nibbles per lane
        assert reorder_cost(p.a.fragments) == 0 and p.a.atom.name == "XE_1D_U4x8x64_LD_SG8"


def test_reorder_kinds_follow_the_lane_maps():
    """8-bit col-major A: a 32-row d32 transpose gives lane l the rows k = 2l, 2l+1 (a per-lane byte
    permutation); the 16-row one gives lane l the row k = l, so the DPAS lane l gathers k = 2l, 2l+1 from
    lanes 2l % 16 and 2l % 16 + 1 of two tiles (shuffles and a select).  SIMD8 col-major A: a 1D message
    deals m over the lanes, the DPAS wants k there: a cross-lane gather."""
    types = TYPES["s8_s8"][0]
    p = plan(_config(types, "crr", "[16, 32, 32]"))
    assert p.a.atom.name == "XE_2D_U8x32x16_LD_T" and reorder_cost(p.a.fragments) == 1
    p = plan(_config(types, "crr", "[32, 32, 32]", extra="atoms: {a: XE_2D_U8x16x32_LD_T}\n"))
    frag = p.a.fragments[(0, 0)]
    assert isinstance(frag, Reorder) and frag.cross_lane and len(frag.tiles) == 2
    assert frag.sources[3][0] == (0, 0, 6) and frag.sources[3][1] == (0, 0, 7)        # k = 6, 7 at m = 0
    assert frag.sources[9][0] == (1, 0, 2)                                             # k = 18: tile 1, lane 2
    p = plan(_config(TYPES["bf16"][0], "ccr", "[16, 16, 32]", sg=8))
    assert reorder_cost(p.a.fragments) == 2 and reorder_cost(p.b.fragments) == 2
    with pytest.raises(PlanRejected, match="memory rows of 4 x 8 bits .* use a sub-group tile with M >= 8"):
        plan(_config(TYPES["u8_u8"][0], "crr", "[4, 16, 64]", sg=8))


def test_explicit_atom_that_cannot_feed_the_operand_names_the_rule():
    with pytest.raises(PlanRejected, match="moves 8-bit elements but A of XE_8x16x16_F32BF16BF16F32_TT holds 16-bit"):
        plan(_config(TYPES["bf16"][0], "crr", "[64, 32, 32]", extra="atoms: {a: XE_2D_U8x16x32_LD_T}\n"))
    with pytest.raises(PlanRejected, match="is not a multiple of XE_2D_U16x32x16_LD_T's 32x16 block"):
        plan(_config(TYPES["bf16"][0], "crr", "[16, 32, 16]", extra="atoms: {a: XE_2D_U16x32x16_LD_T}\n"))
    with pytest.raises(PlanRejected, match="C must be row-major"):
        plan(config_from_text("problem: {m: 64, n: 64, k: 64}\nlayout: {c: col}\n"))


# ---- on the CPU device (portable lowering) --------------------------------------------------------------




@pytest.mark.device
@pytest.mark.parametrize("name, layout, sg", DEVICE_CASES)
def test_layout_verifies_and_staged_equals_atom_calls(name, layout, sg, session):
    p = plan(_case(name, layout, sg))
    staged = run_portable(session, p, True)
    if layout != "rrr":            # the row-major case is tests/test_portable_staged.py's
        atoms = run_portable(session, p, False)
        assert np.array_equal(staged, atoms), f"{p.name}: {np.count_nonzero(staged != atoms)} bytes differ"


# ---- ahead of time (ocloc): the planned machine code, no spills ----------------------------------------

AOT_PVC = """name: layouts_pvc
problem: {m: 512, n: 512, k: 512}
tile: {workgroup: [64, 64, 32], subgroups: [2, 2], subgroup_size: 16}
sweep:
  types: [{a: bf16, b: bf16, acc: f32, c: f32}, {a: f16, b: f16, acc: f16, c: f16}]
  layout: [{a: row, b: row}, {a: row, b: col}, {a: col, b: row}, {a: col, b: col}]
"""
# Debian's IGC has only the 16-row d32 transpose: 8-bit col-major A takes the cross-lane gather there
AOT_PVC_S8 = """name: layouts_pvc_s8
problem: {m: 512, n: 512, k: 512}
tile: {workgroup: [64, 64, 32], subgroups: [2, 2], subgroup_size: 16}
atoms: {a: XE_2D_U8x16x32_LD_T}
sweep:
  types: [{a: s8, b: u8, acc: s32, c: s32}, {a: u8, b: s8, acc: s32, c: s32}]
  layout: [{a: col, b: row}, {a: col, b: col}]
"""
# int4 in every layout: row-major data moves as 8-bit messages of the same bytes (XE_2D_U4x32x64_LD_N is the
# DPAS A operand as loaded; row-major B is gathered from XE_2D_U4x32x32_LD_N), column-major data through the
# 16-row d32 transpose, the only one Debian's IGC has; the planner picks these by itself
AOT_PVC_S4 = """name: layouts_pvc_s4
problem: {m: 512, n: 512, k: 512}
types: {a: s4, b: s4, acc: s32, c: s32}
tile: {workgroup: [128, 32, 64], subgroups: [2, 1], subgroup_size: 16}
sweep:
  layout: [{a: row, b: row}, {a: row, b: col}, {a: col, b: row}, {a: col, b: col}]
"""
AOT_DG2 = """name: layouts_dg2
problem: {m: 512, n: 512, k: 512}
tile: {workgroup: [32, 32, 32], subgroups: [2, 2], subgroup_size: 8}
sweep:
  types: [{a: bf16, b: bf16, acc: f32, c: f32}, {a: s8, b: u8, acc: s32, c: s32}]
  layout: [{a: row, b: row}, {a: row, b: col}, {a: col, b: row}, {a: col, b: col}]
"""
# packed 4-bit on dg2: B (and column-major A) gathered nibble by nibble from 1D block tiles
AOT_DG2_S4 = """name: layouts_dg2_s4
problem: {m: 512, n: 512, k: 512}
types: {a: s4, b: u4, acc: s32, c: s32}
tile: {workgroup: [32, 32, 64], subgroups: [2, 2], subgroup_size: 8}
sweep:
  layout: [{a: row, b: row}, {a: row, b: col}, {a: col, b: row}, {a: col, b: col}]
"""
REFERENCE = """name: layouts_reference
problem: {m: 5120, n: 4096, k: 4096}
tile: {workgroup: [256, 256, 32], subgroups: [8, 4], subgroup_size: 16}
pipeline: {prefetch: 2}
target: {grf: 256}
sweep:
  tile: [{workgroup: [256, 256, 32], subgroups: [8, 4]}, {workgroup: [128, 512, 32], subgroups: [4, 8]}]
  layout: [{a: row, b: row}, {a: row, b: col}, {a: col, b: row}, {a: col, b: col}]
"""


def _build(tmp_path, text, target, count):
    from xegemm.aot.capabilities import DEBIAN_CAPABILITIES
    from xegemm.jobs.pipeline import build_config

    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "c.yaml"
    path.write_text(text)
    result = build_config(path, target, out_dir=tmp_path / target, capabilities_name=DEBIAN_CAPABILITIES)
    built = [v for v in result["variants"] if v["status"] != "rejected"]
    assert len(built) == count, [v["reason"] for v in result["variants"]]
    for v in built:
        assert v["status"] == "ok", v["reason"]
        isa, want, got = v["isa"], v["predicted"], v["measured_messages"]
        assert isa["spill_bytes"] == 0, v["name"]
        assert isa["dpas"] == want["dpas"] > 0 and got["load_block2d"] == want["load_block2d"]
        if target == "dg2":
            assert got["load_block1d"] == want["load_block1d"] > 0
    return built


@pytest.mark.ocloc
def test_every_layout_builds_for_pvc_with_the_planned_messages(tmp_path):
    built = _build(tmp_path, AOT_PVC, "pvc", 8) + _build(tmp_path / "s8", AOT_PVC_S8, "pvc", 4)
    s4 = _build(tmp_path / "s4", AOT_PVC_S4, "pvc", 4)
    assert all(v["isa"]["dpas"] == 16 for v in s4)      # 64x32x64 per sub-group: 8 x 2 x 1 XE_8x16x64
    assert {v["name"].split("_")[5] for v in s4} == {"ttt", "tnt", "ntt", "nnt"}
    assert "_au4x32x64n_bu4x32x32v_" in s4[0]["name"]  # row-major A: the 8-bit load is the operand, no reorder
    assert {v["name"].split("_")[5] for v in built} == {"ttt", "tnt", "ntt", "nnt"}


@pytest.mark.ocloc
def test_every_layout_builds_for_dg2_with_the_planned_messages(tmp_path):
    built = _build(tmp_path, AOT_DG2, "dg2", 8)
    assert {v["name"].split("_")[5] for v in built} == {"ttt", "tnt", "ntt", "nnt"}
    s4 = _build(tmp_path / "s4", AOT_DG2_S4, "dg2", 4)
    assert {v["name"].split("_")[5] for v in s4} == {"ttt", "tnt", "ntt", "nnt"}
    assert all(v["isa"]["dpas"] == 4 for v in s4)      # 16x16x64 per sub-group: 2 x 2 x 1 XE_8x8x64


@pytest.mark.ocloc
def test_reference_tiles_do_not_spill_in_any_layout(tmp_path):
    """sycl-tla's PVC tiles (docs/atoms.md §5.1), 32x64 per sub-group: 32 DPAS per k-step, 0 spill bytes."""
    for v in _build(tmp_path, REFERENCE, "pvc", 8):
        assert v["isa"]["dpas"] == 32 and v["isa"]["grf"] == 256
