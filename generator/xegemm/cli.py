"""The ``xegemm`` command line: a thin layer over the documented Python API."""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import signal
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from xegemm import __version__
from xegemm.errors import XegemmError

# The command line imports what a command needs when that command runs (imports inside the functions below):
# the library pulls in matplotlib, Optuna (SQLAlchemy) and numpy, about 1.4 s of imports, which `--help` and
# `--version` must not pay.  This module is the one exception to "imports at the top" (docs/architecture.md).


MAX_COUNT = 10**9       # the largest count an option takes (--budget, --jobs, --heartbeat)


def _failures() -> tuple[str, ...]:
    """The status words that count as failures for --strict."""
    from xegemm.evaluate import STATUSES
    return tuple(s for s in STATUSES if s not in ("ok", "generated", "rejected"))


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*(str(c) for c in r)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def cmd_devices(args) -> int:
    from xegemm.runtime import list_devices, select_sycl_device
    devices = list_devices()
    default = select_sycl_device().filter_string
    if args.json:
        print(json.dumps({"default": default, "devices": [d.as_dict() for d in devices]}, indent=2))
        return 0
    rows = [[("* " if d.filter_string == default else "  ") + d.filter_string, d.name, d.backend,
             d.driver_version, d.compute_units, ",".join(map(str, d.sub_group_sizes)),
             "yes" if d.fp16 else "no", "yes" if d.fp64 else "no",
             "yes" if d.block_2d_io else "no", "yes" if d.dpas else "no", d.lowering] for d in devices]
    print(_table(rows, ["  filter", "name", "backend", "driver", "CUs", "sub-groups", "fp16", "fp64",
                        "2D-block", "DPAS", "lowering"]))
    print("\n* = the device xegemm uses when no --device is given")
    return 0


def _atom(name: str):
    """A copy or MMA atom by name (raises the model's error for an illegal or unknown name)."""
    from xegemm.atoms import COPY_ATOM_PREFIXES, copy_atom_named
    from xegemm.atoms.mma import MmaAtom
    name = name.strip()
    return copy_atom_named(name) if name.startswith(COPY_ATOM_PREFIXES) else MmaAtom.parse(name)


def cmd_atoms_list(args) -> int:
    from xegemm.atoms.copy import enumerate_copy_atoms
    from xegemm.atoms.mma import enumerate_mma_atoms
    rows, data = [], []
    if args.kind in (None, "copy"):
        for a in enumerate_copy_atoms():
            d = a.describe()
            data.append(d)
            m = d["message"]
            flag = "FLAGGED: " + a.quirk if a.quirk else ("" if a.legal else "illegal")
            rows.append([a.name, "copy", f"{m['kind']} d{m['elem_bits']} {m['block_width']}x{m['block_height']}"
                         f"x{m['block_count']}", a.register_type or "-", flag[:70]])
    if args.kind in (None, "mma"):
        for a in enumerate_mma_atoms():
            data.append(a.describe())
            rows.append([a.name, "mma", f"{a.m}x{a.n}x{a.k} SIMD{a.simd}",
                         f"A {a.ctype('a')}, B {a.ctype('b')}, C {a.ctype('c')}", a.builtin or "no OpenCL builtin"])
    if args.json:
        print(json.dumps(data, indent=1))
    else:
        print(_table(rows, ["atom", "kind", "shape / message", "per-work-item registers", "notes"]))
        print(f"\n{len(rows)} atoms")
    return 0


