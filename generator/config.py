"""The user-facing YAML config: load it safely, validate it with precise errors, expand sweeps, check constraints.

A config describes one GEMM kernel configuration, or a family of them when it has a ``sweep``.  Every key
except ``problem`` has a default; this is the complete list with the defaults::

    name: <file name without .yaml>   # letters, digits, _ . - ; "gemm" for text not read from a file
    description: ""                   # free text, copied into reports
    problem:                          # required: D[batch] = A[batch] (m x k) @ B[batch] (k x n)
      m: <required>                   # positive integers
      n: <required>
      k: <required>
      batch: 1
    types: {a: bf16, b: bf16, acc: f32, c: f32}   # f16 bf16 tf32 f32 f64 s8 u8 s4 u4 s32
    layout: {a: row, b: row, c: row}               # row | col
    tile:
      workgroup: [256, 256, 32]       # BM, BN, BK: the work-group tile
      subgroups: [8, 4]               # SG_M, SG_N: the sub-group grid over BM x BN
      subgroup_size: 16               # 8 | 16 | 32
    atoms:                            # null (or "auto") = the planner picks a legal atom
      mma: null                       # XE_<M>x<N>x<K>_<D><A><B><C>_TT, e.g. XE_8x16x16_F32BF16BF16F32_TT
      a: null                         # XE_2D_[Packed_]<U4|U8|U16|U32|U64|TF32>x<rows>x<cols>_<LD|ST|PF>_<N|T|V>
      b: null
      c: null
    pipeline:
      prefetch: 2                     # k-tiles prefetched ahead of the one being multiplied (0 = none)
    target:
      grf: 256                        # registers per thread: 128 | 256 (-cl-intel-<n>-GRF-per-thread)
    verify:
      seed: 0                         # seed of the random inputs
    profile:
      warmup: 10                      # untimed launches before timing
      repeats: 100                    # timed launches (at least)
      min_time_ms: 0.0                # keep launching until this much time is measured (0 = off)
    sweep: {}                         # dotted key -> list of values; cartesian product
    constraints: []                   # expressions every variant must satisfy

Spelling: dtypes and layouts are case-insensitive and accept aliases that map to the canonical name
(``half``/``fp16``/``float16`` -> f16, ``bfloat16`` -> bf16, ``float``/``fp32``/``float32`` -> f32,
``double``/``fp64``/``float64`` -> f64, ``int8``/``i8`` -> s8, ``uint8`` -> u8, ``int4``/``i4`` -> s4,
``uint4`` -> u4, ``int32``/``i32`` -> s32; ``column``/``col_major``/``column_major`` -> col,
``row_major`` -> row).  Atom names are only spelling-checked here; the atom model checks legality later.

Loading.  The file is composed with PyYAML's SafeLoader into a node tree and the values are built from the
nodes here, so every value knows its line; only plain YAML scalars (str, int, float, bool, null), lists and
mappings are accepted (any other tag, a merge key ``<<``, a duplicate key or a recursive alias is an
error).  Every problem found is reported, one per line, in a single :class:`ConfigError`::

    configs/x.yaml:7: tile.workgroup: expected a list of 3 positive integers [BM, BN, BK], found [256, 256]
    configs/x.yaml:4: tyeps: unknown key; did you mean 'types'?

Sweeps.  ``sweep`` maps a dotted key (``tile.workgroup``, ``problem.m``, ...) to a non-empty list of values,
each validated exactly like the key it replaces; :func:`expand` yields the cartesian product in file order,
the last key varying fastest.  A section name sweeps several keys together: ``tile: [{workgroup: [256, 256,
32], subgroups: [8, 4]}, {workgroup: [128, 512, 32], subgroups: [4, 8]}]`` (keys left out keep their
value).  Variants with identical resolved values collapse to the first one.

Constraints.  Each entry of ``constraints`` is a Python expression checked with a small evaluator over
:mod:`ast` (never ``eval``): literals, config keys as dotted names with subscripts (``tile.workgroup[0]``,
``problem.k``, ``types.a == 'bf16'``), ``+ - * / // % **`` on numbers, comparisons (chained, ``in``),
``and``/``or``/``not``, ``x if c else y``, tuples/lists and the functions ``min max abs len all any``.
Anything else (other calls, attribute access on non-config values, dunder names, lambdas, comprehensions,
...) is rejected when the file is loaded.  A variant that fails a constraint is kept and marked rejected
with the reason; a constraint that cannot be evaluated for a variant (division by zero, index out of
range, ...) rejects that variant with the error.
"""

from __future__ import annotations

import ast
import difflib
import itertools
import operator
import re
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import yaml

