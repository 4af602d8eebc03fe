"""dg2 (Xe-HPG): SIMD8 DPAS over 1D sub-group block copies.

- the 1D block atoms' lane maps against the SIMD8 DPAS layouts of the facts (docs/atoms.md §4) and,
  bit for bit, against the DPAS atoms' register images;
- the planner's SIMD8 path: which atoms it composes, the register estimate with 32-byte GRFs, and what it
  rejects with the rule;
- on the real default device: both lowerings of the 1D atoms against their lane maps (inside the surface
  and over its edges), and whole GEMMs, portable and with the native 1D copies (the Intel CPU runtime has
  cl_intel_subgroups, _char, _short and _long), verified against numpy;
- ahead of time with ocloc for dg2: the machine code issues exactly the predicted SIMD8 dpas and 1D block
  reads per k-step.
"""

import ctypes
import zlib

import numpy as np
import pytest

from xegemm import evaluate

from xegemm.jobs import pipeline
from xegemm.aot.isa import parse_instructions
from xegemm.atoms.block1d import Block1DAtom, Block1DError, enumerate_block1d_atoms
from xegemm.atoms.mma import MmaAtom, encode, pack_operand
from xegemm.config import config_from_text
from xegemm.aot.capabilities import DEBIAN_CAPABILITIES
from xegemm.lowering.native import count_messages, lower_copy, native_capabilities
from xegemm.plan.planner import PlanRejected, plan
from xegemm.plan.surfaces import native_surface_violations
from xegemm.lowering import Lowering
from xegemm.kernel.render import render_kernel, render_macro, wide_vector_typedefs

DG2 = native_capabilities(DEBIAN_CAPABILITIES, "dg2")
SG8 = "tile: {workgroup: [32, 32, 32], subgroups: [2, 2], subgroup_size: 8}\n"


def _plan(text: str):
    return plan(config_from_text("problem: {m: 512, n: 512, k: 512}\n" + text))


# ---- lane maps -----------------------------------------------------------------------------------------

def test_lane_maps_are_the_simd8_dpas_layouts_of_the_facts():
    """docs/atoms.md §4: "DG2 (SIMD8, N=8): A int8: lane l comp r = {A[r][2l], A[r][2l+1]}; B int8: lane n comp
    i = {B[2i][n], B[2i+1][n]}; C float8: C[r][n=l]" (16-bit elements listed low half first)."""
    a = Block1DAtom.parse("XE_1D_U16x8x16_LD_SG8")      # 8 rows, one uint block read each
    b = Block1DAtom.parse("XE_1D_U16x16x8_LD_SG8")      # 16 rows, one ushort block read each
    c = Block1DAtom.parse("XE_1D_U32x8x8_ST_SG8")       # 8 rows, one uint block write each
    assert (a.chunk_bits, a.register_type, a.builtin) == (32, "uint8", "intel_sub_group_block_read")
    assert (b.chunk_bits, b.register_type, b.builtin) == (16, "ushort16", "intel_sub_group_block_read_us")
    assert (c.chunk_bits, c.register_type, c.builtin) == (32, "uint8", "intel_sub_group_block_write")
    for lane in range(8):
        assert a.lane_map.map[lane] == tuple(x for r in range(8) for x in ((r, 2 * lane), (r, 2 * lane + 1)))
        assert b.lane_map.map[lane] == tuple(x for i in range(8) for x in ((2 * i, lane), (2 * i + 1, lane)))
        assert c.lane_map.map[lane] == tuple((r, lane) for r in range(8))
    bf16 = MmaAtom.of("BF16", "BF16", "F32", m=8, n=8)
    assert a.lane_map == bf16.lane_map("a") and b.lane_map == bf16.lane_map("b")
    assert c.lane_map == bf16.lane_map("c")


