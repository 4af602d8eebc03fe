"""Errors of the ahead-of-time build layer (all :class:`xegemm.errors.XegemmError` subclasses)."""

from __future__ import annotations

from xegemm.errors import XegemmError

INSTALL_HINT = (
    "install it with `apt-get install intel-opencl-icd` (Debian 12 ships ocloc with IGC 1.0.12504) and "
    "link libiga64.so -> libiga64.so.1 next to Debian's libiga64.so.1 so that `ocloc disasm` can load IGA, "
    "or run `.ci/install-ocloc.sh` as root, which does both"
)


class AotError(XegemmError):
    """Base class of the ahead-of-time build errors."""


CURRENT_INSTALL_HINT = (
    "install it with `make ocloc-current` (as root: `.ci/install-ocloc-current.sh` downloads Debian unstable's "
    "ocloc and IGC into the project's .tools folder, never system-wide)"
)


class OclocMissingError(AotError):
    """Intel's offline compiler ``ocloc`` is not on PATH (nor at ``$XEGEMM_OCLOC``), or the current one is
    not installed."""

    def __init__(self, detail: str = "Intel's offline compiler `ocloc` was not found on PATH", *,
                 current: bool = False):
        super().__init__(f"{detail}: {CURRENT_INSTALL_HINT if current else INSTALL_HINT}")


class CompilerNameError(AotError):
    """A compiler name that is neither ``system``, ``current`` nor a path."""


class IgaMissingError(AotError):
    """``ocloc disasm`` ran but could not load the IGA library, so it wrote no disassembly."""

    def __init__(self, log: str):
        super().__init__(
            "`ocloc disasm` could not load libiga64.so and wrote no disassembly; create the link "
            "libiga64.so -> libiga64.so.1 in the folder that holds libiga64.so.1 "
            "(`.ci/install-ocloc.sh` does it)"
        )
        self.log = log


class BuiltinNameError(AotError):
    """A 2D block builtin name that does not follow IGC's grammar (docs/atoms.md §1.7)."""


class OclocToolError(AotError):
    """ocloc itself failed outside a compile (disassembly, version query); ``log`` holds its output."""

    def __init__(self, message: str, log: str):
        super().__init__(message)
        self.log = log


class CapabilitiesError(AotError):
    """A compiler profile name, file or cache entry that cannot be used."""
