"""The printed register reorders (xegemm.lowering.reorder), run alone on the device against the lane maps.

Every way the planner feeds a DPAS operand from copy registers is enumerated from the planner itself: each
target, each named compiler capability set (the planner prefers the atoms a compiler can issue), one type
family per bit width, each layout; every operand whose copy atom, operand and kind (contiguous run, per-lane
permutation, sub-group-shuffle gather) is new becomes a case.  A case's kernel fills each lane's copy
registers from a buffer laid out by the copy atom's lane map over a random operand tile, then builds every
MMA fragment as the GEMM kernels do (the take helper for a contiguous run, the reorder's C otherwise, with the
copy registers as vectors and, as the portable staged k-step holds them, as arrays of components, and in the
sub-group's local memory, where each element is read from its lane directly) and stores it.  Each lane's fragment registers must equal, element by element, the operand elements the DPAS lane map
puts there.  All cases are kernels of one program, built once without optimisation (about 6 s; with the
compiler's optimisation the shuffle-heavy kernels take over a minute, and every GEMM test already runs the
reorders optimised inside whole kernels).
"""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np
import pytest

from xegemm.aot.capabilities import DEBIAN_CAPABILITIES, NAMED_CAPABILITIES
from xegemm.config import config_from_text
from xegemm.library.dtypes import ctype_shape, dtype
from xegemm.errors import XegemmError
from xegemm.lowering import named_lowering
from xegemm.lowering.reorder import LANE_DECLARATION, fragment_ctype, local_reorder_elements, reorder_lines
from xegemm.plan.operands import Fragment, Reorder, reorder_cost
from xegemm.plan.planner import plan
from xegemm.kernel.render import fragment_helpers, wide_vector_typedefs
from xegemm.runtime.program import build_program, from_device, launch, to_device
from xegemm.library.layouts import from_letters
from xegemm.jobs.support import LAYOUTS, SUBGROUP_TILES, _config_text, type_combinations
from xegemm.library.targets import AOT_TARGETS, TARGETS

pytestmark = pytest.mark.device

KINDS = {0: "contiguous run", 1: "per-lane permutation", 2: "sub-group-shuffle gather"}


@dataclasses.dataclass(frozen=True)
class Case:
    """One operand of one plan: its fragments as the kernels build them."""

    plan: object
    operand: str                 # "a" or "b"
    kind: int                    # reorder_cost of its fragments
    fragments: tuple             # ((key, Fragment | Reorder), ...) in output order
    arrays: bool                 # also built from copy registers held as arrays (the staged 2D k-step)

    @property
    def op(self):
        return getattr(self.plan, self.operand)

    @property
    def name(self) -> str:
        layout = getattr(self.plan.config.layout, self.operand)
        return f"{self.plan.mma.name}-{self.op.atom.name}-{self.operand}-{layout}"


def _families():
    """The first (A, B, accumulator) of each DPAS type family (A and B widths, integer or not)."""
    out = {}
    for a, b, acc in type_combinations():
        out.setdefault((dtype(a).bits, dtype(b).bits, dtype(a).is_int), (a, b, acc))
    return list(out.values())


def _plan(target, lowering, a, b, acc, la, lb):
    for tile in SUBGROUP_TILES[TARGETS[target].simd]:
        try:
            return plan(config_from_text(_config_text(target, a, b, acc, acc, la, lb, "", tile)), lowering.issues)
        except XegemmError:
            continue
    return None


def enumerate_cases() -> list[Case]:
    """Every (MMA atom, copy atom, operand, operand layout, kind) the planner produces over the targets the
    compiler capabilities are named for (pvc, bmg, lnl, ptl, dg2), each named set measured for the target, type
    families and layouts, once each."""
    seen = {}
    for target in AOT_TARGETS:
        for capabilities in NAMED_CAPABILITIES:
            if capabilities == DEBIAN_CAPABILITIES and not TARGETS[target].device_for("system"):
                continue                   # Debian 12's compiler does not build for Xe2 and Xe3
            lowering = named_lowering("native", capabilities, target)
            for a, b, acc in _families():
                for la, lb, _ in map(from_letters, LAYOUTS):
                    p = _plan(target, lowering, a, b, acc, la, lb)
                    if p is None:
                        continue
                    for operand in ("a", "b"):
                        op = getattr(p, operand)
                        kind = reorder_cost(op.fragments)
                        key = (p.mma.name, op.atom.name, operand, getattr(p.config.layout, operand), kind)
                        if key not in seen:
                            seen[key] = Case(p, operand, kind, tuple(sorted(op.fragments.items())),
                                             arrays=not p.uses_block1d)
    return list(seen.values())


