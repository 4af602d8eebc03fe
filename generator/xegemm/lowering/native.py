"""The native lowering: which Xe messages each copy atom becomes for a given compiler.

What a compiler accepts is a capability set, not one spelling (xegemm.aot.capabilities): a driver with
``cl_intel_subgroup_2d_block_io`` takes every documented 2D block read, write and prefetch; Debian's IGC
1.0.12504 has 2D block *reads* of at most 8 rows and silently drops 2D writes and prefetches.  So an atom is
issued as one message when the compiler has it, else as several smaller messages it does have (a 32-row
load as four 8-row loads, a 32x32 VNNI load as four 16x16 ones), else through the nearest equivalent (1D
sub-group block writes for stores, LSC prefetches for 2D prefetches); the plan says which.

Splitting is proved, not assumed: a sub-message's lane map, shifted to its origin in the atom's block, must
land on the atom's lane map at the same register offsets in every lane; the runs of register components
it fills are what the template copies.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

from xegemm.aot.builtins import declare_block2d_builtin
from xegemm.aot.isa import MESSAGE_KINDS
from xegemm.aot.capabilities import CAPABILITIES_ENV, MODERN_CAPABILITIES, compiler_capabilities
from xegemm.aot.prototypes import documented_names
from xegemm.aot.toolchain import build_compiler
from xegemm.atoms.base import CopyAtomBase
from xegemm.atoms.block1d import Block1DAtom
from xegemm.atoms.copy import CopyAtom
from xegemm.errors import XegemmError


class NativeUnsupported(XegemmError):
    """The compiler capability set has no way to issue an atom."""


@dataclass(frozen=True)
class Message:
    """One message of a native atom: ``kind`` spelled ``builtin``, moving ``atom``'s block at ``origin``.

    ``runs`` are (parent component, message component, length) copies between the message's registers and
    the parent atom's registers (same component type), identical in every lane.
    """

    kind: str                      # the ISA message kind it issues (xegemm.aot.isa.MESSAGE_KINDS)
    builtin: str
    atom: CopyAtom
    origin: tuple[int, int]        # (row, col) in the parent block, in elements of the parent's type
    runs: tuple[tuple[int, int, int], ...] = ()
    parent_length: int = 1         # register components of the parent atom

    @property
    def x_units(self) -> int:
        """Parent elements per message x unit (the builtins take x in message elements, transforms too: a 4-bit
        VNNI load is an 8-bit transform message, whose x counts bytes, two elements each)."""
        return max(1, self.atom.message.elem_bits // self.atom.elem_bits)

    @property
    def coord(self) -> str:
        """The C ``int2`` coordinate of the message: x in message elements, y in rows."""
        x = "x" if not self.origin[1] else f"x + {self.origin[1]}"
        if self.x_units > 1:
            x = f"({x}) / {self.x_units}"
        y = "y" if not self.origin[0] else f"y + {self.origin[0]}"
        return f"(int2)({x}, {y})"

    @property
    def swizzles(self) -> tuple[tuple[str, str], ...] | None:
        """The runs as ``.lo``/``.hi`` vector paths (parent path, message path), or None if not aligned.

        Debian's IGC drops 2D block loads whose results are assembled into a wide vector through a union
        (seen: the four VNNI loads of a 32x32 B tile vanished from the ISA); writing the halves of the
        vector directly keeps them, so the template uses these paths whenever the runs allow.
        """
        out = []
        for dst, src, n in self.runs:
            d = _half_path(dst, n, self.parent_length)
            m = _half_path(src, n, self.atom.register_length)
            if d is None or m is None:
                return None
            out.append((d, m))
        return tuple(out)

    @property
    def declaration(self) -> str:
        """The C declaration the kernel must carry for this builtin ('' when the compiler declares it)."""
        if self.builtin.startswith("__builtin_IB_subgroup_block_"):
            return declare_block2d_builtin(self.builtin)
        if self.builtin == LSC_PREFETCH:
            return f"void {LSC_PREFETCH}(const global uint* base, int offset, int cache_control);"
        return ""


def _half_path(offset: int, length: int, total: int) -> str | None:
    """``.lo``/``.hi`` chain selecting components [offset, offset + length) of a vector of ``total``."""
    if total & (total - 1) or length & (length - 1) or offset % length or offset + length > total:
        return None
    path = ""
    while total > length:
        total //= 2
        if offset < total:
            path += ".lo"
        else:
            path, offset = path + ".hi", offset - total
    return path


LSC_PREFETCH = "__builtin_IB_lsc_prefetch_global_uint"
BLOCK1D_WRITE = {8: "intel_sub_group_block_write_uc", 16: "intel_sub_group_block_write_us",
                 32: "intel_sub_group_block_write", 64: "intel_sub_group_block_write_ul"}


@dataclass(frozen=True)
class NativeCapabilities:
    """What one compiler can issue, from a probed or named xegemm.aot compiler caps."""

    name: str
    spelling: str                  # "ib" (__builtin_IB_*) or "ocl2d" (intel_sub_group_2d_block_*)
    supported: frozenset

    def has(self, builtin: str) -> bool:
        return builtin in self.supported

    def spell(self, atom: CopyAtom) -> str:
        return atom.ib_builtin if self.spelling == "ib" else atom.ocl_builtin

    @property
    def block2d_writes(self) -> bool:
        return any("write" in n and ("2d_block" in n or "_IB_subgroup_block_write" in n) for n in self.supported)

    @property
    def block2d_prefetch(self) -> bool:
        return any("prefetch" in n and ("2d_block" in n or "read_prefetch" in n) for n in self.supported)


def native_capabilities(name: str | None = None, target: str = "pvc", compiler: str | None = None) -> NativeCapabilities:
    """The capability set named (``igc-1.0.12504``, ``igc-2.40.14``, ``cl_intel_subgroup_2d_block_io``) or probed
    from ``compiler``'s ocloc (``system``, ``current``, a path; None: xegemm.aot.toolchain.build_compiler's choice
    for the target).  A probed or measured set spells every atom with IGC's builtins (``ib``), which both
    compilers declare once the kernel declares them (IGC 2.x also takes the public names, but not every form:
    the 4-wide d32 transpose exists only as ``__builtin_IB_subgroup_block_read_flat_transpose_u32_k4``)."""
    name = name or os.environ.get(CAPABILITIES_ENV)
    if name == MODERN_CAPABILITIES:   # every documented cl_intel_subgroup_2d_block_io function
        return _native_capabilities(name, target, None)
    return _native_capabilities(name, target, None if name else build_compiler(target, compiler))


@lru_cache(maxsize=None)
def _native_capabilities(name: str | None, target: str, compiler: str | None) -> NativeCapabilities:
    if name == MODERN_CAPABILITIES:
        return NativeCapabilities(MODERN_CAPABILITIES, "ocl2d", frozenset(documented_names()))
    caps = compiler_capabilities(target, name, compiler)   # a named set, a capability file, or a probe of ocloc
    return NativeCapabilities(caps.name, "ib", frozenset(caps.supported))


def _runs(parent: CopyAtom, sub: CopyAtom, origin: tuple[int, int]) -> tuple[tuple[int, int, int], ...] | None:
    """Component runs placing ``sub``'s registers (block at ``origin``) into ``parent``'s, or None."""
    if sub.register_elem_bits != parent.register_elem_bits:
        return None
    per = parent.register_elem_bits // parent.elem_bits     # elements per register component
    pmap, smap = parent.lane_map.map, sub.lane_map.map
    where = [{c: i for i, c in enumerate(lane) if c is not None} for lane in pmap]
    offsets = None
    for lane in range(len(smap)):
        lane_offsets = []
        for k, c in enumerate(smap[lane]):
            if c is None:
                lane_offsets.append(None)
                continue
            i = where[lane].get((origin[0] + c[0], origin[1] + c[1]))
            if i is None:
                return None
            lane_offsets.append(i)
        if offsets is None:
            offsets = lane_offsets
        elif any(a is not None and b is not None and a != b for a, b in zip(offsets, lane_offsets)):
            return None
        else:
            offsets = [a if a is not None else b for a, b in zip(offsets, lane_offsets)]
    comps = []
    for comp in range(sub.register_length):
        elems = offsets[comp * per:(comp + 1) * per]
        known = [(i, e) for i, e in enumerate(elems) if e is not None]
        if not known:
            continue
        i, e = known[0]
        base = e - i
        if base % per or any(e2 != base + i2 for i2, e2 in known):
            return None
        comps.append((base // per, comp))
    runs: list[list[int]] = []
    for dst, src in comps:
        if runs and runs[-1][0] + runs[-1][2] == dst and runs[-1][1] + runs[-1][2] == src:
            runs[-1][2] += 1
        else:
            runs.append([dst, src, 1])
    return tuple(tuple(r) for r in runs)


def _splits(atom: CopyAtom):
    """Sub-atoms of the same kind that tile the atom's block, largest first."""
    rows = atom.rows
    while rows >= 1:
        block_cols = atom.message.width * atom.message.elem_bits // atom.elem_bits
        cols_options = [atom.cols] + ([block_cols] if block_cols < atom.cols else [])
        for cols in cols_options:
            if (rows, cols) != (atom.rows, atom.cols):
                sub = CopyAtom(atom.type_name, rows, cols, atom.op, atom.layout, atom.packed)
                if sub.legal:
                    yield sub
        rows //= 2


