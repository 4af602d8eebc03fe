"""What a report says, as plain data: variants grouped per problem and type combination, their best against
the references of the same run, the swept parameters and cutlass_profiler-style rows (run B against run A is
xegemm.reporting.comparison).

Every renderer (HTML, CSV, JSON) reads this model; none computes its own numbers.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field, replace

from xegemm.library.dtypes import UnknownDTypeError, dtype
from xegemm.plan.kernel_name import KernelNameError, parse_kernel_name
from xegemm.evaluate.timing import CV_LIMIT
from xegemm.evaluate.timing import gemm_flops
from xegemm.reporting.sources import Source
from xegemm.library.parts import BuildFigures, Conditions, Reference, TimeStats, VariantParams
from xegemm.library.record import COLUMNS, PROBLEM_KEYS, STATUSES, TYPE_KEYS, Evaluation
# xegemm.evaluate.timing.CV_LIMIT, the one limit of a timing's coefficient of variation: above it a measurement is taken
# again and then flagged, the reports draw it as noisy (amber), and a ratio is headlined only when both sides are
# within it

# cutlass_profiler's Disposition and Status for each xegemm status (xegemm's own word is a column too)
PROFILER_OUTCOME = {
    "ok": ("passed", "success"),
    "generated": ("not_run", "success"),
    "rejected": ("not_supported", "error_not_supported"),
    "failed_build": ("not_run", "error_internal"),
    "failed_verify": ("incorrect", "success"),
    "error": ("failed", "error_internal"),
    "timeout": ("not_run", "error_timeout"),
}
assert set(PROFILER_OUTCOME) == set(STATUSES)

PROFILER_COLUMNS = (
    "Problem", "Provider", "OperationKind", "Operation", "Disposition", "Status",
    "m", "n", "k", "batch_count", "A", "B", "C", "accum",
    "cta_m", "cta_n", "cta_k", "warps_m", "warps_n", "subgroup_size", "inst_m", "inst_n", "inst_k", "stages", "grf",
    "split_k_mode", "split_k_slices", "epilogue", "atom_a", "atom_b", "atom_c",
    "Bytes", "Flops", "Flops/Byte", "Runtime", "GB/s", "GFLOPs", "cv", "xegemm_status", "reason", "source")

def _joined(*values) -> str | None:
    """``32x32x16``, or None when one of the values is missing."""
    return None if any(v is None for v in values) else "x".join(map(str, values))


# the parameters a sweep or a tuner varies, as the axes of the parameter-effect plots: (title, value of params)
EFFECT_AXES = (
    ("work-group tile", lambda p: _joined(p.wg_m, p.wg_n, p.wg_k)),
    ("sub-group grid", lambda p: _joined(p.sg_m, p.sg_n)),
    ("prefetch", lambda p: p.prefetch),
    ("GRF mode", lambda p: p.grf),
    ("sub-group size", lambda p: p.subgroup_size),
    ("split K", lambda p: p.split_k),
    ("stream-K work-groups", lambda p: p.stream_k),
    ("swizzle", lambda p: p.swizzle),
    ("register block", lambda p: p.register_block),
    ("epilogue", lambda p: p.epilogue),
    ("atoms", lambda p: " ".join(str(atom) for atom in p.atoms if atom) or "planner's choice"),
)


def noisy(v: Evaluation) -> bool:
    return v.cv is not None and v.cv > CV_LIMIT


def gflops_range(v: Evaluation) -> tuple[float, float] | None:
    """GFLOP/s at the slowest and the fastest timed run (min-max whiskers), from the median's GFLOP/s."""
    if not v.gflops or not v.median_ms or not v.min_ms or not v.max_ms:
        return None
    work = v.gflops * v.median_ms
    return work / v.max_ms, work / v.min_ms


