"""The comparison of the best xegemm variant with the references, as data (for the JSON) and as text."""

from __future__ import annotations


def reference_record(label: str, timing, flops: int, timer: str, **details) -> dict:
    """One measured reference: its label, timing (ms), GFLOP/s from the median, and how it was timed."""
    return {"label": label, "gflops": flops / (timing.median * 1e6), "time_ms": timing.as_dict(), "timer": timer,
            **details}


def build_comparison(problem: dict, device: str, best: dict, references: dict) -> dict:
    """Ratios xegemm GFLOP/s / reference GFLOP/s for every reference measured in this run."""
    refs = {key: dict(ref) for key, ref in references.items()}
    for ref in refs.values():
        if ref.get("gflops"):
            ref["ratio"] = best["gflops"] / ref["gflops"]
    out = {"problem": problem, "device": device, "xegemm": best, "references": refs}
    for key, ref in refs.items():
        out[f"ratio_vs_{key}"] = ref.get("ratio")
    return out


def _blas_text(ref: dict) -> str:
    env = ref.get("environment") or {}
    env_text = " ".join(f"{k}={v if v is not None else '(unset)'}" for k, v in env.items())
    libs = ", ".join(" ".join(str(x) for x in (lib.get("internal_api"), lib.get("version"), "core",
                                                lib.get("architecture")) if x)
                     for lib in ref.get("blas") or [])
    parts = [p for p in (env_text, libs) if p]
    return f" [{'; '.join(parts)}]" if parts else ""


def comparison_lines(comparison: dict) -> list[str]:
    """Human-readable lines of a comparison (printed at the end of ``make bench``)."""
    p, best = comparison["problem"], comparison["xegemm"]
    lines = [f"problem M={p['m']} N={p['n']} K={p['k']} batch={p['batch']} "
             f"(xegemm {p['types']}; references float32) on {comparison['device']}",
             f"xegemm best variant {best['kernel']}: {best['gflops']:.1f} GFLOP/s, median "
             f"{best['time_ms']['median']:.3f} ms over {best['time_ms']['runs']} runs ({best['timer']}; verified, "
             f"max abs err {best['max_abs_err']:.2e})"]
    for key, ref in comparison["references"].items():
        if ref.get("skipped"):
            lines.append(f"{ref['label']}: not measured - {ref['skipped']}")
            continue
        lines.append(f"{ref['label']}: {ref['gflops']:.1f} GFLOP/s, median {ref['time_ms']['median']:.3f} ms "
                     f"({ref['timer']}){_blas_text(ref)} -> ratio xegemm/{key} = {ref['ratio']:.3f}")
    return lines
