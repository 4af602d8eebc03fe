"""The coopmat lowering's speed on the Intel OpenCL CPU runtime (Intel AMX), against numpy's float32 matmul and
PyTorch's CPU matmul (oneDNN), timed interleaved in the same run (docs/benchmarks.md "The coopmat lowering on AMX").

``python -m bench.coopmat_speed [--shapes 1024 2048 4096x4096x1024] [--types bf16 s8] [--tiles 64x64:2x2 128x64:2x2]
[--rounds 7] [--launches 3]``: per shape, type and tile, a GEMM (A row-major, B VNNI-packed, D = acc: bf16 -> f32,
s8 -> s32) is rendered from a plan (the tile: work-group MxN and sub-groups; the k-tile 32 for bf16, 64 for s8),
built (child process first; the build time is printed), verified against numpy with xegemm.verify.dense, then
each round launches it ``--launches`` times (profiling-event time, the best of them) and runs the references as
often (wall time, the best): numpy float32 ``a @ b`` of the same values, and where torch is installed (an optional
bench dependency: ``pip install torch==2.13.0``) ``torch.matmul`` of bf16 tensors (bf16 -> bf16: oneDNN with AMX
computes in f32 and rounds the result) or ``torch._int_mm`` of int8 tensors (s8 -> s32).  Prints each side's
median over rounds, the CV, GFLOP/s and the ratios; performance is printed, never asserted.  Needs
CL_CONFIG_CPU_TARGET_ARCH with AMX before the runtime starts: set here.
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
ACC = {"bf16": "f32", "s8": "s32"}
K_TILE = {"bf16": 32, "s8": 64}


def _shape(text: str) -> tuple[int, int, int]:
    parts = [int(x) for x in text.lower().split("x")]
    if len(parts) == 1:
        return parts[0], parts[0], parts[0]
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"{text!r}: a size (1024) or MxNxK (4096x4096x1024)")
    return parts[0], parts[1], parts[2]


def _tile(text: str) -> tuple[int, int, int, int]:
    try:
        wg, sgs = text.lower().split(":")
        (bm, bn), (sm, sn) = (int(x) for x in wg.split("x")), (int(x) for x in sgs.split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: work-group MxN:sub-groups MxN, e.g. 64x64:2x2") from None
    return bm, bn, sm, sn


def _config(shape, ab: str, tile):
    (m, n, k), (bm, bn, sm, sn) = shape, tile
    return config_from_text(f"problem: {{m: {m}, n: {n}, k: {k}}}\n"
                            f"types: {{a: {ab}, b: {ab}, acc: {ACC[ab]}, c: {ACC[ab]}}}\n"
                            f"tile: {{workgroup: [{bm}, {bn}, {K_TILE[ab]}], subgroups: [{sm}, {sn}], "
                            "subgroup_size: 16}\n")


def _cv(xs):
    return statistics.pstdev(xs) / statistics.mean(xs) if len(xs) > 1 else 0.0


def _torch_reference(ops, ab: str):
    """A callable running torch's CPU matmul of the same values, and what it is; None where torch is missing."""
    try:
        import torch  # noqa: PLC0415 - an optional bench dependency, imported only when this runs
    except ImportError:
        return None, "torch not installed"
    if ab == "bf16":
        ta = torch.from_numpy(ops.a[0].astype(np.float32)).to(torch.bfloat16)
        tb = torch.from_numpy(ops.b[0].astype(np.float32)).to(torch.bfloat16)
        return (lambda: torch.matmul(ta, tb)), f"torch {torch.__version__} bf16 matmul"
    ta = torch.from_numpy(np.ascontiguousarray(ops.a[0]).astype(np.int8))
    tb = torch.from_numpy(np.ascontiguousarray(ops.b[0]).astype(np.int8))
    return (lambda: torch._int_mm(ta, tb)), f"torch {torch.__version__} _int_mm s8"


