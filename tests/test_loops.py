"""lowering.loops.reroll: runs of alike statements become loops that execute exactly the same statements."""

import re

import pytest

from xegemm.atoms import copy_atom_named
from xegemm.lowering.loops import reroll
from xegemm.lowering.portable import copy_plan

LOOP = re.compile(r"for \(int (\w+) = 0; \1 < (\d+); \+\+\1\)")


def unroll(lines: list[str]) -> list[str]:
    """The statements a rerolled list executes, in order (the loop index evaluated as the C would)."""
    out, i = [], 0
    while i < len(lines):
        line = lines[i].strip()
        if line == "#pragma unroll 1":
            index, count = LOOP.fullmatch(lines[i + 1].strip().removesuffix(" {")).groups()
            end = lines.index("}", i + 2)
            for n in range(int(count)):
                for body in lines[i + 2:end]:
                    # each (a + b * i), b * i or i, as the literal it evaluates to
                    text = re.sub(rf"\((\d+) \+ (\d+) \* {index}\)", lambda m: str(int(m[1]) + int(m[2]) * n),
                                  body.strip())
                    text = re.sub(rf"\((\d+) \+ {index}\)", lambda m: str(int(m[1]) + n), text)
                    text = re.sub(rf"\((\d+) \* {index}\)", lambda m: str(int(m[1]) * n), text)
                    out.append(re.sub(rf"\b{index}\b", str(n), text))
            i = end + 1
        else:
            out.append(line)
            i += 1
    return out


def test_a_run_of_alike_statements_becomes_one_loop():
    lines = [f"v[{i}] = ld(base, y + {2 * i}, x + 16 + lane);" for i in range(8)]
    rolled = reroll(lines)
    assert rolled == ["#pragma unroll 1", "for (int xe_i = 0; xe_i < 8; ++xe_i) {",
                      "v[xe_i] = ld(base, y + (2 * xe_i), x + 16 + lane);", "}"]
    assert unroll(rolled) == lines


def test_names_suffixes_and_short_runs_are_left_alone():
    # digits inside names (acc_0_1, .s3, u16), suffixed and hex literals are the statement's shape, not a run
    names = [f"acc_0_{i} = c.s{i} + 16u;" for i in range(6)]
    assert reroll(names) == names
    short = [f"v[{i}] = {i};" for i in range(3)]
    assert reroll(short) == short
    # a run broken by a statement of another shape, or by a step that changes, is split where it breaks
    broken = [f"v[{i}] = w[{i}];" for i in range(5)] + ["x = 1;"] + [f"v[{i}] = w[{i * i}];" for i in range(5, 10)]
    rolled = reroll(broken)
    assert unroll(rolled) == broken
    assert rolled.count("#pragma unroll 1") == 1


def test_alternating_statements_become_one_loop_of_both():
    lines = []
    for i in range(6):
        lines += [f"sb[{64 * i} + lane] = lo(b0[{i}]);", f"sb[{64 * i + 32} + lane] = hi(b0[{i}]);"]
    rolled = reroll(lines)
    assert rolled[1:] == ["for (int xe_i = 0; xe_i < 6; ++xe_i) {", "sb[(64 * xe_i) + lane] = lo(b0[xe_i]);",
                          "sb[(32 + 64 * xe_i) + lane] = hi(b0[xe_i]);", "}"]
    assert unroll(rolled) == lines


@pytest.mark.parametrize("name", ["XE_2D_U16x32x32_LD_N", "XE_2D_U16x32x32_LD_V", "XE_2D_U8x32x64_LD_N",
                                  "XE_2D_U32x8x16_LD_N", "XE_2D_U16x16x16_LD_T", "XE_2D_Packed_U8x32x64_LD_N"])
def test_the_fast_path_of_a_load_executes_one_statement_per_register_component(name):
    """What the loops execute is one assignment per component, each component once, in order."""
    atom = copy_atom_named(name)
    statements = unroll(list(copy_plan(atom)["fast"]))
    assert [int(re.match(r"v\[(\d+)\] = ", s)[1]) for s in statements] == list(range(atom.register_length))
