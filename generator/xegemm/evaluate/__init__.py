"""The evaluation layer: one planned variant is rendered once, built, then checked and measured by observers.

``xegemm generate``, ``run`` and ``build``, the benchmarks and the tuner all evaluate variants through an
:class:`Evaluator`:

    render (once, in the evaluator's lowering) -> build (a :class:`Builder`) -> observers, in order

- Builders: :class:`xegemm.evaluate.device.DeviceBuilder` (an OpenCL C program on a SYCL device through
  dpctl), :class:`xegemm.evaluate.aot.AotBuilder` (ocloc for a real Xe target, no device needed), and
  :class:`SourceWriter` (the source file only: ``generate``).
- Observers see each built kernel and may check it (verification, ISA against the plan: a failed check sets
  the status), measure it (timing), or record what happened (logs, progress lines, the results journal).
  They are small classes with two hooks, :meth:`Observer.built` and :meth:`Observer.finished`, in the
  manner of Kernel Tuner's observers.

Every outcome is one of :data:`STATUSES`; a variant that is not ``ok``/``generated`` carries a reason.  The record of
an outcome, :class:`Evaluation`, and the status words live in :mod:`xegemm.library.record` (re-exported here).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from xegemm.config import Config, Variant, expand
from xegemm.epilogues.fixed import EpilogueSpec
from xegemm.epilogues.config import graph_of
from xegemm.errors import XegemmError
from xegemm.grouped.problem import from_config
from xegemm.plan.kernel_name import KernelName
from xegemm.lowering import Lowering, variant_lowering
from xegemm.plan.planner import Plan, PlanRejected, plan
from xegemm.kernel.render import render_kernel
from xegemm.files import write_text_atomic
from xegemm.library.record import PASSED, STATUSES, Evaluation  # noqa: F401 - re-exported: the evaluation layer's words


@dataclass
class PlannedVariant:
    """One variant of a config with its plan, or the reason it was rejected."""

    variant: Variant
    plan: Plan | None
    reason: str | None

    @property
    def config(self) -> Config:
        return self.variant.config

    @property
    def name(self) -> str:
        if self.plan is not None:
            return self.plan.name
        digest = hashlib.sha256(json.dumps(self.config.to_dict(), sort_keys=True).encode()).hexdigest()[:6]
        return str(KernelName.of_config(self.config, rejected=digest))


def plan_variant(variant: Variant, lowering: Lowering | None = None) -> PlannedVariant:
    """Plan one variant (for ``lowering``: preferring the atoms it can issue): its plan, or why a constraint, the
    planner or an atom model rejects it."""
    if variant.rejected:
        return PlannedVariant(variant, None, variant.rejected)
    try:
        if lowering is not None:       # the variant's own (target.lowering), written in when the lowering is pinned
            lowering = variant_lowering(lowering, variant.config.target.lowering)
            if lowering.pinned and variant.config.target.lowering is None:
                variant = replace(variant, config=variant.config.with_overrides({"target.lowering": lowering.name}))
        return PlannedVariant(variant, plan(variant.config, lowering.issues if lowering else None), None)
    except XegemmError as exc:   # PlanRejected, or an atom the model rejects (AtomError, MmaAtomError, ...)
        return PlannedVariant(variant, None, str(exc))


def plan_variants(config: Config, lowering: Lowering | None = None) -> list[PlannedVariant]:
    """Expand a config's sweep and plan every variant for ``lowering`` (rejections carry their reason)."""
    out, seen = [], set()
    for variant in expand(config):
        pv = plan_variant(variant, lowering)
        if pv.plan is not None:
            key = (pv.plan.name, variant.config.problem, variant.config.verify, variant.config.profile)
            if key in seen:   # two sweep points that resolve to the same kernel on the same problem
                continue
            seen.add(key)
        out.append(pv)
    return out