def _best(fn, launches: int) -> float:
    best = float("inf")
    for _ in range(launches):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def measure(shape, ab: str, tile, rounds: int, launches: int) -> dict:
    m, n, k = shape
    config = _config(shape, ab, tile)
    kernel = coopmat_kernel(plan(config))
    queue = OpenCLQueue(select_sycl_device())
    t0 = time.perf_counter()
    program = build_spirv(render_kernel(kernel), queue)
    build_s = time.perf_counter() - t0
    ops = make_operands(config)
    bufs = {}
    for key, data in (("A", ops.a_bytes), ("B", pack_b(ops.b_bytes, k, n, ab)), ("D", poison_c(config)),
                      ("C", np.zeros(4, np.uint8)), ("bias", np.zeros(4, np.uint8))):
        data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        bufs[key] = OpenCLBuffer(queue, data.nbytes)
        bufs[key].copy_from_host(data)
    fn = program.get_sycl_kernel(kernel.name)
    args = kernel_arguments(m, n, k, 1, ab, bufs)
    grid = kernel.global_size(m, n)
    fn.launch(queue, args, grid, kernel.local).wait()
    verdict = check(config, bufs["D"].copy_to_host(), reference(config, ops))
    if not verdict.ok:
        raise SystemExit(f"{m}x{n}x{k} {ab}: the coopmat kernel fails verification: {verdict.reason}")
    a32, b32 = ops.a[0].astype(np.float32), ops.b[0].astype(np.float32)
    torch_fn, torch_what = _torch_reference(ops, ab)
    a32 @ b32                                                      # warm the references
    if torch_fn:
        torch_fn()

    def ours_once():
        ev = fn.launch(queue, args, grid, kernel.local)
        ev.wait()
        return (ev.profiling_info_end - ev.profiling_info_start) * 1e-9

    ours, numpy_s, torch_s = [], [], []
    for _ in range(rounds):
        time.sleep(0.2)        # the runtime's, OpenBLAS's and oneDNN's threads busy-wait after their work
        ours.append(min(ours_once() for _ in range(launches)))
        numpy_s.append(_best(lambda: a32 @ b32, launches))
        if torch_fn:
            torch_s.append(_best(torch_fn, launches))
    flop = 2.0 * m * n * k
    mo, mn = statistics.median(ours), statistics.median(numpy_s)
    r = {"shape": f"{m}x{n}x{k}", "ab": ab, "tile": kernel.name, "build_s": build_s,
         "max_abs_err": verdict.max_abs_err, "coopmat_ms": mo * 1e3, "coopmat_cv": _cv(ours),
         "coopmat_gflops": flop / mo / 1e9, "numpy_ms": mn * 1e3, "numpy_cv": _cv(numpy_s), "ratio": mn / mo,
         "torch": torch_what}
    if torch_s:
        mt = statistics.median(torch_s)
        r.update(torch_ms=mt * 1e3, torch_cv=_cv(torch_s), torch_ratio=mt / mo)
    return r


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", type=_shape, nargs="+", default=[_shape("1024"), _shape("2048")])
    p.add_argument("--types", nargs="+", choices=sorted(ACC), default=["bf16"])
    p.add_argument("--tiles", type=_tile, nargs="+", default=[_tile("64x64:2x2")],
                   help="work-group MxN:sub-groups MxN (default 64x64:2x2)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--launches", type=int, default=3)
    args = p.parse_args(argv)
    if WHY:
        raise SystemExit(f"cannot run the coopmat lowering here: {WHY}")
    model = next((line.split(":", 1)[1].strip() for line in subprocess.run(["lscpu"], capture_output=True,
                  text=True).stdout.splitlines() if line.startswith("Model name")), "?")
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}  {model}  load {os.getloadavg()[0]:.2f}  "
          f"CL_CONFIG_CPU_TARGET_ARCH={os.environ.get('CL_CONFIG_CPU_TARGET_ARCH')}  numpy {np.__version__}")
    for shape in args.shapes:
        for ab in args.types:
            for tile in args.tiles:
                r = measure(shape, ab, tile, args.rounds, args.launches)
                bm, bn, sm, sn = tile
                line = (f"{r['shape']} {ab}->{ACC[ab]} wg {bm}x{bn} sg {sm}x{sn}: coopmat {r['coopmat_ms']:.2f} ms = "
                        f"{r['coopmat_gflops']:.0f} GFLOP/s (CV {r['coopmat_cv']:.1%}); numpy f32 {r['numpy_ms']:.2f} "
                        f"ms (CV {r['numpy_cv']:.1%}) -> {r['ratio']:.2f}x numpy")
                if "torch_ms" in r:
                    line += (f"; {r['torch']} {r['torch_ms']:.2f} ms (CV {r['torch_cv']:.1%}) -> "
                             f"{r['torch_ratio']:.2f}x torch")
                else:
                    line += f"; {r['torch']}"
                print(line + f"; build {r['build_s']:.2f} s, max |err| {r['max_abs_err']:.2g}; "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
