"""A program the call API loads from the persistent program cache is verified before its first result is used.

``run`` and ``tune`` verify every kernel they run; the call API verifies none of its results (that is the
point of it), so a binary it loads from the program cache (:mod:`xegemm.runtime.program_cache`) is checked
once per process: the kernel runs a small problem of its own config (each size at most two work-group tiles,
the same source, options and build; the call's own problem when the small one plans another kernel) against
the numpy reference, through the evaluation layer's verification (:class:`xegemm.evaluate.device.VerifyObserver`).
A binary that fails is discarded and the kernel rebuilt from source (the evaluator's rebuild); a kernel that
fails again, or a program this module cannot verify, is never used from the cache: the former is refused with
:class:`CachedProgramError`, the latter rebuilt from source.  A program built from source in this process
needs no check (the compiler made it from xegemm's source here); one verified here is remembered by its cache
key and the digest of its binary, so an entry replaced under a running process is verified again.
"""

from __future__ import annotations

import threading

from xegemm.api.errors import CallError
from xegemm.config import Config, ConfigError, Variant
from xegemm.errors import XegemmError
from xegemm.evaluate import Evaluator, plan_variant
from xegemm.evaluate.device import DeviceBuilder, DeviceSession, VerifyObserver
from xegemm.lowering import Lowering
from xegemm.runtime.program import build_source, rebuild_source

_VERIFIED: set[tuple[str, str]] = set()     # (cache key, binary digest) of the programs verified in this process
_LOCK = threading.Lock()


class CachedProgramError(CallError, RuntimeError):
    """A kernel fails verification on the device, loaded from the program cache and rebuilt from source alike."""


def small_problem(config: Config) -> Config | None:
    """``config`` at a problem of at most two work-group tiles per size and a batch of at most 2 (None: it
    cannot be written so); a grouped config keeps its groups."""
    p, wg = config.problem, config.tile.workgroup
    if p.groups or config.moe.experts:
        return config
    try:
        return config.with_overrides({"problem.m": min(p.m, 2 * wg[0]), "problem.n": min(p.n, 2 * wg[1]),
                                      "problem.k": min(p.k, 2 * wg[2]), "problem.batch": min(p.batch, 2)})
    except ConfigError:
        return None


def trusted_program(queue, sycl_device, lowering: Lowering, config: Config | None, name: str, source: str,
                    options: str, kind: str):
    """The program of ``source`` on ``queue``: as built, when built from source here or verified here before;
    else (loaded from the program cache) verified first, as the module docstring says."""
    program = build_source(queue, source, options, kind)
    if not getattr(program, "from_cache", False):
        return program
    mark = (getattr(program, "cache_key", ""), getattr(program, "cached_digest", ""))
    with _LOCK:
        if mark in _VERIFIED:
            return program
    why, rebuilt = _verify(queue, sycl_device, lowering, config, name, source, options)
    if why is None:
        if not rebuilt:          # a binary that failed is never marked, whatever replaced it
            with _LOCK:
                _VERIFIED.add(mark)
        return build_source(queue, source, options, kind)
    if why.startswith("cannot verify"):
        return rebuild_source(queue, source, options, kind, why)
    raise CachedProgramError(f"{name}: the kernel fails verification on this device ({why}), loaded from the "
                             "program cache and rebuilt from source alike; it is not used")


def _verify(queue, sycl_device, lowering: Lowering, config: Config | None, name: str, source: str,
            options: str) -> tuple[str | None, bool]:
    """(None when the program verifies, else why not: ``cannot verify ...`` when no check could be made;
    whether its cached binary failed and the kernel was rebuilt from source)."""
    if config is None:
        return "cannot verify a program without its config", False
    for candidate in (small_problem(config), config):
        if candidate is None:
            continue
        pv = plan_variant(Variant(candidate), lowering)
        if pv.plan is None or pv.plan.name != name:
            continue
        session = DeviceSession(sycl_device, queue=queue)
        evaluator = Evaluator(lowering, DeviceBuilder(session, lowering, options=options), [VerifyObserver()])
        try:
            evaluation = evaluator.evaluate(pv, source)
        except (XegemmError, MemoryError) as exc:
            return f"cannot verify: {exc}", False
        rebuilt = "cache_discarded" in evaluation.extra
        if evaluation.passed:
            return None, rebuilt
        if evaluation.status == "failed_verify":
            return evaluation.reason or "failed verification", rebuilt
        return f"cannot verify: {evaluation.status}: {evaluation.reason}", rebuilt
    return "cannot verify: no problem of the config plans this kernel", False
