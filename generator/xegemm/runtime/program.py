"""Build OpenCL C programs, move numpy arrays to and from the device, launch kernels: one path per device.

An OpenCL device (the Intel OpenCL CPU runtime, an OpenCL GPU) runs through raw OpenCL end to end
(:mod:`xegemm.runtime.opencl`: its own context, queue, buffers, builds and profiling events), because only
there can a built program be stored as a binary and loaded again by a later process
(:mod:`xegemm.runtime.program_cache`: a variant built once reloads in milliseconds).  Any other device (Level
Zero) runs through dpctl, whose 0.22 release cannot load program binaries: there builds are cached per process
only.  dpctl finds the devices either way; which path a queue takes is decided once, by :func:`make_queue`, and
every other function follows the queue it is given.

Ranges are taken in OpenCL NDRange order (x fastest) and reversed for dpctl, which wants SYCL order
(docs/compilers.md "The Intel OpenCL CPU runtime": a ``reqd_work_group_size(16,1,1)`` kernel needs local range ``[1, 16]``).
"""

from __future__ import annotations

import ctypes
import hashlib
import threading

import numpy as np

from xegemm.errors import RuntimeSetupError, XegemmError
from xegemm.runtime import opencl, program_cache
from xegemm.runtime.devices import dpctl_module
from xegemm.runtime.environment import find_cpu_runtime
from xegemm.runtime.sycl import dpmem, dpprog
from xegemm.runtime.opencl_query import build_log


class BuildError(XegemmError):
    """The device compiler rejected a program; ``log`` holds what it said."""

    def __init__(self, message: str, log: str):
        super().__init__(message)
        self.log = log


_PROGRAMS: dict[tuple[int, str], object] = {}     # this process's programs, by context and key
_PROGRAMS_LOCK = threading.Lock()


def uses_opencl(sycl_device) -> bool:
    """Whether a device runs through raw OpenCL (the OpenCL backend) rather than dpctl."""
    return sycl_device.backend.name == "opencl"


def make_queue(sycl_device, profiling: bool = True):
    """An in-order queue on the device, with event profiling on by default: an
    :class:`~xegemm.runtime.opencl.OpenCLQueue` on an OpenCL device, a dpctl queue otherwise."""
    if profiling and not sycl_device.has_aspect_queue_profiling:
        raise RuntimeSetupError(f"{sycl_device.filter_string} ({sycl_device.name}) cannot time kernels with "
                                "profiling events (no queue_profiling aspect); pick another device with --device")
    if uses_opencl(sycl_device):
        return opencl.OpenCLQueue(sycl_device, profiling)
    props = ["in_order", "enable_profiling"] if profiling else ["in_order"]
    return dpctl_module().SyclQueue(sycl_device, property=props)


def source_key(source: str, options: str, sycl_device) -> str:
    """The in-process key of one build through dpctl: source, options, device and driver."""
    h = hashlib.sha256()
    for part in (source, options, sycl_device.name, sycl_device.filter_string, sycl_device.driver_version):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _rejected(log: str) -> BuildError:
    first = next((line for line in log.splitlines() if "error" in line), log.strip()[:200])
    return BuildError(f"the device compiler rejected the program: {first.strip()}", log)


def _opencl_program(queue, source: str, options: str):
    """Load from the persistent cache, else build from source and store the binary."""
    device = queue.device
    library = find_cpu_runtime() if device.kind == "cpu" else None
    key = program_cache.cache_key(source, options, program_cache.runtime_identity(device.identity(), library))
    binary = program_cache.load(key)
    if binary is not None:
        try:
            program = opencl.program_from_binary(queue.context, binary, options)
        except (opencl.OpenCLError, opencl.OpenCLBuildFailure):
            program_cache.discard(key)          # refused by the runtime: rebuilt and replaced below
        else:
            program_cache.STATS["hits"] += 1
            return program
    program_cache.STATS["misses"] += 1
    try:
        program = opencl.program_from_source(queue.context, source, options)
    except opencl.OpenCLBuildFailure as exc:
        raise _rejected(exc.log or str(exc)) from exc
    program_cache.store(key, program.binary())
    return program


def _dpctl_program(queue, source: str, options: str):
    try:
        return dpprog.create_program_from_source(queue, source, options)
    except Exception as exc:  # dpctl's SyclProgramCompilationError carries no log: recover it
        device = queue.sycl_device
        raise _rejected(build_log(device.name, device.device_type.name, source, options) or str(exc)) from exc


def build_program(queue, source: str, options: str = ""):
    """Build an OpenCL C program for the queue's device, or reuse it (from this process, or on an OpenCL device
    from the persistent cache); raise BuildError with the compiler's log.  The program's
    ``get_sycl_kernel(name)`` gives a kernel for :func:`launch`."""
    key = (id(getattr(queue, "context", None)), source_key(source, options, queue.sycl_device))
    with _PROGRAMS_LOCK:
        if key in _PROGRAMS:
            return _PROGRAMS[key]
    program = (_opencl_program if isinstance(queue, opencl.OpenCLQueue) else _dpctl_program)(queue, source, options)
    with _PROGRAMS_LOCK:
        return _PROGRAMS.setdefault(key, program)


def to_device(queue, array: np.ndarray):
    """Copy a numpy array into a new device allocation (a ``cl_mem`` buffer, or USM through dpctl)."""
    data = np.ascontiguousarray(array)
    if isinstance(queue, opencl.OpenCLQueue):
        mem = opencl.OpenCLBuffer(queue, max(data.nbytes, 1))
    else:
        mem = dpmem.MemoryUSMDevice(max(data.nbytes, 1), queue=queue)
    if data.nbytes:
        mem.copy_from_host(data.view(np.uint8).reshape(-1))
    return mem


def from_device(mem, dtype, shape) -> np.ndarray:
    """Copy a device allocation back into a numpy array of the given dtype and shape."""
    raw = np.frombuffer(bytes(mem.copy_to_host()), dtype=np.uint8)
    count = int(np.prod(shape))
    return raw[: count * np.dtype(dtype).itemsize].view(dtype).reshape(shape).copy()


def write_async(mem, array: np.ndarray) -> np.ndarray:
    """Write a C-contiguous array to the start of a device allocation.  On the raw OpenCL path the write is
    enqueued without waiting: keep the returned array alive until the queue is done (a later blocking read on
    the same in-order queue).  Through dpctl it is a blocking copy."""
    data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    if isinstance(mem, opencl.OpenCLBuffer):
        mem.write_from(data)
    else:
        mem.copy_from_host(data)
    return data


def read_into(mem, array: np.ndarray) -> np.ndarray:
    """Copy the start of a device allocation into a C-contiguous numpy array (no intermediate copy)."""
    view = array.reshape(-1).view(np.uint8)
    if isinstance(mem, opencl.OpenCLBuffer):
        mem.read_into(view)
    else:
        mem.copy_to_host(view)
    return array


def scalar(value, ctype=ctypes.c_int):
    """A kernel scalar argument (ints by default)."""
    return ctype(value)


def launch(queue, kernel, args, global_size, local_size):
    """Submit a kernel with OpenCL-order ranges; returns its event (``wait()``, ``profiling_info_start``/``_end``
    in ns)."""
    if isinstance(queue, opencl.OpenCLQueue):
        return kernel.launch(queue, args if isinstance(args, list) else list(args), global_size, local_size)
    g = [int(x) for x in reversed(global_size)]
    l_ = [int(x) for x in reversed(local_size)]
    return queue.submit(kernel, list(args), g, l_)
