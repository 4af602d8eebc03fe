"""Constraint expressions: Python's :mod:`ast` compiled into closures over a dict of dotted-key values.

Never ``eval``: only the node types with a ``_compile_<Node>`` method are allowed; everything else is named
and refused when the config is loaded.  Powers and integers are bounded, so no expression can run away.
"""

from __future__ import annotations

import ast
import operator
from functools import lru_cache
from typing import Any, Callable, Mapping

from xegemm.config.checks import Invalid, did_you_mean, is_int, show_value
from xegemm.config.sections import LEAF_CHECKS, SECTION_KEYS, SECTIONS

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


EVALUATION_ERRORS = (_EvaluationError, ArithmeticError, TypeError, ValueError, IndexError)


def evaluation_message(exc: Exception) -> str:
    return "division by zero" if isinstance(exc, ZeroDivisionError) else str(exc)


def _power(base: Any, exponent: Any) -> Any:
    if abs(exponent) > _MAX_EXPONENT or (is_int(base) and is_int(exponent)
                                         and base.bit_length() * exponent > _MAX_INT_BITS):
        raise _EvaluationError(f"{show_value(base)} ** {show_value(exponent)} is too large")
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


def _forbidden(construct: str) -> Invalid:
    return Invalid(f"forbidden construct: {construct} ({_ALLOWED})")


class _Expression:
    """A constraint compiled into closures, with the config references it reads (for rejection reasons)."""

    def __init__(self, text: str):
        self.references: dict[str, Evaluate] = {}
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            raise Invalid(f"does not parse as an expression: {exc.msg} (column {exc.offset})") from None
        except RecursionError:
            raise Invalid("does not parse as an expression: nested too deeply") from None
        try:
            self._evaluate = self._compile(tree.body)
        except RecursionError:
            raise Invalid("nested too deeply") from None

    def evaluate(self, values: Mapping[str, Any]) -> Any:
        return self._evaluate(values)

    def reference_values(self, values: Mapping[str, Any]) -> list[tuple[str, Any]]:
        """(text, value) of each config reference, in order of appearance; ones that fail are left out."""
        shown = []
        for text, reference in self.references.items():
            try:
                shown.append((text, reference(values)))
            except EVALUATION_ERRORS:
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
        if key in SECTIONS:
            raise Invalid(f"'{key}' is a section, not a value; use one of its keys, e.g. "
                           f"{key}.{SECTION_KEYS[key][0]}")
        if key not in LEAF_CHECKS:
            raise Invalid(f"unknown name '{key}'" + did_you_mean(key, LEAF_CHECKS))

        def reference(values: Mapping[str, Any]) -> Any:
            return values[key]
        if record:
            self.references.setdefault(text, reference)
        return reference

    def _compile_Name(self, node: ast.Name) -> Evaluate:
        if node.id.startswith("__"):
            raise _forbidden(f"dunder name '{node.id}'")
        if node.id in _FUNCTIONS:
            raise Invalid(f"function '{node.id}' used as a value; call it: {node.id}(...)")
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
        constant_index = isinstance(node.slice, ast.Constant) and is_int(node.slice.value)
        if key is not None and constant_index and key in LEAF_CHECKS:
            container = self._reference(key, key, record=False)
        else:
            container = self._compile(node.value)
        index = self._compile(node.slice)

        def subscript(values: Mapping[str, Any]) -> Any:
            sequence, position = container(values), index(values)
            if not isinstance(sequence, (tuple, str)) or not is_int(position):
                raise _EvaluationError(f"cannot index {show_value(sequence)} with {show_value(position)}")
            if not -len(sequence) <= position < len(sequence):
                raise _EvaluationError(f"index {position} is out of range for {show_value(sequence)}")
            return sequence[position]
        if key is not None and constant_index and key in LEAF_CHECKS:
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
                raise _EvaluationError(f"'{symbol}' needs numbers, got {show_value(a)} and {show_value(b)}")
            result = apply(a, b)
            if is_int(result) and result.bit_length() > _MAX_INT_BITS:
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
                raise _EvaluationError(f"unary minus/plus needs a number, got {show_value(value)}")
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
def compile_expression(text: str) -> _Expression:
    return _Expression(text)
