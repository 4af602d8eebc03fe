"""The report's pictures: matplotlib figures rendered to inline SVG.

SVG because the page must open offline and stay small: no JavaScript, nothing to download, text drawn as
paths (no font needed), and every mark is an element a test can count.  Each plotted series gets an element
id (matplotlib's ``gid``) ``<plot>-...``: a bar is ``<plot>-bar-<i>``, a point set ``<plot>-points-<j>``.
Figures are built with :class:`matplotlib.figure.Figure` (no pyplot state), so rendering is thread-safe and
leaves no windows.
"""

from __future__ import annotations

import html
import io
import re

import numpy as np
from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from xegemm.reporting.model import CV_LIMIT, Group, gflops_range, noisy
from xegemm.library.parts import DevicePeak
from xegemm.library.record import STATUSES, Evaluation

MAX_BARS = 40            # bars drawn per chart; the tables list every variant
STATUS_COLOURS = {"ok": "#2e7d32", "generated": "#607d8b", "rejected": "#9e9e9e", "failed_build": "#c62828",
                  "failed_verify": "#ad1457", "error": "#6a1b9a", "timeout": "#8d6e63"}
assert set(STATUS_COLOURS) == set(STATUSES)
NOISY_COLOUR = "#f9a825"
UNRELIABLE_COLOUR = "#bdbdbd"      # a reference whose ratio is not headlined (xegemm.reporting.model.Headline)
CHANGE_COLOURS = {"faster": "#2e7d32", "slower": "#c62828", "same": "#9e9e9e", "new failure": "#ad1457",
                  "fixed": "#1565c0", "vanished": "#6a1b9a", "new": "#607d8b", "still failing": "#bdbdbd",
                  "no reliable difference": "#ffb300"}
SERIES_COLOURS = ("#1565c0", "#ef6c00", "#2e7d32", "#6a1b9a", "#c62828", "#00838f", "#5d4037", "#455a64")


def _svg(fig: Figure, plot_id: str, titles: dict[str, str] | None = None) -> str:
    """The figure as an inline ``<svg>`` element; ``titles`` adds a hover text (``<title>``) to elements by id."""
    buf = io.StringIO()
    with rc_context({"svg.fonttype": "path", "svg.hashsalt": plot_id}):
        fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight")
    text = buf.getvalue()
    text = text[text.index("<svg"):]                        # drop the XML declaration and DOCTYPE
    text = text.replace("<svg ", f'<svg id="{plot_id}" class="plot" role="img" ', 1)
    for gid, title in (titles or {}).items():
        text = re.sub(f'(<g id="{re.escape(gid)}">)', lambda m: m[1] + f"<title>{html.escape(title)}</title>", text,
                      count=1)
    return text


def _figure(width: float, height: float) -> Figure:
    # no layout engine: savefig's bbox_inches="tight" already takes in every label, legend and title; the
    # constrained layout cost about 40% of a report's rendering on its own (measured 2026-12-03)
    fig = Figure(figsize=(width, height), dpi=96)
    fig.set_layout_engine("none")
    return fig


