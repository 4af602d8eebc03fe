"""The DPAS atom model: names, legality, register types, lane maps (against docs/atoms.md), values, rendering.

Layout expectations are transcribed from docs/atoms.md §3.4 and §4 (OCLMMA, OCLTF32,
TLA:mmatraits/legacy), not from the implementation.
"""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from xegemm.atoms.lanemap import LaneMap
from xegemm.atoms.mma import (
    MmaAtom,
    MmaAtomError,
    enumerate_mma_atoms,
    error_bound,
    numpy_reference,
    pack_operand,
    round_to,
    sizeof_ctype,
    tolerance,
    unpack_operand,
)
from xegemm.aot.toolchain import find_ocloc
from xegemm.errors import XegemmError
from xegemm.lowering.portable import mma_plan
from xegemm.kernel.render import render_mma

ALL = list(enumerate_mma_atoms())


def table(text: str) -> LaneMap:
    """A lane map typed as one line per lane of ``row,col`` cells (``-`` = padding)."""
    lanes = [[None if cell == "-" else tuple(int(x) for x in cell.split(",")) for cell in line.split()]
             for line in text.strip().splitlines()]
    return LaneMap.from_lists(lanes)


# ---------------------------------------------------------------------------------------------------
# names


@pytest.mark.parametrize("name", [
    "XE_8x16x16_F32BF16BF16F32_TT", "XE_4x16x32_S32S8U8S32_TT", "XE_8x8x16_F32F16F16F32_TT",
    "XE_8x16x8_F32TF32TF32F32_TT", "XE_8x16x64_S32S4S4S32_TT", "XE_1x16x16_BF16BF16BF16BF16_TT",
    "XE_3x8x64_S32U4S4S32_TT", "XE_7x16x16_F16F16F16F16_TT",
])
def test_name_round_trip(name):
    atom = MmaAtom.parse(name)
    assert atom.name == name
    assert MmaAtom.parse(atom.name) == atom


def test_parse_reads_the_fields():
    atom = MmaAtom.parse("XE_4x16x32_S32S8U8S32_TT")
    assert (atom.m, atom.n, atom.k, atom.d, atom.a, atom.b, atom.c) == (4, 16, 32, "S32", "S8", "U8", "S32")
    assert atom.fn_name == "xe_mma_4x16x32_s32s8u8s32"
    assert MmaAtom.of("BF16", "BF16", "F32") == MmaAtom.parse("XE_8x16x16_F32BF16BF16F32_TT")
    assert MmaAtom.of("U4", "U4", "S32", m=2, n=8).name == "XE_2x8x64_S32U4U4S32_TT"


def test_every_name_round_trips_and_fn_names_are_unique_identifiers():
    for atom in ALL:
        assert MmaAtom.parse(atom.name) == atom
        assert re.fullmatch(r"[a-z_][a-z0-9_]*", atom.fn_name)
    assert len({a.fn_name for a in ALL}) == len(ALL)


# ---------------------------------------------------------------------------------------------------
# enumeration and legality

SIMD16_TYPES = {("F32", "BF16", "BF16"), ("BF16", "BF16", "BF16"), ("F32", "F16", "F16"), ("F16", "F16", "F16"),
                ("F32", "TF32", "TF32")} | {("S32", f"{x}{w}", f"{y}{w}") for w in (8, 4) for x in "SU" for y in "SU"}
SIMD8_TYPES = {("F32", "BF16", "BF16"), ("F32", "F16", "F16")} | {
    ("S32", f"{x}{w}", f"{y}{w}") for w in (8, 4) for x in "SU" for y in "SU"}


def test_enumeration_is_every_legal_atom():
    got = {(a.n, a.m, a.d, a.a, a.b) for a in ALL}
    want = {(16, m, *t) for t in SIMD16_TYPES for m in range(1, 9)} | \
           {(8, m, *t) for t in SIMD8_TYPES for m in range(1, 9)}
    assert got == want
    assert len(ALL) == len(want) == 184
    assert all(a.c == a.d for a in ALL)
    assert {a.k for a in ALL if a.a in ("S4", "U4")} == {64}
    assert {a.k for a in ALL if a.a in ("S8", "U8")} == {32}
    assert {a.k for a in ALL if a.a in ("BF16", "F16")} == {16}
    assert {a.k for a in ALL if a.a == "TF32"} == {8}
    assert list(enumerate_mma_atoms(8)) == [a for a in ALL if a.n == 8]


