"""The atom model: every Xe 2D block copy atom, every DPAS atom and the coop-matrix layouts.

One Python model of each atom (name, shape, legality, lane-to-element map) is the single source of truth
for both lowerings, the planner and the tests.
"""

from xegemm.atoms.lanemap import LaneMap

__all__ = ["LaneMap"]
