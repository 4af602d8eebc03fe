"""The rules a quantized GEMM must follow, each a sentence naming the key and the numbers that break it: the
description itself (:func:`spec_violations`), the shapes its packing needs (:func:`shape_violations`), how it
fits the rest of a config (:func:`config_violations`, which the config reader reports at file:line:key) and the
work-group tile (:func:`plan_violation`, which the planner raises).

The group-versus-tile rule: a work-group multiplies one k-tile of ``tile.workgroup[2]`` = BK elements at a time,
so either a group holds whole k-tiles (group a multiple of BK: the scales change between k-tiles) or a k-tile
holds whole groups (BK a multiple of the group: the k-tile reads BK / group scale rows).  Anything else puts a
scale boundary inside a k-tile at a place that moves from tile to tile.  sycl-tla needs the first (it divides by
group / BK), vLLM's XPU kernels need group >= BK and were silently wrong with a group of 16 and a K tile of 32
(docs/quantization.md, "Pitfalls"); xegemm rejects every config that breaks the rule instead.
"""

from __future__ import annotations

from xegemm.library.dtypes import dtype
from xegemm.quant.formats import FORMATS
from xegemm.quant.spec import (
    COMPUTE_TYPES,
    FLOAT_WEIGHTS,
    FP8,
    GROUP_WORDS,
    INT_WEIGHTS,
    QuantSpec,
)

Violation = tuple[str, str]       # (key of QuantSpec or dotted config key, what is wrong)


def spec_violations(spec: QuantSpec) -> list[Violation]:
    """What is wrong with a description on its own (empty: nothing)."""
    fmt = FORMATS.get(spec.format)
    if fmt is None:
        return [("format", f"unknown format {spec.format!r}; formats: {', '.join(FORMATS)}")]
    out: list[Violation] = []

    def offer(key: str, value, allowed: tuple) -> None:
        if value not in allowed:
            out.append((key, f"format {fmt.name} takes {key} {' | '.join(map(str, allowed))}, not {value}"))

    offer("weight", spec.weight, fmt.weights)
    offer("scale", spec.scale, fmt.scales)
    offer("zero", spec.zero, fmt.zeros)
    offer("scale_layout", spec.scale_layout, fmt.scale_layouts)
    offer("layout", spec.layout, fmt.layouts)
    group = spec.group
    if isinstance(group, bool) or not (isinstance(group, int) and group > 0
                                       or group in GROUP_WORDS):
        out.append(("group", f"expected a positive integer, channel, tensor or block128, found {group!r}"))
    elif fmt.groups == "int" and group not in ("channel",) and not isinstance(group, int):
        out.append(("group", f"format {fmt.name} has one scale row per group of K: an integer or channel, not {group}"))
    elif fmt.groups not in ("any", "int") and group != int(fmt.groups):
        out.append(("group", (f"format {fmt.name} has one scale per {fmt.groups} K elements (group: {fmt.groups}), "
                             f"not {group}")))
    if group == "block128" and spec.weight not in FP8:
        out.append(("group", f"block128 (128 x 128 blocks) is for FP8 weights (e4m3, e5m2), not {spec.weight}"))
    if spec.has_zero and spec.weight in FLOAT_WEIGHTS:
        out.append(("zero", (f"{spec.weight} values take scales only: zero points are for integer weights "
                            f"({', '.join(INT_WEIGHTS)}); use zero: none")))
    if fmt.name == "gptq" and spec.zero != spec.weight and spec.zero in fmt.zeros and spec.weight in fmt.weights:
        out.append(("zero", (f"GPTQ packs zeros like the values: {spec.weight} values need {spec.weight} zeros, "
                            f"not {spec.zero}")))
    return out


def shape_violations(spec: QuantSpec, k: int, n: int, other: str = "N") -> list[str]:
    """What K and N (``other`` names it: M for A) break of the format's packing (empty: nothing)."""
    bits = dtype(spec.weight).bits
    out: list[str] = []
    if spec.format == "gptq":
        per = 32 // bits
        if k % per:
            out.append(f"GPTQ packs {per} consecutive K per int32 word: K = {k} is not a multiple of {per}")
        if n % per:
            out.append(f"GPTQ packs the zeros of {per} columns per int32 word: {other} = {n} is not a multiple of {per}")
    elif spec.format == "awq":
        if n % 8:
            out.append(f"AWQ packs 8 columns per int32 word: {other} = {n} is not a multiple of 8")
    elif bits == 4:
        dim, extent = (other, n) if spec.layout == "row" else ("K", k)
        if extent % 2:
            out.append(f"4-bit values pack two per byte along the contiguous dimension ({dim}): {dim} = {extent} is odd")
    return out


