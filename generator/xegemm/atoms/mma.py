"""The DPAS (MMA) atom model: names, legality, per-work-item register types and lane maps, and references.

One DPAS computes D(M x N) = A(M x K) * B(K x N) + C for one sub-group.  An atom is named like sycl-tla's
legacy atoms, ``XE_<M>x<N>x<K>_<D><A><B><C>_TT`` (e.g. ``XE_8x16x16_F32BF16BF16F32_TT``).

Sources (abbreviations as in docs/atoms.md, Sources):
- OCLMMA = KhronosGroup/OpenCL-Docs extensions/cl_intel_subgroup_matrix_multiply_accumulate.asciidoc
- OCLTF32 = KhronosGroup/OpenCL-Docs extensions/cl_intel_subgroup_matrix_multiply_accumulate_tf32.asciidoc
- TLA:mma = intel/sycl-tla include/cute/arch/mma_xe.hpp;
  TLA:mmatraits/legacy = intel/sycl-tla include/cute/atom/mma_traits_xe_legacy.hpp
- SPV2D = KhronosGroup/SPIRV-Registry extensions/INTEL/SPV_INTEL_2d_block_io.asciidoc (VNNI: lower row in lower bits)
- SPVMMA = KhronosGroup/SPIRV-Registry extensions/INTEL/SPV_INTEL_subgroup_matrix_multiply_accumulate.asciidoc
- SPVJM = SPV_INTEL_joint_matrix (docs/atoms.md, Sources): signedness pairs SU/US/UU, PackedInt4
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
from xegemm.library.dtypes import BY_CODE, CODE_PATTERN, DTYPES, DType, by_code, sizeof_ctype, vector_ctype
from xegemm.library.targets import dpas_widths, names_at, targets_at
from xegemm.errors import XegemmError


class MmaAtomError(XegemmError, ValueError):
    """An MMA atom name or parameter set breaks a DPAS rule; the message names the rule and its source."""


# ---------------------------------------------------------------------------------------------------
# Element types: the registry in xegemm.library.dtypes (DType.code is the code in atom names)

# Accumulator types per DPAS input type, by atom-name code (from the dtype registry's ``accumulators``).
ACCUMULATORS: dict[str, tuple[str, ...]] = {
    t.code: tuple(DTYPES[acc].code for acc in t.accumulators) for t in BY_CODE.values() if t.accumulators}

# Every (A, B, accumulator) combination, in enumeration order: a float input with itself; integers of one width
# in all four signedness pairs SS, SU, US, UU (SPVJM OpJointMatrix{SU,US,UU}MadINTEL; OCLMMA i8/u8 x i8/u8 and
# i4/u4 x i4/u4 builtins).
def _type_combinations():
    for a, accumulators in ACCUMULATORS.items():
        ta = BY_CODE[a]
        partners = [b for b in ACCUMULATORS if BY_CODE[b].is_int and BY_CODE[b].bits == ta.bits] if ta.is_int else [a]
        for b in partners:
            for acc in accumulators:
                yield a, b, acc


TYPE_COMBINATIONS: tuple[tuple[str, str, str], ...] = tuple(_type_combinations())

# M values for which OpenCL has a builtin (OCLMMA, OCLTF32: "M = 1, 2, 4, 8"); the hardware takes 1..8.
BUILTIN_M = (1, 2, 4, 8)

_NAME_RE = re.compile(rf"XE_(\d+)x(\d+)x(\d+)_({CODE_PATTERN})({CODE_PATTERN})({CODE_PATTERN})({CODE_PATTERN})_TT")


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

    # B elements along K per element of B's storage: 1 for every DPAS atom (a dequantized GPTQ B's view,
    # xegemm.plan.dequant.StoredB, holds several K per 32-bit word)
    k_per_element = 1

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
                f"from {', '.join(BY_CODE)} (e.g. XE_8x16x16_F32BF16BF16F32_TT; sycl-tla legacy naming, "
                "docs/atoms.md §3.2)")
        m, n, k, d, a, b, c = match.groups()
        return cls(int(m), int(n), int(k), d, a, b, c)

    @classmethod
    def of(cls, a: str, b: str, acc: str, m: int = 8, n: int = 16) -> "MmaAtom":
        """The atom for input types a, b and accumulator acc (C = D), with K derived from the types."""
        for code in (a, b, acc):
            if code not in BY_CODE:
                raise MmaAtomError(f"unknown element type code {code!r}: expected one of {', '.join(BY_CODE)}")
        k = 256 // max(BY_CODE[a].bits, BY_CODE[b].bits)
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
    def a_type(self) -> DType:
        return BY_CODE[self.a]

    @property
    def b_type(self) -> DType:
        return BY_CODE[self.b]

    @property
    def c_type(self) -> DType:
        return BY_CODE[self.c]

    @property
    def d_type(self) -> DType:
        return BY_CODE[self.d]

    @property
    def simd(self) -> int:
        """The sub-group size the atom runs at (= N)."""
        return self.n

    @property
    def targets(self) -> tuple[str, ...]:
        """The targets whose DPAS has this atom: ("pvc", "bmg") for N = 16, ("dg2",) for N = 8."""
        return names_at(self.n)

    @property
    def ops_per_channel(self) -> int:
        """A/B elements per 32-bit channel (P = 32 / bits; K = 8 * P, systolic depth 8: docs/atoms.md §3.1)."""
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

    # Per-work-item OpenCL C types (docs/atoms.md §3.4 from OCLMMA / OCLTF32):
    @property
    def a_ctype(self) -> str:
        """SIMD16: short{M} (ushort{M} for unsigned ints), tf32 float/float/float2/float4 (M = 1/2/4/8);
        SIMD8: int{M} (uint{M} for unsigned ints): 16 resp. 32 bits of each row per lane."""
        if self.a == "TF32":
            return vector_ctype("float", max(1, self.register_m // 2))
        unsigned = self.is_integer and not self.a_type.signed
        base = ("ushort" if unsigned else "short") if self.n == 16 else ("uint" if unsigned else "int")
        return vector_ctype(base, self.register_m)

    @property
    def b_ctype(self) -> str:
        """float8 (tf32), uint8 (unsigned ints), int8 otherwise: 8 x 32 bits of this lane's column."""
        if self.b == "TF32":
            return "float8"
        return "uint8" if self.is_integer and not self.b_type.signed else "int8"

    @property
    def c_ctype(self) -> str:
        """The type of C and of D: float{M}, int{M}, short{M} (bf16 bits) or half{M}."""
        return vector_ctype(self.c_type.acc_ctype, self.register_m)

    d_ctype = c_ctype

    def ctype(self, operand: str) -> str:
        """The per-work-item OpenCL C type of operand "a", "b", "c" or "d"."""
        return {"a": self.a_ctype, "b": self.b_ctype, "c": self.c_ctype, "d": self.c_ctype}[_operand(operand)]

    def element(self, operand: str) -> DType:
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
        """The operand flags of OpSubgroupMatrixMultiplyAccumulateINTEL (SPVMMA; docs/atoms.md §3.3)."""
        flags = 0
        for t, operand, signed in ((self.a_type, 0, 0x1), (self.b_type, 1, 0x2)):   # MatrixA/BSignedComponents
            flags |= t.spirv_flags[operand]
            if t.is_int and t.signed:
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
        if code not in BY_CODE:
            fail(f"unknown element type code {code!r} (expected one of {', '.join(BY_CODE)})")
    ta, tb = BY_CODE[atom.a], BY_CODE[atom.b]
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
             f"{' or '.join(ACCUMULATORS[atom.a])} (OCLMMA, OCLTF32; docs/atoms.md §3.1)")
    if not 1 <= atom.m <= 8:
        fail(f"M={atom.m}: M is the DPAS repeat count, 1..8 (XeTLA rcount_max=8; TLA:doc/rearch)")
    if atom.n not in dpas_widths():
        widths = " or ".join(f"{w} ({', '.join(n.upper() for n in names_at(w))})" for w in dpas_widths())
        fail(f"N={atom.n}: N is the DPAS execution size = sub-group size, {widths} (OCLMMA; "
             "XeTLA dpas_attr_t::n_in_elem)")
    want_k = 256 // max(ta.bits, tb.bits)
    if atom.k != want_k:
        fail(f"K={atom.k}: K = 8 (systolic depth) * 32 / bits = {want_k} for {atom.a} x {atom.b} "
             "(tf32 8, f16/bf16 16, s8/u8 32, s4/u4 64; TLA:mma, XeTLA)")
    here = targets_at(atom.n)
    here_names = ", ".join(t.name.upper() for t in here)
    if not any(ta.name in t.dpas_inputs for t in here):
        elsewhere = [w for w in dpas_widths() if any(ta.name in t.dpas_inputs for t in targets_at(w))]
        fail(f"N={atom.n} with {ta.name}: {ta.name} DPAS exists only at "
             + " or ".join(f"SIMD{w} ({', '.join(n.upper() for n in names_at(w))})" for w in elsewhere)
             + f", not on {here_names} (OCLMMA, OCLTF32)")
    if atom.c in ("BF16", "F16") and not any(t.half_accumulators for t in here):
        fail(f"N={atom.n} with a {atom.c.lower()} accumulator: {here_names} (SIMD{atom.n}) DPAS has only float "
             "accumulators for bf16/f16, OCLMMA")


