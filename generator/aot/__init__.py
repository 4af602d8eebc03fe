"""Ahead-of-time builds for real Xe GPUs with Intel's offline compiler ``ocloc``, and ISA statistics.

No Intel GPU is needed: ``compile_kernel`` builds OpenCL C for ``pvc`` (Xe-HPC) or ``dg2`` (Xe-HPG),
disassembles the binary and counts what the machine code really issues (``dpas``, 2D block loads /
stores / prefetches, sends, spills).  ``probe_compiler_profile`` records which 2D block builtin spellings
the installed compiler turns into real messages — an old compiler silently drops some
(shared/facts/toolchain.md "ocloc").
"""

from xegemm.aot.build import AotBuild, compile_kernel, compose_options
from xegemm.aot.builtins import Block2DBuiltin, declare_block2d_builtin, parse_block2d_builtin
from xegemm.aot.errors import (
    AotError,
    BuiltinNameError,
    IgaMissingError,
    OclocMissingError,
    OclocToolError,
    ProfileError,
    UnknownTargetError,
)
from xegemm.aot.isa import Instruction, IsaStats, ShaderDump, isa_stats, parse_instructions, parse_shader_dump
from xegemm.aot.profile import (
    NAMED_PROFILES,
    CompilerProfile,
    ProbeResult,
    compiler_profile,
    load_profile,
    probe_compiler_profile,
)
from xegemm.aot.toolchain import GRF_MODES, TARGETS, CompilerVersion, Target, compiler_version, find_ocloc

__all__ = [
    "AotBuild", "AotError", "Block2DBuiltin", "BuiltinNameError", "CompilerProfile", "CompilerVersion",
    "GRF_MODES", "IgaMissingError", "Instruction", "IsaStats", "NAMED_PROFILES", "OclocMissingError",
    "OclocToolError", "ProbeResult", "ProfileError", "ShaderDump", "TARGETS", "Target", "UnknownTargetError",
    "compile_kernel", "compiler_profile", "compiler_version", "compose_options", "declare_block2d_builtin",
    "find_ocloc", "isa_stats", "load_profile", "parse_block2d_builtin", "parse_instructions",
    "parse_shader_dump", "probe_compiler_profile",
]
