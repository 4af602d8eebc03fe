"""Tracing: the user's epilogue function is called once with tracer values, and what it computes becomes a
:class:`~.graph.Graph`.  No source is parsed and nothing is ``eval``-ed: Python runs the function, and every
operator or :mod:`xegemm.ops` call on a tracer records a node.  Python that needs a value while tracing (an
``if`` on a tensor, ``float(x)``, indexing) raises :class:`~.errors.UnsupportedConstructError` naming the
function and its line.

Parameter names have fixed meanings: ``acc`` (the accumulator tile), ``c`` (the source matrix); every other
parameter is a named input whose kind (row, col, matrix, scalar) is declared (:func:`trace` ``inputs``) or
taken from the array passed at call time (:func:`input_kind`).  The function returns D, or a dict whose
``"d"`` is D and whose other entries are extra outputs: auxiliary matrices and reductions.
"""

from __future__ import annotations

import functools
import inspect
import keyword
import ctypes
import numbers
import threading

import numpy as np

from xegemm.library.dtypes import UnknownDTypeError, dtype
from xegemm.epilogues.errors import (
    EpilogueError,
    OutputTypeError,
    ShapeError,
    UndeclaredKindError,
    UnknownOpError,
    UnsupportedConstructError,
    function_site,
    traceback_site,
    user_site,
)
from xegemm.epilogues.graph import (
    KINDS,
    REDUCTION_TYPES,
    RESERVED,
    STORE_TYPES,
    VECTOR_TYPE,
    Graph,
    Input,
    Node,
    Output,
    broadcast,
)
from xegemm.epilogues.registry import OPS, REDUCTIONS

MAX_POWER = 4     # x ** n for a constant n in 1..MAX_POWER is traced as multiplications
MAX_NODES = 100_000   # distinct values (ops and constants) one epilogue may compute
MAX_TRACE_S = 10.0    # seconds the function may run while it is traced (it runs once, on tracer values)


