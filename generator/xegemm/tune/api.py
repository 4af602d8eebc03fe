"""``xegemm.tune.tune``: tune a config over shapes with a search strategy into a persistent study, then export.

    result = xegemm.tune.tune("bench/tune_demo.yaml", shapes="256x256x256", strategy="tpe", budget=20,
                              seed=1, out="runs/tune")
    result.best["256x256x256"]["best"]["gflops"], result.studies["256x256x256"].best_trial

Rerunning into the same study (same ``out``, or the same ``storage`` and ``study``) resumes it: points already
evaluated are kept, interrupted ones are retried, and the budget is completed.
"""

from __future__ import annotations

import hashlib
import sys
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import optuna
from optuna.exceptions import StorageInternalError
from sqlalchemy.exc import SQLAlchemyError
from tqdm import tqdm

from xegemm.aot.toolchain import compiler_record
from xegemm.config import load_config
from xegemm.errors import XegemmError
from xegemm.evaluate.aot import AotBuilder
from xegemm.lowering import Lowering, choose_lowering, named_lowering
from xegemm.evaluate.peak import ceiling_gflops, plausible_ceiling
from xegemm.jobs.pipeline import RunInterrupted, shielded
from xegemm.evaluate.grouped import GroupedNumpyReference
from xegemm.grouped.problem import GroupedProblem
from xegemm.evaluate.timing import current_pace, time_numpy_reference, time_reference
from xegemm.files import write_json_atomic
from xegemm.results.journal import writable_dir
from xegemm.runtime import describe, select_sycl_device
from xegemm.runtime.devices import DeviceInfo
from xegemm.tune.cache import MeasurementCache, default_cache_path
from xegemm.tune.export import META, PARAMETERS, export, owned_trials, trial_result, study_space as _study_space
from xegemm.tune.leaders import ATTR as LEADERS_ATTR, Leader, not_retimed, retime
from xegemm.tune.model import Machine
from xegemm.library.parts import Confidence, StudyInfo
from xegemm.library.record import DeviceRecord
from xegemm.tune.objective import AotObjective, DeviceObjective
from xegemm.tune.options import JOBS_PER_CPU, TuneOptions, check_jobs, max_jobs, usable_cpus  # noqa: F401 (re-exported)
from xegemm.tune.runner import ShapeRun, Tally
from xegemm.config.shapes import Shape, config_shapes, grouped_shape, parse_shapes
from xegemm.tune.space import TuneSpace
from xegemm.tune.strategies import get_strategy
from xegemm.tune.study import (
    ClaimBook,
    StorageError,
    default_url,
    definition_changes,
    describe_failure,
    mask_url,
    open_storage,
    space_changes,
    study_definition,
    study_name,
)
from xegemm.verify.dense import check_fits

optuna.logging.set_verbosity(optuna.logging.WARNING)
# heartbeats (stale-trial detection) are "experimental" in Optuna and assume study.optimize; the tuner sends
# them itself (xegemm.tune.runner)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")


@dataclass
class TuneResult:
    """What :func:`tune` returns: the per-shape Optuna studies, best.json's content, the output directory."""

    studies: dict[str, optuna.Study]
    best: dict
    out: Path
    storage: str
    tallies: dict[str, Tally]


def _shapes(config, shapes) -> list[Shape]:
    if shapes is None:
        return config_shapes(config)
    if isinstance(shapes, str):
        # a grouped problem is a Shape holding its groups: its study's objective is the whole grouped launch
        return [s if isinstance(s, Shape) else grouped_shape(s) for s in parse_shapes(shapes)]
    return [s if isinstance(s, Shape) else Shape(*s) for s in shapes]


# percent, a bar of fixed width, count, time and ETA first; the shape and the details last, where a narrow
# terminal cuts the line (a bar sized to the rest of the line shrank to one character behind a long postfix)
BAR_FORMAT = "{percentage:3.0f}%|{bar:16}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}] {desc}{postfix}"


