"""Locate Intel's offline compilers ``ocloc``, name their targets, ask their versions and run them.

Two compilers are known by name (docs/compilers.md, "ocloc" and "The current compiler"):

- ``system``: the ``ocloc`` on PATH, Debian 12's ``/usr/bin/ocloc`` from ``intel-opencl-icd`` (compute
  runtime 22.43, IGC 1.0.12504); ``-device pvc`` builds for Xe-HPC and ``-device dg2-g10`` for Xe-HPG.
- ``current``: Debian unstable's ocloc 26.x with IGC 2.x, unpacked by ``.ci/install-ocloc-current.sh`` into
  ``$XEGEMM_TOOLS_DIR`` (default ``<repo>/.tools``) and run through its wrapper ``bin/ocloc-current``; it also
  knows Xe2 and Xe3 (``bmg``, ``lnl``, ``ptl``).

Any other compiler is named by its path.  :func:`find_ocloc` is the one place that decides which compiler a
build uses: ``$XEGEMM_OCLOC`` (a path) wins, then the ``compiler`` argument, then ``$XEGEMM_COMPILER``, then
``system``.  What each target is (its ``-device`` spelling, GRF width, DPAS width) lives in the target
registry, :mod:`xegemm.library.targets`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from xegemm.aot.errors import CompilerNameError, OclocMissingError, OclocToolError
from xegemm.library.targets import COMPILER_NAMES, Target, UnknownTargetError, get_target

OCLOC_TIMEOUT = 900.0   # seconds an ocloc run may take before it is killed (a spilling dg2 build takes minutes)


def aot_target(name: str, compiler: str | None = None) -> Target:
    """The registry's :class:`xegemm.library.targets.Target` called ``name``, with ``ocloc_device`` set to the
    ``-device`` spelling of the compiler that builds it (:func:`build_compiler`).

    A named compiler builds the targets the registry gives it a spelling for (Debian's: pvc, dg2; the current
    one: also bmg, lnl, ptl); a compiler named by its path builds a target under the first of the registry's
    spellings it lists in ``ocloc compile --help``.  Anything else is one clear error naming what to install."""
    target = get_target(name)
    choice = build_compiler(name, compiler)
    if choice in COMPILERS:
        device = target.device_for(choice)
        if device is None:
            raise UnknownTargetError(
                f"{_COMPILER_TITLES[choice]} cannot build for {name} ({target.arch}); {name} needs "
                f"{' or '.join(_COMPILER_TITLES[c] for c in target.compilers)}: install it with `make ocloc-current` "
                f"and choose it with --compiler current (or XEGEMM_COMPILER=current)")
        return replace(target, ocloc_device=device)
    listed = ocloc_devices(choice) if _executable(choice) else frozenset()
    spellings = [device for _, device in target.ocloc_devices]
    device = next((d for d in spellings if d in listed), None) or (spellings[0] if not listed else None)
    if device is None:
        raise UnknownTargetError(f"the ocloc at {choice} lists none of {', '.join(dict.fromkeys(spellings))} for {name} "
                                 f"({target.arch}) in `ocloc compile --help`")
    return replace(target, ocloc_device=device)


_COMPILER_TITLES = {"system": "Debian 12's compiler (system: ocloc 22.43, IGC 1.0.12504)",
                    "current": "the current compiler (current: ocloc 26.x, IGC 2.x)"}


def build_compiler(target: str, compiler: str | None = None) -> str:
    """The compiler a build for ``target`` uses: ``$XEGEMM_OCLOC`` (a path) wins, then ``compiler``, then
    ``$XEGEMM_COMPILER``, then the first named compiler that knows the target (``system`` for pvc and dg2,
    ``current`` for bmg, lnl and ptl).  A name that is neither ``system``, ``current`` nor a path raises
    :class:`CompilerNameError`."""
    override = os.environ.get(OCLOC_ENV)
    if override:
        return override
    choice = compiler or os.environ.get(COMPILER_ENV)
    if not choice:
        return get_target(target).compilers[0]
    if choice in COMPILERS or os.sep in choice or os.path.exists(choice):
        return choice
    raise CompilerNameError(f"unknown compiler {choice!r}: give {SYSTEM!r} (Debian's ocloc on PATH), "
                            f"{CURRENT!r} (.ci/install-ocloc-current.sh) or the path of an ocloc")


_DEVICE_LIST = re.compile(r"<device_type> can be:\s*(?P<list>[^\n]+)")


@lru_cache(maxsize=None)
def ocloc_devices(ocloc: str) -> frozenset[str]:
    """The ``-device`` names an ocloc lists in ``ocloc compile --help`` (empty if it lists none)."""
    with tempfile.TemporaryDirectory(prefix="xegemm-ocloc-help-") as tmp:
        done = _run(ocloc, ["compile", "--help"], cwd=Path(tmp), timeout=120)
    found = _DEVICE_LIST.search(done.stdout)
    if not found:
        return frozenset()
    return frozenset(word.strip() for word in found["list"].split(",") if word.strip() and " " not in word.strip())


OCLOC_ENV = "XEGEMM_OCLOC"         # a path: always this compiler
COMPILER_ENV = "XEGEMM_COMPILER"    # the default compiler: "system", "current" or a path
TOOLS_ENV = "XEGEMM_TOOLS_DIR"      # where .ci/install-ocloc-current.sh installs (default <repo>/.tools)
COMPILERS = COMPILER_NAMES          # ("system", "current"): the names the target registry gives spellings for
SYSTEM, CURRENT = COMPILERS
CURRENT_WRAPPER = "ocloc-current"   # the wrapper's name, in <tools>/bin and possibly on PATH
CURRENT_VERSIONS = Path("ocloc-current", "versions.txt")   # under <tools>: package versions, `ocloc --version`


def compiler_help(what: str) -> str:
    """The help text of ``--compiler NAME|PATH`` (every command's, tune's too), ``what`` saying what it chooses."""
    return (f"{what}: system (Debian 12's ocloc 22.43 / IGC 1.0.12504: pvc, dg2), current (ocloc 26 / IGC 2.x from "
            "`make ocloc-current`: also bmg, lnl, ptl) or the path of an ocloc (default: $XEGEMM_COMPILER, else the "
            "first of them that builds for the target; $XEGEMM_OCLOC wins)")


def tools_dir() -> Path:
    """``$XEGEMM_TOOLS_DIR``, else ``.tools`` in the repository this package lives in."""
    override = os.environ.get(TOOLS_ENV)
    return Path(override) if override else Path(__file__).resolve().parents[3] / ".tools"


def current_ocloc() -> str | None:
    """The current compiler's wrapper (``<tools>/bin/ocloc-current``, else ``ocloc-current`` on PATH), or None."""
    wrapper = tools_dir() / "bin" / CURRENT_WRAPPER
    if os.access(wrapper, os.X_OK):
        return str(wrapper)
    return shutil.which(CURRENT_WRAPPER)


