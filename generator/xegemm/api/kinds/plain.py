"""The plain call: ``gemm(a, b, c=None, *, alpha=None, beta=None, bias=None, out=None)`` with the fixed epilogue,
A and B as they are, on host (numpy) or device (USM) arrays.

Host arrays go up into the shape's device buffers, kept between calls with the argument lists bound to them per
(alpha, beta) (a launch with the same list sets no argument again); device arrays are read where they are, on
their own queue.  :class:`xegemm.api.kinds.quantized.QuantizedCall` is this call with B as a format stores it.
"""

from __future__ import annotations

import threading

import numpy as np

from xegemm.api.checks import bias_kind, check_aligned, check_bias, check_output_like, dims, operand_types, shape_text
from xegemm.api.dispatch import Choice, Request, check_memory
from xegemm.api.errors import LayoutError, ShapeMismatchError, check_sizes, scalar
from xegemm.api.kinds.base import CallKind, scalars
from xegemm.api.operands import Operand, copies, expected_dtype, host_bytes, operand, relayouts
from xegemm.errors import XegemmError
from xegemm.runtime.b_packer import DeviceAPacker, DevicePacker
from xegemm.runtime.program import from_device, read_into, to_device, write_async
from xegemm.runtime.sycl import dpmem
from xegemm.lowering import variant_lowering

MAX_BOUND = 16             # argument lists kept per shape (one per alpha, beta pair)


def stored_b(buffers: dict):
    """The pool's buffer that receives B as the caller stores it (the packer's input where the lowering packs)."""
    return buffers.get("B_stored", buffers["B"])


def stored_a(buffers: dict):
    """The pool's buffer that receives A as the caller stores it (the A dequantizer's input where there is one)."""
    return buffers.get("A_stored", buffers["A"])


class Pool:
    """A shape's device buffers on one queue (A, B, D, C, bias, workspace; a quantized operand's scales and
    zeros) and the argument lists bound to them per (alpha, beta)."""

    def __init__(self, queue, choice: Choice, packer=None, a_packer=None):
        s, batch = choice.sizes, choice.config.problem.batch
        reads_c = choice.config.epilogue.beta != 0.0
        bias = choice.config.epilogue.bias
        length = {"none": 1, "row": choice.config.problem.m, "col": choice.config.problem.n}[bias]
        self.buffers = {"A": to_device(queue, np.zeros(max(4, s["stride_a"] * batch), np.uint8)),
                        "B": to_device(queue, np.zeros(max(4, s["stride_b"] * batch), np.uint8)),
                        "D": to_device(queue, np.zeros(max(4, s["stride_c"] * batch), np.uint8)),
                        "C": to_device(queue, np.zeros(max(4, s["stride_c"] * batch if reads_c else 4), np.uint8)),
                        "bias": to_device(queue, np.zeros(max(4, 4 * length), np.uint8)),
                        "workspace": to_device(queue, np.zeros(max(4, s["workspace_bytes"]), np.uint8))}
        for name, stride in (("scales", "stride_s"), ("zeros", "stride_z"),     # a quantized B's (else unused)
                             ("a_scales", "stride_sa")):                             # an FP8 A's (W8A8)
            self.buffers[name] = to_device(queue, np.zeros(max(4, s.get(stride, 0) * batch), np.uint8))
        if packer is not None:     # B as stored; "B" is what the packer makes of it (xegemm.runtime.b_packer)
            p = choice.config.problem
            self.buffers["B_stored"] = to_device(queue, np.zeros(max(4, packer.stored_bytes(p.k, p.n)["B"] * batch),
                                                                 np.uint8))
        if a_packer is not None:   # an FP8 A as stored; "A" is its dequantized bf16 (the A dequantizer)
            p = choice.config.problem
            self.buffers["A_stored"] = to_device(queue, np.zeros(max(4, a_packer.stored_bytes(p.m, p.k)["A"] * batch),
                                                                 np.uint8))
        self.bound: dict[tuple, list] = {}
        self.lock = threading.Lock()


