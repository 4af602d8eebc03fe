"""A grouped or MoE variant on a SYCL device: its packed operands, its launch, its verdict group by group and
the numpy reference it is timed against (docs/grouped.md).

:class:`xegemm.evaluate.device.DeviceBuilder` hands a grouped plan's kernel to :func:`grouped_setup`; the
verify and timing observers then ask the :class:`GroupedSetup` in the kernel's buffers (``"grouped"``) for
the verdict (every group must pass; the first failing group is named), the FLOPs of the whole launch and the
interleaved reference (numpy's float32 matmul of every group, one after the other).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from xegemm.kernel.arguments import KernelCall
from xegemm.config import Config
from xegemm.kernel.grouped_launch import GroupedLaunch, grouped_launch
from xegemm.grouped.problem import GroupedProblem, from_config
from xegemm.grouped.table import FIELD
from xegemm.verify.grouped import GroupedVerdict, check_groups, group_operands, group_references
from xegemm.plan.planner import Plan
from xegemm.evaluate.timing import NumpyReference, Rotation
from xegemm.runtime.b_packer import DevicePacker, pack_grouped_b
from xegemm.runtime.program import from_device, launch, to_device
from xegemm.verify.dense import GUARD_BYTE, GUARD_BYTES


class GroupedNumpyReference(NumpyReference):
    """numpy's float32 matmul of every non-empty group, one after the other (what a caller without a grouped
    kernel would run)."""

    def __init__(self, problem: GroupedProblem, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.pairs = [(rng.standard_normal((g.m, g.k), dtype=np.float32),
                       rng.standard_normal((g.k, g.n), dtype=np.float32)) for g in problem.groups if not g.empty]
        self.flops = 2 * problem.macs
        self.problem = problem
        # a grouped launch is timed over its one set of buffers (no rotation), and so is its reference
        self.rotation = Rotation(1, sum(a.nbytes + b.nbytes + 4 * a.shape[0] * b.shape[1] for a, b in self.pairs))

    def sample(self) -> float:
        t0 = time.perf_counter()
        for a, b in self.pairs:
            np.matmul(a, b)
        return (time.perf_counter() - t0) * 1e3


@dataclass
class GroupedSetup:
    """A grouped problem's device buffers on one queue, its per-group references, and the launch layout."""

    config: Config
    problem: GroupedProblem
    layout: GroupedLaunch
    buffers: dict                   # xegemm.kernel.arguments.BUFFERS names -> device buffers
    poison: np.ndarray              # D's bytes before every verified run, then guard bytes
    references: list
    zero: np.ndarray
    moved_bytes: int
    pack_b_ms: float | None = None  # a lowering that reads B packed: the device packing's milliseconds (untimed)

    @property
    def flops(self) -> int:
        return 2 * self.problem.macs

    @property
    def reference(self) -> GroupedNumpyReference:
        return GroupedNumpyReference(self.problem)

    def untouched(self, raw: np.ndarray) -> bool:
        """True when the bytes outside every group's D (padding, the guard) still hold the poison."""
        keep = np.ones(raw.size, bool)
        for start, g in zip(self.layout.byte_offsets("D"), self.problem.groups):
            keep[start:start + g.m * g.n * self.layout.bits[2] // 8] = False
        return bool(np.array_equal(raw[keep], self.poison[keep]))


def grouped_host_arrays(plan: Plan, layout: GroupedLaunch, ops) -> dict[str, np.ndarray]:
    """The host arrays of a grouped launch under :data:`xegemm.kernel.arguments.BUFFERS`' names: every group's
    operands (``ops``: xegemm.verify.grouped.group_operands) at the layout's offsets, B as stored, D's poison
    followed by the guard bytes, the problem table, the dynamic walk's counter, quantized experts' scales and zeros;
    a 4-byte stand-in for C where no group reads it and for the workspace."""
    reads_c = any(o is not None and o.c_in_bytes is not None for o in ops)
    nothing = np.zeros(4, np.uint8)
    host = {"A": layout.pack("A", [o and o.a_bytes for o in ops]), "B": layout.pack("B", [o and o.b_bytes for o in ops]),
            "D": np.concatenate([np.full(layout.nbytes["D"], 0xFF, np.uint8), np.full(GUARD_BYTES, GUARD_BYTE, np.uint8)]),
            "C": layout.pack("D", [o and o.c_in_bytes for o in ops]) if reads_c else nothing,
            "bias": layout.pack_bias([o and o.bias for o in ops]), "workspace": nothing,
            "table": layout.table.reshape(-1), "tile_counter": np.zeros(1, np.int32)}
    if plan.quant:            # quantized experts: scales and zeros, expert after expert
        for name in ("scales", "zeros"):
            host[name] = layout.pack_experts(name, [o and o.quant[name] for o in ops])
    return host


def grouped_setup(session, config: Config, plan: Plan, lowering=None) -> GroupedSetup:
    """Operands, references and buffers of ``config``'s grouped problem for ``plan``'s kernel on the session's
    device (kept on the session while the problem, types, epilogue, seed, table and lowering stay the same).  A
    ``lowering`` that reads B packed (coopmat) gets every group's B packed on the device (the session's packer;
    BuildError when it does not build)."""
    problem = from_config(config)
    device = session.device
    layout = grouped_launch(plan, problem, int(getattr(device, "max_compute_units", 1) or 1),
                            bool(getattr(device, "is_gpu", False)))
    key = (config.problem, config.moe, config.types, config.quant, config.layout, config.epilogue, config.verify.seed,
           layout.table.tobytes(), tuple(layout.sizes.items()), lowering and lowering.name)
    cached = getattr(session, "grouped_cache", None)
    if cached is not None and cached[0] == key:
        return cached[1]
    ops = group_operands(config, problem)
    refs = group_references(config, problem, ops)
    queue = session.queue
    host = grouped_host_arrays(plan, layout, ops)
    poison = host["D"]
    buffers = {name: to_device(queue, data) for name, data in host.items()}
    pack_ms = None
    if lowering is not None and lowering.b_pack_factor(plan):
        buffers["B"], pack_ms = pack_grouped_b(queue, session.packer(DevicePacker, plan), layout, buffers)
    moved = layout.nbytes["A"] + layout.nbytes["B"] + layout.nbytes["D"]
    setup = GroupedSetup(config, problem, layout, buffers, poison, refs, np.zeros(1, np.int32), moved, pack_ms)
    session.grouped_cache = (key, setup)
    return setup


def grouped_submit(queue, call: KernelCall, kernel, setup: GroupedSetup, scalars: dict):
    """A function launching ``call``'s grouped kernel once (the dynamic walk's counter zeroed first; the walk is
    the plan's: a setup is shared by the variants of one problem) -> its event."""
    s = setup.layout.sizes
    ((_, args, gsize, lsize),) = call.bind(call.grouped_sizes(**s),
                                           setup.buffers, scalars)
    dynamic = call.plan.config.tile.walk == "dynamic"

    def submit():
        if dynamic:
            setup.buffers["tile_counter"].copy_from_host(setup.zero.view(np.uint8))
        return launch(queue, kernel, args, gsize, lsize)
    return submit


def verify_grouped(setup: GroupedSetup, submit) -> tuple[GroupedVerdict, str | None]:
    """Run on poisoned D and judge every group: (GroupedVerdict, reason or None).  The checked launch is the
    second: a launch must leave the kernel ready for the next (the dynamic walk's counter)."""
    submit().wait()
    setup.buffers["D"].copy_from_host(setup.poison)
    submit().wait()
    raw = from_device(setup.buffers["D"], np.uint8, setup.poison.shape)
    verdict = check_groups(setup.config, setup.problem, raw, setup.layout.table[:, FIELD["c_offset"]], setup.references)
    if not verdict.ok:
        return verdict, verdict.reason
    if not setup.untouched(raw):
        return verdict, "the kernel wrote D outside every group (between groups or past the end)"
    return verdict, None

