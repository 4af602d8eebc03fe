"""The target registry: every Xe GPU xegemm generates for, in one table that everything else reads.

A :class:`Target` holds what the planner, the atom rules, the lowerings and the ahead-of-time builds need to
know of one GPU: DPAS execution size (= the sub-group size of its DPAS builtins) and register width
(docs/atoms.md §3.1), whether it has 2D block messages (docs/atoms.md §2 "platforms"), which DPAS input types
and accumulators it has (OCLMMA, OCLTF32; docs/atoms.md §3.1), the GRF modes, the sub-group limit
per work-group, the OpenCL extensions a driver for it reports, and how Intel's offline compiler ``ocloc``
and IGC's dumps name it (docs/compilers.md "ocloc"), and which of the two offline compilers can build for it:
Debian 12's (``system``: ocloc 22.43 / IGC 1.0.12504, Xe-HPC and Xe-HPG only) and the current one
(``current``: ocloc 26.x / IGC 2.x, also Xe2 and Xe3; docs/compilers.md "The current compiler").  Adding a
target is one entry in :data:`TARGETS` plus its tests (tests/test_targets.py checks every entry's invariants).
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

# The offline compilers by the names xegemm.aot.toolchain.find_ocloc takes; their versions decide nothing here.
SYSTEM_COMPILER, CURRENT_COMPILER = "system", "current"
COMPILER_NAMES = (SYSTEM_COMPILER, CURRENT_COMPILER)

GRF_MODES = (128, 256)                          # registers per thread: small and large GRF mode
# the lowerings' names (xegemm.lowering defines each one; a config may pin one: target.lowering)
LOWERING_NAMES = ("portable", "native", "coopmat")
HW_THREADS = {128: 8, 256: 4}                    # hardware threads per vector engine in each GRF mode


class UnknownTargetError(XegemmError):
    """A target name, or a GRF mode, that the registry does not know."""


@dataclass(frozen=True)
class Target:
    """One Xe GPU: ISA facts, DPAS types, and the names tools use for it."""

    name: str                      # our short name: pvc, bmg, lnl, ptl, dg2
    arch: str                      # Xe-HPC, Xe2, Xe3, Xe-HPG
    simd: int                      # DPAS execution size N = the sub-group size of its DPAS builtins
    grf_bytes: int                 # register width
    block2d: bool                  # hardware 2D block messages
    dpas_inputs: tuple[str, ...]   # DPAS input types (xegemm.library.dtypes names)
    half_accumulators: bool        # bf16/f16 DPAS may accumulate in bf16/f16 (SIMD16 only, OCLMMA)
    # compiler name (:data:`COMPILER_NAMES`) -> its ``ocloc -device`` spelling, for the compilers that know the
    # target; a compiler named by its path takes the first spelling it lists in ``ocloc compile --help``
    ocloc_devices: tuple[tuple[str, str], ...]
    platforms: tuple[str, ...]     # how IGC's dumps spell the platform (``//.platform PVCXT``), as prefixes
    extensions: tuple[str, ...]    # what a driver for it reports (of CAPABILITY_EXTENSIONS)
    subgroup_sizes: tuple[int, ...] = (16, 32)   # the required sub-group sizes its compilers accept
    max_subgroups_per_workgroup: int = 32   # Xe: up to 32 sub-groups (threads) per work-group
    l2_bytes: int = 16 << 20       # the L2 the work-groups share (the static model's cache, xegemm.model.static)
    grf_modes: tuple[int, ...] = GRF_MODES
    part: str | None = None        # the product (:data:`PARTS`) the calibrated model predicts for by default
    igc_core: str = ""             # compute-runtime's / IGC's core family (GFXCORE_FAMILY), e.g. IGFX_XE2_HPG_CORE
    sources: str = ""              # where the facts of this entry come from (public)
    ocloc_device: str | None = None   # the spelling of the compiler a build uses: set by xegemm.aot.toolchain.aot_target

    @property
    def compilers(self) -> tuple[str, ...]:
        """The named compilers that build for this target (``("system", "current")`` or ``("current",)``)."""
        return tuple(name for name, _ in self.ocloc_devices)

    def device_for(self, compiler: str) -> str | None:
        """The ``ocloc -device`` spelling of a named compiler, or None if that compiler does not know the target."""
        return dict(self.ocloc_devices).get(compiler)

    @property
    def platform_prefix(self) -> str:
        """The dumps' platform name of the current compiler (the first of :attr:`platforms`)."""
        return self.platforms[0]


@dataclass(frozen=True)
class Part:
    """One product of a target, as the calibrated static model (xegemm.model.static.predict_tflops) needs it:
    Xe-cores, the dense 16-bit DPAS peak (8-bit and 4-bit DPAS do 2x and 4x the operations per instruction,
    tf32 half: the atoms' K, docs/atoms.md §3.1), the DRAM bandwidth and the L2.  Every figure is a
    published one with its source (docs/benchmarks.md, "The static model against published numbers")."""

    name: str
    target: str
    xe_cores: int                  # compute units the work-groups spread over (8 vector engines each)
    bf16_tflops: float             # dense bf16/f16 XMX peak, TFLOP/s
    memory_gbs: float              # DRAM bandwidth, GB/s
    l2_bytes: int
    source: str
    device_name: str = ""          # what the product's device name contains (``Max 1550``), for part_for_device


