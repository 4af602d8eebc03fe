"""The epilogue ops: for each, how numpy computes it (float64), how OpenCL C spells it, and how it carries and
adds error (its slope and its rounding), in one table that the tracer, the reference and the emitter read.

The five activations of today's fixed epilogue (relu, clamp, gelu_erf, gelu_tanh, silu) are
:data:`ACTIVATIONS`' entries (defined here) (their OpenCL C body, numpy reference, slope and error
bound have that one home); sigmoid and hardswish are :class:`Activation` entries of their own.  Math builtins use OpenCL C's functions with the accuracy OpenCL C promises in its full profile
(OpenCL C 3.0, section 7.4, "Relative Error as ULPs": + - * exact rounding, x / y 2.5 ulp, exp, log, sqrt 3 ulp,
rsqrt 2 ulp, tanh 5 ulp; docs/epilogues.md), doubled into units of u_f32 (an ulp of y is at most 2 u |y|).

Error rules (``rule``), for an operand x known to within t (absolute, per element):

* ``add``, ``mul``, ``div``: the first-order error of the operation plus its rounding, units * u * |y|.
* ``lipschitz`` (the activations): slope * t plus the activation's own error bound, error_units * u * (|y| + 1),
  exactly the rule of :func:`xegemm.epilogues.fixed.reference_bounds`.
* ``monotone`` (exp, log, sqrt, rsqrt, tanh): max |f(x +- t) - f(x)|, exact for a monotone f however steep,
  plus the builtin's rounding; outside the domain the tolerance is infinite.
* ``max``: minimum, maximum, neg, abs and clamp move no value by more than their operands' largest error.
* ``where``: the chosen operand's error, or, where the condition is within its operands' errors of flipping,
  either operand's: |a - b| + max(ta, tb).
* ``cast``: the interval [x - t, x + t] converted to the type (round to nearest even, saturating): monotone.
* reductions: sums add their operands' errors plus 2 n u sum |x| (Higham, "Accuracy and Stability of Numerical
  Algorithms", section 4.2, doubled as xegemm.verify.dense doubles it); maxima keep the largest operand error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Activation:
    """An element-wise function: the OpenCL C expression of its value at ``x`` (a float; ``lo``, ``hi`` the
    clamp bounds), its numpy reference (float64 array), the largest slope |f'| (to carry an error in x
    through it), and the error of its OpenCL C spelling in units of u_f32 * (|f(x)| + 1) (OpenCL C 7.4: exp
    <= 3 ulp, tanh <= 5 ulp, erf <= 16 ulp, plus the formula's own roundings; generous on purpose, still
    ~1e-5 relative)."""

    name: str
    body: str
    reference: object
    lipschitz: float
    error_units: float
    int_body: str | None = None   # its body on ints when it maps integers to integers exactly (exact path)

    @property
    def bounded(self) -> bool:
        """Takes the clamp bounds."""
        return "lo" in self.body

    def call(self, x: str, integer: bool = False) -> str:
        """The call of its kernel function (:meth:`definition`) on ``x``."""
        if self.name == "none":
            return x
        return f"xe_{self.name}{'_int' if integer else ''}({x}{', clamp_lo, clamp_hi' if self.bounded else ''})"

    def definition(self, integer: bool = False) -> str:
        """Its OpenCL C function (none has none)."""
        if self.name == "none":
            return ""
        t = "int" if integer else "float"
        params = f"{t} x" + (", float lo, float hi" if self.bounded else "")
        return (f"static inline {t} xe_{self.name}{'_int' if integer else ''}({params})\n"
                f"{{\n    return {self.int_body if integer else self.body};\n}}\n")


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
# GELU and SiLU slopes: max of d/dx x Phi(x) = 1.1289 (x = sqrt(2)), of d/dx x sigmoid(x) = 1.0998 (x = 2.3994)
ACTIVATIONS: dict[str, Activation] = {a.name: a for a in (
    Activation("none", "x", lambda x, lo, hi: x, 1.0, 0.0, "x"),
    # NaN propagates as numpy's maximum and minimum propagate it (fmax and fmin would return the other operand)
    Activation("relu", "isnan(x) ? x : fmax(x, 0.0f)", lambda x, lo, hi: np.maximum(x, 0.0), 1.0, 0.0, "max(x, 0)"),
    Activation("clamp", "isnan(x) ? x : fmin(fmax(x, lo), hi)",
               lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi), 1.0, 0.0),
    Activation("gelu_tanh", "0.5f * x * (1.0f + tanh(0.7978845608f * (x + 0.044715f * x * x * x)))",
               lambda x, lo, hi: 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x ** 3))), 1.13, 64.0),
    Activation("gelu_erf", "0.5f * x * (1.0f + erf(x * 0.7071067812f))",
               lambda x, lo, hi: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))), 1.13, 64.0),
    Activation("silu", "x / (1.0f + exp(-x))", lambda x, lo, hi: x / (1.0 + np.exp(-x)), 1.1, 64.0),
)}


def _sigmoid(x, lo=None, hi=None):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def _hardswish(x, lo=None, hi=None):
    return x * np.clip(x + 3.0, 0.0, 6.0) / 6.0


# Slopes: sigmoid' <= 1/4 (at 0); hardswish' = (2x + 3) / 6 on (-3, 3), so |.| <= 3/2.  Error bounds as the
# fixed activations count them: exp 3 ulp, the adds and the divide, in units of u_f32 (|y| + 1), generously.
SIGMOID = Activation("sigmoid", "1.0f / (1.0f + exp(-x))", _sigmoid, 0.25, 32.0)
HARDSWISH = Activation("hardswish", "x * fmin(fmax(x + 3.0f, 0.0f), 6.0f) / 6.0f", _hardswish, 1.5, 16.0)


# numpy's maximum and minimum: NaN if either operand is NaN (OpenCL C's fmax and fmin return the other operand)
HELPERS = {name: f"static inline float xe_{name}(float a, float b)\n{{\n    return isnan(a) || isnan(b) ? a + b : "
                 f"{fn}(a, b);\n}}\n" for name, fn in (("maximum", "fmax"), ("minimum", "fmin"))}


@dataclass(frozen=True)
class Op:
    """One op: ``arity`` operands; ``numpy`` its float64 function; ``c`` its OpenCL C form (``{0}``, ``{1}`` ...
    the operands) and ``precedence`` the C precedence of that form (16 for a call); ``rule`` its error rule
    (module docstring) and ``units`` its own rounding in u_f32; ``activation`` the registry entry it calls;
    ``result`` ``float`` or ``bool``; ``tagged``: named in the kernel's tag."""

    name: str
    arity: int
    numpy: object
    c: str
    precedence: int
    rule: str
    units: float = 0.0
    activation: Activation | None = None
    result: str = "float"
    tagged: bool = False


