"""The plan's register estimate against the ISA: which variants spill when ocloc builds them.

A table row names a variant (target, types, layout, sub-group tile, sub-groups, prefetch distance, GRF mode)
and the spill bytes ocloc reported for its native kernel.  tests/data/register_spills.tsv is the table measured
with Debian's compiler for pvc and dg2; a test compares the estimate's verdict with every row, and docs/registers.md
"Registers" says how well they agree.  ``python -m xegemm.evaluate.spills TABLE`` rebuilds every row with the
installed ocloc and rewrites the spill bytes (about a second per row); ``--sample N --target T`` appends N
fresh variants drawn at random near the estimate's limit, measured.  ``--timeout S`` stops a build after S
seconds (a spilling dg2 build can take many minutes): its row is dropped, and the table's comment counts it,
with its verdict and whether IGC had already dumped an allocation that spilled.
"""

from __future__ import annotations

import argparse
import functools
import random
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from xegemm.aot.build import compile_kernel
from xegemm.aot.isa import parse_shader_dump
from xegemm.aot.toolchain import OCLOC_TIMEOUT
from xegemm.aot.capabilities import DEBIAN_CAPABILITIES
from xegemm.aot.toolchain import compiler_version
from xegemm.config import Config, config_from_text
from xegemm.library.dtypes import dtype
from xegemm.errors import PlanRejected, XegemmError
from xegemm.library.layouts import AB_LAYOUTS, from_letters
from xegemm.lowering import Lowering, named_lowering
from xegemm.plan.planner import Plan, plan
from xegemm.plan.registers import REGISTER_VERDICTS
from xegemm.kernel.render import render_kernel
from xegemm.library.targets import get_target

COLUMNS = ("target", "types", "layout", "subgroup_tile", "subgroups", "prefetch", "grf", "spill_bytes")
PROBLEM = 1024          # M = N = K: meets the 2D block surface rules; registers do not depend on it
REGENERATE = "regenerate: python -m xegemm.evaluate.spills tests/data/register_spills.tsv"


class BuildTimedOut(XegemmError):
    """A variant's build ran past its time limit; ``spilled``: IGC had dumped an allocation that spilled."""

    def __init__(self, message: str, spilled: bool):
        super().__init__(message)
        self.spilled = spilled


@dataclass(frozen=True)
class SpillCase:
    """One variant and the spill bytes of its build for ``target`` (None: not measured)."""

    target: str                             # pvc (SIMD16, 2D block copies) or dg2 (SIMD8, 1D block copies)
    types: tuple[str, str, str, str]        # A, B, accumulator, C
    layout: str                             # CUTLASS letters of A, B, C: "RCR" = A row-, B column-major
    subgroup_tile: tuple[int, int, int]     # M, N, K of one sub-group's tile
    subgroups: tuple[int, int]
    prefetch: int
    grf: int
    spill_bytes: int | None = None

    def config(self) -> Config:
        """The variant as a config."""
        return config_from_text(self.config_text())

    def config_text(self) -> str:
        """The variant as config YAML."""
        (m, n, k), (sm, sn) = self.subgroup_tile, self.subgroups
        a, b, acc, c = self.types
        la, lb, lc = from_letters(self.layout)
        return (
            f"problem: {{m: {PROBLEM}, n: {PROBLEM}, k: {PROBLEM}}}\n"
            f"types: {{a: {a}, b: {b}, acc: {acc}, c: {c}}}\n"
            f"layout: {{a: {la}, b: {lb}, c: {lc}}}\n"
            f"tile: {{workgroup: [{m * sm}, {n * sn}, {k}], subgroups: [{sm}, {sn}], "
            f"subgroup_size: {get_target(self.target).simd}}}\n"
            f"pipeline: {{prefetch: {self.prefetch}}}\ntarget: {{grf: {self.grf}}}\n")

    def plan(self) -> Plan:
        """The variant's plan for Debian's compiler, kept even where the estimate exceeds the budget."""
        return plan(self.config(), debian_lowering(self.target).issues, check_registers=False)

    def measure(self, workdir: Path, timeout: float = OCLOC_TIMEOUT) -> int:
        """Spill bytes of the variant's native kernel built for its target (XegemmError when the build fails or
        its machine code does not issue the plan's dpas: a kernel missing work would prove nothing;
        :class:`BuildTimedOut` when it runs past ``timeout`` seconds)."""
        p, lowering = self.plan(), debian_lowering(self.target)
        build = compile_kernel(render_kernel(p, lowering), self.target, grf=self.grf, workdir=workdir,
                               timeout=timeout)
        if build.status == "timed_out":
            dumps = [parse_shader_dump(name, text) for name, text in build.dumps.items()]
            spilled = any(d is not None and d.spilled for d in dumps)
            raise BuildTimedOut(f"{p.name}: ocloc stopped after {timeout:g} s"
                                f"{' (IGC had dumped an allocation that spilled)' if spilled else ''}", spilled)
        if not build.ok:
            raise XegemmError(f"{p.name}: ocloc failed: {build.log[-300:]}")
        if build.stats.dpas != p.dpas_per_kstep:
            raise XegemmError(f"{p.name}: the ISA has {build.stats.dpas} dpas, the plan {p.dpas_per_kstep}")
        return build.stats.spill_bytes

    def row(self) -> str:
        return "\t".join((self.target, ",".join(self.types), self.layout, "x".join(map(str, self.subgroup_tile)),
                          "x".join(map(str, self.subgroups)), str(self.prefetch), str(self.grf),
                          "" if self.spill_bytes is None else str(self.spill_bytes)))

    @classmethod
    def parse(cls, line: str) -> "SpillCase":
        target, types, layout, tile, subgroups, prefetch, grf, spill = line.rstrip("\n").split("\t")
        return cls(target, tuple(types.split(",")), layout, tuple(int(x) for x in tile.split("x")),
                   tuple(int(x) for x in subgroups.split("x")), int(prefetch), int(grf),
                   int(spill) if spill else None)


