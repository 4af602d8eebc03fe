"""Epilogues written as Python functions: a function of named tensors (``acc``, ``c``, row and column vectors,
auxiliary matrices, scalars) is traced into a graph (:mod:`.tracer`, :mod:`.graph`) of the ops in
:mod:`.registry` (the user's vocabulary is :mod:`.ops`, ``xegemm.ops``), evaluated with numpy in float64 with a
tolerance per op (:mod:`.reference`), and printed as OpenCL C for the epilogue stage (:mod:`.emit`).  The config
form is read by :mod:`.config`; today's fixed epilogue is a traced function too (:mod:`.fixed`).  See
docs/epilogues.md.
"""

from __future__ import annotations

import types

from xegemm import epilogue as _epilogue_module
from xegemm.epilogue_graph import ops
from xegemm.epilogue_graph.graph import Graph, Input, Node, Output
from xegemm.epilogue_graph.tracer import EpilogueFunction, epilogue, input_kind, trace

__all__ = [
    "EpilogueFunction",
    "Graph",
    "Input",
    "Node",
    "Output",
    "epilogue",
    "input_kind",
    "make_epilogue_callable",
    "ops",
    "trace",
]


class _CallableEpilogueModule(types.ModuleType):
    """``xegemm.epilogue`` stays the module of the fixed epilogue and, called, marks a function as an epilogue
    (``xegemm.epilogue(fn)``, ``@xegemm.epilogue``): the spelling of docs/epilogues.md without renaming the
    module."""

    def __call__(self, fn=None, **kwargs):
        return epilogue(fn, **kwargs)


def make_epilogue_callable() -> None:
    """Make ``xegemm.epilogue`` callable (xegemm/__init__.py calls this once)."""
    _epilogue_module.__class__ = _CallableEpilogueModule
