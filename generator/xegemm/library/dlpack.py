"""Host tensors of other frameworks through DLPack (https://dmlc.github.io/dlpack/latest/): a numpy view of an object
with ``__dlpack__`` (a PyTorch CPU tensor, a JAX or CuPy host array) without a copy, and a torch tensor over a numpy
array's memory, again without a copy.

numpy's DLPack import lacks bfloat16 and the 8-bit floats: a torch tensor of those is viewed as its bits first
(``tensor.view(torch.int16)`` / ``torch.uint8``, a view) and the numpy view relabelled with the ml_dtypes type.
Only host memory is taken: a tensor whose ``__dlpack_device__`` is not the CPU is refused with the fix.  torch is
never imported here: a tensor's own module provides its dtypes.
"""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np

from xegemm.errors import XegemmError

DLPACK_CPU = 1        # DLDeviceType kDLCPU
# torch dtypes numpy's DLPack import does not take: torch dtype name -> (the bits' torch dtype, the ml_dtypes type)
BITS = {"bfloat16": ("int16", ml_dtypes.bfloat16), "float8_e4m3fn": ("uint8", ml_dtypes.float8_e4m3fn),
        "float8_e5m2": ("uint8", ml_dtypes.float8_e5m2), "float8_e8m0fnu": ("uint8", ml_dtypes.float8_e8m0fnu)}


class DLPackError(XegemmError, ValueError):
    """A tensor that cannot be read on the host through DLPack (the message says why and the fix)."""


def is_foreign(x) -> bool:
    """An object read through DLPack: ``__dlpack__``, not numpy, not a SYCL USM array (read where it is)."""
    return hasattr(x, "__dlpack__") and not isinstance(x, np.ndarray) and not hasattr(x, "__sycl_usm_array_interface__")


def torch_of(x):
    """The torch module of a torch tensor (already imported, since the tensor exists), else None."""
    return sys.modules.get("torch") if type(x).__module__.split(".")[0] == "torch" else None


def to_numpy(x, name: str = "an argument") -> np.ndarray:
    """A numpy view of a DLPack host tensor."""
    if hasattr(x, "__dlpack_device__"):
        kind, _ = x.__dlpack_device__()
        if int(kind) != DLPACK_CPU:
            raise DLPackError(f"{name} lives on DLPack device type {int(kind)}, not the host; host tensors are read "
                              "through DLPack and device memory through __sycl_usm_array_interface__ - move it to the "
                              "host (tensor.cpu()) or pass a SYCL USM array")
    torch = torch_of(x)
    if torch is not None:
        if x.requires_grad:
            x = x.detach()
        dtype_name = str(x.dtype).removeprefix("torch.")
        if dtype_name in BITS:
            bits, ml = BITS[dtype_name]
            return np.from_dlpack(x.view(getattr(torch, bits))).view(ml)
    try:
        return np.from_dlpack(x)
    except (BufferError, TypeError, RuntimeError) as exc:
        raise DLPackError(f"{name} ({type(x).__name__}) cannot be read through DLPack: {exc}") from None


def array_of(x, name: str = "an argument") -> np.ndarray:
    """A numpy array of ``x``: numpy as it is, a DLPack tensor as a view, anything else through numpy.asarray."""
    if isinstance(x, np.ndarray):
        return x
    return to_numpy(x, name) if is_foreign(x) else np.asarray(x)


def to_torch(torch, array: np.ndarray):
    """A torch tensor over a numpy array's memory (no copy when it is contiguous), bfloat16 and the 8-bit floats
    through their bits."""
    array = np.ascontiguousarray(array)
    for dtype_name, (bits, ml) in BITS.items():
        if array.dtype == np.dtype(ml):
            return torch.from_dlpack(array.view(np.dtype(bits))).view(getattr(torch, dtype_name))
    return torch.from_dlpack(array)
