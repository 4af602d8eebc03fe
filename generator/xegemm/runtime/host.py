"""What Linux says of the host's CPUs that the runtime's own queries do not: its caches, its frequency governor.

The Intel OpenCL CPU device reports one core's L2 as its global memory cache; the work-groups of a launch run on
all cores and share the last-level cache, which only ``/sys/devices/system/cpu`` tells.  Every read is one small,
bounded file; an unreadable one is 0 or None, never an error.
"""

from __future__ import annotations

CACHE_SYSFS = "/sys/devices/system/cpu/cpu0/cache"     # Linux: index<i>/level and index<i>/size ("491520K")
GOVERNOR = "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"   # Linux cpufreq: powersave, performance...


def read_small(path: str) -> str | None:
    """The first line of a small system file (at most 64 characters), None if unreadable or empty."""
    try:
        with open(path, encoding="ascii") as f:
            return f.read(64).strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def cpu_governor() -> str | None:
    """The CPU frequency governor of CPU 0 where Linux exposes it (None in a VM or container without cpufreq)."""
    return read_small(GOVERNOR)


def host_last_level_cache_bytes(root: str = CACHE_SYSFS) -> int:
    """The size of CPU 0's highest-level cache as Linux reports it (``index<i>/level``, ``index<i>/size``), 0 if
    unreadable."""
    best = (0, 0)
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    for i in range(16):
        level, size = read_small(f"{root}/index{i}/level"), read_small(f"{root}/index{i}/size")
        if level is None or size is None:
            continue
        try:
            number = int(size[:-1]) * units[size[-1].upper()] if size[-1].upper() in units else int(size)
            best = max(best, (int(level), number))
        except ValueError:
            continue
    return best[1]


def last_level_cache_bytes(device_cache_bytes: int, cpu_device: bool) -> int:
    """The last-level cache a device's launches share: a GPU's reported global memory cache; on a CPU device
    (which reports one core's L2) the host's highest-level cache, or the device's figure when unreadable."""
    if cpu_device:
        return max(host_last_level_cache_bytes(), device_cache_bytes)
    return device_cache_bytes
