"""Hostile state: forged cache entries (programs and measurements), a user's files where reports go, hand-edited
results, memory limits, resume hints, full and read-only disks, threads and processes sharing a Gemm or a cache.

Each test is named after its attack and makes it for real (real caches, files, processes, a tmpfs); the counts
are in docs/reliability.md ("State shared with others")."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import xegemm
from xegemm.cli import main
from xegemm.config import Config
from xegemm.epilogues.fixed import EpilogueSpec
from xegemm.evaluate.timing import gemm_flops
from xegemm.jobs.pipeline import run
from xegemm.library.dtypes import dtype
from xegemm.runtime import opencl, program_cache
from xegemm.runtime.program import build_source
from xegemm.verify.dense import Operands, reference

pytestmark = pytest.mark.device

ROOT = Path(__file__).resolve().parents[1]
TINY = """\
name: tiny
problem: {m: 48, n: 40, k: 40}
types: {a: bf16, b: bf16, acc: f32, c: f32}
tile: {workgroup: [32, 32, 32], subgroups: [1, 2]}
profile: {warmup: 1, repeats: 2}
"""
# what a forger puts in: the same kernel with its accumulator starting at 1 (a wrong D, same name and arguments)
HONEST, FORGED = "float acc_0_0_0 = 0", "float acc_0_0_0 = 1"


def python(script: str, *args, env=None, timeout=240, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, **kwargs)


def within(config: Config, a, b, d, c=None, bias=None) -> int:
    """How many elements of ``d`` are outside the verifier's bounds for ``config`` (0: it matches)."""
    a3 = np.asarray(a, np.float64).reshape((-1,) + a.shape[-2:])
    b3 = np.asarray(b, np.float64).reshape((-1,) + b.shape[-2:])
    spec = EpilogueSpec.of(config)
    c3 = None if c is None or not spec.reads_c else np.asarray(c, np.float64).reshape((-1,) + c.shape[-2:])
    ops = Operands(a3, b3, np.zeros(1, np.uint8), np.zeros(1, np.uint8), 0, 0, 0, c_in=c3,
                   bias=None if bias is None else np.asarray(bias, np.float64))
    ref = reference(config, ops)
    got = np.asarray(d, np.float64).reshape(ref.expected.shape)
    return int((~((got >= ref.low) & (got <= ref.high))).sum())


def inputs(rng, m, n, k, type_name="bf16", lead=()):
    t = dtype(type_name)
    return [t.round(rng.uniform(-1, 1, size=lead + shape)).astype(xegemm.library.dtypes.host_dtype(type_name))
            for shape in ((m, k), (k, n))]


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """A program cache of this test only (the session's stays untouched by the forgeries)."""
    root = tmp_path / "programs"
    monkeypatch.setenv(program_cache.CACHE_VARIABLE, str(root))
    return root


def forge(queue, source: str, options: str) -> tuple[str, bytes]:
    """Replace the cache entry of ``source`` with the binary of its mutant, under the honest key and with a valid
    checksum (what someone who can write the cache directory can do); returns (key, forged binary)."""
    key = build_source(queue, source, options).cache_key
    assert HONEST in source
    forged = opencl.program_from_source(queue.context, source.replace(HONEST, FORGED, 1), options).binary()
    assert program_cache.store(key, forged)
    assert program_cache.load(key) == forged      # checksum and key both pass: only verification can tell
    return key, forged


# ---- 1. a forged program-cache entry ---------------------------------------------------------------------------

def test_a_forged_program_cache_entry_is_verified_away_by_the_call_api(tmp_path, own_cache):
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    rng = np.random.default_rng(1)
    a, b = inputs(rng, 48, 40, 40)
    gemm = xegemm.load(path)
    assert within(gemm.candidates[0].config.with_overrides({"problem.m": 48}), a, b, gemm(a, b)) == 0
    choice = gemm.choose(48, 40, 40, 1, "bf16", "bf16", ("row",), ("row",))
    key, forged = forge(gemm.queue, choice.source, choice.options)
    # another process loads the program from the cache (this one keeps the program it built)
    proc = python(SHARED, str(path), "2")
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "failed verification" in warnings[0] and str(own_cache) in warnings[0]
    assert program_cache.load(key) not in (None, forged)                   # rebuilt from source and stored again
    again = python(SHARED, str(path), "3")                                 # the honest entry: checked, used, quiet
    assert again.returncode == 0 and again.stdout.strip() == "ok" and "warning" not in again.stderr, again.stderr


