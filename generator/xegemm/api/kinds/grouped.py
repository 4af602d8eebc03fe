"""The grouped and MoE calls (docs/use.md, docs/grouped.md): one launch computes every group.

``gemm.grouped(a_list, b_list)`` -> one D per group; ``gemm.moe(a, b, rows_per_expert)`` -> the T x N output
of an MoE layer.  A loaded variant is planned as a grouped kernel (the persistent walk over a device problem
table, xegemm.grouped; :meth:`xegemm.api.dispatch.Dispatcher.choose_grouped`): its K, N, M per group come from
the table, so one build serves every grouped call of the same types, layouts and epilogue; the table (one
upload per call, never a round trip per group) and the operand buffers are made per call.  Host (numpy) arrays
only; quantized experts are B, scales and zeros as their format stores them.
"""

from __future__ import annotations

import numpy as np

from xegemm.api.checks import bias_kind, operand_types, quantized_operand_types
from xegemm.api.dispatch import GroupedChoice
from xegemm.api.errors import CallError, LayoutError, ShapeMismatchError, scalar
from xegemm.api.kinds.base import CallKind, scalars
from xegemm.api.operands import Operand, expected_dtype, host_bytes, operand
from xegemm.api.quantized import quantized_b
from xegemm.grouped.problem import GroupedProblem, GroupedProblemError, grouped_from_operands, moe_from_operands
from xegemm.kernel.grouped_launch import grouped_launch
from xegemm.lowering import variant_lowering
from xegemm.runtime.b_packer import DevicePacker, pack_grouped_b
from xegemm.runtime.program import from_device, launch, to_device


def _host(op):
    if op.device:
        raise CallError(f"{op.name} is a device array: grouped and MoE calls take host (numpy) arrays")
    if op.batched and op.name != "B":
        raise ShapeMismatchError(f"{op.name} has a batch dimension {op.shape}; a grouped call takes one matrix per "
                                 "group")
    return op


def _common_layouts(ops, name: str) -> tuple[str, ...]:
    layouts = tuple(x for x in ("row", "col") if all(x in op.layouts for op in ops))
    if not layouts:
        raise LayoutError(f"the groups' {name} matrices mix row-major and column-major arrays; pass them all in "
                          "one layout (C-ordered or F-ordered)")
    return layouts


def _bias_vectors(bias, problem: GroupedProblem, kind: str) -> list:
    """Each group's f32 bias vector (checked against the group's M or N)."""
    if kind == "none":
        return [None] * len(problem.groups)
    out = []
    for g, (shape, vector) in enumerate(zip(problem.groups, bias)):
        want = shape.m if kind == "row" else shape.n
        vector = np.asarray(vector, np.float32)
        if vector.shape != (want,):
            raise ShapeMismatchError(f"bias of group {g} has shape {vector.shape}; one value per {kind} of its D: "
                                     f"length {want}")
        out.append(vector)
    return out


