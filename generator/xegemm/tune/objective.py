"""What a trial measures: a candidate evaluated on a device (GFLOP/s) or ahead of time for a target (a score).

Both go through :mod:`xegemm.evaluate` and the measurement cache (:mod:`xegemm.tune.cache`):

- :class:`DeviceObjective`: the isolated worker builder ``run`` uses (build, verify, time in a worker
  process with time limits), sharing the device gate with every other worker; the value is GFLOP/s (0 for
  a kernel that fails to build or verify, errs or times out).
- :class:`AotObjective` (``--target pvc|dg2``, no device): ocloc builds the kernel and its machine code is
  checked against the plan; the value is the calibrated static model's predicted TFLOP/s on the target's
  product (:func:`xegemm.tune.model.predict_tflops`; pvc: one stack of a Max 1550) for a spill-free kernel
  whose machine code matches the plan, minus the spilled bytes for one that spills, and 0 for one that fails.
  A target without a product in :data:`xegemm.library.targets.PARTS` (dg2: no published peak recorded) keeps the
  uncalibrated score, a unitless product of the model's factors.
"""

from __future__ import annotations

from pathlib import Path

from xegemm.evaluate import Evaluation, Evaluator, params_of
from xegemm.library.parts import BuildFigures
from xegemm.aot.toolchain import compiler_version
from xegemm.evaluate.aot import aot_evaluator
from xegemm.evaluate.device import device_build_options
from xegemm.evaluate.gate import DeviceGate
from xegemm.evaluate.isolated import TimeLimits, isolated_device_evaluator
from xegemm.lowering import Lowering
from xegemm.runtime.devices import DeviceInfo
from xegemm.tune.cache import MeasurementCache, measurement_key
from xegemm.library.targets import get_target
from xegemm.tune.model import Machine, predict, predict_tflops
from xegemm.tune.space import Candidate


class _CachedObjective:
    """Evaluates candidates through an evaluator, consulting the cache first (unless ``retime``)."""

    evaluator: Evaluator

    def __init__(self, cache: MeasurementCache | None, retime: bool):
        self.cache = cache
        self.retime = retime

    def cache_key(self, candidate: Candidate) -> str:
        raise NotImplementedError

    def evaluate(self, candidate: Candidate) -> Evaluation:
        """The candidate's evaluation (``cached``: True when it came from the cache)."""
        key = self.cache_key(candidate) if self.cache is not None else None
        if key is not None and not self.retime:
            hit = self.cache.get(key)
            if hit is not None:
                result = Evaluation.from_row(hit)
                result.cached = True
                return result
        result = self.evaluator.evaluate(candidate.planned, candidate.source)
        if key is not None:
            self.cache.put(key, result.to_row())
        result.cached = False
        return result

    def close(self) -> None:
        """Release what the evaluator holds (worker processes)."""


class DeviceObjective(_CachedObjective):
    """GFLOP/s on a SYCL device; one worker process per objective (``--jobs`` makes several)."""

    def __init__(self, info: DeviceInfo, lowering: Lowering, log_dir: Path, limits: TimeLimits,
                 cache: MeasurementCache | None, retime: bool = False, spirv: bool | None = None):
        super().__init__(cache, retime)
        self.info = info
        self.lowering = lowering
        gate = DeviceGate.for_device(info.name, info.driver_version, info.filter_string,
                                     cpu=info.device_type == "cpu")
        self.evaluator = isolated_device_evaluator(info.filter_string, lowering, log_dir=log_dir, limits=limits,
                                                   gate=gate, spirv=spirv)

    def cache_key(self, candidate: Candidate) -> str:
        config = candidate.planned.config
        return measurement_key(candidate.source, device_build_options(self.lowering, config), self.info.name,
                               self.info.driver_version, self.lowering.name, config)

    @staticmethod
    def value(result: Evaluation) -> float:
        return float(result.gflops) if result.status == "ok" and result.gflops else 0.0

    def close(self) -> None:
        self.evaluator.builder.close()


class AotObjective(_CachedObjective):
    """The static score of an ahead-of-time build for ``target`` (ocloc; no device): predicted TFLOP/s on the
    target's product, or the uncalibrated model score for a target without one."""

    def __init__(self, target: str, lowering: Lowering, out_dir: Path, cache: MeasurementCache | None,
                 retime: bool = False, compiler: str | None = None):
        super().__init__(cache, retime)
        self.target = target
        self.lowering = lowering
        self.evaluator = aot_evaluator(lowering, target, out_dir, compiler=compiler)
        self.compiler_key = compiler_version(self.evaluator.builder.compiler).key   # each compiler its own scores

    def cache_key(self, candidate: Candidate) -> str:
        config = candidate.planned.config
        return measurement_key(candidate.source, f"grf={config.target.grf}", f"ocloc:{self.target}:{self.compiler_key}",
                               self.lowering.capabilities_name or "", self.lowering.name, config)

    @staticmethod
    def value(result: Evaluation) -> float:
        if result.status != "ok":
            return 0.0
        spill = BuildFigures.from_extra(result.extra).stat("spill_bytes")
        return -float(spill) if spill else float(result.extra["score"])

    def evaluate(self, candidate: Candidate) -> Evaluation:
        result = super().evaluate(candidate)
        planned = candidate.planned.plan
        model = predict(planned, Machine.of_target(self.target))
        result.extra["model"] = model.as_dict()
        part = get_target(self.target).part
        if part is None:
            result.extra["score"] = model.score
        else:
            speed = predict_tflops(planned, part)
            result.extra["predicted"] = {"part": part, **speed.as_dict()}
            result.extra["score"] = speed.tflops
        return result


def failure(candidate: Candidate, status: str, reason: str) -> Evaluation:
    """The evaluation of a candidate that was never evaluated (pruned): its status and reason."""
    evaluation = Evaluation(candidate.planned.name, "ok", None, params_of(candidate.planned.config), cached=False)
    evaluation.fail(status, reason)
    return evaluation
