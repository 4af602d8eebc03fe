"""Read ``CL_DEVICE_EXTENSIONS`` straight from the OpenCL ICD loader with ctypes.

dpctl 0.22 exposes no extension list, and capability detection must read the device's own list,
never guess from its name.  The loader library is the one dpctl's OpenCL adapter has already loaded
into the process, so this finds exactly the devices dpctl sees on the OpenCL backend.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

CL_DEVICE_TYPE_ALL = 0xFFFFFFFF
CL_DEVICE_NAME = 0x102B
CL_DEVICE_EXTENSIONS = 0x1030
CL_DEVICE_TYPE = 0x1000
CL_DEVICE_TYPE_CPU = 1 << 1
CL_DEVICE_TYPE_GPU = 1 << 2


def load_loader():
    """The OpenCL ICD loader (the one already in the process, if dpctl's adapter loaded it; else the system's,
    else the one the runtime wheels put in the environment's lib/), or None."""
    for name in ("libOpenCL.so.1", "libOpenCL.so", str(Path(sys.prefix) / "lib" / "libOpenCL.so.1")):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _info_bytes(lib, device, param) -> bytes:
    size = ctypes.c_size_t()
    if lib.clGetDeviceInfo(ctypes.c_void_p(device), ctypes.c_uint(param), 0, None, ctypes.byref(size)):
        return b""
    buf = ctypes.create_string_buffer(size.value)
    if lib.clGetDeviceInfo(ctypes.c_void_p(device), ctypes.c_uint(param), size, buf, None):
        return b""
    return buf.raw


def opencl_devices() -> list[dict]:
    """All OpenCL devices the loader reports: ``[{"name", "type": "cpu"|"gpu"|"other", "extensions"}]``."""
    lib = load_loader()
    if lib is None:
        return []
    return [{"name": name, "type": kind,
             "extensions": tuple(_info_bytes(lib, d, CL_DEVICE_EXTENSIONS).rstrip(b"\0").decode().split())}
            for d, name, kind in device_handles(lib)]


def device_handles(lib) -> list[tuple[int, str, str]]:
    """Every OpenCL device the loader reports, in platform order: ``(cl_device_id, name, "cpu"|"gpu"|"other")``."""
    n = ctypes.c_uint()
    if lib.clGetPlatformIDs(0, None, ctypes.byref(n)) or n.value == 0:
        return []
    platforms = (ctypes.c_void_p * n.value)()
    lib.clGetPlatformIDs(n.value, platforms, None)
    out = []
    for platform in platforms:
        nd = ctypes.c_uint()
        if lib.clGetDeviceIDs(ctypes.c_void_p(platform), ctypes.c_uint64(CL_DEVICE_TYPE_ALL), 0, None, ctypes.byref(nd)):
            continue
        devices = (ctypes.c_void_p * nd.value)()
        lib.clGetDeviceIDs(ctypes.c_void_p(platform), ctypes.c_uint64(CL_DEVICE_TYPE_ALL), nd.value, devices, None)
        for device in devices:
            kind = int.from_bytes(_info_bytes(lib, device, CL_DEVICE_TYPE)[:8] or b"\0", "little")
            name = _info_bytes(lib, device, CL_DEVICE_NAME).rstrip(b"\0").decode(errors="replace").strip()
            out.append((device, name, "gpu" if kind & CL_DEVICE_TYPE_GPU else "cpu" if kind & CL_DEVICE_TYPE_CPU else "other"))
    return out


def build_log(device_name: str, device_type: str, source: str, options: str) -> str | None:
    """Build the source with plain OpenCL on the matching device and return the compiler's build log.

    dpctl's compilation error carries no log, so a failed build is repeated here to recover it.
    """
    lib = load_loader()
    if lib is None:
        return None
    lib.clCreateContext.restype = ctypes.c_void_p
    lib.clCreateProgramWithSource.restype = ctypes.c_void_p
    for device, name, kind in device_handles(lib):
        if name != device_name or kind != device_type:
            continue
        err = ctypes.c_int()
        dev = ctypes.c_void_p(device)
        ctx = lib.clCreateContext(None, 1, ctypes.byref(dev), None, None, ctypes.byref(err))
        if err.value:
            return None
        src = ctypes.c_char_p(source.encode())
        prog = lib.clCreateProgramWithSource(ctypes.c_void_p(ctx), 1, ctypes.byref(src), None, ctypes.byref(err))
        try:
            lib.clBuildProgram(ctypes.c_void_p(prog), 1, ctypes.byref(dev), options.encode(), None, None)
            size = ctypes.c_size_t()
            lib.clGetProgramBuildInfo(ctypes.c_void_p(prog), dev, ctypes.c_uint(0x1183), 0, None, ctypes.byref(size))
            buf = ctypes.create_string_buffer(size.value)
            lib.clGetProgramBuildInfo(ctypes.c_void_p(prog), dev, ctypes.c_uint(0x1183), size, buf, None)
            return buf.value.decode(errors="replace")
        finally:
            lib.clReleaseProgram(ctypes.c_void_p(prog))
            lib.clReleaseContext(ctypes.c_void_p(ctx))
    return None
