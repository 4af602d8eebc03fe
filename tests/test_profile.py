"""Timing against a reference: interleaved rounds, re-measurement of noisy results, the record kept.

The workloads here are stand-ins whose "duration" is returned by a fake clock, so that a slow phase of the
machine can be placed exactly; the real kernels and numpy are measured this way in tests/test_pipeline.py.
"""

import pytest

from xegemm.profile import CV_LIMIT, Timing, measure_against_reference, time_interleaved


class SlowPhase:
    """A machine that is 10x slower during calls [start, stop) of all samples taken, on either side."""

    def __init__(self, start: int, stop: int):
        self.calls, self.start, self.stop = 0, start, stop

    def workload(self, cost_ms: float):
        def sample() -> float:
            slow = self.start <= self.calls < self.stop
            self.calls += 1
            return cost_ms * (10.0 if slow else 1.0)
        return sample


def test_a_slow_phase_falls_on_both_sides_alike():
    machine = SlowPhase(30, 60)                  # the second half of 60 samples
    kernel, reference = time_interleaved(machine.workload(1.0), machine.workload(2.0), warmup=0, repeats=30)
    assert len(kernel.samples_ms) == len(reference.samples_ms) == 30
    assert reference.mean / kernel.mean == pytest.approx(2.0)     # the true ratio, despite the slow phase
    assert kernel.max == 10.0 and reference.max == 20.0           # both sides saw it

    # measured one after the other, the same phase lands on one side only and the ratio is wrong
    machine = SlowPhase(30, 60)
    alone_kernel = Timing(tuple(machine.workload(1.0)() for _ in range(30)))
    alone_reference = Timing(tuple(machine.workload(2.0)() for _ in range(30)))
    assert alone_reference.mean / alone_kernel.mean != pytest.approx(2.0, rel=0.2)


def test_warmup_and_minimum_time_are_honoured():
    calls = []
    kernel, reference = time_interleaved(lambda: calls.append("k") or 1.0, lambda: calls.append("r") or 1.0,
                                         warmup=2, repeats=3, min_time_ms=5.0)
    assert calls[:4] == ["k", "r", "k", "r"] and calls == ["k", "r"] * (len(calls) // 2)
    assert len(kernel.samples_ms) == 5 and len(reference.samples_ms) == 5


class FakeReference:
    flops = 2_000_000

    def __init__(self, samples):
        self.samples = iter(samples)

    def sample(self) -> float:
        return next(self.samples)

    def record(self, timing: Timing) -> dict:
        return {"provider": "fake", "time_ms": timing.as_dict(), "gflops": self.flops / (timing.median * 1e6)}


def test_a_noisy_measurement_is_taken_again_and_flagged_if_it_stays_noisy():
    steady = FakeReference([1.0] * 10)
    timing, record = measure_against_reference(lambda: 1.0, steady, warmup=0, repeats=5)
    assert record["attempts"] == 1 and not record["high_cv"] and record["interleaved"]
    assert record["conditions"]["affinity_cpus"] >= 1

    noisy = [1.0, 9.0, 1.0, 9.0, 1.0]
    calm_second_time = FakeReference(noisy + [2.0] * 5)
    timing, record = measure_against_reference(lambda: 1.0, calm_second_time, warmup=0, repeats=5)
    assert record["attempts"] == 2 and not record["high_cv"] and record["time_ms"]["median"] == 2.0

    always_noisy = FakeReference(noisy * 2)
    timing, record = measure_against_reference(lambda: 1.0, always_noisy, warmup=0, repeats=5)
    assert record["attempts"] == 2 and record["high_cv"] and record["time_ms"]["cv"] > CV_LIMIT