class Value:
    """A traced value: node ``index`` of ``tracer``.  Arithmetic and comparisons record nodes; anything that
    would need the value itself raises."""

    __slots__ = ("index", "tracer")
    __array_priority__ = 1000     # numpy defers to us: ndarray + Value -> Value.__radd__

    def __init__(self, tracer: Tracer, index: int):
        self.tracer, self.index = tracer, index

    @property
    def node(self) -> Node:
        return self.tracer.nodes[self.index]

    @property
    def kind(self) -> str:
        return self.node.kind

    def __repr__(self) -> str:
        return f"<traced {self.node.op} ({self.kind}) of epilogue {self.tracer.function}>"

    # arithmetic
    def __add__(self, o): return self.tracer.apply("add", self, o)
    def __radd__(self, o): return self.tracer.apply("add", o, self)
    def __sub__(self, o): return self.tracer.apply("sub", self, o)
    def __rsub__(self, o): return self.tracer.apply("sub", o, self)
    def __mul__(self, o): return self.tracer.apply("mul", self, o)
    def __rmul__(self, o): return self.tracer.apply("mul", o, self)
    def __truediv__(self, o): return self.tracer.apply("div", self, o)
    def __rtruediv__(self, o): return self.tracer.apply("div", o, self)
    def __neg__(self): return self.tracer.apply("neg", self)
    def __pos__(self): return self
    def __abs__(self): return self.tracer.apply("abs", self)

    def __pow__(self, n):
        if isinstance(n, numbers.Integral) and 1 <= int(n) <= MAX_POWER:
            out = self
            for _ in range(int(n) - 1):
                out = out * self
            return out
        raise self.tracer.error(UnsupportedConstructError, f"x ** {n!r}: only constant integer powers 1 to "
                                f"{MAX_POWER} are traced (written as products); use ops.exp and ops.log otherwise")

    # comparisons (conditions for ops.where)
    def __lt__(self, o): return self.tracer.apply("lt", self, o)
    def __le__(self, o): return self.tracer.apply("le", self, o)
    def __gt__(self, o): return self.tracer.apply("gt", self, o)
    def __ge__(self, o): return self.tracer.apply("ge", self, o)
    def __eq__(self, o): return self.tracer.apply("eq", self, o)
    def __ne__(self, o): return self.tracer.apply("ne", self, o)
    __hash__ = None

    # what tracing cannot follow
    def _needs_value(self, what: str):
        raise self.tracer.error(UnsupportedConstructError, f"{what} needs the value of a tensor, which is not known "
                                "while tracing (the function is traced once, for all elements together); for a choice "
                                "per element use xegemm.ops.where(condition, a, b)")

    def __bool__(self): self._needs_value("a data-dependent `if`, `while`, `and`, `or`, `not` or Python's max()/min()")
    def __float__(self): self._needs_value("float()")
    def __int__(self): self._needs_value("int()")
    def __index__(self): self._needs_value("using a tensor as an index")
    def __complex__(self): self._needs_value("complex()")
    def __len__(self): self._needs_value("len()")
    def __iter__(self): self._needs_value("iterating over a tensor")
    def __getitem__(self, key): self._needs_value("indexing a tensor (the epilogue sees one element at a time)")
    def __setitem__(self, key, value): self._needs_value("assigning into a tensor")
    def __round__(self, n=None): self._needs_value("round() (cast with xegemm.ops.cast instead)")
    def __floordiv__(self, o): self._needs_value("// (integer division)")
    __rfloordiv__ = __mod__ = __rmod__ = __floordiv__

    # numpy functions on tracers
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = NUMPY_UFUNCS.get(ufunc.__name__)
        if method != "__call__" or name is None or kwargs:
            raise self.tracer.error(UnknownOpError, f"numpy.{ufunc.__name__}"
                                    f"{'' if method == '__call__' else '.' + method} is not an epilogue op; the ops "
                                    f"are those of xegemm.ops: {', '.join(PUBLIC_OPS)}")
        return self.tracer.apply(name, *inputs)

    def __array_function__(self, func, types, args, kwargs):
        if func is np.where and len(args) == 3 and not kwargs:
            return self.tracer.apply("where", *args)
        if func is np.clip and len(args) == 3 and not kwargs:
            return self.tracer.apply("clamp", *args)
        raise self.tracer.error(UnknownOpError, f"numpy.{func.__name__} is not an epilogue op; the ops are those "
                                f"of xegemm.ops: {', '.join(PUBLIC_OPS)}")


NUMPY_UFUNCS = {"add": "add", "subtract": "sub", "multiply": "mul", "divide": "div", "true_divide": "div",
                "negative": "neg", "absolute": "abs", "fabs": "abs", "maximum": "maximum", "fmax": "maximum",
                "minimum": "minimum", "fmin": "minimum", "exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh",
                "less": "lt", "less_equal": "le", "greater": "gt", "greater_equal": "ge", "equal": "eq",
                "not_equal": "ne"}
PUBLIC_OPS = ("+ - * / and comparisons", "maximum", "minimum", "where", "abs", "exp", "log", "sqrt", "rsqrt",
              "tanh", "sigmoid", "relu", "silu", "gelu", "hardswish", "clamp", "cast", *REDUCTIONS)