@functools.cache
def debian_lowering(target: str = "pvc") -> Lowering:
    """The native lowering with the capabilities of Debian's compiler (the one the table was measured with)."""
    return named_lowering("native", DEBIAN_CAPABILITIES, target)


@dataclass
class SpillTable:
    """A table's comment lines (where its rows come from) and rows."""

    comments: list[str]
    cases: list[SpillCase]


def read_table(path: Path | str) -> SpillTable:
    """A table (``#`` lines are comments; the first other line names the columns)."""
    text = Path(path).read_text().splitlines()
    comments = [ln[2:] for ln in text if ln.startswith("# ")]
    lines = [ln for ln in text if ln and not ln.startswith("#")]
    if tuple(lines[0].split("\t")) != COLUMNS:
        raise XegemmError(f"{path}: the first row must name the columns {', '.join(COLUMNS)}")
    return SpillTable(comments, [SpillCase.parse(ln) for ln in lines[1:]])


def write_table(path: Path | str, table: SpillTable) -> None:
    text = "".join(f"# {ln}\n" for ln in table.comments) + "\t".join(COLUMNS) + "\n"
    Path(path).write_text(text + "".join(c.row() + "\n" for c in table.cases))


# what a random draw varies (docs/registers.md lists the measured ranges)
TYPE_FAMILIES = (("bf16", "bf16", "f32", "f32"), ("f16", "f16", "f32", "f32"), ("bf16", "bf16", "bf16", "bf16"),
                 ("f16", "f16", "f16", "f16"),
                 *((a, b, "s32", "s32") for a in ("s8", "u8") for b in ("s8", "u8")),
                 *((a, b, "s32", "s32") for a in ("s4", "u4") for b in ("s4", "u4")))
SUBGROUP_LAYOUTS = ((1, 1), (1, 2), (2, 1), (2, 2), (4, 2), (2, 4), (4, 4), (8, 4), (4, 8))
ACC_SHARE = 0.15        # drawn variants' accumulators take at least this share of the budget (nearer the limit)


def estimate_margin(case: SpillCase) -> float:
    """How far the estimate lies from the budget, as a fraction of it (> 0: over, the planner rejects)."""
    return case.plan().registers["total_grf"] / case.grf - 1