def _progress(total: int, initial: int, enabled: bool | None):
    """A tqdm bar on stderr: points evaluated / the budget (the total is fixed from the start: pruned points
    cost no budget and are counted apart), ETA from this run's pace, best and failures; off when stderr is not
    a terminal.  ``initial``: points a previous run of the study already evaluated (a resume)."""
    return tqdm(total=total, initial=initial, unit="trial", file=sys.stderr,
                disable=(None if enabled is None else not enabled), dynamic_ncols=True, smoothing=0.1,
                bar_format=BAR_FORMAT)


def tune(config_path, shapes=None, options: TuneOptions | None = None, **kwargs) -> TuneResult:
    """Tune ``config_path`` (its sweep and constraints) for each shape; see the module docstring.

    ``options``: a :class:`xegemm.tune.options.TuneOptions` (every option, its default and its meaning);
    keyword arguments change its fields (``tune(cfg, shapes=..., strategy="tpe", budget=20)``), and
    ``limits=TimeLimits(...)`` sets both time limits.  In short: ``strategy`` a name in
    :data:`xegemm.tune.strategies.STRATEGIES`; ``budget`` evaluated points per shape (pruned points are free);
    ``time_s`` stop starting trials after this many seconds; ``jobs`` worker processes building side by side
    (timing stays serial); ``storage`` an SQLAlchemy URL (default an SQLite file in ``out``); ``target`` a GPU of
    the target registry (pvc, bmg, lnl, ptl, dg2) scores ahead-of-time builds instead of timing on a device,
    built by ``compiler`` (``system``, ``current``, a path; None: the first that knows the target); ``cache`` the
    measurement cache file (False: none); ``retime`` ignore cache hits; ``command`` the command line that started
    it; ``leaders`` how many of the best candidates of a device study are timed again before a winner is named
    (:mod:`xegemm.tune.leaders`; 0 or 1: none), ``leader_time_s`` the time budget of that re-timing per shape."""
    opts = TuneOptions.of(options, **kwargs)
    opts.check()
    current_pace()                  # a malformed XEGEMM_PACE: one clear error before any work
    config = load_config(config_path)
    chosen = get_strategy(opts.strategy)
    target, jobs, cache = opts.target, opts.jobs, opts.cache
    shape_list = _shapes(config, shapes)
    out_dir = writable_dir(Path(opts.out) if opts.out else Path("runs") / f"tune-{time.strftime('%Y%m%d-%H%M%S')}")
    url = opts.storage or default_url(out_dir)
    resume = opts.resume_command(config_path, shape_list, out_dir)
    name = opts.study or config.name
    if target is not None:
        builder = AotBuilder(target, out_dir / "aot", compiler=opts.compiler)   # a target it cannot build: one line
        record = compiler_record(target, builder.compiler)                       # not installed: how to install it
        lowering = named_lowering("native", opts.capabilities, target, builder.compiler)
        admit = builder.admit
        machine = Machine.of_target(target)
        measured_on = {"target": target, "objective": "aot score", "compiler": record}
        info, ceiling = None, None
    else:
        info = describe(select_sycl_device(opts.device))
        too_big = sorted({why for shape in shape_list
                          if (why := check_fits(config.with_overrides(shape.overrides()), info.global_mem_bytes))})
        if too_big:
            raise XegemmError("; ".join(too_big))
        lowering = choose_lowering(info)
        admit = None
        machine = Machine.of_device(info)
        ceiling = ceiling_gflops(info.compute_units)
        # the device record results.json has too (xegemm.library.record.DeviceRecord reads both)
        measured_on = {"device": info.as_dict(), "objective": "GFLOP/s"}
    rdb = open_storage(url, opts.heartbeat_s)
    # a study made before a section axis became one parameter per field keeps its own parameters
    older = _older_studies(rdb, name, shape_list)
    spaces = [TuneSpace(config, shape, lowering, admit, fields=shape.label not in older) for shape in shape_list]
    if info is not None:
        measured_on["device"] = compact_device(info, out_dir)
    # capabilities: the set the kernels were spelled for; capabilities_named: how to get it again for the
    # export (None = probe the installed ocloc again, as the tuning run did)
    common = StudyInfo(config=config.to_dict(), strategy=opts.strategy, command=opts.command, **measured_on,
                       lowering=lowering.name, capabilities=lowering.capabilities_name,
                       capabilities_named=opts.capabilities)
    _check_resumable(rdb, name, common, shape_list, spaces, url)
    measurements = None if cache is False else MeasurementCache(cache or default_cache_path(),
                                                                ceiling_gflops=ceiling)
    if target is not None:
        objectives = [AotObjective(target, lowering, out_dir / "aot", measurements, opts.retime, builder.compiler)
                      for _ in range(jobs)]
    else:
        spirv = any(Lowering(name).source_kind == "spirv" for name in config.values_of("target.lowering"))
        objectives = [DeviceObjective(info, lowering, out_dir / "logs", opts.limits, measurements, opts.retime, spirv)
                      for _ in range(jobs)]
    if measurements is not None and target is None and not opts.retime and measurements.holds_timings():
        # a cached timing above what this device can do is refused: its measured peak, once per tune
        measurements.limit_to_peak(*plausible_ceiling(objectives[0].evaluator.builder.measure_peak(),
                                                      info.compute_units))
    deadline = time.monotonic() + opts.time_s if opts.time_s else None
    studies, tallies = {}, {}
    planned = [min(opts.budget, space.size) if opts.budget else space.size for space in spaces]
    books = [ClaimBook(rdb, study_name(name, shape)) for shape in shape_list]
    bar = _progress(sum(planned), sum(min(n, book.evaluated()) for n, book in zip(planned, books)), opts.progress)
    try:
        for shape, space, book, plan in zip(shape_list, spaces, books, planned):
            sname = study_name(name, shape)
            bar.set_description(shape.label)
            s = optuna.create_study(storage=rdb, study_name=sname, direction="maximize",
                                    sampler=chosen.sampler(space, opts.seed), load_if_exists=True)
            meta = replace(common, shape=shape.as_dict(), parameters=None if shape.label in older else PARAMETERS)
            # optuna-dashboard names the objective's axis by the study's metric name
            s.set_metric_names([common.objective])
            old = StudyInfo.from_dict(s.user_attrs.get(META))
            if target is None and (old is None or old.reference is None):
                meta = replace(meta, reference=(
                    time_reference(GroupedNumpyReference(GroupedProblem.of(shape.groups))) if shape.groups
                    else time_numpy_reference(shape.m, shape.n, shape.k, shape.batch)))
            elif old is not None:
                meta = replace(meta, reference=old.reference)
            s.set_user_attr(META, meta.to_dict())
            # what a person reads in optuna-dashboard's study table (it cuts every attribute at 1024
            # characters, so the whole record above is only for xegemm)
            for key, value in summary_attrs(meta).items():
                s.set_user_attr(key, value)
            run = ShapeRun(s, rdb, space, book, chosen, opts, deadline, machine,
                           lambda summary: _advance(bar, tallies, summary))
            tallies[shape.label] = run.tally
            run.run(objectives)
            if target is None:
                retime_leaders(s, rdb, space, objectives[0], opts.leaders, opts.leader_time_s)
            studies[shape.label] = s
            unused = plan - min(plan, book.evaluated())
            if unused and run.done():     # the space ran out first (its pruned points): the total shrinks
                bar.total -= unused
                bar.refresh()
        _close(bar, objectives, measurements)
        best = export(rdb, name, out_dir)
    except KeyboardInterrupt:
        # at any moment (a build, a timing, the leaders' re-timing, the export's writing): the workers are
        # stopped, what the study holds is exported again (every file is written atomically) with a second
        # Ctrl-C ignored, and the message says what was kept and how to resume
        with shielded():
            _close(bar, objectives, measurements)
            kept = _export_interrupted(rdb, name, out_dir)
        raise RunInterrupted(f"interrupted: every finished trial is in the study at {mask_url(url)}; {kept}; the "
                             f"interrupted trials are retried on resume: {resume}") from None
    except (StorageInternalError, SQLAlchemyError) as exc:
        _close(bar, objectives, measurements)
        raise StorageError(f"the study database {mask_url(url)} failed: {describe_failure(exc, url)}; every "
                           f"finished trial is kept; when it is back, resume with: {resume}") from None
    except BaseException:
        _close(bar, objectives, measurements)
        raise
    return TuneResult(studies, best, out_dir, mask_url(url), tallies)


