"""The C of a reorder: an MMA fragment gathered from copy registers (xegemm.plan.operands.Reorder), in both lowerings.

Per fragment component, per element: the copy register word and bit offset holding it, read in the lane
itself or fetched with ``intel_sub_group_shuffle`` (cl_intel_subgroups, which shuffles 32- and 64-bit
integers; IGC turns it into moves with register regioning) from a source lane written as an affine
expression of the lane; where lanes differ in the register they need, each register is fetched once and the
lane picks its own (a mask test of the lane).
Every shuffle is issued by every lane (temporaries, never inside a condition).  Everything comes from
``Reorder.sources``, which the planner derived from the two lane maps.  A word is what one shuffle moves: a
uint of consecutive register components (four uchar, two ushort or one uint) or one ulong component, so
that a lane gathering 4-bit B columns from byte registers takes four rows per shuffle instead of one
(measured with Debian's IGC for dg2: a 16x16x64 sub-group tile of s4 with column-major A and row-major B
spilled 736 B with one shuffle per component).
"""

from __future__ import annotations

from xegemm.library.dtypes import UNSIGNED_CTYPE, ctype_shape, vector_ctype
from xegemm.plan.operands import Reorder

LANE = "xe_lane"
LANE_DECLARATION = f"const uint {LANE} = get_sub_group_local_id();"


