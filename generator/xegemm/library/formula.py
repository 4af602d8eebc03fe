"""Integer formulas written once, printed into kernels as C and evaluated in Python by the same text.

A formula is a tuple of (name, expression) steps over integer inputs; expressions use the subset where C and
Python agree on non-negative values: ``+ - * / %`` (``/`` is C's integer division, Python's ``//`` there),
``min``, ``max`` and comparisons (1 or 0, as in C).  :func:`evaluate` runs the steps in Python, so tests check
the very text the kernel prints (xegemm.plan.swizzle, xegemm.plan.stream_k).
"""

from __future__ import annotations

import ast
import operator
import re

import numpy as np

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.floordiv,
        ast.Mod: operator.mod}
_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
            ast.Eq: operator.eq, ast.NotEq: operator.ne}
_CALLS = {"min": min, "max": max}


def _value(node: ast.expr, env: dict[str, int]) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _value(node.left, env), _value(node.right, env)
        if isinstance(node.op, (ast.Div, ast.Mod)):
            assert np.all(np.asarray(left) >= 0) and np.all(np.asarray(right) > 0), \
                "C and Python integer division differ for negative operands"
        return _OPS[type(node.op)](left, right)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
        return int(_COMPARE[type(node.ops[0])](_value(node.left, env), _value(node.comparators[0], env)))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS:
        return _CALLS[node.func.id](_value(arg, env) for arg in node.args)
    raise ValueError(f"not part of the formulas' C subset: {ast.dump(node)}")


def evaluate(steps, env: dict[str, int]) -> dict[str, int]:
    """``env`` extended by each (name, expression) step in order, evaluated as the C evaluates it."""
    env = dict(env)
    for name, expr in steps:
        env[name] = _value(ast.parse(expr, mode="eval").body, env)
    return env


def substitute(expr: str, constants: dict[str, int | str]) -> str:
    """``expr`` with whole-word names replaced by constants (the tile sizes, the group counts)."""
    return re.sub(r"\b(" + "|".join(map(re.escape, constants)) + r")\b", lambda m: str(constants[m.group(1)]), expr) \
        if constants else expr
