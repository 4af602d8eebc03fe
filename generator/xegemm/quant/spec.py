"""What a quantized matrix is: :class:`QuantSpec`, the description the config's ``quant:`` section gives, and
the group arithmetic every format shares.

A quantized operand is seen K-first, as B is: ``W[K, N]`` with ``N`` the other dimension (for A, the rows M:
xegemm.quant quantizes ``A.T``).  A group is the block of elements that share one scale (and zero point):
``group`` K elements of one column, a whole column (``channel``), the whole matrix (``tensor``) or a block
of 128 x 128 (``block128``, DeepSeek-style FP8 weights).  Scales are ``[ceil(K/gk), ceil(N/gn)]`` in layout
``kn`` (GPTQ, AWQ, sycl-tla) or the transpose ``[ceil(N/gn), ceil(K/gk)]`` in ``nk`` (vLLM and SGLang XPU
kernels); docs/quantization.md has the sources.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

INT_WEIGHTS = ("s8", "u8", "s4", "u4")
FLOAT_WEIGHTS = ("e4m3", "e5m2", "e2m1")
FP8 = ("e4m3", "e5m2")
WEIGHT_TYPES = (*INT_WEIGHTS, *FLOAT_WEIGHTS)
SCALE_TYPES = ("f16", "bf16", "f32", "e8m0")
ZERO_TYPES = ("none", "u4", "s8", "u8", "f16", "bf16")
FLOAT_ZEROS = ("f16", "bf16")
SCALE_LAYOUTS = ("kn", "nk")
GROUP_WORDS = ("channel", "tensor", "block128")
COMPUTE_TYPES = ("f16", "bf16")     # the DPAS input types quantized operands are converted to
BLOCK = 128                          # block128: 128 x 128


@dataclass(frozen=True)
class QuantSpec:
    """How one matrix is quantized.

    ``weight``: the element type of the quantized values (``types.b``, or ``types.a`` for FP8 A); ``layout``:
    how the values are stored, ``row`` = ``[K, N]`` (N contiguous) or ``col`` = ``[N, K]`` (K contiguous,
    sycl-tla's int4 B); ``group``: a positive integer, ``channel``, ``tensor`` or ``block128``."""

    format: str = "plain"
    weight: str = "s4"
    group: int | str = 128
    scale: str = "f16"
    zero: str = "none"
    scale_layout: str = "kn"
    layout: str = "row"

    def group_extent(self, k: int, n: int) -> tuple[int, int]:
        """(gk, gn): how many K elements and how many columns share one scale."""
        if self.group == "channel":
            return k, 1
        if self.group == "tensor":
            return k, n
        if self.group == "block128":
            return BLOCK, BLOCK
        return int(self.group), 1

    def groups(self, k: int, n: int) -> tuple[int, int]:
        """(groups along K, groups along N): the scales' shape in layout ``kn``."""
        gk, gn = self.group_extent(k, n)
        return math.ceil(k / gk), math.ceil(n / gn)

    def scale_shape(self, k: int, n: int) -> tuple[int, int]:
        """The shape of the scales (and of unpacked zeros) as stored, in ``scale_layout``."""
        gk, gn = self.groups(k, n)
        return (gk, gn) if self.scale_layout == "kn" else (gn, gk)

    @property
    def k_group(self) -> int | None:
        """K elements per scale row when the matrix has several along K (an integer group; 128 for block128),
        None for channel and tensor (one row)."""
        return BLOCK if self.group == "block128" else self.group if isinstance(self.group, int) else None

    @property
    def has_zero(self) -> bool:
        return self.zero != "none"

    def describe(self) -> str:
        return (f"{self.format} {self.weight} ({self.layout}), group {self.group}, {self.scale} scales ({self.scale_layout})"
                + (f", {self.zero} zeros" if self.has_zero else ""))


def expand(per_group: np.ndarray, spec: QuantSpec, k: int, n: int) -> np.ndarray:
    """A ``kn`` array of one value per group broadcast to ``[K, N]`` (each element gets its group's value)."""
    gk, gn = spec.group_extent(k, n)
    return per_group.repeat(gk, axis=0)[:k].repeat(gn, axis=1)[:, :n]
