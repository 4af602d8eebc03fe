"""The lowerings: how atoms become OpenCL C, and the one place that decides which lowering a device gets.

- ``portable`` (:mod:`xegemm.lowering.portable`): ordinary loads, stores, sub-group shuffles and arithmetic
  that leave every work-item holding exactly the registers of the atom's lane map; runs on any OpenCL
  device with sub-groups (the Intel OpenCL CPU runtime in tests and CI).
- ``native`` (:mod:`xegemm.lowering.native`): the Xe builtins (2D block read/write/prefetch, DPAS), spelled
  as the compiler's capability set allows (:mod:`xegemm.aot.capabilities`).  On a device without them (the CPU
  runtime) the same kernels are built with the CPU emulation of the builtins (:mod:`xegemm.lowering.emulation`,
  :class:`EmulatedNativeLowering`): a correctness path, not a speed path.
- ``coopmat`` (:mod:`xegemm.lowering.coopmat`): the whole kernel as SPIR-V cooperative matrices
  (SPV_KHR_cooperative_matrix + SPV_INTEL_joint_matrix), built through ``clCreateProgramWithIL``
  (:mod:`xegemm.runtime.spirv`); on the CPU runtime it runs on Intel AMX.

Each lowering renders a whole plan (:meth:`Lowering.render_plan`): portable and native through the OpenCL C
kernel template (the kernel layer's renderer, handed in), coopmat as SPIR-V; ``source_kind`` says which builder
takes the result.

The atom models describe; the lowerings emit; the templates print (templates/copy/, templates/mma/).
"""

from __future__ import annotations

import functools
import os
from typing import ClassVar

from xegemm.aot.call_check import check_calls
from xegemm.aot.capabilities import CAPABILITIES_ENV, DEBIAN_CAPABILITIES, MODERN_CAPABILITIES
from xegemm.library.build_flags import STANDARD, native_device_options
from xegemm.errors import PlanRejected, XegemmError
from xegemm.lowering.coopmat import make_lowering_class
from xegemm.lowering.emulation import NOTE as EMULATION_NOTE
from xegemm.lowering.emulation import cpu_source
from xegemm.lowering.native import NativeCapabilities, NativeUnsupported, lower_copy, native_capabilities
from xegemm.lowering.portable import copy_plan, mma_plan
from xegemm.plan.surfaces import native_surface_violations
from xegemm.library.targets import EXT_2D_BLOCK_IO, EXT_DPAS, EXT_EXTENDED_BLOCK_READ, EXT_SUBGROUPS, LOWERING_NAMES
from xegemm.lowering.templating import render_macro


