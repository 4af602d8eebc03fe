"""The native lowering on a device without the Xe builtins: the kernel's OpenCL C, unchanged, built together with
an exact software implementation of every Xe builtin it calls (a correctness path, not a speed path).

:func:`cpu_source` turns a native kernel source into a source the Intel OpenCL CPU runtime builds: a prelude (the
fp16 pragma, the typedefs of wide vector types), then one OpenCL C function per builtin the kernel calls, with the
builtin's exact name and signature, then the kernel text itself, byte for byte.  The functions are printed by
``templates/emulation/xe_builtins.cl.j2`` from what the repository already knows:

- the signatures: :mod:`xegemm.aot.prototypes` (OCL2D, OCLMMA and OCLTF32's documented prototypes) and
  :mod:`xegemm.aot.builtins` (IGC's ``__builtin_IB_subgroup_block_*`` grammar and declarations);
- where each work-item's register elements lie in the block: the lane map of the copy atom whose message is the
  builtin (:attr:`xegemm.atoms.copy.CopyAtom.lane_map`), printed as a table per builtin (lane, element) ->
  (row, column), so the emulation and the lane maps have one home;
- DPAS: the lane maps of :class:`xegemm.atoms.mma.MmaAtom` (A, B, C) and the element decodes of
  :mod:`xegemm.library.dtypes` (``decode``), the accumulation exact for integers (modulo 2^32) and, for floats,
  in f32 in increasing k starting from C, one rounding per product (the products of bf16, f16 and tf32 elements are
  exact in f32).  The documents do not say how DPAS rounds its float sums: docs/lowerings.md says what this
  means and why the verifier's tolerance covers it.

The surface rules of OCL2D 6.13.X.6 (base 64-byte aligned, 64 B <= width <= 2^24, the width's multiple, 0 < height
<= 2^24, pitch >= width and a multiple of 16, the x coordinate's alignment, a full sub-group of 16) are checked on
every call: a call that breaks one reads all-ones bytes (NaN, -1) and writes nothing, so verification fails
instead of the emulation doing what a GPU need not do.  Elements outside the surface read 0; writes outside it are
dropped; prefetches only check the rules (they do not affect a kernel's results, OCL2D 6.13.X.2).  Sub-group
shuffles and 1D sub-group block reads and writes are the CPU runtime's own (``cl_intel_subgroups`` and its
``_char`` / ``_short`` companions): they are not emulated.

The emulating functions are ``noinline``: inlined at every call, the CPU runtime's compiler took 43 s instead of
4 s for the default config's kernel (and 15 s instead of 3 s for the epilogue config's).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from xegemm.aot.builtins import declare_block2d_builtin, lane_typedef, parse_block2d_builtin
from xegemm.aot.prototypes import BLOCK2D_SUB_GROUP, Prototype, documented_overloads
from xegemm.atoms.copy import TYPE_BITS, CopyAtom
from xegemm.atoms.lanemap import LaneMap
from xegemm.atoms.mma import MmaAtom
from xegemm.errors import XegemmError
from xegemm.library.dtypes import UNSIGNED_CTYPE, c_spelling, ctype_shape
from xegemm.lowering.templating import render_macro

NOTE = "native lowering through the CPU emulation of the Xe builtins (a correctness path, not a speed path)"

# The extensions whose functions are emulated; a device that has them runs the native lowering itself.
_OCL2D = re.compile(r"\bintel_sub_group_2d_block_(?:read_transform|read_transpose|read|write|prefetch)_\w+")
_IB = re.compile(r"\b__builtin_IB_subgroup_block_\w+")
_LSC_PREFETCH = "__builtin_IB_lsc_prefetch_global_uint"
_MMA = re.compile(r"\bintel_sub_group_\w+?_matrix_mad_k\d+\w*")
_SUB_GROUP = re.compile(r"intel_reqd_sub_group_size\((\d+)\)")
_COMMENTS = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
PAD = 0xFFFF   # a table entry for a padding element (no memory element)

# builtin-name tags -> atom type codes, accumulator scalars -> codes (OCLMMA "New OpenCL C Functions")
_TAG_CODE = {"i8": "S8", "u8": "U8", "i4": "S4", "u4": "U4", "bf16": "BF16", "f16": "F16", "tf32": "TF32"}
_ACC_CODE = {"float": "F32", "int": "S32", "short": "BF16", "half": "F16"}


class EmulationError(XegemmError):
    """A kernel calls an Xe builtin this emulation has no exact implementation of."""


@dataclass(frozen=True)
class BlockCall:
    """One 2D block builtin, as the template prints it."""

    name: str
    op: str                 # read, write or prefetch (transforms and transposes are reads)
    spelling: str           # "ocl2d" or "ib"
    signature: str          # its C declarator, e.g. ``void intel_sub_group_..._8r16x1c(global void* ...)``
    typedef: str            # a guarded typedef its IGC vector type needs ('' otherwise)
    value_type: str         # IGC: the returned / written vector type ('' for OCL2D and prefetches)
    elem_ctype: str         # the message element's unsigned C type (uchar, ushort, uint)
    elem_bytes: int
    elements: int           # message elements per work-item (0 for prefetches)
    table: tuple[int, ...]  # lanes x elements entries: row << 8 | col of the block, or PAD
    cache_arg: bool = False


@dataclass(frozen=True)
class MmaCall:
    """One DPAS overload, as the template prints it."""

    name: str
    signature: str
    sub_group: int
    m: int
    k: int
    integer: bool
    a_type: str
    b_type: str
    c_type: str
    c_scalar: str
    a_bits: int
    b_bits: int
    a_words: int            # 32-bit words one work-item's A registers span (shuffled whole)
    a_elements: int
    b_elements: int
    c_elements: int
    a_table: tuple[int, ...]  # lanes x a_elements: m << 8 | k, or PAD
    b_table: tuple[int, ...]  # lanes x b_elements: k, or 0xFF
    c_table: tuple[int, ...]  # lanes x c_elements: m, or 0xFF
    decode_a: str
    decode_b: str
    acc_in: str             # component -> float (or uint for integers)
    acc_out: str            # float (or uint) -> component

    @property
    def tag(self) -> str:
        return f"{self.name}_m{self.m}_{self.c_scalar}_s{self.sub_group}"


@dataclass(frozen=True)
class Emulation:
    """What one kernel needs emulated."""

    sub_group: int
    blocks: tuple[BlockCall, ...]
    mmas: tuple[MmaCall, ...]
    lsc_prefetch: bool
    fp16: bool


# ---- lane maps -----------------------------------------------------------------------------------------------

def block_atom(name: str) -> CopyAtom:
    """The copy atom whose one message is the 2D block builtin ``name`` (OCL2D or IGC spelling), with elements of
    the message's own width, so that its lane map is the builtin's per-work-item register layout."""
    if name.startswith("__builtin_IB_"):
        b = parse_block2d_builtin(name)
        op, layout, bits, height, width, count = b.op, b.layout, b.elem_bits, b.height, b.width, b.count
        spelled = "ib_builtin"
    else:
        (p,) = documented_overloads(name) or (None,)
        if p is None:
            raise EmulationError(f"{name} is not a documented cl_intel_subgroup_2d_block_io function")
        layout = {"read_transform": "transform", "read_transpose": "transpose"}.get(p.op, "plain")
        op = "read" if p.op.startswith("read") else p.op
        bits, height, width, count = p.elem_bits, p.rows, p.cols, p.count
        spelled = "ocl_builtin"
    code = {"read": "LD", "write": "ST", "prefetch": "PF"}[op]
    letter = {"transform": "V", "transpose": "T"}.get(layout, "N")
    cols = width if layout == "transpose" else width * count
    rows = height
    for type_name, type_bits in TYPE_BITS.items():
        if type_bits != bits:
            continue
        for packed in (False, True):
            atom = CopyAtom(type_name, rows, cols, code, letter, packed)
            if getattr(atom, spelled) == name and atom.message.elem_bits == bits and atom.legal:
                return atom
    raise EmulationError(f"{name}: no copy atom of {bits}-bit elements issues this message, so its lane map is "
                         "unknown and it is not emulated")


def builtin_lane_map(name: str) -> LaneMap:
    """Each work-item's register elements of the 2D block builtin ``name``, as (row, col) of its block."""
    return block_atom(name).lane_map


