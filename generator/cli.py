"""The ``xegemm`` command line: a thin layer over the documented Python API."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
from pathlib import Path

from xegemm import __version__
from xegemm.atoms.block1d import Block1DAtom
from xegemm.atoms.coopmatrix import coopmatrix_layout, format_coopmatrix_table
from xegemm.atoms.copy import CopyAtom, enumerate_copy_atoms
from xegemm.atoms.mma import MmaAtom, enumerate_mma_atoms
from xegemm.errors import XegemmError
from xegemm.lowering import LOWERINGS
from xegemm.evaluate import STATUSES
from xegemm.evaluate.isolated import TimeLimits
from xegemm.pipeline import RunInterrupted, build_config, generate, run
from xegemm.reporting import FORMATS, write_report
from xegemm.runtime import list_devices, select_sycl_device
from xegemm.targets import AOT_TARGETS, GRF_MODES


FAILURES = tuple(s for s in STATUSES if s not in ("ok", "generated", "rejected"))


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*(str(c) for c in r)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def cmd_devices(args) -> int:

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

    name = name.strip()
    if name.startswith("XE_1D_"):
        return Block1DAtom.parse(name).check()
    return CopyAtom.parse(name) if name.startswith("XE_2D_") else MmaAtom.parse(name)


def cmd_atoms_list(args) -> int:

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

    atom = _atom(args.name)
    if isinstance(atom, Block1DAtom):
        lm = atom.lane_map
        if args.json:
            print(json.dumps({"name": atom.name, "lanes": lm.lanes, "map": lm.to_json(),
                              **{k: v for k, v in atom.describe().items() if k != "name"}}))
            return 0
        print(f"{atom.name}: {atom.rows} rows x {atom.cols} cols, one {atom.builtin} per row "
              f"(sub-group of {lm.lanes}); per work-item {atom.register_type or 'no registers'}")
        if atom.elems_per_lane:
            print()
            print(lm.format_table(None if args.all else 16))
        return 0
    if isinstance(atom, CopyAtom):
        if not atom.legal:
            try:
                atom.check()
            except XegemmError as exc:
                flag = f" (sycl-tla defines it: {atom.quirk})" if atom.quirk else ""
                raise XegemmError(f"{exc}{flag}") from None
        if args.json:
            print(json.dumps({"name": atom.name, "lanes": atom.lane_map.lanes, "map": atom.lane_map.to_json(),
                              **{k: v for k, v in atom.describe().items() if k != "name"}}))
            return 0
        d = atom.describe()
        m = d["message"]
        print(f"{atom.name}: {atom.rows} rows x {atom.cols} cols of {atom.type_name} "
              f"({'load' if atom.is_load else 'store' if atom.is_store else 'prefetch'}, layout {atom.layout}"
              f"{', packed' if atom.packed else ''})")
        print(f"message: {m['kind']}, {m['elem_bits']}-bit elements, block {m['block_width']} wide x "
              f"{m['block_height']} rows x {m['block_count']} blocks; builtin {atom.ib_builtin} / {atom.ocl_builtin}")
        print(f"per work-item: {atom.register_type or 'no registers'} ({atom.register_bytes} B)")
        if atom.quirk:
            print(f"FLAGGED (sycl-tla): {atom.quirk}")
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

    layout = coopmatrix_layout(args.use, args.rows, args.cols, args.sg, args.dtype)
    print(json.dumps(layout.to_json()) if args.json else format_coopmatrix_table(layout))
    return 0


def cmd_generate(args) -> int:

    written = 0
    for config in args.configs:
        manifest = generate(config, args.out, lowering=args.lowering, capabilities_name=args.capabilities)
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

    limits = TimeLimits(build_s=args.build_timeout, run_s=args.run_timeout)
    signal.signal(signal.SIGTERM, _interrupt)     # stop like Ctrl-C: partial reports, the resume command
    results = run(args.config, device=args.device, out_dir=args.out, lowering=args.lowering, limits=limits,
                  command=args.command_line)
    failed = [v for v in results["variants"] if v["status"] in FAILURES]
    verified = [v for v in results["variants"] if v["status"] == "ok"]
    if args.strict and (failed or not verified):
        why = f"{len(failed)} variants failed" if failed else "no variant verified"
        print(f"xegemm: --strict: {why}", file=sys.stderr)
        return 1
    return 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def cmd_build(args) -> int:

    result = build_config(args.config, target=args.target, grf=args.grf, out_dir=args.out,
                          capabilities_name=args.capabilities, progress=sys.stderr)
    ok = sum(v["status"] == "ok" for v in result["variants"])
    print(f"{ok} of {len(result['variants'])} variants built for {args.target} with compiler capabilities "
          f"{result['capabilities']}; see build.json in {args.out or 'runs/build-' + Path(args.config).stem + '-' + args.target}")
    failed = [v for v in result["variants"] if v["status"] in FAILURES]
    return 1 if args.strict and (failed or not ok) else 0


def cmd_report(args) -> int:

    fmt = args.format or (Path(args.out).suffix.lstrip(".") if args.out else "html")
    if fmt not in FORMATS:
        raise XegemmError(f"--out {args.out}: cannot tell the format from the suffix; give --format "
                          f"{'|'.join(FORMATS)}")
    out = Path(args.out or f"report.{fmt}")
    write_report(args.results, out, fmt, baseline=args.compare, command=args.command_line)
    print(f"wrote {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xegemm", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"xegemm {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("devices", help="list the SYCL devices dpctl sees and the lowering each would get")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_devices)

    atoms = sub.add_parser("atoms", help="the atom model: list atoms, show lane maps, coop-matrix layouts")
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
    p = asub.add_parser("coopmatrix", help="the coop-matrix layout of seed 001 for one matrix")
    p.add_argument("--use", required=True, choices=["a", "b", "acc"])
    p.add_argument("--rows", required=True, type=int)
    p.add_argument("--cols", required=True, type=int)
    p.add_argument("--sg", type=int, default=16, help="sub-group size (default 16)")
    p.add_argument("--dtype", default="f32", help="element type (default f32)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_atoms_coopmatrix)

    p = sub.add_parser("generate", help="render every variant of configs to OpenCL C plus manifest.json")
    p.add_argument("configs", nargs="+", metavar="CONFIG")
    p.add_argument("--out", default="kernels", help="output directory (default kernels/)")
    p.add_argument("--lowering", default="portable", choices=LOWERINGS)
    p.add_argument("--capabilities", help="compiler capabilities of the native lowering: igc-1.0.12504, "
                   "cl_intel_subgroup_2d_block_io or a .json file (default: $XEGEMM_COMPILER_CAPABILITIES, else "
                   "probe ocloc)")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("build", help="compile every variant ahead of time with ocloc for a real Xe GPU and "
                                     "count its machine code (build.json)")
    p.add_argument("config")
    p.add_argument("--target", choices=AOT_TARGETS, default="pvc")
    p.add_argument("--grf", type=int, choices=GRF_MODES, help="GRF mode (default: the config's target.grf)")
    p.add_argument("--out", help="output directory (default runs/build-<config>-<target>)")
    p.add_argument("--capabilities", help="compiler capabilities: igc-1.0.12504, cl_intel_subgroup_2d_block_io, a .json "
                                     "file; default: probe the installed ocloc")
    p.add_argument("--strict", action="store_true", help="exit 1 if any variant fails to build")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("run", help="generate, build, verify and profile a config's variants; write a report")
    p.add_argument("config")
    p.add_argument("--device", help="dpctl filter string, e.g. opencl:cpu:0 (default: the best device)")
    p.add_argument("--out", help="results directory (default runs/<timestamp>); an existing one resumes")
    p.add_argument("--lowering", choices=LOWERINGS,
                   help="default: native on a device with Xe 2D block IO and DPAS, else portable")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 if any variant fails to build or verify, times out, or none verifies")
    p.add_argument("--build-timeout", type=float, default=TimeLimits.build_s, metavar="S",
                   help=f"seconds one build may take before its worker is killed (default {TimeLimits.build_s:.0f})")
    p.add_argument("--run-timeout", type=float, metavar="S",
                   help="seconds one variant's verification and timing may take (default: from the problem size)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("report", help="a report of one or more run (or build) directories: a self-contained HTML "
                                      "page of plots, cutlass_profiler-style CSV, JSON or Markdown")
    p.add_argument("results", nargs="+", metavar="RUN_DIR", help="output directories of `xegemm run` or `xegemm build`")
    p.add_argument("--compare", nargs="+", metavar="RUN_DIR",
                   help="the baseline (run A): show the results against it per common variant")
    p.add_argument("--out", help="the file to write (default report.<format>); its suffix picks the format")
    p.add_argument("--format", choices=FORMATS, help="html (default), csv, json or md")
    p.set_defaults(func=cmd_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.command_line = shlex.join(["xegemm", *(sys.argv[1:] if argv is None else argv)])
    try:
        return args.func(args)
    except RunInterrupted as exc:
        print(f"xegemm: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("xegemm: interrupted", file=sys.stderr)
        return 130
    except XegemmError as exc:
        print(f"xegemm: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and closed: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