from xegemm.atoms.block1d import NAME_RE as BLOCK1D_ATOM_NAME
from xegemm.atoms.copy import NAME_RE as COPY_ATOM_NAME
from xegemm.dtypes import DTYPE_BITS

from xegemm.errors import XegemmError

__all__ = [
    "Atoms", "Config", "ConfigError", "ConfigIssue", "Constraint", "DTYPES", "LAYOUTS", "Layout", "Pipeline",
    "Problem", "Profile", "Target", "Tile", "Types", "Variant", "Verify", "config_from_text", "expand",
    "load_config",
]


# --------------------------------------------------------------------------------------------------------
# Errors


@dataclass(frozen=True)
class ConfigIssue:
    """One thing wrong with a config: where (file, line), which dotted key, and what."""

    source: str
    line: int | None
    key: str | None
    message: str

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"


class ConfigError(XegemmError):
    """A config that cannot be used; ``issues`` holds every problem found, the message lists them by line."""

    def __init__(self, issues: Iterable[ConfigIssue]):
        self.issues = tuple(sorted(issues, key=lambda issue: issue.line or 0))
        super().__init__("\n".join(str(issue) for issue in self.issues))


class _Invalid(Exception):
    """A value or expression that is wrong; the text says what was expected (caller adds where)."""