def _encode_block_table(lm: LaneMap) -> tuple[int, ...]:
    out = []
    for lane in lm.map:
        for c in lane:
            if c is None:
                out.append(PAD)
            else:
                if not (0 <= c[0] < 256 and 0 <= c[1] < 256):
                    raise EmulationError(f"a block coordinate {c} does not fit the emulation's table")
                out.append(c[0] << 8 | c[1])
    return tuple(out)


# ---- the builtins a source calls ----------------------------------------------------------------------------

def _block_call(name: str) -> BlockCall:
    atom = block_atom(name)
    bits = atom.message.elem_bits
    lm = builtin_lane_map(name)
    if name.startswith("__builtin_IB_"):
        b = parse_block2d_builtin(name)
        typedef = lane_typedef(b.lane_scalar, b.lane_length) if b.lane_length else ""
        signature = declare_block2d_builtin(name)[len(typedef):].rstrip().rstrip(";")
        value_type = b.lane_type if b.lane_length else ""
        op, spelling, cache = b.op, "ib", b.cache_arg
    else:
        (p,) = documented_overloads(name)
        typedef, signature, value_type = "", p.declaration.rstrip(";"), ""
        op = "read" if p.op.startswith("read") else p.op
        spelling, cache = "ocl2d", False
        if op != "prefetch" and p.data_count * ctype_shape(p.data_scalar)[0] != lm.length * bits:
            raise EmulationError(f"{name}: its prototype's {p.data_count} x {p.data_scalar} do not hold the "
                                 f"{lm.length} elements of its lane map")
    elements = 0 if op == "prefetch" else lm.length
    return BlockCall(name=name, op=op, spelling=spelling, signature=signature, typedef=typedef,
                     value_type=value_type, elem_ctype=UNSIGNED_CTYPE[bits], elem_bytes=bits // 8,
                     elements=elements, table=_encode_block_table(lm) if elements else (), cache_arg=cache)


