"""The coop-matrix layout model against the layout document's tables and formulas and tinytc's get_layout.

The layout document = tinytc's "Coopmatrix layout" (intel/tiny-tensor-compiler docs/dev/coopmatrix_layout.rst at
v0.4.0, authoritative; docs/atoms.md §8), the earlier revision = the same file before its general layout.
"""

import json
import math

import numpy as np
import pytest

from xegemm.atoms.coopmatrix import (
    CoopMatrixLayoutError,
    coopmatrix_layout,
    format_coopmatrix_table,
    load_coopmatrix,
)
from xegemm.errors import XegemmError

USES = ("a", "b", "acc")
GRID_M = (1, 2, 4, 8, 16, 32, 64)
GRID_N = (1, 3, 8, 15, 16, 17, 33)
GRID_S = (8, 16, 32)
GRID_TYPES = ("f32", "f16", "s8")  # one type per omega = 1, 2, 4
ALL_TYPES = ("f32", "f16", "bf16", "s8", "i8", "u8", "s32", "i32", "f64")

# The layout document, "Work-item mapping": the two example tables, copied cell for cell (columns p = work-items,
# rows = vector components).  The document writes padding as "-, -" in the first table and "-,-" in the second.
DOC_4X15 = (
    ('p', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', '10', '11', '12', '13', '14', '15'),
    ('.x', '0,0', '1,0', '2,0', '3,0', '0,1', '1,1', '2,1', '3,1', '0,2', '1,2', '2,2', '3,2', '0,3', '1,3', '2,3', '3,3'),
    ('.y', '0,4', '1,4', '2,4', '3,4', '0,5', '1,5', '2,5', '3,5', '0,6', '1,6', '2,6', '3,6', '0,7', '1,7', '2,7', '3,7'),
    ('.z', '0,8', '1,8', '2,8', '3,8', '0,9', '1,9', '2,9', '3,9', '0,10', '1,10', '2,10', '3,10', '0,11', '1,11', '2,11', '3,11'),
    ('.w', '0,12', '1,12', '2,12', '3,12', '0,13', '1,13', '2,13', '3,13', '0,14', '1,14', '2,14', '3,14', '-, -', '-, -', '-, -', '-, -'),
)
DOC_1X17 = (
    ('p', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', '10', '11', '12', '13', '14', '15'),
    ('.x', '0,0', '0,1', '0,2', '0,3', '0,4', '0,5', '0,6', '0,7', '0,8', '0,9', '0,10', '0,11', '0,12', '0,13', '0,14', '0,15'),
    ('.y', '0,16', '-,-', '-,-', '-,-', '-,-', '-,-', '-,-', '-,-', '-,-', '-,-', '-,-', '-,-', '-,-', '-,-', '-,-', '-,-'),
)

# The earlier revision, "Matrix B": the same two examples as reStructuredText simple tables, copied verbatim.
# It gives them for matrix_b only; they are identical to the layout document's, and the layout document's general layout must
# (and does) reproduce them for every use, since M <= S forces K1 = K2 = 1 and 15, 17 are odd (no VNNI).
EARLIER_4X15 = """\
== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ====
p     0    1    2    3    4    5    6    7    8    9   10   11   12   13   14   15
== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ====
.x 0,0  1,0  2,0  3,0  0,1  1,1  2,1  3,1  0,2  1,2  2,2  3,2  0,3  1,3  2,3  3,3
.y 0,4  1,4  2,4  3,4  0,5  1,5  2,5  3,5  0,6  1,6  2,6  3,6  0,7  1,7  2,7  3,7
.z 0,8  1,8  2,8  3,8  0,9  1,9  2,9  3,9  0,10 1,10 2,10 3,10 0,11 1,11 2,11 3,11
.w 0,12 1,12 2,12 3,12 0,13 1,13 2,13 3,13 0,14 1,14 2,14 3,14 -, - -, - -, - -, -
== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ====
"""
EARLIER_1X17_F32 = """\
== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ====
p     0    1    2    3    4    5    6    7    8    9   10   11   12   13   14   15
== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ====
.x 0,0  0,1  0,2  0,3  0,4  0,5  0,6  0,7  0,8  0,9  0,10 0,11 0,12 0,13 0,14 0,15
.y 0,16 -,-  -,-  -,-  -,-  -,-  -,-  -,-  -,-  -,-  -,-  -,-  -,-  -,-  -,-  -,-
== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ==== ====
"""


def parse_rst_table(text: str) -> tuple[tuple[str, ...], ...]:
    """Rows of an RST simple table, cells cut at the column spans of its ``== ====`` rule."""
    lines = text.splitlines()
    rule = lines[0]
    spans, start = [], None
    for x, ch in enumerate(rule + " "):
        if ch == "=" and start is None:
            start = x
        elif ch != "=" and start is not None:
            spans.append((start, x))
            start = None
    return tuple(tuple(line[a:b + 1].strip() for a, b in spans) for line in lines if not line.startswith("=="))


def table_to_lanes(rows) -> list[list[tuple[int, int] | None]]:
    """Seed table (header row p, one row per component) -> expected lane map as lists per work-item."""
    header, *components = rows
    assert header == ("p", *map(str, range(16)))

    def cell(text):
        if text.replace(" ", "") == "-,-":
            return None
        r, c = text.split(",")
        return int(r), int(c)

    return [[cell(row[1 + p]) for row in components] for p in range(len(header) - 1)]


def lanes_of(layout) -> list[list[tuple[int, int] | None]]:
    return [list(lane) for lane in layout.lane_map.map]


# --- the layout document's example tables ----------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_TYPES)
@pytest.mark.parametrize("use", USES)
@pytest.mark.parametrize("shape, table", [((4, 15), DOC_4X15), ((1, 17), DOC_1X17)])
def test_document_example_tables(use, dtype, shape, table):
    layout = coopmatrix_layout(use, *shape, sg=16, dtype=dtype)
    assert lanes_of(layout) == table_to_lanes(table)


@pytest.mark.parametrize("shape, text", [((4, 15), EARLIER_4X15), ((1, 17), EARLIER_1X17_F32)])
def test_earlier_revision_example_tables(shape, text):
    # The earlier revision gives these for matrix_b (the 1x17 one "in f32").
    rows = parse_rst_table(text)
    assert lanes_of(coopmatrix_layout("b", *shape, sg=16, dtype="f32")) == table_to_lanes(rows)


def test_earlier_revision_tables_equal_the_documents():
    assert parse_rst_table(EARLIER_4X15) == DOC_4X15
    assert parse_rst_table(EARLIER_1X17_F32) == DOC_1X17


@pytest.mark.parametrize("shape, table", [((4, 15), DOC_4X15), ((1, 17), DOC_1X17)])
def test_format_table_reads_like_the_seed(shape, table):
    text = format_coopmatrix_table(coopmatrix_layout("acc", *shape))
    title, *body = text.splitlines()
    assert f"{shape[0]}x{shape[1]}" in title
    assert [tuple(line.split()) for line in body] == [tuple(c.replace("-, -", "-,-") for c in r) for r in table]


def test_format_table_labels_vnni_channels():
    body = format_coopmatrix_table(coopmatrix_layout("a", 1, 16, dtype="f16")).splitlines()[2:]
    assert [line.split()[:3] for line in body] == [["[0].c0", "0,0", "0,2"], ["[0].c1", "0,1", "0,3"]]


# --- hand-checked values -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, omega, omega_b", [
    ("f32", 1, 1), ("s32", 1, 1), ("i32", 1, 1), ("f64", 1, 1),
    ("f16", 2, 1), ("bf16", 2, 1), ("s8", 4, 2), ("i8", 4, 2), ("u8", 4, 2),
])
def test_omega_and_k1_per_type(dtype, omega, omega_b):
    # The layout document: omega = max(1, 4/size) for use a; K1 = omega_b = max(1, 2/size) for use b when M/S > 1.
    assert coopmatrix_layout("a", 16, 8, dtype=dtype).omega == omega
    assert coopmatrix_layout("acc", 16, 8, dtype=dtype).omega == 1
    assert coopmatrix_layout("b", 32, 8, dtype=dtype).K1 == omega_b
    assert coopmatrix_layout("b", 16, 8, dtype=dtype).K1 == 1  # M/S = 1
    assert coopmatrix_layout("a", 32, 8, dtype=dtype).K1 == 1
    assert coopmatrix_layout("acc", 32, 8, dtype=dtype).K1 == 1


