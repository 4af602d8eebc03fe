"""The jobs, end to end: ``generate`` (sources), ``run`` (a device: build, verify, time, report) and
``build_config`` (ahead of time for a real Xe target).

Each job plans a config's variants (:func:`xegemm.evaluate.plan_variants`) and hands them to an
:class:`xegemm.evaluate.Evaluator`; a variant that is rejected, fails to build or fails verification is
recorded with its reason (and build log) and the sweep goes on; only verified variants are timed.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from xegemm.aot.toolchain import aot_target, compiler_record, find_ocloc, require_ocloc
from xegemm.config import load_config
from xegemm.config.sections import Problem
from xegemm.evaluate import (
    STATUSES,
    Evaluation,
    Evaluator,
    PlannedVariant,
    ProgressObserver,
    SourceWriter,
    params_of,
    lowering_of,
    plan_variants,
    render_variant,
)
from xegemm.evaluate.aot import IsaConsoleObserver, aot_evaluator, coopmat_dialect
from xegemm.epilogues.config import consent_flags
from xegemm.errors import XegemmError
from xegemm.evaluate.device import DeviceSession, device_evaluator
from xegemm.evaluate.isolated import TimeLimits, isolated_device_evaluator
from xegemm.lowering import Lowering, choose_lowering, named_lowering
from xegemm.evaluate.timing import current_pace, time_numpy_reference
from xegemm.library.parts import Reference
from xegemm.files import RESULTS_BYTES, read_text, set_aside, write_json_atomic
from xegemm.results.journal import ResultStore
from xegemm.reporting import load_sources, write_report, write_run_page
from xegemm.reporting.model import Headline, best_overall, groups
from xegemm.reporting.results import utc, versions, write_reports
from xegemm.runtime import describe, select_sycl_device
from xegemm.verify.dense import check_fits

__all__ = ["STATUSES", "DeviceSession", "Evaluation", "PlannedVariant", "RunInterrupted", "RunResult", "TimeLimits",
           "build_config", "choose_lowering", "generate", "plan_variants", "render_variant", "run", "run_variant"]


def _jsonable(value):
    return json.loads(json.dumps(value, default=list))


# ---- generate ------------------------------------------------------------------------------------------

def generate(config_path: str | Path, out_dir: str | Path, lowering: str = "portable",
             capabilities_name: str | None = None, compiler: str | None = None) -> dict:
    """Write ``<name>.cl`` for every planned variant and a ``manifest.json``; return the manifest.  The native
    lowering spells its atoms with ``capabilities_name``, else with what ``compiler`` (``system``, ``current``, a
    path) was probed to issue for pvc."""
    config = load_config(config_path)
    low = named_lowering(lowering, capabilities_name, "pvc", compiler)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    evaluator = Evaluator(low, SourceWriter(out, low))
    entries = []
    for pv in plan_variants(config, low):
        ev = evaluator.evaluate(pv)
        entry = {"name": pv.name, "status": ev.status, "reason": ev.reason,
                 "overrides": _jsonable(pv.variant.overrides), "params": params_of(pv.config)}
        if ev.status == "generated":
            entry.update(path=ev.extra["path"], sha256=ev.source_sha256, plan=ev.plan)
        entries.append(entry)
    manifest = {"config": config.name, "lowering": low.name, "capabilities": low.capabilities_name,
                **({"compiler": compiler} if compiler and lowering == "native" else {}), "kernels": entries}
    manifest_path = out / "manifest.json"
    try:
        existing = json.loads(read_text(manifest_path, RESULTS_BYTES, "manifest")) if manifest_path.exists() else {}
    except (XegemmError, ValueError) as exc:
        print(f"xegemm: note: {manifest_path} was not a manifest ({str(exc)[:120]}); moved to "
              f"{set_aside(manifest_path)}, a new one is written", file=sys.stderr)
        existing = {}
    configs = existing.get("configs", {}) if isinstance(existing, dict) else {}
    configs[config.name] = manifest
    write_json_atomic(manifest_path, {"generated_by": "xegemm generate", "configs": dict(sorted(configs.items()))})
    return manifest


# ---- run -----------------------------------------------------------------------------------------------

def run_variant(pv: PlannedVariant, session: DeviceSession, lowering: Lowering = Lowering("portable"),
                log_dir: Path | None = None, timer=None) -> Evaluation:
    """Build, verify and (if verified) time one variant on the session's device (for notebooks and benches)."""
    return device_evaluator(session, lowering, log_dir=log_dir, timer=timer).evaluate(pv)


