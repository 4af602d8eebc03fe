"""The model check on bench/published_gemm.csv: structural facts only (sources, peaks, the report's keys and counts).

How well the model predicts the published figures is a measurement, reported in docs/benchmarks.md ("The static
model against published numbers"), never asserted here.
"""

import json
import math

import pytest

from bench import model_check
from xegemm.config import config_from_text
from xegemm.plan.planner import plan
from xegemm.library.targets import PARTS, TARGETS, get_part
from xegemm.model.calibration import CALIBRATED, GRIDS, Constants
from xegemm.model.static import predict_tflops


@pytest.fixture(scope="module")
def rows():
    return model_check.prepare(model_check.load())


@pytest.fixture(scope="module")
def result(rows):
    return model_check.report(rows)


def test_every_row_has_a_source_a_status_and_a_figure():
    data = model_check.load()
    assert len(data) >= 12
    assert len({row["id"] for row in data}) == len(data)
    for row in data:
        assert row["source"].startswith("https://"), row["id"]
        assert row["status"] in ("clear", "assumed", "excluded"), row["id"]
        assert row["note"], row["id"]
        if row["status"] != "excluded":
            assert float(row["published_tflops"]) > 0 and row["device"] in PARTS, row["id"]
            assert int(row["m"]) > 0 and int(row["n"]) > 0 and int(row["k"]) > 0, row["id"]


def test_the_json_report_has_the_keys_and_counts(capsys):
    assert model_check.main(["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out)[:4] == ["rows", "heldout_rows", "heldout_spearman", "heldout_median_error"]
    data = model_check.load()
    assert out["rows"] == len(data) == len(out["table"])
    predicted = [e for e in out["table"] if "predicted" in e]
    assert out["predicted_rows"] == len(predicted)
    assert out["heldout_rows"] == sum(e["split"] == "heldout" for e in predicted)
    assert out["calibration"]["rows"] + out["heldout_rows"] == len(predicted)
    assert abs(out["calibration"]["rows"] - out["heldout_rows"]) <= 1        # alternating rows
    assert -1 <= out["heldout_spearman"] <= 1 and out["heldout_median_error"] >= 0
    assert all(e["status"] != "excluded" for e in predicted)
    assert all("not_predicted" in e for e in out["table"] if "predicted" not in e)


def test_no_prediction_exceeds_the_products_peak(result):
    for entry in result["table"]:
        if "predicted" in entry:
            part = get_part(entry["device"])
            assert entry["model_peak_tflops"] <= 4 * part.bf16_tflops       # 4-bit DPAS: 4x the 16-bit rate
            assert 0 < entry["predicted"] <= entry["model_peak_tflops"] + 1e-9, entry["id"]
            if entry["types"].startswith(("bf16", "f16")):
                assert entry["predicted"] <= part.bf16_tflops, entry["id"]


def test_the_published_peaks_are_target_facts():
    assert get_part("max1550").bf16_tflops == pytest.approx(419.43)
    assert get_part("b580").bf16_tflops == pytest.approx(116.74)
    assert TARGETS["pvc"].part == "max1550" and TARGETS["bmg"].part == "b580"
    for part in PARTS.values():
        assert part.source and part.memory_gbs > 0 and part.xe_cores > 0 and part.target in TARGETS


def test_the_shipped_constants_lie_on_their_grids():
    for name in Constants.names():
        assert getattr(CALIBRATED, name) in GRIDS[name], name


def test_even_extreme_constants_stay_under_the_peak():
    config = config_from_text("problem: {m: 4096, n: 4096, k: 4096}\n"
                              "tile: {workgroup: [256, 256, 32], subgroups: [8, 4]}\n")
    fastest = Constants(**{name: max(grid) for name, grid in GRIDS.items()} | {"launch_us": 0.0})
    for part in PARTS.values():
        speed = predict_tflops(plan(config), part, fastest)
        assert speed.tflops <= part.bf16_tflops and math.isfinite(speed.tflops)


def test_bad_data_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("id,status,device\nx,clear,nowhere\n")
    assert model_check.main(["--data", str(bad)]) == 2
    assert "model_check:" in capsys.readouterr().err
