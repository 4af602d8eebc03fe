"""Export a study from its database alone: ``best.yaml``, ``best.json``, ``trials.csv`` and the winners' kernels.

- ``best.yaml``: a config ``xegemm run`` runs as it is.  One shape: the config with that problem and the
  winning parameters, no sweep.  Several shapes: a sweep over the problems and the winners' values, with one
  constraint per shape that pairs it with its winner (every other combination is ``rejected`` by it, so
  exactly one variant per shape is built).
- ``best.json``: per shape the winning parameters, kernel, GFLOP/s (or score), time statistics, and the
  ratio to the numpy reference measured in the same tuning run.
- ``trials.csv``: every trial that owns a point (pruned and failed ones too): its shape, point and value, then
  the result's columns as results.csv has them (status, reason, times, GFLOP/s, whether it came from the
  cache, every parameter).
- ``kernels/<name>.cl``: the winners, rendered again from the config in the database.
- ``trials.json`` and ``report.html``: every trial as a result row like ``run``'s (with its trial number, when it
  finished and the strategy), which ``xegemm report`` reads, and the report page made from it.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import optuna
import yaml
from optuna.trial import TrialState

from xegemm.config import Config, config_from_text
from xegemm.config.schema import plain_data
from xegemm.errors import XegemmError
from xegemm.evaluate import plan_variant, render_variant
from xegemm.lowering import Lowering, named_lowering
from xegemm.files import RESULTS_BYTES, read_text, set_aside, write_json_atomic, write_text_atomic
from xegemm.reporting import write_report
from xegemm.reporting.formats import results_csv
from xegemm.reporting.results import problem_references, set_ratios, utc, versions
from xegemm.library.parts import Confidence, Reference, StudyInfo, TrialInfo, Winner
from xegemm.library.record import Evaluation
from xegemm.config.shapes import Shape, is_problem_axis
from xegemm.tune import leaders
from xegemm.tune.space import TuneSpace
from xegemm.tune.study import ClaimBook

META = "xegemm"     # the study user attribute holding the config, shape, lowering, device, command and reference
# META["parameters"]: how a study's Optuna parameters spell its sweep; absent in studies made before a section
# axis became one parameter per field (xegemm.tune.space), which are read as they were made
PARAMETERS = "fields"


def shape_studies(storage, name: str) -> list[optuna.Study]:
    """The per-shape studies of study ``name`` in ``storage``, by shape."""
    names = sorted(n for n in optuna.study.get_all_study_names(storage) if n.startswith(f"{name}@"))
    if not names:
        raise XegemmError(f"the storage holds no study named '{name}'")
    studies = [optuna.load_study(study_name=n, storage=storage) for n in names]
    return sorted(studies, key=lambda s: Shape(**study_info(s).shape))


def study_info(study: optuna.Study) -> StudyInfo:
    """A study's metadata (its :data:`META` user attribute); an error for a study xegemm did not make."""
    info = StudyInfo.from_dict(study.user_attrs.get(META))
    if info is None or not info.shape:
        raise XegemmError(f"the study '{study.study_name}' was not made by xegemm tune (it has no '{META}' "
                          "attribute with a shape)")
    return info


def owned_trials(study: optuna.Study, storage) -> list[optuna.trial.FrozenTrial]:
    """The trials that own a point (one per claimed point; duplicates left out), finished ones only."""
    trials = study.get_trials(deepcopy=False)
    owners = sorted(ClaimBook(storage, study.study_name).claims().values())
    return [trials[n] for n in owners if trials[n].state in (TrialState.COMPLETE, TrialState.PRUNED)]


def trial_result(trial: optuna.trial.FrozenTrial, meta: StudyInfo) -> Evaluation | None:
    """A finished trial's result, read back through :meth:`xegemm.library.record.Evaluation.from_user_attrs`, with its
    trial number, finish time and strategy (and an ahead-of-time study's score); None when it holds no result."""
    try:
        result = Evaluation.from_user_attrs(trial.user_attrs)
    except ValueError:
        return None
    done = trial.datetime_complete
    result.trial, result.finished_at = trial.number, done.timestamp() if done else None
    result.strategy, result.score = meta.strategy, trial.value if meta.target else None
    return result


def best_trial(trials: list[optuna.trial.FrozenTrial], results: dict[int, Evaluation]
               ) -> optuna.trial.FrozenTrial | None:
    """The complete trial with the highest value among those whose result is ``ok`` (the earliest of a tie)."""
    ok = [t for t in trials if t.state == TrialState.COMPLETE and t.number in results
          and results[t.number].status == "ok"]
    return max(ok, key=lambda t: (t.value, -t.number)) if ok else None