class Tracer:
    """Records the nodes of one trace of ``function`` (its qualified name)."""

    def __init__(self, function: str):
        self.function = function
        self.nodes: list[Node] = []
        self._memo: dict[tuple, int] = {}      # (op, args, attr) -> node: one node per distinct value

    def error(self, cls, reason: str, site=None) -> EpilogueError:
        return cls(self.function, site or user_site(), reason)

    def _add(self, op: str, args: tuple[int, ...], attr, kind: str, vtype: str = "float") -> Value:
        key = (op, args, attr)
        if key not in self._memo:
            if len(self.nodes) >= MAX_NODES:
                raise self.error(UnsupportedConstructError, f"the epilogue computes more than {MAX_NODES} distinct "
                                 "values; an epilogue stage that large would not fit a kernel (split the work)")
            self._memo[key] = len(self.nodes)
            self.nodes.append(Node(op, args, attr, kind, vtype, user_site()))
        return Value(self, self._memo[key])

    def input(self, name: str, kind: str) -> Value:
        return self._add("input", (), name, kind)

    def operand(self, x) -> int:
        """The node of an operand: a value of this trace, or a constant (rounded to f32, as C reads it)."""
        if isinstance(x, Value):
            if x.tracer is not self:
                raise self.error(UnsupportedConstructError, "a value of another epilogue's trace was used here")
            return x.index
        if isinstance(x, (bool, np.bool_)):
            raise self.error(UnsupportedConstructError, f"the constant {x!r} is a boolean: conditions come from "
                             "comparisons of tensors")
        if isinstance(x, numbers.Real) or (isinstance(x, np.ndarray) and x.ndim == 0 and x.dtype.kind in "iuf"):
            return self._add("const", (), float(np.float32(float(x))), "scalar").index
        if isinstance(x, np.ndarray):
            raise self.error(ShapeError, f"a constant array of shape {x.shape} cannot broadcast over the tile "
                             "(constants are numbers); pass it as a named input (a parameter of the function)")
        raise self.error(UnsupportedConstructError, f"{type(x).__name__} {x!r} is neither a tensor nor a number")

    def apply(self, op: str, *operands, attr=None) -> Value:
        """Record ``op`` over ``operands`` (values or numbers): its kind by broadcasting, its type."""
        spec = OPS[op]
        args = tuple(self.operand(x) for x in operands)
        nodes = [self.nodes[a] for a in args]
        for position, n in enumerate(nodes):
            if n.op in REDUCTIONS:
                raise self.error(ShapeError, f"{op} reads {n.op}(...), a reduction: its value is complete only "
                                 "after every tile is done, so it can only be returned as an output")
            wants_bool = op == "where" and position == 0
            if wants_bool != (n.vtype == "bool"):
                raise self.error(UnsupportedConstructError,
                                 "where(condition, a, b) needs a comparison as its condition" if wants_bool else
                                 f"{op} reads a comparison: a condition is not a number; choose values with "
                                 "xegemm.ops.where(condition, a, b)")
        kind = "scalar"
        for n in nodes:
            kind = broadcast(kind, n.kind)
        return self._add(op, args, attr, kind, spec.result)

    def reduce(self, name: str, x) -> Value:
        node = self.nodes[self.operand(x)]
        if node.op in REDUCTIONS:
            raise self.error(ShapeError, f"{name} of {node.op}(...): a reduction of a reduction is not supported")
        if node.vtype == "bool":
            raise self.error(UnsupportedConstructError, f"{name} of a comparison: reduce numbers "
                             "(xegemm.ops.where(condition, 1.0, 0.0) counts)")
        return self._add(name, (self.operand(x),), None, REDUCTIONS[name].kind)

    def cast(self, x, type_name: str) -> Value:
        try:
            t = dtype(type_name).name
        except UnknownDTypeError as exc:
            raise self.error(OutputTypeError, str(exc)) from None
        if t not in STORE_TYPES:
            raise self.error(OutputTypeError, f"cannot cast to {t}: the epilogue converts to "
                             f"{', '.join(STORE_TYPES)}")
        return self.apply("cast", x, attr=t)


# ---- inputs --------------------------------------------------------------------------------------------------

def input_spec(name: str, declared, default_matrix_type: str) -> Input:
    """An :class:`Input` from a declaration: a kind (``"row"``), ``{"kind": ..., "type": ...}`` or an Input."""
    if isinstance(declared, Input):
        return declared
    kind, type_name = (declared.get("kind"), declared.get("type")) if isinstance(declared, dict) else (declared, None)
    if kind not in KINDS:
        raise ValueError(f"input {name!r}: kind {kind!r} is not one of {', '.join(KINDS)}")
    if kind != "matrix":
        if type_name not in (None, VECTOR_TYPE):
            raise ValueError(f"input {name!r}: a {kind} input is {VECTOR_TYPE}, not {type_name}")
        return Input(name, kind, VECTOR_TYPE)
    t = dtype(type_name or default_matrix_type).name
    if t not in STORE_TYPES:
        raise ValueError(f"input {name!r}: a matrix input is one of {', '.join(STORE_TYPES)}, not {t}")
    return Input(name, kind, t)


