"""Reading a config: YAML nodes -> plain values with the line of every key and item, then validation against
the schema, every problem reported with its file, line and dotted key in one :class:`ConfigError`.
"""

from __future__ import annotations

import math
import re
from dataclasses import MISSING, Field, fields
from pathlib import Path
from typing import Any

import yaml

from xegemm.config.checks import (
    NAME_PATTERN,
    Check,
    ConfigError,
    ConfigIssue,
    Invalid,
    did_you_mean,
    found,
    show_value,
)
from xegemm.config.expressions import compile_expression
from xegemm.files import CONFIG_BYTES, YAML_VALUES, FileRefused, read_text
from xegemm.config.schema import Config, Constraint, assemble
from xegemm.config.sections import (
    GROUPS_SET,
    LEAF_CHECKS,
    SECTION_KEYS,
    SECTIONS,
    SWEEPABLE,
    TOP_KEYS,
    TOP_LEAVES,
    tile_conflict,
)
from xegemm.grouped.problem import config_conflict
from xegemm.epilogues.config import config_violations as traced_epilogue_violations
from xegemm.epilogues.config import swept_violations as swept_epilogue_violations
from xegemm.quant import config_violations as quant_violations

KeyPath = tuple[Any, ...]
_PLAIN_SCALAR_TAGS = {f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null")}
_MAP_TAG, _SEQ_TAG = "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
_MAX_VALUES = YAML_VALUES
MAX_SWEEP_POINTS = 100_000    # points a sweep may span, counted before any is listed


def _dotted(path: KeyPath) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


class _Reader:
    """Turns one YAML document into plain values and collects every issue with its line."""

    def __init__(self, source: str):
        self.source = source
        self.lines: dict[KeyPath, int] = {}
        self.issues: list[ConfigIssue] = []
        self._unreadable: list[KeyPath] = []
        self._constructor = yaml.constructor.SafeConstructor()
        self._values_built = 0

    # -- reporting
    def line(self, path: KeyPath) -> int:
        while path not in self.lines and path:
            path = path[:-1]
        return self.lines.get(path, 1)

    def report(self, path: KeyPath, message: str, line: int | None = None) -> None:
        """Record an issue about the key at ``path`` (at its line unless ``line`` is given)."""
        self.issues.append(ConfigIssue(self.source, line or self.line(path), _dotted(path) or None, message))

    def report_value(self, path: KeyPath, message: str) -> None:
        """Record an issue about the value at ``path``, unless that value holds one already found unreadable."""
        if not any(bad[:len(path)] == path or path[:len(bad)] == bad for bad in self._unreadable):
            self.report(path, message)

    def _report_unreadable(self, path: KeyPath, line: int, message: str) -> None:
        self.report(path, message, line)
        self._unreadable.append(path)

    # -- nodes to values
    def build(self, node: yaml.Node, path: KeyPath = (), active: frozenset[int] = frozenset()) -> Any:
        """The plain value of ``node``; lines of mapping keys and list items are recorded under their path."""
        self._values_built += 1
        if self._values_built > _MAX_VALUES:
            raise ConfigError([ConfigIssue(self.source, node.start_mark.line + 1, None,
                                           f"the document expands to more than {_MAX_VALUES} values")])
        line = node.start_mark.line + 1
        if id(node) in active:
            self._report_unreadable(path, line, "recursive alias: a value that contains itself")
            return None
        active = active | {id(node)}
        if isinstance(node, yaml.MappingNode) and node.tag == _MAP_TAG:
            return self._build_mapping(node, path, active)
        if isinstance(node, yaml.SequenceNode) and node.tag == _SEQ_TAG:
            values = []
            for index, item in enumerate(node.value):
                self.lines[(*path, index)] = item.start_mark.line + 1
                values.append(self.build(item, (*path, index), active))
            return values
        if isinstance(node, yaml.ScalarNode) and node.tag in _PLAIN_SCALAR_TAGS:
            try:
                return self._constructor.construct_object(node)
            except (yaml.YAMLError, ValueError):
                self._report_unreadable(path, line, f"cannot read {node.value!r} as {node.tag.rsplit(':', 1)[-1]}")
                return None
        self._report_unreadable(path, line, f"unsupported YAML tag {node.tag!r}; only plain values, lists and "
                                            "mappings are allowed")
        return None

    def _build_mapping(self, node: yaml.MappingNode, path: KeyPath, active: frozenset[int]) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                self.report(path, "keys must be plain words, found a list or mapping as a key", line)
                continue
            key = key_node.value
            if key_node.tag == "tag:yaml.org,2002:merge":
                self.report((*path, key), "merge keys (<<) are not supported; write the keys out", line)
                continue
            if key in values:
                self.report((*path, key), f"duplicate key (first set at line {self.lines[(*path, key)]})", line)
                continue
            self.lines[(*path, key)] = line
            values[key] = self.build(value_node, (*path, key), active)
        return values

    # -- validation
    def check_value(self, path: KeyPath, check: Check, value: Any) -> tuple[bool, Any]:
        """(True, canonical value) or (False, None) after reporting what was expected."""
        try:
            return True, check(value)
        except Invalid as exc:
            self.report_value(path, str(exc))
            return False, None

    def check_section(self, section: str, value: Any, path: KeyPath, partial: bool) -> tuple[bool, dict[str, Any]]:
        """Validate one section mapping; returns (all valid, {key within the section: canonical value})."""
        names = SECTION_KEYS[section]
        if value is None and section != "problem":
            value = {}
        if not isinstance(value, dict):
            self.report_value(path, f"expected a mapping with keys {', '.join(names)}, found {found(value)}")
            return False, {}
        valid, values = True, {}
        for name, item in value.items():
            if name not in names:
                self.report((*path, name), "unknown key" + (did_you_mean(name, names)
                                                            or f"; expected one of {', '.join(names)}"))
                valid = False
                continue
            ok, values[name] = self.check_value((*path, name), LEAF_CHECKS[f"{section}.{name}"], item)
            valid = valid and ok
        grouped = section == "problem" and value.get("groups")
        if grouped:
            for name in set(GROUPS_SET) & set(value):
                self.report((*path, name), "is set by problem.groups (the largest group's); leave it out")
                valid = False
        if not partial:
            for f in fields(SECTIONS[section]):
                if f.name not in value and _is_required(f) and not (grouped and f.name in GROUPS_SET):
                    self.report((*path, f.name), "missing required key")
                    valid = False
        return valid, values

    def check_document(self, document: Any, default_name: str) -> Config | None:
        """The Config of a whole document, or None when issues were reported."""
        if not isinstance(document, dict):
            self.report_value((), "expected a mapping of config keys at the top level "
                                  f"({', '.join(TOP_KEYS)}), found {found(document)}")
            return None
        values: dict[str, Any] = {"name": default_name, "description": ""}
        for section in SECTIONS:
            values.update({f"{section}.{f.name}": f.default for f in fields(SECTIONS[section])
                           if not _is_required(f)})
        sweep: dict[str, tuple[Any, ...]] = {}
        constraints: tuple[Constraint, ...] = ()
        for key, value in document.items():
            if key in TOP_LEAVES:
                _, values[key] = self.check_value((key,), TOP_LEAVES[key], value)
            elif key in SECTIONS:
                _, section_values = self.check_section(key, value, (key,), partial=False)
                values.update({f"{key}.{name}": item for name, item in section_values.items()})
            elif key == "sweep":
                sweep = self.check_sweep(value)
            elif key == "constraints":
                constraints = self.check_constraints(value)
            else:
                self.report((key,), "unknown key" + (did_you_mean(key, TOP_KEYS)
                                                     or f"; expected one of {', '.join(TOP_KEYS)}"))
        if "problem" not in document:
            self.report(("problem",), "missing required key; expected a mapping {m, n, k} (batch optional)")
        if not self.issues:
            conflict = tile_conflict(values["tile.split_k"], values["tile.stream_k"])
            if conflict:
                self.report(("tile", "stream_k"), conflict)
            if values["problem.groups"]:       # the planner's single-problem rules see the largest group
                values.update({f"problem.{name}": max(max(g[i] for g in values["problem.groups"]), 1)
                               for i, name in enumerate(GROUPS_SET)})
            conflict = config_conflict(values["problem.groups"], values["moe.experts"], values["moe.rows"],
                                       *(values[f"problem.{name}"] for name in ("m", "n", "k", "batch")))
            if conflict:
                self.report(("moe",) if values["moe.experts"] or values["moe.rows"] else ("problem", "groups"),
                            conflict)
            for key, message in quant_violations(assemble(values, sweep, constraints, self.source)):
                self.report(tuple(key.split(".")), message)
            assembled = assemble(values, sweep, constraints, self.source)
            for key, message in traced_epilogue_violations(assembled) + swept_epilogue_violations(assembled):
                self.report(tuple(int(part) if part.isdigit() else part for part in key.split(".")), message)
        if self.issues:
            return None
        return assemble(values, sweep, constraints, self.source)

    def check_sweep(self, sweep: Any) -> dict[str, tuple[Any, ...]]:
        """``sweep`` validated: dotted key (or section) -> tuple of canonical values (section: dicts)."""
        if sweep is None:
            return {}
        if not isinstance(sweep, dict):
            self.report_value(("sweep",), "expected a mapping of config key -> list of values, "
                                          f"found {found(sweep)}")
            return {}
        axes: dict[str, tuple[Any, ...]] = {}
        for key, choices in sweep.items():
            path = ("sweep", key)
            if key in TOP_LEAVES:
                self.report(path, f"'{key}' cannot be swept; sweep one of {', '.join(SECTIONS)} or their keys")
                continue
            if key not in SWEEPABLE:
                self.report(path, "names no config key" + did_you_mean(key, SWEEPABLE))
                continue
            expected = (f"a non-empty list of mappings of {key} keys" if key in SECTIONS
                        else f"a non-empty list of values for {key}")
            if key not in SECTIONS and _passes(LEAF_CHECKS[key], choices):
                self.report_value(path, f"expected {expected}, found the single value {found(choices)}; "
                                        f"write [{show_value(choices)}] to sweep over one value")
                continue
            if not isinstance(choices, list) or not choices:
                self.report_value(path, f"expected {expected}, found {found(choices)}")
                continue
            checked = [self.check_choice(key, choice, (*path, index)) for index, choice in enumerate(choices)]
            if all(ok for ok, _ in checked):
                axes[key] = tuple(value for _, value in checked)
        for section in (key for key in axes if key in SECTIONS):
            for leaf in {f"{section}.{name}" for choice in axes[section] for name in choice} & axes.keys():
                self.report(("sweep", leaf), f"is also swept by sweep key '{section}'; sweep each key once")
        points = math.prod(len(choices) for choices in axes.values())
        if points > MAX_SWEEP_POINTS:
            sizes = " x ".join(f"{len(choices)} {key}" for key, choices in axes.items())
            self.report(("sweep",), f"spans {points} points ({sizes}); at most {MAX_SWEEP_POINTS} are allowed: "
                                    "split the sweep into several configs or narrow its axes")
        return axes

    def check_choice(self, key: str, choice: Any, path: KeyPath) -> tuple[bool, Any]:
        """One value of ``sweep[key]``, checked exactly like the key (or section) it replaces."""
        if key in SECTIONS:
            return self.check_section(key, choice, path, partial=True)
        return self.check_value(path, LEAF_CHECKS[key], choice)

    def check_constraints(self, constraints: Any) -> tuple[Constraint, ...]:
        """``constraints`` validated: each entry parses and uses only allowed constructs."""
        if constraints is None:
            return ()
        if not isinstance(constraints, list):
            self.report_value(("constraints",), "expected a list of expressions (strings), "
                                                f"found {found(constraints)}")
            return ()
        checked = []
        for index, text in enumerate(constraints):
            if not isinstance(text, str):
                self.report_value(("constraints", index), f"expected an expression (a string), found {found(text)}")
                continue
            try:
                compile_expression(text)
            except Invalid as exc:
                self.report_value(("constraints", index), f'"{text}": {exc}')
                continue
            checked.append(Constraint(text))
        return tuple(checked)


def _is_required(f: Field[Any]) -> bool:
    return f.default is MISSING


def _passes(check: Check, value: Any) -> bool:
    try:
        check(value)
    except Invalid:
        return False
    return True


def _default_name(source: str) -> str:
    if source.startswith("<"):
        return "gemm"
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(source).stem)
    return name if NAME_PATTERN.fullmatch(name) else "gemm"


