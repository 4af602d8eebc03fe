"""Today's fixed epilogue, ``D = activation(alpha * acc + beta * C + bias)``, as a traced function: one graph
per :class:`xegemm.epilogue.EpilogueSpec`, so that the fixed epilogue and Python-function epilogues take one
code path.  Its inputs are named as the kernels name their arguments (``alpha``, ``beta``, ``bias``,
``clamp_lo``, ``clamp_hi``); the terms the spec leaves out (alpha = 1, beta = 0, no bias) are not traced,
as the kernels leave them out.
"""

from __future__ import annotations

from xegemm.epilogue import EpilogueSpec
from xegemm.epilogue_graph import ops
from xegemm.epilogue_graph.graph import Graph
from xegemm.epilogue_graph.tracer import trace

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
    fixed.__qualname__ = f"fixed{spec.name_suffix() or '_identity'}"
    return fixed


def fixed_graph(spec: EpilogueSpec) -> Graph:
    """The graph of a fixed epilogue."""
    inputs = {"bias": "row" if spec.bias == "none" else spec.bias, "alpha": "scalar", "beta": "scalar",
              "clamp_lo": "scalar", "clamp_hi": "scalar"}
    return trace(fixed_function(spec), inputs, out=spec.out, acc=spec.acc, c=spec.out)


def fixed_inputs(spec: EpilogueSpec, c_in=None, bias=None) -> dict:
    """The named inputs of :func:`fixed_graph`'s reference, from a spec and the verifier's operands."""
    return {"c": c_in, "bias": bias, "alpha": spec.alpha, "beta": spec.beta, "clamp_lo": spec.clamp[0],
            "clamp_hi": spec.clamp[1]}
