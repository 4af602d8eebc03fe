"""The current Intel GPU compiler (Debian unstable's ocloc 26.x / IGC 2.x) beside Debian 12's, chosen by name.

`.ci/install-ocloc-current.sh` unpacks it into the project's .tools folder (docs/compilers.md "The current
compiler"); where it is not installed the tests that need it are skipped with the command that installs it.
Real compilers only: every build here runs ocloc and reads its machine code.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from xegemm.aot import compile_kernel
from xegemm.aot.errors import CompilerNameError, OclocMissingError
from xegemm.aot.isa import parse_instructions
from xegemm.aot.toolchain import (
    COMPILER_ENV,
    OCLOC_ENV,
    aot_target,
    compiler_version,
    current_ocloc,
    find_ocloc,
    installed_compilers,
    unpacked_packages,
)
from xegemm.library.targets import UnknownTargetError

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / ".ci" / "install-ocloc-current.sh"
CURRENT_MISSING = ("the current Intel GPU compiler is not installed: run `sudo make ocloc-current` "
                   "(.ci/install-ocloc-current.sh, Debian unstable's ocloc into .tools)")
SYSTEM_MISSING = "Debian's ocloc is not installed: sudo bash .ci/install-ocloc.sh"
needs_current = pytest.mark.skipif(current_ocloc() is None, reason=CURRENT_MISSING)
needs_system = pytest.mark.skipif(shutil.which("ocloc") is None, reason=SYSTEM_MISSING)

# A shipped native kernel (kernels/native, generated for cl_intel_subgroup_2d_block_io): per k-step and
# sub-group 1 x XE_2D_U16x32x32_LD_N (A) + 1 x XE_2D_U16x32x32_LD_V (B) and 16 DPAS; prefetch distance 2
# (3 prefetches of A and B: the two before the loop and the one in it); 8 x XE_2D_U32x8x16_ST_N stores.
KERNEL = ROOT / "kernels" / "native" / ("xegemm_bf16_bf16_f32_f32_ttt_64x64x32_sg2x2_dpas8x16x16_au16x32x32n_"
                                        "bu16x32x32v_cu32x8x16n_pf2_grf256.cl")
PLAN = {"dpas": 16, "load_block2d": 2, "store_block2d": 8, "prefetch_block2d": 6}




def test_a_compiler_is_chosen_by_name_path_or_environment(no_overrides, monkeypatch, tmp_path):
    assert find_ocloc() == find_ocloc("system") == shutil.which("ocloc")
    assert find_ocloc("current") == current_ocloc()
    with pytest.raises(CompilerNameError, match="'system'.*'current'"):
        find_ocloc("newest")
    assert find_ocloc(str(tmp_path / "no-such-ocloc")) is None
    fake = tmp_path / "my-ocloc"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert find_ocloc(str(fake)) == str(fake)
    monkeypatch.setenv(COMPILER_ENV, str(fake))      # the default for callers that name no compiler
    assert find_ocloc() == str(fake) and find_ocloc("system") == shutil.which("ocloc")
    monkeypatch.setenv(OCLOC_ENV, str(fake))         # XEGEMM_OCLOC wins over everything
    assert find_ocloc("current") == find_ocloc("system") == str(fake)


def test_a_missing_current_compiler_says_how_to_install_it(no_overrides, monkeypatch, tmp_path):
    monkeypatch.setenv("XEGEMM_TOOLS_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_ocloc("current") is None
    with pytest.raises(OclocMissingError, match="make ocloc-current"):
        compile_kernel("kernel void k() {}", "pvc", workdir=tmp_path / "w", compiler="current")


@needs_current
def test_each_compiler_reports_its_own_version(no_overrides):
    versions = installed_compilers()
    current = versions["current"]
    recorded = dict(unpacked_packages(current.path))
    assert current == compiler_version("current")
    assert recorded["ocloc-version"] == current.driver            # `ocloc --version` == the driver query
    assert current.igc == recorded["libigc2"].split("-")[0]         # IGC from the install record, not dpkg
    assert current.describe().startswith(f"ocloc {current.driver}, IGC {current.igc}")
    if versions["system"] is not None:
        assert versions["system"].key != current.key                # capability caches stay apart
        assert versions["system"].packages == ()


@needs_current
@pytest.mark.parametrize("target", ["pvc", "bmg"])
def test_the_current_compiler_issues_every_planned_message(no_overrides, target, tmp_path):
    build = compile_kernel(KERNEL.read_text(), target, grf=256, workdir=tmp_path, compiler="current")
    assert build.ok, build.log
    stats = build.stats
    assert {key: getattr(stats, key) for key in PLAN} == PLAN
    assert stats.grf == 256 and stats.spill_bytes == 0
    # the zebin disassembly (.text.<kernel>.asm) minus its padding is exactly the dump's instruction count
    assert stats.dump_exact is True and stats.target == target


@needs_system
def test_debians_compiler_cannot_build_for_xe2(no_overrides):
    with pytest.raises(UnknownTargetError, match="current compiler"):
        aot_target("bmg", "system")


def test_only_trailing_illegal_padding_is_dropped():
    code = "(W)     mov (16|M0)  r1.0<1>:ud  0x0:ud\n        illegal\n(W)     mov (1|M0)  r2.0<1>:ud  0x1:ud\n"
    assert [i.opcode for i in parse_instructions(code + "        illegal\n" * 10)] == ["mov", "illegal", "mov"]
    assert [i.opcode for i in parse_instructions(code)] == ["mov", "illegal", "mov"]


def _root_only():
    if os.geteuid() != 0:
        pytest.skip("the install script runs as root only (it calls apt-get)")


def test_a_failed_download_leaves_nothing_and_does_not_fail(tmp_path):
    """An unknown suite stands for a day on which unstable lacks a package, or no network: one line, exit 0."""
    _root_only()
    tools = tmp_path / "tools"
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "XEGEMM_TOOLS_DIR": str(tools),
                               "XEGEMM_OCLOC_CURRENT_SUITE": "no-such-suite"})
    assert done.returncode == 0
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1 and "not installed" in lines[0] and "old one stays in use" in lines[0]
    assert list(tools.iterdir()) == []          # no stage, no half-unpacked root, no wrapper


@needs_current
def test_a_second_install_does_nothing_and_says_nothing():
    _root_only()
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "XEGEMM_TOOLS_DIR": str(Path(current_ocloc()).parent.parent)})
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@pytest.mark.parametrize("command", [["build", "configs/tf32.yaml", "--target", "bmg"],
                                     ["tune", "configs/tf32.yaml", "--target", "bmg", "--budget", "1"],
                                     ["export", "configs/tf32.yaml", "--target", "bmg"]])
def test_xe2_without_the_current_compiler_is_one_line_naming_the_install(no_overrides, monkeypatch, tmp_path,
                                                                         capsys, command):
    """Every command that builds for a target takes --compiler; with only Debian's compiler (or naming it), a
    target it does not know fails in one line that names `make ocloc-current`, before anything is written."""
    from xegemm.cli import main
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("XEGEMM_TOOLS_DIR", str(tmp_path / "no-tools"))     # as if the download had failed
    monkeypatch.setenv("PATH", os.environ["PATH"].replace(str(ROOT / ".tools" / "bin"), ""))
    for extra in ([], ["--compiler", "system"]):
        out = tmp_path / f"out{len(extra)}"
        assert main([*command, "--out", str(out), *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "make ocloc-current" in err[0], err
        assert not out.exists() or not any(out.iterdir())
    assert main([*command, "--out", str(tmp_path / "x"), "--compiler", "newest"]) == 2
    assert "unknown compiler 'newest'" in capsys.readouterr().err