def _older_studies(rdb, name: str, shapes: list[Shape]) -> set[str]:
    """The shapes whose study exists and was made before the field split (its metadata has no
    ``parameters``)."""
    existing = set(optuna.study.get_all_study_names(rdb))
    older = set()
    for shape in shapes:
        sname = study_name(name, shape)
        if sname in existing:
            meta = StudyInfo.from_dict(optuna.load_study(study_name=sname, storage=rdb).user_attrs.get(META))
            if meta is not None and meta.parameters != PARAMETERS:
                older.add(shape.label)
    return older


def summary_attrs(meta: StudyInfo) -> dict[str, str]:
    """A study's short user attributes: shape, objective, strategy, lowering, and device or target."""
    device = DeviceRecord.from_dict(meta.device)
    return {"shape": Shape(**meta.shape).label, "objective": meta.objective, "strategy": meta.strategy,
            "lowering": meta.lowering, "measured on": meta.target or (device and device.name) or "unknown"}


def compact_device(info: DeviceInfo, out_dir: Path) -> dict:
    """The device record a study keeps (``info.as_dict()``): its extension list (dozens of names, repeated in
    every shape's study) replaced by a hash, the list itself in ``OUT/device-<hash>.json`` (written atomically;
    the same list gives the same file)."""
    extensions = list(info.extensions or [])
    digest = hashlib.sha256("\n".join(extensions).encode()).hexdigest()[:16]
    path = out_dir / f"device-{digest}.json"
    if not path.exists():
        write_json_atomic(path, {"name": info.name, "driver": info.driver_version, "extensions": extensions})
    compact = {k: v for k, v in info.as_dict().items() if k != "extensions"}
    compact.update(extensions_sha256=digest, extensions_count=len(extensions), extensions_file=path.name)
    return compact


