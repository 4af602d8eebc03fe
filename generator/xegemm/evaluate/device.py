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
from xegemm.evaluate.timing import (NumpyReference, Rotation, gemm_flops, launch_ms,
                                    measure_against_reference, rotation_for)
from xegemm.runtime.b_packer import DeviceAPacker, DevicePacker
from xegemm.runtime.devices import failure_reason
from xegemm.runtime.host import last_level_cache_bytes
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


def local_memory_violation(needs: int | None, has: int) -> str | None:
    """Why a work-group that takes ``needs`` bytes of local memory cannot run on a device with ``has`` bytes
    (CL_DEVICE_LOCAL_MEM_SIZE), or None (also when either is unknown): refused before the build, where the OpenCL
    runtime would fail the launch with CL_OUT_OF_RESOURCES."""
    if not needs or not has or needs <= has:
        return None
    return (f"a work-group needs {needs / 1024:g} KiB of local memory and the device has {has / 1024:g} KiB: use a "
            "smaller workgroup tile, fewer sub-groups or a smaller k-tile")


class DeviceSession:
    """A device, a profiling queue, and the inputs/reference of one problem kept between variants."""

    def __init__(self, sycl_device, queue=None):
        self.device = sycl_device
        self.queue = queue if queue is not None else make_queue(sycl_device, profiling=True)
        self._problem_key = None
        self._buffers = None
        self._reference = None
        self._sets: list[dict] | None = None      # the problem's buffer sets (buffer_sets), the first its buffers
        self._packers: dict[tuple, object] = {}   # a packing lowering's B packer and A dequantizer per plan
        cpu = "cpu" in str(getattr(sycl_device, "device_type", "")).lower()
        self.llc_bytes = last_level_cache_bytes(int(getattr(sycl_device, "global_mem_cache_size", 0) or 0), cpu)
        self.memory_bytes = int(getattr(sycl_device, "global_mem_size", 0) or 0)
        self.local_memory_bytes = int(getattr(sycl_device, "local_mem_size", 0) or 0)    # 0: unknown

    def buffers(self, config: Config, graph=None):
        """Device buffers and reference for the config's problem and types (rebuilt when they change); ``graph``
        is the plan's traced epilogue (None: the fixed one)."""
        key = (config.problem, config.types, config.layout, config.epilogue, reference_key(config), config.verify.seed,
               workspace_bytes(config), config.quant, config.quant_a)
        if key != self._problem_key:
            self._buffers = self._sets = self._problem_key = None    # the old buffers go before new ones are made
            too_big = check_fits(config, getattr(self.device, "global_mem_size", None))
            if too_big:          # refused before numpy or the device is asked for the memory
                raise XegemmError(too_big)
            ops = make_operands(config, graph=graph)
            host = host_arrays(config, ops)
            self._buffers = {"ops": ops, "reference": reference(config, ops), "poison": host["c"],
                             **{name: to_device(self.queue, data) for name, data in host.items()}}
            self._buffers.update(traced_buffers(self.queue, config, ops))
            self._problem_key = key
        return self._buffers

    def rotation(self, config: Config) -> Rotation:
        """The buffers the config's problem is timed over (xegemm.evaluate.timing.rotation_for, ``profile.rotate``):
        its operands', C's and the quantization arrays' bytes against the device's last-level cache."""
        bufs = self.buffers(config)
        ops, quant = bufs["ops"], bufs["ops"].quant or {}
        working = sum(x.nbytes for x in (ops.a_bytes, ops.b_bytes, bufs["poison"]))
        working += sum(0 if x is None else x.nbytes for x in (ops.c_in_bytes, ops.bias))
        working += sum(0 if quant.get(name) is None else quant[name].nbytes for name in ("scales", "zeros", "a_scales"))
        return rotation_for(working, self.llc_bytes, config.profile.rotate, self.memory_bytes)

    def buffer_sets(self, config: Config, copies: int) -> list[dict]:
        """``copies`` sets of the problem's buffers, the first :meth:`buffers` itself: each further set has its
        own A, B, C (output and input), bias and quantization arrays with the same contents; the workspace and a
        traced epilogue's named inputs and auxiliary outputs are shared (kept between problems like
        :meth:`buffers`)."""
        bufs = self.buffers(config)
        if self._sets is None or self._sets[0] is not bufs:     # a new problem: the old copies are let go
            self._sets = [bufs]
        sets = self._sets
        ops, quant = bufs["ops"], bufs["ops"].quant or {}
        nothing = np.zeros(4, np.uint8)
        while len(sets) < copies:
            sets.append({**bufs, "a": to_device(self.queue, ops.a_bytes), "b": to_device(self.queue, ops.b_bytes),
                         "c": to_device(self.queue, bufs["poison"]),
                         "c_in": to_device(self.queue, nothing if ops.c_in_bytes is None else ops.c_in_bytes),
                         "bias": to_device(self.queue, nothing if ops.bias is None else ops.bias.astype(np.float32)),
                         **{name: to_device(self.queue, nothing if quant.get(name) is None else quant[name])
                            for name in ("scales", "zeros", "a_scales")}})
        return sets[:copies]

    def packed_b(self, config: Config, plan, one: dict) -> tuple[object, float]:
        """B as a lowering that reads it packed takes it (the coopmat lowering: VNNI-packed, and a quantized B
        dequantized, on the device by xegemm.runtime.b_packer from buffer set ``one``'s B as stored), and the
        milliseconds the packing took (once per problem, packing and buffer set: the kernel's timing does not
        include it, the evaluation records it as ``extra["pack_b_ms"]``).  Raises BuildError when the packer does
        not build."""
        packer = self.packer(DevicePacker, plan)
        p = config.problem
        return self._pack_once(one, packer, packer.packed_bytes(p.k, p.n) * p.batch,
                               {"stored": one["b"], "scales": one["scales"], "zeros": one["zeros"]}, (p.k, p.n, p.batch))

    def packed_a(self, config: Config, plan, one: dict) -> tuple[object, float]:
        """An FP8 A dequantized into row-major bf16 on the device (the coopmat lowering's A dequantizer,
        xegemm.runtime.b_packer) from buffer set ``one``'s A and scales, and the milliseconds it took (as
        :meth:`packed_b`, recorded as ``extra["pack_a_ms"]``)."""
        packer = self.packer(DeviceAPacker, plan)
        p = config.problem
        return self._pack_once(one, packer, packer.packed_bytes(p.m, p.k) * p.batch,
                               {"stored": one["a"], "scales": one["a_scales"]}, (p.m, p.k, p.batch))

    def packer(self, kind, plan):
        """This session's packer of ``kind`` (DevicePacker, DeviceAPacker) for a plan, made once."""
        key = (kind.__name__, plan.name)
        if key not in self._packers:
            self._packers[key] = kind(plan)
        return self._packers[key]

    def _pack_once(self, one: dict, packer, nbytes: int, inputs: dict, sizes: tuple) -> tuple[object, float]:
        """Run ``packer`` once per buffer set ``one`` (kept in it by the packer's source) into a new buffer of
        ``nbytes``: (the buffer, the milliseconds of the run; the build comes first, untimed)."""
        key = ("packed", packer.source)
        if key not in one:
            packer.kernel(self.queue)
            packed = to_device(self.queue, np.zeros(max(4, nbytes), np.uint8))
            t0 = time.perf_counter()
            packer.run(self.queue, {**inputs, "packed": packed}, *sizes).wait()
            one[key] = (packed, (time.perf_counter() - t0) * 1e3)
        return one[key]

    def numpy_reference(self, config: Config) -> NumpyReference:
        """numpy's float32 matmul of the config's problem, timed over rotating buffers as the kernels are
        (``profile.rotate``; kept while the problem and that setting stay the same)."""
        p = config.problem
        key = (p, config.profile.rotate)
        if self._reference is None or self._reference[0] != key:
            rotation = rotation_for(NumpyReference.working_bytes(p.m, p.n, p.k, p.batch), self.llc_bytes,
                                    config.profile.rotate, self.memory_bytes)
            self._reference = (key, NumpyReference(p.m, p.n, p.k, p.batch, rotation=rotation))
        return self._reference[1]