@pytest.mark.parametrize("name, rule", [
    ("XE_8x8x16_BF16BF16BF16BF16_TT", "N=8 with a bf16 accumulator: DG2 (SIMD8) DPAS has only float accumulators "
                                      "for bf16/f16, OCLMMA"),
    ("XE_8x8x16_F16F16F16F16_TT", "N=8 with a f16 accumulator"),
    ("XE_8x8x8_F32TF32TF32F32_TT", "tf32 DPAS exists only at SIMD16"),
    ("XE_9x16x16_F32BF16BF16F32_TT", "M=9: M is the DPAS repeat count, 1..8"),
    ("XE_0x16x16_F32BF16BF16F32_TT", "M=0"),
    ("XE_8x32x16_F32BF16BF16F32_TT", "N=32: N is the DPAS execution size"),
    ("XE_8x16x32_F32BF16BF16F32_TT", "K=32: K = 8 (systolic depth) * 32 / bits = 16"),
    ("XE_8x16x16_S32S8S8S32_TT", "K=16"),
    ("XE_8x16x16_F32BF16F16F32_TT", "DPAS multiplies like float types only"),
    ("XE_8x16x32_S32S8S4S32_TT", "must both be 8-bit or both 4-bit"),
    ("XE_8x16x32_S32S8BF16S32_TT", "does not mix float and integer"),
    ("XE_8x16x16_S32BF16BF16S32_TT", "BF16 inputs with a S32 accumulator"),
    ("XE_8x16x8_BF16TF32TF32BF16_TT", "TF32 inputs with a BF16 accumulator"),
    ("XE_8x16x32_F32S8S8F32_TT", "S8 inputs with a F32 accumulator"),
    ("XE_8x16x16_F32BF16BF16BF16_TT", "C BF16 with D F32"),
    ("XE_8x16x8_F32F32F32F32_TT", "f32 and s32 are accumulator types only"),
    ("XE_8x16x16_F32BF16BF16F32", "not an MMA atom name"),
    ("XE_8x16x32_F32E4M3E4M3F32_TT", "not an MMA atom name"),
])
def test_illegal_names_name_the_rule(name, rule):
    with pytest.raises(MmaAtomError) as exc:
        MmaAtom.parse(name)
    assert rule in str(exc.value)
    assert isinstance(exc.value, XegemmError) and isinstance(exc.value, ValueError)


def test_direct_construction_is_checked_too():
    with pytest.raises(MmaAtomError, match="M=12"):
        MmaAtom(12, 16, 16, "F32", "BF16", "BF16", "F32")
    with pytest.raises(MmaAtomError, match="unknown element type code 'FP8'"):
        MmaAtom.of("FP8", "FP8", "F32")


def test_targets():
    assert MmaAtom.parse("XE_8x16x16_F32BF16BF16F32_TT").targets == ("pvc", "bmg", "lnl", "ptl")
    assert MmaAtom.parse("XE_8x8x16_F32BF16BF16F32_TT").targets == ("dg2",)
    assert not [a for a in ALL if "dg2" in a.targets and (a.a == "TF32" or a.c in ("BF16", "F16"))]


# ---------------------------------------------------------------------------------------------------
# per-work-item types and builtins (docs/atoms.md §3.4, docs/atoms.md §3.4)

