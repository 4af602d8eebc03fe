"""CLBlast tuned for this machine: its own tuner's best Xgemm parameters, kept per device and code path.

Debian's CLBlast has no tuning entry for these CPUs and falls back to generic Intel-CPU defaults
(docs/benchmarks.md, the goals run: its tuner doubled SGEMM on a Zen 5 VM), so a fair reference is the tuned
one.  :func:`tuned_parameters` runs ``clblast_tuner_xgemm -precision 32 -fraction F`` (at its default
1024^3) in a scratch directory with the process's OpenCL environment (so on the process's CPU code path),
within a time limit, and takes the fastest result of the phases that finished (each phase writes one JSON
file); the result is kept in ``$XDG_CACHE_HOME/xegemm/clblast/`` under a key of the device, its runtime,
the ``CL_CONFIG_*`` settings, the host CPU, the CLBlast library and the tuner's arguments, so a later run
reuses it.  The parameters are applied with ``CLBlastOverrideParameters`` (:meth:`bench.clblast.CLBlastGemm.override`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench.clblast import loaded_library_path
from bench.provision import CLBLAST_TUNER
from xegemm.runtime.program_cache import runtime_identity
from xegemm.tune.cache import default_cache_path

KERNEL = "Xgemm"
FRACTION = 512           # the tuner's random fraction (docs/benchmarks.md, the goals run): its random phases try
                         # 120800 / 512 = 235 and 16566 / 512 = 32 points, about 16 min on 2 loaded cores
TIMEOUT_S = 1800         # after this the tuner is stopped and the phases that finished are used
# how a benchmark gets CLBlast's parameters: the cache, else the tuner; the tuner even when cached (on a quieter
# machine, say); the cache only; or none (Debian's defaults)
MODES = ("tune", "retune", "cached", "untuned")


def cache_root() -> Path:
    return default_cache_path().parent / "clblast"


def parse_result(data: dict) -> dict | None:
    """One tuner JSON file's best result: ``{"parameters", "time_ms", "device"}`` (PRECISION dropped)."""
    text, best_time = data.get("best_parameters"), data.get("best_time")
    if not text or best_time is None:
        return None
    params = dict(item.split("=", 1) for item in text.split())
    params.pop("PRECISION", None)
    return {"parameters": {k: int(v) for k, v in params.items()}, "time_ms": float(best_time),
            "device": data.get("device") or data.get("clblast_device_name")}


def best_result(files: list[Path]) -> dict | None:
    """The fastest result over the tuner's JSON files (one per finished phase), with the file it came from."""
    results = []
    for path in files:
        try:
            found = parse_result(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
        if found is not None:
            results.append({**found, "file": path.name})
    return min(results, key=lambda r: r["time_ms"]) if results else None


def tuner_environment(env: dict) -> dict:
    """``env`` with the OpenCL ICD loader this process uses first on the library path: the tuner then finds the
    same platforms (the CPU runtime named in ``OCL_ICD_FILENAMES``) as xegemm and CLBlast in this process."""
    loader = loaded_library_path("libOpenCL.so")
    if loader is None:
        return dict(env)
    paths = [str(Path(loader).parent), *[p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]]
    return {**env, "LD_LIBRARY_PATH": os.pathsep.join(paths)}


def cache_key(device_info, library: str | None, fraction: int) -> str:
    identity = runtime_identity({"name": device_info.name, "driver": device_info.driver_version,
                                 "type": device_info.device_type}, library)
    return hashlib.sha256("\0".join([*identity, f"{CLBLAST_TUNER} -precision 32 -fraction {fraction}"])
                          .encode()).hexdigest()


def run_tuner(workdir: Path, fraction: int, timeout_s: float) -> dict:
    """Run the tuner in ``workdir``; what it wrote (JSON files), whether it was stopped, and its output's tail."""
    command = [CLBLAST_TUNER, "-precision", "32", "-fraction", str(fraction)]
    t0 = time.monotonic()
    with open(workdir / "tuner.log", "w") as log:
        proc = subprocess.Popen(command, cwd=workdir, env=tuner_environment(dict(os.environ)), stdout=log,
                                stderr=subprocess.STDOUT)
        try:
            proc.wait(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            timed_out = True
    tail = (workdir / "tuner.log").read_text(errors="replace")[-1500:]
    return {"command": " ".join(command), "seconds": time.monotonic() - t0, "timed_out": timed_out,
            "returncode": proc.returncode, "files": sorted(workdir.glob("clblast_xgemm_*_32.json")), "log_tail": tail}


def tuned_parameters(device_info, library: str | None, run: bool = True, fraction: int = FRACTION,
                     timeout_s: float = TIMEOUT_S, refresh: bool = False) -> dict:
    """CLBlast's Xgemm parameters for this device and code path: ``{"status": "tuned" | "from the cache" |
    "untuned defaults", "parameters": {...} or None, "reason", "tuner"}``.  ``run``: run the tuner when
    nothing is cached (else only look the cache up); ``refresh``: run it even then, replacing the entry."""
    path = cache_root() / f"{cache_key(device_info, library, fraction)}.json"
    try:
        if not refresh:
            return {**json.loads(path.read_text()), "status": "from the cache", "cache": str(path)}
    except (OSError, ValueError):
        pass
    if not run:
        return {"status": "untuned defaults", "parameters": None,
                "reason": "no tuning of this device and code path in the cache (make bench-goals tunes it)"}
    if shutil.which(CLBLAST_TUNER) is None:
        return {"status": "untuned defaults", "parameters": None,
                "reason": "CLBlast's tuner is not installed (Debian package clblast-utils)"}
    with tempfile.TemporaryDirectory(prefix="xegemm-clblast-tuner-") as scratch:
        tuner = run_tuner(Path(scratch), fraction, timeout_s)
        best = best_result(tuner["files"])
    tuner["files"] = [p.name for p in tuner["files"]]
    if best is None:
        why = (f"stopped after {timeout_s:.0f} s before a phase finished" if tuner["timed_out"]
               else f"exit status {tuner['returncode']} and no result")
        return {"status": "untuned defaults", "parameters": None, "reason": f"the tuner failed: {why}",
                "tuner": tuner}
    if best["device"] and best["device"].strip() != device_info.name.strip():
        return {"status": "untuned defaults", "parameters": None, "tuner": tuner,
                "reason": f"the tuner ran on another device ({best['device']!r}, not {device_info.name!r})"}
    record = {"status": "tuned", "parameters": best["parameters"], "tuner_best_ms": best["time_ms"],
              "from_phase": best["file"], "tuner": {k: v for k, v in tuner.items() if k != "log_tail"},
              "reason": ("the tuner was stopped at its time limit; the best of the phases that finished"
                         if tuner["timed_out"] else None)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, path)
    return record
