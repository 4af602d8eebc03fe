"""Device runtime access: environment set-up, devices (through dpctl), program builds, the program cache and launches
(raw OpenCL on OpenCL devices, dpctl on Level Zero; see program.py)."""

from xegemm.runtime.environment import prepare_opencl_environment
from xegemm.runtime.devices import (
    DeviceInfo,
    describe,
    list_devices,
    select_device,
    select_sycl_device,
)

__all__ = ["DeviceInfo", "describe", "list_devices", "select_device", "select_sycl_device",
           "prepare_opencl_environment"]
