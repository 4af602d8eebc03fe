"""Fixtures of the benchmark suite: the real default device, the configs and shapes to measure, this run's results.

``--bench-config PATH`` (repeatable) and ``--bench-shapes 1024x1024x1024,...`` (or a shapes file, as
``xegemm tune --shapes``) choose what is measured (:mod:`bench.selection`); without them,
``configs/default.yaml`` at its own problem.  Every benchmark of a run records what it measured in a ledger
(``config.stash``); the last benchmark of each problem compares the best xegemm variant with the references
from it, and the terminal summary prints that.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.report import comparison_lines
from bench.selection import cases, problems
from xegemm.jobs.pipeline import DeviceSession, choose_lowering
from xegemm.runtime import describe, select_sycl_device

LEDGER = pytest.StashKey[dict]()


def pytest_addoption(parser):
    group = parser.getgroup("xegemm bench")
    group.addoption("--bench-config", action="append", default=None, metavar="PATH",
                    help="a config to benchmark (repeatable; default configs/default.yaml)")
    group.addoption("--bench-shapes", default=None, metavar="MxNxK[xB],...|FILE",
                    help="problems to run every config at (default: each config's own problem)")


def selected_cases(config):
    """The (config, shape) cases of this run (computed once)."""
    if "cases" not in config.stash[LEDGER]:
        config.stash[LEDGER]["cases"] = cases(config.getoption("bench_config"), config.getoption("bench_shapes"))
    return config.stash[LEDGER]["cases"]


def pytest_generate_tests(metafunc):
    """``case_variant``: every planned variant of every case; ``problem``: every distinct problem."""
    if "case_variant" in metafunc.fixturenames:
        pairs = [(case, pv) for case in selected_cases(metafunc.config) for pv in case.variants]
        metafunc.parametrize("case_variant", pairs, ids=[f"{c.config.name}-{c.shape.label}-{pv.name}"
                                                         for c, pv in pairs])
    if "problem" in metafunc.fixturenames:
        shapes = problems(selected_cases(metafunc.config))
        metafunc.parametrize("problem", shapes, ids=[s.label for s in shapes])


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
def bench_cases(request):
    """Every (config, shape) case of this run."""
    return selected_cases(request.config)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    builds = config.stash.get(LEDGER, {}).get("build_times")
    if builds:
        terminalreporter.section("build_program seconds: cold, and from the cache in a later process")
        for (target, name, shape, variant), t in builds.items():
            terminalreporter.write_line(f"{target:5} {t['cold']:7.3f} {t['cached']:7.4f}  {name} {shape} {variant}")
    comparisons = config.stash.get(LEDGER, {}).get("comparisons")
    if not comparisons:
        return
    terminalreporter.section("xegemm vs references (measured in this run)")
    for comparison in comparisons.values():
        for line in comparison_lines(comparison):
            terminalreporter.write_line(line)
