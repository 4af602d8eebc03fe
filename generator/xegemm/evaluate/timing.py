"""Timing: device event profiling for kernels, wall clock for the numpy reference, measured interleaved.

Warm-up is by time and stability, never by a count alone (:func:`warm_up`): a kernel's first launches on the
CPU runtime are slower (its worker threads, pages, caches), for longer than a few launches of a small kernel,
so a count chosen by a config made the same kernel measure 110 or 154 GFLOP/s depending on that count.  A side
is launched until it has run :data:`WARMUP_MIN_MS` (of measured time, or of wall clock when a launch spends
longer outside the device than in it) and the medians of three successive windows agree within
:data:`WARMUP_AGREE` (Triton's ``do_bench`` warms up for a fixed 25 ms,
https://github.com/triton-lang/triton/blob/main/python/triton/testing.py; the stability test is added because no
fixed time fits every kernel), bounded by :data:`WARMUP_MAX_MS`; the config's ``profile.warmup`` is a minimum
count on top.  Each round of an interleaved measurement re-warms a side after the pause until a run is back at
that steady level (:func:`rewarm`).  The warm-up actually used is recorded with the timing
(:class:`Warmup`, ``time_ms["warmup"]``).  Then timed launches run until both a count and a minimum measured
time are reached; each launch is timed by its own profiling event (start to end on the device), and the
statistics keep min, median, max, mean and the coefficient of variation.  ``xegemm run``, ``xegemm tune``,
the benchmarks (``bench/``) and the peak measurement all time through this module, so a kernel has one speed
whichever tool reports it.

A ratio to a reference means something only if both sides saw the same machine: :func:`time_interleaved`
alternates one kernel launch and one reference run, so load from other processes (or from the runtime's own
threads) falls on both alike; :func:`measure_against_reference` re-measures once when either side's CV is
above :data:`CV_LIMIT` and flags the result if it stays high, and records the conditions (load average,
CPUs, BLAS core type).
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from dataclasses import dataclass, field, replace

import numpy as np

from xegemm.errors import XegemmError
from xegemm.library.parts import TimeStats
from xegemm.runtime.cpu_path import cpu_code_path
from xegemm.runtime.host import cpu_governor


@dataclass(frozen=True)
class Warmup:
    """The warm-up a measurement used: untimed runs before timing (``runs``, ``ms`` of their measured time),
    whether two successive windows' medians agreed (``settled``; False: stopped by :data:`WARMUP_MAX_MS` or
    :data:`WARMUP_MAX_RUNS`), the steady median it reached, and ``round_runs``: the runs that brought the side
    back to that level at the start of each round."""

    runs: int
    ms: float
    settled: bool
    steady_ms: float
    round_runs: int = 0

    def as_dict(self) -> dict:
        return {"runs": self.runs, "ms": self.ms, "settled": self.settled, "steady_ms": self.steady_ms,
                "round_runs": self.round_runs}


@dataclass(frozen=True)
class Timing:
    """Statistics over repeated runs, in milliseconds, and the warm-up before them (when known)."""

    samples_ms: tuple[float, ...]
    warmup: Warmup | None = field(default=None, compare=False)

    @property
    def min(self) -> float:
        return min(self.samples_ms)

    @property
    def median(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def max(self) -> float:
        return max(self.samples_ms)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples_ms)

    @property
    def cv(self) -> float:
        """Coefficient of variation (stdev / mean); 0 for a single sample."""
        if len(self.samples_ms) < 2 or self.mean == 0:
            return 0.0
        return statistics.stdev(self.samples_ms) / self.mean

    def as_dict(self) -> dict:
        """The statistics as results record them (``time_ms``: xegemm.library.parts.TimeStats)."""
        return TimeStats(min=self.min, median=self.median, max=self.max, mean=self.mean, cv=self.cv,
                         runs=len(self.samples_ms),
                         warmup=self.warmup.as_dict() if self.warmup is not None else None).to_dict()


def gemm_flops(m: int, n: int, k: int, batch: int = 1) -> int:
    """Floating-point (or integer) operations of a GEMM: 2 M N K per batch."""
    return 2 * m * n * k * batch


CV_LIMIT = 0.10          # a coefficient of variation above this re-measures once, then flags the result


def launch_ms(submit) -> float:
    """Launch once with ``submit()`` (a profiling-enabled dpctl event) and wait: the launch's device time in ms."""
    event = submit()
    event.wait()
    return (event.profiling_info_end - event.profiling_info_start) * 1e-6


