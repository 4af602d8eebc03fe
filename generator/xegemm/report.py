"""Results on disk: an append-only journal that survives interruption, and the reports a person reads.

``results.jsonl`` gets one line per finished variant, flushed and fsync'ed as it finishes, so an interrupted
sweep loses nothing and a rerun into the same directory resumes.  ``results.json``, ``results.csv`` and
``report.md`` are rewritten atomically (temporary file + rename) from the journal.
"""

from __future__ import annotations

import csv
import fcntl
import hashlib
import io
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy

from xegemm import __version__
from xegemm.errors import XegemmError
from xegemm.files import RESULTS_BYTES, read_bytes, write_json_atomic, write_text_atomic
from xegemm.profile import conditions
from xegemm.runtime.devices import dpctl_module

CSV_COLUMNS = ("name", "status", "reason", "median_ms", "min_ms", "max_ms", "cv", "runs", "gflops", "gbps",
               "vs_numpy", "numpy_gflops", "high_cv", "max_abs_err", "max_rel_err", "bad_elements", "build_s")


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
        self.records: dict[str, dict] = {}
        self.when: dict[str, dict] = {}  # key -> {"finished_at", "load1"}: when each result was recorded
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
                    key, result = entry["key"], entry["result"]
                    if not isinstance(key, str) or not isinstance(result, dict) or "status" not in result:
                        raise ValueError("not a result record")
                except (ValueError, KeyError, TypeError) as exc:
                    self.damaged.append(f"{self.journal}:{number}: skipped, not a result record ({exc}); that "
                                        "variant runs again")
                    continue
                self.records[key] = result
                self.when[key] = {k: entry[k] for k in ("finished_at", "load1") if k in entry}

    def key(self, name: str, config, lowering: str, compiler_capabilities: str | None, source_sha256: str | None) -> str:
        """What makes a recorded result reusable: the kernel (name and source), lowering and compiler capabilities,
        problem, verification and timing settings, device, driver and xegemm version."""
        d = config.to_dict()
        ident = {"name": name, "source": source_sha256, "lowering": lowering, "compiler_capabilities": compiler_capabilities,
                 "problem": d["problem"], "verify": d.get("verify"), "profile": d.get("profile"),
                 "device": self.device.name, "driver": self.device.driver_version,
                 "filter": self.device.filter_string, "xegemm": __version__}
        return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()

    def get(self, key: str) -> dict | None:
        return self.records.get(key)

    def close(self) -> None:
        """Release the directory's lock."""
        if not self._lock.closed:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()

    def add(self, key: str, result: dict) -> None:
        """Record a finished variant durably (one journal line, fsync'ed)."""
        self.records[key] = result
        self.when[key] = {"finished_at": round(time.time(), 3), "load1": os.getloadavg()[0]}
        with open(self.journal, "a", encoding="utf-8") as f:
            f.write(json.dumps({"key": key, "result": result, **self.when[key]}, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())


def versions() -> dict:
    return {"xegemm": __version__, "dpctl": dpctl_module().__version__, "numpy": numpy.__version__,
            "python": platform.python_version()}


# environment variables that decide how many threads the device runtime and the reference BLAS use
def utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _sort_key(v: dict):
    return (v["status"] != "ok", -(v.get("gflops") or 0.0), v["name"])


def problem_shape(params: dict) -> tuple:
    """(m, n, k, batch) of a variant's parameters: what groups variants into problems."""
    return tuple(params.get(k) for k in ("m", "n", "k", "batch"))


def own_reference(variant: dict) -> dict | None:
    """The numpy reference measured interleaved with this variant's timing (None if it was not timed)."""
    return (variant.get("extra") or {}).get("reference")


def write_reports(store: ResultStore, keys: list[str], references: dict, lowering: str,
                  capabilities: str | None = None, command: str | None = None,
                  started_at: float | None = None, device_peak: dict | None = None) -> dict:
    """Write results.json, results.csv and report.md for this run's variants (``keys``, in the journal).

    Each timed variant's ratio is to the numpy reference measured interleaved with it; a problem's reference
    in the header is its best variant's.  ``references`` maps a problem (m, n, k, batch) none of whose
    variants was timed to a reference measured on its own (or is empty); ``device_peak`` is the device's
    measured peak (:mod:`xegemm.evaluate.peak`), if it was measured.

    Each variant also gets ``trial`` (its place in this run's order: a sweep is a trial order too) and, from
    the journal, ``finished_at`` (Unix time) and ``load1`` (the 1-minute load average when it finished)."""
    cfg = store.config
    variants = []
    for trial, k in enumerate((k for k in dict.fromkeys(keys) if k in store.records), 1):
        variants.append({**store.records[k], "trial": trial, **store.when.get(k, {})})
    variants.sort(key=_sort_key)
    for v in variants:
        ref = own_reference(v)
        v["vs_numpy"] = (v["gflops"] / ref["gflops"]) if v.get("gflops") and ref and ref.get("gflops") else None
    best = next((v for v in variants if v["status"] == "ok"), None)
    best_per_problem = {}
    references = dict(references)
    for v in variants:          # sorted fastest first: the first ok variant of each problem is its best
        if v["status"] == "ok":
            best_per_problem.setdefault(problem_shape(v["params"]), v["name"])
            if own_reference(v) and problem_shape(v["params"]) not in references:
                references[problem_shape(v["params"])] = own_reference(v)
    base = (cfg.problem.m, cfg.problem.n, cfg.problem.k, cfg.problem.batch)
    reference = references.get(base) or next(iter(references.values()), None)
    data = {
        "device": store.device.as_dict(),
        "problem": cfg.to_dict()["problem"],
        "types": cfg.to_dict()["types"],
        "layout": cfg.to_dict()["layout"],
        "config": {"name": cfg.name, "source": str(cfg.source), "description": cfg.description},
        "command": command,
        "started_at": utc(started_at) if started_at else None,
        "written_at": utc(time.time()),
        "conditions": conditions(),
        "device_peak": device_peak,
        "lowering": lowering,
        "compiler_capabilities": capabilities,
        "versions": versions(),
        "reference": reference,
        "references": [{"problem": dict(zip(("m", "n", "k", "batch"), shape)), **ref}
                       for shape, ref in sorted(references.items())],
        "best": best["name"] if best else None,
        "best_per_problem": [{"problem": dict(zip(("m", "n", "k", "batch"), shape)), "name": name}
                             for shape, name in sorted(best_per_problem.items())],
        "variants": variants,
    }
    write_json_atomic(store.out / "results.json", data)
    write_text_atomic(store.out / "results.csv", _csv(variants))
    write_text_atomic(store.out / "report.md", _markdown(data))
    return data


def _row(v: dict) -> dict:
    t = v.get("time_ms") or {}
    return {"name": v["name"], "status": v["status"], "reason": v.get("reason") or "",
            "median_ms": t.get("median"), "min_ms": t.get("min"), "max_ms": t.get("max"), "cv": t.get("cv"),
            "runs": t.get("runs"), "gflops": v.get("gflops"), "gbps": v.get("gbps"), "vs_numpy": v.get("vs_numpy"),
            "numpy_gflops": (own_reference(v) or {}).get("gflops"), "high_cv": (own_reference(v) or {}).get("high_cv"),
            "max_abs_err": v.get("max_abs_err"), "max_rel_err": v.get("max_rel_err"),
            "bad_elements": v.get("bad_elements"), "build_s": v.get("build_s")}


def _csv(variants: list[dict]) -> str:
    buf = io.StringIO()
    params = sorted({k for v in variants for k in v.get("params", {})})
    writer = csv.DictWriter(buf, fieldnames=[*CSV_COLUMNS, *params], lineterminator="\n")
    writer.writeheader()
    for v in variants:
        row = _row(v)
        row.update({k: v.get("params", {}).get(k) for k in params})
        writer.writerow({k: "" if x is None else x for k, x in row.items()})
    return buf.getvalue()


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _reference_line(ref: dict, problems: int) -> str:
    how = ("measured interleaved with each variant (alternating runs, so both sides saw the same load); the "
           "best variant's" if ref.get("interleaved") else "measured on its own after the variants")
    cond = ref.get("conditions") or {}
    return (f"- reference: numpy {ref['numpy']} float32 matmul, {how}: median {ref['time_ms']['median']:.3f} ms = "
            f"{ref['gflops']:.1f} GFLOP/s (OPENBLAS_CORETYPE={ref['openblas_coretype']}, load average "
            f"{_fmt((cond.get('loadavg') or [None])[0], '.2f')}, {cond.get('affinity_cpus')} CPUs, "
            + (f"CPU code path {cond['cpu_code_path']}, " if cond.get("cpu_code_path") else "")
            + f"CV {ref['time_ms']['cv']:.1%})"
            + (f"; {problems} problems, each with its own reference (results.json)" if problems > 1 else ""))


def _markdown(data: dict) -> str:
    d, p, ref = data["device"], data["problem"], data["reference"]
    lines = [f"# xegemm report: {data['config']['name']}", "",
             f"- device: `{d['filter_string']}` {d['name']} ({d['backend']}, driver {d['driver_version']}, "
             f"{d['compute_units']} compute units); lowering used: {data['lowering']}"
             + (f" (compiler capabilities {data['compiler_capabilities']})" if data["compiler_capabilities"] else ""),
             f"- problem: M={p['m']} N={p['n']} K={p['k']} batch={p['batch']}; types "
             f"A={data['types']['a']} B={data['types']['b']} acc={data['types']['acc']} C={data['types']['c']}; "
             f"layouts {data['layout']['a']}/{data['layout']['b']}/{data['layout']['c']}",
             "- versions: " + ", ".join(f"{k} {v}" for k, v in data["versions"].items()),
             _reference_line(ref, len(data["references"])) if ref else
             "- reference: not measured (the run was interrupted before it)"]
    noisy = [v for v in data["variants"] if (own_reference(v) or {}).get("high_cv")]
    if noisy:
        lines.append(f"- warning: {len(noisy)} variant(s) kept a CV above 10% after measuring twice (marked "
                     "'high CV' below): the machine was busy, so their times and ratios are uncertain")
    lines.append("")
    counts = {}
    for v in data["variants"]:
        counts[v["status"]] = counts.get(v["status"], 0) + 1
    lines.append("Variants: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + ".")
    lines.append("")
    several = len({problem_shape(v.get("params", {})) for v in data["variants"]}) > 1
    # a kernel serves every problem of a sweep: a variant is its name on its problem
    by_name = {(v["name"], problem_shape(v.get("params", {}))): v for v in data["variants"]}
    lines += ["## Best variant" + (" per problem" if several else ""), ""]
    for entry in data["best_per_problem"]:
        q = entry["problem"]
        best = by_name[(entry["name"], problem_shape(q))]
        t = best["time_ms"]
        lines += ([f"### M={q['m']} N={q['n']} K={q['k']} batch={q['batch']}", ""] if several else []) + \
            [f"`{best['name']}`", "",
             f"{best['gflops']:.1f} GFLOP/s ({_fmt(best['vs_numpy'], '.2f')}x the numpy reference), median "
             f"{t['median']:.3f} ms over {t['runs']} runs (min {t['min']:.3f}, max {t['max']:.3f}, "
             f"CV {t['cv']:.1%}); max abs error {best['max_abs_err']:.3g}", ""]
    if not data["best_per_problem"]:
        lines += ["No variant verified, so none was timed.", ""]
    head = "| variant | " + ("problem | " if several else "") + \
        "status | median ms | GFLOP/s | vs numpy | CV | max abs err | reason |"
    lines += ["## All variants", "", head, "|" + "---|" * head.count(" | ") + "---|"]
    for v in data["variants"]:
        t = v.get("time_ms") or {}
        reason = (v.get("reason") or "").replace("|", "\\|").replace("\n", " ")
        prm = v.get("params", {})
        problem = f"{prm.get('m')}x{prm.get('n')}x{prm.get('k')} | " if several else ""
        status = v["status"] + (" (high CV)" if (own_reference(v) or {}).get("high_cv") else "")
        lines.append(f"| `{v['name']}` | {problem}{status} | {_fmt(t.get('median'), '.3f')} | "
                     f"{_fmt(v.get('gflops'), '.1f')} | {_fmt(v.get('vs_numpy'), '.2f')} | "
                     f"{_fmt(t.get('cv'), '.1%')} | {_fmt(v.get('max_abs_err'), '.3g')} | {reason[:300]} |")
    lines.append("")
    return "\n".join(lines)
