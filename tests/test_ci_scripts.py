"""The install scripts of .ci/ and the Makefile's targets: no pipe races, and `make demo` installs nothing.

Under `set -o pipefail` a pipe into `grep -q` (or `head`) fails now and then: the reader exits at the first
match, the writer dies of SIGPIPE (status 141) and pipefail reports it.  `ldconfig -p | grep -q ...` failed
about 1 run in 60 that way.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted((ROOT / ".ci").glob("install-*.sh"))
EARLY_EXIT_READER = re.compile(r"\|\s*(grep\s+(-\w*q|--quiet)|head\b)")


def _code_lines(path: Path):
    for number, line in enumerate(path.read_text().splitlines(), 1):
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#") else ""
        yield number, code


@pytest.mark.parametrize("path", [*SCRIPTS, ROOT / ".ci" / "apt-lib.sh", ROOT / "Makefile"], ids=lambda p: p.name)
def test_no_pipe_into_a_reader_that_exits_early(path):
    bad = [f"{path.name}:{n}: {code.strip()}" for n, code in _code_lines(path) if EARLY_EXIT_READER.search(code)]
    assert not bad, "a pipe into grep -q/head races under pipefail:\n" + "\n".join(bad)


def test_the_pattern_caught_above_is_the_one_that_fails():
    """The check above matches the line that failed, and not its replacement."""
    assert EARLY_EXIT_READER.search("if ! ldconfig -p | grep -q 'libclblast\\.so\\.1 '; then")
    assert not EARLY_EXIT_READER.search("if ! ldconfig -p | grep 'libclblast\\.so\\.1 ' >/dev/null; then")


def _make_dry_run(target: str) -> str:
    out = subprocess.run(["make", "-n", "-C", str(ROOT), target], capture_output=True, text=True, check=True,
                         env={**os.environ, "MAKEFLAGS": ""})
    return out.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_demo_installs_no_system_tools_and_test_does():
    assert "install-" not in _make_dry_run("demo")
    assert all(f"install-{tool}.sh" in _make_dry_run("tools") for tool in ("ocloc", "ocloc-current", "chromium",
                                                                            "postgresql", "clblast", "opencl-dev"))


INSTALLED = {
    "install-ocloc.sh": lambda: shutil.which("ocloc") is not None,
    "install-chromium.sh": lambda: shutil.which("chromium") is not None and shutil.which("chromedriver") is not None,
    "install-postgresql.sh": lambda: shutil.which("initdb") is not None or any(
        Path("/usr/lib/postgresql").glob("*/bin/initdb")),
    "install-clblast.sh": lambda: shutil.which("clblast_tuner_xgemm") is not None and "libclblast.so.1 " in
        subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout,
    "install-ocloc-current.sh": lambda: os.access(Path(os.environ.get("XEGEMM_TOOLS_DIR") or ROOT / ".tools",
                                                       "bin", "ocloc-current"), os.X_OK),
    "install-opencl-dev.sh": lambda: Path("/usr/include/CL/cl.h").is_file() and shutil.which("cc") is not None,
}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_script_checks_an_installed_tool_the_same_way_every_time(script):
    """Run as root on a machine that has the tool, a script only checks: 40 runs in a row all succeed (the pipe
    race failed 5 runs in 300)."""
    if os.geteuid() != 0:
        pytest.skip("the scripts run as root only")
    if not INSTALLED[script.name]():
        pytest.skip(f"{script.name}: the tool is not installed (this test never installs it)")
    codes = [subprocess.run(["bash", str(script)], capture_output=True).returncode for _ in range(40)]
    assert codes == [0] * 40