def test_4bit_tiles_deal_nibbles_in_memory_order():
    """4-bit elements lie two to a byte, the lower column in the low nibble; a uint block read of a row of 64
    nibbles gives lane l the columns 8l .. 8l + 7, which is the SIMD8 int4 DPAS A operand: "each lane
    contributes 32 bits per row (... 8 int4)" (docs/atoms.md §3.4, OCLMMA).  Row-major 4-bit B has no such
    tile: a byte holds two columns of B, the DPAS gives each lane one column (a gather, tests/test_layouts.py)."""
    a = Block1DAtom.parse("XE_1D_U4x8x64_LD_SG8")
    assert (a.chunk_bits, a.register_type, a.builtin, a.row_bytes) == (32, "uint8", "intel_sub_group_block_read", 32)
    assert (a.unit_bits, a.chunk_units, a.x_bytes) == (8, 4, "(long)x / 2")
    for lane in range(8):
        assert a.lane_map.map[lane] == tuple((r, 8 * lane + j) for r in range(8) for j in range(8))
    for types in (("S4", "S4", "S32"), ("U4", "S4", "S32")):
        assert a.lane_map == MmaAtom.of(*types, m=8, n=8).lane_map("a")
    b = Block1DAtom.parse("XE_1D_U4x32x16_LD_SG8")      # 32 rows of 16 nibbles: one uchar per lane and row
    assert (b.chunk_bits, b.register_type, b.chunk_units) == (8, "uchar32", 1)
    assert b.lane_map.map[3][:4] == ((0, 6), (0, 7), (1, 6), (1, 7))
    with pytest.raises(Block1DError, match="8/16/32/64-bit chunks"):
        Block1DAtom.parse("XE_1D_U4x8x8_LD_SG8").check()      # 4 bits per lane


def _register_image(atom: Block1DAtom, bits) -> np.ndarray:
    """Per lane, the bytes of a tile's registers holding the element bit patterns ``bits`` (rows x cols), from
    its lane map: elements little-endian, 4-bit ones two per byte with the first in the low nibble."""
    elems = np.array([[bits[r, c] for r, c in lane] for lane in atom.lane_map.map], np.uint64)
    if atom.elem_bits == 4:
        return (elems[:, 0::2] | elems[:, 1::2] << np.uint64(4)).astype(np.uint8)
    return elems.astype(f"<u{atom.elem_bits // 8}").view(np.uint8).reshape(atom.lanes, -1)


@pytest.mark.parametrize("types, a_name, b_name", [
    (("BF16", "BF16", "F32"), "XE_1D_U16x8x16_LD_SG8", "XE_1D_U16x16x8_LD_SG8"),
    (("F16", "F16", "F32"), "XE_1D_U16x8x16_LD_SG8", "XE_1D_U16x16x8_LD_SG8"),
    (("S8", "U8", "S32"), "XE_1D_U8x8x32_LD_SG8", "XE_1D_U8x32x8_LD_SG8"),
    (("U4", "S4", "S32"), "XE_1D_U4x8x64_LD_SG8", None),
])
def test_tile_registers_are_the_dpas_operand_bit_for_bit(types, a_name, b_name):
    """Rows r and r+1 (r+3 for 8-bit data) of consecutive block reads, one element per lane each, are the
    VNNI dword the DPAS B operand wants: the tile's register image equals the DPAS atom's."""
    atom = MmaAtom.of(*types, m=8, n=8)
    rng = np.random.default_rng(1)
    for operand, name in (("a", a_name), ("b", b_name)):
        if name is None:
            continue
        tile = Block1DAtom.parse(name)
        shape = atom.operand_shape(operand)
        if atom.is_integer:
            lo, hi = atom.element(operand).value_range
            matrix = rng.integers(lo, hi + 1, size=shape)
        else:
            matrix = rng.uniform(-1, 1, size=shape)
        want = pack_operand(atom, operand, matrix)
        # the tile's registers: element k of lane l is matrix[lane_map[l][k]], little-endian elements
        image = _register_image(tile, encode(atom.element(operand).code, matrix))
        assert tile.register_bytes == atom.register_bytes(operand)
        assert np.array_equal(image, want), (name, operand)


