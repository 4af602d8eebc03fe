"""The call API's per-call overhead: ``gemm(A, B)`` against the bare kernel it runs, interleaved, at small sizes.

``python -m bench.call_overhead [--config PATH] [--shapes 32x32x32,...] [--rounds R] [--launches L] [--json FILE]``:
per shape, the kernel ``xegemm.load(config)`` picks for it is built (from the program cache) and then two sides
are timed round-robin (:func:`bench.interleave.measure_sides`): ``call``, the whole call on numpy arrays (checks,
dispatch lookup, copies to the device, argument binding, launch, wait, copy of D back), and ``kernel``, the same
kernel launched on buffers already on the device (launch and wait).  Both are wall times on the host; the
kernel's device time (profiling events) is recorded too.  Prints per shape the medians, the overhead
(call - kernel, in us) and the ratio call / kernel.  Measured, never asserted.  The CPU code path is chosen per
process (``CL_CONFIG_CPU_TARGET_ARCH=core-avx2`` for AVX2): run it once per path.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

import xegemm
from bench.interleave import measure_sides
from xegemm.api.kinds import scalars
from xegemm.api.operands import host_bytes, operand
from xegemm.library.dtypes import host_dtype
from xegemm.evaluate.device import submit_in_order
from xegemm.evaluate.timing import conditions
from xegemm.runtime.program import to_device
from xegemm.config.shapes import parse_label

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "default.yaml"
DEFAULT_SHAPES = ("32x32x32", "64x64x64", "128x128x128", "256x256x256")


def _ms(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def sides_for(gemm, shape, rng) -> tuple[dict, list]:
    """The two sides of one shape, and a list the kernel side appends its device times (ms) to."""
    t = gemm.candidates[0].config.types
    a = rng.uniform(-1, 1, (shape.m, shape.k)).astype(host_dtype(t.a))
    b = rng.uniform(-1, 1, (shape.k, shape.n)).astype(host_dtype(t.b))
    gemm(a, b)                                                # builds (or loads) the kernel, fixes the choice
    opa, opb = operand("A", a, "M x K"), operand("B", b, "K x N")
    choice = gemm.choose(shape.m, shape.n, shape.k, 1, t.a, t.b, opa.layouts, opb.layouts)
    q = gemm.queue
    nothing = np.zeros(4, np.uint8)
    bufs = {"A": to_device(q, host_bytes(opa, choice.layout_a, t.a)), "B": to_device(q, host_bytes(opb, choice.layout_b, t.b)),
            "D": to_device(q, np.zeros(max(4, choice.sizes["stride_c"]), np.uint8)), "C": to_device(q, nothing),
            "bias": to_device(q, nothing), "workspace": to_device(q, np.zeros(max(4, choice.sizes["workspace_bytes"]), np.uint8))}
    kernels = gemm.programs.of(q, choice)
    bound = choice.call.bind(choice.sizes, bufs, scalars(choice.config, 1.0, 0.0))
    launches = [(k, args, g, l_) for k, (_, args, g, l_) in zip(kernels, bound)]
    device_ms: list[float] = []

    def kernel() -> float:
        t0 = time.perf_counter()
        event = submit_in_order(q, launches)
        event.wait()
        wall = (time.perf_counter() - t0) * 1e3
        device_ms.append((event.profiling_info_end - event.profiling_info_start) * 1e-6)
        return wall

    return {"call": lambda: _ms(lambda: gemm(a, b)), "kernel": kernel}, device_ms


def measure(config: Path, shapes, rounds: int, launches: int) -> list[dict]:
    gemm = xegemm.load(config)
    rng = np.random.default_rng(0)
    rows = []
    for label in shapes:
        shape = parse_label(label)
        sides, device_ms = sides_for(gemm, shape, rng)
        result = measure_sides(sides, rounds, launches)
        call, kernel = result["timings"]["call"].median, result["timings"]["kernel"].median
        rows.append({"shape": shape.label, "kernel": gemm.last_kernel.name, "call_ms": call, "kernel_wall_ms": kernel,
                     "kernel_device_ms": statistics.median(device_ms), "overhead_us": (call - kernel) * 1e3,
                     "ratio_call_to_kernel": call / kernel, "high_cv": result["high_cv"]})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    ap.add_argument("--shapes", default=",".join(DEFAULT_SHAPES))
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--launches", type=int, default=20)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rows = measure(args.config, args.shapes.split(","), args.rounds, args.launches)
    cond = conditions()
    print(f"conditions: {json.dumps(cond, default=str)}")
    print(f"{'shape':>14} {'call ms':>9} {'kernel ms':>10} {'device ms':>10} {'overhead us':>12} {'call/kernel':>12}")
    for r in rows:
        print(f"{r['shape']:>14} {r['call_ms']:9.4f} {r['kernel_wall_ms']:10.4f} {r['kernel_device_ms']:10.4f} "
              f"{r['overhead_us']:12.1f} {r['ratio_call_to_kernel']:12.2f}" + (" (high CV)" if r["high_cv"] else ""))
    if args.json:
        args.json.write_text(json.dumps({"conditions": cond, "rows": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
