"""Isolation: every device build and launch runs in a worker process with a time limit.

A compiler that segfaults, a runtime that aborts, a kernel that never finishes or an allocation that takes
the process down must cost one variant, not the sweep.  :class:`IsolatedDeviceBuilder` hands each variant
(its plan and its already rendered source) to a worker process that owns the device and runs the device
evaluation there (:mod:`xegemm.evaluate.device`: build, verify, time).  The worker reports
each stage as it starts; the parent waits with the stage's time limit (:class:`TimeLimits`).  When the worker
dies or overruns, the parent kills it, records the variant (``failed_build`` if it died while building,
``error`` if while running, ``timeout`` if it overran; the signal and the stage in the reason) and the next
variant gets a fresh worker.

Workers ignore SIGINT: Ctrl-C reaches the parent, which stops the worker and leaves the variant in flight
unrecorded, so that a resumed run evaluates it again.  After the sweep the same worker measures the device's
peak for the report (:meth:`IsolatedDeviceBuilder.measure_peak`), under a time limit too.
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
import time
from dataclasses import dataclass

from xegemm.config import Config
from xegemm.evaluate import Builder, Evaluation, Evaluator, LogObserver, Observer, PlannedVariant
from xegemm.evaluate.device import DeviceBuilder, DeviceSession, TimingObserver, VerifyObserver
from xegemm.evaluate.peak import measure_peak
from xegemm.evaluate.gate import DeviceGate, GateHandle
from xegemm.lowering import Lowering
from xegemm.evaluate.timing import WARMUP_BOUND_MS, gemm_flops
from xegemm.runtime.devices import failure_reason, select_sycl_device
from xegemm.runtime.spirv import prepare_environment

WORKER_START_S = 120.0     # importing dpctl and opening the device
PEAK_S = 120.0             # measuring the device's peak (two small kernels)
PEAK = "peak"              # the request for it


@dataclass(frozen=True)
class TimeLimits:
    """Seconds a worker may spend building one kernel, and running it (verification and timing).

    The run limit defaults to one that fits the problem: a minute plus every launch at 0.2 GFLOP/s, far
    below what any generated kernel reaches on the CPU runtime, plus the longest warm-up of a measurement
    (kernel and reference, two attempts), so only a hung kernel meets it."""

    build_s: float = 900.0
    run_s: float | None = None

    def run_limit(self, config: Config) -> float:
        if self.run_s is not None:
            return self.run_s
        p, prof = config.problem, config.profile
        launches = 1 + prof.warmup + max(1, prof.repeats)
        return (60.0 + launches * gemm_flops(p.m, p.n, p.k, p.batch) / 2e8 + 2 * prof.min_time_ms / 1e3
                + 2 * WARMUP_BOUND_MS / 1e3)


class _StageReporter(Observer):
    """In the worker: tells the parent that the build is done and the run begins (after taking the device
    gate for timing, when there is one; see :mod:`xegemm.evaluate.gate`)."""

    def __init__(self, conn, gate: GateHandle | None):
        self.conn = conn
        self.gate = gate

    def built(self, pv: PlannedVariant, evaluation: Evaluation, kernel) -> None:
        if self.gate is not None:
            self.gate.timing()
        self.conn.send(("stage", "run"))


def _worker_main(conn, filter_string: str | None, gate: DeviceGate | None = None, spirv: bool = False) -> None:
    """The worker process: open the device once, then evaluate each variant it is sent.  ``spirv``: the run has
    SPIR-V (coopmat) variants, so the CPU runtime is started with the AMX target they need
    (xegemm.runtime.spirv.prepare_environment), for every variant of the run alike."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if spirv:
        prepare_environment()
    handle = gate.open() if gate is not None else None
    try:
        session = DeviceSession(select_sycl_device(filter_string))
    except Exception as exc:  # noqa: BLE001 - reported to the parent as the worker's failure
        conn.send(("fatal", failure_reason(exc)))
        return
    conn.send(("ready", None))
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request == PEAK:
            conn.send(("peak", _peak(session)))
            continue
        pv, source, lowering, timer = request
        if handle is not None:
            handle.building()
        conn.send(("stage", "build"))
        try:
            evaluator = Evaluator(lowering, DeviceBuilder(session, lowering),
                                  [_StageReporter(conn, handle), VerifyObserver(), TimingObserver(timer)])
            evaluation = evaluator.evaluate(pv, source)
        except Exception as exc:  # noqa: BLE001 - e.g. the device refused an allocation: that variant's error
            evaluation = Evaluation(pv.name, "ok", None, {})
            evaluation.fail("error", failure_reason(exc))
        if handle is not None:
            handle.release()
        conn.send(("done", evaluation))


def _peak(session: DeviceSession) -> dict:
    device = session.device
    try:
        return measure_peak(session.queue, device.max_compute_units, device.global_mem_size)
    except Exception as exc:  # noqa: BLE001 - a report without a measured peak, not a failed run
        return {"error": failure_reason(exc)}


def _signal_text(exitcode: int | None) -> str:
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


