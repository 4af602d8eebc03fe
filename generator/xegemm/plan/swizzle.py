"""Work-group rasterisation (``tile.swizzle``): which C tile each work-group computes.

The runtime hands out work-groups in their linear order, x fastest (x walks the N tiles, y the M tiles).
With swizzle G = 1 work-group (x, y) computes tile (n = x, m = y): consecutive work-groups walk a row of
tiles, sharing one A panel and each needing another B panel, so B is streamed again for every tile row
unless all of it stays in cache.  With G > 1 the linear order is cut into groups of G tile rows, and within
a group the tiles are walked column-major (Triton's GROUP_M, CUTLASS's threadblock swizzle): G consecutive
work-groups share a B panel, and the group's G A panels are reused across its columns.  The last group may
have fewer rows (a ragged grid): the formula takes ``min(rows left, G)``, so every tile is computed exactly
once.

The formula is written once, as :data:`STEPS` (xegemm.library.formula); the kernel template prints it as C and
:func:`tile_of` evaluates the same text in Python, which is what the tests check for a bijection.  Stream-K
(xegemm.plan.stream_k) walks its tiles in the same order, with the tile index for the work-group's linear id.
"""

from __future__ import annotations

from xegemm.library.formula import evaluate, substitute

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


def c_lines(group: int, inputs: dict[str, str] = INPUTS_C) -> list[str]:
    """The OpenCL C statements that define ``tile_m`` and ``tile_n`` for swizzle ``group`` (> 1), from the C of
    the inputs (default: this work-group's position in the grid)."""
    lines = [f"const int {name} = {c};" for name, c in inputs.items()]
    return lines + [f"const int {name} = " + substitute(expr, {"G": group}) + ";" for name, expr in STEPS]


def tile_of(gx: int, gy: int, nx: int, ny: int, group: int) -> tuple[int, int]:
    """(tile_m, tile_n) of work-group (gx, gy) in an nx x ny grid: :data:`STEPS` evaluated as the C does."""
    env = evaluate(STEPS, {"gx": gx, "gy": gy, "nx": nx, "ny": ny, "G": group})
    return env["tile_m"], env["tile_n"]