class Lowering:
    """A lowering: how it spells copy and DPAS atoms in OpenCL C, what it asks of a problem, how it is built.

    ``Lowering(name, capabilities)`` makes the lowering called ``name`` (:data:`LOWERINGS`); ``capabilities``
    are the compiler capabilities the native lowering spells its atoms with.  Each lowering renders its own
    atoms, so code above this package asks the lowering and never compares its name.
    """

    name: ClassVar[str]
    stages_kstep: ClassVar[bool]   # DPAS atoms of a GEMM composed through a local-memory stage (see render)
    # The epilogue's C tiles as one loop over a private array of the accumulators instead of one unrolled block
    # per tile (see xegemm.epilogues.tiles.epilogue_tiles): the CPU runtime's build time grows with every inlined copy of a
    # store and its conversions, while a GPU would put a dynamically indexed private array in scratch memory.
    rolls_epilogue: ClassVar[bool]
    # what render_plan returns, for the builders: "opencl-c" (a .cl source) or "spirv" (SPIR-V assembly)
    source_kind: ClassVar[str] = "opencl-c"
    source_suffix: ClassVar[str] = ".cl"
    # whether a variant rendered in this lowering has it written into its config (target.lowering), so that its
    # plan, name and arguments know it: the coopmat lowering's kernels take B VNNI-packed
    pinned: ClassVar[bool] = False
    # Whether the device runs this lowering's builtins through their CPU emulation (EmulatedNativeLowering)
    emulated: ClassVar[bool] = False
    # What the run's console and report say of the lowering beyond its name ('' when nothing)
    note: ClassVar[str] = ""

    def __new__(cls, name: str | None = None, capabilities: NativeCapabilities | None = None):
        if cls is Lowering:
            if name not in _CLASSES:
                raise XegemmError(f"lowering must be one of {', '.join(LOWERINGS)}, not {name!r}")
            cls = _CLASSES[name]
        return super().__new__(cls)

    def __init__(self, name: str | None = None, capabilities: NativeCapabilities | None = None):
        if name is not None and name != self.name:      # NativeLowering(caps) would read caps as the name
            raise XegemmError(f"{type(self).__name__} is the {self.name} lowering, not {name!r} "
                              "(pass capabilities=...)")
        self.capabilities = capabilities

    # (name, capabilities), as the named tuple a lowering used to be: unpacked, indexed, compared with tuples
    def __iter__(self):
        return iter((self.name, self.capabilities))

    def __getitem__(self, index):
        return (self.name, self.capabilities)[index]

    def __eq__(self, other) -> bool:
        if isinstance(other, Lowering) and other.emulated != self.emulated:
            return False
        return tuple(self) == (tuple(other) if isinstance(other, (Lowering, tuple)) else other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __reduce__(self):        # pickled by name (to worker processes): a class made by a factory has no path
        return (_unpickled, (self.name, self.capabilities, self.emulated))

    def __repr__(self) -> str:
        return f"{type(self).__name__ if self.emulated else 'Lowering'}({self.name!r}, {self.capabilities!r})"

    @property
    def capabilities_name(self) -> str | None:
        return self.capabilities.name if self.capabilities is not None else None

    def render_plan(self, plan, opencl_c, **options) -> str:
        """The whole kernel of a plan in this lowering.  ``opencl_c(plan, lowering, **options)`` is the kernel
        layer's OpenCL C renderer (xegemm.kernel.render, above this package): the OpenCL C lowerings hand the
        plan to it; a lowering with its own kernel form renders it itself."""
        return opencl_c(plan, self, **options)

    def b_pack_factor(self, plan) -> int | None:
        """K rows per VNNI group of B's storage when this lowering reads B packed (on the device, by
        xegemm.runtime.b_packer, before its kernel), else None."""
        return None

    def dequantizes_a(self, plan) -> bool:
        """Whether this lowering dequantizes a quantized (FP8) A into a row-major compute-type A before its kernel
        (the coopmat lowering's A dequantizer), rather than in the kernel's k-steps."""
        return False

    def local_memory_bytes(self, plan) -> int | None:
        """Local memory a work-group of the plan's kernel takes in this lowering, when the lowering knows it before
        the build (the device builder refuses a variant that needs more than the device has), else None."""
        return None

    def issues(self, atom) -> bool:
        """Whether this lowering can issue a copy atom (portable: every atom; native: its capabilities)."""
        return self.capabilities is None or _lowers(atom, self.capabilities)

    def render_copies(self, atoms) -> str:
        """OpenCL C defining the ``fn_name`` function of each copy atom (2D or 1D block, each once)."""
        raise NotImplementedError

    @classmethod
    def render_mma(cls, atoms) -> str:
        """OpenCL C defining the ``fn_name`` function of each DPAS atom."""
        raise NotImplementedError

    def check_surfaces(self, plan) -> None:
        """PlanRejected when the problem breaks a rule this lowering's messages set on its surfaces."""

    def copies_as_arrays(self, plan) -> bool:
        """Whether the staged k-step takes the plan's copy registers as arrays of their components."""
        return False

    def build_options(self, grf: int) -> str:
        """The OpenCL build options of a kernel on a device, at ``grf`` registers per thread."""
        return STANDARD

    def check_source(self, source: str) -> list[str]:
        """What a generated source breaks of the documented prototypes (when no compiler here can tell)."""
        return []

    def device_source(self, source: str) -> str:
        """The source a device builds for a generated kernel (the kernel itself, unless the builtins are emulated)."""
        return source


class PortableLowering(Lowering):
    """Ordinary OpenCL C that leaves every work-item holding the atom's registers (xegemm.lowering.portable)."""

    name = "portable"
    stages_kstep = True
    rolls_epilogue = True

    def render_copies(self, atoms) -> str:
        atoms = list(dict.fromkeys(atoms))
        template = "copy/portable.cl.j2"
        block2d = [a for a in atoms if a.block2d]
        parts = [render_macro(template, "prelude")] + [render_macro(template, "define", a, copy_plan(a))
                                                        for a in block2d] if block2d else []
        parts += [render_macro("copy/block1d.cl.j2", "portable", a) for a in atoms if not a.block2d]
        return "\n".join(parts)

    @classmethod
    def render_mma(cls, atoms) -> str:
        return "\n".join(render_macro("mma/portable.cl.j2", "define", atom, mma_plan(atom)) for atom in atoms)

    def copies_as_arrays(self, plan) -> bool:
        return not plan.uses_block1d


class NativeLowering(Lowering):
    """The Xe builtins, spelled as the compiler's capabilities allow (xegemm.lowering.native)."""

    name = "native"
    stages_kstep = False
    rolls_epilogue = False

    def render_copies(self, atoms) -> str:
        caps = self.capabilities
        lowered = [(a, lower_copy(a, caps)) for a in dict.fromkeys(atoms)]
        declared = list(dict.fromkeys(m.declaration for _, ms in lowered for m in ms if m.declaration))
        parts = [render_macro("copy/native.cl.j2", "declarations", declared)] if declared else []
        parts += [render_macro("copy/native.cl.j2", "define", a, ms, caps.spelling == "ib") if a.block2d else
                  render_macro("copy/block1d.cl.j2", "native", a, ms) for a, ms in lowered]
        return "\n".join(parts)

    @classmethod
    def render_mma(cls, atoms) -> str:
        return "\n".join(render_macro("mma/native.cl.j2", "define", atom) for atom in atoms)

    def check_surfaces(self, plan) -> None:
        surface = native_surface_violations(plan.config)
        if surface:
            raise PlanRejected("native block surfaces: " + "; ".join(surface))

    def build_options(self, grf: int) -> str:
        return native_device_options(grf)

    def check_source(self, source: str) -> list[str]:
        # no compiler here builds cl_intel_subgroup_2d_block_io: hold every call to the documented prototypes
        if self.capabilities is not None and self.capabilities.spelling == "ocl2d":
            return check_calls(source)
        return []


class EmulatedNativeLowering(NativeLowering):
    """The native lowering on a device without the Xe builtins: the same kernel text, built after the CPU emulation
    of every builtin it calls (xegemm.lowering.emulation), with the device's standard build options."""

    emulated = True
    note = EMULATION_NOTE

    def build_options(self, grf: int) -> str:
        return STANDARD

    def device_source(self, source: str) -> str:
        return cpu_source(source)


def _unpickled(name: str, capabilities, emulated: bool = False) -> Lowering:
    """A lowering sent to a worker process, by name (and whether its builtins are emulated on the device)."""
    return EmulatedNativeLowering(capabilities=capabilities) if emulated else Lowering(name, capabilities)


CoopmatLowering = make_lowering_class(Lowering)
_CLASSES: dict[str, type[Lowering]] = {cls.name: cls for cls in (PortableLowering, NativeLowering, CoopmatLowering)}
LOWERINGS = tuple(_CLASSES)
assert LOWERINGS == LOWERING_NAMES, "xegemm.library.targets.LOWERING_NAMES lists the lowerings defined here"


def variant_lowering(default: Lowering, name: str | None) -> Lowering:
    """The lowering of one variant: the command's ``default``, unless the variant's config pins another
    (``target.lowering``).  A pinned native lowering needs the command's (its compiler capabilities)."""
    if name is None or name == default.name:
        return default
    if name not in _CLASSES:
        raise XegemmError(f"lowering must be one of {', '.join(LOWERINGS)}, not {name!r}")
    if name == "native":
        raise XegemmError("target.lowering: native needs the native lowering's compiler capabilities: run with "
                          "--lowering native (on a device with Xe 2D block IO and DPAS) instead of pinning it")
    return Lowering(name)


def lowering_class(name: str) -> type[Lowering]:
    """The lowering class called ``name`` (its atoms' rendering needs no compiler capabilities)."""
    if name not in _CLASSES:
        raise ValueError(f"lowering must be one of {LOWERINGS}, not {name!r}")
    return _CLASSES[name]


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
    if forced == "coopmat":         # whether the device runs it: xegemm.runtime.spirv.probe_coopmat
        return Lowering("coopmat")
    if forced == "portable" or forced is None:
        return own if forced is None else Lowering("portable")
    if own.name != "native":
        if EXT_SUBGROUPS in info.extensions and 16 in info.sub_group_sizes:
            # no Xe builtins, but the sub-groups their emulation needs: the CPU emulation (a correctness path)
            caps = os.environ.get(CAPABILITIES_ENV) or MODERN_CAPABILITIES
            return EmulatedNativeLowering("native", native_capabilities(caps))
        raise XegemmError(f"{info.filter_string} ({info.name}) has no Xe 2D block IO and DPAS extensions, nor the "
                          f"{EXT_SUBGROUPS} sub-groups of 16 their emulation needs: the native lowering cannot run "
                          "there; use --lowering portable")
    return own


def named_lowering(name: str, capabilities: str | None = None, target: str = "pvc",
                   compiler: str | None = None) -> Lowering:
    """A lowering by name for generating code without a device (``generate``, ``build``): ``native`` with the
    named (or ``$XEGEMM_COMPILER_CAPABILITIES``, or probed from ``compiler``) compiler capabilities for ``target``."""
    if name not in LOWERINGS:
        raise XegemmError(f"lowering must be one of {', '.join(LOWERINGS)}, not {name!r}")
    return Lowering(name, native_capabilities(capabilities, target, compiler) if name == "native" else None)
