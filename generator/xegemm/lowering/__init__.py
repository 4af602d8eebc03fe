"""The lowerings: how atoms become OpenCL C, and the one place that decides which lowering a device gets.

- ``portable`` (:mod:`xegemm.lowering.portable`): ordinary loads, stores, sub-group shuffles and arithmetic
  that leave every work-item holding exactly the registers of the atom's lane map; runs on any OpenCL
  device with sub-groups (the Intel OpenCL CPU runtime in tests and CI).
- ``native`` (:mod:`xegemm.lowering.native`): the Xe builtins (2D block read/write/prefetch, DPAS), spelled
  as the compiler's capability set allows (:mod:`xegemm.aot.capabilities`).

The atom models describe; the lowerings emit; the templates print (templates/copy/, templates/mma/).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from xegemm.aot.capabilities import DEBIAN_CAPABILITIES, MODERN_CAPABILITIES
from xegemm.errors import XegemmError
from xegemm.lowering.native import NativeCapabilities, NativeUnsupported, lower_copy, native_capabilities
from xegemm.targets import EXT_2D_BLOCK_IO, EXT_DPAS, EXT_EXTENDED_BLOCK_READ

LOWERINGS = ("portable", "native")


class Lowering(NamedTuple):
    """A lowering and, for ``native``, the compiler capabilities it spells the atoms with."""

    name: str
    capabilities: NativeCapabilities | None = None

    @property
    def capabilities_name(self) -> str | None:
        return self.capabilities.name if self.capabilities is not None else None

    def issues(self, atom) -> bool:
        """Whether this lowering can issue a copy atom (portable: every atom; native: its capabilities)."""
        return self.capabilities is None or _lowers(atom, self.capabilities)


@functools.lru_cache(maxsize=4096)
def _lowers(atom, capabilities: NativeCapabilities) -> bool:
    """Whether ``capabilities`` lower ``atom`` to messages (remembered: the planner asks for every candidate
    atom of every plan, and trying the splits of an atom a compiler cannot issue whole is slow)."""
    try:
        lower_copy(atom, capabilities)
    except NativeUnsupported:
        return False
    return True


def device_lowering(extensions, sub_group_sizes) -> Lowering:
    """What a device with these OpenCL extensions and sub-group sizes runs: ``native`` when it has DPAS at
    sub-group size 16 and Xe 2D block reads (``cl_intel_subgroup_2d_block_io``: the full documented set; the
    older ``cl_intel_subgroup_extended_block_read``: the capabilities of a driver of that generation), else
    ``portable``."""
    if EXT_DPAS in extensions and 16 in sub_group_sizes:
        if EXT_2D_BLOCK_IO in extensions:
            return Lowering("native", native_capabilities(MODERN_CAPABILITIES))
        if EXT_EXTENDED_BLOCK_READ in extensions:
            return Lowering("native", native_capabilities(DEBIAN_CAPABILITIES))
    return Lowering("portable")


def choose_lowering(info, forced: str | None = None) -> Lowering:
    """The lowering to run on a device (a :class:`xegemm.runtime.DeviceInfo`): its own, or ``forced``."""
    if forced is not None and forced not in LOWERINGS:
        raise XegemmError(f"lowering must be one of {', '.join(LOWERINGS)}, not {forced!r}")
    own = device_lowering(info.extensions, info.sub_group_sizes)
    if forced == "portable" or forced is None:
        return own if forced is None else Lowering("portable")
    if own.name != "native":
        raise XegemmError(f"{info.filter_string} ({info.name}) has no Xe 2D block IO and DPAS extensions: "
                          "the native lowering cannot run there; use --lowering portable")
    return own


def named_lowering(name: str, capabilities: str | None = None, target: str = "pvc") -> Lowering:
    """A lowering by name for generating code without a device (``generate``, ``build``): ``native`` with the
    named (or ``$XEGEMM_COMPILER_CAPABILITIES``, or probed) compiler capabilities for ``target``."""
    if name not in LOWERINGS:
        raise XegemmError(f"lowering must be one of {', '.join(LOWERINGS)}, not {name!r}")
    return Lowering(name, native_capabilities(capabilities, target) if name == "native" else None)
