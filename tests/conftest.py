"""Shared fixtures: the real default device (the Intel OpenCL CPU runtime in CI), never a mock.

Tests that need Intel's offline compiler carry the ``ocloc`` marker; this is the one place that decides
whether they run: where ``ocloc`` is missing they are skipped with what to install (``make test`` installs
it itself when run as root)."""

import pytest

from xegemm.aot.toolchain import find_ocloc
from xegemm.runtime import describe, select_sycl_device

OCLOC_MISSING = ("ocloc is not installed: as root, `make test` installs it (Debian's intel-opencl-icd, "
                 ".ci/install-ocloc.sh); otherwise run `sudo bash .ci/install-ocloc.sh`")


def pytest_collection_modifyitems(config, items):
    if find_ocloc() is not None:
        return
    skip = pytest.mark.skip(reason=OCLOC_MISSING)
    for item in items:
        if "ocloc" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def sycl_device():
    return select_sycl_device()


@pytest.fixture(scope="session")
def device_info(sycl_device):
    return describe(sycl_device)
