"""The config form of a traced epilogue: ``epilogue: {function: "package.module:function_name", inputs: {...},
outputs: {...}}``.  :func:`resolve_function` imports the function (the config's folder is searched first, then
the Python path), :func:`load_epilogue` checks the section and traces the function, so that every mistake is
reported when the config is loaded, before anything is built.

``inputs`` declares the kind of each named input (``row``, ``col``, ``matrix``, ``scalar``; a matrix may give its
type: ``{kind: matrix, type: bf16}``); ``outputs`` the type of each extra output (``{aux: f16, rowmax: f32}``).
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
from pathlib import Path

from xegemm.epilogues.errors import EpilogueLoadError
from xegemm.errors import XegemmError
from xegemm.epilogues.graph import Graph
from xegemm.epilogues.tracer import EpilogueFunction, trace

KEYS = ("function", "inputs", "outputs")
_PATH_LOCK = threading.Lock()


def resolve_function(reference: str, search: list[str | Path] = ()):
    """The function ``"package.module:function_name"`` names (a plain function or an ``xegemm.epilogue``);
    ``search`` folders are tried before the Python path."""
    where = f"epilogue.function {reference!r}"
    if not isinstance(reference, str) or reference.count(":") != 1:
        raise EpilogueLoadError(f"{where}: expected \"package.module:function_name\"")
    module_name, attr = reference.split(":")
    if not module_name or not attr or not all(p.isidentifier() for p in module_name.split(".") + attr.split(".")):
        raise EpilogueLoadError(f"{where}: expected \"package.module:function_name\" (dotted Python names)")
    with _PATH_LOCK:
        added = [str(Path(p)) for p in search if str(Path(p)) not in sys.path]
        sys.path[:0] = added
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                raise EpilogueLoadError(f"{where}: module {exc.name!r} not found (searched "
                                        f"{', '.join(added) + ' and ' if added else ''}the Python path)") from None
            raise EpilogueLoadError(f"{where}: importing {module_name} failed: {exc}") from None
        except Exception as exc:  # noqa: BLE001 -- the module's own code failed: say what it raised
            raise EpilogueLoadError(f"{where}: importing {module_name} raised {type(exc).__name__}: {exc}") from None
        finally:
            for p in added:
                sys.path.remove(p)
    target = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise EpilogueLoadError(f"{where}: {module_name} has no {attr!r}")
        target = getattr(target, part)
    if not callable(target) or isinstance(target, type):
        raise EpilogueLoadError(f"{where}: {attr} is a {type(target).__name__}, not a function")
    return target


def _mapping(section: dict, key: str) -> dict:
    value = section.get(key) or {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise EpilogueLoadError(f"epilogue.{key}: expected a mapping of names, e.g. "
                                + ("{bias: row, up: {kind: matrix, type: bf16}}" if key == "inputs"
                                   else "{aux: f16, rowmax: f32}"))
    return value


def load_epilogue(section: dict, out: str, acc: str, c: str | None = None, search=()) -> Graph:
    """The graph of a config's ``epilogue`` section of the function form; ``out`` is D's type, ``acc`` the
    accumulator's, ``c`` C's (default ``out``).  Raises :class:`EpilogueLoadError` or an
    :class:`~.errors.EpilogueError` naming the function and its line."""
    if not isinstance(section, dict):
        raise EpilogueLoadError("epilogue: expected a mapping with 'function'")
    unknown = [k for k in section if k not in KEYS]
    if unknown:
        raise EpilogueLoadError(f"epilogue.{unknown[0]}: not a key of the function form (keys: {', '.join(KEYS)})")
    fn = resolve_function(section.get("function"), search)
    inputs, outputs = _mapping(section, "inputs"), _mapping(section, "outputs")
    if isinstance(fn, EpilogueFunction):
        return fn.trace(inputs, outputs, out=out, acc=acc, c=c)
    return trace(fn, inputs, outputs, out=out, acc=acc, c=c)


def graph_of(config) -> Graph | None:
    """The graph of a config's traced epilogue (``epilogue.function``), or None for the fixed epilogue.  D and C
    are of the config's C type; a function named by a string is looked for beside the config file first."""
    e, t = config.epilogue, config.types
    if not e.traced:
        return None
    return _traced(e.function, e.inputs, e.outputs, t.c, t.acc, _search(config))


def function_of(config):
    """The Python function of a config's traced epilogue (imported when the config names it)."""
    fn = config.epilogue.function
    return resolve_function(fn, list(_search(config))) if isinstance(fn, str) else fn


def _search(config) -> tuple[str, ...]:
    """Where a config's function is looked for before the Python path: the config file's folder."""
    source = Path(str(config.source))
    return (str(source.parent),) if source.suffix in (".yaml", ".yml") else ()


@functools.lru_cache(maxsize=256)
def _traced(function, inputs: tuple, outputs: tuple, out: str, acc: str, search: tuple) -> Graph:
    fn = resolve_function(function, list(search)) if isinstance(function, str) else function
    kinds = {name: kind if t is None else {"kind": kind, "type": t} for name, kind, t in inputs}
    if isinstance(fn, EpilogueFunction):
        return fn.trace(kinds, dict(outputs), out=out, acc=acc)
    return trace(fn, kinds, dict(outputs), out=out, acc=acc)


FIXED_KEYS = ("alpha", "beta", "bias", "activation", "clamp")


def config_violations(config) -> list[tuple[str, str]]:
    """(dotted key, message) per problem of a config's traced epilogue, found when the config is loaded: a fixed
    key set beside ``function``, or the function failing to import or trace (its file and line named)."""
    e = config.epilogue
    if not e.traced:
        stray = [k for k in ("inputs", "outputs") if getattr(e, k)]
        return [(f"epilogue.{k}", "belongs to a traced epilogue: set epilogue.function") for k in stray]
    default = type(e)()
    out = [(f"epilogue.{k}", f"is the fixed epilogue's; a traced epilogue (function) computes everything it "
                             f"does: leave {k} out") for k in FIXED_KEYS if getattr(e, k) != getattr(default, k)]
    try:
        graph_of(config)
    except XegemmError as exc:
        out.append(("epilogue.function", str(exc)))
    return out
