"""Fixtures of the benchmark suite: the real default device, the default config, and this run's results.

Every benchmark of a run records what it measured in a ledger (``config.stash``); the last benchmark
compares the best xegemm variant with the references from it, and the terminal summary prints that.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import DEFAULT_CONFIG
from bench.report import comparison_lines
from xegemm.config import load_config
from xegemm.pipeline import DeviceSession, choose_lowering
from xegemm.runtime import describe, select_sycl_device

LEDGER = pytest.StashKey[dict]()


def pytest_configure(config):
    config.stash[LEDGER] = {}
    json_path = config.getoption("benchmark_json", None)
    if json_path:   # pytest-benchmark writes the file but does not create its folder (runs/ is git-ignored)
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)


@pytest.fixture(scope="session")
def ledger(request) -> dict:
    """What the benchmarks of this run measured, by name."""
    return request.config.stash[LEDGER]


@pytest.fixture(scope="session")
def sycl_device():
    return select_sycl_device()


@pytest.fixture(scope="session")
def device_info(sycl_device):
    return describe(sycl_device)


@pytest.fixture(scope="session")
def lowering(device_info):
    """The :class:`xegemm.lowering.Lowering` chosen for the device as ``xegemm run`` does."""
    return choose_lowering(device_info)


@pytest.fixture(scope="session")
def device_session(sycl_device):
    """One profiling queue and one set of problem buffers shared by every xegemm benchmark."""
    return DeviceSession(sycl_device)


@pytest.fixture(scope="session")
def default_config():
    return load_config(DEFAULT_CONFIG)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    comparison = config.stash.get(LEDGER, {}).get("comparison")
    if comparison is None:
        return
    terminalreporter.section("xegemm vs references (measured in this run)")
    for line in comparison_lines(comparison):
        terminalreporter.write_line(line)