def cmd_atoms_show(args) -> int:
    from xegemm.atoms.base import CopyAtomBase
    atom = _atom(args.name)
    if isinstance(atom, CopyAtomBase):
        if not atom.legal:
            try:
                atom.check()
            except XegemmError as exc:
                raise XegemmError(f"{exc}" + (f" (sycl-tla defines it: {atom.quirk})" if atom.quirk else "")) from None
        if args.json:
            print(json.dumps({"name": atom.name, "lanes": atom.lane_map.lanes, "map": atom.lane_map.to_json(),
                              **{k: v for k, v in atom.describe().items() if k != "name"}}))
            return 0
        print("\n".join(atom.headline()))
        if atom.elems_per_lane:
            print()
            print(atom.lane_map.format_table(None if args.all else 16))
        return 0
    out = {"name": atom.name, "lanes": atom.lane_map("a").lanes,
           **{op: {"map": atom.lane_map(op).to_json(), "type": atom.ctype(op)} for op in ("a", "b", "c")}}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{atom.name}: D({atom.m}x{atom.n}) = A({atom.m}x{atom.k}) x B({atom.k}x{atom.n}) + C, "
          f"SIMD{atom.simd}, builtin {atom.builtin or 'none (no OpenCL builtin for this repeat count)'}")
    for op, what in (("a", "A (m, k)"), ("b", "B (k, n)"), ("c", "C/D (m, n)")):
        print(f"\n{what}: {atom.ctype(op)} per work-item")
        print(atom.lane_map(op).format_table(None if args.all else 16))
    return 0


def cmd_atoms_coopmatrix(args) -> int:
    from xegemm.atoms.coopmatrix import coopmatrix_layout, format_coopmatrix_table
    layout = coopmatrix_layout(args.use, args.rows, args.cols, args.sg, args.dtype)
    print(json.dumps(layout.to_json()) if args.json else format_coopmatrix_table(layout))
    return 0


def cmd_generate(args) -> int:
    from xegemm.jobs.pipeline import generate
    written = 0
    for config in args.configs:
        if args.compiler and args.lowering != "native":
            raise XegemmError("--compiler applies to --lowering native (the portable lowering needs no ocloc)")
        manifest = generate(config, args.out, lowering=args.lowering, capabilities_name=args.capabilities,
                            compiler=args.compiler)
        kernels = manifest["kernels"]
        made = [k for k in kernels if k["status"] == "generated"]
        files = len({k["path"] for k in made})
        written += files
        print(f"{config}: {files} kernels written to {args.out}/ for {len(made)} variants"
              + (" (a kernel serves every problem of the sweep)" if files < len(made) else "")
              + f", {len(kernels) - len(made)} variants rejected")
        for k in kernels:
            if k["status"] == "rejected":
                print(f"  rejected {k['name']}: {k['reason']}")
    if not written:
        print("xegemm: error: no kernel was written (every variant was rejected)", file=sys.stderr)
        return 1
    return 0


def cmd_run(args) -> int:
    from xegemm.evaluate.isolated import TimeLimits
    from xegemm.jobs.pipeline import run
    from xegemm.config.shapes import Shape, grouped_shape, parse_shapes
    limits = TimeLimits(build_s=args.build_timeout, run_s=args.run_timeout)
    # a grouped problem of --shapes runs as one Problem with its groups, as the tuner's shapes do
    problems = [s if isinstance(s, Shape) else grouped_shape(s) for s in parse_shapes(args.shapes)] \
        if args.shapes else None
    result = run(args.config, device=args.device, out_dir=args.out, lowering=args.lowering, limits=limits,
                 command=args.command_line, progress=sys.stderr,      # this sys.stderr, not the one at import
                 problems=problems)
    failed = [v for v in result.variants if v.status in _failures()]
    verified = [v for v in result.variants if v.status == "ok"]
    if args.strict and (failed or not verified):
        why = f"{len(failed)} variants failed" if failed else "no variant verified"
        print(f"xegemm: --strict: {why}", file=sys.stderr)
        return 1
    return 0


_SIGNALLED: list[int] = []


def _interrupt(signum, frame):
    """SIGTERM stops like Ctrl-C (partial reports, the resume command), and exits 128 + its number."""
    _SIGNALLED.append(signum)
    raise KeyboardInterrupt


