"""Config values: the checks every key's value goes through, and the errors that name file, line and key.

A check takes a plain value and returns it canonical (lists become tuples, aliases their canonical name) or
raises :class:`Invalid` saying what was expected; the reader adds where.  The type and atom checks ask the
registries (:mod:`xegemm.library.dtypes`) and the atom models, so a name is accepted here only when the rest of
xegemm can use it.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import yaml

from xegemm.atoms.block1d import NAME_RE as BLOCK1D_ATOM_NAME
from xegemm.atoms.block1d import Block1DAtom
from xegemm.atoms.copy import NAME_RE as COPY_ATOM_NAME
from xegemm.atoms.copy import CopyAtom
from xegemm.atoms.mma import MmaAtom
from xegemm.library.dtypes import ALIASES, CODE_PATTERN, DTYPES as DTYPE_REGISTRY
from xegemm.library.dtypes import dtype
from xegemm.epilogues.fixed import BIAS_KINDS
from xegemm.epilogues.outputs import OUTPUT_TYPES
from xegemm.epilogues.graph import KINDS
from xegemm.epilogues.registry import ACTIVATIONS
from xegemm.errors import XegemmError
from xegemm.grouped.problem import GroupedProblem, GroupedProblemError
from xegemm.grouped.schedule import MODES as WALK_MODES
from xegemm.quant.formats import FORMATS as QUANT_FORMATS
from xegemm.quant.spec import COMPUTE_TYPES, FP8, GROUP_WORDS, SCALE_LAYOUTS, SCALE_TYPES, WEIGHT_TYPES, ZERO_TYPES
from xegemm.library.layouts import ALIASES as LAYOUT_ALIASES
from xegemm.library.layouts import LAYOUTS as LAYOUT_REGISTRY
from xegemm.library.targets import LOWERING_NAMES

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


class Invalid(Exception):
    """A value or expression that is wrong; the text says what was expected (caller adds where)."""


def show_value(value: Any) -> str:
    """A value spelled as in a YAML flow document."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {show_value(item)}" for key, item in value.items()) + "}"
    return str(value)


_RESOLVER, _STR_TAG = yaml.resolver.Resolver(), "tag:yaml.org,2002:str"


def found(value: Any) -> str:
    """``show_value`` shortened, with the YAML type where the spelling alone could mislead."""
    text = show_value(value)
    if len(text) > 70:
        text = text[:67] + "..."
    kinds = {bool: "a boolean", float: "a float", dict: "a mapping"}
    kind = kinds.get(type(value))
    if isinstance(value, str) and _RESOLVER.resolve(yaml.ScalarNode, value, (True, False)) != _STR_TAG:
        kind = "a string"  # '1024', 'true': quoted, so not the number or boolean it looks like
    if kind is None and not isinstance(value, (str, int, list, tuple, type(None))):
        kind = type(value).__name__
    return f"{text} ({kind})" if kind else text


def expected(what: str, value: Any) -> Invalid:
    return Invalid(f"expected {what}, found {found(value)}")


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    match = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean {match[0]!r}?" if match else ""


# --------------------------------------------------------------------------------------------------------
# Value checks: each takes a plain value and returns it canonical (lists become tuples, aliases their
# canonical name) or raises Invalid saying what was expected.

Check = Callable[[Any], Any]


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def positive_int(value: Any) -> int:
    if is_int(value) and value > 0:
        return value
    raise expected("a positive integer", value)


def non_negative_int(value: Any) -> int:
    if is_int(value) and value >= 0:
        return value
    raise expected("a non-negative integer", value)


def non_negative_number(value: Any) -> float:
    if is_number(value) and value >= 0:
        return float(value)
    raise expected("a non-negative number", value)


def number(value: Any) -> float:
    if is_number(value) and math.isfinite(value):
        return float(value)
    raise expected("a finite number", value)


