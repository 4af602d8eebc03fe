"""Timing: device event profiling for kernels, wall clock for the numpy reference measured in the same run.

Like the CUTLASS profiler and Kernel Tuner: warm-up launches first, then timed launches until both a count
and a minimum measured time are reached; each launch is timed by its own profiling event (start to end on
the device), and the statistics keep min, median, max, mean and the coefficient of variation.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Timing:
    """Statistics over repeated runs, in milliseconds."""

    samples_ms: tuple[float, ...]

    @property
    def min(self) -> float:
        return min(self.samples_ms)

    @property
    def median(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def max(self) -> float:
        return max(self.samples_ms)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples_ms)

    @property
    def cv(self) -> float:
        """Coefficient of variation (stdev / mean); 0 for a single sample."""
        if len(self.samples_ms) < 2 or self.mean == 0:
            return 0.0
        return statistics.stdev(self.samples_ms) / self.mean

    def as_dict(self) -> dict:
        return {"min": self.min, "median": self.median, "max": self.max, "mean": self.mean, "cv": self.cv,
                "runs": len(self.samples_ms)}


def gemm_flops(m: int, n: int, k: int, batch: int = 1) -> int:
    """Floating-point (or integer) operations of a GEMM: 2 M N K per batch."""
    return 2 * m * n * k * batch


def time_kernel(submit, warmup: int, repeats: int, min_time_ms: float = 0.0, max_runs: int = 100_000) -> Timing:
    """Time ``submit()`` (which returns a profiling-enabled dpctl event) on the device.

    ``warmup`` untimed launches, then at least ``repeats`` timed ones, continuing until ``min_time_ms`` of
    device time has been measured (bounded by ``max_runs``).
    """
    for _ in range(warmup):
        submit().wait()
    samples: list[float] = []
    while len(samples) < max(1, repeats) or (sum(samples) < min_time_ms and len(samples) < max_runs):
        event = submit()
        event.wait()
        samples.append((event.profiling_info_end - event.profiling_info_start) * 1e-6)
    return Timing(tuple(samples))


def time_numpy_reference(m: int, n: int, k: int, batch: int = 1, repeats: int = 5, seed: int = 0) -> dict:
    """Wall-clock time of numpy's float32 matmul of the same problem, with which BLAS build it ran."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((batch, m, k), dtype=np.float32)
    b = rng.standard_normal((batch, k, n), dtype=np.float32)
    np.matmul(a, b)  # warm-up
    samples = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        np.matmul(a, b)
        samples.append((time.perf_counter() - t0) * 1e3)
    timing = Timing(tuple(samples))
    return {"provider": "numpy", "dtype": "f32", "numpy": np.__version__,
            "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"),
            "time_ms": timing.as_dict(), "gflops": gemm_flops(m, n, k, batch) / (timing.median * 1e6)}
