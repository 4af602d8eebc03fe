"""The numpy reference and the verdict of a grouped launch, group by group: every group must pass.

Each non-empty group is checked as the single GEMM it is: its config is the launch's config with the group's
M, N, K (types, layouts, epilogue and seed kept; the seed offset by the group index so groups differ), and
xegemm.verify.dense makes its operands, reference and verdict, so the tolerance rules have one home.  An empty
group has no output to check.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xegemm.verify import dense as verify
from xegemm.config import Config
from xegemm.library.dtypes import dtype
from xegemm.grouped.problem import GroupedProblem


def group_config(config: Config, problem: GroupedProblem, index: int) -> Config:
    """The single-GEMM config of group ``index`` (non-empty)."""
    g = problem.groups[index]
    return config.with_overrides({"problem.m": g.m, "problem.n": g.n, "problem.k": g.k, "problem.batch": 1,
                                  "problem.groups": (), "moe.experts": 0, "moe.rows": (),
                                  "verify.seed": config.verify.seed + index})


def group_operands(config: Config, problem: GroupedProblem) -> list[verify.Operands | None]:
    """Seeded operands per group (None for an empty group)."""
    return [None if g.empty else verify.make_operands(group_config(config, problem, i))
            for i, g in enumerate(problem.groups)]


def group_references(config: Config, problem: GroupedProblem, operands) -> list[verify.Reference | None]:
    """The numpy reference of D per group (None for an empty group)."""
    return [None if ops is None else verify.reference(group_config(config, problem, i), ops)
            for i, ops in enumerate(operands)]


@dataclass(frozen=True)
class GroupedVerdict:
    """Per group its verdict (None: empty); ``ok`` when every group passed, ``reason`` names the first failing
    group, its index and shape."""

    problem: GroupedProblem
    verdicts: tuple[verify.Verdict | None, ...]

    @property
    def failing(self) -> list[int]:
        return [i for i, v in enumerate(self.verdicts) if v is not None and not v.ok]

    @property
    def ok(self) -> bool:
        return not self.failing

    @property
    def reason(self) -> str | None:
        if self.ok:
            return None
        first = self.failing[0]
        return (f"group {first} ({self.problem.groups[first].label}) failed"
                + (f" (and {len(self.failing) - 1} more groups: {self.failing[1:6]})" if len(self.failing) > 1
                   else "") + f": {self.verdicts[first].reason}")


def check_groups(config: Config, problem: GroupedProblem, d_raw, d_offsets, references) -> GroupedVerdict:
    """The verdict of every group of one D buffer: ``d_raw`` the buffer's bytes followed by xegemm.verify.dense's
    guard bytes (a write past the end fails every group), ``d_offsets`` each group's element offset in it (the
    table's ``c_offset`` column)."""
    d_raw = np.asarray(d_raw, np.uint8)
    guard = d_raw[len(d_raw) - verify.GUARD_BYTES:]
    bits = dtype(config.types.c).bits
    verdicts = []
    for i, (offset, ref) in enumerate(zip(d_offsets, references)):
        if ref is None:
            verdicts.append(None)
            continue
        g = problem.groups[i]
        start = int(offset) * bits // 8
        data = d_raw[start:start + g.m * g.n * bits // 8]
        verdicts.append(verify.check(group_config(config, problem, i), np.concatenate([data, guard]), ref))
    return GroupedVerdict(problem, tuple(verdicts))
