"""The measurement cache: a kernel's evaluation, keyed by what determines it, kept across studies and runs.

The key hashes the rendered kernel source, its build options, the device name and driver version, the
runtime's ``CL_CONFIG_*`` settings (the CPU runtime's AVX2 code path is another kernel on the same device), the
lowering, and the problem, input seed and timing settings.  A hit skips the build and the timing: a second
``tune`` of the same shapes (into any output directory) builds and times nothing unless ``--retime``.
Only deterministic outcomes are kept (``ok``, ``failed_build``, ``failed_verify``); an ``error``, a
``timeout`` or a worker process that died may be the machine's fault, and is evaluated again.

Why not a *build* cache: dpctl 0.22 cannot load program binaries, so a kernel built in one process cannot be
reused in another; the cache stores measurements, each with its checksum and checked for plausibility.  The
file is SQLite (default
``$XDG_CACHE_HOME/xegemm/measurements.db``), safe for several processes at once.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from xegemm.config import Config
from xegemm.errors import XegemmError
from xegemm.files import create_sqlite, set_aside, sqlite_problem
from xegemm.evaluate.timing import TIMING_METHOD, current_pace, gemm_flops
from xegemm.library.parts import TimeStats, VariantParams
from xegemm.runtime.program_cache import code_generation_settings

CACHED_STATUSES = ("ok", "failed_build", "failed_verify")
SCHEMA = 2             # 2: entries carry a checksum (table `entries`)


def default_cache_path() -> Path:
    base = os.getenv("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "xegemm" / "measurements.db"


def measurement_key(source: str, build_options: str, device_name: str, driver: str, lowering: str,
                    config: Config) -> str:
    """The cache key of one kernel measured on one device for one problem."""
    p, prof = config.problem, config.profile
    parts = {"schema": SCHEMA, "source": hashlib.sha256(source.encode()).hexdigest(), "options": build_options,
             "device": device_name, "driver": driver, "settings": code_generation_settings(), "lowering": lowering,
             "problem": [p.m, p.n, p.k, p.batch], "seed": config.verify.seed,
             "profile": [prof.warmup, prof.repeats, prof.min_time_ms, prof.rotate], "timing": TIMING_METHOD}
    pace = current_pace()
    if not pace.is_default:                # XEGEMM_PACE's shorter floors: measured apart from the default's
        parts["pace"] = pace.describe()
    if p.groups or config.moe.experts:     # a grouped kernel's source is the same for every grouped problem
        parts["groups"] = [list(p.groups), config.moe.experts, list(config.moe.rows)]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class _Entry:
    """What the cache checks of an entry: a result row (Evaluation.to_row) or one read back from the cache file,
    which an older version may have written or the disk damaged, so every key may be missing."""

    status: str | None
    gflops: float | None
    timing: TimeStats | None
    params: VariantParams
    extra: dict

    @classmethod
    def of(cls, row: dict) -> _Entry:
        extra = row.get("extra")
        return cls(row.get("status"), row.get("gflops"), TimeStats.from_dict(row.get("time_ms")),
                   VariantParams.from_dict(row.get("params")), extra if isinstance(extra, dict) else {})


def implausible(evaluation: dict, ceiling: float | None, what: str = "the device's physical ceiling") -> str | None:
    """Why a cached ``ok`` evaluation cannot be a measurement, or None: GFLOP/s that disagree with the problem
    and the median time, or above the device's physical ceiling (:func:`xegemm.evaluate.peak.ceiling_gflops`)."""
    entry = _Entry.of(evaluation)
    if entry.status != "ok" or entry.timing is None and entry.gflops is None:
        return None          # not a timing (a failure, or an ahead-of-time score)
    gflops, median, params = entry.gflops, entry.timing.median if entry.timing else None, entry.params
    try:
        gflops, median = float(gflops), float(median)
        expected = gemm_flops(*(int(x) for x in params.problem)) / (max(median, 1e-9) * 1e6)
        if params.groups:      # a grouped launch: its FLOPs are its groups', not the largest group's
            expected = gflops
    except (TypeError, ValueError, KeyError):
        return "no GFLOP/s, time or problem"
    if not (math.isfinite(gflops) and gflops > 0 and median > 0):
        return f"{gflops} GFLOP/s in {median} ms"
    if abs(gflops - expected) > 0.01 * expected:
        return f"{gflops:.1f} GFLOP/s, but its problem in {median} ms is {expected:.1f}"
    if ceiling is not None and gflops > ceiling:
        return f"{gflops:.1f} GFLOP/s is above {what}, {ceiling:.0f}"
    return None


