"""The DPAS (MMA) atom model: names, legality, per-work-item register types and lane maps, and references.

One DPAS computes D(M x N) = A(M x K) * B(K x N) + C for one sub-group.  An atom is named like sycl-tla's
legacy atoms, ``XE_<M>x<N>x<K>_<D><A><B><C>_TT`` (e.g. ``XE_8x16x16_F32BF16BF16F32_TT``).

Sources (abbreviations as in shared/facts/xe_atoms.md and shared/facts/coopmatrix_layouts.md):
- OCLMMA = KhronosGroup/OpenCL-Docs extensions/cl_intel_subgroup_matrix_multiply_accumulate.asciidoc
- OCLTF32 = KhronosGroup/OpenCL-Docs extensions/cl_intel_subgroup_matrix_multiply_accumulate_tf32.asciidoc
- TLA:mma = intel/sycl-tla include/cute/arch/mma_xe.hpp;
  TLA:mmatraits/legacy = intel/sycl-tla include/cute/atom/mma_traits_xe_legacy.hpp
- SPV2D = KhronosGroup/SPIRV-Registry extensions/INTEL/SPV_INTEL_2d_block_io.asciidoc (VNNI: lower row in lower bits)
- SPVMMA = KhronosGroup/SPIRV-Registry extensions/INTEL/SPV_INTEL_subgroup_matrix_multiply_accumulate.asciidoc
- SPVJM = SPV_INTEL_joint_matrix (shared/seeds/003): signedness pairs SU/US/UU, PackedInt4
- XeTLA = intel/intel-extension-for-pytorch .../xetla/.../arch_config.hpp (systolic depth 8, repeat count <= 8)

Two OpenCL C lowerings render from ``templates/mma/``: ``native.cl.j2`` (the builtin) and ``portable.cl.j2``
(ordinary arithmetic and sub-group broadcasts on the same register types); see :func:`render_mma`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from xegemm.atoms.lanemap import LaneMap
from xegemm.errors import XegemmError


class MmaAtomError(XegemmError, ValueError):
    """An MMA atom name or parameter set breaks a DPAS rule; the message names the rule and its source."""


# ---------------------------------------------------------------------------------------------------
# Element types


@dataclass(frozen=True)
class ElementType:
    """One element type of a DPAS operand: its name code, storage bits and how its bits are read."""

    code: str           # the code used in atom names
    bits: int           # storage bits per element (tf32 is stored as a 32-bit float)
    kind: str           # "float" or "int"
    signed: bool
    builtin_tag: str | None  # the tag in OpenCL builtin names (OCLMMA), None for accumulator-only types


ELEMENT_TYPES: dict[str, ElementType] = {t.code: t for t in (
    ElementType("F32", 32, "float", True, None),
    ElementType("BF16", 16, "float", True, "bf16"),
    ElementType("F16", 16, "float", True, "f16"),
    ElementType("TF32", 32, "float", True, "tf32"),
    ElementType("S8", 8, "int", True, "i8"),
    ElementType("U8", 8, "int", False, "u8"),
    ElementType("S4", 4, "int", True, "i4"),
    ElementType("U4", 4, "int", False, "u4"),
    ElementType("S32", 32, "int", True, None),
)}

# Accumulator types per input type (facts coopmatrix_layouts.md §0; OCLMMA; OCLTF32):
# bf16/f16 -> f32, or an accumulator of the input type (SIMD16 only); tf32 -> f32; 8- and 4-bit ints -> s32.
ACCUMULATORS: dict[str, tuple[str, ...]] = {
    "BF16": ("F32", "BF16"), "F16": ("F32", "F16"), "TF32": ("F32",),
    "S8": ("S32",), "U8": ("S32",), "S4": ("S32",), "U4": ("S32",),
}

# Every (A, B, accumulator) combination, in enumeration order.  Integers come in all four signedness pairs
# SS, SU, US, UU (SPVJM OpJointMatrix{SU,US,UU}MadINTEL; OCLMMA i8/u8 x i8/u8 and i4/u4 x i4/u4 builtins).
TYPE_COMBINATIONS: tuple[tuple[str, str, str], ...] = (
    ("BF16", "BF16", "F32"), ("BF16", "BF16", "BF16"),
    ("F16", "F16", "F32"), ("F16", "F16", "F16"),
    ("TF32", "TF32", "F32"),
    *((f"{sa}{w}", f"{sb}{w}", "S32") for w in (8, 4) for sa in "SU" for sb in "SU"),
)

# Which targets execute a DPAS of each SIMD width: N = execution size = sub-group size, 16 on PVC (Xe-HPC)
# and BMG (Xe2), 8 on DG2 (Xe-HPG) (xe_atoms.md §3.1: XeTLA dpas_attr_t::n_in_elem; OCLMMA).
TARGETS_BY_N: dict[int, tuple[str, ...]] = {16: ("pvc", "bmg"), 8: ("dg2",)}

# M values for which OpenCL has a builtin (OCLMMA, OCLTF32: "M = 1, 2, 4, 8"); the hardware takes 1..8.
BUILTIN_M = (1, 2, 4, 8)

_CODE = "F32|BF16|F16|TF32|S32|S8|U8|S4|U4"
_NAME_RE = re.compile(rf"XE_(\d+)x(\d+)x(\d+)_({_CODE})({_CODE})({_CODE})({_CODE})_TT")


def _vec(base: str, n: int) -> str:
    """The OpenCL C spelling of an n-component vector of ``base`` (the scalar itself for n = 1)."""
    return base if n == 1 else f"{base}{n}"


def _component(var: str, width: int, i: int) -> str:
    """Component i of a variable of an n-component OpenCL type (scalars have no ``.s0``)."""
    return var if width == 1 else f"{var}.s{i:x}"


def _vector_width(ctype: str) -> int:
    digits = re.search(r"(\d+)$", ctype)
    return int(digits.group(1)) if digits else 1


_SCALAR_BYTES = {"char": 1, "uchar": 1, "short": 2, "ushort": 2, "half": 2, "int": 4, "uint": 4, "float": 4}


def sizeof_ctype(ctype: str) -> int:
    """``sizeof`` of an OpenCL C scalar or 1/2/4/8/16-component vector type (OpenCL C 6.1.5)."""
    base = ctype.rstrip("0123456789")
    return _SCALAR_BYTES[base] * _vector_width(ctype)


# ---------------------------------------------------------------------------------------------------
# The atom


@dataclass(frozen=True)
class MmaAtom:
    """One DPAS atom: D(m x n) = A(m x k) * B(k x n) + C with element type codes d, a, b, c.

    Construction validates every rule (:class:`MmaAtomError` names the rule broken).  ``m`` is the repeat
    count (1..8), ``n`` the SIMD width (16: PVC/BMG, 8: DG2), ``k`` = 8 * 32 / bits of A and B.
    """

    m: int
    n: int
    k: int
    d: str
    a: str
    b: str
    c: str

    def __post_init__(self):
        _check(self)

    # -- names ------------------------------------------------------------------------------------
    @classmethod
    def parse(cls, name: str) -> "MmaAtom":
        """The atom a name such as ``XE_8x16x16_F32BF16BF16F32_TT`` denotes (MmaAtomError if illegal)."""
        match = _NAME_RE.fullmatch(name.strip())
        if not match:
            raise MmaAtomError(
                f"{name!r} is not an MMA atom name: expected XE_<M>x<N>x<K>_<D><A><B><C>_TT with type codes "
                f"from {_CODE.replace('|', ', ')} (e.g. XE_8x16x16_F32BF16BF16F32_TT; sycl-tla legacy naming, "
                "xe_atoms.md §3.2)")
        m, n, k, d, a, b, c = match.groups()
        return cls(int(m), int(n), int(k), d, a, b, c)

    @classmethod
    def of(cls, a: str, b: str, acc: str, m: int = 8, n: int = 16) -> "MmaAtom":
        """The atom for input types a, b and accumulator acc (C = D), with K derived from the types."""
        for code in (a, b, acc):
            if code not in ELEMENT_TYPES:
                raise MmaAtomError(f"unknown element type code {code!r}: expected one of {', '.join(ELEMENT_TYPES)}")
        k = 256 // max(ELEMENT_TYPES[a].bits, ELEMENT_TYPES[b].bits)
        return cls(m, n, k, acc, a, b, acc)

    @property
    def name(self) -> str:
        """The atom name, ``XE_<M>x<N>x<K>_<D><A><B><C>_TT``."""
        return f"XE_{self.m}x{self.n}x{self.k}_{self.d}{self.a}{self.b}{self.c}_TT"

    @property
    def fn_name(self) -> str:
        """The C identifier of the function both lowerings emit, e.g. ``xe_mma_8x16x16_f32bf16bf16f32``."""
        return f"xe_mma_{self.m}x{self.n}x{self.k}_{(self.d + self.a + self.b + self.c).lower()}"

    def __str__(self) -> str:
        return self.name

    # -- shape and types --------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.m, self.n, self.k)

    @property
    def a_type(self) -> ElementType:
        return ELEMENT_TYPES[self.a]

    @property
    def b_type(self) -> ElementType:
        return ELEMENT_TYPES[self.b]

    @property
    def c_type(self) -> ElementType:
        return ELEMENT_TYPES[self.c]

    @property
    def d_type(self) -> ElementType:
        return ELEMENT_TYPES[self.d]

    @property
    def simd(self) -> int:
        """The sub-group size the atom runs at (= N)."""
        return self.n

    @property
    def targets(self) -> tuple[str, ...]:
        """The targets whose DPAS has this atom: ("pvc", "bmg") for N = 16, ("dg2",) for N = 8."""
        return TARGETS_BY_N[self.n]

    @property
    def ops_per_channel(self) -> int:
        """A/B elements per 32-bit channel (P = 32 / bits; K = 8 * P, systolic depth 8: xe_atoms.md §3.1)."""
        return 32 // self.a_type.bits

    @property
    def is_integer(self) -> bool:
        return self.a_type.kind == "int"

    @property
    def register_m(self) -> int:
        """Rows the registers hold: M rounded up to 1, 2, 4 or 8.

        OpenCL C has vectors of 1, 2, 3, 4, 8 and 16 components only, and the builtins take M = 1, 2, 4, 8
        (OCLMMA); for M = 3, 5, 6, 7 (legal hardware repeat counts, TLA:doc/rearch) the registers are those of
        the next builtin M and the rows >= M are padding (``None`` in the lane maps).
        """
        return next(x for x in BUILTIN_M if x >= self.m)

    # Per-work-item OpenCL C types (xe_atoms.md §3.4 from OCLMMA / OCLTF32):
    @property
    def a_ctype(self) -> str:
        """SIMD16: short{M} (ushort{M} for unsigned ints), tf32 float/float/float2/float4 (M = 1/2/4/8);
        SIMD8: int{M} (uint{M} for unsigned ints): 16 resp. 32 bits of each row per lane."""
        if self.a == "TF32":
            return _vec("float", max(1, self.register_m // 2))
        unsigned = self.is_integer and not self.a_type.signed
        base = ("ushort" if unsigned else "short") if self.n == 16 else ("uint" if unsigned else "int")
        return _vec(base, self.register_m)

    @property
    def b_ctype(self) -> str:
        """float8 (tf32), uint8 (unsigned ints), int8 otherwise: 8 x 32 bits of this lane's column."""
        if self.b == "TF32":
            return "float8"
        return "uint8" if self.is_integer and not self.b_type.signed else "int8"

    @property
    def c_ctype(self) -> str:
        """The type of C and of D: float{M}, int{M}, short{M} (bf16 bits) or half{M}."""
        base = {"F32": "float", "S32": "int", "BF16": "short", "F16": "half"}[self.c]
        return _vec(base, self.register_m)

    d_ctype = c_ctype

    def ctype(self, operand: str) -> str:
        """The per-work-item OpenCL C type of operand "a", "b", "c" or "d"."""
        return {"a": self.a_ctype, "b": self.b_ctype, "c": self.c_ctype, "d": self.c_ctype}[_operand(operand)]

    def element(self, operand: str) -> ElementType:
        """The element type of operand "a", "b", "c" or "d"."""
        return {"a": self.a_type, "b": self.b_type, "c": self.c_type, "d": self.d_type}[_operand(operand)]

    def operand_shape(self, operand: str) -> tuple[int, int]:
        """(rows, cols) of the operand: A (m, k), B (k, n), C and D (m, n)."""
        return {"a": (self.m, self.k), "b": (self.k, self.n), "c": (self.m, self.n),
                "d": (self.m, self.n)}[_operand(operand)]

    def register_bytes(self, operand: str) -> int:
        """Bytes of the operand per work-item (= sizeof of its OpenCL C type)."""
        return sizeof_ctype(self.ctype(operand))

    # -- builtins ---------------------------------------------------------------------------------
    @property
    def builtin_family(self) -> str:
        """The OpenCL builtin's name (the same for every M; the overload is picked by the vector types)."""
        return f"intel_sub_group_{self.a_type.builtin_tag}_{self.b_type.builtin_tag}_matrix_mad_k{self.k}"

    @property
    def builtin(self) -> str | None:
        """The OpenCL builtin computing exactly this atom, or None: OpenCL has M = 1, 2, 4, 8 only (OCLMMA)."""
        return self.builtin_family if self.m in BUILTIN_M else None

    @property
    def spirv_operands(self) -> int:
        """The operand flags of OpSubgroupMatrixMultiplyAccumulateINTEL (SPVMMA; coopmatrix_layouts.md §3.3)."""
        flags = 0
        for t, signed, packed in ((self.a_type, 0x1, {"S8": 0x10, "U8": 0x10, "S4": 0x40, "U4": 0x40,
                                                       "TF32": 0x100, "F16": 0x400, "BF16": 0x1000}),
                                  (self.b_type, 0x2, {"S8": 0x20, "U8": 0x20, "S4": 0x80, "U4": 0x80,
                                                       "TF32": 0x200, "F16": 0x800, "BF16": 0x2000})):
            flags |= packed[t.code]
            if t.kind == "int" and t.signed:
                flags |= signed
        if self.c == "BF16":
            flags |= 0x4 | 0x8   # MatrixCBFloat16, MatrixResultBFloat16
        return flags

    def describe(self) -> dict:
        """Key properties as a plain dict (for ``xegemm atoms list --json``)."""
        return {"name": self.name, "kind": "mma", "m": self.m, "n": self.n, "k": self.k, "simd": self.simd,
                "types": {"a": self.a, "b": self.b, "c": self.c, "d": self.d}, "targets": list(self.targets),
                "registers": {op: self.ctype(op) for op in ("a", "b", "c")}, "builtin": self.builtin}

    # -- layouts ----------------------------------------------------------------------------------
    def lane_map(self, operand: str) -> LaneMap:
        """Per lane, the (row, col) of each element of the operand's registers, in register order.

        A coordinates are (m, k), B (k, n), C and D (m, n); ``None`` marks padding.  See the module-level
        functions :func:`_a_lanes`, :func:`_b_lanes`, :func:`_c_lanes` for the rules and their sources.
        """
        return _lane_map(self, _operand(operand))

    @property
    def portable(self) -> "PortablePlan":
        """Everything ``templates/mma/portable.cl.j2`` prints, precomputed from the lane maps."""
        return _portable_plan(self)