@pytest.mark.parametrize("name, a, b, c, builtin", [
    ("XE_8x16x16_F32BF16BF16F32_TT", "short8", "int8", "float8", "intel_sub_group_bf16_bf16_matrix_mad_k16"),
    ("XE_4x16x16_F32BF16BF16F32_TT", "short4", "int8", "float4", "intel_sub_group_bf16_bf16_matrix_mad_k16"),
    ("XE_1x16x16_F32F16F16F32_TT", "short", "int8", "float", "intel_sub_group_f16_f16_matrix_mad_k16"),
    ("XE_8x16x16_BF16BF16BF16BF16_TT", "short8", "int8", "short8", "intel_sub_group_bf16_bf16_matrix_mad_k16"),
    ("XE_2x16x16_F16F16F16F16_TT", "short2", "int8", "half2", "intel_sub_group_f16_f16_matrix_mad_k16"),
    ("XE_8x16x32_S32S8S8S32_TT", "short8", "int8", "int8", "intel_sub_group_i8_i8_matrix_mad_k32"),
    ("XE_8x16x32_S32U8U8S32_TT", "ushort8", "uint8", "int8", "intel_sub_group_u8_u8_matrix_mad_k32"),
    ("XE_4x16x32_S32S8U8S32_TT", "short4", "uint8", "int4", "intel_sub_group_i8_u8_matrix_mad_k32"),
    ("XE_2x16x32_S32U8S8S32_TT", "ushort2", "int8", "int2", "intel_sub_group_u8_i8_matrix_mad_k32"),
    ("XE_8x16x64_S32S4S4S32_TT", "short8", "int8", "int8", "intel_sub_group_i4_i4_matrix_mad_k64"),
    ("XE_1x16x64_S32U4S4S32_TT", "ushort", "int8", "int", "intel_sub_group_u4_i4_matrix_mad_k64"),
    ("XE_8x16x8_F32TF32TF32F32_TT", "float4", "float8", "float8", "intel_sub_group_tf32_tf32_matrix_mad_k8"),
    ("XE_4x16x8_F32TF32TF32F32_TT", "float2", "float8", "float4", "intel_sub_group_tf32_tf32_matrix_mad_k8"),
    ("XE_2x16x8_F32TF32TF32F32_TT", "float", "float8", "float2", "intel_sub_group_tf32_tf32_matrix_mad_k8"),
    ("XE_1x16x8_F32TF32TF32F32_TT", "float", "float8", "float", "intel_sub_group_tf32_tf32_matrix_mad_k8"),
    ("XE_8x8x16_F32F16F16F32_TT", "int8", "int8", "float8", "intel_sub_group_f16_f16_matrix_mad_k16"),
    ("XE_2x8x16_F32BF16BF16F32_TT", "int2", "int8", "float2", "intel_sub_group_bf16_bf16_matrix_mad_k16"),
    ("XE_8x8x32_S32U8S8S32_TT", "uint8", "int8", "int8", "intel_sub_group_u8_i8_matrix_mad_k32"),
    ("XE_1x8x32_S32S8U8S32_TT", "int", "uint8", "int", "intel_sub_group_i8_u8_matrix_mad_k32"),
    ("XE_8x8x64_S32U4U4S32_TT", "uint8", "uint8", "int8", "intel_sub_group_u4_u4_matrix_mad_k64"),
])
def test_register_types_and_builtins(name, a, b, c, builtin):
    atom = MmaAtom.parse(name)
    assert (atom.a_ctype, atom.b_ctype, atom.c_ctype, atom.d_ctype) == (a, b, c, c)
    assert atom.builtin == atom.builtin_family == builtin


@pytest.mark.parametrize("name, a, c, register_m", [
    ("XE_3x16x16_F32BF16BF16F32_TT", "short4", "float4", 4),
    ("XE_5x16x32_S32S8S8S32_TT", "short8", "int8", 8),
    ("XE_7x8x16_F32F16F16F32_TT", "int8", "float8", 8),
    ("XE_3x16x8_F32TF32TF32F32_TT", "float2", "float4", 4),
    ("XE_6x16x8_F32TF32TF32F32_TT", "float4", "float8", 8),
])
def test_repeat_counts_without_builtin_use_padded_registers(name, a, c, register_m):
    atom = MmaAtom.parse(name)
    assert atom.builtin is None
    assert atom.builtin_family.startswith("intel_sub_group_")
    assert (atom.a_ctype, atom.c_ctype, atom.register_m) == (a, c, register_m)


def test_sizeof_ctype():
    assert [sizeof_ctype(t) for t in ("short8", "int8", "float4", "half2", "float", "ushort", "uint8")] == \
        [16, 32, 16, 4, 4, 2, 32]


