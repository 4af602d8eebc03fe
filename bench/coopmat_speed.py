"""The coopmat lowering's speed on the Intel OpenCL CPU runtime (Intel AMX), against numpy's float32 matmul timed
interleaved in the same run (docs/benchmarks.md "The coopmat lowering on AMX").

``python -m bench.coopmat_speed [--sizes 1024 2048] [--rounds 7] [--launches 3]``: per size, a bf16 -> f32 GEMM
(A row-major, B VNNI-packed, D = acc) is rendered from a plan (work-group 64x64, 2x2 sub-groups of 32x32 =
2x2 coop-matrix tiles of 16x16x32), built (child process first), verified against numpy with xegemm.verify.dense, then
each round launches it ``--launches`` times (profiling-event time, the best of them) and runs numpy as often
(wall time, the best).  Prints each side's median over rounds, the CV, GFLOP/s and the ratio; performance is
printed, never asserted.  Needs CL_CONFIG_CPU_TARGET_ARCH with AMX before the runtime starts: set here.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time

import numpy as np

from xegemm.config import config_from_text
from xegemm.lowering.coopmat import coopmat_kernel, kernel_arguments, pack_b, render_kernel
from xegemm.plan.planner import plan
from xegemm.runtime import select_sycl_device
from xegemm.runtime.opencl import OpenCLBuffer, OpenCLQueue
from xegemm.runtime.spirv import build_spirv, prepare_environment
from xegemm.verify.dense import check, make_operands, poison_c, reference

WHY = prepare_environment()    # before the CPU runtime starts (importing the modules above does not start it)


def _config(size: int):
    return config_from_text(f"problem: {{m: {size}, n: {size}, k: {size}}}\n"
                            "types: {a: bf16, b: bf16, acc: f32, c: f32}\n"
                            "tile: {workgroup: [64, 64, 32], subgroups: [2, 2], subgroup_size: 16}\n")


def _cv(xs):
    return statistics.pstdev(xs) / statistics.mean(xs) if len(xs) > 1 else 0.0


def measure(size: int, rounds: int, launches: int) -> dict:
    config = _config(size)
    kernel = coopmat_kernel(plan(config))
    queue = OpenCLQueue(select_sycl_device())
    t0 = time.perf_counter()
    program = build_spirv(render_kernel(kernel), queue)
    build_s = time.perf_counter() - t0
    ops = make_operands(config)
    bufs = {}
    for key, data in (("A", ops.a_bytes), ("B", pack_b(ops.b_bytes, size, size, "bf16")), ("D", poison_c(config)),
                      ("C", np.zeros(4, np.uint8)), ("bias", np.zeros(4, np.uint8))):
        data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        bufs[key] = OpenCLBuffer(queue, data.nbytes)
        bufs[key].copy_from_host(data)
    fn = program.get_sycl_kernel(kernel.name)
    args = kernel_arguments(size, size, size, 1, "bf16", bufs)
    grid = kernel.global_size(size, size)
    fn.launch(queue, args, grid, kernel.local).wait()
    verdict = check(config, bufs["D"].copy_to_host(), reference(config, ops))
    if not verdict.ok:
        raise SystemExit(f"{size}^3: the coopmat kernel fails verification: {verdict.reason}")
    a32, b32 = ops.a[0].astype(np.float32), ops.b[0].astype(np.float32)
    a32 @ b32                                                      # warm numpy
    ours, numpy_s = [], []
    for _ in range(rounds):
        time.sleep(0.2)        # the runtime's and OpenBLAS's threads busy-wait after their work
        best = float("inf")
        for _ in range(launches):
            ev = fn.launch(queue, args, grid, kernel.local)
            ev.wait()
            best = min(best, (ev.profiling_info_end - ev.profiling_info_start) * 1e-9)
        ours.append(best)
        best = float("inf")
        for _ in range(launches):
            t = time.perf_counter()
            a32 @ b32
            best = min(best, time.perf_counter() - t)
        numpy_s.append(best)
    flop = 2.0 * size ** 3
    mo, mn = statistics.median(ours), statistics.median(numpy_s)
    return {"size": size, "build_s": build_s, "max_abs_err": verdict.max_abs_err,
            "coopmat_ms": mo * 1e3, "coopmat_cv": _cv(ours), "coopmat_gflops": flop / mo / 1e9,
            "numpy_ms": mn * 1e3, "numpy_cv": _cv(numpy_s), "numpy_gflops": flop / mn / 1e9, "ratio": mn / mo}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--launches", type=int, default=3)
    args = p.parse_args(argv)
    if WHY:
        raise SystemExit(f"cannot run the coopmat lowering here: {WHY}")
    model = next((line.split(":", 1)[1].strip() for line in subprocess.run(["lscpu"], capture_output=True,
                  text=True).stdout.splitlines() if line.startswith("Model name")), "?")
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}  {model}  load {os.getloadavg()[0]:.2f}  "
          f"CL_CONFIG_CPU_TARGET_ARCH={os.environ.get('CL_CONFIG_CPU_TARGET_ARCH')}  numpy {np.__version__}")
    for size in args.sizes:
        r = measure(size, args.rounds, args.launches)
        print(f"{size}^3 bf16->f32: coopmat {r['coopmat_ms']:.2f} ms = {r['coopmat_gflops']:.0f} GFLOP/s "
              f"(CV {r['coopmat_cv']:.1%}), numpy f32 {r['numpy_ms']:.2f} ms = {r['numpy_gflops']:.0f} GFLOP/s "
              f"(CV {r['numpy_cv']:.1%}), ratio {r['ratio']:.2f}x; build {r['build_s']:.2f} s, "
              f"max |err| {r['max_abs_err']:.2g}; load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
