"""The C of a dequantizing k-step (a quantized B, xegemm.plan.dequant): decoding stored codes, loading scales and zero
points once per group, and each B element's value ``w = round_to_compute((q - z) * s)``.

The portable staged k-step (:func:`xegemm.lowering.portable.staged_kstep`) stages, for every element of a B
fragment (k-chunk ki, N-fragment j), ``xe_dequant_b(xe_q_code(unit, e), xq_z<j>, xq_s<j>)`` instead of the
element itself: the unit is the 32 bits of the copy registers holding it (located by the planner through
:class:`xegemm.plan.dequant.StoredB`), ``xq_s<j>``/``xq_z<j>`` the scale and zero point of this lane's column
``n0 + 16 j + lane`` in the current group.  They are loaded from the ``S`` and ``Z`` arrays once per group:
before the main loop for ``channel`` and ``tensor`` groups; for an integer group g at the first k-chunk of
each group (g a multiple of the work-group K tile: at k-tiles with k0 % g == 0, and at the first k-tile of
the range a work-group sums; g smaller: the k-chunks at multiples of g).  The functions are templates/dequant.cl.j2's.
A k-step called atom by atom (the native lowering) dequantizes the same elements into each DPAS B operand instead
(:func:`dequant_b_operands`: pairs of f16/bf16 bits per dword, ``xe_pack_b``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xegemm.plan.dequant import QuantPlan
from xegemm.library.dtypes import c_spelling, ctype_shape, dtype
from xegemm.lowering.reorder import fragment_ctype, register_unit
from xegemm.plan.operands import Reorder
from xegemm.quant import QuantSpec
from xegemm.quant.formats import GPTQ_ZERO_OFFSET
from xegemm.quant.spec import BLOCK, FLOAT_ZEROS
from xegemm.lowering.templating import environment

SCALE_POINTER = {8: "uchar", 16: "ushort", 32: "uint"}
ZERO_POINTER = {"u4": "uchar", "u8": "uchar", "s8": "char"}      # plain zeros: one per byte
AWQ_SLOT_C = "((({n}) & 7) >> 1) + ((({n}) & 1) << 2)"           # the AWQ word slot of column n (xegemm.plan.dequant)


@dataclass(frozen=True)
class DequantCode:
    """What the kernel template and the staged k-step print for a dequantizing plan."""

    helpers: str                                 # C functions (templates/dequant.cl.j2)
    declarations: tuple[str, ...]                # before the main loop: each column's scale (and zero) registers
    chunk_loads: tuple[tuple[str, ...], ...]     # per k-chunk ki of a k-step: the loads of a group starting there
    has_zero: bool

    def value(self, unit: str, element: int | str, j: int, registers=None) -> str:
        """The C of B element ``element`` (lowest first; a number or a C expression) of the 32-bit ``unit`` of
        stored codes, in N-fragment j; ``registers(name)``: the C of the fragment's scale (``xq_s``) or zero
        (``xq_z``) where that is not fragment j's own register (a loop over fragments picks it)."""
        register = registers or (lambda name: f"{name}{j}")
        zero = f", {register('xq_z')}" if self.has_zero else ""
        return f"xe_dequant_b(xe_q_code({unit}, {element}){zero}, {register('xq_s')})"

    @staticmethod
    def a_value(unit: str, element: int, row: int, lanes: int) -> str:
        """The C of an FP8 A's element ``element`` of the 32-bit ``unit``, in row ``row`` of the sub-group tile
        (W8A8): its value times its row's scale, rounded once to the compute type.  The scales of the tile's
        rows lie one per lane (``xa_s<h>``: rows 16 h + lane) and are fetched from there with
        ``intel_sub_group_shuffle`` (cl_intel_subgroups, as the reorders fetch: both lowerings have it)."""
        return (f"xe_round_once(xe_qa_code({unit}, {element}u), "
                f"intel_sub_group_shuffle(xa_s{row // lanes}, {row % lanes}))")