def _operand(operand: str) -> str:
    op = operand.lower()
    if op not in ("a", "b", "c", "d"):
        raise ValueError(f"operand must be 'a', 'b', 'c' or 'd', not {operand!r}")
    return op


def _check(atom: MmaAtom) -> None:
    """Raise MmaAtomError naming the first DPAS rule the parameters break."""
    label = f"XE_{atom.m}x{atom.n}x{atom.k}_{atom.d}{atom.a}{atom.b}{atom.c}_TT"

    def fail(rule: str):
        raise MmaAtomError(f"{label}: {rule}")

    for code in (atom.d, atom.a, atom.b, atom.c):
        if code not in ELEMENT_TYPES:
            fail(f"unknown element type code {code!r} (expected one of {', '.join(ELEMENT_TYPES)})")
    ta, tb = ELEMENT_TYPES[atom.a], ELEMENT_TYPES[atom.b]
    if atom.a not in ACCUMULATORS or atom.b not in ACCUMULATORS:
        fail(f"{atom.a} x {atom.b}: DPAS inputs are bf16, f16, tf32, s8/u8 or s4/u4 (OCLMMA, OCLTF32); "
             "f32 and s32 are accumulator types only")
    if ta.kind == "float" and atom.a != atom.b:
        fail(f"A {atom.a} with B {atom.b}: DPAS multiplies like float types only (bf16 x bf16, f16 x f16, "
             "tf32 x tf32; OCLMMA, OCLTF32)")
    if ta.kind != tb.kind:
        fail(f"A {atom.a} with B {atom.b}: DPAS does not mix float and integer inputs (OCLMMA)")
    if ta.kind == "int" and ta.bits != tb.bits:
        fail(f"A {atom.a} with B {atom.b}: integer A and B must both be 8-bit or both 4-bit; OpenCL has only "
             "i8/u8 x i8/u8 (k32) and i4/u4 x i4/u4 (k64) builtins (OCLMMA)")
    if atom.c != atom.d:
        fail(f"C {atom.c} with D {atom.d}: the OpenCL builtins take one accumulator type for C and the result "
             "(OCLMMA); mixed C/D types are not modelled")
    if atom.c not in ACCUMULATORS[atom.a]:
        fail(f"{atom.a} inputs with a {atom.c} accumulator: {atom.a} accumulates into "
             f"{' or '.join(ACCUMULATORS[atom.a])} (OCLMMA, OCLTF32; coopmatrix_layouts.md §0)")
    if not 1 <= atom.m <= 8:
        fail(f"M={atom.m}: M is the DPAS repeat count, 1..8 (XeTLA rcount_max=8; TLA:doc/rearch)")
    if atom.n not in TARGETS_BY_N:
        fail(f"N={atom.n}: N is the DPAS execution size = sub-group size, 16 (PVC, BMG) or 8 (DG2) (OCLMMA; "
             "XeTLA dpas_attr_t::n_in_elem)")
    want_k = 256 // max(ta.bits, tb.bits)
    if atom.k != want_k:
        fail(f"K={atom.k}: K = 8 (systolic depth) * 32 / bits = {want_k} for {atom.a} x {atom.b} "
             "(tf32 8, f16/bf16 16, s8/u8 32, s4/u4 64; TLA:mma, XeTLA)")
    if atom.n == 8 and atom.a == "TF32":
        fail("N=8 with tf32: tf32 DPAS exists only at SIMD16 (PVC, BMG), not on DG2 (OCLTF32)")
    if atom.n == 8 and atom.c in ("BF16", "F16"):
        fail(f"N=8 with a {atom.c.lower()} accumulator: DG2 (SIMD8) DPAS has only float accumulators for "
             "bf16/f16, OCLMMA")


