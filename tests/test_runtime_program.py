import numpy as np
import pytest

from xegemm.runtime.backends import BACKENDS, backend_for
from xegemm.runtime.program import BuildError, build_program, from_device, launch, make_queue, to_device, uses_opencl

pytestmark = pytest.mark.device

SRC = """__attribute__((reqd_work_group_size(16, 1, 1))) __attribute__((intel_reqd_sub_group_size(16)))
__kernel void k(__global int* out) {
  int lane = get_sub_group_local_id();
  out[get_global_id(0)] = sub_group_broadcast(lane * 3, 5) + lane;
}
"""


def test_build_and_launch_in_opencl_order(sycl_device):
    q = make_queue(sycl_device)
    kernel = build_program(q, SRC, "-cl-std=CL3.0").get_sycl_kernel("k")
    out = to_device(q, np.zeros(32, np.int32))
    launch(q, kernel, [out], [32], [16]).wait()
    got = from_device(out, np.int32, (32,))
    assert list(got) == [15 + lane for lane in range(16)] * 2


def test_build_error_carries_the_compiler_log(sycl_device):
    q = make_queue(sycl_device)
    with pytest.raises(BuildError) as exc:
        build_program(q, "__kernel void broken(void) { undeclared_thing = 1; }", "")
    assert "undeclared_thing" in str(exc.value)
    assert "error" in exc.value.log


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_each_backend_that_takes_the_device_runs_the_same_kernel(sycl_device, backend):
    """The raw OpenCL and dpctl paths behind one interface: both take an OpenCL device (dpctl any device),
    and compile, allocate, run and copy back give the same answer."""
    if not backend.ready(sycl_device):
        pytest.skip(f"{backend.name} does not run {sycl_device.filter_string}")
    q = backend.queue(sycl_device, True)
    kernel = backend.compile(q, SRC, "-cl-std=CL3.0").get_sycl_kernel("k")
    out = backend.allocate(q, 32 * 4)
    out.copy_from_host(np.zeros(32 * 4, np.uint8))
    backend.run(q, kernel, [out], [32], [16]).wait()
    assert list(from_device(out, np.int32, (32,))) == [15 + lane for lane in range(16)] * 2


def test_the_device_is_served_by_the_backend_make_queue_picks(sycl_device):
    assert uses_opencl(sycl_device) == (backend_for(sycl_device).name == "opencl")
    assert (sycl_device.backend.name == "opencl") == uses_opencl(sycl_device)
