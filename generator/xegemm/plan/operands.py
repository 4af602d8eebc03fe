"""One operand of a sub-group tile: copy tiles covering it, and where each MMA fragment lies in their registers.

A plan is built by composing atoms, CuTe-style: each sub-group tile is covered by copy atoms, and each MMA
operand fragment is located in the copy registers by comparing lane maps: a contiguous run when the
coordinates of a run equal the operand's lane by lane (no code), else a reorder naming, per lane and
element, the copy tile, register element and lane holding it (a per-lane permutation or a cross-lane gather,
docs/atoms.md §1.4).  Nothing is special-cased per atom name: any legal atom whose layout fits is accepted,
anything else is rejected with the rule and the numbers that fail.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from xegemm.atoms.base import CopyAtomBase
from xegemm.atoms.mma import MmaAtom
from xegemm.library.dtypes import ctype_shape
from xegemm.errors import PlanRejected


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
    atom: CopyAtomBase
    tiles: tuple[tuple[int, int], ...]      # (row, col) origins in memory coordinates, relative to the sub-group
    fragments: dict                          # MMA fragment index -> Fragment
    prefetch: CopyAtomBase | None = None

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
        return len(self.tiles) * self.atom.messages



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
def plan_operand(operand: str, copy: CopyAtomBase, mma: MmaAtom, extent: tuple[int, int], frag_shape,
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
    pack = mma.k_per_element if operand == "b" else 1   # a GPTQ view (xegemm.plan.dequant.StoredB): K per stored element
    reach = _to_memory((frag_shape[0] // pack, frag_shape[1]), transpose)
    near = {t for t, (r0, c0) in enumerate(tiles) if r0 < copy.rows + reach[0] and c0 < copy.cols + reach[1]}
    holders = _holders(copy, tiles, near)
    per_row = cols // copy.cols
    located: dict = {}
    fragments = {}
    fr, fc = frag_shape
    for i in range(frag_grid[0]):
        for j in range(frag_grid[1]):
            r, c = _to_memory((i * fr // pack, j * fc), transpose)
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

