"""The call API: run generated or tuned kernels on a user's arrays.

``xegemm.load(source)`` gives a :class:`Gemm` (:mod:`xegemm.api.gemm`), whose calls are the call kinds of
:mod:`xegemm.api.kinds` (plain, quantized, traced, grouped and MoE), each choosing its variant through
:mod:`xegemm.api.dispatch`; :mod:`xegemm.api.operands` says what a call's arrays are and lays them out for the
kernel, :mod:`xegemm.api.checks` checks them against each other; :mod:`xegemm.api.errors` holds what a call can
get wrong.  docs/use.md describes it.
"""

from xegemm.api.errors import (AlignmentError, CallError, DeviceMemoryError, DTypeMismatchError, LayoutError,
                               NoKernelError, RankError, ShapeMismatchError)
from xegemm.api.gemm import Gemm, LastKernel, load
from xegemm.api.operands import DeviceArray

__all__ = ["AlignmentError", "CallError", "DeviceArray", "DeviceMemoryError", "DTypeMismatchError", "Gemm",
           "LastKernel", "LayoutError", "NoKernelError", "RankError", "ShapeMismatchError", "load"]