TIMING_METHOD = ("warm-up by time and stability, rounds re-warmed, device events, median, "
                 "operands rotated below 16 MiB unless profile.rotate says otherwise")        # in cache keys
WARMUP_MIN_MS = 100.0    # warm up at least this much measured time (Triton's do_bench: 25 ms; a 1024^3 kernel
                         # of 14 ms a launch measured 30 % slower after 2 warm-up launches than after 10)
WARMUP_MAX_MS = 2000.0   # and stop at this much, settled or not (the config's minimum count may add more)
WARMUP_MAX_RUNS = 5000   # or at this many runs (a kernel of microseconds)
WARMUP_WINDOW = 3        # a window has at least this many runs
WARMUP_WINDOW_MS = 10.0  # and this much measured time
WARMUP_AGREE = 0.05      # the medians of the last WARMUP_AGREEING windows this close: warmed up
WARMUP_AGREEING = 3      # (three, not two: a slow drift moves two neighbouring windows less than 5 %)
REWARM_MAX_MS = 100.0    # a round's re-warm stops here even if no run came back to the steady level
ROUND_MIN_MS = 20.0      # each round times a side for at least this much measured time
ROUNDS = 4               # rounds per side of an interleaved measurement
WARMUP_BOUND_MS = WARMUP_MAX_MS + 2 * ROUNDS * REWARM_MAX_MS   # the most warming one side of one measurement
                                                               # (two attempts) takes beyond its minimum count
SETTLE_S = 0.05  # pause before each round: the other side's threads stop spinning (OpenBLAS and the OpenCL
                 # runtime's workers busy-wait after their work; on 2 cores they would steal the next round's)
PACE_VARIABLE = "XEGEMM_PACE"   # e.g. "warmup_ms=10,round_ms=2,settle_ms=5": shorter floors, for smoke runs


@dataclass(frozen=True)
class Pace:
    """The floors of the timing loops: a side's warm-up runs at least ``warmup_ms`` (:data:`WARMUP_MIN_MS`), each
    round times a side at least ``round_ms`` (:data:`ROUND_MIN_MS`) after a pause of ``settle_ms``
    (:data:`SETTLE_S`), and a round's re-warm stops at the smaller of ``warmup_ms`` and :data:`REWARM_MAX_MS`.
    The defaults are the method the measurements in docs/benchmarks.md were taken with; ``XEGEMM_PACE`` sets
    others for a whole process (a smoke run, the test suite: timings whose value is not the point), and a
    measurement taken so records it (``conditions.timing_pace``) and caches apart (xegemm.tune.cache)."""

    warmup_ms: float = WARMUP_MIN_MS
    round_ms: float = ROUND_MIN_MS
    settle_ms: float = SETTLE_S * 1e3

    @property
    def rewarm_ms(self) -> float:
        return min(REWARM_MAX_MS, self.warmup_ms)

    @property
    def is_default(self) -> bool:
        return self == Pace()

    def describe(self) -> str:
        return f"warmup_ms={self.warmup_ms:g},round_ms={self.round_ms:g},settle_ms={self.settle_ms:g}"

    @classmethod
    def parse(cls, text: str) -> "Pace":
        """``warmup_ms=10,round_ms=2,settle_ms=5`` (any of the three; the others keep their defaults)."""
        values = {}
        for item in filter(None, (part.strip() for part in text.split(","))):
            name, _, value = item.partition("=")
            if name.strip() not in ("warmup_ms", "round_ms", "settle_ms"):
                raise XegemmError(f"{PACE_VARIABLE}: {item!r} is not warmup_ms=, round_ms= or settle_ms=<ms>")
            try:
                values[name.strip()] = float(value)
            except ValueError:
                raise XegemmError(f"{PACE_VARIABLE}: {item!r}: {value!r} is not a number of milliseconds") from None
            if not 0 <= values[name.strip()] <= 60_000:
                raise XegemmError(f"{PACE_VARIABLE}: {item!r}: give 0 to 60000 ms")
        return cls(**values)


