"""The arguments of a planned kernel, in order, and how each is computed: one description for every caller.

A :class:`KernelCall` lists, for the GEMM kernel (templates/gemm.cl.j2) and, with split K or stream-K, its second
kernel (templates/reduce.cl.j2): each argument's name, OpenCL C type and meaning, and its value as either a
buffer the caller binds (``A``, ``B``, ``D``, ``C``, ``bias``, ``workspace``), an epilogue scalar (``alpha``,
``beta``, ``clamp_lo``, ``clamp_hi``) or an integer formula of M, N, K and batch (:mod:`xegemm.library.formula`: the
same text is evaluated in Python and printed as C).  Global sizes and the workspace size are formulas too.

The call API (:mod:`xegemm.api`) binds a call's arrays through :meth:`KernelCall.bind`; the exporter
(:mod:`xegemm.export`) prints the same list into ``manifest.json`` and the C launchers.  Operands are laid out
compactly: the pitch of a row-major M x K operand is K elements, of a column-major one M elements (4-bit
elements two per byte, a row's odd last element padded with a zero nibble), and a batch follows the last.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from xegemm.plan import stream_k
from xegemm.library.dtypes import dtype
from xegemm.epilogues.plan import input_param, workspace_floats
from xegemm.library.formula import evaluate, substitute
from xegemm.lowering import Lowering
from xegemm.plan.planner import Plan

BUFFERS = ("A", "B", "D", "C", "bias", "workspace", "scales", "zeros", "a_scales", "table",
           "tile_counter")   # what a caller binds, by these names
SCALARS = ("alpha", "beta", "clamp_lo", "clamp_hi")      # the epilogue's float arguments
SIZES = ("M", "N", "K", "batch")                          # the inputs of every formula
CTYPES = {"int": ctypes.c_int, "long": ctypes.c_long, "float": ctypes.c_float}


@dataclass(frozen=True)
class Argument:
    """One kernel argument: its parameter name and OpenCL C type, what it means, and where its value comes from
    (a buffer of :data:`BUFFERS`, a scalar of :data:`SCALARS`, or an integer formula of :data:`SIZES`)."""

    name: str
    ctype: str
    meaning: str
    value: str

    @property
    def is_buffer(self) -> bool:
        return self.ctype.endswith("*")

    def as_dict(self) -> dict:
        kind = "buffer" if self.is_buffer else "scalar" if self.ctype == "float" else "formula"
        return {"name": self.name, "type": self.ctype, "meaning": self.meaning, "kind": kind, "value": self.value}


@dataclass(frozen=True)
class Launch:
    """One kernel of a call: its name, arguments, global size (formulas, OpenCL order) and local size."""

    kernel: str
    arguments: tuple[Argument, ...]
    global_size: tuple[str, str, str]
    local_size: tuple[int, int, int]


def _pitch(elements: str, bits: int) -> str:
    """Bytes of a compact row of ``elements`` elements of ``bits`` bits (4-bit: two per byte, rounded up)."""
    return f"{elements} * {bits // 8}" if bits >= 8 else f"({elements} + {8 // bits - 1}) / {8 // bits}"


@dataclass(frozen=True)
class KernelCall:
    """How one planned kernel is called: its launches in order and the formulas they use."""

    plan: Plan
    launches: tuple[Launch, ...]
    formulas: tuple[tuple[str, str], ...]       # (name, expression) steps over M, N, K, batch
    workspace: str                               # bytes of the workspace (a formula; "0": none)

    @classmethod
    def of(cls, plan: Plan) -> KernelCall:
        if plan.grouped:
            return cls._grouped(plan)
        config = plan.config
        t, lay, tile = config.types, config.layout, config.tile
        bm, bn, bk = tile.workgroup
        lx, ly, _ = plan.workgroup_size
        acc_bytes = dtype(t.acc).bits // 8
        a_bits, b_bits, c_bits = dtype(t.a).bits, dtype(t.b).bits, dtype(t.c).bits
        b_rows = "K" if lay.b == "row" else "N"
        if plan.quant and plan.quant.b_view.k_per_element > 1:    # GPTQ: words of several K, [K / per, N]
            b_bits, b_rows = plan.quant.b_view.b_type.bits, f"K / {plan.quant.b_view.k_per_element}"
        b_meaning = "B's elements, batch after batch"
        lowering = Lowering(config.target.lowering) if config.target.lowering else None
        vnni = lowering.b_pack_factor(plan) if lowering else None
        a_rows = "M" if lay.a == "row" else "K"
        if lowering and lowering.dequantizes_a(plan):   # an FP8 A dequantized into a row-major 16-bit M x K first
            a_bits, a_rows = 16, "M"
        if vnni:     # the coopmat lowering's B: VNNI-packed, K padded to a multiple of v (runtime.b_packer)
            b_rows = f"((K + {vnni - 1}) / {vnni} * {vnni})"
            b_bits = 32 // vnni      # v elements per 32 bits (a quantized B: dequantized to 16-bit values)
            b_meaning = (f"B VNNI-packed by {vnni} (per batch [ceil(K/{vnni})][N*{vnni}] elements: packed[r][{vnni}*c+i] "
                         f"= B[{vnni}*r+i][c]), batch after batch")
        steps = [("lda", _pitch("K" if a_rows == "M" else "M", a_bits)),
                 ("ldb", _pitch("N" if lay.b == "row" or vnni else "K", b_bits)),   # packed: K x N whatever B's layout
                 ("ldc", _pitch("N", c_bits)),
                 ("stride_a", f"lda * {a_rows}"),
                 ("stride_b", f"ldb * {b_rows}"),
                 ("stride_c", "ldc * M")]
        if plan.quant:        # a quantized B's scales and zero points (xegemm.plan.dequant), a batch after the other
            scales, zeros = plan.quant.array_bytes()
            steps += [("stride_s", scales), ("stride_z", zeros)]
            if plan.quant.a_spec:     # an FP8 A's scales (W8A8)
                steps.append(("stride_sa", plan.quant.a_scale_bytes()))
        out, ld_out = "D", "ldc"
        if plan.split_k > 1:
            steps += [("ldw", f"N * {acc_bytes}"), ("stride_w", "ldw * M"),
                      ("k_slice", substitute("((K + S - 1) / S + BK - 1) / BK * BK", {"S": plan.split_k, "BK": bk}))]
            out, ld_out = "workspace", "ldw"
            workspace = f"batch * {plan.split_k} * M * N * {acc_bytes}"
            grid = (f"(N + {bn - 1}) / {bn} * {lx}", f"(M + {bm - 1}) / {bm} * {ly}", f"batch * {plan.split_k}")
        elif plan.stream_k:
            steps += [(name, substitute(expr, {"BM": bm, "BN": bn, "BK": bk})) for name, expr in stream_k.GRID[:3]]
            workspace = f"batch * {plan.stream_k * stream_k.SLOTS * bm * bn * acc_bytes}"
            grid = (str(plan.stream_k * lx), str(ly), "batch")
        else:   # a traced epilogue's reductions: their partials (xegemm.epilogues.plan.ReductionPlan)
            workspace = f"({workspace_floats(plan.reductions)}) * 4" if plan.reductions else "0"
            grid = (f"(N + {bn - 1}) / {bn} * {lx}", f"(M + {bm - 1}) / {bm} * {ly}", "batch")
            for r in plan.reductions:
                steps += [(f"xe_{r.name}_offset", r.offset), (f"xe_{r.name}_length", r.length),
                          (f"xe_{r.name}_slots", r.slots)]
        stride_out = "stride_w" if plan.split_k > 1 else "stride_c"
        gemm = [Argument("A", "const global uchar*", "A's elements, batch after batch", "A"),
                Argument("B", "const global uchar*", b_meaning, "B"),
                Argument("C", "global uchar*", "D, the result (split K: the workspace of partial sums)", out),
                Argument("M", "int", "rows of A and D", "M"), Argument("N", "int", "columns of B and D", "N"),
                Argument("K", "int", "columns of A, rows of B", "K"),
                Argument("lda", "int", "bytes between rows of A's storage", "lda"),
                Argument("ldb", "int", "bytes between rows of B's storage", "ldb"),
                Argument("ldc", "int", "bytes between rows of D's storage", ld_out),
                Argument("batch_stride_a", "long", "bytes between A's batches", "stride_a"),
                Argument("batch_stride_b", "long", "bytes between B's batches", "stride_b"),
                Argument("batch_stride_c", "long", "bytes between D's batches", stride_out),
                Argument("Cin", "const global uchar*", "C, read when beta != 0 (laid out as D)", "C"),
                Argument("bias", "const global float*", "the f32 bias vector (length M: per row, N: per column)",
                         "bias"),
                *_epilogue_arguments()]
        gemm += traced_arguments(plan)
        if plan.split_k > 1:
            gemm.append(Argument("k_slice", "int", "elements of K per split-K slice", "k_slice"))
        elif plan.stream_k:
            gemm.append(Argument("W", "global uchar*", "the stream-K workspace of pieces of tiles", "workspace"))
        if plan.quant:
            gemm += [Argument("S", "const global uchar*", "the quantized B's scales, batch after batch", "scales"),
                     Argument("Z", "const global uchar*", "the quantized B's zero points (none: any buffer)", "zeros"),
                     Argument("batch_stride_s", "long", "bytes between the scales' batches", "stride_s"),
                     Argument("batch_stride_z", "long", "bytes between the zero points' batches", "stride_z")]
            if plan.quant.a_spec:
                gemm += [Argument("SA", "const global uchar*", "the FP8 A's scales, batch after batch", "a_scales"),
                         Argument("batch_stride_sa", "long", "bytes between A's scales' batches", "stride_sa")]
        launches = [Launch(plan.name, tuple(gemm), grid, plan.workgroup_size)]
        if plan.reduces:
            reduce = [Argument("W", "const global uchar*", "the workspace the GEMM kernel wrote", "workspace"),
                      Argument("C", "global uchar*", "D, the result", "D"),
                      Argument("M", "int", "rows of D", "M"), Argument("N", "int", "columns of D", "N"),
                      Argument("ldc", "int", "bytes between rows of D's storage", "ldc"),
                      Argument("batch_stride_c", "long", "bytes between D's batches", "stride_c"),
                      Argument("Cin", "const global uchar*", "C, read when beta != 0 (laid out as D)", "C"),
                      Argument("bias", "const global float*", "the f32 bias vector", "bias"),
                      *_epilogue_arguments()]
            if plan.stream_k:
                reduce.append(Argument("K", "int", "columns of A, rows of B", "K"))
                rgrid = (str(-(-bn // 16) * 16), str(bm), "batch * tiles")
            else:
                rgrid = ("(N + 15) / 16 * 16", "M", "batch")
            launches.append(Launch(plan.name + "_reduce", tuple(reduce), rgrid, plan.reduce_workgroup_size))
        for r in plan.reductions:    # each reduction's fix-up: its partials combined in slot order
            fixup = (Argument("W", "const global float*", "the partials the GEMM kernel wrote", "workspace"),
                     Argument("out", "global uchar*", f"output {r.name}: {r.type} per {r.kind} of D, batch after "
                              "batch", f"out_{r.name}"),
                     Argument("offset", "long", "floats of the workspace before this reduction's", f"xe_{r.name}_offset"),
                     Argument("length", "int", "values per batch", f"xe_{r.name}_length"),
                     Argument("tiles", "int", "partials per value", f"xe_{r.name}_slots"))
            launches.append(Launch(f"{plan.name}_{r.name}", fixup, (f"(xe_{r.name}_length + 15) / 16 * 16", "batch", "1"),
                                   plan.reduce_workgroup_size))
        return cls(plan, tuple(launches), tuple(steps), workspace)

    @classmethod
    def _grouped(cls, plan: Plan) -> KernelCall:
        """A grouped or MoE kernel (templates/grouped.cl.j2): every group's sizes, offsets and pitches come from
        the problem table (xegemm.grouped.table); G persistent work-groups along x walk the tiles."""
        lx, ly, _ = plan.workgroup_size
        lowering = Lowering(plan.config.target.lowering) if plan.config.target.lowering else None
        vnni = lowering.b_pack_factor(plan) if lowering else None
        b_meaning = (f"every group's B VNNI-packed by {vnni} (xegemm.runtime.b_packer), at the table's b_offset"
                     if vnni else "every group's B, at the table's b_offset")
        args = (Argument("A", "const global uchar*", "every group's A, at the table's a_offset", "A"),
                Argument("B", "const global uchar*", b_meaning, "B"),
                Argument("C", "global uchar*", "every group's D, the result, at the table's c_offset", "D"),
                Argument("Cin", "const global uchar*", "every group's C, read when beta != 0 (laid out as D)", "C"),
                Argument("bias", "const global float*", "every group's f32 bias vector, at the table's bias_offset",
                         "bias"),
                *_epilogue_arguments(),
                Argument("table", "const global long*", "the problem table: groups x FIELDS int64", "table"),
                Argument("groups", "int", "rows of the table", "groups"),
                Argument("total_tiles", "int", "the tiles of all groups", "total_tiles"),
                Argument("tile_counter", "global int*", "the dynamic walk's next tile, 0 at launch", "tile_counter"))
        steps = ()
        if plan.quant:        # an MoE layer's quantized experts: each one's scales and zeros one stride apart
            scales, zeros = plan.quant.array_bytes()
            steps = (("stride_s", scales), ("stride_z", zeros))
            args += (Argument("S", "const global uchar*", "every expert's scales of the quantized B, expert after "
                              "expert", "scales"),
                     Argument("Z", "const global uchar*", "every expert's zero points (none: any buffer)", "zeros"),
                     Argument("expert_stride_s", "long", "bytes between two experts' scales", "stride_s"),
                     Argument("expert_stride_z", "long", "bytes between two experts' zero points", "stride_z"))
        launch = Launch(plan.name, args, (f"workgroups * {lx}", str(ly), "1"), plan.workgroup_size)
        return cls(plan, (launch,), steps, "0")

    def grouped_sizes(self, groups: int, total_tiles: int, workgroups: int, n: int = 0, k: int = 0) -> dict:
        """:meth:`sizes` of a grouped launch: its groups, tiles and persistent work-groups G
        (xegemm.kernel.grouped_launch), and for quantized experts their N and K (the per-expert strides)."""
        sizes = evaluate(self.formulas, {"M": 0, "N": n, "K": k, "batch": 1}) if self.formulas else {}
        sizes |= {"groups": groups, "total_tiles": total_tiles, "workgroups": workgroups, "workspace_bytes": 0}
        sizes["global0"] = tuple(self.value(g, sizes) for g in self.launches[0].global_size)
        return sizes

    # -- evaluation ---------------------------------------------------------------------------------------------
    def sizes(self, m: int, n: int, k: int, batch: int) -> dict:
        """Every formula's value for a problem (M, N, K, batch and the steps), plus ``workspace_bytes`` and each
        launch's global size (``global0``, ``global1``): what :meth:`bind` needs, worked out once per shape."""
        sizes = evaluate(self.formulas, {"M": m, "N": n, "K": k, "batch": batch})
        sizes["workspace_bytes"] = self.value(self.workspace, sizes)
        for i, launch in enumerate(self.launches):
            sizes[f"global{i}"] = tuple(self.value(g, sizes) for g in launch.global_size)
        return sizes

    def value(self, expr: str, sizes: dict[str, int]) -> int:
        """One formula (a global size, the workspace) for sizes of :meth:`sizes`."""
        return evaluate((("_", expr),), sizes)["_"]

    def bind(self, sizes: dict[str, int], buffers: dict, scalars: dict[str, float]) -> list[tuple]:
        """Per launch: (kernel name, argument values in order, global size, local size).  ``buffers`` maps
        :data:`BUFFERS` names (and a traced epilogue's ``in_<name>``, ``out_<name>``) to device buffers,
        ``scalars`` :data:`SCALARS` names (and a traced epilogue's scalar inputs ``in_<name>``) to floats."""
        out = []
        for i, launch in enumerate(self.launches):
            values = []
            for arg in launch.arguments:
                if arg.is_buffer:
                    values.append(buffers[arg.value])
                elif arg.ctype == "float":
                    values.append(ctypes.c_float(scalars[arg.value]))
                else:
                    values.append(CTYPES[arg.ctype](sizes[arg.value]))
            out.append((launch.kernel, values, sizes[f"global{i}"], launch.local_size))
        return out


