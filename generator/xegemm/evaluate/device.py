"""Evaluation on a SYCL device: build the OpenCL C through dpctl, verify against numpy, then time.

:class:`DeviceBuilder` builds; :class:`VerifyObserver` runs the kernel once on poisoned C and checks it
against the numpy reference (a failure is ``failed_verify``, never timed); :class:`TimingObserver` times
verified kernels with device profiling events.  :func:`device_evaluator` chains them as ``run`` does.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass

import numpy as np

from xegemm.config import Config
from xegemm.dtypes import dtype
from xegemm.evaluate import Builder, Evaluation, Evaluator, LogObserver, Observer, PlannedVariant
from xegemm.lowering import Lowering
from xegemm.lowering.native import build_options
from xegemm.profile import NumpyReference, gemm_flops, launch_ms, measure_against_reference
from xegemm.runtime.program import BuildError, build_program, from_device, launch, make_queue, to_device
from xegemm import stream_k
from xegemm.errors import XegemmError
from xegemm.verify import check, check_fits, make_operands, poison_c, reference, reference_key

BUILD_OPTIONS = "-cl-std=CL3.0 -cl-mad-enable"


def device_build_options(lowering: Lowering, config: Config) -> str:
    """The OpenCL build options of a variant on a device (native lowering: with its GRF mode)."""
    if lowering.name == "native":
        return f"{BUILD_OPTIONS} {build_options(config.target.grf)}"
    return BUILD_OPTIONS


def workspace_bytes(config: Config) -> int:
    """Split K: the partial sums, one accumulator per element of D per slice.  Stream-K: per work-group, its
    slots of one work-group tile of accumulators each (xegemm.stream_k).  Else 0."""
    p, tile, acc_bytes = config.problem, config.tile, dtype(config.types.acc).bits // 8
    if tile.stream_k:
        bm, bn, _ = tile.workgroup
        return p.batch * tile.stream_k * stream_k.SLOTS * bm * bn * acc_bytes
    return 0 if tile.split_k == 1 else p.batch * tile.split_k * p.m * p.n * acc_bytes


def epilogue_arguments(config: Config) -> list:
    """The kernel's last arguments: alpha, beta and the clamp bounds, as f32."""
    e = config.epilogue
    return [ctypes.c_float(v) for v in (e.alpha, e.beta, *e.clamp)]


class DeviceSession:
    """A device, a profiling queue, and the inputs/reference of one problem kept between variants."""

    def __init__(self, sycl_device):
        self.device = sycl_device
        self.queue = make_queue(sycl_device, profiling=True)
        self._problem_key = None
        self._buffers = None
        self._reference = None

    def buffers(self, config: Config):
        """Device buffers and reference for the config's problem and types (rebuilt when they change)."""
        key = (config.problem, config.types, config.layout, config.epilogue, reference_key(config), config.verify.seed,
               workspace_bytes(config))
        if key != self._problem_key:
            too_big = check_fits(config, getattr(self.device, "global_mem_size", None))
            if too_big:          # refused before numpy or the device is asked for the memory
                raise XegemmError(too_big)
            ops = make_operands(config)
            poison = poison_c(config)
            nothing = np.zeros(4, np.uint8)    # what a kernel that reads no C or bias is given instead
            self._buffers = {"ops": ops, "reference": reference(config, ops), "a": to_device(self.queue, ops.a_bytes),
                             "b": to_device(self.queue, ops.b_bytes), "c": to_device(self.queue, poison),
                             "poison": poison,
                             "c_in": to_device(self.queue, nothing if ops.c_in_bytes is None else ops.c_in_bytes),
                             "bias": to_device(self.queue, nothing if ops.bias is None else ops.bias.astype(np.float32)),
                             "workspace": to_device(self.queue, np.zeros(max(4, workspace_bytes(config)), np.uint8))}
            self._problem_key = key
        return self._buffers

    def numpy_reference(self, config: Config) -> NumpyReference:
        """numpy's float32 matmul of the config's problem (kept while the problem stays the same)."""
        p = config.problem
        if self._reference is None or self._reference[0] != p:
            self._reference = (p, NumpyReference(p.m, p.n, p.k, p.batch))
        return self._reference[1]


