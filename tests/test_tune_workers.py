"""Several `xegemm tune` processes on one study, and studies that are interrupted: real processes, a real
SQLite file and a real PostgreSQL server started here in a temporary directory, real signals."""

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter

import optuna
import pytest
from conftest import TINY_LEGAL, TINY_PRUNED
from optuna.trial import TrialState

from xegemm.tune.study import ClaimBook, open_storage

pytestmark = pytest.mark.device

POSTGRES_MISSING = ("PostgreSQL's initdb/pg_ctl are not installed: as root, `make test` installs them "
                    "(.ci/install-postgresql.sh: Debian's postgresql); otherwise run "
                    "`sudo bash .ci/install-postgresql.sh`")
SECRET = "not-a-real-secret"


def _tune(config, tmp_path, tag, *args):
    """Start `xegemm tune` in its own process; its output goes to files named by ``tag``."""
    out, err = (open(tmp_path / f"{tag}.{s}", "w") for s in ("out", "err"))
    return subprocess.Popen([sys.executable, "-m", "xegemm", "tune", str(config), "--no-cache", *args],
                            stdout=out, stderr=err)


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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pg_binary(name: str) -> str | None:
    return shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))), None)


@pytest.fixture(scope="module")
def postgresql_url():
    """A PostgreSQL server of its own in a temporary directory (initdb refuses root: as root it runs as the
    `postgres` user, or `nobody`)."""
    initdb, pg_ctl = _pg_binary("initdb"), _pg_binary("pg_ctl")
    if not (initdb and pg_ctl):
        pytest.skip(POSTGRES_MISSING)
    root = tempfile.mkdtemp(prefix="xegemm-pg-")
    as_user = []
    if os.geteuid() == 0:
        user = next((u for u in ("postgres", "nobody") if _has_user(u)), None)
        if user is None or not shutil.which("runuser"):
            pytest.skip("running as root with neither a `postgres` nor a `nobody` user (initdb refuses root)")
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
        as_user = ["runuser", "-u", user, "--"]
    data, port = f"{root}/data", _free_port()
    subprocess.run([*as_user, initdb, "-D", data, "-A", "trust", "-U", "xegemm", "--no-sync", "-E", "UTF8"],
                   check=True, capture_output=True)
    subprocess.run([*as_user, pg_ctl, "-D", data, "-l", f"{root}/server.log", "-w", "-o",
                    f"-p {port} -k {root} -c listen_addresses=127.0.0.1", "start"], check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg2://xegemm:{SECRET}@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, pg_ctl, "-D", data, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


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


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL])
def test_an_interrupted_study_resumes_with_nothing_lost_and_nothing_duplicated(tiny_tune_config, tmp_path, how):
    out = tmp_path / "study"
    url = f"sqlite:///{out / 'study.db'}"
    args = ("--strategy", "exhaustive", "--seed", "0", "--heartbeat", "1", "--out", str(out))
    first = _tune(tiny_tune_config, tmp_path, "first", *args)
    _wait_for_complete(url, "tiny@64x64x64", 2, first, tmp_path)
    _wait_for_running(url, "tiny@64x64x64", first, tmp_path)     # so that the signal lands inside a trial
    first.send_signal(how)
    code = first.wait(120)
    if how == signal.SIGINT:
        assert code == 130 and "resume" in _log(tmp_path, "first"), _log(tmp_path, "first")
    else:
        assert code == -signal.SIGKILL
    owners, _, trials = _owners(url, "tiny@64x64x64")
    assert any(t.state in (TrialState.FAIL, TrialState.RUNNING) for t in trials), "the signal landed between trials"
    stopped = [t for t in owners if t.state in (TrialState.FAIL, TrialState.RUNNING)]   # they own their points
    resumed = _tune(tiny_tune_config, tmp_path, "resumed", *args)
    assert resumed.wait(300) == 0, _log(tmp_path, "resumed")
    owners = _check_budget_done_once(url, "tiny@64x64x64", TINY_LEGAL)
    assert len(owners) == TINY_LEGAL + TINY_PRUNED
    retried = [t for t in owners if "retry_of" in t.user_attrs]
    assert {t.user_attrs["retry_of"] for t in retried} == {t.number for t in stopped}