@dataclass
class Group:
    """The variants of one problem shape and type combination, with the references measured for it."""

    key: tuple
    variants: list[Evaluation] = field(default_factory=list)
    references: list[Reference] = field(default_factory=list)
    # per source (its label): the winner its document names for this shape (a tune directory's re-timed or
    # best single-measurement winner, xegemm.library.parts.Winner), which heads the source's variants
    declared: dict = field(default_factory=dict)

    @property
    def problem(self) -> dict:
        return dict(zip(PROBLEM_KEYS, self.key[:4]))

    @property
    def types(self) -> dict:
        return dict(zip(TYPE_KEYS, self.key[4:]))

    @property
    def groups(self) -> str | None:
        """A grouped or MoE launch's groups (``100x256x128+0x256x128``, ``moe32xT8048x5760x2880``), or None."""
        return next((v.parameters.groups for v in self.variants if v.parameters.groups), None)

    def group_sizes(self) -> str:
        """A grouped launch's groups one by one (MxNxK, as its evaluation recorded them) and the total work:
        ``groups 17x128x96, 0x128x96; total 2.1 MFLOP; ``; empty when no variant recorded them."""
        labels = next((v.group_labels for v in self.variants if v.group_labels), None)
        if not labels:
            return ""
        sizes = [[int(x) for x in label.split("x")] for label in labels]
        flops = sum(2 * m * n * k for m, n, k in sizes)
        rows = sum(m for m, _, _ in sizes)
        return f"groups {', '.join(labels)}; total {rows} rows, {flops / 1e6:.3g} MFLOP; "

    @property
    def short(self) -> str:
        """``MxNxK`` (a grouped launch: its groups) and A's type."""
        p = self.problem
        return f"{self.groups or '{m}x{n}x{k}'.format(**p)} {self.types['a']}"

    @property
    def quant(self) -> str | None:
        """How the kernels' operands are quantized (the kernel-name token, xegemm.plan.dequant.QuantPlan.name_part, e.g.
        ``qmx32se8m0``), or None."""
        for v in self.variants:
            try:
                token = parse_kernel_name(v.name).quant
            except (KernelNameError, TypeError):
                continue
            if token:
                return token
        return None

    @property
    def title(self) -> str:
        p, t = self.problem, self.types
        if p["m"] is None:
            return "problem unknown"
        what = (f"grouped {self.groups} (one launch; {self.group_sizes()}largest M={p['m']} N={p['n']} K={p['k']})"
                if self.groups else f"M={p['m']} N={p['n']} K={p['k']} batch={p['batch']}")
        quant = f", quantized {self.quant}" if self.quant else ""
        return f"{what}, A={t['a']} B={t['b']} acc={t['acc']} C={t['c']}{quant}, layouts {t['layout']}"

    @property
    def measured(self) -> bool:
        """Whether any variant was run on a device (an AOT build times nothing)."""
        return any(v.source_kind in ("run", "tune") for v in self.variants)

    @property
    def timed(self) -> list[Evaluation]:
        """The variants with a GFLOP/s, fastest first."""
        return sorted((v for v in self.variants if v.gflops), key=lambda v: -v.gflops)

    @property
    def best(self) -> Evaluation | None:
        """The fastest passing variant; within a source that names its winner (a tune directory: the leaders'
        re-timing may overturn the fastest single measurement), that one."""
        ok = [v for v in self.timed if v.status == "ok"]
        picks = []
        for label in dict.fromkeys(v.source for v in ok):
            mine = [v for v in ok if v.source == label]
            named = self.declared.get(label)
            picks.append(next((v for v in mine if named and v.name == named.kernel
                               and named.trial in (None, v.trial)), mine[0]))
        return max(picks, key=lambda v: v.gflops, default=None)

    @property
    def chosen_by(self) -> str | None:
        """How the best was chosen, where its source named it: ``re-timed leaders``, with the noise verdict."""
        best = self.best
        named = self.declared.get(best.source) if best else None
        if named is None or named.kernel != best.name:
            return None
        if not named.retimed:
            return "the best single measurement (the leaders were not timed again)"
        return "the leaders timed again, " + ("its lead beyond the noise" if named.separated else
                                             "its lead within the noise (a tie)")

    def swept_axes(self) -> list[tuple[str, list]]:
        """(axis title, the value of every timed variant) for each parameter that takes more than one value."""
        axes = []
        for title, value in EFFECT_AXES:
            values = [value(v.parameters) for v in self.timed]
            if len({str(x) for x in values}) > 1:
                axes.append((title, values))
        return axes

    @property
    def reference(self) -> Reference | None:
        """The numpy reference of this problem in the best variant's run (one per problem and run: the same in
        every section of that problem), else the first one measured."""
        numpy = [r for r in self.references if r.is_numpy]
        mine = [r for r in numpy if self.best and r.source == self.best.source]
        return (mine or numpy or [None])[0]

    def ratio(self, v: Evaluation) -> float | None:
        """A variant's GFLOP/s over the problem's numpy reference."""
        ref = self.reference
        return v.gflops / ref.gflops if v.gflops and ref and ref.gflops else None

    def headline(self) -> Headline | None:
        """The best variant against the numpy reference, headlined only when both sides were stable."""
        best = self.best
        if best is None:
            return None
        ref = self.reference
        ref_cv = ref.cv if ref else None
        unstable = []
        if best.cv is None or best.cv > CV_LIMIT:
            unstable.append(f"xegemm best CV {_percent(best.cv)}")
        if ref is not None and (ref_cv is None or ref_cv > CV_LIMIT or ref.high_cv):
            unstable.append(f"numpy CV {_percent(ref_cv)}")
        loads = [x for x in (best.load1, ref.load1 if ref else None) if isinstance(x, (int, float))]
        why = (f"machine busy: load {max(loads):.1f}" if loads else "timings unstable") + \
            (f"; {', '.join(unstable)}" if unstable else "")
        return Headline(self, best, ref, self.ratio(best), not unstable and ref is not None, why)

    def best_against_references(self) -> list[dict]:
        """The best variant's GFLOP/s against each reference of its problem: ``{"provider", "detail", "gflops",
        "ratio"}`` (the numpy one is the problem's pooled reference of the best variant's run)."""
        best, ref = self.best, self.reference
        references = [ref, *(r for r in self.references if not r.is_numpy)] if ref else self.references
        return [{"provider": r.name, "detail": r.detail(), "gflops": r.gflops,
                 "ratio": best.gflops / r.gflops if best and r.gflops else None}
                for r in references]