def test_b_s8_interleaves_row_blocks_before_columns():
    # 32 x 4 s8, S = 16: K = 2 = K1, so each work-item holds rows p and p+16 of a column back to back.
    layout = coopmatrix_layout("b", 32, 4, sg=16, dtype="s8")
    assert (layout.I, layout.J, layout.K1, layout.K2, layout.V) == (16, 4, 2, 1, 8)
    assert layout.lane_map.map[5] == ((5, 0), (21, 0), (5, 1), (21, 1), (5, 2), (21, 2), (5, 3), (21, 3))
    # f16 has omega_b = 1: the row blocks come after all columns instead.
    assert coopmatrix_layout("b", 32, 4, sg=16, dtype="f16").lane_map.map[5] == (
        (5, 0), (5, 1), (5, 2), (5, 3), (21, 0), (21, 1), (21, 2), (21, 3))


def test_vnni_a_small_m_packs_consecutive_columns():
    # 2 x 8 s8, S = 16, omega = 4: one 32-bit entry per work-item, channel c = column 4j + c.
    layout = coopmatrix_layout("a", 2, 8, sg=16, dtype="s8")
    assert layout.vnni and layout.channels == 4 and layout.entries == 1
    expected = [[(0, 0), (0, 1), (0, 2), (0, 3)], [(1, 0), (1, 1), (1, 2), (1, 3)],
                [(0, 4), (0, 5), (0, 6), (0, 7)], [(1, 4), (1, 5), (1, 6), (1, 7)]]
    expected += [[None] * 4] * 12
    assert lanes_of(layout) == expected


