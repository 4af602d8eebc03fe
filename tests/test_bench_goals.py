"""The goals run's logic (``make bench-goals``, bench/goals*.py): goals and their verdicts, the tables, the code
paths and their environments, the round-robin timing, CLBlast's tuning results and cache and its two call
forms, the references' skip reasons, and the run's orchestration with a stand-in for the measuring process.  Nothing here times a
kernel: speed is the real run's business, and no test has a timing threshold."""

import itertools
import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

import bench.clblast_tuning as clblast_tuning
import bench.goals as goals
import bench.interleave as interleave
import bench.provision as provision
from bench.blas_worker import operands
from bench.clblast import CALLS, CLBlastGemm, find_clblast
from bench.code_paths import AVX2, AVX512, cpu_model, host_code_paths
from xegemm.runtime.cpu_path import host_flags
from bench.goals_table import evaluate_row, goal, markdown, path_table, tile_of
from bench.references import check_f32_gemm

ROOT = Path(__file__).resolve().parents[1]
KERNEL = "xegemm_bf16_bf16_f32_f32_ttt_16x32x32_sg1x1_dpas8x16x16_au16x16x32n_bu16x32x32v_cu32x8x16n_pf0_grf256"


def row(shape="1024x1024x1024", xegemm=100.0, **references):
    refs = {key: ({"skipped": value} if isinstance(value, str) else {"gflops": value, "label": key})
            for key, value in references.items()}
    x = {"kernel": KERNEL, "gflops": xegemm} if xegemm else {"failed": "failed_verify: 3 elements"}
    return {"type": "bf16", "shape": shape, "xegemm": x, "references": refs, "worst_cv": 0.04, "high_cv": []}


def result(path, rows, **extra):
    return {"code_path": path, "rows": rows, "settings": {}, "cpu": {"name": "Test CPU", "family": "6", "model": "1"},
            "device": {"filter": "opencl:cpu:0", "driver": "1.0"},
            "conditions_before": {"loadavg": [0.5, 0, 0], "affinity_cpus": 2},
            "conditions_after": {"loadavg": [0.7, 0, 0]}, **extra}


def test_the_goals_of_each_code_path():
    assert goal("avx512", "numpy", "1024x1024x1024") == 0.8
    assert goal("avx512", "numpy", "2048x2048x2048") == 0.7
    assert goal("avx512", "numpy", "4096x4096x1024") is None           # no goal is set there
    assert [goal("avx512", r, "4096x4096x1024") for r in ("plain_sgemm", "clblast", "onemkl")] == [1.5, 1.0, 2.0]
    assert goal("avx2", "numpy", "4096x4096x1024") == 0.5
    assert goal("avx2", "clblast", "1024x1024x1024") is None


def test_a_row_is_judged_per_reference_with_skips_and_failures_kept_apart():
    cells = evaluate_row("avx512", row(numpy=125.0, plain_sgemm=50.0, clblast=200.0, onemkl="dpnp is not installed"))
    assert cells["numpy"] == {"gflops": 125.0, "ratio": 0.8, "goal": 0.8, "verdict": "met"}
    assert (cells["plain_sgemm"]["ratio"], cells["plain_sgemm"]["verdict"]) == (2.0, "met")
    assert (cells["clblast"]["ratio"], cells["clblast"]["verdict"]) == (0.5, "not met")
    assert cells["onemkl"]["verdict"] == "not measured" and cells["onemkl"]["reason"] == "dpnp is not installed"
    assert evaluate_row("avx2", row(numpy=125.0))["numpy"]["verdict"] == "met"          # 0.8 >= 0.5
    assert evaluate_row("avx2", row(clblast=10.0))["clblast"]["verdict"] == "no goal"
    failed = evaluate_row("avx512", row(xegemm=None, numpy=125.0))
    assert failed["numpy"]["verdict"] == "not measured" and "failed_verify" in failed["numpy"]["reason"]


