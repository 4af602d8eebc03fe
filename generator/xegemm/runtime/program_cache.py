"""The persistent program cache: device binaries of built programs, one file per build, shared by processes.

A build's key is the sha256 of its OpenCL C source, its build options and the identity of the device and its
runtime (name, driver and device versions, platform, the runtime library's file, the ``CL_CONFIG_*``
settings that change the CPU runtime's code generation, and on a CPU device its instruction-set flags): a
binary is only ever loaded where the same compiler would have produced it.  The directory is
``$XEGEMM_CACHE_DIR`` (empty: no persistent cache), else ``$XDG_CACHE_HOME/xegemm/programs``
(``~/.cache/xegemm/programs``).  Entries are written atomically (a temporary file renamed into place) and
carry their key and a checksum; an entry that is torn, corrupt, filed under another key or refused by the
runtime is rebuilt and replaced, never an error.  :data:`STATS` counts what happened in this process.

A checksum cannot tell a forged entry from an honest one (whoever can write the directory can write both
the binary and its checksum), and a binary is machine code the process runs: the directory is trusted like the
installed code.  What guards the results is verification: ``run`` and ``tune`` verify every kernel, and one
loaded from here that fails is discarded and rebuilt from source once (:mod:`xegemm.evaluate`); the call API
verifies a program loaded from here once per process before its first result is returned
(:mod:`xegemm.api.trust`).
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

from xegemm.files import FileRefused, read_bytes
from xegemm.runtime.cpu_path import cpuinfo_fields

CACHE_VARIABLE = "XEGEMM_CACHE_DIR"
MAGIC = b"XEGEMM-PROGRAM-2\n"   # 2: the entry names its key (an entry filed under another key is refused)
OLD_MAGICS = (b"XEGEMM-PROGRAM-1\n",)
MAX_ENTRY_BYTES = 512 << 20    # a program binary; the largest GEMM kernels' are a few MiB
_REPORTED: list[str] = []      # the first damaged entry of this process, reported on stderr
STATS = {"hits": 0, "misses": 0, "stores": 0, "discarded": 0}


def cache_dir() -> Path | None:
    """Where binaries are kept, or None when the persistent cache is off (``XEGEMM_CACHE_DIR=``)."""
    if CACHE_VARIABLE in os.environ:
        value = os.environ[CACHE_VARIABLE]
        return Path(value).expanduser() if value else None
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "xegemm" / "programs"


def _file_identity(path: str | os.PathLike | None) -> str:
    if not path:
        return ""
    try:
        st = os.stat(path)
    except OSError:
        return str(path)
    return f"{os.path.realpath(path)}:{st.st_size}:{st.st_mtime_ns}"


def _cpu_flags() -> str:
    """The host CPU's model and instruction-set flags (a CPU device's binary is machine code for them)."""
    fields = cpuinfo_fields()
    return "\n".join(f"{k}: {fields[k]}" for k in ("model name", "flags") if k in fields)


def code_generation_settings() -> list[str]:
    """The ``CL_CONFIG_*`` settings of this process (``CL_CONFIG_CPU_TARGET_ARCH`` chooses the CPU code path)."""
    return [f"{k}={os.environ[k]}" for k in sorted(os.environ) if k.startswith("CL_CONFIG_")]


def runtime_identity(device: dict, library: str | os.PathLike | None) -> list[str]:
    """The parts of a key that describe the device and its runtime (``device`` from OpenCLDevice.identity)."""
    parts = [f"{k}={device[k]}" for k in sorted(device)]
    parts.append(f"library={_file_identity(library)}")
    parts += code_generation_settings()
    if device.get("type") == "cpu":
        parts.append(_cpu_flags())
    return parts


def cache_key(source: str, options: str, identity: list[str]) -> str:
    """sha256 over source, options and the runtime identity."""
    h = hashlib.sha256()
    for part in (source, options, *identity):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _path(key: str) -> Path | None:
    root = cache_dir()
    return None if root is None else root / key[:2] / f"{key}.bin"


def load(key: str) -> bytes | None:
    """The stored binary for ``key``, or None (absent, cache off, or damaged: a damaged entry is removed)."""
    path = _path(key)
    if path is None:
        return None
    try:
        data = read_bytes(path, MAX_ENTRY_BYTES, "program cache entry")
    except FileRefused as exc:
        if path.exists():
            _report_once(f"{exc}; it is removed and the program rebuilt")
            discard(key)
        return None
    if data.startswith(OLD_MAGICS):     # an older xegemm's entry: replaced without a word
        discard(key)
        return None
    head, named = data[:len(MAGIC)], data[len(MAGIC):len(MAGIC) + 64]
    digest, payload = data[len(MAGIC) + 64:len(MAGIC) + 96], data[len(MAGIC) + 96:]
    if head != MAGIC or hashlib.sha256(named + payload).digest() != digest or not payload:
        _report_once(f"the program cache entry {path} is damaged (its checksum does not match); it is removed "
                     "and the program rebuilt (later damaged entries are replaced without a message)")
        discard(key)
        return None
    if named != key.encode():
        _report_once(f"the program cache entry {path} holds the build of another source (its key is "
                     f"{named[:16].decode(errors='replace')}...); it is removed and the program rebuilt")
        discard(key)
        return None
    return payload


def _report_once(text: str) -> None:
    if not _REPORTED:
        _REPORTED.append(text)
        print(f"xegemm: warning: {text}", file=sys.stderr, flush=True)


def discard_failed(key: str, why: str) -> None:
    """Remove an entry whose program failed verification (``why``), saying so once per process."""
    _report_once(f"the program cache entry {_path(key)} gave a kernel that failed verification ({why}); it is "
                 "removed and the program rebuilt from source")
    discard(key)


def discard(key: str) -> None:
    """Remove an entry the runtime refused or that failed its checksum."""
    path = _path(key)
    STATS["discarded"] += 1
    if path is not None:
        try:
            path.unlink()
        except OSError:
            pass


def store(key: str, binary: bytes) -> bool:
    """Write an entry atomically; False (and nothing written) when the directory is unusable."""
    path = _path(key)
    if path is None or not binary:
        return False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{key[:16]}-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                named = key.encode()
                f.write(MAGIC + named + hashlib.sha256(named + binary).digest() + binary)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        return False
    STATS["stores"] += 1
    return True
