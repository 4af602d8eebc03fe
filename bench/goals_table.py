"""The performance goals and the goals run's tables (``make bench-goals``; docs/benchmarks.md).

Each goal is a ratio: the best tuned xegemm variant's GFLOP/s over a reference's, both measured interleaved in
the same rounds on the same CPU code path.  Goals are evaluated and printed, never asserted.  This module is
pure data and formatting: :mod:`bench.goals_child` measures, :mod:`bench.goals` runs it all.
"""

from __future__ import annotations

from dataclasses import dataclass

from xegemm.evaluate.timing import CV_LIMIT

INPUT_TYPES = ("bf16", "f16")                         # A and B; accumulator and C are f32
SHAPES = ("1024x1024x1024", "2048x2048x2048", "4096x4096x1024")

# reference key -> column title (the order of the table's columns)
REFERENCES = {"numpy": "numpy f32", "plain_sgemm": "plain SGEMM", "clblast": "CLBlast SGEMM",
              "onemkl": "oneMKL f16 (dpnp)"}
PATH_TITLES = {"avx512": "AVX-512 code path (the runtime's default on this CPU; numpy with OpenBLAS's kernels "
                         "for the CPU, OPENBLAS_CORETYPE unset)",
               "avx2": "AVX2 code path (CL_CONFIG_CPU_TARGET_ARCH=core-avx2; numpy with OPENBLAS_CORETYPE=Haswell; "
                       "oneMKL with MKL_ENABLE_INSTRUCTIONS=AVX2)"}


@dataclass(frozen=True)
class Goal:
    """xegemm GFLOP/s >= ``at_least`` x the reference's, on a code path (at the listed shapes, or all)."""

    code_path: str
    reference: str
    at_least: float
    shapes: tuple[str, ...] | None = None


GOALS = (
    Goal("avx512", "numpy", 0.8, ("1024x1024x1024",)),
    Goal("avx512", "numpy", 0.7, ("2048x2048x2048",)),
    Goal("avx512", "plain_sgemm", 1.5),
    Goal("avx512", "clblast", 1.0),
    Goal("avx512", "onemkl", 2.0),
    Goal("avx2", "numpy", 0.5),
)


def goal(code_path: str, reference: str, shape: str) -> float | None:
    """The ratio a code path's best variant should reach against a reference at a shape (None: no goal)."""
    for g in GOALS:
        if g.code_path == code_path and g.reference == reference and (g.shapes is None or shape in g.shapes):
            return g.at_least
    return None


def evaluate_row(code_path: str, row: dict) -> dict:
    """Per reference: ``{"gflops", "ratio", "goal", "verdict"}``; the verdict is ``met``, ``not met``,
    ``no goal`` or ``not measured`` (``reason`` then says why)."""
    x = row.get("xegemm") or {}
    cells = {}
    for key in REFERENCES:
        ref = (row.get("references") or {}).get(key) or {"skipped": "not measured in this run"}
        target = goal(code_path, key, row["shape"])
        if ref.get("skipped") or not ref.get("gflops") or not x.get("gflops"):
            reason = ref.get("skipped") or x.get("failed") or "no measurement"
            cells[key] = {"gflops": ref.get("gflops"), "ratio": None, "goal": target, "verdict": "not measured",
                          "reason": reason}
            continue
        ratio = x["gflops"] / ref["gflops"]
        verdict = "no goal" if target is None else ("met" if ratio >= target else "not met")
        cells[key] = {"gflops": ref["gflops"], "ratio": ratio, "goal": target, "verdict": verdict}
    return cells


def _ratio_cell(cell: dict) -> str:
    if cell["verdict"] == "not measured":
        return "-"
    text = f"{cell['ratio']:.2f}"
    return text if cell["goal"] is None else f"{text} (goal {cell['goal']:g}: {cell['verdict']})"


def _gflops(median, fastest=None) -> str:
    """Median GFLOP/s, and the fastest run's in parentheses (what load from other processes disturbs least)."""
    if not median:
        return "-"
    return f"{median:.0f}" + (f" ({fastest:.0f})" if fastest else "")


def tile_of(kernel: str) -> str:
    """The work-group tile and sub-group grid of a kernel name (``..._16x32x32_sg1x1_...`` -> ``16x32x32 sg1x1``)."""
    parts = kernel.split("_")
    for i, part in enumerate(parts[:-1]):
        if parts[i + 1].startswith("sg") and part.count("x") == 2:
            return f"{part} {parts[i + 1]}"
    return kernel


def path_table(result: dict) -> list[str]:
    """One code path's table in markdown: rows input type x shape, each reference's GFLOP/s and ratio."""
    path = result["code_path"]
    head = ["input", "M x N x K", "best variant", "xegemm GFLOP/s"]
    for title in REFERENCES.values():
        head += [title, f"vs {title.split(' ')[0]}"]
    lines = ["| " + " | ".join(head + ["worst CV"]) + " |", "|" + "---|" * (len(head) + 1)]
    for row in result["rows"]:
        x = row.get("xegemm") or {}
        cells = evaluate_row(path, row)
        refs = row.get("references") or {}
        line = [row["type"], row["shape"], tile_of(x["kernel"]) if x.get("kernel") else "none verified",
                _gflops(x.get("gflops"), x.get("gflops_best"))]
        for key in REFERENCES:
            ref = refs.get(key) or {}
            line += [_gflops(ref.get("gflops"), ref.get("gflops_best")) if ref.get("gflops") else "skipped",
                     _ratio_cell(cells[key])]
        cv = row.get("worst_cv")
        line.append("-" if cv is None else f"{cv:.0%}" + (" HIGH" if row.get("high_cv") else ""))
        lines.append("| " + " | ".join(line) + " |")
    return lines


