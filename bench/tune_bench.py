"""Tuning benchmarks (``make bench-tune``; measured, never asserted) on ``bench/tune_demo.yaml`` (100 points
at 1024^3, 76 of them legal):

- throughput: the whole space explored exhaustively with a cold measurement cache, then again warm (a new
  study in another directory: every trial a cache hit); and a budget of 20 points (``model`` order, so
  both runs evaluate the same points) cold with ``--jobs 1`` and ``--jobs 2``;
- convergence: how many evaluated trials random, TPE (seeds 0-4) and model need to reach within 5% of the
  exhaustive best.  They run on the warm cache, i.e. on the exhaustive run's measurements (Kernel Tuner's
  "simulation mode"): the trajectories are those the strategies would follow on this machine.

Each figure is stored in the benchmark JSON's ``extra_info`` and printed (``make bench-tune`` runs with -s).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest
from optuna.trial import TrialState

from xegemm.tune import tune
from xegemm.tune.export import owned_trials
from xegemm.tune.study import open_storage

CONFIG = Path(__file__).resolve().parent / "tune_demo.yaml"
SHAPE = "1024x1024x1024"
WITHIN = 0.05
SEEDS = range(5)


def _timed(**kwargs) -> tuple[float, object]:
    t0 = time.perf_counter()
    result = tune(CONFIG, progress=False, **kwargs)
    return time.perf_counter() - t0, result


def _trajectory(result) -> list[float]:
    """The objective of each evaluated (not pruned) trial, in the order they ran."""
    storage = open_storage(f"sqlite:///{result.out / 'study.db'}")
    trials = owned_trials(result.studies[SHAPE], storage)
    return [t.value for t in sorted(trials, key=lambda t: t.number) if t.state == TrialState.COMPLETE]


def _trials_to_reach(values: list[float], target: float) -> int | None:
    best = 0.0
    for count, value in enumerate(values, 1):
        best = max(best, value)
        if best >= target:
            return count
    return None


@pytest.fixture(scope="module")
def exhaustive(tmp_path_factory):
    """The exhaustive cold run (its cache then serves the warm and convergence runs)."""
    root = tmp_path_factory.mktemp("tune")
    cache = root / "cache.db"
    seconds, result = _timed(strategy="exhaustive", seed=0, out=root / "cold", cache=cache)
    return {"root": root, "cache": cache, "seconds": seconds, "result": result}


def test_exhaustive_cold_and_warm(exhaustive, benchmark):
    tally = exhaustive["result"].tallies[SHAPE]
    warm_s, warm = benchmark.pedantic(lambda: _timed(strategy="exhaustive", seed=0, out=exhaustive["root"] / "warm",
                                                     cache=exhaustive["cache"]), rounds=1, iterations=1)
    figures = {"points": tally.evaluated + tally.pruned, "evaluated": tally.evaluated, "pruned": tally.pruned,
               "cold_s": round(exhaustive["seconds"], 1),
               "cold_trials_per_min": round(60 * tally.evaluated / exhaustive["seconds"], 1),
               "warm_s": round(warm_s, 1), "warm_cache_hits": warm.tallies[SHAPE].cached,
               "best_gflops": round(max(_trajectory(exhaustive["result"])), 2)}
    print(f"\n{figures}")
    benchmark.extra_info.update(figures)


@pytest.mark.parametrize("jobs", [1, 2])
def test_cold_throughput_by_jobs(jobs, tmp_path, benchmark):
    seconds, result = benchmark.pedantic(lambda: _timed(strategy="model", budget=20, jobs=jobs, out=tmp_path / "t",
                                                        cache=tmp_path / "cache.db"), rounds=1, iterations=1)
    evaluated = result.tallies[SHAPE].evaluated
    figures = {"jobs": jobs, "evaluated": evaluated, "seconds": round(seconds, 1),
               "trials_per_min": round(60 * evaluated / seconds, 1)}
    print(f"\n{figures}")
    benchmark.extra_info.update(figures)


@pytest.mark.parametrize("strategy", ["random", "tpe", "model"])
def test_convergence(strategy, exhaustive, benchmark):
    best = max(_trajectory(exhaustive["result"]))
    seeds = [0] if strategy == "model" else SEEDS

    def runs():
        return [_timed(strategy=strategy, seed=seed, out=exhaustive["root"] / f"{strategy}{seed}",
                       cache=exhaustive["cache"])[1] for seed in seeds]

    results = benchmark.pedantic(runs, rounds=1, iterations=1)
    needed = [_trials_to_reach(_trajectory(r), (1 - WITHIN) * best) for r in results]
    legal = exhaustive["result"].tallies[SHAPE].evaluated
    figures = {"strategy": strategy, "trials_to_within_5pct": needed, "median": statistics.median(needed),
               "median_share_of_legal": round(statistics.median(needed) / legal, 3), "legal_points": legal}
    print(f"\n{figures}")
    benchmark.extra_info.update(figures)
