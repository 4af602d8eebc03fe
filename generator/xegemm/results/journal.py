"""A run directory's journal and lock, and the atomic writes every output file goes through.

``results.jsonl`` gets one line per finished variant (:meth:`xegemm.evaluate.Evaluation.to_row`), flushed and
fsync'ed as it finishes, so an interrupted sweep loses nothing and a rerun into the same directory resumes.
``<out>/.lock`` keeps a second run out of the directory while one writes it.  Every file xegemm writes goes
through :func:`xegemm.files.write_text_atomic` (temporary file + rename): readers see the old or the new content.  The
documents made from the journal (results.json, results.csv, report.md) are written by
:mod:`xegemm.reporting.results`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

from xegemm import __version__
from xegemm.errors import XegemmError
from xegemm.files import RESULTS_BYTES, read_bytes
from xegemm.library.record import Evaluation


def writable_dir(path: Path | str, what: str = "output directory") -> Path:
    """``path`` as a directory this process can write (created if missing), or XegemmError naming the path and
    the reason: a file in the way, a read-only or virtual file system, no permission, a full disk."""
    path = Path(path)
    blocker = next((p for p in (path, *path.parents) if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise XegemmError(f"cannot use {path} as the {what}: {blocker} is a file, not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".xegemm-write-test.")
        try:
            os.write(fd, b"x" * 4096)
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        raise XegemmError(f"cannot write the {what} {path}: {exc.strerror or exc}") from None
    return path


class RunLocked(XegemmError):
    """Another xegemm process is writing into the same output directory."""


class ResultStore:
    """The journal of one run directory: which variants are done on which device and problem.

    While it is open it holds an exclusive lock on ``<out>/.lock``: a second run into the same directory
    refuses to start instead of interleaving its results (:meth:`close` releases it)."""

    def __init__(self, out_dir: Path | str, config, device):
        self.out = writable_dir(out_dir, "results directory")
        self._lock = open(self.out / ".lock", "a+", encoding="utf-8")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock.seek(0)
            holder = self._lock.read().strip() or "another process"
            self._lock.close()
            raise RunLocked(f"{self.out} is in use by another xegemm run ({holder}); wait for it to finish or "
                            "choose another --out") from None
        self._lock.seek(0)
        self._lock.truncate()
        self._lock.write(f"pid {os.getpid()}\n")
        self._lock.flush()
        self.config = config
        self.device = device
        self.journal = self.out / "results.jsonl"
        self.records: dict[str, Evaluation] = {}   # key -> the result, with when it finished and the load then
        self.damaged: list[str] = []     # "results.jsonl:LINE: what is wrong", for lines that were skipped
        if self.journal.exists():
            text = read_bytes(self.journal, RESULTS_BYTES, "results journal").decode("utf-8", errors="replace")
            if text and not text.endswith("\n"):
                # an interrupted write left a torn last line: cut it so the next record starts a fresh line
                keep = text[: text.rfind("\n") + 1]
                self.damaged.append(f"{self.journal}:{keep.count(chr(10)) + 1}: an unfinished last line (an "
                                    "interrupted write) was removed; that variant runs again")
                with open(self.journal, "w", encoding="utf-8") as f:
                    f.write(keep)
                    f.flush()
                    os.fsync(f.fileno())
                text = keep
            for number, line in enumerate(text.splitlines(), 1):
                try:
                    entry = json.loads(line)
                    key = entry["key"]
                    result = Evaluation.from_row({**entry["result"], **{k: entry[k] for k in ("finished_at", "load1")
                                                                        if k in entry}})
                    if not isinstance(key, str):
                        raise ValueError("not a result record")
                except (ValueError, KeyError, TypeError) as exc:
                    self.damaged.append(f"{self.journal}:{number}: skipped, not a result record ({exc}); that "
                                        "variant runs again")
                    continue
                self.records[key] = result

    def key(self, name: str, config, lowering: str, compiler_capabilities: str | None, source_sha256: str | None) -> str:
        """What makes a recorded result reusable: the kernel (name and source), lowering and compiler capabilities,
        problem, verification and timing settings, device, driver and xegemm version."""
        d = config.to_dict()
        ident = {"name": name, "source": source_sha256, "lowering": lowering, "compiler_capabilities": compiler_capabilities,
                 "problem": d["problem"], "verify": d.get("verify"), "profile": d.get("profile"),
                 "device": self.device.name, "driver": self.device.driver_version,
                 "filter": self.device.filter_string, "xegemm": __version__}
        return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()

    def get(self, key: str) -> Evaluation | None:
        return self.records.get(key)

    def close(self) -> None:
        """Release the directory's lock."""
        if not self._lock.closed:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()

    def add(self, key: str, result: Evaluation) -> None:
        """Record a finished variant durably (one journal line, fsync'ed), with when it finished and the load."""
        when = {"finished_at": round(time.time(), 3), "load1": os.getloadavg()[0]}
        with open(self.journal, "a", encoding="utf-8") as f:
            f.write(json.dumps({"key": key, "result": result.to_row(), **when}, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())
        result.finished_at, result.load1 = when["finished_at"], when["load1"]
        self.records[key] = result
