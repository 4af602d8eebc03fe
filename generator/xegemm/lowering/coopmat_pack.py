"""The coopmat lowering's B packer: an OpenCL C kernel (templates/pack_b.cl.j2) run on the device before the
cooperative-matrix kernel, turning B as the caller stores it into the VNNI-packed matrix that kernel loads.

The cooperative-matrix kernel reads B in layout PackedINTEL (per batch ``[ceil(K/v)][N*v]`` elements,
``packed[r][v*c + i] = B[v*r + i][c]``, K padded with zero rows; v = 2 for 16-bit, 4 for 8-bit elements;
intel/llvm sycl_ext_intel_matrix.asciidoc, ext_intel_packed).  Users hold B row- or column-major, or quantized
as a checkpoint stores it.  One work-item per 32-bit word of the packed matrix reads the v elements of its column
and VNNI row, and for a quantized B dequantizes each into bf16 with the very C the other lowerings' k-steps use
(xegemm.lowering.dequant: ``xe_q_code``, ``xe_dequant_b``, the scale and zero loads): one rounding of
``(q - z) * s``, the values :func:`xegemm.quant.dequantize` computes.

:func:`xegemm.lowering.coopmat.pack_b` (with :func:`xegemm.lowering.coopmat.dequantized_b` for a quantized B) is
the same packing in numpy: the tests compare the two byte for byte.  A packer is built like any OpenCL C
program and launched by xegemm.runtime.b_packer.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from xegemm.library.dtypes import dtype
from xegemm.lowering.coopmat import TYPES, operand_type
from xegemm.lowering.dequant import AWQ_SLOT_C, dequant_helpers, scale_load, zero_load
from xegemm.lowering.templating import environment
from xegemm.quant.formats import FORMATS

TEMPLATE = "pack_b.cl.j2"
KERNEL = "xegemm_coopmat_pack_b"
A_TEMPLATE = "pack_a.cl.j2"
A_KERNEL = "xegemm_coopmat_dequant_a"
LOCAL = (16, 1, 1)          # one work-item per packed word; the global size rounds N up to it
ELEMENT_CTYPES = {8: "uchar", 16: "ushort"}


@dataclass(frozen=True)
class PackerSource:
    """What templates/pack_b.cl.j2 prints for one plan's B (see :func:`packer_source`)."""

    describe: str
    kernel: str
    v: int                   # K rows per 32-bit word
    bits: int                # bits of one packed element
    mask: str
    dequant: str = ""        # templates/dequant.cl.j2's functions for a quantized B
    compute: str = ""
    groups: bool = False     # scale rows along K are counted (xq_groups: nk scales of several K groups)
    k_group: int = 0
    group_row: str = "0"
    unit: str = ""           # the C of the 32 bits holding code (k, n)
    slot: str = "0"          # which code of them (lowest first)
    scale: str = ""
    zero: str = ""
    element_ctype: str = ""  # an unquantized B: its element's C type and index
    index: str = ""


def _stored_code(spec, k: str = "k", n: str = "n") -> tuple[str, str]:
    """(unit, slot) of code (k, n) of a quantized B as its format stores it (xegemm.quant.formats): GPTQ's int32
    words of 32/bits consecutive K of a column ([K*bits/32, N]), AWQ's of 8 interleaved columns ([K, N/8]), and the
    plain and mx formats' elements in B's layout (4-bit codes two per byte along a row, the low nibble first)."""
    bits = dtype(spec.weight).bits
    if spec.format == "gptq":
        per = 32 // bits
        return f"((const global uint*)B)[({k} / {per}) * N + {n}]", f"(uint)({k} % {per})"
    if spec.format == "awq":
        return f"((const global uint*)B)[{k} * (N / 8) + {n} / 8]", f"(uint)({AWQ_SLOT_C.format(n=n)})"
    row, col, cols = (k, n, "N") if spec.layout == "row" else (n, k, "K")
    if bits == 4:
        return f"(uint)B[(size_t){row} * ({cols} / 2) + {col} / 2]", f"(uint)({col} & 1)"
    return f"(uint)B[(size_t){row} * {cols} + {col}]", "0u"


def pack_factor(plan) -> int:
    """K rows per 32-bit word of the packed B: the VNNI factor of the type the kernel multiplies
    (xegemm.lowering.coopmat.TYPES: 2 for bf16, also a quantized B's; 4 for s8/u8)."""
    return TYPES[operand_type(plan)][2]


def packer_source(plan) -> PackerSource:
    """The packer of a coopmat plan's B: its stored element type and layout (or format) to VNNI-packed bf16, s8
    or u8."""
    config = plan.config
    if plan.quant:
        quant, spec = plan.quant, plan.quant.spec
        unit, slot = _stored_code(spec)
        k_group = spec.k_group or 0
        v = pack_factor(plan)
        return PackerSource(f"{spec.describe()} dequantized to {quant.compute}, VNNI-packed by {v}", KERNEL, v,
                            32 // v, hex((1 << (32 // v)) - 1), dequant_helpers(quant), quant.compute,
                            groups=spec.scale_layout == "nk" and bool(k_group), k_group=k_group,
                            group_row=f"k / {k_group}" if k_group else "0", unit=unit, slot=slot,
                            scale=scale_load(spec, "row", "n"),
                            zero=zero_load(quant, "row", "n") if spec.has_zero else "")
    v = pack_factor(plan)
    bits = 32 // v
    index = "(size_t)k * N + n" if config.layout.b == "row" else "(size_t)n * K + k"
    return PackerSource(f"{config.types.b} B ({config.layout.b}-major), VNNI-packed by {v}", KERNEL, v, bits,
                        hex((1 << bits) - 1), element_ctype=ELEMENT_CTYPES[bits], index=index)


