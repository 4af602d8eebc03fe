"""xegemm export: the example built by `make -C DIR run` runs every exported kernel against its C reference."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from xegemm.aot.toolchain import find_ocloc
from xegemm.runtime.environment import find_cpu_runtime

ONE = """name: one
problem: {m: 100, n: 96, k: 64, batch: 2}
types: {a: bf16, b: bf16, acc: f32, c: bf16}
tile: {workgroup: [32, 32, 32], subgroups: [2, 2], subgroup_size: 16, split_k: 1}
epilogue: {beta: 1.0, bias: col, activation: relu}
sweep: {tile.split_k: [1, 2]}
"""
ROOT = Path(__file__).resolve().parents[1]


def _missing() -> str | None:
    if not Path("/usr/include/CL/cl.h").is_file() or shutil.which("cc") is None or shutil.which("make") is None:
        return "the OpenCL development files or a C compiler are missing: sudo bash .ci/install-opencl-dev.sh"
    return None


def _export(tmp_path, *targets, config: Path | None = None) -> Path:
    if config is None:
        config = tmp_path / "one.yaml"
        config.write_text(ONE)
    out = tmp_path / "out"
    args = [sys.executable, "-m", "xegemm", "export", str(config), "--out", str(out)]
    for t in targets:
        args += ["--target", t]
    done = subprocess.run(args, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


@pytest.mark.device
@pytest.mark.skipif(_missing() is not None, reason=str(_missing()))
def test_exported_kernels_build_and_pass_with_make_run(tmp_path):
    out = _export(tmp_path, "cpu")
    manifest = json.loads((out / "manifest.json").read_text())
    assert [k["name"].endswith("_splitk2") for k in manifest["kernels"]] == [False, True]
    split = manifest["kernels"][1]
    assert [e["kernel"] for e in split["entries"]] == [split["name"], split["name"] + "_reduce"]
    assert split["workspace_bytes"] == "batch * 2 * M * N * 4" and split["sub_group_size"] == 16
    assert [a["name"] for a in split["entries"][0]["arguments"]][:3] == ["A", "B", "C"]
    # relocatable: the folder copied elsewhere builds with the system C compiler and runs; the Makefile names
    # no path of this machine, and finds the runtime when it runs (from $VIRTUAL_ENV's package metadata, or the
    # OPENCL_RUNTIME override)
    makefile = (out / "Makefile").read_text()
    assert str(ROOT) not in makefile and ".venv" not in makefile and sys.prefix not in makefile
    moved = tmp_path / "elsewhere" / "kernels"
    shutil.copytree(out, moved)
    shutil.rmtree(out)
    runtime = find_cpu_runtime()
    assert runtime is not None
    env = {k: v for k, v in os.environ.items() if k not in ("OCL_ICD_FILENAMES", "VIRTUAL_ENV")}
    found = subprocess.run(["make", "-C", str(moved), "run"], capture_output=True, text=True, timeout=1200,
                           env={**env, "VIRTUAL_ENV": sys.prefix})
    assert found.returncode == 0, found.stdout[-2000:] + found.stderr[-2000:]
    done = subprocess.run(["make", "-C", str(moved), "run", f"OPENCL_RUNTIME={runtime}"], capture_output=True,
                          text=True, timeout=1200, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    # each kernel compact, then as strided sub-matrices of larger buffers (an offset, wider pitches)
    assert "4 passed, 0 failed" in done.stdout and done.stdout.count("passed strided ") == 2, done.stdout
    # a wrong kernel fails the example: relu replaced by the identity (its strided call is then not made)
    src = moved / manifest["kernels"][0]["source"]
    text = src.read_text()
    assert "fmax(x, 0.0f)" in text
    src.write_text(text.replace("fmax(x, 0.0f)", "x"))
    done = subprocess.run(["make", "-C", str(moved), "run", f"OPENCL_RUNTIME={runtime}"], capture_output=True,
                          text=True, timeout=1200, env=env)
    assert done.returncode != 0 and "2 passed, 1 failed" in done.stdout


@pytest.mark.ocloc
@pytest.mark.skipif(find_ocloc() is None, reason="ocloc is not installed: sudo bash .ci/install-ocloc.sh")
def test_pvc_binaries_are_exported_with_their_manifest_entries(tmp_path):
    out = _export(tmp_path, "pvc")
    manifest = json.loads((out / "manifest.json").read_text())
    pvc = [k for k in manifest["kernels"] if k["target"] == "pvc"]
    assert len(pvc) == 2
    for k in pvc:
        assert (out / k["binary"]).stat().st_size > 0 and (out / k["source"]).is_file()
        assert k["isa"]["dpas"] > 0 and "-cl-intel-256-GRF-per-thread" in k["build_options"]
        assert any("64-byte" in r for r in k["rules"])
    header = (out / "xegemm_kernels.h").read_text()
    assert all(f"{k['launcher']}(" in header for k in pvc)


@pytest.mark.ocloc
@pytest.mark.device
@pytest.mark.skipif(find_ocloc() is None or _missing() is not None,
                    reason=str(_missing() or "ocloc is not installed: sudo bash .ci/install-ocloc.sh"))
def test_dg2_binaries_and_the_integer_kernels_of_the_simd8_config(tmp_path):
    """configs/dg2.yaml: bf16, f16, s8 x u8 and s4 x u4 (packed two per byte) at sub-group size 8."""
    out = _export(tmp_path, "cpu", "dg2", config=ROOT / "configs" / "dg2.yaml")
    manifest = json.loads((out / "manifest.json").read_text())
    dg2 = [k for k in manifest["kernels"] if k["target"] == "dg2"]
    assert len(dg2) == 4 and all((out / k["binary"]).stat().st_size > 0 and k["sub_group_size"] == 8 for k in dg2)
    assert all(k["isa"]["dpas"] > 0 and any("1D sub-group block" in r for r in k["rules"]) for k in dg2)
    done = subprocess.run(["make", "-C", str(out), "run"], capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0 and "8 passed, 0 failed" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]  # 4 kernels, each also strided


@pytest.mark.skipif(_missing() is not None, reason=str(_missing()))
def test_a_w8a8_kernels_launcher_takes_both_operands_scales_and_compiles(tmp_path):
    # the header binds A's scales (SA) after B's scales and zeros: its launcher must take that buffer
    out = _export(tmp_path, "cpu", config=ROOT / "configs" / "w8a8_fp8.yaml")
    header = (out / "xegemm_kernels.h").read_text()
    assert "cl_mem scales, cl_mem zeros," in header and "cl_mem a_scales," in header
    done = subprocess.run(["make", "-C", str(out), "example"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