def params_of(config: Config) -> dict:
    """The tunable parameters of a resolved config, flat (the columns a profiler CSV would have)."""
    t, lay, tile = config.types, config.layout, config.tile
    p = config.problem
    return {"m": p.m, "n": p.n, "k": p.k, "batch": p.batch,
            "a": t.a, "b": t.b, "acc": t.acc, "c": t.c, "layout": f"{lay.a}/{lay.b}/{lay.c}",
            "wg_m": tile.workgroup[0], "wg_n": tile.workgroup[1], "wg_k": tile.workgroup[2],
            "sg_m": tile.subgroups[0], "sg_n": tile.subgroups[1], "subgroup_size": tile.subgroup_size,
            "prefetch": config.pipeline.prefetch, "grf": config.target.grf, "split_k": tile.split_k,
            "stream_k": tile.stream_k, "swizzle": tile.swizzle,
            "register_block": "x".join(map(str, tile.register_block)) if any(tile.register_block) else "all",
            "epilogue": _epilogue_param(config),
            "atom_mma": config.atoms.mma, "atom_a": config.atoms.a, "atom_b": config.atoms.b,
            "atom_c": config.atoms.c,
            # a grouped or MoE launch: its groups (the report's problem is the whole launch)
            **({"groups": grouped_problem.label} if (grouped_problem := from_config(config)) else {})}


def _epilogue_param(config: Config) -> str:
    """The epilogue as its kernel-name part: ``beta_biascol_relu``, a traced one's ``epi_<tag>_<key>`` (its
    function's reference when it cannot be traced), or ``none``."""
    if not config.epilogue.traced:
        return "_".join(EpilogueSpec.of(config).name_parts()) or "none"
    try:
        return graph_of(config).name_suffix().removeprefix("_")
    except XegemmError:
        fn = config.epilogue.function
        return f"epi_{fn if isinstance(fn, str) else getattr(fn, '__qualname__', 'function')}"


def lowering_of(pv: PlannedVariant, lowering: Lowering) -> Lowering:
    """The lowering a variant is rendered and built in: the command's, or the one its config pins."""
    return variant_lowering(lowering, pv.config.target.lowering)


def render_variant(pv: PlannedVariant, lowering: Lowering) -> str:
    """The source a device builds for one planned variant in its lowering (:func:`lowering_of`; PlanRejected when
    the lowering cannot express it): the rendered kernel, after the emulation of its builtins when the lowering
    emulates them (Lowering.device_source)."""
    if pv.plan is None:
        raise XegemmError(f"variant {pv.name} was rejected: {pv.reason}")
    low = lowering_of(pv, lowering)
    return low.device_source(render_kernel(pv.plan, low))


class Observer:
    """A plug-in of the evaluation: sees each built kernel, and each finished evaluation."""

    def built(self, pv: PlannedVariant, evaluation: Evaluation, kernel: Any) -> None:
        """Called in order after a successful build with the builder's kernel; may check, measure or fail it."""

    def finished(self, pv: PlannedVariant, evaluation: Evaluation) -> None:
        """Called once per variant when its evaluation is complete (whatever the status)."""


class Builder:
    """Turns a rendered source into a kernel the observers can use, or fails the evaluation."""

    def admit(self, pv: PlannedVariant) -> str | None:
        """Why this builder cannot take a planned variant at all (then it is ``rejected`` unrendered), or None."""
        return None

    def build(self, pv: PlannedVariant, source: str, evaluation: Evaluation) -> Any:
        raise NotImplementedError


class SourceWriter(Builder):
    """``generate``'s builder: writes ``<name>.cl`` (``.spvasm`` in the coopmat lowering) into a directory;
    nothing is compiled.

    A kernel takes M, N and K at run time, so the variants of a problem sweep share one file per kernel: the
    first variant writes it (its header names that variant's problem), the others record the same path."""

    def __init__(self, out_dir: Path | str, lowering: Lowering | None = None):
        self.out = Path(out_dir)
        self.lowering = lowering
        self.written: set[str] = set()

    def build(self, pv: PlannedVariant, source: str, evaluation: Evaluation) -> Path:
        suffix = lowering_of(pv, self.lowering).source_suffix if self.lowering is not None else ".cl"
        path = self.out / f"{pv.name}{suffix}"
        if pv.name not in self.written:
            write_text_atomic(path, source)
            self.written.add(pv.name)
        evaluation.status = "generated"
        evaluation.extra["path"] = path.name
        return path


