"""The supported matrix: which layouts, types and epilogues xegemm generates for which target and compiler, asked
of the code.

Nothing here is written by hand: every cell plans a representative variant with the planner
(:func:`xegemm.plan.planner.plan`, for the target's native lowering) and renders its native kernel for the target
with one compiler's measured capability set (:data:`xegemm.aot.capabilities.COMPILER_CAPABILITIES`: Debian 12's
``igc-1.0.12504`` for pvc and dg2, the current compiler's ``igc-2.40.14`` for every target), and shows either "yes"
(some sub-group tile of :data:`SUBGROUP_TILES` works) or the rule that rejected it.  The measured sets stand for
the compilers, so neither needs to be installed; tests/test_compiler_profiles.py probes each installed one again.
docs/support.md's tables are this module's output (``xegemm support``), and a test keeps them equal.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from xegemm.aot.capabilities import COMPILER_CAPABILITIES
from xegemm.config import config_from_text
from xegemm.library.dtypes import dtype
from xegemm.epilogues.outputs import OUTPUT_TYPES
from xegemm.epilogues.registry import ACTIVATIONS
from xegemm.errors import XegemmError
from xegemm.grouped.problem import GroupedProblem, config_overrides
from xegemm.library.layouts import AB_LAYOUTS, from_letters
from xegemm.lowering import named_lowering
from xegemm.plan.planner import plan
from xegemm.kernel.render import render_kernel
from xegemm.library.targets import COMPILER_NAMES, TARGETS, targets_of

LAYOUTS = AB_LAYOUTS     # RRR RCR CRR CCR: the layout registry's letters of A, B and C
COMPILER_TITLES = {"system": "Debian 12's compiler (system: ocloc 22.43, IGC 1.0.12504)",
                   "current": "the current compiler (current: ocloc 26.27, IGC 2.40)"}
SIZE = 256          # M = N = K of the representative problem: meets every block-surface rule


def type_combinations() -> list[tuple[str, str, str]]:
    """(A, B, accumulator) of every DPAS input pair the type registry lists, with each accumulator it has."""
    inputs = ("bf16", "f16", "tf32", "s8", "u8", "s4", "u4")
    out = []
    for a, b in itertools.product(inputs, repeat=2):
        ta, tb = dtype(a), dtype(b)
        same_kind = ta.is_int == tb.is_int and (ta.is_int or a == b)
        if same_kind and (not ta.is_int or ta.bits == tb.bits):
            out += [(a, b, acc) for acc in ta.accumulators]
    return out


@dataclass(frozen=True)
class Cell:
    """One cell: supported, or the reason it is not."""

    ok: bool
    reason: str = ""


SUBGROUP_TILES = {16: ((32, 32), (64, 32), (32, 64)), 8: ((16, 16), (32, 16), (16, 32))}   # tried in order


def _config_text(target: str, a: str, b: str, acc: str, c: str, la: str, lb: str, epilogue: str,
                 subgroup_tile: tuple[int, int]) -> str:
    simd = TARGETS[target].simd
    bk = max(32, 256 // min(dtype(a).bits, dtype(b).bits))
    sgm, sgn = subgroup_tile
    return (f"problem: {{m: {SIZE}, n: {SIZE}, k: {SIZE}}}\ntypes: {{a: {a}, b: {b}, acc: {acc}, c: {c}}}\n"
            f"layout: {{a: {la}, b: {lb}}}\ntile: {{workgroup: [{2 * sgm}, {2 * sgn}, {bk}], subgroups: [2, 2], "
            f"subgroup_size: {simd}}}\npipeline: {{prefetch: 0}}\n{epilogue}")


def _native(target: str, compiler: str):
    return named_lowering("native", COMPILER_CAPABILITIES[compiler], target)


def check(target: str, a: str, b: str, acc: str, c: str | None = None, layout: str = "RRR",
          epilogue: str = "", overrides=None, compiler: str = "current") -> Cell:
    """Plan and render natively for ``target`` with ``compiler``'s measured capabilities a representative variant
    (2x2 sub-groups of each sub-group tile in :data:`SUBGROUP_TILES` until one works): supported, or the reason
    the first tile was rejected.  ``overrides``: config keys replaced (a grouped or MoE problem, its walk)."""
    la, lb, _ = from_letters(layout)
    return _first_that_works([_config_text(target, a, b, acc, c or acc, la, lb, epilogue, tile)
                              for tile in SUBGROUP_TILES[TARGETS[target].simd]],
                             _native(target, compiler), overrides)


def _first_that_works(texts: list[str], lowering, overrides=None) -> Cell:
    """Plan and render each config text (with ``overrides``) in turn for ``lowering``: supported at the first
    that works, else the reason the first was rejected."""
    reasons = []
    for text in texts:
        try:
            render_kernel(plan(config_from_text(text).with_overrides(overrides or {}), lowering.issues), lowering)
        except XegemmError as exc:
            reasons.append(str(exc).splitlines()[0])
            continue
        return Cell(True)
    return Cell(False, reasons[0])


# quantized B, and an FP8 A with it (docs/quantization.md): label -> the config's types and quant: sections
QUANTIZED = {
    "plain s4, u4 zeros, group 128": "types: {a: f16, b: s4, c: f16}\nquant: {format: plain, group: 128, zero: u4}\n",
    "plain u4, group 32, column-major B": ("types: {a: f16, b: u4, c: f16}\nlayout: {b: col}\n"
                                          "quant: {format: plain, group: 32}\n"),
    "plain s4, channel, no zeros": "types: {a: f16, b: s4, c: f16}\nquant: {format: plain, group: channel}\n",
    "plain s8, channel, f32 scales": "types: {a: bf16, b: s8}\nquant: {format: plain, group: channel, scale: f32}\n",
    "plain u8, u8 zeros, group 64": "types: {a: f16, b: u8}\nquant: {format: plain, group: 64, zero: u8}\n",
    "plain e4m3, tensor": "types: {a: f16, b: e4m3}\nquant: {format: plain, group: tensor, scale: f32}\n",
    "plain e4m3, channel": "types: {a: f16, b: e4m3}\nquant: {format: plain, group: channel, scale: f16}\n",
    "plain e5m2, channel": "types: {a: bf16, b: e5m2}\nquant: {format: plain, group: channel, scale: bf16}\n",
    "plain e5m2, tensor": "types: {a: bf16, b: e5m2}\nquant: {format: plain, group: tensor, scale: f32}\n",
    "gptq u4, group 128": "types: {a: f16, b: u4}\nquant: {format: gptq, group: 128, zero: u4}\n",
    "gptq u8, group 128": "types: {a: f16, b: u8}\nquant: {format: gptq, group: 128, zero: u8}\n",
    "awq u4, group 128": "types: {a: bf16, b: u4}\nquant: {format: awq, group: 128, zero: u4}\n",
    "mx e2m1 (MXFP4)": "types: {a: bf16, b: e2m1}\nquant: {format: mx, group: 32, scale: e8m0}\n",
    "mx e2m1 (MXFP4), column-major B, nk scales": ("types: {a: bf16, b: e2m1}\nlayout: {b: col}\n"
                                                   "quant: {format: mx, group: 32, scale: e8m0, scale_layout: nk}\n"),
    "plain e4m3, block128": "types: {a: f16, b: e4m3}\nquant: {format: plain, group: block128, scale: f32}\n",
    "plain s8, f16 zeros": "types: {a: f16, b: s8}\nquant: {format: plain, group: 128, zero: f16}\n",
    "plain u4, bf16 zeros, group 32 (SGLang)": ("types: {a: bf16, b: u4}\n"
                                                "quant: {format: plain, group: 32, scale: bf16, zero: bf16}\n"),
    # the layouts xegemm.quant.from_safetensors reads compressed-tensors' pack-quantized checkpoints as
    "plain u8, u8 zeros, group 32, column-major B, nk (compressed-tensors W8A16)": (
        "types: {a: bf16, b: u8}\nlayout: {b: col}\nquant: {format: plain, group: 32, scale: bf16, zero: u8, "
        "scale_layout: nk}\n"),
    "plain u4, u4 zeros, channel, column-major B, nk (compressed-tensors W4A16)": (
        "types: {a: bf16, b: u4}\nlayout: {b: col}\nquant: {format: plain, group: channel, scale: bf16, zero: u4, "
        "scale_layout: nk}\n"),
    "W8A8 FP8: A per token and 128 K (nk), B block128": (
        "types: {a: e4m3, b: e4m3, compute: bf16}\nquant: {format: plain, group: block128, scale: f32}\n"
        "quant_a: {format: plain, group: 128, scale: f32, scale_layout: nk}\n"),
    "W8A8 FP8: A and B per tensor": ("types: {a: e4m3, b: e4m3, compute: f16}\nquant: {format: plain, group: tensor, "
                                     "scale: f32}\nquant_a: {format: plain, group: tensor, scale: f32}\n"),
}
# every scale layout x group kind, for B (e4m3 weights, which take every group kind; column-major B as FP8
# checkpoints store [N, K]) and for an FP8 A (W8A8)
QUANTIZED.update({
    f"scales {layout}, B group {group}": ("types: {a: f16, b: e4m3}\nlayout: {b: col}\n"
                                          f"quant: {{format: plain, group: {group}, scale: f32, scale_layout: {layout}}}\n")
    for layout in ("kn", "nk") for group in (32, "channel", "tensor", "block128")})
QUANTIZED.update({
    f"scales {layout}, W8A8 A group {group}": ("types: {a: e4m3, b: e4m3, compute: bf16}\nquant: {format: plain, "
                                               "group: tensor, scale: f32}\nquant_a: {format: plain, "
                                               f"group: {group}, scale: f32, scale_layout: {layout}}}\n")
    for layout in ("kn", "nk") for group in (128, "channel", "tensor")})


def check_quantized(text: str, lowering: str, target: str = "pvc", overrides=None, compiler: str = "current") -> Cell:
    """Plan and render a quantized B's representative variant (2x2 sub-groups of each sub-group tile of
    :data:`SUBGROUP_TILES` until one works) in ``lowering`` (``native``: for ``target`` with ``compiler``'s measured
    capabilities; ``overrides``: e.g. an MoE layer's keys): supported, or the reason the first tile was rejected."""
    low = _native(target, compiler) if lowering == "native" else named_lowering(lowering)
    return _first_that_works([f"problem: {{m: {SIZE}, n: {SIZE}, k: {SIZE}}}\ntile: {{workgroup: [{2 * sgm}, {2 * sgn}, "
                              f"32], subgroups: [2, 2]}}\npipeline: {{prefetch: 0}}\n{text}"
                              for sgm, sgn in SUBGROUP_TILES[16]], low, overrides)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


class _Notes:
    """Footnotes: each distinct reason once, numbered in order of appearance."""

    def __init__(self):
        self.reasons: dict[str, int] = {}

    def cell(self, cell: Cell) -> str:
        if cell.ok:
            return "yes"
        number = self.reasons.setdefault(cell.reason, len(self.reasons) + 1)
        return f"no [{number}]"

    def lines(self) -> list[str]:
        return [f"{n}. {reason}" for reason, n in self.reasons.items()]


GROUPED = GroupedProblem.of([(SIZE, SIZE, SIZE), (0, SIZE, SIZE), (SIZE // 2, SIZE, SIZE)])
MOE = GroupedProblem.moe([SIZE // 2, 0, SIZE // 4, SIZE // 4], SIZE, SIZE)


def _grouped_table(notes: _Notes, columns: list[tuple[str, str]]) -> list[str]:
    rows = {"grouped bf16 x bf16 -> f32, static walk": ("bf16", "bf16", "f32", config_overrides(GROUPED)),
            "grouped bf16 x bf16 -> f32, dynamic walk": ("bf16", "bf16", "f32",
                                                         {**config_overrides(GROUPED), "tile.walk": "dynamic"}),
            "grouped s8 x s8 -> s32": ("s8", "s8", "s32", config_overrides(GROUPED)),
            "grouped s4 x s4 -> s32": ("s4", "s4", "s32", config_overrides(GROUPED)),
            "MoE bf16 x bf16 -> f32 (4 experts, one empty)": ("bf16", "bf16", "f32", config_overrides(MOE))}
    header = ["problem", *(f"{t} {lay}" for t, _ in columns for lay in LAYOUTS)]
    return _table(header, [[name, *(notes.cell(check(t, a, b, acc, layout=lay, overrides=o, compiler=cc))
                                    for t, cc in columns for lay in LAYOUTS)] for name, (a, b, acc, o) in rows.items()])


def columns_of(compiler: str) -> list[tuple[str, str]]:
    """(target, compiler) of every target the compiler builds for, in the registry's order."""
    return [(t, compiler) for t in targets_of(compiler)]


QUANT_TARGETS = ("pvc", "bmg")     # the quantized table's native columns (every Xe2/Xe3 target plans the same)


def markdown(compilers: tuple[str, ...] | None = None) -> str:
    """The supported matrix as Markdown, per compiler (:data:`COMPILER_NAMES`, or ``compilers``) and per target
    it builds for: layouts x types, epilogues, output types, grouped and MoE problems; quantized B per compiler
    for pvc and bmg."""
    notes = _Notes()
    out = []
    for compiler in compilers or COMPILER_NAMES:
        columns = columns_of(compiler)
        title = f"{COMPILER_TITLES[compiler]}, capability set {COMPILER_CAPABILITIES[compiler]}"
        out += [f"### {title[0].upper()}{title[1:]}", ""]
        header = ["A x B -> acc", *(f"{t} {lay}" for t, _ in columns for lay in LAYOUTS)]
        rows = [[f"{a} x {b} -> {acc}", *(notes.cell(check(t, a, b, acc, layout=lay, compiler=cc))
                                          for t, cc in columns for lay in LAYOUTS)]
                for a, b, acc in type_combinations()]
        out += ["Layouts and types (C row-major, C type = accumulator type; R/C = row/column-major A, B, C):", "",
                *_table(header, rows), ""]
        epilogues = {"alpha, beta (reads C)": "epilogue: {alpha: 2, beta: 0.5}\n",
                     "bias per row": "epilogue: {bias: row}\n", "bias per column": "epilogue: {bias: col}\n",
                     **{f"activation {name}": f"epilogue: {{activation: {name}}}\n" for name in ACTIVATIONS
                        if name != "none"}}
        base = {"f32 accumulator": ("bf16", "bf16", "f32", "f32"), "s32 accumulator": ("s8", "s8", "s32", "s32")}
        header = ["epilogue", *(f"{t} {kind}" for t, _ in columns for kind in base)]
        rows = [[name, *(notes.cell(check(t, *base[kind][:3], c=base[kind][3], epilogue=text, compiler=cc))
                         for t, cc in columns for kind in base)] for name, text in epilogues.items()]
        out += ["Epilogues (RRR, bf16 x bf16 -> f32 or s8 x s8 -> s32):", "", *_table(header, rows), ""]
        header = ["accumulator", *(f"{t} C = {c}" for t, _ in columns for c in OUTPUT_TYPES)]
        accs = {"f32": ("bf16", "bf16"), "f16": ("f16", "f16"), "bf16": ("bf16", "bf16"), "s32": ("s8", "s8")}
        rows = [[acc, *(notes.cell(check(t, a, b, acc, c=c, compiler=cc)) for t, cc in columns for c in OUTPUT_TYPES)]
                for acc, (a, b) in accs.items()]
        out += ["Output conversions (RRR; f32 -> f16/bf16 round to nearest even, integers saturate):", "",
                *_table(header, rows), ""]
        out += ["Grouped and MoE GEMMs in one launch (docs/grouped.md; C = accumulator type; MoE: A's rows by "
                "expert, so A row-major):", "", *_grouped_table(notes, columns), ""]
    quant = [(t, c) for c in compilers or COMPILER_NAMES for t in QUANT_TARGETS if TARGETS[t].device_for(c)]
    header = ["quantized B (A f16/bf16 or FP8, f32 accumulator; docs/quantization.md)", "portable",
              *(f"{t} {c} native" for t, c in quant), "MoE experts portable",
              *(f"MoE experts {t} {c} native" for t, c in quant)]
    moe = config_overrides(MOE)       # the same format as an MoE layer's expert weights (docs/grouped.md)
    rows = [[name, *(notes.cell(check_quantized(text, "portable", overrides=o) if t is None else
                                check_quantized(text, "native", t, o, c))
                     for o in (None, moe) for t, c in [(None, None), *quant])] for name, text in QUANTIZED.items()]
    out += ["### Quantized B, every compiler", "",
            "Quantized B (and FP8 A), dequantized in registers into the f16/bf16 DPAS (RRR unless said; MoE: every "
            "expert's weights in the format, with its own scales and zeros, in one launch):", "",
            *_table(header, rows), "", "Reasons:", "", *notes.lines()]
    return "\n".join(out) + "\n"
