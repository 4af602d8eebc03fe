"""Hostile input, as a user could give it by accident or on purpose: files that are not what they claim, databases
that are damaged or go away, caches with damaged entries, signals at bad moments, arguments out of range.

Every attack must end in one clear line (an ``xegemm: error:`` or a note) and lose nothing: no traceback, no
file replaced without a word, no trial left running.  docs/reliability.md lists the attacks and what holds.
Real files, real SQLite and PostgreSQL, real processes and signals; nothing is mocked."""

import hashlib
import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from conftest import SECRET, TINY_LEGAL, TINY_TUNE_CONFIG
from optuna.trial import TrialState

from xegemm.cli import main
from xegemm.config import ConfigError, config_from_text, load_config
from xegemm.config.reader import MAX_SWEEP_POINTS
from xegemm.errors import XegemmError
from xegemm.files import CONFIG_BYTES, FileRefused, load_yaml, read_text, set_aside, write_text_atomic
from xegemm.tune.cache import MeasurementCache
from xegemm.config.shapes import parse_shapes
from xegemm.tune.study import CACHE_CALLS, StorageError, _transient, open_storage, resumable_url

ONE_POINT = "name: one\nproblem: {m: 32, n: 32, k: 32}\ntile: {workgroup: [32, 32, 32], subgroups: [1, 2]}\n" \
            "profile: {warmup: 1, repeats: 2}\n"
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(8))