class RunInterrupted(XegemmError):
    """The user stopped a run (Ctrl-C or SIGTERM); what finished is kept and the message says how to resume."""

    exit_code = 130


@contextmanager
def shielded():
    """Finish a cleanup whatever the user presses: SIGINT and SIGTERM are ignored inside (a second Ctrl-C while
    the partial reports are written would otherwise lose them) and restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@dataclass
class RunResult:
    """What :func:`run` returns: the run's directory, this run's results (fastest first, as results.json lists
    them), per problem the headline of its best variant against numpy, and results.json's content."""

    out: Path
    variants: list[Evaluation]
    headlines: list[Headline]
    document: dict

    @property
    def results_json(self) -> Path:
        return self.out / "results.json"


def run(config_path: str | Path, device: str | None = None, out_dir: str | Path | None = None,
        lowering: str | None = None, progress=sys.stderr, reference_repeats: int = 5,
        limits: TimeLimits = TimeLimits(), on_stage=None, command: str | None = None,
        problems: list[Problem] | None = None) -> RunResult:
    """Run a config end to end on a device and write results.json, results.csv, report.md and report.html into
    out_dir (``command``: the command line that started the run, recorded in the reports; ``problems``: run at
    these problems, :class:`xegemm.config.sections.Problem`, instead of the config's problem and problem sweep).

    Every build and launch runs in a worker process with a time limit (:mod:`xegemm.evaluate.isolated`).  If
    ``out_dir`` already holds results of the same kernels (same source, lowering and compiler capabilities) on
    the same problem and device (an interrupted sweep), those are kept and only the rest are run; the reports
    show exactly this run's variants (``on_stage``: see IsolatedDeviceBuilder).  Ctrl-C stops promptly: the partial reports are written and
    :class:`RunInterrupted` says how to resume.
    """
    started_at = time.time()
    current_pace()                  # a malformed XEGEMM_PACE: one clear error before any work
    config = load_config(config_path)
    requested = list(problems or ())
    if requested:
        config = config.at_problems([problem.as_dict() for problem in requested])
    sycl_device = select_sycl_device(device)
    info = describe(sycl_device)
    low = choose_lowering(info, lowering)
    out = Path(out_dir) if out_dir else Path("runs") / time.strftime("%Y%m%d-%H%M%S")
    planned = plan_variants(config, low)
    too_big = sorted({why for pv in planned if (why := check_fits(pv.config, info.global_mem_bytes))})
    if too_big:
        raise XegemmError("; ".join(too_big))
    say = (lambda text: print(text, file=progress, flush=True)) if progress else (lambda text: None)
    store = ResultStore(out, config=config, device=info)      # a writable, unlocked directory, or an error now
    for moved in _set_aside_foreign_reports(out, config):      # under the directory's lock
        say(f"note: {moved}")
    for damage in store.damaged:
        say(f"warning: {damage}")
    progress_observer = ProgressObserver(progress, len(planned))
    spirv = any(lowering_of(pv, low).source_kind == "spirv" for pv in planned if pv.plan is not None)
    evaluator = isolated_device_evaluator(info.filter_string, low, log_dir=out / "logs", limits=limits,
                                          observers=(progress_observer,), on_stage=on_stage, spirv=spirv)
    say(f"xegemm run {config.source}: {len(planned)} variants on {info.filter_string} ({info.name}), "
        f"lowering {low.name}" + (f": {low.note}" if low.note else "") + f", results in {out}")
    keys: list[str] = []
    try:
        for pv in planned:
            source = evaluator.source(pv)          # rendered once: the resume key, then the build
            key = store.key(pv.name, pv.config, low.name, low.capabilities_name,
                            Evaluation.digest(source) if source is not None else None)
            done = store.get(key)
            if done is not None:
                keys.append(key)
                progress_observer.done += 1
                say(f"[{progress_observer.done}/{len(planned)}] {pv.name} ({pv.config.problem.label}): "
                    f"{done.status} (recorded earlier, kept)")
                continue
            store.add(key, evaluator.evaluate(pv, source))
            keys.append(key)
        timed = any(store.get(k).status == "ok" for k in keys)
        peak = evaluator.builder.measure_peak() if timed else None    # the roofline's ceilings
        evaluator.builder.close()
        # every timed variant carries the reference measured interleaved with it; a problem none of whose
        # variants was timed still gets one, measured on its own
        problems = {(pv.config.problem.m, pv.config.problem.n, pv.config.problem.k, pv.config.problem.batch)
                    for pv in planned if pv.plan is not None} or {(config.problem.m, config.problem.n,
                                                                   config.problem.k, config.problem.batch)}
        interleaved = {store.records[k].problem for k in keys if store.records[k].reference}
        references = {shape: Reference.from_dict(time_numpy_reference(*shape, repeats=reference_repeats))
                      for shape in sorted(problems - interleaved)}
    except KeyboardInterrupt:
        with shielded():
            evaluator.builder.close()
            write_reports(store, keys, {}, lowering=low.name, capabilities=low.capabilities_name, command=command,
                          lowering_note=low.note,
                          started_at=started_at)
            write_run_page(out)
            store.close()
        words = ["xegemm", "run", str(config_path), "--out", str(out)] + (["--device", device] if device else []) \
            + (["--lowering", lowering] if lowering else []) \
            + (["--build-timeout", f"{limits.build_s:g}"] if limits.build_s != TimeLimits.build_s else []) \
            + (["--run-timeout", f"{limits.run_s:g}"] if limits.run_s is not None else []) \
            + (["--shapes", ",".join(problem.label for problem in requested)] if requested else []) \
            + consent_flags()
        raise RunInterrupted(f"interrupted: {len(keys)} of {len(planned)} variants are recorded in {out} (partial "
                             f"reports written); resume with: {shlex.join(words)}") from None
    finally:
        evaluator.builder.close()
    try:
        document = write_reports(store, keys, references, lowering=low.name, capabilities=low.capabilities_name,
                                 command=command, lowering_note=low.note, started_at=started_at, device_peak=peak)
        write_run_page(out)
    finally:
        store.close()
    sources = load_sources([out])
    headlines = best_overall(groups(sources))
    for headline in headlines:
        say(headline.text)
    say(f"wrote {out / 'results.json'}, {out / 'results.csv'}, {out / 'report.md'}, {out / 'report.html'}")
    return RunResult(out, [v for s in sources for v in s.variants], headlines, document)


