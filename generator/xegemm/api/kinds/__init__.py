"""The call kinds of a Gemm, one class each (xegemm.api.kinds.base.CallKind), and the rule that selects them.

:data:`KINDS` lists them in the order they are asked: for each entry of the Gemm (``"call"``, ``"grouped"``,
``"moe"``) the first kind that serves the entry and :meth:`~xegemm.api.kinds.base.CallKind.serves` the Gemm runs
it.  A new kind of call (or a lowering's own way of launching one) is a class here, not a method of the Gemm.
"""

from __future__ import annotations

from xegemm.api.kinds.base import CallKind, LastKernel, Programs, scalars
from xegemm.api.kinds.grouped import GroupedCall
from xegemm.api.kinds.plain import PlainCall
from xegemm.api.kinds.quantized import QuantizedCall
from xegemm.api.kinds.traced import TracedCall

KINDS: tuple[type[CallKind], ...] = (TracedCall, QuantizedCall, PlainCall, GroupedCall)
ENTRIES = ("call", "grouped", "moe")


def select_kinds(gemm, kinds=KINDS) -> dict[str, CallKind]:
    """{entry: the call kind that runs it for ``gemm``}: one instance per kind, the first serving kind per entry."""
    made: dict[type, CallKind] = {}
    chosen = {}
    for entry in ENTRIES:
        kind = next(k for k in kinds if entry in k.entries and k.serves(gemm))
        chosen[entry] = made.get(kind) or made.setdefault(kind, kind(gemm))
    return chosen


__all__ = ["CallKind", "ENTRIES", "GroupedCall", "KINDS", "LastKernel", "PlainCall", "Programs", "QuantizedCall",
           "TracedCall", "scalars", "select_kinds"]
