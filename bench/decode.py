"""Decode-shaped GEMMs through the call API's untuned pick, against references timed in the same rounds
(docs/benchmarks.md, "Decode shapes and the untuned pick").

``python -m bench.decode [--part weights bf16 tuned] [--rounds R] [--launches L] [--prefill-m M] [--budget B]
[--others split|skinny|none] [--m M ...] [--json FILE]``, three parts (``--others``: the config's split-K variants, or
every skinny one, timed in the same rounds beside the first two parts' pick, the pick's speed over each printed:
whether the model's order holds at the shape):

* ``weights``: W4A16 GPTQ (``configs/llm_gptq.yaml``) at M = 1, 8, 16 with N = K = 4096: the kernel the call API
  picks with no measurement (:meth:`xegemm.api.gemm.Gemm.choose`, the model-ranked rule), built and verified,
  timed interleaved with the machine's copy bandwidth measured the same way in the same rounds (a 256 MiB numpy
  copy, and the device's float4 copy kernel of :mod:`xegemm.evaluate.peak`: bytes read + written per second) and
  numpy's float32 matmul of the dequantized weights.  The kernel's weight rate is the bytes of qweight, scales and
  zeros per run over its time; printed as a fraction of each copy bandwidth.
* ``bf16``: bf16 at M = 1, N = K = 4096 (``configs/llm.yaml``'s pick) against numpy's float32 GEMV (``a @ b``, a
  1 x K), interleaved.
* ``tuned``: six LLM shapes (decode M = 1 and prefill M = ``--prefill-m`` of N = K = 4096, of N = 14336, K = 4096
  and of N = 4096, K = 14336) of ``configs/llm.yaml``: a small tune per shape (:func:`xegemm.tune.tune`,
  exhaustive, ``--budget`` points), then the untuned pick and the tuned winner built, verified and timed in the
  same rounds: the pick's speed over the winner's.

Every side is timed with :func:`bench.interleave.round_robin` (device events for kernels, wall time for numpy),
medians and CVs printed with the conditions (load average, the CPU code path).  Performance is printed, never
asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.interleave import build_verified, round_robin
from xegemm.api.gemm import load
from xegemm.config import Variant
from xegemm.config.shapes import Shape
from xegemm.evaluate import plan_variant
from xegemm.evaluate.device import DeviceSession
from xegemm.evaluate.peak import LOCAL_SIZE, SOURCE as PEAK_SOURCE
from xegemm.evaluate.timing import conditions, gemm_flops, launch_ms
from xegemm.kernel.arguments import KernelCall
from xegemm.library.build_flags import STANDARD
from xegemm.quant import compute_type, dequantize, operand_spec, random_quantized
from xegemm.runtime.program import build_program, launch, to_device
from xegemm.tune import tune

ROOT = Path(__file__).resolve().parents[1]
LLM, LLM_GPTQ = ROOT / "configs" / "llm.yaml", ROOT / "configs" / "llm_gptq.yaml"
COPY_MB = 256


def _kernel_side(session, lowering, config):
    """(side, plan) of a config at its problem: built and verified, or SystemExit naming why not."""
    pv = plan_variant(Variant(config), lowering)
    if pv.plan is None:
        raise SystemExit(f"{config.name}: {pv.reason}")
    kernel, failure = build_verified(session, lowering, pv)
    if failure:
        raise SystemExit(f"{pv.name}: {failure}")
    return (lambda submit=kernel.submit: launch_ms(submit)), pv.plan


def _at_shape(config, m: int, n: int, k: int):
    return config.with_overrides({"problem.m": m, "problem.n": n, "problem.k": k, "problem.batch": 1})


def _others(gemm, choice, m: int, n: int, k: int, which: str) -> list:
    """The config's other skinny variants at the shape, to time beside the pick: ``split`` the split-K ones,
    ``skinny`` every variant whose work-group M is at most 16, ``none`` nothing."""
    if which == "none":
        return []
    out = []
    for c in gemm.candidates:
        t = c.config.tile
        if t == choice.config.tile or t.workgroup[0] > 16 or (which == "split" and t.split_k <= 1):
            continue
        out.append(_at_shape(c.config, m, n, k))
    return out


def _label(plan) -> str:
    bm, bn, bk = plan.config.tile.workgroup
    sgm, sgn = plan.config.tile.subgroups
    return f"{bm}x{bn}x{bk} {sgm}x{sgn}" + (f" split K {plan.split_k}" if plan.split_k > 1 else "")


def _numpy_copy_side():
    src = np.ones(COPY_MB << 18, dtype=np.float32)
    dst = np.empty_like(src)

    def side() -> float:
        t0 = time.perf_counter()
        np.copyto(dst, src)
        return (time.perf_counter() - t0) * 1e3
    return side, 2 * src.nbytes


def _device_copy_side(gemm):
    """The float4 copy kernel of evaluate/peak.py on the Gemm's queue (its profiling events)."""
    queue = gemm.queue
    nbytes = (COPY_MB << 20) // (16 * LOCAL_SIZE) * (16 * LOCAL_SIZE)
    program = build_program(queue, PEAK_SOURCE, STANDARD)
    src = to_device(queue, np.ones(nbytes // 4, dtype=np.float32))
    dst = to_device(queue, np.zeros(nbytes // 4, dtype=np.float32))
    copy = program.get_sycl_kernel("xegemm_peak_copy")
    return (lambda: launch_ms(lambda: launch(queue, copy, [src, dst], (nbytes // 16,), (LOCAL_SIZE,)))), 2 * nbytes


def _matmul_side(a, w):
    def side() -> float:
        t0 = time.perf_counter()
        np.matmul(a, w)
        return (time.perf_counter() - t0) * 1e3
    return side


def _stats(timings) -> dict:
    return {name: {"median_ms": statistics.median(t.samples_ms), "cv": t.cv, "runs": len(t.samples_ms)}
            for name, t in timings.items()}


def weights(rounds: int, launches: int, ms=(1, 8, 16), n: int = 4096, k: int = 4096, others: str = "split") -> list[dict]:
    gemm = load(LLM_GPTQ)
    session = DeviceSession(gemm.sycl_device)
    config = gemm.candidates[0].config
    spec, compute = operand_spec(config, "b"), compute_type(config.types)
    np_copy, np_bytes = _numpy_copy_side()
    dev_copy, dev_bytes = _device_copy_side(gemm)
    rng = np.random.default_rng(0)
    w = dequantize(random_quantized(spec, k, n, rng), compute).astype(np.float32)
    rows = []
    for m in ms:
        choice = gemm.choose(m, n, k, 1, config.types.a, config.types.b, ("row",), ("row",))
        kernel, plan = _kernel_side(session, gemm.lowering, choice.config)
        sizes = KernelCall.of(plan).sizes(m, n, k, 1)
        weight_bytes = sizes["stride_b"] + sizes["stride_s"] + sizes["stride_z"]
        a = rng.standard_normal((m, k), dtype=np.float32)
        sides = {"kernel": kernel, "numpy copy": np_copy, "device float4 copy": dev_copy,
                 "numpy f32 matmul (dequantized)": _matmul_side(a, w)}
        for other in _others(gemm, choice, m, n, k, others):
            side, other_plan = _kernel_side(session, gemm.lowering, other)
            sides[f"not picked: {_label(other_plan)}"] = side
        before = conditions()
        stats = _stats(round_robin(sides, rounds, launches))
        t = stats["kernel"]["median_ms"]
        rate = weight_bytes / t * 1e-6
        np_bw = np_bytes / stats["numpy copy"]["median_ms"] * 1e-6
        dev_bw = dev_bytes / stats["device float4 copy"]["median_ms"] * 1e-6
        rows.append({"part": "weights", "problem": f"{m}x{n}x{k}", "kernel": plan.name, "label": _label(plan),
                     "reason": choice.reason,
                     "weight_bytes": weight_bytes, "weight_gbps": rate, "numpy_copy_gbps": np_bw,
                     "device_copy_gbps": dev_bw, "of_numpy_copy": rate / np_bw, "of_device_copy": rate / dev_bw,
                     "vs_numpy_matmul": stats["numpy f32 matmul (dequantized)"]["median_ms"] / t,
                     "pick_over_others": {name: s["median_ms"] / t for name, s in stats.items()
                                          if name.startswith("not picked")},
                     "sides": stats, "conditions_before": before, "conditions_after": conditions()})
    return rows


def bf16(rounds: int, launches: int, n: int = 4096, k: int = 4096, others: str = "split") -> list[dict]:
    gemm = load(LLM)
    session = DeviceSession(gemm.sycl_device)
    choice = gemm.choose(1, n, k, 1, "bf16", "bf16", ("row",), ("row",))
    kernel, plan = _kernel_side(session, gemm.lowering, choice.config)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((1, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    sides = {"kernel": kernel, "numpy f32 GEMV": _matmul_side(a, b)}
    for other in _others(gemm, choice, 1, n, k, others):
        side, other_plan = _kernel_side(session, gemm.lowering, other)
        sides[f"not picked: {_label(other_plan)}"] = side
    before = conditions()
    stats = _stats(round_robin(sides, rounds, launches))
    t = stats["kernel"]["median_ms"]
    return [{"part": "bf16", "problem": f"1x{n}x{k}", "kernel": plan.name, "label": _label(plan),
             "reason": choice.reason,
             "gflops": gemm_flops(1, n, k, 1) / t * 1e-6, "vs_numpy": stats["numpy f32 GEMV"]["median_ms"] / t,
             "pick_over_others": {name: s["median_ms"] / t for name, s in stats.items()
                                  if name.startswith("not picked")},
             "sides": stats, "conditions_before": before, "conditions_after": conditions()}]


def tuned(rounds: int, launches: int, prefill_m: int, budget: int) -> list[dict]:
    shapes = [Shape(m, n, k) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336)) for m in (1, prefill_m)]
    out = Path(tempfile.mkdtemp(prefix="xegemm-decode-tune-"))
    t0 = time.perf_counter()
    tune(LLM, shapes=shapes, strategy="exhaustive", budget=budget, out=out, cache=False, progress=False, leaders=2,
         leader_time_s=10.0)
    tune_s = time.perf_counter() - t0
    untuned, winners = load(LLM), load(out)
    session = DeviceSession(untuned.sycl_device)
    rows = []
    for s in shapes:
        pick = untuned.choose(s.m, s.n, s.k, 1, "bf16", "bf16", ("row",), ("row",))
        best = winners.choose(s.m, s.n, s.k, 1, "bf16", "bf16", ("row",), ("row",))
        pick_side, pick_plan = _kernel_side(session, untuned.lowering, pick.config)
        sides = {"untuned pick": pick_side}
        best_plan = pick_plan
        if best.config.tile != pick.config.tile:
            sides["tuned winner"], best_plan = _kernel_side(session, untuned.lowering, best.config)
        before = conditions()
        stats = _stats(round_robin(sides, rounds, launches))
        same = "tuned winner" not in stats
        ratio = 1.0 if same else stats["tuned winner"]["median_ms"] / stats["untuned pick"]["median_ms"]
        rows.append({"part": "tuned", "problem": s.label, "pick": pick_plan.name, "pick_reason": pick.reason,
                     "winner": best_plan.name, "winner_reason": best.reason, "same_kernel": same,
                     "pick_speed_over_winner": ratio, "sides": stats, "tune_s_all_shapes": tune_s, "budget": budget,
                     "conditions_before": before, "conditions_after": conditions()})
    return rows


def _versus(r: dict) -> str:
    return "".join(f"\n    the pick's speed over {name[len('not picked: '):]}'s: {ratio:.2f}"
                   for name, ratio in r.get("pick_over_others", {}).items())


def _print(r: dict) -> None:
    sides = ", ".join(f"{name} {s['median_ms']:.3f} ms (CV {s['cv']:.0%}, {s['runs']})" for name, s in r["sides"].items())
    load_avg = f"load {r['conditions_before']['loadavg'][0]:.1f}->{r['conditions_after']['loadavg'][0]:.1f}, " \
               f"{r['conditions_before']['cpu_code_path']}"
    if r["part"] == "weights":
        print(f"W4A16 {r['problem']}: weights {r['weight_gbps']:.2f} GB/s = {r['of_numpy_copy']:.0%} of numpy's copy "
              f"({r['numpy_copy_gbps']:.2f} GB/s), {r['of_device_copy']:.0%} of the device copy "
              f"({r['device_copy_gbps']:.2f} GB/s); {r['vs_numpy_matmul']:.2f}x numpy's f32 matmul; {sides}; "
              f"{load_avg}\n    {r['label']} {r['kernel']}: {r['reason']}{_versus(r)}")
    elif r["part"] == "bf16":
        print(f"bf16 {r['problem']}: {r['gflops']:.2f} GFLOP/s, {r['vs_numpy']:.2f}x numpy's f32 GEMV; {sides}; "
              f"{load_avg}\n    {r['label']} {r['kernel']}: {r['reason']}{_versus(r)}")
    else:
        print(f"tuned {r['problem']}: the untuned pick at {r['pick_speed_over_winner']:.2f}x the tuned winner's speed"
              f"{' (the same kernel)' if r['same_kernel'] else ''}; {sides}; {load_avg}\n"
              f"    pick {r['pick']}: {r['pick_reason']}\n    winner {r['winner']}: {r['winner_reason']}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", nargs="+", choices=("weights", "bf16", "tuned"), default=["weights", "bf16", "tuned"])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--launches", type=int, default=3)
    parser.add_argument("--prefill-m", type=int, default=512)
    parser.add_argument("--budget", type=int, default=6, help="points per shape of the small tune")
    parser.add_argument("--others", choices=("split", "skinny", "none"), default="split",
                        help="the config's variants timed beside the pick: split K ones (default), every skinny one")
    parser.add_argument("--m", type=int, nargs="+", default=[1, 8, 16], help="the weights part's M")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    rows, t0 = [], time.perf_counter()
    for part in args.part:
        fresh = {"weights": lambda: weights(args.rounds, args.launches, tuple(args.m), others=args.others),
                 "bf16": lambda: bf16(args.rounds, args.launches, others=args.others),
                 "tuned": lambda: tuned(args.rounds, args.launches, args.prefill_m, args.budget)}[part]()
        for r in fresh:
            _print(r)
        rows += fresh
    print(f"{time.perf_counter() - t0:.0f} s in all; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
