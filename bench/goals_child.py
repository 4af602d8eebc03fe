"""One CPU code path of the goals run: tune, then time the winners interleaved with every reference.

Run by :mod:`bench.goals` as ``python -m bench.goals_child --code-path NAME --out DIR ...`` in a process whose
environment already holds the path's settings (:mod:`bench.code_paths`: the CPU runtime reads
``CL_CONFIG_CPU_TARGET_ARCH`` when it starts).  In that process:

1. per input type, ``xegemm.tune`` searches ``bench/goals.yaml`` exhaustively (or ``--budget`` points) at
   every shape, with a measurement cache of this run and path only;
2. CLBlast's Xgemm parameters are tuned for this path (:mod:`bench.clblast_tuning`; cached across runs);
3. per shape, each type's winner is built and verified here, and the winners, numpy, the plain sub-group
   SGEMM, CLBlast and oneMKL (float16, through dpnp) are timed round by round (:func:`bench.interleave.measure_sides`:
   once more when a CV stays above 10 %).

Writes ``DIR/result.json`` (the rows :mod:`bench.goals_table` formats) and prints progress.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time
from pathlib import Path

import yaml

from bench import REPO
from bench.clblast import find_clblast, loaded_library_path
from bench.clblast_tuning import MODES, tuned_parameters
from bench.code_paths import CODE_PATHS, TARGET_ARCH, cpu_model
from bench.goals_table import INPUT_TYPES, SHAPES
from bench.interleave import build_verified, measure_sides
from bench.references import ReferenceSkipped, WrongResult, clblast_sgemm, numpy_f32, onemkl_dpnp, plain_sgemm
from xegemm.config import load_config
from xegemm.evaluate import plan_variants
from xegemm.evaluate.device import DeviceSession
from xegemm.lowering import choose_lowering
from xegemm.evaluate.timing import conditions, gemm_flops, launch_ms
from xegemm.runtime import describe, select_sycl_device
from xegemm.tune import Shape, parse_shapes, tune

SPACE = REPO / "bench" / "goals.yaml"
ROUNDS, LAUNCHES = 5, 2          # timed runs per side: rounds x launches (each round also one untimed run)


def say(text: str) -> None:
    print(text, flush=True)


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


def type_config(space: Path, input_type: str, out: Path) -> Path:
    """The search space with A and B of ``input_type``, written into the run's directory (``tune`` takes a path)."""
    data = load_config(space).with_overrides({"types.a": input_type, "types.b": input_type}).to_dict()
    data["name"] = f"{data['name']}_{input_type}"
    path = out / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def tune_type(space: Path, input_type: str, shapes: list[Shape], out: Path, budget: int | None,
              device: str) -> tuple[dict, dict]:
    """Tune one input type at every shape: ({shape label: winning PlannedVariant}, the tuning's summary)."""
    result = tune(type_config(space, input_type, out), shapes=shapes, strategy="exhaustive", budget=budget, seed=0,
                  out=out / f"tune-{input_type}", cache=out / "measurements.db", device=device, progress=False)
    summary = {}
    for label, entry in result.best["shapes"].items():
        best, tally = entry["best"], result.tallies.get(label)
        summary[label] = {"kernel": best and best["kernel"], "gflops": best and best["gflops"],
                          "ratio_to_numpy": best and best.get("ratio_to_reference"),
                          "evaluated": tally and tally.evaluated, "failed": tally and tally.failed,
                          "trials": entry["trials"], "pruned": entry["pruned"]}
        say(f"  tuned {input_type} {label}: " + (f"{best['kernel']} {best['gflops']:.1f} GFLOP/s"
                                                 if best else "no variant verified")
            + f" ({entry['trials']} trials)")
    winners = {}
    if (result.out / "best.yaml").exists():
        for pv in plan_variants(load_config(result.out / "best.yaml")):
            if pv.plan is not None:
                p = pv.config.problem
                winners[Shape(p.m, p.n, p.k, p.batch).label] = pv
    return winners, summary


def clblast_tuning(info, mode: str) -> dict:
    """CLBlast's tuning for this code path (``mode``: one of :data:`bench.clblast_tuning.MODES`)."""
    if mode == "untuned":
        return {"status": "untuned defaults", "parameters": None, "reason": "--clblast untuned"}
    ctypes.CDLL(find_clblast())
    return tuned_parameters(info, loaded_library_path("libclblast"), run=mode != "cached", refresh=mode == "retune")


