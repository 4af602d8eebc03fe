"""The static model against published hardware figures: plan every row of bench/published_gemm.csv with xegemm,
predict its TFLOP/s (xegemm.model.static.predict_tflops), compare with the published figure.

Each usable row (status ``clear`` or ``assumed``) is planned with the tile its source names (``tile``), or, where
the source names none or only part of one, with the model's best legal tile from a fixed sweep (``tile_from``
says which).  The usable rows that plan are split in file order: even positions calibrate the model's free
constants (``--fit``), odd positions are held out.  Reported on the held-out rows: the median of
|predicted / published - 1| and the Spearman rank correlation of predicted and published.

``python -m bench.model_check`` prints the table; ``--json`` prints one JSON object; ``--fit`` fits the constants
on the calibration rows again (a coordinate search over xegemm.model.calibration.GRIDS) and exits with status 1
when the fit differs from the shipped xegemm.model.calibration.CALIBRATED.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import statistics
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from xegemm.config import config_from_text
from xegemm.errors import XegemmError
from xegemm.files import read_text
from xegemm.plan.planner import plan
from xegemm.library.targets import get_part
from xegemm.model.calibration import CALIBRATED, GRIDS, Constants
from xegemm.model.static import Features, features, throughput

DATA = Path(__file__).resolve().parent / "published_gemm.csv"
DATA_BYTES = 1 << 20
USABLE = ("clear", "assumed")
LARGE_M = 256           # the subsets reported apart: below it the published rows are bound by DRAM bandwidth

# The sweep for rows whose source names no tile: work-group BM x BN and sub-groups SG_M x SG_N (BK is two DPAS
# k-steps); the CUTLASS-style tiles of the sources (sycl-tla examples, vLLM's by rows per expert) and smaller ones.
SWEEP = ((8, 64, 1, 2), (8, 128, 1, 4), (8, 256, 1, 4), (16, 64, 1, 2), (16, 128, 1, 4), (16, 256, 1, 8),
         (32, 64, 1, 2), (32, 128, 1, 4), (32, 256, 1, 4), (64, 64, 2, 2), (64, 128, 2, 4), (64, 256, 2, 4),
         (128, 128, 4, 2), (128, 128, 4, 4), (128, 256, 4, 8), (256, 128, 8, 2), (256, 128, 8, 4),
         (256, 256, 8, 4))
SUBGROUP_GRIDS = ((1, 1), (1, 2), (1, 4), (1, 8), (2, 2), (2, 4), (4, 2), (4, 4), (2, 8), (8, 2), (4, 8), (8, 4))


@dataclass
class Row:
    """One CSV row, its candidate plans' features and the chosen prediction."""

    data: dict
    candidates: list[tuple[str, Features]] = field(default_factory=list)
    reason: str = ""                    # why it was not predicted
    split: str = ""                     # calibration | heldout | ""
    tile_from: str = ""                 # published | published work-group, sweep sub-groups | sweep

    @property
    def published(self) -> float:
        return float(self.data["published_tflops"])

    def best(self, constants: Constants) -> tuple[str, float, dict]:
        """The candidate the model predicts fastest: its tile, TFLOP/s and the prediction's details."""
        scored = [(throughput(f, constants), tile) for tile, f in self.candidates]
        speed, tile = max(scored, key=lambda item: item[0].tflops)
        return tile, speed.tflops, speed.as_dict()


def load(path: Path = DATA) -> list[dict]:
    """The data rows (comment lines start with #)."""
    text = read_text(path, DATA_BYTES, "published figures")
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return list(csv.DictReader(io.StringIO("\n".join(lines))))


def _config_text(row: dict, bm: int, bn: int, bk: int, sgm: int, sgn: int) -> str:
    ints = row["a"] in ("s8", "u8", "s4", "u4")
    layout = {"r": "row", "c": "col"}
    lay = row["layout"] or "rr"
    lines = [f"problem: {{m: {row['m']}, n: {row['n']}, k: {row['k']}}}",
             f"types: {{a: {row['a']}, b: {row['b']}, acc: {'s32' if ints else 'f32'}, c: {row['c']}}}",
             f"layout: {{a: {layout[lay[0]]}, b: {layout[lay[1]]}, c: row}}",
             f"tile: {{workgroup: [{bm}, {bn}, {bk}], subgroups: [{sgm}, {sgn}], subgroup_size: 16}}",
             "pipeline: {prefetch: 2}", "target: {grf: 256}"]
    if int(row["experts"] or 0):
        lines.append(f"moe: {{experts: {row['experts']}}}")
    if row["quant"] not in ("", "none"):
        fmt, group, scale = row["quant"].split(":")
        lines.append(f"quant: {{format: {fmt}, group: {group}, scale: {scale}}}")
    return "\n".join(lines) + "\n"


