"""xegemm.model.ranking: a prediction refined by the measurements of the nearest measured shapes, and a device's
model (calibrated for a GPU product it names, relative on the CPU)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from xegemm.config.shapes import Shape
from xegemm.library.targets import part_for_device
from xegemm.model.ranking import DeviceModel, Measurement, distance, estimate, nearest

A, B = "kernel_a", "kernel_b"
CALL = Shape(4, 256, 300)


def test_distance_is_symmetric_and_counts_every_dimension():
    assert distance(Shape(8, 256, 256), Shape(8, 256, 256)) == 0
    assert distance(Shape(1, 64, 64), Shape(2, 64, 64)) == pytest.approx(math.log(2))
    assert distance(Shape(1, 64, 64), Shape(2, 128, 32)) == distance(Shape(2, 128, 32), Shape(1, 64, 64))
    assert distance(Shape(1, 64, 64, 2), Shape(1, 64, 64)) == pytest.approx(math.log(2))


def test_a_measured_kernel_is_scaled_by_its_measured_over_predicted_at_its_nearest_measured_shape():
    near, far = Measurement(A, Shape(8, 256, 256), 30.0, 10.0), Measurement(A, Shape(512, 256, 256), 5.0, 10.0)
    assert nearest([far, near], CALL) == {A: near}
    e = estimate(A, 2.0, CALL, [far, near], calibrated=False)
    assert e.scale == pytest.approx(3.0) and e.value == pytest.approx(6.0)
    assert e.basis == "scaled by its measured/predicted at 8x256x256"


def test_an_unmeasured_kernel_keeps_a_calibrated_prediction_and_scales_a_relative_one_by_the_others():
    measured = [Measurement(A, Shape(8, 256, 256), 40.0, 10.0), Measurement(B, Shape(8, 256, 256), 10.0, 10.0)]
    assert estimate("other", 2.0, CALL, measured, calibrated=True).scale == 1.0
    relative = estimate("other", 2.0, CALL, measured, calibrated=False)
    assert relative.scale == pytest.approx(2.0)            # the geometric mean of 4 and 1
    assert "measured kernels' measured/predicted at 8x256x256" in relative.basis
    alone = estimate("other", 2.0, CALL, [], calibrated=False)
    assert (alone.scale, alone.basis, alone.value) == (1.0, "", 2.0)


def test_a_measurement_without_a_positive_prediction_or_speed_is_left_out():
    bad = [Measurement(A, Shape(8, 256, 256), 40.0, 0.0), Measurement(A, Shape(8, 256, 256), 0.0, 3.0)]
    assert estimate(A, 2.0, CALL, bad, calibrated=False).scale == 1.0


def test_a_gpu_is_calibrated_for_the_product_its_name_names_and_a_cpu_never():
    assert part_for_device("Intel(R) Data Center GPU Max 1550") == "max1550"
    assert part_for_device("Intel(R) Arc(TM) B580 Graphics") == "b580"
    assert part_for_device("Intel(R) Arc(TM) Pro B60 Graphics") == "b60"
    assert part_for_device("Intel(R) Xeon(R) Processor") is None
    info = dict(compute_units=2, global_mem_cache_bytes=2 << 20)
    gpu = DeviceModel.of_device(SimpleNamespace(device_type="gpu", name="Intel(R) Data Center GPU Max 1550", **info))
    assert gpu.calibrated and gpu.describe() == "calibrated for max1550"
    cpu = DeviceModel.of_device(SimpleNamespace(device_type="cpu", name="Max 1550 (a CPU named so)", **info))
    assert not cpu.calibrated and cpu.machine.compute_units == 2