def _verdicts(results: list[dict]) -> tuple[int, int, int]:
    met = missed = unmeasured = 0
    for result in results:
        for row in result["rows"]:
            for cell in evaluate_row(result["code_path"], row).values():
                if cell["goal"] is None:
                    continue
                met += cell["verdict"] == "met"
                missed += cell["verdict"] == "not met"
                unmeasured += cell["verdict"] == "not measured"
    return met, missed, unmeasured


def conditions_lines(result: dict) -> list[str]:
    """What the table was measured under: CPU, runtime, BLAS core and threads, load, CLBlast's tuning."""
    cpu, dev = result.get("cpu") or {}, result.get("device") or {}
    blas = [lib for lib in (result.get("numpy_blas") or {}).get("blas") or []]
    blas_text = ", ".join(f"{lib.get('internal_api')} {lib.get('version') or ''} core {lib.get('architecture')}, "
                          f"{lib.get('num_threads')} threads".replace("  ", " ") for lib in blas) or "unknown"
    before, after = result.get("conditions_before") or {}, result.get("conditions_after") or {}
    load = (f"{before['loadavg'][0]:.2f} -> {after['loadavg'][0]:.2f}" if before.get("loadavg") and after.get("loadavg")
            else "unknown")
    tuning = result.get("clblast_tuning") or {}
    settings = ", ".join(f"{k}={'(unset)' if v is None else v}" for k, v in (result.get("settings") or {}).items())
    calls: dict[str, list[str]] = {}
    for row in result["rows"]:
        call = ((row.get("references") or {}).get("clblast") or {}).get("call")
        if call and row["shape"] not in calls.setdefault(call, []):
            calls[call].append(row["shape"])
    calls_text = "; ".join(f"{call} at {', '.join(shapes)}" for call, shapes in calls.items())
    lines = [f"- CPU: {cpu.get('name', '?')} (family {cpu.get('family', '?')}, model {cpu.get('model', '?')}), "
             f"{before.get('affinity_cpus', '?')} CPUs; device {dev.get('filter', '?')} "
             f"({dev.get('compute_units', '?')} compute units), runtime {dev.get('driver', '?')}; {settings}",
             f"- numpy {(result.get('numpy_blas') or {}).get('numpy', '?')}: {blas_text}; thread and code-path "
             f"variables: {', '.join(f'{k}={v}' for k, v in (before.get('threads_env') or {}).items()) or 'none set'}",
             f"- load average (1 min) {load} over the measurements; "
             f"tuning {result.get('tuning_seconds', 0):.0f} s, CLBlast's tuning {result.get('clblast_seconds', 0):.0f} s "
             f"({tuning.get('status', 'not used')}), measuring {result.get('measure_seconds', 0):.0f} s",
             f"- CLBlast: Xgemm parameters {tuning.get('status', 'not used')}"
             + (f" ({tuning['reason']})" if tuning.get("reason") else "")
             + (f"; called (the faster of two equivalent forms) {calls_text}" if calls_text else "")]
    if result.get("incomplete"):
        lines.append(f"- INCOMPLETE: {result['incomplete']}")
    for key, reason in (result.get("skipped") or {}).items():
        lines.append(f"- {REFERENCES.get(key, key)}: skipped - {reason}")
    for row in result["rows"]:
        x = row.get("xegemm") or {}
        if x.get("failed"):
            lines.append(f"- {row['type']} {row['shape']}: no xegemm variant - {x['failed']}")
    return lines


def markdown(results: list[dict], left_out: dict[str, str], header: dict) -> str:
    """The whole report: a table per measured code path, its conditions, the goals met, paths left out."""
    met, missed, unmeasured = _verdicts(results)
    noisy = [f"{r['code_path']} {row['type']} {row['shape']}" for r in results for row in r["rows"] if row.get("high_cv")]
    out = [f"# xegemm goals run ({header.get('started', '')})", "",
           f"Run time {header.get('seconds', 0) / 60:.1f} min; goals met {met}, not met {missed}, "
           f"not measured {unmeasured}. GFLOP/s are medians (in parentheses the fastest run) of runs interleaved "
           "round by round with every reference; a ratio is xegemm's median over the reference's. Performance is "
           "measured, never asserted.", ""]
    if noisy:
        out += [f"**Warning**: {len(noisy)} of {sum(len(r['rows']) for r in results)} rows kept a CV above "
                f"{CV_LIMIT:.0%} after a second measurement (HIGH in the last column): other load on the machine; "
                "measure again on a quiet one before trusting their ratios.", ""]
    for result in results:
        out += [f"## {PATH_TITLES.get(result['code_path'], result['code_path'])}", "", *path_table(result), "",
                *conditions_lines(result), ""]
        kernels = sorted({r['xegemm']['kernel'] for r in result["rows"] if (r.get("xegemm") or {}).get("kernel")})
        if kernels:
            out += ["Best variants: " + ", ".join(f"`{k}`" for k in kernels), ""]
    for path, reason in left_out.items():
        out += [f"## {PATH_TITLES.get(path, path)}", "", f"Not measured: {reason}", ""]
    return "\n".join(out)
