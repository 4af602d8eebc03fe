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
    # 4 rounds of 8 runs (after one untimed run) per side, alternating: 72 calls, the second half slow
    machine = SlowPhase(36, 72)
    kernel, reference = time_interleaved(machine.workload(1.0), machine.workload(2.0), warmup=0, repeats=32,
                                         rounds=4)
    assert len(kernel.samples_ms) == len(reference.samples_ms) == 32
    assert reference.mean / kernel.mean == pytest.approx(2.0)     # the true ratio, despite the slow phase
    assert kernel.max == 10.0 and reference.max == 20.0           # both sides saw it

    # measured one after the other, the same phase lands on one side only and the ratio is wrong
    machine = SlowPhase(32, 64)
    alone_kernel = Timing(tuple(machine.workload(1.0)() for _ in range(32)))
    alone_reference = Timing(tuple(machine.workload(2.0)() for _ in range(32)))
    assert alone_reference.mean / alone_kernel.mean != pytest.approx(2.0, rel=0.2)


def test_warmup_rounds_and_minimum_time_are_honoured():
    calls = []
    kernel, reference = time_interleaved(lambda: calls.append("k") or 1.0, lambda: calls.append("r") or 1.0,
                                         warmup=2, repeats=4, min_time_ms=6.0, rounds=2)
    assert calls[:4] == ["k", "r", "k", "r"]                         # warm-up: one of each, twice
    # two rounds: one untimed run, then the kernel until 2 runs and 3 ms (half of min_time_ms), the reference
    # as many runs
    assert calls[4:] == (["k"] * 4 + ["r"] * 4) * 2
    assert len(kernel.samples_ms) == 6 and len(reference.samples_ms) == 6


class FakeReference:
    """A reference whose n-th run takes ``cost(n)`` ms."""

    flops = 2_000_000

    def __init__(self, cost):
        self.cost, self.calls = cost, 0

    def sample(self) -> float:
        self.calls += 1
        return self.cost(self.calls - 1)

    def record(self, timing: Timing) -> dict:
        return {"provider": "fake", "time_ms": timing.as_dict(), "gflops": self.flops / (timing.median * 1e6)}


def test_a_noisy_measurement_is_taken_again_and_flagged_if_it_stays_noisy():
    timing, record = measure_against_reference(lambda: 1.0, FakeReference(lambda n: 1.0), warmup=0, repeats=8)
    assert record["attempts"] == 1 and not record["high_cv"] and record["interleaved"]
    assert record["conditions"]["affinity_cpus"] >= 1

    def alternating(n):
        return 1.0 if n % 2 else 9.0

    calls_per_attempt = 4 * (1 + 2)        # 4 rounds of one untimed and two timed runs
    calm_second_time = FakeReference(lambda n: alternating(n) if n < calls_per_attempt else 2.0)
    timing, record = measure_against_reference(lambda: 1.0, calm_second_time, warmup=0, repeats=8)
    assert record["attempts"] == 2 and not record["high_cv"] and record["time_ms"]["median"] == 2.0

    timing, record = measure_against_reference(lambda: 1.0, FakeReference(alternating), warmup=0, repeats=8)
    assert record["attempts"] == 2 and record["high_cv"] and record["time_ms"]["cv"] > CV_LIMIT
