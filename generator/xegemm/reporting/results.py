"""The documents of a run, made from its journal: ``results.json``, ``results.csv`` and ``report.md``.

results.json holds the run's facts (device, problem, conditions, versions, the references) and one row per
variant (:meth:`xegemm.library.record.Evaluation.to_row`); results.csv is the plain CSV writer's rows of the same
results (:func:`xegemm.reporting.formats.results_csv`); report.md is the Markdown writer's page of results.json
as ``xegemm report --format md`` would print it, so the files never disagree.
"""

from __future__ import annotations

import platform
import time
from importlib import metadata
from pathlib import Path

import numpy

from xegemm import __version__
from xegemm.files import write_json_atomic, write_text_atomic
from xegemm.results.journal import ResultStore
from xegemm.evaluate.timing import conditions
from xegemm.reporting.formats import render_markdown, results_csv
from xegemm.reporting.model import PROBLEM_KEYS, groups, pooled_reference
from xegemm.reporting.sources import load_sources
from xegemm.library.parts import Reference
from xegemm.library.record import Evaluation


def versions() -> dict:
    """The versions of what measured: xegemm, dpctl, numpy, Python (dpctl's from its package metadata, so that
    writing a document never imports the device runtime)."""
    try:
        dpctl = metadata.version("dpctl")
    except metadata.PackageNotFoundError:
        dpctl = "not installed"
    return {"xegemm": __version__, "dpctl": dpctl, "numpy": numpy.__version__,
            "python": platform.python_version()}


def utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def problem_references(results: list[Evaluation]) -> dict[tuple, Reference]:
    """(m, n, k, batch) -> the problem's one numpy reference, pooled over its variants' interleaved runs."""
    shapes = {r.problem for r in results}
    pooled = {shape: pooled_reference([r for r in results if r.problem == shape]) for shape in shapes}
    return {shape: ref for shape, ref in pooled.items() if ref}


def set_ratios(results: list[Evaluation], references: dict[tuple, Reference]) -> None:
    """Each result's ``vs_numpy``: its GFLOP/s over its problem's reference."""
    for r in results:
        ref = references.get(r.problem)
        r.vs_numpy = r.gflops / ref.gflops if r.gflops and ref and ref.gflops else None


def _sort_key(v: Evaluation):
    return (v.status != "ok", -(v.gflops or 0.0), v.name)


def run_results(store: ResultStore, keys: list[str]) -> list[Evaluation]:
    """This run's results (``keys``, in the journal), fastest first, each with its place in the run's order as
    ``trial`` (a sweep is a trial order too)."""
    results = []
    for trial, key in enumerate((k for k in dict.fromkeys(keys) if k in store.records), 1):
        result = store.records[key]
        result.trial = trial
        results.append(result)
    return sorted(results, key=_sort_key)


def timing_buffers(variants: list[Evaluation]) -> dict:
    """The buffers this run's variants were timed over (xegemm.evaluate.timing.Rotation, as each interleaved
    measurement recorded it), per problem where they differ: ``{"timing_buffers": ...}``, or {} if none was
    recorded."""
    seen: dict[tuple, str] = {}
    for v in variants:
        ref = v.extra.get("reference") if isinstance(v.extra, dict) else None
        cond = ref.get("conditions") if isinstance(ref, dict) else None
        if isinstance(cond, dict) and isinstance(cond.get("timing_buffers"), str):
            seen.setdefault(v.problem, cond["timing_buffers"])
    if not seen:
        return {}
    if len(set(seen.values())) == 1:
        return {"timing_buffers": next(iter(seen.values()))}
    return {"timing_buffers": "; ".join(f"{'x'.join(map(str, p[:3]))}: {b}" for p, b in sorted(seen.items()))}


def write_reports(store: ResultStore, keys: list[str], references: dict[tuple, Reference], lowering: str,
                  capabilities: str | None = None, command: str | None = None,
                  started_at: float | None = None, device_peak: dict | None = None, lowering_note: str = "") -> dict:
    """Write results.json, results.csv and report.md for this run's variants (``keys``, in the journal).

    Each problem has one numpy reference: the numpy runs interleaved with every timed variant of it, pooled
    (:func:`xegemm.reporting.model.pooled_reference`), and every variant's ``vs_numpy`` is against it.
    ``references`` maps a problem (m, n, k, batch) none of whose variants was timed to a reference measured on
    its own (or is empty); ``device_peak`` is the device's measured peak (:mod:`xegemm.evaluate.peak`), if it
    was measured; ``lowering_note``: what the lowering is beyond its name (the CPU emulation of the native one).
    Returns results.json's content."""
    cfg = store.config
    variants = run_results(store, keys)
    best = next((v for v in variants if v.status == "ok"), None)
    best_per_problem: dict[tuple, str] = {}
    for v in variants:          # sorted fastest first: the first ok variant of each problem is its best
        if v.status == "ok":
            best_per_problem.setdefault(v.problem, v.name)
    references = {**references, **problem_references(variants)}
    set_ratios(variants, references)
    base = (cfg.problem.m, cfg.problem.n, cfg.problem.k, cfg.problem.batch)
    reference = references.get(base) or next(iter(references.values()), None)
    config = cfg.to_dict()
    data = {
        "device": store.device.as_dict(),
        "problem": config["problem"],
        "types": config["types"],
        "layout": config["layout"],
        "config": {"name": cfg.name, "source": str(cfg.source), "description": cfg.description},
        "command": command,
        "started_at": utc(started_at) if started_at else None,
        "written_at": utc(time.time()),
        "conditions": {**conditions(), **timing_buffers(variants)},
        "device_peak": device_peak,
        "lowering": lowering,
        "lowering_note": lowering_note or None,
        "compiler_capabilities": capabilities,
        "versions": versions(),
        "reference": reference.to_dict() if reference else None,
        "references": [{"problem": dict(zip(PROBLEM_KEYS, shape)), **ref.to_dict()}
                       for shape, ref in sorted(references.items())],
        "best": best.name if best else None,
        "best_per_problem": [{"problem": dict(zip(PROBLEM_KEYS, shape)), "name": name}
                             for shape, name in sorted(best_per_problem.items())],
        "variants": [v.to_row() for v in variants],
    }
    out = Path(store.out)
    write_json_atomic(out / "results.json", data)
    write_text_atomic(out / "results.csv", results_csv(variants))
    sources = load_sources([out])
    write_text_atomic(out / "report.md", render_markdown(sources, groups(sources), None))
    return data
