"""The traced call: ``gemm(a, b, c=None, **named_inputs)`` on a Gemm whose epilogue is a Python function
(docs/epilogues.md).  Each named input by its parameter name (its kind declared or from the array, xegemm.api.traced:
the kinds are part of the dispatch key); host arrays only; returns D, or a dict of D (``"d"``) and the
function's extra outputs.  ``out=`` is not taken."""

from __future__ import annotations

import numpy as np

from xegemm.api import traced
from xegemm.api.checks import check_output_like, dims, operand_types, shape_text
from xegemm.api.dispatch import Request, check_memory
from xegemm.api.errors import ShapeMismatchError, check_sizes
from xegemm.api.kinds.base import CallKind, scalars
from xegemm.api.operands import expected_dtype, host_bytes, operand
from xegemm.errors import XegemmError
from xegemm.library.dtypes import dtype
from xegemm.runtime.program import from_device, to_device


class TracedCall(CallKind):
    """``gemm(a, b, c=None, **named_inputs)`` (alpha, beta and bias are named inputs like any other)."""

    entries = ("call",)

    @classmethod
    def serves(cls, gemm) -> bool:
        return gemm.candidates[0].config.epilogue.traced

    def call(self, a, b, c=None, *, scales=None, zeros=None, a_scales=None, alpha=None, beta=None, bias=None,
             out=None, g_idx=None, gptq_version=1, copy=True, **named):
        gemm = self.gemm
        if gemm.quant is not None:
            raise XegemmError("a traced epilogue over a quantized B is not callable yet: load the quantized "
                              "config with the fixed epilogue")
        if g_idx is not None:
            raise ShapeMismatchError("g_idx is a GPTQ checkpoint's; the loaded kernels take B as it is (no quant: "
                                     "section)")
        if out is not None:
            raise XegemmError("a traced epilogue's call returns D (or a dict of D and its extra outputs): no out=")
        given = {"alpha": alpha, "beta": beta, "bias": bias, "scales": scales, "zeros": zeros}
        named = {**{k: v for k, v in given.items() if v is not None}, **named}
        opa, opb = operand("A", a, "M x K"), operand("B", b, "K x N")
        (ba, m, k), (bb, k2, n) = opa.shape, opb.shape
        if k != k2 or opa.batched != opb.batched or ba != bb:
            raise ShapeMismatchError(f"A is {dims(opa)} and B is {dims(opb)}: A's columns must equal B's rows, "
                                     "with the same batch on both (or none)")
        if opa.device or opb.device:
            raise XegemmError("a traced epilogue's call takes host (numpy) arrays")
        batch, batched = ba, opa.batched
        check_sizes(m, n, k, batch, f"A is {dims(opa)} and B is {dims(opb)}")
        type_a, type_b = operand_types(gemm.host_types, opa, opb)
        inputs = traced.call_inputs(gemm.candidates[0].config, named, m, n)
        key = ("traced", m, n, k, batch, type_a, type_b, opa.layouts, opb.layouts, inputs)
        choice = gemm.choices.get(key)
        if choice is None:
            choice = gemm.dispatcher.choose(gemm.lowering, Request(m, n, k, batch, type_a, type_b, opa.layouts,
                                                                   opb.layouts, inputs=inputs))
            check_memory(choice, gemm.info, gemm.sycl_device, False)
            gemm.choices[key] = choice
        config, t, s = choice.config, choice.config.types, choice.sizes
        graph = choice.call.plan.graph
        traced.check_named(graph, named, m, n, batch, batched)
        d_shape = (batch, m, n) if batched else (m, n)
        reads_c = graph.reads("c")
        if reads_c:
            if c is None:
                raise ShapeMismatchError(f"the epilogue reads c: pass c ({shape_text(d_shape)} of {t.c})")
            check_output_like("c", c, d_shape, t.c)
        arrays, values = traced.named_buffers(graph, named, batch, m, n)
        q, nothing = gemm.queue, np.zeros(4, np.uint8)
        outputs = traced.outputs_of(graph, d_shape)
        bufs = {"A": to_device(q, host_bytes(opa, choice.layout_a, t.a)),
                "B": to_device(q, host_bytes(opb, choice.layout_b, t.b)),
                "D": to_device(q, np.zeros(max(4, s["stride_c"] * batch), np.uint8)),
                "C": to_device(q, np.ascontiguousarray(c).reshape(-1).view(np.uint8) if reads_c else nothing),
                "bias": to_device(q, nothing), "workspace": to_device(q, np.zeros(max(4, s["workspace_bytes"]), np.uint8)),
                **{param: to_device(q, array) for param, array in arrays.items()},
                **{param: to_device(q, np.zeros(max(4, int(np.prod(shape)) * dtype(type_name).bits // 8), np.uint8))
                   for param, type_name, shape in outputs}}
        self.launch(q, choice, self.bind(q, choice, bufs, scalars(config, 1.0, 0.0) | values))
        d = from_device(bufs["D"], expected_dtype(t.c, False), d_shape)
        if not outputs:
            return d
        return {"d": d, **{param.removeprefix("out_"): from_device(bufs[param], expected_dtype(type_name, False), shape)
                           for param, type_name, shape in outputs}}
