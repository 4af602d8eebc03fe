"""The epilogue: what happens to each accumulator element between the last DPAS and the store of D.

    D = convert_to_C( activation( alpha * acc + beta * C + bias ) )

one element at a time, in the order written (CUTLASS's LinearCombination / LinearCombinationGeneric; the
cooperative-matrix proposals' MapElement: an element-wise function applied to every element a work-item holds).  This
module is the one home of that knowledge: the activations (:data:`ACTIVATIONS`, each with its OpenCL C
spelling, its numpy reference, its Lipschitz bound and its error bound), the compute type, the output
conversions (round to nearest even, saturating for integers), the kernel-name suffix, the numpy reference
the verifier applies, and the tolerance that follows from them.  The kernels print it as a graph
(:func:`xegemm.epilogue_graph.fixed.fixed_graph`, the one code path of fixed and traced epilogues).

Compute type: f32 (``float``), except the exact integer path: an s32 accumulator stored to an integer C with
alpha = 1, beta = 0, no bias and no float activation is converted with saturation only (exact).  Bias
vectors are f32 (one value per row of D, or per column), shared by every batch.  alpha, beta and the clamp
bounds are kernel arguments; whether the kernel scales, reads C, adds a bias or applies an activation is
decided when it is generated (beta = 0 reads nothing) and named in the kernel name.
"""

from __future__ import annotations

import math
import sys
import types
from dataclasses import dataclass

import numpy as np

from xegemm.dtypes import UNSIGNED_CTYPE, DType, c_spelling, dtype

U32 = 2.0 ** -24        # unit roundoff of f32, the compute type


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
    Activation("relu", "fmax(x, 0.0f)", lambda x, lo, hi: np.maximum(x, 0.0), 1.0, 0.0, "max(x, 0)"),
    Activation("clamp", "fmin(fmax(x, lo), hi)", lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi), 1.0, 0.0),
    Activation("gelu_tanh", "0.5f * x * (1.0f + tanh(0.7978845608f * (x + 0.044715f * x * x * x)))",
               lambda x, lo, hi: 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x ** 3))), 1.13, 64.0),
    Activation("gelu_erf", "0.5f * x * (1.0f + erf(x * 0.7071067812f))",
               lambda x, lo, hi: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))), 1.13, 64.0),
    Activation("silu", "x / (1.0f + exp(-x))", lambda x, lo, hi: x / (1.0 + np.exp(-x)), 1.1, 64.0),
)}
BIAS_KINDS = ("none", "row", "col")     # none; one value per row of D (length M); per column (length N)
OUTPUT_TYPES = ("f32", "f16", "bf16", "s32", "s8", "u8")   # what the epilogue can store D as


@dataclass(frozen=True)
class EpilogueSpec:
    """The epilogue of one variant: the config's values and the types around it."""

    alpha: float
    beta: float
    bias: str
    activation: str
    clamp: tuple[float, float]
    acc: str          # accumulator type name
    out: str          # C (and D) type name

    @classmethod
    def of(cls, config) -> "EpilogueSpec":
        e, t = config.epilogue, config.types
        return cls(e.alpha, e.beta, e.bias, e.activation, tuple(e.clamp), t.acc, t.c)

    # -- structure ------------------------------------------------------------------------------------------
    @property
    def scales(self) -> bool:
        return self.alpha != 1.0

    @property
    def reads_c(self) -> bool:
        """beta != 0: the kernel reads C (beta = 0 reads nothing, so C may hold anything, even NaN)."""
        return self.beta != 0.0

    @property
    def exact_integer(self) -> bool:
        """The integer path: s32 accumulators to an integer C with nothing that needs floats."""
        return (dtype(self.acc).is_int and dtype(self.out).is_int and not self.scales and not self.reads_c
                and self.bias == "none" and ACTIVATIONS[self.activation].int_body is not None)

    @property
    def identity(self) -> bool:
        """Nothing but the store (and its conversion, if C's type differs from the accumulator's)."""
        return not (self.scales or self.reads_c or self.bias != "none" or self.activation != "none")

    def name_parts(self) -> tuple[str, ...]:
        """The kernel name's parts for the epilogue (xegemm.kernel_name): none for the plain store, else e.g.
        ``("alpha", "beta", "biasrow", "gelu_tanh")``."""
        return tuple((["alpha"] if self.scales else []) + (["beta"] if self.reads_c else [])
                     + ([f"bias{self.bias}"] if self.bias != "none" else [])
                     + ([self.activation] if self.activation != "none" else []))

    def describe(self) -> str:
        """One line for the kernel's header comment and reports."""
        terms = ["alpha * acc" if self.scales else "acc"] + (["beta * C"] if self.reads_c else []) \
            + ([f"bias[{'row' if self.bias == 'row' else 'col'}]"] if self.bias != "none" else [])
        expr = " + ".join(terms)
        if self.activation != "none":
            expr = f"{self.activation}({expr})"
        how = "saturating" if dtype(self.out).is_int else "round to nearest even"
        conv = "" if self.out == self.acc and self.identity else f", converted to {self.out} ({how})"
        compute = "s32 (exact)" if self.exact_integer else "f32"
        return f"D = {expr}, computed in {compute}{conv}"


