"""Timing a real kernel whose first launches are slow: the warm-up must last until they are over.

The kernel counts its own launches in a global counter and loops longer while the count is low: the extra
work shrinks by a fifth each launch, like a runtime whose threads, pages and caches warm up.  Whatever
minimum count of warm-up launches is asked, the timing must report the kernel's steady speed (measured
afterwards on the same kernel) and a warm-up that covered the slow launches.  No time is compared with a
threshold of this machine: only the kernel's time with its own steady time, within a factor of 2, where the
slow launches are up to 10x slower.
"""

from __future__ import annotations

import ctypes
import statistics

import numpy as np
import pytest

from xegemm.evaluate.timing import NumpyReference, launch_ms, measure_against_reference, time_kernel
from xegemm.runtime.program import build_program, from_device, launch, make_queue, to_device

SOURCE = """
__kernel void slow_start(__global int *counter, __global float *out, int fast_iters, int extra_iters) {
    int n = counter[0];
    int iters = fast_iters + (int)(extra_iters * pown(0.8f, min(n, 60)));
    float x = 1.0f;
    for (int i = 0; i < iters; ++i) x = x * 0.9999f + 1.0f;
    out[0] = x;
    counter[0] = n + 1;
}
"""
FAST_ITERS = 300_000
EXTRA_ITERS = 9 * FAST_ITERS                       # the first launch 10x the steady one
SLOW_LAUNCHES = next(n for n in range(100) if EXTRA_ITERS * 0.8 ** n <= 0.1 * FAST_ITERS)   # > 10 % slower


class SlowStart:
    """The kernel on one queue, its counter reset to 0 (slow again)."""

    def __init__(self, sycl_device):
        self.queue = make_queue(sycl_device)
        self.kernel = build_program(self.queue, SOURCE, "-cl-std=CL3.0").get_sycl_kernel("slow_start")
        self.counter = to_device(self.queue, np.zeros(1, np.int32))
        self.out = to_device(self.queue, np.zeros(1, np.float32))

    def submit(self):
        return launch(self.queue, self.kernel, [self.counter, self.out, ctypes.c_int(FAST_ITERS),
                                                ctypes.c_int(EXTRA_ITERS)], [1], [1])

    def launches(self) -> int:
        return int(from_device(self.counter, np.int32, (1,))[0])

    def steady_ms(self) -> float:
        """The median of 15 launches after 60 (the extra work is then 1e-6 of the steady)."""
        while self.launches() < 60:
            launch_ms(self.submit)
        return statistics.median(launch_ms(self.submit) for _ in range(15))


@pytest.mark.parametrize("asked", [0, 2])
def test_time_kernel_warms_up_past_the_slow_first_launches(sycl_device, asked):
    side = SlowStart(sycl_device)
    timing = time_kernel(side.submit, warmup=asked, repeats=8)
    steady = side.steady_ms()
    assert timing.warmup.runs >= SLOW_LAUNCHES, timing.warmup
    assert timing.as_dict()["warmup"]["runs"] == timing.warmup.runs
    assert steady / 2 < timing.median < steady * 2, (timing.median, steady, timing.warmup)


def test_interleaved_timing_warms_up_past_the_slow_first_launches(sycl_device):
    side = SlowStart(sycl_device)
    timing, record = measure_against_reference(lambda: launch_ms(side.submit), NumpyReference(64, 64, 64),
                                               warmup=2, repeats=8)
    steady = side.steady_ms()
    assert timing.warmup.runs >= SLOW_LAUNCHES, timing.warmup
    assert steady / 2 < timing.median < steady * 2, (timing.median, steady, timing.warmup)
    assert record["time_ms"]["warmup"]["runs"] >= 1        # the reference's warm-up is recorded too