def xegemm(*args, timeout=300, env=None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xegemm", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, **kwargs)


def one_line_error(proc: subprocess.CompletedProcess, code: int = 2) -> str:
    """The process failed with ``code`` and said why in one line, without a traceback."""
    assert proc.returncode == code, (proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc.stderr


# ---- files ---------------------------------------------------------------------------------------------------

@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo.yaml"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("what", ["device", "fifo", "directory", "too large", "not utf-8", "missing"])
def test_a_config_that_is_not_a_small_regular_text_file_is_refused(tmp_path, fifo, what):
    path = {"device": Path("/dev/zero"), "fifo": fifo, "directory": tmp_path, "too large": tmp_path / "big.yaml",
            "not utf-8": tmp_path / "latin1.yaml", "missing": tmp_path / "nothing.yaml"}[what]
    if what == "too large":
        with open(path, "wb") as f:
            f.truncate(CONFIG_BYTES + 1)        # sparse: costs no disk
    if what == "not utf-8":
        path.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert str(error.value).startswith(str(path)), error.value
    assert {"device": "a device", "fifo": "FIFO", "directory": "directory", "too large": "at most",
            "not utf-8": "not UTF-8", "missing": "No such file"}[what] in str(error.value)


def test_generate_refuses_dev_zero_and_a_fifo_at_once(fifo):
    for path in ("/dev/zero", fifo):
        assert "give a regular file" in one_line_error(xegemm("generate", path, timeout=60))


def test_a_sweep_is_counted_before_any_point_is_listed():
    sizes = ", ".join(str(32 * i) for i in range(1, 101))
    text = ONE_POINT + f"sweep:\n  tile.swizzle: [1, 2, 4, 8, 16, 1, 2, 4, 8, 16]\n  problem.m: [{sizes}]\n" \
        f"  problem.n: [{sizes}]\n  problem.k: [{sizes}]\n"
    with pytest.raises(ConfigError, match=f"spans 10000000 points .* at most {MAX_SWEEP_POINTS}"):
        config_from_text(text)


def test_a_yaml_alias_bomb_in_a_shapes_file_is_refused(tmp_path):
    bombed = tmp_path / "shapes.yaml"
    bombed.write_text(BOMB + "shapes: *i\n")
    with pytest.raises(XegemmError, match="expands to more than"):
        parse_shapes(str(bombed))


@pytest.mark.parametrize("text, message", [
    ("- !!python/object/apply:os.system ['true']\n", "unsupported YAML tag"),
    ("a: &a [*a]\n", "recursive alias|alias"),
    ("<<: {m: 1}\n", "merge keys"),
    ("[unclosed\n", "invalid YAML"),
])
def test_every_yaml_xegemm_reads_has_the_config_readers_guards(text, message):
    with pytest.raises(XegemmError, match=message):
        load_yaml(text, "test.yaml")


def test_a_shapes_file_that_is_a_fifo_or_too_large_is_refused(tmp_path, fifo):
    big = tmp_path / "shapes.in"
    with open(big, "wb") as f:
        f.truncate(CONFIG_BYTES + 1)
    with pytest.raises(FileRefused, match="at most"):
        parse_shapes(str(big))
    with pytest.raises(XegemmError):
        parse_shapes(str(fifo))


def test_set_aside_never_overwrites_and_atomic_writes_leave_no_temporary_files(tmp_path):
    path = tmp_path / "results.json"
    for n in range(3):
        write_text_atomic(path, f"run {n}\n")
        if n < 2:
            assert set_aside(path).name == f"results.json.{n + 1}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json", "results.json.1", "results.json.2"]
    assert [read_text(tmp_path / n, 100) for n in ("results.json.1", "results.json.2", "results.json")] == \
        ["run 0\n", "run 1\n", "run 2\n"]


@pytest.mark.device
def test_run_sets_aside_results_it_did_not_write(tmp_path):
    config, out = tmp_path / "one.yaml", tmp_path / "out"
    config.write_text(ONE_POINT)
    out.mkdir()
    (out / "results.json").write_text('{"mine": "a user\'s own file"}\n')
    (out / "report.html").write_text("<p>my report</p>\n")
    done = xegemm("run", config, "--out", out)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((out / "results.json.1").read_text()) == {"mine": "a user's own file"}
    assert (out / "report.html.1").read_text() == "<p>my report</p>\n"
    assert "results.json moved to" in done.stderr and json.loads((out / "results.json").read_text())["best"]
    other = tmp_path / "other.yaml"          # another config into the same directory: the first's reports stay
    other.write_text(ONE_POINT.replace("name: one", "name: other"))
    again = xegemm("run", other, "--out", out)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((out / "results.json.2").read_text())["config"]["name"] == "one"
    assert json.loads((out / "results.json").read_text())["config"]["name"] == "other"


# ---- databases -----------------------------------------------------------------------------------------------

def _healthy_db(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (x TEXT)")
    db.executemany("INSERT INTO t VALUES (?)", [("x" * 500,)] * 200)
    db.commit()
    db.close()


@pytest.mark.parametrize("damage", ["empty", "random", "truncated", "flipped page"])
def test_a_study_file_that_is_not_a_healthy_database_is_refused_and_kept(tmp_path, damage):
    path = tmp_path / "study.db"
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "random":
        path.write_bytes(os.urandom(8192))
    else:
        _healthy_db(path)
        data = bytearray(path.read_bytes())
        if damage == "truncated":
            data = data[:len(data) // 2 + 100]
        else:
            for i in range(4096 + 8, 4096 * 3, 7):   # the b-tree pages after the header page
                data[i] ^= 0xFF
        path.write_bytes(bytes(data))
    before = path.read_bytes()
    with pytest.raises(StorageError, match=f"{path}: the study database is .*move it aside"):
        open_storage(f"sqlite:///{path}")
    assert path.read_bytes() == before


def test_report_and_tune_refuse_an_empty_study_and_keep_its_last_export(tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY_TUNE_CONFIG)
    (tmp_path / "study.db").write_bytes(b"")
    (tmp_path / "trials.json").write_text('{"variants": [1, 2, 3]}\n')
    assert "is empty (0 bytes)" in one_line_error(xegemm("report", tmp_path / "study.db", timeout=60))
    assert "is empty (0 bytes)" in one_line_error(xegemm("tune", config, "--out", tmp_path, "--export"))
    assert (tmp_path / "study.db").stat().st_size == 0
    assert (tmp_path / "trials.json").read_text() == '{"variants": [1, 2, 3]}\n'


@pytest.mark.parametrize("url, cause", [
    ("not a url", "not a database URL"),
    ("nosuchdb://host/x", "no database driver"),
    ("postgresql://u:hunter2@127.0.0.1:1/db", "connection refused"),
])
def test_an_unusable_storage_url_names_the_cause_without_its_password(url, cause, monkeypatch):
    monkeypatch.setenv("XEGEMM_DB_RETRY_S", "0")
    with pytest.raises(StorageError, match=cause) as error:
        open_storage(url)
    assert "hunter2" not in str(error.value)


def test_the_resume_form_of_a_url_carries_the_password_variable_not_stars():
    assert resumable_url("postgresql://me:s3cret@db/x") == "postgresql://me:$XEGEMM_DB_PASSWORD@db/x"


@pytest.mark.device
def test_a_study_refuses_another_problem_or_a_smaller_space_and_leaves_no_trial_running(tmp_path):
    config, out = tmp_path / "tiny.yaml", tmp_path / "study"
    config.write_text(TINY_TUNE_CONFIG)
    first = xegemm("tune", config, "--budget", 1, "--out", out, "--no-cache")
    assert first.returncode == 0, first.stderr[-3000:]
    exported = (out / "best.json").read_text()
    f16, smaller = tmp_path / "f16.yaml", tmp_path / "smaller.yaml"
    f16.write_text(TINY_TUNE_CONFIG.replace("bf16", "f16"))
    smaller.write_text(TINY_TUNE_CONFIG.replace("pipeline.prefetch: [0, 1, 2]", "pipeline.prefetch: [0, 1]"))
    for path, words in ((f16, ["another problem", "types", "bf16", "f16"]),
                        (smaller, ["another search space", "pipeline.prefetch", "missing"])):
        refused = one_line_error(xegemm("tune", path, "--study", "tiny", "--budget", 3, "--out", out, "--no-cache"))
        assert all(word in refused for word in words), refused
    trials = optuna.load_study(study_name="tiny@64x64x64", storage=open_storage(f"sqlite:///{out}/study.db")).trials
    assert trials and not any(t.state == TrialState.RUNNING for t in trials)
    assert (out / "best.json").read_text() == exported
    # an earlier export with more trials than the study now holds is moved aside, never overwritten
    richer = json.loads((out / "trials.json").read_text())
    richer["variants"] *= 10
    (out / "trials.json").write_text(json.dumps(richer))
    again = xegemm("tune", config, "--out", out, "--export", timeout=120)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "trials.json moved to" in again.stderr and "holds" in again.stderr
    assert json.loads((out / "trials.json.1").read_text())["variants"] == richer["variants"]


# ---- caches --------------------------------------------------------------------------------------------------

GOOD = {"status": "ok", "gflops": 2 * 64 ** 3 / (0.5 * 1e6), "time_ms": {"median": 0.5},
        "params": {"m": 64, "n": 64, "k": 64, "batch": 1}}


def _warnings():
    said = []
    return said, said.append


def test_a_tampered_cache_entry_fails_its_checksum_and_is_measured_again(tmp_path):
    said, warn = _warnings()
    cache = MeasurementCache(tmp_path / "m.db", warn=warn)
    cache.put("k1", GOOD)
    cache.put("k2", GOOD)
    assert cache.get("k1") == GOOD
    for key in ("k1", "k2"):
        cache.db.execute("UPDATE entries SET evaluation = ? WHERE key = ?", (json.dumps({**GOOD, "gflops": 99999}), key))
    assert cache.get("k1") is None and cache.get("k2") is None
    assert len(said) == 1 and str(tmp_path / "m.db") in said[0] and "checksum" in said[0]


@pytest.mark.parametrize("bad", [{"gflops": 99999.0, "time_ms": {"median": 0.5}},      # disagrees with its time
                                 {"gflops": 2 * 64 ** 3 / 1e-3, "time_ms": {"median": 1e-9}},  # above any device
                                 {"gflops": float("nan")}])
def test_an_implausible_measurement_is_discarded_even_with_a_valid_checksum(tmp_path, bad):
    said, warn = _warnings()
    cache = MeasurementCache(tmp_path / "m.db", warn=warn, ceiling_gflops=10_000.0)
    text = json.dumps({**GOOD, **bad})
    cache.db.execute("INSERT INTO entries VALUES (?, ?, ?, 0)", ("k", text, hashlib.sha256(text.encode()).hexdigest()))
    assert cache.get("k") is None and len(said) == 1
    cache.put("k", {**GOOD, **bad})            # and never stored
    assert cache.db.execute("SELECT COUNT(*) FROM entries").fetchone()[0] == 0


@pytest.mark.parametrize("damage", ["random", "empty", "truncated"])
def test_a_damaged_cache_file_is_set_aside_once_and_rebuilt(tmp_path, damage):
    path = tmp_path / "measurements.db"
    if damage == "random":
        path.write_bytes(os.urandom(10000))
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        _healthy_db(path)
        path.write_bytes(path.read_bytes()[:5000])
    said, warn = _warnings()
    cache = MeasurementCache(path, warn=warn)
    cache.put("k", GOOD)
    assert cache.get("k") == GOOD
    assert len(said) == 1 and str(path) in said[0] and (tmp_path / "measurements.db.1").exists()


# ---- arguments -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["--build-timeout", "nan"], "not a positive number of seconds"),
    (["--run-timeout=-inf"], "not a positive number of seconds"),
    (["--seed=-1"], "not a seed"),
    (["--seed", str(2**40)], "not a seed"),
    (["--time", "inf"], "positive number of seconds"),
    (["--budget", "0"], "not a positive integer"),
    (["--jobs", "100000"], "at most"),
    (["--shapes", "100000x100000x100000"], "choose a smaller problem"),
    (["--storage", "nosuchdb://x"], "no database driver"),
])
def test_tune_arguments_out_of_range_are_one_line_errors(tmp_path, args, message, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY_TUNE_CONFIG)
    try:
        code = main(["tune", str(config), "--out", str(tmp_path / "out"), "--no-cache", "--leaders", "0", *args])
    except SystemExit as exc:                  # argparse's refusal
        code = exc.code
    said = capsys.readouterr().err
    assert code == 2 and message in said and "Traceback" not in said, said


# ---- signals -------------------------------------------------------------------------------------------------

def _wait_for(path: Path, proc, predicate=lambda p: p.exists(), seconds=240):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate(path):
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def _completed_trials(url: str) -> int:
    try:
        study = optuna.load_study(study_name="tiny@64x64x64", storage=open_storage(url))
    except KeyError:
        return 0
    return sum(t.state == TrialState.COMPLETE for t in study.get_trials(deepcopy=False))


@pytest.mark.device
def test_sigterm_on_tune_prints_a_resume_command_that_finishes_the_same_study(tmp_path):
    config, out = tmp_path / "tiny.yaml", tmp_path / "study"
    config.write_text(TINY_TUNE_CONFIG)
    args = ["tune", str(config), "--out", str(out), "--shapes", "64x64x64", "--budget", "3", "--seed", "3",
            "--strategy", "random", "--no-cache", "--heartbeat", "1"]
    proc = subprocess.Popen([sys.executable, "-m", "xegemm", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    url = f"sqlite:///{out / 'study.db'}"
    _wait_for(out / "study.db", proc, lambda p: p.exists() and _completed_trials(url) >= 1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err
    command = err.split("resume: ", 1)[1].strip()
    for option in ("--shapes 64x64x64", "--budget 3", "--seed 3", "--strategy random", "--no-cache",
                   "--heartbeat 1", f"--out {out}"):
        assert option in command, command
    # the command names the program as it was started (here `python -m xegemm`): it runs as printed
    assert command.startswith(f"{sys.executable} -m xegemm tune "), command
    resumed = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _completed_trials(url) >= 3
    assert json.loads((out / "best.json").read_text())["shapes"]["64x64x64"]["best"]


@pytest.mark.device
def test_two_ctrl_c_during_run_still_write_the_reports(tmp_path):
    config, out = tmp_path / "tiny.yaml", tmp_path / "out"
    config.write_text(TINY_TUNE_CONFIG.replace("pipeline.prefetch: [0, 1, 2]", "pipeline.prefetch: [0, 1, 2, 3]"))
    proc = subprocess.Popen([sys.executable, "-m", "xegemm", "run", str(config), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(out / "results.jsonl", proc, lambda p: p.exists() and p.read_text().count("\n") >= 2)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert "resume with: xegemm run" in err, err
    assert (out / "report.html").exists() and json.loads((out / "results.json").read_text())["variants"]


@pytest.mark.ocloc
@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_build_writes_build_json_for_what_was_built(tmp_path, how):
    out = tmp_path / "build"
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY_TUNE_CONFIG)
    proc = subprocess.Popen([sys.executable, "-m", "xegemm", "build", str(config), "--out", str(out),
                             "--capabilities", "cl_intel_subgroup_2d_block_io"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(out, proc, lambda p: len(list(p.glob("**/*.isa*")) + list(p.glob("**/*.bin"))) >= 1
              or len([d for d in p.glob("*") if d.is_dir()]) >= 2, seconds=300)
    proc.send_signal(how)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + how and "Traceback" not in err, err
    assert "interrupted" in err and "build.json" in err, err
    build = json.loads((out / "build.json").read_text())
    assert build["interrupted"] is True and len(build["variants"]) < TINY_LEGAL + 3


# ---- a database that goes away and comes back ----------------------------------------------------------------

def test_every_storage_call_optunas_cache_makes_is_retried():
    """Optuna's cache in front of an RDB storage calls some private storage methods directly; a call the
    retries do not wrap stops a tune at the first server restart."""
    import inspect
    import re

    from optuna.storages import _cached_storage
    called = set(re.findall(r"self\._backend\.(_[a-z]\w*)\(", inspect.getsource(_cached_storage)))
    assert called and called <= set(CACHE_CALLS), called - set(CACHE_CALLS)
    storage = open_storage("sqlite:///:memory:")
    assert all(hasattr(getattr(storage, name), "__wrapped__") for name in CACHE_CALLS)


_POPPER = """
import os, sys
from pathlib import Path
import optuna
from xegemm.tune.study import open_storage
optuna.logging.set_verbosity(optuna.logging.ERROR)
study = optuna.load_study(study_name=sys.argv[2], storage=open_storage(sys.argv[1]))
barrier = Path(sys.argv[3])
(barrier / str(os.getpid())).touch()
while len(os.listdir(barrier)) < 2:     # both processes are ready: they start popping together
    pass
popped = []
while (trial_id := study._pop_waiting_trial_id()) is not None:
    popped.append(trial_id)
print(*popped)
"""


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_two_processes_never_pop_the_same_enqueued_trial(tmp_path, backend, request):
    """Optuna's queue reads a WAITING trial, then sets it RUNNING.  On SQLite, Python's driver used to run that
    read outside the write's transaction, and two workers could both pop one trial (then one told the
    other's running trial FAIL as a duplicate); every SQLite transaction now begins IMMEDIATE.  Two processes
    drain one queue of 80 trials, released at the same instant, twice."""
    url = (f"sqlite:///{tmp_path / 'queue.db'}" if backend == "sqlite" else request.getfixturevalue("postgresql_url"))
    for attempt in range(2):
        name = f"queue-{tmp_path.name}-{attempt}"
        study = optuna.create_study(study_name=name, storage=open_storage(url))
        for x in range(80):
            study.enqueue_trial({"x": x})
        barrier = tmp_path / f"ready-{attempt}"
        barrier.mkdir()
        procs = [subprocess.Popen([sys.executable, "-c", _POPPER, url, name, str(barrier)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
        popped = []
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            popped.append(out.split())
        assert sorted(popped[0] + popped[1], key=int) == [str(t._trial_id) for t in study.get_trials()], \
            f"popped by both: {sorted(set(popped[0]) & set(popped[1]), key=int)}"


def test_a_lost_connection_is_transient_even_when_raised_while_handling_another():
    from sqlalchemy.exc import OperationalError, PendingRollbackError

    class Orig(Exception):
        pass
    lost = OperationalError("SELECT 1", {}, Orig("terminating connection due to administrator command"))
    try:
        try:
            raise lost
        except OperationalError:
            raise PendingRollbackError("Can't reconnect until invalid transaction is rolled back")  # noqa: B904
    except PendingRollbackError as exc:
        assert _transient(exc)
    wrong = OperationalError("SELECT 1", {}, Orig("no such table: trials"))
    assert not _transient(wrong)


@pytest.mark.device
def test_a_postgresql_restart_costs_a_pause_not_a_worker(tmp_path, postgresql_server):
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY_TUNE_CONFIG)
    url = postgresql_server.url
    proc = subprocess.Popen([sys.executable, "-m", "xegemm", "tune", str(config), "--storage", url, "--study",
                             "outage", "--budget", "5", "--strategy", "random", "--seed", "1", "--no-cache", "--leaders", "0",
                             "--out", str(tmp_path / "out")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)

    storage = open_storage(url)          # one engine for the polls: a server has a limited number of connections

    def trials(_):
        try:
            study = optuna.load_study(study_name="outage@64x64x64", storage=storage)
        except KeyError:
            return False
        return sum(t.state == TrialState.COMPLETE for t in study.get_trials(deepcopy=False)) >= 1

    _wait_for(tmp_path, proc, trials)
    storage.engine.dispose()
    postgresql_server.stop("fast")
    time.sleep(3)
    postgresql_server.start()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err
    best = json.loads((tmp_path / "out" / "best.json").read_text())["shapes"]["64x64x64"]
    assert best["best"] and best["trials"] - best["pruned"] >= 5


@pytest.mark.device
def test_a_postgresql_outage_past_the_retries_names_the_cause_and_the_resume_command(tmp_path, postgresql_server):
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY_TUNE_CONFIG)
    url = postgresql_server.url
    proc = subprocess.Popen([sys.executable, "-m", "xegemm", "tune", str(config), "--storage", url, "--study",
                             "gone", "--budget", "5", "--no-cache", "--leaders", "0", "--out", str(tmp_path / "out")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "XEGEMM_DB_RETRY_S": "2"})

    storage = open_storage(url)

    def started(_):
        try:
            study = optuna.load_study(study_name="gone@64x64x64", storage=storage)
        except KeyError:
            return False
        return len(study.get_trials(deepcopy=False)) >= 1

    _wait_for(tmp_path, proc, started)
    storage.engine.dispose()
    postgresql_server.stop("fast")
    try:
        _, err = proc.communicate(timeout=300)
    finally:
        postgresql_server.start()
    said = one_line_error(subprocess.CompletedProcess(proc.args, proc.returncode, "", err))
    assert "the study database" in said and f"resume with: {sys.executable} -m xegemm tune" in said, said
    assert "max length" not in said and SECRET not in said, said


def test_an_unknown_postgresql_database_is_named(postgresql_server, monkeypatch):
    monkeypatch.setenv("XEGEMM_DB_RETRY_S", "0")
    url = postgresql_server.url.rsplit("/", 1)[0] + "/no_such_database"
    with pytest.raises(StorageError, match="unknown database"):
        open_storage(url)


def test_the_readme_postgresql_form_works_as_written(postgresql_server):
    storage = open_storage(postgresql_server.url)       # postgresql://user:password@host:port/db
    assert storage.engine.dialect.driver == "psycopg"
    storage.engine.dispose()


# ---- start-up and internal errors ----------------------------------------------------------------------------

def test_an_address_space_limit_at_start_up_is_named_and_no_reinstall_is_advised():
    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (400 << 20, resource.RLIM_INFINITY))
    done = subprocess.run([sys.executable, "-m", "xegemm", "devices"], capture_output=True, text=True, timeout=120,
                          preexec_fn=limited)
    said = one_line_error(done)
    assert "ulimit -v" in said and "rm -rf" not in said and "reinstall" not in said, said


def test_an_internal_error_is_one_line_with_the_log_path(monkeypatch, tmp_path, capsys):
    """The last line of defence, for a bug nobody has found yet: the command is made to fail from inside."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    def broken(args):
        raise RuntimeError("a bug\nwith a second line")
    monkeypatch.setattr("xegemm.cli.cmd_support", broken)
    assert main(["support"]) == 70
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and "internal error: RuntimeError: a bug;" in said
    log = Path(said.split("traceback is in ", 1)[1].split(" (please", 1)[0])
    assert log.parent == tmp_path / "xegemm" / "errors" and "Traceback" in log.read_text()
