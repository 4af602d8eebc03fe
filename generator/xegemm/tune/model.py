"""The static model as the tuner uses it: its home is :mod:`xegemm.model.static` (below the call API, which ranks
unmeasured shapes by it, and free of Optuna); the tuner's modules import these names from here."""

from xegemm.model.static import (MEMORY_RIDGE_FLOPS_PER_BYTE, RIDGE_FLOPS_PER_BYTE, Features, Machine, Prediction,
                                 Throughput, features, memory_traffic, predict, predict_tflops, throughput)

__all__ = ["MEMORY_RIDGE_FLOPS_PER_BYTE", "RIDGE_FLOPS_PER_BYTE", "Features", "Machine", "Prediction", "Throughput",
           "features", "memory_traffic", "predict", "predict_tflops", "throughput"]
