"""A call's arrays: what they hold (shape, element type, layout) and their bytes as the kernel reads them.

Host arrays are numpy arrays, one element per numpy item; element types numpy lacks are ml_dtypes' (bfloat16,
int4, uint4: :func:`xegemm.library.dtypes.host_dtype`).  A row-major operand is a C-contiguous array, a column-major
one an F-contiguous array (a transposed view); batch is a leading dimension, and a batched column-major
operand is a C-contiguous (batch, cols, rows) array with its last two axes swapped.  An array that is neither
(or one in a layout the loaded kernels lack) is copied on the host into a layout they take, and the copy is
named in the call's ``last_kernel.copies``; ``copy=False`` refuses it with the fix instead.

Device arrays are objects with ``__sycl_usm_array_interface__`` (dpctl.tensor and dpnp arrays, or
:class:`DeviceArray` over a dpctl.memory allocation): they are passed to the kernel where they are, so they
must already be laid out as it reads them (compact rows; 4-bit elements packed two per byte by the caller).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from xegemm.api.errors import LayoutError, RankError
from xegemm.library.dtypes import HOST_DTYPES, dtype
from xegemm.verify.dense import pack_nibbles

USM_INTERFACE = "__sycl_usm_array_interface__"
# Device arrays of types neither numpy nor dpctl spell natively travel as their bit patterns.
USM_BITS = {"bf16": np.dtype(np.uint16)}


def is_device_array(array) -> bool:
    return hasattr(array, USM_INTERFACE)


class DeviceArray:
    """A view of a dpctl.memory USM allocation as an array: shape, numpy dtype and order ('C' or 'F' for the last
    two axes), for the call API.  dpctl.tensor and dpnp arrays need no wrapper."""

    def __init__(self, memory, shape, dtype_, order: str = "C", offset: int = 0):
        self.memory, self.shape, self.dtype = memory, tuple(int(d) for d in shape), np.dtype(dtype_)
        self.order, self.offset = order, int(offset)
        if order not in ("C", "F"):
            raise LayoutError(f"order must be 'C' or 'F', not {order!r}")
        need = self.offset + int(np.prod(self.shape)) * self.dtype.itemsize
        if need > memory.nbytes:
            raise RankError(f"a {self.shape} array of {self.dtype} at byte {self.offset} needs {need} bytes; the "
                            f"allocation has {memory.nbytes}")

    @property
    def __sycl_usm_array_interface__(self) -> dict:
        base = self.memory.__sycl_usm_array_interface__
        strides = None
        if self.order == "F" and len(self.shape) >= 2:
            *batch, rows, cols = self.shape
            strides = tuple([rows * cols] * len(batch)) + (1, rows)
        return {"data": (base["data"][0] + self.offset, False), "shape": self.shape, "strides": strides,
                "typestr": self.dtype.str, "version": 1, "syclobj": base["syclobj"]}


@dataclass
class Operand:
    """One input: its name (A, B), its (batch, rows, cols) shape, whether it came batched, its numpy dtype, the
    layouts it can be read in ('row', 'col' or both), and the array."""

    name: str
    array: object
    shape: tuple[int, int, int]
    batched: bool
    dtype: np.dtype
    layouts: tuple[str, ...]
    device: bool

    @property
    def usm(self) -> dict:
        return getattr(self.array, USM_INTERFACE)


def _usm_layouts(iface: dict, shape: tuple[int, ...]) -> tuple[str, ...]:
    """The layouts a USM array's strides (in elements; None: C-contiguous) are compact in."""
    strides = iface.get("strides")
    c_strides = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
    if strides is None or tuple(strides) == c_strides:
        return ("row", "col") if 1 in shape[-2:] else ("row",)
    *batch, rows, cols = shape
    f_strides = tuple([rows * cols] * len(batch)) + (1, rows)
    return ("col",) if tuple(strides) == f_strides else ()


