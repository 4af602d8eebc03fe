"""The coopmat lowering's speed on the Intel OpenCL CPU runtime (Intel AMX), against numpy's float32 matmul and
PyTorch's CPU matmul (oneDNN), timed interleaved in the same run (docs/benchmarks.md "The coopmat lowering on AMX").

``python -m bench.coopmat_speed [--shapes 1024 2048 4096x4096x1024] [--types bf16 s8 w4a16] [--tiles 64x64:2x2]
[--rounds 7] [--launches 3]``: per shape, type and tile, a GEMM (A row-major, B VNNI-packed, D = acc: bf16 -> f32,
s8 -> s32) is rendered from a plan (the tile: work-group MxN and sub-groups; the k-tile 32 for bf16, 64 for s8),
built (child process first; the build time is printed), verified against numpy with xegemm.verify.dense, then
each round launches it ``--launches`` times (profiling-event time, the best of them) and runs the references as
often (wall time, the best): numpy float32 ``a @ b`` of the same values, and where torch is installed (an optional
bench dependency: ``pip install torch==2.13.0``) ``torch.matmul`` of bf16 tensors (bf16 -> bf16: oneDNN with AMX
computes in f32 and rounds the result) or ``torch._int_mm`` of int8 tensors (s8 -> s32).  ``w4a16``: GPTQ u4 B
(bf16 scales per 128 K) through the lowering's device dequantization, each call timed whole (the GPTQ arrays
uploaded, dequantized and packed into bf16 by the B packer, the kernel run: wall time), against torch unpacking the same int32 arrays, dequantizing to bf16 and multiplying
(numpy's side multiplies the dequantized f32 values, without the dequantization).  Prints each side's
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
from xegemm.quant import operand_spec
from xegemm.quant.formats import FORMATS
from xegemm.plan.planner import plan
from xegemm.runtime import select_sycl_device
from xegemm.runtime.b_packer import DevicePacker
from xegemm.runtime.opencl import OpenCLBuffer, OpenCLQueue
from xegemm.runtime.spirv import build_spirv, prepare_environment
from xegemm.verify.dense import check, make_operands, poison_c, reference

WHY = prepare_environment()    # before the CPU runtime starts (importing the modules above does not start it)
ACC = {"bf16": "f32", "s8": "s32", "w4a16": "f32"}
K_TILE = {"bf16": 32, "s8": 64, "w4a16": 32}
# W4A16: GPTQ u4 weights with bf16 scales per 128 K (AutoGPTQ's arrays), A bf16; the coopmat lowering dequantizes B
# into bf16 on the device before each multiply (xegemm.runtime.b_packer), so the call is timed whole: the GPTQ
# arrays uploaded, dequantized and packed, the kernel run
W4A16 = "types: {a: bf16, b: u4, acc: f32, c: f32}\nquant: {format: gptq, group: 128, scale: bf16, zero: u4}\n"


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
    types = W4A16 if ab == "w4a16" else f"types: {{a: {ab}, b: {ab}, acc: {ACC[ab]}, c: {ACC[ab]}}}\n"
    return config_from_text(f"problem: {{m: {m}, n: {n}, k: {k}}}\n" + types +
                            f"tile: {{workgroup: [{bm}, {bn}, {K_TILE[ab]}], subgroups: [{sm}, {sn}], "
                            "subgroup_size: 16}\n")


def _cv(xs):
    return statistics.pstdev(xs) / statistics.mean(xs) if len(xs) > 1 else 0.0


def _gptq_arrays(config, ops) -> dict:
    """The GPTQ arrays (qweight, qzeros, scales) as the checkpoint stores them, from the operands' bytes."""
    spec, p = operand_spec(config, "b"), config.problem
    want = FORMATS[spec.format].arrays(spec, p.k, p.n)
    sources = {"qweight": ops.b_bytes, "scales": ops.quant["scales"], "qzeros": ops.quant["zeros"]}
    out = {}
    for name, w in want.items():
        nbytes = int(np.prod(w.shape)) * np.dtype(w.dtype).itemsize
        out[name] = np.ascontiguousarray(sources[name]).reshape(-1).view(np.uint8)[:nbytes].view(w.dtype).reshape(w.shape)
    return out


