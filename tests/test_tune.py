"""xegemm tune in one process: shapes, pruning, strategies, seeds, the measurement cache, the export, and
best.yaml through `xegemm run`.  Real device, real Optuna, real SQLite: nothing is mocked."""

import json
import re
import sqlite3

import optuna
import pytest
import yaml
from conftest import TINY_LEGAL, TINY_PRUNED
from optuna.trial import TrialState
from tqdm import tqdm

from xegemm.reporting import load_source
from xegemm.reporting.model import groups, source_facts
from xegemm.cli import main, parse_duration
from xegemm.errors import XegemmError
from xegemm.evaluate.isolated import TimeLimits
from xegemm.jobs.pipeline import run
from xegemm.library.record import COLUMNS
from xegemm.tune import STRATEGIES, Shape, Strategy, parse_shapes, register, tune
from xegemm.config import load_config
from xegemm.tune.api import BAR_FORMAT
from xegemm.tune.cache import MeasurementCache, measurement_key
from xegemm.tune.export import owned_trials
from xegemm.tune.study import mask_url, open_storage

pytestmark = pytest.mark.device


def _points(result, label="64x64x64"):
    """The owned trials of a shape in trial order: (point key, status)."""
    study = result.studies[label]
    storage = open_storage(f"sqlite:///{result.out / 'study.db'}")
    return [(t.user_attrs["point"], t.user_attrs["status"]) for t in owned_trials(study, storage)]


def test_shapes_from_labels_yaml_and_benchmark_in_files(tmp_path):
    assert parse_shapes("64x64x64, 128x32x16x4") == [Shape(64, 64, 64), Shape(128, 32, 16, 4)]
    (tmp_path / "gemm.in").write_text("# M N K [L]\n1024 1024 1024\n\n512 256 128 2  # batched\n")
    assert parse_shapes(str(tmp_path / "gemm.in")) == [Shape(1024, 1024, 1024), Shape(512, 256, 128, 2)]
    (tmp_path / "s.yaml").write_text("- {m: 8, n: 16, k: 32}\n- 64x64x64\n")
    assert parse_shapes(str(tmp_path / "s.yaml")) == [Shape(8, 16, 32), Shape(64, 64, 64)]
    (tmp_path / "bad.in").write_text("1 2 3\n4 five 6\n")
    with pytest.raises(XegemmError, match=r"bad.in:2: expected 'M N K'"):
        parse_shapes(str(tmp_path / "bad.in"))
    with pytest.raises(XegemmError, match="is not a shape"):
        parse_shapes("64x64")


def test_a_password_in_a_storage_url_is_masked():
    assert mask_url("postgresql://tuner:s3cret@db.example:5432/xe") == "postgresql://tuner:***@db.example:5432/xe"
    assert mask_url("sqlite:////tmp/study.db") == "sqlite:////tmp/study.db"


def test_exhaustive_covers_the_space_prunes_without_building_and_a_second_tune_builds_nothing(
        tiny_tune_config, tmp_path):
    cache = tmp_path / "cache.db"
    first = tune(tiny_tune_config, out=tmp_path / "a", cache=cache, seed=0, progress=False)
    points = _points(first)
    assert len(points) == TINY_LEGAL + TINY_PRUNED and len({p for p, _ in points}) == len(points)
    assert sorted(s for _, s in points).count("rejected") == TINY_PRUNED
    study = first.studies["64x64x64"]
    for trial in study.get_trials(states=[TrialState.PRUNED]):
        assert "registers" in trial.user_attrs["reason"]
        assert trial.user_attrs["build_s"] is None and trial.user_attrs["source_sha256"] is None
    # the cache holds exactly the built kernels: a pruned point was never built
    assert sqlite3.connect(cache).execute("SELECT count(*) FROM entries").fetchone()[0] == TINY_LEGAL
    tally = first.tallies["64x64x64"]
    assert (tally.evaluated, tally.pruned, tally.cached) == (TINY_LEGAL, TINY_PRUNED, 0)

    second = tune(tiny_tune_config, out=tmp_path / "b", cache=cache, seed=0, progress=False, leaders=0)
    assert second.tallies["64x64x64"].cached == TINY_LEGAL          # nothing built, nothing timed (no re-timing)
    # without re-timing, the winner is the best of the cached single measurements: the first study's argmax
    argmax = max((t for t in study.get_trials(states=[TrialState.COMPLETE]) if t.user_attrs["status"] == "ok"),
                 key=lambda t: (t.value, -t.number))
    assert second.best["shapes"]["64x64x64"]["best"]["kernel"] == argmax.user_attrs["name"]
    assert second.best["shapes"]["64x64x64"]["confidence"]["retimed"] is False
    # the first re-timed its leaders: every one measured in at least two rounds, interleaved with numpy
    sure = first.best["shapes"]["64x64x64"]["confidence"]
    assert sure["retimed"] and len(sure["leaders"]) == 3 and sure["rounds"] >= 2
    assert all(len(leader["ratios"]) == sure["rounds"] and all(r > 0 for r in leader["ratios"])
               and len(leader["cvs"]) == sure["rounds"] for leader in sure["leaders"])
    assert first.best["shapes"]["64x64x64"]["best"]["trial"] == sure["winner_trial"] == sure["order"][0]
    retimed = tune(tiny_tune_config, out=tmp_path / "c", cache=cache, seed=0, budget=2, retime=True,
                   progress=False)
    assert retimed.tallies["64x64x64"].cached == 0 and retimed.tallies["64x64x64"].evaluated == 2