def test_a_forged_program_cache_entry_is_discarded_and_rebuilt_by_run(tmp_path, own_cache):
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    (honest,) = run(path, out_dir=tmp_path / "first", progress=None).variants
    assert honest.status == "ok"
    from xegemm.evaluate import plan_variants, render_variant
    from xegemm.evaluate.device import device_build_options
    from xegemm.lowering import choose_lowering
    from xegemm.runtime import describe, select_sycl_device
    from xegemm.runtime.program import make_queue
    device = select_sycl_device()
    lowering = choose_lowering(describe(device))
    (pv,) = plan_variants(xegemm.config.load_config(path), lowering)
    source = render_variant(pv, lowering)
    key, forged = forge(make_queue(device), source, device_build_options(lowering, pv.config))
    (again,) = run(path, out_dir=tmp_path / "second", progress=None).variants
    assert again.status == "ok" and again.extra["build_cached"] is False
    assert "failed verification" in again.extra["cache_discarded"]
    assert program_cache.load(key) not in (None, forged)


def test_a_program_cache_entry_filed_under_another_key_is_refused(own_cache):
    program_cache.store("a" * 64, b"\x7fELF some binary" * 8)
    entry = program_cache._path("a" * 64)
    other = program_cache._path("b" * 64)
    other.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(entry, other)                 # a valid entry, checksum and all, copied to another key's name
    before = program_cache.STATS["discarded"]
    assert program_cache.load("b" * 64) is None and not other.exists()
    assert program_cache.STATS["discarded"] == before + 1
    assert program_cache.load("a" * 64) == b"\x7fELF some binary" * 8


# ---- 2. a measurement re-signed below the physical ceiling -----------------------------------------------------

def test_a_measurement_re_signed_at_40000_gflops_is_measured_again(tmp_path, capsys):
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    cache = tmp_path / "measurements.db"
    assert main(["tune", str(path), "--out", str(tmp_path / "a"), "--cache", str(cache), "--leaders", "0"]) == 0
    import sqlite3
    db = sqlite3.connect(cache)
    (key, text), = db.execute("SELECT key, evaluation FROM entries").fetchall()
    row = json.loads(text)
    assert row["status"] == "ok"
    flops = gemm_flops(48, 40, 40, 1)
    row["gflops"], row["time_ms"]["median"] = 40_000.0, flops / 40_000e9 * 1e3     # consistent with its own time
    forged = json.dumps(row)
    db.execute("UPDATE entries SET evaluation = ?, checksum = ? WHERE key = ?",
               (forged, hashlib.sha256(forged.encode()).hexdigest(), key))
    db.commit()
    db.close()
    capsys.readouterr()
    assert main(["tune", str(path), "--out", str(tmp_path / "b"), "--cache", str(cache), "--leaders", "0"]) == 0
    err = capsys.readouterr().err
    assert "40000.0 GFLOP/s is above 64x the device's measured f32 multiply-add peak" in err and str(cache) in err
    best = json.loads((tmp_path / "b" / "best.json").read_text())
    (entry,) = best["shapes"].values()
    assert 0 < entry["best"]["gflops"] < 40_000


# ---- 3, 4. report: a user's report.html, a hand-edited results.json ---------------------------------------------

@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    base = tmp_path_factory.mktemp("run")
    (base / "tiny.yaml").write_text(TINY)
    run(base / "tiny.yaml", out_dir=base / "out", progress=None)
    return base / "out"