def _executable(path: str) -> str | None:
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def find_ocloc(compiler: str | None = None) -> str | None:
    """Path of the ocloc to use, or None if that compiler is not installed.

    ``$XEGEMM_OCLOC`` (a path) wins; else ``compiler`` (``"system"``, ``"current"`` or a path), else
    ``$XEGEMM_COMPILER``, else ``"system"`` (the ``ocloc`` on PATH).  A name that is neither raises
    :class:`CompilerNameError`."""
    override = os.environ.get(OCLOC_ENV)
    if override:
        return _executable(override)
    choice = compiler or os.environ.get(COMPILER_ENV) or SYSTEM
    if choice == SYSTEM:
        return shutil.which("ocloc")
    if choice == CURRENT:
        return current_ocloc()
    if os.sep in choice or os.path.exists(choice):
        return _executable(choice)
    raise CompilerNameError(f"unknown compiler {choice!r}: give {SYSTEM!r} (Debian's ocloc on PATH), "
                            f"{CURRENT!r} (.ci/install-ocloc-current.sh) or the path of an ocloc")


def require_ocloc(compiler: str | None = None) -> str:
    """Like :func:`find_ocloc` but raise :class:`OclocMissingError` (with install advice) if absent."""
    path = find_ocloc(compiler)
    if path is None:
        choice = None if os.environ.get(OCLOC_ENV) else (compiler or os.environ.get(COMPILER_ENV))
        if choice == CURRENT:
            raise OclocMissingError("the current Intel GPU compiler (Debian unstable's ocloc) is not installed "
                                    f"in {tools_dir()}", current=True)
        raise OclocMissingError()
    return path


def run_ocloc(args: list[str], cwd: Path, env: dict[str, str] | None = None,
              timeout: float = OCLOC_TIMEOUT, compiler: str | None = None) -> subprocess.CompletedProcess:
    """Run ``ocloc ARGS`` (the one :func:`find_ocloc` picks for ``compiler``) in ``cwd`` with extra environment;
    stdout and stderr merged as text (killed and :class:`subprocess.TimeoutExpired` after ``timeout`` seconds)."""
    return _run(require_ocloc(compiler), args, cwd, env, timeout)


