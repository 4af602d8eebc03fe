"""The plan's register estimate against the ISA: which variants spill when ocloc builds them for pvc.

A table row names a variant (types, layout, sub-group tile, sub-groups, prefetch distance, GRF mode) and the
spill bytes ocloc reported for its native kernel.  tests/data/register_spills.tsv is the table measured with
Debian's compiler; a test compares the estimate's verdict (:func:`xegemm.plan.plan` rejects the variant)
with every row, and README "Registers" says how well they agree.  ``python -m xegemm.evaluate.spills TABLE``
rebuilds every row with the installed ocloc and rewrites the spill bytes (about a second per row).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from xegemm.aot.build import compile_kernel
from xegemm.aot.capabilities import DEBIAN_CAPABILITIES
from xegemm.aot.toolchain import compiler_version
from xegemm.config import Config, config_from_text
from xegemm.errors import XegemmError
from xegemm.lowering import Lowering, named_lowering
from xegemm.plan import Plan, plan
from xegemm.render import render_kernel

TARGET = "pvc"
COLUMNS = ("types", "layout", "subgroup_tile", "subgroups", "prefetch", "grf", "spill_bytes")
LAYOUTS = {"R": "row", "C": "col"}
PROBLEM = 1024          # M = N = K: meets the 2D block surface rules; registers do not depend on it


@dataclass(frozen=True)
class SpillCase:
    """One variant and the spill bytes of its pvc build (None: not measured)."""

    types: tuple[str, str, str, str]        # A, B, accumulator, C
    layout: str                             # CUTLASS letters of A, B, C: "RCR" = A row-, B column-major
    subgroup_tile: tuple[int, int, int]     # M, N, K of one sub-group's tile
    subgroups: tuple[int, int]
    prefetch: int
    grf: int
    spill_bytes: int | None = None

    def config(self) -> Config:
        (m, n, k), (sm, sn) = self.subgroup_tile, self.subgroups
        a, b, acc, c = self.types
        return config_from_text(
            f"problem: {{m: {PROBLEM}, n: {PROBLEM}, k: {PROBLEM}}}\n"
            f"types: {{a: {a}, b: {b}, acc: {acc}, c: {c}}}\n"
            f"layout: {{a: {LAYOUTS[self.layout[0]]}, b: {LAYOUTS[self.layout[1]]}, c: {LAYOUTS[self.layout[2]]}}}\n"
            f"tile: {{workgroup: [{m * sm}, {n * sn}, {k}], subgroups: [{sm}, {sn}], subgroup_size: 16}}\n"
            f"pipeline: {{prefetch: {self.prefetch}}}\ntarget: {{grf: {self.grf}}}\n")

    def plan(self, lowering: Lowering) -> Plan:
        """The variant's plan for ``lowering``, kept even where the register estimate exceeds the budget."""
        return plan(self.config(), lowering.issues, check_registers=False)

    def measure(self, lowering: Lowering, workdir: Path) -> int:
        """Spill bytes of the variant's native kernel built for pvc (XegemmError when the build fails or its
        machine code does not issue the plan's dpas: a kernel missing work would prove nothing)."""
        p = self.plan(lowering)
        build = compile_kernel(render_kernel(p, lowering), TARGET, grf=self.grf, workdir=workdir)
        if not build.ok:
            raise XegemmError(f"{p.name}: ocloc failed: {build.log[-300:]}")
        if build.stats.dpas != p.dpas_per_kstep:
            raise XegemmError(f"{p.name}: the ISA has {build.stats.dpas} dpas, the plan {p.dpas_per_kstep}")
        return build.stats.spill_bytes

    def row(self) -> str:
        return "\t".join((",".join(self.types), self.layout, "x".join(map(str, self.subgroup_tile)),
                          "x".join(map(str, self.subgroups)), str(self.prefetch), str(self.grf),
                          "" if self.spill_bytes is None else str(self.spill_bytes)))

    @classmethod
    def parse(cls, line: str) -> "SpillCase":
        types, layout, tile, subgroups, prefetch, grf, spill = line.rstrip("\n").split("\t")
        return cls(tuple(types.split(",")), layout, tuple(int(x) for x in tile.split("x")),
                   tuple(int(x) for x in subgroups.split("x")), int(prefetch), int(grf),
                   int(spill) if spill else None)


def debian_lowering() -> Lowering:
    """The native lowering with the capabilities of Debian's compiler (the one the table was measured with)."""
    return named_lowering("native", DEBIAN_CAPABILITIES, TARGET)


def read_table(path: Path | str) -> list[SpillCase]:
    """The rows of a table (``#`` lines are comments; the first other line names the columns)."""
    lines = [ln for ln in Path(path).read_text().splitlines() if ln and not ln.startswith("#")]
    if tuple(lines[0].split("\t")) != COLUMNS:
        raise XegemmError(f"{path}: the first row must name the columns {', '.join(COLUMNS)}")
    return [SpillCase.parse(ln) for ln in lines[1:]]


def write_table(path: Path | str, cases: list[SpillCase], comment: str) -> None:
    text = "".join(f"# {ln}\n" for ln in comment.splitlines()) + "\t".join(COLUMNS) + "\n"
    Path(path).write_text(text + "".join(c.row() + "\n" for c in cases))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m xegemm.evaluate.spills",
                                     description="Rebuild every row of a spill table for pvc with ocloc and "
                                                 "rewrite its spill bytes.")
    parser.add_argument("table", type=Path)
    parser.add_argument("--out", type=Path, help="write here instead of over the table")
    args = parser.parse_args(argv)
    cases, lowering, version = read_table(args.table), debian_lowering(), compiler_version()
    measured = []
    for i, case in enumerate(cases):
        with tempfile.TemporaryDirectory(prefix="xegemm-spills-") as tmp:   # a build's dumps take megabytes
            measured.append(replace(case, spill_bytes=case.measure(lowering, Path(tmp))))
        print(f"{i + 1}/{len(cases)} {measured[-1].row()}", file=sys.stderr)
    write_table(args.out or args.table, measured,
                f"spill bytes of each variant's native kernel built for {TARGET} with ocloc {version.driver} "
                f"(IGC {version.igc}), capabilities {DEBIAN_CAPABILITIES}\n"
                "regenerate: python -m xegemm.evaluate.spills tests/data/register_spills.tsv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
