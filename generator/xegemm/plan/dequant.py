"""The plan of a dequantizing GEMM: a quantized B (``quant:``) loaded in its storage type, converted and dequantized
in registers, and fed to the f16/bf16 DPAS of ``types.compute`` with f32 accumulation (docs/quantization.md).

There is no mixed float DPAS: the DPAS atom is the compute type's (``XE_8x16x16_F32F16F16F32_TT``), and B's copy
atoms are chosen for the *stored* elements (s8/u8/s4/u4 codes, FP8 bytes) exactly as for an integer GEMM.  What
ties the two together is :class:`StoredB`, the compute atom's B fragment seen in the storage type: the same
(k, column) per lane and register slot (lane = column, slot = k), at the storage type's bits.  GPTQ's qweight
(int32 ``[K * bits / 32, N]``: 32 / bits consecutive K of a column per word, the lowest K in the lowest bits) is
a row-major matrix of 32-bit elements holding ``k_per_element`` K each: the view maps those words, and the codes
are taken from them lowest first (the very bits a VNNI register of the codes holds).  The planner
locates that view in the copy registers by comparing lane maps (:mod:`xegemm.plan.operands`), so contiguous runs,
per-lane permutations and sub-group-shuffle gathers come out as for any operand; the lowering then decodes each
element and dequantizes it (:mod:`xegemm.lowering.dequant`).  AWQ's interleaved columns are a permutation of
the view's columns: lane n reads stored column 8 (n / 8) + slot, slot the AWQ position of column n.

What is lowered is :func:`xegemm.quant.rules.lowering_gap`'s complement; the planner rejects the rest.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from xegemm.atoms.lanemap import LaneMap
from xegemm.atoms.mma import MmaAtom
from xegemm.library.dtypes import DType, ctype_shape, dtype, vector_ctype
from xegemm.quant import QuantSpec, compute_type, operand_spec
from xegemm.quant.packing import AWQ_ORDER
from xegemm.quant.spec import BLOCK

# the stored position (nibble slot of a word) of column c within its run of 8, per format
_AWQ_SLOT = tuple(AWQ_ORDER.index(c) for c in range(8))


@dataclass(frozen=True)
class StoredB:
    """The B fragment of the compute DPAS atom ``mma`` as the copies hold it: ``storage``-typed elements (the
    quantized values' type), lane = column, slot = k (VNNI: lower k in lower bits), ``awq``: columns interleaved
    as AWQ stores them.  Quacks like an :class:`MmaAtom` for operand ``b`` (name, lane map, element, ctype)."""

    mma: MmaAtom
    storage: str
    awq: bool = False
    gptq: bool = False

    @property
    def name(self) -> str:
        how = ", AWQ columns" if self.awq else ", GPTQ words" if self.gptq else ""
        return f"{self.mma.name} (B as stored {self.storage}{how})"

    @property
    def code_type(self) -> DType:
        """The type of one code (the quantized values' type)."""
        return dtype(self.storage)

    @property
    def k_per_element(self) -> int:
        """K elements per stored element along K (GPTQ: 32 / bits per int32 word; else 1)."""
        return 32 // self.code_type.bits if self.gptq else 1

    @property
    def b_type(self) -> DType:
        """The type of one stored element the copies move (GPTQ: its int32 words)."""
        return dtype("s32") if self.gptq else self.code_type

    def element(self, operand: str) -> DType:
        assert operand == "b", operand
        return self.b_type

    def ctype(self, operand: str) -> str:
        """The fragment's stored bits as uints: K elements of the storage type per lane."""
        assert operand == "b", operand
        return vector_ctype("uint", self.mma.k * self.code_type.bits // 32)

    def lane_map(self, operand: str) -> LaneMap:
        assert operand == "b", operand
        return _stored_lane_map(self.mma.k // self.k_per_element, self.mma.n, self.awq)

    def stored_column(self, n: int) -> int:
        """The memory column holding logical column ``n`` (relative to a multiple of 8)."""
        return 8 * (n // 8) + _AWQ_SLOT[n % 8] if self.awq else n


@functools.lru_cache(maxsize=None)
def _stored_lane_map(k: int, lanes: int, awq: bool) -> LaneMap:
    column = (lambda n: 8 * (n // 8) + _AWQ_SLOT[n % 8]) if awq else (lambda n: n)
    return LaneMap.from_lists([[(kk, column(lane)) for kk in range(k)] for lane in range(lanes)])


@dataclass(frozen=True)
class StoredA:
    """The A fragment of the compute DPAS atom ``mma`` as an FP8 A's copies hold it (W8A8): the same (row, k) per
    lane and register slot (lane = k, slot = row), at the stored type's bits.  Quacks like an :class:`MmaAtom`
    for operand ``a``."""

    mma: MmaAtom
    storage: str

    @property
    def name(self) -> str:
        return f"{self.mma.name} (A as stored {self.storage})"

    @property
    def code_type(self) -> DType:
        return dtype(self.storage)

    @property
    def elements(self) -> int:
        """A elements per lane of one fragment (the compute atom's, padding rows included)."""
        bits, count = ctype_shape(self.mma.a_ctype)
        return bits * count // self.mma.a_type.bits

    def element(self, operand: str) -> DType:
        assert operand == "a", operand
        return self.code_type

    def ctype(self, operand: str) -> str:
        """The fragment's stored bits as uints."""
        assert operand == "a", operand
        return vector_ctype("uint", -(-self.elements * self.code_type.bits // 32))

    def lane_map(self, operand: str) -> LaneMap:
        assert operand == "a", operand
        return self.mma.lane_map("a")


def _scale_count(spec: QuantSpec, rows: str, other: str) -> str:
    """The number of scales (or unpacked zeros) of one matrix as a formula (xegemm.library.formula) of its K and the
    other dimension ``other`` (N for B, M for A): ``[ceil(K/g), other]`` per integer group, ``[1, other]`` per
    channel, one per tensor, ``[ceil(K/128), ceil(other/128)]`` per block128."""
    if spec.group == "tensor":
        return "1"
    if spec.group == "block128":
        return f"({rows} + {BLOCK - 1}) / {BLOCK} * (({other} + {BLOCK - 1}) / {BLOCK})"
    return (f"({rows} + {spec.group - 1}) / {spec.group} * " if isinstance(spec.group, int) else "") + other


@dataclass(frozen=True)
class QuantPlan:
    """What a dequantizing kernel needs beyond an ordinary plan: the description of B, the compute type and
    the view B's copies were planned against; for W8A8 FP8 also A's description and view."""

    spec: QuantSpec
    compute: str
    b_view: StoredB
    a_spec: QuantSpec | None = None
    a_view: StoredA | None = None

    @property
    def name_part(self) -> str:
        """The kernel-name token of the quantization (xegemm.plan.kernel_name):
        ``q<format><group>s<scale>[z<zero>][nk]`` for B, then ``a<group>s<scale>[nk]`` for an FP8 A."""
        s, a = self.spec, self.a_spec
        return (f"q{s.format}{s.group}s{s.scale}" + (f"z{s.zero}" if s.has_zero else "")
                + ("nk" if s.scale_layout == "nk" else "")
                + (f"a{a.group}s{a.scale}" + ("nk" if a.scale_layout == "nk" else "") if a else ""))

    def array_bytes(self) -> tuple[str, str]:
        """Bytes of the scales and of the zero points of one matrix as formulas of K and N (xegemm.library.formula; the
        zeros "0" without them): see :func:`_scale_count`; plain zeros one per byte, GPTQ's and AWQ's packed in
        int32 words."""
        s = self.spec
        count = _scale_count(s, "K", "N")
        scales = f"{count} * {dtype(s.scale).bits // 8}"
        if not s.has_zero:
            return scales, "0"
        per_word = 32 // dtype(s.weight).bits
        groups = f"(K + {s.group - 1}) / {s.group} * " if isinstance(s.group, int) else ""
        return scales, (f"{groups}N / {per_word} * 4" if s.format in ("awq", "gptq") else count)

    def a_scale_bytes(self) -> str:
        """Bytes of an FP8 A's scales of one matrix as a formula of K and M ("0" without an FP8 A)."""
        if self.a_spec is None:
            return "0"
        return f"{_scale_count(self.a_spec, 'K', 'M')} * {dtype(self.a_spec.scale).bits // 8}"


def quant_plan(config, mma: MmaAtom) -> QuantPlan | None:
    """The QuantPlan of a config whose B is quantized (its rules already checked by the planner), else None."""
    spec = operand_spec(config, "b")
    if spec is None:
        return None
    a_spec = operand_spec(config, "a")
    return QuantPlan(spec, compute_type(config.types),
                     StoredB(mma, spec.weight, spec.format == "awq", spec.format == "gptq"),
                     a_spec, StoredA(mma, a_spec.weight) if a_spec else None)


def mma_types(config) -> tuple[str, str]:
    """The DPAS input types (A, B) of a config: types.compute for both when B is quantized, else types.a, types.b."""
    if operand_spec(config, "b") is not None:
        compute = compute_type(config.types)
        return compute, compute
    return config.types.a, config.types.b