def lane_fit(values: dict[int, int], sub_group: int, lane: str = LANE, base_always: bool = False) -> str | None:
    """A C expression in ``lane`` (default ``xe_lane``) equal to ``values[lane]`` on every lane given (any
    subset), of the form base + hi * (lane / p) + lo * (lane % p), p a power of two; None when no such form
    fits.  ``base_always``: the base printed even when 0 (so that expressions differing only in it have one
    shape, for lowering.loops.reroll)."""
    lanes = sorted(values)
    p = sub_group
    while p >= 1:
        lo = hi = 0
        pair = next(((a, b) for a in lanes for b in lanes if a < b and a // p == b // p), None)
        if pair and (values[pair[1]] - values[pair[0]]) % (pair[1] - pair[0]) == 0:
            lo = (values[pair[1]] - values[pair[0]]) // (pair[1] - pair[0])
        pair = next(((a, b) for a in lanes for b in lanes if a // p < b // p and a % p == b % p), None)
        if pair and (values[pair[1]] - values[pair[0]]) % (pair[1] // p - pair[0] // p) == 0:
            hi = (values[pair[1]] - values[pair[0]]) // (pair[1] // p - pair[0] // p)
        first = lanes[0]
        base = values[first] - hi * (first // p) - lo * (first % p)
        if all(values[x] == base + hi * (x // p) + lo * (x % p) for x in lanes):
            terms = [str(base)] if base or base_always else []
            for coef, var in ((hi, f"{lane} / {p}"), (lo, lane if p == sub_group else f"{lane} % {p}")):
                if coef:
                    terms.append(var if coef == 1 else f"{var} * {coef}")
            return " + ".join(terms) if terms else "0"
        p //= 2
    return None


def reorder_lines(name: str, reorder, operand, frag_ctype: str, elem_bits: int, sub_group: int,
                  arrays: int = 0) -> list[str]:
    """C statements declaring ``const <frag_ctype> <name>``: the fragment ``reorder`` gathers from the copy
    registers ``<a|b><tile>`` of ``operand`` (an OperandPlan), components indexed ``[i]``; the kernel declares
    ``const uint xe_lane = get_sub_group_local_id();`` once (:data:`LANE_DECLARATION`); ``arrays``: the copy
    registers are arrays of their components (the portable staged k-step's 2D copies), this far apart
    (:func:`register_unit`)."""
    copy = operand.atom
    reg_bits = copy.register_elem_bits
    word_bits = max(32, reg_bits)        # a shuffle moves a uint (a ulong for 64-bit components) ...
    per_word = word_bits // elem_bits
    comps_per_word = word_bits // reg_bits   # ... so narrower components travel packed, q consecutive per word
    frag_bits, frag_n = ctype_shape(frag_ctype)
    per_frag = frag_bits // elem_bits
    mask = hex((1 << elem_bits) - 1)
    fetch_ctype = UNSIGNED_CTYPE[word_bits]
    var = operand.operand
    lines = []
    fetched: dict = {}

    def word_of(tile: int, w: int) -> str:
        """Word ``w`` of tile ``tile``'s registers in this lane: its components, the first in the low bits."""
        comps = range(w * comps_per_word, min((w + 1) * comps_per_word, copy.register_length))
        refs = [f"({fetch_ctype}){var}{tile}" if copy.register_length == 1 and not arrays else
                f"({fetch_ctype}){var}{tile}[{c * (arrays or 1)}]" for c in comps]
        parts = [ref if not i else f"({ref} << {i * reg_bits})" for i, ref in enumerate(refs)]
        return parts[0] if len(parts) == 1 else "(" + " | ".join(parts) + ")"

    def fetch(tile: int, w: int, lanes_src: dict[int, int]) -> str:
        """A temporary holding word ``w`` of tile ``tile`` from the lane ``lanes_src[lane]``."""
        same = all(src == lane for lane, src in lanes_src.items())
        source = "" if same else lane_fit(lanes_src, sub_group)
        if source is None:           # no affine form: one broadcast per source lane, picked below
            return None
        key = (tile, w, source)
        if key not in fetched:
            t = f"{name}_t{len(fetched)}"
            value = word_of(tile, w)
            if source:
                value = f"intel_sub_group_shuffle({value}, ({source}) & {sub_group - 1})"
            lines.append(f"const {fetch_ctype} {t} = {value};")
            fetched[key] = t
        return fetched[key]

    comps = []
    for c in range(frag_n):
        parts = []
        for s in range(per_frag):
            e = c * per_frag + s
            groups: dict = {}            # (tile, word) -> {lane: (source lane, bit shift)}
            for lane in range(sub_group):
                src = reorder.sources[lane][e]
                if src is not None:
                    tile, elem, src_lane = src
                    groups.setdefault((tile, elem // per_word), {})[lane] = (src_lane, elem % per_word * elem_bits)
            if not groups:
                continue
            choices = []                 # (lanes, expression) in any order
            for (tile, w), lanes_at in groups.items():
                shifts = {lane: at[1] for lane, at in lanes_at.items()}
                shift = str(next(iter(shifts.values()))) if len(set(shifts.values())) == 1 else \
                    lane_fit(shifts, sub_group)
                parts_by = [lanes_at] if shift is not None else \
                    [{x: at for x, at in lanes_at.items() if at[1] == v} for v in sorted(set(shifts.values()))]
                for part in parts_by:
                    sources = {lane: at[0] for lane, at in part.items()}
                    split = [sources] if fetch(tile, w, sources) is not None else \
                        [{x: v for x, v in sources.items() if v == src} for src in sorted(set(sources.values()))]
                    for lanes in split:
                        t = fetch(tile, w, lanes)
                        bits = shift if shift is not None else str(next(iter(part.values()))[1])
                        value = t if bits == "0" else f"({t} >> ({bits}))"
                        if elem_bits < 32:
                            value = f"({value} & {mask}u)"
                        choices.append((set(lanes), value))
            value = choices[-1][1]
            for lanes, v in reversed(choices[:-1]):
                bits = sum(1 << lane for lane in lanes)
                value = f"((({hex(bits)}u >> {LANE}) & 1u) ? {v} : {value})"
            parts.append(value if not s else f"({value} << {s * elem_bits})")
        unsigned = UNSIGNED_CTYPE[frag_bits]
        base = frag_ctype.rstrip("0123456789")
        word = " | ".join(parts) if parts else "0u"
        comps.append(f"as_{base}(({unsigned})({word}))" if base != unsigned else f"({unsigned})({word})")
    value = comps[0] if frag_n == 1 else f"({vector_ctype(frag_ctype.rstrip('0123456789'), frag_n)})(" + \
        ", ".join(comps) + ")"
    lines.append(f"const {frag_ctype} {name} = {value};")
    return lines


def local_reorder_elements(reorder, operand, elem_bits: int, sub_group: int, stride: int) -> list[str] | None:
    """The elements of the fragment ``reorder`` gathers, read straight from the copy registers in the
    sub-group's local memory (lowering.portable.LocalRegisters: component i of lane l of tile t at
    ``<var>0[t * size + i * stride + l - lane]``, the operand's tiles one after another), no shuffles: per
    fragment element (lowest first, across the fragment's components) a uint expression whose low
    ``elem_bits`` bits are the element.  The source lane, component and bit offset are written as affine
    expressions of the int ``lane`` (their bases always printed, so alike elements are one loop,
    lowering.loops).  None when some element's source is not of that form or is padding on some lanes only
    (the shuffles of :func:`reorder_lines` then gather it).  The reads come after the k-chunk's sub-group
    barrier, so every lane's loads have landed."""
    copy = operand.atom
    per_comp = copy.register_elem_bits // elem_bits
    size = copy.register_length * stride
    var = f"{operand.operand}0"
    out = []
    for e in range(len(reorder.sources[0])):
        sources = [reorder.sources[lane][e] for lane in range(sub_group)]
        if all(src is None for src in sources):
            out.append("0u")
            continue
        if any(src is None for src in sources):
            return None
        at = {lane: tile * size + elem // per_comp * stride + src_lane
              for lane, (tile, elem, src_lane) in enumerate(sources)}
        shifts = {lane: elem % per_comp * elem_bits for lane, (_, elem, _) in enumerate(sources)}
        index, shift = lane_fit(at, sub_group, "lane", True), lane_fit(shifts, sub_group, "lane", True)
        if index is None or shift is None:
            return None
        out.append(f"((uint){var}[({index}) - lane] >> ({shift}))")
    return out


def register_unit(var: str, reg_ctype: str, unit_bits: int, index: int, array: int) -> str:
    """Unit ``index`` (``unit_bits`` wide, little-endian) of the copy register ``var`` of type ``reg_ctype``
    (held as an array of its components, ``array`` apart, when ``array``: 1 in a private array, the sub-group
    size in local memory), as a uint expression: the bits the fragment helpers of templates/fragments.cl.j2
    would move."""
    bits, n = ctype_shape(reg_ctype)

    def comp(i: int) -> str:
        return f"(uint){var}" if n == 1 and not array else f"(uint){var}[{i * (array or 1)}]"

    if bits == unit_bits:
        return comp(index)
    if bits > unit_bits:
        per = bits // unit_bits
        shift = index % per * unit_bits
        value = comp(index // per) if not shift else f"({comp(index // per)} >> {shift})"
        return f"({value} & {hex((1 << unit_bits) - 1)}u)"
    per = unit_bits // bits
    parts = [comp(index * per + t) + (f" << {t * bits}" if t else "") for t in range(per)]
    return "(" + " | ".join(parts) + ")"


def plan_reorders(plan, unsigned: bool = False, arrays: int = 0) -> dict:
    """The reorders of a plan's A and B fragments as C: ``{"a": {(i, ki): lines}, "b": {(ki, j): lines},
    "lane": the lane declaration}``, the fragments named ``fa_<i>_<ki>`` and ``fb_<ki>_<j>``, of the DPAS
    operand types (a quantized B: its stored bits, xegemm.plan.dequant.StoredB) (``unsigned``: of the unsigned integer vectors of the same shape, see :func:`fragment_ctype`)."""
    out = {"lane": LANE_DECLARATION}
    for operand in (plan.a, plan.b):
        name = operand.operand
        view = plan.quant.b_view if name == "b" and plan.quant else plan.mma   # a quantized B: as stored
        if name == "a" and plan.quant and plan.quant.a_view:                   # an FP8 A: as stored
            view = plan.quant.a_view
        ctype = fragment_ctype(view, name, unsigned)
        out[name] = {key: reorder_lines(f"f{name}_{key[0]}_{key[1]}", frag, operand, ctype,
                                        view.element(name).bits, plan.mma.n, arrays)
                     for key, frag in operand.fragments.items() if isinstance(frag, Reorder)}
    return out


def fragment_ctype(mma, operand: str, unsigned: bool = False) -> str:
    """The DPAS operand's register type, or (``unsigned``) the unsigned integer vector of the same shape."""
    ctype = mma.ctype(operand)
    if not unsigned:
        return ctype
    bits, n = ctype_shape(ctype)
    return vector_ctype(UNSIGNED_CTYPE[bits], n)
