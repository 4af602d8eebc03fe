"""A capability profile per compiler: what each offline compiler really issues, probed and cached per version.

IGC 2.x (the current compiler) writes two things the probe checks once misread (docs/compilers.md "The current
compiler"): a 32-register response encoded ``rd:31``, and a one-row read or a prefetch of two blocks issued as
one block twice as wide.  The unit tests below feed the checks the exact lines that compiler printed (and broken
variants of them, which must fail); the ``ocloc`` tests probe each installed compiler again and hold the measured
sets (``igc-1.0.12504``, ``igc-2.40.14``) that ``xegemm support`` shows to what the compilers do today.
"""

from __future__ import annotations

import shutil

import pytest

from xegemm.aot.capabilities import (
    COMPILER_CAPABILITIES,
    CURRENT_CAPABILITIES,
    DEBIAN_CAPABILITIES,
    _evaluate,
    load_capabilities,
    probe_compiler_capabilities,
)
from xegemm.aot.errors import CapabilitiesError
from xegemm.aot.probes import probe_catalog
from xegemm.aot.toolchain import current_ocloc
from xegemm.atoms import copy_atom_named
from xegemm.library.targets import get_target, targets_of
from xegemm.lowering.native import NativeUnsupported, lower_copy, native_capabilities

CATALOG = {p.name: p for p in probe_catalog()}
CURRENT_MISSING = ("the current Intel GPU compiler is not installed: run `sudo make ocloc-current` "
                   "(.ci/install-ocloc-current.sh, Debian unstable's ocloc into .tools)")
needs_current = pytest.mark.skipif(current_ocloc() is None, reason=CURRENT_MISSING)
needs_system = pytest.mark.skipif(shutil.which("ocloc") is None,
                                  reason="Debian's ocloc is not installed: sudo bash .ci/install-ocloc.sh")

# What ocloc 26.27 / IGC 2.40 disassembled for bmg (the probe kernels of the two spellings): the header's dword 7
# (width-1 | height-1 << 8 | count-1 << 16: 1.02977e-40 is 0x11F0F, 16 x 32 x 2) then the read.
READ_32_ROWS = ("(W)     mov (1|M0)               r4.7<1>:f     {header}:f\n"
                "        send.ugm (1|M0)          r7       r4  null:0  0x0            0x03F00203           "
                "{{A@1,$2}} // wr:1+0, rd:{rd}; load_block2d.ugm.d16.a64\n")
READ_ONE_ROW = ("(W)     mov (1|M0)               r6.7<1>:ud    {header}:uw\n"
                "        send.ugm (1|M0)          r5       r6  null:0  0x0            0x02100203           "
                "{{I@2,$2}} // wr:1+0, rd:1; load_block2d.ugm.d16.a64\n")




def test_a_32_register_response_written_31_is_32_registers():
    probe = CATALOG["__builtin_IB_subgroup_block_read_flat_u16_m32k16v2"]
    bmg = get_target("bmg")
    judged = _evaluate(probe, READ_32_ROWS.format(header="1.02977e-40", rd=31), bmg)
    assert judged.supported and judged.response_grfs == 32 and judged.shape == "16x32x2" and judged.exact
    # mutants: a response really one short, and a 16-row block (half the data) with the same rd:31
    short = _evaluate(probe, READ_32_ROWS.format(header="1.02977e-40", rd=30), bmg)
    assert not short.supported and "shrank" in short.detail
    half = _evaluate(probe, READ_32_ROWS.format(header="9.72375e-41", rd=31), bmg)   # 0x10F0F: 16 x 16 x 2
    assert half.shape == "16x16x2" and not half.supported


def test_two_one_row_blocks_as_one_block_twice_as_wide_are_the_asked_read():
    probe = CATALOG["__builtin_IB_subgroup_block_read_flat_u16_m1k16v2"]
    bmg = get_target("bmg")
    merged = _evaluate(probe, READ_ONE_ROW.format(header="0x1F"), bmg)               # 32 x 1 x 1
    assert merged.supported and merged.exact and merged.shape == "32x1x1" and "the same bytes" in merged.detail
    narrow = _evaluate(probe, READ_ONE_ROW.format(header="0xF"), bmg)                # 16 x 1 x 1: half the data
    assert not narrow.supported
    two_rows = _evaluate(CATALOG["__builtin_IB_subgroup_block_read_flat_u16_m2k16v2"],
                         READ_ONE_ROW.format(header="0x11F"), bmg)                   # 32 x 2 x 1: rows interleave
    assert not two_rows.supported


