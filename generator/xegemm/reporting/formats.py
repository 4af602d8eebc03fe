"""The report as text for tools and terminals: cutlass_profiler-style CSV, JSON, Markdown.

The CSV has one row per variant and per reference in :data:`xegemm.reporting.model.PROFILER_COLUMNS`; the
JSON holds the same rows under ``"rows"`` (so both always agree) with the sources, the groups and the comparison.
"""

from __future__ import annotations

import csv
import io
import json

from xegemm import __version__
from xegemm.reporting.model import PROFILER_COLUMNS, Group, compare, profiler_rows, tile_label
from xegemm.reporting.sources import Source

FORMATS = ("html", "csv", "json", "md")


def render_csv(group_list: list[Group]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=PROFILER_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in profiler_rows(group_list):
        writer.writerow({k: "" if row.get(k) is None else row[k] for k in PROFILER_COLUMNS})
    return buf.getvalue()


def render_json(sources: list[Source], group_list: list[Group], baseline: list[Source] | None) -> str:
    data = {
        "generated_by": f"xegemm {__version__}",
        "sources": [{"kind": s.kind, "path": str(s.path), "label": s.label, "missing": s.missing,
                     "meta": {k: v for k, v in s.meta.items() if k != "device"} |
                     ({"device": {k: v for k, v in s.meta["device"].items() if k != "extensions"}}
                      if isinstance(s.meta.get("device"), dict) else {})} for s in sources],
        "groups": [{"problem": g.problem, "types": g.types, "best": g.best["name"] if g.best else None,
                    "best_against_references": g.best_against_references(),
                    "variants": [v["name"] for v in g.variants]} for g in group_list],
        "columns": list(PROFILER_COLUMNS),
        "rows": profiler_rows(group_list),
        "compare": compare(baseline, sources) if baseline is not None else None,
    }
    return json.dumps(data, indent=1, default=str) + "\n"


def _num(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _cell(text) -> str:
    return str(text or "").replace("|", "\\|").replace("\n", " ")[:300]


def render_markdown(sources: list[Source], group_list: list[Group], baseline: list[Source] | None) -> str:
    """Per problem group: the best variant against the references, then every variant with its tile."""
    lines = ["# xegemm report: " + ", ".join(s.label for s in sources), ""]
    for s in sources:
        lines += [f"- {s.kind} `{s.path}`"] + [f"  - not read: {_cell(m)}" for m in s.missing]
    for g in group_list:
        lines += ["", f"## {g.title}", ""]
        if g.best:
            lines.append(f"Best: {g.best['gflops']:.1f} GFLOP/s, {tile_label(g.best['params'])}, `{g.best['name']}`")
            lines += [f"- {r['detail']}: {_num(r['gflops'], '.1f')} GFLOP/s, xegemm best / reference "
                      f"{_num(r['ratio'], '.2f')}" for r in g.best_against_references()]
        else:
            lines.append("No variant of this problem verified, so none was timed.")
        lines += ["", "| tile | status | GFLOP/s | median ms | CV | reason |", "|---|---|---|---|---|---|"]
        for v in sorted(g.variants, key=lambda v: (v["status"] != "ok", -(v.get("gflops") or 0))):
            t = v.get("time_ms") or {}
            lines.append(f"| {tile_label(v['params'])} | {v['status']} | {_num(v.get('gflops'), '.1f')} | "
                         f"{_num(t.get('median'), '.3f')} | {_num(t.get('cv'), '.1%')} | {_cell(v.get('reason'))} |")
    if baseline is not None:
        lines += ["", "## B against A", "", "| change | tile | GFLOP/s A | GFLOP/s B | B/A | variant |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['change']} | {r['label']} | {_num(r['gflops_a'], '.1f')} | {_num(r['gflops_b'], '.1f')} | "
                  f"{_num(r['speedup'], '.2f')} | `{r['name']}` |" for r in compare(baseline, sources)]
    return "\n".join(lines) + "\n"