def open_references(shape: Shape, device, info, queue, tuning: dict, skipped: dict) -> dict:
    """Every reference that can run at ``shape`` (key -> Reference); the others' reasons go into ``skipped``."""
    makers = {"numpy": lambda: numpy_f32(shape),
              "plain_sgemm": lambda: plain_sgemm(queue, info.filter_string, shape),
              "clblast": lambda: clblast_sgemm(info, shape, tuning),
              "onemkl": lambda: onemkl_dpnp(device, info, shape, "float16")}
    refs = {}
    for key, make in makers.items():
        if key in skipped:
            continue
        try:
            refs[key] = make()
        except ReferenceSkipped as exc:
            skipped[key] = str(exc)
        except WrongResult as exc:
            skipped[key] = f"WRONG RESULT, not timed: {exc}"
            say(f"  warning: {exc}")
        except Exception as exc:  # noqa: BLE001 - a library that fails here is a reference not measured, with why
            skipped[key] = f"failed to set up: {exc!r}"
            say(f"  warning: {key} failed to set up: {exc!r}")
    return refs


def stats(timing, flops: int) -> dict:
    return {"gflops": flops / (timing.median * 1e6), "gflops_best": flops / (timing.min * 1e6),
            "time_ms": timing.as_dict()}


def measure_shape(shape: Shape, kernels: dict, refs: dict, rounds: int, launches: int) -> dict:
    """Time the winners (``{type: DeviceKernel}``) and references round by round at one shape."""
    sides = {f"xegemm {t}": (lambda submit=k.submit: launch_ms(submit)) for t, k in kernels.items()}
    sides.update({key: ref.sample for key, ref in refs.items()})
    before = conditions()
    measured = measure_sides(sides, rounds, launches)
    after = conditions()
    flops = gemm_flops(shape.m, shape.n, shape.k, shape.batch)
    return {"stats": {name: stats(t, flops) for name, t in measured["timings"].items()},
            "attempts": measured["attempts"], "high_cv": measured["high_cv"],
            "worst_cv": max(t.cv for t in measured["timings"].values()),
            "loadavg_before": before["loadavg"], "loadavg_after": after["loadavg"]}


# what a code path's process measures: (option, argparse keywords); python -m bench.goals takes the same and
# passes them on
RUN_OPTIONS = {
    "--space": {"type": Path, "default": SPACE, "help": "the search space (default bench/goals.yaml)"},
    "--types": {"default": ",".join(INPUT_TYPES), "help": "input types of A and B, comma-separated"},
    "--shapes": {"default": ",".join(SHAPES), "help": "problems, as xegemm tune --shapes takes them"},
    "--budget": {"type": int, "default": None, "help": "tuning points per type and shape (default all)"},
    "--rounds": {"type": int, "default": ROUNDS, "help": "rounds of the interleaved timing"},
    "--launches": {"type": int, "default": LAUNCHES, "help": "timed runs per side and round"},
    "--clblast": {"choices": MODES, "default": "tune",
                  "help": "CLBlast's Xgemm parameters per code path: from the cache, else its tuner (tune); its "
                          "tuner even when cached (retune); the cache only (cached); Debian's defaults (untuned)"},
}


def add_run_options(parser: argparse.ArgumentParser) -> None:
    for option, keywords in RUN_OPTIONS.items():
        parser.add_argument(option, **keywords)


