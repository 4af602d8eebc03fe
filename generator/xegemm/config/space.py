"""The search space of a config: its ``sweep`` axes, its ``constraints``, and the variants they give.

:class:`SearchSpace` is what a tuner samples: ``axes`` (dotted key or section -> its choices), ``size``,
every point in file order (the last axis fastest), a point's :class:`Variant` (the resolved config, or why a
constraint rejects it) and :meth:`SearchSpace.prune`.  :func:`expand` lists all variants, duplicates
collapsed, as ``run`` and ``generate`` use them.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any, Iterator, Mapping

from xegemm.config.checks import ConfigError, ConfigIssue
from xegemm.config.schema import Config, Variant
from xegemm.config.sections import SECTIONS


def _axis_overrides(key: str, choice: Any) -> dict[str, Any]:
    """The dotted-key overrides one sweep choice stands for."""
    if key in SECTIONS:
        return {f"{key}.{name}": value for name, value in choice.items()}
    return {key: choice}


class SearchSpace:
    """The points of a config's sweep: one choice per axis, axes in file order."""

    def __init__(self, config: Config):
        self.config = config
        self.base = replace(config, sweep={})
        self.axes: dict[str, tuple[Any, ...]] = dict(config.sweep)

    @property
    def size(self) -> int:
        """How many points the axes span (before duplicates collapse and constraints prune)."""
        size = 1
        for choices in self.axes.values():
            size *= len(choices)
        return size

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Every point as {axis: choice}, in file order with the last axis varying fastest."""
        for combination in itertools.product(*self.axes.values()):
            yield dict(zip(self.axes, combination))

    def point(self, index: int) -> dict[str, Any]:
        """The ``index``-th point of the iteration order (0 <= index < size)."""
        if not 0 <= index < self.size:
            raise IndexError(f"point {index} outside a search space of {self.size} points")
        point = {}
        for key in reversed(self.axes):
            index, at = divmod(index, len(self.axes[key]))
            point[key] = self.axes[key][at]
        return {key: point[key] for key in self.axes}

    def overrides(self, point: Mapping[str, Any]) -> dict[str, Any]:
        """The dotted-key overrides a point stands for (a section axis sets several keys)."""
        unknown = sorted(set(point) - set(self.axes))
        missing = [key for key in self.axes if key not in point]
        if unknown or missing:
            raise ConfigError([ConfigIssue(self.config.source, None, "sweep",
                                           f"not a point of this search space: unknown axes {unknown}, "
                                           f"missing axes {missing}; axes are {list(self.axes)}")])
        return {key: value for axis in self.axes for key, value in _axis_overrides(axis, point[axis]).items()}

    def variant(self, point: Mapping[str, Any]) -> Variant:
        """The resolved config of a point, rejected with the reason when a constraint fails."""
        overrides = self.overrides(point)
        resolved = self.base.with_overrides(overrides)
        values = resolved.flat_values()
        reasons = [reason for constraint in resolved.constraints if (reason := constraint.check(values))]
        return Variant(resolved, overrides, "; ".join(reasons) or None)

    def prune(self, point: Mapping[str, Any]) -> str | None:
        """Why the constraints rule a point out, or None (the planner's rules come later, per variant)."""
        return self.variant(point).rejected

    def variants(self) -> list[Variant]:
        """Every point's variant (file order, last axis fastest), duplicates collapsed, failures marked."""
        variants, seen = [], set()
        for point in self:
            variant = self.variant(point)
            identity = tuple(variant.config.flat_values().items())
            if identity not in seen:
                seen.add(identity)
                variants.append(variant)
        return variants


def expand(config: Config) -> list[Variant]:
    """All variants of the sweep (file order, last key fastest), duplicates collapsed, failures marked."""
    return SearchSpace(config).variants()