def variant_bars(group: Group, plot_id: str) -> str:
    """GFLOP/s per timed variant, fastest on top, min-max whiskers, CV at the bar's end; noisy bars amber;
    variants that were built but not timed are listed under the bars as a coloured status mark at 0 (rejected
    ones, never built, have their own table on the page)."""
    timed = group.timed[:MAX_BARS]
    untimed = [v for v in group.variants if not v.gflops and v.status != "rejected"][:MAX_BARS]
    rows = len(timed) + len(untimed)
    fig = _figure(9, 1.0 + 0.28 * max(rows, 2))
    ax = fig.add_subplot()
    titles = {}
    labels = []
    for i, v in enumerate(timed):
        y = rows - 1 - i
        colour = NOISY_COLOUR if noisy(v) else STATUS_COLOURS[v.status]
        bar = ax.barh(y, v.gflops, color=colour, height=0.7)[0]
        bar.set_gid(f"{plot_id}-bar-{i}")
        span = gflops_range(v)
        if span:
            # clamped: when the median is the slowest run, rounding can leave a tiny negative length
            ax.errorbar(v.gflops, y, xerr=[[max(0.0, v.gflops - span[0])], [max(0.0, span[1] - v.gflops)]],
                        fmt="none",
                        ecolor="#212121", capsize=3, linewidth=1)
        cv = v.cv
        ax.annotate(f"{v.gflops:.1f}" + (f"  CV {cv:.1%}" if cv is not None else ""),
                    (span[1] if span else v.gflops, y), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=8)
        labels.append(v.label)
        titles[f"{plot_id}-bar-{i}"] = f"{v.name}: {v.gflops:.2f} GFLOP/s ({v.status})"
    for j, v in enumerate(untimed):
        y = rows - 1 - len(timed) - j
        ax.plot([0], [y], marker="x", color=STATUS_COLOURS[v.status], markersize=8, gid=f"{plot_id}-untimed-{j}")
        ax.annotate(v.status, (0, y), xytext=(8, 0), textcoords="offset points", va="center", fontsize=8,
                    color=STATUS_COLOURS[v.status])
        labels.append(v.label)
        titles[f"{plot_id}-untimed-{j}"] = f"{v.name}: {v.status}"
    ax.set_yticks(range(rows), list(reversed(labels)), fontsize=8)
    ax.set_ylim(-0.6, rows - 0.4)
    ax.set_xlabel("GFLOP/s (median; whiskers: slowest and fastest run)")
    ax.margins(x=0.25)
    shown = len(group.timed) - len(timed)
    ax.set_title(f"GFLOP/s per variant ({len(group.timed)} timed" + (f", {shown} slower not drawn" if shown else "")
                 + f"; amber: CV above {CV_LIMIT:.0%})", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig, plot_id, titles)


def reference_bars(group: Group, plot_id: str) -> str:
    """The best variant's GFLOP/s beside each reference measured in the same run (the numpy bar grey when the
    ratio was not measured reliably)."""
    best, reliable = group.best, group.headline().reliable
    entries = [("xegemm best", best.gflops, STATUS_COLOURS["ok"])] + \
        [(str(r["provider"]), r["gflops"], SERIES_COLOURS[i % len(SERIES_COLOURS)]
          if reliable or r["provider"] != "numpy" else UNRELIABLE_COLOUR)
         for i, r in enumerate(group.best_against_references()) if r["gflops"]]
    fig = _figure(7, 0.8 + 0.4 * len(entries))
    ax = fig.add_subplot()
    for i, (label, value, colour) in enumerate(entries):
        ax.barh(len(entries) - 1 - i, value, color=colour, height=0.6)[0].set_gid(f"{plot_id}-bar-{i}")
        ratio = f" ({best.gflops / value:.2f}x{'' if colour != UNRELIABLE_COLOUR else ', not measured reliably'})" \
            if i else ""
        ax.annotate(f"{value:.1f}{ratio}", (value, len(entries) - 1 - i), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=8)
    ax.set_yticks(range(len(entries)), [e[0] for e in reversed(entries)], fontsize=9)
    ax.set_xlabel("GFLOP/s (ratio: xegemm best / reference)")
    ax.margins(x=0.2)
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig, plot_id)


