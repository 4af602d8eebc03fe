"""Reliability of `run`: builds and launches in worker processes with time limits, real faults, interrupted
and concurrent runs, damaged results, unusable output directories.  Everything here runs for real: real
workers on the real default device, real signals, real files."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from xegemm import evaluate
from xegemm.errors import XegemmError
from xegemm.evaluate.isolated import TimeLimits
from xegemm.jobs.pipeline import run

ROOT = Path(__file__).resolve().parents[1]
CONFIG = """\
name: iso
problem: {m: 48, n: 40, k: 40}
tile: {workgroup: [32, 32, 32], subgroups: [1, 2]}
profile: {warmup: 1, repeats: 2}
sweep:
  pipeline.prefetch: [0, 1, 2]
"""
BODY_START = "    A += get_group_id(2) * batch_stride_a;"


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "iso.yaml"
    path.write_text(CONFIG)
    return path


def _fault_in_first(monkeypatch, fault: str):
    """Inject ``fault`` (C) at the start of the first variant's kernel body; the others stay intact."""
    original, seen = evaluate.render_variant, []

    def render(pv, lowering):
        source = original(pv, lowering)
        seen.append(pv.name)
        return source.replace(BODY_START, fault + "\n" + BODY_START, 1) if len(seen) == 1 else source
    monkeypatch.setattr(evaluate, "render_variant", render)


def _statuses(results):
    return [v.status for v in results.variants]


def test_a_kernel_that_never_finishes_times_out_and_the_sweep_goes_on(config, tmp_path, monkeypatch):
    _fault_in_first(monkeypatch, "    { volatile int spin = 1; while (spin) { } }")
    started = time.monotonic()
    results = run(config, out_dir=tmp_path / "out", progress=None, limits=TimeLimits(run_s=8))
    assert time.monotonic() - started < 300
    by_status = {}
    for v in results.variants:
        by_status.setdefault(v.status, []).append(v)
    assert len(by_status["timeout"]) == 1 and len(by_status["ok"]) == 2, _statuses(results)
    assert "exceeded the run time limit of 8 s" in by_status["timeout"][0].reason


@pytest.mark.parametrize("sig, stage, status", [(signal.SIGSEGV, "build", "failed_build"),
                                                (signal.SIGKILL, "run", "error")])
def test_a_worker_killed_by_a_signal_costs_one_variant(config, tmp_path, monkeypatch, sig, stage, status):
    # an empty program cache: a build loaded from it takes milliseconds and the signal would land after it
    monkeypatch.setenv("XEGEMM_CACHE_DIR", str(tmp_path / "programs"))
    if stage == "run":   # time each kernel for 0.4 s, so that the signal lands while it runs, not after
        config.write_text(CONFIG.replace("repeats: 2}", "repeats: 2, min_time_ms: 400}"))
    killed = []

    def on_stage(current, pid):
        if current == stage and not killed:
            os.kill(pid, sig)
            killed.append(pid)
    results = run(config, out_dir=tmp_path / "out", progress=None, on_stage=on_stage)
    assert killed
    statuses = _statuses(results)
    assert statuses.count(status) == 1 and statuses.count("ok") == 2, results.variants
    dead = next(v for v in results.variants if v.status == status)
    assert f"killed by {sig.name} during the {stage}" in dead.reason


def test_a_source_the_compiler_rejects_is_failed_build_with_its_log(config, tmp_path, monkeypatch):
    _fault_in_first(monkeypatch, "    this is not OpenCL C;")
    results = run(config, out_dir=tmp_path / "out", progress=None)
    bad = [v for v in results.variants if v.status == "failed_build"]
    assert len(bad) == 1 and Path(bad[0].log).read_text().count("error") >= 1
    assert _statuses(results).count("ok") == 2


