"""Straight-line C rolled back into loops, for the portable lowering's long runs of alike statements.

A 2D block load's fast path is one statement per register component (``v[5] = xe_ldu_u16(base, pitch_bytes,
y + 5, x + lane);``): 64 of them for a 32x32 u16 tile.  The Intel OpenCL CPU runtime compiles each
work-group's sub-groups twice, once whole and once under a lane mask for a last, partial sub-group (even
where the work-group size makes that impossible); under the mask, its AVX2 code path moves a 16-bit element
lane by lane, sixteen branches per statement.  A loop keeps one copy of the statement in both: with the copy
registers in local memory (lowering.portable.LocalRegisters) the plain kernel built in 0.27x the time on the
AVX2 path and 0.54x on AVX-512 (docs/benchmarks.md "Copy registers in local memory").

:func:`reroll` finds runs of statements that differ only in integer literals, each an arithmetic progression
along the run, and prints each run as a loop over its index.  The loop executes the same statements in the
same order: the kernel computes exactly what the straight-line code did.
"""

from __future__ import annotations

import re

# An integer literal standing alone: not part of a name (acc_0_1, .s3, u16), a float (1.0f) or a suffixed
# or hexadecimal literal (16u, 0xffu), whose digits are part of the statement's shape.
_LITERAL = re.compile(r"(?<![\w.])\d+(?![\w.])")
MIN_RUN = 4          # shorter runs stay as they are: a loop saves little there


def _split(line: str) -> tuple[str, tuple[int, ...]]:
    """(the line with its literals as ``{}``, the literals)."""
    return _LITERAL.sub("{}", line.replace("{", "{{").replace("}", "}}")), \
        tuple(int(m) for m in _LITERAL.findall(line))


def _term(first: int, step: int, index: str) -> str:
    """The literal of block ``index``, parenthesized wherever it is more than a name (it may follow a ``/``)."""
    if step == 0:
        return str(first)
    scaled = index if step == 1 else f"{step} * {index}"
    return scaled if first == 0 and step == 1 else f"({scaled})" if first == 0 else f"({first} + {scaled})"


def _run(parts, i: int, period: int) -> tuple[int, tuple]:
    """How many blocks of ``period`` statements from ``parts[i]`` on have the same shapes, each literal an
    arithmetic progression from block to block; and the steps."""
    first = parts[i:i + period]
    if len(first) < period or i + 2 * period > len(parts):
        return 1, ()
    second = parts[i + period:i + 2 * period]
    if [p[0] for p in second] != [p[0] for p in first]:
        return 1, ()
    steps = tuple(tuple(b - a for a, b in zip(f[1], s[1])) for f, s in zip(first, second))
    n = 2
    while i + (n + 1) * period <= len(parts):
        block = parts[i + n * period:i + (n + 1) * period]
        if any(b[0] != f[0] or any(v != a + d * n for v, a, d in zip(b[1], f[1], st))
               for b, f, st in zip(block, first, steps)):
            break
        n += 1
    return n, steps


def reroll(lines, index: str = "xe_i", indent: str = "", min_run: int = MIN_RUN, max_period: int = 4) -> list[str]:
    """``lines`` (C statements, one per line) with each run of at least ``min_run`` alike blocks of 1 to
    ``max_period`` statements printed as a loop ``for (int <index> = 0; ...) { block }`` with ``#pragma
    unroll 1`` (the compiler would unroll it back); ``indent``: added before the block's statements.  Where
    runs of several periods start at a statement, the one covering most statements is taken."""
    parts = [_split(line) for line in lines]
    out, i = [], 0
    while i < len(parts):
        best = max(((n * period, -period, n, steps) for period in range(1, max_period + 1)
                    for n, steps in [_run(parts, i, period)] if n >= min_run), default=None)
        if best is None:
            out.append(lines[i])
            i += 1
            continue
        covered, period, n, steps = best[0], -best[1], best[2], best[3]
        body = [parts[i + b][0].format(*(_term(f, d, index) for f, d in zip(parts[i + b][1], steps[b])))
                for b in range(period)]
        out += ["#pragma unroll 1", f"for (int {index} = 0; {index} < {n}; ++{index}) {{",
                *(indent + line for line in body), "}"]
        i += covered
    return out
