"""Autotuning: ``xegemm tune`` and :func:`tune`, over a config's search space with Optuna.

The package: :mod:`~xegemm.tune.shapes` (the shapes list), :mod:`~xegemm.tune.space` (a sweep as Optuna
parameters; pruning before any build), :mod:`~xegemm.tune.model` (the static model), :mod:`~xegemm.tune.strategies`
(the strategy registry), :mod:`~xegemm.tune.study` (Optuna's storage and the claim table), :mod:`~xegemm.tune.cache`
(the measurement cache), :mod:`~xegemm.tune.objective` (device and ahead-of-time objectives),
:mod:`~xegemm.tune.runner` (the loop), :mod:`~xegemm.tune.export` (best.yaml, best.json, trials.csv) and
:mod:`~xegemm.tune.api` (:func:`tune`).
"""

from xegemm.tune.api import TuneResult, tune
from xegemm.tune.export import export
from xegemm.tune.shapes import Shape, parse_shapes
from xegemm.tune.strategies import STRATEGIES, Strategy, register

__all__ = ["STRATEGIES", "Shape", "Strategy", "TuneResult", "export", "parse_shapes", "register", "tune"]
