"""The quantized call: ``gemm(a, qweight, *, scales=..., zeros=..., a_scales=...)`` on a Gemm whose variants
quantize B (a ``quant:`` section; with ``quant_a:`` an FP8 A as well, W8A8).  B is passed as its format stores it
and checked against the format (xegemm.api.quantized); the kernel reads its bytes, scales and zeros as they are.
Host (numpy) arrays only.  The rest of the call (checks, dispatch, buffers, launch) is the plain call's."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from xegemm.api.checks import quantized_operand_types
from xegemm.api.dispatch import Choice
from xegemm.api.errors import LayoutError
from xegemm.api.kinds.plain import PlainCall
from xegemm.api.operands import Operand, host_bytes
from xegemm.api.quantized import quantized_a_scales, quantized_b
from xegemm.runtime.program import write_async


class QuantizedCall(PlainCall):
    """``gemm(a, b, c=None, *, scales, zeros=None, a_scales=None, alpha=None, beta=None, bias=None, out=None)``
    with ``b`` a quantized B's qweight."""

    @classmethod
    def serves(cls, gemm) -> bool:
        return gemm.quant is not None

    def operand_b(self, opa: Operand, b, scales, zeros, a_scales) -> Operand:
        gemm = self.gemm
        if opa.device:
            raise LayoutError("a quantized B's call takes host (numpy) arrays; A is a device array")
        q = quantized_b(gemm.quant, b, scales, zeros, opa.shape[2], opa.batched)
        q = replace(q, a_scales=quantized_a_scales(gemm.quant_a, a_scales, opa.shape[1], opa.shape[2], q.batch,
                                                   opa.batched))
        return Operand("B", q, (q.batch, opa.shape[2], q.n), q.batched, np.dtype(np.uint8), (gemm.quant.layout,),
                       False)

    def types(self, opa: Operand, opb: Operand) -> tuple[str, str]:
        return quantized_operand_types(self.gemm.host_types, opa)

    def uploads(self, buffers: dict, choice: Choice, opa: Operand, opb: Operand) -> list:
        """A's bytes, and B's qweight, scales, zeros (and an FP8 A's scales) as the format stores them."""
        q = opb.array
        written = [write_async(buffers["A"], host_bytes(opa, choice.layout_a, choice.config.types.a)),
                   write_async(buffers["B"], q.qweight), write_async(buffers["scales"], q.scales)]
        if q.zeros is not None:
            written.append(write_async(buffers["zeros"], q.zeros))
        if q.a_scales is not None:
            written.append(write_async(buffers["a_scales"], q.a_scales))
        return written