# Peaks: 419.43 TFLOP/s = 512 XMX x 512 flop/clk x 1.6 GHz is one stack of a Max 1550 (two stacks, 128 Xe-cores
# and 3276.8 GB/s per card; 64 Xe-cores, 1638.4 GB/s and 204 MB of L2 per stack); 116.74 = 160 XMX x 256 flop/clk
# x 2.85 GHz for the B580.  Sources: the Intel XPU Triton backend's benchmark GPU table (gpu_info.json:
# github.com/intel/intel-xpu-backend-for-triton), torchtitan's get_peak_flops (github.com/pytorch/torchtitan,
# torchtitan/tools/utils.py), glennklockwood.com/garden/processors/pvc (stacks, Xe-cores), Intel's B580
# launch figures (233 INT8 TOPS, 456 GB/s); the Arc Pro B60: 98.3 TFLOP/s fp16, 197 INT8 TOPS, 456 GB/s
# (github.com/ai-dynamo/aiconfigurator/pull/246).
PARTS: dict[str, Part] = {p.name: p for p in (
    Part("max1550", "pvc", xe_cores=64, bf16_tflops=419.43, memory_gbs=1638.4, l2_bytes=204 << 20,
         source="Max 1550, one stack of two: 419.43 TFLOP/s bf16 (512 XMX x 512 flop/clk x 1.6 GHz), "
                "3276.8 GB/s per card / 2; intel-xpu-backend-for-triton gpu_info.json, pytorch/torchtitan",
         device_name="Max 1550"),
    Part("max1100", "pvc", xe_cores=56, bf16_tflops=355.53, memory_gbs=1228.8, l2_bytes=108 << 20,
         source="Max 1100: 355.53 TFLOP/s bf16, 1228.8 GB/s (intel-xpu-backend-for-triton gpu_info.json), "
                "108 MB L2 (Intel's product page)",
         device_name="Max 1100"),
    Part("b580", "bmg", xe_cores=20, bf16_tflops=116.74, memory_gbs=456.0, l2_bytes=18 << 20,
         source="Arc B580: 116.74 TFLOP/s bf16 (160 XMX x 256 flop/clk x 2.85 GHz), 456 GB/s; "
                "intel-xpu-backend-for-triton gpu_info.json, Intel's launch figures",
         device_name="B580"),
    Part("b60", "bmg", xe_cores=20, bf16_tflops=98.3, memory_gbs=456.0, l2_bytes=18 << 20,
         source="Arc Pro B60: 98.3 TFLOP/s fp16, 197 INT8 TOPS, 456 GB/s; github.com/ai-dynamo/aiconfigurator/pull/246",
         device_name="B60"),
)}


_SIMD16_INPUTS = ("bf16", "f16", "tf32", "s8", "u8", "s4", "u4")
_SIMD16_EXTENSIONS = (EXT_2D_BLOCK_IO, EXT_DPAS, EXT_DPAS_TF32, EXT_SUBGROUPS, EXT_REQD_SUBGROUP)
# Sources of the Xe2 and Xe3 entries: compute-runtime's core families (github.com/intel/compute-runtime:
# shared/source/xe2_hpg_core/ "XE2_HPG_CORE", shared/source/xe3_core/ "XE3_CORE"); MLIR's XeGPU uArch
# (llvm-project mlir/include/mlir/Dialect/XeGPU/uArch/IntelGpuXe2.h: sub-group size 16 for PVC and BMG);
# sycl-tla (github.com/intel/sycl-tla: README.md lists PVC and the Arc B580, arch tags Xe12 = PVC and Xe20 = BMG
# in include/cutlass/gemm/collective/builders/xe_mma_builder.inl, the 8x16x16 bf16/f16 DPAS at SIMD16); and
# what the current ocloc says and does, measured (docs/compilers.md "The current compiler": `ocloc compile
# --help` device names, the dumps' //.platform XE2 / XE3, numGRF=256 with -cl-intel-256-GRF-per-thread,
# sub-group 8 refused, 16 and 32 accepted, every 2D block message issued).
_XE2_SOURCES = ("compute-runtime shared/source/xe2_hpg_core/{bmg,lnl} (IGFX_XE2_HPG_CORE); llvm-project "
                "mlir/include/mlir/Dialect/XeGPU/uArch/IntelGpuXe2.h (sub-group 16); intel/sycl-tla README.md, "
                "xe_mma_builder.inl (Xe20 = BMG); ocloc 26.27 measured (docs/compilers.md)")
TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("pvc", "Xe-HPC", simd=16, grf_bytes=64, block2d=True, dpas_inputs=_SIMD16_INPUTS,
           half_accumulators=True, ocloc_devices=(("system", "pvc"), ("current", "pvc")), platforms=("PVC",),
           extensions=_SIMD16_EXTENSIONS, l2_bytes=204 << 20, part="max1550",   # one stack of a Max 1550
           igc_core="IGFX_XE_HPC_CORE",
           sources="docs/atoms.md §3.1 (XeTLA, OCLMMA, sycl-tla); ocloc 22.43 and 26.27 measured (docs/compilers.md)"),
    # Xe2 (Battlemage): same DPAS width and 2D block IO as pvc; Debian's ocloc 22.43 predates it.
    Target("bmg", "Xe2", simd=16, grf_bytes=64, block2d=True, dpas_inputs=_SIMD16_INPUTS,
           half_accumulators=True, ocloc_devices=(("current", "bmg"),), platforms=("XE2", "BMG"),
           extensions=_SIMD16_EXTENSIONS, l2_bytes=18 << 20, part="b580",    # Arc B580
           igc_core="IGFX_XE2_HPG_CORE", sources=_XE2_SOURCES),
    # Xe2 (Lunar Lake's integrated GPU): the Xe2 core of bmg; dumps name it XE2 too.  Without the large register
    # file ocloc gives it 128 registers (the shipped 256x256x32 variant then spills), so the builds say 256.
    Target("lnl", "Xe2", simd=16, grf_bytes=64, block2d=True, dpas_inputs=_SIMD16_INPUTS,
           half_accumulators=True, ocloc_devices=(("current", "lnl"),), platforms=("XE2", "LNL"),
           extensions=_SIMD16_EXTENSIONS,   # l2_bytes: the registry's default (no published figure recorded here)
           igc_core="IGFX_XE2_HPG_CORE (ocloc family xe2-lpg)", sources=_XE2_SOURCES),
    # Xe3 (Panther Lake's integrated GPU): DPAS and 2D block messages as Xe2 (every probe spelling issued, the
    # shipped kernels build with their planned messages); ocloc picks its register count per kernel unless told.
    Target("ptl", "Xe3", simd=16, grf_bytes=64, block2d=True, dpas_inputs=_SIMD16_INPUTS,
           half_accumulators=True, ocloc_devices=(("current", "ptl"),), platforms=("XE3", "PTL"),
           extensions=_SIMD16_EXTENSIONS,   # l2_bytes: the registry's default (no published figure recorded here)
           igc_core="IGFX_XE3_CORE (ocloc family xe3-lpg)",
           sources="compute-runtime shared/source/xe3_core/ptl (IGFX_XE3_CORE, \"XE3_CORE\"); ocloc 26.27 measured "
                   "(docs/compilers.md)"),
    # ocloc 22.43 accepts dg2-g10, acm-g10 and the deprecated dg2 (all the same binary, *_XE_HPG_COREdg2.bin).
    # SIMD8 DPAS without tf32 and with float accumulators only (OCLMMA, OCLTF32); no 2D block messages.
    Target("dg2", "Xe-HPG", simd=8, grf_bytes=32, block2d=False, dpas_inputs=("bf16", "f16", "s8", "u8", "s4", "u4"),
           half_accumulators=False, ocloc_devices=(("system", "dg2-g10"), ("current", "dg2-g10")),
           platforms=("DG2",), extensions=(EXT_DPAS, EXT_SUBGROUPS, EXT_REQD_SUBGROUP), l2_bytes=16 << 20,  # A770
           subgroup_sizes=(8, 16, 32), igc_core="IGFX_XE_HPG_CORE",
           sources="docs/atoms.md §3.1 (OCLMMA: N = 8); ocloc 22.43 and 26.27 measured (docs/compilers.md)"),
)}
AOT_TARGETS = tuple(TARGETS)      # what `xegemm build --target` takes (each with the compilers that know it)


def targets_of(compiler: str) -> tuple[str, ...]:
    """The targets a named compiler builds for."""
    return tuple(t.name for t in TARGETS.values() if t.device_for(compiler))


def get_target(name: str) -> Target:
    """The :class:`Target` called ``name``."""
    try:
        return TARGETS[name]
    except KeyError:
        raise UnknownTargetError(f"unknown target {name!r}; known: {', '.join(TARGETS)}") from None


def get_part(name: str) -> Part:
    """The :class:`Part` called ``name``."""
    try:
        return PARTS[name]
    except KeyError:
        raise UnknownTargetError(f"unknown part {name!r}; known: {', '.join(PARTS)}") from None


def part_for_device(name: str) -> str | None:
    """The :data:`PARTS` entry a device's name (as the driver reports it, ``Intel(R) Data Center GPU Max 1550``)
    names, or None."""
    return next((p.name for p in PARTS.values() if p.device_name and p.device_name in name), None)


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
    """Our target name for a dump's ``//.platform`` value (``PVCXT`` -> ``pvc``; ``XE2``, which the current
    compiler prints for bmg and lnl alike, -> the first Xe2 entry, ``bmg``), or None.  The longest matching prefix
    wins (``XE3P`` is not ``XE3``)."""
    matches = [(len(prefix), -i, target.name) for i, target in enumerate(TARGETS.values())
               for prefix in target.platforms if platform.upper().startswith(prefix)]
    return max(matches)[2] if matches else None
