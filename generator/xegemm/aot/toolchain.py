"""Locate Intel's offline compiler ``ocloc``, name its targets, ask its version and run it.

Facts used here (docs/compilers.md, "ocloc"): Debian 12's ``intel-opencl-icd`` gives
``/usr/bin/ocloc`` (compute runtime 22.43, IGC 1.0.12504); ``-device pvc`` builds for Xe-HPC and
``-device dg2-g10`` (also ``acm-g10``, ``dg2``) for Xe-HPG.  What each target is (its ``-device`` spelling,
GRF width, DPAS width) lives in the target registry, :mod:`xegemm.library.targets`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from xegemm.aot.errors import OclocMissingError, OclocToolError
from xegemm.library.targets import AOT_TARGETS, Target, UnknownTargetError, get_target

OCLOC_TIMEOUT = 900.0   # seconds an ocloc run may take before it is killed (a spilling dg2 build takes minutes)


def aot_target(name: str) -> Target:
    """The registry's :class:`xegemm.library.targets.Target` called ``name``, if ocloc can build for it."""
    target = get_target(name)
    if target.ocloc_device is None:
        raise UnknownTargetError(f"ocloc here cannot build for {name} ({target.arch}); ahead-of-time targets: "
                                 f"{', '.join(AOT_TARGETS)}")
    return target


def find_ocloc() -> str | None:
    """Path of ``ocloc`` (``$XEGEMM_OCLOC`` if set, else the one on PATH), or None."""
    override = os.environ.get("XEGEMM_OCLOC")
    if override:
        return override if os.access(override, os.X_OK) else None
    return shutil.which("ocloc")


def require_ocloc() -> str:
    """Like :func:`find_ocloc` but raise :class:`OclocMissingError` (with install advice) if absent."""
    path = find_ocloc()
    if path is None:
        raise OclocMissingError()
    return path


def run_ocloc(args: list[str], cwd: Path, env: dict[str, str] | None = None,
              timeout: float = OCLOC_TIMEOUT) -> subprocess.CompletedProcess:
    """Run ``ocloc ARGS`` in ``cwd`` with extra environment; stdout and stderr merged as text (killed and
    :class:`subprocess.TimeoutExpired` after ``timeout`` seconds)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([require_ocloc(), *args], cwd=cwd, env=full_env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace", timeout=timeout, check=False)


@dataclass(frozen=True)
class CompilerVersion:
    """What identifies a compiler build: the ocloc/NEO driver version and, if dpkg knows it, IGC's."""

    driver: str
    igc: str | None

    @property
    def key(self) -> str:
        """A file-name-safe key, e.g. ``ocloc-22.43.24595_igc-1.0.12504.6``."""
        return re.sub(r"[^A-Za-z0-9._-]", "_", f"ocloc-{self.driver}_igc-{self.igc or 'unknown'}")

    @property
    def igc_release(self) -> str | None:
        """IGC's first three version parts, e.g. ``1.0.12504`` (the named profiles use it)."""
        if not self.igc:
            return None
        return ".".join(self.igc.split(".")[:3])


# Package names that carry IGC: Debian (libigc1) and Intel's own releases (intel-igc-core[-2]).
_IGC_PACKAGES = ("libigc1", "libigc2", "intel-igc-core-2", "intel-igc-core")


def _dpkg_version(package: str) -> str | None:
    if shutil.which("dpkg-query") is None:
        return None
    done = subprocess.run(["dpkg-query", "-W", "-f=${Status}|${Version}", package],
                          capture_output=True, text=True, check=False)
    status, _, version = done.stdout.partition("|")
    if done.returncode != 0 or "installed" not in status.split():
        return None
    # 1.0.12504.6-1+deb12u1 -> 1.0.12504.6 (drop the epoch and the Debian revision)
    return version.split(":")[-1].split("-")[0] or None


@lru_cache(maxsize=None)
def _compiler_version(ocloc: str) -> CompilerVersion:
    # `ocloc query OCL_DRIVER_VERSION` writes a file of that name into the working directory
    # (ocloc 22.43 has no --version); IGC's version is known only to the package manager.
    with tempfile.TemporaryDirectory(prefix="xegemm-ocloc-query-") as tmp:
        done = run_ocloc(["query", "OCL_DRIVER_VERSION"], cwd=Path(tmp), timeout=120)
        out = Path(tmp, "OCL_DRIVER_VERSION")
        if done.returncode != 0 or not out.exists():
            raise OclocToolError(f"`{ocloc} query OCL_DRIVER_VERSION` failed", done.stdout)
        driver = out.read_text(errors="replace").strip(" \t\r\n\x00")  # ocloc writes a trailing NUL
    igc = next((v for v in map(_dpkg_version, _IGC_PACKAGES) if v), None)
    return CompilerVersion(driver=driver, igc=igc)


def compiler_version() -> CompilerVersion:
    """The version of the ocloc that :func:`find_ocloc` finds (cached per ocloc path)."""
    return _compiler_version(require_ocloc())