@pytest.mark.parametrize("strategy", ["random", "tpe"])
def test_a_seeded_study_is_reproducible(tiny_tune_config, tmp_path, strategy):
    cache = tmp_path / "cache.db"      # the second run takes the first one's measurements: same values
    runs = [tune(tiny_tune_config, leaders=0, strategy=strategy, budget=5, seed=7, out=tmp_path / f"run{i}", cache=cache,
                 progress=False) for i in range(2)]
    first, second = (_points(r) for r in runs)
    assert first == second
    assert sum(s != "rejected" for _, s in first) == 5


def test_model_evaluates_its_ranking_first_and_resume_completes_the_budget(tiny_tune_config, tmp_path):
    out, cache = tmp_path / "model", tmp_path / "cache.db"
    first = tune(tiny_tune_config, leaders=0, strategy="model", budget=2, out=out, cache=cache, progress=False)
    assert first.tallies["64x64x64"].evaluated == 2
    # the pruned points come first (free), then the best predicted
    assert [s for _, s in _points(first)][:TINY_PRUNED] == ["rejected"] * TINY_PRUNED
    again = tune(tiny_tune_config, leaders=0, strategy="model", budget=4, out=out, cache=cache, progress=False)
    points = _points(again)
    assert sum(s != "rejected" for _, s in points) == 4 and len({p for p, _ in points}) == len(points)
    assert again.tallies["64x64x64"].evaluated == 2                 # only the two the budget added


def test_a_strategy_is_one_registry_entry(tiny_tune_config, tmp_path):
    register(Strategy("bruteforce", "Optuna's brute-force sampler",
                      lambda space, seed: optuna.samplers.BruteForceSampler(seed=seed)))
    try:
        result = tune(tiny_tune_config, leaders=0, strategy="bruteforce", budget=3, seed=1, out=tmp_path / "q",
                      cache=tmp_path / "c.db", progress=False)
        assert result.tallies["64x64x64"].evaluated == 3
    finally:
        del STRATEGIES["bruteforce"]


def test_best_yaml_runs_as_it_is_one_variant_per_shape(tiny_tune_config, tmp_path, capsys):
    out = tmp_path / "t"
    assert main(["tune", str(tiny_tune_config), "--leaders", "0", "--shapes", "64x64x64,96x64x32", "--strategy", "random",
                 "--budget", "2", "--seed", "3", "--out", str(out), "--cache", str(tmp_path / "c.db")]) == 0
    printed = capsys.readouterr().out
    assert "64x64x64: best xegemm_" in printed and "96x64x32: best xegemm_" in printed
    best = json.loads((out / "best.json").read_text())
    rows = (out / "trials.csv").read_text().splitlines()
    # the trial's shape, point and value, then the columns results.csv has (one list: xegemm.library.record.COLUMNS)
    assert rows[0].startswith("shape,tile.workgroup,tile.subgroups,pipeline.prefetch,value,retry_of,worker,"
                              + ",".join(c.name for c in COLUMNS) + ",")
    for label, entry in best["shapes"].items():
        assert (out / "kernels" / f"{entry['best']['kernel']}.cl").is_file()
        assert entry["best"]["ratio_to_reference"] > 0
    results = run(out / "best.yaml", out_dir=tmp_path / "run", progress=None)
    ok = {v.problem[:3]: v.name for v in results.variants if v.status == "ok"}
    assert ok == {(64, 64, 64): best["shapes"]["64x64x64"]["best"]["kernel"],
                  (96, 64, 32): best["shapes"]["96x64x32"]["best"]["kernel"]}
    # --export rewrites the same files from the database alone
    (out / "best.json").unlink()
    assert main(["tune", str(tiny_tune_config), "--export", "--out", str(out)]) == 0
    assert json.loads((out / "best.json").read_text()) == best
    assert yaml.safe_load((out / "best.yaml").read_text())["name"] == "tiny_best"


