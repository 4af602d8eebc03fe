"""Evaluation on a SYCL device: build the OpenCL C through dpctl, verify against numpy, then time.

:class:`DeviceBuilder` builds; :class:`VerifyObserver` runs the kernel once on poisoned C and checks it
against the numpy reference (a failure is ``failed_verify``, never timed); :class:`TimingObserver` times
verified kernels with device profiling events.  :func:`device_evaluator` chains them as ``run`` does.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from xegemm.kernel.arguments import KernelCall
from xegemm.config import Config
from xegemm.evaluate import Builder, Evaluation, Evaluator, LogObserver, Observer, PlannedVariant, lowering_of
from xegemm.evaluate.grouped import grouped_setup, grouped_submit, verify_grouped
from xegemm.lowering import Lowering
from xegemm.evaluate.timing import NumpyReference, gemm_flops, launch_ms, measure_against_reference
from xegemm.runtime.devices import failure_reason
from xegemm.runtime.program import BuildError, build_source, from_device, rebuild_source, source_unavailable, launch, make_queue, to_device
from xegemm.errors import XegemmError
from xegemm.epilogues.plan import input_param
from xegemm.plan.planner import plan
from xegemm.verify.dense import check, check_fits, make_operands, poison_c, reference, reference_key
from xegemm.epilogues.graph import kind_shape

def device_build_options(lowering: Lowering, config: Config) -> str:
    """The OpenCL build options of a variant on a device (xegemm.library.build_flags; native: with its GRF mode)."""
    return lowering.build_options(config.target.grf)


def workspace_bytes(config: Config) -> int:
    """Bytes of the workspace of split K (the partial sums) or stream-K (xegemm.plan.stream_k), else 0: the formula of
    :class:`xegemm.kernel.arguments.KernelCall`."""
    call, p = KernelCall.of(plan(config, check_registers=False)), config.problem
    return call.sizes(p.m, p.n, p.k, p.batch)["workspace_bytes"]


def epilogue_scalars(config: Config) -> dict[str, float]:
    """The epilogue's float arguments: alpha, beta and the clamp bounds."""
    e = config.epilogue
    return {"alpha": e.alpha, "beta": e.beta, "clamp_lo": e.clamp[0], "clamp_hi": e.clamp[1]}


