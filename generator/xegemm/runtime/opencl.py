"""The raw OpenCL backend (ctypes over the ICD loader dpctl's OpenCL adapter already loaded).

On an OpenCL device xegemm builds, allocates, launches and times through this module end to end: one context
per device and process, in-order profiling queues in it, ``cl_mem`` buffers, programs built from source or
loaded from a binary (which dpctl 0.22 cannot do, and which is what makes the persistent program cache of
:mod:`xegemm.runtime.program_cache` possible), and profiling events.  dpctl stays the front end that finds
devices; the OpenCL device is the one dpctl reports, matched by type, index and name.

The objects mirror the few dpctl calls xegemm uses (``get_sycl_kernel``, ``copy_from_host``,
``copy_to_host``, ``wait``, ``profiling_info_start``/``_end``), so callers do not depend on the backend.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

import numpy as np

from xegemm.errors import RuntimeSetupError, XegemmError
from xegemm.runtime.opencl_query import device_handles, load_loader

vp, sz, u32, i32 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int
P = ctypes.POINTER

CL_TRUE = 1
CL_DEVICE_VERSION, CL_DRIVER_VERSION, CL_DEVICE_PLATFORM, CL_DEVICE_VENDOR = 0x102F, 0x102D, 0x1031, 0x102C
CL_PLATFORM_VERSION, CL_PLATFORM_NAME = 0x0901, 0x0902
CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE = 0x1093, 1 << 1
CL_MEM_READ_WRITE = 1 << 0
CL_PROGRAM_BINARY_SIZES, CL_PROGRAM_BINARIES = 0x1165, 0x1166
CL_PROGRAM_BUILD_LOG = 0x1183
CL_PROFILING_COMMAND_START, CL_PROFILING_COMMAND_END = 0x1282, 0x1283

ERROR_NAMES = {-1: "CL_DEVICE_NOT_FOUND", -2: "CL_DEVICE_NOT_AVAILABLE", -4: "CL_MEM_OBJECT_ALLOCATION_FAILURE",
               -5: "CL_OUT_OF_RESOURCES", -6: "CL_OUT_OF_HOST_MEMORY", -11: "CL_BUILD_PROGRAM_FAILURE",
               -30: "CL_INVALID_VALUE", -33: "CL_INVALID_DEVICE", -34: "CL_INVALID_CONTEXT",
               -36: "CL_INVALID_COMMAND_QUEUE", -38: "CL_INVALID_MEM_OBJECT", -42: "CL_INVALID_BINARY",
               -44: "CL_INVALID_PROGRAM", -45: "CL_INVALID_PROGRAM_EXECUTABLE", -46: "CL_INVALID_KERNEL_NAME",
               -48: "CL_INVALID_KERNEL", -49: "CL_INVALID_ARG_INDEX", -50: "CL_INVALID_ARG_VALUE",
               -51: "CL_INVALID_ARG_SIZE", -52: "CL_INVALID_KERNEL_ARGS", -54: "CL_INVALID_WORK_GROUP_SIZE",
               -55: "CL_INVALID_WORK_ITEM_SIZE", -61: "CL_INVALID_BUFFER_SIZE", -63: "CL_INVALID_GLOBAL_WORK_SIZE"}


class OpenCLError(XegemmError):
    """An OpenCL call failed; ``code`` is its status."""

    def __init__(self, what: str, code: int):
        super().__init__(f"{what} failed: {ERROR_NAMES.get(code, 'status')} ({code})")
        self.code = code


def _check(code: int, what: str) -> None:
    if code:
        raise OpenCLError(what, code)


_SIGNATURES = {
    "clGetDeviceInfo": (i32, [vp, u32, sz, vp, P(sz)]),
    "clGetPlatformInfo": (i32, [vp, u32, sz, vp, P(sz)]),
    "clCreateContext": (vp, [vp, u32, P(vp), vp, vp, P(i32)]),
    "clReleaseContext": (i32, [vp]),
    "clCreateCommandQueueWithProperties": (vp, [vp, vp, P(ctypes.c_uint64), P(i32)]),
    "clReleaseCommandQueue": (i32, [vp]),
    "clFinish": (i32, [vp]),
    "clCreateBuffer": (vp, [vp, ctypes.c_uint64, sz, vp, P(i32)]),
    "clReleaseMemObject": (i32, [vp]),
    "clEnqueueWriteBuffer": (i32, [vp, vp, u32, sz, sz, vp, u32, vp, vp]),
    "clEnqueueReadBuffer": (i32, [vp, vp, u32, sz, sz, vp, u32, vp, vp]),
    "clCreateProgramWithSource": (vp, [vp, u32, P(ctypes.c_char_p), P(sz), P(i32)]),
    "clCreateProgramWithBinary": (vp, [vp, u32, P(vp), P(sz), P(P(ctypes.c_ubyte)), P(i32), P(i32)]),
    "clCreateProgramWithIL": (vp, [vp, vp, sz, P(i32)]),
    "clBuildProgram": (i32, [vp, u32, P(vp), ctypes.c_char_p, vp, vp]),
    "clGetProgramBuildInfo": (i32, [vp, vp, u32, sz, vp, P(sz)]),
    "clGetProgramInfo": (i32, [vp, u32, sz, vp, P(sz)]),
    "clReleaseProgram": (i32, [vp]),
    "clCreateKernel": (vp, [vp, ctypes.c_char_p, P(i32)]),
    "clSetKernelArg": (i32, [vp, u32, sz, vp]),
    "clReleaseKernel": (i32, [vp]),
    "clEnqueueNDRangeKernel": (i32, [vp, vp, u32, vp, P(sz), P(sz), u32, vp, P(vp)]),
    "clWaitForEvents": (i32, [u32, P(vp)]),
    "clGetEventProfilingInfo": (i32, [vp, u32, sz, vp, P(sz)]),
    "clReleaseEvent": (i32, [vp]),
}

_LIB = None
_LOCK = threading.Lock()
_CONTEXTS_LOCK = threading.Lock()


def library():
    """The OpenCL ICD loader with the signatures this module calls (loaded once)."""
    global _LIB
    with _LOCK:
        if _LIB is None:
            lib = load_loader()
            if lib is None:
                raise RuntimeSetupError("cannot load the OpenCL ICD loader (libOpenCL.so.1); reinstall the pinned "
                                        "runtime wheels (`rm -rf .venv && make test`)")
            for name, (restype, argtypes) in _SIGNATURES.items():
                fn = getattr(lib, name)
                fn.restype, fn.argtypes = restype, argtypes
            _LIB = lib
        return _LIB


def _info(getter, handle, param: int) -> bytes:
    size = sz()
    _check(getter(handle, param, 0, None, ctypes.byref(size)), getter.__name__)
    buf = ctypes.create_string_buffer(size.value)
    _check(getter(handle, param, size, buf, None), getter.__name__)
    return buf.raw


def _text(raw: bytes) -> str:
    return raw.rstrip(b"\0").decode(errors="replace").strip()


@dataclass(frozen=True)
class OpenCLDevice:
    """One OpenCL device and what identifies its compiler (for the program cache's key)."""

    handle: int
    name: str
    kind: str
    vendor: str
    driver_version: str
    device_version: str
    platform: str

    def identity(self) -> dict:
        """Everything about the device and its runtime that decides what a build produces."""
        return {"name": self.name, "type": self.kind, "vendor": self.vendor, "driver": self.driver_version,
                "device_version": self.device_version, "platform": self.platform}


def find_device(sycl_device) -> OpenCLDevice:
    """The OpenCL device behind a dpctl device of the OpenCL backend (same type, same index, same name)."""
    lib = library()
    kind = sycl_device.device_type.name
    same_kind = [(h, name) for h, name, k in device_handles(lib) if k == kind]
    index = int(sycl_device.filter_string.rsplit(":", 1)[-1]) if sycl_device.filter_string[-1:].isdigit() else 0
    candidates = [same_kind[index]] if index < len(same_kind) else []
    candidates += [c for c in same_kind if c not in candidates]
    for handle, name in candidates:
        if name == sycl_device.name.strip():
            dev = vp(handle)
            platform = vp(int.from_bytes(_info(lib.clGetDeviceInfo, dev, CL_DEVICE_PLATFORM)[:8], "little"))
            return OpenCLDevice(handle, name, kind, _text(_info(lib.clGetDeviceInfo, dev, CL_DEVICE_VENDOR)),
                                _text(_info(lib.clGetDeviceInfo, dev, CL_DRIVER_VERSION)),
                                _text(_info(lib.clGetDeviceInfo, dev, CL_DEVICE_VERSION)),
                                f"{_text(_info(lib.clGetPlatformInfo, platform, CL_PLATFORM_NAME))} "
                                f"{_text(_info(lib.clGetPlatformInfo, platform, CL_PLATFORM_VERSION))}")
    raise RuntimeSetupError(f"the OpenCL loader reports no {kind} device named {sycl_device.name!r} "
                            f"(dpctl's {sycl_device.filter_string}); it reports {[n for _, n in same_kind]}")


class OpenCLContext:
    """A context on one device; every queue, buffer and program of that device in this process lives in it."""

    _by_device: dict[int, OpenCLContext] = {}

    def __init__(self, device: OpenCLDevice):
        lib, err, dev = library(), i32(), vp(device.handle)
        self.device = device
        self.handle = lib.clCreateContext(None, 1, ctypes.byref(dev), None, None, ctypes.byref(err))
        _check(err.value, "clCreateContext")

    @classmethod
    def for_device(cls, device: OpenCLDevice) -> OpenCLContext:
        """The process's one context on ``device`` (contexts are never released: they live as long as it)."""
        with _CONTEXTS_LOCK:
            if device.handle not in cls._by_device:
                cls._by_device[device.handle] = cls(device)
            return cls._by_device[device.handle]


class OpenCLQueue:
    """An in-order command queue (with profiling by default).  ``sycl_device`` is the dpctl device it was
    made for, as on a dpctl queue."""

    def __init__(self, sycl_device, profiling: bool = True):
        self.sycl_device = sycl_device
        self.context = OpenCLContext.for_device(find_device(sycl_device))
        self.device = self.context.device
        lib, err = library(), i32()
        props = (ctypes.c_uint64 * 3)(CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE if profiling else 0, 0)
        self.handle = lib.clCreateCommandQueueWithProperties(self.context.handle, vp(self.device.handle), props,
                                                             ctypes.byref(err))
        _check(err.value, "clCreateCommandQueueWithProperties")

    def wait(self) -> None:
        """Block until everything submitted has finished."""
        _check(library().clFinish(self.handle), "clFinish")

    def __del__(self):
        if getattr(self, "handle", None) and _LIB is not None:
            _LIB.clReleaseCommandQueue(self.handle)


class OpenCLBuffer:
    """A device buffer; reads and writes are blocking and ordered after the queue's earlier work."""

    def __init__(self, queue: OpenCLQueue, nbytes: int):
        lib, err = library(), i32()
        self.queue, self.nbytes = queue, int(nbytes)
        self.handle = lib.clCreateBuffer(queue.context.handle, CL_MEM_READ_WRITE, self.nbytes, None,
                                         ctypes.byref(err))
        _check(err.value, f"clCreateBuffer ({self.nbytes} bytes)")

    def copy_from_host(self, data) -> None:
        """Write bytes (any buffer-protocol object, at most ``nbytes``) to the start of the buffer."""
        src = np.ascontiguousarray(np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8))
        if src.nbytes > self.nbytes:
            raise ValueError(f"{src.nbytes} bytes do not fit a buffer of {self.nbytes}")
        _check(library().clEnqueueWriteBuffer(self.queue.handle, self.handle, CL_TRUE, 0, src.nbytes,
                                              src.ctypes.data, 0, None, None), "clEnqueueWriteBuffer")

    def copy_to_host(self) -> np.ndarray:
        """The whole buffer as uint8."""
        out = np.empty(self.nbytes, np.uint8)
        _check(library().clEnqueueReadBuffer(self.queue.handle, self.handle, CL_TRUE, 0, self.nbytes,
                                             out.ctypes.data, 0, None, None), "clEnqueueReadBuffer")
        return out

    def write_from(self, src: np.ndarray) -> None:
        """Enqueue a write of a C-contiguous uint8 array without waiting: the caller keeps ``src`` alive and
        unchanged until the queue has finished (a later blocking read or ``wait()`` on this in-order queue)."""
        if src.nbytes > self.nbytes or not src.flags.c_contiguous:
            raise ValueError(f"cannot write {src.nbytes} bytes from this array into a buffer of {self.nbytes}")
        _check(library().clEnqueueWriteBuffer(self.queue.handle, self.handle, 0, 0, src.nbytes, src.ctypes.data,
                                              0, None, None), "clEnqueueWriteBuffer")

    def read_into(self, out: np.ndarray) -> None:
        """Read the first ``out.nbytes`` bytes into a C-contiguous uint8 array."""
        if out.nbytes > self.nbytes or not out.flags.c_contiguous:
            raise ValueError(f"cannot read {out.nbytes} bytes from a buffer of {self.nbytes} into this array")
        _check(library().clEnqueueReadBuffer(self.queue.handle, self.handle, CL_TRUE, 0, out.nbytes,
                                             out.ctypes.data, 0, None, None), "clEnqueueReadBuffer")

    def __del__(self):
        if getattr(self, "handle", None) and _LIB is not None:
            _LIB.clReleaseMemObject(self.handle)


