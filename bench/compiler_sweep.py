"""Every shipped config built ahead of time for each (target, compiler): how many variants build, spill, and hold
their ISA gates.

For each ``configs/*.yaml`` and each pair of ``--pairs`` (default: pvc and bmg with the current compiler, pvc and
dg2 with Debian's), ``xegemm.jobs.pipeline.build_config`` compiles every variant with ocloc and reads its machine
code back; per pair this prints one row: variants planned, built ``ok``, rejected (with the distinct reasons),
failed, the largest spill, and the gates that differ anywhere (xegemm.evaluate.aot.isa_gates: dpas, block loads,
stores and prefetches against the plan, the GRF mode asked, spills, the dump's instruction count).  Pairs whose
compiler is not installed are listed as skipped with the reason.  The results go to docs/compilers.md ("Every
shipped config, built") with the date.  ``--configs bench/cppgen_tiles.yaml,bench/sycl_tla_legacy.yaml`` builds
sycl-tla's tiles in the four A/B layouts instead (docs/compilers.md "sycl-tla's tiles, built").

``python -m bench.compiler_sweep [--pairs pvc:current,bmg:current] [--configs a.yaml,...] [--json FILE] [--compact]``
(about 10 minutes for the default pairs on 2 cores).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from xegemm.aot.errors import OclocMissingError
from xegemm.aot.toolchain import find_ocloc
from xegemm.errors import XegemmError
from xegemm.files import write_json_atomic
from xegemm.jobs.pipeline import build_config

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PAIRS = (("pvc", "current"), ("bmg", "current"), ("pvc", "system"), ("dg2", "system"))


def summarise(result: dict, seconds: float) -> dict:
    """One row of the sweep: counts, distinct rejection reasons, largest spill, gates that differ."""
    variants = result["variants"]
    differing: dict[str, int] = {}
    spills = []
    for v in variants:
        for name, gate in (v.get("gates") or {}).items():
            if not gate["ok"]:
                differing[name] = differing.get(name, 0) + 1
        if v.get("isa"):
            spills.append(v["isa"]["spill_bytes"] or 0)
    return {"config": result["config"], "target": result["target"], "compiler": result["compiler"]["name"],
            "compiler_version": result["compiler"]["describe"], "variants": len(variants),
            "ok": sum(v["status"] == "ok" for v in variants),
            "rejected": sum(v["status"] == "rejected" for v in variants),
            "failed": sum(v["status"] not in ("ok", "rejected") for v in variants),
            "reasons": sorted({(v["reason"] or "")[:160] for v in variants if v["status"] != "ok"}),
            "max_spill_bytes": max(spills) if spills else None, "gates_differing": differing,
            "seconds": round(seconds, 1)}


def sweep(configs: list[Path], pairs, out_root: Path, progress=sys.stderr) -> list[dict]:
    rows = []
    for target, compiler in pairs:
        if find_ocloc(compiler) is None:
            rows.append({"target": target, "compiler": compiler, "skipped": f"the {compiler} compiler is not installed"})
            continue
        for config in configs:
            start = time.perf_counter()
            try:
                result = build_config(config, target=target, compiler=compiler,
                                      out_dir=out_root / f"{config.stem}-{target}-{compiler}")
            except (OclocMissingError, XegemmError) as exc:
                rows.append({"config": config.stem, "target": target, "compiler": compiler, "error": str(exc)})
                continue
            row = summarise(result, time.perf_counter() - start)
            rows.append(row)
            print(f"{row['config']:>12} {target:>4} {compiler:>8}: {row['ok']}/{row['variants']} ok, "
                  f"{row['rejected']} rejected, {row['failed']} failed, max spill {row['max_spill_bytes']}, "
                  f"gates differing {row['gates_differing'] or '-'} ({row['seconds']} s)", file=progress, flush=True)
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| config | target | compiler | variants | ok | rejected | failed | max spill (B) | gates differing |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "skipped" in r or "error" in r:
            lines.append(f"| {r.get('config', '*')} | {r['target']} | {r['compiler']} | - | - | - | - | - | "
                         f"{r.get('skipped') or r.get('error')} |")
            continue
        gates = ", ".join(f"{k} ({n})" for k, n in r["gates_differing"].items()) or "none"
        lines.append(f"| {r['config']} | {r['target']} | {r['compiler']} | {r['variants']} | {r['ok']} | "
                     f"{r['rejected']} | {r['failed']} | {r['max_spill_bytes']} | {gates} |")
    return "\n".join(lines) + "\n"


def compact_markdown(rows: list[dict]) -> str:
    """One row per config, one column per (target, compiler): ``ok/variants``, the largest spill, the gates that
    differ (docs/compilers.md's table)."""
    pairs = list(dict.fromkeys((r["target"], r["compiler"]) for r in rows))
    cells: dict[str, dict] = {}
    for r in rows:
        if "config" not in r:
            continue
        if "error" in r:
            text = "error"
        else:
            gates = ", ".join(r["gates_differing"]) or "gates hold"
            spill = "" if r["max_spill_bytes"] is None else f", spills {r['max_spill_bytes']}"
            text = f"{r['ok']}/{r['variants']}{spill}" + (f", {gates}" if r["ok"] else "")
        cells.setdefault(r["config"], {})[(r["target"], r["compiler"])] = text
    skipped = {(r["target"], r["compiler"]) for r in rows if "skipped" in r}
    lines = ["| config | " + " | ".join(f"{t} {c}" for t, c in pairs) + " |", "|---|" + "---|" * len(pairs)]
    for config, row in cells.items():
        lines.append(f"| {config} | " + " | ".join("skipped" if p in skipped else row.get(p, "-") for p in pairs)
                     + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", help="target:compiler,... (default: pvc:current,bmg:current,pvc:system,dg2:system)")
    parser.add_argument("--configs", help="config files, comma-separated (default: configs/*.yaml)")
    parser.add_argument("--json", help="also write the rows as JSON to this file")
    parser.add_argument("--out", help="build directories (default: a temporary directory, removed after)")
    parser.add_argument("--compact", action="store_true", help="print one row per config (docs/compilers.md's table)")
    args = parser.parse_args(argv)
    pairs = [tuple(p.split(":", 1)) for p in args.pairs.split(",")] if args.pairs else list(DEFAULT_PAIRS)
    configs = [Path(c) for c in args.configs.split(",")] if args.configs else sorted((ROOT / "configs").glob("*.yaml"))
    with tempfile.TemporaryDirectory(prefix="xegemm-sweep-") as tmp:
        rows = sweep(configs, pairs, Path(args.out) if args.out else Path(tmp))
    if args.json:
        write_json_atomic(Path(args.json), {"date": time.strftime("%Y-%m-%d"), "rows": rows})
    print(compact_markdown(rows) if args.compact else markdown(rows), end="")
    for r in rows:
        for reason in r.get("reasons", []):
            print(f"  {r['config']} {r['target']} {r['compiler']}: {reason}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
