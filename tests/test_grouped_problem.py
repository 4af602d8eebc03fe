"""Grouped problems on the host: the shapes and their errors, the MoE form, the device table and its alignment
rule, and the verdict per group (a corrupted group is named)."""

import re

import numpy as np
import yaml
import pytest

from xegemm.verify import dense as verify
from xegemm.config import ConfigError, config_from_text
from xegemm.library.dtypes import dtype
from xegemm.errors import XegemmError
from xegemm.grouped.problem import (
    GroupedProblem,
    GroupedProblemError,
    from_config,
    grouped_from_operands,
    moe_from_operands,
)
from xegemm.grouped.table import FIELD, FIELDS, packed_offsets, problem_table
from xegemm.verify.grouped import check_groups, group_operands, group_references
from xegemm.tune.api import _shapes as tune_shapes
from xegemm.config.shapes import Shape, parse_shapes


def test_label_tokens_and_row_offsets():
    p = GroupedProblem.of([(100, 256, 128), {"m": 0, "n": 256, "k": 128}])
    assert p.label == "100x256x128+0x256x128" and p.groups[1].empty
    moe = GroupedProblem.moe([3, 0, 5], 64, 32, tokens=8)
    assert moe.row_offsets == (0, 3, 3, 8) and moe.tokens == 8 and moe.label == "moe3xT8x64x32"


@pytest.mark.parametrize("build, message", [
    (lambda: GroupedProblem.of([(4, 4, 4), (-1, 4, 4)]), "group 1: m = -1"),
    (lambda: GroupedProblem.of([(4, 4, 0)]), "group 0: k = 0"),
    (lambda: GroupedProblem.of([]), "at least one group"),
    (lambda: GroupedProblem.of([(4, 4)]), "group 0: expected (m, n, k)"),
    (lambda: GroupedProblem.moe([3, 4], 8, 8, tokens=9), "sums to 7 but A has 9 rows"),
    (lambda: GroupedProblem.moe([3, -4], 8, 8), "rows_per_expert[1] = -4"),
    (lambda: GroupedProblem((GroupedProblem.of([(1, 8, 8), (1, 9, 8)]).groups), experts=2), "expert 1 is 1x9x8"),
    (lambda: moe_from_operands((8, 32), (4, 16, 64), [2, 2, 2, 2]), "A has K = 32 but B"),
    (lambda: moe_from_operands((8, 32), (4, 32, 64), [2, 2, 4]), "3 entries but B holds 4 experts"),
    (lambda: grouped_from_operands([(4, 8), (4, 8)], [(8, 2), (7, 2)]), "group 1: A is 4 x 8 but B is 7 x 2"),
    (lambda: GroupedProblem.of([(1 << 16, 1 << 16, 1 << 16)]).check_fits((16, 16, 32), 2**30), "needs 32.00 GiB"),
])
def test_bad_problems_get_one_clear_line(build, message):
    with pytest.raises(GroupedProblemError, match=re.escape(message)):
        build()


def test_moe_operands_in_both_b_layouts():
    row = moe_from_operands((10, 32), (3, 32, 48), [4, 0, 6], "row")
    col = moe_from_operands((10, 32), (3, 48, 32), [4, 0, 6], "col")
    assert row == col and row.groups[2].label == "6x48x32"


def test_table_layout_and_moe_offsets():
    moe = GroupedProblem.moe([3, 0, 70], 96, 64)
    table = problem_table(moe, (32, 64, 32), (16, 4, 32), layouts=("row", "col", "row"))
    assert table.shape == (3, len(FIELDS)) and table.dtype == np.int64
    f = FIELD
    assert list(table[:, f["tiles_m"]]) == [1, 0, 3] and list(table[:, f["tiles_n"]]) == [2, 2, 2]
    assert list(table[:, f["tile_begin"]]) == [0, 2, 2]
    assert list(table[:, f["a_offset"]]) == [0, 3 * 64, 3 * 64]          # the expert's first row x K
    assert list(table[:, f["b_offset"]]) == [0, 64 * 96, 2 * 64 * 96]     # e x K x N
    assert list(table[:, f["c_offset"]]) == [0, 3 * 96, 3 * 96]
    assert list(table[0, [f["lda"], f["ldb"], f["ldc"]]]) == [64, 64, 96]  # B column-major: E x N x K


