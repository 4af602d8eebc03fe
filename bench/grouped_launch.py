"""One grouped launch against one xegemm launch per group and numpy per group, timed interleaved.

``python -m bench.grouped_launch [CONFIG ...] [--rounds R] [--launches L] [--json FILE]`` (default
configs/moe.yaml and configs/grouped.yaml): per variant of a grouped or MoE config (each walk of its sweep),
three sides run the same groups:

- ``grouped``: the variant's one launch over every group (xegemm.grouped), verified group by group first,
  with its G (default: compute units x occupancy);
- ``grouped G=tiles``: the same kernel with one work-group per tile (``tile.persistent`` = the tile count: no
  work-group walks more than one tile, the runtime balances the work-groups);
- ``per group``: the same tile's single-GEMM kernel launched once per non-empty group (one build; each group's
  sizes bound at launch, as the call API does), each group's D verified first;
- ``numpy``: numpy's float32 matmul of every group in turn.

The xegemm sides are device time per whole problem, from the first launch's start to the last one's end (the
profiling events, as ``xegemm run`` times a kernel): the gaps between per-group launches count, which is what a
grouped launch saves; numpy is wall-clock.  The sides are timed round-robin in the same rounds (bench.interleave's
:func:`round_robin`), so load from other processes falls on all of them alike.  GFLOP/s count every group's
2 M N K.  Run once plain and once with ``CL_CONFIG_CPU_TARGET_ARCH=core-avx2`` for both CPU code paths
(bench.code_paths).  Performance is printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

import numpy as np

from bench.interleave import build_verified, round_robin
from xegemm.kernel.arguments import KernelCall
from xegemm.config import Variant, load_config
from xegemm.evaluate import plan_variant, plan_variants, render_variant
from xegemm.evaluate.device import DeviceSession, EventSpan, device_build_options, epilogue_scalars
from xegemm.evaluate.grouped import GroupedNumpyReference
from xegemm.files import write_json_atomic
from xegemm.grouped.problem import from_config
from xegemm.verify.grouped import group_config
from xegemm.lowering import choose_lowering
from xegemm.evaluate.timing import conditions, launch_ms
from xegemm.runtime import describe, select_sycl_device
from xegemm.runtime.program import build_program, from_device, launch, to_device
from xegemm.verify.dense import check, make_operands, poison_c, reference

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = [ROOT / "configs" / "moe.yaml", ROOT / "configs" / "grouped.yaml"]


def per_group_launches(session, lowering, config):
    """A function launching the single-GEMM kernel of ``config``'s tile once per non-empty group (their events
    as one span), after every group's D was verified; or raises with the failing group."""
    problem = from_config(config)
    groups = [g for g, shape in enumerate(problem.groups) if not shape.empty]
    configs = [group_config(config, problem, g) for g in groups]
    pv = plan_variant(Variant(configs[0]), lowering)
    if pv.plan is None:
        raise RuntimeError(f"the single-GEMM kernel of the tile is rejected: {pv.reason}")
    kernel = build_program(session.queue, render_variant(pv, lowering), device_build_options(lowering, configs[0])) \
        .get_sycl_kernel(pv.plan.name)
    call, bound, keep = KernelCall.of(pv.plan), [], []
    for g, cfg in zip(groups, configs):
        p, ops = cfg.problem, make_operands(cfg)
        nothing = np.zeros(4, np.uint8)
        bufs = {"A": to_device(session.queue, ops.a_bytes), "B": to_device(session.queue, ops.b_bytes),
                "D": to_device(session.queue, poison_c(cfg)),
                "C": to_device(session.queue, nothing if ops.c_in_bytes is None else ops.c_in_bytes),
                "bias": to_device(session.queue, nothing if ops.bias is None else ops.bias.astype(np.float32)),
                "workspace": to_device(session.queue, nothing)}
        if ops.quant:     # a quantized expert's scales and zeros (configs/moe_w4a16.yaml)
            bufs |= {name: to_device(session.queue, nothing if ops.quant[name] is None else ops.quant[name])
                     for name in ("scales", "zeros")}
        ((_, args, gsize, lsize),) = call.bind(call.sizes(p.m, p.n, p.k, 1), bufs, epilogue_scalars(cfg))
        launch(session.queue, kernel, args, gsize, lsize).wait()
        verdict = check(cfg, from_device(bufs["D"], np.uint8, poison_c(cfg).shape), reference(cfg, ops))
        if not verdict.ok:
            raise RuntimeError(f"per-group kernel, group {g} ({problem.groups[g].label}): {verdict.reason}")
        bound.append((args, gsize, lsize))
        keep.append(bufs)

    def submit():
        return EventSpan([launch(session.queue, kernel, args, gsize, lsize) for args, gsize, lsize in bound])
    submit.buffers = keep
    return submit