CASES = enumerate_cases()


def _broken(case: Case) -> Case:
    """The case with one gathered element taken from the next lane (source lane + 1) on every lane (the harness
    must catch it, in each form)."""
    (key, frag), *rest = case.fragments
    sources = [list(row) for row in frag.sources]
    for row in sources:
        tile, elem, src = row[0]
        row[0] = (tile, elem, src + 1)
    return dataclasses.replace(case, fragments=((key, Reorder(tuple(tuple(r) for r in sources))), *rest))




# ---- the kernels ------------------------------------------------------------------------------------

def _frag_bytes(case: Case, unsigned: bool = False) -> int:
    bits, n = ctype_shape(fragment_ctype(case.plan.mma, case.operand, unsigned))
    return bits * n // 8


def _body(case: Case, arrays: bool, slot0: int, out_bytes: int) -> list[str]:
    """One scope: the copy registers from ``in``, every fragment built and stored from slot ``slot0`` on."""
    op, sg, var = case.op, case.plan.mma.n, case.operand
    atom, rb = op.atom, op.atom.register_bytes
    lines = ["{"]
    for t in range(len(op.tiles)):
        lines.append(f"    union {{ {atom.register_type} v; uchar b[{rb}]; }} u{t};")
        lines.append(f"    for (int i = 0; i < {rb}; ++i) u{t}.b[i] = in[({t} * {sg} + xe_lane) * {rb} + i];")
        if arrays:
            lines.append(f"    {atom.register_elem_ctype} {var}{t}[{atom.register_length}];")
            lines.append(f"    for (int i = 0; i < {atom.register_length}; ++i) {var}{t}[i] = u{t}.v[i];")
        else:
            lines.append(f"    const {atom.register_type} {var}{t} = u{t}.v;")
    ctype = fragment_ctype(case.plan.mma, case.operand, unsigned=arrays)
    nbytes = _frag_bytes(case, arrays)
    for s, ((i, j), frag) in enumerate(case.fragments):
        name = f"f{var}_{i}_{j}"
        if isinstance(frag, Reorder):
            lines += ["    " + ln for ln in reorder_lines(name, frag, op, ctype, case.plan.mma.element(var).bits,
                                                          sg, arrays)]
        elif arrays:
            continue      # the staged k-step reads a contiguous run's components itself (not a reorder)
        else:
            lines.append(f"    const {ctype} {name} = xe_take_{ctype}_from_{atom.register_type}({var}{frag.tile}, "
                         f"{frag.offset});")
        lines.append(f"    {{ union {{ {ctype} v; uchar b[{nbytes}]; }} w; w.v = {name};")
        lines.append(f"      for (int i = 0; i < {nbytes}; ++i) out[(({slot0 + s}) * {sg} + xe_lane) * {out_bytes} + i]"
                     " = w.b[i]; }")
    lines.append("}")
    return lines


def _local_fragments(case: Case) -> list:
    """(slot, key, elements) of each reordered fragment the staged k-step reads from local memory
    (lowering.reorder.local_reorder_elements; None where it falls back to the shuffles)."""
    sg, bits = case.plan.mma.n, case.plan.mma.element(case.operand).bits
    out = []
    for s, (key, frag) in enumerate(case.fragments):
        if isinstance(frag, Reorder):
            elements = local_reorder_elements(frag, case.op, bits, sg, sg)
            if elements is not None:
                out.append((s, key, elements))
    return out


