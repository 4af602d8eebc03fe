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
    EXT_2D_BLOCK_IO,
    TARGETS,
    UnknownTargetError,
    dpas_widths,
    get_target,
    names_at,
    target_for_platform,
    targets_at,
)


@pytest.mark.parametrize("target", TARGETS.values(), ids=lambda t: t.name)
def test_entries_are_consistent(target):
    assert target.simd in (8, 16) and target.grf_bytes == 4 * target.simd   # docs/atoms.md §3.1
    assert set(target.dpas_inputs) <= {t.name for t in DTYPES.values() if t.builtin_tag}
    assert target.block2d == (EXT_2D_BLOCK_IO in target.extensions)
    assert target_for_platform(target.platform_prefix + "XT") == target.name
    # a device reporting the target's extensions gets the lowering the target's hardware allows
    low = device_lowering(target.extensions, (target.simd,))
    assert low.name == ("native" if target.block2d and target.simd == 16 else "portable")


def test_atoms_follow_the_registry():
    for atom in enumerate_mma_atoms():
        assert atom.n in dpas_widths()
        assert all(atom.a_type.name in get_target(t).dpas_inputs for t in atom.targets)
    with pytest.raises(MmaAtomError, match="N=8 with tf32: tf32 DPAS exists only at SIMD16 \\(PVC, BMG\\)"):
        MmaAtom.parse("XE_8x8x8_F32TF32TF32F32_TT")


def test_unknown_targets_are_clear_errors():
    with pytest.raises(UnknownTargetError, match="unknown target 'xe3'"):
        get_target("xe3")
    assert set(AOT_TARGETS) == {"pvc", "dg2"}


def test_a_new_target_is_one_registry_entry(monkeypatch):
    """docs/architecture.md's recipe: one Target entry, and the atom rules, the planner and the lowering
    decision know it (nothing else is edited)."""
    xe3 = replace(TARGETS["bmg"], name="xe3", arch="Xe3", platform_prefix="PTL", ocloc_device=None)
    monkeypatch.setitem(TARGETS, "xe3", xe3)
    assert "xe3" in names_at(16) and xe3 in targets_at(16) and target_for_platform("PTLH") == "xe3"
    assert MmaAtom.parse("XE_8x16x16_F32BF16BF16F32_TT").targets == ("pvc", "bmg", "xe3")
    assert plan(config_from_text("problem: {m: 64, n: 64, k: 64}\n"
                                 "tile: {workgroup: [32, 32, 32], subgroups: [1, 2]}\n")).mma.n == 16
