"""A shape's variants ranked by the static model, refined by what was measured: how the call API picks a kernel
for a shape nobody measured (its ``model-ranked`` rule, xegemm.api.dispatch).

:class:`DeviceModel` is what the model can say about one device.  On a GPU whose target has a product in
:data:`xegemm.library.targets.PARTS` it is the calibrated speed (:func:`xegemm.model.static.predict_tflops`, in
GFLOP/s); on the CPU device, whose speed the GPU calibration does not describe, it is the uncalibrated factors'
product (:func:`xegemm.model.static.predict`'s score on the device's compute units and cache): a relative
speed, good for an order and nothing else.

:func:`estimate` turns a prediction at the call's shape into an estimate with the measurements of the loaded
results (a tune directory's best.json: each kernel's GFLOP/s at its own shape).  A kernel measured somewhere is
scaled by its measured / predicted at its measured shape nearest to the call's (distance: the sum of
``|log|`` of the ratios of M, N, K and batch), so the model supplies only the change from that shape to this one;
a kernel measured nowhere keeps its prediction on a calibrated GPU, and on a relative device takes the geometric
mean of the measured kernels' measured / predicted (each at its nearest measured shape), which puts relative
scores and GFLOP/s on one scale.  With no measurement at all, the model's order alone decides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xegemm.config.shapes import Shape
from xegemm.library.targets import part_for_device
from xegemm.model.static import Machine, predict, predict_tflops
from xegemm.plan.planner import Plan


@dataclass(frozen=True)
class DeviceModel:
    """The model of one device: ``machine`` (its compute units and cache) and ``part``, the product of
    :data:`~xegemm.library.targets.PARTS` the calibrated model describes (None: a CPU, or a GPU the calibration
    has no product for; the relative model then)."""

    machine: Machine
    part: str | None = None

    @classmethod
    def of_device(cls, info) -> "DeviceModel":
        """A device (:class:`xegemm.runtime.DeviceInfo`): a GPU's product by its name, never a CPU's."""
        gpu = str(info.device_type).lower() == "gpu"
        return cls(Machine.of_device(info), part_for_device(info.name) if gpu else None)

    @property
    def calibrated(self) -> bool:
        return self.part is not None

    def predicted(self, plan: Plan) -> float:
        """GFLOP/s predicted for ``plan`` (calibrated), or its relative speed (the factors' product)."""
        if self.part is not None:
            return predict_tflops(plan, self.part).tflops * 1e3
        return predict(plan, self.machine).score

    def describe(self) -> str:
        return f"calibrated for {self.part}" if self.part else "the static model's relative ranking on this device"


@dataclass(frozen=True)
class Measurement:
    """One kernel measured at one shape: its identity (the name of its plan), the shape, the GFLOP/s measured
    and the model's prediction there (same units as :meth:`DeviceModel.predicted`)."""

    kernel: str
    shape: Shape
    gflops: float
    predicted: float

    @property
    def ratio(self) -> float:
        return self.gflops / self.predicted


@dataclass(frozen=True)
class Estimate:
    """A kernel's estimated speed at a shape: the prediction there times ``scale`` (measured / predicted),
    and what the scale rests on ("" when nothing was measured)."""

    predicted: float
    scale: float = 1.0
    basis: str = ""

    @property
    def value(self) -> float:
        return self.predicted * self.scale


def distance(a: Shape, b: Shape) -> float:
    """How far apart two shapes are: the sum of |log| of the ratios of M, N, K and batch."""
    return sum(abs(math.log(x / y)) for x, y in ((a.m, b.m), (a.n, b.n), (a.k, b.k), (a.batch, b.batch)))


def nearest(measurements: list[Measurement], shape: Shape) -> dict[str, Measurement]:
    """Each kernel's measurement at its measured shape nearest to ``shape`` (ties: the smaller shape)."""
    out: dict[str, Measurement] = {}
    for m in sorted(measurements, key=lambda m: (distance(m.shape, shape), m.shape)):
        out.setdefault(m.kernel, m)
    return out


def estimate(kernel: str, predicted: float, shape: Shape, measurements: list[Measurement],
             calibrated: bool) -> Estimate:
    """``kernel``'s estimate at ``shape`` from its prediction there and the measurements (module docstring)."""
    usable = [m for m in measurements if m.predicted > 0 and m.gflops > 0]
    near = nearest(usable, shape)
    if kernel in near:
        m = near[kernel]
        return Estimate(predicted, m.ratio, f"scaled by its measured/predicted at {m.shape.label}")
    if calibrated or not near:
        return Estimate(predicted)
    scale = math.exp(sum(math.log(m.ratio) for m in near.values()) / len(near))
    shapes = ", ".join(sorted({m.shape.label for m in near.values()}))
    return Estimate(predicted, scale, f"scaled by the measured kernels' measured/predicted at {shapes}")
