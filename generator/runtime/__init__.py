"""SYCL runtime access: environment set-up, devices, program builds and launches (through dpctl)."""

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
