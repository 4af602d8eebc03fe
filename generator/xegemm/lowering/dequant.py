"""The C of a dequantizing k-step (a quantized B, xegemm.dequant): decoding stored codes, loading scales and zero
points once per group, and each B element's value ``w = round_to_compute((q - z) * s)``.

The portable staged k-step (:func:`xegemm.lowering.portable.staged_kstep`) stages, for every element of a B
fragment (k-chunk ki, N-fragment j), ``xe_dequant_b(xe_q_code(unit, e), xq_z<j>, xq_s<j>)`` instead of the
element itself: the unit is the 32 bits of the copy registers holding it (located by the planner through
:class:`xegemm.dequant.StoredB`), ``xq_s<j>``/``xq_z<j>`` the scale and zero point of this lane's column
``n0 + 16 j + lane`` in the current group.  They are loaded from the ``S`` and ``Z`` arrays once per group:
before the main loop for ``channel`` and ``tensor`` groups; for an integer group g at the first k-chunk of
each group (g a multiple of the work-group K tile: at k-tiles with k0 % g == 0, and at the first k-tile of
the range a work-group sums; g smaller: the k-chunks at multiples of g).  The functions are templates/dequant.cl.j2's.
A k-step called atom by atom (the native lowering) dequantizes the same elements into each DPAS B operand instead
(:func:`dequant_b_operands`: pairs of f16/bf16 bits per dword, ``xe_pack_b``).
"""

from __future__ import annotations

from dataclasses import dataclass

from xegemm.dequant import QuantPlan
from xegemm.dtypes import c_spelling, ctype_shape, dtype
from xegemm.lowering.reorder import fragment_ctype, register_unit
from xegemm.operands import Reorder
from xegemm.quant.formats import GPTQ_ZERO_OFFSET
from xegemm.templating import environment

SCALE_POINTER = {8: "uchar", 16: "ushort", 32: "uint"}
ZERO_POINTER = {"u4": "uchar", "u8": "uchar", "s8": "char"}      # plain zeros: one per byte
AWQ_SLOT_C = "((({n}) & 7) >> 1) + ((({n}) & 1) << 2)"           # the AWQ word slot of column n (xegemm.dequant)


@dataclass(frozen=True)
class DequantCode:
    """What the kernel template and the staged k-step print for a dequantizing plan."""

    helpers: str                                 # C functions (templates/dequant.cl.j2)
    declarations: tuple[str, ...]                # before the main loop: each column's scale (and zero) registers
    chunk_loads: tuple[tuple[str, ...], ...]     # per k-chunk ki of a k-step: the loads of a group starting there
    has_zero: bool

    def value(self, unit: str, element: int, j: int) -> str:
        """The C of B element ``element`` (lowest first) of the 32-bit ``unit`` of stored codes, in N-fragment j."""
        zero = f", xq_z{j}" if self.has_zero else ""
        return f"xe_dequant_b(xe_q_code({unit}, {element}u){zero}, xq_s{j})"


def _scale_load(quant: QuantPlan, row: str, n: str) -> str:
    """The scale of group row ``row`` (along K) and column ``n`` as a float, from ``S``."""
    spec = quant.spec
    if spec.group == "tensor":
        index = "0"
    elif spec.scale_layout == "kn":
        index = f"{row} * N + {n}"
    else:
        index = f"{n} * xq_groups + {row}"
    bits = dtype(spec.scale).bits
    return c_spelling(spec.scale, "load", f"((const global {SCALE_POINTER[bits]}*)S)[{index}]")


def _zero_load(quant: QuantPlan, row: str, n: str) -> str:
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
        f"{n} * xq_groups + {row}"
    return f"(int)((const global {ZERO_POINTER[spec.zero]}*)Z)[{index}]"


def _column_loads(quant: QuantPlan, nt: int, row: str, guard: str, declare: bool) -> list[str]:
    """Each N-fragment's scale (and zero) of group row ``row``, guarded by ``guard`` (0 outside)."""
    lines = []
    for j in range(nt):
        n = f"xq_n{j}"
        cond = f"{n} < N" + (f" && {guard}" if guard else "")
        lines.append(("const float " if declare else "") + f"xq_s{j} = ({cond}) ? {_scale_load(quant, row, n)} : 0.0f;")
        if quant.spec.has_zero:
            lines.append(("const int " if declare else "") + f"xq_z{j} = ({cond}) ? {_zero_load(quant, row, n)} : 0;")
    return lines


def dequant_code(plan) -> DequantCode:
    """The dequantization C of a plan with a quantized B (``plan.quant``)."""
    quant: QuantPlan = plan.quant
    spec, mma = quant.spec, plan.mma
    _, nt, kt = plan.mma_grid
    bk = plan.config.tile.workgroup[2]
    declarations = [f"const int xq_n{j} = n0 + {j * mma.n} + (int)get_sub_group_local_id();" for j in range(nt)]
    if spec.scale_layout == "nk" and isinstance(spec.group, int):
        declarations.append(f"const int xq_groups = (K + {spec.group - 1}) / {spec.group};  /* scale rows along K */")
    chunk_loads: list[tuple[str, ...]] = [() for _ in range(kt)]
    if not isinstance(spec.group, int):          # channel, tensor: one scale row, loaded once
        declarations += _column_loads(quant, nt, "0", "", declare=True)
    else:
        declarations += [f"float xq_s{j} = 0.0f;" for j in range(nt)]
        declarations += [f"int xq_z{j} = 0;" for j in range(nt)] if spec.has_zero else []
        g = spec.group
        for ki in range(kt):
            start = ki * mma.k
            if g >= bk and ki == 0:              # a group spans whole k-tiles: reload where one starts
                body = _column_loads(quant, nt, f"k0 / {g}", "", declare=False)
                chunk_loads[0] = (f"if (k0 % {g} == 0 || k0 == k_begin) {{  /* a group of {g} starts: its scales */",
                                  *(f"    {line}" for line in body), "}")
            elif g < bk and start % g == 0:      # groups inside the k-tile: each at its first k-chunk
                row = f"(k0 + {start}) / {g}"
                chunk_loads[ki] = (f"/* the group of {g} starting at k0 + {start}: its scales */",
                                   *_column_loads(quant, nt, row, f"k0 + {start} < K", declare=False))
    t = dtype(spec.weight)
    context = {"storage": spec.weight, "bits": t.bits, "mask": hex((1 << t.bits) - 1),
               "code_ctype": "int" if t.is_int else "float", "decode": c_spelling(spec.weight, "decode", "x"),
               "compute": quant.compute, "compute_bits": {"f16": 11, "bf16": 8}[quant.compute],
               "round": c_spelling(quant.compute, "round_acc", "{x}"), "has_zero": spec.has_zero}
    helpers = str(environment().get_template("dequant.cl.j2").module.define(context))
    return DequantCode(helpers, tuple(declarations), tuple(chunk_loads), spec.has_zero)


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
            frag = plan.b.fragments[(ki, j)]
            if isinstance(frag, Reorder):
                reg, reg_type, offset = f"fb_{ki}_{j}", fragment_ctype(view, "b"), 0
            else:
                reg, reg_type, offset = f"b{frag.tile}", plan.b.atom.register_type, frag.offset
            values = [code.value(register_unit(reg, reg_type, bits, offset + kk // per, False), kk % per, j)
                      for kk in range(mma.k)]
            pairs = ", ".join(f"xe_pack_b({values[2 * p]}, {values[2 * p + 1]})" for p in range(mma.k // 2))
            out[(ki, j)] = (f"const {mma.b_ctype} qb_{ki}_{j} = ({mma.b_ctype})({pairs});",)
    return out
