"""The device's measured peak, for the report's roofline: what a streaming copy (GB/s) and independent chains of
f32 multiply-adds (GFLOP/s) reach on the device, each timed with profiling events like the GEMM kernels.

These are measured ceilings of two simple kernels, not the data sheet's numbers: a GEMM variant above the FMA
ceiling (DPAS on a GPU does more per clock than f32 FMAs) is possible and says so.  ``run`` measures them in its
device worker (:mod:`xegemm.evaluate.isolated`), with a time limit, after the sweep.
"""

from __future__ import annotations

import ctypes

import numpy as np

from xegemm.library.build_flags import STANDARD
from xegemm.evaluate.timing import time_kernel
from xegemm.runtime.program import build_program, launch, to_device

CHAINS = 8            # independent multiply-add chains per work-item (hides the FMA latency)
FMA_ITERATIONS = 512
WORK_ITEMS_PER_CU = 4096
COPY_BYTES = 64 << 20  # per buffer (less on a device with little memory)
LOCAL_SIZE = 64

# A physical ceiling, not a measurement: no device does more than this many flops per clock per compute unit at
# this clock.  Both are well above any documented Xe or x86 rate (docs/reliability.md), so a measurement above
# the ceiling is a broken timer or a damaged record, never a fast kernel.
CEILING_FLOPS_PER_CLOCK = 4096
CEILING_GHZ = 6.0


def ceiling_gflops(compute_units: int) -> float:
    """The most GFLOP/s a device of ``compute_units`` can physically do (see CEILING_FLOPS_PER_CLOCK)."""
    return max(1, compute_units) * CEILING_FLOPS_PER_CLOCK * CEILING_GHZ


# A matrix engine does at most this many times the f32 multiply-add rate of its device: Intel's Data Center GPU
# Max 1550 peaks at 52 TFLOP/s of f32 vector FMAs and 1678 TOP/s of int8 XMX (32x); a Xeon core's AMX does 2048
# int8 operations per clock against AVX-512's 64 f32 flops (32x).  Twice that, for a peak measured low on a busy
# machine (docs/reliability.md): a cached timing above it is a damaged or forged record, not a fast kernel.
MATRIX_ENGINE_FACTOR = 64


def plausible_ceiling(peak: dict | None, compute_units: int) -> tuple[float, str]:
    """The most GFLOP/s a measurement on this device can honestly show, and what that bound is: the physical
    ceiling, or MATRIX_ENGINE_FACTOR times the device's measured f32 multiply-add peak (``peak``: what
    :func:`measure_peak` returned, or None) when that is lower."""
    physical = ceiling_gflops(compute_units)
    measured = (peak or {}).get("gflops")
    if isinstance(measured, (int, float)) and not isinstance(measured, bool) and 0 < measured < float("inf") \
            and MATRIX_ENGINE_FACTOR * measured < physical:
        return (MATRIX_ENGINE_FACTOR * measured,
                f"{MATRIX_ENGINE_FACTOR}x the device's measured f32 multiply-add peak of {measured:.0f} GFLOP/s")
    return physical, "the device's physical ceiling"


SOURCE = f"""
__kernel void xegemm_peak_copy(__global const float4 *src, __global float4 *dst) {{
    size_t i = get_global_id(0);
    dst[i] = src[i];
}}

__kernel void xegemm_peak_fma(__global float *out, const float a, const float b, const int iterations) {{
    float x[{CHAINS}];
    for (int c = 0; c < {CHAINS}; ++c) x[c] = (float)get_global_id(0) * 1e-9f + (float)c;
    for (int i = 0; i < iterations; ++i) {{
        #pragma unroll
        for (int c = 0; c < {CHAINS}; ++c) x[c] = mad(x[c], a, b);
    }}
    float s = 0.0f;
    for (int c = 0; c < {CHAINS}; ++c) s += x[c];
    out[get_global_id(0)] = s;
}}
"""


def measure_peak(queue, compute_units: int, global_mem_bytes: int, repeats: int = 5) -> dict:
    """``{"gflops", "gbps", "what"}`` measured on ``queue``'s device (median of ``repeats`` timed launches)."""
    program = build_program(queue, SOURCE, STANDARD)
    nbytes = min(COPY_BYTES, global_mem_bytes // 8) // (16 * LOCAL_SIZE) * (16 * LOCAL_SIZE)
    src = to_device(queue, np.ones(nbytes // 4, dtype=np.float32))
    dst = to_device(queue, np.zeros(nbytes // 4, dtype=np.float32))
    copy = program.get_sycl_kernel("xegemm_peak_copy")
    copy_time = time_kernel(lambda: launch(queue, copy, [src, dst], (nbytes // 16,), (LOCAL_SIZE,)), 1, repeats)
    items = max(1, compute_units) * WORK_ITEMS_PER_CU
    out = to_device(queue, np.zeros(items, dtype=np.float32))
    fma = program.get_sycl_kernel("xegemm_peak_fma")
    args = [out, ctypes.c_float(0.999), ctypes.c_float(0.001), ctypes.c_int(FMA_ITERATIONS)]
    fma_time = time_kernel(lambda: launch(queue, fma, args, (items,), (LOCAL_SIZE,)), 1, repeats)
    flops = 2 * items * FMA_ITERATIONS * CHAINS
    return {"gflops": flops / (fma_time.median * 1e6), "gbps": 2 * nbytes / (copy_time.median * 1e6),
            "what": f"f32 multiply-add chains ({items} work-items) and a {nbytes >> 20} MiB float4 copy, median of "
                    f"{repeats} launches each", "fma_ms": fma_time.as_dict(), "copy_ms": copy_time.as_dict()}