def test_a_problem_too_big_for_the_machine_is_a_clear_error_before_any_work(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text("problem: {m: 100000, n: 100000, k: 100000}\n")
    started = time.monotonic()
    with pytest.raises(XegemmError, match=r"problem 100000x100000x100000 needs about .* GiB of host memory"):
        run(path, out_dir=tmp_path / "out", progress=None)
    assert time.monotonic() - started < 30 and not (tmp_path / "out").exists()


@pytest.mark.parametrize("make_bad", ["file in the way", "under a file", "proc", "read-only"])
def test_an_unusable_output_directory_is_a_clear_error_before_any_work(config, tmp_path, make_bad):
    if make_bad == "file in the way":
        out = tmp_path / "taken"
        out.write_text("x")
        want = "is a file, not a directory"
    elif make_bad == "under a file":
        (tmp_path / "f").write_text("x")
        out, want = tmp_path / "f" / "sub", "is a file, not a directory"
    elif make_bad == "proc":
        out, want = Path("/proc/xegemm-out"), "cannot write the results directory /proc/xegemm-out"
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only directories; the /proc case covers an unwritable path")
        out = tmp_path / "ro"
        out.mkdir(mode=0o500)
        want = "Permission denied"
    done = subprocess.run([sys.executable, "-m", "xegemm", "run", str(config), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and want in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert str(out) in done.stderr


def _run_cli(config, out, **kw):
    return subprocess.Popen([sys.executable, "-m", "xegemm", "run", str(config), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _content(results_dir: Path) -> list[tuple]:
    """What a report says, timings aside."""
    data = json.loads((results_dir / "results.json").read_text())
    return sorted((v["name"], v["status"], v.get("reason"), v.get("max_abs_err")) for v in data["variants"])


def _wait_for_records(out: Path, count: int, proc) -> None:
    journal = out / "results.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.exists() and journal.read_text().count("\n") >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"no {count} records in time; {proc.poll()}")


@pytest.fixture(scope="module")
def whole_run(tmp_path_factory):
    """The sweep of CONFIG run once without interruption: what every interrupted and resumed run must equal."""
    where = tmp_path_factory.mktemp("whole")
    (where / "iso.yaml").write_text(CONFIG)
    run(where / "iso.yaml", out_dir=where / "run", progress=None)
    return where / "run"


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_an_interrupted_run_resumes_to_the_same_report(config, tmp_path, how, whole_run):
    whole = whole_run
    out = tmp_path / "cut"
    proc = _run_cli(config, out)
    _wait_for_records(out, 1, proc)
    proc.send_signal(getattr(signal, how))
    _, err = proc.communicate(timeout=120)
    if how != "SIGKILL":
        assert proc.returncode == {"SIGINT": 130, "SIGTERM": 143}[how], err     # 128 + the signal, as shells report
        assert "resume with: xegemm run" in err and "Traceback" not in err, err
        assert (out / "report.md").exists()          # partial reports were written
    run(config, out_dir=out, progress=None)
    lines = (out / "results.jsonl").read_text().splitlines()
    names = [json.loads(line)["result"]["name"] for line in lines]
    assert len(names) == len(set(names)) == 3         # every variant recorded exactly once
    assert _content(out) == _content(whole)


def test_a_second_run_into_the_same_directory_refuses(config, tmp_path):
    out = tmp_path / "out"
    first = _run_cli(config, out)
    deadline = time.monotonic() + 120
    while not (out / ".lock").exists() or "pid" not in (out / ".lock").read_text():
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.05)
    second = subprocess.run([sys.executable, "-m", "xegemm", "run", str(config), "--out", str(out)],
                            capture_output=True, text=True, timeout=120)
    assert second.returncode == 2 and "is in use by another xegemm run (pid" in second.stderr, second.stderr
    assert first.wait(timeout=600) == 0
    assert len(json.loads((out / "results.json").read_text())["variants"]) == 3


def test_a_damaged_results_journal_is_reported_and_its_good_rows_kept(config, tmp_path, capsys):
    out = tmp_path / "out"
    run(config, out_dir=out, progress=None)
    journal = out / "results.jsonl"
    lines = journal.read_text().splitlines()
    damaged = [lines[0], "{not json", json.dumps({"key": "x"}), lines[1], lines[2][:40]]
    journal.write_text("\n".join(damaged))     # a hand-edited line, a foreign record, a torn last line
    run(config, out_dir=out, progress=sys.stderr)
    err = capsys.readouterr().err
    assert f"{journal}:2: skipped" in err and f"{journal}:3: skipped" in err
    assert f"{journal}:5: an unfinished last line" in err
    assert err.count("(recorded earlier, kept)") == 2
    assert len(json.loads((out / "results.json").read_text())["variants"]) == 3