def load_float(type_name: str, bits: str) -> str:
    """C expression: the value of storage bits ``bits`` (an unsigned scalar) of ``type_name`` as a float."""
    return c_spelling(type_name, "load", bits)


def store_float(type_name: str, value: str) -> str:
    """C expression: the storage bits of float ``value`` converted to ``type_name`` (RNE; integers saturate)."""
    return c_spelling(type_name, "store", value)


def store_int(type_name: str, value: str) -> str:
    """C expression: the storage bits of int ``value`` converted to integer ``type_name`` with saturation."""
    return c_spelling(type_name, "store_int", value)


def storage_ctype(type_name: str) -> str:
    return UNSIGNED_CTYPE[dtype(type_name).bits]


# ---- the numpy side ----------------------------------------------------------------------------------------

def _round_to(out: DType, values: np.ndarray) -> np.ndarray:
    """``values`` (float64) as ``out`` stores them: round to nearest even; integers saturate."""
    if out.is_int:
        lo, hi = out.value_range
        return np.clip(np.rint(values), lo, hi)
    with np.errstate(over="ignore", invalid="ignore"):
        return out.round(values)


@dataclass(frozen=True)
class Bounds:
    """Per element, the lowest and highest value D may hold, and the value it should hold."""

    expected: np.ndarray
    low: np.ndarray
    high: np.ndarray


def reference_bounds(spec: EpilogueSpec, acc: np.ndarray, acc_tol, c_in: np.ndarray | None,
                     bias: np.ndarray | None) -> Bounds:
    """What D may be, given the exact accumulator ``acc`` (float64/int64, batch x M x N) and how far the
    device's accumulator may be from it (``acc_tol``).

    The compute error: the device's accumulator is within acc_tol; each of the f32 operations alpha * acc,
    + beta * C, + bias and the conversion of an s32 accumulator to f32 rounds once (4 u_f32 of the terms'
    magnitudes); the activation carries that through its slope and adds its own error.  That gives an
    interval [y - tol, y + tol] around the exact result y; as every output conversion is monotone, D must lie
    between the conversions of its two ends.  So a kernel that truncates instead of rounding to nearest even,
    or wraps instead of saturating, fails wherever tol is smaller than half a unit of the output type: almost
    everywhere for bf16, f16, s8 and u8.
    """
    out = dtype(spec.out)
    if spec.exact_integer:
        act = ACTIVATIONS[spec.activation].reference(acc.astype(np.float64), *spec.clamp)
        expected = _round_to(out, act)
        return Bounds(expected, expected, expected)
    alpha, beta = np.float64(np.float32(spec.alpha)), np.float64(np.float32(spec.beta))
    z = alpha * acc.astype(np.float64)
    magnitude = np.abs(z) + abs(alpha) * acc_tol
    if spec.reads_c:
        z = z + beta * c_in
        magnitude = magnitude + np.abs(beta * c_in)
    if spec.bias != "none":
        b = bias[None, :, None] if spec.bias == "row" else bias[None, None, :]
        z = z + b
        magnitude = magnitude + np.abs(b)
    activation = ACTIVATIONS[spec.activation]
    lo, hi = (float(np.float32(v)) for v in spec.clamp)
    y = activation.reference(z, lo, hi)
    tol = activation.lipschitz * (abs(alpha) * acc_tol + 4 * U32 * magnitude) \
        + activation.error_units * U32 * (np.abs(y) + 1.0)
    tol = tol + np.finfo(np.float32).tiny
    return Bounds(_round_to(out, y), _round_to(out, y - tol), _round_to(out, y + tol))


class _CallableModule(types.ModuleType):
    """This module stays the fixed epilogue's home and, called, marks a function as a traced epilogue
    (``xegemm.epilogue(fn)``, ``@xegemm.epilogue``; docs/epilogues.md): the tracer is imported on that call only,
    since it builds on this module."""

    def __call__(self, fn=None, **kwargs):
        from xegemm.epilogue_graph.tracer import epilogue  # noqa: PLC0415 - the tracer imports this module

        return epilogue(fn, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
