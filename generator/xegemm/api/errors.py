"""What a call can get wrong, each raised before anything is launched and before ``out`` is touched.

Every class is an :class:`xegemm.errors.XegemmError` (so the command line prints one line) and the builtin
exception a Python caller would expect (ValueError, TypeError)."""

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
