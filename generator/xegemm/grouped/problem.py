"""A grouped problem: G independent GEMMs D_g (M_g x N_g) = A_g (M_g x K_g) @ B_g (K_g x N_g) in one launch.

A group with M = 0 (or N = 0) has no tiles and costs nothing.  The MoE form (:meth:`GroupedProblem.moe`) is
the special case where every group (expert) has the same N and K, A is one T x K matrix whose rows are sorted
by expert, and the experts' row ranges are the prefix sum of the rows per expert (docs/grouped.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import accumulate, islice

import numpy as np

from xegemm.errors import XegemmError


class GroupedProblemError(XegemmError):
    """A grouped or MoE problem that cannot be used; the message names the group and the rule."""


_GROUP = re.compile(r"^\s*(\d+)x(\d+)x(\d+)\s*$")
GROUP_SEPARATOR = "+"      # joins the groups of one problem in a label: 100x256x128+0x256x128


def parse_group(text: str) -> tuple[int, int, int]:
    """``"100x256x128"`` -> (100, 256, 128); zeros allowed (an empty group)."""
    match = _GROUP.match(text)
    if not match:
        raise GroupedProblemError(f"'{text}' is not a group; write MxNxK, e.g. 100x256x128 (M may be 0)")
    return tuple(int(v) for v in match.groups())


MAX_GROUPS = 2**17      # groups (or experts) of one grouped call: the table is built on the host, per group


def _at_most(items, what: str) -> list:
    """``items`` as a list, refused before it is listed past MAX_GROUPS."""
    if isinstance(items, (str, bytes)):
        raise GroupedProblemError(f"the {what} are {type(items).__name__} {items[:40]!r}: expected a list of them")
    try:
        listed = list(islice(items, MAX_GROUPS + 1))
    except TypeError:
        raise GroupedProblemError(f"the {what}: expected a list, found {type(items).__name__} {items!r:.40}") from None
    if len(listed) > MAX_GROUPS:
        count = f"{len(items)}" if hasattr(items, "__len__") else f"more than {MAX_GROUPS}"
        raise GroupedProblemError(f"{count} {what}: a grouped call takes at most {MAX_GROUPS} (2^17); split it "
                                  "into several calls")
    return listed


def _size(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise GroupedProblemError(f"{what} = {value!r}: sizes are non-negative integers")
    return value


@dataclass(frozen=True)
class GroupShape:
    """One group: D (m x n) = A (m x k) @ B (k x n); m or n may be 0 (an empty group), k is positive."""

    m: int
    n: int
    k: int

    @property
    def label(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    @property
    def empty(self) -> bool:
        return self.m == 0 or self.n == 0

    @property
    def macs(self) -> int:
        return self.m * self.n * self.k


@dataclass(frozen=True)
class GroupedProblem:
    """The groups' shapes in launch order; ``experts`` > 0 marks the MoE form (``rows_per_expert`` = the M's)."""

    groups: tuple[GroupShape, ...]
    experts: int = 0

    @classmethod
    def of(cls, shapes) -> GroupedProblem:
        """From (m, n, k) triples, ``{m, n, k}`` mappings, ``"MxNxK"`` labels or GroupShapes; raises GroupedProblemError."""
        groups = []
        for index, shape in enumerate(_at_most(shapes, "groups")):
            if isinstance(shape, dict):
                if set(shape) != {"m", "n", "k"}:
                    raise GroupedProblemError(f"group {index}: expected keys m, n, k, found {sorted(shape)}")
                shape = (shape["m"], shape["n"], shape["k"])
            elif isinstance(shape, str):
                shape = parse_group(shape)
            elif isinstance(shape, GroupShape):
                shape = (shape.m, shape.n, shape.k)
            if not isinstance(shape, (tuple, list)) or len(shape) != 3:
                raise GroupedProblemError(f"group {index}: expected (m, n, k), found {shape!r}")
            m, n, k = (_size(v, f"group {index}: {name}") for v, name in zip(shape, "mnk"))
            if k == 0:
                raise GroupedProblemError(f"group {index}: k = 0; K must be positive (an empty group has m = 0)")
            groups.append(GroupShape(m, n, k))
        if not groups:
            raise GroupedProblemError("a grouped problem needs at least one group")
        return cls(tuple(groups))

    @classmethod
    def parse(cls, label: str) -> GroupedProblem:
        """``"100x256x128+0x256x128"``: the groups of one problem joined by ``+``."""
        return cls.of([parse_group(part) for part in label.split(GROUP_SEPARATOR)])

    @classmethod
    def moe(cls, rows_per_expert, n: int, k: int, tokens: int | None = None) -> GroupedProblem:
        """The MoE form: expert e multiplies its ``rows_per_expert[e]`` rows of the T x K activations by its
        K x N weights.  ``tokens`` (T, A's rows) must equal the rows' sum when given."""
        rows = [_size(r, f"rows_per_expert[{e}]") for e, r in enumerate(_at_most(rows_per_expert, "experts"))]
        if not rows:
            raise GroupedProblemError("rows_per_expert is empty; an MoE problem needs at least one expert")
        _size(n, "n")
        if _size(k, "k") == 0:
            raise GroupedProblemError("k = 0; K must be positive")
        if tokens is not None and sum(rows) != tokens:
            raise GroupedProblemError(f"rows_per_expert sums to {sum(rows)} but A has {tokens} rows; every row "
                                      "of A belongs to exactly one expert")
        return cls(tuple(GroupShape(r, n, k) for r in rows), experts=len(rows))

    def __post_init__(self) -> None:
        if self.experts:
            if self.experts != len(self.groups):
                raise GroupedProblemError(f"{self.experts} experts but {len(self.groups)} groups")
            first = self.groups[0]
            for e, g in enumerate(self.groups):
                if (g.n, g.k) != (first.n, first.k):
                    raise GroupedProblemError(f"expert {e} is {g.label} but expert 0 has N = {first.n}, K = "
                                              f"{first.k}: every expert's weights have the same K x N")

    @property
    def label(self) -> str:
        """``100x256x128+0x256x128`` (the ``--shapes`` form); MoE: ``moe32xT8048x5760x2880``."""
        if self.experts:
            return f"moe{self.experts}xT{self.tokens}x{self.groups[0].n}x{self.groups[0].k}"
        return GROUP_SEPARATOR.join(g.label for g in self.groups)

    @property
    def tokens(self) -> int:
        """The rows of A and D in the MoE form (the sum of the M's)."""
        return sum(g.m for g in self.groups)

    @property
    def row_offsets(self) -> tuple[int, ...]:
        """The exclusive prefix sum of the M's, length groups + 1: group g's rows of A and D are
        [row_offsets[g], row_offsets[g + 1]) in the MoE form."""
        return (0, *accumulate(g.m for g in self.groups))

    @property
    def macs(self) -> int:
        return sum(g.macs for g in self.groups)

    def operand_elements(self) -> tuple[int, int, int]:
        """Elements of A, B and D over all groups (MoE: B is E x K x N)."""
        return (sum(g.m * g.k for g in self.groups), sum(g.k * g.n for g in self.groups),
                sum(g.m * g.n for g in self.groups))

    def check_fits(self, bits: tuple[int, int, int], device_bytes: int | None,
                   max_alloc_bytes: int | None = None) -> None:
        """Raise when A, B and D (element ``bits`` each) exceed the device's memory, or one operand exceeds
        its largest allocation."""
        sizes = [-(-count * b // 8) for count, b in zip(self.operand_elements(), bits)]
        if device_bytes is not None and sum(sizes) > device_bytes:
            raise GroupedProblemError(f"{self.label} needs {sum(sizes) / 2**30:.2f} GiB of device memory for A, "
                                      f"B and D; the device has {device_bytes / 2**30:.2f} GiB")
        if max_alloc_bytes is not None:
            for name, size in zip("ABD", sizes):
                if size > max_alloc_bytes:
                    raise GroupedProblemError(f"{self.label}: {name} needs {size / 2**30:.2f} GiB in one "
                                              f"allocation; the device allows {max_alloc_bytes / 2**30:.2f} GiB")


def moe_from_operands(a_shape, b_shape, rows_per_expert, b_layout: str = "row") -> GroupedProblem:
    """The MoE problem of A (T x K), B (E x K x N row-major, or E x N x K column-major) and the rows per
    expert, with a clear error for each mismatch."""
    if len(a_shape) != 2:
        raise GroupedProblemError(f"A must be T x K (2 dimensions), found shape {tuple(a_shape)}")
    if len(b_shape) != 3:
        raise GroupedProblemError(f"B must be E x K x N (row) or E x N x K (col), found shape {tuple(b_shape)}")
    experts, k, n = b_shape if b_layout == "row" else (b_shape[0], b_shape[2], b_shape[1])
    if a_shape[1] != k:
        raise GroupedProblemError(f"A has K = {a_shape[1]} but B ({b_layout}-major, shape {tuple(b_shape)}) has "
                                  f"K = {k}")
    rows = _at_most(rows_per_expert, "experts (rows_per_expert)")
    if len(rows) != experts:
        raise GroupedProblemError(f"rows_per_expert has {len(rows)} entries but B holds {experts} experts")
    return GroupedProblem.moe([_row_count(r, e) for e, r in enumerate(rows)], n, k, tokens=a_shape[0])


def _row_count(value, expert: int) -> int:
    """One entry of rows_per_expert: a non-negative integer (a numpy integer too), never a string, a fraction, a
    negative count or NaN."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise GroupedProblemError(f"rows_per_expert[{expert}] = {value!r}: expected a number of rows (a "
                                  "non-negative integer)")
    if value < 0:
        raise GroupedProblemError(f"rows_per_expert[{expert}] = {value}: a number of rows cannot be negative")
    return int(value)


def grouped_from_operands(a_shapes, b_shapes) -> GroupedProblem:
    """The grouped problem of per-group A (M x K) and B (K x N) shapes, naming the first group whose K differ."""
    if len(a_shapes) != len(b_shapes):
        raise GroupedProblemError(f"{len(a_shapes)} A matrices but {len(b_shapes)} B matrices")
    shapes = []
    for g, (a, b) in enumerate(zip(a_shapes, b_shapes)):
        if len(a) != 2 or len(b) != 2:
            raise GroupedProblemError(f"group {g}: A and B must be matrices, found shapes {tuple(a)}, {tuple(b)}")
        if a[1] != b[0]:
            raise GroupedProblemError(f"group {g}: A is {a[0]} x {a[1]} but B is {b[0]} x {b[1]}: K differs")
        shapes.append((a[0], b[1], a[1]))
    return GroupedProblem.of(shapes)


def from_config(config) -> GroupedProblem | None:
    """The grouped problem a config describes (``problem.groups``, or ``moe.experts`` with ``moe.rows`` or, when
    the rows are left out, the T = ``problem.m`` rows spread evenly), or None for a single GEMM."""
    p, moe = config.problem, config.moe
    if p.groups:
        return GroupedProblem.of(p.groups)
    if moe.experts:
        rows = moe.rows or tuple(p.m // moe.experts + (e < p.m % moe.experts) for e in range(moe.experts))
        return GroupedProblem.moe(rows, p.n, p.k, tokens=p.m)
    return None


def config_overrides(problem: GroupedProblem) -> dict:
    """The config keys that make a config run ``problem`` (``with_overrides``): the groups, or the MoE layer's
    T, N, K and rows per expert; problem.m/n/k are the largest group's (at least 1), as the reader sets them."""
    if problem.experts:
        first = problem.groups[0]
        return {"problem.groups": (), "problem.m": max(1, problem.tokens), "problem.n": max(1, first.n),
                "problem.k": first.k, "moe.experts": problem.experts, "moe.rows": tuple(g.m for g in problem.groups)}
    return {"problem.groups": tuple((g.m, g.n, g.k) for g in problem.groups),
            "problem.m": max(1, *(g.m for g in problem.groups)), "problem.n": max(1, *(g.n for g in problem.groups)),
            "problem.k": max(g.k for g in problem.groups), "moe.experts": 0, "moe.rows": ()}


def config_conflict(groups, experts: int, rows, m: int, n: int, k: int, batch: int) -> str | None:
    """Why a config's grouped keys (``problem.groups``, ``moe.experts``, ``moe.rows``) cannot go together, or
    None when they can."""
    if groups and experts:
        return "problem.groups with moe.experts: a problem is either a list of groups or an MoE layer, choose one"
    if (groups or experts) and batch != 1:
        return f"problem.batch = {batch} with a grouped problem: the groups replace the batch (batch: 1)"
    if rows and not experts:
        return "moe.rows without moe.experts: say how many experts the rows are spread over"
    if experts:
        if rows and len(rows) != experts:
            return f"moe.rows has {len(rows)} entries for {experts} experts"
        try:
            GroupedProblem.moe(rows or [m // experts] * experts, n, k, tokens=m if rows else None)
        except GroupedProblemError as exc:
            return f"{exc} (problem.m is A's rows, T)"
    return None
