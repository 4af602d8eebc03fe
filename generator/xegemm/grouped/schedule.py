"""The persistent tile scheduler of a grouped launch: G work-groups walk the linearised tiles of all groups.

The linear tile index t runs over the groups in order, each contributing its tiles_m x tiles_n tiles
(xegemm.grouped.table.TILES; an empty group contributes none), raster along N within a group: tile t of group
g is (tile_m, tile_n) = ((t - tile_begin[g]) / tiles_n, (t - tile_begin[g]) % tiles_n).  The group of t is found
by a binary search over the table's ``tile_begin`` column: the last g with tile_begin[g] <= t, which skips
empty groups (their tile_begin equals the next group's).

Two walks (docs/grouped.md):

- ``static``: work-group w takes t = w, w + G, w + 2G, ... as sycl-tla's group scheduler does
  (``include/cutlass/gemm/kernel/xe_tile_scheduler_group.hpp``, https://github.com/intel/sycl-tla): neighbouring
  work-groups run neighbouring tiles of one group at the same time (they share A's rows), and the groups' tiles
  are dealt round-robin, so a large group does not land on a few work-groups as contiguous ranges would put it.
- ``dynamic``: a finished work-group takes the next tile from a global counter with ``atomic_inc``, as vLLM's
  MoE kernels do (https://github.com/vllm-project/vllm-xpu-kernels); the counter must be 0 at launch.

The search and the tile's coordinates are formulas (xegemm.library.formula): :func:`walk_lines` prints them as C for
both lowerings, :func:`locate` and :func:`static_walk` evaluate the same text in Python.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from xegemm.library.formula import evaluate, substitute
from xegemm.grouped.problem import GroupedProblem
from xegemm.grouped.table import FIELD, FIELDS, group_tiles, tile_begins

MODES = ("static", "dynamic")
# binary search for the group of tile t: invariant tile_begin[lo] <= t < tile_begin[hi] (tile_begin[groups]
# = total tiles, never read); begin_mid = tile_begin[mid] is loaded between the two steps
SEARCH_MID = (("mid", "(lo + hi) / 2"),)
SEARCH_MOVE = (("right", "begin_mid <= t"),
               ("lo", "lo + (mid - lo) * right"),
               ("hi", "mid + (hi - mid) * right"))
TILE = (("tile_in_group", "t - group_begin"),           # the tile's place in its group, raster along N
        ("tile_m", "tile_in_group / tiles_n"),
        ("tile_n", "tile_in_group % tiles_n"))
# the table fields a tile's body sees as C variables (int sizes and counts, long offsets and pitches)
INT_FIELDS = ("m", "n", "k", "tiles_m", "tiles_n", "tile_begin")
C_NAMES = {"m": "M", "n": "N", "k": "K", "tile_begin": "group_begin"}
# the kernel arguments the walk reads: __global const long* table, int groups, int total_tiles, and for the
# dynamic walk __global int* tile_counter (zero at launch)
KERNEL_ARGS = ("table", "groups", "total_tiles", "tile_counter")


def _c_steps(steps, declare: bool) -> list[str]:
    constants = {"FIELDS": len(FIELDS)}
    return [f"{'const int ' if declare else ''}{name} = {substitute(expr, constants)};" for name, expr in steps]


def locate_lines(search_move=SEARCH_MOVE, names=None) -> list[str]:
    """C that defines ``group``, the table fields of the group (``M``, ``N``, ``K``, ``tiles_m``, ``tiles_n``,
    ``group_begin``, ``a_offset`` ... ``ldc``), ``tile_m`` and ``tile_n`` of the int ``t``.  ``names``: C names
    of fields that replace C_NAMES' (a kernel whose own ``lda`` is in bytes names the table's otherwise)."""
    names = {**C_NAMES, **(names or {})}
    lines = ["int lo = 0, hi = groups;", "while (hi - lo > 1) {",
             *("  " + line for line in _c_steps(SEARCH_MID, True)),
             f"  const long begin_mid = table[mid * {len(FIELDS)} + {FIELD['tile_begin']}];",
             "  " + _c_steps(search_move[:1], True)[0],
             *("  " + line for line in _c_steps(search_move[1:], False)), "}",
             "const int group = lo;",
             f"__global const long* group_row = table + (long)group * {len(FIELDS)};"]
    for name in FIELDS:
        ctype = "int" if name in INT_FIELDS else "long"
        lines.append(f"const {ctype} {names.get(name, name)} = ({ctype})group_row[{FIELD[name]}];")
    return lines + _c_steps(TILE, True)


def walk_lines(mode: str, body: list[str], workgroups: int | None = None, search_move=SEARCH_MOVE,
               names=None) -> list[str]:
    """C of the persistent walk running ``body`` once per tile (with ``t``, ``group``, ``tile_m``, ``tile_n`` and
    the group's fields defined).  ``static``: G = ``workgroups`` printed as a constant, or the launch's
    ``get_num_groups(0)`` when None.  ``dynamic``: the lines begin with a ``__local int`` declaration, so they
    go at the kernel function's outermost scope; the body may hold barriers (every work-item of a work-group
    takes the same tile)."""
    inner = ["  " + line for line in [*locate_lines(search_move, names), *body]]
    if mode == "static":
        step = str(workgroups) if workgroups else "(int)get_num_groups(0)"
        return [f"for (int t = (int)get_group_id(0); t < total_tiles; t += {step}) {{", *inner, "}"]
    if mode == "dynamic":
        return ["__local int next_tile;", "for (;;) {",
                "  barrier(CLK_LOCAL_MEM_FENCE);   /* everyone has read the previous tile */",
                "  if (get_local_id(0) == 0 && get_local_id(1) == 0 && get_local_id(2) == 0)",
                "    next_tile = atomic_inc(tile_counter);",
                "  barrier(CLK_LOCAL_MEM_FENCE);",
                "  const int t = next_tile;",
                "  if (t >= total_tiles) break;",
                "  {", *("  " + line for line in inner), "  }", "}"]
    raise ValueError(f"unknown walk {mode!r}; one of {', '.join(MODES)}")


def locate(begins: list[int], t: int, search_move=SEARCH_MOVE) -> int:
    """The group of linear tile ``t`` for ``begins`` = :func:`~xegemm.grouped.table.tile_begins`: the search the
    C runs, evaluated from the same formulas."""
    env = {"lo": 0, "hi": len(begins) - 1, "t": t}
    while env["hi"] - env["lo"] > 1:
        env = evaluate(SEARCH_MID, env)
        env["begin_mid"] = begins[env["mid"]]
        env = evaluate(search_move, env)
    return env["lo"]


def tile_coordinates(problem: GroupedProblem, workgroup) -> list[tuple[int, int, int]]:
    """(group, tile_m, tile_n) of every linear tile t in order, by the formulas the C evaluates."""
    begins, counts = tile_begins(problem, workgroup), group_tiles(problem, workgroup)
    out = []
    for t in range(begins[-1]):
        group = locate(begins, t)
        env = evaluate(TILE, {"t": t, "group_begin": begins[group], "tiles_n": counts[group]["tiles_n"]})
        out.append((group, env["tile_m"], env["tile_n"]))
    return out


def static_walk(total_tiles: int, workgroups: int) -> list[list[int]]:
    """Per work-group, the linear tiles the static walk gives it, in order."""
    return [list(range(w, total_tiles, workgroups)) for w in range(workgroups)]


@dataclass(frozen=True)
class Balance:
    """How evenly a walk spreads a grouped problem over G work-groups: per work-group the tiles and the work
    (MACs of whole BM x BN tiles: ragged edges cost the full tile, as the MAC loop runs it), and the ratio of
    the busiest work-group's work to the mean (1.0: perfect; the launch takes about ratio x the ideal time)."""

    tiles: tuple[int, ...]
    work: tuple[int, ...]

    @property
    def ratio(self) -> float:
        mean = sum(self.work) / len(self.work)
        return max(self.work) / mean if mean else 1.0

    @property
    def tile_ratio(self) -> float:
        mean = sum(self.tiles) / len(self.tiles)
        return max(self.tiles) / mean if mean else 1.0