class LogObserver(Observer):
    """Saves each failed build's compiler log as ``<log_dir>/<name>.log`` and records its path."""

    def __init__(self, log_dir: Path | str):
        self.log_dir = Path(log_dir)

    def finished(self, pv: PlannedVariant, evaluation: Evaluation) -> None:
        if evaluation.build_log and evaluation.status == "failed_build":
            path = self.log_dir / f"{pv.name}.log"
            write_text_atomic(path, evaluation.build_log)
            evaluation.log = str(path)


class ProgressObserver(Observer):
    """Prints ``[i/n] name: status ...`` after each variant (to a stream; nothing when ``stream`` is None)."""

    def __init__(self, stream, total: int):
        self.stream, self.total, self.done = stream, total, 0

    def finished(self, pv: PlannedVariant, evaluation: Evaluation) -> None:
        self.done += 1
        if self.stream is None:
            return
        speed = (f" {evaluation.gflops:.1f} GFLOP/s, median {evaluation.median_ms:.3f} ms"
                 if evaluation.gflops is not None else "")
        why = f" - {evaluation.reason}" if evaluation.reason else ""
        problem = pv.config.problem.label
        print(f"[{self.done}/{self.total}] {pv.name} ({problem}): {evaluation.status}{speed}{why}", file=self.stream,
              flush=True)


class Evaluator:
    """Evaluates planned variants in one lowering with one builder and a chain of observers."""

    def __init__(self, lowering: Lowering, builder: Builder, observers: tuple[Observer, ...] | list = ()):
        self.lowering = lowering
        self.builder = builder
        self.observers = list(observers)

    def source(self, pv: PlannedVariant) -> str | None:
        """The rendered source of a variant (None when it is rejected before or while rendering)."""
        try:
            return render_variant(pv, self.lowering) if pv.plan is not None else None
        except PlanRejected:
            return None

    def evaluate(self, pv: PlannedVariant, source: str | None = None) -> Evaluation:
        """Render (unless ``source`` is given: render once, e.g. for a resume key), build, observe."""
        evaluation = Evaluation(pv.name, "ok", None, params_of(pv.config))
        source = self._evaluate(pv, source, evaluation)
        rebuild = getattr(self.builder, "rebuild", None)
        if evaluation.status == "failed_verify" and evaluation.extra.get("build_cached") and rebuild is not None:
            # the program came from the persistent program cache: its binary, not the kernel, may be wrong
            why = evaluation.reason
            rebuild(pv, source, why)
            evaluation = Evaluation(pv.name, "ok", None, params_of(pv.config))
            self._evaluate(pv, source, evaluation)
            evaluation.extra["cache_discarded"] = (f"the program loaded from the program cache failed verification "
                                                   f"({why}); it was discarded and the kernel rebuilt from source")
        for observer in self.observers:
            observer.finished(pv, evaluation)
        return evaluation

    def _evaluate(self, pv: PlannedVariant, source: str | None, evaluation: Evaluation) -> str | None:
        """Build and observe one variant into ``evaluation``; the source it built (None: rejected first)."""
        why = pv.reason if pv.plan is None else self.builder.admit(pv)
        if why is not None:
            evaluation.fail("rejected", why)
            return None
        if source is None:
            try:
                source = render_variant(pv, self.lowering)
            except PlanRejected as exc:
                evaluation.fail("rejected", str(exc))
                return None
        evaluation.plan = pv.plan.summary()
        evaluation.source_sha256 = Evaluation.digest(source)
        kernel = self.builder.build(pv, source, evaluation)
        for observer in self.observers:
            if not evaluation.passed:
                break
            observer.built(pv, evaluation, kernel)
        return source