def compute_type(types) -> str | None:
    """The DPAS input type of a quantized GEMM: ``types.compute``, else ``types.a`` when it is f16 or bf16."""
    if types.compute is not None:
        return types.compute
    return types.a if types.a in COMPUTE_TYPES else None


def operand_spec(config, operand: str) -> QuantSpec | None:
    """The QuantSpec of operand ``b`` (config ``quant:``) or ``a`` (``quant_a:``), None when it is not quantized.
    A is described K-first like B: its M x K rows are the layout ``col`` of the K-first view."""
    section = config.quant if operand == "b" else config.quant_a
    if section.format == "none":
        return None
    weight = config.types.b if operand == "b" else config.types.a
    layout = config.layout.b if operand == "b" else ("col" if config.layout.a == "row" else "row")
    return QuantSpec(section.format, weight, section.group, section.scale, section.zero, section.scale_layout, layout)


def config_violations(config) -> list[Violation]:
    """How a config's types, layouts, ``quant:`` and ``quant_a:`` disagree, as (dotted key, message)."""
    t = config.types
    out: list[Violation] = []
    quant_b, quant_a = config.quant.format != "none", config.quant_a.format != "none"
    if t.b in FLOAT_WEIGHTS and not quant_b:
        out.append(("types.b", (f"{t.b} is not a DPAS input type: xegemm converts it to types.compute; describe its "
                               "scales in a quant: section (e.g. quant: {format: plain, group: tensor, scale: f32})")))
    if t.a in FP8 and not quant_a:
        out.append(("types.a", (f"{t.a} is not a DPAS input type: describe A's scales in a quant_a: section "
                               "(e.g. quant_a: {format: plain, group: 128, scale: f32})")))
    if quant_a:
        if t.a not in FP8:
            out.append(("quant_a.format", f"quant_a describes an FP8 A, but types.a is {t.a}"))
        elif t.b not in FP8:
            out.append(("types.b", f"FP8 A (types.a: {t.a}) goes with FP8 weights (W8A8: e4m3 or e5m2), not {t.b}"))
        section = config.quant_a
        if section.format != "plain":
            out.append(("quant_a.format", f"A is quantized plain (its own layout), not {section.format}"))
        if section.group == "block128":
            out.append(("quant_a.group", ("A takes group tensor, channel (one scale per row) or an integer "
                                         "(per-token groups along K, 128 for DeepSeek-style FP8), not block128")))
    if t.compute is not None and not (quant_a or quant_b):
        out.append(("types.compute", ("types.compute is the type quantized operands are converted to; without a "
                                     "quant: section the DPAS takes types.a and types.b")))
    if quant_a or quant_b:
        compute = compute_type(t)
        if compute is None:
            out.append(("types.compute", f"types.a is {t.a}: name the DPAS input type, types.compute: f16 or bf16"))
        elif t.a in COMPUTE_TYPES and compute != t.a:
            out.append(("types.compute", (f"types.compute is {compute} but A is {t.a} and is not quantized: the DPAS "
                                         f"takes A as it is, so the compute type must be {t.a}")))
        if t.a not in (*COMPUTE_TYPES, *FP8):
            out.append(("types.a", f"a quantized GEMM takes A as f16 or bf16 (or FP8 with quant_a:), not {t.a}"))
        if t.acc != "f32":
            out.append(("types.acc", f"a quantized GEMM accumulates in f32 (the f16/bf16 DPAS), not {t.acc}"))
    for operand, section_name in (("b", "quant"), ("a", "quant_a")):
        spec = operand_spec(config, operand)
        if spec is None:
            continue
        for key, message in spec_violations(spec):
            dotted = {"weight": f"types.{operand}", "layout": f"layout.{operand}"}.get(key, f"{section_name}.{key}")
            out.append((dotted, message))
    return out


