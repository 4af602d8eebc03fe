"""What a benchmark run measures: the configs and shapes given on the command line (``--bench-config PATH``,
repeatable; ``--bench-shapes 1024x1024x1024,2048x2048x2048`` or a shapes file), by default
``configs/default.yaml`` at its own problem(s).  A shape replaces every config's problem (and its problem
sweep); references are measured once per distinct problem."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from xegemm.config import Config, load_config
from xegemm.evaluate import PlannedVariant, plan_variants
from xegemm.config.shapes import Shape, config_shapes, is_problem_axis, parse_shapes

from bench import DEFAULT_CONFIG


@dataclass(frozen=True)
class Case:
    """One config at one problem and its planned variants."""

    path: Path
    config: Config
    shape: Shape
    variants: tuple[PlannedVariant, ...]

    @property
    def label(self) -> str:
        return f"{self.config.name} at {self.shape.label}"


def at_shape(config: Config, shape: Shape) -> Config:
    """The config with its problem replaced by ``shape`` (its problem sweep dropped)."""
    sweep = {k: v for k, v in config.sweep.items() if not is_problem_axis(k)}
    return replace(config, sweep=sweep).with_overrides(shape.overrides())


def cases(config_paths: list[str] | None, shapes_spec: str | None) -> list[Case]:
    """Every (config, shape) pair of a run, with its planned variants."""
    out = []
    for path in [Path(p) for p in (config_paths or [DEFAULT_CONFIG])]:
        config = load_config(path)
        for shape in parse_shapes(shapes_spec) if shapes_spec else config_shapes(config):
            out.append(Case(path, config, shape, tuple(plan_variants(at_shape(config, shape)))))
    return out


def problems(all_cases: list[Case]) -> list[Shape]:
    """The distinct problems of a run, in order."""
    return list(dict.fromkeys(c.shape for c in all_cases))
