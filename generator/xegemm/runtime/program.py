"""Build OpenCL C programs, move numpy arrays to and from the device, launch kernels: thin over the backends.

Which backend serves a device (raw OpenCL for OpenCL devices, with the persistent cache of program binaries;
dpctl otherwise) is :mod:`xegemm.runtime.backends`' decision, taken once per queue by :func:`make_queue` and
followed by every other function here.  This module keeps each process's built programs (by context, source,
options and device), so a variant is compiled once per process on either backend.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading

import numpy as np

from xegemm.errors import RuntimeSetupError
from xegemm.runtime.backends import BuildError, backend_for, queue_backend
from xegemm.runtime import program_cache
from xegemm.runtime.spirv import SpirvError, build_spirv, build_spirv_sycl, forget_program, probe_coopmat

__all__ = ["BuildError", "build_program", "build_source", "from_device", "source_unavailable", "launch", "make_queue", "rebuild_source", "scalar", "source_key", "to_device",
           "uses_opencl"]

_PROGRAMS: dict[tuple[int, str], object] = {}     # this process's programs, by context and key
_PROGRAMS_LOCK = threading.Lock()


def uses_opencl(sycl_device) -> bool:
    """Whether a device runs through raw OpenCL (the OpenCL backend) rather than dpctl."""
    return backend_for(sycl_device).name == "opencl"


def make_queue(sycl_device, profiling: bool = True):
    """An in-order queue on the device, with event profiling on by default: an
    :class:`~xegemm.runtime.opencl.OpenCLQueue` on an OpenCL device, a dpctl queue otherwise."""
    if profiling and not sycl_device.has_aspect_queue_profiling:
        raise RuntimeSetupError(f"{sycl_device.filter_string} ({sycl_device.name}) cannot time kernels with "
                                "profiling events (no queue_profiling aspect); pick another device with --device")
    return backend_for(sycl_device).queue(sycl_device, profiling)


def source_key(source: str, options: str, sycl_device) -> str:
    """The in-process key of one build: source, options, device and driver."""
    h = hashlib.sha256()
    for part in (source, options, sycl_device.name, sycl_device.filter_string, sycl_device.driver_version):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def build_program(queue, source: str, options: str = "", fresh: bool = False):
    """Build an OpenCL C program for the queue's device, or reuse it (from this process, or on an OpenCL device
    from the persistent cache; ``fresh``: neither, compiled from the source); raise BuildError with the
    compiler's log.  The program's ``get_sycl_kernel(name)`` gives a kernel for :func:`launch`."""
    key = (id(getattr(queue, "context", None)), source_key(source, options, queue.sycl_device))
    with _PROGRAMS_LOCK:
        if key in _PROGRAMS and not fresh:
            return _PROGRAMS[key]
    program = queue_backend(queue).compile(queue, source, options, fresh=fresh)
    with _PROGRAMS_LOCK:
        if fresh:
            _PROGRAMS[key] = program
            return program
        return _PROGRAMS.setdefault(key, program)


def _build_spirv(queue, source: str, options: str, fresh: bool = False):
    if not uses_opencl(queue.sycl_device):
        raise BuildError(f"SPIR-V modules are built through OpenCL (clCreateProgramWithIL) or dpctl on an OpenCL "
                         f"device; {queue.sycl_device.filter_string} is not one", "")
    try:      # a raw OpenCL queue: clCreateProgramWithIL; a SYCL queue (USM arrays): a dpctl kernel bundle
        if queue_backend(queue).name == "dpctl":
            return build_spirv_sycl(source, queue, options, fresh=fresh)
        return build_spirv(source, queue, options, fresh=fresh)
    except SpirvError as exc:
        raise BuildError(str(exc), str(exc)) from None


# a lowering's source_kind (xegemm.lowering.Lowering) -> how its sources are built
BUILDERS = {"opencl-c": build_program, "spirv": _build_spirv}


def source_unavailable(queue, kind: str = "opencl-c") -> str | None:
    """Why a queue's device cannot build sources of ``kind`` at all, or None (``spirv``: whether it runs the coopmat
    lowering, :func:`xegemm.runtime.spirv.probe_coopmat`, remembered per device)."""
    if kind != "spirv":
        return None
    if not uses_opencl(queue.sycl_device):
        return f"the coopmat lowering needs an OpenCL device; {queue.sycl_device.filter_string} is not one"
    probe = probe_coopmat(queue)
    return None if probe.runs else f"the coopmat lowering is unavailable on {queue.device.name}: {probe.reason}"


def build_source(queue, source: str, options: str = "", kind: str = "opencl-c", fresh: bool = False):
    """Build a kernel source of a lowering's ``kind`` (``opencl-c``: :func:`build_program`; ``spirv``: SPIR-V
    assembly through :func:`xegemm.runtime.spirv.build_spirv`, a child process first); BuildError with why."""
    return BUILDERS[kind](queue, source, options, fresh=fresh)


def rebuild_source(queue, source: str, options: str = "", kind: str = "opencl-c", why: str = "") -> object:
    """Build a source afresh from the source itself: its entry in the persistent program cache (said once, with
    ``why``) and this process's program of it are dropped first (a loaded binary that failed verification)."""
    program = build_source(queue, source, options, kind)
    key = getattr(program, "cache_key", None)
    if key:
        program_cache.discard_failed(key, why or "rebuilt on request")
        forget_program(queue, key)
    with _PROGRAMS_LOCK:
        _PROGRAMS.pop((id(getattr(queue, "context", None)), source_key(source, options, queue.sycl_device)), None)
    # compiled from the source itself: another process may have stored the failed binary again meanwhile
    return build_source(queue, source, options, kind, fresh=True)


def to_device(queue, array: np.ndarray):
    """Copy a numpy array into a new device allocation (a ``cl_mem`` buffer, or USM through dpctl)."""
    data = np.ascontiguousarray(array)
    mem = queue_backend(queue).allocate(queue, data.nbytes)
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
    # a raw OpenCL buffer (OpenCLBackend's) enqueues the write without waiting; dpctl's USM copies block
    (getattr(mem, "write_from", None) or mem.copy_from_host)(data)
    return data


def read_into(mem, array: np.ndarray) -> np.ndarray:
    """Copy the start of a device allocation into a C-contiguous numpy array (no intermediate copy)."""
    view = array.reshape(-1).view(np.uint8)
    (getattr(mem, "read_into", None) or mem.copy_to_host)(view)
    return array


def scalar(value, ctype=ctypes.c_int):
    """A kernel scalar argument (ints by default)."""
    return ctype(value)


def launch(queue, kernel, args, global_size, local_size):
    """Submit a kernel with OpenCL-order ranges; returns its event (``wait()``, ``profiling_info_start``/``_end``
    in ns)."""
    return queue_backend(queue).run(queue, kernel, list(args), global_size, local_size)
