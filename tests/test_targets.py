"""The target registry: one entry per Xe GPU, read by the atom rules, the planner, the lowering and AOT."""

import pytest

from xegemm.atoms.mma import MmaAtom, MmaAtomError, enumerate_mma_atoms
from xegemm.dtypes import DTYPES
from xegemm.lowering import device_lowering
from xegemm.targets import (
    AOT_TARGETS,
    EXT_2D_BLOCK_IO,
    TARGETS,
    UnknownTargetError,
    dpas_widths,
    get_target,
    target_for_platform,
)


@pytest.mark.parametrize("target", TARGETS.values(), ids=lambda t: t.name)
def test_entries_are_consistent(target):
    assert target.simd in (8, 16) and target.grf_bytes == 4 * target.simd   # xe_atoms.md §3.1
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
