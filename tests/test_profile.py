"""Timing against a reference: interleaved rounds, re-measurement of noisy results, the record kept.

The workloads here are stand-ins whose "duration" is returned by a fake clock, so that a slow phase of the
machine can be placed exactly; the real kernels and numpy are measured this way in tests/test_pipeline.py.
"""

import time

import pytest

from xegemm.evaluate.timing import (CV_LIMIT, REWARM_MAX_MS, ROUND_MIN_MS, WARMUP_MAX_MS, WARMUP_MAX_RUNS, WARMUP_MIN_MS,
                             Timing, Warmup, _timed_runs, measure_against_reference, rewarm, time_interleaved,
                             time_rounds, warm_up)


@pytest.fixture(autouse=True)
def default_pace(monkeypatch):
    """The method at its default floors (the suite's conftest sets shorter ones for everything else)."""
    monkeypatch.delenv("XEGEMM_PACE", raising=False)


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


class Counter:
    """Constant-cost sides that count their calls (a dry run tells where a measurement's phases fall)."""

    def __init__(self):
        self.calls = 0

    def workload(self, cost_ms: float):
        def sample() -> float:
            self.calls += 1
            return cost_ms
        return sample


def test_a_slow_phase_falls_on_both_sides_alike():
    dry = Counter()
    kernel, reference = time_interleaved(dry.workload(1.0), dry.workload(2.0), warmup=0, repeats=32, rounds=4)
    warm = kernel.warmup.runs + reference.warmup.runs
    # the second half of the timed rounds slow, after both warm-ups
    machine = SlowPhase(warm + 2 * (dry.calls - warm) // 4, 10**9)   # from the third of 4 rounds on
    kernel, reference = time_interleaved(machine.workload(1.0), machine.workload(2.0), warmup=0, repeats=32,
                                         rounds=4)
    assert reference.median / kernel.median == pytest.approx(2.0)  # the true ratio, despite the slow phase
    assert kernel.max == 10.0 and reference.max == 20.0             # both sides saw it

    # measured one after the other, the same phase lands on one side only and the ratio is wrong
    machine = SlowPhase(32, 64)
    alone_kernel = Timing(tuple(machine.workload(1.0)() for _ in range(32)))
    alone_reference = Timing(tuple(machine.workload(2.0)() for _ in range(32)))
    assert alone_reference.mean / alone_kernel.mean != pytest.approx(2.0, rel=0.2)


def test_warm_up_then_rounds_with_a_re_warm_and_a_minimum_time_each():
    calls = []
    kernel, reference = time_interleaved(lambda: calls.append("k") or 1.0, lambda: calls.append("r") or 2.0,
                                         warmup=2, repeats=4, min_time_ms=6.0, rounds=2)
    # warm-up: the kernel, then the reference, each for WARMUP_MIN_MS (constant costs agree at once)
    k_warm, r_warm = int(WARMUP_MIN_MS / 1.0), int(WARMUP_MIN_MS / 2.0)
    assert calls[:k_warm + r_warm] == ["k"] * k_warm + ["r"] * r_warm
    assert kernel.warmup == Warmup(k_warm, WARMUP_MIN_MS, True, 1.0, 2)
    assert reference.warmup.runs == r_warm and reference.warmup.settled
    # two rounds: one re-warm run, the kernel for ROUND_MIN_MS (more than min_time_ms / 2 and 2 runs), one
    # re-warm run of the reference, then the reference until it has spent as long as the kernel's round
    k_round, r_round = int(ROUND_MIN_MS / 1.0), int(ROUND_MIN_MS / 2.0)
    assert calls[k_warm + r_warm:] == (["k"] * (1 + k_round) + ["r"] * (1 + r_round)) * 2
    assert len(kernel.samples_ms) == 2 * k_round and len(reference.samples_ms) == 2 * r_round
    assert kernel.as_dict()["warmup"] == {"runs": k_warm, "ms": WARMUP_MIN_MS, "settled": True, "steady_ms": 1.0,
                                          "round_runs": 2}


def slow_start(fast_ms: float, first_ms: float, slow_runs: int = 10**9):
    """A side whose runs start at ``first_ms`` and get faster, the excess over ``fast_ms`` shrinking by a fifth
    each run (like a runtime's threads, pages and caches warming up), then exactly ``fast_ms`` after
    ``slow_runs`` runs."""
    calls = [0]

    def sample() -> float:
        n = calls[0]
        calls[0] += 1
        return fast_ms + (first_ms - fast_ms) * 0.8 ** n if n < slow_runs else fast_ms
    return sample


def test_warm_up_lasts_until_the_slow_start_is_over_whatever_count_is_asked():
    # the runs still more than 10 % slower than the fast ones: 0.8 ** n * 19 > 0.1, n < 24
    slow = next(n for n in range(100) if 0.8 ** n * 19.0 <= 0.1)
    for asked in (0, 2, 10):
        warm = warm_up(slow_start(1.0, 20.0), min_runs=asked)
        assert warm.runs >= slow and warm.settled and warm.steady_ms <= 1.05
    assert warm_up(slow_start(1.0, 20.0), min_runs=500).runs >= 500      # the count is a minimum


def sawtooth(scale: float):
    """Never steady: 1 to 3 (times ``scale``) and back to 1, every 40 runs."""
    calls = [0]

    def sample() -> float:
        calls[0] += 1
        return scale * (1.0 + 2.0 * (calls[0] % 40) / 40)
    return sample


def slower_and_slower(scale: float):
    """Never steady: each run takes longer than the one before (``scale`` times the run's number)."""
    calls = [0]

    def sample() -> float:
        calls[0] += 1
        return scale * calls[0]
    return sample


def test_warm_up_that_never_settles_stops_at_its_bound_and_says_so():
    warm = warm_up(sawtooth(1.0))
    assert not warm.settled and WARMUP_MAX_MS <= warm.ms < WARMUP_MAX_MS + 100
    warm = warm_up(slower_and_slower(1e-6))
    assert not warm.settled and warm.runs == WARMUP_MAX_RUNS


def test_warm_up_of_a_kernel_of_microseconds_is_bounded_by_the_wall_clock():
    """Runs whose measured time is tiny (most of a launch is outside the device) still stop warming once the
    wall clock has passed the floor, not after the floor's worth of their measured time."""
    def launch() -> float:
        time.sleep(0.001)           # a millisecond of submission and waiting
        return 0.001                # of which a microsecond on the device
    start = time.perf_counter()
    warm = warm_up(launch)
    took_ms = (time.perf_counter() - start) * 1e3
    assert warm.settled and warm.ms < 1.0 and WARMUP_MIN_MS <= took_ms < 10 * WARMUP_MIN_MS
    assert len(_timed_runs(launch, 2, 20.0, 100_000)) < 100      # 20 ms: about 20 launches, not 20,000


def test_rewarm_runs_until_a_run_is_back_at_the_steady_level():
    assert rewarm(slow_start(1.0, 9.0, slow_runs=5), steady_ms=1.0) == 6
    assert rewarm(lambda: 1.04, steady_ms=1.0) == 1
    assert rewarm(lambda: 10.0, steady_ms=1.0) == int(REWARM_MAX_MS / 10.0)      # bounded


def test_rounds_of_several_sides_each_warmed_up():
    sides = {"a": slow_start(1.0, 10.0, slow_runs=30), "b": slow_start(2.0, 4.0, slow_runs=3)}
    timings = time_rounds(sides, rounds=3, runs=2, min_round_ms=4.0)
    assert timings["a"].warmup.runs >= 30 and timings["b"].warmup.runs >= 3
    assert timings["a"].median == 1.0 and timings["b"].median == 2.0
    assert len(timings["a"].samples_ms) == 3 * 4 and len(timings["b"].samples_ms) == 3 * 2


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

    dry = FakeReference(alternating)       # the calls of one attempt: a dry run of the same measurement
    time_interleaved(lambda: 1.0, dry.sample, warmup=0, repeats=8)
    calm_second_time = FakeReference(lambda n: alternating(n) if n < dry.calls else 2.0)
    timing, record = measure_against_reference(lambda: 1.0, calm_second_time, warmup=0, repeats=8)
    assert record["attempts"] == 2 and not record["high_cv"] and record["time_ms"]["median"] == 2.0

    timing, record = measure_against_reference(lambda: 1.0, FakeReference(alternating), warmup=0, repeats=8)
    assert record["attempts"] == 2 and record["high_cv"] and record["time_ms"]["cv"] > CV_LIMIT


def test_conditions_record_the_cpu_governor_where_readable_and_the_timing_method(monkeypatch, tmp_path):
    from xegemm.evaluate import timing
    from xegemm.runtime import host
    governor = tmp_path / "scaling_governor"
    governor.write_text("performance\n")
    monkeypatch.setattr(host, "GOVERNOR", str(governor))
    assert timing.conditions()["cpu_governor"] == "performance"
    monkeypatch.setattr(host, "GOVERNOR", str(tmp_path / "absent"))     # a VM without cpufreq, as here
    recorded = timing.conditions()
    assert recorded["cpu_governor"] is None and recorded["timing_method"] == timing.TIMING_METHOD


def test_a_pace_sets_the_floors_and_a_measurement_taken_at_it_says_so(monkeypatch):
    """XEGEMM_PACE replaces the warm-up, round and pause floors for a process; a measurement at another pace than
    the default records it in its conditions, and a malformed one is one clear error."""
    from xegemm.errors import XegemmError
    from xegemm.evaluate.timing import Pace, conditions, current_pace
    assert current_pace() == Pace() and Pace().is_default and "timing_pace" not in conditions(pace=Pace())
    monkeypatch.setenv("XEGEMM_PACE", "warmup_ms=5, round_ms=1,settle_ms=0")
    pace = current_pace()
    assert (pace.warmup_ms, pace.round_ms, pace.settle_ms, pace.rewarm_ms) == (5.0, 1.0, 0.0, 5.0)
    counter = Counter()
    warm = warm_up(counter.workload(1.0))
    assert warm.settled and 5.0 <= warm.ms <= 10.0 and counter.calls == warm.runs   # 5 ms, not WARMUP_MIN_MS
    assert rewarm(lambda: 10.0, steady_ms=1.0) == 1               # capped at the pace's warm-up, not REWARM_MAX_MS
    kernel, record = measure_against_reference(Counter().workload(1.0), FakeReference(lambda n: 2.0), warmup=0,
                                               repeats=4)
    assert record["conditions"]["timing_pace"] == "warmup_ms=5,round_ms=1,settle_ms=0"
    assert len(kernel.samples_ms) == 4                           # 4 rounds of 1 run: each round's 1 ms floor met
    for bad in ("warmup_ms=abc", "rounds=3", "settle_ms=-1"):
        monkeypatch.setenv("XEGEMM_PACE", bad)
        with pytest.raises(XegemmError, match="XEGEMM_PACE"):
            current_pace()


def test_measurements_at_another_pace_are_cached_apart(monkeypatch):
    from xegemm.config import config_from_text
    from xegemm.tune.cache import measurement_key
    config = config_from_text("problem: {m: 64, n: 64, k: 64}\n")
    key = measurement_key("src", "", "dev", "1", "portable", config)
    monkeypatch.setenv("XEGEMM_PACE", "warmup_ms=10")
    assert measurement_key("src", "", "dev", "1", "portable", config) != key