def render_packer(plan) -> str:
    """The OpenCL C of a coopmat plan's B packer."""
    return environment().get_template(TEMPLATE).render(p=packer_source(plan))


def stored_bytes(plan, k: int, n: int) -> dict[str, int]:
    """Bytes per batch of B as stored (``B``) and, for a quantized B, of its scales and zero points (``S``, ``Z``;
    0 where it has none), as xegemm.quant.formats lays out its arrays."""
    if not plan.quant:
        return {"B": k * n * dtype(plan.config.types.b).bits // 8, "S": 0, "Z": 0}
    size = _array_bytes(plan.quant.spec, k, n)
    return {"B": size["qweight"], "S": size.get("scales", 0), "Z": size.get("zeros", size.get("qzeros", 0))}


def _array_bytes(spec, k: int, n: int) -> dict[str, int]:
    """Bytes of each of a quantized matrix's arrays as its format lays them out (xegemm.quant.formats)."""
    return {name: int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize
            for name, a in FORMATS[spec.format].arrays(spec, k, n).items()}


def packed_bytes(plan, k: int, n: int) -> int:
    """Bytes per batch of the packed B: ceil(K/v) rows of N 32-bit words."""
    return -(-k // pack_factor(plan)) * n * 4


def packer_arguments(plan, buffers: dict, k: int, n: int, batch: int = 1,
                     offsets: tuple[int, int] = (0, 0)) -> tuple[list, tuple, tuple]:
    """(argument values, global size, local size) of the packer over ``batch`` matrices: ``buffers`` gives
    ``stored`` (B as stored), ``packed`` (the output) and a quantized B's ``scales`` and ``zeros`` (any buffer
    where it has none); ``offsets``: the bytes before the first matrix in ``stored`` and in ``packed`` (one
    group of a grouped launch; a multiple of 4 in ``packed``)."""
    if offsets[1] % 4:
        raise ValueError(f"the packed B's offset {offsets[1]} is not a multiple of 4 bytes")
    size = stored_bytes(plan, k, n)
    stored = buffers["stored"]
    scales, zeros = (buffers.get(name) for name in ("scales", "zeros"))
    args = [stored, stored if scales is None else scales, stored if zeros is None else zeros, buffers["packed"],
            ctypes.c_int(k), ctypes.c_int(n), ctypes.c_long(size["B"]), ctypes.c_long(size["S"]),
            ctypes.c_long(size["Z"]), ctypes.c_long(packed_bytes(plan, k, n)), ctypes.c_long(offsets[0]),
            ctypes.c_long(offsets[1])]
    return args, (-(-n // LOCAL[0]) * LOCAL[0], -(-k // pack_factor(plan)), batch), LOCAL


# ---- an FP8 A (W8A8): dequantized into the compute type, row-major ------------------------------------------

@dataclass(frozen=True)
class APackerSource:
    """What templates/pack_a.cl.j2 prints for one plan's FP8 A (see :func:`a_packer_source`)."""

    describe: str
    kernel: str
    compute: str
    dequant: str
    index: str               # the byte of element (m, k) in A's layout
    groups: bool
    k_group: int
    group_row: str
    scale: str


def a_packer_source(plan) -> APackerSource | None:
    """The A dequantizer of a coopmat plan with an FP8 A (W8A8), else None: A's bytes in its layout, each times its
    row's scale of its K group, rounded once to the compute type (``xe_round_once``, as the other lowerings'
    k-steps compute an FP8 A's DPAS operand)."""
    quant = plan.quant
    if quant is None or quant.a_spec is None:
        return None
    a, layout = quant.a_spec, plan.config.layout.a
    k_group = a.k_group or 0
    return APackerSource(f"{a.weight} A ({layout}-major), group {a.group}, {a.scale} scales ({a.scale_layout}) "
                         f"dequantized to row-major {quant.compute}", A_KERNEL, quant.compute, dequant_helpers(quant),
                         "(size_t)m * K + k" if layout == "row" else "(size_t)k * M + m",
                         a.scale_layout == "nk" and bool(k_group), k_group,
                         f"k / {k_group}" if k_group else "0", scale_load(a, "row", "m", "SA", "M", "xa_groups"))


def render_a_packer(plan) -> str:
    """The OpenCL C of a coopmat plan's A dequantizer (a plan with an FP8 A)."""
    return environment().get_template(A_TEMPLATE).render(p=a_packer_source(plan))


def a_stored_bytes(plan, m: int, k: int) -> dict[str, int]:
    """Bytes per batch of an FP8 A as stored (``A``) and of its scales (``SA``)."""
    size = _array_bytes(plan.quant.a_spec, k, m)     # an A's arrays describe A.T, K x M (xegemm.quant)
    return {"A": size["qweight"], "SA": size.get("scales", 0)}


def a_packed_bytes(plan, m: int, k: int) -> int:
    """Bytes per batch of the dequantized A: M x K 16-bit values."""
    return m * k * 2


def a_packer_arguments(plan, buffers: dict, m: int, k: int, batch: int = 1) -> tuple[list, tuple, tuple]:
    """(argument values, global size, local size) of the A dequantizer over ``batch`` matrices: ``buffers`` gives
    ``stored`` (A as stored), ``scales`` (its scales) and ``packed`` (the output)."""
    size = a_stored_bytes(plan, m, k)
    args = [buffers["stored"], buffers["scales"], buffers["packed"], ctypes.c_int(m), ctypes.c_int(k),
            ctypes.c_long(size["A"]), ctypes.c_long(size["SA"]), ctypes.c_long(a_packed_bytes(plan, m, k))]
    return args, (-(-k // LOCAL[0]) * LOCAL[0], m, batch), LOCAL