def _show(value: Any) -> str:
    """A value spelled as in a YAML flow document."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {_show(item)}" for key, item in value.items()) + "}"
    return str(value)


_RESOLVER, _STR_TAG = yaml.resolver.Resolver(), "tag:yaml.org,2002:str"


def _found(value: Any) -> str:
    """``_show`` shortened, with the YAML type where the spelling alone could mislead."""
    text = _show(value)
    if len(text) > 70:
        text = text[:67] + "..."
    kinds = {bool: "a boolean", float: "a float", dict: "a mapping"}
    kind = kinds.get(type(value))
    if isinstance(value, str) and _RESOLVER.resolve(yaml.ScalarNode, value, (True, False)) != _STR_TAG:
        kind = "a string"  # '1024', 'true': quoted, so not the number or boolean it looks like
    if kind is None and not isinstance(value, (str, int, list, tuple, type(None))):
        kind = type(value).__name__
    return f"{text} ({kind})" if kind else text


def _expected(what: str, value: Any) -> _Invalid:
    return _Invalid(f"expected {what}, found {_found(value)}")


def _did_you_mean(word: str, candidates: Iterable[str]) -> str:
    match = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean {match[0]!r}?" if match else ""


# --------------------------------------------------------------------------------------------------------
# Value checks: each takes a plain value and returns it canonical (lists become tuples, aliases their
# canonical name) or raises _Invalid saying what was expected.

Check = Callable[[Any], Any]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _positive_int(value: Any) -> int:
    if _is_int(value) and value > 0:
        return value
    raise _expected("a positive integer", value)


def _non_negative_int(value: Any) -> int:
    if _is_int(value) and value >= 0:
        return value
    raise _expected("a non-negative integer", value)


def _non_negative_number(value: Any) -> float:
    if _is_number(value) and value >= 0:
        return float(value)
    raise _expected("a non-negative number", value)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    raise _expected("a string", value)


_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def _config_name(value: Any) -> str:
    if isinstance(value, str) and _NAME.fullmatch(value):
        return value
    raise _expected("a name made of letters, digits, '_', '.' and '-'", value)


def _positive_ints(count: int, meaning: str) -> Check:
    what = f"a list of {count} positive integers {meaning}"

    def check(value: Any) -> tuple[int, ...]:
        if isinstance(value, (list, tuple)) and len(value) == count and all(
                _is_int(item) and item > 0 for item in value):
            return tuple(value)
        raise _expected(what, value)
    return check


def _word(what: str, words: tuple[str, ...], aliases: Mapping[str, str]) -> Check:
    def check(value: Any) -> str:
        if not isinstance(value, str):
            raise _expected(f"a {what} (one of {', '.join(words)})", value)
        spelled = value.lower()
        canonical = aliases.get(spelled, spelled)
        if canonical in words:
            return canonical
        match = difflib.get_close_matches(spelled, [*words, *aliases], n=1, cutoff=0.6)
        hint = f"; did you mean {aliases.get(match[0], match[0])!r}?" if match else ""
        raise _Invalid(f"unknown {what} {value!r}; expected one of {', '.join(words)}{hint}")
    return check


def _int_choice(what: str, numbers: tuple[int, ...]) -> Check:
    def check(value: Any) -> int:
        if _is_int(value) and value in numbers:
            return value
        raise _expected(f"a {what}: one of {', '.join(map(str, numbers))}", value)
    return check


def _atom_name(kind: str, pattern: re.Pattern[str], spelling: str, example: str) -> Check:
    what = f"{kind} atom name {spelling} (e.g. {example}) or null for automatic"

    def check(value: Any) -> str | None:
        if value is None or value == "auto":
            return None
        if isinstance(value, str) and pattern.fullmatch(value):
            return value
        raise _expected(what, value)
    return check


DTYPES = tuple(DTYPE_BITS)  # f16 bf16 tf32 f32 f64 s8 u8 s4 u4 s32
DTYPE_ALIASES = {
    "half": "f16", "fp16": "f16", "float16": "f16", "bfloat16": "bf16", "float": "f32", "fp32": "f32",
    "float32": "f32", "double": "f64", "fp64": "f64", "float64": "f64", "int8": "s8", "i8": "s8",
    "uint8": "u8", "int4": "s4", "i4": "s4", "uint4": "u4", "int32": "s32", "i32": "s32",
}
LAYOUTS = ("row", "col")
LAYOUT_ALIASES = {"row_major": "row", "column": "col", "col_major": "col", "column_major": "col"}

# the copy atom models own the naming patterns: 2D block atoms, and 1D block atoms for SIMD8 (dg2) plans
_COPY_ATOM = re.compile(f"(?:{COPY_ATOM_NAME.pattern})|(?:{BLOCK1D_ATOM_NAME.pattern})")
_MMA_TYPE = r"(?:TF32|BF16|F16|F32|S32|S8|U8|S4|U4)"
_MMA_ATOM = re.compile(rf"XE_[1-9][0-9]*x[1-9][0-9]*x[1-9][0-9]*_{_MMA_TYPE}{{4}}_TT")

_dtype = _word("data type", DTYPES, DTYPE_ALIASES)
_layout = _word("layout", LAYOUTS, LAYOUT_ALIASES)
_copy_atom = _atom_name("a block copy", _COPY_ATOM,
                        "XE_2D_[Packed_]<U4|U8|U16|U32|U64|TF32>x<rows>x<cols>_<LD|ST|PF>_<N|T|V> or "
                        "XE_1D_<U8|U16|U32|U64>x<rows>x<cols>_<LD|ST|PF>_SG<S>",
                        "XE_2D_U16x32x32_LD_N")
_mma_atom = _atom_name("an MMA", _MMA_ATOM, "XE_<M>x<N>x<K>_<D><A><B><C>_TT", "XE_8x16x16_F32BF16BF16F32_TT")


# --------------------------------------------------------------------------------------------------------
# The config model.  Each section is a frozen dataclass whose fields carry their check; the schema (known
# keys, defaults, what may be swept) is derived from these classes, so a key is declared exactly once.


def _key(check: Check, default: Any = MISSING) -> Any:
    """A config key: its check and, unless it is required, its default."""
    return field(default=default, metadata={"check": check})


@dataclass(frozen=True)
class Problem:
    """The GEMM problem: D[batch] = A[batch] (m x k) @ B[batch] (k x n)."""

    m: int = _key(_positive_int)
    n: int = _key(_positive_int)
    k: int = _key(_positive_int)
    batch: int = _key(_positive_int, 1)


@dataclass(frozen=True)
class Types:
    """Element types of A, B, the accumulator and C (canonical names from ``DTYPES``)."""

    a: str = _key(_dtype, "bf16")
    b: str = _key(_dtype, "bf16")
    acc: str = _key(_dtype, "f32")
    c: str = _key(_dtype, "f32")


@dataclass(frozen=True)
class Layout:
    """Memory layout of A, B and C: ``row`` or ``col`` (major)."""

    a: str = _key(_layout, "row")
    b: str = _key(_layout, "row")
    c: str = _key(_layout, "row")


@dataclass(frozen=True)
class Tile:
    """Work-group tile [BM, BN, BK], its sub-group grid [SG_M, SG_N] and the sub-group size."""

    workgroup: tuple[int, int, int] = _key(_positive_ints(3, "[BM, BN, BK]"), (256, 256, 32))
    subgroups: tuple[int, int] = _key(_positive_ints(2, "[SG_M, SG_N]"), (8, 4))
    subgroup_size: int = _key(_int_choice("sub-group size", (8, 16, 32)), 16)


@dataclass(frozen=True)
class Atoms:
    """Atom names chosen by the user; None lets the planner pick a legal one."""

    mma: str | None = _key(_mma_atom, None)
    a: str | None = _key(_copy_atom, None)
    b: str | None = _key(_copy_atom, None)
    c: str | None = _key(_copy_atom, None)


@dataclass(frozen=True)
class Pipeline:
    """Main-loop pipelining: how many k-tiles are prefetched ahead."""

    prefetch: int = _key(_non_negative_int, 2)


@dataclass(frozen=True)
class Target:
    """Compilation target knobs: registers per thread (``-cl-intel-<grf>-GRF-per-thread``)."""

    grf: int = _key(_int_choice("GRF count", (128, 256)), 256)


@dataclass(frozen=True)
class Verify:
    """Verification against a numpy reference: always on, with a tolerance derived from the types and K
    (xegemm.verify); the seed of the random inputs is the one setting."""

    seed: int = _key(_non_negative_int, 0)


@dataclass(frozen=True)
class Profile:
    """Timing: untimed warm-up launches, at least ``repeats`` timed launches, and at least ``min_time_ms``."""

    warmup: int = _key(_non_negative_int, 10)
    repeats: int = _key(_positive_int, 100)
    min_time_ms: float = _key(_non_negative_number, 0.0)


_SECTIONS: dict[str, type] = {
    "problem": Problem, "types": Types, "layout": Layout, "tile": Tile, "atoms": Atoms,
    "pipeline": Pipeline, "target": Target, "verify": Verify, "profile": Profile,
}
_TOP_LEAVES: dict[str, Check] = {"name": _config_name, "description": _text}
_LEAF_CHECKS: dict[str, Check] = {
    **_TOP_LEAVES,
    **{f"{section}.{f.name}": f.metadata["check"] for section, cls in _SECTIONS.items() for f in fields(cls)},
}
_TOP_KEYS = (*_TOP_LEAVES, *_SECTIONS, "sweep", "constraints")
_SWEEPABLE = (*(key for key in _LEAF_CHECKS if key not in _TOP_LEAVES), *_SECTIONS)


_SECTION_KEYS: dict[str, tuple[str, ...]] = {
    section: tuple(f.name for f in fields(cls)) for section, cls in _SECTIONS.items()}


@dataclass(frozen=True)
class Constraint:
    """A boolean expression over config values, e.g. ``tile.workgroup[0] % (tile.subgroups[0] * 8) == 0``."""

    text: str

    def __post_init__(self) -> None:
        try:
            _compile_expression(self.text)
        except _Invalid as exc:
            raise ConfigError([ConfigIssue("<constraint>", None, None, f'"{self.text}": {exc}')]) from None

    def check(self, values: Mapping[str, Any]) -> str | None:
        """None when the constraint holds for these dotted-key values, else the reason it does not."""
        expression = _compile_expression(self.text)
        try:
            holds = bool(expression.evaluate(values))
            verdict = "is false"
        except _EVALUATION_ERRORS as exc:
            holds, verdict = False, f"could not be evaluated ({_evaluation_message(exc)})"
        if holds:
            return None
        shown = ", ".join(f"{text}={_show(value)}" for text, value in expression.reference_values(values))
        return f'constraint "{self.text}" {verdict}' + (f": {shown}" if shown else "")


@dataclass(frozen=True)
class Config:
    """One validated config.  ``sweep`` maps a dotted key (or section) to its tuple of values."""

    name: str
    problem: Problem
    types: Types = Types()
    layout: Layout = Layout()
    tile: Tile = Tile()
    atoms: Atoms = Atoms()
    pipeline: Pipeline = Pipeline()
    target: Target = Target()
    verify: Verify = Verify()
    profile: Profile = Profile()
    sweep: Mapping[str, tuple[Any, ...]] = field(default_factory=dict, hash=False)
    constraints: tuple[Constraint, ...] = ()
    description: str = ""
    source: str = "<string>"

    def flat_values(self) -> dict[str, Any]:
        """Every config value by dotted key (``tile.workgroup`` -> (256, 256, 32)); no sweep, no constraints."""
        values = {key: getattr(self, key) for key in _TOP_LEAVES}
        for section in _SECTIONS:
            values.update({f"{section}.{name}": getattr(getattr(self, section), name)
                           for name in _SECTION_KEYS[section]})
        return values

    def with_overrides(self, overrides: Mapping[str, Any]) -> Config:
        """A copy with dotted keys replaced (``{"tile.workgroup": [128, 128, 32]}``), each value checked."""
        values = self.flat_values()
        issues = []
        for key, value in overrides.items():
            check = _LEAF_CHECKS.get(key)
            try:
                if check is None:
                    raise _Invalid("unknown key" + _did_you_mean(key, _LEAF_CHECKS))
                values[key] = check(value)
            except _Invalid as exc:
                issues.append(ConfigIssue(self.source, None, key, str(exc)))
        if issues:
            raise ConfigError(issues)
        return _assemble(values, self.sweep, self.constraints, self.source)

    def to_dict(self) -> dict[str, Any]:
        """The config as plain JSON-able data, in the shape of the YAML file (loadable again)."""
        data: dict[str, Any] = {key: getattr(self, key) for key in _TOP_LEAVES}
        for section in _SECTIONS:
            data[section] = {name: _plain_data(getattr(getattr(self, section), name))
                             for name in _SECTION_KEYS[section]}
        data["sweep"] = {key: [_plain_data(choice) for choice in choices] for key, choices in self.sweep.items()}
        data["constraints"] = [constraint.text for constraint in self.constraints]
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


def _plain_data(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain_data(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain_data(item) for key, item in value.items()}
    return value


def _assemble(values: Mapping[str, Any], sweep: Mapping[str, tuple[Any, ...]],
              constraints: tuple[Constraint, ...], source: str) -> Config:
    sections = {section: cls(**{name: values[f"{section}.{name}"] for name in _SECTION_KEYS[section]})
                for section, cls in _SECTIONS.items()}
    return Config(name=values["name"], description=values["description"], sweep=dict(sweep),
                  constraints=tuple(constraints), source=source, **sections)


# --------------------------------------------------------------------------------------------------------
# Reading: YAML nodes -> plain values with the line of every key and item, then validation against the
# schema.  A path is a tuple of mapping keys and list indices, e.g. ("sweep", "tile.workgroup", 1).

KeyPath = tuple[Any, ...]
_PLAIN_SCALAR_TAGS = {f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null")}
_MAP_TAG, _SEQ_TAG = "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
_MAX_VALUES = 100_000


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
        except _Invalid as exc:
            self.report_value(path, str(exc))
            return False, None

    def check_section(self, section: str, value: Any, path: KeyPath, partial: bool) -> tuple[bool, dict[str, Any]]:
        """Validate one section mapping; returns (all valid, {key within the section: canonical value})."""
        names = _SECTION_KEYS[section]
        if value is None and section != "problem":
            value = {}
        if not isinstance(value, dict):
            self.report_value(path, f"expected a mapping with keys {', '.join(names)}, found {_found(value)}")
            return False, {}
        valid, values = True, {}
        for name, item in value.items():
            if name not in names:
                self.report((*path, name), "unknown key" + (_did_you_mean(name, names)
                                                            or f"; expected one of {', '.join(names)}"))
                valid = False
                continue
            ok, values[name] = self.check_value((*path, name), _LEAF_CHECKS[f"{section}.{name}"], item)
            valid = valid and ok
        if not partial:
            for f in fields(_SECTIONS[section]):
                if f.name not in value and _is_required(f):
                    self.report((*path, f.name), "missing required key")
                    valid = False
        return valid, values

    def check_document(self, document: Any, default_name: str) -> Config | None:
        """The Config of a whole document, or None when issues were reported."""
        if not isinstance(document, dict):
            self.report_value((), "expected a mapping of config keys at the top level "
                                  f"({', '.join(_TOP_KEYS)}), found {_found(document)}")
            return None
        values: dict[str, Any] = {"name": default_name, "description": ""}
        for section in _SECTIONS:
            values.update({f"{section}.{f.name}": f.default for f in fields(_SECTIONS[section])
                           if not _is_required(f)})
        sweep: dict[str, tuple[Any, ...]] = {}
        constraints: tuple[Constraint, ...] = ()
        for key, value in document.items():
            if key in _TOP_LEAVES:
                _, values[key] = self.check_value((key,), _TOP_LEAVES[key], value)
            elif key in _SECTIONS:
                _, section_values = self.check_section(key, value, (key,), partial=False)
                values.update({f"{key}.{name}": item for name, item in section_values.items()})
            elif key == "sweep":
                sweep = self.check_sweep(value)
            elif key == "constraints":
                constraints = self.check_constraints(value)
            else:
                self.report((key,), "unknown key" + (_did_you_mean(key, _TOP_KEYS)
                                                     or f"; expected one of {', '.join(_TOP_KEYS)}"))
        if "problem" not in document:
            self.report(("problem",), "missing required key; expected a mapping {m, n, k} (batch optional)")
        if self.issues:
            return None
        return _assemble(values, sweep, constraints, self.source)

    def check_sweep(self, sweep: Any) -> dict[str, tuple[Any, ...]]:
        """``sweep`` validated: dotted key (or section) -> tuple of canonical values (section: dicts)."""
        if sweep is None:
            return {}
        if not isinstance(sweep, dict):
            self.report_value(("sweep",), "expected a mapping of config key -> list of values, "
                                          f"found {_found(sweep)}")
            return {}
        axes: dict[str, tuple[Any, ...]] = {}
        for key, choices in sweep.items():
            path = ("sweep", key)
            if key in _TOP_LEAVES:
                self.report(path, f"'{key}' cannot be swept; sweep one of {', '.join(_SECTIONS)} or their keys")
                continue
            if key not in _SWEEPABLE:
                self.report(path, "names no config key" + _did_you_mean(key, _SWEEPABLE))
                continue
            expected = (f"a non-empty list of mappings of {key} keys" if key in _SECTIONS
                        else f"a non-empty list of values for {key}")
            if key not in _SECTIONS and _passes(_LEAF_CHECKS[key], choices):
                self.report_value(path, f"expected {expected}, found the single value {_found(choices)}; "
                                        f"write [{_show(choices)}] to sweep over one value")
                continue
            if not isinstance(choices, list) or not choices:
                self.report_value(path, f"expected {expected}, found {_found(choices)}")
                continue
            checked = [self.check_choice(key, choice, (*path, index)) for index, choice in enumerate(choices)]
            if all(ok for ok, _ in checked):
                axes[key] = tuple(value for _, value in checked)
        for section in (key for key in axes if key in _SECTIONS):
            for leaf in {f"{section}.{name}" for choice in axes[section] for name in choice} & axes.keys():
                self.report(("sweep", leaf), f"is also swept by sweep key '{section}'; sweep each key once")
        return axes

    def check_choice(self, key: str, choice: Any, path: KeyPath) -> tuple[bool, Any]:
        """One value of ``sweep[key]``, checked exactly like the key (or section) it replaces."""
        if key in _SECTIONS:
            return self.check_section(key, choice, path, partial=True)
        return self.check_value(path, _LEAF_CHECKS[key], choice)

    def check_constraints(self, constraints: Any) -> tuple[Constraint, ...]:
        """``constraints`` validated: each entry parses and uses only allowed constructs."""
        if constraints is None:
            return ()
        if not isinstance(constraints, list):
            self.report_value(("constraints",), "expected a list of expressions (strings), "
                                                f"found {_found(constraints)}")
            return ()
        checked = []
        for index, text in enumerate(constraints):
            if not isinstance(text, str):
                self.report_value(("constraints", index), f"expected an expression (a string), found {_found(text)}")
                continue
            try:
                _compile_expression(text)
            except _Invalid as exc:
                self.report_value(("constraints", index), f'"{text}": {exc}')
                continue
            checked.append(Constraint(text))
        return tuple(checked)


def _is_required(f: Field[Any]) -> bool:
    return f.default is MISSING


def _passes(check: Check, value: Any) -> bool:
    try:
        check(value)
    except _Invalid:
        return False
    return True


def _default_name(source: str) -> str:
    if source.startswith("<"):
        return "gemm"
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(source).stem)
    return name if _NAME.fullmatch(name) else "gemm"


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
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([ConfigIssue(source, None, None, f"cannot read the file: {exc.strerror or exc}")]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([ConfigIssue(source, None, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})")]) \
            from None
    return config_from_text(text, source)


# --------------------------------------------------------------------------------------------------------
# Sweep expansion


def _axis_overrides(key: str, choice: Any) -> dict[str, Any]:
    """The dotted-key overrides one sweep choice stands for."""
    if key in _SECTIONS:
        return {f"{key}.{name}": value for name, value in choice.items()}
    return {key: choice}


def expand(config: Config) -> list[Variant]:
    """All variants of the sweep (file order, last key fastest), duplicates collapsed, failures marked."""
    base = replace(config, sweep={})
    axes = [[_axis_overrides(key, choice) for choice in choices] for key, choices in config.sweep.items()]
    variants, seen = [], set()
    for combination in itertools.product(*axes):
        overrides = {key: value for choice in combination for key, value in choice.items()}
        resolved = base.with_overrides(overrides)
        values = resolved.flat_values()
        identity = tuple(values.items())
        if identity in seen:
            continue
        seen.add(identity)
        reasons = [reason for constraint in resolved.constraints if (reason := constraint.check(values))]
        variants.append(Variant(resolved, overrides, "; ".join(reasons) or None))
    return variants


# --------------------------------------------------------------------------------------------------------
# Constraint expressions: Python's ast compiled into closures over a dict of dotted-key values.  Only the
# node types with a ``_compile_<Node>`` method below are allowed; everything else is named and refused.

_FUNCTIONS: dict[str, Callable[..., Any]] = {"min": min, "max": max, "abs": abs, "len": len, "all": all, "any": any}
_ALLOWED = ("allowed: literals, config keys, + - * / // % **, comparisons, and/or/not, x if c else y, "
            + "/".join(_FUNCTIONS) + "()")
_CONSTRUCTS = {
    ast.Lambda: "lambda", ast.ListComp: "list comprehension", ast.SetComp: "set comprehension",
    ast.DictComp: "dict comprehension", ast.GeneratorExp: "generator expression",
    ast.NamedExpr: "assignment expression (:=)", ast.Dict: "dict display", ast.Set: "set display",
    ast.JoinedStr: "f-string", ast.FormattedValue: "f-string", ast.Await: "await", ast.Yield: "yield",
    ast.YieldFrom: "yield from", ast.Starred: "starred expression", ast.Slice: "slice",
}
_OPERATOR_SYMBOLS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**",
    ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>",
    ast.Invert: "~", ast.Is: "is", ast.IsNot: "is not",
}
_MAX_EXPONENT, _MAX_INT_BITS = 64, 4096


class _EvaluationError(Exception):
    """A constraint that cannot be evaluated for one variant."""


_EVALUATION_ERRORS = (_EvaluationError, ArithmeticError, TypeError, ValueError, IndexError)


def _evaluation_message(exc: Exception) -> str:
    return "division by zero" if isinstance(exc, ZeroDivisionError) else str(exc)


def _power(base: Any, exponent: Any) -> Any:
    if abs(exponent) > _MAX_EXPONENT or (_is_int(base) and _is_int(exponent)
                                         and base.bit_length() * exponent > _MAX_INT_BITS):
        raise _EvaluationError(f"{_show(base)} ** {_show(exponent)} is too large")
    return base ** exponent


_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
               ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: _power}
_COMPARISONS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
                ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b,
                ast.NotIn: lambda a, b: a not in b}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}

Evaluate = Callable[[Mapping[str, Any]], Any]


def _config_key(node: ast.expr) -> str | None:
    """``tile.workgroup`` for a Name/Attribute chain rooted in a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _forbidden(construct: str) -> _Invalid:
    return _Invalid(f"forbidden construct: {construct} ({_ALLOWED})")


