"""``xegemm build``: every variant of a config, rendered in the native lowering, compiled ahead of time with
ocloc for a real Xe target, its machine code counted and compared with what the plan predicts.

A build that succeeds proves little on an old compiler (it may drop or mangle messages), so a variant whose
main loop does not issue exactly the planned dpas and 2D block loads (for the SIMD8 plans of dg2: the 1D
sub-group block reads, one per tile row), or whose epilogue lacks its stores, is ``failed_build`` with the
counts in the reason.  Spills are reported.  A plan is built only for a target that has its DPAS width (pvc:
SIMD16, dg2: SIMD8) and, for 2D block copies, 2D block messages.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from xegemm.config import load_config

GATED = ("dpas", "load_block2d")                       # must match: the main loop, once
GATED_BLOCK1D = ("load_block1d",)                        # ... and, for 1D block plans, their block reads
REPORTED = ("store_block2d", "store_block1d")            # shown beside the prediction (loop unrolling varies)


def gated(plan) -> tuple[str, ...]:
    """The counts a plan's machine code must match exactly."""
    return GATED + (GATED_BLOCK1D if plan.uses_block1d else ())


def predicted_counts(plan, profile) -> dict:
    """What the kernel's machine code must show: the main loop once (dpas, block loads and prefetches of
    one k-step) and the epilogue's stores; each atom counted as the messages the profile lowers it to."""
    from xegemm.native import count_messages, lower_copy  # noqa: PLC0415

    def per_atom(op):
        return count_messages(lower_copy(op.atom, profile))

    a, b, c = per_atom(plan.a), per_atom(plan.b), per_atom(plan.c)
    out = {"dpas": plan.dpas_per_kstep,
           "load_block2d": plan.a.per_kstep * a["load_block2d"] + plan.b.per_kstep * b["load_block2d"],
           "store_block2d": plan.c.per_kstep * c["store_block2d"],
           "store_block1d": plan.c.per_kstep * c["store_block1d"]}
    if plan.uses_block1d:       # one 1D block read per row of every A and B tile
        out["load_block1d"] = plan.a.per_kstep * a["load_block1d"] + plan.b.per_kstep * b["load_block1d"]
    if plan.config.pipeline.prefetch:
        pa, pb = count_messages(lower_copy(plan.a.prefetch, profile)), count_messages(lower_copy(plan.b.prefetch,
                                                                                                 profile))
        out["prefetch_per_kstep"] = {k: plan.a.per_kstep * pa[k] + plan.b.per_kstep * pb[k]
                                     for k in ("prefetch_block2d", "prefetch") if pa[k] or pb[k]}
    return out


def _measured(stats) -> dict:
    d = stats.to_dict()
    d["store_block1d"] = stats.messages.get("store_block1d", 0)
    d["load_block1d"] = stats.messages.get("load_block1d", 0)
    d["prefetch_lsc"] = stats.messages.get("prefetch", 0)
    return d


def build_config(config_path, target: str = "pvc", grf: int | None = None, out_dir=None,
                 profile_name: str | None = None, progress=None) -> dict:
    """Compile every variant of a config for ``target``; write ``build.json`` (and per-variant artefacts).

    A variant is ``ok`` when its machine code issues exactly the predicted dpas and 2D block loads per
    k-step; stores and prefetches are reported beside their predictions, spills in the reason.
    """
    from xegemm.aot.build import compile_kernel  # noqa: PLC0415
    from xegemm.aot.toolchain import get_target, require_ocloc  # noqa: PLC0415
    from xegemm.native import native_profile  # noqa: PLC0415
    from xegemm.pipeline import plan_variants, render_variant  # noqa: PLC0415
    from xegemm.plan import PlanRejected  # noqa: PLC0415
    from xegemm.report import write_json_atomic  # noqa: PLC0415

    require_ocloc()
    hw = get_target(target)
    config = load_config(config_path)
    profile = native_profile(profile_name, target)
    out = Path(out_dir or Path("runs") / f"build-{config.name}-{target}")
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    planned = plan_variants(config)
    for i, pv in enumerate(planned, 1):
        g = grf or pv.config.target.grf
        entry = {"name": pv.name, "status": None, "reason": pv.reason, "target": target, "grf": g,
                 "profile": profile.name, "isa": None, "predicted": None}
        if pv.plan is None:
            entry["status"] = "rejected"
        elif not pv.plan.uses_block1d and not hw.has_block2d:
            entry.update(status="rejected", reason=f"{target} has no 2D block messages ({hw.arch}) and SIMD{hw.simd} "
                         f"DPAS; this plan uses Xe 2D block copies and SIMD{pv.plan.mma.n} DPAS: set "
                         f"tile.subgroup_size: {hw.simd} for 1D sub-group block copies + SIMD{hw.simd} DPAS")
        elif pv.plan.mma.n != hw.simd:
            entry.update(status="rejected", reason=f"{target} executes DPAS at SIMD{hw.simd}; {pv.plan.mma.name} "
                         f"runs at sub-group size {pv.plan.mma.n}: set tile.subgroup_size: {hw.simd}")
        else:
            try:
                source = render_variant(pv, "native", profile)
                entry["predicted"] = predicted_counts(pv.plan, profile)
            except PlanRejected as exc:   # a surface rule, or an atom this compiler cannot issue
                entry.update(status="rejected", reason=str(exc))
        if entry["status"] is None:
            work = out / pv.name
            build = compile_kernel(source, target, grf=g, workdir=work)
            entry["source_sha256"] = hashlib.sha256(source.encode()).hexdigest()
            entry["artefacts"] = str(work)
            if not build.ok:
                entry.update(status="failed_build", reason="ocloc rejected the kernel: " +
                             next((ln for ln in build.log.splitlines() if "error" in ln), build.log[-300:]))
                (work / "build.log").write_text(build.log)
            else:
                entry["isa"] = build.stats.to_dict()
                measured = _measured(build.stats)
                must = gated(pv.plan)
                entry["measured_messages"] = {k: measured[k] for k in must + REPORTED}
                entry["measured_messages"]["prefetch_lsc"] = measured["prefetch_lsc"]
                wrong = [f"{k}: ISA has {measured[k]}, the plan needs {entry['predicted'][k]}"
                         for k in must if measured[k] != entry["predicted"][k]]
                if wrong:
                    entry.update(status="failed_build", reason="machine code does not match the plan (a message "
                                 "dropped, split or unrolled by the compiler): " + "; ".join(wrong))
                else:
                    entry.update(status="ok", reason=None)
                if measured["spill_bytes"]:
                    entry["reason"] = ((entry["reason"] + "; ") if entry["reason"] else "") + \
                        f"spills {measured['spill_bytes']} bytes in {g}-GRF mode"
        entries.append(entry)
        if progress:
            print(f"[{i}/{len(planned)}] {pv.name}: {entry['status']}" +
                  (f" - {entry['reason']}" if entry["reason"] else ""), file=progress, flush=True)
    result = {"config": config.name, "target": target, "profile": profile.name, "variants": entries}
    write_json_atomic(out / "build.json", result)
    return result
