"""The goals run (``make bench-goals``; docs/benchmarks.md): the performance goals measured in one run.

``python -m bench.goals [--budget N] [--install-dpnp] [--out DIR] ...``:

1. installs the library references it can (:mod:`bench.provision`: CLBlast as root; dpnp only with
   ``--install-dpnp``) and notes why the others are skipped;
2. per CPU code path of the host (:mod:`bench.code_paths`: AVX-512 when the CPU has it, and always AVX2),
   runs :mod:`bench.goals_child` in a process started with that path's environment: it tunes bf16 and f16
   at each goal shape, tunes CLBlast, and times the winners interleaved with every reference;
3. writes ``DIR/goals.json`` (every measurement, the conditions, each goal's verdict) and ``DIR/goals.md``
   (a table per code path, :mod:`bench.goals_table`), and prints the tables.

Goals are reported, never asserted: the exit status is 0 when every code path was measured, whatever the
ratios, and 1 when one could not be.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from bench import REPO
from bench.code_paths import CODE_PATHS, host_code_paths
from bench.goals_child import add_run_options, run_arguments
from bench.goals_table import GOALS, evaluate_row, markdown
from bench.provision import ensure_clblast, ensure_dpnp


def reference_skips(install: bool, install_dpnp: bool) -> dict[str, str]:
    """The references this run cannot measure, and why (after installing what it may)."""
    skipped = {}
    clblast = ensure_clblast(install)
    if clblast["library"]:
        skipped["clblast"] = clblast["library"]
    dpnp = ensure_dpnp(install_dpnp)
    if dpnp:
        skipped["onemkl"] = dpnp
    return skipped


def child_command(path: str, out: Path, args, skipped: dict[str, str]) -> list[str]:
    command = [sys.executable, "-m", "bench.goals_child", "--code-path", path, "--out", str(out),
               *run_arguments(args)]
    for key, reason in skipped.items():
        command += ["--skip", f"{key}={reason}"]
    return command


def write_report(data: dict, out: Path) -> str:
    """Judge every row by :data:`bench.goals_table.GOALS`, write ``goals.json`` and ``goals.md`` into ``out``;
    return the markdown."""
    for result in data["results"]:
        for row in result["rows"]:
            row["goals"] = evaluate_row(result["code_path"], row)
    data["goals"] = [asdict(g) for g in GOALS]
    report = markdown(data["results"], data["left_out"], data["header"])
    (out / "goals.json").write_text(json.dumps(data, indent=1))
    (out / "goals.md").write_text(report + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="default runs/bench-goals-<timestamp>")
    add_run_options(parser)
    parser.add_argument("--code-paths", default=None, help="comma list of avx512,avx2 (default: the host's)")
    parser.add_argument("--install-dpnp", action="store_true", help="pip install the mkl extra (about 1.2 GB)")
    parser.add_argument("--no-install", action="store_true", help="install nothing (skip what is missing)")
    parser.add_argument("--render", type=Path, metavar="RUN_DIR",
                        help="measure nothing: judge a run's goals.json again with this checkout's goals, rewrite "
                             "its goals.md and print it")
    args = parser.parse_args(argv)
    if args.render:
        print(write_report(json.loads((args.render / "goals.json").read_text()), args.render))
        return 0
    t0 = time.monotonic()
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    out = args.out or REPO / "runs" / f"bench-goals-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    paths, left_out = host_code_paths()
    if args.code_paths:
        wanted = args.code_paths.split(",")
        unknown = sorted(set(wanted) - set(CODE_PATHS))
        if unknown:
            parser.error(f"unknown code paths {unknown}; known: {sorted(CODE_PATHS)}")
        left_out.update({p.name: "not asked for (--code-paths)" for p in paths if p.name not in wanted})
        paths = [p for p in paths if p.name in wanted]
    skipped = reference_skips(not args.no_install, args.install_dpnp)
    for key, reason in skipped.items():
        print(f"skipping {key}: {reason}", flush=True)
    for name, reason in left_out.items():
        print(f"not measuring the {name} code path: {reason}", flush=True)
    results = []
    for path in paths:
        command = child_command(path.name, out / path.name, args, skipped)
        done = subprocess.run(command, env=path.environment(dict(os.environ)), cwd=REPO)
        result_file = out / path.name / "result.json"
        if not result_file.exists():
            left_out[path.name] = f"its process failed (exit status {done.returncode}; output above)"
            continue
        result = json.loads(result_file.read_text())
        if done.returncode:
            result["incomplete"] = f"its process failed (exit status {done.returncode}; output above)"
        results.append(result)
    header = {"started": started, "seconds": time.monotonic() - t0, "command": " ".join(sys.argv)}
    report = write_report({"header": header, "results": results, "left_out": left_out}, out)
    print("\n" + report)
    print(f"\nwrote {out / 'goals.md'} and {out / 'goals.json'}")
    failed = any(p.name in left_out for p in paths) or any(r.get("incomplete") for r in results)
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