REPORT_FILES = ("results.json", "results.csv", "report.md", "report.html")


def _set_aside_foreign_reports(out: Path, config) -> list[str]:
    """Move aside reports in ``out`` that this run would replace but that are not an earlier run of the same
    config (another config's results, or a user's own files of those names); one line per file moved."""
    present = [out / name for name in REPORT_FILES if os.path.lexists(out / name)]
    if not present:
        return []
    why = None
    if not (out / "results.jsonl").exists():
        why = "no results journal beside them: not an xegemm run"
    elif os.path.lexists(out / "results.json"):
        try:
            previous = json.loads(read_text(out / "results.json", RESULTS_BYTES, "results file"))
            name = (previous.get("config") or {}).get("name") if isinstance(previous, dict) else None
            if name != config.name:
                why = f"the results of config '{name}', not '{config.name}'"
        except (XegemmError, ValueError) as exc:
            why = f"results.json is not xegemm's results ({str(exc)[:80]})"
    if why is None:
        return []
    return [f"{path} moved to {set_aside(path)} ({why}); this run writes its own" for path in present]


# ---- build (ahead of time) -------------------------------------------------------------------------------

def build_config(config_path, target: str = "pvc", grf: int | None = None, out_dir=None,
                 capabilities_name: str | None = None, progress=None, lowering: str = "native",
                 compiler: str | None = None, command: str | None = None) -> dict:
    """Compile every variant of a config for ``target`` with ocloc (``compiler``: ``system``, ``current``, a path;
    None: the first that knows the target); write ``build.json`` (and per-variant artefacts).  A variant is ``ok``
    when its machine code issues exactly the predicted dpas and block loads per k-step; every other figure
    (stores, prefetches, GRF mode, spills, instructions) is in its ``gates`` and printed to ``progress``.
    ``lowering`` coopmat: the SPIR-V kernels in the GPU's tiles, built by the current compiler
    (xegemm.evaluate.aot.AotBuilder)."""
    if lowering == "coopmat":      # the current compiler where installed, else the system one; its dialect probed
        require_ocloc()
        compiler = compiler or ("current" if find_ocloc("current") else "system")
        record = compiler_record(target, compiler)
    else:
        aot_target(target, compiler)      # a target this compiler cannot build: one line naming what to install
        record = compiler_record(target, compiler)
    started_at = time.time()
    config = load_config(config_path)
    low = Lowering("coopmat").for_xe(coopmat_dialect(target, compiler)) if lowering == "coopmat" else named_lowering("native", capabilities_name,
                                                                                      target, record["name"])
    # the header of the build's reports: what compiled (the compiler beside the Python packages), when, how
    header = {"versions": {**versions(), "compiler": record["describe"]}, "command": command,
              "started_at": utc(started_at), "lowering": low.name,
              **({"dialect": low.dialect} if lowering == "coopmat" else {})}
    out = Path(out_dir or Path("runs") / f"build-{config.name}-{target}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    planned = plan_variants(config, low)
    evaluator = aot_evaluator(low, target, out, grf, compiler=record["name"],
                              observers=(ProgressObserver(progress, len(planned)), IsaConsoleObserver(progress)))
    head = {"config": config.name, "target": target, "compiler": record, "capabilities": low.capabilities_name,
            **header}
    entries = []
    try:
        for pv in planned:
            entries.append(_build_entry(evaluator.evaluate(pv), pv, target, grf, low))
    except KeyboardInterrupt:
        with shielded():
            write_json_atomic(out / "build.json", {**head, "written_at": utc(time.time()), "variants": entries,
                                                   "interrupted": True})
        raise RunInterrupted(f"interrupted: {len(entries)} of {len(planned)} variants built; {out / 'build.json'} "
                             f"lists them (marked interrupted); build again with: "
                             + shlex.join(["xegemm", "build", str(config_path), "--target", target, "--out", str(out)]
                                          + (["--compiler", compiler] if compiler else [])
                                          + (["--grf", str(grf)] if grf else [])
                                          + (["--capabilities", capabilities_name] if capabilities_name else []))) \
            from None
    result = {**head, "written_at": utc(time.time()), "variants": entries}
    write_json_atomic(out / "build.json", result)
    write_report([out], out / "report.html", command=command)
    write_report([out], out / "report.md", fmt="md", command=command)
    return result


def _build_entry(ev: Evaluation, pv: PlannedVariant, target: str, grf: int | None, low: Lowering) -> dict:
    return {"name": ev.name, "status": ev.status, "reason": ev.reason, "params": ev.params, "plan": ev.plan,
            "target": target, "grf": ev.extra.get("grf", grf or pv.config.target.grf),
            "capabilities": low.capabilities_name, "compiler": ev.extra.get("compiler"),
            "isa": ev.extra.get("isa"), "predicted": ev.extra.get("predicted"),
            "measured_messages": ev.extra.get("measured_messages"), "gates": ev.extra.get("gates"),
            "source_sha256": ev.source_sha256,
            "artefacts": ev.extra.get("artefacts"), "log": ev.log}
