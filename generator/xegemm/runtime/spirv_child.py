"""The child process of a SPIR-V build (xegemm.runtime.spirv.build_in_child): run as a script, so that it loads
nothing but the standard library and the OpenCL ICD loader.

The Intel OpenCL CPU runtime aborts the whole process on some modules it cannot lower, so a module is built here
first, in a process that may die.  A child that imported xegemm (numpy, ml_dtypes, dpctl, the planner) spent
more time importing than building; this one reaches the device through ctypes alone.

``python -I spirv_child.py MODULE.spv BINARY_OUT`` with a JSON request on stdin: ``{"kind": "cpu" | "gpu",
"index": i, "options": "...", "loader": path}`` (the i-th OpenCL device of that type in platform order, as
xegemm.runtime.opencl.find_device counts them; ``loader``: the ICD loader library the parent has loaded, which
with the environment's ``OCL_ICD_FILENAMES`` finds the same devices).  Prints one JSON line, ``{"ok": true, "log": ""}`` or
``{"ok": false, "log": "..."}``, and writes the program binary to BINARY_OUT where the runtime gives one.
"""

from __future__ import annotations

import ctypes
import json
import sys

CL_DEVICE_TYPES = {"cpu": 1 << 1, "gpu": 1 << 2}
CL_PROGRAM_BINARY_SIZES, CL_PROGRAM_BINARIES, CL_PROGRAM_BUILD_LOG = 0x1165, 0x1166, 0x1183
vp, sz = ctypes.c_void_p, ctypes.c_size_t


def _loader(path: str | None):
    """The ICD loader the parent process uses (``path``), else the first found, as opencl_query's."""
    for name in ([path] if path else []) + ["libOpenCL.so.1", "libOpenCL.so", sys.prefix + "/lib/libOpenCL.so.1"]:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise OSError("no OpenCL ICD loader (libOpenCL.so.1)")


def _device(lib, kind: str, index: int):
    n = ctypes.c_uint()
    if lib.clGetPlatformIDs(0, None, ctypes.byref(n)) or n.value == 0:
        raise OSError("the OpenCL loader reports no platform")
    platforms = (vp * n.value)()
    lib.clGetPlatformIDs(n.value, platforms, None)
    devices = []
    for platform in platforms:
        count = ctypes.c_uint()
        if lib.clGetDeviceIDs(vp(platform), ctypes.c_ulong(CL_DEVICE_TYPES[kind]), 0, None, ctypes.byref(count)):
            continue
        ids = (vp * count.value)()
        lib.clGetDeviceIDs(vp(platform), ctypes.c_ulong(CL_DEVICE_TYPES[kind]), count.value, ids, None)
        devices += list(ids)
    if index >= len(devices):
        raise OSError(f"no OpenCL {kind} device {index} (the loader reports {len(devices)})")
    return vp(devices[index])


def _build_log(lib, program, device) -> str:
    size = sz()
    lib.clGetProgramBuildInfo(program, device, ctypes.c_uint(CL_PROGRAM_BUILD_LOG), sz(0), None, ctypes.byref(size))
    buf = ctypes.create_string_buffer(max(size.value, 1))
    lib.clGetProgramBuildInfo(program, device, ctypes.c_uint(CL_PROGRAM_BUILD_LOG), size, buf, None)
    return buf.value.decode(errors="replace")


def _binary(lib, program) -> bytes | None:
    size = sz()
    if lib.clGetProgramInfo(program, ctypes.c_uint(CL_PROGRAM_BINARY_SIZES), sz(ctypes.sizeof(size)), ctypes.byref(size),
                            None) or size.value == 0:
        return None
    buf = ctypes.create_string_buffer(size.value)
    pointers = (ctypes.c_char_p * 1)(ctypes.cast(buf, ctypes.c_char_p))
    if lib.clGetProgramInfo(program, ctypes.c_uint(CL_PROGRAM_BINARIES), sz(ctypes.sizeof(pointers)), pointers, None):
        return None
    return buf.raw


def build(il: bytes, kind: str, index: int, options: str, loader: str | None = None) -> tuple[bool, str, bytes | None]:
    """(built, the build log or error, the program binary) of a SPIR-V module on the device."""
    lib = _loader(loader)
    lib.clCreateContext.restype = vp
    lib.clCreateProgramWithIL.restype = vp
    device = _device(lib, kind, index)
    err = ctypes.c_int()
    context = lib.clCreateContext(None, ctypes.c_uint(1), ctypes.byref(device), None, None, ctypes.byref(err))
    if err.value:
        return False, f"clCreateContext failed ({err.value})", None
    program = lib.clCreateProgramWithIL(vp(context), il, sz(len(il)), ctypes.byref(err))
    if err.value:
        return False, f"clCreateProgramWithIL failed ({err.value})", None
    program = vp(program)
    status = lib.clBuildProgram(program, ctypes.c_uint(1), ctypes.byref(device), options.encode(), None, None)
    if status:
        return False, _build_log(lib, program, device) or f"clBuildProgram failed ({status})", None
    return True, "", _binary(lib, program)


def main() -> None:
    request = json.loads(sys.stdin.read())
    with open(sys.argv[1], "rb") as f:
        il = f.read()
    try:
        ok, log, binary = build(il, request["kind"], int(request["index"]), request.get("options", ""),
                                request.get("loader"))
    except OSError as exc:
        ok, log, binary = False, str(exc), None
    if ok and binary and len(sys.argv) > 2:
        try:
            with open(sys.argv[2], "wb") as f:
                f.write(binary)
        except OSError:
            pass          # no binary: the parent builds from the module
    print(json.dumps({"ok": ok, "log": log}))


if __name__ == "__main__":
    main()
