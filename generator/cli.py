"""The ``xegemm`` command line: a thin layer over the documented Python API."""

from __future__ import annotations

import argparse
import json
import sys

from xegemm.errors import XegemmError


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*(str(c) for c in r)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def cmd_devices(args) -> int:
    from xegemm.runtime import list_devices, select_sycl_device  # noqa: PLC0415

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xegemm", description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("devices", help="list the SYCL devices dpctl sees and the lowering each would get")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_devices)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except XegemmError as exc:
        print(f"xegemm: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
