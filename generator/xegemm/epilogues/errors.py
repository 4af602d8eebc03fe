"""What is wrong with an epilogue function, said once: the function, the line of its source, the reason.

Tracing calls the user's function with tracer values, so an error is found while the function's own frame is
on the stack (a tracer used in ``if``, a numpy function that is no epilogue op) or after it returned (an output
that cannot hold its value); :func:`user_site` finds the line of the user's code either way: the innermost
frame outside this package.
"""

from __future__ import annotations

import functools
import os
import sys
import traceback
from pathlib import Path

from xegemm.errors import XegemmError

PACKAGE = str(Path(__file__).resolve().parent)


class EpilogueError(XegemmError):
    """A traced epilogue that cannot be built: ``function`` (its qualified name), ``site`` (file, line) of the
    offending code, ``reason``."""

    def __init__(self, function: str, site: tuple[str, int] | None, reason: str):
        self.function, self.site, self.reason = function, site, reason
        where = f" ({site[0]}:{site[1]})" if site else ""
        super().__init__(f"epilogue {function}{where}: {reason}")


class UnsupportedConstructError(EpilogueError):
    """Python that tracing cannot follow: a data-dependent ``if``, ``float(x)``, indexing a tile."""


class UnknownOpError(EpilogueError):
    """A function that is no epilogue op (``xegemm.ops.softmax``, ``numpy.sin``)."""


class ShapeError(EpilogueError):
    """A value whose shape cannot broadcast to the tile, or a reduction used before all tiles are done."""


class UndeclaredKindError(ShapeError):
    """An input whose kind (scalar, row, col, matrix) is neither declared nor known from an array yet: a call
    with the arrays tells it, so a load may leave it to the call."""


class OutputTypeError(EpilogueError):
    """An output whose type cannot hold its value, or outputs that do not match the declared ones."""


class EpilogueLoadError(XegemmError):
    """The config's ``epilogue.function`` cannot be found, imported or called."""


def user_site() -> tuple[str, int] | None:
    """(file, line) of the innermost frame outside this package and outside numpy: the user's line."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not _ours(name):
            return _short(name), frame.f_lineno
        frame = frame.f_back
    return None


def traceback_site(exc: BaseException) -> tuple[str, int] | None:
    """(file, line) of the innermost traceback entry of ``exc`` outside this package (where the user's code
    raised it)."""
    entries = [e for e in traceback.extract_tb(exc.__traceback__) if not _ours(e.filename)]
    return (_short(entries[-1].filename), entries[-1].lineno) if entries else None


def function_site(fn) -> tuple[str, int] | None:
    """(file, line) of a function's ``def``."""
    code = getattr(fn, "__code__", None)
    return (_short(code.co_filename), code.co_firstlineno) if code else None


def _ours(filename: str) -> bool:
    return filename.startswith((PACKAGE, "<frozen")) or "/numpy/" in filename


def _short(filename: str) -> str:
    """A file name relative to the working directory when it lies below it."""
    return _relative(filename, os.getcwd())


@functools.lru_cache(maxsize=1024)
def _relative(filename: str, cwd: str) -> str:    # once per file: a trace records a site per node
    try:
        return str(Path(filename).resolve().relative_to(cwd))
    except ValueError:
        return filename
