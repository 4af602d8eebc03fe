"""The main job, end to end: config -> variants -> plans -> OpenCL C -> build -> verify -> profile -> results.

Each stage is a function a notebook can call on its own (:func:`plan_variants`, :func:`render_variant`,
:func:`run_variant`); :func:`generate` and :func:`run` chain them for the command line.  A variant that is
rejected, fails to build or fails verification is recorded with its reason (and build log) and the sweep
goes on; only verified variants are timed.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from xegemm.config import Config, Variant, expand, load_config
from xegemm.errors import XegemmError
from xegemm.plan import Plan, PlanRejected, plan, variant_stem
from xegemm.render import render_kernel

STATUSES = ("ok", "rejected", "failed_build", "failed_verify", "error")
BUILD_OPTIONS = "-cl-std=CL3.0 -cl-mad-enable"


@dataclass
class PlannedVariant:
    """One variant of a config with its plan, or the reason it was rejected."""

    variant: Variant
    plan: Plan | None
    reason: str | None

    @property
    def config(self) -> Config:
        return self.variant.config

    @property
    def name(self) -> str:
        if self.plan is not None:
            return self.plan.name
        digest = hashlib.sha256(json.dumps(self.config.to_dict(), sort_keys=True).encode()).hexdigest()[:6]
        return f"{variant_stem(self.config)}_pf{self.config.pipeline.prefetch}_rejected_{digest}"


@dataclass
class VariantResult:
    """What happened to one variant (one row of results.csv)."""

    name: str
    status: str
    reason: str | None
    params: dict
    plan: dict | None = None
    time_ms: dict | None = None
    gflops: float | None = None
    gbps: float | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    bad_elements: int | None = None
    build_s: float | None = None
    source_sha256: str | None = None
    log: str | None = None
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}


def params_of(config: Config) -> dict:
    """The tunable parameters of a resolved config, flat (the columns a profiler CSV would have)."""
    t, lay, tile = config.types, config.layout, config.tile
    p = config.problem
    return {"m": p.m, "n": p.n, "k": p.k, "batch": p.batch,
            "a": t.a, "b": t.b, "acc": t.acc, "c": t.c, "layout": f"{lay.a}/{lay.b}/{lay.c}",
            "wg_m": tile.workgroup[0], "wg_n": tile.workgroup[1], "wg_k": tile.workgroup[2],
            "sg_m": tile.subgroups[0], "sg_n": tile.subgroups[1], "subgroup_size": tile.subgroup_size,
            "prefetch": config.pipeline.prefetch, "grf": config.target.grf,
            "atom_mma": config.atoms.mma, "atom_a": config.atoms.a, "atom_b": config.atoms.b,
            "atom_c": config.atoms.c}


def plan_variants(config: Config) -> list[PlannedVariant]:
    """Expand a config's sweep and plan every variant (rejections carry their reason)."""
    out, seen = [], set()
    for variant in expand(config):
        if variant.rejected:
            out.append(PlannedVariant(variant, None, variant.rejected))
            continue
        try:
            p = plan(variant.config)
        except XegemmError as exc:   # PlanRejected, or an atom the model rejects (AtomError, MmaAtomError, ...)
            out.append(PlannedVariant(variant, None, str(exc)))
            continue
        key = (p.name, variant.config.problem, variant.config.verify, variant.config.profile)
        if key in seen:   # two sweep points that resolve to the same kernel on the same problem
            continue
        seen.add(key)
        out.append(PlannedVariant(variant, p, None))
    return out


def render_variant(pv: PlannedVariant, lowering: str = "portable", profile=None) -> str:
    """The OpenCL C of one planned variant (``profile``: the compiler profile of the native lowering).

    Raises PlanRejected when the native lowering cannot express the plan: the problem breaks a surface rule
    of the block messages, or the compiler profile has no way to issue one of its atoms.
    """
    if pv.plan is None:
        raise XegemmError(f"variant {pv.name} was rejected: {pv.reason}")
    if lowering != "native":
        return render_kernel(pv.plan, lowering, profile)
    from xegemm.native import NativeUnsupported  # noqa: PLC0415
    from xegemm.plan import native_surface_violations  # noqa: PLC0415

    surface = native_surface_violations(pv.config)
    if surface:
        raise PlanRejected("native block surfaces: " + "; ".join(surface))
    try:
        return render_kernel(pv.plan, lowering, profile)
    except NativeUnsupported as exc:
        raise PlanRejected(str(exc)) from exc


def choose_lowering(info, forced: str | None = None):
    """(lowering, native profile or None) for a device: native where its extensions allow, else portable."""
    from xegemm.native import device_profile  # noqa: PLC0415

    profile = device_profile(info)
    if forced == "portable" or (forced is None and profile is None):
        return "portable", None
    if profile is None:
        raise XegemmError(f"{info.filter_string} ({info.name}) has no Xe 2D block IO and DPAS extensions: "
                          "the native lowering cannot run there; use --lowering portable")
    return "native", profile


# ---- generate ------------------------------------------------------------------------------------------