def tile_work(problem: GroupedProblem, workgroup) -> list[int]:
    """The work (MACs of a whole tile) of every linear tile: a group's tiles are consecutive."""
    bm, bn = workgroup[0], workgroup[1]
    return [bm * bn * g.k for g, counts in zip(problem.groups, group_tiles(problem, workgroup))
            for _ in range(counts["tiles"])]


def balance(problem: GroupedProblem, workgroup, workgroups: int, mode: str = "static") -> Balance:
    """The balance of a walk.  ``static``: exactly the kernel's assignment.  ``dynamic``: a model, each tile in
    order to the work-group that becomes free first (a tile's time taken proportional to its work)."""
    work = tile_work(problem, workgroup)
    tiles, load = [0] * workgroups, [0] * workgroups
    if mode == "static":
        for w, ts in enumerate(static_walk(len(work), workgroups)):
            tiles[w], load[w] = len(ts), sum(work[t] for t in ts)
    elif mode == "dynamic":
        free = [(0, w) for w in range(workgroups)]
        for cost in work:
            busy, w = heapq.heappop(free)
            tiles[w] += 1
            load[w] += cost
            heapq.heappush(free, (busy + cost, w))
    else:
        raise ValueError(f"unknown walk {mode!r}; one of {', '.join(MODES)}")
    return Balance(tuple(tiles), tuple(load))
