"""The portable lowering: what each atom's OpenCL C does with ordinary loads, stores and arithmetic.

The atom models (:mod:`xegemm.atoms`) describe; this module turns a description into the pieces the
portable templates print, so that every work-item ends up holding exactly the registers the atom's lane map
says (templates/copy/portable.cl.j2, templates/copy/block1d.cl.j2, templates/mma/portable.cl.j2):

- :func:`copy_plan`: per register component of a 2D block copy atom, the C that reads or writes its elements,
  at coordinates written as expressions in x, y and lane (checked against ``CopyAtom.element_coord``);
- :func:`mma_plan`: a DPAS atom as D = A*B + C on the builtin's own register types, column k of A shuffled
  from the lane that holds it, in increasing k (the DPAS's order).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from xegemm.atoms.copy import SUB_GROUP, AtomError, CopyAtom
from xegemm.atoms.lanemap import lane_affine as _lane_affine
from xegemm.atoms.lanemap import lane_expr as _lane_expr
from xegemm.atoms.mma import MmaAtom
from xegemm.library.dtypes import UNSIGNED_CTYPE, DType, c_spelling, ctype_shape, sizeof_ctype, vector_ctype
from xegemm.lowering.dequant import DequantCode, dequant_code
from xegemm.lowering.loops import reroll
from xegemm.lowering.reorder import fragment_ctype, local_reorder_elements, plan_reorders, register_unit
from xegemm.plan.operands import Reorder


def _component(var: str, width: int, i: int) -> str:
    """Component i of a variable of an n-component OpenCL type (scalars have no ``.s0``)."""
    return var if width == 1 else f"{var}.s{i:x}"


# ---- copy atoms ------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def copy_plan(atom: CopyAtom) -> dict:
    """What templates/copy/portable.cl.j2 prints for a 2D block copy atom (nothing for a prefetch), from the
    same rule as ``CopyAtom.element_coord`` (the coordinates are checked against it):

    - ``extent``: the block's rows and columns in elements, to test whether it lies wholly inside the surface;
    - ``fast``: for such a block, per register component, the C that reads (``v[i] = ...;``, v the register's
      components as an array) or writes its elements with the unchecked xe_ldu_* / xe_stu_* at (row, col) written in x, y and lane: a register
      row is one plain vector access at ``x + lane``;
    - ``fast_local``: the same into (a load) or from (a store) the sub-group's local memory, component i of this
      lane at ``v[i * stride]`` (``stride``: the sub-group size), alike rows as loops;
    - ``edge``: for a block over an edge, per register element that is real on some lane, the numbers
      (component, shift, lanes, row0, row_hi, row_lo, col0, col_hi, col_lo): the element sits at
      (y + row0 + row_hi * (lane / L) + row_lo * (lane % L), x + col0 + ...) on lanes 0 .. lanes-1, L =
      ``length``.  The exact path walks this table with the bounds-checked xe_ld_* / xe_st_* (out of the
      surface: reads 0, writes nothing): one loop instead of thousands of unrolled masked accesses, which
      made a GEMM build three times slower.
    """
    if atom.is_prefetch:
        return {}
    per_reg = atom.register_elem_bits // atom.elem_bits
    length = min(atom.dealt_shape[1], SUB_GROUP)
    edge = []
    for e in range(atom.register_length * per_reg):
        at = _copy_coord(atom, e)
        if at is not None:
            (row, col), lanes = at
            edge.append((e // per_reg, e % per_reg * atom.elem_bits, lanes, *row, *col))
    narrow = atom.elem_bits < atom.register_elem_bits
    fast, align = _fast_lines(atom)
    return {"extent": (atom.rows, atom.cols), "fast": fast, "align": align, "edge": tuple(edge), "length": length,
            "fast_local": _fast_lines(atom, SUB_GROUP)[0], "stride": SUB_GROUP,
            "elem_ctype": UNSIGNED_CTYPE[max(8, atom.elem_bits)],      # a 4-bit element travels in a uchar
            # the edge path's components, indexed from the table: 32 bits at least, since the CPU runtime moves
            # a 32-bit element per lane at a lane-dependent index with one gather, an 8- or 16-bit one lane by lane
            "edge_ctype": UNSIGNED_CTYPE[max(32, atom.register_elem_bits)],
            "mask": f" & {hex((1 << atom.elem_bits) - 1)}u" if narrow else ""}


WIDE_READ_BITS = (8, 16, 32)     # what one aligned read of a load's fast path may fetch


def _wide_runs(atom: CopyAtom, i: int) -> list[tuple[int, int]]:
    """Register component i of a load as runs (first element j, count) of its elements that lie side by side
    in one surface row, in the component's bit order, on every lane: each run of 8, 16 or 32 bits whose
    every lane's first byte is a multiple of its size from x's is one aligned read (``count`` 1: an element
    read alone).  Packed 8-bit and 4-bit loads are made of such runs; their elements read one by one were
    byte gathers the CPU runtime spells lane by lane (a 32x64 packed u8 load: 128 of them per work-item,
    which took about 16 s to build)."""
    per_reg, eb = atom.register_elem_bits // atom.elem_bits, atom.elem_bits
    coords = [_copy_coord(atom, i * per_reg + j) for j in range(per_reg)]
    runs, j = [], 0
    while j < per_reg:
        n = 1
        if coords[j] is not None and j * eb % 8 == 0:
            (row, col), lanes = coords[j]
            while (j + n < per_reg and coords[j + n] is not None and coords[j + n][1] == lanes
                   and coords[j + n][0] == (row, (col[0] + n, col[1], col[2]))):
                n += 1
            while n > 1 and (n * eb not in WIDE_READ_BITS or any(c * eb % (n * eb) for c in col)):
                n -= 1                        # the longest run that is one aligned read
        runs.append((j, n))
        j += n
    return runs


def _fast_lines(atom: CopyAtom, stride: int = 1) -> tuple[tuple[str, ...], int]:
    """The C lines of a load (``v[i * stride] = ...;``) or a store of a block wholly inside the surface, and
    the bytes the load's wide reads need x's byte offset, the pitch and the base aligned to (0: none).  A
    load into or a store from local memory (``stride`` the sub-group: component i of this lane at
    v[i * stride]) runs its alike rows as loops (lowering.loops); with a private array or vector each row is
    its own statement, since a private array indexed by a loop variable is spelled lane by lane by the CPU
    runtime (0.65x the speed)."""
    reg_bits = atom.register_elem_bits
    reg, per_reg, suffix = atom.register_elem_ctype, reg_bits // atom.elem_bits, f"u{atom.elem_bits}"
    elem = UNSIGNED_CTYPE[max(8, atom.elem_bits)]            # a 4-bit element travels in a uchar
    length = min(atom.dealt_shape[1], SUB_GROUP)
    loads, stores, align = [], [], 0
    for i in range(atom.register_length):
        # loads fill an array; a store reads its vector's components, or local memory's
        lhs = f"v[{i * stride}]" if atom.is_load or atom.register_length > 1 or stride > 1 else "v"
        parts = []
        runs = dict(_wide_runs(atom, i)) if atom.is_load else {j: 1 for j in range(per_reg)}
        for j, count in runs.items():
            at = _copy_coord(atom, i * per_reg + j)
            if at is None:
                continue                      # padding on every lane: reads as 0, never written
            coefs, lanes = at
            # y + 0 as well: every row of a run has the same shape, for lowering.loops.reroll
            row, col = (f"{origin} + {_lane_expr(c, length)}" for origin, c in zip(("y", "x"), coefs))
            if count > 1:                     # one aligned read of count elements, the first in the low bits
                bits = count * atom.elem_bits
                align = max(align, bits // 8)
                # in units of the read: x is a multiple of count (the guard), so is every lane's column
                wide = _lane_expr(tuple(c // count for c in coefs[1]), length)
                read = f"({reg})xe_ldu_u{bits}(base, pitch_bytes, {row}, x / {count}" + \
                    (f" + {wide})" if wide != "0" else ")") + (f" << {j * atom.elem_bits}" if j else "")
                parts.append(f"(lane < {lanes} ? {read} : 0)" if lanes < SUB_GROUP else read)
                continue
            read, value = f"xe_ldu_{suffix}(base, pitch_bytes, {row}, {col})", lhs
            if per_reg > 1:                   # several elements per component, the first in the low bits
                shift = j * atom.elem_bits
                read = f"({reg}){read}" + (f" << {shift}" if shift else "")
                value = f"({elem})" + (f"({lhs} >> {shift})" if shift else lhs) + \
                    (" & 15" if atom.elem_bits == 4 else "")
            store = f"xe_stu_{suffix}(base, pitch_bytes, {row}, {col}, {value});"
            if lanes < SUB_GROUP:             # padding on lanes >= `lanes`
                parts.append(f"(lane < {lanes} ? {read} : 0)")
                stores.append(f"if (lane < {lanes}) {store}")
            else:
                parts.append(read)
                stores.append(store)
        loads.append(f"{lhs} = {' | '.join(parts) if parts else '0'};")
    lines = loads if atom.is_load else stores
    return tuple(reroll(lines, indent="    ") if stride > 1 else lines), align if atom.is_load else 0


def _copy_coord(atom: CopyAtom, k: int):
    """((row, col) of register element k, each as (base, hi, lo): base + hi * (lane / L) + lo * (lane % L)
    relative to (y, x), number of lanes holding a real element (they are lanes 0 .. n-1)), or None if k is
    padding on every lane.  The lane map deals lanes row by row, L = the dealt row length (at most 16)."""
    coords = [atom.element_coord(lane, k) for lane in range(SUB_GROUP)]
    lanes = sum(c is not None for c in coords)
    if lanes == 0:
        return None
    if any(c is None for c in coords[:lanes]) or any(c is not None for c in coords[lanes:]):
        raise AtomError(f"{atom.name}: element {k} is padding on lanes that are not the last ones")
    length = min(atom.dealt_shape[1], SUB_GROUP)
    coefs = []
    for axis in (0, 1):
        fit = _lane_affine([c[axis] for c in coords[:lanes]], length)
        if fit is None:
            raise AtomError(f"{atom.name}: element {k} is not affine in lane / {length}, lane % {length}")
        coefs.append(fit)
    return tuple(coefs), lanes


# ---- DPAS atoms ------------------------------------------------------------------------------------------


def _decode(t: DType, x: str, j: int, *, source_bits: int = 32, n: int = 0) -> str:
    """A C expression for element j (little-endian, ``t.bits`` wide) of the uint expression ``x``, as a
    float or an int (``n`` > 0: of every component of an n-component uint vector ``x``, as a float vector or
    for integers a uint vector of the sign- or zero-extended values).  ``source_bits`` is how many low bits
    of x are meaningful (16 for a zero-extended SIMD16 A component).  The spellings are the dtype registry's
    (:class:`xegemm.library.dtypes.CSpelling`)."""
    shift, c = j * t.bits, t.c
    width = n if n > 1 else ""
    if c.decode_low and shift == 0:
        return c.decode_low.format(x=x, n=width)
    if c.decode_high and shift + t.bits == source_bits == 32:
        return c.decode_high.format(x=x, n=width)
    shifted = x if shift == 0 else f"({x} >> {shift})"
    mask = "" if source_bits == t.bits else f" & {hex((1 << t.bits) - 1)}u"
    return (c.decode_vector if n else c.decode).format(x=shifted, n=width, mask=mask)


@dataclass(frozen=True)
class ALoop:
    """A loop ``for i < count``: for each term (column, b_index), in order, d += column * bk[b_index], where
    column is A[:][b_index] (every row) broadcast from the lane(s) holding it; both are expressions in i."""

    count: int
    comment: str
    terms: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class PortablePlan:
    """Precomputed pieces of the portable lowering of one atom (see templates/mma/portable.cl.j2).

    D is computed as one vector over the register rows (``acc``), updated once per k with A's column k: the
    same operations per element as a scalar loop over rows, in the same order, but the rows of C and D
    stay in the registers they arrive in (rows >= M of a padded register are computed and dropped).
    """

    acc: str                                  # D's rows as one vector: float{M}, or uint{M} (wraps like DPAS)
    value: str                                # a decoded A or B element: "float", or "uint" (two's complement)
    b_unpack: tuple[tuple[int, str], ...]     # (k, expression of this lane's B[k][n])
    a_raw: tuple[str, str]                    # (type, expression): this lane's A components as uint bits
    a_decode: tuple[tuple[str, str, str], ...]  # (type, name, expression): element j of every A component
    a_loops: tuple[ALoop, ...]                # A's columns in increasing k
    c_in: str                                 # C as the accumulator vector
    d_out: str                                # D in C's type (padding rows pass C through)
    needs_fp16: bool
    needs_bf16_rounding: bool


def _affine(base: int, stride: int) -> str:
    """The C expression base + stride * i, as plainly as possible ("i", "2 * i + 1", "i + 8", "3")."""
    if stride == 0:
        return str(base)
    term = "i" if stride == 1 else f"{stride} * i"
    return term if base == 0 else f"{term} + {base}"


def _a_loops(atom: MmaAtom, value_vec) -> tuple[ALoop, ...]:
    """A's columns, from the lane map of the atom with every register row real (so that padding rows come
    along): column k of A, one value per row, is element j of the components of one lane (or, for tf32, of
    two lanes whose components interleave the rows); k's that advance the same lanes by one fold into a loop."""
    full = atom if atom.m == atom.register_m else MmaAtom(atom.register_m, atom.n, atom.k, atom.d, atom.a,
                                                          atom.b, atom.c)
    width = ctype_shape(atom.a_ctype)[1]
    per_comp = sizeof_ctype(atom.a_ctype) * 8 // width // atom.a_type.bits
    where = {}                                # (row, k) -> (lane, component, element j of the component)
    for lane, cells in enumerate(full.lane_map("a").map):
        for idx, cell in enumerate(cells):
            if cell is not None:
                where[cell] = (lane, idx // per_comp, idx % per_comp)
    rows = range(atom.register_m)
    columns = []                              # per k: (j, source lanes, position of each row among them)
    for k in range(atom.k):
        src = [where[(r, k)] for r in rows]
        (j,) = {s[2] for s in src}
        lanes = tuple(dict.fromkeys(s[0] for s in src))
        columns.append((j, lanes, tuple(lanes.index(lane) * width + comp for lane, comp, _ in src)))
    step = next((k for k in range(1, atom.k) if columns[k][1] != columns[0][1]), atom.k)
    terms = []
    for jj in range(step):
        j, lanes, pos = columns[jj]
        for k in range(jj, atom.k, step):     # the same element and rows, from lanes advancing by one
            assert columns[k] == (j, tuple(lane + k // step for lane in lanes), pos), (atom.name, k)
        shuffles = [f"intel_sub_group_shuffle(av{j}, {_affine(lane, 1)})" for lane in lanes]
        if len(lanes) == 1:
            assert pos == tuple(rows), atom.name
            column = shuffles[0]
        else:
            column = f"({value_vec(len(lanes) * width)})({', '.join(shuffles)})"
            if pos != tuple(rows):
                column = f"({column}).s{''.join(f'{p:x}' for p in pos)}"
        terms.append((column, _affine(jj, step)))
    ks = f"A[:][{terms[0][1]}]" if step == 1 else f"A[:][{terms[0][1]} .. {terms[-1][1]}]"
    sources = " and ".join(f"lane {_affine(lane, 1)}" for lane in columns[0][1])
    return (ALoop(atom.k // step, f"{ks} (every row) from {sources}", tuple(terms)),)


@functools.lru_cache(maxsize=None)
def mma_plan(atom: MmaAtom) -> PortablePlan:
    """What templates/mma/portable.cl.j2 prints for one DPAS atom, derived from its lane maps."""
    # Integers are summed as uint: products of 8- and 4-bit values taken modulo 2^32 have the bits of the exact
    # int products, and the sum wraps modulo 2^32 like the hardware's int32 accumulator (an int sum could
    # overflow: undefined behaviour).
    acc, value = ("uint", "uint") if atom.is_integer else ("float", "float")
    n = atom.register_m
    b_width, b_per_reg = 8, 32 // atom.b_type.bits
    b_unpack = tuple(
        (kk, _decode(atom.b_type, f"as_uint({_component('b', b_width, kk // b_per_reg)})", kk % b_per_reg))
        for kk in range(atom.k))
    assert [entry[0] for entry in atom.lane_map("b").map[0]] == list(range(atom.k))  # B slot s holds k = s

    a_width = ctype_shape(atom.a_ctype)[1]
    comp_bits = sizeof_ctype(atom.a_ctype) * 8 // a_width
    raw = vector_ctype("uint", a_width)
    a_raw = (raw, f"convert_{raw}(as_{vector_ctype('ushort', a_width)}(a))" if comp_bits == 16 else f"as_{raw}(a)")
    a_decode = tuple((vector_ctype(value, a_width), f"av{j}",
                      _decode(atom.a_type, "ar", j, source_bits=comp_bits, n=a_width))
                     for j in range(comp_bits // atom.a_type.bits))

    def vec(base: str, width: int = n) -> str:
        return vector_ctype(base, width)

    acc_type = atom.c_type
    c_in = c_spelling(atom.c, "register_to_acc", "c", n)
    row = c_spelling(atom.c, "acc_to_register", "{d}")
    if atom.m == n and acc_type.c.acc_to_register_vector:
        d_out = c_spelling(atom.c, "acc_to_register_vector", "d", n)
    elif n == 1:
        d_out = row.format(d="d")
    else:
        d_out = f"({atom.c_ctype})(" + ", ".join(
            row.format(d=_component("d", n, r)) if r < atom.m else _component("c", n, r) for r in range(n)) + ")"
    return PortablePlan(acc=vec(acc), value=value, b_unpack=b_unpack, a_raw=a_raw, a_decode=a_decode,
                        a_loops=_a_loops(atom, lambda width: vec(value, width)), c_in=c_in, d_out=d_out,
                        needs_fp16="F16" in (atom.a, atom.c), needs_bf16_rounding=atom.c == "BF16")


# ---- the GEMM k-step: DPAS atoms composed for the CPU ----------------------------------------------------

@dataclass(frozen=True)
class StagedKstep:
    """One k-step of a GEMM's DPAS atoms in the portable lowering, as templates/mma/portable.cl.j2's
    ``kstep`` macro prints it.

    Per DPAS k-chunk (the atom's K), each lane writes the A and B elements it holds, decoded, into its
    sub-group's local-memory stage, at the (row, k) and (k, column) the atoms' lane maps give them; then for
    each k in increasing order every accumulator row takes acc += A[row][k] * B[k][lane], with A[row][k] a
    uniform load (a broadcast) and B[k][lane] a plain per-lane load.  The accumulators are one scalar per
    (fragment, row, lane), so the CPU runtime keeps them in vector registers.

    These are the DPAS atom's operations in the DPAS atom's order (the same as the portable DPAS function,
    :func:`mma_plan`): the results are bit for bit those of the atom-by-atom kernel.  A bf16 or f16
    accumulator is rounded to its type after each chunk, as each DPAS does.
    """

    value: str                                    # the stage's and the accumulators' type: float or uint
    rows: int                                     # accumulator rows computed per fragment (the atom's M)
    register_rows: int                            # rows of the accumulator register (padding included)
    k: int                                        # the atom's K: one chunk
    a_size: int                                   # stage elements of A per chunk: mt * register_rows * k
    b_size: int                                   # stage elements of B per chunk: k * nt * sub-group
    a_stage: tuple[tuple[str, ...], ...]          # per chunk ki: the lines staging A fragments (i, ki)
    b_stage: tuple[tuple[str, ...], ...]          # per chunk ki: the lines staging B fragments (ki, j)
    acc_ctype: str                                # the DPAS accumulator register's type
    blocks: tuple[tuple[tuple[tuple[int, int], ...], tuple[int, ...]], ...]   # register blocks: ((i, row)s, js)
    round_row: str | None                         # C expression rounding row {x} to the accumulator type
    pack_row: str                                 # C expression of row {x} as the accumulator's component
    dequant: DequantCode | None = None            # a quantized B: dequantized as it is staged (lowering.dequant)
    rolled: RolledBlocks | None = None            # the register blocks run by a loop (None: printed one by one)
    registers: LocalRegisters | None = None       # the copy registers in local memory (None: private arrays)

    def rounded(self, name: str) -> str | None:
        """``name`` = ``name`` rounded to the accumulator type (bf16/f16), or None when nothing to do."""
        return None if self.round_row is None else f"{name} = {self.round_row.format(x=name)};"

    def packed(self, i: int, j: int) -> str:
        """Accumulator fragment (i, j) as the DPAS accumulator register, from its scalars acc_i_j_<row>."""
        rows = [self.pack_row.format(x=f"acc_{i}_{j}_{r}") for r in range(self.register_rows)]
        return rows[0] if len(rows) == 1 else f"({self.acc_ctype})({', '.join(rows)})"


# The default register block of the portable k loop (``tile.register_block`` [0, 0]): 8 accumulators of a
# lane, 4 rows x 2 N-fragments (8 x 1 where the sub-group tile has one).  Measured 2026-11-27
# (docs/benchmarks.md "Register blocks run by a loop"): the 64x64x32 f16 kernel at 1024^3, 4 x 2 blocks in a
# loop against the whole 32x32 sub-group tile in registers, 1.6x on the AVX-512 code path and 1.2x on AVX2
# (2 x 2 blocks: 1.3x and 1.45x), so one rule for both paths and kernels/ the same on every machine.
DEFAULT_BLOCK_ACCUMULATORS, DEFAULT_BLOCK_FRAGMENTS = 8, 2

# Local memory the portable k-step may bring a work-group to (stage, rolled accumulators, copy registers), half
# of the Intel CPU runtime's 256 KB: beyond it the blocks are printed one by one, the registers kept private.
ROLLED_LOCAL_BYTES = 128 * 1024


@dataclass(frozen=True)
class RolledBlocks:
    """Register blocks of one shape run by a loop: the accumulators live in the sub-group's local memory
    between k-steps (slot (g * nt + j) * sub-group + lane for accumulator row g of the sub-group tile and
    N-fragment j), and each block's accumulators are loaded into registers for its k loop and stored after.
    One block's code instead of one copy per block: the CPU runtime builds it in about the time of the
    unblocked loop, and each block's accumulators stay in vector registers."""

    rows: int            # R: accumulator rows of a block
    frags: int           # J: N-fragments of a block
    row_blocks: int      # blocks down the sub-group tile's rows
    frag_blocks: int     # blocks across its N-fragments
    size: int            # local accumulator slots of a sub-group: every accumulator of every lane

    @property
    def count(self) -> int:
        return self.row_blocks * self.frag_blocks


def rolled_blocks(plan, sub_group: int, value_bytes: int, stage_elements: int) -> RolledBlocks | None:
    """The register blocks of ``plan``'s portable k loop as a loop (:class:`RolledBlocks`; ``stage_elements``: a
    sub-group's A and B stage, of ``value_bytes`` each like the accumulators), or None when they are
    printed one by one: one block (the whole tile), blocks of uneven size, padded accumulator registers
    (rows beyond the atom's M), accumulators rounded after each chunk (bf16/f16), or more local memory than
    :data:`ROLLED_LOCAL_BYTES`."""
    atom = plan.mma
    mt, nt, _ = plan.mma_grid
    rows_total = mt * atom.m
    rows, frags = plan.config.tile.register_block
    if not rows and not frags:
        frags = min(DEFAULT_BLOCK_FRAGMENTS, nt)
        rows = DEFAULT_BLOCK_ACCUMULATORS // frags
    rows, frags = min(rows or rows_total, rows_total), min(frags or nt, nt)
    if (rows_total % rows or nt % frags or (rows, frags) == (rows_total, nt) or atom.m != atom.register_m
            or atom.c_type.c.round_acc is not None):
        return None
    groups = plan.config.tile.subgroups[0] * plan.config.tile.subgroups[1]
    local = groups * (stage_elements + rows_total * nt * sub_group) * value_bytes
    if local > ROLLED_LOCAL_BYTES:
        return None
    return RolledBlocks(rows, frags, rows_total // rows, nt // frags, rows_total * nt * sub_group)


@dataclass(frozen=True)
class LocalRegisters:
    """The staged k-step's copy registers (the A and B tiles' loads) in the sub-group's local memory:
    component i of a lane at ``<var>[i * stride]``, ``<var>`` pointing at the lane's first.  The loads fill
    them with loops of alike rows (``_into_local``, templates/copy/portable.cl.j2) and the stage reads them
    in loops (lowering.loops): where the CPU runtime compiles each statement twice, once under a lane mask,
    one statement per loop instead of one per component.  The plain kernel built in 0.27x the time on the AVX2
    code path and 0.54x on AVX-512, and ran at 0.87-0.91x the speed on AVX-512 (the same on AVX2: the row's
    round trip through local memory; docs/benchmarks.md "Copy registers in local memory")."""

    tiles: tuple[tuple[str, str, int], ...]       # per copy tile: its variable, component type, components
    stride: int                                   # the sub-group size

    @property
    def bytes(self) -> int:
        """A sub-group's local memory for them."""
        return sum(n * self.stride * sizeof_ctype(ctype) for _, ctype, n in self.tiles)

    @property
    def operands(self) -> tuple[tuple[str, str, int, tuple[str, ...]], ...]:
        """Per operand (a, b): its array, component type, a tile's elements (components x stride) and its tiles'
        variables.  An operand's tiles lie one after another in one array, so that the loads of several tiles
        can be one call in a loop (templates/gemm.cl.j2), tile t at ``<first> + t * elements``."""
        out = []
        for operand in ("a", "b"):
            tiles = [(var, ctype, n) for var, ctype, n in self.tiles if var.rstrip("0123456789") == operand]
            if tiles:
                out.append((f"xe_reg_{operand}", tiles[0][1], tiles[0][2] * self.stride,
                            tuple(var for var, _, _ in tiles)))
        return tuple(out)


def local_registers(plan, sub_group: int, used_bytes: int) -> LocalRegisters | None:
    """The staged k-step's copy registers in local memory (:class:`LocalRegisters`), or None (private arrays)
    when the work-group's local memory would pass :data:`ROLLED_LOCAL_BYTES` (``used_bytes``: a sub-group's
    stage and accumulators already there)."""
    tiles = tuple((f"{name}{t}", operand.atom.register_elem_ctype, operand.atom.register_length)
                  for name, operand in (("a", plan.a), ("b", plan.b)) for t in range(len(operand.tiles)))
    registers = LocalRegisters(tiles, sub_group)
    groups = plan.config.tile.subgroups[0] * plan.config.tile.subgroups[1]
    return registers if groups * (used_bytes + registers.bytes) <= ROLLED_LOCAL_BYTES else None


def _stage_lines(stage: str, slots: list[list], values: list[list], sub_group: int) -> list[str]:
    """``stage[slot] = value;`` for every register element, each written once for all lanes: ``slots[lane][e]``
    (None where lane holds padding) as an affine expression in the lane, ``values[e]`` a C expression."""
    lines = []
    for e, value in enumerate(values):
        column = [slots[lane][e] for lane in range(sub_group)]
        lanes = sum(s is not None for s in column)
        if lanes == 0:
            continue
        assert all(s is not None for s in column[:lanes]), "padding lanes come last"
        fit = next(((length, c) for length in (sub_group, 8, 4, 2)
                    if (c := _lane_affine(column[:lanes], length)) is not None), None)
        if fit is None:
            raise AtomError(f"register element {e} is not affine in the lane")
        slot = _lane_expr(fit[1], fit[0], sub_group)
        # 0 + lane as well: every element of a run has the same shape, for lowering.loops.reroll
        line = f"{stage}[{slot if slot[0].isdigit() else '0 + ' + slot}] = {value};"
        lines.append(line if lanes == sub_group else f"if (lane < {lanes}) {line}")
    return lines


def staged_kstep(plan, copy_arrays: bool) -> StagedKstep:
    """The portable k-step of a :class:`xegemm.plan.planner.Plan`, from its fragments and the DPAS atom's lane maps;
    ``copy_arrays``: the copy registers a<i>, b<i> are arrays of their components (portable 2D copies)."""
    atom: MmaAtom = plan.mma
    mt, nt, kt = plan.mma_grid
    sub_group, rm, k = atom.n, atom.register_m, atom.k
    value = "uint" if atom.is_integer else "float"
    full = atom if atom.m == rm else MmaAtom(rm, atom.n, atom.k, atom.d, atom.a, atom.b, atom.c)

    a_view = plan.quant.a_view if plan.quant else None         # an FP8 A (W8A8): dequantized as it is staged
    a_bits, a_n = ctype_shape(a_view.ctype("a") if a_view else atom.a_ctype)
    a_per = a_bits // (a_view.code_type if a_view else atom.a_type).bits
    a_cells = full.lane_map("a").map
    dequant = dequant_code(plan) if plan.quant else None      # a quantized B: decoded and dequantized here
    b_view = plan.quant.b_view if plan.quant else atom
    b_bits, b_n = ctype_shape(b_view.ctype("b"))
    b_per = b_bits // (plan.quant.b_view.code_type if plan.quant else atom.b_type).bits
    a_size, b_size = mt * rm * k, k * nt * sub_group
    value_bytes = sizeof_ctype(value)
    rolled = rolled_blocks(plan, sub_group, value_bytes, a_size + b_size)
    used = (a_size + b_size + (rolled.size if rolled else 0)) * value_bytes
    registers = local_registers(plan, sub_group, used) if copy_arrays else None
    stride = registers.stride if registers else int(copy_arrays)
    rolls = functools.partial(reroll, indent="    ") if registers else tuple
    reorders = plan_reorders(plan, unsigned=True, arrays=stride)   # the kernel declares xe_lane before its main loop
    # with the copy registers in local memory, a reordered fragment's elements are read from their lanes there
    direct = {name: {key: elements for key, frag in operand.fragments.items() if isinstance(frag, Reorder)
                     and (elements := local_reorder_elements(frag, operand, view.element(name).bits, sub_group,
                                                             registers.stride)) is not None}
              for name, operand, view in (("a", plan.a, a_view or atom), ("b", plan.b, b_view))} \
        if registers else {"a": {}, "b": {}}
    # a dequantized B read straight from the local copy registers: its stage is a loop (_dequant_loop)
    looped = bool(dequant and registers and plan.b.atom.register_elem_bits == b_bits)
    a_stage, b_stage = [], []
    for ki in range(kt):
        lines = list(dequant.chunk_loads[ki]) if dequant else []     # the groups starting here: their scales first
        for i in range(mt):
            frag = plan.a.fragments[(i, ki)]
            if (i, ki) in direct["a"]:
                reg = None
            elif (i, ki) in reorders["a"]:   # gathered into fa_<i>_<ki> first (xegemm.lowering.reorder)
                lines += reorders["a"][(i, ki)]
                reg, reg_type, offset, arrays = f"fa_{i}_{ki}", fragment_ctype(a_view or atom, "a", True), 0, False
            else:
                reg, reg_type, offset, arrays = f"a{frag.tile}", plan.a.atom.register_type, frag.offset, stride
            values, slots = [], [[] for _ in range(sub_group)]
            for e in range(a_view.elements if a_view else a_n * a_per):
                if reg is None:           # the element alone in the low bits
                    unit, index, bits = direct["a"][(i, ki)][e], 0, 32
                else:
                    unit, index, bits = register_unit(reg, reg_type, a_bits, offset + e // a_per, arrays), \
                        e % a_per, a_bits
                row = next((cells[e][0] for cells in a_cells if cells[e] is not None), 0)
                values.append(dequant.a_value(unit, index, i * atom.m + row, sub_group) if a_view else
                              _decode(atom.a_type, unit, index, source_bits=bits))
                for lane in range(sub_group):
                    cell = a_cells[lane][e]
                    real = cell is not None and cell[0] < atom.m
                    slots[lane].append((i * rm + cell[0]) * k + cell[1] if real else None)
            lines += _stage_lines("sa", slots, values, sub_group)
        a_stage.append(tuple(rolls(lines)))
        lines = _dequant_loop(plan, ki, dequant, reorders["b"], k, b_per, sub_group, stride) if looped else []
        for j in range(nt):
            frag = plan.b.fragments[(ki, j)]
            if looped and (ki, j) not in reorders["b"]:
                continue                   # in the loop above
            if (ki, j) in direct["b"]:     # each element alone in the low bits of its unit
                units, index, bits = direct["b"][(ki, j)], [0] * k, 32
            else:
                if (ki, j) in reorders["b"]:
                    lines += reorders["b"][(ki, j)]
                    reg, reg_type, offset, arrays = f"fb_{ki}_{j}", fragment_ctype(b_view, "b", True), 0, False
                else:
                    reg, reg_type, offset, arrays = f"b{frag.tile}", plan.b.atom.register_type, frag.offset, stride
                units = [register_unit(reg, reg_type, b_bits, offset + kk // b_per, arrays) for kk in range(k)]
                index, bits = [kk % b_per for kk in range(k)], b_bits
            values = [dequant.value(units[kk], index[kk], j) if dequant else
                      _decode(atom.b_type, units[kk], index[kk], source_bits=bits) for kk in range(k)]
            slots = [[(kk * nt + j) * sub_group + lane for kk in range(k)] for lane in range(sub_group)]
            lines += _stage_lines("sb", slots, values, sub_group)
        b_stage.append(tuple(rolls(lines)))

    round_row = atom.c_type.c.round_acc
    row = c_spelling(atom.c, "rounded_to_register", "{x}")   # exact: already rounded to the type
    return StagedKstep(value=value, rows=atom.m, register_rows=rm, k=k, a_size=a_size,
                       b_size=b_size, a_stage=tuple(a_stage), b_stage=tuple(b_stage),
                       acc_ctype=atom.c_ctype, blocks=register_blocks(atom.m, mt, nt, plan.register_block),
                       round_row=round_row, pack_row=row, dequant=dequant,
                       rolled=rolled, registers=registers)


def _dequant_loop(plan, ki: int, dequant: DequantCode, reorders: dict, k: int, per: int, sub_group: int,
                  stride: int) -> list[str]:
    """The staged dequantization of k-chunk ki's B fragments read straight from the copy registers in local
    memory (those not gathered by a reorder), as loops over their elements in the order the stage takes them
    (fragment by fragment, k increasing): the dequantization, several statements once inlined, is printed once
    per loop instead of once per rolled run of alike lines.  One loop for all the fragments where each one's
    first component lies a fixed distance after the previous one's (the operand's tiles are one array,
    LocalRegisters.operands) and its scale and zero are picked by the fragment's index; one per fragment
    otherwise.  Against the rolled runs, hand-measured on AVX-512: u8 per channel built in 0.61x the time,
    GPTQ u4 in 0.84x (docs/benchmarks.md)."""
    nt, length = plan.mma_grid[1], plan.b.atom.register_length
    frags = [(j, plan.b.fragments[(ki, j)]) for j in range(nt) if (ki, j) not in reorders]
    first = {j: frag.tile * length + frag.offset for j, frag in frags}   # component index from b0

    def pick(name: str, js: list[int], index: str) -> str:
        out = f"{name}{js[-1]}"
        for j in reversed(js[:-1]):
            out = f"({index} == {j} ? {name}{j} : {out})"
        return out

    def loop(js: list[int], step: int) -> list[str]:
        count, j0 = len(js), js[0]
        jexpr = f"{j0} + xe_e / {k}" if j0 else f"xe_e / {k}"
        unit = f"(uint)b0[({first[j0]} + xe_e / {k} * {step} + xe_e % {k} / {per}) * {stride}]"
        # several fragments: each one's own scale and zero, a select on values uniform over the lanes
        value = dequant.value(unit, f"xe_e % {per}", j0,
                              (lambda name: pick(name, js, "xe_j")) if count > 1 else None)
        return ["#pragma unroll 1", f"for (int xe_e = 0; xe_e < {k * count}; ++xe_e) {{",
                f"    const int xe_j = {jexpr};" if count > 1 else f"    /* fragment {j0} */",
                f"    sb[(xe_e % {k} * {nt} + {'xe_j' if count > 1 else j0}) * {sub_group} + lane] = {value};", "}"]

    js = [j for j, _ in frags]
    steps = {first[b] - first[a] for a, b in zip(js, js[1:])}
    if len(js) > 1 and len(steps) == 1 and js == list(range(js[0], js[0] + len(js))):
        return loop(js, steps.pop())
    return [line for j in js for line in loop([j], 0)]


def register_blocks(rows: int, mt: int, nt: int, block: tuple[int, int]):
    """The accumulators of a sub-group tile (mt x nt fragments of ``rows`` rows) cut into register blocks of
    block = (R rows, J fragments), row-major, the last ones smaller: per block, its (fragment i, row r) pairs
    in increasing row and its fragments j.  Each block's k loop updates only its own accumulators, each in
    increasing k, so any blocking gives the same sums bit for bit."""
    all_rows = [(g // rows, g % rows) for g in range(mt * rows)]
    block_rows, block_frags = block
    return tuple((tuple(all_rows[g:g + block_rows]), tuple(range(j, min(j + block_frags, nt))))
                 for g in range(0, len(all_rows), block_rows) for j in range(0, nt, block_frags))