def _percent(x) -> str:
    return "not measured" if x is None else f"{x:.0%}"


@dataclass
class Headline:
    """A problem's best variant against its numpy reference, and whether the ratio may be headlined: only when
    both the kernel's and the reference's timings kept a CV within xegemm.evaluate.timing.CV_LIMIT."""

    group: Group
    best: Evaluation
    reference: Reference | None
    ratio: float | None
    reliable: bool
    why: str            # "machine busy: load 7.4; xegemm best CV 19%": what made it unreliable (and the load)

    @property
    def text(self) -> str:
        """One line for a terminal: ``64x64x64 bf16: best 10.3 GFLOP/s, 0.44x numpy`` (or why not)."""
        g = self.group
        head = (f"{g.short}: best {self.best.gflops:.1f} "
                f"GFLOP/s ({self.best.label})")
        if self.ratio is None:
            return head + ", no numpy reference"
        if self.reliable:
            return head + f", {self.ratio:.2f}x numpy"
        return head + f"; ratio to numpy {self.ratio:.2f}x not measured reliably ({self.why})"


def best_overall(group_list: list[Group]) -> list[Headline]:
    """Per problem shape, the headline of its fastest group (whatever its types): the page's first lines."""
    fastest: dict[tuple, Headline] = {}
    for g in group_list:
        h = g.headline()
        if h is not None and (g.key[:4] not in fastest or h.best.gflops > fastest[g.key[:4]].best.gflops):
            fastest[g.key[:4]] = h
    return list(fastest.values())


