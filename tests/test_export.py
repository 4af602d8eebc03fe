"""xegemm export: the folder it writes builds with the system C compiler and runs on the OpenCL CPU runtime.

One export of a small config (split K 1 and 2, C, a bias, relu) is shared by the tests of this module: it is
moved to another directory and `make run` there checks every kernel compact, as a strided sub-matrix of larger
buffers and through USM pointers; a broken kernel fails it.  A tune directory's export is checked against the
call API's dispatch (the C function and Python pick the same kernel for several shapes), and a traced
epilogue's kernel runs through its launcher on the verifier's operands and is checked against its reference.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from xegemm.aot.toolchain import find_ocloc
from xegemm.api import LayoutError, NoKernelError
from xegemm.api.dispatch import Dispatcher, Request, candidates
from xegemm.config import load_config
from xegemm.config.shapes import Shape
from xegemm.config.sources import load_source
from xegemm.epilogues.plan import input_param
from xegemm.library.dtypes import dtype
from xegemm.lowering import named_lowering
from xegemm.runtime.environment import find_cpu_runtime
from xegemm.tune.export import best_config
from xegemm.verify.dense import GUARD_BYTE, check, make_operands, reference

ONE = """name: one
problem: {m: 100, n: 96, k: 64, batch: 2}
types: {a: bf16, b: bf16, acc: f32, c: bf16}
tile: {workgroup: [32, 32, 32], subgroups: [2, 2], subgroup_size: 16, split_k: 1}
epilogue: {beta: 1.0, bias: col, activation: relu}
sweep: {tile.split_k: [1, 2]}
"""
TRACED = """name: traced
problem: {m: 37, n: 45, k: 40, batch: 2}
types: {a: bf16, b: bf16, acc: f32, c: bf16}
tile: {workgroup: [32, 32, 32], subgroups: [1, 2]}
epilogue: {function: "epilogue_examples:bias_gelu", inputs: {bias: row}, outputs: {pre: f32}}
"""
GROUPED = """name: groups
problem: {groups: [37x48x64, 0x32x32, 20x64x32]}
types: {a: bf16, b: bf16, acc: f32, c: bf16}
tile: {workgroup: [32, 32, 32], subgroups: [2, 2], subgroup_size: 16}
epilogue: {beta: 1.0, bias: col, activation: relu}
sweep: {tile.walk: [static, dynamic]}
"""
MOE = """name: experts
problem: {m: 50, n: 32, k: 64}
moe: {experts: 3, rows: [10, 0, 40]}
types: {a: f16, b: f16, acc: f32, c: f32}
tile: {workgroup: [16, 32, 32], subgroups: [1, 2], subgroup_size: 16}
"""
ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


def _missing() -> str | None:
    if not Path("/usr/include/CL/cl.h").is_file() or shutil.which("cc") is None or shutil.which("make") is None:
        return "the OpenCL development files or a C compiler are missing: sudo bash .ci/install-opencl-dev.sh"
    return None


NEEDS_CC = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))


def _runtime_env() -> dict:
    runtime = find_cpu_runtime()
    assert runtime is not None
    env = {k: v for k, v in os.environ.items() if k not in ("OCL_ICD_FILENAMES", "VIRTUAL_ENV")}
    return {**env, "OCL_ICD_FILENAMES": str(runtime),
            "LD_LIBRARY_PATH": str(Path(runtime).parent) + ":" + os.environ.get("LD_LIBRARY_PATH", "")}


def _export_cli(config: Path, out: Path, *targets, extra=()) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "xegemm", "export", str(config), "--out", str(out), *extra]
    for t in targets:
        args += ["--target", t]
    done = subprocess.run(args, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def _export(tmp_path, *targets, config: Path | None = None) -> Path:
    if config is None:
        config = tmp_path / "one.yaml"
        config.write_text(ONE)
    out = tmp_path / "out"
    _export_cli(config, out, *targets)
    return out


def _make(folder: Path, *args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-C", str(folder), *args], capture_output=True, text=True, timeout=1200, env=env)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """ONE exported for cpu into a folder whose name needs quoting; (folder, the command's stdout)."""
    root = tmp_path_factory.mktemp("export")
    config = root / "one.yaml"
    config.write_text(ONE)
    out = root / "kernels of one"
    return out, _export_cli(config, out).stdout


def test_the_printed_make_hint_is_shell_quoted(exported):
    out, stdout = exported
    hint = stdout.strip().rsplit("run them with: ", 1)[1]
    assert hint == f"make -C {shlex.quote(str(out))} run" and shlex.split(hint) == ["make", "-C", str(out), "run"]


def test_short_names_with_the_key_beside_them_and_arguments_named_for_what_they_are(exported):
    out, _ = exported
    manifest = json.loads((out / "manifest.json").read_text())
    names = [k["name"] for k in manifest["kernels"]]
    assert names == ["xegemm_k0_bf16_bf16_bf16_rr_32x32x32", "xegemm_k1_bf16_bf16_bf16_rr_32x32x32_split2"]
    split = manifest["kernels"][1]
    assert split["key"].startswith("xegemm_bf16_bf16_f32_bf16_") and split["key"].endswith("_splitk2")
    assert len(split["key"]) > 100 and all(len(n) < 50 for n in names)
    assert [e["kernel"] for e in split["entries"]] == [split["name"], split["name"] + "_reduce"]
    assert split["workspace_bytes"] == "batch * 2 * M * N * 4" and split["sub_group_size"] == 16
    gemm = split["entries"][0]["arguments"]
    assert [a["name"] for a in gemm[:3]] == ["A", "B", "workspace"]       # split K: the GEMM kernel writes W
    first = manifest["kernels"][0]["entries"][0]["arguments"]
    assert [(a["name"], a["parameter"]) for a in first[:3]] == [("A", "A"), ("B", "B"), ("D", "C")]
    assert [a["name"] for a in first if a["parameter"] in ("ldc", "batch_stride_c", "Cin")] == ["ldd", "stride_d", "C"]
    header = (out / "xegemm_kernels.h").read_text()
    source = (out / manifest["kernels"][0]["source"]).read_text()
    for k in manifest["kernels"]:
        # the key in a comment beside the launchers, the short name on the kernel entries in the source
        assert f" * key: {k['key']}\n" in header and f"{k['name']}_launch_usm(" in header
        assert f"\"{k['name']}\", \"{k['key']}\"" in header
    assert f" {names[0]}(" in source
    assert manifest["kernels"][0]["key"] not in source.split("\n", 1)[1]    # only in the first line's comment


def test_the_header_carries_each_programs_build_options(exported):
    out, _ = exported
    manifest = json.loads((out / "manifest.json").read_text())
    header = (out / "xegemm_kernels.h").read_text()
    for k in manifest["kernels"]:
        options = k["build_options"]
        assert options == "-cl-std=CL3.0 -cl-mad-enable"
        assert f"#define {k['name'].upper()}_OPTIONS_CPU \"{options}\"" in header
        assert f"\"{k['source']}\", NULL, \"{options}\" }}" in header       # xegemm_programs[]


@pytest.mark.device
@NEEDS_CC
def test_the_moved_folder_builds_and_passes_compact_strided_and_usm(exported, tmp_path):
    out, _ = exported
    # relocatable: the folder copied elsewhere builds with the system C compiler and runs; the Makefile names
    # no path of this machine and finds the runtime when it runs (from $VIRTUAL_ENV's package metadata, or the
    # OPENCL_RUNTIME override)
    makefile = (out / "Makefile").read_text()
    assert str(ROOT) not in makefile and ".venv" not in makefile and sys.prefix not in makefile
    moved = tmp_path / "elsewhere" / "kernels"
    shutil.copytree(out, moved)
    runtime = find_cpu_runtime()
    env = {k: v for k, v in os.environ.items() if k not in ("OCL_ICD_FILENAMES", "VIRTUAL_ENV")}
    found = _make(moved, "run", env={**env, "VIRTUAL_ENV": sys.prefix})
    assert found.returncode == 0, found.stdout[-2000:] + found.stderr[-2000:]
    done = _make(moved, "run", f"OPENCL_RUNTIME={runtime}", env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    # each kernel compact, then as strided sub-matrices of larger buffers (an offset, wider pitches), then the
    # same through shared USM pointers when the device offers cl_intel_unified_shared_memory
    assert done.stdout.count("passed strided ") == 2, done.stdout
    if "usm: skipped: " in done.stdout:
        assert "6 passed" not in done.stdout and "4 passed, 0 failed" in done.stdout
        pytest.skip(done.stdout.split("usm: skipped: ", 1)[1].splitlines()[0])
    assert done.stdout.count("passed usm ") == 2 and "6 passed, 0 failed" in done.stdout, done.stdout


@pytest.mark.device
@NEEDS_CC
def test_a_wrong_kernel_fails_the_example(exported, tmp_path):
    out, _ = exported
    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    manifest = json.loads((broken / "manifest.json").read_text())
    src = broken / manifest["kernels"][0]["source"]
    text = src.read_text()
    assert "fmax(x, 0.0f)" in text
    src.write_text(text.replace("fmax(x, 0.0f)", "x"))      # relu replaced by the identity
    done = _make(broken, "run", f"OPENCL_RUNTIME={find_cpu_runtime()}")
    # the broken kernel's strided and USM calls are not made; the other kernel passes all three
    assert done.returncode != 0 and "FAILED xegemm_k0_" in done.stdout, done.stdout
    assert re.search(r"\n[23] passed, 1 failed\n", done.stdout), done.stdout


@pytest.mark.device
@NEEDS_CC
def test_grouped_and_moe_kernels_build_their_table_in_c_and_pass_group_by_group(tmp_path):
    for name, text in (("groups", GROUPED), ("experts", MOE)):
        (tmp_path / f"{name}.yaml").write_text(text)
        _export_cli(tmp_path / f"{name}.yaml", tmp_path / name)
    manifest = json.loads((tmp_path / "groups" / "manifest.json").read_text())
    header = (tmp_path / "groups" / "xegemm_kernels.h").read_text()
    for k in manifest["kernels"]:
        assert k["launcher"] == k["name"] + "_launch_grouped" and all(f"{name}(" in header
                                                                       for name in k["launchers"].values())
    done = _make(tmp_path / "groups", "run", env=_runtime_env())
    assert done.returncode == 0 and "2 passed, 0 failed" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    assert "passed grouped xegemm_k0_bf16_bf16_bf16_rr_32x32x32_grouped_static (3 groups, 6 tiles" in done.stdout
    assert "passed grouped xegemm_k1_bf16_bf16_bf16_rr_32x32x32_grouped_dynamic" in done.stdout
    moe = _make(tmp_path / "experts", "run", env=_runtime_env())
    assert moe.returncode == 0 and "passed grouped xegemm_k0_f16_f16_f32_rr_16x32x32_moe_static (3 groups" \
        in moe.stdout and "1 passed, 0 failed" in moe.stdout, moe.stdout[-2000:] + moe.stderr[-2000:]
    # a wrong table fails: every group's first tile at 0 (the scheduler then walks the first group only)
    header = tmp_path / "groups" / "xegemm_kernels.h"
    text = header.read_text()
    assert text.count("= begin;") == 2
    header.write_text(text.replace("= begin;", "= 0;"))
    broken = _make(tmp_path / "groups", "run", env=_runtime_env())
    assert broken.returncode != 0 and "0 passed, 2 failed" in broken.stdout, broken.stdout


def _skip_when_the_example_skipped(stdout: str) -> None:
    """Skip with the example's own words when it skipped its coopmat kernel (a CPU without AMX)."""
    said = [line for line in stdout.splitlines() if line.startswith("skipped xegemm_k0_")]
    if said:
        pytest.skip("the exported example says: " + said[0].split(": ", 1)[-1])


COOPMAT = """name: coop
problem: {m: 77, n: 45, k: 70, batch: 2}
types: {a: bf16, b: bf16, acc: f32, c: f32}
tile: {workgroup: [64, 32, 32], subgroups: [2, 1], subgroup_size: 16}
epilogue: {alpha: 0.5, beta: -1.5}
sweep: {tile.split_k: [1, 2]}
"""


@pytest.mark.device
@NEEDS_CC
def test_the_coopmat_module_exports_as_spirv_loaded_with_create_program_with_il(tmp_path):
    """The coopmat module, plain and with split K (its reduce an entry point of the same module), exported and run
    by the example through clCreateProgramWithIL; B written plain where the module reads it packed fails."""
    (tmp_path / "coop.yaml").write_text(COOPMAT)
    out = tmp_path / "out"
    _export_cli(tmp_path / "coop.yaml", out, "coopmat")
    manifest = json.loads((out / "manifest.json").read_text())
    k, split = manifest["kernels"]
    assert k["binary"].endswith("_coopmat.spv") and (out / k["binary"]).read_bytes()[:4] == b"\x03\x02\x23\x07"
    assert any("VNNI-packed" in r for r in k["rules"]) and k["build_options"] == ""
    assert [entry["kernel"] for entry in split["entries"]][1].endswith("_reduce")
    assert "clCreateProgramWithIL" in (out / "example.c").read_text()
    done = _make(out, "run", env=_runtime_env())
    _skip_when_the_example_skipped(done.stdout)
    assert done.returncode == 0 and "passed xegemm_k0_bf16_bf16_f32_rr_64x32x32_coopmat (77x45x70 batched)" in \
        done.stdout and "2 passed, 0 failed" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    _b_written_plain_fails(out, "sp->vnni", 2)


@pytest.mark.device
@NEEDS_CC
def test_a_stream_k_coopmat_module_exports_with_its_fix_up_entry_point(tmp_path):
    """Stream-K through the coopmat module: the pieces' workspace and the fix-up entry point of the same module,
    run by the example through clCreateProgramWithIL and checked."""
    (tmp_path / "sk.yaml").write_text(COOPMAT.replace("sweep: {tile.split_k: [1, 2]}", "")
                                      .replace("subgroup_size: 16}", "subgroup_size: 16, stream_k: 3}"))
    out = tmp_path / "out"
    _export_cli(tmp_path / "sk.yaml", out, "coopmat")
    (k,) = json.loads((out / "manifest.json").read_text())["kernels"]
    assert [entry["kernel"] for entry in k["entries"]] == [k["name"], k["name"] + "_reduce"]
    done = _make(out, "run", env=_runtime_env())
    _skip_when_the_example_skipped(done.stdout)
    assert done.returncode == 0 and "1 passed, 0 failed" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]


def _b_written_plain_fails(out: Path, vnni: str, kernels: int) -> None:
    """The example's B given plain (row-major) where the module reads it VNNI-packed: every check fails."""
    example = out / "example.c"
    text = example.read_text()
    assert f"if ({vnni}) idx = " in text
    example.write_text(text.replace(f"if ({vnni}) idx = ", "if (0) idx = "))
    broken = _make(out, "run", env=_runtime_env())
    assert broken.returncode != 0 and f"0 passed, {kernels} failed" in broken.stdout, broken.stdout


@pytest.mark.device
@NEEDS_CC
def test_a_grouped_coopmat_module_exports_with_its_packed_table(tmp_path):
    """A grouped launch (K of 63 and 33: packed groups longer than stored ones) in both walks exported as the
    coopmat module: the example lays every group's B out VNNI-packed at the table's packed offsets and checks every
    group; written plain instead, the check fails."""
    (tmp_path / "g.yaml").write_text(GROUPED.replace("37x48x64, 0x32x32, 20x64x32", "37x48x63, 0x32x32, 20x64x33"))
    out = tmp_path / "out"
    _export_cli(tmp_path / "g.yaml", out, "coopmat")
    assert "b_offset counts elements of the packed B" in (out / "xegemm_kernels.h").read_text()
    done = _make(out, "run", env=_runtime_env())
    _skip_when_the_example_skipped(done.stdout)
    assert done.returncode == 0 and done.stdout.count("passed grouped ") == 2, done.stdout[-2000:] + done.stderr[-2000:]
    _b_written_plain_fails(out, "sp.vnni", 2)


def _tune_directory(folder: Path) -> tuple[Shape, Shape]:
    """best.yaml and best.json as `xegemm tune` writes them: two shapes' winners, the first split K 4 ways (legal
    only where K has 4 k-tiles of 32), the second measured faster."""
    base = replace(load_config(ROOT / "configs" / "default.yaml"), sweep={}, constraints=())
    base = base.with_overrides({"types.a": "bf16", "types.b": "bf16", "types.c": "f32", "epilogue.beta": 0.0,
                                "epilogue.bias": "none", "epilogue.activation": "none"})
    s1, s2 = Shape(64, 64, 256), Shape(96, 80, 48)
    winners = [({"problem": s1.as_dict(), "tile": {"workgroup": [32, 32, 32], "subgroups": [2, 2], "split_k": 4}},
                {**s1.overrides(), "tile.workgroup": [32, 32, 32], "tile.subgroups": [2, 2], "tile.split_k": 4}),
               ({"problem": s2.as_dict(), "tile": {"workgroup": [32, 64, 32], "subgroups": [1, 2], "split_k": 1}},
                {**s2.overrides(), "tile.workgroup": [32, 64, 32], "tile.subgroups": [1, 2], "tile.split_k": 1})]
    folder.mkdir()
    (folder / "best.yaml").write_text(yaml.safe_dump(best_config(base, winners), sort_keys=False))
    shapes = {s.label: {"shape": s.as_dict(), "best": {"gflops": g}} for s, g in ((s1, 5.0), (s2, 9.0))}
    (folder / "best.json").write_text(json.dumps({"study": "t", "shapes": shapes}))
    return s1, s2


@NEEDS_CC
def test_the_c_dispatch_picks_the_kernel_the_call_api_picks(tmp_path):
    s1, s2 = _tune_directory(tmp_path / "tuned")
    out = tmp_path / "out"
    _export_cli(tmp_path / "tuned", out)
    done = _make(out, "example")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["dispatch"]["rules"] == ["tuned winner", "fastest measured", "first variant legal"]
    config, best, label = load_source(tmp_path / "tuned")
    dispatcher = Dispatcher(candidates(config, best), label)
    portable = named_lowering("portable")
    picked = {}
    t1, t2 = (s1.m, s1.n, s1.k, s1.batch), (s2.m, s2.n, s2.k, s2.batch)
    for m, n, k, batch, la, lb in ((*t1, "row", "row"), (*t2, "row", "row"), (50, 70, 40, 1, "row", "row"),
                                   (128, 128, 512, 1, "row", "row"), (64, 64, 256, 2, "row", "row"),
                                   (64, 64, 256, 1, "col", "row"), (7, 9, 16, 3, "row", "row")):
        request = Request(m, n, k, batch, "bf16", "bf16", (la,), (lb,), 1.0, 0.0, "none")
        try:
            choice = dispatcher.choose(portable, request)
            want = (choice.call.plan.name, choice.rule)
        except (LayoutError, NoKernelError):
            want = None
        run = subprocess.run([str(out / "example"), "dispatch", str(m), str(n), str(k), str(batch), "bf16", "bf16",
                              la, lb], capture_output=True, text=True, timeout=60)
        got = None if run.stdout.strip() == "none" else tuple(run.stdout.split(" ", 2)[1:])
        got = got and (got[0], got[1].strip())
        assert got == want, (m, n, k, batch, la, lb, run.stdout)
        picked[(m, n, k, batch, la)] = want
    # the rules at work: each winner at its shape; the split-K winner is illegal at K = 40 and 16 (fewer than 4
    # k-tiles) and the first variant in order elsewhere; no kernel takes a column-major A
    assert picked[(*t1, "row")][1] == picked[(*t2, "row")][1] == "tuned winner"
    assert picked[(*t1, "row")][0] != picked[(*t2, "row")][0]
    assert picked[(128, 128, 512, 1, "row")] == (picked[(*t1, "row")][0], "first variant legal")
    assert picked[(64, 64, 256, 2, "row")][1] == "first variant legal"      # another batch: not the tuned shape
    assert picked[(50, 70, 40, 1, "row")] == picked[(7, 9, 16, 3, "row")] == (picked[(*t2, "row")][0],
                                                                              "first variant legal")
    assert picked[(64, 64, 256, 1, "col")] is None


@pytest.mark.device
@NEEDS_CC
def test_a_traced_epilogue_runs_through_its_launcher_and_matches_its_reference(tmp_path, monkeypatch):
    monkeypatch.setenv("XEGEMM_ALLOW_CODE", "1")
    (tmp_path / "traced.yaml").write_text(TRACED)
    out = tmp_path / "out"
    _export_cli(tmp_path / "traced.yaml", out, extra=("--allow-code", "--code-path", str(TESTS)))
    done = _make(out, "example")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    manifest = json.loads((out / "manifest.json").read_text())
    (kernel,) = manifest["kernels"]
    assert kernel["example"].startswith("left out: a traced epilogue")
    header = (out / "xegemm_kernels.h").read_text()
    assert "cl_mem bias, cl_mem workspace, cl_mem in_bias, cl_mem out_pre," in header
    monkeypatch.syspath_prepend(str(TESTS))
    config = load_config(tmp_path / "traced.yaml")
    ops = make_operands(config)
    ref = reference(config, ops)
    p = config.problem

    def run(bias_sign: float):
        data = tmp_path / f"data{bias_sign}"
        data.mkdir()
        (data / "A.bin").write_bytes(ops.a_bytes.tobytes())
        (data / "B.bin").write_bytes(ops.b_bytes.tobytes())
        for name, value in ops.named.items():
            (data / f"{input_param(name)}.bin").write_bytes((bias_sign * value).astype(np.float32).tobytes())
        guard = np.full(256, GUARD_BYTE, np.uint8).tobytes()
        d_bytes = p.batch * p.m * p.n * dtype(config.types.c).bits // 8
        (data / "D.bin").write_bytes(bytes(d_bytes) + guard)
        (data / "out_pre.bin").write_bytes(bytes(p.batch * p.m * p.n * 4) + guard)
        ran = subprocess.run([str(out / "example"), "run", kernel["name"], str(data)], capture_output=True,
                             text=True, timeout=120, cwd=out, env=_runtime_env())
        assert ran.returncode == 0 and ran.stdout.startswith("ran "), ran.stdout + ran.stderr
        return check(config, np.fromfile(data / "D.bin", np.uint8), ref,
                     {"pre": np.fromfile(data / "out_pre.bin", np.uint8)})

    verdict = run(1.0)
    assert verdict.ok, verdict.reason
    wrong = run(-1.0)          # the bias negated: the launcher's inputs reach the kernel, and the check sees it
    assert not wrong.ok and wrong.bad_elements > 0


@pytest.mark.ocloc
@pytest.mark.skipif(find_ocloc() is None, reason="ocloc is not installed: sudo bash .ci/install-ocloc.sh")
def test_pvc_binaries_are_exported_with_their_manifest_entries(tmp_path):
    out = _export(tmp_path, "pvc")
    manifest = json.loads((out / "manifest.json").read_text())
    pvc = [k for k in manifest["kernels"] if k["target"] == "pvc"]
    assert len(pvc) == 2
    header = (out / "xegemm_kernels.h").read_text()
    for k in pvc:
        assert (out / k["binary"]).stat().st_size > 0 and (out / k["source"]).is_file()
        assert k["isa"]["dpas"] > 0 and "-cl-intel-256-GRF-per-thread" in k["build_options"]
        assert any("64-byte" in r for r in k["rules"])
        assert f"#define {k['name'].upper()}_OPTIONS_PVC \"{k['build_options']}\"" in header
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
    done = _make(out, "run", env=_runtime_env())
    # 4 kernels, each compact, strided and through USM
    assert done.returncode == 0 and "12 passed, 0 failed" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]


@NEEDS_CC
def test_a_w8a8_kernels_launcher_takes_both_operands_scales_and_compiles(tmp_path):
    # the header binds A's scales (SA) after B's scales and zeros: its launcher must take that buffer
    out = _export(tmp_path, "cpu", config=ROOT / "configs" / "w8a8_fp8.yaml")
    header = (out / "xegemm_kernels.h").read_text()
    assert "cl_mem scales, cl_mem zeros, cl_mem a_scales," in header
    assert "void *scales, void *zeros, void *a_scales," in header      # the USM launcher's
    done = _make(out, "example")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
