"""The x86 code path the Intel OpenCL CPU runtime generates, and the vector registers it has.

The runtime compiles for the host's widest instruction set unless ``CL_CONFIG_CPU_TARGET_ARCH`` names another
(``core-avx2`` gives the AVX2 code an AVX2-only host runs; docs/compilers.md "The Intel OpenCL CPU runtime").  A sub-group's
lanes sit side by side in vector registers, so what fits in registers, and runs fast, depends on the path:
32 registers of 16 floats on AVX-512, 16 of 8 on AVX2.  The tuner's static model reads this
(xegemm.model.static); the reports record the path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

TARGET_ARCH_VARIABLE = "CL_CONFIG_CPU_TARGET_ARCH"


@dataclass(frozen=True)
class CpuCodePath:
    """One x86 vector instruction set: its name, vector registers and 32-bit lanes per register."""

    name: str
    vector_registers: int
    f32_lanes: int


PATHS = {
    "avx512": CpuCodePath("avx512", 32, 16),
    "avx2": CpuCodePath("avx2", 16, 8),
    "avx": CpuCodePath("avx", 16, 8),
    "sse4.2": CpuCodePath("sse4.2", 16, 4),
}
# CL_CONFIG_CPU_TARGET_ARCH values (LLVM CPU names) -> path; checked in this order, as substrings
_ARCH_WORDS = (("avx512", "avx512"), ("skx", "avx512"), ("icelake", "avx512"), ("sapphirerapids", "avx512"),
               ("avx2", "avx2"), ("haswell", "avx2"), ("corei7-avx", "avx"), ("corei7", "sse4.2"))


def cpuinfo_fields(cpuinfo: str | None = None) -> dict[str, str]:
    """The first CPU's ``key: value`` fields of ``/proc/cpuinfo`` (or of its text; empty if unreadable)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return {}
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    return fields


def host_flags(cpuinfo: str | None = None) -> set[str]:
    """The instruction-set flags of the host's first CPU."""
    return set(cpuinfo_fields(cpuinfo).get("flags", "").split())


def cpu_code_path(environ=None, flags: set[str] | None = None) -> CpuCodePath:
    """The path the CPU runtime generates in this process: ``CL_CONFIG_CPU_TARGET_ARCH`` if it names a known
    architecture, else the host's widest (AVX-512 needs avx512f; the runtime's AVX-512 path also uses BW/VL)."""
    arch = (os.environ if environ is None else environ).get(TARGET_ARCH_VARIABLE, "").lower()
    for word, path in _ARCH_WORDS:
        if word in arch:
            return PATHS[path]
    flags = host_flags() if flags is None else flags
    for flag, path in (("avx512f", "avx512"), ("avx2", "avx2"), ("avx", "avx")):
        if flag in flags:
            return PATHS[path]
    return PATHS["sse4.2"]
