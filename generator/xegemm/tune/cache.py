"""The measurement cache: a kernel's evaluation, keyed by what determines it, kept across studies and runs.

The key hashes the rendered kernel source, its build options, the device name and driver version, the
runtime's ``CL_CONFIG_*`` settings (the CPU runtime's AVX2 code path is another kernel on the same device), the
lowering, and the problem, input seed and timing settings.  A hit skips the build and the timing: a second
``tune`` of the same shapes (into any output directory) builds and times nothing unless ``--retime``.
Only deterministic outcomes are kept (``ok``, ``failed_build``, ``failed_verify``); an ``error``, a
``timeout`` or a worker process that died may be the machine's fault, and is evaluated again.

Why not a *build* cache: dpctl 0.22 cannot load program binaries, so a kernel built in one process cannot be
reused in another; the cache stores measurements.  The file is SQLite (default
``$XDG_CACHE_HOME/xegemm/measurements.db``), safe for several processes at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from pathlib import Path

from xegemm.config import Config
from xegemm.profile import TIMING_METHOD
from xegemm.runtime.program_cache import code_generation_settings

CACHED_STATUSES = ("ok", "failed_build", "failed_verify")
SCHEMA = 1


def default_cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "xegemm" / "measurements.db"


def measurement_key(source: str, build_options: str, device_name: str, driver: str, lowering: str,
                    config: Config) -> str:
    """The cache key of one kernel measured on one device for one problem."""
    p, prof = config.problem, config.profile
    parts = {"schema": SCHEMA, "source": hashlib.sha256(source.encode()).hexdigest(), "options": build_options,
             "device": device_name, "driver": driver, "settings": code_generation_settings(), "lowering": lowering,
             "problem": [p.m, p.n, p.k, p.batch], "seed": config.verify.seed,
             "profile": [prof.warmup, prof.repeats, prof.min_time_ms], "timing": TIMING_METHOD}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


class MeasurementCache:
    """``get(key)`` / ``put(key, evaluation)`` on an SQLite file."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=60, check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS measurements (key TEXT PRIMARY KEY, evaluation TEXT NOT NULL, "
                        "stored REAL NOT NULL)")

    def get(self, key: str) -> dict | None:
        row = self.db.execute("SELECT evaluation FROM measurements WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, evaluation: dict) -> None:
        if evaluation.get("status") in CACHED_STATUSES and "worker_lost" not in (evaluation.get("extra") or {}):
            self.db.execute("INSERT OR REPLACE INTO measurements VALUES (?, ?, ?)",
                            (key, json.dumps(evaluation), time.time()))

    def close(self) -> None:
        self.db.close()
