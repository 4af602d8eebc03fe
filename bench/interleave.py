"""Variants of one config timed against each other and numpy in interleaved rounds (docs/benchmarks.md).

``python -m bench.interleave CONFIG [--rounds R] [--launches L] [--against REV] [--json FILE]``: per problem of the config's
sweep, every variant is built and verified first (as ``xegemm run`` does), then the variants and numpy's
float32 matmul are timed round-robin (each warmed up first by time and stability, as ``xegemm run`` does): each
round pauses (the runtime's and OpenBLAS's threads busy-wait after their work), re-warms each variant and
launches it at least ``L`` times timed, then runs numpy as often.  Load
from other processes thus falls on all of them alike, which comparing two ``xegemm run`` rows (each measured
at its own moment) does not give.  Prints, per problem, each variant's median GFLOP/s (and its best: the fastest run, what load from
other processes disturbs least), its ratio to numpy and to the variant of the same tile, split K and stream-K with ``tile.swizzle`` = 1, and the conditions (load average, CPU code
path).  ``--against REV`` also renders every variant as commit ``REV`` of this repository does
(:mod:`bench.revision`), builds and verifies that source too and times it in the same rounds as a side of its
own: each variant's row then gives its ratio to itself at ``REV``.  Performance is printed, never asserted.

:func:`round_robin` and :func:`measure_sides` (the same rounds, measured again when a CV stays high) are the
interleaving the goals run (:mod:`bench.goals_child`) uses for its winners and references too.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections.abc import Callable

from bench.revision import python_at
from xegemm.config import load_config
from xegemm.evaluate import Evaluation, plan_variants, render_variant
from xegemm.evaluate.device import DeviceBuilder, DeviceSession, VerifyObserver
from xegemm.lowering import choose_lowering
from xegemm.evaluate.timing import CV_LIMIT, NumpyReference, Timing, conditions, gemm_flops, launch_ms, time_rounds
from xegemm.runtime import describe, select_sycl_device


def build_verified(session, lowering, pv, source: str | None = None):
    """Build and verify one planned variant on the session's device (from ``source``, by default as this tree
    renders it): (kernel, None), or (None, why not)."""
    evaluation = Evaluation(pv.name, "ok", "", {})
    source = render_variant(pv, lowering) if source is None else source
    kernel = DeviceBuilder(session, lowering).build(pv, source, evaluation)
    if kernel is not None:
        VerifyObserver().built(pv, evaluation, kernel)
    if evaluation.status != "ok":
        return None, f"{evaluation.status}: {evaluation.reason}"
    return kernel, None


def _built(session, lowering, pvs, sources: dict[str, str] | None = None):
    """(variant, kernel) for every planned variant that builds and verifies (from ``sources[name]`` when given);
    the others are printed."""
    out = []
    for pv in pvs:
        if sources is not None and pv.name not in sources:
            print(f"  {pv.name}: not rendered by the other commit")
            continue
        kernel, failure = build_verified(session, lowering, pv, None if sources is None else sources[pv.name])
        if failure:
            print(f"  {pv.name}: {failure}")
            continue
        out.append((pv, kernel))
    return out


RENDER_AT = ("import json, sys; from xegemm.config import load_config; from xegemm.evaluate import plan_variants, "
             "render_variant; from xegemm.lowering import named_lowering; lowering = named_lowering(sys.argv[2]); "
             "print(json.dumps({pv.name: render_variant(pv, lowering) for pv in "
             "plan_variants(load_config(sys.argv[1]), lowering) if pv.plan is not None}))")


def round_robin(sides: dict[str, Callable[[], float]], rounds: int, launches: int) -> dict[str, Timing]:
    """Time every side in the same rounds, the way ``xegemm run`` and ``xegemm tune`` time a kernel
    (:func:`xegemm.evaluate.timing.time_rounds`): each side warmed up by time and stability first; per round, each side
    in turn gets a pause of :data:`xegemm.evaluate.timing.SETTLE_S`, a re-warm to its steady level and at least
    ``launches`` timed runs (and :data:`xegemm.evaluate.timing.ROUND_MIN_MS`).  ``sides`` maps a name to a function that
    runs that side once and returns the run's time in ms; returns each side's timing with its warm-up."""
    return time_rounds(sides, rounds, launches)


def measure_sides(sides: dict[str, Callable[[], float]], rounds: int, launches: int) -> dict:
    """:func:`round_robin`, once more when a side's CV is above :data:`xegemm.evaluate.timing.CV_LIMIT`; the attempt
    whose worst CV is lower is kept.  Returns ``{"timings": {name: Timing}, "attempts", "high_cv": [names
    still above the limit]}``."""
    kept = None
    for attempt in (1, 2):
        timings = round_robin(sides, rounds, launches)
        worst = max((t.cv for t in timings.values()), default=0.0)
        if kept is None or worst < kept[1]:
            kept = (timings, worst)
        if worst <= CV_LIMIT:
            break
    timings = kept[0]
    return {"timings": timings, "attempts": attempt,
            "high_cv": [name for name, t in timings.items() if t.cv > CV_LIMIT]}


NUMPY = "numpy float32 matmul"   # the reference's side (not a kernel name)


def measure(config_path: str, rounds: int, launches: int, against: str | None = None) -> list[dict]:
    device = select_sycl_device()
    lowering = choose_lowering(describe(device))
    session = DeviceSession(device)
    others = python_at(against, RENDER_AT, os.path.abspath(config_path), lowering.name) if against else None
    by_problem: dict = {}
    for pv in plan_variants(load_config(config_path), lowering):
        if pv.plan is not None:
            by_problem.setdefault(pv.config.problem, []).append(pv)
    rows = []
    for problem, pvs in by_problem.items():
        built = _built(session, lowering, pvs)
        reference = NumpyReference(problem.m, problem.n, problem.k, problem.batch)
        sides = {pv.name: (lambda submit=kernel.submit: launch_ms(submit)) for pv, kernel in built}
        if others is not None:
            sides.update({f"{pv.name} @{against}": (lambda submit=kernel.submit: launch_ms(submit))
                          for pv, kernel in _built(session, lowering, [pv for pv, _ in built], others)})
        before = conditions()
        timings = round_robin({**sides, NUMPY: reference.sample}, rounds, launches)
        times = {name: list(t.samples_ms) for name, t in timings.items()}
        numpy_ms = times.pop(NUMPY)
        flops = gemm_flops(problem.m, problem.n, problem.k, problem.batch)
        numpy_gflops = flops / statistics.median(numpy_ms) * 1e-6
        base: dict = {}
        for pv, _ in built:
            tile = pv.config.tile
            gflops = flops / statistics.median(times[pv.name]) * 1e-6
            best = flops / min(times[pv.name]) * 1e-6
            key = (tile.workgroup, tile.subgroups, tile.split_k, tile.stream_k)
            if tile.swizzle == 1:
                base.setdefault(key, (gflops, best))
            rows.append({"problem": f"{problem.m}x{problem.n}x{problem.k}", "kernel": pv.name,
                         "workgroup": list(tile.workgroup), "subgroups": list(tile.subgroups),
                         "swizzle": tile.swizzle, "split_k": tile.split_k, "stream_k": tile.stream_k, "gflops": gflops, "numpy_gflops": numpy_gflops,
                         "vs_numpy": gflops / numpy_gflops, "vs_swizzle1": gflops / base[key][0] if key in base else None,
                         "gflops_best": best, "numpy_gflops_best": flops / min(numpy_ms) * 1e-6,
                         "vs_swizzle1_best": best / base[key][1] if key in base else None,
                         "runs": len(times[pv.name]), "warmup": timings[pv.name].warmup.as_dict(),
                         "cv": statistics.pstdev(times[pv.name]) / statistics.mean(times[pv.name]),
                         **_against(times, pv.name, against),
                         "loadavg_before": before["loadavg"], "loadavg_after": conditions()["loadavg"],
                         "cpu_target_arch": os.environ.get("CL_CONFIG_CPU_TARGET_ARCH", "")})
    return rows


def _against(times: dict[str, list[float]], name: str, against: str | None) -> dict:
    """The variant against itself at ``against``: that side's median and fastest GFLOP/s ratios."""
    other = times.get(f"{name} @{against}") if against else None
    if not other:
        return {}
    return {"against": against, "vs_against": statistics.median(other) / statistics.median(times[name]),
            "vs_against_best": min(other) / min(times[name]), "cv_against": statistics.pstdev(other) /
            statistics.mean(other)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--launches", type=int, default=3)
    parser.add_argument("--against", metavar="REV", help="also time each variant as git revision REV renders it")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    rows = measure(args.config, args.rounds, args.launches, args.against)
    if not rows:
        raise SystemExit(f"{args.config}: no variant was planned (`xegemm generate` says why each was rejected)")
    for r in rows:
        rel = (f"{r['vs_swizzle1']:.2f} (best {r['vs_swizzle1_best']:.2f})" if r["vs_swizzle1"] is not None
               else "-")
        print(f"{r['problem']:>15} {r['workgroup'][0]}x{r['workgroup'][1]}x{r['workgroup'][2]} "
              f"sg{r['subgroups'][0]}x{r['subgroups'][1]} swz{r['swizzle']}"
              + (f" splitk{r['split_k']}" if r["split_k"] > 1 else "")
              + (f" streamk{r['stream_k']}" if r["stream_k"] else "") + f": {r['gflops']:6.1f} GFLOP/s (best {r['gflops_best']:.1f}) "
              f"(CV {r['cv']:.1%}, {r['runs']} runs) {r['vs_numpy']:.2f}x numpy ({r['numpy_gflops']:.0f}) "
              f"{rel}x the first swizzle-1 variant of its tile; load {r['loadavg_before'][0]:.2f}->"
              f"{r['loadavg_after'][0]:.2f} arch {r['cpu_target_arch'] or 'default'}"
              + (f"; {r['vs_against']:.3f}x itself at {r['against']} (best {r['vs_against_best']:.3f}, its CV "
                 f"{r['cv_against']:.1%})" if "vs_against" in r else "") + f"\n    {r['kernel']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