def draw(target: str, count: int, band: tuple[float, float], seed: int, exclude=()) -> list[SpillCase]:
    """``count`` distinct random variants for ``target`` whose estimate lies within ``band`` of the budget
    (margins as :func:`estimate_margin`), none of ``exclude``: types, layout, sub-group tile (1 to 8 DPAS
    k-chunks), sub-groups, prefetch distance and GRF mode drawn uniformly from what the planner accepts, among
    tiles whose accumulators take :data:`ACC_SHARE` to all of the budget."""
    t, rng = get_target(target), random.Random(seed)
    families = [f for f in TYPE_FAMILIES if f[0] in t.dpas_inputs and (f[2] != f[0] or t.half_accumulators)]
    seen = {replace(c, spill_bytes=None) for c in exclude}
    out: list[SpillCase] = []
    for _ in range(200 * count):
        if len(out) == count:
            break
        types = rng.choice(families)
        k = 256 // dtype(types[0]).bits            # one DPAS's K
        case = SpillCase(target, types, rng.choice(AB_LAYOUTS),
                         (8 * rng.randint(1, 16), t.simd * rng.randint(1, 256 // t.simd), k * rng.randint(1, 8)),
                         rng.choice(SUBGROUP_LAYOUTS), rng.randint(0, 3), rng.choice(t.grf_modes))
        acc = case.subgroup_tile[0] * case.subgroup_tile[1] * dtype(types[2]).bits // 8 / t.grf_bytes
        if case in seen or not ACC_SHARE <= acc / case.grf <= 1 + band[1]:   # planning costs up to 0.4 s
            continue
        try:
            margin = estimate_margin(case)
            if band[0] <= margin <= band[1]:      # the compiler can issue it (else it cannot be measured)
                render_kernel(case.plan(), debian_lowering(target))
        except PlanRejected:
            continue
        if band[0] <= margin <= band[1]:
            seen.add(case)
            out.append(case)
    return out


def _measure_into(path: Path, table: SpillTable, todo: list[int], timeout: float = OCLOC_TIMEOUT) -> str:
    """Measure the rows ``todo`` of ``table`` one by one, rewriting the file after each (builds are slow); a row
    whose build fails or runs past ``timeout`` seconds is said on stderr and dropped.  Returns what was dropped,
    in words for the table's comment ("" if nothing)."""
    failed, timed_out = set(), []
    for n, i in enumerate(todo):
        with tempfile.TemporaryDirectory(prefix="xegemm-spills-") as tmp:   # a build's dumps take megabytes
            try:
                table.cases[i] = replace(table.cases[i], spill_bytes=table.cases[i].measure(Path(tmp), timeout))
            except XegemmError as exc:
                failed.add(i)
                if isinstance(exc, BuildTimedOut):
                    timed_out.append((table.cases[i].plan().registers["verdict"], exc.spilled))
                print(f"{n + 1}/{len(todo)} not measured, dropped: {exc}", file=sys.stderr)
                continue
        write_table(path, table)
        print(f"{n + 1}/{len(todo)} {table.cases[i].row()}", file=sys.stderr)
    table.cases = [c for i, c in enumerate(table.cases) if i not in failed]
    write_table(path, table)
    words = []
    if len(failed) > len(timed_out):
        words.append(f"{len(failed) - len(timed_out)} did not build")
    if timed_out:
        verdicts = ", ".join(f"{sum(v == verdict for v, _ in timed_out)} {verdict}" for verdict in REGISTER_VERDICTS
                             if any(v == verdict for v, _ in timed_out))
        words.append(f"{len(timed_out)} were still building after {timeout:g} s and were stopped "
                     f"(estimate: {verdicts}; IGC had dumped an allocation that spilled for "
                     f"{sum(s for _, s in timed_out)})")
    return "; ".join(words)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m xegemm.evaluate.spills",
                                     description="Rebuild every row of a spill table with ocloc and rewrite its "
                                                 "spill bytes, or append fresh variants drawn near the limit.")
    parser.add_argument("table", type=Path)
    parser.add_argument("--out", type=Path, help="write here instead of over the table")
    parser.add_argument("--sample", type=int, metavar="N", help="append N new variants, measured")
    parser.add_argument("--target", default="pvc", help="target of the new variants (pvc, dg2)")
    parser.add_argument("--band", type=float, nargs=2, default=(-0.12, 0.15), metavar=("LOW", "HIGH"),
                        help="estimate margins the new variants lie within (fractions of the budget)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=OCLOC_TIMEOUT, metavar="SECONDS",
                        help="stop a build after this long; its row is dropped and counted in the table's comment")
    args = parser.parse_args(argv)
    table, version = read_table(args.table), compiler_version()
    out = args.out or args.table
    built_with = f"ocloc {version.driver} (IGC {version.igc}), capabilities {DEBIAN_CAPABILITIES}"
    if args.sample:
        new = draw(args.target, args.sample, tuple(args.band), args.seed, exclude=table.cases)
        first = len(table.cases) + 1
        table.comments.append(f"rows {first}-{first + len(new) - 1}: {args.target}, drawn with --seed={args.seed} within "
                              f"{args.band[0]:+.0%} to {args.band[1]:+.0%} of the budget, built with {built_with}")
        table.cases += new
        dropped = _measure_into(out, table, list(range(first - 1, len(table.cases))), args.timeout)
        if dropped:     # the comment names the rows that are in the table
            table.comments[-1] = table.comments[-1].replace(f"-{first + len(new) - 1}:", f"-{len(table.cases)}:") \
                + f"; not here: {dropped}"
            write_table(out, table)
    else:
        table.comments = [f"spill bytes of each variant's native kernel built with {built_with}", REGENERATE]
        dropped = _measure_into(out, table, list(range(len(table.cases))), args.timeout)
        if dropped:
            table.comments.append(f"dropped: {dropped}")
            write_table(out, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