def number_range(value: Any) -> tuple[float, float]:
    if (isinstance(value, (list, tuple)) and len(value) == 2 and all(is_number(v) for v in value)
            and not any(math.isnan(v) for v in value) and value[0] <= value[1]):
        return (float(value[0]), float(value[1]))
    raise expected("[low, high]: two numbers with low <= high (.inf and -.inf allowed)", value)


def text(value: Any) -> str:
    if isinstance(value, str):
        return value
    raise expected("a string", value)


NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def config_name(value: Any) -> str:
    if isinstance(value, str) and NAME_PATTERN.fullmatch(value):
        return value
    raise expected("a name made of letters, digits, '_', '.' and '-'", value)


def int_list(count: int, meaning: str, minimum: int) -> Check:
    """A list of ``count`` integers, each at least ``minimum`` (0 or 1)."""
    what = f"a list of {count} {('non-negative', 'positive')[minimum]} integers {meaning}"

    def check(value: Any) -> tuple[int, ...]:
        if isinstance(value, (list, tuple)) and len(value) == count and all(
                is_int(item) and item >= minimum for item in value):
            return tuple(value)
        raise expected(what, value)
    return check


def positive_ints(count: int, meaning: str) -> Check:
    return int_list(count, meaning, 1)


def non_negative_ints(count: int, meaning: str) -> Check:
    return int_list(count, meaning, 0)


def row_counts(value: Any) -> tuple[int, ...]:
    """A list of any length of non-negative integers (rows per MoE expert)."""
    if isinstance(value, (list, tuple)) and all(is_int(item) and item >= 0 for item in value):
        return tuple(value)
    raise expected("a list of non-negative integers (rows per expert)", value)


def group_list(value: Any) -> tuple[tuple[int, int, int], ...]:
    """A grouped problem's groups: a list of {m, n, k} mappings or 'MxNxK' strings (m may be 0; empty: none)."""
    if not isinstance(value, (list, tuple)):
        raise expected("a list of groups, each {m, n, k} or 'MxNxK'", value)
    if not value:
        return ()                      # not a grouped problem
    try:
        return tuple((g.m, g.n, g.k) for g in GroupedProblem.of(list(value)).groups)
    except GroupedProblemError as exc:
        raise Invalid(str(exc)) from None


def _word(what: str, words: tuple[str, ...], aliases: Mapping[str, str]) -> Check:
    def check(value: Any) -> str:
        if not isinstance(value, str):
            raise expected(f"a {what} (one of {', '.join(words)})", value)
        spelled = value.lower()
        canonical = aliases.get(spelled, spelled)
        if canonical in words:
            return canonical
        match = difflib.get_close_matches(spelled, [*words, *aliases], n=1, cutoff=0.6)
        hint = f"; did you mean {aliases.get(match[0], match[0])!r}?" if match else ""
        raise Invalid(f"unknown {what} {value!r}; expected one of {', '.join(words)}{hint}")
    return check


ROTATE_SETTINGS = ("auto", "on", "off")


def rotate_setting(value: Any) -> str:
    """``profile.rotate``: auto, or true / false (YAML's on / off are booleans too): rotating buffers in timing
    (xegemm.evaluate.timing.rotation_for)."""
    if value is True or value is False:
        return "on" if value else "off"
    if isinstance(value, str) and value.lower() in ROTATE_SETTINGS:
        return value.lower()
    raise expected("auto, true or false (rotate the operands' buffers while timing)", value)


def int_choice(what: str, numbers: tuple[int, ...]) -> Check:
    def check(value: Any) -> int:
        if is_int(value) and value in numbers:
            return value
        raise expected(f"a {what}: one of {', '.join(map(str, numbers))}", value)
    return check


