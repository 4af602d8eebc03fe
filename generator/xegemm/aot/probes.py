"""The catalog of block-message spellings a compiler profile probes, and the probe program's source.

Each probe is one small sub-group-16 kernel that calls one spelling once and keeps its data alive; the
probe passes when the build succeeds AND the expected message appears in that kernel's ISA (an old IGC
builds some calls and silently drops them: docs/compilers.md "What Debian's IGC issues").  Spellings:

- IGC builtins ``__builtin_IB_subgroup_block_{read_flat,read_prefetch,write_flat}_*`` (grammar and shapes:
  docs/atoms.md §1.7; plain shapes kept to the hardware rules of §2: row <= 64 B, count <= 4/2/1 for
  1-2/4/8-byte elements, stores <= 8 rows);
- the public ``intel_sub_group_2d_block_*`` functions of ``cl_intel_subgroup_2d_block_io`` (docs/atoms.md
  §1.6: ``(global void* base, int width_bytes, int height, int pitch_bytes, int2 coord, private T* data)``);
- the ``cl_intel_subgroup_extended_block_read`` functions old IGC declares (docs/atoms.md §1.7);
- LSC prefetch ``__builtin_IB_lsc_prefetch_global_uint(ptr, offset, cache)`` and the 1D sub-group block
  write ``intel_sub_group_block_write8`` (docs/compilers.md "What Debian's IGC issues": a load to null, a ``store.ugm...t``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from xegemm.library.dtypes import CTYPE_BYTES, UNSIGNED_CTYPE
from xegemm.aot.builtins import SUB_GROUP, declare_block2d_builtin, parse_block2d_builtin

PLAIN_READ_HEIGHTS = (1, 2, 4, 8, 16, 32)
STORE_HEIGHTS = (1, 2, 4, 8)

# Surface of every probe: 64 B wide (the minimum), 32 rows, pitch 64 B (docs/atoms.md §2).
_WIDTH, _HEIGHT, _PITCH = 64, 32, 64
_IB_ARGS = f"(long)src, {_WIDTH - 1}, {_HEIGHT - 1}, {_PITCH - 1}, (int2)(0, 0)"
_PUBLIC_ARGS = f"(global void *)src, {_WIDTH}, {_HEIGHT}, {_PITCH}, (int2)(0, 0)"
_SINK = ("{ uint s_ = 0; for (uint i_ = 0; i_ < sizeof(X); ++i_) s_ += ((private uchar *)&(X))[i_]; "
         "dst[get_global_id(0)] = s_; }")
_LSC_PREFETCH = "__builtin_IB_lsc_prefetch_global_uint"


@dataclass(frozen=True)
class Probe:
    """One spelling to probe: what to call, which family it belongs to, what the ISA must show."""

    name: str
    family: str  # "ib_block2d", "2d_block_io", "extended_block_read", "lsc_prefetch", "block1d_write"
    message: str  # expected message kind (xegemm.aot.isa.Instruction.message_kind)
    payload_bytes: int = 0  # per sub-group, for reads: the responses must cover at least this much
    declaration: str = ""  # OpenCL C the kernel needs before the call ('' if the compiler declares it)
    body: str = ""  # kernel body; uses src (global uchar*) and dst (global uint*)
    shape: tuple[int, int, int] | None = None  # expected 2D block (width elems, height rows, count)
    elem_bits: int = 0
    layout: str = "plain"  # "plain", "transform" or "transpose"

    def kernel(self, kernel_name: str) -> str:
        """The probe's kernel (declaration first), sub-group size 16."""
        return (f"{self.declaration}\n__attribute__((intel_reqd_sub_group_size({SUB_GROUP})))\n"
                f"kernel void {kernel_name}(global uchar *src, global uint *dst) {{\n{self.body}\n}}\n")


