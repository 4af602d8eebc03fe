"""``xegemm report``: what one or more runs (and AOT builds) measured, as a self-contained HTML page of SVG
plots, cutlass_profiler-style CSV, JSON for tools, or Markdown for terminals.

    sources.py  one loader per kind of output directory -> Source (what could not be read is in ``missing``)
    model.py    groups per problem and types, best against references, profiler rows, run B against run A
    plots.py    matplotlib figures as inline SVG
    page.py     the HTML page (autoescaped jinja2 template)
    formats.py  one writer per format: CSV (results.csv / trials.csv, and the profiler's), JSON, Markdown
    results.py  a run's results.json, results.csv and report.md, from its journal

``xegemm run`` writes those (:func:`xegemm.reporting.results.write_reports`) and ``report.html`` beside them
(:func:`write_run_page`); ``xegemm tune``'s export writes trials.json, trials.csv and report.html.
"""

from __future__ import annotations

from pathlib import Path

from xegemm.errors import XegemmError
from xegemm.files import write_text_atomic
from xegemm.reporting.formats import FORMATS, render_csv, render_json, render_markdown
from xegemm.reporting.model import PROFILER_COLUMNS, groups
from xegemm.reporting.page import render_page
from xegemm.reporting.sources import LOADERS, Source, load_source, load_sources

__all__ = ["FORMATS", "LOADERS", "Source", "load_source", "load_sources", "render", "write_report", "write_run_page"]


def render(paths, fmt: str = "html", baseline=None, page_dir: Path | str = ".", command: str | None = None) -> str:
    """The report of the output directories ``paths`` (``baseline``: the directories of run A) in ``fmt``."""
    sources = load_sources(paths)
    base = load_sources(baseline) if baseline else None
    group_list = groups(sources)
    if fmt == "html":
        return render_page(sources, group_list, Path(page_dir), base, command)
    if fmt == "csv":
        return render_csv(group_list)
    if fmt == "json":
        return render_json(sources, group_list, base)
    return render_markdown(sources, group_list, base)


# how each format's report starts (what tells a report xegemm wrote from a user's file of the same name)
MARKS = {"html": '<meta name="generator" content="xegemm ', "json": '"generated_by": "xegemm ',
         "md": "# xegemm report: ", "csv": ",".join(PROFILER_COLUMNS)}


def written_by_xegemm(path: Path, fmt: str) -> bool:
    """Whether the file at ``path`` is a report of ``fmt`` that xegemm wrote (its mark in its first 4 KiB)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096).decode("utf-8", "replace")
    except OSError:
        return False
    return MARKS[fmt] in head


def write_report(paths, out: Path | str, fmt: str = "html", baseline=None, command: str | None = None) -> Path:
    """Write the report of ``paths`` to ``out`` atomically; return its path.  An existing ``out`` that is not a
    report of ``fmt`` xegemm wrote is never replaced: XegemmError naming it and the fix, before any work."""
    out = Path(out)
    if (out.exists() or out.is_symlink()) and not (out.is_file() and written_by_xegemm(out, fmt)):
        raise XegemmError(f"{out} exists and is not a report xegemm wrote (as {fmt}); it is left as it is: give "
                          f"another file with --out, or move it away")
    write_text_atomic(out, render(paths, fmt, baseline, out.parent, command))
    return out


def write_run_page(out_dir: Path | str) -> Path:
    """``report.html`` beside a run's results.json (what ``xegemm run`` writes at its end)."""
    return write_report([out_dir], Path(out_dir) / "report.html")