def cmd_build(args) -> int:
    from xegemm.jobs.pipeline import build_config
    result = build_config(args.config, target=args.target, grf=args.grf, out_dir=args.out,
                          capabilities_name=args.capabilities, progress=sys.stderr, lowering=args.lowering,
                          compiler=args.compiler, command=args.command_line)
    ok = sum(v["status"] == "ok" for v in result["variants"])
    print(f"{ok} of {len(result['variants'])} variants built for {args.target} by {result['compiler']['name']} "
          f"({result['compiler']['describe']}) with compiler capabilities {result['capabilities']}; see build.json in "
          f"{args.out or 'runs/build-' + Path(args.config).stem + '-' + args.target}")
    failed = [v for v in result["variants"] if v["status"] in _failures()]
    return 1 if args.strict and (failed or not ok) else 0


def cmd_report(args) -> int:
    from xegemm.reporting import FORMATS, load_sources, render, write_report
    to_stdout = args.out == "-" or (args.out is None and args.format not in (None, "html"))
    fmt = args.format or (Path(args.out).suffix.lstrip(".") if args.out and not to_stdout else "html")
    if fmt not in FORMATS:
        raise XegemmError(f"--out {args.out}: cannot tell the format from the suffix; give --format "
                          f"{'|'.join(FORMATS)}")
    with tempfile.TemporaryDirectory(prefix="xegemm-report-") as scratch:
        results = [d for i, r in enumerate(args.results) for d in _results_dirs(r, Path(scratch) / str(i))]
        baseline = [d for i, r in enumerate(args.compare or []) for d in _results_dirs(r, Path(scratch) / f"a{i}")]
        for source in load_sources([*results, *baseline]):     # rows left out of the report, each said once
            for note in source.missing:
                if note.endswith("; skipped"):
                    print(f"xegemm: warning: {note}", file=sys.stderr)
        if to_stdout:
            sys.stdout.write(render(results, fmt, baseline or None, ".", args.command_line))
            return 0
        out = Path(args.out or f"report.{fmt}")
        write_report(results, out, fmt, baseline=baseline or None, command=args.command_line)
    print(f"wrote {out}")
    return 0


def _results_dirs(what: str, scratch: Path) -> list[Path]:
    """An output directory as it is; a tuning study database (a SQLite ``.db`` file or a SQLAlchemy URL) exported
    first, one directory per study, into ``scratch``."""
    from xegemm.tune.export import export_all
    from xegemm.tune.study import open_storage
    if "://" in what or (what.endswith(".db") and Path(what).is_file()):
        url = what if "://" in what else f"sqlite:///{Path(what).resolve()}"
        return export_all(open_storage(url), scratch)
    return [Path(what)]


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``5m``, ``1.5h`` -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    number, unit = (text[:-1], text[-1]) if text and text[-1] in units else (text, "s")
    try:
        seconds = float(number) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a duration; write e.g. 90s, 5m or 1h") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"'{text}': a duration must be a positive number of seconds")
    return seconds


def _checked(convert, ok, what: str):
    """An argparse type: ``convert(text)`` when ``ok`` accepts it, else the error '... is not WHAT'."""
    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"'{text}' is not {what}")
        return value
    return parse


_seconds = _checked(float, lambda v: math.isfinite(v) and v > 0, "a positive number of seconds")
_seed = _checked(int, lambda v: 0 <= v < 2**32, f"a seed (an integer from 0 to {2**32 - 1})")
_positive = _checked(int, lambda v: 0 < v <= MAX_COUNT, f"a positive integer (at most {MAX_COUNT})")
_count = _checked(int, lambda v: 0 <= v <= 20, "an integer from 0 to 20")


