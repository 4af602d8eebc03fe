"""The epilogue: what happens to each accumulator element between the last DPAS and the store of D.

    D = convert_to_C( activation( alpha * acc + beta * C + bias ) )

one element at a time, in the order written (CUTLASS's LinearCombination / LinearCombinationGeneric; the
cooperative-matrix proposals' MapElement: an element-wise function applied to every element a work-item holds).  This
module is the fixed epilogue's home: the compute type, the kernel-name suffix, the numpy reference
the verifier applies, and the tolerance that follows from them; the activations are entries of the op
registry (:data:`xegemm.epilogues.registry.ACTIVATIONS`) and the output conversions are in
:mod:`xegemm.epilogues.outputs`.  The kernels print it as a graph
(:func:`fixed_graph`, the one code path of fixed and traced epilogues).

Compute type: f32 (``float``), except the exact integer path: an s32 accumulator stored to an integer C with
alpha = 1, beta = 0, no bias and no float activation is converted with saturation only (exact).  Bias
vectors are f32 (one value per row of D, or per column), shared by every batch.  alpha, beta and the clamp
bounds are kernel arguments; whether the kernel scales, reads C, adds a bias or applies an activation is
decided when it is generated (beta = 0 reads nothing) and named in the kernel name.

Today's fixed epilogue, ``D = activation(alpha * acc + beta * C + bias)``, as a traced function: one graph
per :class:`EpilogueSpec`, so that the fixed epilogue and Python-function epilogues take one
code path.  Its inputs are named as the kernels name their arguments (``alpha``, ``beta``, ``bias``,
``clamp_lo``, ``clamp_hi``); the terms the spec leaves out (alpha = 1, beta = 0, no bias) are not traced,
as the kernels leave them out.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from xegemm.epilogues import ops
from xegemm.epilogues.graph import Graph
from xegemm.epilogues.outputs import Bounds
from xegemm.epilogues.reference import reference
from xegemm.epilogues.registry import ACTIVATIONS
from xegemm.epilogues.tracer import trace
from xegemm.library.dtypes import dtype


BIAS_KINDS = ("none", "row", "col")     # none; one value per row of D (length M); per column (length N)


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
        """The kernel name's parts for the epilogue (xegemm.plan.kernel_name): none for the plain store, else e.g.
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


def reference_bounds(spec: EpilogueSpec, acc: np.ndarray, acc_tol, c_in: np.ndarray | None,
                     bias: np.ndarray | None) -> Bounds:
    """What D may be, given the exact accumulator ``acc`` (float64/int64, batch x M x N) and how far the
    device's accumulator may be from it (``acc_tol``): the fixed epilogue's graph (:func:`fixed_graph`) through
    the one reference of every epilogue, :func:`xegemm.epilogues.reference.reference`.

    The compute error: the device's accumulator is within acc_tol; each of the f32 operations alpha * acc,
    + beta * C, + bias and the conversion of an s32 accumulator to f32 rounds once; the activation carries that
    through its slope and adds its own error (the op registry's rules).  That gives an interval around the exact
    result y; as every output conversion is monotone, D must lie between the conversions of its two ends.  So a
    kernel that truncates instead of rounding to nearest even, or wraps instead of saturating, fails wherever
    the tolerance is smaller than half a unit of the output type: almost everywhere for bf16, f16, s8 and u8.
    The exact integer path (s32 to an integer C, nothing that needs floats) has no tolerance at all.
    """
    return reference(fixed_graph(spec), acc, acc_tol, fixed_inputs(spec, c_in, bias))["d"]


ACTIVATION_OPS = {"none": lambda x, lo, hi: x, "relu": lambda x, lo, hi: ops.relu(x),
                  "clamp": lambda x, lo, hi: ops.clamp(x, lo, hi), "gelu_erf": lambda x, lo, hi: ops.gelu(x),
                  "gelu_tanh": lambda x, lo, hi: ops.gelu(x, approximate="tanh"),
                  "silu": lambda x, lo, hi: ops.silu(x)}


def fixed_function(spec: EpilogueSpec):
    """The Python function of a fixed epilogue (callable on numpy arrays or traced)."""
    activation = ACTIVATION_OPS[spec.activation]

    def fixed(acc, c, bias, alpha, beta, clamp_lo, clamp_hi):
        z = alpha * acc if spec.scales else acc
        if spec.reads_c:
            z = z + beta * c
        if spec.bias != "none":
            z = z + bias
        return activation(z, clamp_lo, clamp_hi)
    fixed.__qualname__ = "fixed_" + ("_".join(spec.name_parts()) or "identity")
    return fixed


@functools.lru_cache(maxsize=256)
def fixed_graph(spec: EpilogueSpec) -> Graph:
    """The graph of a fixed epilogue (traced once per spec)."""
    inputs = {"bias": "row" if spec.bias == "none" else spec.bias, "alpha": "scalar", "beta": "scalar",
              "clamp_lo": "scalar", "clamp_hi": "scalar"}
    return trace(fixed_function(spec), inputs, out=spec.out, acc=spec.acc, c=spec.out)


def fixed_inputs(spec: EpilogueSpec, c_in=None, bias=None) -> dict:
    """The named inputs of :func:`fixed_graph`'s reference, from a spec and the verifier's operands."""
    return {"c": c_in, "bias": bias, "alpha": spec.alpha, "beta": spec.beta, "clamp_lo": spec.clamp[0],
            "clamp_hi": spec.clamp[1]}