def enumerate_mma_atoms(n: int | None = None) -> Iterator[MmaAtom]:
    """Every legal atom: all type combinations x M = 1..8 x N = 16 and 8 (optionally one N only)."""
    for width in dpas_widths() if n is None else (n,):
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
      contribute the even rows ... the remaining work-items the odd rows" (OCLTF32; docs/atoms.md §4 from
      TLA:mmatraits/legacy ``Layout<Shape<Shape<_8,_2>,_4>,Stride<Stride<_8,_1>,_2>>``).
    - SIMD16 otherwise: each lane holds 16 bits of every row: component r = row r, lane l holds
      k = l*q .. l*q+q-1 with q = 16/bits, lower k in lower bits (OCLMMA "16 bits per lane per row";
      docs/atoms.md §4: bf16 ``A[m=r][k=l]``, s8 ``{A[r][2l], A[r][2l+1]}``).
    - SIMD8 (DG2): 32 bits of every row per lane, q = 32/bits (OCLMMA int{M} A; docs/atoms.md §4 "DG2").
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
    docs/atoms.md §4: bf16 ``low16 = B[2r][l], high16 = B[2r+1][l]``, s8 ``B[4i..4i+3][l]``, tf32 ``B[k][l]``,
    DG2 ``{B[2i][n], B[2i+1][n]}``).  In register order that is simply k = 0..K-1."""
    return [[(kk, lane) for kk in range(atom.k)] for lane in range(atom.n)]


def _c_lanes(atom: MmaAtom) -> list[list]:
    """C and D (m, n) per lane: lane = column n, component r = row r (OCLMMA "each work item contributes one
    column" of the accumulator; docs/atoms.md §4 ``C[m=r][n=l]``); rows >= M are padding."""
    return [[(r, lane) if r < atom.m else None for r in range(atom.register_m)] for lane in range(atom.n)]


@functools.lru_cache(maxsize=None)
def _lane_map(atom: MmaAtom, operand: str) -> LaneMap:
    rows = {"a": _a_lanes, "b": _b_lanes, "c": _c_lanes, "d": _c_lanes}[operand](atom)
    return LaneMap.from_lists(rows)


# ---------------------------------------------------------------------------------------------------
# Values: rounding, bit encodings, register images, reference and tolerance


def round_to(code: str, values) -> np.ndarray:
    """``values`` rounded to element type ``code`` as DPAS reads them (xegemm.library.dtypes.DType.round)."""
    return by_code(code).round(values)


def encode(code: str, values) -> np.ndarray:
    """The bit patterns (uint64) of values of element type ``code``, rounded first (DType.encode)."""
    return by_code(code).encode(values)


def decode(code: str, bits) -> np.ndarray:
    """Values (float64 or int64) of bit patterns of element type ``code`` (DType.decode)."""
    return by_code(code).decode(bits)


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


def tolerance(atom: MmaAtom) -> float:
    """The relative error bound t of a float atom's result: |D - reference| <= t * (|A| |B| + |C|) elementwise.

    t = 2 (K + 1) u32 + 2 u_D.  The products of bf16, f16 and tf32 inputs are exact in f32 (at most 22
    significant bits; inputs whose products under- or overflow f32 are outside this bound), so the only errors are (a) summing K products and C in f32 in some order: at most
    gamma_K ~ K u32 times the sum of magnitudes (Higham, Accuracy and Stability, thm 3.1), with one extra term
    of slack and doubled to admit truncating (round-toward-zero) adds, which the documents (docs/atoms.md) do not rule out for
    hardware DPAS; and (b) for a bf16/f16 accumulator, the result's rounding: the device and the reference
    each round to nearest (u_D), so they may land one ulp (2 u_D) apart.  Integer atoms are exact: 0.
    """
    if atom.is_integer:
        return 0.0
    u32 = by_code("F32").unit_roundoff
    return 2 * (atom.k + 1) * u32 + (2 * atom.d_type.unit_roundoff if atom.d != "F32" else 0.0)


def error_bound(atom: MmaAtom, a, b, c) -> np.ndarray:
    """The elementwise absolute bound tolerance(atom) * (|A| |B| + |C|) on the rounded inputs."""
    ra, rb, rc = round_to(atom.a, a), round_to(atom.b, b), round_to(atom.c, c)
    return tolerance(atom) * (np.abs(ra) @ np.abs(rb) + np.abs(rc))