def cmd_tune(args) -> int:
    from xegemm.config import load_config
    from xegemm.tune import tune
    from xegemm.tune.export import export
    from xegemm.tune.options import TuneOptions
    from xegemm.tune.study import default_url, mask_url, open_storage
    config_name = args.study or load_config(args.config).name
    out = Path(args.out) if args.out else None
    if args.export:
        if out is None and not args.storage:
            raise XegemmError("--export needs --out DIR (the study's directory) or --storage URL")
        url = args.storage or default_url(out)
        result = export(open_storage(url), config_name, out or Path("."))
        print(f"exported study '{config_name}' from {mask_url(url)}: best.yaml, best.json, trials.csv, kernels/ "
              f"in {out or Path('.')}")
        _print_best(result)
        return 0
    result = tune(args.config, shapes=args.shapes, options=TuneOptions.from_args(args))
    for label, tally in result.tallies.items():
        print(f"{label}: {tally.evaluated} evaluated ({tally.cached} from the cache, {tally.failed} failed), "
              f"{tally.pruned} pruned, {tally.retried} retried, {tally.duplicates} duplicate proposals skipped"
              + (f", {tally.outside} proposals outside the sweep" if tally.outside else ""))
    _print_best(result.best)
    print(f"study '{args.study or config_name}' in {result.storage}; wrote best.yaml, best.json, trials.csv, "
          f"kernels/ in {result.out}")
    return 0


def _print_best(best: dict) -> None:
    for label, entry in best["shapes"].items():
        winner = entry["best"]
        if winner is None:
            print(f"{label}: no kernel passed ({entry['trials']} trials, {entry['pruned']} pruned)")
            continue
        predicted = (winner.get("extra") or {}).get("predicted")
        if winner.get("gflops") is not None:
            speed = f"{winner['gflops']:.1f} GFLOP/s"
        elif predicted:
            speed = (f"predicted {predicted['tflops']:.1f} TFLOP/s on {predicted['part']} ({predicted['bound']}-bound; "
                     f"the static model calibrated against published figures, docs/benchmarks.md, of a build whose "
                     f"machine code issues the plan's DPAS and block loads without spilling; not a measured speed)")
        else:
            speed = (f"static score {winner['value']:.4f} (no unit: the static model's predicted efficiency "
                     f"in (0, 1], higher is better, of a build whose machine code issues the plan's DPAS and block "
                     f"loads without spilling; not a measured speed)")
        noisy = (winner.get("reference") or {}).get("high_cv")
        ratio = (f" ({winner['ratio_to_reference']:.2f}x numpy" + (", uncertain: the CV stayed above 10 %, the "
                 "machine was busy" if noisy else "") + ")" if winner.get("ratio_to_reference") else "")
        print(f"{label}: best {winner['kernel']}: {speed}{ratio}, trial {winner['trial']}")
        sure = entry.get("confidence") or {}
        if sure.get("retimed"):
            print(f"{label}: the {len(sure['leaders'])} leaders timed again in {sure['rounds']} rounds: the order "
                  + ("held" if sure["order_held"] else "did not settle") + ("; the winner's lead exceeds the noise"
                  if sure["separated"] else "; the winner's lead is within the noise (the leaders are as fast)"))


def cmd_export(args) -> int:
    from xegemm.export import export as export_kernels
    manifest = export_kernels(args.source, args.out, tuple(args.target or ["cpu"]), progress=sys.stderr,
                              compiler=args.compiler)
    print(f"wrote {len(manifest['kernels'])} kernel(s) to {args.out} (manifest.json, xegemm_kernels.h, example.c, "
          f"Makefile); run them with: make -C {shlex.quote(str(args.out))} run")
    return 0


def cmd_support(args) -> int:
    from xegemm.jobs.support import markdown as support_markdown
    print(support_markdown(compilers=(args.compiler,) if args.compiler else None), end="")
    return 0


def _code_options(p) -> None:
    """--allow-code and --code-path: consent for a config's ``epilogue.function`` (docs/epilogues.md)."""
    p.add_argument("--allow-code", action="store_true",
                   help="a config may name a Python function (epilogue.function): import it from the installed "
                        "environment or a --code-path folder (never from the config's folder); also "
                        "XEGEMM_ALLOW_CODE=1")
    p.add_argument("--code-path", action="append", metavar="DIR",
                   help="with --allow-code: a folder a config's function may be imported from (repeatable)")