class GroupedCall(CallKind):
    """``gemm.grouped(a_list, b_list, c_list=None, *, alpha, beta, bias)`` and ``gemm.moe(a, b, rows_per_expert,
    c=None, *, scales, zeros, alpha, beta, bias)``."""

    entries = ("grouped", "moe")

    def _choose(self, problem: GroupedProblem, type_a: str, type_b: str, layouts_a, layouts_b, alpha: float,
                beta: float, kind: str) -> GroupedChoice:
        """The grouped kernel of these types, layouts and epilogue (kept: later calls of any group sizes
        reuse it)."""
        gemm = self.gemm
        key = ("grouped", bool(problem.experts), type_a, type_b, layouts_a, layouts_b, alpha != 1.0, beta != 0.0,
               kind)
        chosen = gemm.choices.get(key)
        if chosen is None:
            chosen = gemm.choices[key] = gemm.dispatcher.choose_grouped(gemm.lowering, problem, type_a, type_b,
                                                                        layouts_a, layouts_b, alpha, beta, kind)
        return chosen

    def _run(self, problem, chosen: GroupedChoice, parts: dict, alpha, beta):
        """Upload the table and the packed operands, launch once, return D's raw bytes and the launch layout."""
        gemm, config, call = self.gemm, chosen.config, chosen.call
        queue = gemm.queue
        layout = grouped_launch(call.plan, problem, gemm.info.compute_units, gemm.info.device_type == "gpu")
        nothing = np.zeros(4, np.uint8)
        buffers = {"A": to_device(queue, parts["A"](layout)), "B": to_device(queue, parts["B"](layout)),
                   "D": to_device(queue, np.zeros(max(4, layout.nbytes["D"]), np.uint8)),
                   "C": to_device(queue, parts["C"](layout) if parts.get("C") else nothing),
                   "bias": to_device(queue, parts["bias"](layout)), "workspace": to_device(queue, nothing),
                   "table": to_device(queue, layout.table.reshape(-1)),
                   "tile_counter": to_device(queue, np.zeros(1, np.int32))}
        for name in ("scales", "zeros"):
            if name in parts:
                buffers[name] = to_device(queue, parts[name](layout))
        lowering = variant_lowering(gemm.lowering, config.target.lowering)
        (kernel,) = gemm.programs.kernels(queue, call.plan.name, chosen.source, chosen.options, [call.plan.name],
                                          lowering.source_kind, config=chosen.config)
        if lowering.b_pack_factor(call.plan):
            # the kernel reads B packed (coopmat): every group's B packed on the device first, each call
            buffers["B"], _ = pack_grouped_b(queue, self.device_packer(DevicePacker, call.plan), layout, buffers)
        ((_, args, gsize, lsize),) = call.bind(call.grouped_sizes(**layout.sizes), buffers,
                                               scalars(config, alpha, beta))
        event = launch(queue, kernel, args, gsize, lsize)
        event.wait()
        self.record(call.plan.name, chosen.reason, chosen.reason, problem.label, config, event)
        return from_device(buffers["D"], np.uint8, (max(4, layout.nbytes["D"]),)), layout

    def grouped(self, a_list, b_list, c_list=None, *, alpha=None, beta=None, bias=None) -> list[np.ndarray]:
        """One D per group, ``D_g = activation(alpha * A_g @ B_g + beta * C_g + bias_g)``, in one launch."""
        gemm = self.gemm
        a_list, b_list = list(a_list), list(b_list)
        opas = [_host(operand("A", a, "M x K")) for a in a_list]
        opbs = [_host(operand("B", b, "K x N")) for b in b_list]
        if any(op.batched for op in opbs):
            raise ShapeMismatchError("a grouped call takes one K x N matrix B per group (for an MoE layer's E x K x "
                                     "N weights: gemm.moe)")
        try:
            problem = grouped_from_operands([op.shape[1:] for op in opas], [op.shape[1:] for op in opbs])
        except GroupedProblemError as exc:
            raise ShapeMismatchError(str(exc)) from None
        types = {operand_types(gemm.host_types, a, b) for a, b in zip(opas, opbs)}
        if len(types) != 1:
            raise ShapeMismatchError(f"the groups mix element types {sorted(types)}; one launch takes one type of A "
                                     "and B")
        (type_a, type_b), first = types.pop(), gemm.candidates[0].config
        alpha, beta = scalar("alpha", alpha, first.epilogue.alpha), scalar("beta", beta, first.epilogue.beta)
        kind = "none"
        for name, given in (("c_list", c_list), ("bias", bias)):
            if given is not None and len(given) != len(problem.groups):
                raise ShapeMismatchError(f"{name} has {len(given)} entries for {len(problem.groups)} groups")
        if bias is not None:
            bias = list(bias)
            g = next((i for i, s in enumerate(problem.groups) if s.m != s.n), 0)
            kind = bias_kind(gemm.candidates, np.asarray(bias[g]), problem.groups[g].m, problem.groups[g].n)
        chosen = self._choose(problem, type_a, type_b, _common_layouts(opas, "A"), _common_layouts(opbs, "B"),
                              alpha, beta, kind)
        config = chosen.config
        c_type = expected_dtype(config.types.c, False)
        if beta != 0.0:
            if c_list is None:
                raise ShapeMismatchError(f"beta = {beta} reads C: pass c_list (one M_g x N_g array of {c_type} per "
                                         "group)")
            c_list = [np.ascontiguousarray(c, c_type) for c in c_list]
            for g, (c, s) in enumerate(zip(c_list, problem.groups)):
                if c.shape != (s.m, s.n):
                    raise ShapeMismatchError(f"c of group {g} is {c.shape}; its D is {s.m} x {s.n}")
        vectors = _bias_vectors(bias, problem, kind)
        la, lb = config.layout.a, config.layout.b
        parts = {"A": lambda lay: lay.pack("A", [host_bytes(op, la, type_a) for op in opas]),
                 "B": lambda lay: lay.pack("B", [host_bytes(op, lb, type_b) for op in opbs]),
                 "bias": lambda lay: lay.pack_bias(vectors)}
        if beta != 0.0:
            parts["C"] = lambda lay: lay.pack("D", [c.reshape(-1).view(np.uint8) for c in c_list])
        raw, layout = self._run(problem, chosen, parts, alpha, beta)
        out = []
        for start, s in zip(layout.byte_offsets("D"), problem.groups):
            out.append(raw[start:start + s.m * s.n * c_type.itemsize].view(c_type).reshape(s.m, s.n).copy())
        return out

    def moe(self, a, b, rows_per_expert, c=None, *, scales=None, zeros=None, alpha=None, beta=None,
            bias=None) -> np.ndarray:
        """The T x N output of an MoE layer: A (T x K, rows sorted by expert), B (E x K x N; row-major per expert,
        or the swapped-axes view of an E x N x K array for column-major), ``rows_per_expert`` (length E, summing
        to T, zeros allowed); ``bias``: (E, N) per expert and column, or (T,) per row.  Quantized experts (the
        loaded config's ``quant:``): ``b``, ``scales`` and ``zeros`` are the format's arrays as it stores them,
        stacked per expert (E leading; xegemm.api.quantized)."""
        gemm = self.gemm
        opa = _host(operand("A", a, "T x K"))
        if gemm.quant is not None:
            if opa.batched:
                raise ShapeMismatchError(f"an MoE layer takes A as T x K; found A {np.shape(a)}")
            q = quantized_b(gemm.quant, b, scales, zeros, opa.shape[2], batched=True)
            opb = Operand("B", q, (q.batch, opa.shape[2], q.n), True, np.dtype(np.uint8), (gemm.quant.layout,),
                          False)
        elif scales is not None or zeros is not None:
            raise ShapeMismatchError("scales and zeros are for quantized experts; the loaded kernels take B as it is "
                                     "(no quant: section)")
        else:
            opb = _host(operand("B", b, "E x K x N"))
        if opa.batched or not opb.batched:
            found_a, found_b = np.shape(a), np.shape(b)
            raise ShapeMismatchError(f"an MoE layer takes A as T x K and B as E x K x N; found A {found_a} and B "
                                     f"{found_b}")
        layouts_b = _common_layouts([opb], "B")
        try:
            problem = moe_from_operands(opa.shape[1:], opb.shape, rows_per_expert)
        except GroupedProblemError as exc:
            raise ShapeMismatchError(str(exc)) from None
        t_rows, n = opa.shape[1], opb.shape[2]
        type_a, type_b = operand_types(gemm.host_types, opa, opb) if gemm.quant is None else \
            quantized_operand_types(gemm.host_types, opa)
        first = gemm.candidates[0].config
        alpha, beta = scalar("alpha", alpha, first.epilogue.alpha), scalar("beta", beta, first.epilogue.beta)
        kind, vector = "none", None
        if bias is not None:
            vector = np.ascontiguousarray(bias, np.float32)
            if vector.shape == (problem.experts, n):
                kind = "col"
            elif vector.shape == (t_rows,):
                kind = "row"
            else:
                raise ShapeMismatchError(f"bias has shape {vector.shape}; an MoE layer adds ({problem.experts}, {n}) "
                                         f"(per expert and column) or ({t_rows},) (per row)")
        if t_rows == 0:
            return np.zeros((0, n), expected_dtype(first.types.c, False))
        # A's experts' rows must be consecutive: A is read row-major (a column-major array is copied)
        chosen = self._choose(problem, type_a, type_b, ("row",), layouts_b, alpha, beta, kind)
        config = chosen.config
        c_type = expected_dtype(config.types.c, False)
        if beta != 0.0:
            if c is None or np.shape(c) != (t_rows, n):
                raise ShapeMismatchError(f"beta = {beta} reads C: pass c, a {t_rows} x {n} array of {c_type}")
            c = np.ascontiguousarray(c, c_type)
        a_bytes = host_bytes(opa, "row", type_a)
        b_bytes = opb.array.qweight if gemm.quant is not None else host_bytes(opb, config.layout.b, type_b)
        parts = {"A": lambda lay: a_bytes, "B": lambda lay: b_bytes,
                 "bias": lambda lay: vector.reshape(-1) if vector is not None else np.zeros(1, np.float32)}
        if gemm.quant is not None:   # every expert's arrays back to back: expert e's at e x one expert's bytes
            parts["scales"] = lambda lay: opb.array.scales
            parts["zeros"] = lambda lay: opb.array.zeros if opb.array.zeros is not None else np.zeros(4, np.uint8)
        if beta != 0.0:
            parts["C"] = lambda lay: c.reshape(-1).view(np.uint8)
        raw, _ = self._run(problem, chosen, parts, alpha, beta)
        return raw[:t_rows * n * c_type.itemsize].view(c_type).reshape(t_rows, n).copy()