class OpenCLEvent:
    """A launch's event: ``wait()``, then ``profiling_info_start`` / ``profiling_info_end`` in ns."""

    def __init__(self, handle):
        self.handle = handle

    def wait(self) -> None:
        ev = vp(self.handle)
        _check(library().clWaitForEvents(1, ctypes.byref(ev)), "clWaitForEvents (the kernel failed)")

    def _profile(self, param: int) -> int:
        value = ctypes.c_uint64()
        _check(library().clGetEventProfilingInfo(self.handle, param, 8, ctypes.byref(value), None),
               "clGetEventProfilingInfo")
        return value.value

    @property
    def profiling_info_start(self) -> int:
        return self._profile(CL_PROFILING_COMMAND_START)

    @property
    def profiling_info_end(self) -> int:
        return self._profile(CL_PROFILING_COMMAND_END)

    def __del__(self):
        if getattr(self, "handle", None) and _LIB is not None:
            _LIB.clReleaseEvent(self.handle)


class OpenCLBuildFailure(XegemmError):
    """clBuildProgram failed; ``log`` is the compiler's build log."""

    def __init__(self, code: int, log: str):
        super().__init__(f"clBuildProgram failed ({ERROR_NAMES.get(code, code)})")
        self.code, self.log = code, log


class OpenCLKernel:
    """A kernel of a program; :meth:`launch` sets its arguments and enqueues it (one launch at a time)."""

    def __init__(self, program: OpenCLProgram, name: str):
        err = i32()
        self.name, self.program = name, program
        self.handle = library().clCreateKernel(program.handle, name.encode(), ctypes.byref(err))
        _check(err.value, f"clCreateKernel({name!r})")
        self._lock = threading.Lock()
        self._args_set = None     # the argument list last set (kept alive): launching it again sets nothing

    def _set_args(self, args) -> None:
        lib = library()
        for i, arg in enumerate(args):
            if isinstance(arg, OpenCLBuffer):
                mem = vp(arg.handle)
                code = lib.clSetKernelArg(self.handle, i, ctypes.sizeof(mem), ctypes.byref(mem))
            elif isinstance(arg, ctypes._SimpleCData):
                code = lib.clSetKernelArg(self.handle, i, ctypes.sizeof(arg), ctypes.byref(arg))
            else:
                raise TypeError(f"kernel {self.name} argument {i}: {type(arg).__name__} is neither a buffer of "
                                "this device (to_device) nor a ctypes scalar (ctypes.c_int(...))")
            _check(code, f"clSetKernelArg({self.name}, {i})")

    def launch(self, queue: OpenCLQueue, args, global_size, local_size) -> OpenCLEvent:
        """Enqueue with OpenCL-order ranges; returns the event.  Launching the same list object again sets no
        argument (OpenCL keeps them): a caller must not change a list it has launched."""
        dims = len(global_size)
        g = (sz * dims)(*[int(x) for x in global_size])
        l_ = (sz * dims)(*[int(x) for x in local_size]) if local_size is not None else None
        event = vp()
        with self._lock:
            if args is not self._args_set:
                self._args_set = None
                self._set_args(args)
                self._args_set = args
            _check(library().clEnqueueNDRangeKernel(queue.handle, self.handle, dims, None, g, l_, 0, None,
                                                    ctypes.byref(event)), f"clEnqueueNDRangeKernel({self.name})")
        return OpenCLEvent(event.value)

    def __del__(self):
        if getattr(self, "handle", None) and _LIB is not None:
            _LIB.clReleaseKernel(self.handle)


