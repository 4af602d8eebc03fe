"""The calibrated static model's free constants, and where they come from: the one home of these numbers.

:func:`xegemm.model.static.predict_tflops` turns a plan into predicted TFLOP/s on a product
(:data:`xegemm.library.targets.PARTS`): the DPAS peak times a compute efficiency, against the time the plan's bytes take
at the product's DRAM bandwidth.  The constants below are what that formula cannot know from the plan and the
published peaks; they were fitted by ``python -m bench.model_check --fit`` on the calibration half of
``bench/published_gemm.csv`` (the rows at even positions among the usable ones, in file order: a fixed split,
no randomness) by minimising the mean |log(predicted / published)|, a coordinate search over the grids in
:data:`GRIDS`.  The held-out half was never used to choose them; docs/benchmarks.md ("The static model against
published numbers") reports how the model does on it.  ``bench.model_check`` fails (exit status 1) when a fit
on the calibration half no longer reproduces these values, so they cannot drift silently from the data.

The data are thin: published per-kernel figures for Intel Xe GPUs are few, mostly from one kind of kernel
(sycl-tla's), several without the card or the shape stated (the CSV marks those rows "assumed").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


@dataclass(frozen=True)
class Constants:
    """The free constants of :func:`xegemm.model.static.predict_tflops` (each documented where it is used)."""

    efficiency: float = 1.0            # the best fraction of the DPAS peak a plan reaches, everything else ideal
    ridge_flops_per_byte: float = 32.0  # a sub-group's flops per loaded byte at which the loads halve the rate
    occupancy_exponent: float = 1.0    # how strongly resident threads per Xe-core (GRF mode, headroom) count
    bandwidth: float = 1.0             # the fraction of the published DRAM bandwidth a kernel streams at
    overlap: float = 2.0               # p of t = (t_compute^p + t_memory^p)^(1/p): large p = perfect overlap
    launch_us: float = 0.0             # a fixed time per launch, microseconds
    dequant: float = 1.0               # the rate left after converting a narrow B in registers (f16 DPAS)
    dequant_bf16: float = 1.0          # ... into a bf16 DPAS (the conversion sequences are longer)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


# The search grids (a constant's value is always one of its grid's points).  Bounds keep every factor in (0, 1]
# so that no prediction can exceed the product's published peak.
GRIDS: dict[str, tuple[float, ...]] = {
    "efficiency": tuple(round(0.40 + 0.02 * i, 2) for i in range(31)),          # 0.40 .. 1.00
    "ridge_flops_per_byte": (0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0),
    "occupancy_exponent": (0.0, 0.25, 0.5, 0.75, 1.0),
    "bandwidth": tuple(round(0.50 + 0.02 * i, 2) for i in range(26)),           # 0.50 .. 1.00
    "overlap": (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0),
    "launch_us": (0.0, 2.0, 5.0, 10.0, 20.0),
    "dequant": tuple(round(0.40 + 0.05 * i, 2) for i in range(13)),             # 0.40 .. 1.00
    "dequant_bf16": tuple(round(0.40 + 0.05 * i, 2) for i in range(13)),
}

# Fitted on the calibration half of bench/published_gemm.csv (see the module docstring); refit and compare with
# ``python -m bench.model_check --fit``.
CALIBRATED = Constants(efficiency=1.0, ridge_flops_per_byte=0.0, occupancy_exponent=0.25, bandwidth=1.0, overlap=8.0,
                       launch_us=5.0, dequant=0.95, dequant_bf16=0.9)