class RotatingSubmit:
    """Launches over several bound sets of buffers, the next set each call (:class:`Rotation`): ``next`` is the
    set the coming call launches, ``last`` the one the latest call launched (None before the first)."""

    def __init__(self, queue, launch_sets: list):
        self.queue, self.launch_sets = queue, launch_sets
        self.next, self.last = 0, None

    def __call__(self):
        self.last, self.next = self.next, (self.next + 1) % len(self.launch_sets)
        return submit_in_order(self.queue, self.launch_sets[self.last])


@dataclass
class DeviceKernel:
    """A built kernel bound to its problem's buffers: ``submit()`` launches it once (over ``sets``, the buffer
    sets of its :class:`Rotation`, in turn when it is a :class:`RotatingSubmit`)."""

    session: DeviceSession
    config: Config
    buffers: dict
    submit: object
    rotation: Rotation | None = None
    sets: list | None = None

    def set_at(self, index: int | None) -> dict:
        """The buffers of set ``index`` (the only set when it does not rotate)."""
        return self.sets[index or 0] if self.sets else self.buffers

    @property
    def next_set(self) -> int:
        return self.submit.next if isinstance(self.submit, RotatingSubmit) else 0

    @property
    def last_set(self) -> int:
        return (self.submit.last or 0) if isinstance(self.submit, RotatingSubmit) else 0


