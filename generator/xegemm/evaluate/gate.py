"""The device gate: timing is serial on a device, and on a CPU device no compile runs while a kernel is timed.

Several worker processes (``xegemm tune --jobs J``, or several ``xegemm tune`` processes on one machine)
build and time kernels on one device.  Each holds the gate's lock file *shared* while it builds and
*exclusive* while it verifies and times, so timings never overlap.  On a CPU device the cores are the device:
builds are then shared holders too, so no build runs while a kernel is timed (on a GPU a build takes no lock).
A turnstile lock taken before either keeps a waiting timer from being starved by a stream of builds.
Locks are ``flock`` locks on files in the temporary directory, one pair per device: the kernel releases
them when a process dies, so a killed worker never leaves the device locked.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DeviceGate:
    """The lock files of one device; ``cpu`` says whether builds and timing share the cores."""

    directory: str
    device_key: str
    cpu: bool

    @classmethod
    def for_device(cls, name: str, driver: str, filter_string: str, cpu: bool,
                   directory: str | None = None) -> "DeviceGate":
        """The gate of a device, shared by every process of this user on this machine."""
        key = hashlib.sha256(f"{filter_string}|{name}|{driver}".encode()).hexdigest()[:16]
        return cls(directory or tempfile.gettempdir(), key, cpu)

    def _path(self, what: str) -> Path:
        return Path(self.directory) / f"xegemm-{os.getuid()}-{self.device_key}.{what}.lock"

    def open(self) -> "GateHandle":
        """This process's handle on the gate (file descriptors are per process)."""
        return GateHandle(self)


class GateHandle:
    """One process's side of a :class:`DeviceGate`: ``building()``, ``timing()``, ``release()``."""

    def __init__(self, gate: DeviceGate):
        self.gate = gate
        self.device = os.open(gate._path("device"), os.O_RDWR | os.O_CREAT, 0o600)
        self.turnstile = os.open(gate._path("turnstile"), os.O_RDWR | os.O_CREAT, 0o600)

    def _take(self, mode: int) -> None:
        fcntl.flock(self.turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self.device, mode)
        finally:
            fcntl.flock(self.turnstile, fcntl.LOCK_UN)

    def building(self) -> None:
        """Before a build: on a CPU device wait until no kernel is being timed."""
        self.release()
        if self.gate.cpu:
            self._take(fcntl.LOCK_SH)

    def timing(self) -> None:
        """Before verification and timing: wait until the device is free of other timings (and CPU builds)."""
        self.release()
        self._take(fcntl.LOCK_EX)

    def release(self) -> None:
        fcntl.flock(self.device, fcntl.LOCK_UN)

    def close(self) -> None:
        self.release()
        os.close(self.device)
        os.close(self.turnstile)
