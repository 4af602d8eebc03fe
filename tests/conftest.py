"""Shared fixtures: the real default device (the Intel OpenCL CPU runtime in CI), never a mock.

Tests that need Intel's offline compiler carry the ``ocloc`` marker, tests that open a page in Debian's headless
chromium the ``browser`` marker; this is the one place that decides whether they run: where the tool is missing
they are skipped with what to install (``make test`` installs both itself when run as root)."""

import importlib.util
import os
import shutil
import tempfile

import pytest

from xegemm.aot.toolchain import find_ocloc
from xegemm.runtime import describe, select_sycl_device

# Built programs go to a cache of this session (workers and CLI subprocesses inherit it), never the user's.
_CACHE = tempfile.TemporaryDirectory(prefix="xegemm-test-programs-")
os.environ["XEGEMM_CACHE_DIR"] = _CACHE.name

OCLOC_MISSING = ("ocloc is not installed: as root, `make test` installs it (Debian's intel-opencl-icd, "
                 ".ci/install-ocloc.sh); otherwise run `sudo bash .ci/install-ocloc.sh`")


def browser_missing() -> str | None:
    """Why the browser tests cannot run here (None when Debian's chromium, its driver and selenium are there)."""
    absent = [tool for tool in ("chromium", "chromedriver") if shutil.which(tool) is None]
    if absent:
        return (f"{' and '.join(absent)} not installed: as root, `make test` installs Debian's chromium and "
                "chromium-driver (.ci/install-chromium.sh); otherwise run `sudo bash .ci/install-chromium.sh`")
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed: pip install -e '.[test]'"
    return None


def pytest_collection_modifyitems(config, items):
    missing = {"ocloc": None if find_ocloc() is not None else OCLOC_MISSING, "browser": browser_missing()}
    for item in items:
        for marker, reason in missing.items():
            if reason and marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def sycl_device():
    return select_sycl_device()


@pytest.fixture(scope="session")
def device_info(sycl_device):
    return describe(sycl_device)


TINY_TUNE_CONFIG = """\
name: tiny
problem: {m: 64, n: 64, k: 64}
types: {a: bf16, b: bf16, acc: f32, c: f32}
tile: {workgroup: [32, 32, 32], subgroups: [1, 2], subgroup_size: 16}
profile: {warmup: 1, repeats: 3}
sweep:
  tile: [{workgroup: [32, 32, 32], subgroups: [1, 2]}, {workgroup: [32, 64, 32], subgroups: [2, 2]},
         {workgroup: [16, 32, 16], subgroups: [1, 2]}, {workgroup: [512, 512, 32], subgroups: [1, 1]}]
  pipeline.prefetch: [0, 1, 2]
constraints: ["tile.workgroup[0] % (tile.subgroups[0] * 8) == 0"]
"""
TINY_LEGAL, TINY_PRUNED = 9, 3     # the 512x512 tile needs more registers than a thread has


@pytest.fixture
def tiny_tune_config(tmp_path):
    """A 12-point tuning space at 64^3 (3 points pruned by the planner): each build takes about a second."""
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY_TUNE_CONFIG)
    return path


def run_portable(session, p, staged: bool):
    """C of plan ``p`` (bytes) in the portable lowering on the device, verified: the staged k-step built as
    production builds it, or the atom-by-atom one without optimisation (the most literal reading of the atoms)."""
    import numpy as np

    from xegemm.evaluate import Evaluation, plan_variants
    from xegemm.evaluate.device import DeviceBuilder, VerifyObserver
    from xegemm.lowering import Lowering
    from xegemm.render import render_kernel
    from xegemm.runtime.program import from_device

    low = Lowering("portable")
    pv = next(pv for pv in plan_variants(p.config) if pv.plan is not None)
    evaluation = Evaluation(pv.name, "ok", "", {})
    builder = DeviceBuilder(session, low, options=None if staged else "-cl-std=CL3.0 -cl-opt-disable")
    kernel = builder.build(pv, render_kernel(p, low, staged=staged), evaluation)
    assert kernel is not None, evaluation.reason
    VerifyObserver().built(pv, evaluation, kernel)
    assert evaluation.status == "ok", (staged, evaluation.reason)
    return from_device(kernel.buffers["c"], np.uint8, kernel.buffers["poison"].shape)


def one_variant(text: str):
    """The one planned variant of a config given as YAML text (its plan asserted)."""
    from xegemm.config import config_from_text
    from xegemm.evaluate import plan_variants

    (pv,) = plan_variants(config_from_text(text))
    assert pv.plan is not None, pv.reason
    return pv


def break_kernel(monkeypatch, old: str, new: str) -> None:
    """Make every rendered kernel replace ``old`` by ``new`` (a generator bug, for mutation tests); the text
    must be there, so a mutant that no longer applies fails instead of testing an honest kernel."""
    from xegemm import evaluate

    original = evaluate.render_variant

    def broken(pv, lowering):
        source = original(pv, lowering)
        assert old in source, f"the mutant's text {old!r} is not in the kernel"
        return source.replace(old, new)

    monkeypatch.setattr(evaluate, "render_variant", broken)


def assert_verifies(pv, session) -> None:
    """Run a planned variant on the session's device: it must verify, every element within its bound."""
    from xegemm.pipeline import run_variant

    res = run_variant(pv, session)
    assert res.status == "ok", res.reason
    assert res.bad_elements == 0


def assert_fails_verification(monkeypatch, mutation: tuple[str, str], pv, session) -> None:
    """The variant's kernels with ``mutation`` (old, new text; :func:`break_kernel`) must fail verification."""
    from xegemm.pipeline import run_variant

    break_kernel(monkeypatch, *mutation)
    res = run_variant(pv, session)
    assert res.status == "failed_verify", f"{mutation}: {res.status} {res.reason}"


@pytest.fixture(scope="module")
def session(sycl_device):
    """A device session (queue, inputs and references) shared by a module's tests."""
    from xegemm.pipeline import DeviceSession

    return DeviceSession(sycl_device)