def test_vnni_condition_is_n_multiple_of_omega():
    assert coopmatrix_layout("a", 16, 16, dtype="f16").vnni
    assert not coopmatrix_layout("a", 16, 15, dtype="f16").vnni
    assert not coopmatrix_layout("a", 16, 6, dtype="s8").vnni  # 6 is a multiple of 2, not of omega = 4
    assert coopmatrix_layout("a", 16, 8, dtype="s8").vnni
    assert not coopmatrix_layout("a", 16, 16, dtype="f32").vnni  # omega = 1
    assert not coopmatrix_layout("acc", 16, 16, dtype="f16").vnni
    assert not coopmatrix_layout("b", 16, 16, dtype="s8").vnni


# --- properties over a grid of shapes ----------------------------------------------------------------


def grid(use, dtype, sg):
    for m in GRID_M:
        for n in GRID_N:
            yield coopmatrix_layout(use, m, n, sg=sg, dtype=dtype)


@pytest.mark.parametrize("sg", GRID_S)
@pytest.mark.parametrize("dtype", GRID_TYPES)
@pytest.mark.parametrize("use", USES)
def test_mapping_properties(use, dtype, sg):
    """The layout document, "Mapping properties": with v = w1 + u K1 + w2 K1 (V/K), work-item p holds
    i = p mod I, k1 = w1, j = floor(p/I) + u (S/I), k2 = w2, i.e. A[i + k1 I + k2 I K1][j]."""
    for layout in grid(use, dtype, sg):
        I, K1, K2, ch = layout.I, layout.K1, layout.K2, layout.channels  # noqa: E741
        per_block = layout.lane_map.length // ch // (K1 * K2)  # V/K, or 32-bit entries per row block
        for p in range(sg):
            expected = [None] * layout.lane_map.length
            for w1 in range(K1):
                for w2 in range(K2):
                    for u in range(per_block):
                        row = p % I + w1 * I + w2 * I * K1
                        j = p // I + u * (sg // I)
                        for c in range(ch):  # VNNI: channel c of packed column j is column c + j omega
                            col = c + j * ch
                            slot = (w1 + u * K1 + w2 * K1 * per_block) * ch + c
                            expected[slot] = (row, col) if col < layout.cols else None
            assert list(layout.lane_map.map[p]) == expected, (layout.rows, layout.cols, p)


@pytest.mark.parametrize("sg", GRID_S)
@pytest.mark.parametrize("dtype", GRID_TYPES)
@pytest.mark.parametrize("use", USES)
def test_every_element_once_and_padding_count(use, dtype, sg):
    for layout in grid(use, dtype, sg):
        m, n = layout.rows, layout.cols
        held = [c for lane in layout.lane_map.map for c in lane if c is not None]
        assert sorted(held) == [(r, c) for r in range(m) for c in range(n)], (m, n)
        # Each work-item holds the fewest whole registers that fit: ceil(MN/S) elements, or with VNNI
        # omega * ceil(MN/(omega S)) elements in 32-bit entries of omega channels each.
        ch = layout.channels
        assert layout.lane_map.lanes == sg
        assert layout.lane_map.length == ch * math.ceil(m * n / (ch * sg)), (m, n)
        if not layout.vnni:
            assert layout.lane_map.length == layout.V
        padding = sum(c is None for lane in layout.lane_map.map for c in lane)
        assert padding == sg * layout.lane_map.length - m * n


