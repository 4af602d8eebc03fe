"""Exceptions that the command line turns into a clear message instead of a traceback."""


class XegemmError(Exception):
    """Base class: a user-facing error with a message that says what went wrong and how to fix it."""


class RuntimeSetupError(XegemmError):
    """The SYCL/OpenCL runtime is missing or finds no usable device."""


class DeviceNotFoundError(XegemmError):
    """A device filter string matched no device."""


class PlanRejected(XegemmError):
    """A variant that cannot work (xegemm.plan.planner); the message names the rule and the numbers."""