def generate(config_path: str | Path, out_dir: str | Path, lowering: str = "portable",
             profile_name: str | None = None) -> dict:
    """Write ``<name>.cl`` for every planned variant and a ``manifest.json``; return the manifest."""
    from xegemm.report import write_json_atomic, write_text_atomic  # noqa: PLC0415

    config = load_config(config_path)
    profile = None
    if lowering == "native":
        from xegemm.native import native_profile  # noqa: PLC0415
        profile = native_profile(profile_name)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    for pv in plan_variants(config):
        entry = {"name": pv.name, "status": "generated" if pv.plan else "rejected", "reason": pv.reason,
                 "overrides": _jsonable(pv.variant.overrides), "params": params_of(pv.config)}
        source = None
        if pv.plan is not None:
            try:
                source = render_variant(pv, lowering, profile)
            except PlanRejected as exc:
                entry.update(status="rejected", reason=str(exc))
        if source is not None:
            path = out / f"{pv.name}.cl"
            write_text_atomic(path, source)
            entry.update(path=path.name, sha256=hashlib.sha256(source.encode()).hexdigest(),
                         plan=pv.plan.summary())
        entries.append(entry)
    manifest = {"config": config.name, "lowering": lowering, "profile": profile.name if profile else None,
                "kernels": entries}
    manifest_path = out / "manifest.json"
    existing = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    configs = existing.get("configs", {}) if isinstance(existing, dict) else {}
    configs[config.name] = manifest
    write_json_atomic(manifest_path, {"generated_by": "xegemm generate", "configs": dict(sorted(configs.items()))})
    return manifest


def _jsonable(value):
    return json.loads(json.dumps(value, default=list))


# ---- run -----------------------------------------------------------------------------------------------

class DeviceSession:
    """A device, a profiling queue, and the inputs/reference of one problem kept between variants."""

    def __init__(self, sycl_device):
        from xegemm.runtime.program import make_queue  # noqa: PLC0415

        self.device = sycl_device
        self.queue = make_queue(sycl_device, profiling=True)
        self._problem_key = None
        self._buffers = None

    def buffers(self, config: Config):
        """Device buffers and reference for the config's problem and types (rebuilt when they change)."""
        from xegemm.runtime.program import to_device  # noqa: PLC0415
        from xegemm.verify import make_operands, poison_c, reference  # noqa: PLC0415

        key = (config.problem, config.types, config.layout, config.verify.seed)
        if key != self._problem_key:
            ops = make_operands(config)
            poison = poison_c(config)
            self._buffers = {"ops": ops, "reference": reference(config, ops), "a": to_device(self.queue, ops.a_bytes),
                             "b": to_device(self.queue, ops.b_bytes), "c": to_device(self.queue, poison),
                             "poison": poison}
            self._problem_key = key
        return self._buffers


def run_variant(pv: PlannedVariant, session: DeviceSession, lowering: str = "portable",
                log_dir: Path | None = None, profile=None, timer=None) -> VariantResult:
    """Build, verify and (if verified) time one variant on the session's device.

    ``timer(submit, warmup, repeats, min_time_ms)`` returns a :class:`xegemm.profile.Timing`; the default is
    :func:`xegemm.profile.time_kernel` (a benchmark harness passes its own).
    """
    from xegemm.profile import gemm_flops, time_kernel  # noqa: PLC0415
    from xegemm.runtime.program import BuildError, build_program, from_device, launch  # noqa: PLC0415
    from xegemm.verify import check  # noqa: PLC0415

    config = pv.config
    params = params_of(config)
    if pv.plan is None:
        return VariantResult(pv.name, "rejected", pv.reason, params)
    try:
        source = render_variant(pv, lowering, profile)
    except PlanRejected as exc:
        return VariantResult(pv.name, "rejected", str(exc), params)
    options = BUILD_OPTIONS
    if lowering == "native":
        from xegemm.native import build_options  # noqa: PLC0415
        options = f"{BUILD_OPTIONS} {build_options(profile, config.target.grf)}"
    sha = hashlib.sha256(source.encode()).hexdigest()
    result = VariantResult(pv.name, "ok", None, params, plan=pv.plan.summary(), source_sha256=sha)
    t0 = time.perf_counter()
    try:
        program = build_program(session.queue, source, options)
        kernel = program.get_sycl_kernel(pv.plan.name)
    except BuildError as exc:
        result.status, result.reason = "failed_build", str(exc)
        result.log = _save_log(log_dir, pv.name, exc.log)
        return result
    result.build_s = time.perf_counter() - t0
    bufs = session.buffers(config)
    ops, p = bufs["ops"], config.problem
    batch_a, batch_b = ops.a_bytes[0].nbytes, ops.b_bytes[0].nbytes
    args = [bufs["a"], bufs["b"], bufs["c"], ctypes.c_int(p.m), ctypes.c_int(p.n), ctypes.c_int(p.k),
            ctypes.c_int(ops.lda), ctypes.c_int(ops.ldb), ctypes.c_int(ops.ldc), ctypes.c_long(batch_a),
            ctypes.c_long(batch_b), ctypes.c_long(p.m * ops.ldc)]
    gsize, lsize = pv.plan.global_size(), pv.plan.workgroup_size

    def submit():
        return launch(session.queue, kernel, args, gsize, lsize)

    try:
        bufs["c"].copy_from_host(bufs["poison"])      # poisoned before every verified run
        submit().wait()
        verdict = check(config, from_device(bufs["c"], np.uint8, bufs["poison"].shape), bufs["reference"])
    except Exception as exc:  # noqa: BLE001 - a launch failure is recorded, the sweep goes on
        result.status, result.reason = "error", f"launch failed: {exc!r}"
        return result
    result.max_abs_err, result.max_rel_err = verdict.max_abs_err, verdict.max_rel_err
    result.bad_elements = verdict.bad_elements
    if not verdict.ok:
        result.status, result.reason = "failed_verify", verdict.reason
        return result
    prof = config.profile
    try:
        timing = (timer or time_kernel)(submit, prof.warmup, prof.repeats, prof.min_time_ms)
    except Exception as exc:  # noqa: BLE001 - verified, but timing failed: recorded, the sweep goes on
        result.status, result.reason = "error", f"timing failed after verification: {exc!r}"
        return result
    result.time_ms = timing.as_dict()
    seconds = max(timing.median, 1e-9) * 1e-3
    result.gflops = gemm_flops(p.m, p.n, p.k, p.batch) / seconds * 1e-9
    moved = ops.a_bytes.nbytes + ops.b_bytes.nbytes + p.batch * p.m * ops.ldc
    result.gbps = moved / seconds * 1e-9
    return result


