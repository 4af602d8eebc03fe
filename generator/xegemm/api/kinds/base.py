"""The protocol every call kind implements, and what they share to launch: the built kernels, the scalars, the
record of the last launch.

A call kind is a class that serves one or more of the Gemm's entries (``"call"`` for ``gemm(a, b, ...)``,
``"grouped"``, ``"moe"``) for the Gemms it :meth:`~CallKind.serves`; the Gemm makes one of each kind it
selects (xegemm.api.kinds.KINDS, first serving kind per entry) and hands each entry's arguments to it.  Its
entry method takes the user's arguments, checks them (every check before anything is launched and before
``out`` is touched), asks the Gemm's dispatcher for a choice (xegemm.api.dispatch), binds the buffers through
:class:`xegemm.kernel.arguments.KernelCall`, launches, sets ``gemm.last_kernel`` and returns the result.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import ClassVar

from xegemm.api.dispatch import Choice
from xegemm.config import Config
from xegemm.config.shapes import Shape
from xegemm.errors import XegemmError
from xegemm.evaluate.device import submit_in_order
from xegemm.lowering import variant_lowering
from xegemm.api.trust import trusted_program
from xegemm.runtime.program import BuildError


@dataclass
class LastKernel:
    """What the last call ran: the kernel(s), the variant it came from, why it was chosen, and its event."""

    name: str
    variant: str
    reason: str
    shape: str
    config: Config = field(repr=False)
    event: object = field(default=None, repr=False)
    copies: tuple[str, ...] = ()   # host conversions before the launch: relayout copies, checkpoint arrays' views

    @property
    def kernel_ms(self) -> float:
        """The device time of the launch(es), from the profiling events."""
        return (self.event.profiling_info_end - self.event.profiling_info_start) * 1e-6


class Programs:
    """A Gemm's built kernels per (kernel name, queue), from the persistent program cache; built once."""

    def __init__(self, sycl_device=None, lowering=None):
        self._kernels: dict[tuple, list] = {}
        self._lock = threading.Lock()
        self.sycl_device, self.lowering = sycl_device, lowering     # the Gemm's: what a cached program is verified on

    def kernels(self, queue, name: str, source: str, options: str, entries, kind: str = "opencl-c",
                config: Config | None = None) -> list:
        """The kernels ``entries`` (names) of the program ``name`` on ``queue`` (``kind``: the lowering's
        source kind, OpenCL C or SPIR-V assembly; ``config``: the variant's, what a program loaded from the
        program cache is verified with first, xegemm.api.trust)."""
        key = (name, id(queue))
        kernels = self._kernels.get(key)
        if kernels is None:
            with self._lock:
                kernels = self._kernels.get(key)
                if kernels is None:
                    try:
                        program = trusted_program(queue, self.sycl_device or queue.sycl_device, self.lowering,
                                                  config, name, source, options, kind)
                    except BuildError as exc:
                        raise XegemmError(f"{name}: {exc}") from exc
                    kernels = self._kernels[key] = [program.get_sycl_kernel(entry) for entry in entries]
        return kernels

    def of(self, queue, choice: Choice, lowering=None) -> list:
        """The kernels of a choice's launches (the GEMM, and split K's or stream-K's second one); ``lowering``:
        the Gemm's, which with the variant's own pin says what kind of source the choice holds."""
        kind = variant_lowering(lowering, choice.config.target.lowering).source_kind if lowering else "opencl-c"
        return self.kernels(queue, choice.call.plan.name, choice.source, choice.options,
                            [launch.kernel for launch in choice.call.launches], kind, choice.config)


def scalars(config: Config, alpha: float, beta: float) -> dict:
    """The epilogue's scalar arguments of a launch: the call's alpha and beta, the config's clamp."""
    lo, hi = config.epilogue.clamp
    return {"alpha": alpha, "beta": beta, "clamp_lo": lo, "clamp_hi": hi}


class CallKind:
    """One kind of call: see the module docstring.  ``entries`` names the Gemm entries it serves; the entry
    methods are named after them (``call``, ``grouped``, ``moe``)."""

    entries: ClassVar[tuple[str, ...]] = ()

    def __init__(self, gemm):        # the xegemm.api.gemm.Gemm it serves
        self.gemm = gemm
        self._packers: dict[tuple, object] = {}   # a packing lowering's packers (xegemm.runtime.b_packer)

    def device_packer(self, kind, plan):
        """This call kind's packer of ``kind`` (xegemm.runtime.b_packer's DevicePacker, DeviceAPacker) for a
        plan, made once (a race makes two alike; one is kept)."""
        key = (kind.__name__, plan.name)
        packer = self._packers.get(key)
        return packer if packer is not None else self._packers.setdefault(key, kind(plan))

    @classmethod
    def serves(cls, gemm) -> bool:
        """Whether this kind runs the entries of ``gemm`` (its loaded variants decide)."""
        return True

    def bind(self, queue, choice: Choice, buffers: dict, values: dict) -> list:
        """(kernel, arguments, global size, local size) per launch of ``choice`` with ``buffers`` and the
        scalar ``values``, through the plan's KernelCall."""
        kernels = self.gemm.programs.of(queue, choice, self.gemm.lowering)
        return [(kern, args, g, l_) for kern, (_, args, g, l_) in
                zip(kernels, choice.call.bind(choice.sizes, buffers, values))]

    def launch(self, queue, choice: Choice, bound: list, wait: bool = True):
        """Submit the bound launches in order and record them as the Gemm's last kernel; the event."""
        event = submit_in_order(queue, bound)
        if wait:        # (the host path's blocking read of D on the same in-order queue waits instead)
            event.wait()
        p = choice.config.problem
        self.record(choice.call.plan.name, f"variant {choice.candidate.index} of {self.gemm.label}", choice.reason,
                    Shape(p.m, p.n, p.k, p.batch).label, choice.config, event)
        return event

    def record(self, name: str, variant: str, reason: str, shape: str, config: Config, event) -> None:
        """``gemm.last_kernel``: what ran, from which variant, why, at which shape, its config and event."""
        self.gemm.last_kernel = LastKernel(name, variant, reason, shape, config, event)