def scale_load(spec: QuantSpec, row: str, n: str, array: str = "S", other: str = "N", groups: str = "xq_groups") -> str:
    """The scale of group row ``row`` (along K) and column ``n`` (of ``other`` columns: B's N, or an FP8 A's row of
    M) as a float, from ``array`` (``groups``: the scale rows along K, for layout nk)."""
    if spec.group == "tensor":
        index = "0"
    elif spec.group == "block128":      # [ceil(K/128), ceil(N/128)] (kn) or its transpose
        column, columns = f"{n} / {BLOCK}", f"(({other} + {BLOCK - 1}) / {BLOCK})"
        index = f"{row} * {columns} + {column}" if spec.scale_layout == "kn" else f"{column} * {groups} + {row}"
    elif spec.scale_layout == "kn":
        index = f"{row} * {other} + {n}"
    elif spec.k_group is None:          # channel in nk: [N, 1], one scale row along K (no xq_groups declared)
        index = n
    else:
        index = f"{n} * {groups} + {row}"
    bits = dtype(spec.scale).bits
    return c_spelling(spec.scale, "load", f"((const global {SCALE_POINTER[bits]}*){array})[{index}]")


def zero_load(quant: QuantPlan, row: str, n: str) -> str:
    """The zero point of group row ``row`` and column ``n`` as an int, from ``Z``."""
    spec = quant.spec
    if spec.format == "awq":     # int32 words of 8 columns, interleaved, [groups, N / 8]
        return f"(int)((((const global uint*)Z)[{row} * (N / 8) + {n} / 8] >> (4 * ({AWQ_SLOT_C.format(n=n)}))) & 15u)"
    if spec.format == "gptq":    # int32 words of 32 / bits columns in order, [groups, N * bits / 32], z - 1
        bits = dtype(spec.weight).bits
        per = 32 // bits
        word = f"((const global uint*)Z)[{row} * (N / {per}) + {n} / {per}]"
        return f"(int)(((({word} >> ({bits} * ({n} % {per}))) & {hex((1 << bits) - 1)}u) + {GPTQ_ZERO_OFFSET}u) & {hex((1 << bits) - 1)}u)"
    index = "0" if spec.group == "tensor" else f"{row} * N + {n}" if spec.scale_layout == "kn" else \
        n if spec.k_group is None else f"{n} * xq_groups + {row}"
    if spec.zero in FLOAT_ZEROS:      # SGLang's f16/bf16 zeros, in quantized units
        return c_spelling(spec.zero, "load", f"((const global ushort*)Z)[{index}]")
    return f"(int)((const global {ZERO_POINTER[spec.zero]}*)Z)[{index}]"


def _column_loads(quant: QuantPlan, nt: int, row: str, guard: str, declare: bool) -> list[str]:
    """Each N-fragment's scale (and zero) of group row ``row``, guarded by ``guard`` (0 outside)."""
    lines = []
    for j in range(nt):
        n = f"xq_n{j}"
        cond = f"{n} < N" + (f" && {guard}" if guard else "")
        lines.append(("const float " if declare else "") + f"xq_s{j} = ({cond}) ? {scale_load(quant.spec, row, n)} : 0.0f;")
        if quant.spec.has_zero:
            ctype = "float" if quant.spec.zero in FLOAT_ZEROS else "int"
            lines.append((f"const {ctype} " if declare else "") + f"xq_z{j} = ({cond}) ? {zero_load(quant, row, n)} : 0;")
    return lines


