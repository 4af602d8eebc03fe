"""Evaluation ahead of time: compile for a real Xe target with ocloc and check the machine code against the plan.

A build that succeeds proves little on an old compiler (it may drop or mangle messages), so
:class:`IsaObserver` fails a variant (``failed_build``) whose main loop does not issue exactly the planned
dpas and 2D block loads (for the SIMD8 plans of dg2: the 1D sub-group block reads, one per tile row) and, for a
dequantizing plan, its conversions, and whose epilogue's stores or any kind of prefetch differ from the plan.
The GRF mode asked, spills and the disassembly's instruction count (equal to IGC's dump's) are checked and
reported; every figure is in the variant's ``gates`` (:func:`isa_gates`) and on the console
(:class:`IsaConsoleObserver`), with the reason where it differs.  :class:`AotBuilder` admits a plan only for a target that has its DPAS width (pvc, bmg, lnl, ptl:
SIMD16, dg2: SIMD8) and, for 2D block copies, 2D block messages (:mod:`xegemm.library.targets`), and builds with
the compiler chosen for the target (xegemm.aot.toolchain.build_compiler).
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

from xegemm.aot.build import AotBuild, compile_kernel
from xegemm.aot.isa import CONVERSIONS, MESSAGE_KINDS, IsaStats
from xegemm.aot.toolchain import aot_target, build_compiler, find_ocloc
from xegemm.evaluate import Builder, Evaluation, Evaluator, LogObserver, Observer, PlannedVariant
from xegemm.errors import XegemmError
from xegemm.lowering import Lowering
from xegemm.lowering.coopmat import DIALECTS, probe_kernel, render_kernel
from xegemm.lowering.native import NativeCapabilities, count_messages, lower_copy
from xegemm.plan.planner import Plan
from xegemm.runtime.spirv import assemble

GATED = ("dpas", "load_block2d")                       # must match: the main loop, once
GATED_BLOCK1D = ("load_block1d",)                        # ... and, for 1D block plans, their block reads
REPORTED = ("store_block2d", "store_block1d")            # the epilogue's stores (and stream-K's workspace stores)


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
    if plan.partial is not None:    # stream-K: a piece of a tile goes to the workspace as accumulators instead
        partial = count_messages(lower_copy(plan.partial.atom, caps))
        for kind in ("store_block2d", "store_block1d"):
            out[kind] += plan.partial.per_kstep * partial[kind]
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
            **{kind: stats.conversions.get(kind, 0) for kind in CONVERSIONS},
            **({"dpas_workaround": stats.dpas_workaround} if stats.dpas_workaround else {})}


def predicted_prefetches(plan: Plan, predicted: dict) -> int | None:
    """All prefetch messages of the kernel: one k-step's (``prefetch_per_kstep``) in the loop and in each of the
    prologue's ``pipeline.prefetch`` k-tiles (templates/gemm.cl.j2); None without prefetch."""
    per = predicted.get("prefetch_per_kstep")
    if not per:
        return None
    return sum(per.values()) * (plan.config.pipeline.prefetch + 1)


def isa_gates(plan: Plan, predicted: dict, measured: dict, stats: IsaStats, grf: int) -> dict[str, dict]:
    """Each figure of the machine code against what the plan asks: name -> ``{"isa", "plan", "ok", "gate"}``;
    ``gate`` says whether a difference fails the build: the messages (the main loop's dpas and block loads, the
    stores, every kind of prefetch) and, predicted, the conversions; the GRF mode, spills and the dump's
    instruction count are reported (a spilling kernel is a slow kernel, not a wrong one: the tuner scores it)."""
    out: dict[str, dict] = {}
    hard = (*gated(plan), *REPORTED)
    for kind in (*hard, *REPORTED):
        if kind in predicted:
            out[kind] = {"isa": measured[kind], "plan": predicted[kind], "ok": measured[kind] == predicted[kind],
                         "gate": kind in hard}
    if measured.get("dpas_workaround") and "dpas" in out:
        # IGC's dummy DPAS of the read-suppression workaround (dg2, IGC 2.x; xegemm.aot.isa): shown, not counted
        out["dpas"]["workaround"] = measured["dpas_workaround"]
    want = predicted_prefetches(plan, predicted)
    if want is not None:
        # The prologue's loop over its k-tiles is the compiler's to unroll, keep rolled or peel (seen with IGC 2.40:
        # a split-K kernel's kept rolled, 6 of 9; a transposed-B kernel's first A prefetch peeled, 16 of 15), so
        # the count in the code is checked as "every kind of prefetch of a k-step is there", and shown beside the
        # fully unrolled count.
        have = measured["prefetch_block2d"] + measured["prefetch"]
        present = all(measured[kind] >= n for kind, n in predicted["prefetch_per_kstep"].items())
        out["prefetch"] = {"isa": have, "plan": want, "ok": present, "exact": have == want, "gate": True}
    out["grf"] = {"isa": stats.grf, "plan": grf, "ok": stats.grf == grf, "gate": False}
    out["spill_bytes"] = {"isa": stats.spill_bytes, "plan": 0, "ok": stats.spill_bytes == 0, "gate": False}
    out["instructions"] = {"isa": stats.instructions, "plan": "= dump", "ok": stats.dump_exact is True,
                           "gate": False}
    return out


