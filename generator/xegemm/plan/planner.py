"""Plan one variant: the tile arithmetic, the atoms, how copy registers feed the MMA, and what it costs.

:func:`plan` checks the config's tiles against the atoms and the target, has the copy atoms chosen
(:mod:`xegemm.plan.atom_choice`: each MMA operand fragment located in the copy registers by comparing lane maps,
:mod:`xegemm.plan.operands`), asks the register model (:mod:`xegemm.plan.registers`) and names the kernel
(:mod:`xegemm.plan.kernel_name`).  The rules of the problem's surfaces are :mod:`xegemm.plan.surfaces`'.  Anything that
cannot work is rejected with the rule and the numbers that fail (:class:`PlanRejected`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from xegemm.plan.atom_choice import choose_loads, load_twin, plan_store, with_prefetch
from xegemm.atoms.base import CopyAtomBase
from xegemm.atoms.copy import SUB_GROUP as BLOCK2D_SUB_GROUP
from xegemm.atoms.mma import MmaAtom
from xegemm.config import Config
from xegemm.config.sections import tile_conflict
from xegemm.plan.dequant import QuantPlan, mma_types, quant_plan
from xegemm.library.dtypes import dtype
from xegemm.epilogues.fixed import EpilogueSpec
from xegemm.epilogues.config import graph_of
from xegemm.epilogues.errors import EpilogueError
from xegemm.epilogues.graph import Graph
from xegemm.epilogues.plan import AuxMatrix, ReductionPlan, plan_auxiliaries, plan_reductions
from xegemm.errors import PlanRejected, XegemmError
from xegemm.plan.kernel_name import KernelName
from xegemm.plan.operands import OperandPlan
from xegemm.plan.registers import chunk_group, grf_bytes, may_spill_band, register_estimate, register_verdict
from xegemm.quant import plan_violation as quant_violation
from xegemm.plan.stream_k import iterations as stream_k_iterations
from xegemm.library.targets import dpas_widths, targets_at

REDUCE_LOCAL = (16, 1, 1)       # the reductions' work-group (Plan.reduce_workgroup_size)

__all__ = ["Plan", "PlanRejected", "k_slice", "plan"]


@dataclass(frozen=True)
class Plan:
    """Everything the templates need to render one kernel, plus the predictions the report shows."""

    config: Config
    mma: MmaAtom
    a: OperandPlan
    b: OperandPlan
    c: OperandPlan
    subgroup_tile: tuple[int, int]           # (sgM, sgN)
    mma_grid: tuple[int, int, int]           # MMA atoms along M, N, K per sub-group per k-step
    registers: dict = field(default_factory=dict)
    name: str = ""
    epilogue: EpilogueSpec | None = None
    c_in: CopyAtomBase | None = None   # the load twin of C's store atom, when the epilogue reads C
    partial: OperandPlan | None = None           # stream-K: how pieces of tiles are stored, as accumulators
    graph: Graph | None = None                   # a traced epilogue (docs/epilogues.md); None: the fixed one
    aux: tuple[AuxMatrix, ...] = ()              # the traced epilogue's auxiliary matrices and their atoms
    reductions: tuple[ReductionPlan, ...] = ()   # the traced epilogue's reductions: partials and fix-ups
    quant: QuantPlan | None = None               # a quantized B, dequantized in registers (xegemm.plan.dequant)

    @property
    def split_k(self) -> int:
        """K slices (1: no split).  Split, the GEMM kernel stores each slice's accumulators to a workspace and a
        second kernel adds the slices in order and applies the epilogue."""
        return self.config.tile.split_k

    def k_slice(self) -> int:
        """Elements of K per slice (:func:`k_slice`)."""
        return k_slice(self.config)

    @property
    def stream_k(self) -> int:
        """Stream-K work-groups per batch (0: off; xegemm.plan.stream_k).  On, the GEMM kernel stores the tiles its
        work-groups cover whole through the epilogue, the pieces of the others to a workspace, and a second
        kernel adds each cut tile's pieces in order and applies the epilogue."""
        return self.config.tile.stream_k

    @property
    def grouped(self) -> bool:
        """True for a grouped or MoE launch (``problem.groups`` or ``moe``): one kernel walks every group's tiles
        from a device-side problem table (xegemm.grouped, templates/grouped.cl.j2)."""
        return bool(self.config.problem.groups or self.config.moe.experts)

    @property
    def reduces(self) -> bool:
        """True when a second kernel (``<name>_reduce``) finishes D: split K or stream-K."""
        return self.split_k > 1 or self.stream_k > 0

    @property
    def register_block(self) -> tuple[int, int]:
        """(accumulator rows, N-fragments) of one register block of the portable k loop when its blocks are
        printed one by one (``tile.register_block``, 0 resolved to the whole sub-group tile); where they can run
        as a loop the lowering decides (:func:`xegemm.lowering.portable.rolled_blocks`)."""
        rows, fragments = self.config.tile.register_block
        return (rows or self.subgroup_tile[0], fragments or self.mma_grid[1])

    @property
    def kernel_epilogue(self) -> EpilogueSpec:
        """What the GEMM kernel's own epilogue does: the epilogue, or (split) storing the accumulator."""
        return self.epilogue if self.split_k == 1 else self.partial_epilogue

    @property
    def partial_epilogue(self) -> EpilogueSpec:
        """Storing partial sums: the accumulator as it is, in the accumulator type."""
        acc = self.config.types.acc
        return EpilogueSpec(1.0, 0.0, "none", "none", (0.0, 0.0), acc, acc)

    @property
    def reduce_workgroup_size(self) -> tuple[int, int, int]:
        """OpenCL local size of the split-K / stream-K reduction and a traced epilogue's fix-ups (one work-item
        per element, templates/reduce.cl.j2)."""
        return REDUCE_LOCAL

    @property
    def workgroup_size(self) -> tuple[int, int, int]:
        """OpenCL local size: (SG_N * sub-group size, SG_M, 1)."""
        sgm, sgn = self.config.tile.subgroups
        return (sgn * self.config.tile.subgroup_size, sgm, 1)

    def global_size(self) -> tuple[int, int, int]:
        """OpenCL global size covering the problem (edges included); z = batch x split-K slice.  Stream-K: G
        work-groups along x per batch."""
        p, (bm, bn, _) = self.config.problem, self.config.tile.workgroup
        lx, ly, _ = self.workgroup_size
        if self.stream_k:
            return (self.stream_k * lx, ly, p.batch)
        return (math.ceil(p.n / bn) * lx, math.ceil(p.m / bm) * ly, p.batch * self.config.tile.split_k)

    @property
    def uses_block1d(self) -> bool:
        """True when the copies are 1D sub-group block tiles (the SIMD8 / DG2 plans), not Xe 2D blocks."""
        return not self.a.atom.block2d

    @property
    def dpas_per_kstep(self) -> int:
        mt, nt, kt = self.mma_grid
        return mt * nt * kt

    def predicted_messages(self) -> dict:
        """Per sub-group: messages one k-step of the main loop issues, and the epilogue's stores."""
        return {"dpas": self.dpas_per_kstep, "load_a": self.a.messages_per_kstep,
                "load_b": self.b.messages_per_kstep,
                "prefetch": self.a.per_kstep + self.b.per_kstep if self.config.pipeline.prefetch else 0,
                "store_c": self.c.messages_per_kstep}

    def load_chunks(self, operand: str) -> dict[int, tuple[int, ...]]:
        """DPAS k-chunk -> the copy tiles of ``operand`` ("a" or "b") first used by it: the native k-step
        loads each tile just before that chunk, so tiles of later chunks are not live during earlier ones."""
        spans = getattr(self, operand).chunk_spans()
        out: dict[int, list[int]] = {}
        for tile in range(len(spans)):
            out.setdefault(spans[tile][0], []).append(tile)
        return {ki: tuple(tiles) for ki, tiles in out.items()}

    def summary(self) -> dict:
        """Plain data for manifests and reports."""
        return {"name": self.name, "mma": self.mma.name, "copy_a": self.a.atom.name, "copy_b": self.b.atom.name,
                "copy_c": self.c.atom.name, "copy_c_in": self.c_in.name if self.c_in else None,
                "epilogue": self.graph.describe() if self.graph else self.epilogue.describe() if self.epilogue else None, "subgroup_tile": list(self.subgroup_tile),
                "mma_grid": list(self.mma_grid), "workgroup_size": list(self.workgroup_size),
                "registers": dict(self.registers), "messages_per_kstep": self.predicted_messages()}