def test_spirv_operand_flags_match_sycl_tla():
    # TLA:mma/spirv flag sums quoted in docs/atoms.md §3.2.
    flags = {n: MmaAtom.parse(n).spirv_operands for n in (
        "XE_8x16x32_S32S8S8S32_TT", "XE_8x16x32_S32U8U8S32_TT", "XE_8x16x16_F32BF16BF16F32_TT",
        "XE_8x16x16_BF16BF16BF16BF16_TT", "XE_8x16x16_F32F16F16F32_TT", "XE_8x16x8_F32TF32TF32F32_TT",
        "XE_8x16x64_S32S4U4S32_TT")}
    assert flags == {"XE_8x16x32_S32S8S8S32_TT": 0x1 + 0x2 + 0x10 + 0x20, "XE_8x16x32_S32U8U8S32_TT": 0x10 + 0x20,
                     "XE_8x16x16_F32BF16BF16F32_TT": 0x1000 + 0x2000,
                     "XE_8x16x16_BF16BF16BF16BF16_TT": 0x1000 + 0x2000 + 0xC,
                     "XE_8x16x16_F32F16F16F32_TT": 0x400 + 0x800, "XE_8x16x8_F32TF32TF32F32_TT": 0x100 + 0x200,
                     "XE_8x16x64_S32S4U4S32_TT": 0x1 + 0x40 + 0x80}


# ---------------------------------------------------------------------------------------------------
# lane maps against the facts

# bf16 8x16x16 (docs/atoms.md §4): A short8, lane l component r = A[m=r][k=l]; B int8 VNNI, lane l dword r =
# (low16 B[k=2r][n=l], high16 B[k=2r+1][n=l]), i.e. bf16 entries 2r, 2r+1 = B[2r][l], B[2r+1][l];
# C float8, lane l component r = C[m=r][n=l].
BF16_A = """
    0,0 1,0 2,0 3,0 4,0 5,0 6,0 7,0
    0,1 1,1 2,1 3,1 4,1 5,1 6,1 7,1
    0,2 1,2 2,2 3,2 4,2 5,2 6,2 7,2
    0,3 1,3 2,3 3,3 4,3 5,3 6,3 7,3
    0,4 1,4 2,4 3,4 4,4 5,4 6,4 7,4
    0,5 1,5 2,5 3,5 4,5 5,5 6,5 7,5
    0,6 1,6 2,6 3,6 4,6 5,6 6,6 7,6
    0,7 1,7 2,7 3,7 4,7 5,7 6,7 7,7
    0,8 1,8 2,8 3,8 4,8 5,8 6,8 7,8
    0,9 1,9 2,9 3,9 4,9 5,9 6,9 7,9
    0,10 1,10 2,10 3,10 4,10 5,10 6,10 7,10
    0,11 1,11 2,11 3,11 4,11 5,11 6,11 7,11
    0,12 1,12 2,12 3,12 4,12 5,12 6,12 7,12
    0,13 1,13 2,13 3,13 4,13 5,13 6,13 7,13
    0,14 1,14 2,14 3,14 4,14 5,14 6,14 7,14
    0,15 1,15 2,15 3,15 4,15 5,15 6,15 7,15
"""
BF16_B = """
    0,0 1,0 2,0 3,0 4,0 5,0 6,0 7,0 8,0 9,0 10,0 11,0 12,0 13,0 14,0 15,0
    0,1 1,1 2,1 3,1 4,1 5,1 6,1 7,1 8,1 9,1 10,1 11,1 12,1 13,1 14,1 15,1
    0,2 1,2 2,2 3,2 4,2 5,2 6,2 7,2 8,2 9,2 10,2 11,2 12,2 13,2 14,2 15,2
    0,3 1,3 2,3 3,3 4,3 5,3 6,3 7,3 8,3 9,3 10,3 11,3 12,3 13,3 14,3 15,3
    0,4 1,4 2,4 3,4 4,4 5,4 6,4 7,4 8,4 9,4 10,4 11,4 12,4 13,4 14,4 15,4
    0,5 1,5 2,5 3,5 4,5 5,5 6,5 7,5 8,5 9,5 10,5 11,5 12,5 13,5 14,5 15,5
    0,6 1,6 2,6 3,6 4,6 5,6 6,6 7,6 8,6 9,6 10,6 11,6 12,6 13,6 14,6 15,6
    0,7 1,7 2,7 3,7 4,7 5,7 6,7 7,7 8,7 9,7 10,7 11,7 12,7 13,7 14,7 15,7
    0,8 1,8 2,8 3,8 4,8 5,8 6,8 7,8 8,8 9,8 10,8 11,8 12,8 13,8 14,8 15,8
    0,9 1,9 2,9 3,9 4,9 5,9 6,9 7,9 8,9 9,9 10,9 11,9 12,9 13,9 14,9 15,9
    0,10 1,10 2,10 3,10 4,10 5,10 6,10 7,10 8,10 9,10 10,10 11,10 12,10 13,10 14,10 15,10
    0,11 1,11 2,11 3,11 4,11 5,11 6,11 7,11 8,11 9,11 10,11 11,11 12,11 13,11 14,11 15,11
    0,12 1,12 2,12 3,12 4,12 5,12 6,12 7,12 8,12 9,12 10,12 11,12 12,12 13,12 14,12 15,12
    0,13 1,13 2,13 3,13 4,13 5,13 6,13 7,13 8,13 9,13 10,13 11,13 12,13 13,13 14,13 15,13
    0,14 1,14 2,14 3,14 4,14 5,14 6,14 7,14 8,14 9,14 10,14 11,14 12,14 13,14 14,14 15,14
    0,15 1,15 2,15 3,15 4,15 5,15 6,15 7,15 8,15 9,15 10,15 11,15 12,15 13,15 14,15 15,15
"""
BF16_C = BF16_A   # C[m=r][n=l] is the same table of (row, col) as A[m=r][k=l]