class DeviceSession:
    """A device, a profiling queue, and the inputs/reference of one problem kept between variants."""

    def __init__(self, sycl_device, queue=None):
        self.device = sycl_device
        self.queue = queue if queue is not None else make_queue(sycl_device, profiling=True)
        self._problem_key = None
        self._buffers = None
        self._reference = None

    def buffers(self, config: Config, graph=None):
        """Device buffers and reference for the config's problem and types (rebuilt when they change); ``graph``
        is the plan's traced epilogue (None: the fixed one)."""
        key = (config.problem, config.types, config.layout, config.epilogue, reference_key(config), config.verify.seed,
               workspace_bytes(config), config.quant, config.quant_a)
        if key != self._problem_key:
            too_big = check_fits(config, getattr(self.device, "global_mem_size", None))
            if too_big:          # refused before numpy or the device is asked for the memory
                raise XegemmError(too_big)
            ops = make_operands(config, graph=graph)
            poison = poison_c(config)
            nothing = np.zeros(4, np.uint8)    # what a kernel that reads no C or bias is given instead
            self._buffers = {"ops": ops, "reference": reference(config, ops), "a": to_device(self.queue, ops.a_bytes),
                             "b": to_device(self.queue, ops.b_bytes), "c": to_device(self.queue, poison),
                             "poison": poison,
                             "c_in": to_device(self.queue, nothing if ops.c_in_bytes is None else ops.c_in_bytes),
                             "bias": to_device(self.queue, nothing if ops.bias is None else ops.bias.astype(np.float32)),
                             "workspace": to_device(self.queue, np.zeros(max(4, workspace_bytes(config)), np.uint8))}
            self._buffers.update(traced_buffers(self.queue, config, ops))
            quant = ops.quant or {}
            for name in ("scales", "zeros", "a_scales"):    # a quantized B's and an FP8 A's (xegemm.verify.dense)
                data = quant.get(name)
                self._buffers[name] = to_device(self.queue, nothing if data is None else data)
            self._problem_key = key
        return self._buffers

    def packed_b(self, config: Config, lowering: Lowering, plan) -> tuple[object, float]:
        """B as a lowering that reads it packed takes it (the coopmat lowering: VNNI, lowering.coopmat.pack_b),
        on the device, and the milliseconds the host spent packing it (once per problem and packing; the
        kernel's timing does not include it, the evaluation records it as ``extra["pack_b_ms"]``)."""
        bufs = self.buffers(config, plan.graph)
        key = ("b_packed", lowering.b_pack_factor(plan))
        if key not in bufs:
            p, t0 = config.problem, time.perf_counter()
            packed = lowering.pack_b(plan, bufs["ops"].b_bytes, p.k, p.n)
            bufs[key] = (to_device(self.queue, packed), (time.perf_counter() - t0) * 1e3)
        return bufs[key]

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

    def admit(self, pv: PlannedVariant) -> str | None:
        return source_unavailable(self.session.queue, lowering_of(pv, self.lowering).source_kind)

    def rebuild(self, pv: PlannedVariant, source: str, why: str) -> None:
        """Drop the cached program of a variant that failed verification: its next build is from source."""
        low = lowering_of(pv, self.lowering)
        try:
            rebuild_source(self.session.queue, source, self.options or device_build_options(low, pv.config),
                           low.source_kind, why)
        except BuildError:
            pass            # the next build says why

    def build(self, pv: PlannedVariant, source: str, evaluation: Evaluation) -> DeviceKernel | None:
        low = lowering_of(pv, self.lowering)
        options = self.options or device_build_options(low, pv.config)
        t0 = time.perf_counter()
        try:
            program = build_source(self.session.queue, source, options, low.source_kind)
            names = [launch.kernel for launch in KernelCall.of(pv.plan).launches]
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
        config, p = pv.config, pv.config.problem
        queue = self.session.queue
        call = KernelCall.of(pv.plan)
        if pv.plan.grouped:         # one launch of every group (xegemm.evaluate.grouped)
            setup = grouped_setup(self.session, config, pv.plan)
            return DeviceKernel(self.session, config, {"grouped": setup},
                                grouped_submit(queue, call, kernels[0], setup, epilogue_scalars(config)))
        bufs = self.session.buffers(config, pv.plan.graph)
        buffers = device_buffers(bufs)
        if low.b_pack_factor(pv.plan):       # B as the kernel reads it: packed on the host, once per problem
            buffers["B"], evaluation.extra["pack_b_ms"] = self.session.packed_b(config, low, pv.plan)
        bound = call.bind(call.sizes(p.m, p.n, p.k, p.batch), buffers,
                          epilogue_scalars(config) | bufs["named_scalars"])
        launches = [(kernel, args, gsize, lsize) for kernel, (_, args, gsize, lsize) in zip(kernels, bound)]
        return DeviceKernel(self.session, config, bufs, lambda: submit_in_order(queue, launches))


def device_buffers(bufs) -> dict:
    """A session's buffers under the names of :data:`xegemm.kernel.arguments.BUFFERS` (C is where D goes; its input
    is ``c_in``)."""
    return {"A": bufs["a"], "B": bufs["b"], "D": bufs["c"], "C": bufs["c_in"], "bias": bufs["bias"],
            "workspace": bufs["workspace"], "scales": bufs["scales"], "zeros": bufs["zeros"], "a_scales": bufs["a_scales"],
            **bufs["named"], **{k: v[0] for k, v in bufs["aux_outputs"].items()}}


