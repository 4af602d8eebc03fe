"""Read ``CL_DEVICE_EXTENSIONS`` straight from the OpenCL ICD loader with ctypes.

dpctl 0.22 exposes no extension list, and capability detection must read the device's own list,
never guess from its name.  The loader library is the one dpctl's OpenCL adapter has already loaded
into the process, so this finds exactly the devices dpctl sees on the OpenCL backend.
"""

from __future__ import annotations

import ctypes

CL_DEVICE_TYPE_ALL = 0xFFFFFFFF
CL_DEVICE_NAME = 0x102B
CL_DEVICE_EXTENSIONS = 0x1030
CL_DEVICE_TYPE = 0x1000
CL_DEVICE_TYPE_CPU = 1 << 1
CL_DEVICE_TYPE_GPU = 1 << 2


def _load_loader():
    for name in ("libOpenCL.so.1", "libOpenCL.so"):
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
    lib = _load_loader()
    if lib is None:
        return []
    n = ctypes.c_uint()
    if lib.clGetPlatformIDs(0, None, ctypes.byref(n)) or n.value == 0:
        return []
    platforms = (ctypes.c_void_p * n.value)()
    lib.clGetPlatformIDs(n.value, platforms, None)
    found = []
    for platform in platforms:
        nd = ctypes.c_uint()
        if lib.clGetDeviceIDs(ctypes.c_void_p(platform), ctypes.c_uint64(CL_DEVICE_TYPE_ALL), 0, None, ctypes.byref(nd)):
            continue
        devices = (ctypes.c_void_p * nd.value)()
        lib.clGetDeviceIDs(ctypes.c_void_p(platform), ctypes.c_uint64(CL_DEVICE_TYPE_ALL), nd.value, devices, None)
        for device in devices:
            kind = int.from_bytes(_info_bytes(lib, device, CL_DEVICE_TYPE)[:8] or b"\0", "little")
            found.append({
                "name": _info_bytes(lib, device, CL_DEVICE_NAME).rstrip(b"\0").decode(errors="replace").strip(),
                "type": "gpu" if kind & CL_DEVICE_TYPE_GPU else "cpu" if kind & CL_DEVICE_TYPE_CPU else "other",
                "extensions": tuple(_info_bytes(lib, device, CL_DEVICE_EXTENSIONS).rstrip(b"\0").decode().split()),
            })
    return found