def test_the_table_shows_ratios_next_to_their_goals():
    high = {**row(numpy=200.0, plain_sgemm="its build failed"), "worst_cv": 0.31, "high_cv": ["numpy"]}
    high["xegemm"]["gflops_best"] = 120.0                                  # the fastest run, in parentheses
    lines = path_table(result("avx512", [high]))
    assert lines[0].startswith("| input | M x N x K | best variant | xegemm GFLOP/s | numpy f32 | vs numpy |")
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    assert cells[:6] == ["bf16", "1024x1024x1024", "16x32x32 sg1x1", "100 (120)", "200", "0.50 (goal 0.8: not met)"]
    assert cells[6:8] == ["skipped", "-"] and cells[-1] == "31% HIGH"
    assert len(cells) == len(lines[0].strip("|").split("|"))
    assert tile_of(KERNEL) == "16x32x32 sg1x1" and tile_of("other") == "other"


def test_the_report_counts_goals_and_says_what_was_skipped_or_left_out():
    results = [result("avx512", [row(numpy=100.0, clblast=50.0), row(shape="2048x2048x2048", xegemm=None)],
                      skipped={"onemkl": "dpnp is not installed"},
                      clblast_tuning={"status": "untuned defaults", "reason": "the tuner failed"})]
    text = markdown(results, {"avx2": "its process failed"}, {"started": "now", "seconds": 90})
    # 1024^3: numpy (1.0 >= 0.8) and CLBlast (2.0 >= 1.0) met, the plain SGEMM and oneMKL not measured;
    # 2048^3: no variant verified, so none of its four goals is measured
    assert "goals met 2, not met 0, not measured 6" in text
    assert "oneMKL f16 (dpnp): skipped - dpnp is not installed" in text
    assert "CLBlast: Xgemm parameters untuned defaults (the tuner failed)" in text
    assert "bf16 2048x2048x2048: no xegemm variant - failed_verify: 3 elements" in text
    assert "Not measured: its process failed" in text and "load average (1 min) 0.50 -> 0.70" in text
    assert "Warning" not in text
    noisy = result("avx512", [{**row(numpy=100.0), "high_cv": ["numpy"], "worst_cv": 0.4}, row(numpy=90.0)])
    assert "**Warning**: 1 of 2 rows kept a CV above 10% after a second measurement" in markdown([noisy], {}, {})