def enumerate_mma_atoms(n: int | None = None) -> Iterator[MmaAtom]:
    """Every legal atom: all type combinations x M = 1..8 x N = 16 and 8 (optionally one N only)."""
    for width in (16, 8) if n is None else (n,):
        for a, b, acc in TYPE_COMBINATIONS:
            for m in range(1, 9):
                try:
                    yield MmaAtom.of(a, b, acc, m=m, n=width)
                except MmaAtomError:
                    continue   # e.g. tf32 or a bf16 accumulator at N = 8


# ---------------------------------------------------------------------------------------------------
# Lane maps


def _a_lanes(atom: MmaAtom) -> list[list]:
    """A (m, k) per lane.

    - tf32 (SIMD16): lane l, float component v holds A[m = 2v + l/8][k = l%8]: "the first K work-items
      contribute the even rows ... the remaining work-items the odd rows" (OCLTF32; xe_atoms.md §4 from
      TLA:mmatraits/legacy ``Layout<Shape<Shape<_8,_2>,_4>,Stride<Stride<_8,_1>,_2>>``).
    - SIMD16 otherwise: each lane holds 16 bits of every row: component r = row r, lane l holds
      k = l*q .. l*q+q-1 with q = 16/bits, lower k in lower bits (OCLMMA "16 bits per lane per row";
      xe_atoms.md §4: bf16 ``A[m=r][k=l]``, s8 ``{A[r][2l], A[r][2l+1]}``).
    - SIMD8 (DG2): 32 bits of every row per lane, q = 32/bits (OCLMMA int{M} A; xe_atoms.md §4 "DG2").
    """
    lanes = []
    if atom.a == "TF32":
        comps = max(1, atom.register_m // 2)
        for lane in range(atom.n):
            row_of = [2 * v + lane // 8 for v in range(comps)]
            lanes.append([(r, lane % 8) if r < atom.m else None for r in row_of])
        return lanes
    q = (16 if atom.n == 16 else 32) // atom.a_type.bits
    for lane in range(atom.n):
        lanes.append([(r, lane * q + j) if r < atom.m else None
                      for r in range(atom.register_m) for j in range(q)])
    return lanes


def _b_lanes(atom: MmaAtom) -> list[list]:
    """B (k, n) per lane: lane = column n; 32-bit register i holds k = i*p .. i*p+p-1, p = 32/bits, the lower
    k in the lower bits (VNNI; OCLMMA "each work item contributes one column" of B; SPV2D VNNI packing;
    xe_atoms.md §4: bf16 ``low16 = B[2r][l], high16 = B[2r+1][l]``, s8 ``B[4i..4i+3][l]``, tf32 ``B[k][l]``,
    DG2 ``{B[2i][n], B[2i+1][n]}``).  In register order that is simply k = 0..K-1."""
    return [[(kk, lane) for kk in range(atom.k)] for lane in range(atom.n)]


def _c_lanes(atom: MmaAtom) -> list[list]:
    """C and D (m, n) per lane: lane = column n, component r = row r (OCLMMA "each work item contributes one
    column" of the accumulator; xe_atoms.md §4 ``C[m=r][n=l]``); rows >= M are padding."""
    return [[(r, lane) if r < atom.m else None for r in range(atom.register_m)] for lane in range(atom.n)]


@functools.lru_cache(maxsize=None)
def _lane_map(atom: MmaAtom, operand: str) -> LaneMap:
    rows = {"a": _a_lanes, "b": _b_lanes, "c": _c_lanes, "d": _c_lanes}[operand](atom)
    return LaneMap.from_lists(rows)


# ---------------------------------------------------------------------------------------------------
# The portable lowering's plan (what portable.cl.j2 prints)


def _decode(t: ElementType, x: str, j: int, *, source_bits: int = 32) -> str:
    """A C expression for element j (little-endian, ``t.bits`` wide) of the uint expression ``x``, as a
    float or an int.  ``source_bits`` is how many low bits of x are meaningful (16 for a
    zero-extended SIMD16 A component)."""
    shift = j * t.bits
    shifted = x if shift == 0 else f"({x} >> {shift})"
    if t.code == "BF16":     # bf16 = the high half of an f32
        if shift == 0:
            return f"as_float({x} << 16)"
        if shift == 16 and source_bits == 32:
            return f"as_float({x} & 0xffff0000u)"
        return f"as_float(({shifted} & 0xffffu) << 16)"
    if t.code == "F16":
        return f"(float)as_half((ushort){shifted})"
    if t.code == "TF32":     # tf32 = an f32 whose low 13 mantissa bits are ignored (cleared here)
        return f"as_float({x} & 0xffffe000u)"
    if t.bits == 8:
        return f"(int)as_char((uchar){shifted})" if t.signed else f"(int)({shifted} & 0xffu)"
    if t.bits == 4:          # (v ^ 8) - 8 sign-extends a 4-bit field without implementation-defined shifts
        return f"(((int)({shifted} & 0xfu) ^ 8) - 8)" if t.signed else f"(int)({shifted} & 0xfu)"
    raise AssertionError(t)


def _decode_vector(t: ElementType, x: str, j: int, n: int, *, source_bits: int = 32) -> str:
    """:func:`_decode` for an n-component uint vector expression ``x``: element j of every component, as a
    float vector, or for integers a uint vector of the sign- or zero-extended values."""
    def vec(base: str) -> str:
        return _vec(base, n)

    shift = j * t.bits
    shifted = x if shift == 0 else f"({x} >> {shift})"
    if t.code == "BF16":
        if shift == 0:
            return f"as_{vec('float')}({x} << 16)"
        if shift == 16 and source_bits == 32:
            return f"as_{vec('float')}({x} & 0xffff0000u)"
        return f"as_{vec('float')}(({shifted} & 0xffffu) << 16)"
    if t.code == "F16":
        bits = shifted if source_bits == 16 else f"{shifted} & 0xffffu"
        return f"convert_{vec('float')}(as_{vec('half')}(convert_{vec('ushort')}({bits})))"
    if t.code == "TF32":
        return f"as_{vec('float')}({x} & 0xffffe000u)"
    if t.bits == 8:
        if t.signed:
            char = f"as_{vec('char')}(convert_{vec('uchar')}({shifted} & 0xffu))"
            return f"as_{vec('uint')}(convert_{vec('int')}({char}))"
        return f"{shifted} & 0xffu"
    if t.bits == 4:
        if t.signed:
            return f"as_{vec('uint')}((convert_{vec('int')}({shifted} & 0xfu) ^ 8) - 8)"
        return f"{shifted} & 0xfu"
    raise AssertionError(t)


@dataclass(frozen=True)
class ALoop:
    """A loop ``for i < count``: for each term (column, b_index), in order, d += column * bk[b_index], where
    column is A[:][b_index] (every row) broadcast from the lane(s) holding it; both are expressions in i."""

    count: int
    comment: str
    terms: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class PortablePlan:
    """Precomputed pieces of the portable lowering of one atom (see templates/mma/portable.cl.j2).

    D is computed as one vector over the register rows (``acc``), updated once per k with A's column k: the
    same operations per element as a scalar loop over rows, in the same order, but the rows of C and D
    stay in the registers they arrive in (rows >= M of a padded register are computed and dropped).
    """

    acc: str                                  # D's rows as one vector: float{M}, or uint{M} (wraps like DPAS)
    value: str                                # a decoded A or B element: "float", or "uint" (two's complement)
    b_unpack: tuple[tuple[int, str], ...]     # (k, expression of this lane's B[k][n])
    a_raw: tuple[str, str]                    # (type, expression): this lane's A components as uint bits
    a_decode: tuple[tuple[str, str, str], ...]  # (type, name, expression): element j of every A component
    a_loops: tuple[ALoop, ...]                # A's columns in increasing k
    c_in: str                                 # C as the accumulator vector
    d_out: str                                # D in C's type (padding rows pass C through)
    needs_fp16: bool
    needs_bf16_rounding: bool


def _affine(base: int, stride: int) -> str:
    """The C expression base + stride * i, as plainly as possible ("i", "2 * i + 1", "i + 8", "3")."""
    if stride == 0:
        return str(base)
    term = "i" if stride == 1 else f"{stride} * i"
    return term if base == 0 else f"{term} + {base}"


def _a_loops(atom: MmaAtom, value_vec) -> tuple[ALoop, ...]:
    """A's columns, from the lane map of the atom with every register row real (so that padding rows come
    along): column k of A, one value per row, is element j of the components of one lane (or, for tf32, of
    two lanes whose components interleave the rows); k's that advance the same lanes by one fold into a loop."""
    full = atom if atom.m == atom.register_m else MmaAtom(atom.register_m, atom.n, atom.k, atom.d, atom.a,
                                                          atom.b, atom.c)
    width = _vector_width(atom.a_ctype)
    per_comp = sizeof_ctype(atom.a_ctype) * 8 // width // atom.a_type.bits
    where = {}                                # (row, k) -> (lane, component, element j of the component)
    for lane, cells in enumerate(_lane_map(full, "a").map):
        for idx, cell in enumerate(cells):
            if cell is not None:
                where[cell] = (lane, idx // per_comp, idx % per_comp)
    rows = range(atom.register_m)
    columns = []                              # per k: (j, source lanes, position of each row among them)
    for k in range(atom.k):
        src = [where[(r, k)] for r in rows]
        (j,) = {s[2] for s in src}
        lanes = tuple(dict.fromkeys(s[0] for s in src))
        columns.append((j, lanes, tuple(lanes.index(lane) * width + comp for lane, comp, _ in src)))
    step = next((k for k in range(1, atom.k) if columns[k][1] != columns[0][1]), atom.k)
    terms = []
    for jj in range(step):
        j, lanes, pos = columns[jj]
        for k in range(jj, atom.k, step):     # the same element and rows, from lanes advancing by one
            assert columns[k] == (j, tuple(lane + k // step for lane in lanes), pos), (atom.name, k)
        shuffles = [f"intel_sub_group_shuffle(av{j}, {_affine(lane, 1)})" for lane in lanes]
        if len(lanes) == 1:
            assert pos == tuple(rows), atom.name
            column = shuffles[0]
        else:
            column = f"({value_vec(len(lanes) * width)})({', '.join(shuffles)})"
            if pos != tuple(rows):
                column = f"({column}).s{''.join(f'{p:x}' for p in pos)}"
        terms.append((column, _affine(jj, step)))
    ks = f"A[:][{terms[0][1]}]" if step == 1 else f"A[:][{terms[0][1]} .. {terms[-1][1]}]"
    sources = " and ".join(f"lane {_affine(lane, 1)}" for lane in columns[0][1])
    return (ALoop(atom.k // step, f"{ks} (every row) from {sources}", tuple(terms)),)


@functools.lru_cache(maxsize=None)
def _portable_plan(atom: MmaAtom) -> PortablePlan:
    # Integers are summed as uint: products of 8- and 4-bit values taken modulo 2^32 have the bits of the exact
    # int products, and the sum wraps modulo 2^32 like the hardware's int32 accumulator (an int sum could
    # overflow: undefined behaviour).
    acc, value = ("uint", "uint") if atom.is_integer else ("float", "float")
    n = atom.register_m
    b_width, b_per_reg = 8, 32 // atom.b_type.bits
    b_unpack = tuple(
        (kk, _decode(atom.b_type, f"as_uint({_component('b', b_width, kk // b_per_reg)})", kk % b_per_reg))
        for kk in range(atom.k))
    assert [entry[0] for entry in _lane_map(atom, "b").map[0]] == list(range(atom.k))  # B slot s holds k = s

    a_width = _vector_width(atom.a_ctype)
    comp_bits = sizeof_ctype(atom.a_ctype) * 8 // a_width
    raw = _vec("uint", a_width)
    a_raw = (raw, f"convert_{raw}(as_{_vec('ushort', a_width)}(a))" if comp_bits == 16 else f"as_{raw}(a)")
    a_decode = tuple((_vec(value, a_width), f"av{j}",
                      _decode_vector(atom.a_type, "ar", j, a_width, source_bits=comp_bits))
                     for j in range(comp_bits // atom.a_type.bits))

    def vec(base: str, width: int = n) -> str:
        return _vec(base, width)

    c_in = {"F32": "c", "S32": f"as_{vec('uint')}(c)", "F16": f"convert_{vec('float')}(c)",
            "BF16": f"as_{vec('float')}(convert_{vec('uint')}(as_{vec('ushort')}(c)) << 16)"}[atom.c]
    row = {"F32": "{d}", "S32": "as_int({d})", "BF16": "as_short(xe_mma_float_to_bf16_rne({d}))",
           "F16": "convert_half_rte({d})"}[atom.c]
    if atom.m == n and atom.c != "BF16":
        d_out = {"F32": "d", "S32": f"as_{vec('int')}(d)", "F16": f"convert_{vec('half')}_rte(d)"}[atom.c]
    elif n == 1:
        d_out = row.format(d="d")
    else:
        d_out = f"({atom.c_ctype})(" + ", ".join(
            row.format(d=_component("d", n, r)) if r < atom.m else _component("c", n, r) for r in range(n)) + ")"
    return PortablePlan(acc=vec(acc), value=value, b_unpack=b_unpack, a_raw=a_raw, a_decode=a_decode,
                        a_loops=_a_loops(atom, lambda width: vec(value, width)), c_in=c_in, d_out=d_out,
                        needs_fp16="F16" in (atom.a, atom.c), needs_bf16_rounding=atom.c == "BF16")


# ---------------------------------------------------------------------------------------------------
# Rendering the two lowerings


LOWERINGS = ("native", "portable")


def render_mma(atoms, lowering: str) -> str:
    """OpenCL C defining the ``fn_name`` function of each atom (one atom or an iterable), in the lowering
    "native" (the builtin) or "portable" (ordinary arithmetic and sub-group broadcasts)."""
    if lowering not in LOWERINGS:
        raise ValueError(f"lowering must be one of {LOWERINGS}, not {lowering!r}")
    atoms = [atoms] if isinstance(atoms, MmaAtom) else list(atoms)
    from xegemm.render import environment  # noqa: PLC0415  (render imports the atom model, not vice versa)

    macro = environment().get_template(f"mma/{lowering}.cl.j2").module.define
    return "\n".join(str(macro(atom)) for atom in atoms)


# ---------------------------------------------------------------------------------------------------
# Values: rounding, bit encodings, register images, reference and tolerance


def round_to(code: str, values) -> np.ndarray:
    """``values`` rounded to element type ``code`` as DPAS reads them (float64 for floats, int64 for ints).

    bf16 and f16: round to nearest even; tf32: the low 13 mantissa bits cleared (what the portable lowering
    does; xe_atoms.md does not say how hardware treats them); ints: must already be in range.
    """
    t = ELEMENT_TYPES[code]
    v = np.asarray(values)
    if t.kind == "int":
        lo, hi = (-(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1) if t.signed else (0, (1 << t.bits) - 1)
        iv = v.astype(np.int64)
        if np.any(iv != v) or np.any(iv < lo) or np.any(iv > hi):
            raise ValueError(f"values do not fit {code} ({lo}..{hi})")
        return iv
    if code == "F16":
        return v.astype(np.float16).astype(np.float64)
    bits = v.astype(np.float32).view(np.uint32)
    if code == "BF16":
        bits = _f32_bits_to_bf16(bits).astype(np.uint32) << 16
    elif code == "TF32":
        bits = bits & np.uint32(0xFFFFE000)
    return bits.view(np.float32).astype(np.float64)


def _f32_bits_to_bf16(bits: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even of f32 bit patterns to bf16 bit patterns (NaN kept quiet)."""
    bits = bits.astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, ((bits >> 16) | 0x40) & 0xFFFF, rounded).astype(np.uint16)


def encode(code: str, values) -> np.ndarray:
    """The bit patterns (uint64, ``bits`` wide) of values of element type ``code`` (rounded first)."""
    t = ELEMENT_TYPES[code]
    v = round_to(code, values)
    if t.kind == "int":
        return (v & ((1 << t.bits) - 1)).astype(np.uint64)
    if code == "F16":
        return v.astype(np.float16).view(np.uint16).astype(np.uint64)
    f32 = v.astype(np.float32).view(np.uint32).astype(np.uint64)
    return f32 >> 16 if code == "BF16" else f32


def decode(code: str, bits) -> np.ndarray:
    """Values (float64 or int64) of bit patterns of element type ``code``."""
    t = ELEMENT_TYPES[code]
    b = np.asarray(bits).astype(np.uint64) & np.uint64((1 << t.bits) - 1)
    if t.kind == "int":
        v = b.astype(np.int64)
        return np.where(v >= (1 << (t.bits - 1)), v - (1 << t.bits), v) if t.signed else v
    if code == "F16":
        return b.astype(np.uint16).view(np.float16).astype(np.float64)
    f32 = (b << np.uint64(16) if code == "BF16" else b).astype(np.uint32)
    return f32.view(np.float32).astype(np.float64)


def pack_operand(atom: MmaAtom, operand: str, matrix) -> np.ndarray:
    """Per-lane register images (uint8, lanes x register_bytes) of a matrix, laid out by the lane map;
    padding slots are zero.  Sub-byte elements are packed little-endian (element 0 in the low nibble)."""
    op = _operand(operand)
    t = atom.element(op)
    matrix = np.asarray(matrix)
    if matrix.shape != atom.operand_shape(op):
        raise ValueError(f"operand {op} of {atom.name} is {atom.operand_shape(op)}, not {matrix.shape}")
    lm = atom.lane_map(op)
    rows, cols, valid = _index_arrays(lm)
    elems = np.where(valid, encode(t.code, matrix)[rows, cols], 0).astype(np.uint64)
    if t.bits == 4:
        packed = (elems[:, 0::2] | (elems[:, 1::2] << np.uint64(4))).astype(np.uint8)
    else:
        packed = elems.astype(f"<u{t.bits // 8}").view(np.uint8).reshape(lm.lanes, -1)
    assert packed.shape[1] == atom.register_bytes(op), (atom.name, op)
    return np.ascontiguousarray(packed)


def unpack_operand(atom: MmaAtom, operand: str, image) -> np.ndarray:
    """The matrix (float64 or int64) held by per-lane register images (lanes x register_bytes bytes)."""
    op = _operand(operand)
    t = atom.element(op)
    lm = atom.lane_map(op)
    raw = np.ascontiguousarray(np.asarray(image, dtype=np.uint8).reshape(lm.lanes, atom.register_bytes(op)))
    if t.bits == 4:
        elems = np.empty((lm.lanes, raw.shape[1] * 2), np.uint64)
        elems[:, 0::2], elems[:, 1::2] = raw & 0xF, raw >> 4
    else:
        elems = raw.view(f"<u{t.bits // 8}").astype(np.uint64)
    rows, cols, valid = _index_arrays(lm)
    out = np.zeros(atom.operand_shape(op), np.int64 if t.kind == "int" else np.float64)
    out[rows[valid], cols[valid]] = decode(t.code, elems[valid])
    return out


def _index_arrays(lm: LaneMap):
    rows = np.array([[c[0] if c else 0 for c in lane] for lane in lm.map], np.int64)
    cols = np.array([[c[1] if c else 0 for c in lane] for lane in lm.map], np.int64)
    valid = np.array([[c is not None for c in lane] for lane in lm.map], bool)
    return rows, cols, valid


def numpy_reference(atom: MmaAtom, a, b, c) -> np.ndarray:
    """D = A*B + C for a (m x k), b (k x n), c (m x n).

    Integer atoms: exact in int64, then wrapped to int32 (DPAS without saturation).  Float atoms: the inputs
    rounded to their types (:func:`round_to`), the product summed in float64, then rounded to D's type
    (f32; bf16 by round-to-nearest-even, returned as float64 values; f16).  Returns float64 or int64.
    """
    ra, rb, rc = round_to(atom.a, a), round_to(atom.b, b), round_to(atom.c, c)
    if atom.is_integer:
        d = ra @ rb + rc
        return d.astype(np.int32).astype(np.int64)   # two's-complement wrap, as the int32 accumulator
    return round_to(atom.d, ra @ rb + rc)


UNIT_ROUNDOFF = {"F32": 2.0 ** -24, "BF16": 2.0 ** -8, "F16": 2.0 ** -11}


def tolerance(atom: MmaAtom) -> float:
    """The relative error bound t of a float atom's result: |D - reference| <= t * (|A| |B| + |C|) elementwise.

    t = 2 (K + 1) u32 + 2 u_D.  The products of bf16, f16 and tf32 inputs are exact in f32 (at most 22
    significant bits; inputs whose products under- or overflow f32 are outside this bound), so the only errors are (a) summing K products and C in f32 in some order: at most
    gamma_K ~ K u32 times the sum of magnitudes (Higham, Accuracy and Stability, thm 3.1), with one extra term
    of slack and doubled to admit truncating (round-toward-zero) adds, which the facts do not rule out for
    hardware DPAS; and (b) for a bf16/f16 accumulator, the result's rounding: the device and the reference
    each round to nearest (u_D), so they may land one ulp (2 u_D) apart.  Integer atoms are exact: 0.
    """
    if atom.is_integer:
        return 0.0
    return 2 * (atom.k + 1) * UNIT_ROUNDOFF["F32"] + (2 * UNIT_ROUNDOFF[atom.d] if atom.d != "F32" else 0.0)


def error_bound(atom: MmaAtom, a, b, c) -> np.ndarray:
    """The elementwise absolute bound tolerance(atom) * (|A| |B| + |C|) on the rounded inputs."""
    ra, rb, rc = round_to(atom.a, a), round_to(atom.b, b), round_to(atom.c, c)
    return tolerance(atom) * (np.abs(ra) @ np.abs(rb) + np.abs(rc))
