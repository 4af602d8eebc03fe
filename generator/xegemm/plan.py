"""Plan one variant: the tile math, the atoms, how copy registers feed the MMA, and what it costs.

A plan is built by composing atoms, CuTe-style: each sub-group tile is covered by copy atoms, and each MMA
operand fragment is located in the copy registers by comparing lane maps: a contiguous run when the
coordinates of a run equal the operand's lane by lane (no code), else a reorder naming, per lane and
element, the copy tile, register element and lane holding it (a per-lane permutation or a cross-lane gather,
docs/atoms.md §1.4).  Nothing is special-cased per atom name: any legal atom whose layout fits is accepted,
anything else is rejected with the rule and the numbers that fail.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from xegemm.atoms.block1d import READ_ALIGN_BYTES, WRITE_ALIGN_BYTES, Block1DAtom, enumerate_block1d_atoms
from xegemm.atoms.block1d import TYPE_BITS as BLOCK1D_TYPE_BITS
from xegemm.atoms.copy import SUB_GROUP as BLOCK2D_SUB_GROUP
from xegemm.atoms.copy import TYPE_BITS as COPY_TYPE_BITS
from xegemm.atoms.copy import CopyAtom, enumerate_copy_atoms
from xegemm.atoms.mma import MmaAtom
from xegemm.config import Config
from xegemm.dtypes import ctype_shape, dtype
from xegemm.epilogue import EpilogueSpec
from xegemm.config.sections import tile_conflict
from xegemm.errors import XegemmError
from xegemm.quant import plan_violation as quant_violation
from xegemm.stream_k import iterations as stream_k_iterations
from xegemm.targets import dpas_widths, targets_at

GATHER_TILE_BYTES = 64       # per lane: larger 1D block tiles are a reorder's last resort (see _choose)
# The register estimate (:func:`_register_estimate`), fitted to what Debian's IGC allocates for the native k-step
# on pvc (docs/registers.md; the measured table is tests/data/register_spills.tsv):
RESERVED_GRF = {128: 20, 256: 18}   # by GRF mode: kernel arguments, loop counters, addresses beside the tiles
SUBGROUPS_GRF = 8                   # more reserved when a work-group has several sub-groups (their positions)
NEXT_CHUNK_SHARE = 8                # 1/8 of the copy tiles the next k-chunk adds are live early (hoisted loads)
PREFETCH_GRF = 2                    # per 2D block copy tile of a k-step, when prefetching: the prefetch's addresses
# Where the estimate cannot tell: IGC's allocation is not monotonic in the tile, so builds estimated alike spill
# or not.  By DPAS width (16: pvc, 8: dg2), GRF mode and DPAS k-chunks per k-step (the largest key takes more), the
# band (FITS, MAY) of estimate minus budget: up to FITS a plan "fits" (below every measured build that spilled),
# up to MAY it "may spill" (MAY: the largest excess of a measured build without spills, at least 0) and is kept
# for the ISA to decide; beyond MAY every measured build spilled and the plan is rejected.  Fitted to
# tests/data/register_spills.tsv (tests/test_registers.py keeps them equal to it): pvc by 1, 2, 3+ k-chunks, all
# at FITS 0; dg2 with its own rows (fewer, one group), where builds estimated up to 80 GRF under the budget spilled.
MAY_SPILL_GRF = {16: {128: {1: (0, 14), 2: (0, 23), 3: (0, 34)}, 256: {1: (0, 10), 2: (0, 23), 3: (0, 60)}},
                 8: {128: {1: (-16, 0)}, 256: {1: (-81, 69)}}}
REGISTER_VERDICTS = ("fits", "may spill", "spills")     # the estimate's word on a plan, docs/registers.md
LAYOUT_LETTER = {"row": "t", "col": "n"}  # CUTLASS naming: t = row-major, n = column-major


class PlanRejected(XegemmError):
    """The variant cannot work; the message names the rule and the numbers."""


@dataclass(frozen=True)
class Fragment:
    """Where one MMA operand fragment lives: copy tile ``tile``, at ``offset`` components of the operand type.

    Only bits move between copy registers and MMA operands (never values), so a copy whose registers are,
    say, VNNI dwords can feed a short8 operand when the bits lie in the same order.
    """

    tile: int
    offset: int


@dataclass(frozen=True)
class Reorder:
    """An MMA fragment gathered element by element from copy registers (sycl-tla's ``reorder``, docs/atoms.md §1.4).

    ``sources[lane][e]`` = (tile, element, source lane): element ``e`` of the fragment (in register order, at the
    operand's element granularity) is, in ``lane``, element ``element`` of copy tile ``tile`` held by lane
    ``source lane``; None for padding.  Derived from the two lane maps only: a per-lane permutation when every
    source lane is the lane itself, else a cross-lane gather (sub-group shuffles).
    """

    sources: tuple

    @property
    def cross_lane(self) -> bool:
        return any(s is not None and s[2] != lane for lane, row in enumerate(self.sources) for s in row)

    @property
    def tiles(self) -> tuple[int, ...]:
        return tuple(sorted({s[0] for row in self.sources for s in row if s is not None}))


@dataclass(frozen=True)
class OperandPlan:
    """How one operand (a, b or c) of a sub-group tile is moved: the atom and the tile origins."""

    operand: str
    atom: CopyAtom
    tiles: tuple[tuple[int, int], ...]      # (row, col) origins in memory coordinates, relative to the sub-group
    fragments: dict                          # MMA fragment index -> Fragment
    prefetch: CopyAtom | None = None

    @property
    def per_kstep(self) -> int:
        """Copy tiles per k-step (for C: per epilogue)."""
        return len(self.tiles)

    def chunk_spans(self) -> dict[int, tuple[int, int]]:
        """A or B: copy tile -> the first and last DPAS k-chunk reading it (fragments are keyed (i, k-chunk)
        for A, (k-chunk, j) for B)."""
        spans: dict[int, tuple[int, int]] = {}
        for key, frag in self.fragments.items():
            ki = key[1] if self.operand == "a" else key[0]
            for tile in (frag.tiles if isinstance(frag, Reorder) else (frag.tile,)):
                first, last = spans.get(tile, (ki, ki))
                spans[tile] = (min(first, ki), max(last, ki))
        return spans

    def live_tiles(self, chunks: int) -> int:
        """The most copy tiles read within any ``chunks`` consecutive k-chunks (the tiles live then)."""
        spans = self.chunk_spans()
        last_chunk = max(last for _, last in spans.values())
        return max(sum(1 for first, last in spans.values() if first < ki + chunks and last >= ki)
                   for ki in range(last_chunk + 1))

    @property
    def messages_per_kstep(self) -> int:
        """Messages per k-step before any native split: one per 2D block, one per row of a 1D tile."""
        return len(self.tiles) * (self.atom.messages if isinstance(self.atom, Block1DAtom) else 1)


@dataclass(frozen=True)
class Plan:
    """Everything the templates need to render one kernel, plus the predictions the report shows."""

    config: Config
    mma: MmaAtom
    a: OperandPlan
    b: OperandPlan
    c: OperandPlan
    subgroup_tile: tuple[int, int]           # (sgM, sgN)
    mma_grid: tuple[int, int, int]           # MMA atoms along M, N, K per sub-group per k-step
    registers: dict = field(default_factory=dict)
    name: str = ""
    epilogue: EpilogueSpec | None = None
    c_in: CopyAtom | Block1DAtom | None = None   # the load twin of C's store atom, when the epilogue reads C
    partial: OperandPlan | None = None           # stream-K: how pieces of tiles are stored, as accumulators

    @property
    def split_k(self) -> int:
        """K slices (1: no split).  Split, the GEMM kernel stores each slice's accumulators to a workspace and a
        second kernel adds the slices in order and applies the epilogue."""
        return self.config.tile.split_k

    def k_slice(self) -> int:
        """Elements of K per slice (:func:`k_slice`)."""
        return k_slice(self.config)

    @property
    def stream_k(self) -> int:
        """Stream-K work-groups per batch (0: off; xegemm.stream_k).  On, the GEMM kernel stores the tiles its
        work-groups cover whole through the epilogue, the pieces of the others to a workspace, and a second
        kernel adds each cut tile's pieces in order and applies the epilogue."""
        return self.config.tile.stream_k

    @property
    def reduces(self) -> bool:
        """True when a second kernel (``<name>_reduce``) finishes D: split K or stream-K."""
        return self.split_k > 1 or self.stream_k > 0

    @property
    def register_block(self) -> tuple[int, int]:
        """(accumulator rows, N-fragments) of one register block of the portable k loop (``tile.register_block``,
        0 resolved to the whole sub-group tile)."""
        rows, fragments = self.config.tile.register_block
        return (rows or self.subgroup_tile[0], fragments or self.mma_grid[1])

    @property
    def kernel_epilogue(self) -> EpilogueSpec:
        """What the GEMM kernel's own epilogue does: the epilogue, or (split) storing the accumulator."""
        return self.epilogue if self.split_k == 1 else self.partial_epilogue

    @property
    def partial_epilogue(self) -> EpilogueSpec:
        """Storing partial sums: the accumulator as it is, in the accumulator type."""
        acc = self.config.types.acc
        return EpilogueSpec(1.0, 0.0, "none", "none", (0.0, 0.0), acc, acc)

    @property
    def workgroup_size(self) -> tuple[int, int, int]:
        """OpenCL local size: (SG_N * sub-group size, SG_M, 1)."""
        sgm, sgn = self.config.tile.subgroups
        return (sgn * self.config.tile.subgroup_size, sgm, 1)

    def global_size(self) -> tuple[int, int, int]:
        """OpenCL global size covering the problem (edges included); z = batch x split-K slice.  Stream-K: G
        work-groups along x per batch."""
        p, (bm, bn, _) = self.config.problem, self.config.tile.workgroup
        lx, ly, _ = self.workgroup_size
        if self.stream_k:
            return (self.stream_k * lx, ly, p.batch)
        return (math.ceil(p.n / bn) * lx, math.ceil(p.m / bm) * ly, p.batch * self.config.tile.split_k)

    @property
    def uses_block1d(self) -> bool:
        """True when the copies are 1D sub-group block tiles (the SIMD8 / DG2 plans), not Xe 2D blocks."""
        return isinstance(self.a.atom, Block1DAtom)

    @property
    def dpas_per_kstep(self) -> int:
        mt, nt, kt = self.mma_grid
        return mt * nt * kt

    def predicted_messages(self) -> dict:
        """Per sub-group: messages one k-step of the main loop issues, and the epilogue's stores."""
        return {"dpas": self.dpas_per_kstep, "load_a": self.a.messages_per_kstep,
                "load_b": self.b.messages_per_kstep,
                "prefetch": self.a.per_kstep + self.b.per_kstep if self.config.pipeline.prefetch else 0,
                "store_c": self.c.messages_per_kstep}

    def load_chunks(self, operand: str) -> dict[int, tuple[int, ...]]:
        """DPAS k-chunk -> the copy tiles of ``operand`` ("a" or "b") first used by it: the native k-step
        loads each tile just before that chunk, so tiles of later chunks are not live during earlier ones."""
        spans = getattr(self, operand).chunk_spans()
        out: dict[int, list[int]] = {}
        for tile in range(len(spans)):
            out.setdefault(spans[tile][0], []).append(tile)
        return {ki: tuple(tiles) for ki, tiles in out.items()}

    def summary(self) -> dict:
        """Plain data for manifests and reports."""
        return {"name": self.name, "mma": self.mma.name, "copy_a": self.a.atom.name, "copy_b": self.b.atom.name,
                "copy_c": self.c.atom.name, "copy_c_in": self.c_in.name if self.c_in else None,
                "epilogue": self.epilogue.describe() if self.epilogue else None, "subgroup_tile": list(self.subgroup_tile),
                "mma_grid": list(self.mma_grid), "workgroup_size": list(self.workgroup_size),
                "registers": dict(self.registers), "messages_per_kstep": self.predicted_messages()}


def k_slice(config: Config) -> int:
    """Elements of K per split-K slice: whole k-tiles, so that no k-step straddles two slices (the last slice
    may be shorter, or empty)."""
    bk, split = config.tile.workgroup[2], config.tile.split_k
    return -(-math.ceil(config.problem.k / split) // bk) * bk


# ---- fragments: composing copy atoms and MMA operands through their lane maps --------------------------

def _to_memory(coord, transpose: bool):
    return (coord[1], coord[0]) if transpose else coord


def _holders(copy, tiles, only=None) -> dict:
    """Memory coordinate (relative to the operand tile) -> [(tile, lane, element)] over the copy tiles (those
    in the set ``only``, when given), elements at the copy's element granularity."""
    out: dict = {}
    for t, (r0, c0) in enumerate(tiles):
        if only is not None and t not in only:
            continue
        for lane, coords in enumerate(copy.lane_map.map):
            for e, c in enumerate(coords):
                if c is not None:
                    out.setdefault((r0 + c[0], c0 + c[1]), []).append((t, lane, e))
    return out


def locate_fragment(holders: dict, frag_map, origin: tuple[int, int], transpose: bool, frag_bits: int,
                    elem_bits: int) -> Fragment | Reorder | None:
    """Where an MMA fragment (operand lane map ``frag_map`` at ``origin``, memory coordinates) lies in the copies.

    A Fragment when it is a contiguous run at the same offset of one tile in every lane (no code at all); else a
    Reorder naming, per lane and element, the tile, element and lane that hold it (the holding lane itself
    when it holds it); None when some element is in no copy register.  ``transpose``: the operand's (row,
    col) are (col, row) in memory (a column-major operand).
    """
    sources = []
    for lane, coords in enumerate(frag_map):
        row = []
        for coord in coords:
            if coord is None:
                row.append(None)
                continue
            r, c = _to_memory(coord, transpose)
            found = holders.get((origin[0] + r, origin[1] + c))
            if not found:
                return None
            t, src, e = next((h for h in found if h[1] == lane), found[0])
            row.append((t, e, src))
        sources.append(tuple(row))
    real = [(lane, e, s) for lane, row in enumerate(sources) for e, s in enumerate(row) if s is not None]
    offsets = {s[1] - e for _, e, s in real}
    if len({s[0] for _, _, s in real}) == 1 and all(s[2] == lane for lane, _, s in real) and len(offsets) == 1:
        (offset,) = offsets
        if offset >= 0 and (offset * elem_bits) % frag_bits == 0:
            return Fragment(real[0][2][0], offset * elem_bits // frag_bits)
    return Reorder(tuple(sources))


def _shift_tiles(found: Fragment | Reorder, shift: int) -> Fragment | Reorder:
    """The same fragment ``shift`` copy tiles further on."""
    if not shift:
        return found
    if isinstance(found, Fragment):
        return Fragment(found.tile + shift, found.offset)
    return Reorder(tuple(tuple(None if s is None else (s[0] + shift, s[1], s[2]) for s in row)
                         for row in found.sources))


def reorder_cost(fragments: dict) -> int:
    """0 when every fragment is a contiguous run, 1 when some need a per-lane permutation, 2 for a gather."""
    return max((0 if isinstance(f, Fragment) else 2 if f.cross_lane else 1 for f in fragments.values()), default=0)


@functools.lru_cache(maxsize=1024)
def _plan_operand(operand: str, copy: CopyAtom, mma: MmaAtom, extent: tuple[int, int], frag_shape,
                  frag_grid, transpose: bool, max_cost: int = 2) -> OperandPlan:
    """Cover an operand tile (memory rows x cols) with ``copy`` and locate every MMA fragment in it: a
    contiguous run where the lane maps allow, else a reorder (at most ``max_cost``, see :func:`reorder_cost`).
    Remembered: variants of a sweep share most operand tiles (the plan never changes the fragments)."""
    rows, cols = extent
    if rows % copy.rows or cols % copy.cols:
        raise PlanRejected(f"{operand.upper()} tile {rows}x{cols} (memory rows x cols) is not a multiple of "
                           f"{copy.name}'s {copy.rows}x{copy.cols} block")
    tiles = tuple((r, c) for r in range(0, rows, copy.rows) for c in range(0, cols, copy.cols))
    frag_map = mma.lane_map(operand).map
    elem_bits = mma.element(operand).bits
    if operand == "c":
        # the epilogue converts each accumulator element to C's type: D is located element by element, and
        # the fragment's offset counts C elements (the register's components, checked below)
        if copy.register_elem_bits != copy.elem_bits:
            raise PlanRejected(f"{copy.name} packs several {copy.elem_bits}-bit C elements per register component; "
                               "the epilogue stores one element per component")
        elem_bits = frag_bits = copy.elem_bits
    elif copy.elem_bits != elem_bits:
        raise PlanRejected(f"{copy.name} moves {copy.elem_bits}-bit elements but {operand.upper()} of {mma.name} "
                           f"holds {elem_bits}-bit elements")
    else:
        frag_bits = ctype_shape(mma.ctype(operand))[0]   # fragments are addressed in the operand's components
    # the tiles repeat every copy block: a fragment is located once per origin within a block (among the
    # tiles it can reach from there) and moved to the other blocks by renumbering the tiles
    reach = _to_memory(frag_shape, transpose)
    near = {t for t, (r0, c0) in enumerate(tiles) if r0 < copy.rows + reach[0] and c0 < copy.cols + reach[1]}
    holders = _holders(copy, tiles, near)
    per_row = cols // copy.cols
    located: dict = {}
    fragments = {}
    fr, fc = frag_shape
    for i in range(frag_grid[0]):
        for j in range(frag_grid[1]):
            r, c = _to_memory((i * fr, j * fc), transpose)
            base = (r % copy.rows, c % copy.cols)
            if base not in located:
                located[base] = locate_fragment(holders, frag_map, base, transpose, frag_bits, elem_bits)
            if located[base] is None:
                raise PlanRejected(f"{copy.name} tiles do not hold every element of {operand.upper()} fragment "
                                   f"({i},{j}) of {mma.name}")
            fragments[(i, j)] = _shift_tiles(located[base], r // copy.rows * per_row + c // copy.cols)
    cost = reorder_cost(fragments)
    if cost > max_cost:
        what = ("a contiguous run of its registers" if max_cost == 0 else
                "a contiguous run or a per-lane permutation of its registers")
        raise PlanRejected(
            f"{copy.name} does not produce the {operand.upper()} operand layout of {mma.name}: some fragment is "
            f"not {what} (compare `xegemm atoms show` of both)")
    return OperandPlan(operand, copy, tiles, fragments)


# ---- choosing atoms ------------------------------------------------------------------------------------

COPY_TYPE_OF_BITS = {bits: name for name, bits in COPY_TYPE_BITS.items() if name.startswith("U")}


@functools.cache
def _legal_copy_atoms() -> tuple[CopyAtom, ...]:
    """Every legal copy atom, enumerated once (checking the 2D block rules of every candidate is most of a
    plan's time otherwise)."""
    return tuple(enumerate_copy_atoms(include_quirks=False))


def _candidates(op: str, layouts: tuple[str, ...], elem_bits: int, max_rows: int, max_cols: int,
                type_name: str | None = None):
    """Legal copy atoms of a family, biggest first (fewest messages), then in the order of ``layouts``."""
    pool = [a for a in _legal_copy_atoms()
            if a.op == op and a.layout in layouts and a.elem_bits == elem_bits
            and (type_name is None or a.type_name == type_name)
            and a.rows <= max_rows and a.cols <= max_cols]
    return sorted(pool, key=lambda a: (-a.rows * a.cols, layouts.index(a.layout), a.packed, a.name))


def _choose(operand, explicit, candidates, mma, extent, frag_shape, frag_grid, transpose,
            max_cost: int = 2, issuable=None) -> OperandPlan:
    """The named atom, or the cheapest candidate: a contiguous run (the first candidate that gives one) before a
    per-lane permutation before a cross-lane gather (``max_cost`` bounds what a plan may need,
    :func:`reorder_cost`); among reorders of one kind, the fewest copy tiles, 1D block tiles of at most
    GATHER_TILE_BYTES per lane first.  Measured on dg2 with Debian's IGC (16x16 sub-group tiles, 256 GRF):
    one-row 1D tiles of 4-bit B (a uchar each) spilled 4-9 KB, 32-row tiles of the same bytes nothing (their
    shuffles packing four rows, xegemm.lowering.reorder), and column-major bf16 took half the instructions
    with 16- and 32-row tiles; but a 128-byte 1D tile (XE_1D_U16x16x32's ulong16, XE_1D_U4x16x128's)
    spilled 15-30 KB where two 64-byte tiles of the same bytes did not.  (2D candidates come largest first,
    so for them this keeps the order they are tried in.)
    ``issuable(atom)``: whether the lowering the plan is for can issue an atom; the cheapest of those is taken
    when one fits, else the cheapest of all (whose rendering then says what the compiler lacks)."""
    if issuable is not None and not explicit:
        try:
            return _choose(operand, None, [a for a in candidates if issuable(a)], mma, extent, frag_shape,
                           frag_grid, transpose, max_cost)
        except PlanRejected:
            pass
    if explicit:
        atom = CopyAtom.parse(explicit).check() if isinstance(explicit, str) else explicit
        want = "ST" if operand == "c" else "LD"
        if atom.op != want:
            raise PlanRejected(f"atoms.{operand} = {atom.name} is a {atom.op} atom; {operand.upper()} needs a "
                               f"{'store (_ST_)' if want == 'ST' else 'load (_LD_)'} atom")
        return _plan_operand(operand, atom, mma, extent, frag_shape, frag_grid, transpose, max_cost)
    reasons, reordered = [], []
    for atom in candidates:
        try:
            found = _plan_operand(operand, atom, mma, extent, frag_shape, frag_grid, transpose, max_cost)
        except PlanRejected as exc:
            reasons.append(str(exc))
            continue
        cost = reorder_cost(found.fragments)
        if cost == 0:
            return found
        oversized = isinstance(atom, Block1DAtom) and atom.register_bytes > GATHER_TILE_BYTES
        reordered.append((cost, oversized, len(found.tiles), len(reordered), found))
    if reordered:
        return min(reordered)[-1]
    raise PlanRejected(f"no legal copy atom moves the {operand.upper()} tile {extent[0]}x{extent[1]} into "
                       f"{mma.name} operands" + (f" (last tried: {reasons[-1]})" if reasons else ""))


def variant_stem(config: Config) -> str:
    """The part of a kernel name fixed by the config alone: types, layouts, tiles, sub-groups."""
    t, lay, tile = config.types, config.layout, config.tile
    bm, bn, bk = tile.workgroup
    sgm, sgn = tile.subgroups
    layouts = "".join(LAYOUT_LETTER[x] for x in (lay.a, lay.b, lay.c))
    return f"xegemm_{t.a}_{t.b}_{t.acc}_{t.c}_{layouts}_{bm}x{bn}x{bk}_sg{sgm}x{sgn}"


def kernel_name(config: Config, mma: MmaAtom, a: CopyAtom, b: CopyAtom, c: CopyAtom) -> str:
    """CUTLASS-style name: types, layouts, tiles, sub-groups, atoms, pipeline and (when not 1) the work-group
    swizzle; the key for everything."""
    def short(a):
        if isinstance(a, Block1DAtom):
            return a.short_name
        return f"{'p' if a.packed else ''}{a.type_name.lower()}x{a.rows}x{a.cols}{a.layout.lower()}"
    return (f"{variant_stem(config)}_dpas{mma.m}x{mma.n}x{mma.k}_a{short(a)}_b{short(b)}_c{short(c)}"
            f"_pf{config.pipeline.prefetch}_grf{config.target.grf}"
            + (f"_swz{config.tile.swizzle}" if config.tile.swizzle != 1 else "")
            + ("_rb{}x{}".format(*config.tile.register_block) if any(config.tile.register_block) else ""))


def plan(config: Config, issuable=None, check_registers: bool = True) -> Plan:
    """Plan one resolved variant (no sweep); raises PlanRejected with a reason a person understands.

    ``issuable(atom) -> bool`` (:meth:`xegemm.lowering.Lowering.issues`) makes the planner prefer the copy
    atoms the lowering the plan is for can issue.  ``check_registers=False`` keeps a plan whose register
    estimate exceeds ``target.grf`` (to build it and compare the estimate with the ISA,
    :mod:`xegemm.evaluate.spills`).  The sub-group size picks the copy family: 16 = Xe 2D block copies +
    SIMD16 DPAS (pvc, bmg); 8 = 1D sub-group block tiles (xegemm.atoms.block1d) + SIMD8 DPAS (dg2, which has
    no 2D block IO).  Either way every DPAS fragment is located in the copies' registers by comparing lane maps.
    """
    if why := quant_violation(config):       # quantized operands: the group against the tile (xegemm.quant.rules)
        raise PlanRejected(why)
    t, lay, tile = config.types, config.layout, config.tile
    bm, bn, bk = tile.workgroup
    sgm_count, sgn_count = tile.subgroups
    sg = tile.subgroup_size
    if sg not in dpas_widths():
        raise PlanRejected(f"sub-group size {sg}: DPAS executes at sub-group size 16 (pvc, bmg: Xe 2D block "
                           "copies) or 8 (dg2: 1D sub-group block copies)")
    block2d = sg == BLOCK2D_SUB_GROUP          # 2D block messages need a sub-group of 16 (SPV2D, OCL2D)
    max_subgroups = min(t.max_subgroups_per_workgroup for t in targets_at(sg))
    if sgm_count * sgn_count > max_subgroups:
        raise PlanRejected(f"{sgm_count}x{sgn_count} = {sgm_count * sgn_count} sub-groups per work-group: at most "
                           f"{max_subgroups} ({max_subgroups * sg} work-items) on Xe")
    if bm % sgm_count or bn % sgn_count:
        raise PlanRejected(f"work-group tile {bm}x{bn} does not split into {sgm_count}x{sgn_count} sub-group tiles")
    sgm, sgn = bm // sgm_count, bn // sgn_count
    if lay.c != "row":
        raise PlanRejected("C must be row-major: 2D block stores write row-major blocks only (sycl-tla's xe_2d_copy.md, docs/atoms.md §1.1)" if block2d
                           else "C must be row-major: 1D sub-group block writes store row segments only")
    try:
        mma = (MmaAtom.parse(config.atoms.mma) if config.atoms.mma else
               MmaAtom.of(dtype(t.a).code, dtype(t.b).code, dtype(t.acc).code, m=math.gcd(8, sgm), n=sg))
    except XegemmError as exc:
        raise PlanRejected(f"no DPAS atom for A={t.a}, B={t.b}, accumulator={t.acc}: {exc}") from exc
    if (mma.a, mma.b, mma.c) != (dtype(t.a).code, dtype(t.b).code, dtype(t.acc).code):
        raise PlanRejected(f"{mma.name} does not take A={t.a}, B={t.b}, accumulator={t.acc}")
    if mma.n != sg:
        raise PlanRejected(f"{mma.name} executes at sub-group size {mma.n} (N = the SIMD width), but "
                           f"tile.subgroup_size is {sg}")
    if sgm % mma.m or sgn % mma.n or bk % mma.k:
        raise PlanRejected(f"sub-group tile {sgm}x{sgn}x{bk} is not a multiple of the {mma.name} shape "
                           f"{mma.m}x{mma.n}x{mma.k}")
    grid = (sgm // mma.m, sgn // mma.n, bk // mma.k)
    abits, bbits = mma.a_type.bits, mma.b_type.bits
    c_bits = dtype(t.acc if tile.split_k > 1 else t.c).bits   # split: the slices' partial sums are stored
    if block2d:
        if lay.a == "row":
            a_cands = _candidates("LD", ("N",), abits, 32, bk, "TF32" if t.a == "tf32" else None)
            a_extent, a_transpose = (sgm, bk), False
        else:   # memory rows = k: the transposing loads (LD_T), sycl-tla's col-major A (docs/atoms.md §1.4)
            a_cands = _candidates("LD", ("T",), abits, bk, sgm)
            a_extent, a_transpose = (bk, sgm), True
        a_plan = _choose("a", config.atoms.a, a_cands, mma, a_extent, (mma.m, mma.k), (grid[0], grid[2]),
                         transpose=a_transpose, issuable=issuable)
        if lay.b == "row":
            # 4-bit B has no DPAS-ready load: a gather from the 8-bit VNNI load of its bytes or, for tiles
            # narrower than its 16 bytes, from plain rows (VNNI first: on pvc with Debian's IGC, 128x32x64 over
            # 2x1 sub-groups, 7248 instructions and 10 block loads against 7446 and 16 from plain rows)
            layouts = {4: ("V", "N"), 8: ("V",), 16: ("V",)}.get(bbits, ("N",))
            b_cands = _candidates("LD", layouts, bbits, 32, sgn, "U32" if bbits == 32 else None)
            b_extent, b_transpose = (bk, sgn), False
        else:
            b_cands = _candidates("LD", ("T",), bbits, sgn, bk)
            b_extent, b_transpose = (sgn, bk), True
        b_plan = _choose("b", config.atoms.b, b_cands, mma, b_extent, (mma.k, mma.n), (grid[2], grid[1]),
                         transpose=b_transpose, issuable=issuable)
    else:
        for operand in ("a", "b", "c"):
            named = getattr(config.atoms, operand)
            if named and not named.startswith("XE_1D_"):
                raise PlanRejected(f"atoms.{operand} = {named} is an Xe 2D block copy, but sub-group size {sg} "
                                   "plans move tiles with 1D sub-group block messages (no 2D block IO at SIMD8, "
                                   f"docs/atoms.md §2): name an XE_1D_..._SG{sg} atom or leave atoms.{operand} unset")
        a_extent, a_transpose = ((sgm, bk), False) if lay.a == "row" else ((bk, sgm), True)
        a_plan = _choose_block1d("a", "LD", abits, sg, mma, a_extent, (mma.m, mma.k), (grid[0], grid[2]),
                                 a_transpose, config.atoms.a)
        b_extent, b_transpose = ((bk, sgn), False) if lay.b == "row" else ((sgn, bk), True)
        b_plan = _choose_block1d("b", "LD", bbits, sg, mma, b_extent, (mma.k, mma.n), (grid[2], grid[1]),
                                 b_transpose, config.atoms.b)
    c_plan = _plan_store(config.atoms.c, c_bits, mma, (sgm, sgn), grid, block2d)
    # stream-K: pieces of tiles are stored as the accumulator, with the planner's own atom
    partial = _plan_store(None, dtype(t.acc).bits, mma, (sgm, sgn), grid, block2d) if tile.stream_k else None
    epilogue = EpilogueSpec.of(config)
    c_in = _load_twin(c_plan.atom, issuable) if epilogue.reads_c and tile.split_k == 1 else None
    if config.pipeline.prefetch:
        a_plan = _with_prefetch(a_plan)
        b_plan = _with_prefetch(b_plan)
    registers = _register_estimate(config, mma, a_plan, b_plan, sgm, sgn)
    budget = config.target.grf
    margin = may_spill_band(mma.n, budget, grid[2])[1]
    registers["verdict"] = register_verdict(registers["total_grf"], budget, grid[2], mma.n)
    if check_registers and registers["verdict"] == "spills":
        width = _grf_bytes(mma.n)
        raise PlanRejected(
            f"registers: accumulators {registers['acc_grf']} + A {registers['a_grf']} + B {registers['b_grf']} + "
            + (f"prefetches {registers['prefetch_grf']} + " if registers["prefetch_grf"] else "")
            + (f"reorders {registers['reorder_grf']} + " if registers["reorder_grf"] else "")
            + f"{registers['reserved_grf']} reserved = {registers['total_grf']} GRF > {budget} GRF per thread "
            + (f"of {width} B at sub-group size {sg} " if width != _grf_bytes(max(dpas_widths())) else "")
            + f"(sub-group tile {sgm}x{sgn}x{bk}), more than the {margin} GRF over at which measured builds of "
            + chunk_group(mma.n, budget, grid[2]) + " still fit; use a smaller tile"
            + (" or target.grf: 256" if budget < 256 else ""))
    rows, fragments = tile.register_block
    if rows > sgm or fragments > grid[1]:
        raise PlanRejected(f"tile.register_block [{rows}, {fragments}] exceeds the sub-group tile's {sgm} rows x "
                           f"{grid[1]} N-fragments of {mma.name} (0 = all)")
    k_tiles = math.ceil(config.problem.k / bk)
    if tile.split_k > k_tiles:
        raise PlanRejected(f"tile.split_k = {tile.split_k} slices but K = {config.problem.k} has {k_tiles} k-tiles of "
                           f"{bk}: a slice would be empty; split K at most {k_tiles} ways")
    conflict = tile_conflict(tile.split_k, tile.stream_k)
    if conflict:
        raise PlanRejected(conflict)
    iters = stream_k_iterations(config.problem.m, config.problem.n, config.problem.k, tile.workgroup)
    if tile.stream_k > iters:
        raise PlanRejected(f"tile.stream_k = {tile.stream_k} work-groups but a batch has {iters} MAC-loop iterations "
                           f"({math.ceil(config.problem.m / bm)} x {math.ceil(config.problem.n / bn)} tiles of "
                           f"{bm}x{bn} x {k_tiles} k-tiles of {bk}): a work-group would get none; use at most {iters}")
    name = kernel_name(config, mma, a_plan.atom, b_plan.atom, c_plan.atom) + epilogue.name_suffix() \
        + (f"_splitk{tile.split_k}" if tile.split_k > 1 else "") \
        + (f"_streamk{tile.stream_k}" if tile.stream_k else "")
    return Plan(config, mma, a_plan, b_plan, c_plan, (sgm, sgn), grid, registers, name, epilogue, c_in, partial)


def _plan_store(explicit: str | None, bits: int, mma: MmaAtom, subgroup_tile, grid, block2d: bool) -> OperandPlan:
    """The store of a sub-group tile of ``bits``-bit elements (``explicit``: the atom named by atoms.c): whole
    accumulator fragments per store register, as the epilogue moves them."""
    sgm, sgn = subgroup_tile
    if block2d:
        return _choose("c", explicit, _candidates("ST", ("N",), bits, 8, sgn), mma, (sgm, sgn),
                       (mma.m, mma.n), (grid[0], grid[1]), transpose=False, max_cost=0)
    return _choose_block1d("c", "ST", bits, mma.n, mma, (sgm, sgn), (mma.m, mma.n), (grid[0], grid[1]),
                           False, explicit, max_cost=0)


def _load_twin(store, issuable=None):
    """The load atom of the same block as C's store atom, holding every element where the store takes it (the
    epilogue reads C element by element beside the accumulator); PlanRejected naming the rule otherwise.
    When the lowering cannot issue that 2D block read (``issuable``: Debian's IGC has no 32-bit plain 2D
    read) but can issue the 1D sub-group block reads of the same rows with the same lane map (a row of 16
    elements, lane l holding column l), those are taken."""
    if isinstance(store, Block1DAtom):
        twin = Block1DAtom(store.type_name, store.rows, store.cols, "LD", store.lanes)
    else:
        twin = CopyAtom(store.type_name, store.rows, store.cols, "LD", "N", store.packed)
        if not twin.legal:
            raise PlanRejected(f"beta != 0 reads C with {twin.name}, which breaks a 2D block rule: "
                               f"{twin.violations()[0]}")
        if issuable is not None and not issuable(twin) and store.type_name in BLOCK1D_TYPE_BITS:
            rows = Block1DAtom(store.type_name, store.rows, store.cols, "LD", BLOCK2D_SUB_GROUP)
            if rows.legal and issuable(rows) and rows.lane_map == store.lane_map:
                return rows
    if twin.lane_map != store.lane_map:
        raise PlanRejected(f"beta != 0 reads C with {twin.name}, whose registers do not hold C as {store.name} "
                           "stores it (compare `xegemm atoms show` of both)")
    return twin


def _choose_block1d(operand, op, bits, lanes, mma, extent, frag_shape, frag_grid, transpose,
                    explicit: str | None = None, max_cost: int = 2) -> OperandPlan:
    """The named 1D sub-group block tile, or the smallest whose lane map holds whole fragments of the operand."""
    named = Block1DAtom.parse(explicit).check() if explicit else None
    candidates = [] if named else enumerate_block1d_atoms(lanes, op, bits, max_rows=extent[0], max_cols=extent[1])
    try:
        return _choose(operand, named, candidates, mma, extent, frag_shape, frag_grid, transpose, max_cost)
    except PlanRejected as exc:
        if named or candidates:
            raise
        major = "column" if transpose else "row"
        across = {("a", False): "K", ("a", True): "M", ("b", False): "N", ("b", True): "K", ("c", False): "N"}[
            (operand, transpose)]
        raise PlanRejected(
            f"{exc}: {major}-major {operand.upper()} has memory rows of {extent[1]} x {bits} bits (the sub-group "
            f"tile's {across}), but a 1D sub-group block message moves a row of {lanes} chunks of at least 8 "
            f"bits (OCLSG); use a sub-group tile with {across} >= {-(-lanes * 8 // bits)}") from None


def native_surface_violations(config: Config) -> list[str]:
    """Rules of 2D block surfaces the problem breaks (docs/atoms.md §2), each with the padding that fixes it.

    Base 64-byte aligned (for every batch), pitch a multiple of 16 bytes and >= the width, width >= 64 bytes.
    xegemm lays each operand out with pitch = width, so the rules land on the problem's dimensions.  Plans of
    another sub-group size copy with 1D block messages: their rules are :func:`block1d_surface_violations`.
    """
    if config.tile.subgroup_size != BLOCK2D_SUB_GROUP:
        return block1d_surface_violations(config)
    p, t, lay = config.problem, config.types, config.layout
    c_type = t.acc if config.tile.split_k > 1 else t.c      # split K: the kernel stores the workspace
    bits = {name: dtype(name).bits for name in (t.a, t.b, c_type)}
    surfaces = [("A", "K" if lay.a == "row" else "M", p.k if lay.a == "row" else p.m, p.m if lay.a == "row" else p.k,
                 bits[t.a]),
                ("B", "N" if lay.b == "row" else "K", p.n if lay.b == "row" else p.k, p.k if lay.b == "row" else p.n,
                 bits[t.b]),
                ("C", "N", p.n, p.m, bits[c_type])]
    out = []
    for name, dim, cols, rows, eb in surfaces:
        width = -(-cols * eb // 8)                  # bytes (4-bit elements: two per byte)
        size = f"{eb // 8} B" if eb >= 8 else f"{eb} bits"
        if width < 64:
            out.append(f"{name} rows are {cols} x {size} = {width} B wide: 2D block surfaces must be >= 64 B; "
                       f"pad {dim} to {-(-64 * 8 // eb)}")
        if width % 16:
            mult = 128 // math.gcd(128, eb)
            out.append(f"{name} pitch {width} B is not a multiple of 16 B: pad {dim} to a multiple of {mult} "
                       f"({-(-cols // mult) * mult})")
        elif p.batch > 1 and (rows * width) % 64:
            out.append(f"{name} batch stride {rows * width} B breaks the 64-byte base alignment of every batch")
    if config.tile.stream_k:
        bn, acc = config.tile.workgroup[1], dtype(t.acc)
        if bn * acc.bits // 8 < 64:
            out.append(f"stream-K workspace tiles are BN = {bn} x {acc.bits // 8} B = {bn * acc.bits // 8} B wide: "
                       f"2D block surfaces must be >= 64 B; use BN >= {64 * 8 // acc.bits}")
    return out


def block1d_surface_violations(config: Config) -> list[str]:
    """Rules of 1D sub-group block messages the problem breaks, each with the padding that fixes it.

    Every row a message starts must be 4-byte aligned for reads and 16-byte aligned for writes (OCLSG
    "Restrictions"); buffers are, and a tile's rows start at multiples of its width (S chunks, >= 8 B for
    reads, 32 B for the f32/s32 C rows), so the rules land on the pitches (= the rows' widths) of A, B and C
    (batch strides are multiples of them).  Tiles over an edge use element accesses: no width minimum.
    """
    p, t, lay = config.problem, config.types, config.layout
    bits = {name: dtype(name).bits for name in (t.a, t.b, t.c)}
    surfaces = [("A", "K" if lay.a == "row" else "M", p.k if lay.a == "row" else p.m, bits[t.a],
                 READ_ALIGN_BYTES, "reads"),
                ("B", "N" if lay.b == "row" else "K", p.n if lay.b == "row" else p.k, bits[t.b],
                 READ_ALIGN_BYTES, "reads"),
                ("C", "N", p.n, bits[t.c], WRITE_ALIGN_BYTES, "writes")]
    out = []
    for name, dim, cols, eb, align, verb in surfaces:
        pitch = -(-cols * eb // 8)                  # bytes (4-bit elements: two per byte, odd rows padded)
        if pitch % align:
            mult = align * 8 // math.gcd(align * 8, eb)
            out.append(f"{name} pitch {pitch} B is not a multiple of {align} B (1D sub-group block {verb} need "
                       f"{align}-byte aligned rows): pad {dim} to a multiple of {mult} ({-(-cols // mult) * mult})")
    return out


def _with_prefetch(op: OperandPlan) -> OperandPlan:
    """The prefetch atom for an operand's loads: the same memory block, row-major, no registers."""
    a = op.atom
    if isinstance(a, Block1DAtom):
        return OperandPlan(op.operand, op.atom, op.tiles, op.fragments, a.prefetch)
    pf = CopyAtom(a.type_name, a.rows, a.cols, "PF", "N", a.packed)
    if not pf.legal:
        pf = CopyAtom(COPY_TYPE_OF_BITS[a.elem_bits], a.rows, a.cols, "PF", "N", False)
    if not pf.legal:     # 4-bit data: no 4-bit message, a packed (32-bit) prefetch of the same block
        pf = CopyAtom(COPY_TYPE_OF_BITS[a.elem_bits], a.rows, a.cols, "PF", "N", True)
    if not pf.legal:
        raise PlanRejected(f"no legal prefetch covers {a.name}'s {a.rows}x{a.cols} block: {pf.violations()[0]}")
    return OperandPlan(op.operand, op.atom, op.tiles, op.fragments, pf)


def _grf_bytes(simd: int) -> int:
    """Register width of the targets whose DPAS runs at ``simd`` (xegemm.targets: 64 B at 16, 32 B at 8)."""
    (width,) = {t.grf_bytes for t in targets_at(simd)}
    return width


def may_spill_band(simd: int, budget: int, chunks: int) -> tuple[int, int]:
    """(FITS, MAY): how far from ``budget`` an estimate still fits / may spill, at DPAS width ``simd`` with
    ``chunks`` DPAS k-chunks per k-step (:data:`MAY_SPILL_GRF`)."""
    modes = MAY_SPILL_GRF[simd]
    bands = modes.get(budget, modes[256])
    return bands[min(chunks, max(bands))]


def chunk_group(simd: int, budget: int, chunks: int) -> str:
    """The k-chunk group whose band :func:`may_spill_band` takes, in words ("2 k-chunks", "3 or more k-chunks")."""
    modes = MAY_SPILL_GRF[simd]
    keys = sorted(modes.get(budget, modes[256]))
    group = min(chunks, keys[-1])
    if len(keys) == 1:
        return "any number of k-chunks"
    if group == keys[-1]:
        return f"{group} or more k-chunks"
    return f"{group} k-chunk{'s' if group > 1 else ''}"


def register_verdict(total: int, budget: int, chunks: int, simd: int) -> str:
    """"fits", "may spill" or "spills": where ``total - budget`` lies against :func:`may_spill_band`."""
    fits, may = may_spill_band(simd, budget, chunks)
    return REGISTER_VERDICTS[0 if total - budget <= fits else 1 if total - budget <= may else 2]


def _register_estimate(config, mma, a_plan, b_plan, sgm, sgn) -> dict:
    """GRFs per thread of the native k-step, as Debian's IGC allocates them on pvc (fitted to the ISA's spills,
    docs/registers.md): accumulators; for A and B, the copy tiles one DPAS k-chunk reads (the k-step loads
    each tile just before its first chunk; the last chunk reading it frees it) plus an eighth of those the
    next chunk adds (loads the scheduler hoists); the address state of each 2D block tile's prefetch; reorder
    temporaries (one A fragment, or a k-chunk's B fragments, built before their DPAS; twice that for a
    cross-lane gather, which on dg2's 1D block tiles is built for every fragment of the k-step at once); and
    the registers kept beside them (more with several sub-groups per work-group).  On dg2 the same terms with
    32-byte GRFs tell its spills poorly (its rows in tests/data/register_spills.tsv), hence its own, wider
    band in :data:`MAY_SPILL_GRF`.
    """
    lanes, width = config.tile.subgroup_size, _grf_bytes(mma.n)
    grf = lambda nbytes: -(-nbytes // width)  # noqa: E731
    acc = grf(sgm * sgn * mma.d_type.bits // 8)
    live = {}
    for op in (a_plan, b_plan):
        tile = grf(op.atom.register_bytes * lanes)
        one, two = op.live_tiles(1), op.live_tiles(2)
        live[op.operand] = tile * one + -(-tile * (two - one) // NEXT_CHUNK_SHARE)
    # 2D block tiles only: dg2's 1D block prefetches carry no per-tile address payload (its rows fit without it)
    block2d = not isinstance(a_plan.atom, Block1DAtom)
    prefetch = PREFETCH_GRF * (a_plan.per_kstep + b_plan.per_kstep) if config.pipeline.prefetch and block2d else 0
    reorder = 0
    grid_m, grid_n, chunks = sgm // mma.m, sgn // mma.n, config.tile.workgroup[2] // mma.k
    for op, fragments, kstep in ((a_plan, 1, grid_m * chunks), (b_plan, grid_n, grid_n * chunks)):
        cost = reorder_cost(op.fragments)
        if cost:
            # dg2: IGC builds every cross-lane gather of the k-step before its first DPAS (measured)
            built = kstep if cost == 2 and not block2d else fragments
            reorder += cost * built * grf(mma.register_bytes(op.operand) * lanes)
    reserved = RESERVED_GRF[config.target.grf] + (SUBGROUPS_GRF if math.prod(config.tile.subgroups) > 1 else 0)
    total = acc + live["a"] + live["b"] + prefetch + reorder + reserved
    return {"acc_grf": acc, "a_grf": live["a"], "b_grf": live["b"], "prefetch_grf": prefetch, "reorder_grf": reorder,
            "reserved_grf": reserved, "total_grf": total, "budget_grf": config.target.grf}
