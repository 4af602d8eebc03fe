"""The persistent program cache on the real OpenCL device: a program built once is loaded by later processes
(worker processes of ``run`` included), damaged or refused entries are rebuilt and replaced, and the key
separates what would compile differently.  Timings are printed, never asserted (bench/ measures them)."""

import ctypes
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

from xegemm.jobs.pipeline import run
from xegemm.runtime import program_cache
from xegemm.runtime.program import BuildError, build_program, from_device, launch, make_queue, to_device

pytestmark = pytest.mark.device

ROOT = Path(__file__).resolve().parents[1]
SRC = """__attribute__((reqd_work_group_size(16, 1, 1))) __attribute__((intel_reqd_sub_group_size(16)))
__kernel void k(__global int* out, const int add) {
  int lane = get_sub_group_local_id();
  out[get_global_id(0)] = sub_group_broadcast(lane * 3, 5) + lane + add;   // TAG
}
"""
WANT = [15 + lane + 7 for lane in range(16)] * 2

CHILD = r"""
import ctypes, json, sys, time
import numpy as np
from xegemm.runtime import program_cache, select_sycl_device
from xegemm.runtime.program import build_program, from_device, launch, make_queue, to_device
queue = make_queue(select_sycl_device())
t0 = time.perf_counter()
program = build_program(queue, sys.argv[1], "-cl-std=CL3.0")
seconds = time.perf_counter() - t0
out = to_device(queue, np.zeros(32, np.int32))
launch(queue, program.get_sycl_kernel("k"), [out, ctypes.c_int(7)], [32], [16]).wait()
print(json.dumps({"from_cache": program.from_cache, "stats": program_cache.STATS, "seconds": seconds,
                  "out": from_device(out, np.int32, (32,)).tolist()}))
"""


def unique_source() -> str:
    """A source no earlier build of this session has seen."""
    return SRC.replace("TAG", uuid.uuid4().hex)


