"""The coopmat lowering's B packer on a device (xegemm.lowering.coopmat_pack): built once per queue's context
(and in the persistent program cache, as every OpenCL C program), enqueued before the cooperative-matrix kernel."""

from __future__ import annotations

from xegemm.lowering.coopmat_pack import KERNEL, packed_bytes, packer_arguments, render_packer, stored_bytes
from xegemm.runtime.program import build_program, launch


class DevicePacker:
    """A plan's B packer: :meth:`run` enqueues it on a queue (its program built on first use there)."""

    def __init__(self, plan):
        self.plan = plan
        self.source = render_packer(plan)
        self._kernels: dict[int, object] = {}

    def stored_bytes(self, k: int, n: int) -> dict[str, int]:
        return stored_bytes(self.plan, k, n)

    def packed_bytes(self, k: int, n: int) -> int:
        return packed_bytes(self.plan, k, n)

    def kernel(self, queue):
        key = id(getattr(queue, "context", queue))
        if key not in self._kernels:
            self._kernels[key] = build_program(queue, self.source).get_sycl_kernel(KERNEL)
        return self._kernels[key]

    def run(self, queue, buffers: dict, k: int, n: int, batch: int = 1):
        """Enqueue the packing of ``batch`` matrices (``buffers``: xegemm.lowering.coopmat_pack.packer_arguments');
        returns the event."""
        args, grid, local = packer_arguments(self.plan, buffers, k, n, batch)
        return launch(queue, self.kernel(queue), args, grid, local)