def measure(paths, rounds: int, launches: int) -> list[dict]:
    device = select_sycl_device()
    lowering = choose_lowering(describe(device))
    session = DeviceSession(device)
    rows = []
    for path in paths:
        for pv in plan_variants(load_config(path), lowering):
            if pv.plan is None:
                print(f"  {pv.name}: rejected: {pv.reason}")
                continue
            kernel, failure = build_verified(session, lowering, pv)
            if failure:
                print(f"  {pv.name}: {failure}")
                continue
            problem = from_config(pv.config)
            tiles = kernel.buffers["grouped"].layout.sizes["total_tiles"]
            every, failure = build_verified(session, lowering, plan_variant(
                Variant(pv.config.with_overrides({"tile.persistent": tiles})), lowering))
            if failure:
                print(f"  {pv.name} with G = {tiles}: {failure}")
                continue
            sides = {"grouped": lambda submit=kernel.submit: launch_ms(submit),
                     "grouped G=tiles": lambda submit=every.submit: launch_ms(submit),
                     "per group": lambda submit=per_group_launches(session, lowering, pv.config): launch_ms(submit),
                     "numpy": GroupedNumpyReference(problem).sample}
            before = conditions()
            timings = round_robin(sides, rounds, launches)
            flops = 2 * problem.macs
            gflops = {name: flops / statistics.median(t.samples_ms) * 1e-6 for name, t in timings.items()}
            rows.append({"config": Path(path).stem, "problem": problem.label, "kernel": pv.name,
                         "walk": pv.config.tile.walk, "groups": len(problem.groups),
                         "empty": sum(g.empty for g in problem.groups),
                         "workgroups": kernel.buffers["grouped"].layout.sizes["workgroups"],
                         "gflops": gflops, "median_ms": {n: statistics.median(t.samples_ms) for n, t in timings.items()},
                         "cv": {n: t.cv for n, t in timings.items()},
                         "tiles": tiles, "grouped_vs_per_group": gflops["grouped"] / gflops["per group"],
                         "grouped_vs_numpy": gflops["grouped"] / gflops["numpy"],
                         "loadavg_before": before["loadavg"], "loadavg_after": conditions()["loadavg"],
                         "cpu_target_arch": os.environ.get("CL_CONFIG_CPU_TARGET_ARCH", "")})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", default=[str(p) for p in CONFIGS])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--launches", type=int, default=3)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    rows = measure(args.configs, args.rounds, args.launches)
    for r in rows:
        g = r["gflops"]
        print(f"{r['config']} {r['walk']:>7} G={r['workgroups']} ({r['groups']} groups, {r['empty']} empty): grouped "
              f"{g['grouped']:.1f} GFLOP/s, G=tiles ({r['tiles']}) {g['grouped G=tiles']:.1f}, per group "
              f"{g['per group']:.1f}, numpy {g['numpy']:.1f}; grouped / per "
              f"group {r['grouped_vs_per_group']:.2f}, grouped / numpy {r['grouped_vs_numpy']:.2f} (CV "
              + ", ".join(f"{n} {c:.0%}" for n, c in r["cv"].items())
              + f"; load {r['loadavg_before'][0]:.2f}->{r['loadavg_after'][0]:.2f}; arch "
              f"{r['cpu_target_arch'] or 'default'})")
    if args.json:
        write_json_atomic(args.json, rows)


if __name__ == "__main__":
    main()