def groups(sources: list[Source]) -> list[Group]:
    """Every variant of ``sources`` in its problem and type group (ordered by problem), each group with the
    references measured for its shape in each source (a source that lists none for a shape, such as one read
    from its journal alone, gets its variants' interleaved numpy runs pooled)."""
    by_key: dict[tuple, Group] = {}
    for src in sources:
        for v in src.variants:
            by_key.setdefault(v.group_key, Group(v.group_key)).variants.append(v)
    for src in sources:
        listed = [(VariantParams.from_dict(r.problem).problem, r) for r in src.references]
        for shape in sorted({v.problem for v in src.variants} - {shape for shape, _ in listed}, key=str):
            pooled = pooled_reference([v for v in src.variants if v.problem == shape])
            if pooled:
                listed.append((shape, replace(pooled, problem=dict(zip(PROBLEM_KEYS, shape)))))
        for shape, r in listed:
            for g in by_key.values():
                if g.key[:4] == shape:
                    g.references.append(replace(r, source=src.label))
        for winner in src.info.winners:
            for g in by_key.values():
                if g.key[:4] == winner.shape:
                    g.declared[src.label] = winner
    return sorted(by_key.values(), key=lambda g: tuple((x is None, str(x) if x is None else x) for x in g.key[:4])
                  + tuple(str(x) for x in g.key[4:]))


# ---- one reference per problem -----------------------------------------------------------------------------

def pooled_reference(results: list[Evaluation]) -> Reference | None:
    """One numpy reference for a problem, from every numpy run measured interleaved with its variants (all of
    them, whatever their types): the median of those measurements' medians, the CV of all their runs pooled
    (so a reference that changed while the variants ran, on a busy machine, shows a high CV), and the
    conditions of the busiest of them.  None when no variant carries an interleaved reference."""
    refs = [ref for r in results if (ref := r.reference) and ref.interleaved and ref.median_ms and ref.gflops]
    if not refs:
        return None
    times = [ref.time_ms for ref in refs]
    runs = [t.runs or 1 for t in times]
    means = [t.mean or t.median for t in times]
    total = sum(runs)
    mean = sum(n * m for n, m in zip(runs, means)) / total
    square = sum(n * (((t.cv or 0.0) * m) ** 2 + m * m) for n, t, m in zip(runs, times, means)) / total
    cv = math.sqrt(max(square - mean * mean, 0.0)) / mean
    median = statistics.median(t.median for t in times)
    flops = refs[0].gflops * refs[0].median_ms     # the same problem: one amount of work
    busiest = max(refs, key=lambda ref: ref.load1 or 0.0)
    first = refs[0]
    return Reference(provider=first.provider, dtype=first.dtype, numpy=first.numpy,
                     openblas_coretype=first.openblas_coretype,
                     time_ms=TimeStats(min=min(t.median if t.min is None else t.min for t in times), median=median,
                                       max=max(t.median if t.max is None else t.max for t in times), mean=mean, cv=cv,
                                       runs=total),
                     gflops=flops / median, interleaved=True, pooled=len(refs), high_cv=cv > CV_LIMIT,
                     conditions=busiest.conditions or Conditions())


# ---- cutlass_profiler-style rows --------------------------------------------------------------------------

_MMA_SHAPE = re.compile(r"^XE_(\d+)x(\d+)x(\d+)_")


def _bytes(p: VariantParams) -> int | None:
    try:
        a, b, c = (dtype(t).bits for t in (p.a, p.b, p.c))
        return (p.m * p.k * a + p.k * p.n * b + p.m * p.n * c) * p.batch // 8
    except (KeyError, TypeError, UnknownDTypeError):
        return None


