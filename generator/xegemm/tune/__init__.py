"""Autotuning: ``xegemm tune`` and :func:`tune`, over a config's search space with Optuna.

The package: :mod:`~xegemm.tune.options` (:class:`TuneOptions`, every option of a tune in one record),
:mod:`~xegemm.tune.space` (a sweep as Optuna parameters; pruning before any build), :mod:`~xegemm.tune.model`
(the static model), :mod:`~xegemm.tune.strategies` (the strategy registry), :mod:`~xegemm.tune.study` (Optuna's
storage and the claim table), :mod:`~xegemm.tune.cache` (the measurement cache), :mod:`~xegemm.tune.objective`
(device and ahead-of-time objectives), :mod:`~xegemm.tune.runner` (the loop), :mod:`~xegemm.tune.export`
(best.yaml, best.json, trials.csv) and :mod:`~xegemm.tune.api` (:func:`tune`).  The shapes list is
:mod:`xegemm.config.shapes`.

The names below are looked up on first use (PEP 562), as in ``xegemm/__init__.py``: importing
``xegemm.tune.model`` (the static model of :mod:`xegemm.model`) or ``xegemm.tune.strategies`` alone does not load Optuna's storage, SQLAlchemy or
matplotlib.  (The export of a study is :func:`xegemm.tune.export.export`: the name ``export`` here is its
module.)
"""

import importlib

# name -> (the module that holds it, the attribute)
_LAZY = {"TuneResult": ("xegemm.tune.api", "TuneResult"), "tune": ("xegemm.tune.api", "tune"),
         "TuneOptions": ("xegemm.tune.options", "TuneOptions"),
         "Shape": ("xegemm.config.shapes", "Shape"),
         "parse_shapes": ("xegemm.config.shapes", "parse_shapes"),
         "STRATEGIES": ("xegemm.tune.strategies", "STRATEGIES"), "Strategy": ("xegemm.tune.strategies", "Strategy"),
         "register": ("xegemm.tune.strategies", "register")}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'xegemm.tune' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_LAZY])