def input_kind(value, m: int, n: int) -> str:
    """The kind of an input passed at call time: a number or 0-d array is a scalar, (M, 1) a row vector, (1, N)
    or (N,) a column vector, (M, N) or (batch, M, N) a matrix (in that order of checks when M or N is 1)."""
    shape = np.shape(value)
    if shape == ():
        return "scalar"
    if shape == (m, 1):
        return "row"
    if shape in ((1, n), (n,)):
        return "col"
    if shape[-2:] == (m, n) and len(shape) in (2, 3):
        return "matrix"
    raise ValueError(f"shape {shape} cannot broadcast over D ({m} x {n}): a row vector is ({m}, 1), a column "
                     f"vector ({n},) or (1, {n}), a matrix ({m}, {n}) or (batch, {m}, {n})")


def kinds_from_arrays(fn, values: dict, m: int, n: int) -> dict[str, str]:
    """The kind of each named input (not ``acc`` or ``c``) of ``fn`` from the values passed at call time
    (:func:`input_kind`); a value of no kind raises :class:`~.errors.ShapeError` naming the function."""
    kinds = {}
    for key, value in values.items():
        if key in RESERVED:
            continue
        try:
            kinds[key] = input_kind(value, m, n)
        except ValueError as exc:
            name = getattr(fn, "__qualname__", None) or repr(fn)
            raise ShapeError(name, function_site(fn), f"input {key!r}: {exc}") from None
    return kinds


# ---- tracing -------------------------------------------------------------------------------------------------

