"""Build time per kernel feature on the portable lowering: a table of cold builds, both CPU code paths.

``python -m bench.build_times [--repeats N] [--features plain,alpha,...] [--against REV] [--out DIR]`` renders one kernel per
feature (:data:`FEATURES`: plain, alpha, beta, bias, each activation, each output type, each layout, split-K,
stream-K, register blocks), all on one base tile (:data:`BASE`), and builds each in a fresh child process per
CPU code path (the runtime's own choice for the host, and ``CL_CONFIG_CPU_TARGET_ARCH=core-avx2``; the
runtime reads the variable when it starts).  The child calls the OpenCL API directly, not
:func:`xegemm.runtime.program.build_program`, so neither the persistent program cache nor the in-process one
can answer, and every source carries a unique first line, so nothing below the API can either.

Per feature and code path it records the median over ``--repeats`` of:

- ``build_s``: ``clBuildProgram`` (what a user waits for), and ``build_cpu_s`` the CPU seconds of the same
  builds (the child's threads), which the load of other jobs on a shared machine inflates far less;
- ``compile_s`` and ``link_s``: the same program through ``clCompileProgram`` (the front end: OpenCL C to the
  runtime's IR) and ``clLinkProgram`` (the back end: optimisation, sub-group vectorisation, x86 code);
- ``noopt_s``: ``clBuildProgram`` with ``-cl-opt-disable``;

and the source's size (characters, lines, and statements: ``;`` count).  ``--against REV`` also renders every
feature as the commit ``REV`` of this repository renders it (its tree checked out into a scratch directory)
and builds the two sources of a feature alternately in the same child, repeat by repeat (the order swapped
every repeat), so the load of a shared machine falls on both alike; the table then gives both and their ratio.  The table goes to stdout and, with
``--out``, to ``build_times.md`` and ``build_times.json`` there.  Times are measured, never asserted; the
machine's load is recorded with them (:func:`xegemm.evaluate.timing.conditions`).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import REPO
from bench.code_paths import host_code_paths
from bench.revision import python_at
from xegemm.config.reader import config_from_text
from xegemm.epilogues.outputs import OUTPUT_TYPES
from xegemm.epilogues.registry import ACTIVATIONS
from xegemm.evaluate import plan_variants, render_variant
from xegemm.evaluate.device import device_build_options
from xegemm.lowering import named_lowering
from xegemm.evaluate.timing import conditions

# The base kernel: a 64x64x32 work-group tile of 2x2 sub-groups, f16 inputs, f32 accumulation and output.
BASE = """
name: build_times
problem: {m: 520, n: 496, k: 264}
types: {a: f16, b: f16, acc: f32, c: f32}
layout: {a: row, b: row, c: row}
tile: {workgroup: [64, 64, 32], subgroups: [2, 2], subgroup_size: 16}
pipeline: {prefetch: 2}
"""

# feature -> the YAML lines that turn it on (added to BASE; a later key of the same section replaces BASE's)
FEATURES: dict[str, str] = {
    "plain": "",
    "alpha": "epilogue: {alpha: 0.5}",
    "beta": "epilogue: {beta: 1.0}",
    "bias row": "epilogue: {bias: row}",
    "bias col": "epilogue: {bias: col}",
    **{f"activation {name}": f"epilogue: {{activation: {name}}}" for name in ACTIVATIONS if name != "none"},
    "inputs bf16": "types: {a: bf16, b: bf16, acc: f32, c: f32}",
    **{f"output {t}": f"types: {{a: f16, b: f16, acc: f32, c: {t}}}" for t in OUTPUT_TYPES
       if t != "f32" and not t.startswith(("s", "u"))},
    # integer outputs need integer inputs (an s32 accumulator): their own base, and their own plain row
    **{f"s8 inputs: output {t}": f"types: {{a: s8, b: s8, acc: s32, c: {t}}}" for t in OUTPUT_TYPES
       if t.startswith(("s", "u"))},
    "output f16 + alpha + beta + relu": "types: {a: f16, b: f16, acc: f32, c: f16}\n"
                                        "epilogue: {alpha: 0.5, beta: 1.0, activation: relu}",
    "layout a col": "layout: {a: col, b: row, c: row}",
    "layout b col": "layout: {a: row, b: col, c: row}",
    "layout a col + output f16 + beta + relu": "layout: {a: col, b: row, c: row}\n"
                                               "types: {a: f16, b: f16, acc: f32, c: f16}\n"
                                               "epilogue: {beta: 1.0, activation: relu}",
    # quantized and 4-bit operands (their own K tile: a 4-bit DPAS takes 64 of K at once)
    "s4 inputs: output s32": "types: {a: s4, b: s4, acc: s32, c: s32}\n"
                             "tile: {workgroup: [64, 64, 128], subgroups: [2, 2], subgroup_size: 16}",
    "u8 B: int8 weights per channel": "types: {a: f16, b: u8, acc: f32, c: f16}\n"
                                      "quant: {format: plain, group: channel, scale: f16}",
    "u4 B: GPTQ group 128": "types: {a: f16, b: u4, acc: f32, c: f16}\n"
                            "quant: {format: gptq, group: 128, scale: f16, zero: u4}",
    "split-K 4": "tile: {workgroup: [64, 64, 32], subgroups: [2, 2], subgroup_size: 16, split_k: 4}",
    "stream-K 4": "tile: {workgroup: [64, 64, 32], subgroups: [2, 2], subgroup_size: 16, stream_k: 4}",
    "register block 1x1": "tile: {workgroup: [64, 64, 32], subgroups: [2, 2], subgroup_size: 16, "
                             "register_block: [1, 1]}",
    "register block 2x2": "tile: {workgroup: [64, 64, 32], subgroups: [2, 2], subgroup_size: 16, "
                             "register_block: [2, 2]}",
}

STAGES = ("build_s", "compile_s", "link_s", "noopt_s")
CPU = "build_cpu_s"     # the CPU seconds of each build_s (all threads of the child): what other jobs' load inflates least


def feature_config(feature: str):
    """The base config with one feature on (a section given by the feature replaces the base's)."""
    lines = {line.split(":", 1)[0]: line for line in BASE.strip().splitlines()}
    for line in FEATURES[feature].splitlines():
        lines[line.split(":", 1)[0]] = line
    return config_from_text("\n".join(lines.values()) + "\n", f"<build_times {feature}>")


def render(features: list[str]) -> list[dict]:
    """``[{feature, source, options, chars, lines, statements}]`` or ``{feature, error}`` for one that the planner
    refuses (reported in the table, not built)."""
    lowering = named_lowering("portable")
    out = []
    for feature in features:
        try:
            pv = plan_variants(feature_config(feature), lowering)[0]
            if pv.plan is None:
                out.append({"feature": feature, "error": f"rejected: {pv.reason}"})
                continue
            source = render_variant(pv, lowering)
        except Exception as exc:  # noqa: BLE001 - a feature the generator refuses is a row of the table
            out.append({"feature": feature, "error": f"{type(exc).__name__}: {exc}"})
            continue
        out.append({"feature": feature, "source": source, "options": device_build_options(lowering, pv.config),
                    "chars": len(source), "lines": source.count("\n"), "statements": source.count(";")})
    return out


BEFORE = "before_"      # the prefix of --against's columns in a child's rows


def render_at(rev: str, features: list[str]) -> list[dict]:
    """:func:`render` as the commit ``rev`` of this repository does it (:func:`bench.revision.python_at`)."""
    code = ("import json, sys; from bench.build_times import render; "
            "json.dump(render(json.loads(sys.argv[1])), sys.stdout)")
    return [{**entry, "side": BEFORE} for entry in python_at(rev, code, json.dumps(features))]


# ---- the child: raw OpenCL builds, one process per code path --------------------------------------------

def _child(sources_path: Path, repeats: int, stages: tuple[str, ...]) -> None:
    from xegemm.runtime import select_sycl_device      # noqa: PLC0415 - the child alone opens the device
    from xegemm.runtime import opencl                   # noqa: PLC0415

    device = select_sycl_device()     # first: it prepares the ICD environment the loader below needs
    lib = opencl.library()
    vp, P, u32 = ctypes.c_void_p, ctypes.POINTER, ctypes.c_uint32
    lib.clCompileProgram.restype, lib.clCompileProgram.argtypes = ctypes.c_int32, [
        vp, u32, P(vp), ctypes.c_char_p, u32, vp, vp, vp, vp]
    lib.clLinkProgram.restype, lib.clLinkProgram.argtypes = vp, [
        vp, u32, P(vp), ctypes.c_char_p, u32, P(vp), vp, vp, P(ctypes.c_int32)]
    queue = opencl.OpenCLQueue(device)
    context, dev = queue.context, vp(queue.device.handle)
    counter = [0]

    def create(source: str):
        counter[0] += 1
        unique = f"// build {os.getpid()}-{counter[0]}-{time.time_ns()}\n{source}"
        err = ctypes.c_int32()
        src = ctypes.c_char_p(unique.encode())
        handle = lib.clCreateProgramWithSource(context.handle, 1, ctypes.byref(src), None, ctypes.byref(err))
        if err.value:
            raise RuntimeError(f"clCreateProgramWithSource: {err.value}")
        return handle

    def build(source: str, options: str, cpu: list | None = None) -> float:
        """The build's wall seconds; its CPU seconds (every thread of this process) appended to ``cpu``."""
        handle = create(source)
        c0, t0 = time.process_time(), time.perf_counter()
        code = lib.clBuildProgram(handle, 1, ctypes.byref(dev), options.encode(), None, None)
        seconds = time.perf_counter() - t0
        if cpu is not None:
            cpu.append(time.process_time() - c0)
        lib.clReleaseProgram(handle)
        if code:
            raise RuntimeError(f"clBuildProgram: {code}")
        return seconds

    def compile_link(source: str, options: str) -> tuple[float, float]:
        handle = create(source)
        t0 = time.perf_counter()
        code = lib.clCompileProgram(handle, 1, ctypes.byref(dev), options.encode(), 0, None, None, None, None)
        t1 = time.perf_counter()
        if code:
            raise RuntimeError(f"clCompileProgram: {code}")
        err, compiled = ctypes.c_int32(), vp(handle)
        # the build options are compiler options (-cl-std, -cl-mad-enable): the linker takes none of them
        linked = lib.clLinkProgram(context.handle, 1, ctypes.byref(dev), b"", 1, ctypes.byref(compiled),
                                   None, None, ctypes.byref(err))
        t2 = time.perf_counter()
        lib.clReleaseProgram(handle)
        if err.value:
            raise RuntimeError(f"clLinkProgram: {err.value}")
        lib.clReleaseProgram(linked)
        return t1 - t0, t2 - t1

    build("__kernel void warm_up(__global int *x) { x[get_global_id(0)] = 1; }", "")   # the runtime's start-up
    groups: dict[str, list[dict]] = {}          # a feature's sources (this tree's, and --against's): interleaved
    for entry in json.loads(sources_path.read_text()):
        if "source" in entry:
            groups.setdefault(entry["feature"], []).append(entry)
    for feature, entries in groups.items():
        runs = {entry.get("side", ""): {stage: [] for stage in (*STAGES, CPU)} for entry in entries}
        try:
            for repeat in range(repeats):
                for entry in entries if repeat % 2 == 0 else entries[::-1]:
                    side = runs[entry.get("side", "")]
                    if "build_s" in stages:
                        side["build_s"].append(build(entry["source"], entry["options"], side["build_cpu_s"]))
                    if "compile_s" in stages or "link_s" in stages:
                        compile_s, link_s = compile_link(entry["source"], entry["options"])
                        side["compile_s"].append(compile_s)
                        side["link_s"].append(link_s)
                    if "noopt_s" in stages:
                        side["noopt_s"].append(build(entry["source"],
                                                     f"{entry['options']} -cl-opt-disable".strip()))
        except RuntimeError as exc:
            print(json.dumps({"feature": feature, "error": str(exc)}), flush=True)
            continue
        row = {"feature": feature}
        for name, side in runs.items():
            row.update({f"{name}{k}": statistics.median(v) for k, v in side.items() if v})
            row[f"{name}runs"] = side
        print(json.dumps(row), flush=True)


# ---- the parent ------------------------------------------------------------------------------------------

def measure(features: list[str], repeats: int, stages: tuple[str, ...] = STAGES, against: str | None = None) -> dict:
    rendered = render(features)
    before = render_at(against, features) if against else []
    paths, skipped = host_code_paths()
    result = {"base": BASE.strip(), "repeats": repeats, "conditions_before": conditions(), "features": rendered,
              "paths": {}, "skipped_paths": skipped, "against": against,
              "features_before": {e["feature"]: e for e in before}}
    with tempfile.TemporaryDirectory(prefix="xegemm-build-times-") as scratch:
        sources = Path(scratch) / "sources.json"
        sources.write_text(json.dumps(rendered + before))
        for path in paths:
            env = {**path.environment(os.environ), "XEGEMM_CACHE_DIR": ""}
            print(f"measuring the {path.name} code path ({len(rendered)} kernels x {repeats})...", file=sys.stderr,
                  flush=True)
            rows = result["paths"][path.name] = {}
            with subprocess.Popen([sys.executable, "-m", "bench.build_times", "--child", str(sources), "--repeats",
                                   str(repeats), "--stages", ",".join(stages)], env=env, cwd=REPO,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
                for line in child.stdout:           # each row as it comes: a long run shows its progress
                    row = json.loads(line)
                    rows[row["feature"]] = row
                    print(f"  {path.name} {row['feature']}: " + ", ".join(
                        f"{k} {row[k]:.2f}" for k in (*STAGES, CPU, *(BEFORE + s for s in (*STAGES, CPU))) if k in row)
                          + row.get("error", ""), file=sys.stderr, flush=True)
                errors = child.stderr.read()
            if child.returncode:
                print(f"bench.build_times: the child on {path.name} failed (rows so far kept): {errors[-2000:]}",
                      file=sys.stderr)
    result["conditions_after"] = conditions()
    for entry in (*result["features"], *result["features_before"].values()):
        entry.pop("source", None)
    return result


def table(result: dict) -> str:
    paths = list(result["paths"])
    against = result.get("against")
    plain = {p: result["paths"][p].get("plain", {}).get("build_s") for p in paths}
    head = ["feature", "source chars", "statements"]
    for p in paths:
        head += [f"{p} build s", f"{p} CPU s", f"{p} x plain"]
        head += [f"{p} build s at {against}", f"{p} now / {against}"] if against else []
        head += [f"{p} compile s", f"{p} link s", f"{p} -cl-opt-disable s"]
    rows = []
    for entry in result["features"]:
        row = [entry["feature"]]
        if "error" in entry:
            rows.append(row + [entry["error"]] + [""] * (len(head) - 2))
            continue
        row += [str(entry["chars"]), str(entry["statements"])]
        for p in paths:
            m = result["paths"][p].get(entry["feature"], {})
            width = 8 if against else 6
            if "build_s" not in m:
                row += [m.get("error", "not measured")] + [""] * (width - 1)
                continue
            ratio = f"{m['build_s'] / plain[p]:.1f}" if plain[p] else ""
            row += [f"{m['build_s']:.2f}", f"{m[CPU]:.2f}" if CPU in m else "-", ratio]
            if against:
                old = m.get(BEFORE + "build_s")
                row += [f"{old:.2f}", f"{m['build_s'] / old:.2f}"] if old else ["-", "-"]
            row += [f"{m[k]:.2f}" if k in m else "-" for k in ("compile_s", "link_s", "noopt_s")]
        rows.append(row)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    before, after = result["conditions_before"], result["conditions_after"]
    interleaved = f", each interleaved with the same feature rendered at {against}" if against else ""
    lines.append(f"\nMedian of {result['repeats']} cold builds per cell{interleaved} (build s: wall seconds of "
                 "clBuildProgram; CPU s: the CPU seconds of the same builds); load average "
                 f"{before['loadavg'][0]:.1f} before, {after['loadavg'][0]:.1f} after, {before['cpu_count']} CPUs.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="cold builds per feature and stage (median; default 3)")
    parser.add_argument("--features", help=f"comma-separated subset of: {', '.join(FEATURES)}")
    parser.add_argument("--out", type=Path, help="write build_times.md and build_times.json into this directory")
    parser.add_argument("--stages", default=",".join(STAGES),
                        help=f"what to time per kernel, comma-separated subset of {','.join(STAGES)} (default all; "
                             "build_s must be among them)")
    parser.add_argument("--against", metavar="REV",
                        help="also build every feature as git revision REV renders it, interleaved (a ratio column)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    stages = tuple(x.strip() for x in args.stages.split(","))
    if "build_s" not in stages or any(x not in STAGES for x in stages):
        parser.error(f"--stages: a subset of {','.join(STAGES)} with build_s")
    if args.child:
        _child(args.child, args.repeats, stages)
        return
    features = [f.strip() for f in args.features.split(",")] if args.features else list(FEATURES)
    unknown = [f for f in features if f not in FEATURES]
    if unknown:
        parser.error(f"unknown features {unknown}; known: {', '.join(FEATURES)}")
    result = measure(features, args.repeats, stages, args.against)
    text = table(result)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "build_times.md").write_text(text + "\n")
        (args.out / "build_times.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
