"""IGC's 2D block builtins: parse a name by the compiler's grammar and declare it for OpenCL C.

Old ocloc declares none of the ``__builtin_IB_subgroup_block_*`` functions: a kernel must declare each one
it calls, with the right return type, or the compiler sizes the message from a wrong type.  The grammar is
IGC-LSC's (docs/atoms.md §1.7)::

    __builtin_IB_subgroup_block_{read_flat|read_cacheopts|read_prefetch|write_flat|write_cacheopts}
        [_transpose|_transform]_u{8,16,32,64}[_m{H}]k{W}[n16][v{C}]
    (long base, int width_bytes-1, int height-1, int pitch_bytes-1, int2 coord[, data][, cache])

Per-lane data = H*W*C*elem_bytes / 16 bytes (sub-group 16, docs/atoms.md §2 "sub-group").  Lane types
follow the compiler's own header (Debian libigdfcl1 1.0.12504 declares e.g. ``ushort16
intel_subgroup_block_read_u8_m8k32v2``, ``uint8 intel_subgroup_block_read_transform_u16_k16``,
``uint8 intel_subgroup_block_read_transpose_u32_k8``): 8-bit rows of 32 bytes come packed in ushorts,
transforms (VNNI) and 32-bit transposes in uints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from xegemm.aot.errors import BuiltinNameError
from xegemm.atoms.copy import Message, message_violations
from xegemm.library.dtypes import CTYPE_BYTES, UNSIGNED_CTYPE

SUB_GROUP = 16  # 2D block messages need a full sub-group of 16 (docs/atoms.md §2)

_IB_NAME = re.compile(
    r"^__builtin_IB_subgroup_block_(?P<op>read_flat|read_cacheopts|read_prefetch|write_flat|write_cacheopts)"
    r"(?:_(?P<layout>transpose|transform))?"
    r"_u(?P<bits>8|16|32|64)"
    r"(?:_m(?P<h>\d+))?_?k(?P<w>\d+)(?P<n16>n16)?(?:v(?P<c>\d+))?$"
)
_BUILTIN_VECTOR_LENGTHS = (2, 3, 4, 8, 16)


@dataclass(frozen=True)
class Block2DBuiltin:
    """One ``__builtin_IB_subgroup_block_*`` builtin, decoded."""

    name: str
    op: str  # "read", "write" or "prefetch"
    layout: str  # "plain", "transform" (VNNI) or "transpose"
    elem_bits: int
    height: int  # rows of the block in memory
    width: int  # elements per row of one block in memory
    count: int  # blocks side by side
    cache_arg: bool  # takes a trailing cache-control argument (cacheopts / prefetch forms)
    lane_scalar: str  # OpenCL C scalar type of the per-lane data
    lane_length: int  # number of those scalars per lane (0 for prefetches)

    @property
    def lane_bytes(self) -> int:
        """Bytes each of the 16 lanes receives (or supplies)."""
        return self.height * self.width * self.count * self.elem_bits // 8 // SUB_GROUP

    @property
    def lane_type(self) -> str:
        """The per-lane OpenCL C type, e.g. ``ushort8`` or ``xegemm_ushort32`` (see :func:`lane_typedef`)."""
        return vector_type_name(self.lane_scalar, self.lane_length)

    @property
    def message(self) -> str:
        """The ISA message this builtin must produce (an :mod:`xegemm.aot.isa` message kind)."""
        return {"read": "load_block2d", "write": "store_block2d", "prefetch": "prefetch_block2d"}[self.op]


def vector_type_name(scalar: str, length: int) -> str:
    """``ushort`` + 8 -> ``ushort8``; lengths OpenCL C lacks (e.g. 32, 64) get an ``xegemm_`` typedef."""
    if length == 1:
        return scalar
    if length in _BUILTIN_VECTOR_LENGTHS:
        return f"{scalar}{length}"
    return f"xegemm_{scalar}{length}"


def lane_typedef(scalar: str, length: int) -> str:
    """The guarded typedef a vector type wider than 16 needs (OpenCL C stops at 16); '' otherwise."""
    name = vector_type_name(scalar, length)
    if not name.startswith("xegemm_"):
        return ""
    guard = f"XEGEMM_TYPEDEF_{name.upper()}"
    return (f"#ifndef {guard}\n#define {guard}\n"
            f"typedef {scalar} {name} __attribute__((ext_vector_type({length})));\n#endif\n")


def parse_block2d_builtin(name: str) -> Block2DBuiltin:
    """Decode a ``__builtin_IB_subgroup_block_*`` name; raise :class:`BuiltinNameError` if malformed."""
    m = _IB_NAME.match(name)
    if not m:
        raise BuiltinNameError(f"{name!r} is not a 2D block builtin name of IGC's grammar (docs/atoms.md §1.7)")
    op = {"read_flat": "read", "read_cacheopts": "read", "read_prefetch": "prefetch",
          "write_flat": "write", "write_cacheopts": "write"}[m["op"]]
    layout = m["layout"] or "plain"
    bits = int(m["bits"])
    k = int(m["w"])
    count = int(m["c"] or 1)
    if layout == "transform":
        # VNNI: width is 16 elements, the k of the name is the block height (u8: 32 rows).
        if bits not in (8, 16) or m["h"]:
            raise BuiltinNameError(f"{name!r}: transform takes only u8/u16 and no _m (docs/atoms.md §1.7)")
        height, width = k, 16
    elif layout == "transpose":
        # d32/d64 transposes; height defaults to the sub-group size (docs/atoms.md §1.7, §7.4).
        if bits not in (32, 64):
            raise BuiltinNameError(f"{name!r}: transpose takes only u32/u64 (8/16-bit ones are emulations)")
        height, width = int(m["h"] or SUB_GROUP), k
    else:
        if not m["h"] or not m["c"]:
            raise BuiltinNameError(f"{name!r}: a plain 2D block builtin needs _m<H>k<W>v<C>")
        height, width = int(m["h"]), k
    if op != "read" and layout != "plain":
        raise BuiltinNameError(f"{name!r}: only reads can transform or transpose")
    total = height * width * count * bits // 8
    if total % SUB_GROUP:
        raise BuiltinNameError(f"{name!r}: {total} bytes do not split over {SUB_GROUP} lanes")
    if layout == "transform":
        scalar = "uint"
    elif layout == "transpose":
        scalar = UNSIGNED_CTYPE[bits]
    elif bits == 8 and width >= 32:
        scalar = "ushort"  # two bytes of a row per lane, packed (libigdfcl: ushort16 ..._u8_m8k32v2)
    else:
        scalar = UNSIGNED_CTYPE[bits]
    scalar_bytes = CTYPE_BYTES[scalar]
    lane_length = 0 if op == "prefetch" else max(1, total // SUB_GROUP // scalar_bytes)
    return Block2DBuiltin(name=name, op=op, layout=layout, elem_bits=bits, height=height, width=width,
                          count=count, cache_arg=m["op"] in ("read_cacheopts", "read_prefetch", "write_cacheopts"),
                          lane_scalar=scalar, lane_length=lane_length)


def declare_block2d_builtin(name: str) -> str:
    """OpenCL C that declares one IGC 2D block builtin (with a guarded typedef if its type needs one).

    >>> print(declare_block2d_builtin("__builtin_IB_subgroup_block_read_flat_u16_m8k16v1"))
    ushort8 __builtin_IB_subgroup_block_read_flat_u16_m8k16v1(long base_address, int width_in_bytes_minus_1, \
int height_minus_1, int pitch_in_bytes_minus_1, int2 coord);
    """
    b = parse_block2d_builtin(name)
    params = ["long base_address", "int width_in_bytes_minus_1", "int height_minus_1",
              "int pitch_in_bytes_minus_1", "int2 coord"]
    if b.op == "write":
        params.append(f"{b.lane_type} data")
    if b.cache_arg:
        params.append("int cache_control")  # IGC's enum LSC_LDCC / LSC_STCC; 0 = default caching
    result = "void" if b.op != "read" else b.lane_type
    typedef = lane_typedef(b.lane_scalar, b.lane_length) if b.lane_length else ""
    return f"{typedef}{result} {name}({', '.join(params)});"


def block2d_violation(shape: tuple[int, int, int], elem_bits: int, layout: str = "plain",
                      op: str = "read") -> str | None:
    """Why a 2D block message of ``shape`` = (width elems, height rows, count) breaks the hardware rules, as
    :func:`xegemm.atoms.copy.message_violations` (their one home) states them; None if legal.  ``layout`` is
    the builtin's: plain, transform (VNNI) or transpose; ``op`` read, write or prefetch."""
    width, height, count = shape
    kind = {"write": "store", "prefetch": "prefetch"}.get(op) or {"transform": "transform",
                                                                   "transpose": "transpose"}.get(layout, "load")
    broken = message_violations(Message(kind, elem_bits, width, height, count))
    return "; ".join(broken) or None
