"""The one record of a result (xegemm.library.record.Evaluation): every field survives each way it is written down and
read back (results.json rows, the journal, a study's user attributes), older spellings still load, and the CSV
files take their columns from one list."""

import csv
import io
from dataclasses import fields

import pytest

from xegemm.reporting.formats import results_csv
from xegemm.reporting.model import PROFILER_SHARED, Group, profiler_rows
from xegemm.library.record import COLUMNS, RECORD_FIELDS, STATUSES, DeviceRecord, Evaluation

PARAMS = {"m": 64, "n": 48, "k": 32, "batch": 1, "a": "bf16", "b": "bf16", "acc": "f32", "c": "f32",
          "layout": "row/row/row", "wg_m": 32, "wg_n": 32, "wg_k": 16, "sg_m": 2, "sg_n": 2, "subgroup_size": 16,
          "prefetch": 1, "grf": 256, "split_k": 1, "stream_k": 0, "swizzle": 1, "register_block": "all",
          "epilogue": "none", "atom_mma": None, "atom_a": None, "atom_b": None, "atom_c": None}
REFERENCE = {"provider": "numpy", "gflops": 20.0, "high_cv": False, "interleaved": True,
             "time_ms": {"median": 0.01, "cv": 0.02}}


def _full() -> Evaluation:
    """A result with every field set (but the report's and the build log)."""
    return Evaluation("xegemm_k", "ok", None, dict(PARAMS), plan={"mma": "XE_8x16x16_F32BF16BF16F32_TT"},
                      time_ms={"min": 0.009, "median": 0.01, "max": 0.02, "mean": 0.011, "cv": 0.03, "runs": 8},
                      gflops=19.66, gbps=2.5, max_abs_err=1e-6, max_rel_err=1e-5, bad_elements=0, build_s=1.5,
                      source_sha256="ab" * 32, log="logs/x.log", extra={"reference": REFERENCE}, trial=3,
                      finished_at=1.7e9, load1=0.5, cached=False, strategy="tpe", score=None, vs_numpy=0.983)


def test_every_field_survives_a_row_and_the_user_attributes():
    r = _full()
    assert Evaluation.from_row(r.to_row()) == r
    assert Evaluation.from_user_attrs(r.to_user_attrs()) == r
    saved = {f.name for f in fields(Evaluation)} - {"source", "source_kind", "build_log", "score"}
    assert saved <= set(r.to_row())                       # score is None: a record field left out until set
    assert r.numpy_gflops == pytest.approx(19.66 / 0.983) and r.high_cv is False


def test_record_fields_are_left_out_until_set():
    fresh = Evaluation("k", "rejected", "why", {})
    assert not set(RECORD_FIELDS) & set(fresh.to_row())
    assert Evaluation.from_row(fresh.to_row()) == fresh


def test_older_spellings_load():
    # a study written before the record: the kernel was "kernel"; build.json's ISA keys sit beside the row
    old_trial = {"shape": "64x64x64", "point": "p", "worker": "w", "status": "ok", "reason": None,
                 "kernel": "xegemm_old", "gflops": 3.0, "time_ms": {"median": 1.0}, "params": {"m": 64}}
    r = Evaluation.from_user_attrs(old_trial)
    assert (r.name, r.gflops, r.median_ms, r.problem[0]) == ("xegemm_old", 3.0, 1.0, 64)
    built = Evaluation.from_row({"name": "b", "status": "ok", "reason": None, "params": {}, "target": "pvc",
                                 "isa": {"dpas": 4}, "predicted": {"dpas": 4}})
    assert built.part("isa") == {"dpas": 4} and built.extra["target"] == "pvc"
    assert DeviceRecord.from_dict({"filter": "opencl:cpu:0", "name": "cpu", "driver": "1.0"}) == \
        DeviceRecord(filter_string="opencl:cpu:0", name="cpu", driver_version="1.0")


@pytest.mark.parametrize("row", [None, [], {"status": "ok"}, {"name": "x", "status": "finished"}, {"name": 3}])
def test_what_is_not_a_result_is_refused(row):
    with pytest.raises(ValueError):
        Evaluation.from_row(row)


def test_the_csv_files_share_one_column_list():
    """results.csv / trials.csv carry COLUMNS then the parameters; the profiler CSV the same values under
    cutlass_profiler's headings."""
    results = [_full(), Evaluation("xegemm_r", "rejected", "too big", dict(PARAMS))]
    rows = list(csv.DictReader(io.StringIO(results_csv(results, [{"shape": "s1"}, {"shape": "s2"}]))))
    assert list(rows[0])[:1 + len(COLUMNS)] == ["shape", *(c.name for c in COLUMNS)]
    assert set(PARAMS) <= set(rows[0]) and [r["status"] for r in rows] == ["ok", "rejected"]
    profiler = profiler_rows([Group(results[0].group_key, results)])
    for plain, prof in zip(rows, profiler):
        for heading, name in PROFILER_SHARED.items():
            assert str(prof[heading] if prof[heading] is not None else "") == plain[name], heading
    assert set(STATUSES) >= {r["status"] for r in rows}