def _operand(p: VariantParams, which: str, index: int) -> str | None:
    layouts = str(p.layout or "").split("/")
    value = getattr(p, which)
    if value is None:
        return None
    return f"{value}:{layouts[index]}" if len(layouts) == 3 else str(value)


def _measures(p: VariantParams, median_ms: float | None) -> dict:
    """What cutlass_profiler derives from the problem: bytes (A, B and C moved once), flops, intensity, GB/s."""
    flops = gemm_flops(p.m, p.n, p.k, p.batch or 1) if None not in (p.m, p.n, p.k) else None
    nbytes = _bytes(p)
    return {"Bytes": nbytes, "Flops": flops, "Flops/Byte": round(flops / nbytes, 3) if flops and nbytes else None,
            "GB/s": nbytes / (median_ms * 1e6) if nbytes and median_ms else None}


# the profiler's headings of values results.csv has too (one value, two headings): the result's columns
# (xegemm.library.record.COLUMNS) and its parameters
PROFILER_SHARED = {**{c.profiler: c.name for c in COLUMNS if c.profiler},
                   "m": "m", "n": "n", "k": "k", "batch_count": "batch", "accum": "acc", "cta_m": "wg_m",
                   "cta_n": "wg_n", "cta_k": "wg_k", "warps_m": "sg_m", "warps_n": "sg_n",
                   "subgroup_size": "subgroup_size", "stages": "prefetch", "grf": "grf", "epilogue": "epilogue"}
assert set(PROFILER_SHARED) <= set(PROFILER_COLUMNS)


def profiler_rows(group_list: list[Group]) -> list[dict]:
    """One row per variant and per reference, in cutlass_profiler's columns (``Problem`` numbers the groups)."""
    rows = []
    for number, g in enumerate(group_list, 1):
        for v in g.variants:
            p, plain = v.parameters, v.columns()
            atom_mma, atom_a, atom_b, atom_c = v.atoms
            mma = _MMA_SHAPE.match(str(atom_mma or ""))
            disposition, status = PROFILER_OUTCOME[v.status]
            mode, slices = p.k_decomposition()
            rows.append({
                **dict.fromkeys(PROFILER_COLUMNS), **{h: plain.get(name) for h, name in PROFILER_SHARED.items()},
                "Problem": number, "Provider": "xegemm", "OperationKind": "gemm",
                "Disposition": disposition, "Status": status,
                "A": _operand(p, "a", 0), "B": _operand(p, "b", 1), "C": _operand(p, "c", 2),
                "inst_m": int(mma[1]) if mma else None, "inst_n": int(mma[2]) if mma else None,
                "inst_k": int(mma[3]) if mma else None, "split_k_mode": mode, "split_k_slices": slices,
                "atom_a": atom_a, "atom_b": atom_b, "atom_c": atom_c, **_measures(p, v.median_ms), "source": v.source})
        for r in g.references:
            q = replace(VariantParams.from_dict(r.problem), a="f32", b="f32", c="f32", acc="f32", layout="row/row/row")
            rows.append({
                **dict.fromkeys(PROFILER_COLUMNS), "Problem": number, "Provider": r.name,
                "OperationKind": "gemm", "Operation": r.detail(), "Disposition": "not_verified",
                "Status": "success", "m": q.m, "n": q.n, "k": q.k, "batch_count": q.batch,
                "A": "f32:row", "B": "f32:row", "C": "f32:row", "accum": "f32",
                **_measures(q, r.median_ms), "Runtime": r.median_ms, "GFLOPs": r.gflops,
                "cv": r.cv, "source": r.source})
    return rows


# ---- run B against run A: xegemm.reporting.comparison (through each run's own reference) ----------------


# ---- what ran ----------------------------------------------------------------------------------------------

