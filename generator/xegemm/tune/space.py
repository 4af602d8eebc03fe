"""The tuning space of one shape: a config's sweep as Optuna parameters, and each point pruned before any build.

Each sweep axis (``tile``, ``pipeline.prefetch``, ...; the ``problem`` axes are shapes, not parameters)
becomes one categorical parameter whose choices are *labels*: the value itself when it is a number or a
word, else its compact JSON (``{"subgroups":[2,2],"workgroup":[64,64,32]}``).  :meth:`TuneSpace.candidate`
turns a trial's labels into a :class:`Candidate`: the variant, its plan and rendered source, or the reason it
is pruned (a constraint, the planner's legality and register estimate, the lowering, the builder), so a
pruned point is recorded with its reason and never compiled.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Mapping

from optuna.distributions import CategoricalDistribution

from xegemm.config import Config, SearchSpace
from xegemm.config.schema import plain_data
from xegemm.evaluate import PlannedVariant, plan_variant, render_variant
from xegemm.lowering import Lowering
from xegemm.plan.planner import PlanRejected
from xegemm.config.shapes import Shape, is_problem_axis

Label = Any   # int | float | str | bool | None: what Optuna stores for a categorical choice


def choice_label(choice: Any) -> Label:
    """The label of one sweep choice (Optuna categorical values must be plain scalars)."""
    if choice is None or isinstance(choice, (bool, int, float, str)):
        return choice
    return json.dumps(plain_data(choice), sort_keys=True, separators=(",", ":"))


def point_key(params: Mapping[str, Label]) -> str:
    """The identity of a point within a shape: what the claim table and the trials are keyed by."""
    return hashlib.sha256(json.dumps(dict(sorted(params.items())), sort_keys=True).encode()).hexdigest()[:20]


@dataclass
class Candidate:
    """One point of one shape: its labels, its planned variant, its source, or why it is pruned."""

    shape: Shape
    params: dict[str, Label]
    key: str
    planned: PlannedVariant
    source: str | None
    reason: str | None

    @property
    def pruned(self) -> bool:
        return self.reason is not None


class TuneSpace:
    """A config's tuning axes for one shape, in one lowering (``admit``: the builder's own veto, or None)."""

    def __init__(self, config: Config, shape: Shape, lowering: Lowering,
                 admit: Callable[[PlannedVariant], str | None] | None = None):
        axes = {axis: choices for axis, choices in config.sweep.items() if not is_problem_axis(axis)}
        self.shape = shape
        self.lowering = lowering
        self.admit = admit
        self.search = SearchSpace(replace(config, sweep=axes).with_overrides(shape.overrides()))
        self.choices: dict[str, dict[Label, Any]] = {
            axis: {choice_label(choice): choice for choice in choices} for axis, choices in self.search.axes.items()}

    @property
    def size(self) -> int:
        """How many distinct points (label combinations) the space has."""
        return math.prod(len(labels) for labels in self.choices.values())

    def grid(self) -> dict[str, list[Label]]:
        """Every axis with its labels (Optuna's GridSampler search space)."""
        return {axis: list(labels) for axis, labels in self.choices.items()}

    def distributions(self) -> dict[str, CategoricalDistribution]:
        return {axis: CategoricalDistribution(labels) for axis, labels in self.grid().items()}

    def all_params(self) -> Iterator[dict[str, Label]]:
        """Every point's labels, in the sweep's order (last axis fastest)."""
        for point in self.search:
            yield {axis: choice_label(choice) for axis, choice in point.items()}

    def key(self, params: Mapping[str, Label]) -> str:
        """The point key of a trial's labels."""
        return point_key({axis: params[axis] for axis in self.choices})

    def candidate(self, params: Mapping[str, Label]) -> Candidate:
        """Resolve, plan, render and admit one point; anything that rules it out is its reason."""
        point = {axis: self.choices[axis][params[axis]] for axis in self.choices}
        labels = {axis: params[axis] for axis in self.choices}
        pv = plan_variant(self.search.variant(point))
        source, reason = None, pv.reason
        if reason is None and self.admit is not None:
            reason = self.admit(pv)
        if reason is None:
            try:
                source = render_variant(pv, self.lowering)
            except PlanRejected as exc:
                reason = str(exc)
        return Candidate(self.shape, labels, point_key(labels), pv, source, reason)