def _torch_dequantize_matmul(torch, a, arrays: dict, group: int):
    """GPTQ dequantize-then-matmul in torch, as a W4A16 layer without a fused kernel runs it: unpack the int32
    words (8 K of a column per qweight word, 8 columns per qzeros word, zeros stored as z - 1), w = (q - z) * s in
    bf16, then A @ w."""
    qweight = torch.from_numpy(arrays["qweight"].view(np.int32))
    qzeros = torch.from_numpy(arrays["qzeros"].view(np.int32))
    scales = torch.from_numpy(arrays["scales"].view(np.uint16).astype(np.int32) << 16).view(torch.float32) \
        .to(torch.bfloat16)
    shifts = torch.arange(0, 32, 4, dtype=torch.int32)

    def run():
        q = ((qweight.unsqueeze(1) >> shifts.view(1, 8, 1)) & 15).reshape(-1, qweight.shape[1])
        z = (((qzeros.unsqueeze(2) >> shifts.view(1, 1, 8)) + 1) & 15).reshape(qzeros.shape[0], -1)
        w = ((q - z.repeat_interleave(group, 0)[:q.shape[0]]).to(torch.bfloat16)
             * scales.repeat_interleave(group, 0)[:q.shape[0]])
        return torch.matmul(a, w)
    return run


def _torch_reference(ops, ab: str, config=None):
    """A callable running torch's CPU matmul of the same values, and what it is; None where torch is missing."""
    try:
        import torch  # noqa: PLC0415 - an optional bench dependency, imported only when this runs
    except ImportError:
        return None, "torch not installed"
    if ab == "w4a16":
        ta = torch.from_numpy(ops.a[0].astype(np.float32)).to(torch.bfloat16)
        run = _torch_dequantize_matmul(torch, ta, _gptq_arrays(config, ops), 128)
        return run, f"torch {torch.__version__} GPTQ dequantize (bf16) then matmul"
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
    quantized = ab == "w4a16"

    packer = DevicePacker(plan(config)) if quantized else None
    stored = [np.ascontiguousarray(x).reshape(-1).view(np.uint8)
              for x in ((ops.b_bytes, ops.quant["scales"], ops.quant["zeros"]) if quantized else ())]
    bufs = {}
    for key, data in (("A", ops.a_bytes), ("B", np.zeros(packer.packed_bytes(k, n), np.uint8) if quantized
                                           else pack_b(ops.b_bytes, k, n, ab)), ("D", poison_c(config)),
                      ("C", np.zeros(4, np.uint8)), ("bias", np.zeros(4, np.uint8)),
                      *zip(("stored", "scales", "zeros"), stored)):
        data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        bufs[key] = OpenCLBuffer(queue, data.nbytes)
        bufs[key].copy_from_host(data)

    def dequantize_on_device():     # the call's first part: the GPTQ arrays up, dequantized and packed into B
        for key, data in zip(("stored", "scales", "zeros"), stored):
            bufs[key].copy_from_host(data)
        packer.run(queue, {"stored": bufs["stored"], "scales": bufs["scales"], "zeros": bufs["zeros"],
                           "packed": bufs["B"]}, k, n)
    if quantized:
        dequantize_on_device()
    fn = program.get_sycl_kernel(kernel.name)
    args = kernel_arguments(m, n, k, 1, "bf16" if quantized else ab, bufs, dequantized=quantized)
    grid = kernel.global_size(m, n)
    fn.launch(queue, args, grid, kernel.local).wait()
    verdict = check(config, bufs["D"].copy_to_host(), reference(config, ops))
    if not verdict.ok:
        raise SystemExit(f"{m}x{n}x{k} {ab}: the coopmat kernel fails verification: {verdict.reason}")
    a32, b32 = ops.a[0].astype(np.float32), ops.b[0].astype(np.float32)
    torch_fn, torch_what = _torch_reference(ops, ab, config)
    a32 @ b32                                                      # warm the references
    torch_err = None
    if torch_fn:         # the reference computes the same product (its own dequantization, for W4A16)
        exact = a32.astype(np.float64) @ b32.astype(np.float64)
        torch_err = float(np.abs(torch_fn().float().numpy() - exact).max() / max(np.abs(exact).max(), 1e-30))

    def ours_once():
        if quantized:        # the whole call: the GPTQ arrays up, dequantized and packed on the device, the kernel
            t = time.perf_counter()
            dequantize_on_device()
            fn.launch(queue, args, grid, kernel.local).wait()
            return time.perf_counter() - t
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
         "torch": torch_what, "torch_max_rel_err": torch_err}
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
                    line += (f"; {r['torch']} {r['torch_ms']:.2f} ms (CV {r['torch_cv']:.1%}, max rel. err "
                             f"{r['torch_max_rel_err']:.1g}) -> {r['torch_ratio']:.2f}x torch")
                else:
                    line += f"; {r['torch']}"
                print(line + f"; build {r['build_s']:.2f} s, max |err| {r['max_abs_err']:.2g}; "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