def tinytc_get_layout(use, m, n, sg, size):
    """facts section 1.2, tinytc src/coopmatrix_layout.cpp get_layout, in integer arithmetic."""
    rows = min(m, sg)
    cols = (1 + (rows * n - 1) // sg) * sg // rows
    blocks = m // rows
    length = rows * cols * blocks // sg
    blocks1 = max(1, 2 // size) if use == "b" and blocks > 1 else 1
    ops_per_chan = max(1, 4 // size) if use == "a" else 1
    return rows, cols, blocks, length, blocks1, ops_per_chan


@pytest.mark.parametrize("dtype, size", [("f32", 4), ("f16", 2), ("bf16", 2), ("u8", 1), ("i32", 4), ("f64", 8)])
@pytest.mark.parametrize("use", USES)
def test_matches_tinytc_get_layout(use, dtype, size):
    for sg in GRID_S:
        for m in GRID_M:
            for n in GRID_N:
                layout = coopmatrix_layout(use, m, n, sg=sg, dtype=dtype)
                ours = (layout.I, layout.J, layout.K, layout.V, layout.K1, layout.omega)
                assert ours == tinytc_get_layout(use, m, n, sg, size), (m, n, sg)


@pytest.mark.parametrize("dtype", ("f16", "bf16", "s8", "u8"))
def test_vnni_with_m_at_least_s_keeps_the_acc_order(dtype):
    # With I = S a work-item's consecutive components are consecutive columns, so packing omega of them
    # into one 32-bit entry leaves the element order of A* unchanged.
    for sg in GRID_S:
        for m in (sg, 2 * sg, 4 * sg):
            for n in (4, 8, 16, 32):
                a = coopmatrix_layout("a", m, n, sg=sg, dtype=dtype)
                assert a.vnni and a.lane_map == coopmatrix_layout("acc", m, n, sg=sg, dtype=dtype).lane_map


# --- formulas of the earlier revision that the document must still satisfy --------------------------------


@pytest.mark.parametrize("sg", GRID_S)
def test_earlier_revision_acc_mapping(sg):
    # The earlier revision, "Matrix Accumulator" (M a multiple of S): v = u + wJ holds C_{p,u,w} = A[p + wS][u], J = N.
    # The layout document agrees.  (The earlier revision's acc load pseudo-code pads J to a multiple of o = max(1, 4/size); the layout document
    # does not pad acc columns.)
    for m in (sg, 2 * sg, 4 * sg):
        for n in GRID_N:
            layout = coopmatrix_layout("acc", m, n, sg=sg, dtype="f16")
            for p in range(sg):
                assert list(layout.lane_map.map[p]) == [(p + w * sg, u) for w in range(m // sg) for u in range(n)]


@pytest.mark.parametrize("sg", GRID_S)
def test_earlier_revision_b_mapping_where_k1_is_k(sg):
    # The earlier revision, "Matrix B": L(i,k,j) = i + kI + jIK, so v = w + uK holds A[p mod I + wI][floor(p/I) + u S/I].
    # That is the layout document with K1 = K, K2 = 1, which the layout document picks only when K <= omega_b (s8, M <= 2S).
    # Where they differ (e.g. f16 or s8 with M = 4S) the layout document wins; the grid tests cover that.
    for m in (1, 2, 4, 8, sg, 2 * sg):
        for n in GRID_N:
            layout = coopmatrix_layout("b", m, n, sg=sg, dtype="s8")
            assert layout.K1 == layout.K
            I, K = layout.I, layout.K  # noqa: E741
            for p in range(sg):
                expected = [None] * layout.V
                for w in range(K):
                    for u in range(layout.V // K):
                        j = p // I + u * (sg // I)
                        expected[w + u * K] = (p % I + w * I, j) if j < n else None
                assert list(layout.lane_map.map[p]) == expected


# --- the SIMT load pseudo-code --------------------------------------------------------------------------

LOAD_CASES = [  # (use, rows, cols, sg, dtype)
    ("acc", 4, 15, 16, "f32"), ("acc", 1, 17, 16, "f32"), ("acc", 32, 8, 16, "f32"), ("a", 2, 8, 16, "s8"),
    ("a", 1, 6, 8, "f16"), ("a", 16, 16, 16, "f16"), ("b", 32, 5, 16, "s8"), ("b", 64, 3, 8, "u8"),
    ("b", 8, 33, 32, "f32"),
]


def expected_load(layout, mem, pos0, pos1, checked):
    out = np.zeros((layout.sg, layout.lane_map.length), dtype=mem.dtype)
    for p, lane in enumerate(layout.lane_map.map):
        for v, coord in enumerate(lane):
            if coord is None:
                continue
            r, c = pos0 + coord[0], pos1 + coord[1]
            if checked and not (0 <= r < mem.shape[0] and 0 <= c < mem.shape[1]):
                continue
            out[p, v] = mem[r, c]
    return out


@pytest.mark.parametrize("case", LOAD_CASES)
def test_load_in_bounds_matches_lane_map(case):
    layout = coopmatrix_layout(*case[:3], sg=case[3], dtype=case[4])
    mem = np.random.default_rng(0).integers(1, 1000, size=(layout.rows + 5, layout.cols + 7)).astype(np.float64)
    got = load_coopmatrix(layout, mem, 3, 2)
    assert np.array_equal(got, expected_load(layout, mem, 3, 2, checked=False))
    # Transpose reads mem^T: same registers from the transposed storage.
    assert np.array_equal(load_coopmatrix(layout, np.ascontiguousarray(mem.T), 3, 2, transpose=True), got)


@pytest.mark.parametrize("case", LOAD_CASES)
@pytest.mark.parametrize("pos", [(-2, -3), (3, 4), (-1, 5)])
def test_checked_load_zeroes_out_of_bounds(case, pos):
    layout = coopmatrix_layout(*case[:3], sg=case[3], dtype=case[4])
    # The matrix sticks out of mem at the bottom/right for pos (3, 4) and at the top/left for negative pos.
    mem = np.random.default_rng(1).integers(1, 1000, size=(layout.rows + 1, layout.cols + 2)).astype(np.int64)
    got = load_coopmatrix(layout, mem, *pos, rows_checked=True, cols_checked=True)
    assert np.array_equal(got, expected_load(layout, mem, *pos, checked=True))
    got_t = load_coopmatrix(layout, np.ascontiguousarray(mem.T), *pos, transpose=True,
                            rows_checked=True, cols_checked=True)
    assert np.array_equal(got_t, got)


def test_rows_checked_only_zeroes_whole_rows():
    layout = coopmatrix_layout("acc", 32, 4, sg=16, dtype="f32")
    mem = np.arange(1, 1 + 20 * 4, dtype=np.float32).reshape(20, 4)  # rows 20..31 of the matrix are missing
    got = load_coopmatrix(layout, mem, 0, 0, rows_checked=True)
    assert np.array_equal(got, expected_load(layout, mem, 0, 0, checked=True))
    assert (got[4:, 4:] == 0).all() and (got[:4, 4:] != 0).all()  # lane p, w = 1 holds row 16 + p


def test_unchecked_out_of_bounds_load_raises():
    layout = coopmatrix_layout("acc", 16, 8, sg=16, dtype="f32")
    mem = np.ones((16, 8), dtype=np.float32)
    with pytest.raises(IndexError):
        load_coopmatrix(layout, mem, 1, 0)
    with pytest.raises(IndexError):
        load_coopmatrix(layout, mem, 0, -1, rows_checked=True)  # columns unchecked
    assert load_coopmatrix(layout, mem, 0, -1, cols_checked=True)[:, 0].sum() == 0


# --- API surface ------------------------------------------------------------------------------------------


def test_to_json():
    layout = coopmatrix_layout("acc", 1, 17, sg=16, dtype="f32")
    data = json.loads(json.dumps(layout.to_json()))
    assert {k: data[k] for k in ("use", "rows", "cols", "sg", "dtype", "lanes")} == {
        "use": "acc", "rows": 1, "cols": 17, "sg": 16, "dtype": "f32", "lanes": 16}
    assert data["map"][0] == [[0, 0], [0, 16]] and data["map"][1] == [[0, 1], None]


@pytest.mark.parametrize("args, rule", [
    (("c", 4, 4), "use must be one of a, b, acc"),
    (("a", 4, 4, 16, "f8"), "dtype must be one of"),
    (("a", 3, 4), "rows (M) must be a power of two"),
    (("a", 0, 4), "rows (M) must be a power of two"),
    (("a", 4.0, 4), "rows (M) must be a power of two"),
    (("a", 4, 0), "cols (N) must be an integer >= 1"),
    (("a", 4, 2.5), "cols (N) must be an integer >= 1"),
    (("a", 4, 4, 12), "sub-group size (S) must be a power of two"),
    (("a", 4, 4, True), "sub-group size (S) must be a power of two"),
])
def test_invalid_inputs_name_the_rule(args, rule):
    with pytest.raises(ValueError, match=rule.replace("(", r"\(").replace(")", r"\)")) as info:
        coopmatrix_layout(*args)
    assert isinstance(info.value, CoopMatrixLayoutError) and isinstance(info.value, XegemmError)