def retime_leaders(study: optuna.Study, rdb, space: TuneSpace, objective: DeviceObjective, count: int,
                   budget_s: float) -> dict:
    """Time the ``count`` best passing trials of ``study`` again (:func:`xegemm.tune.leaders.retime`, each
    re-timing a full evaluation by ``objective``'s worker, never from the cache, interleaved with numpy) and keep
    the verdict in the study (:data:`xegemm.tune.leaders.ATTR`), where the export reads it."""
    meta = StudyInfo.from_dict(study.user_attrs.get(META)) or StudyInfo()
    trials = owned_trials(study, rdb)
    results = {t.number: r for t in trials if (r := trial_result(t, meta)) is not None}
    passing = sorted((t for t in trials if t.state == optuna.trial.TrialState.COMPLETE and t.number in results
                      and results[t.number].status == "ok"), key=lambda t: (-t.value, t.number))
    old = Confidence.from_dict(study.user_attrs.get(LEADERS_ATTR))
    if old is not None and old.retimed and old.current(len(passing)):
        return old.to_dict()                        # nothing new since the last re-timing (a resume of a finished study)
    if count < 2 or len(passing) < 2:
        record = not_retimed("only one candidate passed" if len(passing) == 1 else
                             "no candidate passed" if not passing else f"--leaders {count}: re-timing is off",
                             len(passing))
        study.set_user_attr(LEADERS_ATTR, record)
        return record
    by_trial = {t.number: t for t in passing}
    chosen = [Leader(t.number, results[t.number].name, t.value, results[t.number].vs_numpy or _ratio(results[t.number]))
              for t in passing[:count]]

    def measure(leader: Leader) -> tuple[float, float, float | None]:
        candidate = space.candidate(by_trial[leader.trial].params)
        result = objective.evaluator.evaluate(candidate.planned, candidate.source)
        ratio = _ratio(result)
        if result.status != "ok" or ratio is None:
            return 0.0, 0.0, None
        ref_cv = result.reference.cv if result.reference else None
        return ratio, float(result.gflops), max(x for x in (result.cv, ref_cv, 0.0) if x is not None)

    verdict = retime(chosen, measure, budget_s)
    verdict.complete_trials = len(passing)
    record = verdict.as_dict()
    study.set_user_attr(LEADERS_ATTR, record)
    return record


