"""Build OpenCL C programs and launch kernels through dpctl; move numpy arrays to and from USM.

Ranges are taken in OpenCL NDRange order (x fastest) and reversed for dpctl, which wants SYCL order
(shared/facts/toolchain.md: a ``reqd_work_group_size(16,1,1)`` kernel needs local range ``[1, 16]``).
"""

from __future__ import annotations

import ctypes
import hashlib

import numpy as np

from xegemm.errors import RuntimeSetupError, XegemmError
from xegemm.runtime.devices import dpctl_module
from xegemm.runtime.sycl import dpmem, dpprog
from xegemm.runtime.opencl_query import build_log


class BuildError(XegemmError):
    """The device compiler rejected a program; ``log`` holds what it said."""

    def __init__(self, message: str, log: str):
        super().__init__(message)
        self.log = log


_PROGRAMS: dict[str, object] = {}


def make_queue(sycl_device, profiling: bool = True):
    """An in-order dpctl queue on the device, with event profiling on by default."""
    dpctl = dpctl_module()
    if profiling and not sycl_device.has_aspect_queue_profiling:
        raise RuntimeSetupError(f"{sycl_device.filter_string} ({sycl_device.name}) cannot time kernels with "
                                "profiling events (no queue_profiling aspect); pick another device with --device")
    props = ["in_order", "enable_profiling"] if profiling else ["in_order"]
    return dpctl.SyclQueue(sycl_device, property=props)


def source_key(source: str, options: str, sycl_device) -> str:
    """The cache key of one build: source, options, device and driver."""
    h = hashlib.sha256()
    for part in (source, options, sycl_device.name, sycl_device.filter_string, sycl_device.driver_version):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def build_program(queue, source: str, options: str = ""):
    """Build (or reuse from this process's cache) an OpenCL C program; raise BuildError with the log."""
    key = source_key(source, options, queue.sycl_device)
    if key in _PROGRAMS:
        return _PROGRAMS[key]
    try:
        program = dpprog.create_program_from_source(queue, source, options)
    except Exception as exc:  # dpctl's SyclProgramCompilationError carries no log: recover it
        device = queue.sycl_device
        log = build_log(device.name, device.device_type.name, source, options) or str(exc)
        first = next((line for line in log.splitlines() if "error" in line), log.strip()[:200])
        raise BuildError(f"the device compiler rejected the program: {first.strip()}", log) from exc
    _PROGRAMS[key] = program
    return program


def to_device(queue, array: np.ndarray):
    """Copy a numpy array into a new USM device allocation."""
    data = np.ascontiguousarray(array)
    mem = dpmem.MemoryUSMDevice(max(data.nbytes, 1), queue=queue)
    if data.nbytes:
        mem.copy_from_host(data.view(np.uint8).reshape(-1))
    return mem


def from_device(mem, dtype, shape) -> np.ndarray:
    """Copy a USM allocation back into a numpy array of the given dtype and shape."""
    raw = np.frombuffer(bytes(mem.copy_to_host()), dtype=np.uint8)
    count = int(np.prod(shape))
    return raw[: count * np.dtype(dtype).itemsize].view(dtype).reshape(shape).copy()


def scalar(value, ctype=ctypes.c_int):
    """A kernel scalar argument (ints by default)."""
    return ctype(value)


def launch(queue, kernel, args, global_size, local_size):
    """Submit a kernel with OpenCL-order ranges; returns the dpctl event."""
    g = [int(x) for x in reversed(global_size)]
    l_ = [int(x) for x in reversed(local_size)]
    return queue.submit(kernel, list(args), g, l_)