def _ib_probe(name: str) -> Probe:
    b = parse_block2d_builtin(name)
    cache = ", 0" if b.cache_arg else ""
    if b.op == "read":
        body = f"  {b.lane_type} v = {name}({_IB_ARGS}{cache});\n  {_SINK.replace('X', 'v')}"
    elif b.op == "write":
        body = (f"  {b.lane_type} v = ((global {b.lane_type} *)src)[get_global_id(0)];\n"
                f"  {name}({_IB_ARGS.replace('src', 'dst')}, v{cache});")
    else:
        body = f"  {name}({_IB_ARGS}{cache});\n  dst[get_global_id(0)] = 1;"
    payload = b.height * b.width * b.count * b.elem_bits // 8 if b.op == "read" else 0
    return Probe(name, "ib_block2d", b.message, payload, declare_block2d_builtin(name), body,
                 (b.width, b.height, b.count), b.elem_bits, b.layout)


def _public_probe(op: str, bits: int, rows: int, cols: int, count: int) -> Probe:
    """``intel_sub_group_2d_block_{op}_{bits}b_{rows}r{cols}x{count}c`` (docs/atoms.md §1.6)."""
    name = f"intel_sub_group_2d_block_{op}_{bits}b_{rows}r{cols}x{count}c"
    total = rows * cols * count * bits // 8
    layout = {"read_transform": "transform", "read_transpose": "transpose"}.get(op, "plain")
    shape = dict(shape=(cols, rows, count), elem_bits=bits, layout=layout)
    if op == "prefetch":
        return Probe(name, "2d_block_io", "prefetch_block2d", 0, "",
                     f"  {name}({_PUBLIC_ARGS});\n  dst[get_global_id(0)] = 1;", **shape)
    # OCL2D: transforms/transposes fill uints; 8-bit reads/writes 32 wide move two bytes of a row per lane
    scalar = "uint" if op in ("read_transform", "read_transpose") and bits <= 32 else \
        "ushort" if bits == 8 and cols == 32 else UNSIGNED_CTYPE[bits]
    n = total // SUB_GROUP // CTYPE_BYTES[scalar]
    if op == "write":
        body = (f"  {scalar} buf[{n}];\n  for (int i = 0; i < {n}; ++i) "
                f"buf[i] = ((global {scalar} *)src)[get_global_id(0) * {n} + i];\n"
                f"  {name}({_PUBLIC_ARGS.replace('src', 'dst')}, buf);")
        return Probe(name, "2d_block_io", "store_block2d", 0, "", body, **shape)
    body = f"  {scalar} buf[{n}];\n  {name}({_PUBLIC_ARGS}, buf);\n  {_SINK.replace('X', 'buf')}"
    return Probe(name, "2d_block_io", "load_block2d", total, "", body, **shape)


def _extended_probe(suffix: str) -> Probe:
    """``intel_subgroup_block_read_<suffix>``: same shapes as ``__builtin_IB_subgroup_block_read_flat_<suffix>``."""
    b = parse_block2d_builtin(f"__builtin_IB_subgroup_block_read_flat_{suffix}")
    name = f"intel_subgroup_block_read_{suffix}"
    call = f"{name}({_PUBLIC_ARGS})"
    body = f"  __typeof__({call}) v = {call};\n  {_SINK.replace('X', 'v')}"
    return Probe(name, "extended_block_read", "load_block2d", b.lane_bytes * SUB_GROUP, "", body,
                 (b.width, b.height, b.count), b.elem_bits, b.layout)


def _plain_read_names() -> list[str]:
    names = []
    for bits in (8, 16, 32):
        for k in ((8, 16) if bits == 32 else (16, 32)):   # u32 k8: tf32's 8-wide blocks (XE_2D_TF32x32x16_LD_N)
            for v in (1, 2):
                row = k * bits // 8 * v
                max_count = 2  # counts to 4 (1-2 byte data), 2 (4-byte); v4 is not probed
                if row > 64 or v > max_count:
                    continue
                names += [f"__builtin_IB_subgroup_block_read_flat_u{bits}_m{h}k{k}v{v}" for h in PLAIN_READ_HEIGHTS]
    return names