def traced_arguments(plan: Plan) -> list[Argument]:
    """A traced epilogue's arguments after the fixed ones (docs/epilogues.md): each named input (a matrix of its
    type laid out as D, a row or column f32 vector, an f32 scalar), then each auxiliary output (laid out as D);
    the value is the kernel parameter's own name (``in_<name>``, ``out_<name>``), the key a caller binds."""
    graph = plan.graph
    if graph is None:
        return []
    out = []
    for i in graph.inputs:
        if i.name in ("acc", "c"):
            continue
        name = input_param(i.name)
        if i.kind == "matrix":
            out.append(Argument(name, "const global uchar*", f"input {i.name}: an M x N {i.type} matrix, batch after "
                                "batch", name))
        elif i.kind == "scalar":
            out.append(Argument(name, "float", f"input {i.name}: a scalar", name))
        else:
            length = "M: one per row" if i.kind == "row" else "N: one per column"
            out.append(Argument(name, "const global float*", f"input {i.name}: an f32 vector of length {length}",
                                name))
    for a in plan.aux:
        if a.output:
            out.append(Argument(a.param, "global uchar*", f"output {a.name}: an M x N {a.type} matrix, batch after "
                                "batch", a.param))
    if plan.reductions:
        out.append(Argument("xe_partials", "global float*", "the reductions' partials (the workspace)", "workspace"))
    return out


def _epilogue_arguments() -> list[Argument]:
    return [Argument("alpha", "float", "D = alpha * acc + beta * C (+ bias, then the activation)", "alpha"),
            Argument("beta", "float", "the scale of C (0: C is not read)", "beta"),
            Argument("clamp_lo", "float", "the clamp activation's lower bound", "clamp_lo"),
            Argument("clamp_hi", "float", "the clamp activation's upper bound", "clamp_hi")]
