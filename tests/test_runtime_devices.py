import json
import os

import pytest

from xegemm.cli import main
from xegemm.errors import DeviceNotFoundError
from xegemm.runtime import DeviceInfo, list_devices, select_device
from xegemm.runtime.environment import ICD_VARIABLE, prepare_opencl_environment

pytestmark = pytest.mark.device


def test_environment_names_the_cpu_runtime_once():
    env = {ICD_VARIABLE: "/some/other/icd.so"}
    lib = prepare_opencl_environment(env)
    assert lib is not None and lib.name.startswith("libintelocl.so")
    prepare_opencl_environment(env)  # idempotent
    entries = env[ICD_VARIABLE].split(os.pathsep)
    assert entries.count(str(lib)) == 1 and "/some/other/icd.so" in entries


def test_cpu_runtime_device_is_listed():
    devices = list_devices()
    cpu = [d for d in devices if d.backend == "opencl" and d.device_type == "cpu"]
    assert cpu, f"no OpenCL CPU device among {[d.filter_string for d in devices]}"
    d = cpu[0]
    assert d.filter_string.startswith("opencl:cpu")
    assert d.compute_units >= 1
    assert 16 in d.sub_group_sizes
    assert "cl_intel_subgroups" in d.extensions  # read from CL_DEVICE_EXTENSIONS, not guessed
    assert d.extensions_source == "opencl"


def test_capability_report_of_cpu_runtime_is_portable(device_info):
    # The Intel CPU runtime has sub-groups but no Xe 2D block IO and no DPAS (docs/compilers.md).
    if device_info.device_type != "cpu":
        pytest.skip("default device is not the CPU runtime")
    assert not device_info.block_2d_io
    assert not device_info.dpas
    assert device_info.lowering == "portable"


def _fake(extensions, sub_groups=(8, 16, 32)):
    return DeviceInfo("level_zero:gpu:0", "some gpu", "Intel(R) Corporation", "level_zero", "gpu", "1.0", 64,
                      1024, tuple(sub_groups), True, True, 1 << 34, tuple(extensions))


def test_lowering_follows_extensions_not_name():
    assert _fake(["cl_intel_subgroups", "cl_intel_subgroup_2d_block_io",
                  "cl_intel_subgroup_matrix_multiply_accumulate"]).lowering == "native"
    assert _fake(["cl_intel_subgroups", "cl_intel_subgroup_matrix_multiply_accumulate"]).lowering == "portable"
    assert _fake(["cl_intel_subgroups", "cl_intel_subgroup_2d_block_io"]).lowering == "portable"
    assert _fake(["cl_intel_subgroup_2d_block_io", "cl_intel_subgroup_matrix_multiply_accumulate"],
                 sub_groups=(8,)).lowering == "portable"


def test_filter_string_selects_device():
    d = select_device("opencl:cpu:0")
    assert d.backend == "opencl" and d.device_type == "cpu"


@pytest.mark.parametrize("bad", ["opencl:gpu:7", "cuda:gpu", "nonsense::"])
def test_unknown_filter_is_a_clear_error(bad):
    with pytest.raises(DeviceNotFoundError) as exc:
        select_device(bad)
    msg = str(exc.value)
    assert bad in msg and "opencl:cpu:0" in msg and "xegemm devices" in msg


def test_cli_devices_json(capsys):
    assert main(["devices", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["default"]
    d = next(x for x in data["devices"] if x["filter_string"] == data["default"])
    for key in ("name", "backend", "driver_version", "compute_units", "sub_group_sizes", "fp16", "fp64",
                "lowering", "block_2d_io", "dpas"):
        assert key in d


def test_cli_devices_table(capsys):
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "opencl:cpu:0" in out and "portable" in out and "sub-groups" in out


def test_no_device_is_a_clear_error_not_a_traceback(tmp_path):
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != ICD_VARIABLE}
    env["XEGEMM_OPENCL_CPU_RUNTIME"] = str(tmp_path / "missing" / "libintelocl.so")
    proc = subprocess.run([sys.executable, "-m", "xegemm", "devices"], env=env, capture_output=True, text=True,
                          timeout=120)
    if proc.returncode == 0:
        pytest.skip("this machine has another SYCL device besides the CPU runtime")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "no SYCL device" in proc.stderr and "was not found" in proc.stderr and "make test" in proc.stderr
