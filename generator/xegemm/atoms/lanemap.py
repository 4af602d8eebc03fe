"""The one form every layout in xegemm is given in: which elements each work-item holds, in register order.

A lane map lists, for each work-item (lane) of the sub-group, the (row, col) coordinates of the elements
held in that work-item's registers, in register order, at the granularity of the element type (sub-32-bit
elements packed little-endian: the lowest bits come first).  ``None`` marks a padding slot.  Coordinates
are those of the block or matrix as it lies in memory (row = memory row).
"""

from __future__ import annotations

from dataclasses import dataclass

Coord = "tuple[int, int] | None"


@dataclass(frozen=True)
class LaneMap:
    """Per-lane element coordinates; ``map[lane][i]`` is the i-th element of that lane's registers."""

    map: tuple[tuple[tuple[int, int] | None, ...], ...]

    @property
    def lanes(self) -> int:
        return len(self.map)

    @property
    def length(self) -> int:
        """Elements per lane (all lanes hold the same number)."""
        return len(self.map[0]) if self.map else 0

    @classmethod
    def from_lists(cls, per_lane) -> "LaneMap":
        m = tuple(tuple(None if c is None else (int(c[0]), int(c[1])) for c in lane) for lane in per_lane)
        if len({len(lane) for lane in m}) > 1:
            raise ValueError("every lane of a lane map must hold the same number of elements")
        return cls(m)

    def to_json(self) -> list:
        """``[[[row, col] or None, ...] per lane]``."""
        return [[None if c is None else [c[0], c[1]] for c in lane] for lane in self.map]

    def coords(self) -> set[tuple[int, int]]:
        """Every coordinate held by some lane."""
        return {c for lane in self.map for c in lane if c is not None}

    def owner(self) -> dict[tuple[int, int], tuple[int, int]]:
        """(row, col) -> (lane, register index) of the first holder."""
        out: dict[tuple[int, int], tuple[int, int]] = {}
        for lane, entries in enumerate(self.map):
            for i, c in enumerate(entries):
                if c is not None:
                    out.setdefault(c, (lane, i))
        return out

    def format_table(self, max_entries: int | None = None) -> str:
        """A table like the documents' (docs/atoms.md §1.1, §8): one row per work-item, its elements as ``row,col``."""
        lines = []
        for lane, entries in enumerate(self.map):
            shown = entries if max_entries is None else entries[:max_entries]
            cells = ["-,-" if c is None else f"{c[0]},{c[1]}" for c in shown]
            more = f" ... (+{len(entries) - len(shown)})" if len(shown) < len(entries) else ""
            lines.append(f"{lane:>9}  " + " ".join(f"{x:>6}" for x in cells) + more)
        header = "work-item  elements in register order (row,col; -,- = padding)"
        return "\n".join([header, *lines])


def lane_affine(values: list[int], length: int) -> tuple[int, int, int] | None:
    """(base, hi, lo) with values[lane] = base + hi * (lane / length) + lo * (lane % length) for every lane
    given, or None when the values are not of that form."""
    lanes, base = len(values), values[0]
    lo = values[1] - base if lanes > 1 and length > 1 else 0
    hi = values[length] - base if lanes > length else 0
    if any(v != base + hi * (lane // length) + lo * (lane % length) for lane, v in enumerate(values)):
        return None
    return base, hi, lo


def lane_expr(coefs: tuple[int, int, int], length: int, sub_group: int = 16) -> str:
    """(base, hi, lo) of :func:`lane_affine` as a C expression in ``lane`` (``lane % length`` written
    ``lane`` when length is the sub-group size)."""
    base, hi, lo = coefs
    terms = [str(base)] if base else []
    lane_in_row = "lane" if length == sub_group else f"lane % {length}"
    for coef, var in ((hi, f"lane / {length}"), (lo, lane_in_row)):
        if coef:
            terms.append(var if coef == 1 else f"{var} * {coef}")
    return " + ".join(terms) if terms else "0"
