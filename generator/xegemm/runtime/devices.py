"""Device discovery, selection and capability report through dpctl.

Default choice, best first: a Level Zero Intel GPU, an OpenCL GPU, the OpenCL CPU runtime.  Which
lowering a device gets is read from its extension list (``CL_DEVICE_EXTENSIONS``), never from its name:
``native`` needs Xe 2D block IO and DPAS, anything else runs the ``portable`` lowering.
"""

from __future__ import annotations

import ctypes
import os
import resource
from dataclasses import asdict, dataclass, field

from xegemm.errors import DeviceNotFoundError, RuntimeSetupError
from xegemm.lowering import device_lowering
from xegemm.runtime.environment import find_cpu_runtime
from xegemm.runtime.host import last_level_cache_bytes
from xegemm.runtime.opencl_query import opencl_devices
from xegemm.runtime.sycl import dpctl, dpmem, dpprog
from xegemm.library.targets import CAPABILITY_EXTENSIONS as TARGET_EXTENSIONS
from xegemm.library.targets import EXT_2D_BLOCK_IO, EXT_DPAS, EXT_EXTENDED_BLOCK_READ, EXT_FP16, EXT_SUBGROUPS
from xegemm.library.targets import SUBGROUP_BLOCK_EXTENSIONS

CAPABILITY_EXTENSIONS = (*TARGET_EXTENSIONS, SUBGROUP_BLOCK_EXTENSIONS[16], EXT_FP16)   # shown by `devices`

DEFAULT_PREFERENCE = ("level_zero:gpu", "opencl:gpu", "opencl:cpu")


@dataclass(frozen=True)
class DeviceInfo:
    """What xegemm knows about one SYCL device."""

    filter_string: str
    name: str
    vendor: str
    backend: str
    device_type: str
    driver_version: str
    compute_units: int
    max_work_group_size: int
    sub_group_sizes: tuple[int, ...]
    fp16: bool
    fp64: bool
    global_mem_bytes: int
    extensions: tuple[str, ...] = field(repr=False)
    extensions_source: str = "opencl"
    global_mem_cache_bytes: int = 0     # CL_DEVICE_GLOBAL_MEM_CACHE_SIZE (a CPU reports one core's L2); 0: unknown
    local_mem_bytes: int = 0            # CL_DEVICE_LOCAL_MEM_SIZE, a work-group's local memory; 0: unknown

    @property
    def block_2d_io(self) -> bool:
        """Xe 2D block reads (and, with the modern extension, writes and prefetches)."""
        return EXT_2D_BLOCK_IO in self.extensions or EXT_EXTENDED_BLOCK_READ in self.extensions

    @property
    def shared_cache_bytes(self) -> int:
        """The cache the work-groups of one launch share: a GPU's global memory cache (its L2); on the CPU device,
        whose figure is one core's L2 while its work-groups run on every core, the host's last-level cache."""
        return last_level_cache_bytes(self.global_mem_cache_bytes, self.device_type == "cpu")

    @property
    def dpas(self) -> bool:
        """DPAS through ``intel_sub_group_*_matrix_mad_k*``."""
        return EXT_DPAS in self.extensions

    @property
    def lowering(self) -> str:
        """The lowering generated code uses on this device (decided by :func:`xegemm.lowering.device_lowering`)."""
        return device_lowering(self.extensions, self.sub_group_sizes).name

    @property
    def supports_sub_group_16(self) -> bool:
        return 16 in self.sub_group_sizes and EXT_SUBGROUPS in self.extensions

    def as_dict(self) -> dict:
        d = asdict(self)
        d["sub_group_sizes"] = list(self.sub_group_sizes)
        d["extensions"] = list(self.extensions)
        d.update(block_2d_io=self.block_2d_io, dpas=self.dpas, lowering=self.lowering)
        return d


def dpctl_module():
    """The dpctl module (imported by :mod:`xegemm.runtime.sycl` after the OpenCL environment is prepared)."""
    return dpctl


def _resource_limits() -> list[str]:
    """Finite limits of this process that can stop the OpenCL CPU runtime from starting (it maps hundreds of MiB
    of address space when it loads), and too little free memory."""
    found = []
    for name, what in (("RLIMIT_AS", "address space (ulimit -v)"), ("RLIMIT_DATA", "data segment (ulimit -d)")):
        soft, _ = resource.getrlimit(getattr(resource, name))
        if soft != resource.RLIM_INFINITY:
            found.append(f"the {what} is limited to {soft >> 20} MiB")
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        if available < 512 << 20:
            found.append(f"only {available >> 20} MiB of memory is free")
    except (ValueError, OSError):   # pragma: no cover - not on Linux
        pass
    return found


def failure_reason(exc: BaseException) -> str:
    """An exception as a variant's reason: ``TYPE: text``; running out of memory says so, with this process's
    memory limits (a MemoryError under ``ulimit -v`` carries no text of its own)."""
    if isinstance(exc, MemoryError):
        limits = _resource_limits()
        detail = f" ({type(exc).__name__}: {exc})" if str(exc) else ""
        return (f"out of memory{detail}: " + (" and ".join(limits) if limits else "no process limit is set, the "
                                               "machine ran out") + "; raise the limit or run a smaller problem")
    return f"{type(exc).__name__}: {exc}"