def _gate_reason(name: str, g: dict) -> str:
    if name == "instructions":
        return "the disassembly's instruction count differs from IGC's dump (" + \
            ("no dump matched" if g["isa"] is None else "a retried or inlined kernel") + ")"
    if name == "spill_bytes":
        return "no spill information (no dump)" if g["isa"] is None else f"spills {g['isa']} bytes"
    if name == "grf":
        return f"the compiler gave {g['isa']} registers per thread, {g['plan']} asked"
    if name == "prefetch":
        return f"prefetch: ISA has {g['isa']}, fewer of a kind than one k-step's (a prefetch dropped)"
    return f"{name}: ISA has {g['isa']}, the plan needs {g['plan']}"


def gate_line(gates: dict[str, dict], sends: int | None = None) -> str:
    """One line of the figures, ``isa/plan``, the sends, and the reason of every difference."""
    short = {"load_block2d": "load2d", "store_block2d": "store2d", "store_block1d": "store1d",
             "load_block1d": "load1d", "spill_bytes": "spills"}
    parts = []
    for name, g in gates.items():
        if name == "instructions":
            continue
        if name == "spill_bytes":
            parts.append(f"spills {g['isa'] if g['isa'] is not None else '?'}")
        else:
            loop = " (prologue loop not unrolled as counted)" if g.get("exact") is False and g["ok"] else ""
            if g.get("workaround"):
                loop = f" (+{g['workaround']} IGC workaround dpas)"
            parts.append(f"{short.get(name, name)} {g['isa']}/{g['plan']}{loop}")
    if sends is not None:
        parts.append(f"sends {sends}")
    if "instructions" in gates:
        parts.append(f"instructions {gates['instructions']['isa']}")
    wrong = [_gate_reason(n, g) for n, g in gates.items() if not g["ok"]]
    return "  ".join(parts) + (f"  -- differs: {'; '.join(wrong)}" if wrong else "")


def coopmat_dialect(target: str, compiler: str | None) -> str:
    """The SPIR-V dialect of cooperative matrices ``compiler`` builds for ``target``
    (xegemm.lowering.coopmat.DIALECTS): the first whose known-good probe kernel (coopmat.probe_kernel) compiles and
    issues its dpas; measured: IGC 2.x takes khr, Debian 12's IGC 1.0.12504 only legacy (it refuses the KHR
    opcodes, docs/lowerings.md "coopmat").  Probed once per process, compiler and target; XegemmError naming both
    failures when neither builds."""
    return _dialect(target, str(find_ocloc(compiler) or compiler), compiler)


@functools.lru_cache(maxsize=None)
def _dialect(target: str, ocloc: str, compiler: str | None) -> str:
    failures = []
    for dialect in DIALECTS:
        source = render_kernel(probe_kernel(dialect))
        with tempfile.TemporaryDirectory(prefix="xegemm-dialect-") as work:
            build = compile_kernel(source, target, workdir=Path(work), dumps=False, compiler=compiler,
                                   il=assemble(source))
        if build.ok and build.stats.dpas:
            return dialect
        failures.append(f"{dialect}: " + ("no dpas in its machine code" if build.ok else
                                          next((ln for ln in build.log.splitlines() if "rror" in ln),
                                               build.log.strip()[-200:] or "exit status without a message")))
    raise XegemmError(f"the compiler ({ocloc}) builds no cooperative-matrix SPIR-V for {target}: "
                      + "; ".join(failures))


