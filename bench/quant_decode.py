"""Decode-shaped GEMMs with quantized weights against their references, interleaved (docs/benchmarks.md).

``python -m bench.quant_decode [CONFIG ...] [--m 1 8 32] [--n 1024] [--k 1024] [--rounds R] [--launches L]
[--json FILE]``: for each shipped quantized config (default: configs/w4a16, gptq, awq, w8a16, fp8, mxfp4, w8a8_fp8)
and each M,
on an N x K weight scaled down from an LLM layer's, three sides are built (the first two verified as ``xegemm
run`` does) and timed in the same interleaved rounds (:func:`bench.interleave.round_robin`):

* the dequantizing kernel (the config at that shape);
* xegemm's own GEMM of the same tile with B (and a W8A8 config's A) already in the compute type (f16 or bf16, no
  ``quant:``);
* numpy's float32 matmul of A by the pre-dequantized weights (the fair CPU reference: no dequantization).

Prints each side's median time and GFLOP/s, the quantized kernel's weight bandwidth (qweight + scales + zeros
bytes per run, the figure a decode GEMM is bound by) and its ratios to the other two.  Performance is printed,
never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from bench.interleave import build_verified, round_robin
from xegemm.kernel.arguments import KernelCall
from xegemm.config import load_config
from xegemm.evaluate import plan_variants
from xegemm.evaluate.device import DeviceSession
from xegemm.lowering import choose_lowering
from xegemm.evaluate.timing import conditions, gemm_flops, launch_ms
from xegemm.quant import compute_type, dequantize, operand_spec, random_quantized
from xegemm.runtime import describe, select_sycl_device

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = [ROOT / "configs" / f"{name}.yaml" for name in ("w4a16", "gptq", "awq", "w8a16", "fp8", "mxfp4", "w8a8_fp8")]
NUMPY = "numpy f32 (pre-dequantized)"


def _one(config):
    """The config's first planned variant."""
    return next(pv for pv in plan_variants(config) if pv.plan is not None)


def measure(paths, ms, n: int, k: int, rounds: int, launches: int) -> list[dict]:
    device = select_sycl_device()
    lowering = choose_lowering(describe(device))
    session = DeviceSession(device)
    rows = []
    for path in paths:
        base = load_config(path)
        spec, compute = operand_spec(base, "b"), compute_type(base.types)
        for m in ms:
            shape = {"problem.m": m, "problem.n": n, "problem.k": k, "problem.batch": 1}
            quant = _one(base.with_overrides(shape))
            w8a8 = {"types.a": compute, "quant_a.format": "none"} if operand_spec(base, "a") else {}
            plain = _one(base.with_overrides({**shape, "types.b": compute, "quant.format": "none",
                                              "types.compute": None, **w8a8}))
            sides, kernels = {}, {}
            for label, pv in (("quantized", quant), ("compute-type B", plain)):
                kernel, failure = build_verified(session, lowering, pv)
                if failure:
                    print(f"{path.name} M={m} {label}: {failure}")
                    break
                kernels[label] = pv
                sides[label] = lambda submit=kernel.submit: launch_ms(submit)
            else:
                rng = np.random.default_rng(0)
                a = rng.standard_normal((m, k), dtype=np.float32)
                w = dequantize(random_quantized(spec, k, n, rng), compute).astype(np.float32)

                def numpy_side(a=a, w=w) -> float:
                    t0 = time.perf_counter()
                    np.matmul(a, w)
                    return (time.perf_counter() - t0) * 1e3
                sides[NUMPY] = numpy_side
                before = conditions()
                timings = round_robin(sides, rounds, launches)
                med = {name: statistics.median(t.samples_ms) for name, t in timings.items()}
                sizes = KernelCall.of(quant.plan).sizes(m, n, k, 1)
                weight_bytes = sizes["stride_b"] + sizes["stride_s"] + sizes["stride_z"]
                flops = gemm_flops(m, n, k, 1)
                rows.append({"config": path.stem, "problem": f"{m}x{n}x{k}", "kernel": quant.name,
                             "ms": med, "gflops": {name: flops / t * 1e-6 for name, t in med.items()},
                             "weight_gbps": weight_bytes / med["quantized"] * 1e-6,
                             "vs_compute_type_b": med["compute-type B"] / med["quantized"],
                             "vs_numpy": med[NUMPY] / med["quantized"],
                             "cv": {name: t.cv for name, t in timings.items()},
                             "loadavg_before": before["loadavg"], "loadavg_after": conditions()["loadavg"],
                             "cpu_target_arch": os.environ.get("CL_CONFIG_CPU_TARGET_ARCH", "")})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", type=Path, default=CONFIGS)
    parser.add_argument("--m", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--k", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--launches", type=int, default=3)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    rows = measure(args.configs, args.m, args.n, args.k, args.rounds, args.launches)
    for r in rows:
        ms = r["ms"]
        print(f"{r['config']:>6} {r['problem']:>12}: quantized {ms['quantized']:.3f} ms "
              f"({r['weight_gbps']:.2f} GB/s of weights, CV {r['cv']['quantized']:.1%}); "
              f"{r['vs_compute_type_b']:.2f}x the {ms['compute-type B']:.3f} ms of compute-type B, "
              f"{r['vs_numpy']:.2f}x numpy's {ms[NUMPY]:.3f} ms; load {r['loadavg_before'][0]:.2f}->"
              f"{r['loadavg_after'][0]:.2f} arch {r['cpu_target_arch'] or 'default'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
