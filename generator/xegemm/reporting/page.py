"""The self-contained HTML page: the report model and its SVG plots through one autoescaped jinja2 template
(``templates/report/page.html.j2``).  Every string from a config, a kernel name or a compiler log is escaped
by the template; only the SVG that :mod:`xegemm.reporting.plots` draws is inserted as markup."""

from __future__ import annotations

import os
import time
from functools import lru_cache
from importlib import resources
from pathlib import Path
from urllib.parse import quote

import jinja2
from markupsafe import Markup

from xegemm import __version__
from xegemm.reporting import plots
from xegemm.reporting.model import CV_LIMIT, ISA_FIGURES, Group, best_overall, isa_rows, noisy, source_facts
from xegemm.library.parts import DevicePeak
from xegemm.library.record import PASSED, STATUSES, Evaluation
from xegemm.reporting.comparison import CHANGES, MIN_CHANGE, compare
from xegemm.reporting.sources import Source


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    root = resources.files("xegemm.templates") / "report"
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(root)), undefined=jinja2.StrictUndefined,
                             autoescape=True, trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = lambda x, spec: "-" if x is None else format(x, spec)
    return env


def _conditions(src: Source) -> list[tuple[str, str]]:
    c = src.info.conditions
    loads = [v.load1 for v in src.variants if isinstance(v.load1, (int, float))]
    cvs = [v.cv for v in src.variants if v.cv is not None]

    def known(x):
        return "?" if x is None else x
    return [("load average (1, 5, 15 min) when written",
             ", ".join(f"{x:.2f}" for x in c.loadavg) if c and c.loadavg else "not recorded"),
            ("1-min load while variants finished",
             f"{min(loads):.2f} to {max(loads):.2f}" if loads else "not recorded"),
            ("CPUs (online / this process may use)", f"{known(c.cpu_count)} / {known(c.affinity_cpus)}"
             if c else "not recorded"),
            ("CPU runtime code path", c and c.cpu_code_path or "not recorded"),
            ("CPU frequency governor", c and c.cpu_governor or ("not readable here (no cpufreq: a VM or "
             "container)" if c and c.governor_recorded else "not recorded")),
            ("timing method", c and c.timing_method and "; ".join(filter(None, (c.timing_method, c.timing_buffers)))
             or "not recorded"),
            ("thread settings", ", ".join(f"{k}={v}" for k, v in ((c and c.threads_env) or {}).items())
             or ("none set" if c else "not recorded")),
            ("CV of the timings", f"{min(cvs):.1%} to {max(cvs):.1%} (each over one variant's timed launches)" if cvs else "-")]


def _row(v: Evaluation) -> dict:
    p, (mma, *copies) = v.parameters, v.atoms
    split = p.k_decomposition()
    return {"trial": v.trial, "status": v.status,
            "tile": "x".join("?" if x is None else str(x) for x in (p.wg_m, p.wg_n, p.wg_k)),
            "sg": "x".join("?" if x is None else str(x) for x in (p.sg_m, p.sg_n)), "sgsize": p.subgroup_size,
            "prefetch": p.prefetch, "grf": p.grf, "mma": mma or "-",
            "epilogue": p.epilogue or "-", "k_split": " ".join(map(str, split)) if split[1] > 1 else "-",
            "copies": [f"{x.upper()}: {atom or '-'}" for x, atom in zip("abc", copies)],
            "gflops": v.gflops, "median": v.median_ms, "min": v.min_ms, "max": v.max_ms,
            "cv": v.cv, "noisy": noisy(v), "load1": v.load1, "err": v.max_abs_err, "name": v.name}


def _log_link(v: Evaluation, src: Source, page_dir: Path) -> str | None:
    """A relative link from the page to the variant's saved compiler log, if it is on disk."""
    candidates = [src.path / "logs" / f"{v.name}.log"] + ([Path(v.log)] if isinstance(v.log, str) else [])
    for path in candidates:
        if path.is_file():
            return quote(os.path.relpath(path.resolve(), page_dir.resolve()))
    return None


def _convergence_series(group: Group) -> dict[str, list[Evaluation]]:
    series: dict[str, list[Evaluation]] = {}
    for v in sorted(group.variants, key=lambda v: (v.trial is None, v.trial or 0)):
        if v.trial is not None:
            series.setdefault(f"{v.strategy or 'sweep'} ({v.source})", []).append(v)
    return series


