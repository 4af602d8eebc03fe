"""Choosing the copy atoms of a plan: the cheapest legal atom whose registers hold the MMA operands.

Candidates come from the atom models (every legal 2D block atom of a family, every 1D sub-group block tile of
an element size); each is tried through :func:`xegemm.plan.operands.plan_operand`, which locates the MMA fragments
in its registers by comparing lane maps.  A contiguous run beats a per-lane permutation beats a cross-lane
gather (:func:`xegemm.plan.operands.reorder_cost`); an atom named in the config is taken as it is, or rejected
with the rule it breaks.
"""

from __future__ import annotations

import functools

from xegemm.atoms.block1d import Block1DAtom, enumerate_block1d_atoms
from xegemm.atoms.copy import SUB_GROUP, AtomError, CopyAtom, enumerate_copy_atoms
from xegemm.atoms.mma import MmaAtom
from xegemm.errors import PlanRejected
from xegemm.plan.operands import OperandPlan, plan_operand, reorder_cost

GATHER_TILE_BYTES = 64       # per lane: larger 1D block tiles are a reorder's last resort (see choose)


@functools.cache
def _legal_copy_atoms() -> tuple[CopyAtom, ...]:
    """Every legal copy atom, enumerated once (checking the 2D block rules of every candidate is most of a
    plan's time otherwise)."""
    return tuple(enumerate_copy_atoms(include_quirks=False))


def copy_candidates(op: str, layouts: tuple[str, ...], elem_bits: int, max_rows: int, max_cols: int,
                type_name: str | None = None):
    """Legal copy atoms of a family, biggest first (fewest messages), then in the order of ``layouts``."""
    pool = [a for a in _legal_copy_atoms()
            if a.op == op and a.layout in layouts and a.elem_bits == elem_bits
            and (type_name is None or a.type_name == type_name)
            and a.rows <= max_rows and a.cols <= max_cols]
    return sorted(pool, key=lambda a: (-a.rows * a.cols, layouts.index(a.layout), a.packed, a.name))


def choose(operand, explicit, candidates, mma, extent, frag_shape, frag_grid, transpose,
            max_cost: int = 2, issuable=None, fallback=()) -> OperandPlan:
    """The named atom, or the cheapest candidate: a contiguous run (the first candidate that gives one) before a
    per-lane permutation before a cross-lane gather (``max_cost`` bounds what a plan may need,
    :func:`xegemm.plan.operands.reorder_cost`); among reorders of one kind, the fewest copy tiles, 1D block tiles of at most
    GATHER_TILE_BYTES per lane first.  Measured on dg2 with Debian's IGC (16x16 sub-group tiles, 256 GRF):
    one-row 1D tiles of 4-bit B (a uchar each) spilled 4-9 KB, 32-row tiles of the same bytes nothing (their
    shuffles packing four rows, xegemm.lowering.reorder), and column-major bf16 took half the instructions
    with 16- and 32-row tiles; but a 128-byte 1D tile (XE_1D_U16x16x32's ulong16, XE_1D_U4x16x128's)
    spilled 15-30 KB where two 64-byte tiles of the same bytes did not.  (2D candidates come largest first,
    so for them this keeps the order they are tried in.)
    ``issuable(atom)``: whether the lowering the plan is for can issue an atom; the cheapest of those is taken
    when one fits, else the cheapest issuable one of ``fallback`` (another family that reaches the same fragments
    through a reorder, e.g. plain loads of a column-major operand where the compiler has no transposing load of
    that shape), else the cheapest of all (whose rendering then says what the compiler lacks)."""
    if issuable is not None and not explicit:
        for pool in (candidates, fallback):
            try:
                return choose(operand, None, [a for a in pool if issuable(a)], mma, extent, frag_shape,
                              frag_grid, transpose, max_cost)
            except PlanRejected:
                pass
    if explicit:
        atom = CopyAtom.parse(explicit).check() if isinstance(explicit, str) else explicit
        want = "ST" if operand == "c" else "LD"
        if atom.op != want:
            raise PlanRejected(f"atoms.{operand} = {atom.name} is a {atom.op} atom; {operand.upper()} needs a "
                               f"{'store (_ST_)' if want == 'ST' else 'load (_LD_)'} atom")
        return plan_operand(operand, atom, mma, extent, frag_shape, frag_grid, transpose, max_cost)
    reasons, reordered = [], []
    for atom in candidates:
        try:
            found = plan_operand(operand, atom, mma, extent, frag_shape, frag_grid, transpose, max_cost)
        except PlanRejected as exc:
            reasons.append(str(exc))
            continue
        cost = reorder_cost(found.fragments)
        if cost == 0:
            return found
        oversized = not atom.block2d and atom.register_bytes > GATHER_TILE_BYTES
        reordered.append((cost, oversized, len(found.tiles), len(reordered), found))
    if reordered:
        return min(reordered)[-1]
    raise PlanRejected(f"no legal copy atom moves the {operand.upper()} tile {extent[0]}x{extent[1]} into "
                       f"{mma.name} operands" + (f" (last tried: {reasons[-1]})" if reasons else ""))