class OpenCLProgram:
    """A built program.  ``from_cache`` says whether it was loaded from a stored binary."""

    def __init__(self, context: OpenCLContext, handle, from_cache: bool):
        self.context, self.handle, self.from_cache = context, handle, from_cache
        self._kernels: dict[str, OpenCLKernel] = {}

    def get_sycl_kernel(self, name: str) -> OpenCLKernel:
        """The kernel ``name`` (the dpctl method's name, so callers work with either backend)."""
        if name not in self._kernels:
            self._kernels[name] = OpenCLKernel(self, name)
        return self._kernels[name]

    def has_sycl_kernel(self, name: str) -> bool:
        """Whether the program has a kernel ``name``."""
        try:
            self.get_sycl_kernel(name)
        except OpenCLError as exc:
            if exc.code == -46:       # CL_INVALID_KERNEL_NAME
                return False
            raise
        return True

    def binary(self) -> bytes:
        """The device binary (what :func:`program_from_binary` loads)."""
        lib = library()
        size = sz()
        _check(lib.clGetProgramInfo(self.handle, CL_PROGRAM_BINARY_SIZES, ctypes.sizeof(size), ctypes.byref(size),
                                    None), "clGetProgramInfo(BINARY_SIZES)")
        buf = ctypes.create_string_buffer(size.value)
        ptr = vp(ctypes.addressof(buf))
        _check(lib.clGetProgramInfo(self.handle, CL_PROGRAM_BINARIES, ctypes.sizeof(ptr), ctypes.byref(ptr), None),
               "clGetProgramInfo(BINARIES)")
        return buf.raw

    def __del__(self):
        if getattr(self, "handle", None) and _LIB is not None:
            _LIB.clReleaseProgram(self.handle)