def child_build(source: str, cache: Path, **env) -> dict:
    """Build and run ``source`` in a fresh Python process with ``cache`` as the program cache."""
    environ = {**os.environ, "XEGEMM_CACHE_DIR": str(cache), **env}
    done = subprocess.run([sys.executable, "-c", CHILD, source], env=environ, capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def entries(cache: Path) -> list[Path]:
    return sorted(cache.rglob("*.bin"))


def test_a_later_process_loads_the_program_from_the_cache(tmp_path):
    source = unique_source()
    first = child_build(source, tmp_path)
    assert not first["from_cache"] and first["stats"]["stores"] == 1 and first["out"] == WANT
    assert len(entries(tmp_path)) == 1
    second = child_build(source, tmp_path)
    assert second["from_cache"] and second["stats"]["hits"] == 1 and second["stats"]["misses"] == 0
    assert second["out"] == WANT
    print(f"cold build {first['seconds']:.3f} s, from the cache {second['seconds']:.4f} s")


def test_another_cpu_target_is_another_entry(tmp_path):
    source = unique_source()
    child_build(source, tmp_path)
    avx2 = child_build(source, tmp_path, CL_CONFIG_CPU_TARGET_ARCH="core-avx2")
    assert not avx2["from_cache"] and avx2["out"] == WANT
    assert len(entries(tmp_path)) == 2


@pytest.mark.parametrize("damage", ["truncated", "flipped byte", "empty", "not a cache file"])
def test_a_damaged_entry_is_rebuilt_and_replaced(tmp_path, damage):
    source = unique_source()
    child_build(source, tmp_path)
    (entry,) = entries(tmp_path)
    data = entry.read_bytes()
    entry.write_bytes({"truncated": data[: len(data) // 2], "flipped byte": data[:-100] + bytes([data[-100] ^ 1])
                       + data[-99:], "empty": b"", "not a cache file": b"hello" * 100}[damage])
    again = child_build(source, tmp_path)
    assert not again["from_cache"] and again["stats"]["discarded"] == 1 and again["stats"]["stores"] == 1
    assert again["out"] == WANT
    assert child_build(source, tmp_path)["from_cache"]


def test_an_entry_the_runtime_refuses_is_rebuilt_and_replaced(tmp_path, monkeypatch, sycl_device):
    """A well-formed entry whose binary the runtime rejects (e.g. written by a broken runtime)."""
    monkeypatch.setenv("XEGEMM_CACHE_DIR", str(tmp_path))
    source = unique_source()
    child_build(source, tmp_path)
    (entry,) = entries(tmp_path)
    program_cache.store(entry.stem, b"\x7fELF this is no program binary" * 64)
    queue = make_queue(sycl_device)
    before = dict(program_cache.STATS)
    program = build_program(queue, source, "-cl-std=CL3.0")
    assert not program.from_cache
    assert program_cache.STATS["discarded"] == before["discarded"] + 1
    out = to_device(queue, np.zeros(32, np.int32))
    launch(queue, program.get_sycl_kernel("k"), [out, ctypes.c_int(7)], [32], [16]).wait()
    assert from_device(out, np.int32, (32,)).tolist() == WANT
    assert child_build(source, tmp_path)["from_cache"]


def test_no_cache_directory_means_no_persistent_cache(tmp_path):
    source = unique_source()
    assert not child_build(source, tmp_path, XEGEMM_CACHE_DIR="")["from_cache"]
    second = child_build(source, tmp_path, XEGEMM_CACHE_DIR="")
    assert not second["from_cache"] and second["stats"]["stores"] == 0


def test_an_unusable_cache_directory_only_costs_the_cache(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("in the way")
    result = child_build(unique_source(), blocker / "programs")
    assert not result["from_cache"] and result["stats"]["stores"] == 0 and result["out"] == WANT


def test_a_failed_build_is_not_cached(tmp_path, monkeypatch, sycl_device):
    monkeypatch.setenv("XEGEMM_CACHE_DIR", str(tmp_path))
    with pytest.raises(BuildError) as exc:
        build_program(make_queue(sycl_device), f"__kernel void k(void) {{ undeclared_{uuid.uuid4().hex} = 1; }}", "")
    assert "undeclared_" in exc.value.log
    assert entries(tmp_path) == []


def test_the_key_separates_source_options_device_and_runtime():
    device = {"name": "X", "type": "cpu", "driver": "1.0"}
    base = program_cache.cache_key("s", "-O", program_cache.runtime_identity(device, None))
    assert base == program_cache.cache_key("s", "-O", program_cache.runtime_identity(device, None))
    others = [program_cache.cache_key("t", "-O", program_cache.runtime_identity(device, None)),
              program_cache.cache_key("s", "-O0", program_cache.runtime_identity(device, None)),
              program_cache.cache_key("s", "-O", program_cache.runtime_identity({**device, "driver": "1.1"}, None)),
              program_cache.cache_key("s", "-O", program_cache.runtime_identity({**device, "name": "Y"}, None)),
              program_cache.cache_key("s", "-O", program_cache.runtime_identity(device, __file__))]
    assert len({base, *others}) == 6


RUN_CONFIG = """\
name: cached
problem: {m: 48, n: 40, k: 40}
tile: {workgroup: [32, 32, 32], subgroups: [1, 2]}
profile: {warmup: 1, repeats: 2}
sweep:
  pipeline.prefetch: [0, 1]
"""


def test_run_workers_load_what_earlier_workers_built(tmp_path, monkeypatch):
    """`run` builds in worker processes: a second run's fresh workers take every program from the cache."""
    monkeypatch.setenv("XEGEMM_CACHE_DIR", str(tmp_path / "programs"))
    config = tmp_path / "cached.yaml"
    config.write_text(RUN_CONFIG)
    first = run(config, out_dir=tmp_path / "first", progress=None)
    second = run(config, out_dir=tmp_path / "second", progress=None)
    assert [v.status for v in first.variants] == [v.status for v in second.variants] == ["ok", "ok"]
    assert [v.extra["build_cached"] for v in first.variants] == [False, False]
    assert [v.extra["build_cached"] for v in second.variants] == [True, True]
    print("build s, cold:", [round(v.build_s, 3) for v in first.variants],
          "cached:", [round(v.build_s, 4) for v in second.variants])