def run_arguments(args: argparse.Namespace) -> list[str]:
    """The :data:`RUN_OPTIONS` of ``args`` as command-line arguments (those left at None are left out)."""
    out = []
    for option in RUN_OPTIONS:
        value = getattr(args, option[2:])
        out += [] if value is None else [option, str(value)]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code-path", required=True, choices=sorted(CODE_PATHS))
    parser.add_argument("--out", required=True, type=Path)
    add_run_options(parser)
    parser.add_argument("--skip", action="append", default=[], metavar="KEY=REASON",
                        help="a reference not to measure, and why")
    parser.add_argument("--device", default="opencl:cpu")
    args = parser.parse_args(argv)
    path = CODE_PATHS[args.code_path]
    if os.environ.get(TARGET_ARCH) != path.cpu_target_arch:
        sys.exit(f"{TARGET_ARCH} is {os.environ.get(TARGET_ARCH)!r}, the {path.name} path needs "
                 f"{path.cpu_target_arch!r}: run this through python -m bench.goals")
    t_start = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    device = select_sycl_device(args.device)
    info = describe(device)
    lowering = choose_lowering(info)
    types, shapes = args.types.split(","), parse_shapes(args.shapes)
    skipped = dict(item.split("=", 1) for item in args.skip)
    result = {"code_path": path.name, "settings": path.settings(), "cpu": cpu_model(),
              "device": {"filter": info.filter_string, "name": info.name, "driver": info.driver_version,
                         "compute_units": info.compute_units},
              "lowering": lowering.name, "conditions_before": conditions(), "budget": args.budget,
              "rounds": args.rounds, "launches": args.launches}
    say(f"[{path.name}] tuning {', '.join(types)} at {', '.join(s.label for s in shapes)} on {info.filter_string}")
    winners, result["tuning"] = {}, {}
    for t in types:
        winners[t], result["tuning"][t] = tune_type(args.space, t, shapes, args.out, args.budget, info.filter_string)
    result["tuning_seconds"] = time.monotonic() - t_start
    t_clblast = time.monotonic()
    tuning = {"status": "not used", "parameters": None}
    if "clblast" not in skipped:
        say(f"[{path.name}] CLBlast: tuning its Xgemm for this code path (or taking it from the cache)")
        tuning = clblast_tuning(info, args.clblast)
        say(f"  CLBlast: {tuning['status']}" + (f" ({tuning['reason']})" if tuning.get("reason") else ""))
    result.update(clblast_tuning=tuning, clblast_seconds=time.monotonic() - t_clblast)
    t_measure = time.monotonic()
    sessions = {t: DeviceSession(device) for t in types}
    rows = []
    result.update(rows=rows, skipped=skipped, incomplete="the process stopped before it measured every shape")
    for shape in shapes:
        kernels, failures = {}, {}
        for t in types:
            pv = winners[t].get(shape.label)
            kernel, failure = build_verified(sessions[t], lowering, pv) if pv else (None, "tuning found no variant")
            if kernel is None:
                failures[t] = failure
            else:
                kernels[t] = kernel
        refs = open_references(shape, device, info, sessions[types[0]].queue, tuning, skipped)
        say(f"[{path.name}] {shape.label}: timing {len(kernels)} winners and {', '.join(refs)} in "
            f"{args.rounds} rounds")
        try:
            measured = measure_shape(shape, kernels, refs, args.rounds, args.launches)
        finally:
            for ref in refs.values():
                ref.close()
        numpy_ref = refs.get("numpy")
        if numpy_ref is not None:
            result["numpy_blas"] = numpy_ref.details
        for t in types:
            x = ({"kernel": winners[t][shape.label].name, **measured["stats"][f"xegemm {t}"]} if t in kernels
                 else {"failed": failures[t]})
            references = {key: {"label": ref.label, "timer": ref.timer, **measured["stats"][key],
                                **{k: v for k, v in ref.details.items() if k in ("parameters", "tuning", "call", "call_trial_ms", "dtype")}}
                          for key, ref in refs.items()}
            references.update({key: {"skipped": reason} for key, reason in skipped.items()})
            rows.append({"type": t, "shape": shape.label, "xegemm": x, "references": references,
                         **{k: measured[k] for k in ("attempts", "high_cv", "worst_cv", "loadavg_before",
                                                      "loadavg_after")}})
            say(f"  {t} {shape.label}: " + (f"{x['gflops']:.1f} GFLOP/s" if "gflops" in x else x["failed"]) + "; "
                + ", ".join(f"{key} {measured['stats'][key]['gflops']:.1f}" for key in refs)
                + (f"; high CV: {measured['high_cv']}" if measured["high_cv"] else ""))
        result.update(conditions_after=conditions(), measure_seconds=time.monotonic() - t_measure,
                      seconds=time.monotonic() - t_start)
        write_json(args.out / "result.json", result)       # after every shape: a failure later keeps these rows
    del result["incomplete"]
    write_json(args.out / "result.json", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