def test_packed_groups_start_aligned_and_sub_byte_offsets_must_be_whole_bytes():
    p = GroupedProblem.of([(3, 5, 7), (0, 4, 4), (9, 9, 9)])
    offsets = packed_offsets(p, (16, 4, 32), align_bytes=64)
    assert list(offsets[:, 0]) == [0, 32, 32] and list(offsets[:, 1]) == [0, 128, 256]   # an empty group still has its B
    moe = GroupedProblem.moe([2, 2], 3, 5)                                # K x N = 15: odd nibbles per expert
    with pytest.raises(GroupedProblemError, match=r"group 1 \(2x3x5\): B starts at element 15, inside a byte"):
        problem_table(moe, (32, 32, 32), (16, 4, 32))
    problem_table(moe, (32, 32, 32), (16, 8, 32))                         # bytes: fine


CONFIG = """
problem: {m: 1, n: 1, k: 1}
types: {a: bf16, b: bf16, acc: f32, c: f32}
verify: {seed: 3}
"""


def test_the_verdict_checks_every_group_and_names_the_failing_one():
    config = config_from_text(CONFIG)
    p = GroupedProblem.of([(20, 24, 40), (0, 24, 40), (17, 9, 33), (5, 31, 8)])
    table = problem_table(p, (16, 16, 16), (16, 16, 32))
    ops = group_operands(config, p)
    refs = group_references(config, p, ops)
    assert ops[1] is None and refs[1] is None
    d = np.full(int(table[-1, FIELD["c_offset"]]) + 5 * 31, np.nan)
    for g, o in enumerate(ops):                      # what a correct grouped launch writes: numpy per group
        if o is not None:
            start = table[g, FIELD["c_offset"]]
            d[start:start + o.a.shape[1] * o.b.shape[2]] = (o.a[0] @ o.b[0]).reshape(-1)
    raw = lambda values: np.concatenate([dtype("f32").encode(values).astype("<u4").view(np.uint8),  # noqa: E731
                                         np.full(verify.GUARD_BYTES, verify.GUARD_BYTE, np.uint8)])
    good = check_groups(config, p, raw(d), table[:, FIELD["c_offset"]], refs)
    assert good.ok and good.verdicts[1] is None and good.reason is None
    bad = d.copy()
    bad[table[2, FIELD["c_offset"]] + 4] += 0.5
    verdict = check_groups(config, p, raw(bad), table[:, FIELD["c_offset"]], refs)
    assert not verdict.ok and verdict.failing == [2]
    assert verdict.reason.startswith("group 2 (17x9x33) failed: 1 of 153 elements out of tolerance")


def test_config_groups_and_moe_sections():
    c = config_from_text("problem:\n  groups: [{m: 100, n: 256, k: 128}, {m: 0, n: 256, k: 128}, 5x7x9]\n", "g.yaml")
    assert from_config(c).label == "100x256x128+0x256x128+5x7x9" and (c.problem.m, c.problem.n) == (100, 256)
    c = config_from_text("problem: {m: 10, n: 64, k: 32}\nmoe: {experts: 4}\n", "g.yaml")
    assert [g.m for g in from_config(c).groups] == [3, 3, 2, 2] and from_config(c).experts == 4
    c = config_from_text("problem: {m: 10, n: 64, k: 32}\nmoe: {experts: 3, rows: [0, 10, 0]}\n", "g.yaml")
    assert from_config(c).row_offsets == (0, 0, 10, 10)
    assert from_config(config_from_text(CONFIG)) is None


@pytest.mark.parametrize("text, message", [
    ("problem:\n  groups: [{m: 1, n: 2, k: 3}, {m: -1, n: 2, k: 3}]\n",
     "g.yaml:2: problem.groups: group 1: m = -1: sizes are non-negative integers"),
    ("problem:\n  m: 4\n  groups: [1x2x3]\n", "g.yaml:2: problem.m: is set by problem.groups"),
    ("problem: {m: 10, n: 64, k: 32}\nmoe: {experts: 3, rows: [1, 2, 3]}\n",
     "g.yaml:2: moe: rows_per_expert sums to 6 but A has 10 rows"),
    ("problem: {m: 10, n: 64, k: 32}\nmoe: {experts: 2, rows: [1, 2, 7]}\n", "g.yaml:2: moe: moe.rows has 3 entries"),
    ("problem: {groups: [1x2x3]}\nmoe: {experts: 2}\n", "g.yaml:2: moe: problem.groups with moe.experts"),
    ("problem: {groups: [1x2x3], batch: 2}\n", "g.yaml:1: problem.groups: problem.batch = 2 with a grouped"),
])
def test_config_mistakes_name_file_line_and_key(text, message):
    with pytest.raises(ConfigError) as exc:
        config_from_text(text, "g.yaml")
    assert str(exc.value).startswith(message)