def _local_body(case: Case, slot0: int, out_bytes: int) -> list[str]:
    """The copy registers in local memory as the staged k-step keeps them (component i of lane l of tile t at
    ``<var>0[t * size + i * sg + l - lane]``), every fragment with a direct form built from its elements."""
    op, sg, var = case.op, case.plan.mma.n, case.operand
    atom, rb = op.atom, op.atom.register_bytes
    size = atom.register_length * sg
    bits = case.plan.mma.element(var).bits
    lines = ["{"]
    for t in range(len(op.tiles)):
        lines.append(f"    union {{ {atom.register_type} v; uchar b[{rb}]; }} u{t};")
        lines.append(f"    for (int i = 0; i < {rb}; ++i) u{t}.b[i] = in[({t} * {sg} + xe_lane) * {rb} + i];")
        lines.append(f"    for (int i = 0; i < {atom.register_length}; ++i) {var}0[{t * size} + i * {sg}] = "
                     f"{'u%d.v[i]' % t if atom.register_length > 1 else 'u%d.v' % t};")
    lines.append("    sub_group_barrier(CLK_LOCAL_MEM_FENCE);")
    nwords = _frag_bytes(case, True) // 4
    for s, _, elements in _local_fragments(case):
        lines.append(f"    {{ uint w[{nwords}] = {{ 0 }};")
        for e, value in enumerate(elements):
            lines.append(f"      w[{e * bits // 32}] |= ({value} & {hex((1 << bits) - 1)}u) << {e * bits % 32};")
        lines.append(f"      for (int i = 0; i < {nwords * 4}; ++i) out[(({slot0 + s}) * {sg} + xe_lane) * {out_bytes} + i]"
                     " = ((uchar*)w)[i]; }")
    lines.append("}")
    return lines


def _out_bytes(case: Case) -> int:
    return max(_frag_bytes(case), _frag_bytes(case, True))


BROKEN = _broken(next(c for c in CASES if c.kind == 2 and not c.plan.uses_block1d and _local_fragments(c)
                      and all(row[0][2] + 1 < c.plan.mma.n for row in c.fragments[0][1].sources)))


def _kernel(index: int, case: Case) -> str:
    sg = case.plan.mma.n
    n = len(case.fragments)
    body = _body(case, False, 0, _out_bytes(case))
    top = []
    if case.arrays:
        body += _body(case, True, n, _out_bytes(case))
        if _local_fragments(case):
            atom = case.op.atom
            top = [f"local {atom.register_elem_ctype} xe_reg[{len(case.op.tiles) * atom.register_length * sg}];",
                   "const int lane = get_sub_group_local_id();",
                   f"local {atom.register_elem_ctype}* const {case.operand}0 = xe_reg + lane;"]
            body += _local_body(case, 2 * n, _out_bytes(case))
    return "\n".join([
        f"__attribute__((intel_reqd_sub_group_size({sg}))) __attribute__((reqd_work_group_size({sg}, 1, 1)))",
        f"__kernel void r{index}(const global uchar* in, global uchar* out)", "{", "    " + LANE_DECLARATION,
        *("    " + ln for ln in top), *("    " + ln for ln in body), "}"])


def program_source(cases) -> str:
    """One program: the take helpers and wide vector types the cases need, and one kernel per case."""
    plans = [c.plan for c in cases]
    helpers = dict.fromkeys(h for p in plans for h in fragment_helpers(p))
    types = [c.op.atom.register_type for c in cases]
    return "\n".join(["#pragma OPENCL EXTENSION cl_khr_fp16 : enable", wide_vector_typedefs(types), *helpers,
                      *(_kernel(i, c) for i, c in enumerate(cases))])



@pytest.fixture(scope="module")
def program(queue):
    return build_program(queue, program_source([*CASES, BROKEN]), "-cl-std=CL3.0 -cl-opt-disable")


# ---- the expectation: lane maps only ----------------------------------------------------------------

def _pack(values, bits: int, nbytes: int) -> bytes:
    """Elements of ``bits`` bits, little-endian in register order, into ``nbytes`` bytes."""
    word = 0
    for e, v in enumerate(values):
        word |= (int(v) & ((1 << bits) - 1)) << (e * bits)
    return word.to_bytes(nbytes, "little")


def _unpack(raw: bytes, bits: int, count: int) -> list[int]:
    word = int.from_bytes(raw, "little")
    return [(word >> (e * bits)) & ((1 << bits) - 1) for e in range(count)]


def _registers(case: Case, image: np.ndarray, rng) -> np.ndarray:
    """Each lane's copy registers as the copy atom's lane map fills them from the operand tile ``image``
    (memory rows x cols); padding elements random."""
    op, sg = case.op, case.plan.mma.n
    atom, bits = op.atom, op.atom.elem_bits
    out = np.zeros((len(op.tiles), sg, atom.register_bytes), np.uint8)
    for t, (r0, c0) in enumerate(op.tiles):
        for lane, coords in enumerate(atom.lane_map.map):
            assert len(coords) * bits == atom.register_bytes * 8, atom.name
            values = [rng.integers(0, 1 << bits) if c is None else image[r0 + c[0], c0 + c[1]] for c in coords]
            out[t, lane] = np.frombuffer(_pack(values, bits, atom.register_bytes), np.uint8)
    return out


