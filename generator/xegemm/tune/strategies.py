"""Search strategies: a registry, Kernel Tuner style; a strategy is one :class:`Strategy` entry.

A strategy gives the Optuna sampler that proposes points (Optuna's own samplers: no hand-written ones) and,
optionally, an ``order``: points to evaluate first, in that order, before the sampler proposes any (the
``model`` strategy's ranking).  Every sampler takes the study's seed, so a seeded single-worker study is
reproducible.  Add one with :func:`register` (see docs/architecture.md, "Add a search strategy").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import optuna

from xegemm.errors import XegemmError
from xegemm.tune.model import Machine, predict
from xegemm.tune.space import Label, TuneSpace

Order = Callable[[TuneSpace, int], list[dict[str, Label]]]


@dataclass(frozen=True)
class Strategy:
    """One search strategy: ``sampler(space, seed)``; ``order(space, machine)`` (a :class:`xegemm.tune.model.Machine`) or None."""

    name: str
    summary: str
    sampler: Callable[[TuneSpace, int | None], optuna.samplers.BaseSampler]
    order: Order | None = None
    shuffled: bool = False     # every point of the sweep once, in the seed's random order, before the sampler


STRATEGIES: dict[str, Strategy] = {}


def register(strategy: Strategy) -> Strategy:
    """Add a strategy to the registry (``xegemm tune --strategy NAME`` and ``xegemm.tune.tune`` see it)."""
    STRATEGIES[strategy.name] = strategy
    return strategy


def get_strategy(name: str) -> Strategy:
    if name not in STRATEGIES:
        raise XegemmError(f"unknown strategy '{name}'; strategies: {', '.join(STRATEGIES)}")
    return STRATEGIES[name]


def model_order(space: TuneSpace, machine: Machine) -> list[dict[str, Label]]:
    """Every point, pruned ones first (recorded with their reason, never built: they cost no budget), then
    the legal ones by the static model's predicted efficiency, best first (ties: sweep order)."""
    pruned, ranked = [], []
    for index, params in enumerate(space.all_params()):
        candidate = space.candidate(params)
        if candidate.pruned:
            pruned.append(params)
        else:
            ranked.append((-predict(candidate.planned.plan, machine).score, index, params))
    return pruned + [params for _, _, params in sorted(ranked, key=lambda item: item[:2])]


# exhaustive and random enqueue the sweep's points in a seeded random order: a sampler over the product of a
# section axis's field parameters (xegemm.tune.space) would also propose combinations the sweep does not have
register(Strategy("exhaustive", "every point once, in a seeded random order (enqueued; Optuna RandomSampler "
                                "beneath)", lambda space, seed: optuna.samplers.RandomSampler(seed=seed),
                  shuffled=True))
register(Strategy("random", "uniform random points without repetition (a seeded random order, cut by the "
                            "budget), as CLBlast's random fraction",
                  lambda space, seed: optuna.samplers.RandomSampler(seed=seed), shuffled=True))
register(Strategy("tpe", "Tree-structured Parzen Estimator (Optuna TPESampler, multivariate)",
                  lambda space, seed: optuna.samplers.TPESampler(seed=seed, multivariate=True,
                                                                 n_startup_trials=5)))
register(Strategy("model", "the static model's ranking first (xegemm.tune.model), then random points",
                  lambda space, seed: optuna.samplers.RandomSampler(seed=seed), order=model_order))