# C precedences (higher binds tighter): the ternary 2, equality 8, relational 9, additive 11, multiplicative 12,
# unary 14, a call or a name 16 (C17 6.5).
CALL, UNARY, MULTIPLICATIVE, ADDITIVE, RELATIONAL, EQUALITY, TERNARY = 16, 14, 12, 11, 9, 8, 2


def _activation(a: Activation, arity: int = 1) -> Op:
    lo_hi = (", {1}, {2}" if arity == 3 else "")
    return Op(a.name, arity, lambda x, lo=None, hi=None: a.reference(x, lo, hi), f"xe_{a.name}({{0}}{lo_hi})",
              CALL, "max" if a.name == "clamp" else "lipschitz", 0.0, a, tagged=True)


def _compare(name: str, symbol: str, fn, precedence: int) -> Op:
    return Op(name, 2, fn, f"{{0}} {symbol} {{1}}", precedence, "compare", result="bool")


def _monotone(name: str, fn, c: str, ulps: float) -> Op:
    return Op(name, 1, fn, c, CALL, "monotone", 2 * ulps, tagged=True)


def _quiet(fn):
    def run(*args):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return fn(*args)
    return run


OPS: dict[str, Op] = {op.name: op for op in (
    Op("add", 2, np.add, "{0} + {1}", ADDITIVE, "add", 1.0),
    Op("sub", 2, np.subtract, "{0} - {1}", ADDITIVE, "add", 1.0),
    Op("mul", 2, np.multiply, "{0} * {1}", MULTIPLICATIVE, "mul", 1.0),
    Op("div", 2, _quiet(np.divide), "{0} / {1}", MULTIPLICATIVE, "div", 5.0),
    Op("neg", 1, np.negative, "-{0}", UNARY, "max"),
    Op("abs", 1, np.abs, "fabs({0})", CALL, "max"),
    Op("maximum", 2, np.maximum, "xe_maximum({0}, {1})", CALL, "max"),
    Op("minimum", 2, np.minimum, "xe_minimum({0}, {1})", CALL, "max"),
    _compare("lt", "<", np.less, RELATIONAL), _compare("le", "<=", np.less_equal, RELATIONAL),
    _compare("gt", ">", np.greater, RELATIONAL), _compare("ge", ">=", np.greater_equal, RELATIONAL),
    _compare("eq", "==", np.equal, EQUALITY), _compare("ne", "!=", np.not_equal, EQUALITY),
    Op("where", 3, np.where, "{0} ? {1} : {2}", TERNARY, "where"),
    _monotone("exp", _quiet(np.exp), "exp({0})", 3.0),
    _monotone("log", _quiet(np.log), "log({0})", 3.0),
    _monotone("sqrt", _quiet(np.sqrt), "sqrt({0})", 3.0),
    _monotone("rsqrt", _quiet(lambda x: 1.0 / np.sqrt(x)), "rsqrt({0})", 2.0),
    _monotone("tanh", np.tanh, "tanh({0})", 5.0),
    _activation(ACTIVATIONS["relu"]), _activation(ACTIVATIONS["silu"]), _activation(ACTIVATIONS["gelu_erf"]),
    _activation(ACTIVATIONS["gelu_tanh"]), _activation(ACTIVATIONS["clamp"], 3), _activation(SIGMOID),
    _activation(HARDSWISH),
    Op("cast", 1, None, "", CALL, "cast", tagged=True),
)}


