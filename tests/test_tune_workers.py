"""Several `xegemm tune` processes on one study, and studies that are interrupted: real processes, a real
SQLite file and a real PostgreSQL server started here in a temporary directory, real signals."""

import signal
import subprocess
import sys
import time
from collections import Counter

import optuna
import pytest
from conftest import SECRET, TINY_LEGAL, TINY_PRUNED
from optuna.trial import TrialState

from xegemm.tune.study import ClaimBook, open_storage

pytestmark = pytest.mark.device



def _tune(config, tmp_path, tag, *args):
    """Start `xegemm tune` in its own process; its output goes to files named by ``tag``."""
    out, err = (open(tmp_path / f"{tag}.{s}", "w") for s in ("out", "err"))
    # the leaders are not timed again (--leaders 0): these tests are of the trials; tests/test_tune.py and
    # tests/test_leaders.py test the re-timing
    return subprocess.Popen([sys.executable, "-m", "xegemm", "tune", str(config), "--no-cache", "--leaders", "0",
                             *args], stdout=out, stderr=err)


def _log(tmp_path, tag):
    return (tmp_path / f"{tag}.out").read_text() + (tmp_path / f"{tag}.err").read_text()


def _owners(url, study):
    """The trials that own the study's points, and every trial that recorded an evaluation."""
    storage = open_storage(url)
    trials = optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)
    owners = [trials[n] for n in ClaimBook(storage, study).claims().values()]
    recorded = [t for t in trials if "status" in t.user_attrs and t.state != TrialState.FAIL]
    return owners, recorded, trials


def _check_budget_done_once(url, study, budget):
    owners, recorded, _ = _owners(url, study)
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in owners)
    evaluated = [t for t in owners if t.state == TrialState.COMPLETE]
    assert len(evaluated) == budget and all(t.user_attrs["status"] == "ok" for t in evaluated)
    # no point has two recorded evaluations: every recorded trial is its point's owner
    assert Counter(t.user_attrs["point"] for t in recorded).most_common(1)[0][1] == 1
    assert {t.number for t in recorded} == {t.number for t in owners}
    return owners


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_two_workers_share_one_study_and_evaluate_no_point_twice(tiny_tune_config, tmp_path, backend, request):
    url = (f"sqlite:///{tmp_path / 'shared.db'}" if backend == "sqlite"
           else request.getfixturevalue("postgresql_url"))
    budget = 6
    workers = [_tune(tiny_tune_config, tmp_path, f"w{i}", "--storage", url, "--study", "shared", "--strategy",
                     "random", "--seed", str(i), "--budget", str(budget), "--out", str(tmp_path / f"w{i}"))
               for i in range(2)]
    for i, worker in enumerate(workers):
        assert worker.wait(300) == 0, _log(tmp_path, f"w{i}")
    owners = _check_budget_done_once(url, "shared@64x64x64", budget)
    print("points per worker:", Counter(t.user_attrs["worker"] for t in owners))
    for i in range(2):
        assert SECRET not in _log(tmp_path, f"w{i}")
        assert SECRET not in (tmp_path / f"w{i}" / "best.json").read_text()


def _wait_for_complete(url, study, count, proc, tmp_path):
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert proc.poll() is None, _log(tmp_path, "first")
        try:
            storage = open_storage(url)
            trials = optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)
            if sum(t.state == TrialState.COMPLETE for t in trials) >= count:
                return
        except KeyError:          # the study is not created yet
            pass
        time.sleep(0.1)
    raise AssertionError("the study never reached its first trials")


def _wait_for_running(url, study, proc, tmp_path):
    """Until a trial of ``study`` is running (a trial lasts about a second: its build, then four timing rounds)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, _log(tmp_path, "first")
        trials = optuna.load_study(study_name=study, storage=open_storage(url)).get_trials(deepcopy=False)
        if any(t.state == TrialState.RUNNING for t in trials):
            return
        time.sleep(0.02)
    raise AssertionError("no trial was running")


def _interrupt_and_resume(config, tmp_path, how) -> bool:
    """Stop a study with ``how`` while a trial runs, resume it, check nothing was lost or duplicated; whether
    the signal landed inside a trial (polling the database takes time: under load the trial seen running may
    have ended before the signal arrives)."""
    out = tmp_path / "study"
    url = f"sqlite:///{out / 'study.db'}"
    args = ("--strategy", "exhaustive", "--seed", "0", "--heartbeat", "1", "--out", str(out))
    first = _tune(config, tmp_path, "first", *args)
    _wait_for_complete(url, "tiny@64x64x64", 2, first, tmp_path)
    _wait_for_running(url, "tiny@64x64x64", first, tmp_path)     # so that the signal lands inside a trial
    first.send_signal(how)
    code = first.wait(120)
    if how == signal.SIGINT:
        assert code == 130 and "resume" in _log(tmp_path, "first"), _log(tmp_path, "first")
    else:
        assert code == -signal.SIGKILL
    owners, _, trials = _owners(url, "tiny@64x64x64")
    landed = any(t.state in (TrialState.FAIL, TrialState.RUNNING) for t in trials)
    stopped = [t for t in owners if t.state in (TrialState.FAIL, TrialState.RUNNING)]   # they own their points
    resumed = _tune(config, tmp_path, "resumed", *args)
    assert resumed.wait(300) == 0, _log(tmp_path, "resumed")
    owners = _check_budget_done_once(url, "tiny@64x64x64", TINY_LEGAL)
    assert len(owners) == TINY_LEGAL + TINY_PRUNED
    retried = [t for t in owners if "retry_of" in t.user_attrs]
    assert {t.user_attrs["retry_of"] for t in retried} == {t.number for t in stopped}
    return landed


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL])
def test_an_interrupted_study_resumes_with_nothing_lost_and_nothing_duplicated(tiny_tune_config, tmp_path, how):
    # up to three studies, until one is stopped inside a trial (each is checked whole, wherever it stopped)
    for attempt in range(3):
        (tmp_path / str(attempt)).mkdir()
        if _interrupt_and_resume(tiny_tune_config, tmp_path / str(attempt), how):
            return
    raise AssertionError("in three studies the signal landed between trials")
