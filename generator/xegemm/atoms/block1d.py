"""1D sub-group block copy atoms: tiles of ``intel_sub_group_block_read*`` / ``write*`` rows.

Devices without 2D block messages (DG2 / Xe-HPG: docs/atoms.md §2 "platforms") still have the 1D sub-group
block messages of ``cl_intel_subgroups`` (and its ``_char``, ``_short``, ``_long`` companions; OCLSG below).
One such message moves ONE row segment of S consecutive chunks, S = the sub-group size: lane l gets chunk
l (``p[sub_group_local_id]``), a chunk being a uchar, ushort, uint or ulong.  A tile of R rows is R such
messages, so a work-item holds one chunk per row, rows in register order.

``XE_1D_<U4|U8|U16|U32|U64>x<rows>x<cols>_<LD|ST|PF>_SG<S>`` names a tile like the 2D atoms: the element
type (the lane map's granularity), the rows and the columns of the tile as it lies in memory; the chunk is
``cols * bits / S`` bits.  ``XE_1D_U16x8x16_LD_SG8`` = 8 rows of 16 bf16, each row one uint block read, so
lane l holds ``(r, 2l), (r, 2l + 1)`` of every row r.

4-bit elements (``U4``: packed s4/u4) lie two to a byte, the lower column in the low nibble (xegemm's
storage of 4-bit data, xegemm.verify.dense; the little-endian packing of every lane map, xegemm.atoms.lanemap).
The messages move bytes, so a chunk of 8 to 64 bits holds 2 to 16 whole nibbles in memory order:
``XE_1D_U4x8x64_LD_SG8`` = 8 rows of 64 nibbles, each row one uint block read, lane l holding columns
8l .. 8l + 7 of every row, which is the SIMD8 int4 DPAS A operand (OCLMMA: 32 bits of each row per lane).
A nibble is never split from its byte: the element accesses at a surface's edges move whole bytes, with
the bounds checked per byte as for the 2D atoms (an odd row's last byte carries a zero padding nibble).

The lane map is in the same form as every other layout in xegemm (xegemm.atoms.lanemap), so the planner
composes these tiles with DPAS operands exactly as it does 2D blocks: e.g. 16 rows of ushort reads hold,
per lane, the column B[0..15][l] in register order, which is the lane map of the SIMD8 bf16 DPAS B operand;
the two rows 2i and 2i+1 then share dword i of the registers (low half = even row), i.e. the VNNI packing.
No message transforms or transposes: a layout that needs either is rejected by the lane-map proof.

Sources (abbreviations as in docs/atoms.md, Sources):
- OCLSG = KhronosGroup/OpenCL-Docs extensions/cl_intel_subgroups.asciidoc, "Sub-group Read and Write
  Functions": ``p[sub_group_local_id]`` first, ``p[sub_group_local_id + max_sub_group_size]`` next;
  "Restrictions": the pointer must be 4-byte aligned for reads and 16-byte aligned for writes; no defined
  out-of-range behaviour (no bounds check: the templates fall back to element accesses at edges).
- OCLSG-short / -char / -long: the same for ushort / uchar / ulong (``_us``, ``_uc``, ``_ul`` suffixes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from xegemm.atoms.base import OPS, CopyAtomBase
from xegemm.atoms.lanemap import LaneMap
from xegemm.library.dtypes import UNSIGNED_CTYPE
from xegemm.errors import XegemmError
from xegemm.library.targets import SUBGROUP_BLOCK_EXTENSIONS

TYPE_BITS = {f"U{bits}": bits for bits in (4, *UNSIGNED_CTYPE)}   # U4 U8 U16 U32 U64: element containers
READ_BUILTIN = {8: "intel_sub_group_block_read_uc", 16: "intel_sub_group_block_read_us",
                32: "intel_sub_group_block_read", 64: "intel_sub_group_block_read_ul"}
WRITE_BUILTIN = {8: "intel_sub_group_block_write_uc", 16: "intel_sub_group_block_write_us",
                 32: "intel_sub_group_block_write", 64: "intel_sub_group_block_write_ul"}
READ_ALIGN_BYTES = 4      # OCLSG "Restrictions": reads 32-bit aligned
WRITE_ALIGN_BYTES = 16    # OCLSG "Restrictions": writes 128-bit aligned
SUB_GROUP_SIZES = (8, 16, 32)
MAX_ROWS = 32
NAME_RE = re.compile(r"^XE_1D_(U4|U8|U16|U32|U64)x(\d+)x(\d+)_(LD|ST|PF)_SG(\d+)$")


class Block1DError(XegemmError):
    """A 1D block atom name that does not parse or breaks a rule of the messages."""


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


@dataclass(frozen=True)
class Block1DAtom(CopyAtomBase):
    """``rows`` rows of ``cols`` elements of ``type_name``, each row one 1D sub-group block message."""

    block2d = False

    type_name: str      # U4 U8 U16 U32 U64: the element granularity of the lane map
    rows: int
    cols: int
    op: str             # LD ST PF
    lanes: int = 8      # the sub-group size S

    # -- names -----------------------------------------------------------------------------------------
    @classmethod
    def parse(cls, name: str) -> "Block1DAtom":
        m = NAME_RE.match(name.strip())
        if not m:
            raise Block1DError(f"'{name}' is not a 1D block atom name: expected "
                               "XE_1D_<U4|U8|U16|U32|U64>x<rows>x<cols>_<LD|ST|PF>_SG<S>, e.g. XE_1D_U16x8x16_LD_SG8")
        t, rows, cols, op, lanes = m.groups()
        return cls(t, int(rows), int(cols), op, int(lanes))

    @classmethod
    def of(cls, elem_bits: int, chunk_bits: int, rows: int, op: str, lanes: int = 8) -> "Block1DAtom":
        """The tile of ``rows`` messages moving ``chunk_bits`` per lane, read as ``elem_bits`` elements."""
        return cls(f"U{elem_bits}", rows, lanes * chunk_bits // elem_bits, op, lanes)

    @property
    def name(self) -> str:
        return f"XE_1D_{self.type_name}x{self.rows}x{self.cols}_{self.op}_SG{self.lanes}"

    @property
    def short_name(self) -> str:
        """The atom's part of a kernel name: ``u16x8x16s8`` (s = sub-group block rows of S lanes)."""
        return f"{self.type_name.lower()}x{self.rows}x{self.cols}s{self.lanes}"

    @property
    def fn_name(self) -> str:
        return "xe_copy_1d_" + self.name[len("XE_1D_"):].lower()

    # -- what moves --------------------------------------------------------------------------------------
    @property
    def elem_bits(self) -> int:
        return TYPE_BITS[self.type_name]

    @property
    def chunk_bits(self) -> int:
        """Bits of one lane's chunk of a row (the block read's data type)."""
        return self.cols * self.elem_bits // self.lanes

    @property
    def chunk_elems(self) -> int:
        """Elements of the named type per chunk."""
        return self.chunk_bits // self.elem_bits

    @property
    def unit_bits(self) -> int:
        """Bits one element access moves at a surface's edge: an element, or for 4-bit data its byte (two
        elements)."""
        return max(8, self.elem_bits)

    @property
    def unit_bytes(self) -> int:
        return self.unit_bits // 8

    @property
    def chunk_units(self) -> int:
        """Element accesses per chunk (:attr:`unit_bits` each)."""
        return self.chunk_bits // self.unit_bits

    @property
    def elem_ctype(self) -> str:
        """The unsigned OpenCL C scalar one element access moves (a uchar of two 4-bit elements)."""
        return UNSIGNED_CTYPE[self.unit_bits]

    @property
    def chunk_ctype(self) -> str:
        return UNSIGNED_CTYPE[self.chunk_bits]

    @property
    def packed(self) -> bool:       # the 2D atoms' attribute; a 1D chunk is never re-packed
        return False

    @property
    def messages(self) -> int:
        """1D block messages the tile issues: one per row."""
        return self.rows

    @property
    def builtin(self) -> str:
        """The OpenCL C builtin of one row (OCLSG); prefetches have none."""
        if self.is_prefetch:
            return ""
        return (READ_BUILTIN if self.is_load else WRITE_BUILTIN)[self.chunk_bits]

    @property
    def extension(self) -> str:
        return SUBGROUP_BLOCK_EXTENSIONS[self.chunk_bits]

    @property
    def align_bytes(self) -> int:
        """Alignment every row's start needs for the block message (OCLSG "Restrictions")."""
        return WRITE_ALIGN_BYTES if self.is_store else READ_ALIGN_BYTES

    # -- registers ---------------------------------------------------------------------------------------
    @property
    def register_elem_bits(self) -> int:
        return self.chunk_bits

    @property
    def register_length(self) -> int:
        """One chunk per row (0 for prefetches)."""
        return 0 if self.is_prefetch else self.rows

    @property
    def register_type(self) -> str:
        n = self.register_length
        if n == 0:
            return ""
        return self.chunk_ctype if n == 1 else f"{self.chunk_ctype}{n}"

    @property
    def register_bytes(self) -> int:
        return self.register_length * self.chunk_bits // 8

    @property
    def elems_per_lane(self) -> int:
        return self.register_bytes * 8 // self.elem_bits

    def element_coord(self, lane: int, k: int) -> tuple[int, int]:
        """(row, col) of register element k of ``lane``: row k // q, chunk ``lane`` of it (q elements per
        chunk, the lower element in the lower bits)."""
        q = self.chunk_elems
        return k // q, lane * q + k % q

    @cached_property
    def lane_map(self) -> LaneMap:
        return LaneMap.from_lists([[self.element_coord(lane, k) for k in range(self.elems_per_lane)]
                                   for lane in range(self.lanes)])

    # -- legality ----------------------------------------------------------------------------------------
    def violations(self) -> list[str]:
        out = []
        if self.lanes not in SUB_GROUP_SIZES:
            out.append(f"sub-group size {self.lanes}: 1D block messages run at sub-group size 8, 16 or 32")
            return out
        if not (_is_pow2(self.rows) and self.rows <= MAX_ROWS):
            out.append(f"rows {self.rows}: a power of two <= {MAX_ROWS} (one register component per row)")
        if (self.cols * self.elem_bits) % self.lanes or self.chunk_bits not in UNSIGNED_CTYPE:
            out.append(f"a row of {self.cols} x {self.elem_bits} bits over {self.lanes} lanes is not a uchar, "
                       "ushort, uint or ulong per lane: 1D block messages move 8/16/32/64-bit chunks (OCLSG)")
        elif self.chunk_bits < self.elem_bits:
            out.append(f"chunk of {self.chunk_bits} bits is narrower than one {self.elem_bits}-bit element")
        if self.op not in OPS:
            out.append(f"op {self.op}: LD, ST or PF")
        return out

    def check(self) -> "Block1DAtom":
        broken = self.violations()
        if broken:
            raise Block1DError(f"{self.name} is illegal: " + "; ".join(broken))
        return self

    @property
    def prefetch(self) -> "Block1DAtom":
        """The prefetch of the same memory tile."""
        return self.with_op("PF")

    def with_op(self, op: str) -> "Block1DAtom":
        return Block1DAtom(self.type_name, self.rows, self.cols, op, self.lanes)

    def block1d_rows(self) -> "Block1DAtom":
        return self

    def describe(self) -> dict:
        return {"name": self.name, "kind": "copy1d", "type": self.type_name, "elem_bits": self.elem_bits,
                "rows": self.rows, "cols": self.cols, "op": self.op, "lanes": self.lanes,
                "chunk_bits": self.chunk_bits, "builtin": self.builtin, "extension": self.extension,
                "register_type": self.register_type, "register_bytes": self.register_bytes,
                "messages": self.messages, "legal": self.legal, "violations": self.violations()}

    def headline(self) -> list[str]:
        return [f"{self.name}: {self.rows} rows x {self.cols} cols, one {self.builtin} per row "
                f"(sub-group of {self.lanes}); per work-item {self.register_type or 'no registers'}"]


def enumerate_block1d_atoms(lanes: int, op: str, elem_bits: int, max_rows: int = MAX_ROWS,
                            max_cols: int | None = None) -> list[Block1DAtom]:
    """Every legal tile of one op and element size at sub-group size ``lanes``: smallest first (rows, then
    chunk).  The messages are the rows either way, so the planner takes the smallest tile that holds whole
    operand fragments (fewest rows sent to the element-wise edge path)."""
    out = []
    for chunk in UNSIGNED_CTYPE:
        if chunk < elem_bits:
            continue
        rows = 1
        while rows <= min(max_rows, MAX_ROWS):
            atom = Block1DAtom.of(elem_bits, chunk, rows, op, lanes)
            if atom.legal and (max_cols is None or atom.cols <= max_cols):
                out.append(atom)
            rows *= 2
    return sorted(out, key=lambda a: (a.rows, a.chunk_bits))
