"""xegemm.model.ranking: a prediction refined by the measurements of the nearest measured shapes, and a device's
model (calibrated for a GPU product it names, relative on the CPU)."""

from __future__ import annotations

import math

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
    from xegemm.runtime.devices import DeviceInfo
    from xegemm.runtime.host import host_last_level_cache_bytes

    def info(device_type: str, name: str) -> DeviceInfo:
        return DeviceInfo(filter_string=f"opencl:{device_type}:0", name=name, vendor="Intel(R) Corporation",
                          backend="opencl", device_type=device_type, driver_version="1", compute_units=2,
                          max_work_group_size=1024, sub_group_sizes=(16,), fp16=False, fp64=False,
                          global_mem_bytes=1 << 30, extensions=(), global_mem_cache_bytes=2 << 20)

    gpu = DeviceModel.of_device(info("gpu", "Intel(R) Data Center GPU Max 1550"))
    assert gpu.calibrated and gpu.describe() == "calibrated for max1550"
    assert gpu.machine.cache_bytes == 2 << 20                    # a GPU's L2, as it reports it
    cpu = DeviceModel.of_device(info("cpu", "Max 1550 (a CPU named so)"))
    assert not cpu.calibrated and cpu.machine.compute_units == 2
    # the CPU device reports one core's L2; its work-groups run on every core and share the last-level cache
    assert cpu.machine.cache_bytes == max(2 << 20, host_last_level_cache_bytes())


def _decode_plans(m: int, n: int, k: int, name: str = "llm_gptq") -> dict:
    """A shipped LLM config's planned variants at a decode shape, by (work-group tile, split K)."""
    from pathlib import Path

    from xegemm.config import load_config
    from xegemm.evaluate import plan_variants

    config = load_config(Path(__file__).resolve().parents[1] / "configs" / f"{name}.yaml")
    shape = {"problem.m": m, "problem.n": n, "problem.k": k}
    return {(pv.config.tile.workgroup, pv.plan.split_k): pv.plan
            for pv in plan_variants(config.with_overrides(shape)) if pv.plan is not None}


def test_split_k_slices_count_as_work_groups_and_a_gpu_prefers_them_for_a_skinny_shape():
    from xegemm.model.static import Machine, features, predict

    plans = _decode_plans(1, 4096, 4096)
    whole, sliced = plans[((8, 128, 128), 1)], plans[((8, 128, 128), 4)]
    # 32 tiles on 64 compute units: half a wave; four K slices each: 128 work-groups, two full waves
    assert predict(whole, Machine(64, 0)).waves == pytest.approx(0.5)
    assert predict(sliced, Machine(64, 0)).waves == pytest.approx(1.0)
    assert features(sliced, "max1550").launches == 2 and features(whole, "max1550").launches == 1
    gpu = DeviceModel(Machine(64, 0), "max1550")
    for m in (1, 8, 16):
        ranked = sorted(_decode_plans(m, 4096, 4096).items(), key=lambda kv: -gpu.predicted(kv[1]))
        assert ranked[0][0] == ((8, 128, 128), 4), (m, [key for key, _ in ranked])
    # on a 2-core CPU the tiles alone fill the cores: slicing K only adds the workspace's traffic
    cpu = DeviceModel(Machine(2, 2 << 20))
    assert cpu.predicted(whole) > cpu.predicted(sliced)


@pytest.mark.parametrize("name", ["llm", "llm_gptq"])
def test_a_gemv_shaped_tile_ranks_first_at_m_1_and_an_8_row_one_from_m_8(name):
    from xegemm.model.static import Machine

    cpu, gpu = DeviceModel(Machine(2, 2 << 20)), DeviceModel(Machine(64, 0), "max1550")
    for m, rows in ((1, 1), (8, 8), (16, 8)):
        plans = _decode_plans(m, 4096, 4096, name)
        best = max(plans, key=lambda key: cpu.predicted(plans[key]))
        assert best[0][0] == rows or (m == 16 and best[0][0] == 16), (m, best)
    # on a GPU a 1-row DPAS is taken to do 1/8 of an 8-row one's work: never ahead where M > 1 (a tie, both
    # memory-bound, keeps the sweep's order, the 8-row tiles first)
    for m in (8, 16):
        plans = _decode_plans(m, 4096, 4096, name)
        ranked = sorted(plans, key=lambda key: -gpu.predicted(plans[key]))     # stable: the sweep's order
        assert ranked[0][0][0] > 1, (m, ranked)