def test_every_tile_deals_each_element_to_exactly_one_lane():
    for lanes in (8, 16):
        for bits in (4, 8, 16, 32, 64):
            for atom in enumerate_block1d_atoms(lanes, "LD", bits):
                coords = [c for lane in atom.lane_map.map for c in lane]
                assert sorted(coords) == [(r, c) for r in range(atom.rows) for c in range(atom.cols)], atom.name
                assert atom.lane_map.lanes == lanes and atom.messages == atom.rows
                assert Block1DAtom.parse(atom.name) == atom


def test_illegal_tiles_say_which_rule():
    with pytest.raises(Block1DError, match="8/16/32/64-bit chunks"):
        Block1DAtom.parse("XE_1D_U16x8x12_LD_SG8").check()
    with pytest.raises(Block1DError, match="power of two"):
        Block1DAtom.parse("XE_1D_U32x6x8_LD_SG8").check()
    with pytest.raises(Block1DError, match="not a 1D block atom name"):
        Block1DAtom.parse("XE_2D_U16x8x16_LD_N")


# ---- the planner ---------------------------------------------------------------------------------------

def test_subgroup_size_8_plans_simd8_dpas_over_1d_block_tiles():
    p = _plan(SG8)
    assert p.mma.name == "XE_8x8x16_F32BF16BF16F32_TT" and p.uses_block1d
    assert (p.a.atom.name, p.b.atom.name, p.c.atom.name) == (
        "XE_1D_U16x8x16_LD_SG8", "XE_1D_U16x16x8_LD_SG8", "XE_1D_U32x8x8_ST_SG8")
    assert p.subgroup_tile == (16, 16) and p.mma_grid == (2, 2, 2) and p.workgroup_size == (16, 2, 1)
    assert p.name.endswith("_dpas8x8x16_au16x8x16s8_bu16x16x8s8_cu32x8x8s8_pf2_grf256")
    # every fragment is a whole tile: A/B/C tiles hold exactly one DPAS operand each
    assert all(f.offset == 0 for op in (p.a, p.b, p.c) for f in op.fragments.values())
    assert len(p.a.tiles) == 4 and len(p.b.tiles) == 4 and len(p.c.tiles) == 4
    assert p.predicted_messages() == {"dpas": 8, "load_a": 32, "load_b": 64, "prefetch": 8, "store_c": 32}
    # 32-byte GRFs: C 16x16 f32 = 1 KiB = 32 GRF; A tiles of 8 lanes x 32 B = 8 GRF, two per k-chunk + 1/8 of
    # the two the next chunk adds = 18 GRF (B likewise); no prefetch term for 1D tiles (measured for 2D block
    # tiles only); 18 reserved in 256-GRF mode + 8 for the work-group's two sub-groups
    assert p.registers == {"acc_grf": 32, "a_grf": 18, "b_grf": 18, "prefetch_grf": 0, "reorder_grf": 0,
                           "reserved_grf": 26, "total_grf": 94, "budget_grf": 256, "verdict": "fits"}
    # a fragment that is not a whole tile: M = 4 rows of A per DPAS, 8 rows per tile, both halves found
    s8 = _plan("types: {a: s8, b: u8, acc: s32, c: s32}\n"
               "tile: {workgroup: [4, 16, 64], subgroups: [1, 2], subgroup_size: 8}\n")
    assert s8.mma.name == "XE_4x8x32_S32S8U8S32_TT" and s8.a.atom.name == "XE_1D_U8x4x32_LD_SG8"
    assert s8.b.atom.name == "XE_1D_U8x32x8_LD_SG8" and s8.c.atom.name == "XE_1D_U32x4x8_ST_SG8"