def choose_loads(config, mma: MmaAtom, grid, subgroup_tile, issuable=None,
                 b_view=None, a_view=None) -> tuple[OperandPlan, OperandPlan]:
    """The loads of A and B of a sub-group tile (``grid``: DPAS atoms along M, N, K): at sub-group size 16 Xe 2D
    block copies of the families each layout takes (row-major A: plain loads, row-major B: VNNI loads,
    column-major: transposing loads), at 8 (no 2D block IO) 1D sub-group block tiles.  ``b_view``: B's
    fragments as stored, when they are dequantized in registers (xegemm.plan.dequant.StoredB), else the DPAS's;
    ``a_view`` A's likewise (an FP8 A, xegemm.plan.dequant.StoredA)."""
    t, lay, tile = config.types, config.layout, config.tile
    bk, sg = tile.workgroup[2], tile.subgroup_size
    sgm, sgn = subgroup_tile
    b_mma, a_mma = b_view or mma, a_view or mma
    abits, bbits = a_mma.element("a").bits, b_mma.b_type.bits
    if sg == SUB_GROUP:          # 2D block messages need a sub-group of 16 (SPV2D, OCL2D)
        if lay.a == "row":
            a_cands = copy_candidates("LD", ("N",), abits, 32, bk, "TF32" if t.a == "tf32" else None)
            a_extent, a_transpose = (sgm, bk), False
        else:   # memory rows = k: the transposing loads (LD_T), sycl-tla's col-major A (docs/atoms.md §1.4)
            a_cands = copy_candidates("LD", ("T",), abits, bk, sgm)
            a_extent, a_transpose = (bk, sgm), True
        # where the compiler has no transposing load of the shape: plain rows of the same memory, reordered
        a_fallback = copy_candidates("LD", ("N",), abits, bk, sgm) if a_transpose else ()
        a_plan = choose("a", config.atoms.a, a_cands, a_mma, a_extent, (mma.m, mma.k), (grid[0], grid[2]),
                         transpose=a_transpose, issuable=issuable, fallback=a_fallback)
        if lay.b == "row":
            # 4-bit B has no DPAS-ready load: a gather from the 8-bit VNNI load of its bytes or, for tiles
            # narrower than its 16 bytes, from plain rows (VNNI first: on pvc with Debian's IGC, 128x32x64 over
            # 2x1 sub-groups, 7248 instructions and 10 block loads against 7446 and 16 from plain rows)
            layouts = {4: ("V", "N"), 8: ("V",), 16: ("V",)}.get(bbits, ("N",))
            pack = b_mma.k_per_element       # GPTQ: K per stored word (xegemm.plan.dequant.StoredB)
            b_cands = copy_candidates("LD", layouts, bbits, 32, sgn, "U32" if bbits == 32 else None)
            b_extent, b_transpose = (bk // pack, sgn), False
        else:
            b_cands = copy_candidates("LD", ("T",), bbits, sgn, bk)
            b_extent, b_transpose = (sgn, bk), True
        b_fallback = copy_candidates("LD", ("N",), bbits, sgn, bk) if b_transpose else ()
        b_plan = choose("b", config.atoms.b, b_cands, b_mma, b_extent, (mma.k, mma.n), (grid[2], grid[1]),
                         transpose=b_transpose, issuable=issuable, fallback=b_fallback)
    else:
        for operand in ("a", "b", "c"):
            named = getattr(config.atoms, operand)
            if named and not named.startswith("XE_1D_"):
                raise PlanRejected(f"atoms.{operand} = {named} is an Xe 2D block copy, but sub-group size {sg} "
                                   "plans move tiles with 1D sub-group block messages (no 2D block IO at SIMD8, "
                                   f"docs/atoms.md §2): name an XE_1D_..._SG{sg} atom or leave atoms.{operand} unset")
        a_extent, a_transpose = ((sgm, bk), False) if lay.a == "row" else ((bk, sgm), True)
        a_plan = choose_block1d("a", "LD", abits, sg, a_mma, a_extent, (mma.m, mma.k), (grid[0], grid[2]),
                                 a_transpose, config.atoms.a)
        b_extent, b_transpose = ((bk, sgn), False) if lay.b == "row" else ((sgn, bk), True)
        b_plan = choose_block1d("b", "LD", bbits, sg, b_mma, b_extent, (mma.k, mma.n), (grid[2], grid[1]),
                                 b_transpose, config.atoms.b)
    return a_plan, b_plan


def plan_store(explicit: str | None, bits: int, mma: MmaAtom, subgroup_tile, grid, block2d: bool) -> OperandPlan:
    """The store of a sub-group tile of ``bits``-bit elements (``explicit``: the atom named by atoms.c): whole
    accumulator fragments per store register, as the epilogue moves them."""
    sgm, sgn = subgroup_tile
    if block2d:
        return choose("c", explicit, copy_candidates("ST", ("N",), bits, 8, sgn), mma, (sgm, sgn),
                       (mma.m, mma.n), (grid[0], grid[1]), transpose=False, max_cost=0)
    return choose_block1d("c", "ST", bits, mma.n, mma, (sgm, sgn), (mma.m, mma.n), (grid[0], grid[1]),
                           False, explicit, max_cost=0)


def load_twin(store, issuable=None):
    """The load atom of the same block as C's store atom, holding every element where the store takes it (the
    epilogue reads C element by element beside the accumulator); PlanRejected naming the rule otherwise.
    When the lowering cannot issue that 2D block read (``issuable``: Debian's IGC has no 32-bit plain 2D
    read) but can issue 1D sub-group block reads of the same rows with the same lane map (a row of 16
    elements, lane l holding column l), those are taken."""
    twin = store.with_op("LD")
    if not twin.legal:
        raise PlanRejected(f"beta != 0 reads C with {twin.name}, which breaks a 2D block rule: "
                           f"{twin.violations()[0]}")
    if issuable is not None and not issuable(twin):
        rows = twin.block1d_rows()
        if rows is not None and rows.legal and issuable(rows) and rows.lane_map == store.lane_map:
            return rows
    if twin.lane_map != store.lane_map:
        raise PlanRejected(f"beta != 0 reads C with {twin.name}, whose registers do not hold C as {store.name} "
                           "stores it (compare `xegemm atoms show` of both)")
    return twin


def choose_block1d(operand, op, bits, lanes, mma, extent, frag_shape, frag_grid, transpose,
                    explicit: str | None = None, max_cost: int = 2) -> OperandPlan:
    """The named 1D sub-group block tile, or the smallest whose lane map holds whole fragments of the operand."""
    named = Block1DAtom.parse(explicit).check() if explicit else None
    candidates = [] if named else enumerate_block1d_atoms(lanes, op, bits, max_rows=extent[0], max_cols=extent[1])
    try:
        return choose(operand, named, candidates, mma, extent, frag_shape, frag_grid, transpose, max_cost)
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


def with_prefetch(op: OperandPlan) -> OperandPlan:
    """The prefetch atom for an operand's loads: the same memory block, row-major, no registers."""
    try:
        prefetch = op.atom.prefetch
    except AtomError as exc:
        raise PlanRejected(str(exc)) from None
    return OperandPlan(op.operand, op.atom, op.tiles, op.fragments, prefetch)
