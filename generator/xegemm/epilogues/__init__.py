"""Epilogues written as Python functions: a function of named tensors (``acc``, ``c``, row and column vectors,
auxiliary matrices, scalars) is traced into a graph (:mod:`.tracer`, :mod:`.graph`) of the ops in
:mod:`.registry` (the user's vocabulary is :mod:`.ops`, ``xegemm.ops``), evaluated with numpy in float64 with a
tolerance per op (:mod:`.reference`), and printed as OpenCL C for the epilogue stage (:mod:`.emit`).  The config
form is read by :mod:`.config`; today's fixed epilogue is a traced function too (:mod:`.fixed`).  See
docs/epilogues.md.
"""

from __future__ import annotations

from xegemm.epilogues import ops
from xegemm.epilogues.graph import Graph, Input, Node, Output
from xegemm.epilogues.tracer import EpilogueFunction, epilogue, input_kind, trace

__all__ = [
    "EpilogueFunction",
    "Graph",
    "Input",
    "Node",
    "Output",
    "epilogue",
    "input_kind",
    "ops",
    "trace",
]
