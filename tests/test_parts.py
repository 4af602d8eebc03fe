"""The typed parts of results (xegemm.library.parts): each record reads the JSON the files hold and writes it
back with the same keys, reads what older versions wrote, and the documents made from them (results.json,
trials.json, best.json, a study's metadata) keep their keys.  No device is needed: the data is written here
as the files hold it."""

import json

import pytest

from xegemm.evaluate.timing import Timing, Warmup
from xegemm.library.parts import (
    BuildFigures,
    Conditions,
    Confidence,
    DevicePeak,
    Reference,
    RunInfo,
    StudyInfo,
    TimeStats,
    TrialInfo,
    VariantParams,
)
from xegemm.library.record import DeviceRecord, Evaluation
from xegemm.reporting.model import groups, pooled_reference, source_facts
from xegemm.reporting.sources import load_source

PARAMS = {"m": 64, "n": 48, "k": 32, "batch": 1, "a": "bf16", "b": "bf16", "acc": "f32", "c": "f32",
          "layout": "row/col/row", "wg_m": 32, "wg_n": 32, "wg_k": 16, "sg_m": 2, "sg_n": 2, "subgroup_size": 16,
          "prefetch": 1, "grf": 256, "split_k": 4, "stream_k": 0, "swizzle": 1, "register_block": "all",
          "epilogue": "none", "atom_mma": None, "atom_a": "XE_2D_U16x32x16_LD_N", "atom_b": None, "atom_c": None}
TIMES = {"min": 0.9, "median": 1.0, "max": 1.2, "mean": 1.02, "cv": 0.05, "runs": 8,
         "warmup": {"runs": 3, "ms": 2.5, "settled": True, "steady_ms": 1.0, "round_runs": 1}}
CONDITIONS = {"loadavg": [0.5, 0.4, 0.3], "cpu_count": 2, "cpu_code_path": "avx512", "affinity_cpus": 2,
              "machine": "x86_64", "threads_env": {"OMP_NUM_THREADS": "2"}, "loadavg_after": [0.6, 0.4, 0.3]}
# as xegemm.evaluate.timing.measure_against_reference writes an interleaved reference
INTERLEAVED = {"provider": "numpy", "dtype": "f32", "numpy": "2.4.6", "openblas_coretype": None, "time_ms": TIMES,
               "gflops": 0.2, "interleaved": True, "high_cv": False, "attempts": 1, "conditions": CONDITIONS}


def test_each_part_writes_back_the_keys_it_read():
    assert VariantParams.from_dict(PARAMS).to_dict() == {k: v for k, v in PARAMS.items() if v is not None}
    assert TimeStats.from_dict(TIMES).to_dict() == TIMES
    assert Conditions.from_dict(CONDITIONS).to_dict() == CONDITIONS
    assert Reference.from_dict(INTERLEAVED).to_dict() == INTERLEAVED      # openblas_coretype None is kept
    peak = {"gflops": 100.0, "gbps": 20.0, "what": "f32 FMA and copy kernels"}
    assert DevicePeak.from_dict(peak).to_dict() == peak and DevicePeak.from_dict(peak).roofline
    assert not DevicePeak.from_dict({"error": "no queue"}).roofline


def test_keys_a_part_does_not_know_are_kept():
    ref = Reference.from_dict({**INTERLEAVED, "groups": 3, "problem": {"m": 8, "n": 8, "k": 8, "batch": 1}})
    assert ref.extra == {"groups": 3} and ref.problem == {"m": 8, "n": 8, "k": 8, "batch": 1}
    assert ref.to_dict()["groups"] == 3
    p = VariantParams.from_dict({**PARAMS, "new_knob": 7})
    assert p.extra == {"new_knob": 7} and p.to_dict()["new_knob"] == 7


def test_what_is_not_an_object_reads_as_nothing():
    for bad in (None, [], "x", 3):
        assert TimeStats.from_dict(bad) is None and Reference.from_dict(bad) is None
        assert Conditions.from_dict(bad) is None and DevicePeak.from_dict(bad) is None
        assert StudyInfo.from_dict(bad) is None
        assert VariantParams.from_dict(bad) == VariantParams()
    assert RunInfo.from_dict(None) == RunInfo()
    # a warm-up that is not an object is kept aside, not read as one
    assert TimeStats.from_dict({"median": 1.0, "warmup": 3}).warmup is None


def test_timing_writes_time_ms_through_time_stats():
    timing = Timing((1.0, 2.0, 3.0), Warmup(2, 1.5, True, 1.0))
    data = timing.as_dict()
    assert set(data) == {"min", "median", "max", "mean", "cv", "runs", "warmup"}
    assert TimeStats.from_dict(data) == TimeStats(1.0, 2.0, 3.0, 2.0, timing.cv, 3, Warmup(2, 1.5, True, 1.0).as_dict())
    assert "warmup" not in Timing((1.0,)).as_dict()


