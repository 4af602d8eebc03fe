"""The chosen configs' kernels against references measured on the same problems in the same run.

Every variant of each config (``configs/default.yaml`` unless ``--bench-config`` says otherwise), at each
problem (its own, or those of ``--bench-shapes``), is built and verified by the pipeline (``run_variant``) and
only then timed, with device profiling events, as a pytest-benchmark.  Per problem, numpy's float32 matmul is
measured twice (in this process with the environment as it is, and in a child process without the machine's
OpenBLAS overrides), then the references of :mod:`bench.references`: a plain sub-group SGEMM kernel on the same
device, CLBlast's SGEMM on the same OpenCL device (with the parameters a ``make bench-goals`` tuned for it, if
any), and oneMKL through dpnp when installed.  The last benchmark of each problem
times its fastest verified variant again and stores xegemm GFLOP/s / reference GFLOP/s in its ``extra_info``.
Performance is measured, never asserted: a benchmark fails only when a kernel does not build or verify, or a
reference computes a wrong result.
"""

from __future__ import annotations

import ctypes

import pytest
from xegemm.jobs.pipeline import run_variant
from xegemm.evaluate.timing import gemm_flops

from bench.clblast import find_clblast, loaded_library_path
from bench.clblast_tuning import tuned_parameters
from bench.clocks import MeasuredClock, event_seconds
from bench.fair_numpy import FairNumpyProcess
from bench.references import ReferenceSkipped, WrongResult, clblast_sgemm, numpy_f32, onemkl_dpnp, plain_sgemm
from bench.report import build_comparison, comparison_lines, reference_record

COMPARE_GROUP = "best xegemm vs references, per problem"

VARIANT_ROUNDS = 20     # timed launches per variant (at least the config's profile.repeats)
BEST_ROUNDS = 50        # timed launches of the best variant
NUMPY_ROUNDS, NUMPY_WARMUP = 200, 10
LIBRARY_ROUNDS = 20     # the plain SGEMM, CLBlast, dpnp

DEVICE_EVENTS = MeasuredClock("device_profiling_events")
HOST_CLOCK = MeasuredClock("host_perf_counter")
CHILD_CLOCK = MeasuredClock("perf_counter_in_reference_process")


def refs(ledger: dict, problem) -> dict:
    """The references measured for one problem so far."""
    return ledger.setdefault("references", {}).setdefault(problem.label, {})


def flops(problem) -> int:
    return gemm_flops(problem.m, problem.n, problem.k, problem.batch)


def run_benchmarked(pv, session, lowering, benchmark, rounds: int):
    """Build and verify one variant with ``run_variant``, then time it with ``benchmark.pedantic``.

    ``run_variant`` times a kernel only after it verified, with the timer it is given: here one that drives
    the same warm-up as every xegemm timing (by time and stability, at least the config's count), then
    ``max(profile.repeats, rounds)`` launches through pytest-benchmark on device event times.
    """
    timings = []

    def pedantic_time_kernel(submit, warmup, repeats, min_time_ms=0.0, max_runs=100_000):
        timing = DEVICE_EVENTS.measure(lambda: event_seconds(submit()), max(repeats, rounds), warmup, benchmark)
        timings.append(timing)
        return timing

    result = run_variant(pv, session, lowering, timer=pedantic_time_kernel)
    if result.status == "rejected":
        pytest.skip(f"rejected for the {lowering[0]} lowering (no kernel): {result.reason}")
    if result.status != "ok":
        pytest.fail(f"{pv.name} did not verify: {result.status}: {result.reason}", pytrace=False)
    if not timings:
        pytest.fail("run_variant verified the kernel but did not time it with the given timer", pytrace=False)
    return result, timings[0]


def variant_record(result, timing) -> dict:
    """What a benchmark keeps about a verified, timed variant."""
    return {"kernel": result.name, "verified": True, "max_abs_err": result.max_abs_err,
            "max_rel_err": result.max_rel_err, "gflops": result.gflops, "time_ms": timing.as_dict(),
            "timer": "device profiling events, start to end of each launch", "build_s": result.build_s,
            "params": result.params}


def skip_reference(found: dict, key: str, label: str, reason: str):
    found[key] = {"label": label, "skipped": reason}
    pytest.skip(reason)


def measure_reference(ledger, problem, key: str, make, clock, rounds: int, warmup: int, benchmark) -> dict:
    """Set up a :class:`bench.references.Reference` with ``make()`` and time it through ``benchmark``; a
    reference that cannot run here is skipped with its reason, one that computes a wrong result fails."""
    found = refs(ledger, problem)
    try:
        ref = make()
    except ReferenceSkipped as exc:
        skip_reference(found, key, key, str(exc))
    except WrongResult as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        timing = clock.measure(lambda: ref.sample() * 1e-3, rounds, warmup, benchmark)
    finally:
        ref.close()
    found[key] = record = reference_record(ref.label, timing, flops(problem), ref.timer, **ref.details)
    benchmark.extra_info.update(record)
    return record


# ---- xegemm: every variant of every chosen config, at every chosen problem ------------------------------

@pytest.mark.benchmark(group="xegemm variants", timer=DEVICE_EVENTS)
def test_variant(case_variant, benchmark, device_session, lowering, ledger):
    case, pv = case_variant
    benchmark.group = f"xegemm: variants of {case.label}"
    if pv.plan is None:
        pytest.skip(f"rejected by the planner (no kernel): {pv.reason}")
    result, timing = run_benchmarked(pv, device_session, lowering, benchmark, VARIANT_ROUNDS)
    ledger.setdefault("variants", {}).setdefault(case.shape.label, {})[(case.config.name, pv.name)] = (pv, result)
    benchmark.extra_info.update(variant_record(result, timing), config=str(case.path), problem=case.shape.label)