def parameter_effects(group: Group, plot_id: str) -> str:
    """GFLOP/s against each swept parameter, one panel per parameter (every timed variant is a point)."""
    axes_data = group.swept_axes()
    fig = _figure(min(4.2 * len(axes_data), 13), 3.2)
    timed = group.timed
    for j, (title, values) in enumerate(axes_data):
        ax = fig.add_subplot(1, len(axes_data), j + 1)
        categories = sorted({str(x) for x in values}, key=_natural)
        xs = [categories.index(str(x)) for x in values]
        colours = [NOISY_COLOUR if noisy(v) else STATUS_COLOURS["ok"] for v in timed]
        ax.scatter(xs, [v.gflops for v in timed], c=colours, s=28, gid=f"{plot_id}-points-{j}", zorder=3)
        crowded = len(categories) > 4 or max(len(c) for c in categories) > 12   # slanted labels do not overlap
        ax.set_xticks(range(len(categories)), categories, fontsize=8, rotation=30 if crowded else 0,
                      ha="right" if crowded else "center")
        ax.set_title(title, fontsize=10)
        ax.set_xlim(-0.5, len(categories) - 0.5)
        _rate_axis(ax, [v.gflops for v in timed])     # a rate: from 0, so that a small difference looks small
        ax.grid(axis="y", alpha=0.3)
        if j == 0:
            ax.set_ylabel("GFLOP/s")
    return _svg(fig, plot_id)


def _rate_axis(ax, values) -> None:
    """A rate's axis: from 0 up to a tenth above the largest value, so the best point is never cut by the frame."""
    top = max((v for v in values if v), default=0.0)
    ax.set_ylim(0, top * 1.1 if top > 0 else 1.0)


def _natural(text: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def convergence(series: dict[str, list[Evaluation]], plot_id: str) -> str:
    """Best GFLOP/s so far against trial number and, where finish times are known, wall time; one line per
    strategy (a sweep is a strategy whose trial order is its journal order).  ``series`` maps a strategy to its
    trials in order; a trial without GFLOP/s (rejected, failed) advances the count but not the best."""
    timed_walls = any(t.finished_at for trials in series.values() for t in trials)
    fig = _figure(10 if timed_walls else 6, 3.2)
    panels = [fig.add_subplot(1, 2 if timed_walls else 1, 1)]
    if timed_walls:
        panels.append(fig.add_subplot(1, 2, 2))
    for j, (name, trials) in enumerate(series.items()):
        colour = SERIES_COLOURS[j % len(SERIES_COLOURS)]
        best, xs, ys, walls = 0.0, [], [], []
        start = min((t.finished_at for t in trials if t.finished_at), default=None)
        for n, t in enumerate(trials, 1):
            best = max(best, t.gflops or 0.0)
            xs.append(t.trial or n)          # the run's own trial numbers (the table's #)
            ys.append(best)
            walls.append(t.finished_at - start if start is not None and t.finished_at else None)
        panels[0].step(xs, ys, where="post", color=colour, label=name)
        panels[0].plot(xs, ys, "o", color=colour, markersize=3, gid=f"{plot_id}-points-{j}")
        if timed_walls:
            pairs = [(w, y) for w, y in zip(walls, ys) if w is not None]
            panels[1].step([w for w, _ in pairs], [y for _, y in pairs], where="post", color=colour, label=name)
            panels[1].plot([w for w, _ in pairs], [y for _, y in pairs], "o", color=colour, markersize=3,
                           gid=f"{plot_id}-wall-points-{j}")
    panels[0].set_xlabel("trial")
    panels[0].xaxis.set_major_locator(MaxNLocator(integer=True))
    panels[0].set_ylabel("best GFLOP/s so far")
    panels[0].legend(fontsize=8, loc="lower right")
    if timed_walls:
        panels[1].set_xlabel("wall time since the first trial finished (s)")
    tops = [t.gflops or 0.0 for trials in series.values() for t in trials]
    for ax in panels:
        _rate_axis(ax, tops)
        ax.grid(alpha=0.3)
    return _svg(fig, plot_id)


def roofline(group_list: list[Group], plot_id: str, peaks: dict[str, DevicePeak]) -> str:
    """Every timed variant at its arithmetic intensity (ideal traffic: A, B and C once) under the device's
    measured roofline (``peaks``: a source's label -> its measured f32 FMA GFLOP/s and copy GB/s), with each
    reference measured in the same run as a dashed line."""
    fig = _figure(8, 4.2)
    ax = fig.add_subplot()
    ceilings: dict[str, float] = {}
    xs = []
    for j, g in enumerate(gr for gr in group_list if gr.timed):
        colour = SERIES_COLOURS[j % len(SERIES_COLOURS)]
        points = [(v.gflops / v.gbps, v.gflops) for v in g.timed if v.gbps]
        xs += [x for x, _ in points]
        ax.plot([x for x, _ in points], [y for _, y in points], "o", color=colour, markersize=4, alpha=0.8,
                gid=f"{plot_id}-points-{j}", label=f"{g.problem['m']}x{g.problem['n']}x{g.problem['k']} "
                                                   f"{g.types['a']}")
        for r in g.references:
            if r.gflops:
                ceilings[str(r.provider)] = max(ceilings.get(str(r.provider), 0), r.gflops)
    lo, hi = min(xs, default=1) / 8, max(xs, default=1) * 8
    for i, (label, peak) in enumerate(peaks.items()):
        ridge = peak.gflops / peak.gbps
        line_x = np.geomspace(min(lo, ridge / 4), max(hi, ridge * 4), 64)
        ax.plot(line_x, np.minimum(peak.gflops, peak.gbps * line_x), color="#212121", linewidth=1.5,
                gid=f"{plot_id}-peak-{i}", label=f"device peak measured ({label}): {peak.gflops:.0f} GFLOP/s "
                                                 f"f32 FMA, {peak.gbps:.1f} GB/s copy")
    for i, (provider, value) in enumerate(sorted(ceilings.items())):
        ax.axhline(value, color="#616161", linestyle="--", linewidth=1, gid=f"{plot_id}-ceiling-{i}")
        ax.annotate(f"{provider} measured in this run: {value:.1f} GFLOP/s", (0.01, value),
                    xycoords=("axes fraction", "data"), xytext=(0, 3), textcoords="offset points", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of A, B and C)")
    ax.set_ylabel("GFLOP/s")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0, -0.14))      # below the axes: never over a point
    ax.grid(alpha=0.3, which="both")
    return _svg(fig, plot_id)


