"""Shared fixtures: the real default device (the Intel OpenCL CPU runtime in CI), never a mock."""

import pytest


@pytest.fixture(scope="session")
def sycl_device():
    from xegemm.runtime import select_sycl_device

    return select_sycl_device()


@pytest.fixture(scope="session")
def device_info(sycl_device):
    from xegemm.runtime import describe

    return describe(sycl_device)