@pytest.mark.parametrize("text, rule", [
    ("layout: {a: col}\ntypes: {a: u8, b: u8, acc: s32, c: s32}\n"
     "tile: {workgroup: [4, 16, 64], subgroups: [1, 2], subgroup_size: 8}",
     "column-major A has memory rows of 4 x 8 bits .* use a sub-group tile with M >= 8"),
    ("types: {a: tf32, b: tf32}", "N=8 with tf32: tf32 DPAS exists only at SIMD16"),
    ("types: {acc: bf16, c: bf16}", "N=8 with a bf16 accumulator"),
    ("atoms: {a: XE_2D_U16x8x16_LD_N}", "is an Xe 2D block copy, but sub-group size 8 plans move tiles with 1D"),
    ("atoms: {mma: XE_8x16x16_F32BF16BF16F32_TT}", "executes at sub-group size 16"),
    ("tile: {workgroup: [64, 64, 32], subgroups: [2, 2], subgroup_size: 8}\ntarget: {grf: 128}",
     "registers: accumulators 128 \\+ A 36 \\+ B 36 \\+ 28 reserved = 228 GRF > 128 GRF per thread of 32 B "
     "at sub-group size 8"),
    ("tile: {workgroup: [32, 32, 32], subgroups: [2, 2], subgroup_size: 32}", "sub-group size 32: DPAS"),
    ("types: {a: s4, b: u4, acc: s32, c: s32}\ntile: {workgroup: [16, 16, 128], subgroups: [1, 2], "
     "subgroup_size: 8}", "row-major B has memory rows of 8 x 4 bits .* use a sub-group tile with N >= 16"),
])
def test_simd8_rejections_name_the_rule(text, rule):
    base = SG8 if "tile:" not in text else ""
    with pytest.raises(PlanRejected, match=rule):
        _plan(base + text + "\n")


def test_native_1d_surfaces_need_aligned_rows():
    bad = config_from_text("problem: {m: 64, n: 30, k: 41}\n" + SG8)
    msgs = native_surface_violations(bad)
    assert any("A pitch 82 B is not a multiple of 4 B (1D sub-group block reads need 4-byte aligned rows): "
               "pad K to a multiple of 2 (42)" in m for m in msgs)
    assert any("C pitch 120 B is not a multiple of 16 B (1D sub-group block writes need 16-byte aligned rows): "
               "pad N to a multiple of 4 (32)" in m for m in msgs)
    assert not any(m.startswith("B") for m in msgs)       # 60 B rows of B are 4-byte aligned
    assert native_surface_violations(config_from_text("problem: {m: 70, n: 52, k: 40}\n" + SG8)) == []
    # 4-bit rows are padded to whole bytes: K = 263 nibbles is a 132 B pitch, K = 261 one of 131 B
    s4 = "types: {a: s4, b: s4, acc: s32, c: s32}\nlayout: {b: col}\n" + SG8
    assert native_surface_violations(config_from_text("problem: {m: 64, n: 32, k: 263}\n" + s4)) == []
    msgs = native_surface_violations(config_from_text("problem: {m: 64, n: 32, k: 261}\n" + s4))
    assert msgs == [f"{x} pitch 131 B is not a multiple of 4 B (1D sub-group block reads need 4-byte aligned "
                    "rows): pad K to a multiple of 8 (264)" for x in "AB"]


def test_native_lowering_predicts_one_message_per_row():
    p = _plan(SG8)
    a, b, c = (count_messages(lower_copy(x.atom, DG2)) for x in (p.a, p.b, p.c))
    assert (a["load_block1d"], b["load_block1d"], c["store_block1d"]) == (8, 16, 8)
    assert count_messages(lower_copy(p.b.prefetch, DG2))["prefetch"] == 2      # 16 rows x 1 line / 8 lanes
    src = render_kernel(p, Lowering("native", DG2))
    assert "intel_reqd_sub_group_size(8)" in src and "intel_sub_group_bf16_bf16_matrix_mad_k16(a, b, c)" in src
    assert src.count("intel_sub_group_block_read_us(") == 16 and src.count("intel_sub_group_block_read(") == 8
    assert src.count("intel_sub_group_block_write(") == 8
    for portable_only in ("xe_copy_coord", "sub_group_broadcast"):
        assert portable_only not in src


