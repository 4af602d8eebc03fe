"""The rules the block messages set on a problem's surfaces (its matrices in memory), each with the padding that
fixes it: 2D block surfaces for the native lowering at sub-group size 16, 1D sub-group block rows otherwise."""

from __future__ import annotations

import math

from xegemm.atoms.block1d import READ_ALIGN_BYTES, WRITE_ALIGN_BYTES
from xegemm.atoms.copy import SUB_GROUP as BLOCK2D_SUB_GROUP
from xegemm.config import Config
from xegemm.library.dtypes import dtype
from xegemm.grouped.problem import from_config as grouped_problem


def native_surface_violations(config: Config) -> list[str]:
    """Rules of 2D block surfaces the problem breaks (docs/atoms.md §2), each with the padding that fixes it.

    Base 64-byte aligned (for every batch), pitch a multiple of 16 bytes and >= the width, width >= 64 bytes.
    xegemm lays each operand out with pitch = width, so the rules land on the problem's dimensions.  Plans of
    another sub-group size copy with 1D block messages: their rules are :func:`block1d_surface_violations`.
    """
    if config.tile.subgroup_size != BLOCK2D_SUB_GROUP:
        return block1d_surface_violations(config)
    grouped = _per_group(config, native_surface_violations)
    if grouped is not None:
        return grouped
    p, t, lay = config.problem, config.types, config.layout
    c_type = t.acc if config.tile.split_k > 1 else t.c      # split K: the kernel stores the workspace
    bits = {name: dtype(name).bits for name in (t.a, t.b, c_type)}
    surfaces = [("A", "K" if lay.a == "row" else "M", p.k if lay.a == "row" else p.m, p.m if lay.a == "row" else p.k,
                 bits[t.a]),
                ("B", "N" if lay.b == "row" else "K", p.n if lay.b == "row" else p.k, p.k if lay.b == "row" else p.n,
                 bits[t.b]),
                ("C", "N", p.n, p.m, bits[c_type])]
    out = []
    for name, dim, cols, rows, eb in surfaces:
        width = -(-cols * eb // 8)                  # bytes (4-bit elements: two per byte)
        size = f"{eb // 8} B" if eb >= 8 else f"{eb} bits"
        if width < 64:
            out.append(f"{name} rows are {cols} x {size} = {width} B wide: 2D block surfaces must be >= 64 B; "
                       f"pad {dim} to {-(-64 * 8 // eb)}")
        if width % 16:
            mult = 128 // math.gcd(128, eb)
            out.append(f"{name} pitch {width} B is not a multiple of 16 B: pad {dim} to a multiple of {mult} "
                       f"({-(-cols // mult) * mult})")
        elif p.batch > 1 and (rows * width) % 64:
            out.append(f"{name} batch stride {rows * width} B breaks the 64-byte base alignment of every batch")
    if config.tile.stream_k:
        bn, acc = config.tile.workgroup[1], dtype(t.acc)
        if bn * acc.bits // 8 < 64:
            out.append(f"stream-K workspace tiles are BN = {bn} x {acc.bits // 8} B = {bn * acc.bits // 8} B wide: "
                       f"2D block surfaces must be >= 64 B; use BN >= {64 * 8 // acc.bits}")
    return out


def block1d_surface_violations(config: Config) -> list[str]:
    """Rules of 1D sub-group block messages the problem breaks, each with the padding that fixes it.

    Every row a message starts must be 4-byte aligned for reads and 16-byte aligned for writes (OCLSG
    "Restrictions"); buffers are, and a tile's rows start at multiples of its width (S chunks, >= 8 B for
    reads, 32 B for the f32/s32 C rows), so the rules land on the pitches (= the rows' widths) of A, B and C
    (batch strides are multiples of them).  Tiles over an edge use element accesses: no width minimum.
    """
    grouped = _per_group(config, block1d_surface_violations)
    if grouped is not None:
        return grouped
    p, t, lay = config.problem, config.types, config.layout
    bits = {name: dtype(name).bits for name in (t.a, t.b, t.c)}
    surfaces = [("A", "K" if lay.a == "row" else "M", p.k if lay.a == "row" else p.m, bits[t.a],
                 READ_ALIGN_BYTES, "reads"),
                ("B", "N" if lay.b == "row" else "K", p.n if lay.b == "row" else p.k, bits[t.b],
                 READ_ALIGN_BYTES, "reads"),
                ("C", "N", p.n, bits[t.c], WRITE_ALIGN_BYTES, "writes")]
    out = []
    for name, dim, cols, eb, align, verb in surfaces:
        pitch = -(-cols * eb // 8)                  # bytes (4-bit elements: two per byte, odd rows padded)
        if pitch % align:
            mult = align * 8 // math.gcd(align * 8, eb)
            out.append(f"{name} pitch {pitch} B is not a multiple of {align} B (1D sub-group block {verb} need "
                       f"{align}-byte aligned rows): pad {dim} to a multiple of {mult} ({-(-cols // mult) * mult})")
    return out



def _per_group(config: Config, rules) -> list[str] | None:
    """A grouped or MoE launch (xegemm.grouped): ``rules`` of every non-empty group's surfaces, each named by its
    group (the first three), and an MoE layer's experts' base alignment; None for a single GEMM.  Grouped
    operands start on 64-byte boundaries (xegemm.grouped.table.packed_offsets); an MoE expert's rows of A and D
    start where the previous expert's end."""
    problem = grouped_problem(config)
    if problem is None:
        return None
    out = []
    for index, g in enumerate(problem.groups):
        if g.empty:
            continue
        single = config.with_overrides({"problem.m": g.m, "problem.n": g.n, "problem.k": g.k, "problem.groups": (),
                                        "moe.experts": 0, "moe.rows": ()})
        out += [f"group {index} ({g.label}): {why}" for why in rules(single)]
    if problem.experts and config.tile.subgroup_size == BLOCK2D_SUB_GROUP:
        t, first = config.types, problem.groups[0]
        for name, row_bytes in (("A", first.k * dtype(t.a).bits // 8), ("D", first.n * dtype(t.c).bits // 8)):
            start = next((r * row_bytes for r in problem.row_offsets[:-1] if r * row_bytes % 64), None)
            if start is not None:
                out.append(f"an expert's rows of {name} start at byte {start}, not on the 64-byte base alignment "
                           f"of 2D block surfaces: rows of {row_bytes} B need a multiple of 64 B")
        expert_b = first.k * first.n * dtype(t.b).bits // 8      # expert e's weights start at e x K x N elements
        if problem.experts > 1 and expert_b % 64:
            out.append(f"expert 1's B starts at byte {expert_b} (K x N elements), not on the 64-byte base alignment "
                       "of 2D block surfaces: K x N x its bytes must be a multiple of 64")
    return out[:3] + ([f"... and {len(out) - 3} more"] if len(out) > 3 else [])
