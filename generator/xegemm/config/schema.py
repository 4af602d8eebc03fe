"""The resolved config: :class:`Config` (one validated config, its sweep and constraints), :class:`Variant`
(one point of the sweep) and :class:`Constraint`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from xegemm.config.checks import ConfigError, ConfigIssue, Invalid, did_you_mean, show_value
from xegemm.config.expressions import EVALUATION_ERRORS, compile_expression, evaluation_message
from xegemm.config.sections import (
    GROUPS_SET,
    LEAF_CHECKS,
    SECTION_KEYS,
    SECTIONS,
    TOP_LEAVES,
    Atoms,
    Epilogue,
    Layout,
    Moe,
    Pipeline,
    Problem,
    Profile,
    Quant,
    Target,
    Tile,
    Types,
    Verify,
)


@dataclass(frozen=True)
class Constraint:
    """A boolean expression over config values, e.g. ``tile.workgroup[0] % (tile.subgroups[0] * 8) == 0``."""

    text: str

    def __post_init__(self) -> None:
        try:
            compile_expression(self.text)
        except Invalid as exc:
            raise ConfigError([ConfigIssue("<constraint>", None, None, f'"{self.text}": {exc}')]) from None

    def check(self, values: Mapping[str, Any]) -> str | None:
        """None when the constraint holds for these dotted-key values, else the reason it does not."""
        expression = compile_expression(self.text)
        try:
            holds = bool(expression.evaluate(values))
            verdict = "is false"
        except EVALUATION_ERRORS as exc:
            holds, verdict = False, f"could not be evaluated ({evaluation_message(exc)})"
        if holds:
            return None
        shown = ", ".join(f"{text}={show_value(value)}" for text, value in expression.reference_values(values))
        return f'constraint "{self.text}" {verdict}' + (f": {shown}" if shown else "")


def is_problem_axis(axis: str) -> bool:
    """A sweep axis that sets the problem: a shape, not a tuning parameter."""
    return axis == "problem" or axis.startswith("problem.")


@dataclass(frozen=True)
class Config:
    """One validated config.  ``sweep`` maps a dotted key (or section) to its tuple of values."""

    name: str
    problem: Problem
    types: Types = Types()
    layout: Layout = Layout()
    quant: Quant = Quant()        # B's quantization (format none: B is not quantized)
    quant_a: Quant = Quant()      # A's (FP8 A only)
    tile: Tile = Tile()
    epilogue: Epilogue = Epilogue()
    atoms: Atoms = Atoms()
    pipeline: Pipeline = Pipeline()
    target: Target = Target()
    verify: Verify = Verify()
    profile: Profile = Profile()
    moe: Moe = Moe()
    sweep: Mapping[str, tuple[Any, ...]] = field(default_factory=dict, hash=False)
    constraints: tuple[Constraint, ...] = ()
    description: str = ""
    source: str = "<string>"

    def values_of(self, key: str) -> tuple[Any, ...]:
        """Every value ``key`` (dotted) takes in this config: its own and the sweep's, in order, once each."""
        values: list[Any] = []
        for x in (self.flat_values()[key] if key in LEAF_CHECKS else None, *self.sweep.get(key, ())):
            if x is not None and x not in values:
                values.append(x)
        return tuple(values)

    def flat_values(self) -> dict[str, Any]:
        """Every config value by dotted key (``tile.workgroup`` -> (256, 256, 32)); no sweep, no constraints."""
        values = {key: getattr(self, key) for key in TOP_LEAVES}
        for section in SECTIONS:
            values.update({f"{section}.{name}": getattr(getattr(self, section), name)
                           for name in SECTION_KEYS[section]})
        return values

    def with_overrides(self, overrides: Mapping[str, Any]) -> Config:
        """A copy with dotted keys replaced (``{"tile.workgroup": [128, 128, 32]}``), each value checked."""
        values = self.flat_values()
        issues = []
        for key, value in overrides.items():
            check = LEAF_CHECKS.get(key)
            try:
                if check is None:
                    raise Invalid("unknown key" + did_you_mean(key, LEAF_CHECKS))
                values[key] = check(value)
            except Invalid as exc:
                issues.append(ConfigIssue(self.source, None, key, str(exc)))
        if issues:
            raise ConfigError(issues)
        return assemble(values, self.sweep, self.constraints, self.source)

    def at_problems(self, problems: list[Mapping[str, int]]) -> Config:
        """A copy that runs at ``problems`` (each ``{"m", "n", "k", "batch"}``) instead of its own problem and
        problem sweep; the other sweep axes stay.  What ``xegemm run --shapes`` and the tuner's shapes do."""
        if not problems:
            raise ConfigError([ConfigIssue(self.source, None, "problem", "no problem given")])
        sweep = {key: choices for key, choices in self.sweep.items() if not is_problem_axis(key)}
        if len(problems) > 1:
            sweep["problem"] = tuple(dict(p) for p in problems)
        first = self.with_overrides({f"problem.{key}": value for key, value in problems[0].items()})
        return replace(first, sweep=sweep)

    def to_dict(self) -> dict[str, Any]:
        """The config as plain JSON-able data, in the shape of the YAML file (loadable again); the grouped keys
        (``problem.groups``, ``moe``) only when set."""
        data: dict[str, Any] = {key: getattr(self, key) for key in TOP_LEAVES}
        for section in SECTIONS:
            data[section] = {name: plain_data(getattr(getattr(self, section), name))
                             for name in SECTION_KEYS[section]}
        data["sweep"] = {key: [plain_data(choice) for choice in choices] for key, choices in self.sweep.items()}
        data["constraints"] = [constraint.text for constraint in self.constraints]
        if not self.problem.groups:       # a single GEMM's data (results keys, reports) as before groups existed
            del data["problem"]["groups"]
        for name in GROUPS_SET if self.problem.groups else ():    # set by the groups, so not written
            del data["problem"][name]
        if self.moe == Moe():
            del data["moe"]
        if self.target.lowering is None:  # the run's lowering: results keys and names as before the key existed
            del data["target"]["lowering"]
        epilogue = data["epilogue"]
        if self.epilogue.traced:          # the function form's keys as the YAML spells them
            fn = self.epilogue.function
            epilogue["function"] = fn if isinstance(fn, str) else f"{fn.__module__}:{fn.__qualname__}"
            epilogue["inputs"] = {name: kind if t is None else {"kind": kind, "type": t}
                                  for name, kind, t in self.epilogue.inputs}
            epilogue["outputs"] = dict(self.epilogue.outputs)
        else:                              # the fixed epilogue's data as before traced epilogues existed
            for name in ("function", "inputs", "outputs"):
                del epilogue[name]
        return data


@dataclass(frozen=True)
class Variant:
    """One point of a sweep: the resolved config (no sweep), the swept overrides, and why it was rejected."""

    config: Config
    overrides: Mapping[str, Any] = field(default_factory=dict, hash=False)
    rejected: str | None = None

    @property
    def accepted(self) -> bool:
        """True when every constraint holds."""
        return self.rejected is None


def plain_data(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [plain_data(item) for item in value]
    if isinstance(value, dict):
        return {key: plain_data(item) for key, item in value.items()}
    return value


def assemble(values: Mapping[str, Any], sweep: Mapping[str, tuple[Any, ...]],
              constraints: tuple[Constraint, ...], source: str) -> Config:
    sections = {section: cls(**{name: values[f"{section}.{name}"] for name in SECTION_KEYS[section]})
                for section, cls in SECTIONS.items()}
    return Config(name=values["name"], description=values["description"], sweep=dict(sweep),
                  constraints=tuple(constraints), source=source, **sections)
