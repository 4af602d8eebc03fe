"""The checks every call kind shares, each raising one of :mod:`xegemm.api.errors` before anything is launched:
A's and B's registry types from their dtypes, a bias's kind and shape, C and ``out`` against D, device
addresses against the 2D block surface base rule; and the words the messages name arrays and types with."""

from __future__ import annotations

import numpy as np

from xegemm.api.errors import AlignmentError, DTypeMismatchError, LayoutError, ShapeMismatchError
from xegemm.api.operands import Operand, expected_dtype

ML_NAMES = ("bfloat16", "int4", "uint4")
DEVICE_ALIGNMENT = 64      # bytes: the base of every device operand (the Xe 2D block surface rule, docs/use.md)


def dims(op: Operand) -> str:
    b, r, c = op.shape
    return f"{b} x {r} x {c}" if op.batched else f"{r} x {c}"


def shape_text(shape) -> str:
    return " x ".join(map(str, shape))


def dtype_name(type_name: str, device: bool) -> str:
    dt = expected_dtype(type_name, device)
    return f"{type_name} ({'ml_dtypes' if dt.name in ML_NAMES else 'numpy'}.{dt.name})"


def operand_types(host_types, opa: Operand, opb: Operand) -> tuple[str, str]:
    """The registry types of A and B from their dtypes, among the (A, B) types the kernels take."""
    for ta, tb in host_types:
        if opa.dtype == expected_dtype(ta, opa.device) and opb.dtype == expected_dtype(tb, opb.device):
            return ta, tb
    want = " or ".join(f"A {dtype_name(ta, opa.device)} with B {dtype_name(tb, opb.device)}"
                       for ta, tb in sorted(host_types))
    raise DTypeMismatchError(f"A has dtype {opa.dtype} and B {opb.dtype}; the loaded kernels take {want}")


def quantized_operand_types(host_types, opa: Operand) -> tuple[str, str]:
    """A's registry type from its dtype and B's from the quantization (its arrays were checked already)."""
    for ta, tb in host_types:
        if opa.dtype == expected_dtype(ta, False):
            return ta, tb
    want = " or ".join(dtype_name(ta, False) for ta, _ in sorted(host_types))
    raise DTypeMismatchError(f"A has dtype {opa.dtype}; the loaded kernels take A {want}")


def bias_kind(candidates, bias, m: int, n: int) -> str:
    """"none" without a bias; else "row" or "col": the loaded configs' ``epilogue.bias``, or from the length."""
    if bias is None:
        return "none"              # no vector, no bias: the kernel without one runs
    kinds = {c.config.epilogue.bias for c in candidates}
    kind = next(iter(kinds)) if len(kinds) == 1 else "none"
    length = int(np.shape(bias)[0]) if np.ndim(bias) == 1 else -1
    if length < 0:
        raise ShapeMismatchError(f"bias has shape {np.shape(bias)}; expected a vector of length M = {m} (per "
                                 f"row) or N = {n} (per column)")
    if kind != "none":
        return kind
    if m == n:
        raise ShapeMismatchError(f"bias of length {length} is ambiguous for M = N = {m} and the loaded kernels "
                                 "add none: set epilogue.bias (row or col) in the config")
    if length in (m, n):
        return "row" if length == m else "col"
    raise ShapeMismatchError(f"bias has length {length}; expected M = {m} (per row) or N = {n} (per column)")


def check_output_like(name: str, arr, shape, type_name: str) -> None:
    """C or ``out``: D's shape, the config's C type, row-major (and writable, for ``out``)."""
    device = hasattr(arr, "__sycl_usm_array_interface__")
    got_shape = tuple(arr.__sycl_usm_array_interface__["shape"]) if device else np.shape(arr)
    got_dtype = np.dtype(arr.__sycl_usm_array_interface__["typestr"]) if device else getattr(arr, "dtype", None)
    if tuple(got_shape) != tuple(shape):
        raise ShapeMismatchError(f"{name} is {shape_text(got_shape)} but D is {shape_text(shape)} (A's rows x B's "
                                 "columns)")
    want = expected_dtype(type_name, device)
    if got_dtype != want:
        raise DTypeMismatchError(f"{name} has dtype {got_dtype}; the kernel's C and D are {dtype_name(type_name, device)}")
    if device:
        strides = arr.__sycl_usm_array_interface__.get("strides")
        if strides is not None and tuple(strides) != tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape))):
            raise LayoutError(f"{name} must be row-major (C-contiguous): the loaded kernels store D row-major only")
    elif not arr.flags.c_contiguous or not (arr.flags.writeable or name != "out"):
        raise LayoutError(f"{name} must be a{' writable' if name == 'out' else ''} C-contiguous (row-major) array: "
                          "the loaded kernels read C and store D row-major only")


def check_bias(bias, length: int, kind: str) -> None:
    device = hasattr(bias, "__sycl_usm_array_interface__")
    got = tuple(bias.__sycl_usm_array_interface__["shape"]) if device else np.shape(bias)
    dt = np.dtype(bias.__sycl_usm_array_interface__["typestr"]) if device else np.asarray(bias).dtype
    if got != (length,):
        raise ShapeMismatchError(f"bias has shape {got}; the kernel adds one value per {kind} of D: length {length}")
    if dt != np.float32:
        raise DTypeMismatchError(f"bias has dtype {dt}; expected numpy.float32")


def check_aligned(name: str, address: int) -> None:
    if address % DEVICE_ALIGNMENT:
        raise AlignmentError(f"{name}'s device address is {address % DEVICE_ALIGNMENT} bytes past a "
                             f"{DEVICE_ALIGNMENT}-byte boundary: device operands must start {DEVICE_ALIGNMENT}-byte "
                             "aligned (the Xe 2D block surface base rule; dpctl allocations are)")
