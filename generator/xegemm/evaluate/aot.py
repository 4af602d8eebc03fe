"""Evaluation ahead of time: compile for a real Xe target with ocloc and check the machine code against the plan.

A build that succeeds proves little on an old compiler (it may drop or mangle messages), so
:class:`IsaObserver` fails a variant (``failed_build``) whose main loop does not issue exactly the planned
dpas and 2D block loads (for the SIMD8 plans of dg2: the 1D sub-group block reads, one per tile row); stores
and prefetches are reported beside their predictions, spills in the reason.  :class:`AotBuilder` admits a
plan only for a target that has its DPAS width (pvc: SIMD16, dg2: SIMD8) and, for 2D block copies, 2D block
messages (:mod:`xegemm.library.targets`).
"""

from __future__ import annotations

from pathlib import Path

from xegemm.aot.build import AotBuild, compile_kernel
from xegemm.aot.isa import CONVERSIONS, MESSAGE_KINDS, IsaStats
from xegemm.aot.toolchain import aot_target
from xegemm.evaluate import Builder, Evaluation, Evaluator, LogObserver, Observer, PlannedVariant
from xegemm.lowering import Lowering
from xegemm.lowering.native import NativeCapabilities, count_messages, lower_copy
from xegemm.plan.planner import Plan

GATED = ("dpas", "load_block2d")                       # must match: the main loop, once
GATED_BLOCK1D = ("load_block1d",)                        # ... and, for 1D block plans, their block reads
REPORTED = ("store_block2d", "store_block1d")            # shown beside the prediction (loop unrolling varies)


def gated(plan: Plan) -> tuple[str, ...]:
    """The counts a plan's machine code must match exactly (a dequantizing plan: also its conversions to f16
    and bf16, :func:`predicted_conversions`)."""
    return GATED + (GATED_BLOCK1D if plan.uses_block1d else ()) + tuple(predicted_conversions(plan) or ())


def predicted_conversions(plan: Plan) -> dict[str, int] | None:
    """A dequantizing plan's f32 -> f16 and f32 -> bf16 conversions in its machine code, one SIMD instruction per
    value of a lane (xegemm.aot.isa.CONVERSIONS), the main loop once: every dequantized element of one k-step to
    the compute type (B: K per k-chunk for each N-fragment; an FP8 A: the rows of each M-fragment), each B
    element's q - z to a float zero's type, and D's values (one per accumulator value of the sub-group tile)
    when D is stored as f16/bf16.  None (not predicted) for plans without quantization and for split K and
    stream-K, whose epilogues take more than one path."""
    if not plan.quant or plan.split_k > 1 or plan.stream_k:
        return None
    mt, nt, kt = plan.mma_grid
    mma, t, spec = plan.mma, plan.config.types, plan.quant.spec
    counts = {kind: 0 for kind in CONVERSIONS}
    counts[f"to_{plan.quant.compute}"] += kt * nt * mma.k + (mt * kt * mma.m if plan.quant.a_spec else 0)
    if f"to_{spec.zero}" in counts:
        counts[f"to_{spec.zero}"] += kt * nt * mma.k
    if f"to_{t.c}" in counts:
        counts[f"to_{t.c}"] += mt * nt * mma.m
    return counts


def predicted_counts(plan: Plan, caps: NativeCapabilities) -> dict:
    """What the kernel's machine code must show: the main loop once (dpas, block loads and prefetches of
    one k-step), the epilogue's loads of C (beta != 0) and its stores; each atom counted as the messages the
    capabilities lower it to."""
    def per_atom(op):
        return count_messages(lower_copy(op.atom, caps))

    a, b, c = per_atom(plan.a), per_atom(plan.b), per_atom(plan.c)
    out = {"dpas": plan.dpas_per_kstep,
           **(predicted_conversions(plan) or {}),
           "load_block2d": plan.a.per_kstep * a["load_block2d"] + plan.b.per_kstep * b["load_block2d"],
           "store_block2d": plan.c.per_kstep * c["store_block2d"],
           "store_block1d": plan.c.per_kstep * c["store_block1d"]}
    if plan.uses_block1d:       # one 1D block read per row of every A and B tile
        out["load_block1d"] = plan.a.per_kstep * a["load_block1d"] + plan.b.per_kstep * b["load_block1d"]
    if plan.c_in is not None:   # the epilogue reads each C tile once with the store's load twin
        c_in = count_messages(lower_copy(plan.c_in, caps))
        for kind in ("load_block2d", "load_block1d"):
            if kind in out:
                out[kind] += plan.c.per_kstep * c_in[kind]
    for aux in plan.aux:        # a traced epilogue's auxiliary matrices: each read or stored once per C tile
        counts = count_messages(lower_copy(aux.atom, caps))
        for kind in (("store_block2d", "store_block1d") if aux.output else ("load_block2d", "load_block1d")):
            if kind in out:
                out[kind] += plan.c.per_kstep * counts[kind]
    if plan.config.pipeline.prefetch:
        pa, pb = count_messages(lower_copy(plan.a.prefetch, caps)), count_messages(lower_copy(plan.b.prefetch, caps))
        out["prefetch_per_kstep"] = {k: plan.a.per_kstep * pa[k] + plan.b.per_kstep * pb[k]
                                     for k in ("prefetch_block2d", "prefetch") if pa[k] or pb[k]}
    return out