def source_facts(src: Source, group_list: list[Group]) -> list[tuple[str, str]]:
    """The header of one source: what ran, where, with what, when, and how it was started (the page's and the
    Markdown's)."""
    info = src.info
    device = src.device
    cfg = info.config
    problems = sorted({g.title for g in group_list if any(v.source == src.label for v in g.variants)})
    caps = info.compiler_capabilities
    return [("directory", str(src.path)),
            ("config", f"{cfg.name or '?'}" + (f" ({cfg.source})" if cfg.source else "")
             + (f": {cfg.description}" if cfg.description else "")),
            ("device", device.describe() if device else
             (f"ahead of time for {info.target}" if info.target else "unknown")),
            ("driver", device.driver_version or "unknown" if device else "-"),
            ("runtime", ", ".join(f"{k} {v}" for k, v in info.versions.items()) or "unknown"),
            ("lowering / compiler", f"{info.lowering or 'native'}"
             + (f": {info.lowering_note}" if info.lowering_note else "")
             + (f"; compiler capabilities {caps}" if caps else "")),
            ("problems", "; ".join(problems) or "unknown"),
            ("date (UTC)", info.when),
            ("command", info.command or "not recorded")]



# The machine-code figures of an ahead-of-time build beside the plan's prediction: (key, heading).  The
# prediction counts one k-step of the main loop and the epilogue, each copy atom as the messages the compiler
# capabilities the build used lower it to (xegemm.evaluate.aot.predicted_counts): what this compiler issues,
# not what the plan would like (a 2D store the compiler cannot issue is predicted as its 1D block stores).
ISA_FIGURES = (("dpas", "dpas"), ("load_block2d", "2D block loads"), ("load_block1d", "1D block loads"),
               ("store_block2d", "2D block stores"), ("store_block1d", "1D block stores"),
               ("prefetch", "prefetches"))
GATED_FIGURES = ("dpas", "load_block2d", "load_block1d")     # a difference here fails the build


def _why_different(key: str, have: int, want: int) -> str:
    if key in GATED_FIGURES:
        return f"{key}: machine code {have}, plan {want} (gated: the build fails)"
    if key == "prefetch":
        return (f"prefetches: machine code {have}, plan {want} per k-step (the compiler unrolls or peels the "
                "main loop, so prefetches are reported, not gated)")
    return (f"{key}: machine code {have}, plan {want} (stores sit in the epilogue, which the compiler may "
            "unroll, split per fragment or move into a branch: reported, not gated)")


def isa_rows(sources: list[Source]) -> list[dict]:
    """Per built variant: each figure of :data:`ISA_FIGURES` measured and planned, sends, GRF mode, spills,
    instructions, and one phrase per figure where the machine code differs from the plan (what the page and the
    Markdown show; the values are the build's Evaluation fields ``extra.isa``, ``extra.predicted`` and
    ``extra.measured_messages``)."""
    rows = []
    for src in sources:
        caps = src.info.compiler_capabilities
        for v in src.variants:
            figures = BuildFigures.from_extra(v.extra)
            if not figures.built:          # never built (rejected: listed with the failures)
                continue
            cells, differences = [], []
            for key, heading in ISA_FIGURES:
                if key == "prefetch":
                    have, want = figures.prefetches_have, figures.prefetches_want
                else:
                    have, want = figures.have(key), figures.want(key)
                off = have is not None and want is not None and have != want
                cells.append({"key": key, "heading": heading, "have": have, "want": want, "off": off,
                              "text": f"{'-' if have is None else have} ({'-' if want is None else want})"})
                if off:
                    differences.append(_why_different(key, have, want))
            rows.append({"status": v.status, "target": figures.target, "grf": figures.grf, "cells": cells,
                         "sends": figures.stat("sends"), "instructions": figures.stat("instructions"),
                         "spills": figures.stat("spill_bytes"), "capabilities": figures.capabilities or caps,
                         "name": v.name, "reason": v.reason,
                         "differences": differences})
    return rows
