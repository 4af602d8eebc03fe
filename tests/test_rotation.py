"""Rotating buffers in timing: how many copies, the last-level cache read from Linux, the setting, the record,
and on the device that the launches go round the copies and that the last one's results are verified."""

import numpy as np
import pytest

from xegemm.config import config_from_text
from xegemm.config import ConfigError
from xegemm.evaluate import Evaluation, plan_variants
from xegemm.evaluate import timing
from xegemm.evaluate.device import DeviceBuilder, TimingObserver, VerifyObserver
from xegemm.evaluate.timing import (ROTATE_BELOW_BYTES, ROTATE_MAX_COPIES, NumpyReference, Rotation, Timing,
                                    conditions, launch_ms, rotation_for)
from xegemm.runtime.host import host_last_level_cache_bytes
from xegemm.library.parts import Conditions
from xegemm.lowering import Lowering
from xegemm.kernel.render import render_kernel

MIB = 1 << 20


def test_copies_cover_twice_the_last_level_cache_below_the_measured_size_and_never_when_off():
    assert rotation_for(8 * MIB, 100 * MIB) == Rotation(25, 8 * MIB)            # 25 x 8 MiB >= 2 x 100 MiB
    assert rotation_for(8 * MIB, 100 * MIB, "off") == Rotation(1, 8 * MIB)
    assert rotation_for(ROTATE_BELOW_BYTES, 100 * MIB).copies == 1              # auto: large enough already
    assert rotation_for(200 * MIB, 100 * MIB, "on").copies == 2                 # on: at least two
    assert rotation_for(1024, 100 * MIB).copies == ROTATE_MAX_COPIES            # bounded in count
    assert rotation_for(8 * MIB, 100 * MIB, memory_bytes=800 * MIB).copies == 12    # and to 1/8 of the memory
    assert rotation_for(8 * MIB, 0).copies == 1                                 # no cache known: nothing to evict
    assert Rotation(25, 8 * MIB).describe() == "rotating 25 buffers of 8.0 MiB"
    assert Rotation(3, 48 * 1024).describe() == "rotating 3 buffers of 48.0 KiB"
    assert Rotation(1, 8 * MIB).describe() == "same buffers"


def test_the_last_level_cache_is_the_highest_level_linux_lists(tmp_path):
    for index, (level, size) in enumerate([("1", "48K"), ("2", "2048K"), ("3", "491520K"), ("1", "32K")]):
        (tmp_path / f"index{index}").mkdir()
        (tmp_path / f"index{index}" / "level").write_text(level + "\n")
        (tmp_path / f"index{index}" / "size").write_text(size + "\n")
    assert host_last_level_cache_bytes(str(tmp_path)) == 491520 * 1024
    assert host_last_level_cache_bytes(str(tmp_path / "absent")) == 0


def test_the_setting_is_read_from_profile_and_a_bad_one_is_a_clear_error():
    text = "name: t\nproblem: {m: 8, n: 8, k: 8}\nprofile: {rotate: %s}\n"
    assert config_from_text(text % "false").profile.rotate == "off"
    assert config_from_text(text % "on").profile.rotate == "on"        # YAML's on is true
    assert config_from_text(text % "auto").profile.rotate == "auto"
    with pytest.raises(ConfigError, match="rotate"):
        config_from_text(text % "sometimes")


def test_the_buffers_are_recorded_in_the_conditions_and_the_reference_rotates_as_well():
    recorded = Conditions.from_dict(conditions(Rotation(4, 3 * MIB)))
    assert recorded.timing_buffers == "rotating 4 buffers of 3.0 MiB"
    assert "timing_buffers" not in conditions()
    ref = NumpyReference(4, 5, 6, rotation=Rotation(3, NumpyReference.working_bytes(4, 5, 6)))
    used = []
    for _ in range(4):
        used.append(ref._next)
        ref.sample()
    assert used == [0, 1, 2, 0] and ref.record(Timing((1.0,)))["timing_buffers"].startswith("rotating 3 buffers")


CONFIG = """
name: rotation
problem: {m: 64, n: 64, k: 64}
types: {a: bf16, b: bf16, acc: f32, c: f32}
tile: {workgroup: [32, 32, 32], subgroups: [2, 2]}
profile: {warmup: 1, repeats: 3, rotate: true}
"""


def test_launches_go_round_the_copies_and_the_last_launch_is_verified_after_timing(session, monkeypatch):
    monkeypatch.setattr(timing, "ROTATE_MAX_COPIES", 3)
    pv = next(pv for pv in plan_variants(config_from_text(CONFIG)) if pv.plan is not None)
    low = Lowering("portable")

    def built():
        evaluation = Evaluation(pv.name, "ok", "", {})
        kernel = DeviceBuilder(session, low, options="-cl-std=CL3.0 -cl-opt-disable").build(
            pv, render_kernel(pv.plan, low), evaluation)
        assert kernel is not None, evaluation.reason
        VerifyObserver().built(pv, evaluation, kernel)            # launches set 0
        assert evaluation.status == "ok", evaluation.reason
        return evaluation, kernel

    evaluation, kernel = built()
    assert kernel.rotation.copies == 3 and len({id(s["a"]) for s in kernel.sets}) == 3
    assert len({id(s["c"]) for s in kernel.sets}) == 3            # each launch writes its own C
    once = lambda submit, warmup, repeats, min_ms: Timing((launch_ms(submit),))    # noqa: E731 - set 1
    TimingObserver(once).built(pv, evaluation, kernel)
    assert evaluation.status == "ok" and kernel.last_set == 1 and kernel.next_set == 2
    assert evaluation.extra["timing_buffers"].startswith("rotating 3 buffers of")

    evaluation, kernel = built()
    ops = kernel.buffers["ops"]
    kernel.sets[1]["a"].copy_from_host(np.zeros_like(ops.a_bytes))    # the copy the timed launch reads
    TimingObserver(once).built(pv, evaluation, kernel)
    assert evaluation.status == "failed_verify" and "after timing, on buffer set 2 of 3" in evaluation.reason
    kernel.sets[1]["a"].copy_from_host(ops.a_bytes)                   # the session's copy as it was