def test_two_jobs_evaluate_every_point_once(tiny_tune_config, tmp_path):
    result = tune(tiny_tune_config, leaders=0, jobs=2, out=tmp_path / "j", cache=False, progress=False)
    points = _points(result)
    assert len(points) == TINY_LEGAL + TINY_PRUNED and len({p for p, _ in points}) == len(points)
    assert sum(s == "ok" for _, s in points) == TINY_LEGAL


@pytest.mark.ocloc
def test_target_scores_ahead_of_time_builds_without_a_device(tiny_tune_config, tmp_path):
    result = tune(tiny_tune_config, target="pvc", strategy="model", budget=3, out=tmp_path / "aot", cache=False,
                  progress=False)
    best = result.best["shapes"]["64x64x64"]["best"]
    assert best["extra"]["isa"]["spill_bytes"] == 0 and best["extra"]["isa"]["dpas"] > 0
    assert best["value"] == pytest.approx(best["extra"]["score"]) and best["value"] > 0
    assert result.tallies["64x64x64"].evaluated == 3


def test_the_cache_keeps_only_deterministic_outcomes(tmp_path):
    cache = MeasurementCache(tmp_path / "c.db")
    timed = {"status": "ok", "gflops": 2 * 64 ** 3 / (0.5 * 1e6), "time_ms": {"median": 0.5},
             "params": {"m": 64, "n": 64, "k": 64, "batch": 1}}
    for key, evaluation in {"ok": timed, "bad": {"status": "failed_build"},
                            "slow": {"status": "timeout"}, "err": {"status": "error"},
                            "died": {"status": "failed_build", "extra": {"worker_lost": "build"}}}.items():
        cache.put(key, evaluation)
    assert [k for k in ("ok", "bad", "slow", "err", "died") if cache.get(k)] == ["ok", "bad"]
    assert cache.get("ok") == timed


def test_the_cpu_code_path_is_part_of_a_measurement_key(tiny_tune_config, monkeypatch):
    """The CPU runtime's AVX2 code path (CL_CONFIG_CPU_TARGET_ARCH) runs other machine code for the same source
    on the same device: tuning it must not be given the AVX-512 path's measurements."""
    config = load_config(tiny_tune_config)
    monkeypatch.delenv("CL_CONFIG_CPU_TARGET_ARCH", raising=False)
    key = measurement_key("src", "-O", "cpu", "1.0", "portable", config)
    monkeypatch.setenv("CL_CONFIG_CPU_TARGET_ARCH", "core-avx2")
    assert measurement_key("src", "-O", "cpu", "1.0", "portable", config) != key


def test_durations_and_budgets_are_checked_on_the_command_line(tiny_tune_config, capsys):
    assert parse_duration("90") == 90 and parse_duration("5m") == 300 and parse_duration("1.5h") == 5400
    for bad in (["--time", "soon"], ["--budget", "0"], ["--budget", "3", "--time", "1m"], ["--jobs", "-1"]):
        with pytest.raises(SystemExit):
            main(["tune", str(tiny_tune_config), *bad])
    assert main(["tune", str(tiny_tune_config), "--shapes", "64x64"]) == 2
    assert "is not a shape" in capsys.readouterr().err


def test_a_build_that_overruns_its_limit_is_that_trials_timeout_and_the_study_goes_on(tiny_tune_config, tmp_path,
                                                                                       monkeypatch):
    # an empty program cache: a program an earlier test built would load within the limit
    monkeypatch.setenv("XEGEMM_CACHE_DIR", str(tmp_path / "programs"))
    cache = tmp_path / "c.db"
    result = tune(tiny_tune_config, leaders=0, strategy="model", budget=2, out=tmp_path / "t", cache=cache,
                  limits=TimeLimits(build_s=0.05), progress=False)
    points = _points(result)
    assert [s for _, s in points if s != "rejected"] == ["timeout", "timeout"]
    assert result.best["shapes"]["64x64x64"]["best"] is None
    assert sqlite3.connect(cache).execute("SELECT count(*) FROM entries").fetchone()[0] == 0


