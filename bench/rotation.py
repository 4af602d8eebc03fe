"""Time per launch with and without rotating buffers, over problem sizes (docs/benchmarks.md, "Rotating buffers").

``python -m bench.rotation [--rounds R] [--launches L] [--json FILE]``: for each problem (bf16 -> f32, square
ones and decode-shaped ones, the portable lowering on the session's device), one kernel is built and verified and
timed two ways in the same interleaved rounds (:func:`bench.interleave.round_robin`): on the same buffers every
launch, and over the rotating copies that ``profile.rotate: true`` gives (:func:`xegemm.evaluate.timing.rotation_for`:
copies whose total is at least twice the last-level cache).  numpy's float32 matmul of the problem is timed both
ways as well.  Prints each side's median, CV and the ratio rotating / same; performance is printed, never
asserted.  What it decides: :data:`xegemm.evaluate.timing.ROTATE_BELOW_BYTES`, the size below which ``auto``
rotates.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from bench.interleave import build_verified, round_robin
from xegemm.config import config_from_text
from xegemm.evaluate import plan_variants
from xegemm.evaluate.device import DeviceSession
from xegemm.evaluate.timing import NumpyReference, conditions, launch_ms, rotation_for
from xegemm.lowering import Lowering
from xegemm.runtime import select_sycl_device

# (m, n, k, work-group tile, sub-groups): square tiles for square problems, the skinny decode tile of
# configs/llm.yaml for M = 1
PROBLEMS = [(256, 256, 256, (64, 64, 32), (2, 2)), (512, 512, 512, (64, 64, 32), (2, 2)),
            (1024, 1024, 1024, (64, 64, 32), (2, 2)), (2048, 2048, 2048, (64, 64, 32), (2, 2)),
            (1, 4096, 4096, (8, 64, 64), (1, 2)), (1, 14336, 4096, (8, 64, 64), (1, 2)),
            (1, 16384, 16384, (8, 64, 64), (1, 2))]


def _config(m, n, k, tile, subgroups, rotate: str):
    return config_from_text(f"""
name: rotation
problem: {{m: {m}, n: {n}, k: {k}}}
types: {{a: bf16, b: bf16, acc: f32, c: f32}}
tile: {{workgroup: [{tile[0]}, {tile[1]}, {tile[2]}], subgroups: [{subgroups[0]}, {subgroups[1]}]}}
profile: {{rotate: {rotate}}}
""")


def measure(rounds: int, launches: int, problems=PROBLEMS) -> list[dict]:
    session = DeviceSession(select_sycl_device())
    lowering = Lowering("portable")
    rows = []
    for m, n, k, tile, subgroups in problems:
        sides, described = {}, {}
        for rotate in ("false", "true"):
            pv = next(pv for pv in plan_variants(_config(m, n, k, tile, subgroups, rotate)) if pv.plan is not None)
            kernel, failure = build_verified(session, lowering, pv)
            if failure:
                raise SystemExit(f"{m}x{n}x{k}: {failure}")
            label = "kernel, " + ("rotating" if rotate == "true" else "same buffers")
            sides[label] = lambda submit=kernel.submit: launch_ms(submit)
            described[label] = kernel.rotation.describe()
            setting = "on" if rotate == "true" else "off"
            ref = NumpyReference(m, n, k, rotation=rotation_for(NumpyReference.working_bytes(m, n, k),
                                                                 session.llc_bytes, setting, session.memory_bytes))
            label = "numpy, " + ("rotating" if rotate == "true" else "same buffers")
            sides[label], described[label] = ref.sample, ref.rotation.describe()
        before = conditions()
        timings = round_robin(sides, rounds, launches)
        stats = {name: {"median_ms": statistics.median(t.samples_ms), "cv": t.cv, "runs": len(t.samples_ms),
                        "buffers": described[name]} for name, t in timings.items()}
        rows.append({"problem": f"{m}x{n}x{k}", "tile": "x".join(map(str, tile)), "llc_bytes": session.llc_bytes,
                     "working_bytes": session.rotation(pv.config).bytes_each,
                     "kernel_rotating_over_same": stats["kernel, rotating"]["median_ms"]
                     / stats["kernel, same buffers"]["median_ms"],
                     "numpy_rotating_over_same": stats["numpy, rotating"]["median_ms"]
                     / stats["numpy, same buffers"]["median_ms"],
                     "sides": stats, "conditions_before": before, "conditions_after": conditions()})
        print(_line(rows[-1]), flush=True)
    return rows


def _line(r: dict) -> str:
    sides = "; ".join(f"{name} {s['median_ms']:.3f} ms (CV {s['cv']:.0%}, {s['runs']}, {s['buffers']})"
                      for name, s in r["sides"].items())
    return (f"{r['problem']} ({r['working_bytes'] / (1 << 20):.1f} MiB of kernel buffers): kernel rotating / same "
            f"{r['kernel_rotating_over_same']:.2f}, numpy {r['numpy_rotating_over_same']:.2f}; load "
            f"{r['conditions_before']['loadavg'][0]:.1f}->{r['conditions_after']['loadavg'][0]:.1f}, "
            f"{r['conditions_before']['cpu_code_path']}\n    {sides}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--launches", type=int, default=5)
    parser.add_argument("--square", type=int, nargs="*", help="only these square sizes (M = N = K), 64x64x32 tiles")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    problems = PROBLEMS if args.square is None else [(s, s, s, (64, 64, 32), (2, 2)) for s in args.square]
    rows = measure(args.rounds, args.launches, problems)
    print(f"{time.perf_counter() - t0:.0f} s in all; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