def probe_catalog() -> list[Probe]:
    """Every probe, in a fixed order."""
    ib = _plain_read_names()
    ib += [f"__builtin_IB_subgroup_block_read_flat_transform_{s}" for s in ("u16_k16", "u16_k32", "u16_k32v2", "u8_k32")]
    # d32 transposes 8 and 4 wide (the 4-wide one: XE_2D_U16x16x8_LD_T and XE_2D_U4x16x32_LD_T, which IGC 2.x
    # issues and Debian's IGC widens to 8; docs/compilers.md "The current compiler")
    ib += ["__builtin_IB_subgroup_block_read_flat_transpose_u32_k8", "__builtin_IB_subgroup_block_read_flat_transpose_u32_k4"]
    ib += [f"__builtin_IB_subgroup_block_read_prefetch_{s}" for s in ("u16_m8k16v1", "u16_m32k16v2", "u8_m32k32v2")]
    ib += [f"__builtin_IB_subgroup_block_write_flat_u8_m{h}k{k}v1" for k in (16, 32) for h in STORE_HEIGHTS]
    ib += [f"__builtin_IB_subgroup_block_write_flat_u{b}_m{h}k16v1" for b in (16, 32) for h in STORE_HEIGHTS]
    probes = [_ib_probe(n) for n in ib]
    probes += [_public_probe(*spec) for spec in (
        ("read", 8, 8, 32, 2), ("read", 16, 8, 16, 1), ("read", 16, 32, 16, 2), ("read", 32, 8, 16, 1),
        ("read_transform", 16, 32, 16, 1), ("read_transform", 8, 32, 16, 1), ("read_transpose", 32, 16, 8, 1),
        ("write", 16, 8, 16, 1), ("write", 32, 8, 16, 1), ("prefetch", 16, 32, 16, 2))]
    probes += [_extended_probe(s) for s in ("u16_m8k16v2", "u8_m8k32v2", "transform_u16_k16", "transform_u8_k32",
                                            "transpose_u32_k8")]
    probes.append(Probe(_LSC_PREFETCH, "lsc_prefetch", "prefetch", 0,
                        f"void {_LSC_PREFETCH}(const global uint *base, int offset, int cache_control);",
                        f"  {_LSC_PREFETCH}((const global uint *)src, 0, 0);\n  dst[get_global_id(0)] = 1;"))
    probes.append(Probe("intel_sub_group_block_write8", "block1d_write", "store_block1d", 0, "",
                        "  uint8 v = vload8(get_global_id(0), (global uint *)src);\n"
                        "  intel_sub_group_block_write8((global uint *)dst, v);"))
    return probes


def catalog_digest(probes: list[Probe]) -> str:
    """A short hash of the catalog, stored with cached profiles so a changed catalog re-probes."""
    h = hashlib.sha256()
    for p in probes:
        h.update(f"{p.name}|{p.family}|{p.message}|{p.payload_bytes}|{p.shape}|{p.body}\n".encode())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class ProbeProgram:
    """A program holding one kernel per probe, with each probe's source line range for error blame."""

    source: str
    kernels: dict[str, Probe]  # kernel name -> probe
    lines: dict[str, tuple[int, int]]  # kernel name -> (first, last) 1-based source lines


def probe_program(probes: list[Probe]) -> ProbeProgram:
    """One OpenCL C program with a kernel ``probe_NNN`` per probe."""
    chunks = ["// xegemm compiler-profile probe: one kernel per block-message spelling\n"]
    line = chunks[0].count("\n") + 1
    kernels, lines = {}, {}
    for i, probe in enumerate(probes):
        kname = f"probe_{i:03d}"
        text = probe.kernel(kname)
        kernels[kname] = probe
        lines[kname] = (line, line + text.count("\n") - 1)
        line += text.count("\n")
        chunks.append(text)
    return ProbeProgram("".join(chunks), kernels, lines)


__all__ = ["Probe", "ProbeProgram", "catalog_digest", "probe_catalog", "probe_program"]