def tile_violation(spec: QuantSpec, k: int, n: int, workgroup: tuple[int, int, int], key: str) -> str | None:
    """Why the work-group tile [BM, BN, BK] cannot walk this quantized operand (``key`` names its config
    section), or None.  B's K-groups against BK (and block128's column blocks against BN); A's against BK."""
    gk, gn = spec.group_extent(k, n)
    bk, bn = workgroup[2], workgroup[1]
    if gk < k and gk % bk and bk % gk:
        return (f"{key}.group = {gk} K elements per scale and the work-group K tile tile.workgroup[2] = {bk}: "
                f"neither is a multiple of the other, so scale boundaries would fall inside k-tiles at shifting "
                f"places (rule: the group is a multiple of the K tile, or the K tile a multiple of the group)")
    if key == "quant" and 1 < gn < n and gn % bn and bn % gn:
        return (f"{key}.group = block128 has {gn} columns per scale and the work-group N tile tile.workgroup[1] = "
                f"{bn}: neither is a multiple of the other (rule: the block is a multiple of the N tile, or the N "
                f"tile a multiple of the block)")
    return None


NOT_LOWERED = "no lowering dequantizes this yet: the config is valid, the kernel is not written"
DPAS_K = 16          # the f16/bf16 DPAS's K: a k-chunk of the dequantizing k-step has one scale row per column
LOWERED_FORMATS = ("plain", "gptq", "awq", "mx")
LOWERED_WEIGHTS = ("s8", "u8", "s4", "u4", "e4m3", "e5m2", "e2m1")
LOWERED_SCALES = ("f16", "bf16", "f32", "e8m0")
LOWERED_ZEROS = ("none", "u4", "s8", "u8", "f16", "bf16")


def lowering_gap(config) -> str | None:
    """What of a valid quantized config no lowering dequantizes yet (NOT_LOWERED and the part), or None.
    Lowered: a quantized B (``plain`` s8/u8/s4/u4/e4m3/e5m2 values, ``gptq``, ``awq``, ``mx`` e2m1), integer groups
    that are multiples of the DPAS K, channel, tensor and block128 scales of f16/bf16/f32 (e8m0 for mx), integer
    and f16/bf16 zero points, an FP8 A (W8A8) with f16/bf16/f32 scales per tensor, row or K group, sub-groups of 16."""
    a = operand_spec(config, "a")
    if a is not None:                  # W8A8 FP8: A plain, its scales per tensor, row or group of K
        if a.scale not in LOWERED_SCALES or a.scale == "e8m0" or a.k_group is not None and a.k_group % DPAS_K:
            return (f"{NOT_LOWERED} (quant_a: scale {a.scale}, group {a.group}; lowered: f16, bf16, f32 scales per "
                    f"tensor, channel or multiples of the DPAS K, {DPAS_K})")
    spec = operand_spec(config, "b")
    if spec is None:
        return None
    for key, value, lowered in (("quant.format", spec.format, LOWERED_FORMATS),
                                ("types.b", spec.weight, LOWERED_WEIGHTS), ("quant.scale", spec.scale, LOWERED_SCALES),
                                ("quant.zero", spec.zero, LOWERED_ZEROS)):
        if value not in lowered:
            return f"{NOT_LOWERED} ({key} = {value}; lowered: {', '.join(lowered)})"
    if isinstance(spec.group, int) and spec.group % DPAS_K:
        return (f"{NOT_LOWERED} (quant.group = {spec.group}; lowered: channel, tensor, block128 and multiples of the DPAS K, "
                f"{DPAS_K})")
    if config.tile.subgroup_size != 16:
        return f"{NOT_LOWERED} (tile.subgroup_size = {config.tile.subgroup_size}; lowered: 16)"
    return None


def plan_violation(config) -> str | None:
    """Why the planner must reject a config's quantization (the first rule broken, with its key and numbers),
    or None for a config without ``quant:``/``quant_a:``."""
    found = config_violations(config)
    if found:
        key, message = found[0]
        return f"{key}: {message}"
    p = config.problem
    for operand, key in (("b", "quant"), ("a", "quant_a")):
        spec = operand_spec(config, operand)
        if spec is None:
            continue
        other, name = (p.n, "N") if operand == "b" else (p.m, "M")
        shapes = shape_violations(spec, p.k, other, name)
        if shapes:
            return f"{key}.format = {spec.format}: {shapes[0]}"
        why = tile_violation(spec, p.k, other, config.tile.workgroup, key)
        if why:
            return why
    return lowering_gap(config)