def test_each_compiler_has_its_measured_set_and_targets(no_overrides):
    assert COMPILER_CAPABILITIES == {"system": DEBIAN_CAPABILITIES, "current": CURRENT_CAPABILITIES}
    for target in targets_of("current"):
        caps = load_capabilities(CURRENT_CAPABILITIES, target)
        block2d = get_target(target).block2d
        assert caps.supports("__builtin_IB_subgroup_block_read_flat_transpose_u32_k4") == block2d
        assert caps.supports("__builtin_IB_subgroup_block_read_flat_u32_m32k8v2") == block2d
        assert caps.supports("__builtin_IB_lsc_prefetch_global_uint")
    with pytest.raises(CapabilitiesError, match="does not build for bmg"):
        load_capabilities(DEBIAN_CAPABILITIES, "bmg")


def test_the_native_lowering_issues_what_each_compiler_accepts(no_overrides):
    """The 4-wide d32 transpose (a column-major u4 B, a 16x8 d16 transpose) is one IGC builtin with the current
    compiler, which Debian's widens to 8 (so no split of it exists there) and the public names lack."""
    atom = copy_atom_named("XE_2D_U4x16x32_LD_T")
    (message,) = lower_copy(atom, native_capabilities(CURRENT_CAPABILITIES, "bmg"))
    assert message.builtin == "__builtin_IB_subgroup_block_read_flat_transpose_u32_k4"
    assert message.declaration.startswith("uint4 __builtin_IB_subgroup_block_read_flat_transpose_u32_k4(")
    for other in (DEBIAN_CAPABILITIES, "cl_intel_subgroup_2d_block_io"):
        with pytest.raises(NativeUnsupported, match="XE_2D_U4x16x32_LD_T"):
            lower_copy(atom, native_capabilities(other, "pvc"))


@pytest.mark.ocloc
@needs_current
@pytest.mark.parametrize("target", ["pvc", "bmg", "lnl", "ptl"])
def test_the_current_compilers_probe_is_its_measured_set(no_overrides, target, tmp_path):
    probed = probe_compiler_capabilities(target, cache_dir=tmp_path, compiler="current")
    named = load_capabilities(CURRENT_CAPABILITIES, target)
    assert probed.name.startswith("probed:ocloc-26") and "igc-2." in probed.name
    assert sorted(probed.supported) == sorted(named.supported), [r.detail for r in probed.results.values()
                                                                 if not r.supported]
    # cached per compiler version and target: the second call reads the file
    again = probe_compiler_capabilities(target, cache_dir=tmp_path, compiler="current")
    assert again.probe_seconds == probed.probe_seconds and len(list(tmp_path.iterdir())) == 1


@pytest.mark.ocloc
@needs_system
@needs_current
def test_each_compiler_is_probed_and_cached_apart(no_overrides, tmp_path):
    system = probe_compiler_capabilities("pvc", cache_dir=tmp_path, compiler="system")
    current = probe_compiler_capabilities("pvc", cache_dir=tmp_path, compiler="current")
    assert system.name != current.name and len(list(tmp_path.iterdir())) == 2
    assert sorted(system.supported) == sorted(load_capabilities(DEBIAN_CAPABILITIES, "pvc").supported)
    assert not system.supports("__builtin_IB_subgroup_block_read_flat_transpose_u32_k4")   # 22.43: 8 wide
    assert current.supports("__builtin_IB_subgroup_block_read_flat_transpose_u32_k4")


U4_COLUMN_MAJOR = ("problem: {m: 256, n: 256, k: 256}\ntypes: {a: f16, b: u4, c: f16}\nlayout: {b: col}\n"
                   "quant: {format: plain, group: 32}\ntile: {workgroup: [64, 64, 32], subgroups: [2, 2]}\n")


def test_a_missing_transposing_load_falls_back_to_plain_rows_reordered(no_overrides):
    """Where a compiler has no transposing load of a column-major operand's shape (Debian's: no 4-wide d32
    transpose), the planner takes plain loads of the same memory and reorders them into the DPAS fragments
    (a cross-lane gather) instead of rejecting the variant; where it has one, the transposing load."""
    from xegemm.config import config_from_text
    from xegemm.lowering import named_lowering
    from xegemm.plan.operands import reorder_cost
    from xegemm.plan.planner import plan
    from xegemm.kernel.render import render_kernel
    config = config_from_text(U4_COLUMN_MAJOR)
    old = named_lowering("native", DEBIAN_CAPABILITIES, "pvc")
    p = plan(config, old.issues)
    assert p.b.atom.name == "XE_2D_U4x32x32_LD_N" and reorder_cost(p.b.fragments) == 2
    assert "__builtin_IB_subgroup_block_read_flat_transpose_u32_k4" not in render_kernel(p, old)
    new = named_lowering("native", CURRENT_CAPABILITIES, "bmg")
    q = plan(config, new.issues)
    assert q.b.atom.name == "XE_2D_U4x16x32_LD_T" and reorder_cost(q.b.fragments) == 0
    # without a lowering that says what it issues (the portable one issues everything) nothing changes
    assert plan(config).b.atom.name == "XE_2D_U4x16x32_LD_T"