@dataclass
class DeviceKernel:
    """A built kernel bound to its problem's buffers: ``submit()`` launches it once."""

    session: DeviceSession
    config: Config
    buffers: dict
    submit: object


class DeviceBuilder(Builder):
    """Builds a variant's OpenCL C on the session's device (native lowering: with its build options;
    ``options`` replaces the default ones, e.g. to build a reference kernel without optimisation)."""

    def __init__(self, session: DeviceSession, lowering: Lowering, options: str | None = None):
        self.session = session
        self.lowering = lowering
        self.options = options

    def build(self, pv: PlannedVariant, source: str, evaluation: Evaluation) -> DeviceKernel | None:
        options = self.options or device_build_options(self.lowering, pv.config)
        t0 = time.perf_counter()
        try:
            program = build_program(self.session.queue, source, options)
            names = [pv.plan.name] + ([pv.plan.name + "_reduce"] if pv.plan.reduces else [])
            for name in names:
                if not program.has_sycl_kernel(name):    # dpctl would crash the process looking it up
                    raise BuildError(f"the program defines no kernel named {name}", source)
            kernels = [program.get_sycl_kernel(name) for name in names]
        except BuildError as exc:
            evaluation.fail("failed_build", str(exc))
            evaluation.build_log = exc.log
            return None
        evaluation.build_s = time.perf_counter() - t0
        evaluation.extra["build_cached"] = bool(getattr(program, "from_cache", False))   # loaded, not compiled
        config, plan = pv.config, pv.plan
        bufs = self.session.buffers(config)
        queue = self.session.queue
        launches = [(kernels[0], gemm_arguments(plan, bufs), plan.global_size(), plan.workgroup_size)]
        if plan.reduces:
            launches.append((kernels[1], reduce_arguments(plan, bufs), reduce_global_size(config), (16, 1, 1)))
        return DeviceKernel(self.session, config, bufs, lambda: submit_in_order(queue, launches))


