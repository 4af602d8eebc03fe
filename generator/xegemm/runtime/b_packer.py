"""The coopmat lowering's packers on a device (xegemm.lowering.coopmat_pack): B as stored into the VNNI-packed
matrix, and an FP8 A (W8A8) into a row-major bf16 one; each built once per queue's context (and in the persistent
program cache, as every OpenCL C program) and enqueued before the cooperative-matrix kernel."""

from __future__ import annotations

import time

import numpy as np

from xegemm.lowering.coopmat_pack import (A_KERNEL, KERNEL, a_packed_bytes, a_packer_arguments, a_stored_bytes,
                                          packed_bytes, packer_arguments, render_a_packer, render_packer,
                                          stored_bytes)
from xegemm.runtime.program import build_program, launch, to_device


class _Packer:
    """An OpenCL C program of one kernel, built on first use on each queue's context."""

    kernel_name = ""

    def __init__(self, plan, source: str):
        self.plan, self.source = plan, source
        self._kernels: dict[int, object] = {}

    def kernel(self, queue):
        key = id(getattr(queue, "context", queue))
        if key not in self._kernels:
            self._kernels[key] = build_program(queue, self.source).get_sycl_kernel(self.kernel_name)
        return self._kernels[key]


class DevicePacker(_Packer):
    """A plan's B packer: :meth:`run` enqueues it on a queue."""

    kernel_name = KERNEL

    def __init__(self, plan):
        super().__init__(plan, render_packer(plan))

    def stored_bytes(self, k: int, n: int) -> dict[str, int]:
        return stored_bytes(self.plan, k, n)

    def packed_bytes(self, k: int, n: int) -> int:
        return packed_bytes(self.plan, k, n)

    def run(self, queue, buffers: dict, k: int, n: int, batch: int = 1, offsets: tuple[int, int] = (0, 0)):
        """Enqueue the packing of ``batch`` matrices (``buffers``, ``offsets``:
        xegemm.lowering.coopmat_pack.packer_arguments'); returns the event."""
        args, grid, local = packer_arguments(self.plan, buffers, k, n, batch, offsets)
        return launch(queue, self.kernel(queue), args, grid, local)

    def run_grouped(self, queue, layout, buffers: dict) -> list:
        """Enqueue the packing of every group's B of a grouped launch (xegemm.kernel.grouped_launch.GroupedLaunch
        ``layout``; ``buffers``: ``stored``, every group's B as the launch lays it out, ``packed``, of
        ``layout.nbytes["B_packed"]`` bytes, and quantized experts' ``scales`` and ``zeros``): an MoE layer's
        experts in one batched run (they share N and K, one stride apart), any other group by group, each at its
        offsets; empty groups are skipped (no tile reads them).  Returns the events."""
        problem = layout.problem
        if problem.experts:
            g = problem.groups[0]
            return [self.run(queue, buffers, g.k, g.n, len(problem.groups))]
        return [self.run(queue, buffers, g.k, g.n, 1, (stored, packed))
                for g, stored, packed in zip(problem.groups, layout.byte_offsets("B"), layout.packed_b_offsets)
                if not g.empty]


class DeviceAPacker(_Packer):
    """A plan's FP8 A dequantizer (W8A8): :meth:`run` enqueues it on a queue."""

    kernel_name = A_KERNEL

    def __init__(self, plan):
        super().__init__(plan, render_a_packer(plan))

    def stored_bytes(self, m: int, k: int) -> dict[str, int]:
        return a_stored_bytes(self.plan, m, k)

    def packed_bytes(self, m: int, k: int) -> int:
        return a_packed_bytes(self.plan, m, k)

    def run(self, queue, buffers: dict, m: int, k: int, batch: int = 1):
        """Enqueue the dequantization of ``batch`` matrices (``buffers``:
        xegemm.lowering.coopmat_pack.a_packer_arguments'); returns the event."""
        args, grid, local = a_packer_arguments(self.plan, buffers, m, k, batch)
        return launch(queue, self.kernel(queue), args, grid, local)


def packers(plan, lowering) -> tuple[DevicePacker, DeviceAPacker | None]:
    """A coopmat plan's B packer and, where ``lowering`` dequantizes A first (an FP8 A), its A dequantizer."""
    return DevicePacker(plan), DeviceAPacker(plan) if lowering.dequantizes_a(plan) else None


def pack_grouped_b(queue, packer: DevicePacker, layout, buffers: dict) -> tuple[object, float]:
    """Every group's B of a grouped launch packed on ``queue`` (:meth:`DevicePacker.run_grouped` from ``buffers``'
    ``B``, B as the launch lays it out, and quantized experts' ``scales`` and ``zeros``) into a new buffer:
    (the buffer, the milliseconds of the runs; the packer's build comes first, untimed)."""
    packer.kernel(queue)
    packed = to_device(queue, np.zeros(max(4, layout.nbytes["B_packed"]), np.uint8))
    t0 = time.perf_counter()
    for event in packer.run_grouped(queue, layout, {"stored": buffers["B"], "scales": buffers.get("scales"),
                                                    "zeros": buffers.get("zeros"), "packed": packed}):
        event.wait()
    return packed, (time.perf_counter() - t0) * 1e3
