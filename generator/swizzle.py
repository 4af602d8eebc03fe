"""Work-group rasterisation (``tile.swizzle``): which C tile each work-group computes.

The runtime hands out work-groups in their linear order, x fastest (x walks the N tiles, y the M tiles).
With swizzle G = 1 work-group (x, y) computes tile (n = x, m = y): consecutive work-groups walk a row of
tiles, sharing one A panel and each needing another B panel, so B is streamed again for every tile row
unless all of it stays in cache.  With G > 1 the linear order is cut into groups of G tile rows, and within
a group the tiles are walked column-major (Triton's GROUP_M, CUTLASS's threadblock swizzle): G consecutive
work-groups share a B panel, and the group's G A panels are reused across its columns.  The last group may
have fewer rows (a ragged grid): the formula takes ``min(rows left, G)``, so every tile is computed exactly
once.

The formula is written once, as :data:`STEPS` (integer arithmetic on non-negative values: ``/`` and ``%``
are C's, which Python's ``//`` and ``%`` equal there); the kernel template prints it as C and
:func:`tile_of` evaluates the same text in Python, which is what the tests check for a bijection.
"""

from __future__ import annotations

import ast
import operator
import re

# (name, expression) in order; inputs: gx, gy (get_group_id(0), (1)), nx, ny (get_num_groups(0), (1)), G
STEPS: tuple[tuple[str, str], ...] = (
    ("wg_id", "gy * nx + gx"),                      # the runtime's linear order of this work-group
    ("wg_per_group", "G * nx"),                     # work-groups in one group of G tile rows
    ("first_m", "wg_id / wg_per_group * G"),        # the group's first tile row
    ("rows", "min(ny - first_m, G)"),               # tile rows in this group (fewer in the last one)
    ("tile_m", "first_m + wg_id % wg_per_group % rows"),
    ("tile_n", "wg_id % wg_per_group / rows"),
)
INPUTS_C = {"gx": "(int)get_group_id(0)", "gy": "(int)get_group_id(1)",
            "nx": "(int)get_num_groups(0)", "ny": "(int)get_num_groups(1)"}


def c_lines(group: int) -> list[str]:
    """The OpenCL C statements that define ``tile_m`` and ``tile_n`` for swizzle ``group`` (> 1)."""
    lines = [f"const int {name} = {c};" for name, c in INPUTS_C.items()]
    return lines + [f"const int {name} = " + re.sub(r"\bG\b", str(group), expr) + ";" for name, expr in STEPS]


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.floordiv,
        ast.Mod: operator.mod}


def _value(node: ast.expr, env: dict[str, int]) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _value(node.left, env), _value(node.right, env)
        assert left >= 0 and right >= 0, "C and Python integer division differ for negative operands"
        return _OPS[type(node.op)](left, right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "min":
        return min(_value(arg, env) for arg in node.args)
    raise ValueError(f"not part of the swizzle formula's C subset: {ast.dump(node)}")


def tile_of(gx: int, gy: int, nx: int, ny: int, group: int) -> tuple[int, int]:
    """(tile_m, tile_n) of work-group (gx, gy) in an nx x ny grid: :data:`STEPS` evaluated as the C does."""
    env = {"gx": gx, "gy": gy, "nx": nx, "ny": ny, "G": group}
    for name, expr in STEPS:
        env[name] = _value(ast.parse(expr, mode="eval").body, env)
    return env["tile_m"], env["tile_n"]