def test_code_paths_follow_the_host_and_set_each_library_alike():
    assert host_code_paths({"avx2", "avx512f"}) == ([AVX512, AVX2], {})
    paths, left_out = host_code_paths({"avx2", "fma"})
    assert paths == [AVX2] and "no AVX-512" in left_out["avx512"]
    machine = {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "1048576", "PATH": "/bin",
               "CL_CONFIG_CPU_TARGET_ARCH": "core-avx2"}
    assert AVX512.environment(machine) == {"PATH": "/bin"}
    assert AVX2.environment(machine) == {"PATH": "/bin", "CL_CONFIG_CPU_TARGET_ARCH": "core-avx2",
                                         "OPENBLAS_CORETYPE": "Haswell", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
    cpuinfo = "processor\t: 0\ncpu family\t: 6\nmodel\t\t: 167\nmodel name\t: Xeon\nflags\t\t: fpu avx2 avx512f\n" * 2
    assert host_flags(cpuinfo) == {"fpu", "avx2", "avx512f"}
    assert cpu_model(cpuinfo) == {"family": "6", "model": "167", "name": "Xeon"}


def test_every_side_runs_in_every_round_and_a_noisy_one_is_measured_again(monkeypatch):
    """bench.interleave times as xegemm run does (xegemm.evaluate.timing.time_rounds): each side warmed up, then per
    round each side in turn; a side whose CV stays high is measured once more and flagged."""
    monkeypatch.setenv("XEGEMM_PACE", "settle_ms=0")
    calls = []
    steady = {name: (lambda name=name: calls.append(name) or 1.0) for name in ("kernel", "numpy")}
    timings = interleave.round_robin(steady, rounds=3, launches=2)
    # the kernel's warm-up, numpy's warm-up, then one block per side per round, alternating
    assert [name for name, _ in itertools.groupby(calls)] == ["kernel", "numpy"] * 4
    for timing in timings.values():
        assert set(timing.samples_ms) == {1.0} and len(timing.samples_ms) >= 3 * 2 and timing.warmup.settled
    assert interleave.measure_sides(steady, 2, 2)["attempts"] == 1
    values = itertools.cycle([1.0, 5.0])
    noisy = {"kernel": lambda: 1.0, "numpy": lambda: next(values)}
    measured = interleave.measure_sides(noisy, 2, 2)
    assert measured["attempts"] == 2 and measured["high_cv"] == ["numpy"]
    assert measured["timings"]["kernel"].cv == 0.0


def _tuner_file(path: Path, ms: float, params: str, device="Test CPU"):
    path.write_text(json.dumps({"best_time": str(ms), "device": device,
                                "best_parameters": f"GEMMK=0 KWG=16 PRECISION=32 {params}"}))
    return path


def test_clblast_tuning_takes_the_fastest_phase_and_keeps_it_per_device(tmp_path, monkeypatch):
    files = [_tuner_file(tmp_path / "clblast_xgemm_1_32.json", 120.5, "MWG=64"),
             _tuner_file(tmp_path / "clblast_xgemm_2_32.json", 41.0, "MWG=32"),
             tmp_path / "clblast_xgemm_11_32.json"]
    files[2].write_text(json.dumps({"results": []}))                      # a phase that explored nothing
    best = clblast_tuning.best_result(files)
    assert best == {"parameters": {"GEMMK": 0, "KWG": 16, "MWG": 32}, "time_ms": 41.0, "device": "Test CPU",
                    "file": "clblast_xgemm_2_32.json"}
    monkeypatch.setattr(clblast_tuning, "cache_root", lambda: tmp_path / "cache")
    monkeypatch.setattr(clblast_tuning.shutil, "which", lambda name: f"/usr/bin/{name}")
    runs = []

    def tuner(workdir, fraction, timeout_s):
        runs.append(fraction)
        return {"files": files, "timed_out": False, "returncode": 0, "log_tail": "", "seconds": 1.0}

    monkeypatch.setattr(clblast_tuning, "run_tuner", tuner)
    device = SimpleNamespace(name="Test CPU", driver_version="1.0", device_type="cpu")
    first = clblast_tuning.tuned_parameters(device, None)
    assert first["status"] == "tuned" and first["parameters"]["MWG"] == 32 and first["from_phase"].endswith("2_32.json")
    again = clblast_tuning.tuned_parameters(device, None)
    assert again["status"] == "from the cache" and again["parameters"] == first["parameters"] and len(runs) == 1
    assert clblast_tuning.tuned_parameters(device, None, refresh=True)["status"] == "tuned" and len(runs) == 2
    monkeypatch.setenv("CL_CONFIG_CPU_TARGET_ARCH", "core-avx2")          # the AVX2 code path: tuned apart
    assert clblast_tuning.tuned_parameters(device, None, run=False)["status"] == "untuned defaults"
    other = SimpleNamespace(name="Other CPU", driver_version="1.0", device_type="cpu")
    mismatch = clblast_tuning.tuned_parameters(other, None)
    assert mismatch["status"] == "untuned defaults" and "another device" in mismatch["reason"]


def test_clblast_without_its_tuner_or_a_result_runs_untuned_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(clblast_tuning, "cache_root", lambda: tmp_path)
    device = SimpleNamespace(name="Test CPU", driver_version="1.0", device_type="cpu")
    monkeypatch.setattr(clblast_tuning.shutil, "which", lambda name: None)
    assert "clblast-utils" in clblast_tuning.tuned_parameters(device, None)["reason"]
    monkeypatch.setattr(clblast_tuning.shutil, "which", lambda name: name)
    monkeypatch.setattr(clblast_tuning, "run_tuner", lambda *a: {"files": [], "timed_out": True, "returncode": -9})
    stopped = clblast_tuning.tuned_parameters(device, None, timeout_s=60)
    assert stopped["status"] == "untuned defaults" and "stopped after 60 s" in stopped["reason"]


def test_references_that_cannot_be_installed_are_skipped_with_the_reason(monkeypatch):
    monkeypatch.setattr(provision, "clblast_missing", lambda: {"library": "libclblast1", "tuner": "clblast-utils"})
    not_root = provision.ensure_clblast(install=True, root=False)
    assert "this is not root" in not_root["library"] and ".ci/install-clblast.sh" in not_root["tuner"]
    assert "--no-install" in provision.ensure_clblast(install=False)["library"]
    monkeypatch.setattr(provision, "_run", lambda command: "E: Unable to locate package")
    failed = provision.ensure_clblast(install=True, root=True)
    assert failed["library"] == "installing CLBlast failed: E: Unable to locate package"
    monkeypatch.setattr(provision, "dpnp_installed", lambda: False)
    assert "DPNP=1" in provision.ensure_dpnp(opt_in=False) and "1.2 GB" in provision.ensure_dpnp(opt_in=False)
    assert provision.ensure_dpnp(opt_in=True).startswith("installing dpnp failed")
    monkeypatch.setattr(provision, "dpnp_installed", lambda: True)
    assert provision.ensure_dpnp(opt_in=False) is None


def test_the_run_measures_each_code_path_in_its_own_process_and_writes_the_tables(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(goals, "host_code_paths", lambda: ([AVX512, AVX2], {}))
    monkeypatch.setattr(goals, "reference_skips", lambda install, dpnp: {"onemkl": "dpnp is not installed"})
    started = []

    def child(command, env, cwd):
        path = command[command.index("--code-path") + 1]
        started.append((path, env.get("CL_CONFIG_CPU_TARGET_ARCH"), env.get("OPENBLAS_CORETYPE"), command))
        out = Path(command[command.index("--out") + 1])
        out.mkdir(parents=True)
        if path == "avx2":      # died after its first shape: the rows it wrote are kept, the path is incomplete
            (out / "result.json").write_text(json.dumps(result(path, [row(numpy=300.0)], incomplete="stopped")))
            return subprocess.CompletedProcess(command, 3)
        (out / "result.json").write_text(json.dumps(result(path, [row(numpy=100.0)])))
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(goals.subprocess, "run", child)
    status = goals.main(["--out", str(tmp_path), "--budget", "2"])
    assert status == 1                                                      # the AVX2 process failed
    assert [s[:3] for s in started] == [("avx512", None, None), ("avx2", "core-avx2", "Haswell")]
    assert "--budget" in started[0][3] and "onemkl=dpnp is not installed" in started[0][3]
    report = json.loads((tmp_path / "goals.json").read_text())
    assert [r["rows"][0]["goals"]["numpy"]["verdict"] for r in report["results"]] == ["met", "not met"]
    assert "exit status 3" in report["results"][1]["incomplete"]
    text = (tmp_path / "goals.md").read_text()
    assert "| bf16 | 1024x1024x1024 | 16x32x32 sg1x1 | 100 | 100 | 1.00 (goal 0.8: met)" in text
    assert "| 100 | 300 | 0.33 (goal 0.5: not met)" in text and "INCOMPLETE: its process failed (exit status 3" in text
    assert "skipping onemkl: dpnp is not installed" in capsys.readouterr().out
    (tmp_path / "goals.md").unlink()                  # --render judges a run again without measuring anything
    assert goals.main(["--render", str(tmp_path)]) == 0 and (tmp_path / "goals.md").read_text() == text
    assert len(started) == 2


def test_make_bench_goals_passes_its_options_through():
    done = subprocess.run(["make", "-n", "bench-goals", "DPNP=1", "BUDGET=3", "CLBLAST=retune"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    command = " ".join(done.stdout.split())
    assert "-m bench.goals --install-dpnp --budget 3 --clblast retune" in command


@pytest.mark.device
@pytest.mark.skipif(find_clblast() is None, reason="CLBlast is not installed (Debian package libclblast1; "
                    "make bench-goals installs it as root)")
def test_clblast_computes_the_row_major_product_in_both_call_forms(device_info):
    """The goals run times CLBlast in whichever of its two call forms is faster: both must compute C = A B."""
    a, b = operands(48, 80, 32, 2)
    with CLBlastGemm(device_info.name, device_info.device_type, a, b) as gemm:
        for call in CALLS:
            gemm.call = call
            gemm.run()
            check_f32_gemm(gemm.result(), a, b, call)
