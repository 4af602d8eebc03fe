"""The references xegemm's kernels are compared with, each as one :class:`Reference`: set up on a problem,
checked once, then ``sample()`` runs it once and returns the run's time in ms.

- ``numpy``: numpy's float32 matmul in this process (OpenBLAS as the environment configures it);
- ``plain_sgemm``: the plain sub-group SGEMM (:mod:`bench.plain_sgemm`) on xegemm's device and runtime path;
- ``clblast``: CLBlast's SGEMM on the same OpenCL device (its own context), with tuned parameters if given,
  called in whichever of two equivalent forms (row-major, or column-major with A and B swapped) runs faster;
- ``onemkl``: oneMKL through dpnp, in float32 or float16, on the same SYCL device.

A reference that cannot run here raises :class:`ReferenceSkipped` with the reason; one that computes a wrong
result raises :class:`WrongResult`.  Used by the pytest-benchmark suite (``make bench``) and by the goals run
(``make bench-goals``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from bench.blas_worker import blas_info, operands, timed_matmul
from bench.clblast import CALLS, CLBlastGemm, DeviceNotFound, find_clblast
from bench.plain_sgemm import PlainSgemm
from bench.provision import DPNP_OPT_IN
from xegemm.evaluate.timing import launch_ms
from xegemm.runtime.devices import dpctl_module


CALL_TRIALS = 3     # runs of each CLBlast call form before choosing the faster


class ReferenceSkipped(Exception):
    """The reference cannot run here; the message says why."""


class WrongResult(AssertionError):
    """The reference computed a wrong result."""


@dataclass
class Reference:
    """A reference set up on one problem: ``sample()`` runs it once and returns the run's time in ms."""

    key: str
    label: str
    sample: Callable[[], float]
    timer: str
    details: dict = field(default_factory=dict)
    close: Callable[[], None] = lambda: None


def check_f32_gemm(c: np.ndarray, a: np.ndarray, b: np.ndarray, what: str) -> None:
    """Raise :class:`WrongResult` unless C = A B within xegemm's bound |C - ref| <= 2 (K + 1) u_f32 (|A| |B|)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    err = np.abs(c.astype(np.float64) - np.matmul(a64, b64))
    tol = 2 * (a.shape[-1] + 1) * 2.0 ** -24 * np.matmul(np.abs(a64), np.abs(b64))
    if not (err <= tol).all():
        raise WrongResult(f"{what} computed a wrong result: {(err > tol).sum()} elements beyond 2 (K+1) u |A||B|, "
                          f"max abs error {err.max():.3g}")


def check_f16_gemm(c: np.ndarray, a: np.ndarray, b: np.ndarray, what: str) -> None:
    """Raise :class:`WrongResult` unless C is A B to within 1 % (relative Frobenius norm): a float16 GEMM's
    accumulation order and type are the library's, so only a gross error is a wrong result."""
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    rel = np.linalg.norm(c.astype(np.float64) - ref) / max(np.linalg.norm(ref), 1e-30)
    if not rel <= 0.01:
        raise WrongResult(f"{what} computed a wrong result: relative Frobenius error {rel:.3g} > 1 %")


def _seconds_to_ms(fn: Callable[[], None]) -> Callable[[], float]:
    def once() -> float:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    return once


def numpy_f32(problem) -> Reference:
    """numpy's float32 matmul in this process, with which BLAS library, version and core type it runs."""
    a, b = operands(problem.m, problem.n, problem.k, problem.batch)
    np.matmul(a, b)     # loads and initialises the BLAS library before it is described
    return Reference("numpy", "numpy float32 matmul in this process",
                     lambda: timed_matmul(a, b) * 1e3, "host perf_counter around one np.matmul", blas_info())


def plain_sgemm(queue, device_filter: str, problem) -> Reference:
    """The plain sub-group SGEMM on ``queue`` (xegemm's device and runtime path), timed by profiling events."""
    a, b = operands(problem.m, problem.n, problem.k, problem.batch)
    gemm = PlainSgemm(queue, a, b)
    gemm.submit().wait()
    check_f32_gemm(gemm.result(), a, b, "the plain sub-group SGEMM")
    return Reference("plain_sgemm", f"plain sub-group SGEMM (bench/plain_sgemm.py) on {device_filter}",
                     lambda: launch_ms(gemm.submit), "device profiling events, start to end of each launch")


def clblast_sgemm(device_info, problem, tuning: dict | None = None) -> Reference:
    """CLBlast's SGEMM on the same OpenCL device, in its own context; ``tuning`` (from
    :func:`bench.clblast_tuning.tuned_parameters`) overrides its Xgemm parameters when it holds any."""
    if find_clblast() is None:
        raise ReferenceSkipped("CLBlast is not installed (Debian package libclblast1)")
    a, b = operands(problem.m, problem.n, problem.k, problem.batch)
    try:
        gemm = CLBlastGemm(device_info.name, device_info.device_type, a, b)
    except DeviceNotFound as exc:
        raise ReferenceSkipped(f"CLBlast needs an OpenCL device: {exc}") from None
    parameters = (tuning or {}).get("parameters")
    timed = {}
    try:
        if parameters:
            gemm.override("Xgemm", parameters)
        for call in CALLS:      # the same product asked two ways: keep the one CLBlast runs faster here
            gemm.call = call
            gemm.run()          # CLBlast compiles its kernels for the device on first use
            check_f32_gemm(gemm.result(), a, b, f"CLBlastSgemm ({call})")
            timed[call] = min(_seconds_to_ms(gemm.run)() for _ in range(CALL_TRIALS))
    except BaseException:
        gemm.close()
        raise
    gemm.call = min(timed, key=timed.get)
    state = "tuned Xgemm parameters" if parameters else "its built-in (untuned) parameters for this device"
    return Reference("clblast", f"CLBlast {gemm.version} SGEMM on {device_info.filter_string} ({state}; called "
                     f"{gemm.call})", _seconds_to_ms(gemm.run), "host perf_counter from the CLBlastSgemm call to clFinish",
                     {"library": gemm.library, "version": gemm.version, "parameters": parameters,
                      "tuning": (tuning or {}).get("status", "untuned defaults"), "call": gemm.call,
                      "call_trial_ms": timed}, gemm.close)


def onemkl_dpnp(sycl_device, device_info, problem, dtype: str = "float32") -> Reference:
    """oneMKL's GEMM through ``dpnp.matmul`` in ``dtype`` (float32 or float16) on the same SYCL device."""
    try:
        import dpnp  # noqa: PLC0415 - optional, about 1.2 GB
    except ImportError as exc:
        raise ReferenceSkipped(f"dpnp is not installed ({exc}); {DPNP_OPT_IN}") from None
    a, b = (x.astype(dtype) for x in operands(problem.m, problem.n, problem.k, problem.batch))
    queue = dpctl_module().SyclQueue(sycl_device)
    da, db = dpnp.asarray(a, sycl_queue=queue), dpnp.asarray(b, sycl_queue=queue)
    check = check_f16_gemm if dtype == "float16" else check_f32_gemm
    check(dpnp.asnumpy(dpnp.matmul(da, db)), a, b, f"dpnp.matmul ({dtype})")
    return Reference("onemkl", f"oneMKL {dtype} GEMM through dpnp {dpnp.__version__} on {device_info.filter_string}",
                     _seconds_to_ms(lambda: dpnp.matmul(da, db).sycl_queue.wait()),
                     "host perf_counter from the dpnp.matmul call to the queue's wait", {"dtype": dtype})