def _mma_atom(p: Prototype) -> MmaAtom:
    tags = p.name[len("intel_sub_group_"):].split("_matrix_mad")[0].split("_")
    acc = _ACC_CODE[p.return_type.rstrip("0123456789")]
    return MmaAtom.of(_TAG_CODE[tags[0]], _TAG_CODE[tags[1]], acc, m=p.m, n=p.sub_group_size)


def _mma_call(p: Prototype) -> MmaCall:
    atom = _mma_atom(p)
    if (atom.a_ctype, atom.b_ctype, atom.c_ctype) != p.param_types:
        raise EmulationError(f"{p.declaration}: the atom model's register types {atom.a_ctype}, {atom.b_ctype}, "
                             f"{atom.c_ctype} differ from the prototype's")
    a_map, b_map, c_map = (atom.lane_map(x) for x in "abc")
    a_table = tuple(PAD if c is None else c[0] << 8 | c[1] for lane in a_map.map for c in lane)
    b_table, c_table = [], []
    for lane, (bl, cl) in enumerate(zip(b_map.map, c_map.map)):
        for c in bl:
            if c is not None and c[1] != lane:
                raise EmulationError(f"{atom.name}: B element {c} is not in its column's work-item {lane}")
            b_table.append(0xFF if c is None else c[0])
        for c in cl:
            if c is not None and c[1] != lane:
                raise EmulationError(f"{atom.name}: C element {c} is not in its column's work-item {lane}")
            c_table.append(0xFF if c is None else c[0])
    c_scalar = p.return_type.rstrip("0123456789")
    c_name = atom.c_type.name
    if atom.is_integer:
        acc_in, acc_out = "(uint){x}", "as_int({x})"
    elif c_name == "f32":
        acc_in, acc_out = "{x}", "{x}"
    elif c_name == "bf16":
        acc_in, acc_out = "as_float((uint)(ushort){x} << 16)", "as_short(xe_emu_f32_to_bf16_rne({x}))"
    else:   # f16
        acc_in, acc_out = "(float){x}", "convert_half_rte({x})"
    a_bytes = ctype_shape(atom.a_ctype)[0] // 8 * ctype_shape(atom.a_ctype)[1]
    return MmaCall(
        name=p.name, signature=p.declaration.rstrip(";"), sub_group=p.sub_group_size, m=atom.m, k=atom.k,
        integer=atom.is_integer, a_type=atom.a_ctype, b_type=atom.b_ctype, c_type=atom.c_ctype, c_scalar=c_scalar,
        a_bits=atom.a_type.bits, b_bits=atom.b_type.bits, a_words=-(-a_bytes // 4), a_elements=a_map.length,
        b_elements=b_map.length, c_elements=c_map.length, a_table=a_table, b_table=tuple(b_table),
        c_table=tuple(c_table), decode_a=c_spelling(atom.a, "decode", "{x}"),
        decode_b=c_spelling(atom.b, "decode", "{x}"), acc_in=acc_in, acc_out=acc_out)


def called_builtins(source: str) -> tuple[tuple[str, ...], tuple[str, ...], bool, int]:
    """(2D block builtins, DPAS builtins, whether the LSC prefetch is called, sub-group size) of a kernel source,
    in order of first call (comments are not calls)."""
    code = _COMMENTS.sub(" ", source)
    blocks = tuple(dict.fromkeys(m.group(0) for m in re.finditer(f"{_OCL2D.pattern}|{_IB.pattern}", code)))
    mmas = tuple(dict.fromkeys(_MMA.findall(code)))
    sizes = {int(s) for s in _SUB_GROUP.findall(code)}
    if len(sizes) > 1:
        raise EmulationError(f"the kernels of one source require sub-group sizes {sorted(sizes)}; the emulation "
                             "takes one")
    return blocks, mmas, _LSC_PREFETCH in code, sizes.pop() if sizes else BLOCK2D_SUB_GROUP


@lru_cache(maxsize=256)
def emulation_for(source: str) -> Emulation:
    """The builtins ``source`` calls, each with what its emulation needs (EmulationError for one it has not)."""
    blocks, mma_names, lsc, sub_group = called_builtins(source)
    mmas = []
    for name in mma_names:
        overloads = [p for p in documented_overloads(name) if p.op == "mma" and p.sub_group_size == sub_group]
        if not overloads:
            raise EmulationError(f"{name} is not a documented DPAS builtin at sub-group size {sub_group} "
                                 "(OCLMMA, OCLTF32), so it is not emulated")
        mmas += [_mma_call(p) for p in overloads]
    calls = tuple(_block_call(n) for n in blocks)
    fp16 = any("_f16_" in m.name for m in mmas)     # f16 elements and accumulators go through half
    return Emulation(sub_group, calls, tuple(mmas), lsc, fp16)


def emulation_text(source: str) -> str:
    """The OpenCL C emulating every Xe builtin ``source`` calls (to be placed before it)."""
    emu = emulation_for(source)
    return render_macro("emulation/xe_builtins.cl.j2", "emulation", emu)


def cpu_source(source: str) -> str:
    """``source`` (a native kernel), unchanged, after the emulation of every Xe builtin it calls: a source the CPU
    runtime builds.  A ``#line 1`` keeps the compiler's messages on the kernel's own line numbers."""
    return f"{emulation_text(source)}\n#line 1\n{source}"
