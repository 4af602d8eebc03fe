"""The report as text for tools and terminals: the CSV files, JSON and Markdown, one writer per format.

- CSV: :func:`results_csv` writes results as :data:`xegemm.library.record.COLUMNS` plus one column per parameter
  (``run``'s results.csv, ``tune``'s trials.csv); :func:`render_csv` writes the same values under
  cutlass_profiler's headings, one row per variant and per reference
  (:data:`xegemm.reporting.model.PROFILER_COLUMNS`).
- JSON: the profiler rows under ``"rows"`` (so CSV and JSON always agree) with the sources, the groups and the
  comparison.
- Markdown: :func:`render_markdown`, ``xegemm report --format md`` and every run's report.md.
"""

from __future__ import annotations

import csv
import io
import json

from xegemm import __version__
from xegemm.reporting.model import (CV_LIMIT, ISA_FIGURES, PROFILER_COLUMNS, Group, best_overall, isa_rows,
                                    profiler_rows, source_facts)
from xegemm.reporting.comparison import MIN_CHANGE, compare
from xegemm.reporting.sources import Source
from xegemm.library.parts import Reference
from xegemm.library.record import COLUMNS, STATUSES, Evaluation

FORMATS = ("html", "csv", "json", "md")


def _csv(rows: list[dict], columns) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if row.get(k) is None else row[k] for k in columns})
    return buf.getvalue()


def results_csv(results: list[Evaluation], leading: list[dict] | None = None) -> str:
    """Results as CSV: ``leading[i]``'s columns first if given (a tuner's shape, point and value), then
    :data:`xegemm.library.record.COLUMNS`, then every parameter any result has (sorted)."""
    rows = [{**(leading[i] if leading else {}), **r.columns()} for i, r in enumerate(results)]
    first = [k for row in leading or [] for k in row]
    params = sorted({k for r in results for k in r.params})
    return _csv(rows, list(dict.fromkeys([*first, *(c.name for c in COLUMNS), *params])))


def render_csv(group_list: list[Group]) -> str:
    return _csv(profiler_rows(group_list), PROFILER_COLUMNS)


def render_json(sources: list[Source], group_list: list[Group], baseline: list[Source] | None) -> str:
    data = {
        "generated_by": f"xegemm {__version__}",
        "sources": [{"kind": s.kind, "path": str(s.path), "label": s.label, "missing": s.missing,
                     "meta": {k: v for k, v in s.meta.items() if k != "device"} |
                     ({"device": {k: v for k, v in s.info.device.items() if k != "extensions"}}
                      if s.info.device is not None else {})} for s in sources],
        "groups": [{"problem": g.problem, "types": g.types, "best": g.best.name if g.best else None,
                    "best_against_references": g.best_against_references(),
                    "variants": [v.name for v in g.variants]} for g in group_list],
        "columns": list(PROFILER_COLUMNS),
        "rows": profiler_rows(group_list),
        "compare": compare(baseline, sources) if baseline is not None else None,
    }
    return json.dumps(data, indent=1, default=str) + "\n"


