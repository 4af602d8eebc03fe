"""Element types: one table of sizes and atom-name codes for the config, the planner, the verifier and the
renderer (OpenCL C scalar and vector type names included)."""

from __future__ import annotations

# config dtype -> bits per element (tf32 is stored as a 32-bit float)
DTYPE_BITS = {"f16": 16, "bf16": 16, "tf32": 32, "f32": 32, "f64": 64, "s8": 8, "u8": 8, "s4": 4, "u4": 4,
              "s32": 32}
# config dtype -> the type code of DPAS atom names (XE_8x16x16_F32BF16BF16F32_TT)
DTYPE_CODE = {"bf16": "BF16", "f16": "F16", "tf32": "TF32", "f32": "F32", "s8": "S8", "u8": "U8", "s4": "S4",
              "u4": "U4", "s32": "S32"}

CTYPE_BITS = {"char": 8, "uchar": 8, "short": 16, "ushort": 16, "half": 16, "int": 32, "uint": 32, "float": 32,
              "long": 64, "ulong": 64}
UNSIGNED_CTYPE = {8: "uchar", 16: "ushort", 32: "uint", 64: "ulong"}


def dtype_bytes(dtype: str) -> float:
    """Bytes per element (0.5 for 4-bit types)."""
    return DTYPE_BITS[dtype] / 8


def ctype_shape(ctype: str) -> tuple[int, int]:
    """(component bits, component count) of an OpenCL C scalar or vector type name, e.g. ``short8`` -> (16, 8)."""
    base = ctype.rstrip("0123456789")
    n = ctype[len(base):]
    return CTYPE_BITS[base], int(n) if n else 1