def _source_digest(pv: PlannedVariant, lowering: str, profile) -> str | None:
    """What the kernel's source is, for the resume key (None for a variant with no kernel)."""
    try:
        return hashlib.sha256(render_variant(pv, lowering, profile).encode()).hexdigest()
    except XegemmError:
        return None


def _save_log(log_dir: Path | None, name: str, log: str) -> str | None:
    if log_dir is None:
        return None
    from xegemm.report import write_text_atomic  # noqa: PLC0415

    path = Path(log_dir) / f"{name}.log"
    write_text_atomic(path, log)
    return str(path)


def run(config_path: str | Path, device: str | None = None, out_dir: str | Path | None = None,
        lowering: str | None = None, progress=sys.stderr, reference_repeats: int = 5) -> dict:
    """Run a config end to end on a device and write results.json, results.csv and report.md into out_dir.

    If ``out_dir`` already holds results of the same kernels (same source, lowering and compiler profile) on
    the same problem and device (an interrupted sweep), those are kept and only the rest are run; the reports
    show exactly this run's variants.
    """
    from xegemm.profile import time_numpy_reference  # noqa: PLC0415
    from xegemm.report import ResultStore, write_reports  # noqa: PLC0415
    from xegemm.runtime import describe, select_sycl_device  # noqa: PLC0415

    config = load_config(config_path)
    sycl_device = select_sycl_device(device)
    info = describe(sycl_device)
    lowering, profile = choose_lowering(info, lowering)
    out = Path(out_dir) if out_dir else Path("runs") / time.strftime("%Y%m%d-%H%M%S")
    store = ResultStore(out, config=config, device=info)
    planned = plan_variants(config)
    session = DeviceSession(sycl_device)
    say = (lambda msg: print(msg, file=progress, flush=True)) if progress else (lambda msg: None)
    say(f"xegemm run {config.source}: {len(planned)} variants on {info.filter_string} ({info.name}), "
        f"lowering {lowering}, results in {out}")
    keys = []
    for i, pv in enumerate(planned, 1):
        key = store.key(pv.name, pv.config, lowering, profile.name if profile else None, _source_digest(pv, lowering,
                                                                                                      profile))
        keys.append(key)
        done = store.get(key)
        if done is not None:
            say(f"[{i}/{len(planned)}] {pv.name}: {done['status']} (recorded earlier, kept)")
            continue
        res = run_variant(pv, session, lowering, log_dir=out / "logs", profile=profile)
        store.add(key, res.as_dict())
        speed = f" {res.gflops:.1f} GFLOP/s, median {res.time_ms['median']:.3f} ms" if res.status == "ok" else ""
        why = f" - {res.reason}" if res.reason else ""
        say(f"[{i}/{len(planned)}] {pv.name}: {res.status}{speed}{why}")
    problems = {(pv.config.problem.m, pv.config.problem.n, pv.config.problem.k, pv.config.problem.batch)
                for pv in planned if pv.plan is not None} or {(config.problem.m, config.problem.n, config.problem.k,
                                                               config.problem.batch)}
    references = {shape: time_numpy_reference(*shape, repeats=reference_repeats) for shape in sorted(problems)}
    results = write_reports(store, keys, references, lowering=lowering, profile=profile.name if profile else None)
    say(f"wrote {out / 'results.json'}, {out / 'results.csv'}, {out / 'report.md'}")
    return results