def test_bf16_8x16x16_lane_maps_are_the_facts_tables():
    atom = MmaAtom.parse("XE_8x16x16_F32BF16BF16F32_TT")
    assert atom.lane_map("a") == table(BF16_A)
    assert atom.lane_map("b") == table(BF16_B)
    assert atom.lane_map("c") == atom.lane_map("d") == table(BF16_C)


def test_s8_8x16x32_lane_maps():
    # docs/atoms.md §4 "Other types": A short8: lane l comp r = {A[r][2l], A[r][2l+1]} (low byte first);
    # B int8: comp i = B[4i..4i+3][l]; C int8 = C[r][l].
    atom = MmaAtom.parse("XE_8x16x32_S32S8S8S32_TT")
    assert atom.lane_map("a").map == tuple(tuple(cell for r in range(8) for cell in ((r, 2 * l), (r, 2 * l + 1)))
                                           for l in range(16))
    assert atom.lane_map("b").map == tuple(tuple((4 * i + j, l) for i in range(8) for j in range(4))
                                           for l in range(16))
    assert atom.lane_map("c").map == tuple(tuple((r, l) for r in range(8)) for l in range(16))


def test_tf32_8x16x8_lane_maps():
    # docs/atoms.md §4: A float4: lane l comp v = A[m = 2v + l/8][k = l%8] (OCLTF32: first K work-items the even
    # rows, the rest the odd rows); B float8: comp k = B[k][l]; C float8 = C[r][l].
    atom = MmaAtom.parse("XE_8x16x8_F32TF32TF32F32_TT")
    assert atom.lane_map("a").map == tuple(tuple((2 * v + l // 8, l % 8) for v in range(4)) for l in range(16))
    assert atom.lane_map("b").map == tuple(tuple((k, l) for k in range(8)) for l in range(16))
    assert atom.lane_map("c").map == tuple(tuple((r, l) for r in range(8)) for l in range(16))


def test_tf32_odd_m_pads():
    one = MmaAtom.parse("XE_1x16x8_F32TF32TF32F32_TT")    # A float: lanes 8..15 would hold row 1
    assert one.lane_map("a").map == tuple(((0, l),) if l < 8 else (None,) for l in range(16))
    three = MmaAtom.parse("XE_3x16x8_F32TF32TF32F32_TT")  # A float2: rows 0,1 / 2,(3)
    assert three.lane_map("a").map == tuple(((l // 8, l % 8), (2, l) if l < 8 else None) for l in range(16))
    assert three.lane_map("c").map == tuple(((0, l), (1, l), (2, l), None) for l in range(16))


def test_dg2_simd8_lane_maps():
    # docs/atoms.md §4 "DG2 (SIMD8, N=8)": A int8: lane l comp r = {A[r][2l], A[r][2l+1]}; B int8: lane n comp i =
    # {B[2i][n], B[2i+1][n]}; C float8: C[r][n=l].  §3.4: each lane contributes 32 bits per row (4 int8, 8 int4).
    bf16 = MmaAtom.parse("XE_8x8x16_F32BF16BF16F32_TT")
    assert bf16.lane_map("a").map == tuple(tuple(c for r in range(8) for c in ((r, 2 * l), (r, 2 * l + 1)))
                                           for l in range(8))
    assert bf16.lane_map("b").map == tuple(tuple(c for i in range(8) for c in ((2 * i, n), (2 * i + 1, n)))
                                           for n in range(8))
    assert bf16.lane_map("c").map == tuple(tuple((r, l) for r in range(8)) for l in range(8))
    s8 = MmaAtom.parse("XE_8x8x32_S32S8S8S32_TT")
    assert s8.lane_map("a").map == tuple(tuple((r, 4 * l + j) for r in range(8) for j in range(4)) for l in range(8))
    s4 = MmaAtom.parse("XE_2x8x64_S32S4S4S32_TT")
    assert s4.lane_map("a").map == tuple(tuple((r, 8 * l + j) for r in range(2) for j in range(8)) for l in range(8))


def test_int4_simd16_a_has_four_nibbles_per_lane_and_row():
    atom = MmaAtom.parse("XE_8x16x64_S32S4S4S32_TT")
    assert atom.lane_map("a").map[5][:4] == ((0, 20), (0, 21), (0, 22), (0, 23))
    assert atom.lane_map("b").map[3][8:16] == tuple((k, 3) for k in range(8, 16))   # dword 1 = k 8..15


@pytest.mark.parametrize("atom", ALL, ids=lambda a: a.name)
def test_register_bytes_equal_sizeof_and_maps_cover_every_element_once(atom):
    for op in "abcd":
        lm = atom.lane_map(op)
        bits = atom.element(op).bits
        assert lm.lanes == atom.n
        assert lm.length * bits == 8 * sizeof_ctype(atom.ctype(op)) == 8 * atom.register_bytes(op)
        rows, cols = atom.operand_shape(op)
        cells = [c for lane in lm.map for c in lane if c is not None]
        assert sorted(cells) == [(r, c) for r in range(rows) for c in range(cols)], op
        if op in "acd":   # padding only for rows beyond M
            assert sum(c is None for lane in lm.map for c in lane) == \
                (atom.register_m - atom.m) * (atom.k if op == "a" else atom.n) + \
                (atom.n // 2 if op == "a" and atom.a == "TF32" and atom.register_m == 1 else 0)


def test_register_sizes_of_the_bf16_atom():
    atom = MmaAtom.parse("XE_8x16x16_F32BF16BF16F32_TT")
    assert (atom.register_bytes("a"), atom.lane_map("a").length) == (16, 8)    # short8 = 8 bf16
    assert (atom.register_bytes("b"), atom.lane_map("b").length) == (32, 16)   # int8 = 16 bf16
    assert (atom.register_bytes("c"), atom.lane_map("c").length) == (32, 8)    # float8


# ---------------------------------------------------------------------------------------------------
# register images, reference, tolerance


def _random(rng, atom, op):
    t = atom.element(op)
    shape = atom.operand_shape(op)
    if t.kind == "int":
        lo, hi = (-(1 << (t.bits - 1)), 1 << (t.bits - 1)) if t.signed else (0, 1 << t.bits)
        return rng.integers(lo, hi, size=shape)
    return round_to(t.code, rng.standard_normal(shape))


@pytest.mark.parametrize("atom", ALL, ids=lambda a: a.name)
def test_pack_unpack_round_trip(atom):
    rng = np.random.default_rng(atom.m * 131 + atom.k)
    for op in "abc":
        x = _random(rng, atom, op)
        image = pack_operand(atom, op, x)
        assert image.shape == (atom.n, atom.register_bytes(op)) and image.dtype == np.uint8
        np.testing.assert_array_equal(unpack_operand(atom, op, image), x)


def test_register_images_match_the_facts_bit_layout():
    atom = MmaAtom.parse("XE_8x16x16_F32BF16BF16F32_TT")
    rng = np.random.default_rng(1)
    a, b = _random(rng, atom, "a"), _random(rng, atom, "b")
    a_bits = (a.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    b_bits = (b.astype(np.float32).view(np.uint32) >> 16).astype(np.uint32)
    a_img = pack_operand(atom, "a", a).view("<u2")          # short8 per lane
    b_img = pack_operand(atom, "b", b).view("<u4")          # int8 per lane
    for lane in range(16):
        assert list(a_img[lane]) == list(a_bits[:, lane])   # component r = A[r][lane]
        assert list(b_img[lane]) == [b_bits[2 * i, lane] | (b_bits[2 * i + 1, lane] << 16) for i in range(8)]
    s4 = MmaAtom.parse("XE_1x16x64_S32S4S4S32_TT")
    x = np.zeros((1, 64), np.int64)
    x[0, 4:8] = [1, -1, 7, -8]                               # lane 1's short: nibbles low to high
    assert int(pack_operand(s4, "a", x).view("<u2")[1, 0]) == 0x1 | 0xF << 4 | 0x7 << 8 | 0x8 << 12


def test_pack_rejects_wrong_shapes_and_values():
    atom = MmaAtom.parse("XE_8x16x32_S32U8U8S32_TT")
    with pytest.raises(ValueError, match="is \\(8, 32\\)"):
        pack_operand(atom, "a", np.zeros((8, 16)))
    with pytest.raises(ValueError, match="do not fit U8"):
        pack_operand(atom, "a", np.full((8, 32), 256))


def test_reference_integer_math_is_exact_and_wraps():
    atom = MmaAtom.parse("XE_1x16x32_S32U8S8S32_TT")
    a = np.full((1, 32), 255)
    b = np.full((32, 16), -128)
    c = np.full((1, 16), -(1 << 31))
    d = numpy_reference(atom, a, b, c)
    assert d.dtype == np.int64
    want = (32 * 255 * -128 - (1 << 31) + (1 << 32))         # wraps past INT32_MIN
    assert (d == want).all() and -(1 << 31) <= want < (1 << 31)


def test_reference_rounds_float_inputs_and_results():
    bf = MmaAtom.parse("XE_1x16x16_BF16BF16BF16BF16_TT")
    a = np.zeros((1, 16))
    a[0, 0] = 1.0
    b = np.zeros((16, 16))
    b[0, :] = 1.0 + 2.0 ** -9                                # not a bf16: rounds (to even) to 1.0
    c = np.zeros((1, 16))
    c[0, 0] = 2.0 ** -8                                      # 1 + 2^-8: a bf16 tie, rounds to even 1.0
    c[0, 1] = 3 * 2.0 ** -8                                  # 1 + 3*2^-8: tie, rounds up to 1 + 2^-6
    d = numpy_reference(bf, a, b, c)
    assert d[0, 0] == 1.0 and d[0, 1] == 1.0 + 2.0 ** -6 and d[0, 2] == 1.0
    tf = MmaAtom.parse("XE_1x16x8_F32TF32TF32F32_TT")
    a = np.zeros((1, 8))
    a[0, 0] = 1.0 + 2.0 ** -12                               # low 13 mantissa bits of an f32: cleared
    assert numpy_reference(tf, a, np.ones((8, 16)), np.zeros((1, 16)))[0, 0] == 1.0


def test_tolerance_formula():
    u = 2.0 ** -24
    assert tolerance(MmaAtom.parse("XE_8x16x16_F32BF16BF16F32_TT")) == 2 * 17 * u
    assert tolerance(MmaAtom.parse("XE_8x16x8_F32TF32TF32F32_TT")) == 2 * 9 * u
    assert tolerance(MmaAtom.parse("XE_8x16x16_BF16BF16BF16BF16_TT")) == 2 * 17 * u + 2 * 2.0 ** -8
    assert tolerance(MmaAtom.parse("XE_8x16x16_F16F16F16F16_TT")) == 2 * 17 * u + 2 * 2.0 ** -11
    assert tolerance(MmaAtom.parse("XE_8x16x32_S32S8S8S32_TT")) == 0.0
    atom = MmaAtom.parse("XE_1x16x16_F32F16F16F32_TT")
    a, b, c = np.ones((1, 16)), -np.ones((16, 16)), np.full((1, 16), 3.0)
    assert np.allclose(error_bound(atom, a, b, c), tolerance(atom) * 19.0)


def test_tolerance_catches_one_misplaced_product():
    """A single wrong k (one product off) is far outside the bound: the device comparison can fail."""
    atom = MmaAtom.parse("XE_8x16x16_F32BF16BF16F32_TT")
    rng = np.random.default_rng(3)
    a, b, c = (_random(rng, atom, op) for op in "abc")
    swapped = a.copy()
    swapped[:, [0, 1]] = swapped[:, [1, 0]]
    assert (np.abs(numpy_reference(atom, swapped, b, c) - numpy_reference(atom, a, b, c))
            > error_bound(atom, a, b, c)).any()


# ---------------------------------------------------------------------------------------------------
# rendering


def _signature(source: str, fn: str) -> str:
    return next(line for line in source.splitlines() if f" {fn}(" in line and line.startswith("static inline"))


@pytest.mark.parametrize("atom", ALL, ids=lambda a: a.name)
def test_both_lowerings_define_the_same_function(atom):
    native, portable = render_mma(atom, "native"), render_mma(atom, "portable")
    want = f"static inline {atom.c_ctype} {atom.fn_name}({atom.a_ctype} a, {atom.b_ctype} b, {atom.c_ctype} c)"
    assert _signature(native, atom.fn_name) == _signature(portable, atom.fn_name) == want
    assert f"return {atom.builtin_family}(a, b, c);" in native
    assert ("OpenCL has no builtin for repeat count" in native) == (atom.builtin is None)
    assert "matrix_mad" not in portable
    loops = mma_plan(atom).a_loops
    assert sum(loop.count * len(loop.terms) for loop in loops) == atom.k   # every column of A exactly once
    assert portable.count("intel_sub_group_shuffle(") == sum(column.count("intel_sub_group_shuffle(")
                                                             for loop in loops for column, _ in loop.terms) > 0
    assert ("cl_khr_fp16" in portable) == ("F16" in (atom.a, atom.c))


def test_portable_code_reads_like_the_lane_map():
    src = render_mma(MmaAtom.parse("XE_8x16x32_S32S8U8S32_TT"), "portable")
    assert "for (uint i = 0; i < 16; ++i) {  /* A[:][2 * i .. 2 * i + 1] (every row) from lane i */" in src
    assert "const uint8 av1 = as_uint8(convert_int8(as_char8(convert_uchar8((ar >> 8) & 0xffu))));" in src
    assert "d += intel_sub_group_shuffle(av1, i) * bk[2 * i + 1];" in src   # s8 A: high byte = odd k
    assert "bk[5] = (int)((as_uint(b.s1) >> 8) & 0xffu);" in src           # u8 B: zero-extended, k 5 = dword 1 byte 1
    tf32 = render_mma(MmaAtom.parse("XE_8x16x8_F32TF32TF32F32_TT"), "portable")
    assert "/* A[:][i] (every row) from lane i and lane i + 8 */" in tf32   # even rows in lane i, odd in i + 8
    assert "d += ((float8)(intel_sub_group_shuffle(av0, i), intel_sub_group_shuffle(av0, i + 8))).s04152637" \
           " * bk[i];" in tf32
    bf16 = render_mma(MmaAtom.parse("XE_3x16x16_BF16BF16BF16BF16_TT"), "portable")
    assert "return (short4)(as_short(xe_f32_to_bf16_rne(d.s0)), as_short(xe_f32_to_bf16_rne(d.s1)), " \
           "as_short(xe_f32_to_bf16_rne(d.s2)), c.s3);" in bf16


def test_render_many_and_reject_unknown_lowering():
    atoms = [a for a in ALL if a.m == 8 and a.n == 16]
    src = render_mma(atoms, "portable")
    assert all(f" {a.fn_name}(" in src for a in atoms)
    assert src.count("#define XE_F32_TO_BF16_RNE") == 1   # emitted by each bf16-acc atom, guarded
    with pytest.raises(ValueError, match="lowering must be one of"):
        render_mma(atoms[0], "vectorised")


# ---------------------------------------------------------------------------------------------------
# the native lowering against a real Xe compiler (old ocloc; tf32 has another name there: docs/compilers.md)



@pytest.mark.ocloc
@pytest.mark.parametrize("n, device", [(16, "pvc"), (8, "dg2-g10")])
def test_native_lowering_compiles_for_xe(tmp_path, n, device):
    atoms = [a for a in enumerate_mma_atoms(n) if a.a != "TF32"]
    kernels = "".join(f"""
__attribute__((intel_reqd_sub_group_size({a.n})))
__kernel void k_{a.fn_name}(__global const {a.a_ctype}* a, __global const {a.b_ctype}* b, __global {a.c_ctype}* d)
{{ const size_t i = get_global_id(0); d[i] = {a.fn_name}(a[i], b[i], d[i]); }}
""" for a in atoms)
    src = tmp_path / "native.cl"
    src.write_text(render_mma(atoms, "native") + kernels)
    run = subprocess.run([find_ocloc(), "compile", "-file", str(src), "-device", device, "-output_no_suffix",
                          "-out_dir", str(tmp_path), "-options", "-Dcl_intel_subgroup_matrix_multiply_accumulate"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