def _compiler_option(p, what: str) -> None:
    """``--compiler NAME|PATH``, the one spelling of the choice of offline compiler every command takes (tune's is
    TuneOptions.compiler, with the same help)."""
    from xegemm.aot.toolchain import compiler_help
    p.add_argument("--compiler", metavar="NAME|PATH", help=compiler_help(what))


# ---- the parser: one function per subcommand adds its arguments (and imports what they need) -------------

def _devices_arguments(p) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_devices)


def _atoms_arguments(atoms) -> None:
    asub = atoms.add_subparsers(dest="atoms_command", required=True)
    p = asub.add_parser("list", help="every legal atom (and the flagged sycl-tla ones) with key properties")
    p.add_argument("--kind", choices=["copy", "mma"])
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_atoms_list)
    p = asub.add_parser("show", help="one atom: which elements each work-item holds")
    p.add_argument("name", help="e.g. XE_2D_U16x32x16_LD_N or XE_8x16x16_F32BF16BF16F32_TT")
    p.add_argument("--json", action="store_true")
    p.add_argument("--all", action="store_true", help="print every register element, not the first 16")
    p.set_defaults(func=cmd_atoms_show)
    p = asub.add_parser("coopmatrix", help="the coop-matrix layout (tinytc's, docs/atoms.md §8) of one matrix")
    p.add_argument("--use", required=True, choices=["a", "b", "acc"])
    p.add_argument("--rows", required=True, type=int)
    p.add_argument("--cols", required=True, type=int)
    p.add_argument("--sg", type=int, default=16, help="sub-group size (default 16)")
    p.add_argument("--dtype", default="f32", help="element type (default f32)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_atoms_coopmatrix)


def _generate_arguments(p) -> None:
    from xegemm.lowering import LOWERINGS
    p.add_argument("configs", nargs="+", metavar="CONFIG")
    p.add_argument("--out", default="kernels", help="output directory (default kernels/)")
    p.add_argument("--lowering", default="portable", choices=LOWERINGS)
    p.add_argument("--capabilities", help="compiler capabilities of the native lowering: igc-1.0.12504, "
                   "cl_intel_subgroup_2d_block_io or a .json file (default: $XEGEMM_COMPILER_CAPABILITIES, else "
                   "probe ocloc)")
    _code_options(p)
    _compiler_option(p, "with --lowering native, the compiler whose probed capabilities spell the atoms")
    p.set_defaults(func=cmd_generate)


def _build_arguments(p) -> None:
    from xegemm.library.targets import AOT_TARGETS, GRF_MODES
    p.add_argument("config")
    p.add_argument("--target", choices=tuple(dict.fromkeys((*AOT_TARGETS, "bmg"))), default="pvc",
                   help="bmg: with the current compiler (make ocloc-current)")
    p.add_argument("--grf", type=int, choices=GRF_MODES, help="GRF mode (default: the config's target.grf)")
    p.add_argument("--out", help="output directory (default runs/build-<config>-<target>)")
    p.add_argument("--capabilities", help="compiler capabilities: igc-1.0.12504, igc-2.40.14, "
                                          "cl_intel_subgroup_2d_block_io, a .json file; default: probe the compiler")
    p.add_argument("--lowering", choices=("native", "coopmat"), default="native",
                   help="native (OpenCL C with the Xe builtins) or coopmat (SPIR-V cooperative matrices, built "
                        "by the current compiler: make ocloc-current)")
    _compiler_option(p, "the compiler that builds")
    p.add_argument("--strict", action="store_true", help="exit 1 if any variant fails to build")
    _code_options(p)
    p.set_defaults(func=cmd_build)


def _run_arguments(p) -> None:
    from xegemm.evaluate.isolated import TimeLimits
    from xegemm.lowering import LOWERINGS
    p.add_argument("config")
    p.add_argument("--device", help="dpctl filter string, e.g. opencl:cpu:0 (default: the best device)")
    p.add_argument("--out", help="results directory (default runs/<timestamp>); an existing one resumes")
    p.add_argument("--shapes", help="MxNxK[xB],... or a file: YAML, or 'M N K [L]' lines (.in), as for tune; "
                                    "replaces the config's problem and its problem sweep")
    p.add_argument("--lowering", choices=LOWERINGS,
                   help="default: native on a device with Xe 2D block IO and DPAS, else portable; native "
                        "on a device without them runs through their CPU emulation (a correctness path)")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 if any variant fails to build or verify, times out, or none verifies")
    p.add_argument("--build-timeout", type=_seconds, default=TimeLimits.build_s, metavar="S",
                   help=f"seconds one build may take before its worker is killed (default {TimeLimits.build_s:.0f})")
    p.add_argument("--run-timeout", type=_seconds, metavar="S",
                   help="seconds one variant's verification and timing may take (default: from the problem size)")
    _code_options(p)
    p.set_defaults(func=cmd_run)


def _report_arguments(p) -> None:
    from xegemm.reporting import FORMATS
    p.add_argument("results", nargs="+", metavar="RUN_OR_STUDY",
                   help="output directories of `xegemm run`, `xegemm tune` or `xegemm build`, or a study database "
                        "(a SQLite .db file or a SQLAlchemy URL such as postgresql://...)")
    p.add_argument("--compare", nargs="+", metavar="RUN_DIR",
                   help="the baseline (run A): show the results against it per common variant")
    p.add_argument("--out", help="the file to write (default report.<format>); its suffix picks the format")
    p.add_argument("--format", choices=FORMATS, help="html (default), csv, json or md")
    _code_options(p)
    p.set_defaults(func=cmd_report)


def _tune_arguments(p) -> None:
    """The config, the shapes and ``--export``; every other option is a field of TuneOptions."""
    from xegemm.tune.options import add_arguments
    p.add_argument("config")
    p.add_argument("--shapes", help="MxNxK[xB],... or a file: YAML, or 'M N K [L]' lines (.in); default: the "
                                    "config's problem")
    add_arguments(p, {"count": _positive, "small_count": _count, "seed": _seed, "duration": parse_duration,
                      "seconds": _seconds})
    p.add_argument("--export", action="store_true", help="only write best.yaml, best.json, trials.csv, kernels/ "
                                                         "from the study database")
    _code_options(p)
    p.set_defaults(func=cmd_tune)


def _export_arguments(p) -> None:
    from xegemm.export import TARGETS as EXPORT_TARGETS
    p.add_argument("source", help="a config file or a tune output directory (best.yaml)")
    p.add_argument("--out", required=True, help="a new directory")
    p.add_argument("--target", action="append", choices=EXPORT_TARGETS,
                   help="cpu (OpenCL C for any OpenCL device; the default), coopmat (the coopmat lowering's SPIR-V "
                        "module, for clCreateProgramWithIL) or a GPU (also ocloc binaries: "
                        f"{', '.join(t for t in EXPORT_TARGETS if t not in ('cpu', 'coopmat'))}); repeatable")
    _compiler_option(p, "the compiler that builds the GPU targets' binaries")
    _code_options(p)
    p.set_defaults(func=cmd_export)


def _support_arguments(p) -> None:
    p.add_argument("--compiler", choices=("system", "current"),
                   help="only this compiler's columns (default: both; each from its measured capability set, "
                        "so neither needs to be installed)")
    p.set_defaults(func=cmd_support)


# (name, summary, the function that adds its arguments): the subcommands in the order of `xegemm --help`
SUBCOMMANDS = (
    ("devices", "list the SYCL devices dpctl sees and the lowering each would get", _devices_arguments),
    ("atoms", "the atom model: list atoms, show lane maps, coop-matrix layouts", _atoms_arguments),
    ("generate", "render every variant of configs to OpenCL C plus manifest.json", _generate_arguments),
    ("build", "compile every variant ahead of time with ocloc for a real Xe GPU and count its machine code "
              "(build.json)", _build_arguments),
    ("run", "generate, build, verify and profile a config's variants; write a report", _run_arguments),
    ("report", "a report of one or more run, tune or build directories (or tuning study databases): a "
               "self-contained HTML page of plots, cutlass_profiler-style CSV, JSON or Markdown", _report_arguments),
    ("tune", "search a config's sweep for the fastest kernel per shape (Optuna study, resumable, shared by "
             "workers); write best.yaml, best.json, trials.csv", _tune_arguments),
    ("export", "write kernels a C/C++/SYCL program can launch: sources, ocloc binaries, manifest.json, "
               "xegemm_kernels.h, example.c and a Makefile (docs/use.md)", _export_arguments),
    ("support", "the supported matrix (layouts x types x epilogues x targets) as Markdown, each cell planned and "
                "rendered for its target", _support_arguments),
)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``command``, only that subcommand gets its arguments (and imports what they need: the
    others are listed by name and summary only; ``""``: none), so that ``--help`` and ``--version`` import nothing
    heavy.  ``None`` builds every subcommand."""
    parser = argparse.ArgumentParser(prog="xegemm", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"xegemm {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, summary, add_arguments in SUBCOMMANDS:
        p = sub.add_parser(name, help=summary)
        if command is None or command == name:
            add_arguments(p)
    return parser


def _interrupted_code() -> int:
    return 128 + _SIGNALLED[0] if _SIGNALLED else 130


def _error_log(exc: BaseException) -> str:
    """Write the traceback of an internal error to a log file; its path (or why there is none)."""
    text = "".join(traceback.format_exception(exc))
    for folder in (Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xegemm" / "errors",
                   Path(tempfile.gettempdir())):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, path = tempfile.mkstemp(dir=folder, prefix=time.strftime("xegemm-error-%Y%m%d-%H%M%S-"),
                                        suffix=".log")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(f"{shlex.join(sys.argv)}\nxegemm {__version__}\n\n{text}")
            return path
        except OSError:
            continue
    return "(no log: neither the cache directory nor the temporary directory is writable)"


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    command = next((word for word in words if not word.startswith("-")), "")    # no top-level option takes a value
    args = build_parser(command).parse_args(words)
    args.command_line = shlex.join(["xegemm", *words])
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if main_thread else None
    try:
        return _main(args)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def _main(args) -> int:
    """Run the command; every way it can end becomes an exit code and at most one line on stderr."""
    try:
        if getattr(args, "code_path", None) and not args.allow_code:
            raise XegemmError("--code-path DIR is where an allowed config's function is imported from; it needs "
                              "--allow-code")
        if getattr(args, "allow_code", False):     # before anything reads a config; workers inherit it
            from xegemm.epilogues.config import allow_code_for_process
            allow_code_for_process(args.code_path or ())
        return args.func(args)
    except XegemmError as exc:
        if hasattr(exc, "exit_code"):            # an interrupted run or study (RunInterrupted): no "error:"
            print(f"xegemm: {exc}", file=sys.stderr)
            return _interrupted_code() if _SIGNALLED else exc.exit_code
        print(f"xegemm: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("xegemm: interrupted", file=sys.stderr)
        return _interrupted_code()
    except BrokenPipeError:  # output piped into `head` and closed: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:   # the file system refused (a name too long, no permission, a full disk): say which
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"xegemm: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except MemoryError as exc:
        print(f"xegemm: error: out of memory (the machine or a limit such as `ulimit -v` ran out); details in "
              f"{_error_log(exc)}", file=sys.stderr)
        return 3
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line and a log, never a traceback
        print(f"xegemm: internal error: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
              f"; the traceback is in {_error_log(exc)} (please report it)", file=sys.stderr)
        return 70


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
