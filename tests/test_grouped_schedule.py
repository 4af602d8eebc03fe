"""The persistent scheduler's C, run for real on the device: every work-group of the persistent grid walks its
tiles with the emitted C and records each tile it visits; every tile of every group must be visited exactly
once, none of an empty group, and the C's (group, tile_m, tile_n) must be the Python formulas'."""

from collections import Counter

import numpy as np
import pytest

from xegemm.grouped import schedule
from xegemm.grouped.problem import GroupedProblem
from xegemm.grouped.table import problem_table, tile_begins
from xegemm.runtime.program import build_program, from_device, launch, make_queue, scalar, to_device

pytestmark = pytest.mark.device

WG_TILE = (32, 64, 32)
LOCAL = 16            # work-items per work-group: the dynamic walk's barriers and broadcast are exercised
RECORD = 5            # group, tile_m, tile_n, work-group, t


def kernel_source(mode: str, search_move=schedule.SEARCH_MOVE) -> str:
    body = ["if (get_local_id(0) == 0) {",
            "  const int slot = atomic_inc(visit_count);",
            "  if (slot < capacity) {",
            f"    __global int* r = visits + slot * {RECORD};",
            "    r[0] = group; r[1] = tile_m; r[2] = tile_n; r[3] = (int)get_group_id(0); r[4] = t;",
            "  }", "}"]
    walk = schedule.walk_lines(mode, body, search_move=search_move)
    return ("__kernel void walk(__global const long* table, const int groups, const int total_tiles,\n"
            "                   __global int* tile_counter, __global int* visits, __global int* visit_count,\n"
            "                   const int capacity) {\n" + "\n".join("  " + line for line in walk) + "\n}\n")


def run_walk(sycl_device, problem, workgroups, mode, search_move=schedule.SEARCH_MOVE):
    queue = make_queue(sycl_device)
    kernel = build_program(queue, kernel_source(mode, search_move), "-cl-std=CL3.0").get_sycl_kernel("walk")
    table = problem_table(problem, WG_TILE, (16, 16, 32))
    total = tile_begins(problem, WG_TILE)[-1]
    capacity = 2 * total + 64                  # room for duplicate visits, so a broken walk shows them
    buffers = [to_device(queue, table.reshape(-1)), scalar(len(problem.groups)), scalar(total),
               to_device(queue, np.zeros(1, np.int32)), to_device(queue, np.full(capacity * RECORD, -1, np.int32)),
               to_device(queue, np.zeros(1, np.int32)), scalar(capacity)]
    launch(queue, kernel, buffers, [workgroups * LOCAL], [LOCAL]).wait()
    count = int(from_device(buffers[5], np.int32, (1,))[0])
    records = from_device(buffers[4], np.int32, (capacity, RECORD))[:min(count, capacity)]
    return count, records


def walk_problems(problem, workgroups, mode, count, records) -> list[str]:
    """What is wrong with a walk's visit records (empty: every tile exactly once, from the right work-group)."""
    expected = schedule.tile_coordinates(problem, WG_TILE)
    issues = []
    if count != len(expected):
        issues.append(f"{count} visits for {len(expected)} tiles")
    seen = Counter((int(g), int(tm), int(tn)) for g, tm, tn, _, _ in records)
    for tile, n in seen.items():
        if n != 1:
            issues.append(f"tile {tile} visited {n} times")
        if not 0 <= tile[0] < len(problem.groups) or problem.groups[tile[0]].empty:
            issues.append(f"tile {tile} of an empty or unknown group")
    missing = set(expected) - set(seen)
    if missing:
        issues.append(f"{len(missing)} tiles never visited, e.g. {sorted(missing)[:3]}")
    for group, tm, tn, wg, t in records:
        if not 0 <= t < len(expected) or expected[t] != (group, tm, tn):
            issues.append(f"t = {t}: C says {(group, tm, tn)}, the formulas {expected[t] if 0 <= t < len(expected) else None}")
            break
        if mode == "static" and t % workgroups != wg:
            issues.append(f"t = {t} ran on work-group {wg}, the static walk gives it to {t % workgroups}")
            break
    return issues


