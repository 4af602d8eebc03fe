"""The copy atom model against the sycl-tla copy document (docs/atoms.md §1.1), the layouts docs/atoms.md states and the sycl-tla catalog."""

import csv
from pathlib import Path

import pytest

from xegemm.atoms.copy import AtomError, CopyAtom, copy_atom, enumerate_copy_atoms, message_violations, Message
from xegemm.atoms.mma import MmaAtom

CATALOG = Path(__file__).parent / "data" / "sycl_tla_copy_catalog.tsv"
CTYPE_BYTES = {"uchar": 1, "ushort": 2, "uint": 4, "ulong": 8}


def _catalog():
    with open(CATALOG) as f:
        return list(csv.DictReader((line for line in f if not line.startswith("#")), delimiter="\t"))


def _type_bytes(t: str) -> int:
    base = t.rstrip("0123456789")
    n = t[len(base):]
    return CTYPE_BYTES[base] * (int(n) if n else 1)


def lanes(name):
    return CopyAtom.parse(name).lane_map.map


# ---- the examples of sycl-tla's xe_2d_copy.md (docs/atoms.md §1.1) ---------------------------

def test_copy_doc_u16x32x16_ld_n_one_column_per_work_item():
    m = lanes("XE_2D_U16x32x16_LD_N")
    for wi in range(16):  # "Work-item i: Column i", 32 elements
        assert list(m[wi]) == [(r, wi) for r in range(32)]


def test_copy_doc_u16x32x32_ld_n_two_columns_16_apart():
    m = lanes("XE_2D_U16x32x32_LD_N")
    for wi in range(16):  # "Column i and Column i+16", each 32 elements (facts: comp 32+r = A[r][16+l])
        assert list(m[wi]) == [(r, wi) for r in range(32)] + [(r, wi + 16) for r in range(32)]


