"""Xe 2D block copy atoms: ``XE_2D_[Packed_]<U4|U8|U16|U32|U64|TF32>x<rows>x<cols>_<LD|ST|PF>_<N|T|V>``.

One parametric model (not a list of classes): a name is parsed into its parts, the parts determine the
hardware message that moves the block (element size, block width, height, count, kind), the message
determines the per-work-item register image and the lane map, and the hardware rules decide legality.

Sources (docs/atoms.md gives the public source behind each rule):
- naming and the meaning of ``N``/``T``/``V``/``Packed_``: sycl-tla media/docs/cpp/cute/xe_2d_copy.md ("2D Copy Operations for Intel
  XE Architecture"): an unpacked copy gives each work-item one column per 16 columns (the columns of one
  work-item are 16 apart); a packed copy gives each work-item adjacent columns, groups 32 apart for U8.
- the hardware rules (row <= 64 B, height <= 32 for loads and <= 8 for stores, block counts, VNNI only for
  8/16-bit, transpose only 32/64-bit, ...): docs/atoms.md §2 (SPV_INTEL_2d_block_io, cl_intel_subgroup_2d_block_io,
  ESIMD ``check_lsc_block_2d_restrictions``, sycl-tla ``copy_xe_2d.hpp`` static_asserts).
- how a block lands in registers: docs/atoms.md §2 "Register-to-lane mapping" (SPV_INTEL_2d_block_io,
  "Mapping Block Data to Invocations").
- the sycl-tla catalog and its quirks: docs/atoms.md §1.2-§1.4.

``xegemm`` also names prefetches in the same pattern with ``_PF_N`` (sycl-tla nests them in the load atoms).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cached_property

from xegemm.atoms.base import OPS, CopyAtomBase
from xegemm.atoms.block1d import TYPE_BITS as BLOCK1D_TYPE_BITS
from xegemm.atoms.block1d import Block1DAtom
from xegemm.atoms.lanemap import LaneMap
from xegemm.library.dtypes import UNSIGNED_CTYPE, dtype, vector_ctype
from xegemm.errors import XegemmError

SUB_GROUP = 16  # 2D block messages need a full sub-group of 16 (OCL2D, SPV2D)
GRF_BYTES = 64

TYPE_BITS = {**BLOCK1D_TYPE_BITS, "TF32": dtype("tf32").bits}   # the 1D tiles' containers, and tf32
TYPE_OF_BITS = {bits: name for name, bits in TYPE_BITS.items() if name.startswith("U")}   # the unsigned type of a width
LAYOUTS = ("N", "T", "V")
NAME_RE = re.compile(r"^XE_2D_(Packed_)?(U4|U8|U16|U32|U64|TF32)x(\d+)x(\d+)_(LD|ST|PF)_([NTV])$")

# Unpacked copies: one column per work-item per block of 16 columns (sycl-tla's xe_2d_copy.md, docs/atoms.md §1.1); TF32 blocks are 8 wide,
# which deals two rows over the sub-group (the tf32 DPAS A operand, docs/atoms.md §1.2 TF32 rows).
# There is no 4-bit message: U4 rows move as the 8-bit message of the same bytes, 64 nibbles (32 bytes) per
# block, two bytes (four nibbles) per work-item: sycl-tla's XE_2D_U4x32x64_LD_N and XE_2D_U4x16x64_LD_N
# are exactly these loads (IB_read_flat_u8_m32k32v1 -> ushort32, docs/atoms.md §1.2; sycl-tla follows them
# with sub-group shuffles, docs/atoms.md §1.2; xegemm uses the registers as loaded).  Work-item l holds
# nibbles 4l..4l+3 of each 64-nibble row: the packed int4 DPAS A operand (OCLMMA).
UNPACKED_BLOCK_COLS = {"U4": 64, "U8": 16, "U16": 16, "U32": 16, "U64": 16, "TF32": 8}
UNPACKED_MESSAGE_BITS = {"U4": 8}
# Packed copies (sycl-tla's xe_2d_copy.md "Data Distribution (Packed Copies)", docs/atoms.md §1.1, sycl-tla catalog docs/atoms.md §1.2):
# the message element and the block width in columns of the named type.
#   Packed_U8:  8-bit message, 32 columns per block (each work-item 2 adjacent bytes; blocks 32 apart)
#   Packed_U16: 32-bit message, 32 columns per block (each work-item 2 adjacent u16)
#   Packed_U4:  32-bit message, 128 columns per block (each work-item 8 adjacent nibbles)
PACKED_MESSAGE_BITS = {"U4": 32, "U8": 8, "U16": 32}
PACKED_BLOCK_COLS = {"U4": 128, "U8": 32, "U16": 32}

# Atoms sycl-tla defines whose definition deviates from what their name and the hardware rules say
# (docs/atoms.md §1.2 notes and §7).  They are listed, flagged, and never chosen by the planner.
SYCL_TLA_QUIRKS = {
    "XE_2D_U8x32x32_LD_N": "sycl-tla issues a VNNI-transform load here (copy_xe_legacy_U8.hpp), so its "
                           "registers hold the LD_V layout, not the LD_N layout the name says",
    "XE_2D_U8x2x32_ST_N": "sycl-tla stores it with a 16-bit message (byte pairs per work-item, the packed "
                          "layout); read as named it needs a block count of 2, which stores do not have",
    "XE_2D_U8x8x32_ST_N": "sycl-tla uses a count-2 store <1,16,8,2>, which OCL2D and ESIMD do not allow "
                          "(stores have block count 1)",
    "XE_2D_U4x32x16_LD_T": "sycl-tla reads 16 rows x 32 nibbles (Transpose<4,4,16,1>): its name gives "
                           "cols x rows, unlike every other LD_T atom; xegemm reads it as 32 rows x 16 nibbles",
    "XE_2D_U8x32x4_LD_T": "sycl-tla uses an IGC-emulated 8-bit transpose (load + moves); the hardware "
                          "transposes only 32/64-bit data, so xegemm models the d32 transpose of the same bytes",
    "XE_2D_U8x32x8_LD_T": "sycl-tla uses an IGC-emulated 8-bit transpose (load + moves); the hardware "
                          "transposes only 32/64-bit data, so xegemm models the d32 transpose of the same bytes",
    "XE_2D_U64x8x1_LD_T": "the builtin path reads 16 rows (IGC default transpose height) while the SPIR-V "
                          "path reads 8 (docs/atoms.md §7.4)",
    "XE_2D_U64x8x2_LD_T": "the builtin path reads 16 rows (IGC default transpose height) while the SPIR-V "
                          "path reads 8 (docs/atoms.md §7.4)",
    "XE_2D_U64x8x4_LD_T": "the builtin path reads 16 rows (IGC default transpose height) while the SPIR-V "
                          "path reads 8; new sycl-tla asserts width < 4 for 64-bit transposes (docs/atoms.md §7.3-7.4)",
    "XE_2D_TF32x1x8_LD_N": "sycl-tla declares BlockShape = Shape<_32,_16> for it (copy-paste bug); the "
                           "call is <4,8,1,1>",
}


class AtomError(XegemmError):
    """An atom name that does not parse or breaks a hardware rule."""


@dataclass(frozen=True)
class Message:
    """One 2D block message: what the hardware moves (docs/atoms.md §2)."""

    kind: str          # "load" | "transform" (VNNI) | "transpose" | "store" | "prefetch"
    elem_bits: int     # 8, 16, 32, 64
    width: int         # block width in message elements (before transpose)
    height: int        # block height in rows
    count: int         # blocks side by side

    @property
    def row_bytes(self) -> int:
        return self.width * self.count * self.elem_bits // 8

    @property
    def padded_bytes(self) -> int:
        """Bytes the message returns: width padded to a power of two (height for transposes), per block."""
        if self.kind == "transpose":
            return self.width * _pow2ceil(self.height) * self.elem_bits // 8 * self.count
        return _pow2ceil(self.width) * self.height * self.elem_bits // 8 * self.count


def _pow2ceil(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


@dataclass(frozen=True)
class CopyAtom(CopyAtomBase):
    """A 2D block copy atom; construct with :meth:`parse` or directly from its parts."""

    block2d = True

    type_name: str   # U4 U8 U16 U32 U64 TF32
    rows: int        # block rows as the block lies in memory
    cols: int        # block columns in elements of the named type
    op: str          # LD ST PF
    layout: str      # N T V
    packed: bool = False

    # -- names -----------------------------------------------------------------------------------------
    @classmethod
    def parse(cls, name: str) -> "CopyAtom":
        """Parse a name; raises AtomError if it does not follow the naming pattern."""
        m = NAME_RE.match(name.strip())
        if not m:
            raise AtomError(
                f"'{name}' is not a 2D copy atom name: expected XE_2D_[Packed_]<U4|U8|U16|U32|U64|TF32>x<rows>x<cols>"
                "_<LD|ST|PF>_<N|T|V>, e.g. XE_2D_U16x32x32_LD_N (sycl-tla's xe_2d_copy.md, docs/atoms.md §1.1)")
        packed, t, rows, cols, op, layout = m.groups()
        return cls(t, int(rows), int(cols), op, layout, bool(packed))

    @property
    def name(self) -> str:
        return f"XE_2D_{'Packed_' if self.packed else ''}{self.type_name}x{self.rows}x{self.cols}_{self.op}_{self.layout}"

    @property
    def short_name(self) -> str:
        """The atom's part of a kernel name: ``pu8x32x32n`` (p = packed, the layout letter last)."""
        return f"{'p' if self.packed else ''}{self.type_name.lower()}x{self.rows}x{self.cols}{self.layout.lower()}"

    @property
    def fn_name(self) -> str:
        """A C identifier for the function that implements the atom."""
        return "xe_copy_" + self.name[len("XE_2D_"):].lower()

    # -- derived facts ---------------------------------------------------------------------------------
    @property
    def elem_bits(self) -> int:
        """Bits of one element of the named type (the lane map's granularity)."""
        return TYPE_BITS[self.type_name]

    @property
    def lanes(self) -> int:
        return SUB_GROUP

    @property
    def messages(self) -> int:
        """One 2D block message per tile (before a native split)."""
        return 1

    @cached_property
    def message(self) -> Message:
        """The hardware message that implements the atom (its legality is checked by :meth:`violations`)."""
        e = self.elem_bits
        kind = {"LD": "load", "ST": "store", "PF": "prefetch"}[self.op]
        if self.layout == "V":
            # VNNI: 8/16-bit data, one column per work-item; 32/e rows packed per dword (SPV2D, OCL2D).  4-bit
            # data moves as the 8-bit VNNI load of the same bytes: a work-item's byte column is two nibble
            # columns, its dword four rows of that byte column.
            mbits = UNPACKED_MESSAGE_BITS.get(self.type_name, e)
            width = self.cols * e // mbits                    # 0: narrower than a byte (a violation)
            block = min(width, 16)
            return Message("transform", mbits, block, self.rows, max(1, width // max(block, 1)))
        if self.layout == "T":
            # The hardware transposes 32- and 64-bit data only; narrower data moves as the d32 transpose
            # of the same bytes (sycl-tla LD_T of U4/U8/U16, docs/atoms.md §1.2, §1.4).
            mbits = 64 if e == 64 else 32
            return Message("transpose", mbits, self.cols * e // mbits, self.rows, 1)
        if self.packed:
            mbits = PACKED_MESSAGE_BITS.get(self.type_name, e)
            block_cols = min(self.cols, PACKED_BLOCK_COLS.get(self.type_name, self.cols))
        else:
            mbits = UNPACKED_MESSAGE_BITS.get(self.type_name, e)
            block_cols = min(self.cols, UNPACKED_BLOCK_COLS.get(self.type_name, 16))
        return Message(kind, mbits, block_cols * e // mbits, self.rows, max(1, self.cols // block_cols))

    @property
    def sub_elements(self) -> int:
        """Elements of the named type per message element (per dword for VNNI)."""
        if self.message.kind == "transform":
            return 32 // self.elem_bits          # rows per dword x elements of the named type per row element
        return max(1, self.message.elem_bits // self.elem_bits)

    # -- registers --------------------------------------------------------------------------------------
    @cached_property
    def dealt_shape(self) -> tuple[int, int, int]:
        """(rows, row length, blocks) of the block as the hardware deals it to lanes."""
        msg = self.message
        if msg.kind == "transform":
            return msg.height * msg.elem_bits // 32, _pow2ceil(msg.width), msg.count
        if msg.kind == "transpose":
            return msg.width, _pow2ceil(msg.height), msg.count
        return msg.height, _pow2ceil(msg.width), msg.count

    @property
    def register_elem_bits(self) -> int:
        """Bits of one component of the per-work-item register type."""
        msg = self.message
        if msg.kind == "transform":
            return 32
        if msg.kind == "transpose":   # a 32-row d32 transpose gives uint16, two rows per lane (docs/atoms.md §2)
            return msg.elem_bits
        _, rowlen, _ = self.dealt_shape
        return msg.elem_bits * max(1, rowlen // SUB_GROUP)

    @property
    def register_length(self) -> int:
        """Components of the per-work-item register vector (0 for prefetches)."""
        if self.is_prefetch:
            return 0
        rows, rowlen, count = self.dealt_shape
        dealt_bits = 32 if self.message.kind == "transform" else self.message.elem_bits
        per_block = -(-rows * rowlen // SUB_GROUP)  # dealt elements per lane per block (padding included)
        return per_block * count * dealt_bits // self.register_elem_bits

    @property
    def register_elem_ctype(self) -> str:
        """The OpenCL C type of one register component (``ushort``), '' if no scalar is that wide."""
        return UNSIGNED_CTYPE.get(self.register_elem_bits, "")

    @property
    def register_type(self) -> str:
        """The OpenCL C type of one work-item's registers, e.g. ``ushort8`` or ``ushort64``; '' for prefetch."""
        n = self.register_length
        if n == 0 or not self.register_elem_ctype:
            return ""
        return vector_ctype(self.register_elem_ctype, n)

    @property
    def register_bytes(self) -> int:
        return self.register_length * self.register_elem_bits // 8

    @property
    def elems_per_lane(self) -> int:
        """Elements of the named type in one work-item's registers."""
        return self.register_bytes * 8 // self.elem_bits

    @cached_property
    def lane_map(self) -> LaneMap:
        """Which (row, col) of the block each work-item holds, in register order (see lanemap.py)."""
        return LaneMap.from_lists([[self.element_coord(lane, k) for k in range(self.elems_per_lane)]
                                   for lane in range(SUB_GROUP)])

    def element_coord(self, lane: int, k: int) -> tuple[int, int] | None:
        """The (row, col) of register element ``k`` of ``lane``, or None for padding.

        The hardware deals the (padded, transformed or transposed) block to lanes row by row: a row of
        16 elements puts one in each lane; a wider row gives each lane row/16 consecutive elements; a
        narrower row shares one register row among 16/row rows (lanes 0..w-1 the first, ...); block
        b follows block b-1 (SPV_INTEL_2d_block_io "Mapping Block Data to Invocations", docs/atoms.md §2).
        """
        msg = self.message
        sub = self.sub_elements
        m, s = divmod(k, sub)
        rows, rowlen, _ = self.dealt_shape
        if rowlen >= SUB_GROUP:
            per = rowlen // SUB_GROUP
            block, q = divmod(m, rows * per)
            r, c = q // per, lane * per + q % per
        else:
            per_block = -(-rows * rowlen // SUB_GROUP)
            block, t = divmod(m, per_block)
            r, c = t * (SUB_GROUP // rowlen) + lane // rowlen, lane % rowlen
            if r >= rows:
                return None
        if msg.kind == "transform":      # dword (r, c) packs rows r*rows .. of message column c, low row first
            per = msg.elem_bits // self.elem_bits          # named-type columns in one message element (U4: 2)
            row, col = r * (sub // per) + s // per, (block * msg.width + c) * per + s % per
        elif msg.kind == "transpose":    # dealt row r = memory column r, dealt column c = memory row c
            row, col = c, (block * msg.width + r) * sub + s
            if row >= msg.height:
                return None
        else:
            row, col = r, (block * msg.width + c) * sub + s
        if col >= self.cols or row >= self.rows:
            return None
        return row, col

    # -- legality ---------------------------------------------------------------------------------------
    def violations(self) -> list[str]:
        """The hardware (and naming) rules this atom breaks; empty when it is legal."""
        out: list[str] = []
        t, e = self.type_name, self.elem_bits
        if not (_is_pow2(self.rows) and _is_pow2(self.cols)):
            out.append("shape: rows and cols must be powers of two (the OpenCL builtins and the per-work-item "
                       "register types exist only for power-of-two blocks)")
            return out
        if self.op == "ST" and self.layout != "N":
            out.append("stores write row-major blocks only: use _ST_N (sycl-tla's xe_2d_copy.md 'Storing Result Matrix', docs/atoms.md §1.1)")
        if self.op == "PF" and self.layout != "N":
            out.append("prefetches take row-major blocks only: use _PF_N")
        if self.layout == "V" and t not in ("U4", "U8", "U16"):
            out.append(f"VNNI (LD_V) packs 8- and 16-bit data only (4-bit data as its bytes), not {t} (docs/atoms.md §2 "
                       "'VNNI transform'; sycl-tla's xe_2d_copy.md: use LD_N for U32)")
        if self.packed and t not in PACKED_MESSAGE_BITS:
            out.append(f"Packed_ copies exist for U4, U8 and U16 only, not {t} (sycl-tla's xe_2d_copy.md and catalog, docs/atoms.md §1.1-1.2)")
        if self.packed and self.layout != "N":
            out.append("Packed_ copies are row-major (_N) loads/stores; no message packs a transpose or VNNI load")
        if self.layout == "T" and self.op == "LD" and (self.cols * e) % (64 if e == 64 else 32):
            out.append(f"LD_T moves whole dwords: cols x {e} bits = {self.cols * e} bits is not a multiple of 32")
        if out:
            return out
        msg = self.message
        if msg.width < 1:
            return [f"block of {self.cols} x {e}-bit columns is narrower than one {msg.elem_bits}-bit message element"]
        block_cols = msg.width * msg.elem_bits // e
        if self.cols > block_cols and self.cols % block_cols:
            out.append(f"cols {self.cols} is not a multiple of the block width {block_cols}")
        out += message_violations(msg)
        return out

    @property
    def quirk(self) -> str | None:
        """How sycl-tla's atom of this name deviates from this model (None when it does not)."""
        return SYCL_TLA_QUIRKS.get(self.name)

    def check(self) -> "CopyAtom":
        """Return self if legal, else raise AtomError naming the broken rules and the nearest legal atoms."""
        broken = self.violations()
        if broken:
            near = ", ".join(a.name for a in nearest_legal(self))
            raise AtomError(f"{self.name} is illegal: " + "; ".join(broken) +
                            (f". Nearest legal atoms: {near}" if near else ""))
        return self

    # -- related atoms ---------------------------------------------------------------------------------
    @property
    def prefetch(self) -> "CopyAtom":
        """The prefetch of the same block, row-major, no registers: of the same type, else of the unsigned
        type of its width, else (4-bit data: no 4-bit message) a packed 32-bit prefetch of the same block."""
        pf = CopyAtom(self.type_name, self.rows, self.cols, "PF", "N", self.packed)
        if not pf.legal:
            pf = CopyAtom(TYPE_OF_BITS[self.elem_bits], self.rows, self.cols, "PF", "N", False)
        if not pf.legal:
            pf = CopyAtom(TYPE_OF_BITS[self.elem_bits], self.rows, self.cols, "PF", "N", True)
        if not pf.legal:
            raise AtomError(f"no legal prefetch covers {self.name}'s {self.rows}x{self.cols} block: "
                            f"{pf.violations()[0]}")
        return pf

    def with_op(self, op: str) -> "CopyAtom":
        """The row-major atom of the same block with another op."""
        return CopyAtom(self.type_name, self.rows, self.cols, op, "N", self.packed)

    def block1d_rows(self) -> Block1DAtom | None:
        if self.type_name not in BLOCK1D_TYPE_BITS:
            return None
        return Block1DAtom(self.type_name, self.rows, self.cols, self.op, SUB_GROUP)

    # -- lowering ---------------------------------------------------------------------------------------
    @property
    def ib_builtin(self) -> str:
        """The IGC ``__builtin_IB_subgroup_block_*`` spelling of the message (docs/atoms.md §1.7)."""
        msg = self.message
        u = f"u{msg.elem_bits}"
        if msg.kind == "transform":
            vs = "" if msg.count == 1 else f"v{msg.count}"
            return f"__builtin_IB_subgroup_block_read_flat_transform_{u}_k{msg.height}{vs}"
        if msg.kind == "transpose":
            if msg.elem_bits == 64:
                return f"__builtin_IB_subgroup_block_read_flat_transpose_u64_m{msg.height}k{msg.width}"
            mh = "" if msg.height == SUB_GROUP else f"_m{msg.height}"
            return f"__builtin_IB_subgroup_block_read_flat_transpose_u32{mh}_k{msg.width}"
        verb = {"load": "read_flat", "store": "write_flat", "prefetch": "read_prefetch"}[msg.kind]
        return f"__builtin_IB_subgroup_block_{verb}_{u}_m{msg.height}k{msg.width}v{msg.count}"

    @property
    def ocl_builtin(self) -> str:
        """The ``cl_intel_subgroup_2d_block_io`` spelling (OCL2D), e.g. ``intel_sub_group_2d_block_read_16b_8r16x1c``."""
        msg = self.message
        verb = {"load": "read", "transform": "read_transform", "transpose": "read_transpose",
                "store": "write", "prefetch": "prefetch"}[msg.kind]
        return f"intel_sub_group_2d_block_{verb}_{msg.elem_bits}b_{msg.height}r{msg.width}x{msg.count}c"

    def describe(self) -> dict:
        """Key properties as a plain dict (for ``xegemm atoms list/show --json``)."""
        msg = self.message
        return {
            "name": self.name, "kind": "copy", "type": self.type_name, "elem_bits": self.elem_bits,
            "rows": self.rows, "cols": self.cols, "op": self.op, "layout": self.layout, "packed": self.packed,
            "message": {"kind": msg.kind, "elem_bits": msg.elem_bits, "block_width": msg.width,
                        "block_height": msg.height, "block_count": msg.count},
            "register_type": self.register_type, "register_bytes": self.register_bytes,
            "ib_builtin": self.ib_builtin, "ocl_builtin": self.ocl_builtin,
            "legal": self.legal, "violations": self.violations(), "sycl_tla_quirk": self.quirk,
        }

    def headline(self) -> list[str]:
        msg = self.message
        what = "load" if self.is_load else "store" if self.is_store else "prefetch"
        lines = [f"{self.name}: {self.rows} rows x {self.cols} cols of {self.type_name} ({what}, layout {self.layout}"
                 f"{', packed' if self.packed else ''})",
                 f"message: {msg.kind}, {msg.elem_bits}-bit elements, block {msg.width} wide x {msg.height} rows x "
                 f"{msg.count} blocks; builtin {self.ib_builtin} / {self.ocl_builtin}",
                 f"per work-item: {self.register_type or 'no registers'} ({self.register_bytes} B)"]
        return lines + ([f"FLAGGED (sycl-tla): {self.quirk}"] if self.quirk else [])


def message_violations(msg: Message) -> list[str]:
    """Hardware rules of one 2D block message that ``msg`` breaks (docs/atoms.md §2 table)."""
    out = []
    e, w, h, c = msg.elem_bits, msg.width, msg.height, msg.count
    if e not in (8, 16, 32, 64):
        out.append(f"element size {e} bits: 2D block messages move 8, 16, 32 or 64-bit elements")
        return out
    if w < 1 or not _is_pow2(w):
        out.append(f"block width {w} elements: must be a power of two")
    if w * e % 32:
        out.append(f"block width {w} x {e} bits = {w * e // 8} B: must be a multiple of 4 bytes (OCL2D, ESIMD)")
    if msg.row_bytes > 64:
        out.append(f"{w} x {c} blocks x {e // 8} B = {msg.row_bytes} B per row of all blocks: must be <= 64 B "
                   "(OCL2D, ESIMD)")
    max_h = 8 if msg.kind == "store" else 32
    if not 1 <= h <= max_h:
        what = "stores" if msg.kind == "store" else "loads and prefetches"
        out.append(f"block height {h}: {what} take 1..{max_h} rows (ESIMD, XeTLA max_{'store' if max_h == 8 else 'load'}_height)")
    if msg.kind in ("store", "transpose") and c != 1:
        out.append(f"block count {c}: {msg.kind}s take one block (OCL2D, ESIMD)")
    elif c not in (1, 2, 4) or c * e > 64:
        out.append(f"block count {c} of {e}-bit elements: loads take 1, 2 or 4 blocks with count x bits <= 64 "
                   "(u8/u16: up to 4, u32: up to 2, u64: 1; sycl-tla copy_xe_2d.hpp, ESIMD)")
    if msg.kind == "transform":
        if e not in (8, 16):
            out.append(f"VNNI transform of {e}-bit data: only 8- and 16-bit data (ESIMD, SPV2D)")
        if w != 16:
            out.append(f"VNNI block width {w}: VNNI loads are 16 elements wide, one column per work-item "
                       "(OCL2D LoadTransform table; XeTLA max_vnni_load_width = 16)")
        if h * e % 32:
            out.append(f"VNNI block height {h}: must pack whole dwords ({32 // e} rows of {e}-bit data)")
    if msg.kind == "transpose":
        if e == 32 and w > 8:
            out.append(f"d32 transpose width {w}: at most 8 elements (32 B; ESIMD, XeTLA max_trans_load_width)")
        if e == 64 and (h != 8 or w not in (1, 2, 4)):
            out.append(f"d64 transpose {h}x{w}: only height 8 and width 1, 2 or 4 (ESIMD, sycl-tla)")
    limit = 512 if msg.kind == "store" else 2048
    if msg.padded_bytes > limit:
        out.append(f"message of {msg.padded_bytes} B: {msg.kind}s move at most {limit} B "
                   f"({limit // GRF_BYTES} GRFs; ESIMD, XeTLA)")
    return out


# -- enumeration ---------------------------------------------------------------------------------------
_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)


def _candidates():
    for t in TYPE_BITS:
        for op in OPS:
            for layout in LAYOUTS:
                for packed in (False, True):
                    for rows in _SIZES[:6]:
                        for cols in _SIZES:
                            yield CopyAtom(t, rows, cols, op, layout, packed)


def enumerate_copy_atoms(include_quirks: bool = True) -> list[CopyAtom]:
    """Every legal copy atom, plus (by default) the sycl-tla atoms this model flags as quirky."""
    legal = [a for a in _candidates() if a.legal]
    if include_quirks:
        names = {a.name for a in legal}
        legal += [CopyAtom.parse(n) for n in SYCL_TLA_QUIRKS if n not in names]
    return sorted(legal, key=lambda a: (a.op, a.type_name, a.layout, a.packed, a.rows, a.cols))


def nearest_legal(atom: CopyAtom, limit: int = 3) -> list[CopyAtom]:
    """The legal atoms closest to ``atom`` (same op first, then type, layout and shape)."""
    def distance(b: CopyAtom) -> float:
        return ((b.op != atom.op) * 100 + (b.type_name != atom.type_name) * 20 + (b.layout != atom.layout) * 10
                + (b.packed != atom.packed) * 5 + abs(math.log2(b.rows) - math.log2(max(atom.rows, 1)))
                + abs(math.log2(b.cols) - math.log2(max(atom.cols, 1))))
    pool = [a for a in _candidates() if a.legal and a.op == atom.op]
    return sorted(pool, key=lambda b: (distance(b), b.name))[:limit]


def copy_atom(name: str) -> CopyAtom:
    """Parse a name and check it: the atom, or AtomError naming the broken rule and the nearest legal atoms."""
    return CopyAtom.parse(name).check()