def speedups(rows: list[dict], plot_id: str) -> str:
    """Run B against run A: B/A per common timed variant (1 = unchanged; of the ratios to each run's own numpy
    reference, xegemm.reporting.comparison), with the noise bound as a whisker, coloured by the change."""
    timed = sorted((r for r in rows if r["speedup"]), key=lambda r: -r["speedup"])[:MAX_BARS]
    fig = _figure(9, 1.0 + 0.28 * max(len(timed), 2))
    ax = fig.add_subplot()
    titles = {}
    for i, r in enumerate(timed):
        y = len(timed) - 1 - i
        ax.barh(y, r["speedup"] - 1, left=1, color=CHANGE_COLOURS[r["change"]], height=0.7,
                xerr=r["noise"], error_kw={"ecolor": "#616161", "capsize": 2, "linewidth": 0.8})[0] \
            .set_gid(f"{plot_id}-bar-{i}")
        ax.annotate(f"{r['speedup']:.2f}x", (max(r["speedup"], 1), y), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=8)
        titles[f"{plot_id}-bar-{i}"] = (f"{r['name']}: {r['gflops_a']:.2f} -> {r['gflops_b']:.2f} GFLOP/s, "
                                        f"B/A {r['speedup']:.2f} per {r['basis']} within +-{r['noise']:.0%} "
                                        f"({r['change']})")
    ax.axvline(1, color="#212121", linewidth=1)
    names = [f"{r['problem']['m']}x{r['problem']['n']}x{r['problem']['k']} {r['types']} {r['label']}" for r in timed]
    ax.set_yticks(range(len(timed)), names[::-1], fontsize=8)
    basis = {r["basis"] for r in timed}
    ax.set_xlabel("B / A of the ratios to each run's own numpy reference" if basis == {"numpy"}
                  else "B / A (GFLOP/s; a run has no reference)")
    ax.margins(x=0.2)
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig, plot_id, titles)