def study_config(meta: StudyInfo) -> Config:
    return config_from_text(yaml.safe_dump(meta.config, sort_keys=False), source="<study>")


def study_space(meta: StudyInfo) -> TuneSpace:
    """The tuning space a study's trials were drawn from (from its metadata)."""
    return TuneSpace(study_config(meta), Shape(**meta.shape), Lowering(meta.lowering),
                     fields=meta.parameters == PARAMETERS)


def _winner(meta: StudyInfo, trial: optuna.trial.FrozenTrial) -> tuple[dict, dict]:
    """A winner as sweep axes (``problem`` and the config's axes: section choices stay whole) and as the
    dotted keys they set (for the constraint that pairs the shape with its winner)."""
    space, shape = study_space(meta), Shape(**meta.shape)
    point = space.point(trial.params)
    return {"problem": shape.as_dict(), **point}, {**shape.overrides(), **space.search.overrides(point)}


def _condition(overrides: dict) -> str:
    terms = []
    for key, value in overrides.items():
        if isinstance(value, (list, tuple)):
            terms += [f"{key}[{i}] == {item!r}" for i, item in enumerate(value)]
        else:
            terms.append(f"{key} == {value!r}")
    return " and ".join(terms)


def best_config(config: Config, winners: list[tuple[dict, dict]]) -> dict:
    """The config (as YAML data) that runs exactly each shape's winner (see the module docstring)."""
    base = replace(config, sweep={}, constraints=())
    name = f"{config.name}_best"
    if len(winners) == 1:
        data = base.with_overrides(winners[0][1]).to_dict()
        data.update(name=name, description=f"xegemm tune: the best of {config.name}", sweep={}, constraints=[])
        return data
    sweep: dict[str, list] = {}
    for axes, _ in winners:
        for axis, choice in axes.items():
            values = sweep.setdefault(axis, [])
            if plain_data(choice) not in values:
                values.append(plain_data(choice))
    constraints = []
    for _, leaves in winners:
        problem = {k: v for k, v in leaves.items() if is_problem_axis(k)}
        rest = {k: v for k, v in leaves.items() if not is_problem_axis(k)}
        constraints.append(f"not ({_condition(problem)}) or ({_condition(rest)})")
    data = base.to_dict()
    data.update(name=name, description=f"xegemm tune: the best of {config.name}, one variant per shape",
                sweep=sweep, constraints=constraints)
    return data


def _leading(trial: optuna.trial.FrozenTrial, axes: list[str]) -> dict:
    """trials.csv's columns before the result's: the shape, the point's axes, the trial's value, who ran it."""
    a = TrialInfo.from_attrs(trial.user_attrs)
    return {"shape": a.shape, **{axis: trial.params.get(axis) for axis in axes}, "value": trial.value,
            "retry_of": a.retry_of, "worker": a.worker}


def _trials_document(name: str, metas: list[StudyInfo], variants: list[Evaluation], references: list[dict],
                     named: list[Winner]) -> dict:
    """trials.json: the study's trials in the shape of ``run``'s results.json (what ``xegemm report`` reads)."""
    meta = metas[0] if metas else StudyInfo()
    starts = [v.finished_at for v in variants if v.finished_at]
    config = meta.config_info
    return {"kind": "tune", "study": name, "strategy": meta.strategy, "objective": meta.objective,
            "config": {"name": config.name, "source": f"study {name}", "description": config.description},
            "device": meta.device, "command": meta.command,
            "target": meta.target, "lowering": meta.lowering,
            "compiler_capabilities": meta.capabilities, "versions": versions(),
            "started_at": utc(min(starts)) if starts else None, "written_at": utc(time.time()),
            "winners": [w.to_dict() for w in named],
            "variants": [v.to_row() for v in variants], "references": references}