class AotBuilder(Builder):
    """Compiles each variant with ocloc for ``target`` into ``out_dir/<name>/`` (GRF mode: ``grf`` or the
    config's) with ``compiler`` (``system``, ``current``, a path; None: the first that knows the target)."""

    def __init__(self, target: str, out_dir: Path | str, grf: int | None = None, lowering: Lowering | None = None,
                 compiler: str | None = None):
        self.lowering = lowering
        # SPIR-V cooperative matrices (the coopmat lowering): rendered in the dialect the compiler takes
        # (coopmat_dialect: the current compiler KHR, Debian 12's legacy; docs/lowerings.md "coopmat")
        self.spirv = lowering is not None and lowering.source_kind == "spirv"
        if self.spirv:    # the current compiler where installed (the KHR dialect), else the system one
            self.compiler = compiler or ("current" if find_ocloc("current") else "system" if find_ocloc("system")
                                         else None)
        else:
            self.compiler = build_compiler(target, compiler)
        self.target = aot_target(target, self.compiler)
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
        il = None
        if self.spirv:
            if self.compiler is None:
                evaluation.fail("failed_build", "the coopmat lowering's GPU build needs ocloc (`make ocloc-current` "
                                "for the current compiler, or Debian's intel-opencl-icd)")
                return None
            il = assemble(source)
            evaluation.extra["compiler"] = self.compiler
        build = compile_kernel(source, self.target.name, grf=grf, workdir=work, compiler=self.compiler, il=il)
        evaluation.extra.update(target=self.target.name, grf=grf, artefacts=str(work), compiler=self.compiler)
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
        self.lowering = lowering

    def built(self, pv: PlannedVariant, evaluation: Evaluation, kernel: AotBuild) -> None:
        if self.lowering.source_kind == "spirv":
            self._coopmat(pv, evaluation, kernel)
            return
        predicted = predicted_counts(pv.plan, self.caps)
        measured = measured_counts(kernel.stats)
        must = gated(pv.plan)
        gates = isa_gates(pv.plan, predicted, measured, kernel.stats, evaluation.extra["grf"])
        evaluation.extra.update(isa=kernel.stats.to_dict(), predicted=predicted,
                                measured_messages={k: measured[k] for k in dict.fromkeys(
                                    (*must, *REPORTED, "prefetch", *MESSAGE_KINDS)) if k in measured},
                                gates=gates, isa_line=gate_line(gates, kernel.stats.sends))
        wrong = [_gate_reason(k, g) for k, g in gates.items() if g["gate"] and not g["ok"]]
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


    def _coopmat(self, pv: PlannedVariant, evaluation: Evaluation, kernel: AotBuild) -> None:
        """A coopmat kernel's gates: one dpas per coop-matrix multiply-add of its k-step bodies
        (``CoopmatKernel.k_step_bodies`` x mt x nt), no spill; the 2D block loads the compiler issued for the
        interior body's global tiles are reported beside the mt + nt it could (staged tiles come from local memory)."""
        k = self.lowering.kernel_of(pv.plan)
        stats = kernel.stats
        predicted = {"dpas": k.k_step_bodies * k.mt * k.nt, "load_block2d": k.mt + k.nt, "spill_bytes": 0}
        spills = "?" if stats.spill_bytes is None else stats.spill_bytes
        line = (f"dpas {stats.dpas}/{predicted['dpas']}  load2d {stats.load_block2d} (global tiles "
                f"{predicted['load_block2d']})  store2d {stats.store_block2d}  grf {stats.grf}/{evaluation.extra['grf']}"
                f"  spills {spills}  sends {stats.sends}  instructions {stats.instructions}")
        evaluation.extra.update(isa=stats.to_dict(), predicted=predicted,
                                measured_messages={"dpas": stats.dpas, "load_block2d": stats.load_block2d,
                                                   "store_block2d": stats.store_block2d}, isa_line=line)
        wrong = [f"dpas: ISA has {stats.dpas}, the kernel's multiply-adds are {predicted['dpas']}"] \
            if stats.dpas != predicted["dpas"] else []
        if stats.spill_bytes:
            wrong.append(f"spills {stats.spill_bytes} bytes in {evaluation.extra['grf']}-GRF mode")
        if wrong:
            evaluation.fail("failed_build", "machine code does not match the coopmat kernel: " + "; ".join(wrong))
            return
        evaluation.reason = (f"{stats.dpas} dpas, {stats.load_block2d} 2D block loads (the interior k-step's "
                             f"{predicted['load_block2d']} global tiles), no spill")


class IsaConsoleObserver(Observer):
    """Prints, after each built variant, its ISA figures beside the plan's (:func:`gate_line`) to ``stream``."""

    def __init__(self, stream):
        self.stream = stream

    def finished(self, pv: PlannedVariant, evaluation: Evaluation) -> None:
        line = evaluation.extra.get("isa_line")
        if self.stream is not None and line:
            print(f"    {line}", file=self.stream, flush=True)


def aot_evaluator(lowering: Lowering, target: str, out_dir: Path | str, grf: int | None = None,
                  observers: tuple[Observer, ...] = (), compiler: str | None = None) -> Evaluator:
    """Compile with ocloc, check the ISA against the plan, save failed builds' logs next to their artefacts."""
    builder = AotBuilder(target, out_dir, grf, lowering, compiler)
    return Evaluator(lowering, builder, [IsaObserver(lowering), LogObserver(builder.out), *observers])