def lower_block1d(atom: Block1DAtom, caps: NativeCapabilities) -> tuple[Message, ...]:
    """A 1D sub-group block tile: one Message standing for its rows (one block read / write per row: the
    cl_intel_subgroups builtins, which need no capability entry; the ISA counts check they were issued); its
    prefetch as LSC prefetches where the capability set has them."""
    if atom.is_prefetch:
        if caps.has(LSC_PREFETCH):
            return (Message("prefetch", LSC_PREFETCH, atom, (0, 0)),)
        raise NativeUnsupported(f"{caps.name} has no LSC prefetch for {atom.name} (1D block tiles have no "
                                "block prefetch here): set pipeline.prefetch: 0")
    kind = "load_block1d" if atom.is_load else "store_block1d"
    return (Message(kind, atom.builtin, atom, (0, 0), ((0, 0, atom.register_length),), atom.register_length),)


def lower_copy(atom: CopyAtomBase, caps: NativeCapabilities) -> tuple[Message, ...]:
    """The messages that implement ``atom`` with this compiler (NativeUnsupported if there are none)."""
    if not atom.block2d:
        return lower_block1d(atom, caps)
    if atom.is_prefetch:
        if caps.has(caps.spell(atom)):
            return (Message("prefetch_block2d", caps.spell(atom), atom, (0, 0)),)
        if caps.has(LSC_PREFETCH):
            return (Message("prefetch", LSC_PREFETCH, atom, (0, 0)),)
        raise NativeUnsupported(f"{caps.name} has no prefetch for {atom.name}")
    kind = "store_block2d" if atom.is_store else "load_block2d"
    if caps.has(caps.spell(atom)):
        return (Message(kind, caps.spell(atom), atom, (0, 0), ((0, 0, atom.register_length),),
                        atom.register_length),)
    for sub in _splits(atom):
        if not caps.has(caps.spell(sub)):
            continue
        messages = []
        for r0 in range(0, atom.rows, sub.rows):
            for c0 in range(0, atom.cols, sub.cols):
                runs = _runs(atom, sub, (r0, c0))
                if runs is None:
                    break
                messages.append(Message(kind, caps.spell(sub), sub, (r0, c0), runs, atom.register_length))
            else:
                continue
            break
        else:
            return tuple(messages)
    if atom.is_store:
        if atom.dealt_shape[1] >= 16 and atom.message.count == 1 and atom.register_elem_bits in BLOCK1D_WRITE:
            # one 1D sub-group block write per row: lane l writes its component of row r at chunk l
            return (Message("store_block1d", BLOCK1D_WRITE[atom.register_elem_bits], atom, (0, 0),
                            ((0, 0, atom.register_length),), atom.register_length),)
    raise NativeUnsupported(
        f"{caps.name} cannot issue {atom.name}: neither {caps.spell(atom)} nor any split of it into "
        "smaller messages of the same kind is supported" + (" and 1D block writes need one 16-wide block"
                                                           if atom.is_store else ""))


def count_messages(messages) -> dict:
    """How many ISA messages of each kind (:data:`xegemm.aot.isa.MESSAGE_KINDS`) a tuple of Messages issues:
    a 1D block tile one per row, LSC prefetches one per 16 (row, cache line) pairs, the rest one each."""
    out = dict.fromkeys(MESSAGE_KINDS, 0)
    for m in messages:
        if m.kind in ("load_block1d", "store_block1d"):
            out[m.kind] += m.atom.register_length
        elif m.kind == "prefetch":
            out[m.kind] += lsc_prefetch_messages(m.atom)
        else:
            out[m.kind] += 1
    return out


def lsc_prefetch_lines(atom: CopyAtomBase) -> int:
    """64-byte cache lines a block spans per row."""
    return -(-atom.row_bytes // 64)


def lsc_prefetch_messages(atom: CopyAtomBase) -> int:
    """LSC prefetches needed: one per sub-group (16 lanes for 2D atoms) of (row, cache line) pairs."""
    return -(-(atom.rows * lsc_prefetch_lines(atom)) // atom.lanes)
