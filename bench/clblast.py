"""CLBlast's SGEMM through its C API (ctypes), on OpenCL buffers of the same OpenCL device xegemm runs on.

The OpenCL ICD loader is the one dpctl's OpenCL adapter already loaded (``xegemm.runtime`` names the CPU
runtime in ``OCL_ICD_FILENAMES`` before that), so the device found here by name and type is the one the
xegemm kernels run on, driven through a context and queue of its own.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re

import numpy as np

CL_DEVICE_TYPE_ALL = 0xFFFFFFFF
CL_DEVICE_TYPE = 0x1000
CL_DEVICE_NAME = 0x102B
CL_DEVICE_TYPE_CPU, CL_DEVICE_TYPE_GPU = 1 << 1, 1 << 2
CL_MEM_READ_WRITE, CL_MEM_COPY_HOST_PTR = 1 << 0, 1 << 5
CL_TRUE = 1
CLBLAST_ROW_MAJOR, CLBLAST_COL_MAJOR, CLBLAST_TRANSPOSE_NO = 101, 102, 111
CLBLAST_PRECISION_SINGLE = 32
# Two calls that compute the same row-major C = A B.  CLBlast's indirect GEMM copies and transposes operands
# into the layout its Xgemm kernel wants (src/routines/level3/xgemm.hpp: A not rotated, B rotated, C not,
# for GEMMK=0; all rotated for GEMMK=1), so which call needs fewer copies depends on the kernel's parameters.
ROW_MAJOR = "row-major"
SWAPPED = "column-major with A and B swapped (C^T = B^T A^T)"
CALLS = (ROW_MAJOR, SWAPPED)


class OpenCLError(RuntimeError):
    """An OpenCL or CLBlast call returned an error code."""


class DeviceNotFound(OpenCLError):
    """The OpenCL loader reports no device with the wanted name and type."""


def find_clblast() -> str | None:
    """The CLBlast shared library's name for ctypes, or None when it is not installed."""
    return ctypes.util.find_library("clblast")


def _check(code: int, what: str) -> None:
    if code:
        raise OpenCLError(f"{what} failed with status {code}")


def loaded_library_path(fragment: str) -> str | None:
    """Real path of the first library mapped into this process whose path contains ``fragment``."""
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            path = line.split()[-1]
            if fragment in os.path.basename(path):
                return os.path.realpath(path)
    return None


