"""Coop-matrix layouts: which elements of an M x N cooperative matrix each work-item of a sub-group holds.

Implements the general layout of tinytc's "Coopmatrix layout" document (the layout document below:
``docs/dev/coopmatrix_layout.rst`` of intel/tiny-tensor-compiler, docs/atoms.md §8): the matrix A is viewed as an I x K1 x J x K2
tensor A*, linearized canonically and dealt out to the S work-items round-robin.  Uses ``acc`` and ``b`` and non-packed ``a`` keep A*; a low-precision
``a`` is VNNI-packed (tensor A**), ``omega`` consecutive columns per 32-bit entry.  The same layout is
tinytc's ``get_layout`` (docs/atoms.md §8).

Where the layout document leaves a gap, this module decides (and says so at the formula):

* VNNI with M < S: the document gives A** the j-extent ceil(J/omega), which need not spread evenly over
  the S work-items (e.g. 1 x 16 f16, S = 16: 8 entries for 16 work-items).  It is rounded up the way the
  document rounds J itself: the smallest extent >= ceil(J/omega) with I * extent a multiple of S.  That is
  exactly ceil(J/omega) whenever ceil(J/omega) already spreads evenly (always when M >= S).
* ``omega`` is the document's operands-per-channel of use ``a`` (tinytc's ``ops_per_chan``), stored even
  when the VNNI condition "N is a multiple of omega" fails; ``vnni`` says whether packing happens.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from xegemm.atoms.lanemap import LaneMap
from xegemm.errors import XegemmError

USES = ("a", "b", "acc")

# Bytes per element: size(ty) in the layout document's omega = max(1, 4/size(ty)) and omega_b = max(1, 2/size(ty)).
ELEMENT_BYTES = {
    "s8": 1, "i8": 1, "u8": 1,
    "f16": 2, "bf16": 2, "s16": 2, "i16": 2, "u16": 2,
    "f32": 4, "s32": 4, "i32": 4, "u32": 4,
    "f64": 8, "s64": 8, "i64": 8, "u64": 8,
}


class CoopMatrixLayoutError(XegemmError, ValueError):
    """A coop-matrix shape, use or element type that the layout document does not admit."""


@dataclass(frozen=True)
class CoopMatrixLayout:
    """The layout of one ``rows`` x ``cols`` coop-matrix of ``dtype`` with ``use`` on ``sg`` work-items.

    ``I, J, K1, K2, V`` are the layout document's symbols (A* has shape I x K1 x J x K2, V components per
    work-item).  ``omega`` is the operands per 32-bit channel of use ``a`` (1 otherwise); ``vnni`` says
    whether A is stored as the packed A** tensor, whose j-extent is ``J_packed`` (``J`` when not packed).
    ``lane_map`` lists each work-item's elements in register order, ``channels`` per 32-bit entry.
    """

    use: str
    rows: int
    cols: int
    sg: int
    dtype: str
    I: int  # noqa: E741 - the layout document's name
    J: int
    K1: int
    K2: int
    V: int
    omega: int
    vnni: bool
    J_packed: int
    lane_map: LaneMap

    @property
    def K(self) -> int:
        """Row blocks: K = K1 * K2 = M / I."""
        return self.K1 * self.K2

    @property
    def channels(self) -> int:
        """Elements per distributed entry: ``omega`` when VNNI-packed, else 1."""
        return self.omega if self.vnni else 1

    @property
    def entries(self) -> int:
        """Distributed entries per work-item (V, or the number of 32-bit VNNI entries)."""
        return self.I * self.K * self.J_packed // self.sg

    def to_json(self) -> dict:
        """``{"use", "rows", "cols", "sg", "dtype", "lanes", "map"}`` with the lane map as nested lists."""
        return {"use": self.use, "rows": self.rows, "cols": self.cols, "sg": self.sg, "dtype": self.dtype,
                "lanes": self.sg, "map": self.lane_map.to_json()}


MAX_ELEMENTS = 1 << 16     # elements of one layout table (joint matrices are at most a few thousand)

def _is_power_of_two(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 1 and x & (x - 1) == 0


def _validate(use: str, rows: int, cols: int, sg: int, dtype: str) -> int:
    """Check the layout document's preconditions; return size(ty) in bytes."""
    if use not in USES:
        raise CoopMatrixLayoutError(f"use must be one of {', '.join(USES)} (got {use!r})")
    if dtype not in ELEMENT_BYTES:
        raise CoopMatrixLayoutError(f"dtype must be one of {', '.join(ELEMENT_BYTES)} (got {dtype!r})")
    # The layout document, "General layout": M and S are powers of two >= 1.
    if not _is_power_of_two(rows):
        raise CoopMatrixLayoutError(f"rows (M) must be a power of two >= 1 (got {rows!r})")
    if not _is_power_of_two(sg):
        raise CoopMatrixLayoutError(f"sub-group size (S) must be a power of two >= 1 (got {sg!r})")
    if not isinstance(cols, int) or isinstance(cols, bool) or cols < 1:
        raise CoopMatrixLayoutError(f"cols (N) must be an integer >= 1 (got {cols!r})")
    if rows * cols > MAX_ELEMENTS or sg > MAX_ELEMENTS:
        raise CoopMatrixLayoutError(f"a {rows}x{cols} matrix (sub-group {sg}) is larger than any cooperative "
                                    f"matrix: at most {MAX_ELEMENTS} elements and a sub-group of at most that")
    return ELEMENT_BYTES[dtype]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@lru_cache(maxsize=1024, typed=True)
