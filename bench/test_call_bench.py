"""pytest-benchmark: the call API's per-call time at small sizes, with the bare kernel measured interleaved.

Per shape, :func:`bench.call_overhead.sides_for` gives the two sides (``gemm(a, b)`` on numpy arrays, and the
same kernel launched on buffers already on the device); they are timed round-robin
(:func:`bench.interleave.measure_sides`), the call is also timed by pytest-benchmark, and ``extra_info`` holds
both medians, the kernel's device time, the overhead (call - kernel, us) and the ratio.  Measured, never
asserted.  Run once per CPU code path (``CL_CONFIG_CPU_TARGET_ARCH=core-avx2`` for the AVX2 one).
"""

from __future__ import annotations

import statistics

import numpy as np
import pytest

import xegemm
from bench.call_overhead import DEFAULT_CONFIG, DEFAULT_SHAPES, sides_for
from bench.interleave import measure_sides
from xegemm.evaluate.timing import conditions
from xegemm.config.shapes import parse_label

ROUNDS, LAUNCHES = 10, 20


@pytest.fixture(scope="module")
def gemm():
    return xegemm.load(DEFAULT_CONFIG)


@pytest.mark.device
@pytest.mark.parametrize("label", DEFAULT_SHAPES)
def test_call_overhead(label, gemm, benchmark):
    benchmark.group = "xegemm call API: gemm(a, b) on numpy arrays"
    sides, device_ms = sides_for(gemm, parse_label(label), np.random.default_rng(0))
    measured = measure_sides(sides, ROUNDS, LAUNCHES)
    benchmark.pedantic(sides["call"], rounds=ROUNDS * LAUNCHES, warmup_rounds=2)
    call, kernel = measured["timings"]["call"].median, measured["timings"]["kernel"].median
    benchmark.extra_info.update(kernel=gemm.last_kernel.name, call_ms=call, kernel_wall_ms=kernel,
                                kernel_device_ms=statistics.median(device_ms), overhead_us=(call - kernel) * 1e3,
                                ratio_call_to_kernel=call / kernel, high_cv=measured["high_cv"],
                                conditions=conditions())
