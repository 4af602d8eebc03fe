"""The documented C prototypes of the Xe 2D block IO and DPAS builtins: the API surface a modern driver has.

No compiler on this machine knows ``cl_intel_subgroup_2d_block_io`` (Debian's ocloc is too old:
docs/compilers.md), so generated calls are checked against the Khronos documents instead.
The prototypes are not copied: they are generated from the documents' rules, each cited below.

Sources (KhronosGroup/OpenCL-Docs, mirror HEAD 1fb076bc, 2026-07-07):

- OCL2D = ``extensions/cl_intel_subgroup_2d_block_io.asciidoc`` v1.1.0: the "New OpenCL C Functions"
  list, Sections 6.13.X.1 (read), 6.13.X.2 (prefetch), 6.13.X.3 (write), 6.13.X.6 (Restrictions) and
  the SPIR-V environment table of section 5.2.X.
- OCLMMA = ``extensions/cl_intel_subgroup_matrix_multiply_accumulate.asciidoc`` rev 1.1.0: "New OpenCL
  C Functions" and Section 6.13.X.
- OCLTF32 = ``extensions/cl_intel_subgroup_matrix_multiply_accumulate_tf32.asciidoc`` rev 1.0.0: "New
  OpenCL C Functions" and Section 6.13.X.Y.

Which 2D block *messages* the hardware has is the atom model's knowledge (``xegemm.atoms.copy.
message_violations``); the shapes listed here are what the documents name, each hardware-legal
(tests/test_signatures.py checks it).  :mod:`xegemm.aot.call_check` checks generated calls against them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from xegemm.aot.errors import BuiltinNameError
from xegemm.library.dtypes import CTYPE_BYTES as SCALAR_BYTES
from xegemm.library.dtypes import UNSIGNED_CTYPE, vector_ctype
from xegemm.library.targets import EXT_2D_BLOCK_IO as EXT_2D
from xegemm.library.targets import EXT_DPAS as EXT_MMA
from xegemm.library.targets import EXT_DPAS_TF32 as EXT_TF32

# ---------------------------------------------------------------------------------------------------
# The documented rules
# ---------------------------------------------------------------------------------------------------

BLOCK2D_SUB_GROUP = 16  # OCL2D "New OpenCL C Functions" note and 6.13.X.6: the sub-group size is 16
_H6 = (1, 2, 4, 8, 16, 32)
_H4 = (1, 2, 4, 8)

# (op, element bits, block width in elements, block heights, block counts).  The names are
# intel_sub_group_2d_block_{op}_{bits}b_{rows}r{cols}x{count}c (OCL2D "New OpenCL C Functions").
BLOCK2D_SHAPES: tuple[tuple[str, int, int, tuple[int, ...], tuple[int, ...]], ...] = (
    # OCL2D 6.13.X.1 and SPIR-V table "Block Loads".
    ("read", 8, 32, _H6, (1, 2)),
    ("read", 8, 16, (8, 16, 32), (4,)),
    ("read", 16, 16, _H6, (1, 2)),
    ("read", 32, 8, _H6, (1, 2)),
    ("read", 32, 16, _H6, (1,)),
    # OCL2D "New OpenCL C Functions" ("8-bit data with transform", "16-bit data with transform") and
    # SPIR-V table "Block Loads with Transform".  NB: the 6.13.X.1 table omits 8b_32r16x4c and the
    # 16b 32-row transforms; the function list, the SPIR-V table and IGC's IBiF_Sub_Groups.cl have them.
    ("read_transform", 8, 16, (32,), (1, 2, 4)),
    ("read_transform", 16, 16, (16, 32), (1, 2)),
    # OCL2D 6.13.X.1 and SPIR-V table "Block Loads with Transpose" (dimensions in memory, pre-transpose).
    ("read_transpose", 32, 8, (16, 32), (1,)),
    # OCL2D 6.13.X.3 and SPIR-V table "Block Stores": at most 8 rows, one block.
    ("write", 8, 16, _H4, (1,)),
    ("write", 8, 32, _H4, (1,)),
    ("write", 16, 16, _H4, (1,)),
    ("write", 32, 16, _H4, (1,)),
    # OCL2D 6.13.X.2 and SPIR-V table "Block Prefetch".
    ("prefetch", 8, 32, _H6, (1, 2)),
    ("prefetch", 8, 16, (32,), (1, 2)),
    ("prefetch", 8, 16, (8, 16, 32), (4,)),
    ("prefetch", 16, 16, _H6, (1, 2)),
    ("prefetch", 32, 8, _H6, (1, 2)),
    ("prefetch", 32, 16, _H6, (1,)),
)



def block2d_data_scalar(op: str, elem_bits: int, cols: int) -> str:
    """Pointee type of the destination/value pointer (OCL2D 6.13.X.1 and 6.13.X.3 prototypes).

    Transforms and transposes give uints; 8-bit rows of 32 columns come as one ushort (two bytes) per
    work-item and row, 8-bit rows of 16 columns as one uchar; 16-bit data as ushort, 32-bit as uint.
    """
    if op in ("read_transform", "read_transpose"):
        return "uint"
    if elem_bits == 8:
        return "ushort" if cols == 32 else "uchar"
    return UNSIGNED_CTYPE[elem_bits]


def block2d_data_count(op: str, elem_bits: int, rows: int, cols: int, count: int) -> int:
    """Elements of :func:`block2d_data_scalar` per work-item ("reads N ushorts" comments of OCL2D's
    function list): each block is dealt to the 16 work-items on its own, rounded up to whole elements,
    so ``32b_1r8x1c`` reads one uint and ``32b_1r8x2c`` two (IGC's IBiF_Sub_Groups.cl agrees)."""
    size = SCALAR_BYTES[block2d_data_scalar(op, elem_bits, cols)]
    per_block = rows * cols * elem_bits // 8
    return count * -(-per_block // (BLOCK2D_SUB_GROUP * size))


# DPAS builtins.  (A tag, B tag, K, accumulator scalars) per OCLMMA "New OpenCL C Functions" and 6.13.X:
# integers: any signedness pair of 8-bit (K = 32) or 4-bit (K = 64) data, int accumulator; fp16/bf16:
# K = 16, float accumulator, and at N = 16 also half (fp16) or short (bf16 bits) accumulators.
_INT_TAGS = ("i8", "u8", "i4", "u4")
MMA_M = (1, 2, 4, 8)  # OCLMMA 6.13.X and OCLTF32 6.13.X.Y: "M may be equal to 1, 2, 4, or 8"


def _mma_families() -> list[tuple[str, int, tuple[str, ...], str]]:
    """(name, K, accumulator scalars at SIMD16, source) for every documented DPAS builtin name."""
    out = []
    for bits, k in ((8, 32), (4, 64)):
        for a in ("i", "u"):
            for b in ("i", "u"):
                out.append((f"intel_sub_group_{a}{bits}_{b}{bits}_matrix_mad_k{k}", k, ("int",), "OCLMMA"))
    out.append(("intel_sub_group_bf16_bf16_matrix_mad_k16", 16, ("float", "short"), "OCLMMA"))
    out.append(("intel_sub_group_f16_f16_matrix_mad_k16", 16, ("float", "half"), "OCLMMA"))
    out.append(("intel_sub_group_tf32_tf32_matrix_mad_k8", 8, ("float",), "OCLTF32"))
    return out


def _mma_operand_types(name: str, simd: int, m: int) -> tuple[str, str] | None:
    """(A type, B type) of one overload, or None if the name has no overload at this sub-group size."""
    tags = name[len("intel_sub_group_"):].split("_matrix_mad")[0].split("_")
    a_tag, b_tag = tags
    if a_tag == "tf32":
        # OCLTF32 "New OpenCL C Functions": SIMD16 only; A holds every other row: ceil(M/2) floats
        # (5.2.X table "ceil(M/2) x float32_t"); B is float8.
        return (vector_ctype("float", max(1, m // 2)), "float8") if simd == 16 else None
    b_type = "uint8" if b_tag.startswith("u") else "int8"  # OCLMMA: B is int8, uint8 for unsigned B
    if simd == 16:
        # OCLMMA SIMD16 list: 16 bits of each row per work-item: short{M}, ushort{M} for unsigned A.
        a_scalar = "ushort" if a_tag.startswith("u") else "short"
    else:
        # OCLMMA SIMD8 list: 32 bits of each row per work-item: int{M}, uint{M} for unsigned A.
        a_scalar = "uint" if a_tag.startswith("u") else "int"
    return vector_ctype(a_scalar, m), b_type


@dataclass(frozen=True)
class Prototype:
    """One documented C prototype, with what the checker needs to know about it."""

    name: str
    return_type: str
    params: tuple[tuple[str, str], ...]  # (C type, parameter name), e.g. ("private ushort*", "destination")
    sub_group_size: int  # the sub-group size it is documented for (16, or 8 for the SIMD8 DPAS overloads)
    extension: str
    source: str  # document and section it comes from
    op: str  # "read", "read_transform", "read_transpose", "write", "prefetch" or "mma"
    elem_bits: int = 0  # 2D block: element size in memory
    rows: int = 0  # 2D block: block height in memory
    cols: int = 0  # 2D block: block width in memory (elements)
    count: int = 0  # 2D block: blocks side by side
    data_scalar: str | None = None  # 2D block read/write: pointee type of the destination/value pointer
    data_count: int = 0  # 2D block read/write: how many of those the pointer must reach, per work-item
    m: int = 0  # DPAS: rows of A, acc and result
    k: int = 0  # DPAS: K of the name

    @property
    def param_types(self) -> tuple[str, ...]:
        """The parameter types only, e.g. ``("short8", "int8", "float8")``."""
        return tuple(t for t, _ in self.params)

    @property
    def declaration(self) -> str:
        """The C prototype, e.g. ``float8 intel_sub_group_bf16_bf16_matrix_mad_k16(short8 a, int8 b, float8 acc);``."""
        return f"{self.return_type} {self.name}({', '.join(f'{t} {n}' for t, n in self.params)});"


def _block2d_prototype(op: str, bits: int, rows: int, cols: int, count: int) -> Prototype:
    name = f"intel_sub_group_2d_block_{op}_{bits}b_{rows}r{cols}x{count}c"
    # OCL2D prototypes: (global void* base_address, int width, int height, int pitch, int2 coord[, data]);
    # width and pitch in bytes, height in rows, coord in elements (OCL2D 6.13.X.1 descriptions).
    params = [("global void*", "base_address"), ("int", "width"), ("int", "height"), ("int", "pitch"),
              ("int2", "coord")]
    section = {"prefetch": "6.13.X.2", "write": "6.13.X.3"}.get(op, "6.13.X.1")
    scalar, n = None, 0
    if op != "prefetch":
        scalar = block2d_data_scalar(op, bits, cols)
        n = block2d_data_count(op, bits, rows, cols, count)
        # OCL2D: reads take "private T* destination", writes "private T* value" (not const).
        params.append((f"private {scalar}*", "value" if op == "write" else "destination"))
    return Prototype(name=name, return_type="void", params=tuple(params), sub_group_size=BLOCK2D_SUB_GROUP,
                     extension=EXT_2D, source=f"OCL2D {section}", op=op, elem_bits=bits, rows=rows, cols=cols,
                     count=count, data_scalar=scalar, data_count=n)


@lru_cache(maxsize=1)
def _tables() -> tuple[dict[str, Prototype], dict[str, tuple[Prototype, ...]]]:
    block2d = {}
    for op, bits, cols, heights, counts in BLOCK2D_SHAPES:
        for rows in heights:
            for count in counts:
                p = _block2d_prototype(op, bits, rows, cols, count)
                block2d[p.name] = p
    mma: dict[str, tuple[Prototype, ...]] = {}
    for name, k, accs16, source in _mma_families():
        overloads = []
        ext = EXT_TF32 if source == "OCLTF32" else EXT_MMA
        section = "6.13.X.Y" if source == "OCLTF32" else "6.13.X"
        for simd in (16, 8):
            # OCLMMA 6.13.X: at N = 8 only full-precision (int / float) accumulators.
            for acc_scalar in (accs16 if simd == 16 else accs16[:1]):
                for m in MMA_M:
                    ops = _mma_operand_types(name, simd, m)
                    if ops is None:
                        continue
                    acc = vector_ctype(acc_scalar, m)
                    overloads.append(Prototype(
                        name=name, return_type=acc, params=((ops[0], "a"), (ops[1], "b"), (acc, "acc")),
                        sub_group_size=simd, extension=ext, source=f"{source} {section}", op="mma", m=m, k=k))
        mma[name] = tuple(overloads)
    return block2d, mma


def block2d_prototypes() -> tuple[Prototype, ...]:
    """Every documented 2D block function (OCL2D), one prototype each."""
    return tuple(_tables()[0].values())


def documented_names() -> tuple[str, ...]:
    """Every documented function name this module knows (2D block IO and DPAS), sorted."""
    block2d, mma = _tables()
    return tuple(sorted([*block2d, *mma]))


def documented_overloads(name: str) -> tuple[Prototype, ...]:
    """All documented prototypes of ``name`` (one for a 2D block function; empty if undocumented)."""
    block2d, mma = _tables()
    if name in block2d:
        return (block2d[name],)
    return mma.get(name, ())


def documented_prototype(name: str, *, m: int = 8, sub_group_size: int = 16,
                         acc: str | None = None) -> Prototype | None:
    """The documented prototype of ``name``, or None if it is not documented.

    A 2D block function has one.  A DPAS name is overloaded: ``m``, ``sub_group_size`` and the
    accumulator scalar ``acc`` ("float", "int", "half", "short"; default: the full-precision one) pick it.
    """
    overloads = documented_overloads(name)
    if not overloads or overloads[0].op != "mma":
        return overloads[0] if overloads else None
    for p in overloads:
        if p.m == m and p.sub_group_size == sub_group_size and (
                acc is None or p.return_type.rstrip("0123456789") == acc):
            return p  # the full-precision accumulator comes first in each (simd) group
    return None


def declare_documented(name: str, sub_group_size: int | None = None) -> str:
    """OpenCL C declaring ``name`` as documented (every overload of a DPAS name, or those of one
    sub-group size), for compilers without the extension's declarations.  ``overloadable`` keeps the
    names mangled as the drivers define them; half overloads sit behind ``cl_khr_fp16``."""
    overloads = [p for p in documented_overloads(name)
                 if sub_group_size is None or p.sub_group_size == sub_group_size]
    if not overloads:
        raise BuiltinNameError(f"{name!r} is not a documented {EXT_2D} or DPAS function"
                               + (f" at sub-group size {sub_group_size}" if sub_group_size else ""))
    plain, fp16 = [], []
    for p in overloads:
        line = f"__attribute__((overloadable)) {p.declaration}"
        (fp16 if "half" in p.return_type else plain).append(line)
    text = "\n".join(plain)
    if fp16:
        text += ("\n#ifdef cl_khr_fp16\n#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n"
                 + "\n".join(fp16) + "\n#endif")
    return text + "\n"