def test_shapes_take_grouped_problems_as_labels_and_yaml(tmp_path):
    assert parse_shapes("100x256x128+0x256x128, 64x64x64") == [
        GroupedProblem.of([(100, 256, 128), (0, 256, 128)]), Shape(64, 64, 64)]
    (tmp_path / "g.yaml").write_text("- {groups: [{m: 3, n: 4, k: 5}, 0x4x5]}\n- 8x8x8\n- 1x2x3+4x5x6\n")
    assert [s.label for s in parse_shapes(str(tmp_path / "g.yaml"))] == ["3x4x5+0x4x5", "8x8x8", "1x2x3+4x5x6"]
    with pytest.raises(XegemmError, match=re.escape("--shapes: '4x4' is not a group; write MxNxK")):
        parse_shapes("100x256x128+4x4")
    (tmp_path / "bad.yaml").write_text("- {groups: [1x2x0]}\n")
    with pytest.raises(XegemmError, match=re.escape("bad.yaml: shape 1: group 0: k = 0")):
        parse_shapes(str(tmp_path / "bad.yaml"))
    # the tuner's shape of a grouped problem holds its groups (its study tunes the whole launch)
    (grouped, single) = tune_shapes(None, "1x2x3+4x5x6,8x8x8")
    assert grouped == Shape(4, 5, 6, 1, ((1, 2, 3), (4, 5, 6))) and grouped.label == "1x2x3+4x5x6"
    assert Shape(**grouped.as_dict()) == grouped and single == Shape(8, 8, 8)
    assert grouped.overrides()["problem.groups"] == ((1, 2, 3), (4, 5, 6))


def test_to_dict_carries_grouped_keys_only_when_set_and_loads_again():
    assert "groups" not in config_from_text(CONFIG).to_dict()["problem"] and "moe" not in config_from_text(CONFIG).to_dict()
    for text in ("problem:\n  groups: [3x4x5, 0x4x5]\n", "problem: {m: 10, n: 64, k: 32}\nmoe: {experts: 3, rows: [0, 10, 0]}\n"):
        config = config_from_text(text, "g.yaml")
        again = config_from_text(yaml.safe_dump(config.to_dict()), "again.yaml")
        assert from_config(again) == from_config(config)


@pytest.mark.device
def test_tune_shapes_take_a_grouped_problem_and_time_the_whole_launch(tmp_path):
    from xegemm.tune.api import tune
    (tmp_path / "g.yaml").write_text("name: g\nproblem: {m: 64, n: 64, k: 64}\ntypes: {a: bf16, b: bf16, acc: f32, c: f32}\n"
                                     "tile: {workgroup: [8, 16, 16], subgroups: [1, 1]}\nprofile: {warmup: 1, repeats: 3}\n")
    cache = tmp_path / "m.db"

    def run(shapes, out):
        return tune(str(tmp_path / "g.yaml"), leaders=0, shapes=shapes, out=tmp_path / out, cache=cache, progress=False)
    first = run("33x40x32+0x40x32+17x9x16", "a")
    (entry,) = first.best["shapes"].values()
    assert entry["shape"]["groups"] == [[33, 40, 32], [0, 40, 32], [17, 9, 16]]
    best = entry["best"]
    assert best["kernel"].endswith("_groupedstatic")
    flops = 2 * (33 * 40 * 32 + 17 * 9 * 16)      # every group's, not the largest group's
    assert best["gflops"] == pytest.approx(flops / (best["time_ms"]["median"] * 1e6), rel=1e-6)
    # the measurement cache keys on the groups: the same launch is a hit, other groups are measured
    assert run("33x40x32+0x40x32+17x9x16", "b").tallies["33x40x32+0x40x32+17x9x16"].cached == 1
    assert run("33x40x32+17x9x16", "c").tallies["33x40x32+17x9x16"].cached == 0
    # the report names every group and the launch's total
    from xegemm.reporting import groups, load_sources
    (group,) = groups(load_sources([str(tmp_path / "a")]))
    assert "groups 33x40x32, 0x40x32, 17x9x16; total 50 rows, 0.0894 MFLOP" in group.title
