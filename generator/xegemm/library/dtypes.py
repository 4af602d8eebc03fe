"""The data-type registry: every element type xegemm knows, in one table that everything else reads.

One :class:`DType` per type holds its config spelling and aliases, its code in atom names
(``XE_8x16x16_F32BF16BF16F32_TT``), storage bits, kind and signedness, the tag of the OpenCL DPAS builtins
(OCLMMA: ``intel_sub_group_bf16_bf16_matrix_mad_k16``), its unit roundoff, and how values are rounded to it,
encoded to bits and decoded back.  The config reader, the atom models, the planner, the verifier, the
lowerings and the templates all ask this module; adding an element type is one entry in :data:`DTYPES`
(plus, for a DPAS input, its (A, B, accumulator) combination in :mod:`xegemm.library.targets`).

The OpenCL C scalar vocabulary (sizes of ``uchar``/``short``/``float``..., the unsigned container of a
width, vector spellings) lives here too: it is how element bits are spelled in generated code.

Rounding rules: bf16 and f16 round to nearest even (bf16 keeps NaNs quiet); tf32 clears the low 13 mantissa
bits of an f32 (what the portable lowering does; the documents of docs/atoms.md do not say how hardware treats them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from xegemm.errors import XegemmError


class UnknownDTypeError(XegemmError, KeyError):
    """A data-type name or code that the registry does not know."""

    def __str__(self) -> str:        # KeyError would quote the message
        return str(self.args[0])


@dataclass(frozen=True)
class DType:
    """One element type: names, storage, arithmetic kind and value conversions."""

    name: str                       # config spelling: "bf16"
    code: str | None                # atom-name code: "BF16" (None: no atom takes it)
    bits: int                       # storage bits per element (tf32 is stored as a 32-bit float)
    kind: str                       # "float" or "int"
    signed: bool
    unit_roundoff: float | None = None   # floats: 2^-p, p = significand bits incl. the implicit one (e8m0: None)
    builtin_tag: str | None = None  # tag in OCLMMA builtin names; None for accumulator-only types
    aliases: tuple[str, ...] = field(default=())
    accumulators: tuple[str, ...] = ()  # a DPAS input: the types it accumulates into (names), else ()
    acc_ctype: str | None = None    # a DPAS accumulator: the OpenCL C scalar of C and D in the builtins (OCLMMA)
    spirv_flags: tuple[int, int] = (0, 0)   # SPVMMA operand flags naming it as (A, B) (docs/atoms.md §3.3)

    @property
    def bytes(self) -> float:
        """Bytes per element (0.5 for 4-bit types)."""
        return self.bits / 8

    @property
    def is_int(self) -> bool:
        return self.kind == "int"

    @property
    def storage_ctype(self) -> str:
        """The unsigned OpenCL C scalar one element travels in (4-bit elements travel in a uchar)."""
        return UNSIGNED_CTYPE[max(8, self.bits)]

    @property
    def c(self) -> "CSpelling":
        """How OpenCL C spells this type's conversions (:data:`C_SPELLINGS`)."""
        return C_SPELLINGS[self.name]

    @property
    def value_range(self) -> tuple[int, int]:
        """Integers: (lowest, highest) representable value."""
        if not self.is_int:
            raise ValueError(f"{self.name} is not an integer type")
        return (-(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1) if self.signed else (0, (1 << self.bits) - 1)

    # -- values ---------------------------------------------------------------------------------------
    def round(self, values) -> np.ndarray:
        """``values`` rounded to this type as the hardware reads them (float64 for floats, int64 for ints).

        Integers must already be in range (ValueError otherwise)."""
        v = np.asarray(values)
        if self.is_int:
            lo, hi = self.value_range
            iv = v.astype(np.int64)
            if np.any(iv != v) or np.any(iv < lo) or np.any(iv > hi):
                raise ValueError(f"values do not fit {self.code or self.name} ({lo}..{hi})")
            return iv
        if self.name == "f16":
            return v.astype(np.float16).astype(np.float64)
        if self.name == "f64":
            return v.astype(np.float64)
        if self.name in ML_DTYPES:    # through f32, as the device's inputs are made: ml_dtypes rounds to nearest even
            return v.astype(np.float32).astype(ML_DTYPES[self.name]).astype(np.float64)
        bits = v.astype(np.float32).view(np.uint32)
        if self.name == "tf32":
            bits = bits & np.uint32(0xFFFFE000)
        return bits.view(np.float32).astype(np.float64)

    def encode(self, values) -> np.ndarray:
        """The bit patterns (uint64, ``bits`` wide) of values of this type (rounded first)."""
        v = self.round(values)
        if self.is_int:
            return (v & ((1 << self.bits) - 1)).astype(np.uint64)
        if self.name == "f16":
            return v.astype(np.float16).view(np.uint16).astype(np.uint64)
        if self.name == "f64":
            return v.view(np.uint64)
        if self.name in ML_DTYPES:
            return v.astype(np.float32).astype(ML_DTYPES[self.name]).view(_storage(self.bits)).astype(np.uint64)
        return v.astype(np.float32).view(np.uint32).astype(np.uint64)

    def decode(self, bits) -> np.ndarray:
        """Values (float64 or int64) of bit patterns of this type."""
        b = np.asarray(bits).astype(np.uint64) & np.uint64((1 << self.bits) - 1)
        if self.is_int:
            v = b.astype(np.int64)
            return np.where(v >= (1 << (self.bits - 1)), v - (1 << self.bits), v) if self.signed else v
        if self.name == "f16":
            return b.astype(np.uint16).view(np.float16).astype(np.float64)
        if self.name == "f64":
            return b.view(np.float64)
        if self.name in ML_DTYPES:
            return b.astype(_storage(self.bits)).view(ML_DTYPES[self.name]).astype(np.float64)
        return b.astype(np.uint32).view(np.float32).astype(np.float64)


def _storage(bits: int) -> str:
    """The unsigned numpy type an ml_dtypes element of ``bits`` occupies (a 4-bit float takes one byte)."""
    return f"u{max(bits // 8, 1)}"


# ---- host arrays --------------------------------------------------------------------------------------------
# Element types numpy lacks come from ml_dtypes (https://github.com/jax-ml/ml_dtypes): its bfloat16 rounds to
# nearest even and keeps NaNs quiet, as the device's conversions do.  The storage-only floats are OCP's 8- and
# 4-bit formats as ml_dtypes implements them (OCP Microscaling Formats (MX) v1.0 and OCP 8-bit Floating Point
# v1.0, https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf): e4m3 and e2m1
# have no infinities ("fn"), e8m0 is an unsigned exponent ("fnu").  All are rounded from f32; the 4-bit one is
# stored one per byte here (packing two per byte is xegemm.quant's job).  The other types are numpy's own.
ML_DTYPES = {"bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2,
             "e2m1": ml_dtypes.float4_e2m1fn, "e8m0": ml_dtypes.float8_e8m0fnu}
HOST_DTYPES = {"f16": np.dtype(np.float16), "tf32": np.dtype(np.float32), "f32": np.dtype(np.float32),
               "f64": np.dtype(np.float64), "s8": np.dtype(np.int8), "u8": np.dtype(np.uint8),
               "s4": np.dtype(ml_dtypes.int4), "u4": np.dtype(ml_dtypes.uint4), "s32": np.dtype(np.int32),
               **{name: np.dtype(t) for name, t in ML_DTYPES.items()}}


def host_dtype(name: str) -> np.dtype:
    """The numpy dtype of host arrays of a registry type, one element per numpy item (ml_dtypes for bf16, the
    8- and 4-bit floats and the 4-bit integers; tf32 values travel as float32)."""
    return HOST_DTYPES[dtype(name).name]


# The registry, in the order configs list them.  Unit roundoffs: Higham, "Accuracy and Stability of
# Numerical Algorithms", table 2.1 (f16, f32, f64); bf16 has 8 significand bits (2^-8); tf32 has f16's 11.
# Accumulators (docs/atoms.md §3.1; OCLMMA; OCLTF32): bf16/f16 -> f32, or an accumulator of the input
# type (SIMD16 only: xegemm.library.targets); tf32 -> f32; 8- and 4-bit integers -> s32.
DTYPES: dict[str, DType] = {t.name: t for t in (
    DType("f16", "F16", 16, "float", True, 2.0 ** -11, "f16", ("half", "fp16", "float16"), ("f32", "f16"),
          "half", (0x400, 0x800)),
    DType("bf16", "BF16", 16, "float", True, 2.0 ** -8, "bf16", ("bfloat16",), ("f32", "bf16"),
          "short", (0x1000, 0x2000)),
    DType("tf32", "TF32", 32, "float", True, 2.0 ** -11, "tf32", (), ("f32",), None, (0x100, 0x200)),
    DType("f32", "F32", 32, "float", True, 2.0 ** -24, None, ("float", "fp32", "float32"), (), "float"),
    DType("f64", None, 64, "float", True, 2.0 ** -53, None, ("double", "fp64", "float64")),
    DType("s8", "S8", 8, "int", True, None, "i8", ("int8", "i8"), ("s32",), None, (0x10, 0x20)),
    DType("u8", "U8", 8, "int", False, None, "u8", ("uint8",), ("s32",), None, (0x10, 0x20)),
    DType("s4", "S4", 4, "int", True, None, "i4", ("int4", "i4"), ("s32",), None, (0x40, 0x80)),
    DType("u4", "U4", 4, "int", False, None, "u4", ("uint4",), ("s32",), None, (0x40, 0x80)),
    DType("s32", "S32", 32, "int", True, None, None, ("int32", "i32"), (), "int"),
    # storage-only floats of quantized operands (no Xe DPAS takes them: xegemm.quant converts them to f16/bf16)
    DType("e4m3", None, 8, "float", True, 2.0 ** -4, None, ("fp8_e4m3", "float8_e4m3fn")),
    DType("e5m2", None, 8, "float", True, 2.0 ** -3, None, ("fp8_e5m2", "float8_e5m2")),
    DType("e2m1", None, 4, "float", True, 2.0 ** -2, None, ("fp4", "fp4_e2m1", "float4_e2m1fn")),
    DType("e8m0", None, 8, "float", False, None, None, ("float8_e8m0fnu",)),   # powers of two only: MX scales
)}
BY_CODE: dict[str, DType] = {t.code: t for t in DTYPES.values() if t.code}
ALIASES: dict[str, str] = {alias: t.name for t in DTYPES.values() for alias in t.aliases}

CODE_PATTERN = "|".join(sorted(BY_CODE, key=lambda c: (-len(c), c)))   # longest first, for regexes


def dtype(name: str) -> DType:
    """The type called ``name`` (a config spelling or an alias)."""
    try:
        return DTYPES[ALIASES.get(name, name)]
    except KeyError:
        raise UnknownDTypeError(f"unknown data type {name!r}; known: {', '.join(DTYPES)}") from None


def by_code(code: str) -> DType:
    """The type whose atom-name code is ``code`` (``BF16``)."""
    try:
        return BY_CODE[code]
    except KeyError:
        raise UnknownDTypeError(f"unknown element type code {code!r}: expected one of {', '.join(BY_CODE)}") \
            from None


# ---- OpenCL C spellings of each type's conversions ---------------------------------------------------------

@dataclass(frozen=True)
class CSpelling:
    """The OpenCL C of one element type's conversions, each a ``str.format`` template (None: not needed for the
    type).  ``{x}`` is the operand; ``{n}`` the vector width of a vector form ('' for a scalar); ``{mask}``
    what a decode must mask off (`` & 0xffffu`` when a 16-bit element sits in wider bits, else '').

    As C and D of the epilogue (xegemm.epilogues.outputs): ``load`` (storage bits -> float), ``store`` (float ->
    storage bits, rounded to nearest even, integers saturating), ``store_int`` (int -> storage bits,
    saturating: the exact integer path).  As a DPAS input in the portable lowering (xegemm.lowering.portable):
    ``decode`` (bits of one element shifted to the bottom of a uint -> float, or int for integers),
    ``decode_vector`` (the same on a uint vector, integers as uint), ``decode_low`` / ``decode_high`` (the
    element in the low / high half of a 32-bit word, unshifted: bf16 needs no mask there).  As a DPAS
    accumulator: ``register_to_float`` (one component of the accumulator register -> float),
    ``workspace_load`` (element ``w[{x}]`` of the split-K workspace -> float), ``register_to_acc`` (the
    register vector -> the portable DPAS's float or uint vector), ``acc_to_register`` (a float or uint row ->
    the register's component), ``acc_to_register_vector`` (a whole vector at once), ``round_acc`` (a float
    rounded to the type and back: what each DPAS does to a half accumulator), ``rounded_to_register`` (an
    already rounded float -> the register's component).
    """

    load: str | None = None
    store: str | None = None
    store_int: str | None = None
    decode: str | None = None
    decode_vector: str | None = None
    decode_low: str | None = None
    decode_high: str | None = None
    register_to_float: str | None = None
    workspace_load: str | None = None
    register_to_acc: str | None = None
    acc_to_register: str | None = None
    acc_to_register_vector: str | None = None
    round_acc: str | None = None
    rounded_to_register: str | None = None


# bf16 is the high half of an f32 (as_float(bits << 16)); f16 goes through half (xe_f16_to_f32 / xe_f32_to_*_rne
# are the kernels' own helpers, templates/gemm.cl.j2); integers as uint wrap like the DPAS's int32 accumulator
C_SPELLINGS: dict[str, CSpelling] = {
    "f32": CSpelling(load="as_float((uint){x})", store="as_uint({x})",
                     register_to_float="{x}", workspace_load="as_float(w[{x}])", register_to_acc="{x}",
                     acc_to_register="{x}", acc_to_register_vector="{x}", rounded_to_register="{x}"),
    "bf16": CSpelling(load="as_float((uint){x} << 16)", store="xe_f32_to_bf16_rne({x})",
                      decode="as_float(({x} & 0xffffu) << 16)", decode_vector="as_float{n}(({x} & 0xffffu) << 16)",
                      decode_low="as_float{n}({x} << 16)", decode_high="as_float{n}({x} & 0xffff0000u)",
                      register_to_float="as_float((uint)(ushort){x} << 16)",
                      workspace_load="as_float((uint)w[{x}] << 16)",
                      register_to_acc="as_float{n}(convert_uint{n}(as_ushort{n}({x})) << 16)",
                      acc_to_register="as_short(xe_f32_to_bf16_rne({x}))",
                      round_acc="as_float((uint)xe_f32_to_bf16_rne({x}) << 16)",
                      rounded_to_register="as_short((ushort)(as_uint({x}) >> 16))"),
    "f16": CSpelling(load="xe_f16_to_f32({x})", store="xe_f32_to_f16_rne({x})",
                     decode="(float)as_half((ushort){x})",
                     decode_vector="convert_float{n}(as_half{n}(convert_ushort{n}({x}{mask})))",
                     register_to_float="(float){x}", workspace_load="vload_half({x}, (const global half*)w)",
                     register_to_acc="convert_float{n}({x})", acc_to_register="convert_half_rte({x})",
                     acc_to_register_vector="convert_half{n}_rte({x})", round_acc="(float)convert_half_rte({x})",
                     rounded_to_register="(half){x}"),
    "tf32": CSpelling(decode="as_float({x} & 0xffffe000u)", decode_vector="as_float{n}({x} & 0xffffe000u)"),
    "s32": CSpelling(load="(float)as_int((uint){x})", store="(uint)convert_int_sat_rte({x})", store_int="(uint){x}",
                     register_to_float="(float){x}", workspace_load="(float)as_int(w[{x}])",
                     register_to_acc="as_uint{n}({x})", acc_to_register="as_int({x})",
                     acc_to_register_vector="as_int{n}({x})", rounded_to_register="as_int({x})"),
    "s8": CSpelling(load="(float)(char){x}", store="(uchar)convert_char_sat_rte({x})",
                    store_int="(uchar)convert_char_sat({x})", decode="(int)as_char((uchar){x})",
                    decode_vector="as_uint{n}(convert_int{n}(as_char{n}(convert_uchar{n}({x} & 0xffu))))"),
    "u8": CSpelling(load="(float){x}", store="convert_uchar_sat_rte({x})", store_int="convert_uchar_sat({x})",
                    decode="(int)({x} & 0xffu)", decode_vector="{x} & 0xffu"),
    "s4": CSpelling(decode="(((int)({x} & 0xfu) ^ 8) - 8)", decode_vector="as_uint{n}((convert_int{n}({x} & 0xfu) ^ 8) - 8)"),
    "u4": CSpelling(decode="(int)({x} & 0xfu)", decode_vector="{x} & 0xfu"),
    # FP8 weights (a dequantized B, xegemm.lowering.dequant): the byte {x} (a uint of 8 meaningful bits) -> its
    # value, exactly: sign, then (1.m) 2^(e - bias) or, for e = 0, 0.m 2^(1 - bias), as an integer significand
    # scaled by ldexp (exact; no f32 subnormal arises).  OCP FP8 v1.0: e4m3 bias 7, its codes 0x7f and 0xff are NaN
    # (no infinity); e5m2 bias 15, exponent 31 is infinity (mantissa 0) or NaN, as ml_dtypes decodes them.
    "e4m3": CSpelling(decode="((({x} & 0x7fu) == 0x7fu) ? as_float(0x7fc00000u) : "
                             "(({x} & 0x80u) ? -1.0f : 1.0f) * ((({x} >> 3) & 15u) ? ldexp((float)(8u + ({x} & 7u)), "
                             "(int)(({x} >> 3) & 15u) - 10) : ldexp((float)({x} & 7u), -9)))"),
    "e5m2": CSpelling(decode="(((({x} >> 2) & 31u) == 31u) ? (({x} & 3u) ? as_float(0x7fc00000u) : "
                             "as_float(({x} & 0x80u) ? 0xff800000u : 0x7f800000u)) : "
                             "(({x} & 0x80u) ? -1.0f : 1.0f) * ((({x} >> 2) & 31u) ? ldexp((float)(4u + ({x} & 3u)), "
                             "(int)(({x} >> 2) & 31u) - 17) : ldexp((float)({x} & 3u), -16)))"),
    # MXFP4 values and scales (OCP MX v1.0, docs/quantization.md): e2m1 (bias 1) is sign, (2 + m) 2^(e - 2) or, for
    # e = 0, m / 2 (0, 0.5, 1, 1.5, 2, 3, 4, 6); e8m0 is 2^(byte - 127) exactly (the f32 bits byte << 23; byte 0 is
    # the f32 subnormal 2^-127), 0xff is NaN.
    "e2m1": CSpelling(decode="(({x} & 8u) ? -1.0f : 1.0f) * ((({x} >> 1) & 3u) ? ldexp((float)(2u + ({x} & 1u)), "
                             "(int)(({x} >> 1) & 3u) - 2) : 0.5f * (float)({x} & 1u))"),
    "e8m0": CSpelling(load="(({x}) == 0xffu ? as_float(0x7fc00000u) : ({x}) ? as_float((uint)({x}) << 23) "
                           ": as_float(0x00400000u))"),
    "f64": CSpelling(),
}


def c_spelling(type_name: str, column: str, x: str, n: int = 1, mask: str = "") -> str:
    """The C of ``column`` of :class:`CSpelling` for type ``type_name`` (a name, alias or atom code) applied to
    ``x`` (``n``: the vector width of a vector form)."""
    t = by_code(type_name) if type_name in BY_CODE else dtype(type_name)
    template = getattr(t.c, column)
    if template is None:
        raise UnknownDTypeError(f"OpenCL C has no {column} spelling of {t.name} here")
    return template.format(x=x, n=n if n > 1 else "", mask=mask)


# ---- OpenCL C spellings of element bits -------------------------------------------------------------------
CTYPE_BYTES = {"char": 1, "uchar": 1, "bool": 1, "short": 2, "ushort": 2, "half": 2, "int": 4, "uint": 4,
               "float": 4, "long": 8, "ulong": 8, "double": 8}
CTYPE_BITS = {name: 8 * size for name, size in CTYPE_BYTES.items() if name != "bool"}
UNSIGNED_CTYPE = {8: "uchar", 16: "ushort", 32: "uint", 64: "ulong"}
OPENCL_VECTOR_SIZES = (2, 3, 4, 8, 16)   # OpenCL C 6.1.2; wider vectors need a clang ext_vector typedef


def c_byte_offset(index: str, bits: int) -> str:
    """The C expression of the byte offset of element ``index`` in a row of ``bits``-bit elements (4-bit
    elements: two per byte, so element 2i + 1 lies in byte i)."""
    return f"(long){index} * {bits // 8}" if bits >= 8 else f"(long){index} / {8 // bits}"


def ctype_shape(ctype: str) -> tuple[int, int]:
    """(component bits, component count) of an OpenCL C scalar or vector type name, e.g. ``short8`` -> (16, 8)."""
    base = ctype.rstrip("0123456789")
    n = ctype[len(base):]
    return CTYPE_BITS[base], int(n) if n else 1


def sizeof_ctype(ctype: str) -> int:
    """``sizeof`` of an OpenCL C scalar or vector type name (3-component vectors are 4 wide, OpenCL C 6.1.5)."""
    bits, n = ctype_shape(ctype)
    return bits // 8 * (4 if n == 3 else n)


def vector_ctype(base: str, n: int) -> str:
    """The OpenCL C spelling of an n-component vector of ``base`` (the scalar itself for n = 1)."""
    return base if n == 1 else f"{base}{n}"