def current_pace() -> Pace:
    """The pace of this process: ``XEGEMM_PACE`` if set, else the defaults."""
    text = os.environ.get(PACE_VARIABLE, "").strip()
    return Pace.parse(text) if text else Pace()


def warm_up(sample, min_runs: int = 0, pace: Pace | None = None) -> Warmup:
    """Run ``sample()`` (one run; returns its time in ms) untimed until it is warm: at least ``min_runs`` runs
    and :data:`WARMUP_MIN_MS` of measured time, and the medians of the last :data:`WARMUP_AGREEING` windows (each at least
    :data:`WARMUP_WINDOW` runs and :data:`WARMUP_WINDOW_MS`) within :data:`WARMUP_AGREE` of each other; or
    :data:`WARMUP_MAX_MS` / :data:`WARMUP_MAX_RUNS` reached (``settled`` False).  The measured time decides,
    so a side's own duration is what counts, or the wall clock when it is longer (:func:`_elapsed`).  ``pace``
    (default :func:`current_pace`) sets the floor in place of :data:`WARMUP_MIN_MS` (and windows of at most a
    third of it)."""
    floor = (pace or current_pace()).warmup_ms
    window_ms = min(WARMUP_WINDOW_MS, floor / WARMUP_AGREEING)    # a shorter floor: shorter windows as well
    runs, spent, medians, start = 0, 0.0, [], time.perf_counter()
    while True:
        window: list[float] = []
        window_start = time.perf_counter()
        while len(window) < WARMUP_WINDOW or _elapsed(sum(window), window_start) < window_ms:
            window.append(sample())
            if runs + len(window) >= WARMUP_MAX_RUNS:
                break
        runs, spent = runs + len(window), spent + sum(window)
        medians.append(statistics.median(window))
        last = medians[-WARMUP_AGREEING:]
        settled = len(last) == WARMUP_AGREEING and max(last) - min(last) <= WARMUP_AGREE * min(last)
        elapsed = _elapsed(spent, start)
        if runs >= min_runs and ((settled and elapsed >= floor) or elapsed >= WARMUP_MAX_MS
                                 or runs >= WARMUP_MAX_RUNS):
            return Warmup(runs, spent, settled, medians[-1])


def _elapsed(measured_ms: float, since: float) -> float:
    """The time a loop has spent for the floors and caps of warming and timing: the runs' measured time, or
    the wall clock since ``since`` (a perf_counter) when that is longer.  A kernel of microseconds spends most
    of each launch outside the device (submission and waiting): counting its device time alone, 100 ms of
    warm-up took 5,000 launches and over a second, for a median that 500 launches give as well."""
    return max(measured_ms, (time.perf_counter() - since) * 1e3)


def rewarm(sample, steady_ms: float, pace: Pace | None = None) -> int:
    """After a pause, run ``sample()`` untimed until a run is back at the steady level of :func:`warm_up` (within
    :data:`WARMUP_AGREE`), at least once and for at most :data:`REWARM_MAX_MS` (``Pace.rewarm_ms``); returns the
    runs it took."""
    cap = (pace or current_pace()).rewarm_ms
    runs, spent, start = 0, 0.0, time.perf_counter()
    while True:
        ms = sample()
        runs, spent = runs + 1, spent + ms
        if ms <= steady_ms * (1 + WARMUP_AGREE) or _elapsed(spent, start) >= cap:
            return runs


def _timed_runs(sample, at_least: int, min_ms: float, max_runs: int) -> list[float]:
    """Run ``sample()`` at least ``at_least`` times and until ``min_ms`` of measured time, or of wall clock
    when that is longer (:func:`_elapsed`), at most ``max_runs``."""
    out: list[float] = []
    start = time.perf_counter()
    while len(out) < max(1, at_least) or (_elapsed(sum(out), start) < min_ms and len(out) < max_runs):
        out.append(sample())
    return out


def time_kernel(submit, warmup: int, repeats: int, min_time_ms: float = 0.0, max_runs: int = 100_000) -> Timing:
    """Time ``submit()`` (which returns a profiling-enabled dpctl event) on the device, on its own: warmed up
    (:func:`warm_up`, at least ``warmup`` runs), then at least ``repeats`` timed launches, until
    ``min_time_ms`` of device time."""
    sample = lambda: launch_ms(submit)    # noqa: E731
    warm = warm_up(sample, warmup)
    return Timing(tuple(_timed_runs(sample, repeats, min_time_ms, max_runs)), warm)


