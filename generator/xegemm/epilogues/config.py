"""The config form of a traced epilogue: ``epilogue: {function: "package.module:function_name", inputs: {...},
outputs: {...}}``.  :func:`resolve_function` imports the function, :func:`load_epilogue` checks the section and
traces the function, so that every mistake is reported when the config is loaded, before anything is built.

A config that names a function names code to run, so xegemm imports it only with the user's consent for the
run (:func:`consent`: ``--allow-code`` on the command line, ``xegemm.load(..., allow_code=True)``, or the
environment variable ``XEGEMM_ALLOW_CODE=1``), and then only a Python function (not a builtin, not a C function,
nothing of Python's standard library) from a module importable from the installed environment or from a
folder the user gave (``--code-path DIR``, ``code_path=``, ``XEGEMM_CODE_PATH``).  Never from the config's
folder, a tune directory or the working directory: a module found there is refused even with consent.  A
function passed as an object (``xegemm.load(cfg, epilogue=fn)``) needs no consent: the caller ran it already.

``inputs`` declares the kind of each named input (``row``, ``col``, ``matrix``, ``scalar``; a matrix may give its
type: ``{kind: matrix, type: bf16}``); ``outputs`` the type of each extra output (``{aux: f16, rowmax: f32}``).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import importlib.util
import inspect
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from xegemm.epilogues.errors import EpilogueLoadError
from xegemm.errors import XegemmError
from xegemm.epilogues.graph import Graph
from xegemm.epilogues.tracer import EpilogueFunction, trace

KEYS = ("function", "inputs", "outputs")
ALLOW_VARIABLE, PATH_VARIABLE = "XEGEMM_ALLOW_CODE", "XEGEMM_CODE_PATH"
HOW_TO_ALLOW = ("pass --allow-code (and --code-path DIR when the module is not installed), call "
                "xegemm.load(..., allow_code=True[, code_path=DIR]), or set XEGEMM_ALLOW_CODE=1 for a trusted run")
_PATH_LOCK = threading.Lock()


class CodeNotAllowedError(EpilogueLoadError):
    """A config names a Python function and the user did not allow code for this run, or the function is not
    one xegemm imports (a builtin, the standard library, a module beside the config)."""


@dataclass(frozen=True)
class CodeConsent:
    """Whether this run may import a config's function, and the folders it may come from besides the installed
    environment."""

    allowed: bool = False
    paths: tuple[str, ...] = ()


_CONSENT: contextvars.ContextVar[CodeConsent | None] = contextvars.ContextVar("xegemm_code_consent", default=None)
_GRANTED: dict[tuple[str, str], tuple[str, ...]] = {}   # (function, config source) -> code paths, once resolved


def consent() -> CodeConsent:
    """The consent in force: an :func:`allowing_code` block, else the environment (``XEGEMM_ALLOW_CODE=1``,
    ``XEGEMM_CODE_PATH`` folders separated by ``os.pathsep``), which worker processes inherit."""
    inner = _CONSENT.get()
    env = CodeConsent(os.environ.get(ALLOW_VARIABLE, "").strip() == "1",
                      tuple(p for p in os.environ.get(PATH_VARIABLE, "").split(os.pathsep) if p))
    if inner is None:
        return env
    return CodeConsent(True, inner.paths + env.paths)


def consent_flags() -> list[str]:
    """The command-line words that give a command the consent in force (``--allow-code``, a ``--code-path`` per
    folder): what a resume command carries, so the resumed run may import what this one did."""
    given = consent()
    if not given.allowed:
        return []
    return ["--allow-code", *(word for folder in dict.fromkeys(given.paths) for word in ("--code-path", folder))]


def _folders(paths) -> tuple[str, ...]:
    out = []
    for p in paths:
        folder = Path(p).expanduser().resolve()
        if not folder.is_dir():
            raise CodeNotAllowedError(f"code path {p}: not a directory")
        out.append(str(folder))
    return tuple(out)


@contextlib.contextmanager
def allowing_code(paths=()):
    """Consent for the block (what ``xegemm.load(..., allow_code=True, code_path=...)`` gives its load)."""
    token = _CONSENT.set(CodeConsent(True, _folders(paths)))
    try:
        yield
    finally:
        _CONSENT.reset(token)


def allow_code_for_process(paths=()) -> None:
    """Consent for this process and the workers it starts (what ``--allow-code --code-path DIR`` gives)."""
    folders = _folders(paths)
    os.environ[ALLOW_VARIABLE] = "1"
    if folders:
        os.environ[PATH_VARIABLE] = os.pathsep.join(folders + consent().paths)


def _located(spec_or_module) -> Path | None:
    """The folder a top-level module or package was found in (its sys.path entry), None if it has no file."""
    origin = getattr(spec_or_module, "origin", None) or getattr(spec_or_module, "__file__", None)
    if not origin or origin in ("built-in", "frozen"):
        return None
    origin = Path(origin).resolve()
    return origin.parent.parent if origin.name.startswith("__init__.") else origin.parent


def resolve_function(reference: str, search: list[str | Path] = (), source: str = "<string>"):
    """The function ``"package.module:function_name"`` names (a Python function or an ``xegemm.epilogue``),
    with the user's consent (:func:`consent`); ``search`` are folders the user gave (tried before the Python
    path); ``source`` is the config that names it.  Raises :class:`CodeNotAllowedError` without consent."""
    where = f"epilogue.function {reference!r}"
    if not isinstance(reference, str) or reference.count(":") != 1:
        raise EpilogueLoadError(f"{where}: expected \"package.module:function_name\"")
    module_name, attr = reference.split(":")
    if not module_name or not attr or not all(p.isidentifier() for p in module_name.split(".") + attr.split(".")):
        raise EpilogueLoadError(f"{where}: expected \"package.module:function_name\" (dotted Python names)")
    given = consent()
    granted = _GRANTED.get((reference, str(source)))
    if not given.allowed and granted is None:
        raise CodeNotAllowedError(f"{where} names Python code to import and run (config {source}); xegemm runs "
                                  f"code a config names only when you allow it: {HOW_TO_ALLOW}")
    top = module_name.split(".")[0]
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        raise CodeNotAllowedError(f"{where}: {top} is a module of Python's standard library; an epilogue is a "
                                  "Python function of your own (xegemm.ops on its parameters)")
    paths = tuple(dict.fromkeys(_folders(search) + given.paths + (granted or ())))
    forbidden = {Path.cwd().resolve()}
    if not str(source).startswith("<"):
        forbidden.add(Path(str(source)).resolve().parent)
    forbidden -= {Path(p) for p in paths}
    with _PATH_LOCK:
        added = [p for p in paths if p not in sys.path]
        sys.path[:0] = added
        try:
            found = sys.modules.get(top) or importlib.util.find_spec(top)
            if found is None:
                raise EpilogueLoadError(f"{where}: module {top!r} not found (searched "
                                        f"{', '.join(added) + ' and ' if added else ''}the Python path; a module "
                                        "that is not installed needs --code-path DIR)")
            folder = _located(found)
            if folder in forbidden:
                raise CodeNotAllowedError(
                    f"{where}: {top} would be imported from {folder}, "
                    + ("the working directory" if folder == Path.cwd().resolve() else "the config's folder")
                    + "; xegemm imports a config's code only from the installed environment or a folder you "
                      "give with --code-path DIR (code_path= in xegemm.load)")
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                raise EpilogueLoadError(f"{where}: module {exc.name!r} not found (searched "
                                        f"{', '.join(added) + ' and ' if added else ''}the Python path)") from None
            raise EpilogueLoadError(f"{where}: importing {module_name} failed: {exc}") from None
        except XegemmError:
            raise
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
    if isinstance(target, type) or not callable(target):
        raise EpilogueLoadError(f"{where}: {attr} is a {type(target).__name__}, not a function")
    if not (isinstance(target, EpilogueFunction) or inspect.isfunction(target)):
        raise CodeNotAllowedError(f"{where}: {attr} is a {type(target).__name__} (a builtin, a C function or "
                                  "another callable), not a Python function; an epilogue is a Python function "
                                  "(def) of named tensors")
    _GRANTED[(reference, str(source))] = paths
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
    are of the config's C type; a function named by a string is imported only with consent (:func:`consent`)."""
    e, t = config.epilogue, config.types
    if not e.traced:
        return None
    return _traced(function_of(config), e.inputs, e.outputs, t.c, t.acc)


