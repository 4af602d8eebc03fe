"""Quantized operands (int8/int4 weights with group-wise scales and zero points, FP8, MXFP4): the host side.

* :mod:`~xegemm.quant.spec`: :class:`QuantSpec` (format, value type, group, scale and zero types, layouts) and
  the group arithmetic;
* :mod:`~xegemm.quant.values`: exact round-to-nearest-even to f16, bf16 and the 8/4-bit floats, storage dtypes;
* :mod:`~xegemm.quant.packing`: nibbles two per byte, 32-bit words in GPTQ's and AWQ's orders;
* :mod:`~xegemm.quant.formats`: the format registry (``plain``, ``gptq``, ``awq``, ``mx``): arrays, pack, unpack;
* :mod:`~xegemm.quant.rules`: what a description, a shape, a config and a work-group tile must satisfy;
* :mod:`~xegemm.quant.stored`: arrays as checkpoints store them -> the arrays the kernels read (views, repacks,
  act-order);
* :mod:`~xegemm.quant.checkpoint`: :func:`from_safetensors`, one layer's tensors from a safetensors file or a state
  dict, the format detected;
* :mod:`~xegemm.quant.codec`: :func:`quantize`, :func:`dequantize` (``w = round_to_compute((q - z) * s)``) and
  :func:`reference_gemm`.

docs/quantization.md describes the formats, the math and the pitfalls with their public sources.
"""

from xegemm.quant.checkpoint import CheckpointError, LayerWeights, from_safetensors
from xegemm.quant.codec import (
    QuantError,
    QuantizedMatrix,
    check_spec,
    dequantize,
    dequantized_values,
    make_spec,
    quantize,
    random_quantized,
    random_unpacked,
    reference_gemm,
    with_arrays,
)
from xegemm.quant.formats import FORMATS, Format, Unpacked
from xegemm.quant.rules import (
    compute_type,
    config_violations,
    operand_spec,
    plan_violation,
    tile_violation,
)
from xegemm.quant.spec import QuantSpec

__all__ = [
    "CheckpointError", "LayerWeights", "from_safetensors",
    "FORMATS", "Format", "QuantError", "QuantSpec", "QuantizedMatrix", "Unpacked", "check_spec", "compute_type",
    "config_violations", "dequantize", "dequantized_values", "make_spec", "operand_spec", "plan_violation",
    "quantize", "random_quantized", "random_unpacked",
    "reference_gemm", "tile_violation", "with_arrays",
]