def _run(ocloc: str, args: list[str], cwd: Path, env: dict[str, str] | None = None,
         timeout: float = OCLOC_TIMEOUT) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([ocloc, *args], cwd=cwd, env=full_env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace", timeout=timeout, check=False)


@dataclass(frozen=True)
class CompilerVersion:
    """What identifies a compiler build: the ocloc/NEO driver version and, where known, IGC's package version."""

    driver: str
    igc: str | None
    path: str | None = None   # the ocloc (or wrapper) asked
    packages: tuple[tuple[str, str], ...] = ()   # (package, version) for the current compiler's unpacked packages

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

    def describe(self) -> str:
        """One line for people, e.g. ``ocloc 26.27.039122, IGC 2.40.14 (/path/ocloc-current)``."""
        where = f" ({self.path})" if self.path else ""
        return f"ocloc {self.driver}, IGC {self.igc or 'unknown'}{where}"


# Package names that carry IGC: Debian (libigc1) and Intel's own releases (intel-igc-core[-2]).
_IGC_PACKAGES = ("libigc1", "libigc2", "intel-igc-core-2", "intel-igc-core")


def _package_version(version: str) -> str:
    """1.0.12504.6-1+deb12u1 -> 1.0.12504.6 (drop the epoch and the Debian revision)."""
    return version.split(":")[-1].split("-")[0]


def _dpkg_version(package: str) -> str | None:
    if shutil.which("dpkg-query") is None:
        return None
    done = subprocess.run(["dpkg-query", "-W", "-f=${Status}|${Version}", package],
                          capture_output=True, text=True, check=False)
    status, _, version = done.stdout.partition("|")
    if done.returncode != 0 or "installed" not in status.split():
        return None
    return _package_version(version) or None


MAX_VERSIONS_BYTES = 64 * 1024


def unpacked_packages(ocloc: str) -> tuple[tuple[str, str], ...]:
    """``(package, version)`` pairs the install script recorded for an ocloc it unpacked: read from
    ``versions.txt`` (``package=version`` lines) of the tools folder that holds the wrapper; () for any other."""
    versions = Path(ocloc).resolve().parent.parent / CURRENT_VERSIONS
    if not versions.is_file():
        return ()
    with open(versions, encoding="utf-8", errors="replace") as f:
        text = f.read(MAX_VERSIONS_BYTES)
    pairs = []
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name and " " not in name:
            pairs.append((name, value.strip()))
    return tuple(pairs)


@lru_cache(maxsize=None)
def _compiler_version(ocloc: str) -> CompilerVersion:
    # `ocloc query OCL_DRIVER_VERSION` writes a file of that name into the working directory (ocloc 22.43 has
    # no --version; 26.x has both and prints the same number).  IGC's version is known only to a package
    # manager: dpkg for the system's ocloc, the install script's record for an unpacked one.
    with tempfile.TemporaryDirectory(prefix="xegemm-ocloc-query-") as tmp:
        done = _run(ocloc, ["query", "OCL_DRIVER_VERSION"], cwd=Path(tmp), timeout=120)
        out = Path(tmp, "OCL_DRIVER_VERSION")
        if done.returncode != 0 or not out.exists():
            raise OclocToolError(f"`{ocloc} query OCL_DRIVER_VERSION` failed", done.stdout)
        driver = out.read_text(errors="replace").strip(" \t\r\n\x00")  # ocloc writes a trailing NUL
    packages = unpacked_packages(ocloc)
    if packages:
        recorded = dict(packages)
        igc = next((_package_version(recorded[p]) for p in _IGC_PACKAGES if p in recorded), None)
    else:
        igc = next((v for v in map(_dpkg_version, _IGC_PACKAGES) if v), None)
    return CompilerVersion(driver=driver, igc=igc, path=ocloc, packages=packages)


def compiler_version(compiler: str | None = None) -> CompilerVersion:
    """The version of the ocloc that :func:`find_ocloc` finds for ``compiler`` (cached per ocloc path)."""
    return _compiler_version(require_ocloc(compiler))


def installed_compilers() -> dict[str, CompilerVersion | None]:
    """Each named compiler (:data:`COMPILERS`, ignoring ``$XEGEMM_OCLOC``) -> its version, None if not installed."""
    found = {SYSTEM: shutil.which("ocloc"), CURRENT: current_ocloc()}
    return {name: _compiler_version(path) if path else None for name, path in found.items()}


def compiler_record(target: str, compiler: str | None = None) -> dict:
    """What build.json and the manifests record of the compiler a build for ``target`` uses (:func:`build_compiler`):
    its name (``system``, ``current`` or the path given), its ocloc and IGC versions and its path.  Raises
    OclocMissingError (with the command that installs it) when that compiler is not installed."""
    choice = build_compiler(target, compiler)
    version = compiler_version(choice)
    return {"name": choice, "driver": version.driver, "igc": version.igc, "path": version.path,
            "describe": version.describe()}