def _dpas_k(row: dict) -> int:
    """K of one DPAS for the row's A type (8 x 32 bits / element bits; a quantized B converts into A's type)."""
    return {"tf32": 8, "bf16": 16, "f16": 16, "s8": 32, "u8": 32, "s4": 64, "u4": 64}[row["a"]]


def _tiles(row: dict) -> tuple[list[tuple[int, int, int, int, int]], str]:
    tile, sg_tile = row["tile"], row["subgroup_tile"]
    bk_default = 2 * _dpas_k(row)
    if "/" in tile:
        wg, sg = tile.split("/")
        bm, bn, bk = (int(x) for x in wg.split("x"))
        sgm, sgn = (int(x) for x in sg.split("x"))
        return [(bm, bn, bk, sgm, sgn)], "published"
    if tile:
        bm, bn, bk = (int(x) for x in tile.split("x"))
        return [(bm, bn, bk, sgm, sgn) for sgm, sgn in SUBGROUP_GRIDS
                if bm % (8 * sgm) == 0 and bn % (16 * sgn) == 0], "published work-group, sweep sub-groups"
    tiles = [(bm, bn, bk_default, sgm, sgn) for bm, bn, sgm, sgn in SWEEP]
    if sg_tile:
        want = tuple(int(x) for x in sg_tile.split("x"))
        tiles = [(bm, bn, bk_default, bm // want[0], bn // want[1]) for bm, bn in
                 sorted({(bm, bn) for bm, bn, _, _ in SWEEP}) if bm % want[0] == 0 and bn % want[1] == 0
                 and (bm // want[0]) * (bn // want[1]) <= 32]
        return tiles, f"sweep of the work-groups with the published {sg_tile} sub-group tile"
    return tiles, "sweep"


def prepare(data: list[dict]) -> list[Row]:
    """Plan every usable row's candidates; split the plannable ones (even positions calibrate)."""
    rows = []
    for item in data:
        row = Row(item)
        rows.append(row)
        if item["status"] not in USABLE:
            row.reason = "excluded: " + item["note"]
            continue
        part = get_part(item["device"])
        tiles, row.tile_from = _tiles(item)
        failures = []
        for bm, bn, bk, sgm, sgn in tiles:
            try:
                planned = plan(config_from_text(_config_text(item, bm, bn, bk, sgm, sgn), f"<{item['id']}>"))
            except XegemmError as exc:
                failures.append(f"{bm}x{bn}x{bk}/{sgm}x{sgn}: {str(exc).splitlines()[0]}")
                continue
            row.candidates.append((f"{bm}x{bn}x{bk}/{sgm}x{sgn}", features(planned, part)))
        if not row.candidates:
            row.reason = "no legal plan: " + "; ".join(failures[:2])
    for index, row in enumerate(r for r in rows if r.candidates):
        row.split = "calibration" if index % 2 == 0 else "heldout"
    return rows


def _log_error(rows: list[Row], constants: Constants) -> float:
    return statistics.fmean(abs(math.log(row.best(constants)[1] / row.published)) for row in rows)


def fit(rows: list[Row], start: Constants = Constants()) -> Constants:
    """Coordinate search over GRIDS minimising the mean |log(pred / published)| on ``rows`` (deterministic:
    constants in declaration order, grid points in order, ties kept; until a full pass changes nothing)."""
    current = start
    best = _log_error(rows, current)
    for _ in range(20):
        changed = False
        for name in Constants.names():
            for value in GRIDS[name]:
                trial = replace(current, **{name: value})
                error = _log_error(rows, trial)
                if error < best - 1e-12:
                    best, current, changed = error, trial, True
        if not changed:
            break
    return current


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    def ranks(values):
        order = sorted(range(len(values)), key=lambda i: values[i])
        out = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for t in range(i, j + 1):
                out[order[t]] = (i + j) / 2 + 1
            i = j + 1
        return out
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return num / den if den else float("nan")


def _stats(rows: list[Row], constants: Constants) -> dict:
    if not rows:
        return {"rows": 0, "spearman": None, "median_error": None}
    pred = [row.best(constants)[1] for row in rows]
    pub = [row.published for row in rows]
    errors = [abs(p / q - 1) for p, q in zip(pred, pub)]
    return {"rows": len(rows), "spearman": round(spearman(pred, pub), 4) if len(rows) > 1 else None,
            "median_error": round(statistics.median(errors), 4)}


def report(rows: list[Row], constants: Constants = CALIBRATED) -> dict:
    """The JSON report: the required keys first, then the per-row table and the subsets."""
    predicted = [r for r in rows if r.candidates]
    held = [r for r in predicted if r.split == "heldout"]
    calib = [r for r in predicted if r.split == "calibration"]
    held_stats = _stats(held, constants)
    table = []
    for row in rows:
        entry = {"id": row.data["id"], "status": row.data["status"], "device": row.data["device"],
                 "shape": f"{row.data['m']}x{row.data['n']}x{row.data['k']}" + (
                     f" E={row.data['experts']}" if int(row.data["experts"] or 0) else ""),
                 "types": f"{row.data['a']}x{row.data['b']}->{row.data['c']}", "published": row.data["published_tflops"],
                 "source": row.data["source"], "date": row.data["date"], "split": row.split}
        if row.candidates:
            tile, tflops, detail = row.best(constants)
            peak = get_part(row.data["device"]).bf16_tflops
            entry.update(tile=tile, tile_from=row.tile_from, predicted=round(tflops, 3),
                         ratio=round(tflops / row.published, 3), bf16_peak=peak, **{f"model_{k}": v for k, v in
                                                                                    detail.items()})
        else:
            entry["not_predicted"] = row.reason
        table.append(entry)
    return {"rows": len(rows), "heldout_rows": len(held), "heldout_spearman": held_stats["spearman"],
            "heldout_median_error": held_stats["median_error"], "predicted_rows": len(predicted),
            "calibration": _stats(calib, constants), "heldout_clear": _stats(
                [r for r in held if r.data["status"] == "clear"], constants),
            "heldout_large_m": _stats([r for r in held if int(r.data["m"]) >= LARGE_M], constants),
            "heldout_small_m": _stats([r for r in held if int(r.data["m"]) < LARGE_M], constants),
            "by_device_heldout": {d: _stats([r for r in held if r.data["device"] == d], constants)
                                  for d in sorted({r.data["device"] for r in held})},
            "constants": constants.as_dict(), "table": table}


def _print_table(result: dict) -> None:
    print(f"{'id':28} {'split':11} {'device':8} {'shape':22} {'types':18} {'tile':20} {'pub':>8} {'pred':>8} "
          f"{'ratio':>6} bound")
    for e in result["table"]:
        if "predicted" in e:
            print(f"{e['id']:28} {e['split']:11} {e['device']:8} {e['shape']:22} {e['types']:18} {e['tile']:20} "
                  f"{float(e['published']):8.3f} {e['predicted']:8.3f} {e['ratio']:6.2f} {e['model_bound']}")
        else:
            print(f"{e['id']:28} {'-':11} {e['device'] or '-':8} {e['shape']:22} {e['types']:18} "
                  f"{'not predicted':20} {e['published'] or '-':>8}  {e['not_predicted'][:70]}")
    print(f"held-out rows {result['heldout_rows']}: median |pred/pub - 1| = {result['heldout_median_error']}, "
          f"Spearman = {result['heldout_spearman']}; calibration rows {result['calibration']['rows']}: "
          f"median error {result['calibration']['median_error']}, Spearman {result['calibration']['spearman']}")
    for key in ("heldout_large_m", "heldout_small_m", "heldout_clear"):
        print(f"{key}: {result[key]}")
    for device, stats in result["by_device_heldout"].items():
        print(f"held-out on {device}: {stats}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA, help="the published figures (CSV)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--fit", action="store_true", help="refit the constants on the calibration rows and "
                        "exit 1 if they differ from the shipped ones")
    args = parser.parse_args(argv)
    try:
        rows = prepare(load(args.data))
    except (XegemmError, OSError, KeyError, ValueError) as exc:
        print(f"model_check: {args.data}: {exc}", file=sys.stderr)
        return 2
    status = 0
    constants = CALIBRATED
    if args.fit:
        fitted = fit([r for r in rows if r.split == "calibration"])
        if fitted != CALIBRATED:
            print(f"model_check: the calibration rows fit {fitted.as_dict()}, not the shipped "
                  f"{CALIBRATED.as_dict()} (generator/xegemm/model/calibration.py)", file=sys.stderr)
            status = 1
    result = report(rows, constants)
    if args.json:
        print(json.dumps(result))
    else:
        _print_table(result)
    return status


if __name__ == "__main__":
    sys.exit(main())