class _Worker:
    """One worker process and its end of the pipe."""

    def __init__(self, filter_string: str | None, gate: DeviceGate | None = None, spirv: bool = False):
        ctx = multiprocessing.get_context("spawn")
        self._stopping = threading.Lock()
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, filter_string, gate, spirv), daemon=True,
                                   name="xegemm-device-worker")
        self.process.start()
        child.close()
        if not self.conn.poll(WORKER_START_S):
            self.stop()
            raise RuntimeError(f"the device worker did not start within {WORKER_START_S:.0f} s")
        kind, detail = self.conn.recv()
        if kind != "ready":
            self.stop()
            raise RuntimeError(f"the device worker could not open the device: {detail}")

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        """Kill the process (it may be stuck in a build or a kernel) and reap it.  Safe to call twice, from two
        threads (Ctrl-C during ``tune --jobs``: the main thread stops the workers while a trial's thread finds
        its worker dead and stops it too)."""
        with self._stopping:
            if self.process.is_alive():
                self.process.kill()
            self.process.join(5)
            if not self.conn.closed:
                self.conn.close()


class IsolatedDeviceBuilder(Builder):
    """Builds, verifies and times each variant in a worker process (see the module's docstring).

    ``on_stage(stage, pid)`` is called when the worker with ``pid`` starts a variant's ``build`` or ``run``
    (tests use it to inject real faults at a known stage).  With a ``gate`` (:mod:`xegemm.evaluate.gate`)
    several builders share one device: timings are serial, and on a CPU no build overlaps a timing."""

    def __init__(self, filter_string: str | None, lowering: Lowering, limits: TimeLimits = TimeLimits(),
                 timer=None, on_stage=None, gate: DeviceGate | None = None, spirv: bool | None = None):
        self.filter_string = filter_string
        # workers start the CPU runtime with the AMX target when the run has SPIR-V variants (see _worker_main)
        self.spirv = lowering.source_kind == "spirv" if spirv is None else spirv
        self.gate = gate
        self.lowering = lowering
        self.limits = limits
        self.timer = timer
        self.on_stage = on_stage
        self.worker: _Worker | None = None

    def _ensure_worker(self) -> _Worker:
        if self.worker is None or not self.worker.process.is_alive():
            if self.worker is not None:
                self.worker.stop()
            self.worker = _Worker(self.filter_string, self.gate, self.spirv)
        return self.worker

    def close(self) -> None:
        """Stop the worker (if any)."""
        worker, self.worker = self.worker, None
        if worker is not None:
            worker.stop()

    def measure_peak(self, limit_s: float = PEAK_S) -> dict:
        """The device's measured peak (:func:`xegemm.evaluate.peak.measure_peak`) from the worker, or
        ``{"error": why}`` when it could not be measured (a worker that dies or overruns is killed)."""
        try:
            worker = self._ensure_worker()
            worker.conn.send(PEAK)
            if worker.conn.poll(limit_s):
                return worker.conn.recv()[1]
            why = f"did not finish within {limit_s:.0f} s"
        except (EOFError, OSError, RuntimeError) as exc:
            why = str(exc) if isinstance(exc, RuntimeError) else _signal_text(worker.process.exitcode)
        self.close()
        return {"error": f"the peak measurement failed: the worker process {why}"}

    def _lost(self, evaluation: Evaluation, stage: str, why: str) -> None:
        self.close()
        status = "timeout" if why.startswith("exceeded") else ("failed_build" if stage == "build" else "error")
        evaluation.extra["worker_lost"] = stage      # the machine's fault or the kernel's: never cached
        evaluation.fail(status, f"the worker process {why} during the {stage} (a fresh worker takes the next "
                                "variant)")

    def build(self, pv: PlannedVariant, source: str, evaluation: Evaluation) -> None:
        worker = self._ensure_worker()
        worker.conn.send((pv, source, self.lowering, self.timer))
        stage, limit = "start", self.limits.build_s
        deadline = time.monotonic() + limit
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._lost(evaluation, stage, f"exceeded the {stage} time limit of {limit:.0f} s and was killed")
                return None
            try:
                ready = worker.conn.poll(min(remaining, 0.5))
                message = worker.conn.recv() if ready else None
            except (EOFError, OSError):
                worker.process.join(5)
                self._lost(evaluation, stage, _signal_text(worker.process.exitcode))
                return None
            if message is None:
                if not worker.process.is_alive():
                    worker.process.join(5)
                    self._lost(evaluation, stage, _signal_text(worker.process.exitcode))
                    return None
                continue
            kind = message[0]
            if kind == "stage":
                stage = message[1]
                limit = self.limits.build_s if stage == "build" else self.limits.run_limit(pv.config)
                deadline = time.monotonic() + limit
                if self.on_stage:
                    self.on_stage(stage, worker.pid)
            elif kind == "done":
                done: Evaluation = message[1]
                for key in ("status", "reason", "time_ms", "gflops", "gbps", "max_abs_err", "max_rel_err",
                            "bad_elements", "build_s", "build_log"):
                    setattr(evaluation, key, getattr(done, key))
                evaluation.extra.update(done.extra)
                return None


def isolated_device_evaluator(filter_string: str | None, lowering: Lowering, log_dir=None,
                              limits: TimeLimits = TimeLimits(), timer=None,
                              observers: tuple[Observer, ...] = (), on_stage=None,
                              gate: DeviceGate | None = None, spirv: bool | None = None) -> Evaluator:
    """Like :func:`xegemm.evaluate.device.device_evaluator`, with every build and launch in a worker process;
    call ``evaluator.builder.close()`` when done.  ``spirv``: the variants include SPIR-V (coopmat) ones
    (default: when ``lowering`` is coopmat)."""
    chain: list[Observer] = [LogObserver(log_dir)] if log_dir is not None else []
    builder = IsolatedDeviceBuilder(filter_string, lowering, limits, timer, on_stage, gate, spirv)
    return Evaluator(lowering, builder, [*chain, *observers])