RAGGED = GroupedProblem.of([(100, 256, 128), (0, 256, 128), (33, 70, 64), (1, 1, 8), (64, 128, 32)])
MANY_EMPTY = GroupedProblem.of([(0, 64, 32)] * 3 + [(40, 65, 32)] + [(0, 64, 32)] * 5 + [(31, 200, 16)]
                               + [(0, 1, 1)] * 4)
MOE = GroupedProblem.moe([0, 70, 3, 0, 0, 129, 1, 0], 96, 64)
LEADING_TRAILING_EMPTY = GroupedProblem.of([(0, 8, 8), (5, 5, 5), (0, 8, 8)])
TILES = {name: tile_begins(p, WG_TILE)[-1] for name, p in
         [("ragged", RAGGED), ("many_empty", MANY_EMPTY), ("moe", MOE), ("edges", LEADING_TRAILING_EMPTY)]}


@pytest.mark.parametrize("mode", schedule.MODES)
@pytest.mark.parametrize("name, problem, workgroups", [
    ("ragged", RAGGED, 3),                        # G smaller than the tile count
    ("ragged", RAGGED, TILES["ragged"] + 5),      # G larger: idle work-groups
    ("many_empty", MANY_EMPTY, 2),
    ("moe", MOE, 5),
    ("edges", LEADING_TRAILING_EMPTY, 1),
])
def test_every_tile_of_every_group_is_visited_once(sycl_device, mode, name, problem, workgroups):
    count, records = run_walk(sycl_device, problem, workgroups, mode)
    assert walk_problems(problem, workgroups, mode, count, records) == []


@pytest.mark.parametrize("mode", schedule.MODES)
def test_an_off_by_one_search_fails(sycl_device, mode):
    broken = (("right", "begin_mid < t"),) + schedule.SEARCH_MOVE[1:]
    count, records = run_walk(sycl_device, RAGGED, 4, mode, search_move=broken)
    assert walk_problems(RAGGED, 4, mode, count, records)


def test_the_python_search_is_the_c_search():
    begins = tile_begins(MANY_EMPTY, WG_TILE)
    want = [max(g for g in range(len(begins) - 1) if begins[g] <= t) for t in range(begins[-1])]
    assert [schedule.locate(begins, t) for t in range(begins[-1])] == want
    broken = (("right", "begin_mid < t"),) + schedule.SEARCH_MOVE[1:]
    assert [schedule.locate(begins, t, broken) for t in range(begins[-1])] != want


def test_empty_groups_have_no_tiles_and_static_balance_counts_them():
    assert TILES["many_empty"] == 2 * 2 + 1 * 4          # 40x65 -> 2x2 tiles, 31x200 -> 1x4
    b = schedule.balance(MANY_EMPTY, WG_TILE, 3)
    assert sum(b.tiles) == 8 and b.tiles == (3, 3, 2)
    tile = 32 * 64                                       # t 0-3: K = 32 (40x65), t 4-7: K = 16 (31x200)
    assert b.work == (tile * (32 + 32 + 16), tile * (32 + 16 + 16), tile * (32 + 16))   # t 0,3,6 / 1,4,7 / 2,5
    assert b.ratio == pytest.approx(max(b.work) / (sum(b.work) / 3))


def test_tile_work_follows_the_walks_tile_order():
    coords = schedule.tile_coordinates(MANY_EMPTY, WG_TILE)
    assert schedule.tile_work(MANY_EMPTY, WG_TILE) == [32 * 64 * MANY_EMPTY.groups[g].k for g, _, _ in coords]
    dynamic = schedule.balance(MANY_EMPTY, WG_TILE, 3, "dynamic")      # K 32 tiles first, then the K 16 ones
    assert sum(dynamic.tiles) == 8 and sum(dynamic.work) == sum(schedule.tile_work(MANY_EMPTY, WG_TILE))