def measured_counts(stats: IsaStats) -> dict:
    """The ISA statistics plus every counted message kind (:data:`xegemm.aot.isa.MESSAGE_KINDS`)."""
    return {**stats.to_dict(), **{kind: stats.messages.get(kind, 0) for kind in MESSAGE_KINDS},
            **{kind: stats.conversions.get(kind, 0) for kind in CONVERSIONS}}


class AotBuilder(Builder):
    """Compiles each variant with ocloc for ``target`` into ``out_dir/<name>/`` (GRF mode: ``grf`` or the
    config's)."""

    def __init__(self, target: str, out_dir: Path | str, grf: int | None = None):
        self.target = aot_target(target)
        self.out = Path(out_dir).resolve()
        self.grf = grf

    def admit(self, pv: PlannedVariant) -> str | None:
        hw, p = self.target, pv.plan
        if not p.uses_block1d and not hw.block2d:
            return (f"{hw.name} has no 2D block messages ({hw.arch}) and SIMD{hw.simd} DPAS; this plan uses Xe 2D "
                    f"block copies and SIMD{p.mma.n} DPAS: set tile.subgroup_size: {hw.simd} for 1D sub-group "
                    f"block copies + SIMD{hw.simd} DPAS")
        if p.mma.n != hw.simd:
            return (f"{hw.name} executes DPAS at SIMD{hw.simd}; {p.mma.name} runs at sub-group size {p.mma.n}: set "
                    f"tile.subgroup_size: {hw.simd}")
        return None

    def build(self, pv: PlannedVariant, source: str, evaluation: Evaluation) -> AotBuild | None:
        grf = self.grf or pv.config.target.grf
        work = self.out / pv.name
        build = compile_kernel(source, self.target.name, grf=grf, workdir=work)
        evaluation.extra.update(target=self.target.name, grf=grf, artefacts=str(work))
        if not build.ok:
            evaluation.fail("failed_build", "ocloc rejected the kernel: " +
                            next((ln for ln in build.log.splitlines() if "error" in ln), build.log[-300:]))
            evaluation.build_log = build.log
            return None
        return build


class IsaObserver(Observer):
    """Compares the machine code's message counts with the plan's prediction (``failed_build`` if the gated
    ones differ) and reports spills."""

    def __init__(self, lowering: Lowering):
        self.caps = lowering.capabilities

    def built(self, pv: PlannedVariant, evaluation: Evaluation, kernel: AotBuild) -> None:
        predicted = predicted_counts(pv.plan, self.caps)
        measured = measured_counts(kernel.stats)
        must = gated(pv.plan)
        evaluation.extra.update(isa=kernel.stats.to_dict(), predicted=predicted,
                                measured_messages={k: measured[k] for k in dict.fromkeys((*must, *REPORTED,
                                                                                          *MESSAGE_KINDS))})
        wrong = [f"{k}: ISA has {measured[k]}, the plan needs {predicted[k]}" for k in must if measured[k] != predicted[k]]
        if wrong:
            evaluation.fail("failed_build", "machine code does not match the plan (a message dropped, split or "
                            "unrolled by the compiler): " + "; ".join(wrong))
        registers = pv.plan.registers
        notes = []
        if registers["verdict"] != "fits":     # the estimate could not tell (docs/registers.md): the ISA decides
            over = ">" if registers["total_grf"] > registers["budget_grf"] else "<="
            notes.append(f"register estimate {registers['total_grf']} GRF {over} {registers['budget_grf']}: "
                         f"{registers['verdict']}")
        if measured["spill_bytes"]:
            notes.append(f"spills {measured['spill_bytes']} bytes in {evaluation.extra['grf']}-GRF mode")
        elif notes:
            notes.append("the ISA does not spill")
        if notes:
            evaluation.reason = "; ".join(([evaluation.reason] if evaluation.reason else []) + notes)


def aot_evaluator(lowering: Lowering, target: str, out_dir: Path | str, grf: int | None = None,
                  observers: tuple[Observer, ...] = ()) -> Evaluator:
    """Compile with ocloc, check the ISA against the plan, save failed builds' logs next to their artefacts."""
    builder = AotBuilder(target, out_dir, grf)
    return Evaluator(lowering, builder, [IsaObserver(lowering), LogObserver(builder.out), *observers])