def test_report_never_replaces_a_report_html_it_did_not_write(run_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "report.html"
    mine.write_text("<p>my own notes</p>")
    assert main(["report", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "report.html exists and is not a report xegemm wrote" in err
    assert "--out" in err and mine.read_text() == "<p>my own notes</p>"
    mine.unlink()
    assert main(["report", str(run_dir)]) == 0 and main(["report", str(run_dir)]) == 0   # its own: replaced
    for fmt in ("csv", "json", "md"):
        (tmp_path / f"r.{fmt}").write_text("mine\n")
        assert main(["report", str(run_dir), "--out", f"r.{fmt}"]) == 2
        assert (tmp_path / f"r.{fmt}").read_text() == "mine\n"


def test_a_hand_edited_gflops_fast_is_one_line_naming_the_file_and_field(run_dir, tmp_path, capsys):
    edited = tmp_path / "edited"
    shutil.copytree(run_dir, edited)
    data = json.loads((edited / "results.json").read_text())
    data["variants"][0]["gflops"] = "fast"
    (edited / "results.json").write_text(json.dumps(data))
    assert main(["report", str(edited), "--out", str(tmp_path / "r.html")]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "results.json: variant 1" in lines[0] and "gflops is 'fast', not a number" in lines[0]
    assert "gflops is &#39;fast&#39;, not a number" in (tmp_path / "r.html").read_text()


# ---- 5. out of memory under ulimit -v -------------------------------------------------------------------------

def test_a_variant_out_of_memory_under_ulimit_v_1gb_names_the_limit(tmp_path):
    config = tmp_path / "big.yaml"
    config.write_text(TINY.replace("{m: 48, n: 40, k: 40}", "{m: 4096, n: 4096, k: 4096}"))

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    proc = subprocess.run([sys.executable, "-m", "xegemm", "run", str(config), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300, preexec_fn=limit)
    (variant,) = json.loads((tmp_path / "out" / "results.json").read_text())["variants"]
    assert variant["status"] == "error", proc.stderr
    assert variant["reason"].startswith("out of memory") and "ulimit -v" in variant["reason"]
    assert "limited to 1024 MiB" in variant["reason"]


# ---- 6. resume hints -----------------------------------------------------------------------------------------

def test_resume_hints_after_an_interrupt_carry_allow_code(tmp_path, monkeypatch):
    from xegemm.config.shapes import Shape
    from xegemm.tune.options import TuneOptions
    monkeypatch.setenv("XEGEMM_ALLOW_CODE", "1")
    monkeypatch.setenv("XEGEMM_CODE_PATH", str(tmp_path))
    hint = TuneOptions(budget=3).resume_command("c.yaml", [Shape(64, 64, 64, 1)], tmp_path / "out")
    assert f"--allow-code --code-path {tmp_path}" in hint
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    from xegemm.jobs.pipeline import RunInterrupted
    from xegemm.evaluate.isolated import IsolatedDeviceBuilder

    def interrupted(*args, **kwargs):        # Ctrl-C after the sweep, while the peak is measured
        raise KeyboardInterrupt
    monkeypatch.setattr(IsolatedDeviceBuilder, "measure_peak", interrupted)
    with pytest.raises(RunInterrupted) as caught:
        run(path, out_dir=tmp_path / "out", progress=None)
    assert f"--allow-code --code-path {tmp_path}" in str(caught.value)
    monkeypatch.delenv("XEGEMM_ALLOW_CODE")
    assert "--allow-code" not in TuneOptions().resume_command("c.yaml", [Shape(64, 64, 64, 1)], tmp_path)


# ---- 9. threads and processes ----------------------------------------------------------------------------------

def test_two_threads_calling_one_gemm_concurrently_get_correct_results(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    gemm = xegemm.load(path)
    config = gemm.candidates[0].config.with_overrides({"problem.m": 48, "problem.n": 40, "problem.k": 40})
    bad, errors = [], []

    def calls(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(15):
                a, b = inputs(rng, 48, 40, 40)
                bad.append(within(config, a, b, gemm(a, b)))
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(repr(exc))
    threads = [threading.Thread(target=calls, args=(seed,)) for seed in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(bad) == 30 and not any(bad), (errors, bad)


SHARED = """
import sys, numpy as np, xegemm
from xegemm.library.dtypes import dtype
gemm = xegemm.load(sys.argv[1])
rng = np.random.default_rng(int(sys.argv[2]))
t = dtype("bf16")
for _ in range(5):
    a = t.round(rng.uniform(-1, 1, (48, 40))).astype(xegemm.library.dtypes.host_dtype("bf16"))
    b = t.round(rng.uniform(-1, 1, (40, 40))).astype(xegemm.library.dtypes.host_dtype("bf16"))
    d = gemm(a, b)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(d - ref).max() < 1e-3, np.abs(d - ref).max()
print("ok")
"""


def test_two_processes_sharing_one_program_cache_both_compute_and_leave_it_healthy(tmp_path, own_cache):
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    procs = [subprocess.Popen([sys.executable, "-c", SHARED, str(path), str(seed)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for seed in (1, 2)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert all(out.strip() == "ok" and "warning" not in err for out, err in outs), outs
    entries = list(own_cache.rglob("*.bin"))
    assert entries and not list(own_cache.rglob("*.tmp"))
    assert all(program_cache.load(e.stem) for e in entries)              # every entry whole, checksum and key


RUNNING = SHARED.replace('print("ok")', 'print("ready", flush=True)\nsys.stdin.readline()\n'
                         'for _ in range(5):\n    assert np.abs(gemm(a, b) - ref).max() < 1e-3\nprint("ok")')


def test_a_cache_entry_replaced_under_a_running_process_never_gives_a_wrong_d(tmp_path, own_cache):
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    running = subprocess.Popen([sys.executable, "-c", RUNNING, str(path), "4"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert running.stdout.readline().strip() == "ready", running.stderr.read()
        gemm = xegemm.load(path)
        choice = gemm.choose(48, 40, 40, 1, "bf16", "bf16", ("row",), ("row",))
        key, forged = forge(gemm.queue, choice.source, choice.options)
        honest = opencl.program_from_source(gemm.queue.context, choice.source, choice.options).binary()
        stop = threading.Event()

        def replace_forever():              # another process's writes: forged and honest entries, atomically
            while not stop.is_set():
                for binary in (forged, honest):
                    program_cache.store(key, binary)
        writer = threading.Thread(target=replace_forever)
        writer.start()
        try:
            late = python(SHARED, str(path), "5")     # a process starting while the entry changes under it
            running.stdin.write("go\n")
            running.stdin.flush()
            out, err = running.communicate(timeout=120)
        finally:
            stop.set()
            writer.join()
    finally:
        running.kill()
    assert late.returncode == 0 and late.stdout.strip() == "ok", late.stderr
    assert running.returncode == 0 and out.strip() == "ok", err          # its own program, whatever the file
    assert program_cache.load(key) in (forged, honest)                   # never torn
    assert not list(own_cache.rglob("*.tmp"))


# ---- 8. a full disk, a read-only one ---------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs of this test, mounted and unmounted by it (root only)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (the full-disk and read-only attacks run as root)")
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _one_line(capsys, *words) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("xegemm: error")]
    assert len(err) == 1 and all(w in err[0] for w in words), err
    return err[0]


def test_a_full_and_a_read_only_disk_stop_run_tune_and_export_with_one_line_keeping_what_was_written(
        tmp_path, small_disk, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY)
    assert main(["run", str(config), "--out", str(small_disk / "run")]) == 0
    assert main(["tune", str(config), "--out", str(small_disk / "tune"), "--no-cache", "--leaders", "0"]) == 0
    capsys.readouterr()
    before = _files(small_disk)
    fd = os.open(small_disk / "filler", os.O_WRONLY | os.O_CREAT)     # the disk full to the last block
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    before["filler"] = (small_disk / "filler").read_bytes()
    view = tmp_path / "read-only"          # the same files through a read-only bind mount
    view.mkdir()
    subprocess.run(["mount", "--bind", str(small_disk), str(view)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True)
        for why, disk in (("No space left on device", small_disk), ("Read-only file system", view)):
            assert main(["run", str(config), "--out", str(disk / "run")]) == 2
            _one_line(capsys, why)
            assert main(["tune", str(config), "--out", str(disk / "tune"), "--no-cache", "--leaders", "0"]) == 2
            _one_line(capsys, why)
            assert main(["export", str(config), "--out", str(disk / f"export-{why[:2]}")]) == 2
            _one_line(capsys, why)
    finally:
        subprocess.run(["umount", "-l", str(view)], check=False)
    after = _files(small_disk)
    assert after == before, sorted(set(after) ^ set(before))      # every result kept, no file half-written
    assert not [p for p in small_disk.rglob("*") if p.name.endswith(".tmp")]