def grouped_violation(config: Config) -> str | None:
    """Why a grouped or MoE config cannot be planned (the persistent walk owns the tile order), or None."""
    if not (config.problem.groups or config.moe.experts):
        return None
    tile, what = config.tile, "an MoE layer" if config.moe.experts else "a grouped problem"
    if tile.split_k > 1 or tile.stream_k or tile.swizzle > 1:
        return (f"{what} runs one persistent walk over every group's tiles: tile.split_k, tile.stream_k and "
                "tile.swizzle do not apply (split_k: 1, stream_k: 0, swizzle: 1)")
    quant_b = config.quant.format != "none"
    if quant_b and not config.moe.experts:
        return ("a grouped problem with a quantized B is not built (docs/grouped.md): quantized weights are an MoE "
                "layer's (moe:), whose experts share N and K")
    if config.quant_a.format != "none" or dtype(config.types.a).bits < 8 or (
            dtype(config.types.b).bits < 8 and not quant_b):
        return (f"{what} with a quantized A or 4-bit operands that are not a quantized B is not built "
                "(docs/grouped.md)")
    if config.moe.experts and config.layout.a != "row":
        return ("an MoE layer's A is T x K with each expert's rows consecutive: A must be row-major "
                "(layout.a: row)")
    return None


def k_slice(config: Config) -> int:
    """Elements of K per split-K slice: whole k-tiles, so that no k-step straddles two slices (the last slice
    may be shorter, or empty)."""
    bk, split = config.tile.workgroup[2], config.tile.split_k
    return -(-math.ceil(config.problem.k / split) // bk) * bk


def plan(config: Config, issuable=None, check_registers: bool = True) -> Plan:
    """Plan one resolved variant (no sweep); raises PlanRejected with a reason a person understands.

    ``issuable(atom) -> bool`` (:meth:`xegemm.lowering.Lowering.issues`) makes the planner prefer the copy
    atoms the lowering the plan is for can issue.  ``check_registers=False`` keeps a plan whose register
    estimate exceeds ``target.grf`` (to build it and compare the estimate with the ISA,
    :mod:`xegemm.evaluate.spills`).  The sub-group size picks the copy family: 16 = Xe 2D block copies +
    SIMD16 DPAS (pvc, bmg); 8 = 1D sub-group block tiles (xegemm.atoms.block1d) + SIMD8 DPAS (dg2, which has
    no 2D block IO).  Either way every DPAS fragment is located in the copies' registers by comparing lane maps.
    """
    if why := quant_violation(config):       # quantized operands: the group against the tile (xegemm.quant.rules)
        raise PlanRejected(why)
    t, lay, tile = config.types, config.layout, config.tile
    bm, bn, bk = tile.workgroup
    sgm_count, sgn_count = tile.subgroups
    sg = tile.subgroup_size
    if sg not in dpas_widths():
        raise PlanRejected(f"sub-group size {sg}: DPAS executes at sub-group size 16 (pvc, bmg: Xe 2D block "
                           "copies) or 8 (dg2: 1D sub-group block copies)")
    block2d = sg == BLOCK2D_SUB_GROUP          # 2D block messages need a sub-group of 16 (SPV2D, OCL2D)
    max_subgroups = min(t.max_subgroups_per_workgroup for t in targets_at(sg))
    if sgm_count * sgn_count > max_subgroups:
        raise PlanRejected(f"{sgm_count}x{sgn_count} = {sgm_count * sgn_count} sub-groups per work-group: at most "
                           f"{max_subgroups} ({max_subgroups * sg} work-items) on Xe")
    if bm % sgm_count or bn % sgn_count:
        raise PlanRejected(f"work-group tile {bm}x{bn} does not split into {sgm_count}x{sgn_count} sub-group tiles")
    sgm, sgn = bm // sgm_count, bn // sgn_count
    if lay.c != "row":
        raise PlanRejected("C must be row-major: 2D block stores write row-major blocks only (sycl-tla's xe_2d_copy.md, docs/atoms.md §1.1)" if block2d
                           else "C must be row-major: 1D sub-group block writes store row segments only")
    dpas_a, dpas_b = mma_types(config)      # a quantized B: the compute type's DPAS (xegemm.plan.dequant)
    try:
        mma = (MmaAtom.parse(config.atoms.mma) if config.atoms.mma else
               MmaAtom.of(dtype(dpas_a).code, dtype(dpas_b).code, dtype(t.acc).code, m=math.gcd(8, sgm), n=sg))
    except XegemmError as exc:
        raise PlanRejected(f"no DPAS atom for A={dpas_a}, B={dpas_b}, accumulator={t.acc}: {exc}") from exc
    if (mma.a, mma.b, mma.c) != (dtype(dpas_a).code, dtype(dpas_b).code, dtype(t.acc).code):
        raise PlanRejected(f"{mma.name} does not take A={dpas_a}, B={dpas_b}, accumulator={t.acc}")
    if mma.n != sg:
        raise PlanRejected(f"{mma.name} executes at sub-group size {mma.n} (N = the SIMD width), but "
                           f"tile.subgroup_size is {sg}")
    if sgm % mma.m or sgn % mma.n or bk % mma.k:
        raise PlanRejected(f"sub-group tile {sgm}x{sgn}x{bk} is not a multiple of the {mma.name} shape "
                           f"{mma.m}x{mma.n}x{mma.k}")
    grid = (sgm // mma.m, sgn // mma.n, bk // mma.k)
    quant = quant_plan(config, mma)
    a_plan, b_plan = choose_loads(config, mma, grid, (sgm, sgn), issuable, quant.b_view if quant else None,
                                  quant.a_view if quant else None)
    c_bits = dtype(t.acc if tile.split_k > 1 else t.c).bits   # split: the slices' partial sums are stored
    c_plan = plan_store(config.atoms.c, c_bits, mma, (sgm, sgn), grid, block2d)
    # stream-K: pieces of tiles are stored as the accumulator, with the planner's own atom
    partial = plan_store(None, dtype(t.acc).bits, mma, (sgm, sgn), grid, block2d) if tile.stream_k else None
    epilogue = EpilogueSpec.of(config)
    try:
        graph = graph_of(config)
    except EpilogueError as exc:
        raise PlanRejected(str(exc)) from None
    aux = plan_auxiliaries(config, graph, c_plan, mma, (sgm, sgn), grid, block2d, issuable) if graph else ()
    reads_c = graph.reads("c") if graph else epilogue.reads_c
    c_in = load_twin(c_plan.atom, issuable) if reads_c and tile.split_k == 1 else None
    if config.pipeline.prefetch:
        a_plan = with_prefetch(a_plan)
        b_plan = with_prefetch(b_plan)
    registers = register_estimate(config, mma, a_plan, b_plan, sgm, sgn)
    budget = config.target.grf
    margin = may_spill_band(mma.n, budget, grid[2])[1]
    registers["verdict"] = register_verdict(registers["total_grf"], budget, grid[2], mma.n)
    if check_registers and registers["verdict"] == "spills":
        width = grf_bytes(mma.n)
        raise PlanRejected(
            f"registers: accumulators {registers['acc_grf']} + A {registers['a_grf']} + B {registers['b_grf']} + "
            + (f"prefetches {registers['prefetch_grf']} + " if registers["prefetch_grf"] else "")
            + (f"reorders {registers['reorder_grf']} + " if registers["reorder_grf"] else "")
            + f"{registers['reserved_grf']} reserved = {registers['total_grf']} GRF > {budget} GRF per thread "
            + (f"of {width} B at sub-group size {sg} " if width != grf_bytes(max(dpas_widths())) else "")
            + f"(sub-group tile {sgm}x{sgn}x{bk}), more than the {margin} GRF over at which measured builds of "
            + chunk_group(mma.n, budget, grid[2]) + " still fit; use a smaller tile"
            + (" or target.grf: 256" if budget < 256 else ""))
    rows, fragments = tile.register_block
    if rows > sgm or fragments > grid[1]:
        raise PlanRejected(f"tile.register_block [{rows}, {fragments}] exceeds the sub-group tile's {sgm} rows x "
                           f"{grid[1]} N-fragments of {mma.name} (0 = all)")
    k_tiles = math.ceil(config.problem.k / bk)
    if tile.split_k > k_tiles:
        raise PlanRejected(f"tile.split_k = {tile.split_k} slices but K = {config.problem.k} has {k_tiles} k-tiles of "
                           f"{bk}: a slice would be empty; split K at most {k_tiles} ways")
    conflict = tile_conflict(tile.split_k, tile.stream_k)
    if conflict:
        raise PlanRejected(conflict)
    iters = stream_k_iterations(config.problem.m, config.problem.n, config.problem.k, tile.workgroup)
    if tile.stream_k > iters:
        raise PlanRejected(f"tile.stream_k = {tile.stream_k} work-groups but a batch has {iters} MAC-loop iterations "
                           f"({math.ceil(config.problem.m / bm)} x {math.ceil(config.problem.n / bn)} tiles of "
                           f"{bm}x{bn} x {k_tiles} k-tiles of {bk}): a work-group would get none; use at most {iters}")
    if why := grouped_violation(config):
        raise PlanRejected(why)
    name = str(KernelName.of_plan(config, mma, a_plan.atom, b_plan.atom, c_plan.atom, epilogue, graph,
                                  quant.name_part if quant else ""))
    return Plan(config, mma, a_plan, b_plan, c_plan, (sgm, sgn), grid, registers, name, epilogue, c_in, partial,
                graph, aux, plan_reductions(config, graph, (sgm, sgn)) if graph else (), quant)

