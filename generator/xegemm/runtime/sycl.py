"""The one entry point to the SYCL runtime: prepare the OpenCL ICD environment, then import dpctl.

The Intel OpenCL CPU runtime's ICD file names a placeholder path, so ``OCL_ICD_FILENAMES`` must point at the
venv's ``libintelocl.so`` before dpctl is first imported (docs/compilers.md "The runtime pins").  Every module that uses
dpctl imports it from here, so the order is explicit and holds for any import order of the package.
"""

from xegemm.errors import RuntimeSetupError
from xegemm.runtime.environment import prepare_opencl_environment

prepare_opencl_environment()

try:
    import dpctl  # noqa: E402
    import dpctl.memory as dpmem  # noqa: E402
    import dpctl.program as dpprog  # noqa: E402
except ImportError as exc:  # pragma: no cover - depends on a broken install
    raise RuntimeSetupError(
        f"cannot import dpctl ({exc}). xegemm needs the SYCL runtime wheels pinned in pyproject.toml; "
        "run `make test` or `make demo` (they create .venv), or `pip install -e .` in your environment."
    ) from exc

__all__ = ["dpctl", "dpmem", "dpprog"]