def _no_device_message() -> str:
    lib = find_cpu_runtime()
    limits = _resource_limits()
    if lib and limits:
        return ("dpctl sees no SYCL device: the Intel OpenCL CPU runtime at " f"{lib} could not start because "
                + " and ".join(limits) + ". Fix: raise the limit (e.g. `ulimit -v unlimited`) or free memory; "
                "the installation is fine.")
    if lib:
        return ("dpctl sees no SYCL device. Looked for a Level Zero GPU, an OpenCL GPU and the OpenCL CPU device; "
                f"the Intel OpenCL CPU runtime was found at {lib} but reported no device. If it is damaged, "
                "reinstall it: `pip install --force-reinstall intel-opencl-rt==2026.0.0 "
                "intel-cmplr-lib-ur==2026.0.0` (2026.2.0 of intel-cmplr-lib-ur ships no OpenCL adapter).")
    return ("dpctl sees no SYCL device. Looked for a Level Zero GPU, an OpenCL GPU and the OpenCL CPU device; the "
            "Intel OpenCL CPU runtime (libintelocl.so from the intel-opencl-rt wheel) was not found. Fix: install "
            "the pinned runtime (`make test` creates .venv with it), or `pip install intel-opencl-rt==2026.0.0 "
            "intel-cmplr-lib-ur==2026.0.0` (2026.2.0 of intel-cmplr-lib-ur ships no OpenCL adapter).")


_EXTENSION_CACHE: dict[tuple[str, str], tuple[tuple[str, ...], str]] = {}


def _extensions(sycl_device) -> tuple[tuple[str, ...], str]:
    key = (sycl_device.filter_string, sycl_device.driver_version)
    if key in _EXTENSION_CACHE:
        return _EXTENSION_CACHE[key]
    kind = sycl_device.device_type.name
    matches = [d for d in opencl_devices() if d["name"] == sycl_device.name and d["type"] == kind]
    if matches:
        result = (matches[0]["extensions"], "opencl")
    else:
        result = (_probe_extension_macros(sycl_device), "compiler-macros")
    _EXTENSION_CACHE[key] = result
    return result


def _probe_extension_macros(sycl_device) -> tuple[str, ...]:
    """For a device with no OpenCL twin: ask its OpenCL C compiler which extension macros it defines."""
    lines = [f"#ifdef {e}\n  flags[{i}] = 1;\n#endif" for i, e in enumerate(CAPABILITY_EXTENSIONS)]
    src = "__kernel void probe(__global int* flags) {\n" + "\n".join(lines) + "\n}\n"
    try:
        queue = dpctl.SyclQueue(sycl_device)
        kernel = dpprog.create_program_from_source(queue, src, "").get_sycl_kernel("probe")
        buf = dpmem.MemoryUSMShared(4 * len(CAPABILITY_EXTENSIONS), queue=queue)
        buf.copy_from_host(bytes(4 * len(CAPABILITY_EXTENSIONS)))
        queue.submit(kernel, [buf], [1]).wait()
        flags = (ctypes.c_int * len(CAPABILITY_EXTENSIONS)).from_buffer_copy(buf.copy_to_host())
    except Exception:  # noqa: BLE001 - a device that cannot build OpenCL C has none of these
        return ()
    return tuple(e for e, f in zip(CAPABILITY_EXTENSIONS, flags) if f)


def describe(sycl_device) -> DeviceInfo:
    """The capability report of one ``dpctl.SyclDevice``."""
    extensions, source = _extensions(sycl_device)
    return DeviceInfo(
        filter_string=sycl_device.filter_string,
        name=sycl_device.name,
        vendor=sycl_device.vendor,
        backend=sycl_device.backend.name,
        device_type=sycl_device.device_type.name,
        driver_version=sycl_device.driver_version,
        compute_units=int(sycl_device.max_compute_units),
        max_work_group_size=int(sycl_device.max_work_group_size),
        sub_group_sizes=tuple(int(s) for s in sycl_device.sub_group_sizes),
        fp16=bool(sycl_device.has_aspect_fp16),
        fp64=bool(sycl_device.has_aspect_fp64),
        global_mem_bytes=int(sycl_device.global_mem_size),
        extensions=tuple(extensions),
        extensions_source=source,
        global_mem_cache_bytes=int(sycl_device.global_mem_cache_size),
        local_mem_bytes=int(getattr(sycl_device, "local_mem_size", 0) or 0),
    )


def sycl_devices() -> list:
    """Every ``dpctl.SyclDevice`` the runtime sees (possibly empty)."""
    return list(dpctl_module().get_devices())


def list_devices() -> list[DeviceInfo]:
    """Capability reports of every device; raises RuntimeSetupError when there is none."""
    devices = sycl_devices()
    if not devices:
        raise RuntimeSetupError(_no_device_message())
    return [describe(d) for d in devices]


def _preference_rank(sycl_device) -> int:
    key = f"{sycl_device.backend.name}:{sycl_device.device_type.name}"
    return DEFAULT_PREFERENCE.index(key) if key in DEFAULT_PREFERENCE else len(DEFAULT_PREFERENCE)


def select_sycl_device(filter_string: str | None = None):
    """The ``dpctl.SyclDevice`` for a filter string (e.g. ``opencl:cpu:0``), or the best device found."""
    dpctl = dpctl_module()
    devices = sycl_devices()
    if not devices:
        raise RuntimeSetupError(_no_device_message())
    if filter_string:
        try:
            return dpctl.SyclDevice(filter_string)
        except Exception as exc:  # dpctl raises SyclDeviceCreationError or ValueError
            known = ", ".join(d.filter_string for d in devices)
            raise DeviceNotFoundError(
                f"no SYCL device matches the filter '{filter_string}' ({exc}). Devices found: {known}. "
                "A filter is backend:type:index, e.g. opencl:cpu:0 or level_zero:gpu:0; see `xegemm devices`."
            ) from exc
    ranked = sorted(devices, key=lambda d: (_preference_rank(d), 0 if "intel" in d.vendor.lower() else 1))
    return ranked[0]


def select_device(filter_string: str | None = None) -> DeviceInfo:
    """The capability report of :func:`select_sycl_device`."""
    return describe(select_sycl_device(filter_string))
