"""The tuning space of one shape: a config's sweep as Optuna parameters, and each point pruned before any build.

Each sweep axis (``tile``, ``pipeline.prefetch``, ...; the ``problem`` axes are shapes, not parameters) is
given to Optuna as categorical parameters whose choices are *labels*: the value itself when it is a number or
a word, ``64x64x32`` for a list of numbers, else its compact JSON.  A section axis whose choices are mappings
(``tile: [{workgroup: [64, 64, 32], subgroups: [2, 2]}, ...]``) is one parameter per field that varies among
its choices (``tile.workgroup`` = ``64x64x32``, ``tile.subgroups`` = ``2x2``), so optuna-dashboard plots and
ranks each field on its own axis.  The space is still the sweep's points: a combination of field labels that
is none of the axis's choices (a sampler such as TPE proposes from the product) is *outside the sweep*
(:meth:`TuneSpace.point` returns None) and never a point.  Studies made before the split (``fields=False``:
one parameter per axis, a mapping as its JSON) are read as they were made.

:meth:`TuneSpace.candidate` turns a trial's labels into a :class:`Candidate`: the variant, its plan and
rendered source, or the reason it is pruned (a constraint, the planner's legality and register estimate, the
lowering, the builder), so a pruned point is recorded with its reason and never compiled.
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
_OUTSIDE = object()


def choice_label(choice: Any) -> Label:
    """The label of one sweep choice as studies made before the field split stored it (Optuna categorical
    values must be plain scalars): the value, or its compact JSON."""
    if choice is None or isinstance(choice, (bool, int, float, str)):
        return choice
    return json.dumps(plain_data(choice), sort_keys=True, separators=(",", ":"))


def field_label(value: Any) -> Label:
    """The readable label of one field value: ``64x64x32`` for a list of integers, else :func:`choice_label`."""
    data = plain_data(value)
    if isinstance(data, list) and data and all(isinstance(x, int) and not isinstance(x, bool) for x in data):
        return "x".join(str(x) for x in data)
    return choice_label(data)


def _split(axis: str, choices: list) -> list[str] | None:
    """The fields of a section axis that become parameters (those that vary among its choices), or None when
    the axis stays one parameter (its choices are not all mappings, or they do not differ by field)."""
    if not choices or not all(isinstance(c, Mapping) for c in choices):
        return None
    fields = list(dict.fromkeys(key for c in choices for key in c))
    varying = [f for f in fields if len({json.dumps(plain_data(c.get(f)), sort_keys=True) for c in choices}) > 1]
    return varying or None


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
    """A config's tuning axes for one shape, in one lowering (``admit``: the builder's own veto, or None;
    ``fields``: a section axis is one parameter per varying field, False for a study made before that)."""

    def __init__(self, config: Config, shape: Shape, lowering: Lowering,
                 admit: Callable[[PlannedVariant], str | None] | None = None, fields: bool = True):
        axes = {axis: choices for axis, choices in config.sweep.items() if not is_problem_axis(axis)}
        self.shape = shape
        self.lowering = lowering
        self.admit = admit
        self.fields = fields
        self.search = SearchSpace(replace(config, sweep=axes).with_overrides(shape.overrides()))
        # per axis: its parameter names, and each choice by the tuple of its labels
        self.params_of: dict[str, list[str]] = {}
        self.choices: dict[str, dict[tuple, Any]] = {}
        self._fields: dict[str, list[str] | None] = {}
        for axis, choices in self.search.axes.items():
            split = _split(axis, choices) if fields else None
            if split and any(f"{axis}.{f}" in self.search.axes for f in split):
                split = None          # a field is also swept on its own: keep the axis whole
            self._fields[axis] = split
            self.params_of[axis] = [f"{axis}.{f}" for f in split] if split else [axis]
            self.choices[axis] = {self._labels(split, choice): choice for choice in choices}

    def _labels(self, split: list[str] | None, choice: Any) -> tuple:
        if split:
            return tuple(field_label(choice.get(f)) for f in split)
        return (field_label(choice) if self.fields else choice_label(choice),)

    @property
    def size(self) -> int:
        """How many points the space has (the sweep's combinations of choices)."""
        return math.prod(len(labels) for labels in self.choices.values())

    def grid(self) -> dict[str, list[Label]]:
        """Every parameter with its labels (Optuna's search space: the product of these may hold combinations
        that are outside the sweep)."""
        grid: dict[str, list[Label]] = {}
        for axis, by_labels in self.choices.items():
            for i, name in enumerate(self.params_of[axis]):
                grid[name] = list(dict.fromkeys(labels[i] for labels in by_labels))
        return grid

    def distributions(self) -> dict[str, CategoricalDistribution]:
        return {name: CategoricalDistribution(labels) for name, labels in self.grid().items()}

    def all_params(self) -> Iterator[dict[str, Label]]:
        """Every point's labels, in the sweep's order (last axis fastest)."""
        for point in self.search:
            params: dict[str, Label] = {}
            for axis, choice in point.items():
                params.update(zip(self.params_of[axis], self._labels(self._fields[axis], choice)))
            yield params

    def point(self, params: Mapping[str, Label]) -> dict[str, Any] | None:
        """The sweep's choice per axis that a trial's labels name, or None when they are outside the sweep."""
        point = {}
        for axis, names in self.params_of.items():
            choice = self.choices[axis].get(tuple(params.get(name) for name in names), _OUTSIDE)
            if choice is _OUTSIDE:
                return None
            point[axis] = choice
        return point

    def outside(self, params: Mapping[str, Label]) -> str:
        """Why labels are outside the sweep, in words."""
        for axis, names in self.params_of.items():
            if tuple(params.get(name) for name in names) not in self.choices[axis]:
                shown = ", ".join(f"{name} = {params.get(name)}" for name in names)
                return f"outside the sweep: no {axis} choice has {shown} (a proposal, not a point)"
        return "inside the sweep"

    def key(self, params: Mapping[str, Label]) -> str:
        """The point key of a trial's labels."""
        return point_key({name: params[name] for names in self.params_of.values() for name in names})

    def candidate(self, params: Mapping[str, Label]) -> Candidate:
        """Resolve, plan, render and admit one point (labels inside the sweep: see :meth:`point`); anything
        that rules it out is its reason."""
        point = self.point(params)
        if point is None:
            raise KeyError(self.outside(params))
        labels = {name: params[name] for names in self.params_of.values() for name in names}
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
