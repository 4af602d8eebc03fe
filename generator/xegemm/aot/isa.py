"""Count what a kernel really issues, from ``ocloc disasm`` output and IGC's shader dumps.

The disassembly (IGA syntax, one ``<kernel>_KernelHeap.asm`` per kernel) gives instructions, ``dpas`` and
``send``/``sendc``; each LSC send carries a comment naming its message, e.g.
``send.ugm (16|M0) r2 r6 null:0 0x0 0x02800203 {A@1,$1} // wr:1+0, rd:8; load_block2d.ugm.d16.a64``.
A 2D block prefetch is a ``load_block2d`` whose destination is ``null``; IGA spells 2D stores
``store_block2d`` (checked by re-assembling a hand-edited send with ``ocloc asm`` and disassembling it).

IGC's dumps (``IGC_ShaderDumpEnable=1``, docs/compilers.md "What Debian's IGC issues") carry per compiled variant
``//.kernel NAME``, ``//.platform PVCXT``, ``//.thread_config numGRF=128, ...``, ``//.instCount N``,
``//.RA type ...`` and ``//.spill size BYTES``.  The spill field appears when the register allocator
spilled (RA type ``GRAPH_COLORING_SPILL_*``, plus a ``//.spill GRF est. ref count`` line; the binary then
has ``hword scratch block read/write`` sends) but ALSO, without any spill, for the stack frame of a
kernel that makes a stack call (seen: 65536 with RA type ``GRAPH_COLORING_FF_RA`` for a kernel calling an
unresolved function).  ``spill_bytes`` therefore counts the field only when the allocator spilled.

IGC may compile a kernel twice (a retry after spilling, dumped with an extra ``_1_`` in the name); the
variant in the binary is the one whose ``instCount`` equals the instruction count of the disassembly
(checked: 337 vs 1556 for a retried kernel), which is how dumps are matched here.  ``instCount`` is not always
the listing's length: for dg2, IGC 2.40's header says 8 more than the code it lists (9056 against 9048, the
disassembly's count), so a dump also matches when its listing has the disassembly's instruction count.

The dump's listing is the same machine code in the same IGA syntax, except that IGC 2.x prints LSC messages by
name (``load_block2d.ugm.d16.a64 (1|M0) r7:31 [r149:1]``) where the disassembly has a ``send`` with the name in
its comment; :func:`parse_instructions` reads both forms into the same :class:`Instruction`, so the statistics
of a dump (:func:`dump_kernel_stats`) and of the disassembly are computed alike, and a dump matches only when
its dpas and messages are the disassembly's too (``dump_exact``).

On dg2 IGC 2.40 adds a copy of a DPAS before some DPAS (the dump tags it with the vISA id of the DPAS after
it): ``dpas.8x8 (8|M0) r168:f null:f r168:bf r168.0:bf`` -- no accumulator, and one register as both
multiplicands (the destination's at 256 GRFs; another at 128, ``r24:f null:f r97:bf r97.0:bf``).  It comes from the vISA finalizer's software scoreboard, which creates a
dummy DPAS for the DPAS read-suppression workaround (intel-graphics-compiler
``visa/LocalScheduler/SWSB_G4IR.h`` ``createADummyDpasRSWAInst``; IGC flag ``DPASReadSuppressionWA``,
``IGC/common/igc_flags.h``), not from the kernel: no kernel of xegemm multiplies a register by itself (A and B
are always separate loads).  Such a
DPAS is counted apart (``dpas_workaround``), not as one of the kernel's.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

from xegemm.library.targets import target_for_platform

# The symbol-table stub ocloc adds when a program calls an external function: not a kernel.
SYMBOL_TABLE_KERNEL = "Intel_Symbol_Table_Void_Program"
KERNEL_HEADER = "// ==== kernel {} ===="
_KERNEL_HEADER_RE = re.compile(r"^// ==== kernel (\S+) ====$", re.M)

_LABEL = re.compile(r"^\s*[A-Za-z_][\w.]*:\s*$")
_INSTRUCTION = re.compile(
    r"^\s*(?:\((?P<pred>[^)]*)\)\s+)?(?P<mnemonic>[a-z][\w.]*)"
    r"(?:\s+\((?P<exec>\d+)\|[MN]\d+\))?(?P<rest>.*)$"
)
# "wr:1+0, rd:8; load_block2d.ugm.d16.a64" or, for spills, "wr:1h+2, rd:0; hword scratch block write x4"
_SEND_COMMENT = re.compile(r"wr:\d+h?\+\d+,\s*rd:(?P<rd>\d+);\s*(?P<message>.+?)\s*$")
_OPERAND_TYPE = re.compile(r":([a-z]\w*)")
SEND_OPCODES = frozenset({"send", "sendc", "sends", "sendsc"})
# The LSC messages IGC 2.x's dumps print by name rather than as a send (``load_block2d.ugm.d16.a64 (1|M0) r7:31
# [r149:1]``): read as the send they are, the name and its operands as the message.
# The LSC ops as IGA names them: load, load_block2d, load_quad, ..., store..., the atomic_* ops (atomic_iadd, ...),
# fence and read_state.
NAMED_MESSAGES = frozenset({"load", "store", "fence", "read_state"})
_NAMED_PREFIXES = ("load_", "store_", "atomic_")


def is_named_message(opcode: str) -> bool:
    """An LSC message as a dump prints it, by name (``load_block2d``, ``atomic_iadd``, ``fence``, ...)."""
    return opcode in NAMED_MESSAGES or opcode.startswith(_NAMED_PREFIXES)
_NAMED_RESPONSE = re.compile(r"^(?:r\d+|null):(\d+)$")


@dataclass(frozen=True)
class Instruction:
    """One disassembled instruction."""

    opcode: str  # "dpas", "send", "mov", ...
    mnemonic: str  # with modifiers: "dpas.8x8", "send.ugm"
    exec_size: int | None  # the N of "(N|M0)"
    operands: str  # operand text, without the {swsb} and the comment
    message: str | None = None  # for sends: IGA's decoded message, e.g. "load_block2d.ugm.d16.a64"
    response_grfs: int | None = None  # for sends: registers written back ("rd:")

    @property
    def destination(self) -> str:
        """The first operand (``null`` for stores and prefetches)."""
        return self.operands.split()[0] if self.operands.split() else ""

    @property
    def is_null_destination(self) -> bool:
        """The destination is ``null`` (``null`` in a send, ``null:0`` in a dump's named message)."""
        return self.destination.split(":")[0] == "null"

    @property
    def is_workaround_dpas(self) -> bool:
        """A DPAS with no accumulator whose two multiplicands are the same register: IGC's dummy DPAS of the
        read-suppression workaround (module docstring), not a product of the kernel's."""
        if self.opcode != "dpas":
            return False
        parts = self.operands.split()
        if len(parts) < 4 or not parts[1].startswith("null"):
            return False
        regs = {re.sub(r"(\.\d+)?:\w+$", "", op) for op in (parts[2], parts[3])}
        return len(regs) == 1

    @property
    def operand_types(self) -> tuple[str, ...]:
        """Type suffixes in operand order, e.g. ``('f', 'f', 'bf', 'bf')`` for a bf16 ``dpas``."""
        return tuple(_OPERAND_TYPE.findall(self.operands))

    @property
    def message_kind(self) -> str | None:
        """``load_block2d``, ``prefetch_block2d``, ``store_block2d``, ``prefetch`` (any other load to
        null), ``store_block1d`` / ``load_block1d`` (a transposed SIMD1 store / load: a sub-group block
        write / read), ``load_payload`` (a transposed load from ``bti[255]``: IGC's prologue fetching the
        thread payload), ``scratch_read`` / ``scratch_write`` (register spill traffic), or else the LSC op
        (``load``, ``store``, ...)."""
        if self.message is None:
            return None
        op = self.message.split()[0].split(".")[0]
        if "scratch" in self.message or ".ss[" in self.message:  # scratch space: spills, private memory, stack
            return "scratch_write" if "write" in self.message or op == "store" else "scratch_read"
        to_null = self.is_null_destination
        if op == "load_block2d":
            return "prefetch_block2d" if to_null else "load_block2d"
        if op == "load" and to_null:
            return "prefetch"
        transposed = re.search(r"\.d\d+x\d+t\b", self.message)
        if op == "store" and transposed:
            return "store_block1d"
        if op == "load" and transposed:
            # Seen on pvc: the first sends of every kernel, ``load.ugm.d32x32t.a32.ca.ca.bti[255]`` from the
            # payload pointer r255, before any kernel code; a sub-group block read of a buffer uses the
            # buffer's own binding (``bti[0]``...) or a64 addresses (dg2: ``load.ugm.d32x8t.a32...bti[0]``).
            return "load_payload" if "bti[255]" in self.message else "load_block1d"
        return op


def parse_instructions(asm: str) -> list[Instruction]:
    """Every instruction of one kernel's IGA disassembly (labels, comments and blank lines skipped).

    A zebin kernel (ocloc 26.x) is padded with zero bytes after its last instruction, which IGA decodes as
    ``illegal`` instructions (ten after a 389-instruction kernel, whose dump says ``//.instCount 389``):
    those trailing ones are not code and are dropped."""
    out = _parse_lines(asm)
    while out and out[-1].opcode == "illegal":
        out.pop()
    return out


def _parse_lines(asm: str) -> list[Instruction]:
    out = []
    for line in asm.splitlines():
        if not line.strip() or line.lstrip().startswith("//") or _LABEL.match(line):
            continue
        code, _, comment = line.partition("//")
        m = _INSTRUCTION.match(code)
        if not m:
            continue
        mnemonic = m["mnemonic"]
        opcode = mnemonic.split(".")[0]
        operands = m["rest"].split("{")[0].strip()
        message = rd = None
        if opcode in SEND_OPCODES:
            sc = _SEND_COMMENT.search(comment)
            if sc:
                message, rd = sc["message"], int(sc["rd"])
        elif is_named_message(opcode):
            message = f"{mnemonic} {operands}"
            first = operands.split()[0] if operands.split() else ""
            named = _NAMED_RESPONSE.match(first)
            rd = int(named.group(1)) if named else 0
        out.append(Instruction(opcode=opcode, mnemonic=mnemonic,
                               exec_size=int(m["exec"]) if m["exec"] else None,
                               operands=operands, message=message, response_grfs=rd))
    return out


_HEADER_DWORD7 = re.compile(r"^(r\d+)\.7<\d+>:\w+$")
_IMMEDIATE = re.compile(r"^(-?(?:0x[0-9A-Fa-f]+|[0-9.]+(?:e[-+]?\d+)?)):(\w+)$")


_DENORMAL_UNIT = 2.0 ** -149  # the smallest float32 denormal


def _immediate_bits(text: str) -> int | None:
    """The 32 bits of an immediate operand; None if not an immediate or not recoverable."""
    m = _IMMEDIATE.match(text)
    if not m:
        return None
    value, typ = m.groups()
    if typ != "f" or value.lstrip("-").lower().startswith("0x"):   # IGA prints some :f immediates as their bits
        return int(value, 0) & 0xFFFFFFFF
    # IGA prints a header dword moved as :f as a float with 6 significant digits (e.g. 0x1070F ->
    # 9.43676e-41, a denormal): the bits are recoverable only while half a unit of the last printed digit
    # stays below half a denormal step; otherwise several bit patterns print alike.
    mantissa, _, exponent = value.lower().partition("e")
    digits = len(mantissa.replace("-", "").replace(".", "").lstrip("0")) or 1
    last_digit = 10.0 ** (int(exponent or 0) - (digits - 1) + (len(mantissa.split(".")[0].lstrip("-")) - 1))
    if abs(float(value)) < 2.0 ** -126 and last_digit / 2 >= _DENORMAL_UNIT / 2:
        return None
    return struct.unpack("<I", struct.pack("<f", float(value)))[0]


def block2d_shapes(instructions: list[Instruction]) -> list[tuple[Instruction, tuple[int, int, int] | None]]:
    """Each 2D block send with its block (width, height, count), read from the immediate the kernel moves
    into dword 7 of the message header (width-1 in bits 7:0, height-1 in 15:8, count-1 in 19:16 —
    decoded here from IGC's own headers: transform_u8_k32 -> 0x1F0F = 16 wide, 32 high, 1 block;
    transpose_u32_k8 -> 0xF07 = 8 wide, 16 high).  None where the header is not set by an immediate."""
    header7: dict[str, int | None] = {}
    out = []
    for ins in instructions:
        parts = ins.operands.split()
        if ins.opcode in SEND_OPCODES:
            if ins.message and ins.message.split(".")[0] in ("load_block2d", "store_block2d"):
                bits = header7.get(parts[1]) if len(parts) > 1 else None
                shape = None if bits is None else ((bits & 0xFF) + 1, ((bits >> 8) & 0xFF) + 1,
                                                   ((bits >> 16) & 0xF) + 1)
                out.append((ins, shape))
            continue
        if not parts:
            continue
        dest = parts[0]
        m = _HEADER_DWORD7.match(dest)
        if m:
            header7[m.group(1)] = _immediate_bits(parts[1]) if ins.opcode == "mov" and len(parts) > 1 else None
        else:
            reg = re.match(r"^(r\d+)", dest)
            if reg and (ins.exec_size or 1) > 1:  # a vector write may overwrite the whole header
                header7.pop(reg.group(1), None)
    return out


@dataclass(frozen=True)
class ShaderDump:
    """The header of one IGC ``.asm`` dump (one compiled variant of one kernel)."""

    file: str
    kernel: str
    platform: str | None
    num_grf: int | None
    inst_count: int | None
    spill_size: int  # the raw "//.spill size N" (0 if absent): spills or a stack-call frame
    ra_type: str | None  # "//.RA type ...", e.g. GRAPH_COLORING_SPILL_FF_RA
    spilled: bool  # the allocator spilled: SPILL RA type or a "//.spill GRF est. ref count" line
    simd: int | None  # from the file name (..._simd16_entry_0001.asm)
    retry: int  # 0 for the first compile, N for the "_N_simd" retry dumps
    text: str = field(default="", repr=False, compare=False)   # the whole dump: its listing is the machine code

    @property
    def spill_bytes(self) -> int:
        """Register spill space in bytes (0 unless the allocator really spilled)."""
        return self.spill_size if self.spilled else 0


def parse_shader_dump(file: str, text: str) -> ShaderDump | None:
    """Read the header fields of an IGC ``.asm`` dump; None if the text is not one."""
    kernel = re.search(r"^//\.kernel (\S+)", text, re.M)
    if not kernel:
        return None

    def number(pattern: str) -> int | None:
        found = re.search(pattern, text, re.M)
        return int(found.group(1)) if found else None

    platform = re.search(r"^//\.platform (\S+)", text, re.M)
    ra_type = re.search(r"^//\.RA type\s+(\S+)", text, re.M)
    spilled = bool(ra_type and "SPILL" in ra_type.group(1)) or bool(re.search(r"^//\.spill GRF", text, re.M))
    simd = re.search(r"_simd(\d+)_", file)
    retry = re.search(r"_(\d+)_simd\d+_", file)
    return ShaderDump(file=file, kernel=kernel.group(1), platform=platform.group(1) if platform else None,
                      num_grf=number(r"^//\.thread_config numGRF=(\d+)"),
                      inst_count=number(r"^//\.instCount (\d+)"),
                      spill_size=number(r"^//\.spill size (\d+)") or 0,
                      ra_type=ra_type.group(1) if ra_type else None, spilled=spilled,
                      simd=int(simd.group(1)) if simd else None,
                      retry=int(retry.group(1)) if retry else 0, text=text)


# The message kinds xegemm counts in machine code and predicts from a plan: one vocabulary for the native
# lowering's messages (xegemm.lowering.native.Message.kind), the plan's predictions and these statistics.
MESSAGE_KINDS = ("load_block2d", "store_block2d", "prefetch_block2d", "load_block1d", "store_block1d", "prefetch")
STAT_KEYS = ("target", "grf", "instructions", "dpas", "load_block2d", "store_block2d", "prefetch_block2d",
             "sends", "spill_bytes")


@dataclass
class IsaStats:
    """ISA statistics of a binary (sums over kernels) or of one kernel (``kernels`` empty).

    ``grf`` and ``spill_bytes`` come from the matched IGC dump (None without one); ``dump_exact`` says
    whether the dump's ``instCount`` equalled the disassembly's instruction count."""

    target: str | None
    grf: int | None
    instructions: int
    dpas: int
    load_block2d: int
    store_block2d: int
    prefetch_block2d: int
    sends: int
    spill_bytes: int | None
    kernel: str | None = None
    dump_exact: bool | None = None
    dpas_workaround: int = 0   # IGC's dummy DPAS of the read-suppression workaround, not counted in ``dpas``
    messages: dict[str, int] = field(default_factory=dict)  # every send's message kind, counted
    kernels: dict[str, IsaStats] = field(default_factory=dict)
    conversions: dict[str, int] = field(default_factory=dict)   # CONVERSIONS, counted

    def to_dict(self) -> dict:
        """The statistics as a plain dict with exactly :data:`STAT_KEYS`."""
        return {key: getattr(self, key) for key in STAT_KEYS}

    @classmethod
    def from_dict(cls, data) -> IsaStats | None:
        """Statistics read back from :meth:`to_dict`'s data (a build.json row's ``isa``); a count the row lacks
        is None.  None when there are none (a variant that was never built)."""
        if not isinstance(data, dict) or not data:
            return None
        return cls(**{key: data.get(key) for key in STAT_KEYS})


def split_disassembly(disassembly: str | Mapping[str, str]) -> dict[str, str]:
    """Per-kernel asm from a mapping, or from text joined with :data:`KERNEL_HEADER` lines."""
    if isinstance(disassembly, Mapping):
        return dict(disassembly)
    parts = _KERNEL_HEADER_RE.split(disassembly)
    if len(parts) == 1:
        return {"kernel": disassembly}
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def _counts(instructions: list[Instruction]) -> tuple[int, int, dict[str, int]]:
    """(dpas of the kernel, IGC's workaround DPAS, every message kind counted) of one listing."""
    messages: dict[str, int] = {}
    for ins in instructions:
        if (ins.opcode in SEND_OPCODES or is_named_message(ins.opcode)) and ins.message_kind:
            messages[ins.message_kind] = messages.get(ins.message_kind, 0) + 1
    dpas = [i for i in instructions if i.opcode == "dpas"]
    workaround = sum(1 for i in dpas if i.is_workaround_dpas)
    return len(dpas) - workaround, workaround, messages


def _pick_dump(kernel: str, instructions: list[Instruction], dumps: list[ShaderDump]) -> tuple[ShaderDump | None, bool]:
    """The dump of the compiled variant in the binary, and whether it is exactly that machine code: its
    ``instCount`` or its listing's length is the disassembly's, and its listing has the same dpas and messages."""
    mine = [d for d in dumps if d.kernel == kernel]
    if not mine:
        return None, False
    want = _counts(instructions)

    def same(d: ShaderDump) -> bool:
        listed = parse_instructions(d.text) if d.text else []
        if d.inst_count != len(instructions) and len(listed) != len(instructions):
            return False
        return not listed or _counts(listed) == want

    exact = [d for d in mine if same(d)]
    if exact:
        return max(exact, key=lambda d: d.retry), True
    return max(mine, key=lambda d: d.retry), False  # no exact match: the last retry is the one IGC keeps


# Conversions of f32 values to the 16-bit DPAS types, as xegemm's kernels spell them and IGC (Debian's 1.0.12504,
# pvc) emits them, one SIMD instruction per value of a lane: to f16 (vstore_half_rte / convert_half_rte) a ``mov``
# to an :hf register from an :f one; to bf16 (templates/convert.cl.j2's xe_f32_to_bf16_rne, integer arithmetic)
# the one ``add``/``add3`` of 0x7fff, its round to nearest even.  A dequantizing kernel's prediction of them:
# xegemm.evaluate.aot.predicted_counts.
CONVERSIONS = ("to_f16", "to_bf16")
_BF16_ROUNDING = 0x7FFF


def conversion_counts(instructions: list[Instruction]) -> dict[str, int]:
    """The :data:`CONVERSIONS` of SIMD (more than one lane) instructions."""
    counts = dict.fromkeys(CONVERSIONS, 0)
    for ins in instructions:
        if (ins.exec_size or 1) < 2:
            continue
        types = ins.operand_types
        if ins.opcode == "mov" and len(types) >= 2 and types[0] == "hf" and types[1] == "f":
            counts["to_f16"] += 1
        elif ins.opcode in ("add", "add3") and any(_immediate_bits(op) == _BF16_ROUNDING for op in ins.operands.split()):
            counts["to_bf16"] += 1
    return counts


def kernel_stats(kernel: str, asm: str, dumps: list[ShaderDump], target: str | None = None,
                 grf: int | None = None) -> IsaStats:
    """Statistics of one kernel's disassembly, with GRF count and spills from its matching dump."""
    instructions = parse_instructions(asm)
    dpas, workaround, messages = _counts(instructions)
    dump, exact = _pick_dump(kernel, instructions, dumps)
    if dump is not None:
        target = target or (target_for_platform(dump.platform) if dump.platform else None)
        grf = dump.num_grf if dump.num_grf is not None else grf
    return IsaStats(
        target=target, grf=grf, instructions=len(instructions), dpas=dpas,
        load_block2d=messages.get("load_block2d", 0),
        store_block2d=messages.get("store_block2d", 0),
        prefetch_block2d=messages.get("prefetch_block2d", 0),
        sends=sum(1 for i in instructions if i.opcode in SEND_OPCODES or is_named_message(i.opcode)),
        spill_bytes=dump.spill_bytes if dump is not None else None,
        kernel=kernel, dump_exact=exact if dump is not None else None, messages=messages,
        conversions=conversion_counts(instructions), dpas_workaround=workaround)


def dump_kernel_stats(dump: ShaderDump, target: str | None = None, grf: int | None = None) -> IsaStats:
    """The same statistics read from an IGC dump's own listing (its named messages read as the sends they are),
    for a binary whose disassembly is not available; ``dump_exact`` is None (nothing to compare with)."""
    stats = kernel_stats(dump.kernel, dump.text, [], target or (target_for_platform(dump.platform)
                                                              if dump.platform else None), grf)
    stats.grf = dump.num_grf if dump.num_grf is not None else grf
    stats.spill_bytes = dump.spill_bytes
    return stats


def isa_stats(disassembly: str | Mapping[str, str], dumps: Mapping[str, str] | None = None, *,
              target: str | None = None, grf: int | None = None) -> IsaStats:
    """Statistics of a binary: per kernel in ``.kernels`` and summed at the top level.

    ``disassembly`` maps kernel name -> IGA asm (or is text joined with :data:`KERNEL_HEADER` lines);
    ``dumps`` maps dump file name -> text of IGC's ``.asm`` dumps.  The top-level ``grf`` is the largest
    kernel's numGRF; ``spill_bytes`` sums the kernels' spills (None if any kernel had no dump)."""
    parsed = [d for d in (parse_shader_dump(f, t) for f, t in (dumps or {}).items()) if d is not None]
    per_kernel = {name: kernel_stats(name, asm, parsed, target, grf)
                  for name, asm in split_disassembly(disassembly).items() if name != SYMBOL_TABLE_KERNEL}
    ks = list(per_kernel.values())
    messages: dict[str, int] = {}
    for k in ks:
        for kind, n in k.messages.items():
            messages[kind] = messages.get(kind, 0) + n
    grfs = [k.grf for k in ks if k.grf is not None]
    spills = [k.spill_bytes for k in ks]
    targets = {k.target for k in ks if k.target}
    return IsaStats(
        target=target or (targets.pop() if len(targets) == 1 else None),
        grf=max(grfs) if grfs else grf,
        instructions=sum(k.instructions for k in ks), dpas=sum(k.dpas for k in ks),
        load_block2d=sum(k.load_block2d for k in ks), store_block2d=sum(k.store_block2d for k in ks),
        prefetch_block2d=sum(k.prefetch_block2d for k in ks), sends=sum(k.sends for k in ks),
        spill_bytes=sum(spills) if spills and None not in spills else None,
        dump_exact=all(k.dump_exact for k in ks) if ks else None, messages=messages, kernels=per_kernel,
        conversions={kind: sum(k.conversions.get(kind, 0) for k in ks) for kind in CONVERSIONS},
        dpas_workaround=sum(k.dpas_workaround for k in ks))