class _Expression:
    """A constraint compiled into closures, with the config references it reads (for rejection reasons)."""

    def __init__(self, text: str):
        self.references: dict[str, Evaluate] = {}
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            raise _Invalid(f"does not parse as an expression: {exc.msg} (column {exc.offset})") from None
        except RecursionError:
            raise _Invalid("does not parse as an expression: nested too deeply") from None
        try:
            self._evaluate = self._compile(tree.body)
        except RecursionError:
            raise _Invalid("nested too deeply") from None

    def evaluate(self, values: Mapping[str, Any]) -> Any:
        return self._evaluate(values)

    def reference_values(self, values: Mapping[str, Any]) -> list[tuple[str, Any]]:
        """(text, value) of each config reference, in order of appearance; ones that fail are left out."""
        shown = []
        for text, reference in self.references.items():
            try:
                shown.append((text, reference(values)))
            except _EVALUATION_ERRORS:
                continue
        return shown

    # -- dispatch
    def _compile(self, node: ast.expr) -> Evaluate:
        compile_node = getattr(self, f"_compile_{type(node).__name__}", None)
        if compile_node is None:
            raise _forbidden(_CONSTRUCTS.get(type(node), type(node).__name__))
        return compile_node(node)

    # -- leaves
    def _compile_Constant(self, node: ast.Constant) -> Evaluate:
        value = node.value
        if not (value is None or isinstance(value, (bool, int, float, str))):
            raise _forbidden(f"{type(value).__name__} literal")
        return lambda values: value

    def _reference(self, key: str, text: str, record: bool = True) -> Evaluate:
        if key in _SECTIONS:
            raise _Invalid(f"'{key}' is a section, not a value; use one of its keys, e.g. "
                           f"{key}.{_SECTION_KEYS[key][0]}")
        if key not in _LEAF_CHECKS:
            raise _Invalid(f"unknown name '{key}'" + _did_you_mean(key, _LEAF_CHECKS))

        def reference(values: Mapping[str, Any]) -> Any:
            return values[key]
        if record:
            self.references.setdefault(text, reference)
        return reference

    def _compile_Name(self, node: ast.Name) -> Evaluate:
        if node.id.startswith("__"):
            raise _forbidden(f"dunder name '{node.id}'")
        if node.id in _FUNCTIONS:
            raise _Invalid(f"function '{node.id}' used as a value; call it: {node.id}(...)")
        return self._reference(node.id, node.id)

    def _compile_Attribute(self, node: ast.Attribute) -> Evaluate:
        if node.attr.startswith("__"):
            raise _forbidden(f"attribute access '.{node.attr}'")
        key = _config_key(node)
        if key is None:
            self._compile(node.value)
            raise _forbidden(f"attribute access '.{node.attr}' on a value that is not a config key")
        root = key.split(".", 1)[0]
        if root.startswith("__"):
            raise _forbidden(f"dunder name '{root}'")
        return self._reference(key, key)

    def _compile_Subscript(self, node: ast.Subscript) -> Evaluate:
        key = _config_key(node.value)
        constant_index = isinstance(node.slice, ast.Constant) and _is_int(node.slice.value)
        if key is not None and constant_index and key in _LEAF_CHECKS:
            container = self._reference(key, key, record=False)
        else:
            container = self._compile(node.value)
        index = self._compile(node.slice)

        def subscript(values: Mapping[str, Any]) -> Any:
            sequence, position = container(values), index(values)
            if not isinstance(sequence, (tuple, str)) or not _is_int(position):
                raise _EvaluationError(f"cannot index {_show(sequence)} with {_show(position)}")
            if not -len(sequence) <= position < len(sequence):
                raise _EvaluationError(f"index {position} is out of range for {_show(sequence)}")
            return sequence[position]
        if key is not None and constant_index and key in _LEAF_CHECKS:
            self.references.setdefault(ast.unparse(node), subscript)
        return subscript

    def _compile_Tuple(self, node: ast.Tuple | ast.List) -> Evaluate:
        items = [self._compile(item) for item in node.elts]
        return lambda values: tuple(item(values) for item in items)

    _compile_List = _compile_Tuple

    # -- operators
    def _compile_BinOp(self, node: ast.BinOp) -> Evaluate:
        apply = _ARITHMETIC.get(type(node.op))
        if apply is None:
            raise _forbidden(f"operator '{_OPERATOR_SYMBOLS.get(type(node.op), type(node.op).__name__)}'")
        symbol = _OPERATOR_SYMBOLS[type(node.op)]
        left, right = self._compile(node.left), self._compile(node.right)

        def arithmetic(values: Mapping[str, Any]) -> Any:
            a, b = left(values), right(values)
            if not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
                raise _EvaluationError(f"'{symbol}' needs numbers, got {_show(a)} and {_show(b)}")
            result = apply(a, b)
            if _is_int(result) and result.bit_length() > _MAX_INT_BITS:
                raise _EvaluationError(f"a result of '{symbol}' is too large")
            return result
        return arithmetic

    def _compile_UnaryOp(self, node: ast.UnaryOp) -> Evaluate:
        apply = _UNARY.get(type(node.op))
        if apply is None:
            raise _forbidden(f"operator '{_OPERATOR_SYMBOLS.get(type(node.op), type(node.op).__name__)}'")
        operand = self._compile(node.operand)

        def unary(values: Mapping[str, Any]) -> Any:
            value = operand(values)
            if not isinstance(node.op, ast.Not) and not isinstance(value, (int, float)):
                raise _EvaluationError(f"unary minus/plus needs a number, got {_show(value)}")
            return apply(value)
        return unary

    def _compile_BoolOp(self, node: ast.BoolOp) -> Evaluate:
        parts = [self._compile(value) for value in node.values]
        stop_when = not isinstance(node.op, ast.And)  # `and` stops at a false part, `or` at a true one

        def boolean(values: Mapping[str, Any]) -> Any:
            result = None
            for part in parts:
                result = part(values)
                if bool(result) == stop_when:
                    return result
            return result
        return boolean

    def _compile_Compare(self, node: ast.Compare) -> Evaluate:
        for op in node.ops:
            if type(op) not in _COMPARISONS:
                raise _forbidden(f"operator '{_OPERATOR_SYMBOLS.get(type(op), type(op).__name__)}'")
        first = self._compile(node.left)
        chain = [(_COMPARISONS[type(op)], self._compile(right)) for op, right in zip(node.ops, node.comparators)]

        def compare(values: Mapping[str, Any]) -> bool:
            left = first(values)
            for apply, right_value in chain:
                right = right_value(values)
                if not apply(left, right):
                    return False
                left = right
            return True
        return compare

    def _compile_IfExp(self, node: ast.IfExp) -> Evaluate:
        test, body, orelse = self._compile(node.test), self._compile(node.body), self._compile(node.orelse)
        return lambda values: body(values) if test(values) else orelse(values)

    def _compile_Call(self, node: ast.Call) -> Evaluate:
        if not isinstance(node.func, ast.Name):
            self._compile(node.func)
            raise _forbidden(f"call of '{ast.unparse(node.func)}'")
        if node.func.id.startswith("__"):
            raise _forbidden(f"dunder name '{node.func.id}'")
        function = _FUNCTIONS.get(node.func.id)
        if function is None:
            raise _forbidden(f"call to '{node.func.id}'")
        if node.keywords:
            raise _forbidden(f"keyword argument '{node.keywords[0].arg or '**'}='")
        arguments = [self._compile(argument) for argument in node.args]
        return lambda values: function(*(argument(values) for argument in arguments))


@lru_cache(maxsize=256)
def _compile_expression(text: str) -> _Expression:
    return _Expression(text)
