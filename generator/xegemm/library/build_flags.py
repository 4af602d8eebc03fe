"""The OpenCL build options xegemm passes to device compilers and to ``ocloc``, in one place."""

from __future__ import annotations

from xegemm.library.targets import EXT_DPAS, EXT_EXTENDED_BLOCK_READ, check_grf

STANDARD = "-cl-std=CL3.0 -cl-mad-enable"      # every device build: OpenCL C 3.0, a * b + c may fuse
LARGE_GRF = "-cl-intel-256-GRF-per-thread"    # IGC's large register file (target.grf: 256)
# Old drivers declare the DPAS and extended block read builtins only under their extensions' macros; a real
# driver defines them itself (libigdfcl's header guards both with #ifdef).  A device build of the native
# lowering needs the DPAS one; ocloc builds take both.
DPAS_MACRO = f"-D{EXT_DPAS}"
FEATURE_MACROS = (DPAS_MACRO, f"-D{EXT_EXTENDED_BLOCK_READ}")


def grf_option(grf: int) -> str:
    """The option selecting ``grf`` registers per thread ('' for the default 128)."""
    return LARGE_GRF if check_grf(grf) == 256 else ""


def native_device_options(grf: int) -> str:
    """A device build of the native lowering: the standard options, the DPAS macro and the GRF mode."""
    return " ".join(x for x in (STANDARD, DPAS_MACRO, grf_option(grf)) if x)


def ocloc_options(grf: int, extra: str = "") -> str:
    """``ocloc -options``: the feature macros, the GRF mode, then the caller's options."""
    return " ".join(x for x in (*FEATURE_MACROS, grf_option(grf), extra.strip()) if x)
