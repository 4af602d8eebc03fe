"""The layout registry: every memory layout of a matrix, and each of its spellings, in one table.

A matrix is stored row-major (``row``) or column-major (``col``).  Users meet a layout three ways, all
columns of :data:`LAYOUTS`: the config key (``layout: {a: row, b: col}``, with aliases such as
``column_major``), the letter of the tables of the README and of ``xegemm support`` (``R``/``C``: ``RCR`` =
A row-major, B column-major, C row-major, as CUTLASS's profiler prints layouts), and the letter of kernel
names (``t``/``n``: CUTLASS's kernel names, ``t`` = row-major, ``n`` = column-major, so ``RCR`` is ``tnt``).
"""

from __future__ import annotations

from dataclasses import dataclass

from xegemm.errors import XegemmError


@dataclass(frozen=True)
class MemoryLayout:
    """One layout of a matrix in memory."""

    name: str                   # config spelling: "row"
    aliases: tuple[str, ...]    # other config spellings
    letter: str                 # README / `xegemm support` / profiler tables: "R"
    name_letter: str            # kernel names (CUTLASS): "t"
    major: str                  # in words, for messages: "row"


LAYOUTS: dict[str, MemoryLayout] = {lay.name: lay for lay in (
    MemoryLayout("row", ("row_major",), "R", "t", "row"),
    MemoryLayout("col", ("column", "col_major", "column_major"), "C", "n", "column"),
)}
ALIASES: dict[str, str] = {alias: lay.name for lay in LAYOUTS.values() for alias in lay.aliases}


def layout(name: str) -> MemoryLayout:
    """The layout called ``name`` (a config spelling or an alias)."""
    try:
        return LAYOUTS[ALIASES.get(name, name)]
    except KeyError:
        raise XegemmError(f"unknown layout {name!r}; known: {', '.join(LAYOUTS)}") from None


def letters(*names: str, column: str = "letter") -> str:
    """Layouts by config name in one-letter ``column``: ``letters("row", "col", "row")`` = ``"RCR"``,
    ``letters("row", "col", "row", column="name_letter")`` = ``"tnt"``."""
    return "".join(getattr(layout(n), column) for n in names)


def from_letters(text: str, column: str = "letter") -> tuple[str, ...]:
    """Config names of layouts in one-letter ``column``: ``from_letters("RCR")`` = ``("row", "col", "row")``."""
    known = {getattr(lay, column): lay.name for lay in LAYOUTS.values()}
    if not text or any(c not in known for c in text):
        example = letters("row", "col", "row", column=column)
        raise XegemmError(f"{text!r} is not a layout in letters {'/'.join(known)} (e.g. {example})")
    return tuple(known[c] for c in text)


def name_letters(*names: str) -> str:
    """The kernel-name letters of layouts by config name: ``name_letters("row", "col", "row")`` = ``"tnt"``."""
    return letters(*names, column="name_letter")


def from_name_letters(text: str) -> tuple[str, ...]:
    """Config names of kernel-name letters: ``from_name_letters("tnt")`` = ``("row", "col", "row")``."""
    return from_letters(text, column="name_letter")


# The layouts of A and B xegemm generates, C row-major (block stores write row-major blocks): RRR, RCR, CRR, CCR
AB_LAYOUTS: tuple[str, ...] = tuple(letters(a, b, "row") for a in LAYOUTS for b in LAYOUTS)