def time_rounds(sides: dict, rounds: int, runs: int, min_warmup: int = 0, min_round_ms: float = ROUND_MIN_MS,
                max_runs: int = 100_000) -> dict[str, Timing]:
    """Time several sides in the same rounds (for comparing variants with each other and with references).

    Every side is first warmed up (:func:`warm_up`, at least ``min_warmup`` runs).  Then, ``rounds`` times,
    each side in turn gets a pause of :data:`SETTLE_S`, is re-warmed to its steady level (:func:`rewarm`) and
    timed for at least ``runs`` runs and ``min_round_ms`` of measured time.  ``sides`` maps a name to a function
    that runs that side once and returns the run's time in ms; returns each side's :class:`Timing`."""
    pace = current_pace()
    warm = {name: warm_up(sample, min_warmup, pace) for name, sample in sides.items()}
    again = {name: 0 for name in sides}
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, sample in sides.items():
            time.sleep(pace.settle_ms / 1e3)
            again[name] += rewarm(sample, warm[name].steady_ms, pace)
            times[name] += _timed_runs(sample, runs, min_round_ms, max(1, max_runs // rounds))
    return {name: Timing(tuple(times[name]), replace(warm[name], round_runs=again[name]))
            for name in sides}


def time_interleaved(sample_kernel, sample_reference, warmup: int, repeats: int,
                     min_time_ms: float = 0.0, max_runs: int = 100_000, rounds: int = ROUNDS,
                     warmed: tuple[Warmup, Warmup] | None = None, pace: Pace | None = None) -> tuple[Timing, Timing]:
    """Time a kernel and a reference in alternating rounds: a round of kernel runs, a round of reference
    runs, and so on, ``rounds`` rounds each.  Both sides are warmed up first (:func:`warm_up`; ``warmup`` is
    the kernel's minimum count).  Each round starts after a pause of :data:`SETTLE_S` and re-warms its side
    (:func:`rewarm`: the other side has just evicted this side's caches, and its threads may still spin); the
    kernel's round has at least repeats / rounds timed runs and max(min_time_ms / rounds,
    :data:`ROUND_MIN_MS`) of measured time, the reference's round as many runs as the kernel's (fewer if they
    would take longer than the kernel's round).

    Each ``sample_*()`` runs its side once and returns the run's time in ms.  Load that comes and goes falls
    on both sides alike; alternating single runs instead made each side run with caches and threads the
    other had just disturbed (a 1024^3 kernel measured 2x slower).  Returns (kernel, reference) timings, each
    with the :class:`Warmup` it used.  ``warmed``: the (kernel, reference) warm-ups of an earlier measurement of
    the same sides just before (a second attempt): the sides are warm, each round's re-warm suffices.  ``pace``
    (default :func:`current_pace`): the floors of the warm-up, the rounds and the pauses.
    """
    pace = pace or current_pace()
    if warmed is None:
        warm_kernel, warm_reference = warm_up(sample_kernel, warmup, pace), warm_up(sample_reference, 0, pace)
    else:
        warm_kernel, warm_reference = (replace(w, round_runs=0) for w in warmed)
    again_kernel = again_reference = 0
    per_round = max(1, -(-repeats // rounds))
    kernel: list[float] = []
    reference: list[float] = []
    for _ in range(rounds):
        time.sleep(pace.settle_ms / 1e3)
        again_kernel += rewarm(sample_kernel, warm_kernel.steady_ms, pace)
        runs = _timed_runs(sample_kernel, per_round, max(min_time_ms / rounds, pace.round_ms),
                           max(1, max_runs // rounds))
        kernel += runs
        time.sleep(pace.settle_ms / 1e3)
        again_reference += rewarm(sample_reference, warm_reference.steady_ms, pace)
        spent, count = 0.0, 0
        while count < len(runs) and (count < per_round or spent < sum(runs)):
            reference.append(sample_reference())
            spent, count = spent + reference[-1], count + 1
    return (Timing(tuple(kernel), replace(warm_kernel, round_runs=again_kernel)),
            Timing(tuple(reference), replace(warm_reference, round_runs=again_reference)))


# environment variables that decide how many threads the device runtime and the reference BLAS use, and
# which code path they take
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_CORETYPE",
                    "OPENBLAS_L2_SIZE", "DPCPP_CPU_NUM_CUS", "CL_CONFIG_CPU_TBB_NUM_WORKERS",
                    "CL_CONFIG_CPU_TARGET_ARCH", "ONEAPI_DEVICE_SELECTOR")


def conditions(rotation: Rotation | None = None, pace: Pace | None = None) -> dict:
    """What else ran and how many threads could run, now: load average, CPUs, the CPU runtime's code path
    (xegemm.runtime.cpu_path), thread and CPU-target settings, the CPU frequency governor (None: not readable
    here), the timing method (:data:`TIMING_METHOD`) and, given, the buffers it timed (:class:`Rotation`) and a
    pace other than the default (:class:`Pace`)."""
    return {"loadavg": list(os.getloadavg()), "cpu_count": os.cpu_count(), "cpu_code_path": cpu_code_path().name,
            "affinity_cpus": len(os.sched_getaffinity(0)), "machine": platform.machine(),
            "threads_env": {k: os.environ[k] for k in THREAD_VARIABLES if k in os.environ},
            "cpu_governor": cpu_governor(), "timing_method": TIMING_METHOD,
            **({"timing_buffers": rotation.describe()} if rotation is not None else {}),
            **({"timing_pace": pace.describe()} if pace is not None and not pace.is_default else {})}


# ---- rotating buffers ------------------------------------------------------------------------------------
#
# A problem whose operands fit in the last-level cache is timed from that cache when every launch reads the
# same buffers: its second launch finds A and B where the first left them, which no layer of a model does.  As
# NVIDIA's cutlass_profiler does (``--workspace-count``, 0 = derived from ``--llc-capacity``: several copies of
# the operands, one per launch in turn, https://github.com/NVIDIA/cutlass/blob/main/media/docs/cpp/profiler.md),
# a problem below :data:`ROTATE_BELOW_BYTES` is timed over copies of its operands whose total is at least
# :data:`ROTATE_LLC_MULTIPLE` times the last-level cache, each launch on the next copy.  ``profile.rotate``
# (auto | true | false) decides; the buffers used are recorded with the conditions (``timing_buffers``).

ROTATE_LLC_MULTIPLE = 2                # the copies' total: at least this many times the last-level cache
ROTATE_BELOW_BYTES = 16 << 20          # auto: rotate a problem whose buffers are smaller than this.  Measured on
                                       # the 2-core Xeon VM (docs/benchmarks.md "Rotating buffers", bench.rotation):
                                       # rotating made launches 1.13-1.45x slower up to 4.5 MiB, was within the
                                       # noise at 6-8 MiB and made no difference from 32 MiB up
ROTATE_MAX_COPIES = 256                # never more copies than this
ROTATE_MAX_FRACTION = 8                # nor more bytes in all than 1/8 of the device's global memory


@dataclass(frozen=True)
class Rotation:
    """The buffers a measurement times: ``copies`` sets of ``bytes_each`` bytes, one launch on each in turn (1:
    the same buffers every launch)."""

    copies: int = 1
    bytes_each: int = 0

    def describe(self) -> str:
        if self.copies <= 1:
            return "same buffers"
        size = (f"{self.bytes_each / (1 << 20):.1f} MiB" if self.bytes_each >= 1 << 20
                else f"{self.bytes_each / (1 << 10):.1f} KiB")
        return f"rotating {self.copies} buffers of {size}"


def rotation_for(working_bytes: int, llc_bytes: int, setting: str = "auto", memory_bytes: int = 0) -> Rotation:
    """How many copies of a problem's buffers (``working_bytes`` in all) to time over: ``setting`` "off" -> one;
    "on", or "auto" below :data:`ROTATE_BELOW_BYTES` -> enough copies for :data:`ROTATE_LLC_MULTIPLE` x the
    last-level cache, at least two, at most :data:`ROTATE_MAX_COPIES` and 1 / :data:`ROTATE_MAX_FRACTION` of
    ``memory_bytes`` (the device's global memory; 0: unknown, no such bound)."""
    working = max(1, int(working_bytes))
    if setting == "off" or (setting == "auto" and working >= ROTATE_BELOW_BYTES) or llc_bytes <= 0:
        return Rotation(1, working)
    copies = max(2, -(-ROTATE_LLC_MULTIPLE * llc_bytes // working))
    if memory_bytes > 0:
        copies = min(copies, memory_bytes // ROTATE_MAX_FRACTION // working)
    copies = min(copies, ROTATE_MAX_COPIES)
    return Rotation(copies if copies >= 2 else 1, working)


class NumpyReference:
    """numpy's float32 matmul of a problem: the reference every variant is measured against, interleaved."""

    def __init__(self, m: int, n: int, k: int, batch: int = 1, seed: int = 0, rotation: Rotation | None = None):
        rng = np.random.default_rng(seed)
        self.a = rng.standard_normal((batch, m, k), dtype=np.float32)
        self.b = rng.standard_normal((batch, k, n), dtype=np.float32)
        self.flops = gemm_flops(m, n, k, batch)
        self.rotation = rotation or Rotation(1, self.working_bytes(m, n, k, batch))
        # the same timing method as the kernel's: copies of A, B and the product, one run on each in turn
        self._sets = [(self.a, self.b, np.empty((batch, m, n), np.float32))]
        self._sets += [(self.a.copy(), self.b.copy(), np.empty((batch, m, n), np.float32))
                       for _ in range(self.rotation.copies - 1)]
        self._next = 0

    @staticmethod
    def working_bytes(m: int, n: int, k: int, batch: int = 1) -> int:
        """The bytes one run touches: A, B and the product, float32."""
        return 4 * batch * (m * k + k * n + m * n)

    def sample(self) -> float:
        """Run the matmul once (on the next set of buffers); its wall-clock time in ms."""
        a, b, out = self._sets[self._next]
        self._next = (self._next + 1) % len(self._sets)
        t0 = time.perf_counter()
        np.matmul(a, b, out=out)
        return (time.perf_counter() - t0) * 1e3

    def record(self, timing: Timing) -> dict:
        """The reference as results record it."""
        return {"provider": "numpy", "dtype": "f32", "numpy": np.__version__,
                "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"), "time_ms": timing.as_dict(),
                "gflops": self.flops / (timing.median * 1e6), "timing_buffers": self.rotation.describe()}


def measure_against_reference(sample_kernel, reference: NumpyReference, warmup: int, repeats: int,
                              min_time_ms: float = 0.0, rotation: Rotation | None = None,
                              pace: Pace | None = None) -> tuple[Timing, dict]:
    """Time a kernel interleaved with the reference; once more if either CV exceeds :data:`CV_LIMIT`.

    Returns the kernel's timing and a record: the reference (as :meth:`NumpyReference.record`, measured in
    the same rounds), ``interleaved: True``, ``high_cv`` (still above the limit after the second try), the
    number of ``attempts`` and the :func:`conditions` (with ``rotation``: the kernel's buffers).
    """
    pace = pace or current_pace()
    before = conditions(rotation, pace)
    best, warmed = None, None
    for attempt in (1, 2):
        kernel, ref = time_interleaved(sample_kernel, reference.sample, warmup, repeats, min_time_ms, warmed=warmed,
                                       pace=pace)
        warmed = (kernel.warmup, ref.warmup)
        worst = max(kernel.cv, ref.cv)
        if best is None or worst < best[2]:
            best = (kernel, ref, worst)
        if worst <= CV_LIMIT:
            break
    kernel, ref, worst = best
    record = {**reference.record(ref), "interleaved": True, "high_cv": worst > CV_LIMIT, "attempts": attempt,
              "conditions": {**before, "loadavg_after": conditions()["loadavg"]}}
    return kernel, record


def time_numpy_reference(m: int, n: int, k: int, batch: int = 1, repeats: int = 5, seed: int = 0) -> dict:
    """Wall-clock time of numpy's float32 matmul of the same problem on its own (not interleaved: for a
    problem none of whose variants was timed), with which BLAS build it ran."""
    return time_reference(NumpyReference(m, n, k, batch, seed), repeats)


def time_reference(reference: NumpyReference, repeats: int = 5) -> dict:
    """:func:`time_numpy_reference` of any reference (e.g. a grouped problem's, one matmul per group)."""
    warm = warm_up(reference.sample)
    timing = Timing(tuple(reference.sample() for _ in range(max(1, repeats))), warm)
    return {**reference.record(timing), "interleaved": False, "conditions": conditions()}