def _group_view(n: int, g: Group) -> dict:
    """One problem group's section: best line, references, the plots, and the variant table."""
    series = _convergence_series(g)
    converges = any(len(trials) > 1 for trials in series.values()) and bool(g.timed)
    return {"title": g.title, "short": g.short,
            "best": g.best, "best_label": g.best.label if g.best else None, "chosen_by": g.chosen_by,
            "measured": g.measured,
            "headline": g.headline(), "references": g.best_against_references() if g.best else [],
            "rows": [_row(v) for v in sorted(g.variants, key=lambda v: (v.status != "ok", -(v.gflops or 0)))
                     if v.status != "rejected"],
            "rejected": sum(v.status == "rejected" for v in g.variants),
            "reference_plot": Markup(plots.reference_bars(g, f"g{n}-references")) if g.best and g.references else "",
            "bars_plot": Markup(plots.variant_bars(g, f"g{n}-variants"))
            if g.measured and any(v.status != "rejected" for v in g.variants) else "",
            "effects_plot": Markup(plots.parameter_effects(g, f"g{n}-effects")) if g.swept_axes() else "",
            "convergence_plot": Markup(plots.convergence(series, f"g{n}-convergence")) if converges else "",
            "has_walls": any(t.finished_at for trials in series.values() for t in trials)}


# the order of the comparison table: what needs a look first
CHANGE_ORDER = CHANGES


def _comparison_view(baseline: list[Source], sources: list[Source]) -> dict:
    rows = sorted(compare(baseline, sources), key=lambda r: (CHANGE_ORDER.index(r["change"]), -(r["speedup"] or 0)))
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["change"]] = counts.get(r["change"], 0) + 1
    return {"a": ", ".join(s.label for s in baseline), "b": ", ".join(s.label for s in sources), "rows": rows,
            "through_reference": any(r["basis"] == "numpy" for r in rows), "min_change": MIN_CHANGE,
            "counts": sorted(counts.items(), key=lambda kv: CHANGE_ORDER.index(kv[0])),
            "plot": Markup(plots.speedups(rows, "compare-speedups")) if any(r["speedup"] for r in rows) else ""}


def _failures(sources: list[Source], group_list: list[Group], page_dir: Path, rejected: bool) -> list[dict]:
    """The variants that were built and did not pass (``rejected``: those never built, instead)."""
    by_label = {s.label: s for s in sources}
    return [{"status": v.status, "problem": "x".join(map(str, v.problem)), "tile": v.label,
             "reason": v.reason or "(no reason recorded)", "name": v.name,
             "log": _log_link(v, by_label[v.source], page_dir)}
            for g in group_list for v in g.variants if v.status not in PASSED and (v.status == "rejected") == rejected]


def _title(sources: list[Source]) -> str:
    names = set()
    for s in sources:
        names.add(str(s.info.config.name or s.label))
    return ", ".join(sorted(names)) or "no results"


def _peaks(sources: list[Source]) -> dict[str, DevicePeak]:
    """Each source's measured device peak, by label (runs that measured one)."""
    return {s.label: peak for s in sources if (peak := s.info.device_peak) and peak.roofline}


def _roofline_note(sources: list[Source]) -> str:
    notes = ["Each point is a timed variant at its arithmetic intensity (A, B and C moved once); dashed lines are the "
             "references measured in the same run."]
    for s in sources:
        peak = s.info.device_peak
        if peak is not None and peak.gflops:
            notes.append(f"The solid line is the device's roofline as measured by {s.label} ({peak.what}): "
                         "a measured ceiling of simple kernels, not a data sheet's peak.")
        elif peak is not None:
            notes.append(f"{s.label}: the device's peak could not be measured: {peak.error}.")
        elif s.kind == "run":
            notes.append(f"{s.label}: the device's peak was not measured (nothing was timed, or the results predate "
                         "the measurement).")
    return " ".join(notes)


def render_page(sources: list[Source], group_list: list[Group], page_dir: Path,
                baseline: list[Source] | None = None, command: str | None = None) -> str:
    """The report of ``sources`` (with ``baseline`` as run A of a comparison) as one HTML document."""
    counts: dict[str, int] = {}
    for g in group_list:
        for v in g.variants:
            counts[v.status] = counts.get(v.status, 0) + 1
    timed = [v for g in group_list for v in g.timed]
    return _environment().get_template("page.html.j2").render(
        version=__version__, title=_title(sources), written=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        command=command, sources=[{"kind": s.kind, "label": s.label, "facts": source_facts(s, group_list),
                                   "missing": s.missing, "conditions": _conditions(s)} for s in sources],
        counts=[(s, counts[s]) for s in STATUSES if s in counts],
        nothing_timed=not timed and any(g.measured for g in group_list),
        groups=[_group_view(n, g) for n, g in enumerate(group_list, 1)],
        comparison=_comparison_view(baseline, sources) if baseline is not None else None,
        failures=_failures(sources, group_list, page_dir, rejected=False),
        rejected=_failures(sources, group_list, page_dir, rejected=True),
        overall=best_overall(group_list),
        roofline=Markup(plots.roofline(group_list, "roofline", _peaks(sources))) if any(v.gbps for v in timed)
        else "", roofline_note=_roofline_note(sources), isa_rows=isa_rows(sources), isa_headings=[h for _, h in ISA_FIGURES],
        noisy=[v for g in group_list for v in g.variants if noisy(v)], cv_limit=f"{CV_LIMIT:.0%}",
        status_colours=plots.STATUS_COLOURS, change_colours=plots.CHANGE_COLOURS)
