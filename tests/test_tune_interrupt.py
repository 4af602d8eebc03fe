"""An interrupt (SIGINT) at any moment of `xegemm tune` leaves the summary (best.json, best.yaml, trials.json),
the report (report.html) and an exact resume command, which resumes the study to its budget: a real `xegemm
tune` process held at each moment (tests/interrupt_at.py) and sent a real SIGINT there."""

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from xegemm.tune.study import ClaimBook, open_storage

pytestmark = pytest.mark.device

HELPER = Path(__file__).with_name("interrupt_at.py")
BUDGET = 3


def _owners(out: Path) -> list:
    storage = open_storage(f"sqlite:///{out / 'study.db'}")
    trials = optuna.load_study(study_name="tiny@64x64x64", storage=storage).get_trials(deepcopy=False)
    return [trials[n] for n in ClaimBook(storage, "tiny@64x64x64").claims().values()]


@pytest.mark.parametrize("moment", ["build", "timing", "after-trials", "writing"])
def test_an_interrupt_at_any_moment_leaves_the_summary_the_report_and_the_resume_command(tiny_tune_config, tmp_path,
                                                                                          moment):
    out, marker = tmp_path / "study", tmp_path / "held"
    args = ["tune", str(tiny_tune_config), "--no-cache", "--strategy", "exhaustive", "--budget", str(BUDGET),
            "--leaders", "2", "--out", str(out)]
    with open(tmp_path / "err", "w") as err:
        proc = subprocess.Popen([sys.executable, str(HELPER), moment, str(marker), *args], stdout=subprocess.DEVNULL,
                                stderr=err)
        deadline = time.monotonic() + 300
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "err").read_text()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        code = proc.wait(120)
    text = (tmp_path / "err").read_text()
    assert code == 130, text
    assert "Traceback" not in text
    # the summary and the report of what the study holds
    best = json.loads((out / "best.json").read_text())
    assert "64x64x64" in best["shapes"] and (out / "report.html").stat().st_size > 0
    assert json.loads((out / "trials.json").read_text())["kind"] == "tune"
    if moment in ("after-trials", "writing"):
        assert best["shapes"]["64x64x64"]["best"] is not None and (out / "best.yaml").exists()
        assert "the best so far (64x64x64: " in text
    # the exact command to resume: this interpreter as `-m xegemm` (how it was run), every option, shell-quoted
    line = next(line for line in text.splitlines() if "retried on resume: " in line)
    words = shlex.split(line.split("retried on resume: ", 1)[1])
    assert words[:4] == [sys.executable, "-m", "xegemm", "tune"] and words[4] == str(tiny_tune_config)
    assert "--no-cache" in words and words[words.index("--leaders") + 1] == "2"
    assert words[words.index("--budget") + 1] == str(BUDGET) and words[words.index("--out") + 1] == str(out)
    resumed = subprocess.run(words, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    owners = _owners(out)
    assert sum(t.state == TrialState.COMPLETE for t in owners) == BUDGET
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in owners)
    final = json.loads((out / "best.json").read_text())["shapes"]["64x64x64"]
    assert final["best"] is not None and final["confidence"]["retimed"] is True
