"""The benchmark's library references, installed where the bench can, else skipped with the reason.

- CLBlast (Debian's ``libclblast1``) and its tuner (``clblast-utils``): installed by ``.ci/install-clblast.sh``
  when missing and running as root; otherwise skipped, never a failure.
- oneMKL through dpnp (the project's ``mkl`` extra, about 1.2 GB): installed only when asked for
  (``make bench-goals DPNP=1``, ``--install-dpnp``).

Each function returns None when the reference can run, else the reason it is skipped.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

from bench import REPO
from bench.clblast import find_clblast

CLBLAST_SCRIPT = REPO / ".ci" / "install-clblast.sh"
CLBLAST_TUNER = "clblast_tuner_xgemm"
DPNP_OPT_IN = "make bench-goals DPNP=1 (or --install-dpnp) installs it: pip install -e '.[mkl]', about 1.2 GB"
INSTALL_TIMEOUT_S = 1800


def is_root() -> bool:
    return os.geteuid() == 0


def _run(command: list[str]) -> str | None:
    """Run an installer; None on success, else the tail of what it printed."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if done.returncode == 0 else (done.stdout + done.stderr).strip()[-500:] or f"exit {done.returncode}"


def clblast_missing() -> dict[str, str]:
    """What of CLBlast is not installed: ``{"library": ..., "tuner": ...}`` (empty when both are)."""
    missing = {}
    if find_clblast() is None:
        missing["library"] = "libclblast1"
    if shutil.which(CLBLAST_TUNER) is None:
        missing["tuner"] = "clblast-utils"
    return missing


def ensure_clblast(install: bool = True, root: bool | None = None) -> dict[str, str | None]:
    """CLBlast for the references: ``{"library": reason or None, "tuner": reason or None}``, installing the
    missing Debian packages first when ``install`` and running as root."""
    missing = clblast_missing()
    if missing and install and (is_root() if root is None else root):
        failure = _run(["bash", str(CLBLAST_SCRIPT)])
        if failure is None:
            missing = clblast_missing()
        else:
            return {part: f"installing CLBlast failed: {failure}" for part in ("library", "tuner")}
    how = ("not installing it: this is not root; install it with: sudo bash .ci/install-clblast.sh"
           if install else "not installing it (--no-install)")
    return {"library": f"CLBlast is not installed (Debian package libclblast1); {how}" if "library" in missing
            else None,
            "tuner": f"CLBlast's tuner is not installed (Debian package clblast-utils); {how}" if "tuner" in missing
            else None}


def dpnp_installed() -> bool:
    return importlib.util.find_spec("dpnp") is not None


def ensure_dpnp(opt_in: bool) -> str | None:
    """oneMKL through dpnp: None when importable (after installing the ``mkl`` extra if ``opt_in``), else why not."""
    if dpnp_installed():
        return None
    if not opt_in:
        return f"dpnp is not installed; {DPNP_OPT_IN}"
    failure = _run([sys.executable, "-m", "pip", "install", "--quiet", "-e", f"{REPO}[mkl]"])
    if failure is not None:
        return f"installing dpnp failed: {failure}"
    importlib.invalidate_caches()
    return None if dpnp_installed() else "pip installed the mkl extra but dpnp still does not import"
