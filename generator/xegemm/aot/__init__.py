"""Ahead-of-time builds for real Xe GPUs with Intel's offline compiler ``ocloc``, and ISA statistics.

No Intel GPU is needed: ``compile_kernel`` builds OpenCL C for ``pvc`` (Xe-HPC) or ``dg2`` (Xe-HPG),
disassembles the binary and counts what the machine code really issues (``dpas``, 2D block loads /
stores / prefetches, sends, spills).  ``probe_compiler_capabilities`` records which 2D block builtin spellings
the installed compiler turns into real messages — an old compiler silently drops some
(docs/compilers.md "ocloc").
"""

from xegemm.aot.build import AotBuild, compile_kernel, compose_options
from xegemm.aot.builtins import Block2DBuiltin, declare_block2d_builtin, parse_block2d_builtin
from xegemm.aot.errors import (
    AotError,
    BuiltinNameError,
    IgaMissingError,
    OclocMissingError,
    OclocToolError,
    CapabilitiesError,

)
from xegemm.aot.isa import Instruction, IsaStats, ShaderDump, isa_stats, parse_instructions, parse_shader_dump
from xegemm.aot.capabilities import (
    NAMED_CAPABILITIES,
    CompilerCapabilities,
    ProbeResult,
    compiler_capabilities,
    load_capabilities,
    probe_compiler_capabilities,
)
from xegemm.aot.toolchain import CompilerVersion, aot_target, compiler_version, find_ocloc
from xegemm.library.targets import UnknownTargetError

__all__ = [
    "AotBuild", "AotError", "Block2DBuiltin", "BuiltinNameError", "CompilerCapabilities", "CompilerVersion",
    "IgaMissingError", "Instruction", "IsaStats", "NAMED_CAPABILITIES", "OclocMissingError",
    "OclocToolError", "ProbeResult", "CapabilitiesError", "ShaderDump", "UnknownTargetError",
    "aot_target", "compile_kernel", "compiler_capabilities", "compiler_version", "compose_options", "declare_block2d_builtin",
    "find_ocloc", "isa_stats", "load_capabilities", "parse_block2d_builtin", "parse_instructions",
    "parse_shader_dump", "probe_compiler_capabilities",
]
