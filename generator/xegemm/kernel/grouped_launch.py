"""One grouped or MoE launch laid out for a planned kernel: its problem table, the bytes of its operand
buffers, the persistent grid, and the groups' operands packed into one buffer per operand (docs/grouped.md).

The evaluator (xegemm.evaluate.grouped) and the call API (xegemm.api.kinds.grouped) both lay a launch out here, so
the table's offsets, the buffers' sizes and where each group's bytes go have one home.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xegemm.kernel.arguments import KernelCall
from xegemm.library.dtypes import dtype
from xegemm.grouped.problem import GroupedProblem
from xegemm.grouped.table import FIELD, bias_offsets, packed_offsets, problem_table, tile_begins
from xegemm.lowering import Lowering
from xegemm.plan.planner import Plan
from xegemm.library.targets import HW_THREADS

OPERANDS = ("A", "B", "D")           # the table's offset columns, in order
OFFSET_FIELDS = ("a_offset", "b_offset", "c_offset")


def persistent_workgroups(total_tiles: int, compute_units: int, subgroups: int, grf: int, gpu: bool,
                          fixed: int = 0) -> int:
    """G, the persistent grid: ``fixed`` (tile.persistent) when given, else the work-groups the device keeps
    resident, compute units x occupancy (a GPU's compute units are its vector engines, each with HW_THREADS
    threads in the GRF mode, one per sub-group of a work-group; a CPU runs one work-group per core); never more
    than the tiles (an idle work-group costs a launch slot and nothing else), never 0."""
    if fixed:
        return fixed
    per_unit = HW_THREADS.get(grf, 4) / subgroups if gpu else 1
    return max(1, min(total_tiles, int(max(1, compute_units) * per_unit)))


@dataclass(frozen=True)
class GroupedLaunch:
    """The table (groups x FIELDS, int64), each operand buffer's bytes (A, B, D; ``bias``: f32 values), and the
    launch's sizes (groups, total_tiles, workgroups: what :meth:`xegemm.kernel.arguments.KernelCall.grouped_sizes`
    completes for ``bind``)."""

    problem: GroupedProblem
    table: np.ndarray
    bits: tuple[int, int, int]
    nbytes: dict
    sizes: dict
    stored_b: tuple[int, ...] = ()          # each group's first byte of B as stored, where the kernel reads it packed
    packed_b_offsets: tuple[int, ...] = ()  # ... and of the packed B the kernel reads (the table's b_offset)

    def byte_offsets(self, operand: str) -> list[int]:
        """Each group's first byte in ``operand``'s buffer (A, B as the caller stores it, or D)."""
        if operand == "B" and self.stored_b:
            return list(self.stored_b)
        index = OPERANDS.index(operand)
        column = self.table[:, FIELD[OFFSET_FIELDS[index]]]
        return [int(v) * self.bits[index] // 8 for v in column]

    def pack(self, operand: str, parts) -> np.ndarray:
        """One buffer of ``operand`` holding each group's bytes (``parts[g]``, uint8, None for an empty group)
        at its offset; zeros between groups."""
        out = np.zeros(max(4, self.nbytes[operand]), np.uint8)
        for start, part in zip(self.byte_offsets(operand), parts):
            if part is not None and part.size:
                out[start:start + part.size] = np.asarray(part, np.uint8).reshape(-1)
        return out

    def pack_experts(self, name: str, parts) -> np.ndarray:
        """One buffer of quantized experts' ``scales`` or ``zeros`` (``parts[e]`` uint8, None for an empty
        expert), expert e's at e x the expert's bytes (the kernel's expert stride); at least 4 bytes."""
        out = np.zeros(max(4, self.nbytes[name]), np.uint8)
        stride = self.nbytes[name] // len(self.problem.groups)
        for e, part in enumerate(parts):
            if part is not None and part.size:
                out[e * stride:e * stride + part.size] = np.asarray(part, np.uint8).reshape(-1)
        return out

    def pack_bias(self, vectors) -> np.ndarray:
        """The f32 bias buffer: each group's vector (None for an empty group) at the table's ``bias_offset``."""
        out = np.zeros(max(1, self.nbytes["bias"] // 4), np.float32)
        for start, vector in zip(self.table[:, FIELD["bias_offset"]], vectors):
            if vector is not None and len(vector):
                out[int(start):int(start) + len(vector)] = vector
        return out


def grouped_launch(plan: Plan, problem: GroupedProblem, compute_units: int, gpu: bool = False) -> GroupedLaunch:
    """The launch of ``problem`` by ``plan``'s kernel on a device of ``compute_units``."""
    config = plan.config
    t, lay = config.types, config.layout
    bits = (dtype(t.a).bits, dtype(t.b).bits, dtype(t.c).bits)
    bias = plan.epilogue.bias
    offsets = packed_offsets(problem, bits)
    counts = [(g.m * g.k, g.k * g.n, g.m * g.n) for g in problem.groups]
    nbytes = {}
    for index, operand in enumerate(OPERANDS):
        end = max(int(o) + c[index] for o, c in zip(offsets[:, index], counts))
        nbytes[operand] = -(-end * bits[index] // 8)
    stored_b, packed_b, table_bits = (), (), bits
    lowering = Lowering(config.target.lowering) if config.target.lowering else None
    v = lowering.b_pack_factor(plan) if lowering else None
    if v:   # the kernel reads B VNNI-packed (the coopmat lowering): the table's b_offset is the packed B's
        stored_b = tuple(int(o) * bits[1] // 8 for o in offsets[:, 1])
        packed_b = _packed_b_offsets(problem, v)
        nbytes["B_packed"] = max(o + _packed_bytes(g, v) for o, g in zip(packed_b, problem.groups))
        table_bits = (bits[0], 32 // v, bits[2])
        offsets = offsets.copy()
        offsets[:, 1] = [o * 8 // table_bits[1] for o in packed_b]
    table = problem_table(problem, config.tile.workgroup, table_bits, (lay.a, lay.b, lay.c), offsets=offsets,
                          bias=bias)
    nbytes["bias"] = 4 * bias_offsets(problem, bias)[-1]
    total = tile_begins(problem, config.tile.workgroup)[-1]
    sgm, sgn = config.tile.subgroups
    workgroups = persistent_workgroups(total, compute_units, sgm * sgn, config.target.grf, gpu, config.tile.persistent)
    sizes = {"groups": len(problem.groups), "total_tiles": total, "workgroups": workgroups}
    if plan.quant:            # quantized experts (an MoE layer: every group is an expert of the same N and K)
        sizes |= {"n": problem.groups[0].n, "k": problem.groups[0].k}
        strides = KernelCall.of(plan).grouped_sizes(**sizes)
        nbytes |= {"scales": strides["stride_s"] * len(problem.groups), "zeros": strides["stride_z"] * len(problem.groups)}
    return GroupedLaunch(problem, table, bits, nbytes, sizes, stored_b, packed_b)


def _packed_bytes(group, v: int) -> int:
    """Bytes of one group's VNNI-packed B: ceil(K/v) rows of N 32-bit words (xegemm.lowering.coopmat_pack)."""
    return -(-group.k // v) * group.n * 4


def _packed_b_offsets(problem: GroupedProblem, v: int, align_bytes: int = 64) -> tuple[int, ...]:
    """Each group's first byte in the packed B buffer: an MoE layer's experts one packed expert apart (the
    packer's batch stride), any other group after the one before, rounded up to ``align_bytes``."""
    if problem.experts:
        return tuple(e * _packed_bytes(problem.groups[0], v) for e in range(len(problem.groups)))
    out, at = [], 0
    for g in problem.groups:
        out.append(at)
        at += -(-_packed_bytes(g, v) // align_bytes) * align_bytes
    return tuple(out)
