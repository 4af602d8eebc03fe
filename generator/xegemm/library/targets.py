"""The target registry: every Xe GPU xegemm generates for, in one table that everything else reads.

A :class:`Target` holds what the planner, the atom rules, the lowerings and the ahead-of-time builds need to
know of one GPU: DPAS execution size (= the sub-group size of its DPAS builtins) and register width
(docs/atoms.md §3.1), whether it has 2D block messages (docs/atoms.md §2 "platforms"), which DPAS input types
and accumulators it has (OCLMMA, OCLTF32; docs/atoms.md §3.1), the GRF modes, the sub-group limit
per work-group, the OpenCL extensions a driver for it reports, and how Intel's offline compiler ``ocloc``
and IGC's dumps name it (docs/compilers.md "ocloc").  Adding a target is one entry in
:data:`TARGETS` plus its tests.
"""

from __future__ import annotations

from dataclasses import dataclass

from xegemm.errors import XegemmError

# OpenCL extensions that decide what a device can run (names from the Khronos/Intel extension specs)
EXT_2D_BLOCK_IO = "cl_intel_subgroup_2d_block_io"                   # 2D block reads, writes, prefetches
EXT_EXTENDED_BLOCK_READ = "cl_intel_subgroup_extended_block_read"   # older drivers: 2D block reads only
EXT_DPAS = "cl_intel_subgroup_matrix_multiply_accumulate"
EXT_DPAS_TF32 = "cl_intel_subgroup_matrix_multiply_accumulate_tf32"
EXT_SUBGROUPS = "cl_intel_subgroups"                                # 1D sub-group block IO of uint, shuffles
EXT_REQD_SUBGROUP = "cl_intel_required_subgroup_size"
CAPABILITY_EXTENSIONS = (EXT_2D_BLOCK_IO, EXT_EXTENDED_BLOCK_READ, EXT_DPAS, EXT_DPAS_TF32, EXT_SUBGROUPS,
                         EXT_REQD_SUBGROUP)
EXT_FP16 = "cl_khr_fp16"
# 1D sub-group block reads and writes by chunk bits: cl_intel_subgroups and its _char, _short, _long companions
SUBGROUP_BLOCK_EXTENSIONS = {8: "cl_intel_subgroups_char", 16: "cl_intel_subgroups_short", 32: EXT_SUBGROUPS,
                             64: "cl_intel_subgroups_long"}

GRF_MODES = (128, 256)                          # registers per thread: small and large GRF mode
HW_THREADS = {128: 8, 256: 4}                    # hardware threads per vector engine in each GRF mode


class UnknownTargetError(XegemmError):
    """A target name, or a GRF mode, that the registry does not know."""


@dataclass(frozen=True)
class Target:
    """One Xe GPU: ISA facts, DPAS types, and the names tools use for it."""

    name: str                      # our short name: pvc, bmg, dg2
    arch: str                      # Xe-HPC, Xe2, Xe-HPG
    simd: int                      # DPAS execution size N = the sub-group size of its DPAS builtins
    grf_bytes: int                 # register width
    block2d: bool                  # hardware 2D block messages
    dpas_inputs: tuple[str, ...]   # DPAS input types (xegemm.library.dtypes names)
    half_accumulators: bool        # bf16/f16 DPAS may accumulate in bf16/f16 (SIMD16 only, OCLMMA)
    ocloc_device: str | None       # ``ocloc -device`` spelling; None: Debian's ocloc does not know it
    platform_prefix: str           # how IGC's dumps spell the platform (``//.platform PVCXT``)
    extensions: tuple[str, ...]    # what a driver for it reports (of CAPABILITY_EXTENSIONS)
    max_subgroups_per_workgroup: int = 32   # Xe: up to 32 sub-groups (threads) per work-group
    l2_bytes: int = 16 << 20       # the L2 the work-groups share (the static model's cache, xegemm.tune.model)
    grf_modes: tuple[int, ...] = GRF_MODES


_SIMD16_INPUTS = ("bf16", "f16", "tf32", "s8", "u8", "s4", "u4")
TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("pvc", "Xe-HPC", simd=16, grf_bytes=64, block2d=True, dpas_inputs=_SIMD16_INPUTS,
           half_accumulators=True, ocloc_device="pvc", platform_prefix="PVC",
           extensions=(EXT_2D_BLOCK_IO, EXT_DPAS, EXT_DPAS_TF32, EXT_SUBGROUPS, EXT_REQD_SUBGROUP),
           l2_bytes=204 << 20),   # one stack of a Max 1550 (408 MB over two stacks)
    # Xe2 (Battlemage, Lunar Lake): same DPAS width and 2D block IO as pvc; Debian's ocloc 22.43 predates it.
    Target("bmg", "Xe2", simd=16, grf_bytes=64, block2d=True, dpas_inputs=_SIMD16_INPUTS,
           half_accumulators=True, ocloc_device=None, platform_prefix="BMG",
           extensions=(EXT_2D_BLOCK_IO, EXT_DPAS, EXT_DPAS_TF32, EXT_SUBGROUPS, EXT_REQD_SUBGROUP),
           l2_bytes=18 << 20),    # Arc B580
    # ocloc 22.43 accepts dg2-g10, acm-g10 and the deprecated dg2 (all the same binary, *_XE_HPG_COREdg2.bin).
    # SIMD8 DPAS without tf32 and with float accumulators only (OCLMMA, OCLTF32); no 2D block messages.
    Target("dg2", "Xe-HPG", simd=8, grf_bytes=32, block2d=False, dpas_inputs=("bf16", "f16", "s8", "u8", "s4", "u4"),
           half_accumulators=False, ocloc_device="dg2-g10", platform_prefix="DG2",
           extensions=(EXT_DPAS, EXT_SUBGROUPS, EXT_REQD_SUBGROUP), l2_bytes=16 << 20),   # Arc A770
)}
AOT_TARGETS = tuple(t.name for t in TARGETS.values() if t.ocloc_device)   # what `xegemm build --target` takes


def get_target(name: str) -> Target:
    """The :class:`Target` called ``name``."""
    try:
        return TARGETS[name]
    except KeyError:
        raise UnknownTargetError(f"unknown target {name!r}; known: {', '.join(TARGETS)}") from None


def targets_at(simd: int) -> tuple[Target, ...]:
    """The targets whose DPAS executes at sub-group size ``simd``."""
    return tuple(t for t in TARGETS.values() if t.simd == simd)


def dpas_widths() -> tuple[int, ...]:
    """Every DPAS execution size some target has, widest first (16, 8)."""
    return tuple(sorted({t.simd for t in TARGETS.values()}, reverse=True))


def names_at(simd: int) -> tuple[str, ...]:
    """Target names at sub-group size ``simd`` (``("pvc", "bmg")`` for 16)."""
    return tuple(t.name for t in targets_at(simd))


def check_grf(grf: int) -> int:
    """Validate a GRF mode (128 or 256 registers per thread)."""
    if grf not in GRF_MODES:
        raise UnknownTargetError(f"GRF mode must be one of {GRF_MODES}, not {grf!r}")
    return grf


def target_for_platform(platform: str) -> str | None:
    """Our target name for a dump's ``//.platform`` value (``PVCXT`` -> ``pvc``), or None."""
    for target in TARGETS.values():
        if platform.upper().startswith(target.platform_prefix):
            return target.name
    return None
