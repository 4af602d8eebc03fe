"""The static performance model: what a plan's speed is predicted to be, from the plan alone (nothing is built or
run), and nothing else: no Optuna, no device, no evaluator.  The tuner's ``model`` strategy ranks a sweep by it,
``--target`` reports its predicted TFLOP/s, and the call API ranks the variants of a shape nobody measured by it.

- :mod:`~xegemm.model.static`: the factors (intensity, occupancy, waves, edges, prefetch, locality), ``predict``,
  and the calibrated speed ``features`` / ``throughput`` / ``predict_tflops`` on a product;
- :mod:`~xegemm.model.calibration`: the calibrated model's free constants and their provenance;
- :mod:`~xegemm.model.ranking`: a shape's variants ranked by predicted speed, refined by what was measured at
  the nearest measured shapes (the call API's ``model-ranked`` rule).
"""
