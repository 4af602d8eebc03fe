"""`xegemm report --compare`: run B against run A through each run's own interleaved reference, a change called
only beyond the noise of both runs (xegemm.reporting.comparison).  The results.json files are built here: the
same config's variants in a quiet run and in a run on a busy machine (slow numpy, high CVs)."""

import json

from xegemm.cli import main
from xegemm.library.record import Evaluation
from xegemm.reporting import render
from xegemm.reporting.comparison import NO_RELIABLE_DIFFERENCE, judge, Ratio

PROBLEM = {"m": 256, "n": 256, "k": 256, "batch": 1}
FLOP = 2 * 256 ** 3
PARAMS = {**PROBLEM, "a": "bf16", "b": "bf16", "acc": "f32", "c": "f32", "layout": "row/row/row",
          "wg_m": 32, "wg_n": 32, "wg_k": 16, "sg_m": 1, "sg_n": 2}


def _variant(name: str, gflops: float, cv: float, numpy_gflops: float, numpy_cv: float) -> dict:
    median = FLOP / (gflops * 1e6)
    ref_median = FLOP / (numpy_gflops * 1e6)
    reference = {"provider": "numpy", "dtype": "f32", "interleaved": True, "high_cv": max(cv, numpy_cv) > 0.10,
                 "gflops": numpy_gflops, "time_ms": {"min": ref_median, "median": ref_median, "max": ref_median,
                                                     "mean": ref_median, "cv": numpy_cv, "runs": 20}}
    e = Evaluation(name, "ok", None, dict(PARAMS), gflops=gflops, extra={"reference": reference},
                   time_ms={"min": median, "median": median, "max": median, "mean": median, "cv": cv, "runs": 20})
    return e.to_row()


def _run(path, variants, numpy_gflops, numpy_cv):
    path.mkdir()
    ref_median = FLOP / (numpy_gflops * 1e6)
    document = {"kind": "run", "config": {"name": "same-config"}, "variants": variants,
                "references": [{"problem": PROBLEM, "provider": "numpy", "gflops": numpy_gflops, "interleaved": True,
                                "time_ms": {"median": ref_median, "cv": numpy_cv, "runs": 80}}]}
    (path / "results.json").write_text(json.dumps(document))
    return path


def _rows(a, b) -> dict:
    return {r["name"]: r for r in json.loads(render([b], "json", baseline=[a]))["compare"]}


def test_a_noisy_run_with_slow_numpy_against_a_quiet_one_says_no_reliable_difference(tmp_path):
    # run A, quiet: numpy 40 GFLOP/s, CVs 2 %.  Run B, the same config on a busy machine: every side 30 % slower
    # (numpy too) with CVs of 12-15 %; raw GFLOP/s fall 30 %, which GFLOP/s alone would call slower
    a = _run(tmp_path / "a", [_variant("k1", 20.0, 0.02, 40.0, 0.02), _variant("k2", 10.0, 0.02, 40.0, 0.02)],
             40.0, 0.02)
    b = _run(tmp_path / "b", [_variant("k1", 14.0, 0.12, 28.0, 0.15), _variant("k2", 7.0, 0.13, 28.0, 0.15)],
             28.0, 0.15)
    rows = _rows(a, b)
    for name in ("k1", "k2"):
        r = rows[name]
        assert r["gflops_b"] / r["gflops_a"] < 0.75                     # what GFLOP/s alone would say: slower
        assert r["ratio_a"] == r["ratio_b"] == {"k1": 0.5, "k2": 0.25}[name]
        assert abs(r["speedup"] - 1) < 1e-9                            # the ratios to each run's numpy agree
        assert r["change"] == NO_RELIABLE_DIFFERENCE and r["stable_b"] is False
        assert r["cv_a"] < 0.03 and r["cv_b"] > 0.19                   # both runs' CVs carried
    # a real change beyond the noise is still called, even in a noisy run
    c = _run(tmp_path / "c", [_variant("k1", 28.0, 0.12, 28.0, 0.15), _variant("k2", 7.0, 0.13, 28.0, 0.15)],
             28.0, 0.15)
    assert _rows(a, c)["k1"]["change"] == "faster" and _rows(a, c)["k2"]["change"] == NO_RELIABLE_DIFFERENCE
    # the page and the Markdown say it too
    out = tmp_path / "cmp.html"
    assert main(["report", str(b), "--compare", str(a), "--out", str(out)]) == 0
    page = out.read_text()
    assert "no reliable difference: 2" in page and "ratio to the numpy reference" in page
    md = render([b], "md", baseline=[a])
    assert "| no reliable difference |" in md and "faster" not in md.split("## B against A")[1].split("|---")[1]


def test_two_quiet_runs_within_the_noise_are_the_same_and_beyond_it_differ(tmp_path):
    a = _run(tmp_path / "a", [_variant("k1", 20.0, 0.01, 40.0, 0.01)], 40.0, 0.01)
    b = _run(tmp_path / "b", [_variant("k1", 20.4, 0.01, 40.0, 0.01)], 40.0, 0.01)
    assert _rows(a, b)["k1"]["change"] == "same"
    slow = _run(tmp_path / "slow", [_variant("k1", 16.0, 0.01, 40.0, 0.01)], 40.0, 0.01)
    assert _rows(a, slow)["k1"]["change"] == "slower" and abs(_rows(a, slow)["k1"]["speedup"] - 0.8) < 1e-9


def test_the_noise_bound_is_two_sigma_of_both_ratios():
    quiet, noisy = Ratio(1.0, 0.02, "numpy", True, 0.01, 0.01, 40), Ratio(1.2, 0.15, "numpy", False, 0.1, 0.1, 30)
    speedup, noise, change = judge(quiet, noisy)
    assert abs(noise - 2 * (0.02 ** 2 + 0.15 ** 2) ** 0.5) < 1e-12 and change == NO_RELIABLE_DIFFERENCE
    assert judge(quiet, Ratio(1.4, 0.15, "numpy", False, 0.1, 0.1, 30))[2] == "faster"
    assert judge(quiet, Ratio(1.03, 0.01, "numpy", True, 0.01, 0.01, 40))[2] == "same"    # under MIN_CHANGE
