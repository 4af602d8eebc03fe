"""Build time of the chosen configs' variants: a cold build (empty program cache) and a build in a later
process that finds the program in the persistent cache (:mod:`xegemm.runtime.program_cache`).

Each measurement runs in fresh processes (:mod:`bench.build_child`) with a cache directory of this run; on a
CPU device both code paths of the Intel OpenCL CPU runtime are measured: the one it picks for the host
(AVX-512 where the CPU has it) and ``CL_CONFIG_CPU_TARGET_ARCH=core-avx2``.  A benchmark fails when a later
process does not get the program from the cache; the times are measured, never asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import pytest

from bench import REPO
from bench.clocks import MeasuredClock
from bench.code_paths import AVX2, TARGET_ARCH

BUILD_CLOCK = MeasuredClock("build_program_seconds")
TARGETS = {"host": None, "avx2": AVX2.cpu_target_arch}     # the runtime's own choice for the host, and AVX2


@pytest.fixture(scope="session")
def build_times(request, device_info):
    """``{(target, config, shape, variant): {"cold": s, "cached": s, "from_cache": bool}}``, measured once."""
    configs = request.config.getoption("bench_config") or [str(REPO / "configs" / "default.yaml")]
    shapes = request.config.getoption("bench_shapes")
    out: dict = {}

    def measure(target: str) -> None:
        if any(key[0] == target for key in out):
            return
        if TARGETS[target] and device_info.device_type != "cpu":
            pytest.skip(f"CL_CONFIG_CPU_TARGET_ARCH applies to the Intel OpenCL CPU runtime only, not "
                        f"{device_info.filter_string}")
        with tempfile.TemporaryDirectory(prefix="xegemm-bench-programs-") as cache:
            env = {**os.environ, "XEGEMM_CACHE_DIR": cache}
            if TARGETS[target]:
                env[TARGET_ARCH] = TARGETS[target]
            command = [sys.executable, "-m", "bench.build_child", *configs, *(["--shapes", shapes] if shapes else [])]
            runs = []
            for _ in ("cold", "cached"):
                done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=3600)
                if done.returncode:
                    pytest.fail(f"bench.build_child failed: {done.stderr[-2000:]}", pytrace=False)
                runs.append([json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")])
        for cold, cached in zip(*runs):
            out[(target, cold["config"], cold["shape"], cold["variant"])] = {
                "cold": cold["seconds"], "cached": cached["seconds"], "cold_from_cache": cold["from_cache"],
                "from_cache": cached["from_cache"]}

    return out, measure


def _variants(config):
    from bench.conftest import selected_cases   # noqa: PLC0415 - the selection of this run
    return [(c.config.name, c.shape.label, pv.name) for c in selected_cases(config) for pv in c.variants
            if pv.plan is not None]


def pytest_generate_tests(metafunc):
    if "build_variant" in metafunc.fixturenames:
        pairs = [(t, v) for t in TARGETS for v in _variants(metafunc.config)]
        metafunc.parametrize("build_variant", pairs, ids=[f"{t}-{c}-{s}-{n}" for t, (c, s, n) in pairs])


@pytest.mark.benchmark(group="build time", timer=BUILD_CLOCK)
def test_build_time(build_variant, build_times, benchmark, ledger):
    target, key = build_variant
    times, measure = build_times
    measure(target)
    found = times.get((target, *key))
    if found is None:
        pytest.fail(f"bench.build_child reported no build of {key}", pytrace=False)
    benchmark.group = f"build time ({target} code path): cold, then from the cache in a later process"
    benchmark.pedantic(lambda: BUILD_CLOCK.add(found["cold"]), rounds=1, iterations=1)
    benchmark.extra_info.update(target=target, cpu_target_arch=TARGETS[target], **found)
    ledger.setdefault("build_times", {})[(target, *key)] = found
    if found["cold_from_cache"] or not found["from_cache"]:
        pytest.fail(f"the program cache did not work: {found}", pytrace=False)
