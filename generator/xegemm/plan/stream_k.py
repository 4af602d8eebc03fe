"""Stream-K (``tile.stream_k`` = G): the G work-groups of a batch share its MAC-loop iterations evenly.

Osama et al., "Stream-K: Work-centric Parallel Decomposition for Dense Matrix-Matrix Multiplication on the
GPU" (PPoPP 2023), as CUTLASS and sycl-tla schedule it: one batch's iteration space is I = tiles x k_tiles
(its output tiles in the order of xegemm.plan.swizzle, each its k-tiles of BK in order), and work-group g takes the
contiguous range [g I / G, (g + 1) I / G), walking it tile by tile.  A tile that one work-group covers whole
goes through the epilogue straight to D.  A tile cut between work-groups is finished by a second kernel: each
contributor stores its raw accumulators to its own workspace slot (slot 0 for the first piece of its range,
1 for the last; a range has at most those two pieces), and the fix-up kernel adds the pieces of each cut
tile in contributor order and applies the epilogue once.  sycl-tla instead fixes up inside the GEMM kernel,
the finishing work-group waiting on per-tile locks for its peers; a second kernel needs no work-group to
wait for another (OpenCL does not promise they run concurrently), no atomics, and adds in a fixed order:
deterministic, exact for integers.

The formulas are written once (xegemm.library.formula): the templates print them as C, and :func:`schedule` and
:func:`contributors` evaluate the same text, which is what the tests and the verifier's reference use.
"""

from __future__ import annotations

from xegemm.library.formula import evaluate, substitute
from xegemm.plan.swizzle import c_lines as swizzle_c_lines
from xegemm.plan.swizzle import tile_of

SLOTS = 2   # workspace tiles per work-group: the first and the last piece of its range
# (name, expression) steps; constants BM, BN, BK (the work-group tile) and G; C inputs M, N, K, g, it, tile
GRID = (("tiles_n", "(N + BN - 1) / BN"), ("tiles_m", "(M + BM - 1) / BM"), ("tiles", "tiles_m * tiles_n"),
        ("k_tiles", "(K + BK - 1) / BK"), ("iters", "tiles * k_tiles"))
RANGE = (("it_begin", "g * iters / G"),             # this work-group's iterations [it_begin, it_end)
         ("it_end", "(g + 1) * iters / G"))
SEGMENT = (("tile", "it / k_tiles"),                # the tile of iteration it, and the piece of it in range
           ("tile_first", "tile * k_tiles"),
           ("seg_end", "min(it_end, tile_first + k_tiles)"),
           ("k_begin", "(it - tile_first) * BK"),
           ("seg_tiles", "seg_end - tile_first"),     # k-tiles of the tile up to the piece's end (an int)
           ("k_end", "min(K, seg_tiles * BK)"),
           ("whole", "seg_end - it == k_tiles"),    # the whole tile: the epilogue stores D
           ("slot", "it > it_begin"))               # else: the workspace slot of this piece
FIXUP = (("tile_first", "tile * k_tiles"),          # the work-groups whose ranges hold the tile's iterations
         ("first", "((tile_first + 1) * G - 1) / iters"),
         ("last", "((tile_first + k_tiles) * G - 1) / iters"))
PIECE = (("slot", "g * iters / G < tile_first"),)   # of contributor g: only the first can begin before the tile
LONG = {"tiles", "iters", "tile", "it_begin", "it_end", "tile_first", "seg_end"}   # I x G overflows an int


def c_lines(steps, workgroup: tuple[int, int, int], groups: int) -> list[str]:
    """The OpenCL C statements of ``steps`` for a work-group tile [BM, BN, BK] and G = ``groups``."""
    constants = dict(zip(("BM", "BN", "BK"), workgroup), G=groups)
    return [f"const {'long' if name in LONG else 'int'} {name} = {substitute(expr, constants)};"
            for name, expr in steps]


def tile_lines(swizzle: int) -> list[str]:
    """C defining ``tile_m`` and ``tile_n`` of linear tile ``tile``, in the swizzled order of xegemm.plan.swizzle."""
    if swizzle == 1:
        return ["const int tile_m = tile / tiles_n;", "const int tile_n = tile % tiles_n;"]
    return swizzle_c_lines(swizzle, {"gx": "tile % tiles_n", "gy": "tile / tiles_n", "nx": "tiles_n",
                                     "ny": "tiles_m"})


def _grid(m: int, n: int, k: int, workgroup, groups: int) -> dict[str, int]:
    bm, bn, bk = workgroup
    return evaluate(GRID, {"M": m, "N": n, "K": k, "BM": bm, "BN": bn, "BK": bk, "G": groups})


def iterations(m: int, n: int, k: int, workgroup) -> int:
    """I: MAC-loop iterations (tiles x k-tiles) of one batch."""
    return _grid(m, n, k, workgroup, 1)["iters"]


def tiles(m: int, n: int, workgroup) -> int:
    """Output tiles of one batch."""
    return _grid(m, n, 1, workgroup, 1)["tiles"]


def schedule(m: int, n: int, k: int, workgroup, groups: int) -> list[list[dict]]:
    """Per work-group, the pieces it computes in order, as the GEMM kernel's loop walks them: each the
    evaluated SEGMENT (``tile``, ``k_begin``, ``k_end`` in elements, ``whole``, ``slot``)."""
    grid = _grid(m, n, k, workgroup, groups)
    out = []
    for g in range(groups):
        env = evaluate(RANGE, {**grid, "g": g})
        pieces, it = [], env["it_begin"]
        while it < env["it_end"]:
            piece = evaluate(SEGMENT, {**env, "it": it})
            pieces.append(piece)
            it = piece["seg_end"]
        out.append(pieces)
    return out


def contributors(m: int, n: int, k: int, workgroup, groups: int, tile: int) -> list[tuple[int, int]]:
    """(work-group, slot) of each piece of ``tile`` in the order the fix-up kernel adds them (one entry: the
    tile is whole, the GEMM kernel stored D)."""
    env = evaluate(FIXUP, {**_grid(m, n, k, workgroup, groups), "tile": tile})
    return [(g, evaluate(PIECE, {**env, "g": g})["slot"]) for g in range(env["first"], env["last"] + 1)]


def tile_pieces(config) -> list[tuple[tuple[int, int], list[tuple[int, int]]]]:
    """Per output tile of a stream-K config: ((tile_m, tile_n), the [k_begin, k_end) of its pieces in the order
    the fix-up adds them); what the verifier's reference follows (xegemm.verify.dense)."""
    p, tile = config.problem, config.tile
    grid = _grid(p.m, p.n, p.k, tile.workgroup, tile.stream_k)
    by_tile: dict[int, list[tuple[int, int]]] = {}
    for pieces in schedule(p.m, p.n, p.k, tile.workgroup, tile.stream_k):     # work-groups in order
        for piece in pieces:
            by_tile.setdefault(piece["tile"], []).append((piece["k_begin"], piece["k_end"]))
    return [(tile_of(t % grid["tiles_n"], t // grid["tiles_n"], grid["tiles_n"], grid["tiles_m"], tile.swizzle),
             by_tile[t]) for t in range(grid["tiles"])]
