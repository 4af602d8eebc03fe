"""The CPU code paths a benchmark measures, and the environment a process needs to run on one of them.

The Intel OpenCL CPU runtime generates AVX-512 code on a host that has it, AVX2 code with
``CL_CONFIG_CPU_TARGET_ARCH=core-avx2`` (what an AVX2-only host gets); it reads the variable when it starts,
so a code path is chosen per process.  The libraries a path is compared with are pinned to the same
instructions: OpenBLAS by ``OPENBLAS_CORETYPE`` (unset: its kernels for the real CPU), oneMKL by
``MKL_ENABLE_INSTRUCTIONS``.  On an AVX-512 host both paths are measured, elsewhere the AVX2 path only.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.blas_worker import OPENBLAS_VARIABLES
from xegemm.runtime.cpu_path import TARGET_ARCH_VARIABLE as TARGET_ARCH
from xegemm.runtime.cpu_path import cpuinfo_fields, host_flags

MKL_INSTRUCTIONS = "MKL_ENABLE_INSTRUCTIONS"


@dataclass(frozen=True)
class CodePath:
    """One CPU code path: the settings of the device runtime and of the reference libraries."""

    name: str
    cpu_target_arch: str | None        # CL_CONFIG_CPU_TARGET_ARCH; None: the runtime's choice for the host
    openblas_coretype: str | None      # OPENBLAS_CORETYPE; None: unset, OpenBLAS picks for the host
    mkl_instructions: str | None       # MKL_ENABLE_INSTRUCTIONS; None: unset

    def environment(self, base: dict) -> dict:
        """``base`` with this path's settings (the machine's own OpenBLAS overrides removed first)."""
        env = {k: v for k, v in base.items() if k not in (*OPENBLAS_VARIABLES, TARGET_ARCH, MKL_INSTRUCTIONS)}
        for name, value in ((TARGET_ARCH, self.cpu_target_arch), ("OPENBLAS_CORETYPE", self.openblas_coretype),
                            (MKL_INSTRUCTIONS, self.mkl_instructions)):
            if value is not None:
                env[name] = value
        return env

    def settings(self) -> dict:
        """The variables this path sets (None: unset), as results record them."""
        return {TARGET_ARCH: self.cpu_target_arch, "OPENBLAS_CORETYPE": self.openblas_coretype,
                MKL_INSTRUCTIONS: self.mkl_instructions}


AVX512 = CodePath("avx512", None, None, None)
AVX2 = CodePath("avx2", "core-avx2", "Haswell", "AVX2")
CODE_PATHS = {p.name: p for p in (AVX512, AVX2)}


def cpu_model(cpuinfo: str | None = None) -> dict:
    """The host CPU's model name, family and model number (``/proc/cpuinfo``)."""
    fields = cpuinfo_fields(cpuinfo)
    wanted = {"model name": "name", "cpu family": "family", "model": "model"}
    return {short: fields[key] for key, short in wanted.items() if key in fields}


def host_code_paths(flags: set[str] | None = None) -> tuple[list[CodePath], dict[str, str]]:
    """The code paths to measure on this host, and why any is left out."""
    flags = host_flags() if flags is None else flags
    if "avx512f" in flags:
        return [AVX512, AVX2], {}
    return [AVX2], {"avx512": "the host CPU has no AVX-512 (no avx512f in /proc/cpuinfo)"}