def config_from_text(text: str, source: str = "<string>") -> Config:
    """Parse and validate YAML text; ``source`` names it in error messages. Raises ConfigError."""
    reader = _Reader(source)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        line = (exc.problem_mark or exc.context_mark).line + 1
        context = ""
        if exc.context and exc.context_mark and exc.context_mark.line + 1 != line:
            context = f"{exc.context} (line {exc.context_mark.line + 1}), "
        elif exc.context:
            context = f"{exc.context}, "
        raise ConfigError([ConfigIssue(source, line, None, f"invalid YAML: {context}{exc.problem}")]) from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        character = exc.character if isinstance(exc.character, str) else chr(exc.character)
        raise ConfigError([ConfigIssue(source, line, None, f"invalid YAML: {exc.reason} ({character!r})")]) \
            from None
    except RecursionError:
        raise ConfigError([ConfigIssue(source, None, None, "invalid YAML: nested too deeply")]) from None
    if root is None:
        raise ConfigError([ConfigIssue(source, 1, None, "the file is empty; expected a mapping with at least "
                                                        "a 'problem' key")])
    reader.lines[()] = root.start_mark.line + 1
    config = reader.check_document(reader.build(root), _default_name(source))
    if config is None:
        raise ConfigError(reader.issues)
    return config


def load_config(path: str | Path) -> Config:
    """Read and validate a YAML config file. Raises ConfigError naming file:line for every problem."""
    source = str(path)
    try:
        text = read_text(path, CONFIG_BYTES)
    except FileRefused as exc:
        raise ConfigError([ConfigIssue(source, None, None, str(exc).removeprefix(f"{source}: "))]) from None
    return config_from_text(text, source)
