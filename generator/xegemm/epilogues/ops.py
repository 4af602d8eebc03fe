"""The epilogue ops (``xegemm.ops``): on tracer values they record graph nodes, on numpy arrays they compute
with numpy in float64, so the same epilogue function is both traced and evaluated.

Element-wise: ``+ - * /`` and comparisons (Python's operators), :func:`maximum`, :func:`minimum`,
:func:`where`, :func:`abs`, :func:`exp`, :func:`log`, :func:`sqrt`, :func:`rsqrt`, :func:`tanh`,
:func:`sigmoid`, :func:`relu`, :func:`silu`, :func:`gelu` (erf or tanh), :func:`hardswish`, :func:`clamp`,
:func:`cast` (to an output type: round to nearest even, integers saturate).  Reductions (outputs only):
:func:`row_sum`, :func:`row_max`, :func:`col_sum`, :func:`col_max`, :func:`sum`.
"""

from __future__ import annotations

import numpy as np

from xegemm.library.dtypes import dtype
from xegemm.epilogues.outputs import round_to as _round_to
from xegemm.epilogues.errors import UnknownOpError, user_site
from xegemm.epilogues.registry import OPS, REDUCTIONS
from xegemm.epilogues.tracer import PUBLIC_OPS, Value, active_trace

__all__ = [
    "abs",
    "cast",
    "clamp",
    "col_max",
    "col_sum",
    "exp",
    "gelu",
    "hardswish",
    "log",
    "maximum",
    "minimum",
    "relu",
    "row_max",
    "row_sum",
    "rsqrt",
    "sigmoid",
    "silu",
    "sqrt",
    "sum",
    "tanh",
    "where",
]


def _traced(args) -> Value | None:
    return next((a for a in args if isinstance(a, Value)), None)


def _apply(op: str, *args):
    v = _traced(args)
    if v is not None:
        return v.tracer.apply(op, *args)
    return OPS[op].numpy(*(a if op == "where" and i == 0 else np.asarray(a, dtype=np.float64)
                           for i, a in enumerate(args)))


def maximum(a, b):
    """The larger of a and b, per element; NaN where either is NaN (numpy.maximum)."""
    return _apply("maximum", a, b)


def minimum(a, b):
    """The smaller of a and b, per element; NaN where either is NaN (numpy.minimum)."""
    return _apply("minimum", a, b)


def where(condition, a, b):
    """a where the condition (a comparison) holds, else b."""
    return _apply("where", condition, a, b)


def _unary(name: str, doc: str):
    def op(x):
        return _apply(name, x)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    return op


abs = _unary("abs", "|x|.")   # the op's name (shadows the builtin here)
exp = _unary("exp", "e to the x.")
log = _unary("log", "The natural logarithm of x.")
sqrt = _unary("sqrt", "The square root of x.")
rsqrt = _unary("rsqrt", "1 / sqrt(x).")
tanh = _unary("tanh", "The hyperbolic tangent of x.")
sigmoid = _unary("sigmoid", "1 / (1 + exp(-x)).")
relu = _unary("relu", "max(x, 0).")
silu = _unary("silu", "x * sigmoid(x).")
hardswish = _unary("hardswish", "x * min(max(x + 3, 0), 6) / 6.")


def gelu(x, approximate: str = "none"):
    """x * Phi(x): ``approximate="none"`` (or ``"erf"``) with erf, ``"tanh"`` with the tanh formula."""
    if approximate not in ("none", "erf", "tanh"):
        raise ValueError(f"gelu(approximate={approximate!r}): 'none' (erf) or 'tanh'")
    return _apply("gelu_tanh" if approximate == "tanh" else "gelu_erf", x)


def clamp(x, lo, hi):
    """min(max(x, lo), hi)."""
    return _apply("clamp", x, lo, hi)


def cast(x, type_name: str):
    """x converted to ``type_name`` (an output type) and read back: round to nearest even, integers saturate."""
    v = _traced((x,))
    if v is not None:
        return v.tracer.cast(x, type_name)
    return _round_to(dtype(type_name), np.asarray(x, dtype=np.float64))


def _reduction(name: str, doc: str):
    def op(x):
        if isinstance(x, Value):
            return x.tracer.reduce(name, x)
        return REDUCTIONS[name].numpy(np.asarray(x, dtype=np.float64))
    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc + " A reduction: an output only, never an operand."
    return op


row_sum = _reduction("row_sum", "The sum of each row (along N): one value per row of D.")
row_max = _reduction("row_max", "The largest value of each row.")
col_sum = _reduction("col_sum", "The sum of each column (along M): one value per column of D.")
col_max = _reduction("col_max", "The largest value of each column.")
sum = _reduction("sum", "The sum of every element of D (per batch).")   # the op's name (shadows the builtin here)


def __getattr__(name: str):
    """An unknown op: while tracing, an error naming the function and its line."""
    if name.startswith("_"):
        raise AttributeError(name)
    message = f"xegemm.ops.{name} is not an epilogue op; the ops are: {', '.join(PUBLIC_OPS)}"
    tracer = active_trace()
    if tracer is not None:
        raise UnknownOpError(tracer.function, user_site(), message)
    raise AttributeError(message)