def coopmatrix_layout(use: str, rows: int, cols: int, sg: int = 16, dtype: str = "f32") -> CoopMatrixLayout:
    """The layout document's layout of a ``rows`` x ``cols`` coop-matrix with ``use`` a, b or acc on ``sg`` work-items.

    Raises :class:`CoopMatrixLayoutError` (a ``ValueError``) naming the violated rule.
    """
    size = _validate(use, rows, cols, sg, dtype)
    # The layout document, "General layout": I = min(M, S); J = ceil(I N / S) S / I; K = K1 K2 = M / I.
    I = min(rows, sg)  # noqa: E741
    J = _ceil_div(I * cols, sg) * sg // I
    K = rows // I
    # The layout document, "Matrix B": K1 = omega_b = max(1, 2/size(ty)) if M/S > 1 else 1.
    # The layout document, "Matrix Accumulator" and "Matrix A": K1 = 1.
    K1 = max(1, 2 // size) if use == "b" and rows > sg else 1
    K2 = K // K1
    # The layout document, "Work-item mapping": V = I K J / S components per work-item.
    V = I * K * J // sg
    # The layout document, "Matrix A": omega = max(1, max(1, 4/size(ty))) operands per channel; low-precision A is
    # VNNI-transformed if N is a multiple of omega.
    omega = max(1, 4 // size) if use == "a" else 1
    vnni = omega > 1 and cols % omega == 0
    # The layout document, "Matrix A": A** has j-extent ceil(J/omega).  Rounded up so that the I K1 J_packed K2
    # entries spread evenly over S work-items (this module's resolution, see the module docstring).
    J_packed = _ceil_div(I * _ceil_div(J, omega), sg) * sg // I if vnni else J
    lane_map = _lane_map(rows, cols, sg, I, K1, J_packed, K2, omega if vnni else 1)
    return CoopMatrixLayout(use, rows, cols, sg, dtype, I, J, K1, K2, V, omega, vnni, J_packed, lane_map)


def _lane_map(M: int, N: int, S: int, I: int, K1: int, Jd: int, K2: int, channels: int) -> LaneMap:  # noqa: E741
    """Deal the I x K1 x Jd x K2 tensor out to S work-items by the layout document's definition W^p_v = A*[L^-1(p + vS)]."""
    per_lane = []
    for p in range(S):
        slots = []
        for v in range(I * K1 * Jd * K2 // S):
            # The layout document, "Work-item mapping": W^p_v = A*[L^-1(p + v S)], with L(i,k1,j,k2) = i + k1 I
            # + j I K1 + k2 I K1 J inverted as in "Mapping properties".
            L = p + v * S
            i, k1, j, k2 = L % I, L // I % K1, L // (I * K1) % Jd, L // (I * K1 * Jd)
            # The layout document, "General layout": A*_{i,k1,j,k2} = A[i + k1 I + k2 I K1][j], 0 out of range.
            row = i + k1 * I + k2 * I * K1
            for c in range(channels):
                # The layout document, "Matrix A": A**_{c,i,k1,j,k2} = A*_{i,k1,c + j omega,k2}, channel 0 lowest.
                col = c + j * channels
                slots.append((row, col) if row < M and col < N else None)
        per_lane.append(slots)
    return LaneMap.from_lists(per_lane)


def load_coopmatrix(layout: CoopMatrixLayout, mem: np.ndarray, pos0: int, pos1: int, *, transpose: bool = False,
                    rows_checked: bool = False, cols_checked: bool = False) -> np.ndarray:
    """The layout document's SIMT load pseudo-code: the (sg, lane length) register contents read from ``mem`` at (pos0, pos1).

    Element (row, col) of the coop-matrix is ``mem[pos0 + row, pos1 + col]`` (``mem.T`` with
    ``transpose``).  Padding and, when checked, out-of-bounds rows/cols read 0; an unchecked
    out-of-bounds access raises ``IndexError`` (on the device it is undefined).  For a VNNI-packed A the
    layout document's column loop runs over 32-bit entries with an inner loop over their ``omega`` channels.
    """
    if mem.ndim != 2:
        raise ValueError(f"mem must be a 2-D matrix (got {mem.ndim} dimensions)")
    # The layout document, "Load pseudo-code": Transpose swaps shape0/shape1 and stride0/stride1, i.e. reads mem^T.
    src = mem.T if transpose else mem
    shape0, shape1 = src.shape
    S, I, K1, K2, ch = layout.sg, layout.I, layout.K1, layout.K2, layout.channels  # noqa: E741
    per_block = layout.entries // layout.K  # V/K in the layout document
    # The layout document, "Load pseudo-code": needs_mask = J S / I > N (conservative: J > N would do).
    needs_mask = layout.J_packed * ch * S // I > layout.cols
    out = np.zeros((S, layout.entries * ch), dtype=mem.dtype)
    for p in range(S):
        i0, j0 = p % I, p // I  # The layout document, "Mapping properties": i = p mod I, j = floor(p/I) + u S/I
        for w1 in range(K1):
            for w2 in range(K2):
                row = pos0 + i0 + (w1 + w2 * K1) * I
                if rows_checked and not 0 <= row < shape0:
                    continue  # the layout document's else branch: the whole row of components stays 0
                for u in range(per_block):
                    j = j0 + u * (S // I)
                    for c in range(ch):
                        col = pos1 + c + j * ch
                        col_ok = not cols_checked or 0 <= col < shape1
                        mask_ok = not needs_mask or c + j * ch < layout.cols
                        if mask_ok and col_ok:
                            # The layout document, "Load pseudo-code": R[w1 + u K1 + w2 K1 (V/K)].
                            out[p, (w1 + u * K1 + w2 * K1 * per_block) * ch + c] = _read(src, row, col)
    return out


def _read(src: np.ndarray, row: int, col: int):
    if not (0 <= row < src.shape[0] and 0 <= col < src.shape[1]):
        raise IndexError(f"unchecked coop-matrix load reads ({row}, {col}) outside a {src.shape} matrix")
    return src[row, col]


def _component_labels(layout: CoopMatrixLayout) -> list[str]:
    """Row labels: .x .y .z .w as in the layout document for up to 4 components, else the register index."""
    if layout.vnni:
        return [f"[{e}].c{c}" for e in range(layout.entries) for c in range(layout.channels)]
    if layout.lane_map.length <= 4:
        return ["." + "xyzw"[v] for v in range(layout.lane_map.length)]
    return [f"[{v}]" for v in range(layout.lane_map.length)]


def format_coopmatrix_table(layout: CoopMatrixLayout) -> str:
    """A table like the layout document's: a title line, then one column per work-item p, one row per component."""
    title = (f"coopmatrix use={layout.use} {layout.rows}x{layout.cols} {layout.dtype} sg={layout.sg}: "
             f"I={layout.I} J={layout.J} K1={layout.K1} K2={layout.K2} V={layout.V} omega={layout.omega}"
             + (f" VNNI (J_packed={layout.J_packed})" if layout.vnni else ""))
    cells = [["-,-" if c is None else f"{c[0]},{c[1]}" for c in lane] for lane in layout.lane_map.map]
    labels = _component_labels(layout)
    width = max(len(x) for x in [str(layout.sg - 1), *(x for lane in cells for x in lane)])
    label_width = max(len(x) for x in ["p", *labels])
    lines = [title, "p".ljust(label_width) + " " + " ".join(f"{p:>{width}}" for p in range(layout.sg))]
    for v, label in enumerate(labels):
        lines.append(label.ljust(label_width) + " " + " ".join(f"{lane[v]:>{width}}" for lane in cells))
    return "\n".join(lines)