@pytest.mark.parametrize("name", ["XE_2D_U16x32x16_LD_V", "XE_2D_U16x32x32_LD_V"])
def test_copy_doc_same_columns_for_ld_v(name):
    # "The same applies to the LD_V and LD_T operations": LD_V holds the same columns, VNNI-ordered.
    a = CopyAtom.parse(name)
    for wi in range(16):
        cols = {c for _, c in a.lane_map.map[wi]}
        assert cols == {wi + 16 * b for b in range(a.cols // 16)}
        assert len(a.lane_map.map[wi]) == 32 * (a.cols // 16)


def test_copy_doc_packed_u8x8x32_adjacent_columns():
    m = lanes("XE_2D_Packed_U8x8x32_LD_N")
    for wi in range(16):  # "Column 2i, 2i+1", 8 elements each; facts: comp r = {A[r][2l], A[r][2l+1]}
        assert list(m[wi]) == [(r, 2 * wi + j) for r in range(8) for j in range(2)]


def test_copy_doc_packed_u8x8x64_groups_32_apart():
    m = lanes("XE_2D_Packed_U8x8x64_LD_N")
    for wi in range(16):  # "Column 2i, 2i+1 and Column 32+2i, 32+2i+1"
        assert {c for _, c in m[wi]} == {2 * wi, 2 * wi + 1, 32 + 2 * wi, 33 + 2 * wi}
        assert list(m[wi][:16]) == [(r, 2 * wi + j) for r in range(8) for j in range(2)]


# ---- facts: SPV_INTEL_2d_block_io mapping examples (docs/atoms.md §2, §4) ----------------------------

def test_vnni_d16_packs_row_pairs_low_first():
    m = lanes("XE_2D_U16x16x16_LD_V")  # uint8: comp i = (row 2i low16, row 2i+1 high16) of column l
    for lane in range(16):
        assert list(m[lane]) == [(r, lane) for r in range(16)]
    assert CopyAtom.parse("XE_2D_U16x16x16_LD_V").register_type == "uint8"


def test_vnni_d8_packs_four_rows():
    a = CopyAtom.parse("XE_2D_U8x32x16_LD_V")  # uint8: comp i = rows 4i..4i+3, byte 0 = row 4i
    assert a.register_type == "uint8"
    for lane in range(16):
        assert list(a.lane_map.map[lane]) == [(4 * i + b, lane) for i in range(8) for b in range(4)]


def test_d32_transpose_16_rows():
    a = CopyAtom.parse("XE_2D_U32x16x8_LD_T")  # uint8: lane l = memory row l, comp c = memory column c
    assert a.register_type == "uint8"
    for lane in range(16):
        assert list(a.lane_map.map[lane]) == [(lane, c) for c in range(8)]


def test_d32_transpose_32_rows_gives_two_rows_per_lane():
    a = CopyAtom.parse("XE_2D_U32x32x8_LD_T")  # uint16: comp 2c / 2c+1 = (row 2l, col c) / (row 2l+1, col c)
    assert a.register_type == "uint16"
    for lane in range(16):
        assert list(a.lane_map.map[lane]) == [(2 * lane + j, c) for c in range(8) for j in range(2)]


def test_u16_transpose_is_the_vnni_b_operand_of_a_column_major_b():
    # docs/atoms.md §1.4: LD_T of 16-bit col-major B puts memory row n in lane n, dword c = (k=2c, 2c+1).
    a = CopyAtom.parse("XE_2D_U16x16x16_LD_T")
    assert a.register_type == "uint8" and a.message == Message("transpose", 32, 8, 16, 1)
    for lane in range(16):
        assert list(a.lane_map.map[lane]) == [(lane, k) for k in range(16)]


def test_tf32_eight_wide_rows_share_a_register_row():
    # tf32 A operand (docs/atoms.md §4 "Other types"): lane l comp v = A[m = 2v + l/8][k = l % 8]
    m = lanes("XE_2D_TF32x8x8_LD_N")
    for lane in range(16):
        assert list(m[lane]) == [(2 * v + lane // 8, lane % 8) for v in range(4)]


def test_one_row_of_eight_dwords_leaves_lanes_8_to_15_empty():
    # OCL2D: for a 1-row read of 8 dwords lanes 8-15 are undefined -> padding in the lane map
    m = lanes("XE_2D_TF32x1x8_LD_N")
    assert [list(m[lane]) for lane in range(8)] == [[(0, lane)] for lane in range(8)]
    assert all(m[lane] == (None,) for lane in range(8, 16))


def test_u4_row_load_is_the_8_bit_message_that_deals_the_int4_dpas_a_operand():
    # docs/atoms.md §1.2: sycl-tla's XE_2D_U4x32x64_LD_N is IB_read_flat_u8_m32k32v1 -> ushort32; each ushort holds
    # bytes 2l, 2l+1 of a 32-byte row = nibbles 4l..4l+3, low first: the s4/u4 DPAS A operand (lane l: k 4l..4l+3)
    a = CopyAtom.parse("XE_2D_U4x32x64_LD_N")
    assert a.message == Message("load", 8, 32, 32, 1) and a.register_type == "ushort32"
    for lane in range(16):
        assert list(a.lane_map.map[lane]) == [(r, 4 * lane + j) for r in range(32) for j in range(4)]
    mma = MmaAtom.parse("XE_8x16x64_S32S4S4S32_TT")
    assert CopyAtom.parse("XE_2D_U4x8x64_LD_N").lane_map.map == mma.lane_map("a").map


def test_u4_vnni_load_is_the_d8_vnni_load_of_the_same_bytes():
    # the d8 VNNI rule above (dword i = rows 4i..4i+3 of byte column l, row 4i in byte 0) on 4-bit data: byte
    # column l holds nibble columns 2l (low nibble) and 2l + 1
    a = CopyAtom.parse("XE_2D_U4x32x32_LD_V")
    assert a.message == Message("transform", 8, 16, 32, 1) and a.register_type == "uint8"
    for lane in range(16):
        assert list(a.lane_map.map[lane]) == [(4 * i + j, 2 * lane + h) for i in range(8) for j in range(4) for h in range(2)]


def test_u4_nibbles_are_little_endian_in_their_dword():
    m = lanes("XE_2D_Packed_U4x1x128_LD_N")  # u32 message, 8 nibbles per lane, low nibble first
    for lane in range(16):
        assert list(m[lane]) == [(0, 8 * lane + j) for j in range(8)]


def test_bf16_dpas_operand_atoms_have_the_facts_register_types():
    assert copy_atom("XE_2D_U16x8x16_LD_N").register_type == "ushort8"    # A: short8
    assert copy_atom("XE_2D_U16x16x16_LD_V").register_type == "uint8"     # B: int8
    assert copy_atom("XE_2D_U32x8x16_ST_N").register_type == "uint8"      # C/D: float8
    assert copy_atom("XE_2D_U16x32x32_LD_N").register_type == "ushort64"


# ---- every lane map is a partition of the block ------------------------------------------------------

@pytest.mark.parametrize("atom", [a for a in enumerate_copy_atoms(include_quirks=False) if not a.is_prefetch],
                         ids=lambda a: a.name)
def test_lane_map_holds_every_element_exactly_once(atom):
    held = [c for lane in atom.lane_map.map for c in lane if c is not None]
    assert len(held) == len(set(held)) == atom.rows * atom.cols
    assert set(held) == {(r, c) for r in range(atom.rows) for c in range(atom.cols)}
    assert atom.lane_map.lanes == 16
    assert atom.elems_per_lane * atom.elem_bits == 8 * _type_bytes(atom.register_type)


# ---- sycl-tla catalog --------------------------------------------------------------------------------

def test_enumeration_yields_every_sycl_tla_atom_and_flags_the_suspicious_ones():
    names = {a.name: a for a in enumerate_copy_atoms()}
    for row in _catalog():
        assert row["name"] in names, row["name"]
        atom = names[row["name"]]
        if not atom.legal:
            assert atom.quirk, f"{atom.name} breaks {atom.violations()} but is not flagged"


def test_catalog_messages_and_register_sizes_agree_unless_flagged():
    for row in _catalog():
        atom = CopyAtom.parse(row["name"])
        msg = atom.message
        ours = (msg.elem_bits, msg.width, msg.height, msg.count)
        theirs = tuple(int(row[k]) for k in ("elem_bits", "block_width", "block_height", "block_count"))
        same_regs = not row["register_type"] or atom.register_bytes == _type_bytes(row["register_type"])
        if atom.quirk is None:
            assert ours == theirs and same_regs, (atom.name, ours, theirs, atom.register_type, row["register_type"])


def test_flagged_atoms_are_exactly_the_known_deviations():
    flagged = {a.name for a in enumerate_copy_atoms() if a.quirk}
    assert {"XE_2D_U8x32x32_LD_N", "XE_2D_U8x8x32_ST_N", "XE_2D_U64x8x4_LD_T", "XE_2D_U4x32x16_LD_T"} <= flagged
    catalog = {row["name"] for row in _catalog()}
    assert flagged <= catalog


def test_builtin_spellings():
    assert copy_atom("XE_2D_U16x8x16_LD_N").ib_builtin == "__builtin_IB_subgroup_block_read_flat_u16_m8k16v1"
    assert copy_atom("XE_2D_U16x32x32_LD_V").ib_builtin == "__builtin_IB_subgroup_block_read_flat_transform_u16_k32v2"
    assert copy_atom("XE_2D_U16x16x16_LD_T").ib_builtin == "__builtin_IB_subgroup_block_read_flat_transpose_u32_k8"
    assert copy_atom("XE_2D_U32x8x16_ST_N").ib_builtin == "__builtin_IB_subgroup_block_write_flat_u32_m8k16v1"
    assert copy_atom("XE_2D_U16x32x32_LD_N").ocl_builtin == "intel_sub_group_2d_block_read_16b_32r16x2c"
    assert copy_atom("XE_2D_U16x16x16_LD_T").ocl_builtin == "intel_sub_group_2d_block_read_transpose_32b_16r8x1c"


# ---- legality ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, rule", [
    ("XE_2D_U16x64x16_LD_N", "block height 64"),
    ("XE_2D_U32x16x16_ST_N", "stores take 1..8 rows"),
    ("XE_2D_U32x8x64_LD_N", "must be <= 64 B"),
    ("XE_2D_U32x16x16_LD_V", "VNNI (LD_V) packs 8- and 16-bit data only"),
    ("XE_2D_U32x16x16_LD_T", "d32 transpose width 16"),
    ("XE_2D_U16x8x16_ST_T", "stores write row-major blocks only"),
    ("XE_2D_Packed_U32x8x16_LD_N", "Packed_ copies exist for U4, U8 and U16 only"),
    ("XE_2D_U64x16x2_LD_T", "d64 transpose"),
    ("XE_2D_U16x8x48_LD_N", "powers of two"),
    ("XE_2D_U8x8x32_ST_N", "block count 2"),
])
def test_illegal_atoms_name_the_rule_and_suggest_legal_neighbours(name, rule):
    with pytest.raises(AtomError) as exc:
        copy_atom(name)
    msg = str(exc.value)
    assert rule in msg and "Nearest legal atoms: XE_2D_" in msg
    for suggestion in msg.split("Nearest legal atoms: ")[1].split(", "):
        assert CopyAtom.parse(suggestion).legal


@pytest.mark.parametrize("bad", ["XE_2D_U16x8_LD_N", "XE_2D_U12x8x16_LD_N", "XE_2D_U16x8x16_LD_X", "XE_8x16x16"])
def test_malformed_names(bad):
    with pytest.raises(AtomError, match="not a 2D copy atom name"):
        CopyAtom.parse(bad)


def test_name_round_trip_and_message_rules():
    for a in enumerate_copy_atoms():
        assert CopyAtom.parse(a.name) == a
    assert message_violations(Message("load", 16, 16, 32, 2)) == []
    assert any("<= 64 B" in v for v in message_violations(Message("load", 16, 16, 32, 4)))
    assert not any("2048 B" in v for v in message_violations(Message("load", 8, 16, 32, 4)))  # exactly 2048 B
    assert any("512 B" in v for v in message_violations(Message("store", 32, 16, 16, 1)))