def _ratio(result) -> float | None:
    """A result's GFLOP/s over the numpy run timed interleaved with it."""
    ref = result.reference
    return result.gflops / ref.gflops if result.gflops and ref and ref.gflops else None


def _export_interrupted(rdb, name: str, out_dir: Path) -> str:
    """Export what an interrupted tune's study holds; what was written (or why nothing), in words."""
    try:
        best = export(rdb, name, out_dir)
    except XegemmError as exc:            # interrupted before the first study was made
        return f"nothing to export yet ({exc})"
    except (StorageInternalError, SQLAlchemyError) as exc:
        return f"the export failed: {describe_failure(exc, '')}"
    found = [f"{label}: {entry['best']['gflops']:.4g} GFLOP/s ({entry['best']['kernel']})"
             if entry["best"] and entry["best"]["gflops"] else f"{label}: no kernel passed yet"
             for label, entry in best["shapes"].items()]
    return (f"the best so far ({'; '.join(found)}) and the report are in {out_dir} (best.json, best.yaml, "
            "trials.json, trials.csv, report.html)")


def _close(bar, objectives, measurements) -> None:
    """Close the bar, the objectives' workers and the cache (a second call: a no-op)."""
    bar.close()
    for objective in objectives:
        objective.close()
    if measurements is not None and not getattr(measurements, "_xegemm_closed", False):
        measurements.close()
        measurements._xegemm_closed = True


def _check_resumable(rdb, name: str, common: StudyInfo, shapes: list[Shape], spaces: list[TuneSpace],
                     url: str) -> None:
    """Refuse, before any trial starts, to add to a study that another problem or another space made."""
    existing = set(optuna.study.get_all_study_names(rdb))
    for shape, space in zip(shapes, spaces):
        sname = study_name(name, shape)
        if sname not in existing:
            continue
        old = StudyInfo.from_dict(optuna.load_study(study_name=sname, storage=rdb).user_attrs.get(META))
        if old is None:
            continue
        new = replace(common, shape=shape.as_dict())
        changes = definition_changes(study_definition(old), study_definition(new))
        if not changes:
            changes = space_changes(_study_space(old).grid(), space.grid())
            what = "another search space"
        else:
            what = "another problem"
        if changes:
            raise XegemmError(f"the study '{sname}' in {mask_url(url)} was made for {what}: "
                              + "; ".join(changes[:6]) + ("; ..." if len(changes) > 6 else "")
                              + ". Resume it with the config it was made with, or start a new study with "
                                "--study NAME or another --out")


def _advance(bar, tallies: dict[str, Tally], summary: dict) -> None:
    """One trial finished: an evaluated point moves the bar, a pruned one only its count; show the best so far
    (the objective's value: GFLOP/s, or the static score with --target), pruned, failed and cached counts."""
    if summary["status"] != "rejected":
        bar.update(1)
    best = max((t.best for t in tallies.values() if t.best), default=None)
    counts = {"pruned": sum(t.pruned for t in tallies.values()), "failed": sum(t.failed for t in tallies.values()),
              "cached": sum(t.cached for t in tallies.values())}
    shown = [f"best {best[0]:.4g}"] if best else []
    shown += [f"{n} {what}" for what, n in counts.items() if n]
    bar.set_postfix_str(", ".join(shown), refresh=True)