def export(storage, name: str, out_dir: Path | str) -> dict:
    """Write best.yaml, best.json, trials.csv and kernels/ into ``out_dir`` from the study; return best.json."""
    out = Path(out_dir)
    leading, results, best, winners, config, kernels = [], [], {}, [], None, {}
    metas, references, named = [], [], []
    for study in shape_studies(storage, name):
        meta = study_info(study)
        metas.append(meta)
        config = config or study_config(meta)
        trials = owned_trials(study, storage)
        space = study_space(meta)
        axes = list(space.grid())
        recorded = {t.number: r for t in trials if (r := trial_result(t, meta)) is not None}
        leading += [_leading(t, axes) for t in trials if t.number in recorded]
        results += recorded.values()
        shape = Shape(**meta.shape)
        winner = best_trial(trials, recorded)
        passing = sorted(t.number for t in trials if t.state == TrialState.COMPLETE and t.number in recorded
                         and recorded[t.number].status == "ok")
        retimed, confident = leaders.confidence(study.user_attrs.get(leaders.ATTR), passing)
        if retimed is not None:      # the leaders timed again named another winner than one measurement did
            winner = next(t for t in trials if t.number == retimed)
        entry = {"shape": shape.as_dict(), "trials": len(trials),
                 "pruned": sum(t.state == TrialState.PRUNED for t in trials), "best": None, "confidence": confident}
        # the numpy runs measured interleaved with every trial, pooled; else the study's, taken when the study
        # was created (an AOT study, or trials from before interleaved references)
        problem = (shape.m, shape.n, shape.k, shape.batch)
        reference: Reference | None = problem_references(list(recorded.values())).get(problem) \
            or meta.study_reference
        set_ratios(list(recorded.values()), {problem: reference} if reference else {})
        if reference:
            references.append({"problem": shape.as_dict(), **reference.to_dict()})
        if winner is not None:
            r = recorded[winner.number]
            entry["best"] = {"trial": winner.number, "kernel": r.name, "params": dict(winner.params),
                             "config_params": r.params, "value": winner.value, "gflops": r.gflops,
                             "time_ms": r.time_ms, "build_s": r.build_s, "extra": r.extra,
                             "reference": reference.to_dict() if reference else None,
                             "ratio_to_reference": r.vs_numpy}
            winners.append(_winner(meta, winner))
            sure = Confidence.from_dict(confident) or Confidence()
            named.append(Winner(problem={key: shape.as_dict()[key] for key in ("m", "n", "k", "batch")},
                                kernel=r.name, trial=winner.number, retimed=retimed is not None,
                                separated=sure.separated if retimed is not None else None))
            pv = plan_variant(space.search.variant(space.point(winner.params)))
            kernels[pv.name] = render_variant(pv, named_lowering(meta.lowering, meta.capabilities_named,
                                                                 meta.target or "pvc",
                                                                 meta.compiler_name))
        best[shape.label] = entry
    for moved in _keep_richer_export(out, len(results)):
        print(f"xegemm: note: {moved}", file=sys.stderr, flush=True)
    write_text_atomic(out / "trials.csv", results_csv(results, leading))
    result = {"study": name, "shapes": best}
    write_json_atomic(out / "best.json", result)
    if winners:
        write_text_atomic(out / "best.yaml", "# written by xegemm tune: run it with `xegemm run best.yaml`\n"
                          + yaml.safe_dump(best_config(config, winners), sort_keys=False))
    for kernel, source in kernels.items():
        write_text_atomic(out / "kernels" / f"{kernel}.cl", source)
    write_json_atomic(out / "trials.json", _trials_document(name, metas, results, references, named))
    write_report([out], out / "report.html")
    return result


EXPORT_FILES = ("trials.json", "trials.csv", "best.json", "best.yaml", "report.html")


def _keep_richer_export(out: Path, trials: int) -> list[str]:
    """An earlier export in ``out`` with more trials than this one (the study was damaged, or another study is
    exported here) is moved aside, never overwritten: one line per file moved."""
    previous = out / "trials.json"
    if not previous.exists():
        return []
    try:
        document = json.loads(read_text(previous, RESULTS_BYTES, "export"))
        had = len(document["variants"])
    except (XegemmError, ValueError, KeyError, TypeError):
        had = None
    if had is not None and had <= trials:
        return []
    why = f"it holds {had} trials, this export {trials}" if had is not None else "it is not an xegemm export"
    return [f"{out / name} moved to {set_aside(out / name)} ({why})" for name in EXPORT_FILES
            if (out / name).exists()]


def study_names(storage) -> list[str]:
    """The xegemm studies in ``storage`` (each is one Optuna study per shape, named ``NAME@MxNxK``)."""
    return sorted({n.split("@", 1)[0] for n in optuna.study.get_all_study_names(storage) if "@" in n})


def export_all(storage, out_root: Path | str) -> list[Path]:
    """Export every xegemm study in ``storage`` into ``out_root/NAME`` (for ``xegemm report STUDY.db``)."""
    names = study_names(storage)
    if not names:
        raise XegemmError("the storage holds no xegemm study")
    for name in names:
        export(storage, name, Path(out_root) / name)
    return [Path(out_root) / name for name in names]