def test_variant_params_read_as_the_report_needs():
    p = VariantParams.from_dict(PARAMS)
    assert p.problem == (64, 48, 32, 1) and p.types == ("bf16", "bf16", "f32", "f32", "row/col/row")
    assert p.k_decomposition() == ("parallel", 4)
    assert VariantParams.from_dict({"stream_k": 8}).k_decomposition() == ("stream_k", 8)
    assert VariantParams().k_decomposition() == ("serial", 1)
    ev = Evaluation("k", "ok", None, dict(PARAMS), plan={"mma": "XE_8x16x16_F32BF16BF16F32_TT", "copy_b": "B2"})
    # the plan's atoms first, else the config's
    assert ev.atoms == ("XE_8x16x16_F32BF16BF16F32_TT", "XE_2D_U16x32x16_LD_N", "B2", None)


def test_an_evaluation_reads_its_parts():
    ev = Evaluation("k", "ok", None, dict(PARAMS), time_ms=TIMES, gflops=0.5, extra={"reference": INTERLEAVED})
    assert ev.timing == TimeStats.from_dict(TIMES) and ev.median_ms == 1.0 and ev.warmup == TIMES["warmup"]
    assert ev.reference.gflops == 0.2 and ev.reference.load1 == 0.5 and ev.high_cv is False
    untimed = Evaluation("k", "rejected", "no", {})
    assert untimed.timing == TimeStats() and untimed.reference is None and untimed.warmup == {}


def test_a_pooled_reference_keeps_the_keys_results_json_had():
    results = [Evaluation(f"k{i}", "ok", None, dict(PARAMS), time_ms=TIMES, gflops=0.5,
                          extra={"reference": {**INTERLEAVED, "time_ms": {**TIMES, "median": m, "mean": m}}})
               for i, m in enumerate((1.0, 3.0))]
    pooled = pooled_reference(results)
    assert pooled.pooled == 2 and pooled.median_ms == 2.0 and pooled.time_ms.runs == 16
    assert list(pooled.to_dict()) == ["provider", "dtype", "numpy", "openblas_coretype", "time_ms", "gflops",
                                      "interleaved", "pooled", "high_cv", "conditions"]
    assert set(pooled.to_dict()["time_ms"]) == {"min", "median", "max", "mean", "cv", "runs"}


def test_run_info_reads_older_spellings():
    old = {"config": "tiny", "capabilities": "igc-1.0.12504", "device": {"filter": "opencl:cpu:0", "driver": "1"}}
    info = RunInfo.from_dict(old)
    assert info.config.name == "tiny" and info.compiler_capabilities == "igc-1.0.12504"
    assert DeviceRecord.from_dict(info.device).filter_string == "opencl:cpu:0"
    assert info.when == "unknown" and RunInfo.from_dict({"started_at": "a", "written_at": "b"}).when == "a to b"


def test_study_info_round_trips_and_reads_an_older_study():
    meta = {"config": {"name": "tiny", "sweep": {}}, "strategy": "tpe", "command": None,
            "device": {"name": "CPU", "filter_string": "opencl:cpu:0"}, "objective": "GFLOP/s", "lowering": "portable",
            "capabilities": None, "capabilities_named": None, "shape": {"m": 64, "n": 64, "k": 64, "batch": 1},
            "reference": {k: v for k, v in INTERLEAVED.items() if k != "attempts"}}
    info = StudyInfo.from_dict(meta)
    assert info.to_dict() == meta and json.loads(json.dumps(info.to_dict())) == meta
    assert info.study_reference.gflops == 0.2 and info.config_info.name == "tiny"
    older = StudyInfo.from_dict({"config": {"name": "tiny"}, "strategy": "random", "shape": meta["shape"],
                                 "lowering": "portable", "device": {"filter": "opencl:cpu:0", "name": "CPU"}})
    assert older.reference is None and older.capabilities_named is None and older.study_reference is None
    assert set(older.to_dict()) >= set(StudyInfo.ALWAYS)


def test_trial_info_reads_the_tuners_attributes():
    attrs = {"shape": "64x64x64", "point": "p", "worker": "host:1", "retry_of": 3, "name": "k", "status": "ok"}
    assert TrialInfo.from_attrs(attrs) == TrialInfo("64x64x64", "p", "host:1", 3)
    assert TrialInfo.from_attrs({}) == TrialInfo()