def operand(name: str, array, matrix: str) -> Operand:
    """Describe argument ``name`` (``matrix``: how its dimensions are called, e.g. 'M x K')."""
    if is_device_array(array):
        iface = getattr(array, USM_INTERFACE)
        shape = tuple(int(d) for d in iface["shape"])
        dt = np.dtype(iface["typestr"])
        device = True
    elif isinstance(array, np.ndarray):
        shape, dt, device = array.shape, array.dtype, False
    else:
        raise RankError(f"{name} is a {type(array).__name__}: pass a numpy array or a device array "
                        f"(dpctl.tensor, dpnp, or xegemm.DeviceArray over dpctl.memory)")
    if len(shape) not in (2, 3):
        raise RankError(f"{name} has {len(shape)} dimensions {tuple(shape)}; expected {matrix} "
                        f"or batch x {matrix} (2 or 3 dimensions)")
    full = (1, *shape) if len(shape) == 2 else tuple(shape)
    if device:
        layouts = _usm_layouts(iface, tuple(shape))
        if not layouts:
            raise LayoutError(f"{name} (a device array) is not compact: its strides {tuple(iface['strides'])} are "
                              f"neither row-major nor column-major per matrix; device arrays are read where they are")
    else:
        m = array if array.ndim == 2 else None
        if m is not None:
            layouts = tuple(x for x, ok in (("row", m.flags.c_contiguous), ("col", m.flags.f_contiguous)) if ok)
        else:
            layouts = tuple(x for x, ok in (("row", array.flags.c_contiguous),
                                             ("col", np.swapaxes(array, 1, 2).flags.c_contiguous)) if ok)
        layouts = layouts or ("row", "col")      # neither: copied into the layout the kernel takes
    return Operand(name, array, full, len(shape) == 3, dt, layouts, device)


def relayouts(ops) -> list[Operand]:
    """Host operands made readable in either layout, for when the loaded kernels lack the one they lie in:
    :func:`host_bytes` copies them into the chosen one (the copy :func:`copies` names)."""
    return [op if op.device or not isinstance(op.array, np.ndarray) else replace(op, layouts=("row", "col"))
            for op in ops]


def copies(ops, chosen: dict[str, str], copy: bool = True) -> list[str]:
    """The host copies of ``ops`` into the chosen layouts (``chosen``: name -> layout), one line each; with
    ``copy=False`` the first is refused with the fix instead (LayoutError)."""
    out = []
    for op in ops:
        if op.device or op.name not in chosen or not isinstance(op.array, np.ndarray):
            continue
        native = _native_layouts(op)
        if chosen[op.name] in native:
            continue
        how = f"{'/'.join(native)}-major" if native else "strided (neither row- nor column-major)"
        if not copy:
            name = op.name.lower()
            raise LayoutError(f"{op.name} is {how}, which the loaded kernels do not read, and copy=False: pass "
                              f"numpy.ascontiguousarray({name}) (row-major) or numpy.asfortranarray({name}) "
                              f"(column-major) as the kernels take ({chosen[op.name]}), or allow the copy")
        out.append(f"{op.name}: {how} {' x '.join(map(str, op.shape[1:]))} copied into {chosen[op.name]}-major")
    return out


def _native_layouts(op: Operand) -> tuple[str, ...]:
    array = op.array
    if not isinstance(array, np.ndarray):
        return op.layouts
    if array.ndim == 2:
        return tuple(x for x, ok in (("row", array.flags.c_contiguous), ("col", array.flags.f_contiguous)) if ok)
    return tuple(x for x, ok in (("row", array.flags.c_contiguous),
                                  ("col", np.swapaxes(array, 1, 2).flags.c_contiguous)) if ok)


def expected_dtype(type_name: str, device: bool) -> np.dtype:
    """The numpy dtype of a registry type in a host array, or in a device array (bit patterns where needed)."""
    return USM_BITS.get(type_name, HOST_DTYPES[type_name]) if device else HOST_DTYPES[type_name]


def host_bytes(op: Operand, layout: str, type_name: str) -> np.ndarray:
    """The operand's storage as the kernel reads it in ``layout``: compact rows (row-major: the rows of the
    matrix, column-major: its columns), batch after batch; 4-bit elements two per byte, the lower index in the
    low nibble, a row's odd last element padded with a zero nibble."""
    a = op.array.reshape(op.shape)
    if layout == "col":
        a = np.swapaxes(a, 1, 2)
    a = np.ascontiguousarray(a)
    if dtype(type_name).bits == 4:
        return pack_nibbles(a.astype(np.int8).view(np.uint8) & 0xF).reshape(-1)
    return a.reshape(-1).view(np.uint8)