class DeviceBuilder(Builder):
    """Builds a variant's OpenCL C on the session's device (native lowering: with its build options;
    ``options`` replaces the default ones, e.g. to build a reference kernel without optimisation)."""

    def __init__(self, session: DeviceSession, lowering: Lowering, options: str | None = None):
        self.session = session
        self.lowering = lowering
        self.options = options

    def admit(self, pv: PlannedVariant) -> str | None:
        low = lowering_of(pv, self.lowering)
        return (local_memory_violation(low.local_memory_bytes(pv.plan), self.session.local_memory_bytes)
                or source_unavailable(self.session.queue, low.source_kind))

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
            try:
                setup = grouped_setup(self.session, config, pv.plan, low)
            except BuildError as exc:
                evaluation.fail("failed_build", f"the coopmat packer: {exc}")
                evaluation.build_log = exc.log
                return None
            if setup.pack_b_ms is not None:
                evaluation.extra["pack_b_ms"] = setup.pack_b_ms
            return DeviceKernel(self.session, config, {"grouped": setup},
                                grouped_submit(queue, call, kernels[0], setup, epilogue_scalars(config)))
        bufs = self.session.buffers(config, pv.plan.graph)
        rotation = self.session.rotation(config)
        sets = self.session.buffer_sets(config, rotation.copies)
        launch_sets = []
        for one in sets:
            buffers = device_buffers(one)
            if low.b_pack_factor(pv.plan):   # B as the kernel reads it: packed on the device, once per problem
                try:
                    buffers["B"], evaluation.extra["pack_b_ms"] = self.session.packed_b(config, pv.plan, one)
                    if low.dequantizes_a(pv.plan):     # an FP8 A: dequantized into bf16 first
                        buffers["A"], evaluation.extra["pack_a_ms"] = self.session.packed_a(config, pv.plan, one)
                except BuildError as exc:
                    evaluation.fail("failed_build", f"the coopmat packer: {exc}")
                    evaluation.build_log = exc.log
                    return None
            bound = call.bind(call.sizes(p.m, p.n, p.k, p.batch), buffers,
                              epilogue_scalars(config) | bufs["named_scalars"])
            launch_sets.append([(kernel, args, gsize, lsize) for kernel, (_, args, gsize, lsize) in zip(kernels, bound)])
        return DeviceKernel(self.session, config, bufs, RotatingSubmit(queue, launch_sets), rotation, sets)


def host_arrays(config: Config, ops) -> dict[str, np.ndarray]:
    """The host arrays of a problem's fixed buffers, by the session's names: A, B as stored, C (D's poison), its
    input ``c_in``, the bias, the workspace, and a quantized B's and an FP8 A's arrays (xegemm.verify.dense); a
    4-byte stand-in for each one the problem has not."""
    nothing = np.zeros(4, np.uint8)    # what a kernel that reads no C or bias is given instead
    quant = ops.quant or {}
    return {"a": ops.a_bytes, "b": ops.b_bytes, "c": poison_c(config),
            "c_in": nothing if ops.c_in_bytes is None else ops.c_in_bytes,
            "bias": nothing if ops.bias is None else ops.bias.astype(np.float32),
            "workspace": np.zeros(max(4, workspace_bytes(config)), np.uint8),
            **{name: nothing if quant.get(name) is None else quant[name] for name in ("scales", "zeros", "a_scales")}}


def device_buffers(bufs) -> dict:
    """A session's buffers under the names of :data:`xegemm.kernel.arguments.BUFFERS` (C is where D goes; its input
    is ``c_in``); the same for the host arrays of :func:`host_arrays` and :func:`traced_host_buffers`."""
    return {"A": bufs["a"], "B": bufs["b"], "D": bufs["c"], "C": bufs["c_in"], "bias": bufs["bias"],
            "workspace": bufs["workspace"], "scales": bufs["scales"], "zeros": bufs["zeros"], "a_scales": bufs["a_scales"],
            **bufs["named"], **{k: v[0] for k, v in bufs["aux_outputs"].items()}}