# ---- references on the same problem ------------------------------------------------------------------

def measure_numpy_in_process(problem, benchmark=None) -> dict:
    ref = numpy_f32(problem)
    timing = HOST_CLOCK.measure(lambda: ref.sample() * 1e-3, NUMPY_ROUNDS, NUMPY_WARMUP, benchmark)
    return reference_record(f"{ref.label}, environment as it is", timing, flops(problem), ref.timer, **ref.details)


def measure_numpy_fair(problem, benchmark=None) -> dict:
    with FairNumpyProcess(problem.m, problem.n, problem.k, problem.batch) as child:
        timing = CHILD_CLOCK.measure(child.run_once, NUMPY_ROUNDS, NUMPY_WARMUP, benchmark)
    return reference_record(f"numpy float32 matmul in a child process with {' and '.join(child.unset)} unset",
                            timing, flops(problem), "perf_counter around one np.matmul inside the child",
                            unset_in_child=child.unset, **child.info)


@pytest.mark.benchmark(group=COMPARE_GROUP, timer=HOST_CLOCK)
def test_numpy_in_process(problem, benchmark, ledger):
    refs(ledger, problem)["numpy_in_process"] = record = measure_numpy_in_process(problem, benchmark)
    benchmark.extra_info.update(record)


@pytest.mark.benchmark(group=COMPARE_GROUP, timer=CHILD_CLOCK)
def test_numpy_fair(problem, benchmark, ledger):
    refs(ledger, problem)["numpy_fair"] = record = measure_numpy_fair(problem, benchmark)
    benchmark.extra_info.update(record)


@pytest.mark.benchmark(group=COMPARE_GROUP, timer=DEVICE_EVENTS)
def test_plain_subgroup_sgemm(problem, benchmark, ledger, device_session, device_info):
    measure_reference(ledger, problem, "plain_sgemm",
                      lambda: plain_sgemm(device_session.queue, device_info.filter_string, problem),
                      DEVICE_EVENTS, LIBRARY_ROUNDS, 1, benchmark)


@pytest.fixture(scope="session")
def clblast_tuning(device_info) -> dict | None:
    """CLBlast's parameters tuned by an earlier ``make bench-goals`` for this device and code path, if any
    (this suite does not run the tuner)."""
    if find_clblast() is None:
        return None
    ctypes.CDLL(find_clblast())
    return tuned_parameters(device_info, loaded_library_path("libclblast"), run=False)


@pytest.mark.benchmark(group=COMPARE_GROUP, timer=HOST_CLOCK)
def test_clblast_sgemm(problem, benchmark, ledger, device_info, clblast_tuning):
    measure_reference(ledger, problem, "clblast", lambda: clblast_sgemm(device_info, problem, clblast_tuning),
                      HOST_CLOCK, LIBRARY_ROUNDS, 1, benchmark)


@pytest.mark.benchmark(group=COMPARE_GROUP, timer=HOST_CLOCK)
def test_onemkl_dpnp_matmul(problem, benchmark, ledger, sycl_device, device_info):
    measure_reference(ledger, problem, "onemkl_dpnp", lambda: onemkl_dpnp(sycl_device, device_info, problem),
                      HOST_CLOCK, LIBRARY_ROUNDS, 1, benchmark)


# ---- per problem, the best variant against every reference -----------------------------------------

@pytest.mark.benchmark(group=COMPARE_GROUP, timer=DEVICE_EVENTS)
def test_best_variant_vs_references(problem, benchmark, bench_cases, device_session, device_info, lowering,
                                    ledger):
    variants = ledger.get("variants", {}).get(problem.label)
    if not variants:   # the variant benchmarks were deselected: run the sweeps with the pipeline's own timing
        variants = {(c.config.name, pv.name): (pv, run_variant(pv, device_session, lowering))
                    for c in bench_cases if c.shape == problem for pv in c.variants if pv.plan is not None}
    verified = [(pv, r) for pv, r in variants.values() if r.status == "ok"]
    if not verified:
        pytest.fail(f"no variant verified at {problem.label}", pytrace=False)
    pv, _ = max(verified, key=lambda item: item[1].gflops)
    result, timing = run_benchmarked(pv, device_session, lowering, benchmark, BEST_ROUNDS)

    found = refs(ledger, problem)
    references = {"numpy_in_process": found.get("numpy_in_process") or measure_numpy_in_process(problem),
                  "numpy_fair": found.get("numpy_fair") or measure_numpy_fair(problem)}
    for key in ("plain_sgemm", "clblast", "onemkl_dpnp"):
        references[key] = found.get(key) or {"label": key, "skipped": "its benchmark did not run in this session"}
    t = pv.config.types
    shape = {"m": problem.m, "n": problem.n, "k": problem.k, "batch": problem.batch,
             "types": f"A={t.a} B={t.b} acc={t.acc} C={t.c}"}
    comparison = build_comparison(shape, f"{device_info.filter_string} ({device_info.name}), "
                                  f"{lowering[0]} lowering",
                                  variant_record(result, timing), references)
    ledger.setdefault("comparisons", {})[problem.label] = comparison
    benchmark.extra_info.update(comparison)
    print("\n" + "\n".join(comparison_lines(comparison)))
