"""The call API's dispatch: which loaded variant a call runs, whether a variant is legal at a call's shape, and
whether the problem fits the device (docs/use.md, "Shape dispatch").

A :class:`Request` is what a call asks for (M, N, K, batch, types, the layouts its arrays allow, the epilogue).
:meth:`Dispatcher.choose` offers the variants of the request's types and layouts to the ranking rules in turn
(a Gemm's :func:`ranking_rules`: the tuned winner of the shape, the fastest variant measured at the shape, the
variants ranked by the static model for the device (refined by the measurements of the nearest measured shapes,
:mod:`xegemm.model.ranking`), the first one in the sweep's order; :data:`RULES` is the list without a device's
model); the first offered variant that is legal at the shape is the :class:`Choice`, and its rule's reason text
becomes ``gemm.last_kernel.reason``.  A rule is a small object with a name, the candidates it offers and the
reason it gives: a new ranking is one more entry of the list.  A grouped or MoE call takes the first variant
legal as a grouped kernel (:meth:`Dispatcher.choose_grouped`).  :func:`check_memory` checks a choice's buffers
against the device's memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from xegemm.api.errors import AlignmentError, DeviceMemoryError, LayoutError, NoKernelError
from xegemm.config import Config, ConfigError, Variant, expand
from xegemm.config.shapes import Shape
from xegemm.errors import XegemmError
from xegemm.evaluate import lowering_of, plan_variant, render_variant
from xegemm.evaluate.device import device_build_options, local_memory_violation
from xegemm.grouped.problem import GroupedProblem, config_overrides
from xegemm.kernel.arguments import KernelCall
from xegemm.lowering import Lowering
from xegemm.model.ranking import DeviceModel, Estimate, Measurement, estimate
from xegemm.plan.planner import Plan

SINGLE = {"problem.groups": (), "moe.experts": 0, "moe.rows": ()}   # a call is one GEMM, whatever the config's groups
# the persistent walk orders the tiles itself: a loaded variant's split K, stream-K or swizzle gives way to it
WALK_OVERRIDES = {"tile.split_k": 1, "tile.stream_k": 0, "tile.swizzle": 1}


@dataclass(frozen=True)
class Candidate:
    """One variant of the source: its config (at its own problem), and what was measured of it there."""

    index: int
    config: Config
    tuned: bool                 # the tuned winner of its own problem (best.json says so)
    gflops: float | None        # measured at its own problem

    @property
    def shape(self) -> Shape:
        p = self.config.problem
        return Shape(p.m, p.n, p.k, p.batch)


def candidates(config: Config, best: dict) -> list[Candidate]:
    """The variants of a source's config (its sweep expanded, the rejected ones left out) with what ``best``
    (a tune directory's best.json, or {}) measured of them."""
    measured = {}
    for entry in (best.get("shapes") or {}).values():
        if isinstance(entry, dict) and entry.get("best") and entry.get("shape"):
            measured[Shape(**entry["shape"])] = entry["best"].get("gflops") or entry["best"].get("value")
    out = []
    for variant in expand(config):
        if variant.rejected:
            continue
        p = variant.config.problem
        shape = Shape(p.m, p.n, p.k, p.batch)
        out.append(Candidate(len(out), variant.config, shape in measured, measured.get(shape)))
    if not out:
        raise XegemmError(f"{config.source}: every variant of the sweep is rejected by its constraints")
    return out


@dataclass(frozen=True)
class Request:
    """What a call asks of the dispatch: its shape, the registry types of A and B, the layouts its arrays allow,
    and the epilogue (alpha, beta, the bias's kind; a traced epilogue's ``epilogue.inputs``)."""

    m: int
    n: int
    k: int
    batch: int
    type_a: str
    type_b: str
    layouts_a: tuple[str, ...]
    layouts_b: tuple[str, ...]
    alpha: float = 1.0
    beta: float = 0.0
    bias_kind: str = "none"
    inputs: tuple | None = None

    @property
    def shape(self) -> Shape:
        return Shape(self.m, self.n, self.k, self.batch)

    def overrides(self) -> dict:
        """The config overrides that make a variant this call's kernel (one GEMM at the call's shape)."""
        traced = {"epilogue.inputs": self.inputs} if self.inputs is not None else {}
        return {**self.shape.overrides(), **SINGLE, "epilogue.alpha": self.alpha, "epilogue.beta": self.beta,
                "epilogue.bias": self.bias_kind, **traced}


@dataclass(frozen=True)
class Choice:
    """A shape's decision, kept for its later calls: the variant, its config at the shape, the plan's call
    description and sizes, the layouts the operands go up in, the rule that picked it and why, the source."""

    candidate: Candidate
    config: Config
    call: KernelCall
    sizes: dict
    layout_a: str
    layout_b: str
    rule: str
    reason: str
    source: str
    options: str


@dataclass(frozen=True)
class GroupedChoice:
    """A grouped or MoE call's variant: its config planned as a grouped kernel, the call description, the source,
    the reason, the build options."""

    config: Config
    call: KernelCall
    source: str
    reason: str
    options: str


class RankingRule(Protocol):
    """One step of the ranking: offers some of the candidates left by the rules before it, best first; the first
    of them legal at the shape runs, with :meth:`reason` as ``last_kernel.reason`` (its text holds the name)."""

    name: str

    def offer(self, left: list[Candidate], shape: Shape) -> list[Candidate]: ...

    def reason(self, candidate: Candidate, shape: Shape) -> str: ...


class TunedWinner:
    """The variant the tuner found best at exactly this shape."""

    name = "tuned winner"

    def offer(self, left: list[Candidate], shape: Shape) -> list[Candidate]:
        return [c for c in left if c.tuned and c.shape == shape]

    def reason(self, candidate: Candidate, shape: Shape) -> str:
        return f"the {self.name} of {shape.label}"


class FastestMeasured:
    """The variants measured at exactly this shape (GFLOP/s), fastest first."""

    name = "fastest measured"

    def offer(self, left: list[Candidate], shape: Shape) -> list[Candidate]:
        return sorted((c for c in left if c.gflops is not None and c.shape == shape), key=lambda c: -c.gflops)

    def reason(self, candidate: Candidate, shape: Shape) -> str:
        return f"the {self.name} variant legal for {shape.label} ({candidate.gflops:.1f} GFLOP/s there)"


class ModelRanked:
    """Every variant left, ranked by the static model's speed for the device at the call's shape, refined by the
    measurements of the loaded results at their nearest measured shapes (:mod:`xegemm.model.ranking`); ties and
    the variants the model cannot plan keep the sweep's order, the latter after the others."""

    name = "model-ranked"

    def __init__(self, model: DeviceModel, lowering: Lowering | None, candidates: list[Candidate]):
        self.model, self.lowering, self.candidates = model, lowering, candidates
        self._plans: dict[tuple[int, Shape], Plan | None] = {}
        self._ranked: dict[Shape, list[tuple[Candidate, Estimate]]] = {}

    def plan(self, cand: Candidate, shape: Shape) -> Plan | None:
        """The candidate's plan at ``shape`` (one GEMM), or None where the config or the planner refuses it."""
        key = (cand.index, shape)
        if key not in self._plans:
            try:
                config = cand.config.with_overrides({**shape.overrides(), **SINGLE})
            except ConfigError:
                config = None
            self._plans[key] = None if config is None else plan_variant(Variant(config), self.lowering).plan
        return self._plans[key]

    def measurements(self, shape: Shape) -> list[Measurement]:
        """What the loaded results measured, each kernel known by its plan's name at ``shape``."""
        out = []
        for c in self.candidates:
            here, there = self.plan(c, shape), self.plan(c, c.shape)
            if c.gflops and here is not None and there is not None:
                out.append(Measurement(here.name, c.shape, float(c.gflops), self.model.predicted(there)))
        return out

    def offer(self, left: list[Candidate], shape: Shape) -> list[Candidate]:
        plans = {c.index: self.plan(c, shape) for c in left}
        planned = [c for c in left if plans[c.index] is not None]
        measured = self.measurements(shape)
        ranked = [(c, estimate(plans[c.index].name, self.model.predicted(plans[c.index]), shape, measured,
                               self.model.calibrated)) for c in planned]
        ranked.sort(key=lambda ce: -ce[1].value)        # stable: ties keep the sweep's order
        self._ranked[shape] = ranked
        return [c for c, _ in ranked] + [c for c in left if plans[c.index] is None]

    def reason(self, candidate: Candidate, shape: Shape) -> str:
        ranked = self._ranked.get(shape, [])
        mine = next((e for c, e in ranked if c is candidate), None)
        if mine is None:
            return f"{self.name}: variant {candidate.index} for {shape.label} (the model could not plan it)"
        others = [e.value for c, e in ranked if c is not candidate and e.value <= mine.value]
        how = [self.model.describe()]
        if self.model.calibrated and mine.scale == 1.0:
            how.append(f"{mine.value:.1f} GFLOP/s predicted")
        if others and others[0] > 0:
            how.append(f"{mine.value / others[0]:.2f}x the next predicted")
        if mine.basis:
            how.append(mine.basis)
        return (f"{self.name}: variant {candidate.index}, the fastest predicted of those legal for {shape.label} "
                f"({'; '.join(how)})")


class FirstLegal:
    """Every variant left, in the order of the sweep."""

    name = "first variant legal"

    def offer(self, left: list[Candidate], shape: Shape) -> list[Candidate]:
        return list(left)

    def reason(self, candidate: Candidate, shape: Shape) -> str:
        return f"the {self.name} for {shape.label} (no measurement applies)"


RULES: tuple[RankingRule, ...] = (TunedWinner(), FastestMeasured(), FirstLegal())


def ranking_rules(candidates: list[Candidate], info, lowering: Lowering | None) -> tuple[RankingRule, ...]:
    """A Gemm's rules on a device (:class:`xegemm.runtime.DeviceInfo`): the tuned winner of the shape, the fastest
    measured at the shape, the device's model ranking (:class:`ModelRanked`), the first legal variant."""
    return (TunedWinner(), FastestMeasured(), ModelRanked(DeviceModel.of_device(info), lowering, candidates),
            FirstLegal())


class Dispatcher:
    """The choice of variant for a call among a Gemm's candidates, through ``rules`` in order; the rendered
    sources of the plans it has checked are kept (a later shape of the same kernel renders nothing).
    ``local_memory_bytes``: the device's local memory per work-group (0: unknown), which a variant whose lowering
    knows its own need must fit (:func:`xegemm.evaluate.device.local_memory_violation`)."""

    def __init__(self, candidates: list[Candidate], label: str, rules: tuple[RankingRule, ...] = RULES,
                 local_memory_bytes: int = 0):
        self.candidates = candidates
        self.label = label
        self.rules = tuple(rules)
        self.local_memory_bytes = local_memory_bytes
        self._sources: dict[str, str] = {}

    def legal(self, lowering: Lowering, cand: Candidate, overrides: dict) -> tuple[Config, KernelCall, str] | str:
        """(config, call, source) of the candidate with ``overrides`` (the call's shape and epilogue), or the
        reason it is not legal there: the config's checks, the planner's rules, the target's surface rules."""
        try:
            config = cand.config.with_overrides(overrides)
        except ConfigError as exc:
            return f"variant {cand.index}: {exc}"
        pv = plan_variant(Variant(config), lowering)
        if pv.plan is None:
            return f"variant {cand.index}: {pv.reason}"
        too_big = local_memory_violation(lowering_of(pv, lowering).local_memory_bytes(pv.plan), self.local_memory_bytes)
        if too_big:
            return f"variant {cand.index} ({pv.plan.name}): {too_big}"
        try:
            source = self._sources.get(pv.plan.name) or render_variant(pv, lowering)
        except XegemmError as exc:     # the target's surface rules (pitch, width, alignment) or its compiler
            return f"variant {cand.index} ({pv.plan.name}): {exc}"
        self._sources.setdefault(pv.plan.name, source)
        return config, KernelCall.of(pv.plan), self._sources[pv.plan.name]

    def choose(self, lowering: Lowering, request: Request) -> Choice:
        """The variant a call of ``request`` runs, and why; NoKernelError when none is legal for it,
        LayoutError / AlignmentError when the layouts or the target's rules rule them all out."""
        r, shape = request, request.shape
        typed = [c for c in self.candidates if (c.config.types.a, c.config.types.b) == (r.type_a, r.type_b)]
        fits = [c for c in typed if c.config.layout.a in r.layouts_a and c.config.layout.b in r.layouts_b]
        if not fits:
            have = sorted({(c.config.layout.a, c.config.layout.b) for c in typed})
            given = f"A {'/'.join(r.layouts_a)}-major, B {'/'.join(r.layouts_b)}-major"
            raise LayoutError(f"the loaded kernels for {r.type_a} x {r.type_b} take (A, B) layouts "
                              f"{', '.join(f'({x}, {y})' for x, y in have)}; the call gives {given} "
                              "(C-ordered arrays are row-major, F-ordered ones column-major)")
        why_not, left, overrides = [], fits, r.overrides()
        for rule in self.rules:
            offered = rule.offer(left, shape)
            left = [c for c in left if c not in offered]
            for cand in offered:
                found = self.legal(lowering, cand, overrides)
                if isinstance(found, str):
                    why_not.append(found)
                    continue
                config, call, source = found
                return Choice(cand, config, call, call.sizes(r.m, r.n, r.k, r.batch), config.layout.a,
                              config.layout.b, rule.name, rule.reason(cand, shape), source,
                              device_build_options(lowering, config))
        surface = [w for w in why_not if "pitch" in w or "aligned" in w or "wide" in w]
        cls = AlignmentError if surface and len(surface) == len(why_not) else NoKernelError
        raise cls(f"no loaded variant can run {shape.label} ({r.type_a} x {r.type_b}): " + "; ".join(why_not))

    def choose_grouped(self, lowering: Lowering, problem: GroupedProblem, type_a: str, type_b: str, layouts_a,
                       layouts_b, alpha: float, beta: float, bias_kind: str) -> GroupedChoice:
        """The first variant of these types and layouts legal as a grouped kernel with this epilogue (its split K,
        stream-K and swizzle giving way to the persistent walk); NoKernelError, with each variant's reason, when
        none is."""
        why_not = []
        overrides = {**config_overrides(problem), **WALK_OVERRIDES, "epilogue.alpha": alpha, "epilogue.beta": beta,
                     "epilogue.bias": bias_kind}
        for cand in self.candidates:
            c = cand.config
            if (c.types.a, c.types.b) != (type_a, type_b) or c.layout.a not in layouts_a or c.layout.b not in layouts_b:
                continue
            found = self.legal(lowering, cand, overrides)
            if isinstance(found, str):
                why_not.append(found)
                continue
            config, call, source = found
            return GroupedChoice(config, call, source, f"the first variant legal as a grouped kernel "
                                 f"(variant {cand.index} of {self.label})", device_build_options(lowering, config))
        have = sorted({(c.config.layout.a, c.config.layout.b) for c in self.candidates})
        raise NoKernelError(f"no loaded variant runs a grouped {type_a} x {type_b} GEMM with A "
                            f"{'/'.join(layouts_a)}-major and B {'/'.join(layouts_b)}-major"
                            + (": " + "; ".join(why_not) if why_not else
                               f" (the loaded variants take (A, B) layouts {', '.join(map(str, have))})"))


def check_memory(choice: Choice, info, sycl_device, device_operands: bool) -> None:
    """DeviceMemoryError when A, B, C, D and the workspace of ``choice`` exceed the device's global memory, or
    (for operands the call uploads) one buffer exceeds its largest allocation."""
    p, t, s = choice.config.problem, choice.config.types, choice.sizes
    parts = {"A": s["stride_a"] * p.batch, "B": s["stride_b"] * p.batch, "D": s["stride_c"] * p.batch,
             "C": s["stride_c"] * p.batch if choice.config.epilogue.beta else 0,
             "workspace": s["workspace_bytes"]}
    total = sum(parts.values())
    limit = info.global_mem_bytes
    largest = max(parts, key=parts.get)
    per_buffer = int(getattr(sycl_device, "max_mem_alloc_size", 0) or 0)
    shape = Shape(p.m, p.n, p.k, p.batch).label
    if limit and total > limit:
        raise DeviceMemoryError(f"{shape} ({t.a} x {t.b} -> {t.c}) needs {total / 2**30:.1f} GiB on the device "
                                f"({', '.join(f'{k} {v / 2**30:.1f}' for k, v in parts.items() if v)} GiB); "
                                f"{info.filter_string} has {limit / 2**30:.1f} GiB")
    if per_buffer and parts[largest] > per_buffer and not device_operands:
        raise DeviceMemoryError(f"{shape}: {largest} needs {parts[largest] / 2**30:.1f} GiB in one buffer; "
                                f"{info.filter_string} allocates at most {per_buffer / 2**30:.1f} GiB each")