def gemm_arguments(plan, bufs) -> list:
    """The GEMM kernel's arguments (templates/gemm.cl.j2); split K: C is the workspace of partial sums;
    stream-K: the workspace comes last."""
    config = plan.config
    ops, p = bufs["ops"], config.problem
    out, ldc = (bufs["workspace"], p.n * dtype(config.types.acc).bits // 8) if plan.split_k > 1 else (bufs["c"], ops.ldc)
    args = [bufs["a"], bufs["b"], out, ctypes.c_int(p.m), ctypes.c_int(p.n), ctypes.c_int(p.k),
            ctypes.c_int(ops.lda), ctypes.c_int(ops.ldb), ctypes.c_int(ldc), ctypes.c_long(ops.a_bytes[0].nbytes),
            ctypes.c_long(ops.b_bytes[0].nbytes), ctypes.c_long(p.m * ldc), bufs["c_in"], bufs["bias"]] \
        + epilogue_arguments(config)
    if plan.stream_k:
        return args + [bufs["workspace"]]
    return args + ([ctypes.c_int(plan.k_slice())] if plan.split_k > 1 else [])


def reduce_arguments(plan, bufs) -> list:
    """The reduction kernel's arguments (templates/reduce.cl.j2; stream-K: K last)."""
    ops, p = bufs["ops"], plan.config.problem
    return [bufs["workspace"], bufs["c"], ctypes.c_int(p.m), ctypes.c_int(p.n), ctypes.c_int(ops.ldc),
            ctypes.c_long(p.m * ops.ldc), bufs["c_in"], bufs["bias"]] + epilogue_arguments(plan.config) \
        + ([ctypes.c_int(p.k)] if plan.stream_k else [])


def reduce_global_size(config: Config) -> tuple[int, int, int]:
    """One work-item per element of D (N rounded up to the work-group of 16).  Stream-K: one per element of a
    work-group tile (BN rounded up to 16) per tile per batch; those of whole tiles return at once."""
    p, tile = config.problem, config.tile
    if tile.stream_k:
        bm, bn, _ = tile.workgroup
        return (-(-bn // 16) * 16, bm, p.batch * stream_k.tiles(p.m, p.n, tile.workgroup))
    return (-(-p.n // 16) * 16, p.m, p.batch)


class EventSpan:
    """Several in-order launches timed as one: from the first one's start to the last one's end."""

    def __init__(self, events):
        self.events = events

    def wait(self):
        for event in self.events:
            event.wait()

    @property
    def profiling_info_start(self):
        return self.events[0].profiling_info_start

    @property
    def profiling_info_end(self):
        return self.events[-1].profiling_info_end


def submit_in_order(queue, launches):
    """Launch (kernel, args, global, local) one after the other on an in-order queue: one event, or a span."""
    events = [launch(queue, kernel, args, gsize, lsize) for kernel, args, gsize, lsize in launches]
    return events[0] if len(events) == 1 else EventSpan(events)


class VerifyObserver(Observer):
    """Runs the kernel once on poisoned C and compares C with the numpy reference (xegemm.verify)."""

    def built(self, pv: PlannedVariant, evaluation: Evaluation, kernel: DeviceKernel) -> None:
        bufs = kernel.buffers
        try:
            bufs["c"].copy_from_host(bufs["poison"])      # poisoned before every verified run
            kernel.submit().wait()
            verdict = check(kernel.config, from_device(bufs["c"], np.uint8, bufs["poison"].shape), bufs["reference"])
        except Exception as exc:  # noqa: BLE001 - a launch failure is recorded, the sweep goes on
            evaluation.fail("error", f"launch failed: {exc!r}")
            return
        evaluation.max_abs_err, evaluation.max_rel_err = verdict.max_abs_err, verdict.max_rel_err
        evaluation.bad_elements = verdict.bad_elements
        if not verdict.ok:
            evaluation.fail("failed_verify", verdict.reason)


class TimingObserver(Observer):
    """Times a verified kernel with device profiling events: GFLOP/s and GB/s from the median.

    By default each launch alternates with a run of numpy's float32 matmul of the same problem
    (:func:`xegemm.profile.measure_against_reference`): the reference lands in ``extra["reference"]``,
    measured under the same conditions as the kernel.  ``timer(submit, warmup, repeats, min_time_ms)``
    returning a :class:`xegemm.profile.Timing` replaces that (a benchmark harness passes its own and measures
    its references itself).
    """

    def __init__(self, timer=None):
        self.timer = timer

    def built(self, pv: PlannedVariant, evaluation: Evaluation, kernel: DeviceKernel) -> None:
        config, prof = kernel.config, kernel.config.profile
        try:
            if self.timer is not None:
                timing = self.timer(kernel.submit, prof.warmup, prof.repeats, prof.min_time_ms)
            else:
                timing, evaluation.extra["reference"] = measure_against_reference(
                    lambda: launch_ms(kernel.submit), kernel.session.numpy_reference(config), prof.warmup, prof.repeats,
                    prof.min_time_ms)
        except Exception as exc:  # noqa: BLE001 - verified, but timing failed: recorded, the sweep goes on
            evaluation.fail("error", f"timing failed after verification: {exc!r}")
            return
        p, ops = config.problem, kernel.buffers["ops"]
        evaluation.time_ms = timing.as_dict()
        seconds = max(timing.median, 1e-9) * 1e-3
        evaluation.gflops = gemm_flops(p.m, p.n, p.k, p.batch) / seconds * 1e-9
        moved = ops.a_bytes.nbytes + ops.b_bytes.nbytes + p.batch * p.m * ops.ldc
        evaluation.gbps = moved / seconds * 1e-9


def device_evaluator(session: DeviceSession, lowering: Lowering, log_dir=None, timer=None,
                     observers: tuple[Observer, ...] = ()) -> Evaluator:
    """Build, verify, time (and save failed builds' logs into ``log_dir``), then ``observers``."""
    chain: list[Observer] = [VerifyObserver(), TimingObserver(timer)]
    if log_dir is not None:
        chain.append(LogObserver(log_dir))
    return Evaluator(lowering, DeviceBuilder(session, lowering), [*chain, *observers])