def _build(context: OpenCLContext, handle, options: str) -> None:
    """clBuildProgram; on failure release the program and raise with the build log."""
    lib, dev = library(), vp(context.device.handle)
    code = lib.clBuildProgram(handle, 1, ctypes.byref(dev), options.encode(), None, None)
    if code:
        size = sz()
        log = ""
        if not lib.clGetProgramBuildInfo(handle, dev, CL_PROGRAM_BUILD_LOG, 0, None, ctypes.byref(size)):
            buf = ctypes.create_string_buffer(size.value)
            if not lib.clGetProgramBuildInfo(handle, dev, CL_PROGRAM_BUILD_LOG, size, buf, None):
                log = buf.value.decode(errors="replace")
        lib.clReleaseProgram(handle)
        raise OpenCLBuildFailure(code, log)


def program_from_source(context: OpenCLContext, source: str, options: str) -> OpenCLProgram:
    """Compile and link OpenCL C; raises :class:`OpenCLBuildFailure` with the log."""
    lib, err = library(), i32()
    src = ctypes.c_char_p(source.encode())
    handle = lib.clCreateProgramWithSource(context.handle, 1, ctypes.byref(src), None, ctypes.byref(err))
    _check(err.value, "clCreateProgramWithSource")
    _build(context, handle, options)
    return OpenCLProgram(context, handle, from_cache=False)