def function_of(config):
    """The Python function of a config's traced epilogue (imported, with consent, when the config names it)."""
    fn = config.epilogue.function
    return resolve_function(fn, source=config.source) if isinstance(fn, str) else fn


@functools.lru_cache(maxsize=256)
def _traced(fn, inputs: tuple, outputs: tuple, out: str, acc: str) -> Graph:
    kinds = {name: kind if t is None else {"kind": kind, "type": t} for name, kind, t in inputs}
    if isinstance(fn, EpilogueFunction):
        return fn.trace(kinds, dict(outputs), out=out, acc=acc)
    return trace(fn, kinds, dict(outputs), out=out, acc=acc)


def swept_functions(config) -> list[tuple[str, str]]:
    """(dotted key, reference) of every function a config's sweep names (``sweep: {epilogue: [{function: ...}]}``
    or ``sweep: {epilogue.function: [...]}``)."""
    out = []
    for index, entry in enumerate(config.sweep.get("epilogue", ())):
        fn = entry.get("function") if isinstance(entry, dict) else None
        if isinstance(fn, str):
            out.append((f"sweep.epilogue.{index}.function", fn))
    out += [(f"sweep.epilogue.function.{index}", fn) for index, fn in enumerate(config.sweep.get("epilogue.function", ()))
            if isinstance(fn, str)]
    return out


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


def swept_violations(config) -> list[tuple[str, str]]:
    """(dotted key, message) per function of a config's sweep that this run may not import (no consent): found
    when the config is loaded, at the sweep entry's line."""
    out = []
    for key, reference in swept_functions(config):
        try:
            resolve_function(reference, source=config.source)
        except CodeNotAllowedError as exc:
            out.append((key, str(exc)))
        except XegemmError:
            pass            # any other mistake is the variant's, reported when it is planned
    return out