class MeasurementCache:
    """``get(key)`` / ``put(key, evaluation)`` on an SQLite file.

    Each entry carries the sha256 of its evaluation; an entry whose checksum fails, or whose measurement is
    implausible (:func:`implausible`), is removed and evaluated again.  A file that is not a healthy database
    is moved aside (``measurements.db.1`` ...) and a new one started.  Each kind of damage is reported once, on
    ``warn`` (default: stderr), with the file's path."""

    def __init__(self, path: Path | str, warn=None, ceiling_gflops: float | None = None):
        self.path = Path(path)
        self.ceiling = ceiling_gflops
        self.ceiling_what = "the device's physical ceiling"     # lowered by limit_to_peak
        self._warn = warn or (lambda text: print(f"xegemm: warning: {text}", file=sys.stderr, flush=True))
        self._reported: set[str] = set()
        self.discarded = 0
        self.db = self._open()

    def limit_to_peak(self, gflops: float, what: str) -> None:
        """Refuse timings above ``gflops`` too (the device's measured peak times a factor, ``what`` it is)."""
        if self.ceiling is None or gflops < self.ceiling:
            self.ceiling, self.ceiling_what = gflops, what

    def holds_timings(self) -> bool:
        """Whether any entry holds a timing (what a measured peak would be needed to check)."""
        try:
            return self.db.execute("SELECT 1 FROM entries LIMIT 1").fetchone() is not None
        except sqlite3.DatabaseError:
            return False

    def _say_once(self, kind: str, text: str) -> None:
        if kind not in self._reported:
            self._reported.add(kind)
            self._warn(text)

    def _set_aside(self, why: str) -> None:
        aside = set_aside(self.path, ("-wal", "-shm"))
        self._say_once("file", f"the measurement cache {self.path} was {why}; moved it to {aside} and started a "
                               "new one (its kernels are measured again)")

    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise XegemmError(f"cannot create the measurement cache's directory {self.path.parent}: "
                              f"{exc.strerror or exc}; give --cache FILE or --no-cache") from None
        problem = sqlite_problem(self.path)
        if problem:
            self._set_aside(problem)
        try:
            create_sqlite(self.path)
        except (OSError, sqlite3.Error) as exc:
            raise XegemmError(f"cannot create the measurement cache {self.path}: {exc}; give --cache FILE or "
                              "--no-cache") from None
        for attempt in range(2):
            try:
                db = sqlite3.connect(self.path, timeout=60, check_same_thread=False, isolation_level=None)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("CREATE TABLE IF NOT EXISTS entries (key TEXT PRIMARY KEY, evaluation TEXT NOT NULL, "
                           "checksum TEXT NOT NULL, stored REAL NOT NULL)")
                return db
            except sqlite3.DatabaseError as exc:
                if attempt or not self.path.exists():
                    raise XegemmError(f"cannot use the measurement cache {self.path}: {exc}; give --cache FILE or "
                                      "--no-cache") from None
                self._set_aside(f"unusable ({exc})")
        raise AssertionError("unreachable")

    def _forget(self, key: str, why: str) -> None:
        self.discarded += 1
        self._say_once("entry", f"the measurement cache {self.path} had a bad entry ({why}); it was removed and "
                                "the kernel is measured again (later bad entries are removed without a message)")
        try:
            self.db.execute("DELETE FROM entries WHERE key = ?", (key,))
        except sqlite3.DatabaseError:
            pass

    def get(self, key: str) -> dict | None:
        try:
            row = self.db.execute("SELECT evaluation, checksum FROM entries WHERE key = ?", (key,)).fetchone()
        except sqlite3.DatabaseError as exc:
            self._say_once("read", f"the measurement cache {self.path} cannot be read ({exc}); measuring without "
                                   "it (move the file aside to start a new one)")
            return None
        if row is None:
            return None
        text, checksum = row
        if _digest(text) != checksum:
            self._forget(key, "its checksum does not match")
            return None
        try:
            evaluation = json.loads(text)
        except ValueError:
            self._forget(key, "not JSON")
            return None
        why = implausible(evaluation, self.ceiling, self.ceiling_what) if isinstance(evaluation, dict) \
            else "not a record"
        if why:
            self._forget(key, why)
            return None
        return evaluation

    def put(self, key: str, evaluation: dict) -> None:
        entry = _Entry.of(evaluation)
        if entry.status in CACHED_STATUSES and "worker_lost" not in entry.extra:
            if implausible(evaluation, self.ceiling):
                return
            text = json.dumps(evaluation)
            try:
                self.db.execute("INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?)",
                                (key, text, _digest(text), time.time()))
            except sqlite3.DatabaseError as exc:
                self._say_once("write", f"the measurement cache {self.path} cannot be written ({exc}); results "
                                        "are kept in the study only")

    def close(self) -> None:
        self.db.close()