def traced_buffers(queue, config: Config, ops) -> dict:
    """A traced epilogue's buffers (docs/epilogues.md): its named inputs' (``named``, by kernel parameter), its
    scalars' values (``named_scalars``) and its auxiliary outputs' (``aux_outputs``: parameter -> (buffer, poison,
    output name)); all empty for the fixed epilogue."""
    graph = ops.graph
    named, scalars, outputs = {}, {}, {}
    for name, value in ops.named.items():
        kind = graph.input(name).kind
        if kind == "scalar":
            scalars[input_param(name)] = float(value)
        else:
            data = ops.named_bytes[name] if kind == "matrix" else np.asarray(value, np.float32)
            named[input_param(name)] = to_device(queue, data)
    p = config.problem
    for o in graph.outputs[1:] if graph else ():     # auxiliary matrices, then reductions (per row, column, batch)
        elements = p.batch * math.prod(kind_shape(graph.nodes[o.node].kind, p.m, p.n))
        poison = poison_c(config, o.type, elements)
        outputs[f"out_{o.name}"] = (to_device(queue, poison), poison, o.name)
    return {"named": named, "named_scalars": scalars, "aux_outputs": outputs}


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
    """Runs the kernel once on poisoned C and compares C with the numpy reference (xegemm.verify.dense)."""

    def built(self, pv: PlannedVariant, evaluation: Evaluation, kernel: DeviceKernel) -> None:
        bufs = kernel.buffers
        if "grouped" in bufs:
            self._grouped(evaluation, kernel)
            return
        try:
            bufs["c"].copy_from_host(bufs["poison"])      # poisoned before every verified run
            for buffer, poison, _ in bufs["aux_outputs"].values():
                buffer.copy_from_host(poison)
            kernel.submit().wait()
            outputs = {name: from_device(buffer, np.uint8, poison.shape)
                       for buffer, poison, name in bufs["aux_outputs"].values()}
            verdict = check(kernel.config, from_device(bufs["c"], np.uint8, bufs["poison"].shape), bufs["reference"],
                            outputs)
        except Exception as exc:  # noqa: BLE001 - a launch failure is recorded, the sweep goes on
            evaluation.fail("error", f"launch failed: {failure_reason(exc)}")
            return
        evaluation.max_abs_err, evaluation.max_rel_err = verdict.max_abs_err, verdict.max_rel_err
        evaluation.bad_elements = verdict.bad_elements
        if not verdict.ok:
            evaluation.fail("failed_verify", verdict.reason)

    @staticmethod
    def _grouped(evaluation: Evaluation, kernel: DeviceKernel) -> None:
        setup = kernel.buffers["grouped"]
        try:
            verdict, reason = verify_grouped(setup, kernel.submit)
        except Exception as exc:  # noqa: BLE001 - a launch failure is recorded, the sweep goes on
            evaluation.fail("error", f"launch failed: {failure_reason(exc)}")
            return
        checked = [v for v in verdict.verdicts if v is not None]
        errors = [v.max_abs_err for v in checked if v.max_abs_err is not None]
        rel = [v.max_rel_err for v in checked if v.max_rel_err is not None]
        evaluation.max_abs_err = max(errors) if errors else None
        evaluation.max_rel_err = max(rel) if rel else None
        evaluation.bad_elements = sum(v.bad_elements for v in checked)
        evaluation.extra["groups"] = [g.label for g in setup.problem.groups]
        if reason:
            evaluation.fail("failed_verify", reason)


class TimingObserver(Observer):
    """Times a verified kernel with device profiling events: GFLOP/s and GB/s from the median.

    By default each launch alternates with a run of numpy's float32 matmul of the same problem
    (:func:`xegemm.evaluate.timing.measure_against_reference`): the reference lands in ``extra["reference"]``,
    measured under the same conditions as the kernel.  ``timer(submit, warmup, repeats, min_time_ms)``
    returning a :class:`xegemm.evaluate.timing.Timing` replaces that (a benchmark harness passes its own and measures
    its references itself).
    """

    def __init__(self, timer=None):
        self.timer = timer

    def built(self, pv: PlannedVariant, evaluation: Evaluation, kernel: DeviceKernel) -> None:
        config, prof = kernel.config, kernel.config.profile
        grouped = kernel.buffers.get("grouped")
        reference = grouped.reference if grouped else kernel.session.numpy_reference(config)
        try:
            if self.timer is not None:
                timing = self.timer(kernel.submit, prof.warmup, prof.repeats, prof.min_time_ms)
            else:
                timing, evaluation.extra["reference"] = measure_against_reference(
                    lambda: launch_ms(kernel.submit), reference, prof.warmup, prof.repeats, prof.min_time_ms)
        except Exception as exc:  # noqa: BLE001 - verified, but timing failed: recorded, the sweep goes on
            evaluation.fail("error", f"timing failed after verification: {failure_reason(exc)}")
            return
        evaluation.time_ms = timing.as_dict()
        seconds = max(timing.median, 1e-9) * 1e-3
        if grouped:                 # the whole launch: every group's FLOPs and bytes
            flops, moved = grouped.flops, grouped.moved_bytes
        else:
            p, ops = config.problem, kernel.buffers["ops"]
            flops = gemm_flops(p.m, p.n, p.k, p.batch)
            moved = ops.a_bytes.nbytes + ops.b_bytes.nbytes + p.batch * p.m * ops.ldc
        evaluation.gflops = flops / seconds * 1e-9
        evaluation.gbps = moved / seconds * 1e-9


def device_evaluator(session: DeviceSession, lowering: Lowering, log_dir=None, timer=None,
                     observers: tuple[Observer, ...] = ()) -> Evaluator:
    """Build, verify, time (and save failed builds' logs into ``log_dir``), then ``observers``."""
    chain: list[Observer] = [VerifyObserver(), TimingObserver(timer)]
    if log_dir is not None:
        chain.append(LogObserver(log_dir))
    return Evaluator(lowering, DeviceBuilder(session, lowering), [*chain, *observers])
