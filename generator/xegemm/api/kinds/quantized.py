"""The quantized call: ``gemm(a, qweight, *, scales=..., zeros=..., a_scales=...)`` on a Gemm whose variants
quantize B (a ``quant:`` section; with ``quant_a:`` an FP8 A as well, W8A8).  B is passed as its format stores it
and checked against the format (xegemm.api.quantized, with what checkpoints store: xegemm.quant.stored); the kernel
reads its bytes, scales and zeros as they are.  An act-order GPTQ ``g_idx`` permutes A's columns on the host.
Host (numpy) arrays only.  The rest of the call (checks, dispatch, buffers, launch) is the plain call's."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from xegemm.api.checks import quantized_operand_types
from xegemm.api.dispatch import Choice
from xegemm.api.errors import LayoutError
from xegemm.api.kinds.plain import PlainCall, stored_a, stored_b
from xegemm.api.operands import Operand, host_bytes, operand
from xegemm.api.quantized import quantized_a_scales, quantized_b
from xegemm.runtime.program import write_async


class QuantizedCall(PlainCall):
    """``gemm(a, b, c=None, *, scales, zeros=None, a_scales=None, alpha=None, beta=None, bias=None, out=None)``
    with ``b`` a quantized B's qweight."""

    @classmethod
    def serves(cls, gemm) -> bool:
        return gemm.quant is not None

    def operand_b(self, opa: Operand, b, scales, zeros, a_scales, g_idx=None, gptq_version: int = 1) -> Operand:
        gemm = self.gemm
        if opa.device:
            raise LayoutError("a quantized B's call takes host (numpy) arrays; A is a device array")
        q = quantized_b(gemm.quant, b, scales, zeros, opa.shape[2], opa.batched, g_idx=g_idx,
                        gptq_version=gptq_version)
        q = replace(q, a_scales=quantized_a_scales(gemm.quant_a, a_scales, opa.shape[1], opa.shape[2], q.batch,
                                                   opa.batched))
        return Operand("B", q, (q.batch, opa.shape[2], q.n), q.batched, np.dtype(np.uint8), (gemm.quant.layout,),
                       False)

    def types(self, opa: Operand, opb: Operand) -> tuple[str, str]:
        return quantized_operand_types(self.gemm.host_types, opa)

    def operand_a(self, opa: Operand, opb: Operand, copy: bool) -> tuple[Operand, list[str]]:
        """A, with its columns in the order B's K rows were repacked for an act-order g_idx (a host copy, which
        ``copy=False`` refuses), and the host conversions of B's arrays (xegemm.quant.stored)."""
        q = opb.array
        notes = list(q.notes)
        if q.perm is not None:
            if not copy:
                raise LayoutError("act-order g_idx permutes A's columns on the host (a copy), and copy=False: "
                                  "allow the copy, or repack the checkpoint in group order")
            opa = operand("A", np.ascontiguousarray(opa.array[..., q.perm]), "M x K")
            notes.append("A: columns permuted for act-order g_idx (a copy)")
        return opa, notes

    def uploads(self, buffers: dict, choice: Choice, opa: Operand, opb: Operand) -> list:
        """A's bytes, and B's qweight, scales, zeros (and an FP8 A's scales) as the format stores them."""
        q = opb.array
        written = [write_async(stored_a(buffers), host_bytes(opa, choice.layout_a, choice.config.types.a)),
                   write_async(stored_b(buffers), q.qweight), write_async(buffers["scales"], q.scales)]
        if q.zeros is not None:
            written.append(write_async(buffers["zeros"], q.zeros))
        if q.a_scales is not None:
            written.append(write_async(buffers["a_scales"], q.a_scales))
        return written
