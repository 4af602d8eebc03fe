"""The runtime backends: one interface, two ways of running OpenCL C on a device.

A :class:`Backend` says whether it runs a device (``ready``), makes queues, compiles programs, allocates device
memory (whose ``copy_from_host`` / ``copy_to_host`` move the bytes) and launches kernels; Kernel Tuner's
``backends/backend.py`` has the same shape (ready, compile, run, memcpy).  There are two:

- :class:`OpenCLBackend`: OpenCL devices (the Intel OpenCL CPU runtime, an OpenCL GPU) through raw OpenCL end to
  end (:mod:`xegemm.runtime.opencl`: its own context, queue, buffers, builds and profiling events), because only
  there can a built program be stored as a binary and loaded again by a later process
  (:mod:`xegemm.runtime.program_cache`: a variant built once reloads in milliseconds);
- :class:`DpctlBackend`: any other device (Level Zero) through dpctl, whose 0.22 release cannot load program
  binaries: there builds are cached per process only (:mod:`xegemm.runtime.program`).

dpctl finds the devices either way; :func:`backend_for` picks the first backend ready for a device, and every
queue is served by the backend of its device.  Ranges are taken in OpenCL NDRange order (x fastest); dpctl
wants SYCL order (a ``reqd_work_group_size(16,1,1)`` kernel needs local range ``[1, 16]``), so its backend
reverses them.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from typing import ClassVar

from xegemm.errors import XegemmError
from xegemm.runtime import opencl, program_cache
from xegemm.runtime.devices import dpctl_module
from xegemm.runtime.environment import find_cpu_runtime
from xegemm.runtime.opencl_query import build_log
from xegemm.runtime.sycl import dpmem, dpprog


class BuildError(XegemmError):
    """The device compiler rejected a program; ``log`` holds what it said."""

    def __init__(self, message: str, log: str):
        super().__init__(message)
        self.log = log


def rejected(log: str) -> BuildError:
    """The BuildError of a compiler log: its first error line, and the whole log."""
    first = next((line for line in log.splitlines() if "error" in line), log.strip()[:200])
    return BuildError(f"the device compiler rejected the program: {first.strip()}", log)


class Backend(ABC):
    """One way of running OpenCL C programs on a device."""

    name: ClassVar[str]

    @abstractmethod
    def ready(self, sycl_device) -> bool:
        """Whether this backend runs ``sycl_device``."""

    @abstractmethod
    def queue(self, sycl_device, profiling: bool):
        """An in-order queue on the device (event profiling on when ``profiling``)."""

    @abstractmethod
    def compile(self, queue, source: str, options: str, fresh: bool = False):
        """A program built from OpenCL C for the queue's device (BuildError with the compiler's log); its
        ``get_sycl_kernel(name)`` gives a kernel for :meth:`run`.  ``fresh``: built from the source, never
        loaded from a persistent cache (a cached binary failed verification, and another process may have
        stored it again meanwhile)."""

    @abstractmethod
    def allocate(self, queue, nbytes: int):
        """``nbytes`` (at least 1) of device memory with ``copy_from_host`` and ``copy_to_host``."""

    @abstractmethod
    def run(self, queue, kernel, args: list, global_size, local_size):
        """Submit a kernel with OpenCL-order ranges; its event (``wait()``, ``profiling_info_start``/``_end``)."""

    @abstractmethod
    def owns(self, queue) -> bool:
        """Whether ``queue`` is one of this backend's queues (what every other call on it follows)."""


class OpenCLBackend(Backend):
    """Raw OpenCL through ctypes, with programs stored in and loaded from the persistent binary cache."""

    name = "opencl"

    def ready(self, sycl_device) -> bool:
        return sycl_device.backend.name == "opencl"

    def queue(self, sycl_device, profiling: bool):
        return opencl.OpenCLQueue(sycl_device, profiling)

    def compile(self, queue, source: str, options: str, fresh: bool = False):
        """Load from the persistent cache (not when ``fresh``), else build from source and store the binary."""
        device = queue.device
        library = find_cpu_runtime() if device.kind == "cpu" else None
        key = program_cache.cache_key(source, options, program_cache.runtime_identity(device.identity(), library))
        binary = None if fresh else program_cache.load(key)
        if binary is not None:
            try:
                program = opencl.program_from_binary(queue.context, binary, options)
            except (opencl.OpenCLError, opencl.OpenCLBuildFailure):
                program_cache.discard(key)          # refused by the runtime: rebuilt and replaced below
            else:
                program_cache.STATS["hits"] += 1
                program.cache_key, program.cached_digest = key, hashlib.sha256(binary).hexdigest()
                return program
        program_cache.STATS["misses"] += 1
        try:
            program = opencl.program_from_source(queue.context, source, options)
        except opencl.OpenCLBuildFailure as exc:
            raise rejected(exc.log or str(exc)) from exc
        program_cache.store(key, program.binary())
        program.cache_key = key
        return program

    def allocate(self, queue, nbytes: int):
        return opencl.OpenCLBuffer(queue, max(nbytes, 1))

    def owns(self, queue) -> bool:
        return isinstance(queue, opencl.OpenCLQueue)

    def run(self, queue, kernel, args: list, global_size, local_size):
        return kernel.launch(queue, list(args), global_size, local_size)


class DpctlBackend(Backend):
    """dpctl (SYCL): USM allocations, programs built per process."""

    name = "dpctl"

    def ready(self, sycl_device) -> bool:
        return True

    def queue(self, sycl_device, profiling: bool):
        props = ["in_order", "enable_profiling"] if profiling else ["in_order"]
        return dpctl_module().SyclQueue(sycl_device, property=props)

    def compile(self, queue, source: str, options: str, fresh: bool = False):
        try:            # built in this process every time: no persistent cache to bypass
            return dpprog.create_program_from_source(queue, source, options)
        except Exception as exc:  # dpctl's SyclProgramCompilationError carries no log: recover it
            device = queue.sycl_device
            raise rejected(build_log(device.name, device.device_type.name, source, options) or str(exc)) from exc

    def allocate(self, queue, nbytes: int):
        return dpmem.MemoryUSMDevice(max(nbytes, 1), queue=queue)

    def owns(self, queue) -> bool:
        return True     # a SYCL queue, whatever its device (USM arrays on an OpenCL device live in one)

    def run(self, queue, kernel, args: list, global_size, local_size):
        g = [int(x) for x in reversed(global_size)]
        l_ = [int(x) for x in reversed(local_size)]
        return queue.submit(kernel, list(args), g, l_)


BACKENDS: tuple[Backend, ...] = (OpenCLBackend(), DpctlBackend())   # asked in order; dpctl takes any device


def backend_for(sycl_device) -> Backend:
    """The backend that runs ``sycl_device``."""
    return next(b for b in BACKENDS if b.ready(sycl_device))


def queue_backend(queue) -> Backend:
    """The backend that made ``queue``: a raw OpenCL queue's, else dpctl's (a SYCL queue, e.g. the one the call
    API uses for USM arrays, may be on an OpenCL device too)."""
    return next(b for b in BACKENDS if b.owns(queue))