class CLBlastGemm:
    """C = A B in float32 with ``CLBlastSgemm`` on one OpenCL device (row-major, one call per batch)."""

    def __init__(self, device_name: str, device_type: str, a: np.ndarray, b: np.ndarray):
        self._cl = ctypes.CDLL("libOpenCL.so.1")
        self._blas = ctypes.CDLL(find_clblast() or "libclblast.so.1")
        self._declare()
        self.device = self._find_device(device_name, device_type)
        path = loaded_library_path("libclblast")
        match = re.search(r"\.so\.(\d+(?:\.\d+)*)$", path or "")
        self.version = match.group(1) if match else "unknown"
        self.library = path
        a3, b3 = (x.reshape((-1, *x.shape[-2:])).astype(np.float32) for x in (a, b))
        self.batch, self.m, self.k = a3.shape
        self.n = b3.shape[2]
        self._c_shape = (*a.shape[:-1], self.n)
        self.call = ROW_MAJOR
        self._handles: list[tuple[str, ctypes.c_void_p]] = []
        try:
            self._setup(a3, b3)
        except BaseException:
            self.close()
            raise

    def _setup(self, a3: np.ndarray, b3: np.ndarray) -> None:
        """Context, in-order queue and the A, B, C buffers."""
        err = ctypes.c_int()
        dev = ctypes.c_void_p(self.device)
        self._ctx = ctypes.c_void_p(self._cl.clCreateContext(None, 1, ctypes.byref(dev), None, None,
                                                             ctypes.byref(err)))
        _check(err.value, "clCreateContext")
        self._handles.append(("clReleaseContext", self._ctx))
        self._queue = ctypes.c_void_p(self._cl.clCreateCommandQueue(self._ctx, dev, ctypes.c_uint64(0),
                                                                    ctypes.byref(err)))
        _check(err.value, "clCreateCommandQueue")
        self._handles.append(("clReleaseCommandQueue", self._queue))
        self._a = self._buffer(np.ascontiguousarray(a3))
        self._b = self._buffer(np.ascontiguousarray(b3))
        self._c = self._buffer(np.zeros((self.batch, self.m, self.n), np.float32))

    def _declare(self) -> None:
        cl, vp, sz = self._cl, ctypes.c_void_p, ctypes.c_size_t
        for fn in ("clCreateContext", "clCreateCommandQueue", "clCreateBuffer"):
            getattr(cl, fn).restype = vp
        cl.clCreateBuffer.argtypes = [vp, ctypes.c_uint64, sz, vp, ctypes.POINTER(ctypes.c_int)]
        cl.clEnqueueReadBuffer.argtypes = [vp, vp, ctypes.c_uint, sz, sz, vp, ctypes.c_uint, vp, vp]
        cl.clGetDeviceInfo.argtypes = [vp, ctypes.c_uint, sz, vp, ctypes.POINTER(sz)]
        sgemm = self._blas.CLBlastSgemm
        sgemm.restype = ctypes.c_int
        sgemm.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, sz, sz, sz, ctypes.c_float,
                          vp, sz, sz, vp, sz, sz, ctypes.c_float, vp, sz, sz,
                          ctypes.POINTER(vp), ctypes.POINTER(vp)]

    def override(self, kernel: str, parameters: dict[str, int]) -> None:
        """Use these tuning parameters for ``kernel`` (e.g. ``Xgemm``, single precision) on this device from the
        next call on (``CLBlastOverrideParameters``; CLBlast compiles the kernel again with them)."""
        names = (ctypes.c_char_p * len(parameters))(*(name.encode() for name in parameters))
        values = (ctypes.c_size_t * len(parameters))(*parameters.values())
        fn = self._blas.CLBlastOverrideParameters
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_size_t,
                       ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_size_t)]
        _check(fn(self.device, kernel.encode(), CLBLAST_PRECISION_SINGLE, len(parameters), names, values),
               f"CLBlastOverrideParameters({kernel})")

    def _info(self, device: int, param: int) -> bytes:
        size = ctypes.c_size_t()
        _check(self._cl.clGetDeviceInfo(device, param, 0, None, ctypes.byref(size)), "clGetDeviceInfo")
        buf = ctypes.create_string_buffer(size.value)
        _check(self._cl.clGetDeviceInfo(device, param, size, buf, None), "clGetDeviceInfo")
        return buf.raw

    def _find_device(self, name: str, kind: str) -> int:
        """The OpenCL device with this name and type ("cpu" or "gpu")."""
        wanted = {"cpu": CL_DEVICE_TYPE_CPU, "gpu": CL_DEVICE_TYPE_GPU}.get(kind, 0)
        count = ctypes.c_uint()
        _check(self._cl.clGetPlatformIDs(0, None, ctypes.byref(count)), "clGetPlatformIDs")
        platforms = (ctypes.c_void_p * count.value)()
        _check(self._cl.clGetPlatformIDs(count.value, platforms, None), "clGetPlatformIDs")
        seen = []
        for platform in platforms:
            nd = ctypes.c_uint()
            if self._cl.clGetDeviceIDs(ctypes.c_void_p(platform), ctypes.c_uint64(CL_DEVICE_TYPE_ALL), 0, None,
                                       ctypes.byref(nd)):
                continue
            devices = (ctypes.c_void_p * nd.value)()
            self._cl.clGetDeviceIDs(ctypes.c_void_p(platform), ctypes.c_uint64(CL_DEVICE_TYPE_ALL), nd.value,
                                    devices, None)
            for device in devices:
                dev_name = self._info(device, CL_DEVICE_NAME).rstrip(b"\0").decode(errors="replace").strip()
                dev_type = int.from_bytes(self._info(device, CL_DEVICE_TYPE)[:8], "little")
                seen.append(dev_name)
                if dev_name == name.strip() and dev_type & wanted:
                    return device
        raise DeviceNotFound(f"no OpenCL {kind} device named {name!r} (the loader reports {seen})")

    def _buffer(self, array: np.ndarray) -> ctypes.c_void_p:
        err = ctypes.c_int()
        mem = ctypes.c_void_p(self._cl.clCreateBuffer(self._ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                                      array.nbytes, array.ctypes.data, ctypes.byref(err)))
        _check(err.value, "clCreateBuffer")
        self._handles.append(("clReleaseMemObject", mem))
        return mem

    def run(self) -> None:
        """One GEMM (``batch`` SGEMM calls in the form :attr:`call`, one of :data:`CALLS`), waited for with
        ``clFinish``."""
        m, n, k = self.m, self.n, self.k
        for i in range(self.batch):
            a, b = (self._a, i * m * k, k), (self._b, i * k * n, n)
            layout, (m1, n1), (x, y) = ((CLBLAST_ROW_MAJOR, (m, n), (a, b)) if self.call == ROW_MAJOR
                                        else (CLBLAST_COL_MAJOR, (n, m), (b, a)))
            event = ctypes.c_void_p()
            status = self._blas.CLBlastSgemm(layout, CLBLAST_TRANSPOSE_NO, CLBLAST_TRANSPOSE_NO, m1, n1, k, 1.0,
                                             *x, *y, 0.0, self._c, i * m * n, n, ctypes.byref(self._queue),
                                             ctypes.byref(event))
            _check(status, "CLBlastSgemm")
            if event.value:
                self._cl.clReleaseEvent(event)
        _check(self._cl.clFinish(self._queue), "clFinish")

    def result(self) -> np.ndarray:
        """C as computed by the last :meth:`run`."""
        out = np.empty((self.batch, self.m, self.n), np.float32)
        _check(self._cl.clEnqueueReadBuffer(self._queue, self._c, CL_TRUE, 0, out.nbytes, out.ctypes.data, 0,
                                            None, None), "clEnqueueReadBuffer")
        return out.reshape(self._c_shape)

    def close(self) -> None:
        while self._handles:
            release, handle = self._handles.pop()
            getattr(self._cl, release)(handle)

    def __enter__(self) -> CLBlastGemm:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