def _atom_name(kind: str, pattern: re.Pattern[str], spelling: str, example: str,
               legal: Callable[[str], str]) -> Check:
    """An atom name spelled right (``pattern``) and legal for its atom model (``legal`` raises the model's
    error naming the hardware rule it breaks)."""
    what = f"{kind} atom name {spelling} (e.g. {example}) or null for automatic"

    def check(value: Any) -> str | None:
        if value is None or value == "auto":
            return None
        if isinstance(value, str) and pattern.fullmatch(value):
            try:
                return legal(value)
            except XegemmError as exc:
                raise Invalid(str(exc)) from None
        raise expected(what, value)
    return check


DTYPES = tuple(DTYPE_REGISTRY)  # f16 bf16 tf32 f32 f64 s8 u8 s4 u4 s32: the registry's names
DTYPE_ALIASES = dict(ALIASES)
LAYOUTS = tuple(LAYOUT_REGISTRY)  # row col: the layout registry's names

# the atom models own the naming patterns: 2D block atoms, 1D block atoms for SIMD8 (dg2) plans, DPAS atoms
_COPY_ATOM = re.compile(f"(?:{COPY_ATOM_NAME.pattern})|(?:{BLOCK1D_ATOM_NAME.pattern})")
_MMA_ATOM = re.compile(rf"XE_[1-9][0-9]*x[1-9][0-9]*x[1-9][0-9]*_(?:{CODE_PATTERN}){{4}}_TT")

_dtype = _word("data type", DTYPES, DTYPE_ALIASES)


def _usable_dtype(role: str, quantized: tuple[str, ...] = (), how: str = "") -> Check:
    """A data type that some Xe DPAS uses in this role: ``input`` (A, B) or ``accumulator`` (acc, C), or one of
    ``quantized`` (types a quantized operand is stored in, converted to types.compute: ``how`` says so)."""
    def usable(t) -> bool:
        return bool(t.accumulators) if role == "input" else t.acc_ctype is not None

    def check(value: Any) -> str:
        name = _dtype(value)
        if not usable(dtype(name)) and name not in quantized:
            ok = ", ".join(t.name for t in DTYPE_REGISTRY.values() if usable(t))
            raise Invalid(f"{name} is a known data type, but no Xe DPAS has it as an {role} type; {role} types: {ok}"
                          + (f"; {how}" if how else ""))
        return name
    return check


def quant_group(value: Any) -> int | str:
    """``quant.group``: K elements per scale (a positive integer) or channel, tensor, block128."""
    if is_int(value) and value > 0:
        return value
    if isinstance(value, str) and value.lower() in GROUP_WORDS:
        return value.lower()
    raise Invalid(f"expected a positive integer (K elements per scale) or one of {', '.join(GROUP_WORDS)}, found "
                  f"{found(value)}" + (did_you_mean(value.lower(), GROUP_WORDS) if isinstance(value, str) else ""))


def compute_dtype(value: Any) -> str | None:
    """``types.compute``: the DPAS input type of a quantized GEMM, or null (auto: types.a when f16/bf16)."""
    if value is None or value == "auto":
        return None
    return _word("compute type", COMPUTE_TYPES, DTYPE_ALIASES)(value)


def _legal_copy_atom(name: str) -> str:
    (Block1DAtom if name.startswith("XE_1D_") else CopyAtom).parse(name).check()
    return name


input_dtype = _usable_dtype("input")
a_dtype = _usable_dtype("input", FP8, "or FP8 (e4m3, e5m2) with a quant_a: section")
b_dtype = _usable_dtype("input", WEIGHT_TYPES, f"or a quantized type ({', '.join(WEIGHT_TYPES)}) with a quant: section")
quant_format = _word("quantization format", ("none", *QUANT_FORMATS), {})
scale_dtype = _word("scale type", SCALE_TYPES, DTYPE_ALIASES)
zero_dtype = _word("zero-point type", ZERO_TYPES, DTYPE_ALIASES)
scale_layout = _word("scale layout", SCALE_LAYOUTS, {})
accumulator_dtype = _usable_dtype("accumulator")
layout = _word("layout", LAYOUTS, LAYOUT_ALIASES)
walk_mode = _word("tile walk", WALK_MODES, {"atomic": "dynamic"})
_lowering_word = _word("lowering", LOWERING_NAMES, {})