@pytest.fixture
def older_run(tmp_path):
    """A results.json as an older version wrote it: the config by name, ``capabilities``, the device's older
    spellings, a study's ``kernel`` for the name, references without a provider."""
    out = tmp_path / "old"
    out.mkdir()
    row = {"kernel": "k_old", "status": "ok", "reason": None, "params": PARAMS, "time_ms": TIMES, "gflops": 0.4}
    ref = {"problem": {"m": 64, "n": 48, "k": 32, "batch": 1}, "gflops": 0.2, "time_ms": {"median": 2.0, "cv": 0.01},
           "numpy": "1.26.0"}
    (out / "results.json").write_text(json.dumps({
        "config": "tiny", "capabilities": "igc-1.0.12504", "device": {"filter": "opencl:cpu:0", "name": "CPU",
                                                                      "driver": "2024.1"},
        "conditions": {"loadavg": [1.5, 1.0, 0.5]}, "variants": [row], "references": [ref, "not a reference"]}))
    return out


def test_a_report_reads_an_older_results_file(older_run):
    src = load_source(older_run)
    assert [v.name for v in src.variants] == ["k_old"] and len(src.references) == 1
    (g,) = groups([src])
    assert g.reference.is_numpy and g.reference.name == "reference" and g.ratio(g.best) == pytest.approx(2.0)
    facts = dict(source_facts(src, [g]))
    assert facts["config"] == "tiny" and "igc-1.0.12504" in facts["lowering / compiler"]
    assert facts["device"].startswith("CPU (opencl:cpu:0") and facts["driver"] == "2024.1"
    assert src.info.conditions.load1 == 1.5


def test_conditions_keep_an_unreadable_governor_apart_from_an_older_file_without_one():
    unreadable = {"loadavg": [0.5, 0.4, 0.3], "cpu_governor": None, "timing_method": "event profiling"}
    c = Conditions.from_dict(unreadable)
    assert c.governor_recorded and c.cpu_governor is None and c.timing_method == "event profiling"
    assert c.to_dict() == unreadable
    read = Conditions.from_dict({"cpu_governor": "performance"})
    assert read.cpu_governor == "performance" and read.to_dict() == {"cpu_governor": "performance"}
    older = Conditions.from_dict({"loadavg": [1.0, 1.0, 1.0]})
    assert not older.governor_recorded and "cpu_governor" not in older.to_dict()


def _tune_dir(tmp_path, winners):
    """A trials.json with two passing trials of one shape: trial 0 the faster single measurement, trial 1 the
    one the leaders' re-timing may name."""
    out = tmp_path / "tuned"
    out.mkdir(parents=True)
    rows = [{"name": f"k{i}", "status": "ok", "reason": None, "params": PARAMS, "time_ms": TIMES, "gflops": g,
             "trial": i} for i, g in enumerate((0.5, 0.4))]
    (out / "trials.json").write_text(json.dumps({"kind": "tune", "variants": rows, "references": [],
                                                 **({"winners": winners} if winners is not None else {})}))
    return out


def test_a_tune_reports_the_winner_its_re_timing_named(tmp_path):
    problem = {"m": 64, "n": 48, "k": 32, "batch": 1}
    named = [{"problem": problem, "kernel": "k1", "trial": 1, "retimed": True, "separated": False}]
    (g,) = groups([load_source(_tune_dir(tmp_path / "a", named))])
    assert g.best.name == "k1" and "within the noise" in g.chosen_by
    # an older trials.json names none: the fastest single measurement heads it
    (older,) = groups([load_source(_tune_dir(tmp_path / "b", None))])
    assert older.best.name == "k0" and older.chosen_by is None
    # a damaged winner (no kernel) is not a winner
    (damaged,) = groups([load_source(_tune_dir(tmp_path / "c", [{"problem": problem}]))])
    assert damaged.best.name == "k0"
    assert RunInfo.from_dict({"winners": "x"}).winners == ()


def test_confidence_and_build_figures_read_what_the_tuner_and_the_build_wrote():
    record = {"retimed": True, "winner_trial": 3, "complete_trials": 5, "order": [3, 1], "leaders": [{}],
              "method": "m", "later_key": 1}
    c = Confidence.from_dict(record)
    assert c.retimed and c.winner_trial == 3 and c.current(5) and not c.current(6)
    assert c.to_dict() == {**record, "retimed": True}
    assert Confidence.from_dict({"retimed": "yes"}).retimed is False and Confidence.from_dict([]) is None
    figures = BuildFigures.from_extra({"isa": {"dpas": 4, "target": "pvc", "grf": 256, "sends": 9},
                                       "predicted": {"dpas": 4, "prefetch_per_kstep": {"prefetch_block2d": 2}},
                                       "measured_messages": {"load_block1d": 0, "prefetch": 1}})
    assert figures.built and figures.target == "pvc" and figures.grf == 256 and figures.stat("sends") == 9
    assert (figures.have("dpas"), figures.want("dpas"), figures.want("load_block1d")) == (4, 4, 0)
    assert (figures.prefetches_have, figures.prefetches_want) == (1, 2)
    assert not BuildFigures.from_extra({}).built and BuildFigures.from_extra({}).want("dpas") is None
