"""What a call can get wrong, each raised before anything is launched and before ``out`` is touched.

Every class is an :class:`xegemm.errors.XegemmError` (so the command line prints one line) and the builtin
exception a Python caller would expect (ValueError, TypeError)."""

import numbers

import numpy as np

from xegemm.errors import XegemmError


class CallError(XegemmError):
    """A call of a loaded GEMM that cannot run as given."""


class RankError(CallError, ValueError):
    """An array has the wrong number of dimensions, or is not an array at all."""


class ShapeMismatchError(CallError, ValueError):
    """Operands' shapes do not fit each other (the message names both)."""


class DTypeMismatchError(CallError, TypeError):
    """An array's element type is not what the kernels take (the message names the expected one)."""


class LayoutError(CallError, ValueError):
    """An operand's layout is one the loaded kernels do not have (the message lists the ones they have)."""


class AlignmentError(CallError, ValueError):
    """An operand breaks a pitch or alignment rule of the target (the message names the rule)."""


class DeviceMemoryError(CallError, MemoryError):
    """The problem does not fit the device's memory."""


class NoKernelError(CallError, ValueError):
    """No loaded variant can run the call (the message says why each could not)."""


class ScalarError(CallError, TypeError):
    """alpha or beta is not a real number."""


def scalar(name: str, value, default: float) -> float:
    """A call's ``alpha`` or ``beta`` as a float (``default``, the config's, when None)."""
    if value is None:
        return default
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ScalarError(f"{name} = {value!r:.60}: expected a real number (int or float)")
    return float(value)


def check_sizes(m: int, n: int, k: int, batch: int, shapes: str) -> None:
    """A call whose arrays have M, N, K or the batch 0 is refused with the arrays' shapes (``shapes``)."""
    empty = [name for name, size in zip(("M", "N", "K", "batch"), (m, n, k, batch)) if size == 0]
    if empty:
        raise ShapeMismatchError(f"{shapes}: the call's arrays have {' and '.join(f'{e} = 0' for e in empty)}; "
                                 "every size of a GEMM call must be positive (there is nothing to compute)")
