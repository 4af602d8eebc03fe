"""A tuned study as optuna-dashboard shows it: a real ``optuna-dashboard`` process on 127.0.0.1 against the SQLite
study a real tiny tune made, read through its JSON API (the one its web page reads)."""

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from xegemm.config.schema import plain_data
from xegemm.tune import tune
from xegemm.tune.space import TuneSpace, choice_label

from conftest import TINY_LEGAL, TINY_PRUNED

START_S = 60          # the dashboard's start-up, at most
STOP_S = 10


def _dashboard() -> str:
    found = shutil.which("optuna-dashboard") or str(Path(sys.executable).with_name("optuna-dashboard"))
    if not Path(found).exists():
        pytest.skip("optuna-dashboard is not installed: pip install -e '.[test]'")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(port: int, path: str):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
        return json.loads(answer.read())


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dash")
    from conftest import TINY_TUNE_CONFIG
    config = tmp / "tiny.yaml"
    config.write_text(TINY_TUNE_CONFIG)
    # TPE proposes from the product of the tile's field parameters: outside proposals and duplicates happen
    result = tune(config, strategy="tpe", budget=7, seed=3, out=tmp / "out", cache=tmp / "cache.db",
                  progress=False, leaders=0)
    return result


@pytest.fixture(scope="module")
def dashboard(tuned):
    port = _free_port()
    log = open(tuned.out / "dashboard.log", "w")
    process = subprocess.Popen([_dashboard(), "--host", "127.0.0.1", "--port", str(port), "--quiet",
                                f"sqlite:///{tuned.out / 'study.db'}"], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_S
        while True:
            try:
                _get(port, "/api/studies")
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if process.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail(f"optuna-dashboard did not start: {(tuned.out / 'dashboard.log').read_text()[-500:]}")
                time.sleep(0.3)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(STOP_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_S)
        log.close()


def test_the_dashboard_shows_the_metric_name_separate_tile_parameters_and_each_point_complete_once(tuned, dashboard):
    studies = _get(dashboard, "/api/studies")["study_summaries"]
    (summary,) = [s for s in studies if s["study_name"] == "tiny@64x64x64"]
    study = _get(dashboard, f"/api/studies/{summary['study_id']}?after=0")
    assert study["objective_names"] == ["GFLOP/s"]
    names = {p["name"] for p in study["union_search_space"]}
    assert {"tile.workgroup", "tile.subgroups", "pipeline.prefetch"} <= names and "tile" not in names
    complete = [t for t in study["trials"] if t["state"] == "Complete"]
    points = [tuple(sorted((p["name"], p["param_external_value"]) for p in t["params"])) for t in complete]
    assert complete and len(points) == len(set(points)), "a point is COMPLETE twice"
    workgroups = {p["param_external_value"] for t in complete for p in t["params"] if p["name"] == "tile.workgroup"}
    assert all("x" in w and "{" not in w for w in workgroups)
    # the study's user attributes stay small: the extension list is a hash and a file beside the study
    attrs = {a["key"]: a["value"] for a in study["user_attrs"]}
    assert attrs["shape"] == "64x64x64" and attrs["objective"] == "GFLOP/s" and attrs["strategy"] == "tpe"
    assert attrs["measured on"] and len(attrs["measured on"]) < 200
    device = tuned.studies["64x64x64"].user_attrs["xegemm"]["device"]
    assert "extensions" not in device and len(device["extensions_sha256"]) == 16
    listed = json.loads((tuned.out / device["extensions_file"]).read_text())["extensions"]
    assert len(listed) == device["extensions_count"] > 0


def test_duplicates_and_outside_proposals_are_never_complete(tuned):
    storage = f"sqlite:///{tuned.out / 'study.db'}"
    study = optuna.load_study(study_name="tiny@64x64x64", storage=storage)
    trials = study.get_trials(deepcopy=False)
    for t in trials:
        if "duplicate_of" in t.user_attrs:
            assert t.state == TrialState.FAIL and t.user_attrs["reason"]
        if t.user_attrs.get("outside_sweep"):
            assert t.state == TrialState.PRUNED and t.user_attrs["reason"].startswith("outside the sweep")
    # TPE's 5 random start-up proposals fall in the product of the tile's fields (12 of its 36 are points)
    assert tuned.tallies["64x64x64"].outside == sum(bool(t.user_attrs.get("outside_sweep")) for t in trials) > 0
    owners = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(owners) == 7 and len({json.dumps(t.params, sort_keys=True) for t in owners}) == 7


def test_an_older_study_with_one_json_parameter_per_axis_is_read_as_it_was_made(tmp_path):
    """A study made before the field split stored the tile as its JSON; its space keeps that spelling."""
    from conftest import TINY_TUNE_CONFIG
    from xegemm.config import load_config
    from xegemm.config.shapes import Shape
    from xegemm.lowering import Lowering

    path = tmp_path / "tiny.yaml"
    path.write_text(TINY_TUNE_CONFIG)
    config = load_config(path)
    old = TuneSpace(config, Shape(64, 64, 64), Lowering("portable"), fields=False)
    new = TuneSpace(config, Shape(64, 64, 64), Lowering("portable"))
    assert list(old.grid()) == ["tile", "pipeline.prefetch"]
    assert list(new.grid()) == ["tile.workgroup", "tile.subgroups", "pipeline.prefetch"]
    tile = {"subgroups": [2, 2], "workgroup": [32, 64, 32]}
    assert plain_data(old.point({"tile": choice_label(tile), "pipeline.prefetch": 1})["tile"]) == tile
    assert plain_data(new.point({"tile.workgroup": "32x64x32", "tile.subgroups": "2x2",
                                 "pipeline.prefetch": 1})["tile"]) == tile
    assert new.point({"tile.workgroup": "32x64x32", "tile.subgroups": "1x1", "pipeline.prefetch": 1}) is None
    assert old.size == new.size == (TINY_LEGAL + TINY_PRUNED)