def program_from_binary(context: OpenCLContext, binary: bytes, options: str) -> OpenCLProgram:
    """Load a binary of :meth:`OpenCLProgram.binary`; raises OpenCLError or OpenCLBuildFailure if the runtime
    refuses it."""
    lib, err, status = library(), i32(), i32()
    dev = vp(context.device.handle)
    data = (ctypes.c_ubyte * len(binary)).from_buffer_copy(binary)
    ptr = ctypes.cast(data, P(ctypes.c_ubyte))
    length = sz(len(binary))
    handle = lib.clCreateProgramWithBinary(context.handle, 1, ctypes.byref(dev), ctypes.byref(length),
                                           ctypes.byref(ptr), ctypes.byref(status), ctypes.byref(err))
    if err.value or status.value:
        if handle:
            lib.clReleaseProgram(handle)
        raise OpenCLError("clCreateProgramWithBinary", err.value or status.value)
    _build(context, handle, options)
    return OpenCLProgram(context, handle, from_cache=True)


def program_from_il(context: OpenCLContext, il: bytes, options: str = "") -> OpenCLProgram:
    """Build a SPIR-V module (``clCreateProgramWithIL``); raises :class:`OpenCLBuildFailure` with the log.  Some
    runtimes abort the whole process on modules they cannot lower (xegemm.runtime.spirv builds in a child
    process first)."""
    lib, err = library(), i32()
    data = ctypes.create_string_buffer(bytes(il), len(il))
    handle = lib.clCreateProgramWithIL(context.handle, ctypes.cast(data, vp), len(il), ctypes.byref(err))
    if err.value:
        if handle:
            lib.clReleaseProgram(handle)
        raise OpenCLError("clCreateProgramWithIL", err.value)
    _build(context, handle, options)
    return OpenCLProgram(context, handle, from_cache=False)
