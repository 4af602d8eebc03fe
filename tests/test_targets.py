"""The target registry: one entry per Xe GPU, read by the atom rules, the planner, the lowering and AOT."""

from dataclasses import replace

import pytest

from xegemm.atoms.mma import MmaAtom, MmaAtomError, enumerate_mma_atoms
from xegemm.config import config_from_text
from xegemm.library.dtypes import DTYPES
from xegemm.lowering import device_lowering
from xegemm.plan.planner import plan
from xegemm.library.targets import (
    AOT_TARGETS,
    COMPILER_NAMES,
    EXT_2D_BLOCK_IO,
    GRF_MODES,
    TARGETS,
    UnknownTargetError,
    dpas_widths,
    get_target,
    names_at,
    target_for_platform,
    targets_at,
    targets_of,
)


@pytest.mark.parametrize("target", TARGETS.values(), ids=lambda t: t.name)
def test_entries_are_consistent(target):
    assert target.simd in (8, 16) and target.grf_bytes == 4 * target.simd   # docs/atoms.md §3.1
    assert target.simd in target.subgroup_sizes and set(target.subgroup_sizes) <= {8, 16, 32}
    assert set(target.dpas_inputs) <= {t.name for t in DTYPES.values() if t.builtin_tag}
    assert target.block2d == (EXT_2D_BLOCK_IO in target.extensions)
    assert target.grf_modes == GRF_MODES
    # the dumps' platform name leads back to a target of the same architecture (XE2 is bmg's and lnl's)
    for platform in target.platforms:
        assert get_target(target_for_platform(platform + "XT")).arch == target.arch
    # every target is built by the current compiler; Debian's knows only Xe-HPC and Xe-HPG (docs/compilers.md)
    assert target.compilers and set(target.compilers) <= set(COMPILER_NAMES) and "current" in target.compilers
    assert ("system" in target.compilers) == (target.arch in ("Xe-HPC", "Xe-HPG"))
    assert all(device and " " not in device for _, device in target.ocloc_devices)
    assert target.sources and target.igc_core.startswith("IGFX_")
    assert target.ocloc_device is None                   # set per build by xegemm.aot.toolchain.aot_target
    # a device reporting the target's extensions gets the lowering the target's hardware allows
    low = device_lowering(target.extensions, (target.simd,))
    assert low.name == ("native" if target.block2d and target.simd == 16 else "portable")


def test_xe2_and_xe3_are_registered_with_their_facts():
    for name, arch, platform in (("bmg", "Xe2", "XE2"), ("lnl", "Xe2", "XE2"), ("ptl", "Xe3", "XE3")):
        t = get_target(name)
        assert (t.arch, t.simd, t.grf_bytes, t.block2d, t.platform_prefix) == (arch, 16, 64, True, platform)
        assert t.compilers == ("current",) and t.device_for("current") == name and t.device_for("system") is None
        assert "tf32" in t.dpas_inputs and t.half_accumulators and 8 not in t.subgroup_sizes
    assert targets_of("system") == ("pvc", "dg2")
    assert targets_of("current") == ("pvc", "bmg", "lnl", "ptl", "dg2")
    assert target_for_platform("PVCXT") == "pvc" and target_for_platform("XE3") == "ptl"


def test_atoms_follow_the_registry():
    for atom in enumerate_mma_atoms():
        assert atom.n in dpas_widths()
        assert all(atom.a_type.name in get_target(t).dpas_inputs for t in atom.targets)
    with pytest.raises(MmaAtomError, match="N=8 with tf32: tf32 DPAS exists only at SIMD16 \\(PVC, BMG, LNL, PTL\\)"):
        MmaAtom.parse("XE_8x8x8_F32TF32TF32F32_TT")


def test_unknown_targets_are_clear_errors():
    with pytest.raises(UnknownTargetError, match="unknown target 'xe3'"):
        get_target("xe3")
    assert set(AOT_TARGETS) == {"pvc", "bmg", "lnl", "ptl", "dg2"}


def test_a_new_target_is_one_registry_entry(monkeypatch):
    """docs/architecture.md's recipe: one Target entry, and the atom rules, the planner and the lowering
    decision know it (nothing else is edited)."""
    xe3p = replace(TARGETS["ptl"], name="xe3p", arch="Xe3P", platforms=("XE3P",), ocloc_devices=(("current", "cri"),))
    monkeypatch.setitem(TARGETS, "xe3p", xe3p)
    assert "xe3p" in names_at(16) and xe3p in targets_at(16) and target_for_platform("XE3P") == "xe3p"
    assert targets_of("current")[-1] == "xe3p"
    assert MmaAtom.parse("XE_8x16x16_F32BF16BF16F32_TT").targets == ("pvc", "bmg", "lnl", "ptl", "xe3p")
    assert plan(config_from_text("problem: {m: 64, n: 64, k: 64}\n"
                                 "tile: {workgroup: [32, 32, 32], subgroups: [1, 2]}\n")).mma.n == 16
