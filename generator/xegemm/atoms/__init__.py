"""The atom model: every Xe 2D block copy atom, every 1D sub-group block tile, every DPAS atom and the
coop-matrix layouts.

One Python model of each atom (name, shape, legality, lane-to-element map) is the single source of truth
for both lowerings, the planner and the tests.  Copy atoms of both families implement
:class:`xegemm.atoms.base.CopyAtomBase`; :func:`copy_atom_named` is the one place that tells them apart.
"""

from xegemm.atoms.base import CopyAtomBase
from xegemm.atoms.block1d import Block1DAtom
from xegemm.atoms.copy import CopyAtom
from xegemm.atoms.lanemap import LaneMap

COPY_ATOM_FAMILIES = {"XE_2D_": CopyAtom, "XE_1D_": Block1DAtom}   # name prefix -> the family's class
COPY_ATOM_PREFIXES = tuple(COPY_ATOM_FAMILIES)


def copy_atom_named(name: str) -> CopyAtomBase:
    """The copy atom a name spells, of either family (unchecked: ``.check()`` names the rules it breaks);
    the family's error when the name does not parse."""
    name = name.strip()
    family = next((cls for prefix, cls in COPY_ATOM_FAMILIES.items() if name.startswith(prefix)), CopyAtom)
    return family.parse(name)


__all__ = ["COPY_ATOM_PREFIXES", "CopyAtomBase", "LaneMap", "copy_atom_named"]