def _row_loads(quant: QuantPlan, rows: int, lanes: int, row: str, guard: str, declare: bool) -> list[str]:
    """An FP8 A's scales of group row ``row`` (along K) for the ``rows`` rows of the sub-group tile, one per lane
    (a fragment's lane is its k, so every lane needs the same row's scale: :meth:`DequantCode.a_value`
    broadcasts it), guarded by ``guard`` (0 outside)."""
    lines = []
    for h in range(-(-rows // lanes)):
        m = f"xa_m{h}"
        cond = f"{m} < M" + (f" && {guard}" if guard else "")
        load = scale_load(quant.a_spec, row, m, "SA", "M", "xa_groups")
        lines.append(("const float " if declare else "") + f"xa_s{h} = ({cond}) ? {load} : 0.0f;")
    return lines


def _group_loads(g: int | None, bk: int, kt: int, chunk: int, load, declarations: list[str],
                 chunk_loads: list[list[str]], what: str) -> None:
    """Scale loads once per group: ``load(row, guard, declare)`` gives the lines of group row ``row``; one row
    (``g`` None: channel, tensor) before the main loop; g a multiple of the K tile ``bk``: at the first k-chunk
    of k-tiles where a group starts (and the first one a work-group sums); g smaller: at every k-chunk
    (``chunk`` K each) where one starts."""
    if g is None:
        declarations += load("0", "", True)
        return
    declarations += [line.split(" = ")[0].replace("const ", "") + " = 0;" for line in load("0", "", True)]
    for ki in range(kt):
        start = ki * chunk
        if g >= bk and ki == 0:              # a group spans whole k-tiles: reload where one starts
            chunk_loads[0] += [f"if (k0 % {g} == 0 || k0 == k_begin) {{  /* a group of {g} starts: {what} */",
                               *(f"    {line}" for line in load(f"k0 / {g}", "", False)), "}"]
        elif g < bk and start % g == 0:      # groups inside the k-tile: each at its first k-chunk
            chunk_loads[ki] += [f"/* the group of {g} starting at k0 + {start}: {what} */",
                                *load(f"(k0 + {start}) / {g}", f"k0 + {start} < K", False)]


def _significant_bits(name: str) -> int:
    """Significant bits of a value of type ``name``: a float's precision (xegemm.library.dtypes: unit roundoff
    2^-p), 1 for e8m0 (a power of two), b + 1 for a b-bit integer code less an integer zero (|q - z| < 2^(b+1))."""
    t = dtype(name)
    if t.is_int:
        return t.bits + 1
    return 1 if t.unit_roundoff is None else round(-math.log2(t.unit_roundoff))


def exact_product(spec: QuantSpec) -> bool:
    """Whether every ``(q - z) * s`` of ``spec`` is exact in f32, so that rounding the f32 product to the compute type
    is the one correct rounding and the round-to-odd of :func:`xe_round_once` (templates/dequant.cl.j2) can go: the
    code's significant bits (:func:`_significant_bits`) and the scale's fit f32's 24 (so f32 scales never do).  The
    exponents fit too for the scale types that pass: f16 scales times codes stay normal in f32; bf16 and e8m0 scales
    share f32's exponent range, where a product's lowest bit stays at or above 2^-149 (the codes' own lowest bit is
    2^-16 at the least, the scales' 2^-133), and an overflow is an infinity either way.  f16/bf16 zero points are
    subtracted in their own type first (xe_zero_diff): not this case."""
    if spec.zero in FLOAT_ZEROS:
        return False
    return _significant_bits(spec.weight) + _significant_bits(spec.scale) <= 24


def dequant_code(plan) -> DequantCode:
    """The dequantization C of a plan with a quantized B (``plan.quant``), and of an FP8 A (W8A8) when it has one."""
    quant: QuantPlan = plan.quant
    spec, mma = quant.spec, plan.mma
    mt, nt, kt = plan.mma_grid
    bk = plan.config.tile.workgroup[2]
    declarations = [f"const int xq_n{j} = n0 + {j * mma.n} + (int)get_sub_group_local_id();" for j in range(nt)]
    if spec.scale_layout == "nk" and spec.k_group:
        declarations.append(f"const int xq_groups = (K + {spec.k_group - 1}) / {spec.k_group};  /* scale rows along K */")
    chunk_loads: list[list[str]] = [[] for _ in range(kt)]
    _group_loads(spec.k_group, bk, kt, mma.k, lambda row, guard, declare: _column_loads(quant, nt, row, guard, declare),
                 declarations, chunk_loads, "its scales")
    a = quant.a_spec
    if a is not None:                  # an FP8 A: each fragment row's scale, once per A group
        rows, lanes = plan.subgroup_tile[0], mma.n
        declarations += [f"const int xa_m{h} = m0 + {h * lanes} + (int)get_sub_group_local_id();"
                         for h in range(-(-rows // lanes))]
        if a.scale_layout == "nk" and a.k_group:
            declarations.append(f"const int xa_groups = (K + {a.k_group - 1}) / {a.k_group};  /* A's scale rows along K */")
        _group_loads(a.k_group, bk, kt, mma.k,
                     lambda row, guard, declare: _row_loads(quant, rows, lanes, row, guard, declare),
                     declarations, chunk_loads, "A's scales")
    return DequantCode(dequant_helpers(quant), tuple(declarations), tuple(tuple(lines) for lines in chunk_loads),
                       spec.has_zero)


def dequant_helpers(quant: QuantPlan) -> str:
    """templates/dequant.cl.j2's C functions for a quantized B (and an FP8 A): ``xe_q_code``, ``xe_dequant_b`` and
    their helpers, for the k-steps here and the coopmat lowering's B packer (xegemm.lowering.coopmat_pack)."""
    spec, a = quant.spec, quant.a_spec
    t = dtype(spec.weight)
    context = {"exact_product": exact_product(spec),
               "storage": spec.weight, "bits": t.bits, "mask": hex((1 << t.bits) - 1),
               "code_ctype": "int" if t.is_int else "float", "decode": c_spelling(spec.weight, "decode", "x"),
               "compute": quant.compute, "compute_bits": {"f16": 11, "bf16": 8}[quant.compute],
               "round": c_spelling(quant.compute, "round_acc", "{x}"), "has_zero": spec.has_zero,
               "float_zero": spec.zero if spec.zero in FLOAT_ZEROS else None,
               "round_zero": c_spelling(spec.zero, "round_acc", "{x}") if spec.zero in FLOAT_ZEROS else None,
               "a_storage": a.weight if a else None, "a_decode": c_spelling(a.weight, "decode", "x") if a else None}
    return str(environment().get_template("dequant.cl.j2").module.define(context))


def _fragment_register(plan, operand: str, view, key: tuple[int, int]) -> tuple[str, str, int]:
    """Where DPAS fragment ``key`` of ``operand`` lies as stored: (register, its type, offset in the view's units):
    the reorder ``f<operand>_<key>`` it was gathered into, or its copy tile's register."""
    op = plan.a if operand == "a" else plan.b
    frag = op.fragments[key]
    if isinstance(frag, Reorder):
        return f"f{operand}_{key[0]}_{key[1]}", fragment_ctype(view, operand), 0
    return f"{operand}{frag.tile}", op.atom.register_type, frag.offset


def dequant_b_operands(plan) -> dict:
    """The DPAS B operands of a k-step called atom by atom (the native lowering): per fragment (ki, j) the lines
    declaring ``qb_<ki>_<j>``, the DPAS's B register (pairs of f16/bf16 bits, lower k in the low half), each
    element dequantized from the stored codes (the copy registers, or the reorder ``fb_<ki>_<j>`` gathered
    them into)."""
    quant: QuantPlan = plan.quant
    view, mma = quant.b_view, plan.mma
    _, nt, kt = plan.mma_grid
    bits, _ = ctype_shape(view.ctype("b"))
    per = bits // view.code_type.bits
    code = DequantCode("", (), (), quant.spec.has_zero)
    out = {}
    for ki in range(kt):
        for j in range(nt):
            reg, reg_type, offset = _fragment_register(plan, "b", view, (ki, j))
            values = [code.value(register_unit(reg, reg_type, bits, offset + kk // per, False), kk % per, j)
                      for kk in range(mma.k)]
            pairs = ", ".join(f"xe_pack_b({values[2 * p]}, {values[2 * p + 1]})" for p in range(mma.k // 2))
            out[(ki, j)] = (f"const {mma.b_ctype} qb_{ki}_{j} = ({mma.b_ctype})({pairs});",)
    return out


def dequant_a_operands(plan) -> dict:
    """An FP8 A's DPAS operands of a k-step called atom by atom (the native lowering, W8A8): per fragment (i, ki)
    the line declaring ``qa_<i>_<ki>``, the DPAS's A register (one f16/bf16 value per component), each element
    dequantized from the stored bytes (the copy registers, or the reorder ``fa_<i>_<ki>`` gathered them into)
    with its row's scale."""
    quant: QuantPlan = plan.quant
    view, mma = quant.a_view, plan.mma
    mt, _, kt = plan.mma_grid
    bits, _ = ctype_shape(view.ctype("a"))
    per = bits // view.code_type.bits
    rows = [cell[0] if cell is not None else None for cell in mma.lane_map("a").map[0]]
    out = {}
    for i in range(mt):
        for ki in range(kt):
            reg, reg_type, offset = _fragment_register(plan, "a", view, (i, ki))
            units = [register_unit(reg, reg_type, bits, offset + e // per, False) for e in range(len(rows))]
            values = ["0" if row is None else f"xe_a_bits({DequantCode.a_value(units[e], e % per, i * mma.m + row, mma.n)})"
                      for e, row in enumerate(rows)]
            out[(i, ki)] = (f"const {mma.a_ctype} qa_{i}_{ki} = ({mma.a_ctype})({', '.join(values)});",)
    return out