def _expected(case: Case, image: np.ndarray, frag_key) -> list[list]:
    """Per lane, the operand element each fragment element must hold (None for padding), from the DPAS
    lane map and the operand's layout alone."""
    mma, operand = case.plan.mma, case.operand
    fr, fc = mma.operand_shape(operand)
    transpose = getattr(case.plan.config.layout, operand) == "col"
    i, j = frag_key
    out = []
    for coords in mma.lane_map(operand).map:
        row = []
        for c in coords:
            if c is None:
                row.append(None)
                continue
            r, col = i * fr + c[0], j * fc + c[1]
            row.append(int(image[(col, r) if transpose else (r, col)]))
        out.append(row)
    return out


def run_case(queue, program, index: int, case: Case, seed: int) -> list[str]:
    """Run case ``index`` on random data; the mismatches as readable lines (none when it is right)."""
    rng = np.random.default_rng(seed)
    op, sg = case.op, case.plan.mma.n
    bits = op.atom.elem_bits
    rows = max(r for r, _ in op.tiles) + op.atom.rows
    cols = max(c for _, c in op.tiles) + op.atom.cols
    image = rng.integers(0, 1 << bits, size=(rows, cols), dtype=np.uint64)
    regs = _registers(case, image, rng)
    slots = len(case.fragments) * (3 if case.arrays else 1)
    ob = _out_bytes(case)
    out = to_device(queue, np.zeros(slots * sg * ob, np.uint8))
    launch(queue, program.get_sycl_kernel(f"r{index}"), [to_device(queue, regs.reshape(-1)), out], [sg], [sg]).wait()
    got = from_device(out, np.uint8, (slots, sg, ob))
    elem_bits = case.plan.mma.element(case.operand).bits
    bad = []
    n = len(case.fragments)
    variants = [("vector registers", 0, False)] + \
        ([("array registers", n, True), ("local registers", 2 * n, True)] if case.arrays else [])
    local = {s for s, _, _ in _local_fragments(case)} if case.arrays else set()
    for what, slot0, arrays in variants:
        for s, (key, frag) in enumerate(case.fragments):
            if arrays and isinstance(frag, Fragment) or what == "local registers" and s not in local:
                continue
            want = _expected(case, image, key)
            for lane in range(sg):
                values = _unpack(got[slot0 + s, lane].tobytes(), elem_bits, len(want[lane]))
                for e, w in enumerate(want[lane]):
                    if w is not None and values[e] != w:
                        bad.append(f"{case.name} ({what}) fragment {key} lane {lane} element {e}: "
                                   f"{values[e]:#x}, want {w:#x}")
    return bad


@pytest.mark.parametrize("index", range(len(CASES)), ids=[f"{KINDS[c.kind]}-{c.name}" for c in CASES])
def test_reorder_matches_lane_maps(queue, program, index):
    case = CASES[index]
    bad = []
    for trial in range(2):
        bad += run_case(queue, program, index, case, zlib.crc32(f"{case.name}/{trial}".encode()))
    assert not bad, f"{len(bad)} elements differ, e.g. " + "; ".join(bad[:4])


def test_cases_cover_every_kind_operand_and_sub_group_size():
    """The enumeration is no token one: all three kinds, both operands, both sub-group sizes, both layouts;
    and the direct reads from local memory cover both operands and a cross-lane gather."""
    assert {(c.operand, c.kind) for c in CASES if c.arrays and _local_fragments(c)} >= {("a", 2), ("b", 2)}
    assert {c.kind for c in CASES} == set(KINDS)
    assert {(c.kind, c.operand) for c in CASES} >= {(0, "a"), (0, "b"), (1, "a"), (2, "a"), (2, "b")}
    assert {c.plan.mma.n for c in CASES if c.kind == 2} == {8, 16}
    assert {getattr(c.plan.config.layout, c.operand) for c in CASES if c.kind} == {"row", "col"}


def test_a_wrong_source_lane_is_caught(queue, program):
    """The harness can fail: one element of a gather read from the neighbouring lane is reported."""
    bad = run_case(queue, program, len(CASES), BROKEN, 1)
    assert bad and all(" element 0:" in line and "fragment " + str(BROKEN.fragments[0][0]) in line
                       for line in bad), bad
    assert {line.split("(")[1].split(")")[0] for line in bad} == {"vector registers", "array registers",
                                                                   "local registers"}, bad