class PlainCall(CallKind):
    """``gemm(a, b, c=None, *, alpha=None, beta=None, bias=None, out=None)``: D, or ``out`` written."""

    entries = ("call",)

    def __init__(self, gemm):
        super().__init__(gemm)
        self._pools: dict[tuple, Pool] = {}       # (the shape's dispatch key, queue) -> its buffers
        self._lock = threading.Lock()

    # -- what differs for a quantized B (QuantizedCall overrides these) ------------------------------------------
    def operand_b(self, opa: Operand, b, scales, zeros, a_scales, g_idx=None, gptq_version: int = 1) -> Operand:
        if g_idx is not None:
            raise ShapeMismatchError("g_idx is a GPTQ checkpoint's; the loaded kernels take B as it is (no quant: "
                                     "section)")
        if scales is not None or zeros is not None or a_scales is not None:
            raise ShapeMismatchError("scales, zeros and a_scales are for quantized operands; the loaded kernels "
                                     "take A and B as they are (no quant: section)")
        return operand("B", b, "K x N")

    def types(self, opa: Operand, opb: Operand) -> tuple[str, str]:
        return operand_types(self.gemm.host_types, opa, opb)

    def operand_a(self, opa: Operand, opb: Operand, copy: bool) -> tuple[Operand, list[str]]:
        """A as the kernels read it with B, and the host conversions made (for ``last_kernel.copies``)."""
        return opa, []

    def uploads(self, buffers: dict, choice: Choice, opa: Operand, opb: Operand) -> list:
        """A's and B's bytes written into the pool's buffers (without waiting); the host arrays written."""
        t = choice.config.types
        return [write_async(stored_a(buffers), host_bytes(opa, choice.layout_a, t.a)),
                write_async(stored_b(buffers), host_bytes(opb, choice.layout_b, t.b))]

    def packer(self, choice: Choice) -> DevicePacker | None:
        """The B packer of a variant whose lowering reads B packed (the coopmat kernels: VNNI, a quantized B
        dequantized into bf16 on the device at each call, xegemm.runtime.b_packer), else None: the OpenCL C
        lowerings read B as it is."""
        plan = choice.call.plan
        if not variant_lowering(self.gemm.lowering, choice.config.target.lowering).b_pack_factor(plan):
            return None
        return self.device_packer(DevicePacker, plan)

    def a_packer(self, choice: Choice) -> DeviceAPacker | None:
        """The FP8 A dequantizer of a coopmat variant with an FP8 A (W8A8), else None."""
        plan = choice.call.plan
        if not variant_lowering(self.gemm.lowering, choice.config.target.lowering).dequantizes_a(plan):
            return None
        return self.device_packer(DeviceAPacker, plan)

    # -- the call ---------------------------------------------------------------------------------------------
    def call(self, a, b, c=None, *, scales=None, zeros=None, a_scales=None, alpha=None, beta=None, bias=None,
             out=None, g_idx=None, gptq_version=1, copy=True, **named):
        if named:
            raise XegemmError(f"input {sorted(named)[0]!r}: the loaded kernels have the fixed epilogue, which takes "
                              "alpha, beta and bias; named inputs are a traced epilogue's (load(..., epilogue=fn))")
        gemm = self.gemm
        opa = operand("A", a, "M x K")
        opb = self.operand_b(opa, b, scales, zeros, a_scales, g_idx=g_idx, gptq_version=gptq_version)
        opa, notes = self.operand_a(opa, opb, copy)     # notes: host conversions and copies, last_kernel.copies
        (ba, m, k), (bb, k2, n) = opa.shape, opb.shape
        if k != k2:
            raise ShapeMismatchError(f"A is {dims(opa)} and B is {dims(opb)}: A's columns (K = {k}) must equal "
                                     f"B's rows ({k2})")
        if opa.batched != opb.batched or ba != bb:
            raise ShapeMismatchError(f"A is {dims(opa)} and B is {dims(opb)}: both must have the same batch "
                                     "(a leading dimension on both, or on neither)")
        batch, batched = ba, opa.batched
        check_sizes(m, n, k, batch, f"A is {dims(opa)} and B is {dims(opb)}")
        type_a, type_b = self.types(opa, opb)
        first = gemm.candidates[0].config
        alpha, beta = scalar("alpha", alpha, first.epilogue.alpha), scalar("beta", beta, first.epilogue.beta)
        kind = bias_kind(gemm.candidates, bias, m, n)
        on_device = opa.device or opb.device
        key = ("call", m, n, k, batch, type_a, type_b, opa.layouts, opb.layouts, alpha != 1.0, beta != 0.0, kind,
               on_device)
        choice = gemm.choices.get(key)
        if choice is None:
            try:
                choice = gemm.dispatcher.choose(gemm.lowering, Request(m, n, k, batch, type_a, type_b, opa.layouts,
                                                                       opb.layouts, alpha, beta, kind))
            except LayoutError:          # a host operand in a layout the kernels lack: copied into one they have
                wide_a, wide_b = relayouts([opa, opb])
                if (wide_a.layouts, wide_b.layouts) == (opa.layouts, opb.layouts):
                    raise
                choice = gemm.dispatcher.choose(gemm.lowering, Request(m, n, k, batch, type_a, type_b,
                                                                       wide_a.layouts, wide_b.layouts, alpha, beta,
                                                                       kind))
            check_memory(choice, gemm.info, gemm.sycl_device, on_device)
            gemm.choices[key] = choice
        notes += copies([opa, opb], {"A": choice.layout_a, "B": choice.layout_b}, copy)
        config = choice.config
        d_shape = (batch, m, n) if batched else (m, n)
        c_type = expected_dtype(config.types.c, False)
        reads_c = beta != 0.0
        if reads_c and c is None:
            raise ShapeMismatchError(f"beta = {beta} reads C, but no c was given: pass c ({shape_text(d_shape)} of "
                                     f"{c_type}) or beta=0")
        for name, arr in (("c", c if reads_c else None), ("out", out)):
            if arr is not None:
                check_output_like(name, arr, d_shape, config.types.c)
        if bias is not None:
            check_bias(bias, m if kind == "row" else n, kind)
        if on_device:
            result = self._run_device(choice, opa, opb, c if reads_c else None, bias, out, d_shape, alpha, beta)
        else:
            result = self._run_host(key, choice, opa, opb, c if reads_c else None, bias, out, d_shape, alpha, beta)
        gemm.last_kernel.copies = tuple(notes)
        return result

    def _pool(self, key: tuple, queue, choice: Choice) -> Pool:
        pool = self._pools.get((key, id(queue)))
        if pool is None:
            with self._lock:
                pool = self._pools.get((key, id(queue)))
                if pool is None:
                    pool = self._pools[(key, id(queue))] = Pool(queue, choice, self.packer(choice),
                                                                      self.a_packer(choice))
        return pool

    def _run_host(self, key, choice, opa, opb, c, bias, out, d_shape, alpha, beta):
        """Host arrays: copied into the shape's device buffers (kept between calls, like the argument list bound
        to them: a launch with the same list sets no argument again), launched, D read back."""
        q, t = self.gemm.queue, choice.config.types
        pool = self._pool(key, q, choice)
        with pool.lock:
            bufs = pool.buffers
            # written without waiting on the in-order queue; kept alive until the blocking read of D below
            written = self.uploads(bufs, choice, opa, opb)
            packer, a_packer, p = self.packer(choice), self.a_packer(choice), choice.config.problem
            if packer is not None:     # enqueued after the writes, before the GEMM (an in-order queue)
                packer.run(q, {"stored": bufs["B_stored"], "scales": bufs["scales"], "zeros": bufs["zeros"],
                               "packed": bufs["B"]}, p.k, p.n, p.batch)
            if a_packer is not None:
                a_packer.run(q, {"stored": bufs["A_stored"], "scales": bufs["a_scales"], "packed": bufs["A"]},
                             p.m, p.k, p.batch)
            if c is not None:
                written.append(write_async(bufs["C"], c))
            if bias is not None:
                written.append(write_async(bufs["bias"], np.asarray(bias, np.float32)))
            pair = (alpha, beta)
            if pair not in pool.bound and len(pool.bound) >= MAX_BOUND:
                pool.bound.clear()
            bound = pool.bound.get(pair) or self.bind(q, choice, bufs, scalars(choice.config, alpha, beta))
            self.launch(q, choice, bound, wait=False)
            pool.bound[pair] = bound
            host_out = isinstance(out, np.ndarray)
            result = out if host_out else np.empty(d_shape, expected_dtype(t.c, False))
            read_into(bufs["D"], result)
            del written
        if out is None or host_out:
            return result
        _usm_memory(out).copy_from_host(result.reshape(-1).view(np.uint8))
        return out

    def _run_device(self, choice, opa, opb, c, bias, out, d_shape, alpha, beta):
        """Operands on the device: launched on their own queue, where they are (no host round trip)."""
        gemm, queue = self.gemm, None
        for op in (opa, opb):
            if op.device:
                queue = _usm_queue(op)
                if queue.sycl_device != gemm.sycl_device:
                    raise XegemmError(f"{op.name} lives on {queue.sycl_device.filter_string} but this Gemm was loaded "
                                      f"for {gemm.info.filter_string}: load(..., device=...) on the arrays' device")
        t, s = choice.config.types, choice.sizes
        layouts = {"A": choice.layout_a, "B": choice.layout_b}
        types = {"A": t.a, "B": t.b}
        bufs = {}
        for op in (opa, opb):
            if op.device:
                mem = _usm_memory(op.array)
                check_aligned(op.name, op.usm["data"][0])
                bufs[op.name] = mem
            else:
                bufs[op.name] = to_device(queue, host_bytes(op, layouts[op.name], types[op.name]))
        nothing = np.zeros(4, np.uint8)
        device_out = out is not None and not isinstance(out, np.ndarray)
        if device_out:
            check_aligned("out", getattr(out, "__sycl_usm_array_interface__")["data"][0])
            bufs["D"] = _usm_memory(out)
        else:
            bufs["D"] = to_device(queue, np.empty(max(4, s["stride_c"] * choice.config.problem.batch), np.uint8))
        if c is not None and not isinstance(c, np.ndarray):
            check_aligned("c", getattr(c, "__sycl_usm_array_interface__")["data"][0])
            bufs["C"] = _usm_memory(c)
        else:
            bufs["C"] = to_device(queue, nothing if c is None else np.ascontiguousarray(c))
        bufs["bias"] = _usm_memory(bias) if bias is not None and not isinstance(bias, np.ndarray) else \
            to_device(queue, nothing if bias is None else np.ascontiguousarray(bias, np.float32))
        bufs["workspace"] = to_device(queue, np.zeros(max(4, s["workspace_bytes"]), np.uint8))
        packer = self.packer(choice)
        if packer is not None:     # B (a device array or uploaded) packed on this queue, before the GEMM
            p = choice.config.problem
            packed = to_device(queue, np.zeros(max(4, packer.packed_bytes(p.k, p.n) * p.batch), np.uint8))
            packer.run(queue, {"stored": bufs["B"], "packed": packed}, p.k, p.n, p.batch)
            bufs["B"] = packed
        self.launch(queue, choice, self.bind(queue, choice, bufs, scalars(choice.config, alpha, beta)))
        if device_out:
            return out
        result = from_device(bufs["D"], expected_dtype(t.c, False), d_shape)
        if out is None:
            return result
        out[...] = result
        return out


def _usm_memory(array):
    return dpmem.as_usm_memory(array)


def _usm_queue(op: Operand):
    syclobj = op.usm.get("syclobj")
    if hasattr(syclobj, "submit"):
        return syclobj
    return _usm_memory(op.array).sycl_queue