def lowering_name(value: Any) -> str | None:
    """A lowering's name, or None (null): the one the command chooses."""
    return None if value is None else _lowering_word(value)
bias_kind = _word("bias", BIAS_KINDS, {"per_row": "row", "per_col": "col", "column": "col", "per_column": "col"})
activation = _word("activation", tuple(ACTIVATIONS), {"gelu": "gelu_erf", "swish": "silu", "identity": "none"})
output_dtype = _word("C data type", OUTPUT_TYPES, DTYPE_ALIASES)
copy_atom = _atom_name("a block copy", _COPY_ATOM,
                       "XE_2D_[Packed_]<U4|U8|U16|U32|U64|TF32>x<rows>x<cols>_<LD|ST|PF>_<N|T|V> or "
                       "XE_1D_<U8|U16|U32|U64>x<rows>x<cols>_<LD|ST|PF>_SG<S>",
                       "XE_2D_U16x32x32_LD_N", _legal_copy_atom)
mma_atom = _atom_name("an MMA", _MMA_ATOM, "XE_<M>x<N>x<K>_<D><A><B><C>_TT", "XE_8x16x16_F32BF16BF16F32_TT",
                      lambda name: MmaAtom.parse(name).name)


# ---- traced epilogues (docs/epilogues.md) -----------------------------------------------------------------------
FUNCTION_REFERENCE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_.]*")
INPUT_KINDS = KINDS     # the kinds of a named input (xegemm.epilogues.graph, their one home)


def epilogue_function(value: Any) -> Any:
    """A traced epilogue: ``"package.module:function_name"`` (imported and traced when the config is loaded), a
    Python function (``xegemm.load(cfg, epilogue=fn)``), or None for the fixed epilogue."""
    if value is None or (callable(value) and not isinstance(value, (type, str))):
        return value
    if isinstance(value, str) and FUNCTION_REFERENCE.fullmatch(value):
        return value
    raise expected('"package.module:function_name" (dotted Python names)', value)


def epilogue_inputs(value: Any) -> tuple[tuple[str, str, str | None], ...]:
    """The kinds of a traced epilogue's named inputs: ``{bias: row, up: {kind: matrix, type: bf16}}`` ->
    ``(("bias", "row", None), ("up", "matrix", "bf16"))``."""
    if isinstance(value, tuple) and all(isinstance(v, tuple) and len(v) == 3 for v in value):
        value = {name: kind if t is None else {"kind": kind, "type": t} for name, kind, t in value}
    if not isinstance(value, dict) or not all(isinstance(k, str) and k.isidentifier() for k in value):
        raise expected("a mapping of input names to kinds, e.g. {bias: row, up: {kind: matrix, type: bf16}}", value)
    out = []
    for name, spec in value.items():
        kind, type_name = (spec.get("kind"), spec.get("type")) if isinstance(spec, dict) else (spec, None)
        if kind not in INPUT_KINDS or (isinstance(spec, dict) and set(spec) - {"kind", "type"}):
            raise Invalid(f"input {name}: expected one of {', '.join(INPUT_KINDS)} or {{kind: matrix, type: T}}, "
                          f"found {found(spec)}")
        out.append((name, kind, None if type_name is None else output_dtype(type_name)))
    return tuple(out)


def epilogue_outputs(value: Any) -> tuple[tuple[str, str], ...]:
    """The types of a traced epilogue's extra outputs: ``{aux: f16, rowmax: f32}``."""
    if isinstance(value, tuple) and all(isinstance(v, tuple) and len(v) == 2 for v in value):
        value = dict(value)
    if not isinstance(value, dict) or not all(isinstance(k, str) and k.isidentifier() for k in value):
        raise expected("a mapping of output names to types, e.g. {aux: f16, rowmax: f32}", value)
    return tuple((name, output_dtype(t)) for name, t in value.items())