def test_isa_counts_1d_block_reads_apart_from_the_payload_prologue():
    asm = """
(W)     send.ugm (1|M0)          r1       r255    null:0  0xFF000000            0x6228E500           {A@1,$0} // wr:1+0, rd:2; load.ugm.d32x32t.a32.ca.ca.bti[255]
(W)     send.ugm (1|M0)          r43      r44     null:0  0x1000000            0x6218B500           {A@7,$1} // wr:1+0, rd:1; load.ugm.d32x4t.a32.ca.ca.bti[1]
(W)     send.ugm (1|M0)          r5       r3      null:0  0x0            0x0218C580           {$9} // wr:1+0, rd:1; load.ugm.d32x8t.a64.ca.ca
        send.ugm (8|M0)          r9       r5      null:0  0x0            0x0218C580           {$9} // wr:1+0, rd:1; load.ugm.d16u32.a64.ca.ca
(W)     send.ugm (1|M0)          null     r85     r84:1   0x0            0x020EB784           {A@7,$10} // wr:1+1, rd:0; store.ugm.d64x4t.a64.wb.wb
"""
    kinds = [i.message_kind for i in parse_instructions(asm)]
    assert kinds == ["load_payload", "load_block1d", "load_block1d", "load", "store_block1d"]


# ---- on the device: the 1D atoms in both lowerings -----------------------------------------------------

ROWS, PITCH = 40, 256
ATTRS = "__attribute__((intel_reqd_sub_group_size(8))) __attribute__((reqd_work_group_size(8, 1, 1)))"
DEVICE_ATOMS = [a for bits in (4, 8, 16, 32, 64) for op in ("LD", "ST")
                for a in enumerate_block1d_atoms(8, op, bits) if a.rows in (1, 8, 16, 32)]


def _copy_program(lowering: str) -> str:
    parts = [wide_vector_typedefs(a.register_type for a in DEVICE_ATOMS)]
    for a in DEVICE_ATOMS:
        if lowering == "portable":
            parts.append(render_macro("copy/block1d.cl.j2", "portable", a))
        else:
            parts.append(render_macro("copy/block1d.cl.j2", "native", a, lower_copy(a, DG2)))
        rb = a.register_bytes
        if a.is_load:
            parts.append(f"""{ATTRS}
__kernel void t_{a.fn_name}(const global uchar* src, int w, int h, int pitch, int x, int y, global uchar* out) {{
    union {{ {a.register_type} v; uchar b[{rb}]; }} u;
    u.v = {a.fn_name}(src, w, h, pitch, x, y);
    for (int i = 0; i < {rb}; ++i) out[get_sub_group_local_id() * {rb} + i] = u.b[i];
}}""")
        else:
            parts.append(f"""{ATTRS}
__kernel void t_{a.fn_name}(global uchar* dst, int w, int h, int pitch, int x, int y, const global uchar* in) {{
    union {{ {a.register_type} v; uchar b[{rb}]; }} u;
    for (int i = 0; i < {rb}; ++i) u.b[i] = in[get_sub_group_local_id() * {rb} + i];
    {a.fn_name}(dst, w, h, pitch, x, y, u.v);
}}""")
    return "\n".join(parts)