def test_a_time_limit_stops_starting_trials(tiny_tune_config, tmp_path):
    result = tune(tiny_tune_config, time_s=1e-6, out=tmp_path / "t", cache=False, progress=False)
    assert result.tallies["64x64x64"].evaluated == 0 and result.best["shapes"]["64x64x64"]["best"] is None
    assert not (tmp_path / "t" / "best.yaml").exists() and (tmp_path / "t" / "trials.csv").is_file()


def test_a_tune_writes_a_report_that_xegemm_report_reads(tiny_tune_config, tmp_path):
    out = tmp_path / "t"
    # the leaders are timed again (the default): the report heads the shape with best.json's winner, whichever
    # single measurement was fastest
    result = tune(tiny_tune_config, out=out, cache=tmp_path / "c.db", seed=1, strategy="random", budget=4,
                  progress=False, command="xegemm tune tiny.yaml --budget 4")
    source = load_source(out)
    assert source.kind == "tune" and (out / "report.html").is_file()
    evaluated = [v for v in source.variants if v.status != "rejected"]
    assert len(evaluated) == result.tallies["64x64x64"].evaluated == 4
    assert sorted(v.trial for v in source.variants) == sorted({v.trial for v in source.variants})
    assert all(v.strategy == "random" and v.finished_at for v in source.variants)
    (group,) = groups([source])
    best = result.best["shapes"]["64x64x64"]["best"]
    assert group.best.name == best["kernel"] and group.best.gflops == best["gflops"]
    # the winner's ratio is to the numpy run measured interleaved with it, in best.json and in the report
    (numpy,) = [r for r in group.best_against_references() if r["provider"] == "numpy"]
    assert numpy["ratio"] == pytest.approx(best["ratio_to_reference"])
    assert best["reference"]["interleaved"]
    page = (out / "report.html").read_text()
    assert best["kernel"] in page and "random" in page
    # the page says on which device and by which command, as a run's page does
    facts = dict(source_facts(source, [group]))
    assert facts["command"] == "xegemm tune tiny.yaml --budget 4" and "?" not in facts["device"]
    assert "compute units" in facts["device"] and facts["driver"] != "unknown"
    assert "xegemm tune tiny.yaml --budget 4" in page


def test_xegemm_report_reads_a_study_database(tiny_tune_config, tmp_path):
    out = tmp_path / "t"
    tune(tiny_tune_config, leaders=0, out=out, cache=tmp_path / "c.db", seed=2, strategy="random", budget=2, progress=False)
    page = tmp_path / "from-db.html"
    assert main(["report", str(out / "study.db"), "--out", str(page)]) == 0
    best = json.loads((out / "best.json").read_text())["shapes"]["64x64x64"]["best"]
    assert best["kernel"] in page.read_text()
    csv_out = tmp_path / "from-url.csv"
    assert main(["report", f"sqlite:///{out / 'study.db'}", "--out", str(csv_out)]) == 0
    assert best["kernel"] in csv_out.read_text()


def _bar_counts(text: str) -> list[tuple[int, int]]:
    """Every 'n/total' a tqdm bar drew (its lines are separated by carriage returns)."""
    return [(int(n), int(t)) for n, t in re.findall(r"\| (\d+)/(\d+) \[", text)]


def test_the_bar_total_is_the_budget_from_the_start_and_a_resume_starts_where_it_was(tiny_tune_config, tmp_path,
                                                                                      capsys):
    out, cache = tmp_path / "bar", tmp_path / "cache.db"
    tune(tiny_tune_config, leaders=0, strategy="model", budget=2, out=out, cache=cache, progress=True)
    drawn = _bar_counts(capsys.readouterr().err)
    # the model strategy meets the pruned points first: they cost no budget and do not move the total
    assert drawn[0] == (0, 2) and drawn[-1] == (2, 2) and {t for _, t in drawn} == {2}
    tune(tiny_tune_config, leaders=0, strategy="model", budget=4, out=out, cache=cache, progress=True)
    err = capsys.readouterr().err
    drawn = _bar_counts(err)
    assert drawn[0] == (2, 4) and drawn[-1] == (4, 4) and {t for _, t in drawn} == {4}
    assert "100%|" in err


def test_the_bar_keeps_its_width_in_a_narrow_terminal():
    for columns in (40, 60, 200):
        line = tqdm.format_meter(5, 8, 12.0, ncols=columns, prefix="1024x1024x1024",
                                 postfix="best 154.2, 3 pruned, 1 failed", bar_format=BAR_FORMAT)
        assert line.startswith(" 62%|") and re.match(r" 62%\|.{16}\|", line), line
        assert len(line) <= columns