def traced_host_buffers(config: Config, ops) -> dict:
    """A traced epilogue's host arrays (docs/epilogues.md): its named inputs' (``named``, by kernel parameter), its
    scalars' values (``named_scalars``) and its auxiliary outputs' poisoned contents (``aux_outputs``: parameter ->
    (poison, output name)); all empty for the fixed epilogue."""
    graph = ops.graph
    named, scalars, outputs = {}, {}, {}
    for name, value in ops.named.items():
        kind = graph.input(name).kind
        if kind == "scalar":
            scalars[input_param(name)] = float(value)
        else:
            named[input_param(name)] = ops.named_bytes[name] if kind == "matrix" else np.asarray(value, np.float32)
    p = config.problem
    for o in graph.outputs[1:] if graph else ():     # auxiliary matrices, then reductions (per row, column, batch)
        elements = p.batch * math.prod(kind_shape(graph.nodes[o.node].kind, p.m, p.n))
        outputs[f"out_{o.name}"] = (poison_c(config, o.type, elements), o.name)
    return {"named": named, "named_scalars": scalars, "aux_outputs": outputs}


def traced_buffers(queue, config: Config, ops) -> dict:
    """:func:`traced_host_buffers` on the device: ``aux_outputs`` maps each parameter to (buffer, poison, name)."""
    host = traced_host_buffers(config, ops)
    return {"named": {k: to_device(queue, v) for k, v in host["named"].items()}, "named_scalars": host["named_scalars"],
            "aux_outputs": {k: (to_device(queue, poison), poison, name)
                            for k, (poison, name) in host["aux_outputs"].items()}}


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


def poison_outputs(bufs: dict) -> None:
    """Fill a buffer set's C and auxiliary outputs with the poison, so that only what a launch writes is checked."""
    bufs["c"].copy_from_host(bufs["poison"])
    for buffer, poison, _ in bufs["aux_outputs"].values():
        buffer.copy_from_host(poison)


def check_outputs(kernel: DeviceKernel, bufs: dict):
    """The verdict (xegemm.verify.dense.check) on a buffer set's C and auxiliary outputs as the device holds them."""
    outputs = {name: from_device(buffer, np.uint8, poison.shape)
               for buffer, poison, name in bufs["aux_outputs"].values()}
    return check(kernel.config, from_device(bufs["c"], np.uint8, bufs["poison"].shape), bufs["reference"], outputs)


class VerifyObserver(Observer):
    """Runs the kernel once on poisoned C and compares C with the numpy reference (xegemm.verify.dense)."""

    def built(self, pv: PlannedVariant, evaluation: Evaluation, kernel: DeviceKernel) -> None:
        if "grouped" in kernel.buffers:
            self._grouped(evaluation, kernel)
            return
        try:
            target = kernel.set_at(kernel.next_set)      # the buffers the coming launch uses
            poison_outputs(target)                       # poisoned before every verified run
            kernel.submit().wait()
            verdict = check_outputs(kernel, target)
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
        rotation = kernel.rotation or Rotation()
        try:
            for one in kernel.sets or ():     # every set's outputs poisoned: the last launch's are checked after
                poison_outputs(one)
            if self.timer is not None:
                timing = self.timer(kernel.submit, prof.warmup, prof.repeats, prof.min_time_ms)
            else:
                timing, evaluation.extra["reference"] = measure_against_reference(
                    lambda: launch_ms(kernel.submit), reference, prof.warmup, prof.repeats, prof.min_time_ms,
                    rotation)
            after = check_outputs(kernel, kernel.set_at(kernel.last_set)) if kernel.sets else None
        except Exception as exc:  # noqa: BLE001 - verified, but timing failed: recorded, the sweep goes on
            evaluation.fail("error", f"timing failed after verification: {failure_reason(exc)}")
            return
        evaluation.extra["timing_buffers"] = rotation.describe()
        if after is not None and not after.ok:     # the timed launches' results, on the buffers launched last
            evaluation.fail("failed_verify", f"after timing, on buffer set {kernel.last_set + 1} of "
                            f"{len(kernel.sets)}: {after.reason}")
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