def _elements(raw, bits):
    """The elements of rows of bytes (4-bit ones two per byte, the lower column in the low nibble)."""
    if bits == 4:
        out = np.empty(raw.shape[:-1] + (2 * raw.shape[-1],), np.uint64)
        out[..., 0::2], out[..., 1::2] = raw & 15, raw >> 4
        return out
    return raw.view({8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[bits]).astype(np.uint64)


def _inside(atom, width, col) -> bool:
    """Whether column ``col`` lies inside a surface ``width`` bytes wide: its first byte does (4-bit elements
    share a byte, which the element accesses move whole)."""
    return col * atom.elem_bits // 8 < width


def _cases(atom):
    """(surface width in bytes, x, y): inside, over the right edge (as in the 2D tests, an element whose
    first byte lies inside the width counts as inside), over the bottom edge."""
    x_right = (PITCH // 2 // atom.row_bytes) * atom.cols       # the tile starts inside, ends outside
    yield PITCH, atom.cols if atom.row_bytes * 2 <= PITCH else 0, 0
    yield x_right * atom.elem_bits // 8 + atom.row_bytes // 2 + (1 if atom.elem_bits > 8 else 0), x_right, 1
    yield PITCH, 0, ROWS - max(1, atom.rows // 2)


def _i(v):
    return ctypes.c_int(int(v))


@pytest.fixture(scope="module")
def copy_programs(sycl_device):
    from xegemm.runtime.program import build_program, make_queue

    # built without optimisation: every tile in one program took 30-50 s to optimise; the GEMM tests below
    # verify the same copy code as an optimised kernel
    queue = make_queue(sycl_device)
    return queue, {low: build_program(queue, _copy_program(low), "-cl-std=CL3.0 -cl-opt-disable")
                   for low in ("portable", "native")}


@pytest.mark.device
@pytest.mark.parametrize("lowering", ["portable", "native"])
def test_1d_tiles_match_their_lane_maps_on_the_device(lowering, copy_programs):
    from xegemm.runtime.program import from_device, launch, to_device

    queue, programs = copy_programs
    for atom in DEVICE_ATOMS:
        rng = np.random.default_rng(zlib.crc32(atom.name.encode()))
        kernel = programs[lowering].get_sycl_kernel(f"t_{atom.fn_name}")
        for width, x, y in _cases(atom):
            where = f"{atom.name} ({lowering}), surface width {width} B, x={x}, y={y}"
            if atom.is_load:
                surface = rng.integers(0, 256, size=(ROWS, PITCH), dtype=np.uint8)
                elems = _elements(surface, atom.elem_bits)
                out = to_device(queue, np.full(8 * atom.register_bytes, 0x5A, np.uint8))
                launch(queue, kernel, [to_device(queue, surface), _i(width), _i(ROWS), _i(PITCH), _i(x), _i(y),
                                       out], [8], [8]).wait()
                got = _elements(from_device(out, np.uint8, (8, atom.register_bytes)), atom.elem_bits)
                for lane, coords in enumerate(atom.lane_map.map):
                    want = [int(elems[y + r, x + c]) if y + r < ROWS and _inside(atom, width, x + c) else 0
                            for r, c in coords]
                    assert list(got[lane]) == want, f"{where}, lane {lane}"
            else:
                regs = rng.integers(0, 256, size=(8, atom.register_bytes), dtype=np.uint8)
                values = _elements(regs, atom.elem_bits)
                sentinel = np.full((ROWS, PITCH), 0xA5, np.uint8)
                dst = to_device(queue, sentinel)
                launch(queue, kernel, [dst, _i(width), _i(ROWS), _i(PITCH), _i(x), _i(y), to_device(queue, regs)],
                       [8], [8]).wait()
                got = from_device(dst, np.uint8, sentinel.shape)
                want = _elements(sentinel, atom.elem_bits)
                for lane, coords in enumerate(atom.lane_map.map):
                    for k, (r, c) in enumerate(coords):
                        if y + r < ROWS and _inside(atom, width, x + c):
                            want[y + r, x + c] = values[lane][k]
                got = _elements(got, atom.elem_bits)
                assert np.array_equal(got, want), f"{where}: {int((got != want).sum())} elements differ"


# ---- on the device: whole GEMMs ------------------------------------------------------------------------

GEMMS = {
    # M, N, K not multiples of the tiles: edge tiles take the element path
    "bf16_edges": "problem: {m: 70, n: 52, k: 40}\n" + SG8,
    "f16_batched_no_prefetch": "problem: {m: 33, n: 20, k: 70, batch: 2}\ntypes: {a: f16, b: f16}\n"
                               "pipeline: {prefetch: 0}\ntile: {workgroup: [16, 16, 16], subgroups: [1, 2], "
                               "subgroup_size: 8}\n",
    "s8_u8": "problem: {m: 40, n: 36, k: 100}\ntypes: {a: s8, b: u8, acc: s32, c: s32}\n"
             "tile: {workgroup: [16, 32, 64], subgroups: [2, 2], subgroup_size: 8}\n",
    "u8_mma_m4": "problem: {m: 21, n: 30, k: 65}\ntypes: {a: u8, b: u8, acc: s32, c: s32}\n"
                 "tile: {workgroup: [4, 16, 32], subgroups: [1, 2], subgroup_size: 8}\n",
}
# ... and with the native 1D copies: packed 4-bit, A in uint reads of 8 nibbles per lane, B gathered nibble by
# nibble (an odd K: a zero nibble ends each row of A; its portable GEMMs are tests/test_types.py's and
# tests/test_layouts.py's)
NATIVE_GEMMS = {"bf16_edges": GEMMS["bf16_edges"], "s8_u8": GEMMS["s8_u8"],
                "s4_u4_batched": "problem: {m: 37, n: 40, k: 135, batch: 2}\ntypes: {a: s4, b: u4, acc: s32, c: s32}\n"
                                 "tile: {workgroup: [16, 32, 64], subgroups: [1, 2], subgroup_size: 8}\n"}



def _one(text):
    variants = pipeline.plan_variants(config_from_text(text + "profile: {warmup: 1, repeats: 2}\n"))
    assert len(variants) == 1 and variants[0].plan is not None, variants[0].reason
    return variants[0]


@pytest.mark.device
@pytest.mark.parametrize("name", sorted(GEMMS))
def test_portable_simd8_gemm_verifies(name, session):
    pv = _one(GEMMS[name])
    assert pv.plan.uses_block1d and pv.plan.mma.n == 8
    res = pipeline.run_variant(pv, session)
    assert res.status == "ok", res.reason
    assert res.bad_elements == 0


@pytest.mark.device
@pytest.mark.parametrize("name", sorted(NATIVE_GEMMS))
def test_native_1d_copies_verify_with_portable_dpas(name, session, monkeypatch):
    """The native copy code (sub-group block reads/writes inside the surface, element accesses at its edges)
    on the device's cl_intel_subgroups, with the portable DPAS (the device has none), verified; then the
    same kernel with one interior block read aimed at the wrong row must fail: the block path is exercised."""
    pv = _one(NATIVE_GEMMS[name].replace("problem:", "pipeline: {prefetch: 0}\nproblem:"))
    assert native_surface_violations(pv.config) == []
    source = render_kernel(pv.plan, Lowering("native", DG2), mma_lowering="portable")
    assert "intel_sub_group_block_read" in source and "intel_sub_group_shuffle" in source
    monkeypatch.setattr(evaluate, "render_variant", lambda *a, **k: source)
    res = pipeline.run_variant(pv, session)
    assert res.status == "ok", res.reason
    broken = source.replace("(p + (long)1 * pitch_bytes)", "(p)", 1)
    assert broken != source
    monkeypatch.setattr(evaluate, "render_variant", lambda *a, **k: broken)
    assert pipeline.run_variant(pv, session).status == "failed_verify"


# ---- ahead of time for dg2 (ocloc) ---------------------------------------------------------------------



MIX = """name: dg2mix
problem: {m: 512, n: 512, k: 512}
tile: {workgroup: [32, 32, 32], subgroups: [2, 2], subgroup_size: 8}
sweep:
  types: [{a: bf16, b: bf16, acc: f32, c: f32}, {a: f16, b: f16, acc: f32, c: f32},
          {a: s8, b: u8, acc: s32, c: s32}, {a: tf32, b: tf32, acc: f32, c: f32}]
  layout.b: [row, col]
  pipeline.prefetch: [0, 2]
"""


@pytest.mark.ocloc
def test_representative_dg2_variants_issue_the_predicted_machine_code(tmp_path):
    from xegemm.jobs.pipeline import build_config

    cfg = tmp_path / "dg2mix.yaml"
    cfg.write_text(MIX)
    result = build_config(cfg, "dg2", out_dir=tmp_path / "dg2", capabilities_name=DEBIAN_CAPABILITIES)
    built = [v for v in result["variants"] if v["status"] != "rejected"]
    assert len(built) == 12                                  # bf16, f16, s8xu8, row/col-major B, prefetch 0 / 2
    for v in built:
        assert v["status"] == "ok", v["reason"]
        isa, want, got = v["isa"], v["predicted"], v["measured_messages"]
        assert isa["target"] == "dg2" and isa["spill_bytes"] == 0
        assert isa["load_block2d"] == want["load_block2d"] == 0
        if "_ttt_" not in v["name"]:   # col-major B: a 1D tile plus a shuffle reorder (tests/test_layouts.py)
            assert isa["dpas"] == want["dpas"] and got["load_block1d"] == want["load_block1d"]
        elif "_s8_" in v["name"]:    # 16x16x32 per sub-group: 2 x 2 x 1 DPAS; A 2 x 8 rows, B 2 x 32 rows
            assert isa["dpas"] == want["dpas"] == 4
            assert got["load_block1d"] == want["load_block1d"] == 2 * 8 + 2 * 32
        else:                      # 2 x 2 x 2 DPAS; A 4 tiles x 8 rows of uint, B 4 tiles x 16 rows of ushort
            assert isa["dpas"] == want["dpas"] == 8
            assert got["load_block1d"] == want["load_block1d"] == 4 * 8 + 4 * 16
        assert got["store_block1d"] == want["store_block1d"] == 4 * 8
    reasons = [v["reason"] for v in result["variants"] if v["status"] == "rejected"]
    assert sum("N=8 with tf32" in r for r in reasons) == 4
    # a SIMD8 plan is not built for pvc, a SIMD16 (2D block) plan not for dg2
    pvc = build_config(cfg, "pvc", out_dir=tmp_path / "pvc", capabilities_name=DEBIAN_CAPABILITIES)
    assert all(v["status"] == "rejected" for v in pvc["variants"])
    assert any("pvc executes DPAS at SIMD16; XE_8x8x16_F32BF16BF16F32_TT runs at sub-group size 8" in v["reason"]
               for v in pvc["variants"])


def test_named_1d_atoms_are_planned_and_2d_names_are_refused():
    from xegemm.config import config_from_text
    from xegemm.plan.planner import PlanRejected, plan

    base = "problem: {m: 64, n: 64, k: 64}\ntile: {workgroup: [32, 32, 32], subgroups: [2, 2], subgroup_size: 8}\n"
    p = plan(config_from_text(base + "atoms: {a: XE_1D_U16x8x16_LD_SG8, c: XE_1D_U32x8x8_ST_SG8}\n"))
    assert p.a.atom.name == "XE_1D_U16x8x16_LD_SG8" and p.c.atom.name == "XE_1D_U32x8x8_ST_SG8"
    with pytest.raises(PlanRejected, match="is an Xe 2D block copy"):
        plan(config_from_text(base + "atoms: {a: XE_2D_U16x8x16_LD_N}\n"))