@dataclass(frozen=True)
class Reduction:
    """A reduction over the tile: the kind of its result (``row``: one value per row, summing along N; ``col``;
    ``scalar``: one per batch), ``combine`` (``sum`` or ``max``), the axes it reduces (of an (M, N) or
    (batch, M, N) array), its C identity and combination."""

    name: str
    kind: str
    combine: str
    axes: tuple[int, ...]

    @property
    def identity(self) -> str:
        return "0.0f" if self.combine == "sum" else "-INFINITY"

    def c_combine(self, a: str, b: str) -> str:
        """C of the combination; a maximum keeps a NaN, as numpy's max does."""
        return f"{a} + {b}" if self.combine == "sum" else f"(isnan({a}) || isnan({b}) ? {a} + {b} : fmax({a}, {b}))"

    def numpy(self, x: np.ndarray) -> np.ndarray:
        """Over an (M, N) or (batch, M, N) float64 array, keeping the reduced axes (length 1)."""
        return (np.sum if self.combine == "sum" else np.max)(x, axis=self.axes, keepdims=True)


REDUCTIONS: dict[str, Reduction] = {r.name: r for r in (
    Reduction("row_sum", "row", "sum", (-1,)), Reduction("row_max", "row", "max", (-1,)),
    Reduction("col_sum", "col", "sum", (-2,)), Reduction("col_max", "col", "max", (-2,)),
    Reduction("sum", "scalar", "sum", (-2, -1)),
)}
EXACT_INTEGER_OPS = tuple(n for n, op in OPS.items() if op.activation is not None and op.activation.int_body)