def trace(fn, inputs: dict | None = None, outputs: dict | None = None, out: str = "f32", acc: str = "f32",
          c: str | None = None) -> Graph:
    """The graph of epilogue function ``fn``: ``inputs`` declares each named input's kind (and a matrix's type),
    ``outputs`` each extra output's type (auxiliary matrices default to D's type ``out``, reductions to f32);
    ``acc`` is the accumulator type, ``c`` C's type (default ``out``).  Raises :class:`~.errors.EpilogueError`
    subclasses naming the function and its line."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    site = function_site(fn)
    inputs, outputs = dict(inputs or {}), dict(outputs or {})
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        raise UnsupportedConstructError(name, site, "its signature cannot be read (a builtin?)") from None
    for p in params.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            raise UnsupportedConstructError(name, site, f"parameter {p}: epilogue parameters are named inputs "
                                            "(acc, c and one name per input), not *args, **kwargs or positional-only")
    for key in inputs:
        if key not in params or key in RESERVED:
            raise ShapeError(name, site, f"declares input {key!r}, " + (
                "a name with a fixed meaning" if key in RESERVED else "which is not a parameter of the function"))
    try:
        out, acc = dtype(out).name, dtype(acc).name
        c = dtype(c or out).name
    except UnknownDTypeError as exc:
        raise OutputTypeError(name, site, str(exc)) from None
    if out not in STORE_TYPES:
        raise OutputTypeError(name, site, f"D cannot be stored as {out}: one of {', '.join(STORE_TYPES)}")

    tracer = Tracer(name)
    stack = _traces()
    stack.append(tracer)
    try:
        return _trace(fn, tracer, params, inputs, outputs, out, acc, c, site)
    finally:
        stack.pop()


_ACTIVE = threading.local()     # per thread, the traces under way (innermost last)


def _traces() -> list[Tracer]:
    if not hasattr(_ACTIVE, "stack"):
        _ACTIVE.stack = []
    return _ACTIVE.stack


def active_trace() -> Tracer | None:
    """The innermost trace under way in this thread (what xegemm.ops names in its errors), or None."""
    stack = _traces()
    return stack[-1] if stack else None


def _trace(fn, tracer: Tracer, params, inputs: dict, outputs: dict, out: str, acc: str, c: str, site) -> Graph:
    name = tracer.function
    declared: list[Input] = []
    args = {}
    for p in params:
        if p == "acc":
            declared.append(Input("acc", "matrix", acc))
        elif p == "c":
            declared.append(Input("c", "matrix", c))
        elif p == "d":
            raise ShapeError(name, site, "parameter 'd' names the output; inputs are acc, c and named inputs")
        elif p not in inputs:
            raise UndeclaredKindError(name, site, f"input {p!r} has no kind: pass an array for it at call time or declare "
                             f"it (epilogue inputs: {{{p}: row}}; kinds: {', '.join(KINDS)})")
        else:
            try:
                declared.append(input_spec(p, inputs[p], c))
            except (ValueError, UnknownDTypeError) as exc:
                raise ShapeError(name, site, str(exc)) from None
        if p.startswith("xe_"):
            raise ShapeError(name, site, f"input name {p!r} is reserved for generated code (xe_*)")
        args[p] = tracer.input(p, declared[-1].kind)

    try:
        result = _within_time(fn, args)
    except EpilogueError:
        raise
    except _TraceTimeout:
        raise UnsupportedConstructError(name, site, f"still running after {MAX_TRACE_S:g} s while it was traced "
                                        "(a loop that never ends?); an epilogue is traced once, in well under a "
                                        "second") from None
    except Exception as exc:  # noqa: BLE001 -- what the user's code raised while tracing: said with its line
        raise UnsupportedConstructError(name, traceback_site(exc), f"raised {type(exc).__name__}: {exc} "
                                        "(while tracing: every parameter is a traced tensor)") from None

    returned = _returned(tracer, result, site)
    for key in outputs:
        if key not in returned:
            raise OutputTypeError(name, site, f"declares output {key!r}, which the function does not return "
                                  f"(it returns {', '.join(returned)})")
    outs = []
    for key, index in returned.items():
        node = tracer.nodes[index]
        where = node.site or site
        if node.vtype == "bool":
            raise OutputTypeError(name, where, f"output {key!r} is a comparison: a condition cannot be stored; "
                                  "choose values with xegemm.ops.where(condition, a, b)")
        reduced = node.op in REDUCTIONS
        if key == "d":
            if reduced:
                raise ShapeError(name, where, f"D is {node.op}(...), a reduction: D is an M x N matrix; return "
                                 "reductions as extra outputs ({'d': ..., 'name': row_sum(...)})")
            t = out
        else:
            try:
                t = dtype(outputs.get(key, "f32" if reduced else out)).name
            except UnknownDTypeError as exc:
                raise OutputTypeError(name, where, f"output {key!r}: {exc}") from None
            allowed = REDUCTION_TYPES if reduced else STORE_TYPES
            if t not in allowed:
                what = f"{node.op}, a reduction summed in f32," if reduced else "an auxiliary matrix"
                raise OutputTypeError(name, where, f"output {key!r} is {what} and cannot be stored as {t}: one of "
                                      f"{', '.join(allowed)}")
        outs.append(Output(key, index, t))
    used = _reachable(tracer.nodes, [o.node for o in outs])
    nodes, inputs_used = _compact(tracer.nodes, used, outs)
    read = {n.attr for n in nodes if n.op == "input"}
    return Graph(name, acc, tuple(i for i in declared if i.name in read), nodes, inputs_used, site)


class _TraceTimeout(BaseException):
    """Raised inside the traced function when it overruns MAX_TRACE_S (a BaseException: its own ``except
    Exception`` cannot swallow it)."""


def _within_time(fn, args: dict):
    """``fn(**args)``, stopped after MAX_TRACE_S: a timer raises :class:`_TraceTimeout` in this thread (CPython's
    asynchronous exception, delivered between bytecodes: a Python loop stops, a single C call that never returns
    does not).  Costs nothing while the function runs."""
    thread, state = threading.get_ident(), {"done": False, "raised": False}
    lock = threading.Lock()
    set_async = ctypes.pythonapi.PyThreadState_SetAsyncExc      # (thread id, exception class or NULL: withdraw)

    def overrun():
        with lock:
            if not state["done"]:
                state["raised"] = True
                set_async(ctypes.c_ulong(thread), ctypes.py_object(_TraceTimeout))

    timer = threading.Timer(MAX_TRACE_S, overrun)
    timer.daemon = True
    timer.start()
    try:
        result = fn(**args)
    finally:
        with lock:
            state["done"] = True
            timer.cancel()
            if state["raised"]:
                set_async(ctypes.c_ulong(thread), None)    # a timeout not yet delivered: withdrawn
    if state["raised"]:
        raise _TraceTimeout
    return result


def _returned(tracer: Tracer, result, site) -> dict[str, int]:
    name = tracer.function
    if isinstance(result, dict):
        if "d" not in result:
            raise OutputTypeError(name, site, f"returns a dict without 'd' (keys: {', '.join(map(str, result))}): "
                                  "'d' is D, the other entries extra outputs")
        out = {}
        for key in ["d"] + [k for k in result if k != "d"]:
            if not isinstance(key, str) or not key.isidentifier() or keyword.iskeyword(key) or key.startswith("xe_"):
                raise OutputTypeError(name, site, f"output name {key!r} is not a plain identifier")
            if key in RESERVED[:2]:
                raise OutputTypeError(name, site, f"output name {key!r} names an input")
            out[key] = tracer.operand(result[key])
        return out
    if isinstance(result, (tuple, list)):
        raise OutputTypeError(name, site, f"returns a {type(result).__name__}: return D, or a dict "
                              "{'d': D, 'name': extra output, ...}")
    if result is None:
        raise OutputTypeError(name, site, "returns None: return D, or a dict {'d': D, ...}")
    return {"d": tracer.operand(result)}


def _reachable(nodes: list[Node], roots: list[int]) -> set[int]:
    seen, stack = set(), list(roots)
    while stack:
        i = stack.pop()
        if i not in seen:
            seen.add(i)
            stack.extend(nodes[i].args)
    return seen


def _compact(nodes: list[Node], used: set[int], outs: list[Output]):
    """The nodes that reach an output, renumbered in trace order; the outputs pointed at them."""
    order = sorted(used)
    new = {old: i for i, old in enumerate(order)}
    kept = tuple(Node(n.op, tuple(new[a] for a in n.args), n.attr, n.kind, n.vtype, n.site)
                 for n in (nodes[i] for i in order))
    return kept, tuple(Output(o.name, new[o.node], o.type) for o in outs)


# ---- the decorator -------------------------------------------------------------------------------------------

class EpilogueFunction:
    """A plain Python function marked as an epilogue (``xegemm.epilogue(fn)``, usable as a decorator).  Calling
    it calls the function (on numpy arrays, :mod:`xegemm.ops` computes with numpy); :meth:`trace` gives its
    graph.  ``inputs`` and ``outputs`` declare kinds and types as :func:`trace` takes them."""

    def __init__(self, fn, inputs: dict | None = None, outputs: dict | None = None):
        if isinstance(fn, EpilogueFunction):
            inputs, outputs, fn = {**fn.inputs, **(inputs or {})}, {**fn.outputs, **(outputs or {})}, fn.function
        if not callable(fn):
            raise TypeError(f"xegemm.epilogue needs a function, not {type(fn).__name__}")
        self.function, self.inputs, self.outputs = fn, dict(inputs or {}), dict(outputs or {})
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        return self.function(*args, **kwargs)

    def trace(self, inputs: dict | None = None, outputs: dict | None = None, **types) -> Graph:
        return trace(self.function, {**self.inputs, **(inputs or {})}, {**self.outputs, **(outputs or {})}, **types)

    def __repr__(self) -> str:
        return f"<epilogue {self.__qualname__}>"


def epilogue(fn=None, *, inputs: dict | None = None, outputs: dict | None = None):
    """Mark ``fn`` as an epilogue: ``epilogue(fn)``, ``@epilogue`` or ``@epilogue(inputs=..., outputs=...)``."""
    if fn is None:
        return lambda f: EpilogueFunction(f, inputs, outputs)
    return EpilogueFunction(fn, inputs, outputs)
