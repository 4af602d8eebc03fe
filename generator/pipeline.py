"""The jobs, end to end: ``generate`` (sources), ``run`` (a device: build, verify, time, report) and
``build_config`` (ahead of time for a real Xe target).

Each job plans a config's variants (:func:`xegemm.evaluate.plan_variants`) and hands them to an
:class:`xegemm.evaluate.Evaluator`; a variant that is rejected, fails to build or fails verification is
recorded with its reason (and build log) and the sweep goes on; only verified variants are timed.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from xegemm.aot.toolchain import require_ocloc
from xegemm.config import load_config
from xegemm.evaluate import (
    STATUSES,
    Evaluation,
    Evaluator,
    PlannedVariant,
    ProgressObserver,
    SourceWriter,
    params_of,
    plan_variants,
    render_variant,
)
from xegemm.evaluate.aot import aot_evaluator
from xegemm.evaluate.device import DeviceSession, device_evaluator
from xegemm.lowering import Lowering, choose_lowering, named_lowering
from xegemm.profile import time_numpy_reference
from xegemm.report import ResultStore, write_json_atomic, write_reports
from xegemm.runtime import describe, select_sycl_device

__all__ = ["STATUSES", "DeviceSession", "Evaluation", "PlannedVariant", "build_config", "choose_lowering",
           "generate", "plan_variants", "render_variant", "run", "run_variant"]


def _jsonable(value):
    return json.loads(json.dumps(value, default=list))


# ---- generate ------------------------------------------------------------------------------------------

def generate(config_path: str | Path, out_dir: str | Path, lowering: str = "portable",
             capabilities_name: str | None = None) -> dict:
    """Write ``<name>.cl`` for every planned variant and a ``manifest.json``; return the manifest."""
    config = load_config(config_path)
    low = named_lowering(lowering, capabilities_name)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    evaluator = Evaluator(low, SourceWriter(out))
    entries = []
    for pv in plan_variants(config):
        ev = evaluator.evaluate(pv)
        entry = {"name": pv.name, "status": ev.status, "reason": ev.reason,
                 "overrides": _jsonable(pv.variant.overrides), "params": params_of(pv.config)}
        if ev.status == "generated":
            entry.update(path=ev.extra["path"], sha256=ev.source_sha256, plan=ev.plan)
        entries.append(entry)
    manifest = {"config": config.name, "lowering": low.name, "capabilities": low.capabilities_name,
                "kernels": entries}
    manifest_path = out / "manifest.json"
    existing = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    configs = existing.get("configs", {}) if isinstance(existing, dict) else {}
    configs[config.name] = manifest
    write_json_atomic(manifest_path, {"generated_by": "xegemm generate", "configs": dict(sorted(configs.items()))})
    return manifest


# ---- run -----------------------------------------------------------------------------------------------

def run_variant(pv: PlannedVariant, session: DeviceSession, lowering: Lowering = Lowering("portable"),
                log_dir: Path | None = None, timer=None) -> Evaluation:
    """Build, verify and (if verified) time one variant on the session's device (for notebooks and benches)."""
    return device_evaluator(session, lowering, log_dir=log_dir, timer=timer).evaluate(pv)


def run(config_path: str | Path, device: str | None = None, out_dir: str | Path | None = None,
        lowering: str | None = None, progress=sys.stderr, reference_repeats: int = 5) -> dict:
    """Run a config end to end on a device and write results.json, results.csv and report.md into out_dir.

    If ``out_dir`` already holds results of the same kernels (same source, lowering and compiler capabilities)
    on the same problem and device (an interrupted sweep), those are kept and only the rest are run; the
    reports show exactly this run's variants.
    """
    config = load_config(config_path)
    sycl_device = select_sycl_device(device)
    info = describe(sycl_device)
    low = choose_lowering(info, lowering)
    out = Path(out_dir) if out_dir else Path("runs") / time.strftime("%Y%m%d-%H%M%S")
    store = ResultStore(out, config=config, device=info)
    planned = plan_variants(config)
    progress_observer = ProgressObserver(progress, len(planned))
    evaluator = device_evaluator(DeviceSession(sycl_device), low, log_dir=out / "logs",
                                 observers=(progress_observer,))
    if progress:
        print(f"xegemm run {config.source}: {len(planned)} variants on {info.filter_string} ({info.name}), "
              f"lowering {low.name}, results in {out}", file=progress, flush=True)
    keys = []
    for pv in planned:
        source = evaluator.source(pv)          # rendered once: the resume key, then the build
        key = store.key(pv.name, pv.config, low.name, low.capabilities_name,
                        Evaluation.digest(source) if source is not None else None)
        keys.append(key)
        done = store.get(key)
        if done is not None:
            progress_observer.done += 1
            if progress:
                print(f"[{progress_observer.done}/{len(planned)}] {pv.name}: {done['status']} (recorded earlier, "
                      "kept)", file=progress, flush=True)
            continue
        store.add(key, evaluator.evaluate(pv, source).as_dict())
    problems = {(pv.config.problem.m, pv.config.problem.n, pv.config.problem.k, pv.config.problem.batch)
                for pv in planned if pv.plan is not None} or {(config.problem.m, config.problem.n, config.problem.k,
                                                               config.problem.batch)}
    references = {shape: time_numpy_reference(*shape, repeats=reference_repeats) for shape in sorted(problems)}
    results = write_reports(store, keys, references, lowering=low.name, capabilities=low.capabilities_name)
    if progress:
        print(f"wrote {out / 'results.json'}, {out / 'results.csv'}, {out / 'report.md'}", file=progress, flush=True)
    return results


# ---- build (ahead of time) -------------------------------------------------------------------------------

def build_config(config_path, target: str = "pvc", grf: int | None = None, out_dir=None,
                 capabilities_name: str | None = None, progress=None) -> dict:
    """Compile every variant of a config for ``target`` with ocloc; write ``build.json`` (and per-variant
    artefacts).  A variant is ``ok`` when its machine code issues exactly the predicted dpas and block loads
    per k-step; stores and prefetches are reported beside their predictions, spills in the reason."""
    require_ocloc()
    config = load_config(config_path)
    low = named_lowering("native", capabilities_name, target)
    out = Path(out_dir or Path("runs") / f"build-{config.name}-{target}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    planned = plan_variants(config)
    evaluator = aot_evaluator(low, target, out, grf, observers=(ProgressObserver(progress, len(planned)),))
    entries = []
    for pv in planned:
        ev = evaluator.evaluate(pv)
        entries.append({"name": ev.name, "status": ev.status, "reason": ev.reason, "target": target,
                        "grf": ev.extra.get("grf", grf or pv.config.target.grf), "capabilities": low.capabilities_name,
                        "isa": ev.extra.get("isa"), "predicted": ev.extra.get("predicted"),
                        "measured_messages": ev.extra.get("measured_messages"), "source_sha256": ev.source_sha256,
                        "artefacts": ev.extra.get("artefacts"), "log": ev.log})
    result = {"config": config.name, "target": target, "capabilities": low.capabilities_name, "variants": entries}
    write_json_atomic(out / "build.json", result)
    return result
