"""The command line's contracts: `xegemm atoms ...`, `generate` and `run`."""

import json
import subprocess
import sys

import pytest

import xegemm
from xegemm.cli import main


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_atoms_show_copy_json_contract(capsys):
    data = _json(capsys, ["atoms", "show", "XE_2D_U16x32x16_LD_N", "--json"])
    assert data["name"] == "XE_2D_U16x32x16_LD_N" and data["lanes"] == 16
    assert len(data["map"]) == 16
    assert data["map"][3] == [[r, 3] for r in range(32)]


def test_atoms_show_mma_json_contract(capsys):
    data = _json(capsys, ["atoms", "show", "XE_8x16x16_F32BF16BF16F32_TT", "--json"])
    assert data["name"] == "XE_8x16x16_F32BF16BF16F32_TT" and data["lanes"] == 16
    assert data["a"]["map"][5] == [[m, 5] for m in range(8)]            # A: lane = k, component = m
    assert data["b"]["map"][5] == [[k, 5] for k in range(16)]           # B: lane = n, VNNI pairs of k
    assert data["c"]["map"][5] == [[m, 5] for m in range(8)]            # C: lane = n, component = m


def test_atoms_show_prints_the_seed_table(capsys):
    assert main(["atoms", "show", "XE_2D_Packed_U8x8x32_LD_N"]) == 0
    out = capsys.readouterr().out
    assert "ushort8" in out
    lane1 = next(line for line in out.splitlines() if line.split()[:1] == ["1"])
    assert lane1.split()[1:5] == ["0,2", "0,3", "1,2", "1,3"]


@pytest.mark.parametrize("name, words", [
    ("XE_2D_U16x64x16_LD_N", "block height 64"),
    ("XE_2D_U8x8x32_ST_N", "sycl-tla defines it"),
    ("XE_2D_nonsense", "not a 2D copy atom name"),
    ("XE_8x16x16_F32F16BF16F32_TT", "DPAS"),
])
def test_atoms_show_illegal_exits_nonzero_with_the_rule(capsys, name, words):
    assert main(["atoms", "show", name]) == 2
    assert words in capsys.readouterr().err


def test_atoms_list_json_has_both_kinds(capsys):
    data = _json(capsys, ["atoms", "list", "--json"])
    kinds = {d["kind"] for d in data}
    assert kinds == {"copy", "mma"}
    names = {d["name"] for d in data}
    assert "XE_2D_U16x32x32_LD_V" in names and "XE_8x16x32_S32S8U8S32_TT" in names
    copy_only = _json(capsys, ["atoms", "list", "--kind", "copy", "--json"])
    assert {d["kind"] for d in copy_only} == {"copy"}


def test_atoms_coopmatrix_json(capsys):
    data = _json(capsys, ["atoms", "coopmatrix", "--use", "acc", "--rows", "1", "--cols", "17", "--json"])
    assert data["lanes"] == 16 and data["map"][0] == [[0, 0], [0, 16]] and data["map"][1] == [[0, 1], None]


def test_entry_point_and_piping():
    """Like `xegemm atoms list | head -2`: the reader closes the pipe early; xegemm itself must exit 0 quietly."""
    proc = subprocess.Popen([sys.executable, "-m", "xegemm", "atoms", "list"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    head = [proc.stdout.readline() for _ in range(2)]
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 0, err
    assert "atom" in "".join(head) and "Traceback" not in err


def test_version():
    done = subprocess.run([sys.executable, "-m", "xegemm", "--version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == f"xegemm {xegemm.__version__}"


def test_bad_config_is_a_clear_error(tmp_path, capsys):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("problem: {m: 8, n: 8, k: 8}\ntyeps: {a: bf16}\n")
    assert main(["generate", str(cfg), "--out", str(tmp_path / "k")]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml:2" in err and "did you mean 'types'" in err


def test_atoms_show_1d_block_atom(capsys):
    data = _json(capsys, ["atoms", "show", "XE_1D_U16x8x16_LD_SG8", "--json"])
    assert data["lanes"] == 8
    assert data["map"][3] == [[r, 2 * 3 + j] for r in range(8) for j in range(2)]   # the SIMD8 bf16 A operand
    assert main(["atoms", "show", "XE_1D_U16x8x16_LD_SG3"]) == 2


RUN_SHAPES_CONFIG = ("name: shapes\nproblem: {m: 40, n: 48, k: 32}\ntile: {workgroup: [32, 32, 16], subgroups: [1, 2]}\n"
                     "profile: {warmup: 1, repeats: 3}\nsweep: {problem.m: [40, 56], pipeline.prefetch: [0, 1]}\n")


def test_run_shapes_replace_the_problem_and_its_sweep(tmp_path, sycl_device):
    cfg = tmp_path / "shapes.yaml"
    cfg.write_text(RUN_SHAPES_CONFIG)
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--device", sycl_device.filter_string, "--out", str(out), "--shapes",
                 "33x17x16,16x16x48x2"]) == 0
    variants = json.loads((out / "results.json").read_text())["variants"]
    problems = sorted({(v["params"]["m"], v["params"]["n"], v["params"]["k"], v["params"]["batch"])
                       for v in variants})
    assert problems == [(16, 16, 48, 2), (33, 17, 16, 1)]              # not the config's 40 or 56 rows
    assert len(variants) == 4 and all(v["status"] == "ok" for v in variants)   # the prefetch axis stays
    assert all(v["time_ms"]["warmup"]["runs"] >= 1 for v in variants)       # the warm-up used is recorded


def test_run_shapes_bad_label_is_one_line(tmp_path, capsys):
    cfg = tmp_path / "shapes.yaml"
    cfg.write_text(RUN_SHAPES_CONFIG)
    assert main(["run", str(cfg), "--shapes", "12x3"]) == 2
    assert "--shapes: '12x3' is not a shape" in capsys.readouterr().err