def _num(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _cell(text) -> str:
    return str(text or "").replace("|", "\\|").replace("\n", " ")[:300]


def _reference_line(r: Reference) -> str:
    """One reference in words: what ran, how it was measured, its time and the conditions."""
    how = (f"measured interleaved with the variants (alternating runs, so both sides saw the same load; "
           f"{r.pooled or 1} measurement(s) pooled)" if r.interleaved
           else "measured on its own after the variants")
    cond = r.conditions
    cpus = cond.affinity_cpus if cond and cond.affinity_cpus is not None else "?"
    return (f"{r.detail()}, {how}: median {_num(r.median_ms, '.3f')} ms = "
            f"{_num(r.gflops, '.1f')} GFLOP/s (CV {_num(r.cv, '.1%')}, load average "
            f"{_num(r.load1, '.2f')}, {cpus} CPUs"
            + (f", CPU code path {cond.cpu_code_path}" if cond and cond.cpu_code_path else "")
            + (f", governor {cond.cpu_governor}" if cond and cond.cpu_governor else "")
            + (f"; timed by {cond.timing_method}" if cond and cond.timing_method else "")
            + (f", {cond.timing_buffers}" if cond and cond.timing_buffers else "") + ")")


def headline_lines(group_list: list[Group]) -> list[str]:
    """Per problem, its best variant overall and its ratio to numpy, or why that ratio is not reliable (what
    ``xegemm run`` prints at its end and report.md says first)."""
    return [h.text for h in best_overall(group_list)]


def _variant_row(g: Group, v: Evaluation) -> str:
    status = v.status + (" (high CV)" if v.high_cv else "")
    return (f"| {v.label} | {status} | {_num(v.gflops, '.1f')} | {_num(g.ratio(v), '.2f')} | "
            f"{_num(v.median_ms, '.3f')} | {_num(v.cv, '.1%')} | {_num(v.max_abs_err, '.3g')} | {_cell(v.reason)} | "
            f"`{v.name}` |")


def render_markdown(sources: list[Source], group_list: list[Group], baseline: list[Source] | None) -> str:
    """What ran (per source), then per problem group: the best variant against the references, then every
    variant with its tile."""
    lines = ["# xegemm report: " + ", ".join(s.label for s in sources), ""]
    top = headline_lines(group_list)
    if top:
        lines += ["Best overall per problem:", ""] + [f"- {line}" for line in top] + [""]
    for s in sources:
        facts = [(key, value) for key, value in source_facts(s, group_list) if key != "directory"]
        lines += [f"- {s.kind} `{s.path}`"] + [f"  - {key}: {_cell(value)}" for key, value in facts]
        lines += [f"  - not read: {_cell(m)}" for m in s.missing]
        high = [v for v in s.variants if v.high_cv]
        if high:
            lines.append(f"  - warning: {len(high)} variant(s) kept a CV above {CV_LIMIT:.0%} after measuring twice (marked "
                         "'high CV' below): the machine was busy, so their times and ratios are uncertain")
    counts = {}
    for g in group_list:
        for v in g.variants:
            counts[v.status] = counts.get(v.status, 0) + 1
    lines += ["", "Variants: " + (", ".join(f"{counts[st]} {st}" for st in STATUSES if st in counts) or "none") + "."]
    for g in group_list:
        lines += ["", f"## {g.title}", ""]
        best = g.best
        if best:
            lines += [f"Best: {best.gflops:.1f} GFLOP/s, {best.label}, `{best.name}`: median "
                      f"{_num(best.median_ms, '.3f')} ms over {best.runs} runs (min {_num(best.min_ms, '.3f')}, max {_num(best.max_ms, '.3f')}, CV "
                      f"{_num(best.cv, '.1%')}); max abs error {_num(best.max_abs_err, '.3g')}", ""]
            headline = g.headline()
            for r in g.best_against_references():
                shaky = "" if headline.reliable or r["provider"] != "numpy" else \
                    f" (not measured reliably: {headline.why})"
                lines.append(f"- {r['detail']}: {_num(r['gflops'], '.1f')} GFLOP/s, xegemm best / reference "
                             f"{_num(r['ratio'], '.2f')}{shaky}")
            lines += [f"- reference: {_reference_line(g.reference)}"] if g.reference else []
        elif g.measured:
            lines.append("No variant of this problem verified, so none was timed.")
        else:
            lines.append("Built ahead of time: nothing was run or timed.")
        lines += ["", "| tile | status | GFLOP/s | vs numpy | median ms | CV | max abs err | reason | variant |",
                  "|---|---|---|---|---|---|---|---|---|"]
        lines += [_variant_row(g, v) for v in sorted(g.variants, key=lambda v: (v.status != "ok", -(v.gflops or 0)))]
    lines += _isa_markdown(sources)
    if baseline is not None:
        lines += ["", "## B against A", "", "B/A compares each run's ratio to its own interleaved numpy reference "
                  "(GFLOP/s when a run has none); a change is called only beyond 2 sqrt(CV_A^2 + CV_B^2) of the "
                  f"ratios (at least {MIN_CHANGE:.0%}); within it, 'no reliable difference' when either run's CV was "
                  f"above {CV_LIMIT:.0%}.", "",
                  "| change | tile | types | GFLOP/s A | GFLOP/s B | vs numpy A | vs numpy B | CV A | CV B | B/A "
                  "| noise | variant |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['change']} | {r['label']} | {r['types']} | {_num(r['gflops_a'], '.1f')} | "
                  f"{_num(r['gflops_b'], '.1f')} | {_num(r['ratio_a'], '.2f')} | {_num(r['ratio_b'], '.2f')} | "
                  f"{_num(r['cv_a'], '.1%')} | {_num(r['cv_b'], '.1%')} | {_num(r['speedup'], '.2f')} | "
                  f"{_num(r['noise'], '.0%')} | `{r['name']}` |"
                  for r in compare(baseline, sources)]
    return "\n".join(lines) + "\n"


def _isa_markdown(sources: list[Source]) -> list[str]:
    """The machine code against the plan, one row per built variant (:func:`xegemm.reporting.model.isa_rows`)."""
    rows = isa_rows(sources)
    if not rows:
        return []
    lines = ["", "## Machine code against the plan", "",
             "Each figure: the machine code's count (the plan's prediction), one k-step of the main loop and the "
             "epilogue, each copy atom counted as the messages the build's compiler capabilities issue. dpas and "
             "block loads must match (else `failed_build`); stores and prefetches are reported.", "",
             "| variant | status | GRF mode | " + " | ".join(h for _, h in ISA_FIGURES)
             + " | sends | instructions | spill bytes | where they differ |",
             "|---|---|---|" + "---|" * len(ISA_FIGURES) + "---|---|---|---|"]
    for r in rows:
        differ = "; ".join(r["differences"]) or (f"as planned (compiler capabilities {r['capabilities']})"
                                                 if r["capabilities"] else "as planned")
        lines.append(f"| `{r['name']}` | {r['status']} | {r['grf'] or '-'} | "
                     + " | ".join(c["text"] for c in r["cells"])
                     + f" | {_num(r['sends'], 'd')} | {_num(r['instructions'], 'd')} | {_num(r['spills'], 'd')} | "
                     f"{_cell(differ)} |")
    return lines
