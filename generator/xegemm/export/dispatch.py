"""The exported dispatch table: the candidates of the call API's device-less ranking (:data:`xegemm.api.dispatch.RULES`:
the tuned winner of the shape, the fastest variant measured at the shape, the first variant legal, in the sweep's
order) as C data, and the shape rules that make a candidate legal at a call's M, N, K.

The C function ``xegemm_dispatch`` (templates/export/xegemm_kernels.h.j2) walks this table with the same rules in
the same order; ``tests/test_export.py`` checks that it and :meth:`xegemm.api.dispatch.Dispatcher.choose` pick the
same kernel for several shapes.  The rules a candidate must meet at a shape are the planner's shape-dependent ones
(:func:`xegemm.plan.planner.plan`): split K at most K's k-tiles, stream-K at most a batch's MAC-loop iterations.
A quantized operand adds the group-against-K rules of :mod:`xegemm.quant.rules`, which the C table does not
carry: quantized kernels are left out of the dispatch (their launchers take the scales too), as are traced
epilogues' kernels (their extra operands have no place in a shape-only call).
"""

from __future__ import annotations

from dataclasses import dataclass

from xegemm.api.dispatch import Candidate, candidates
from xegemm.config import Config, Variant
from xegemm.evaluate import plan_variant


@dataclass(frozen=True)
class DispatchEntry:
    """One candidate as the C table holds it: the kernel it runs (an index into xegemm_kernels) and its facts."""

    kernel: int
    candidate: Candidate

    def c_row(self) -> dict:
        c = self.candidate.config
        bm, bn, bk = c.tile.workgroup
        return {"kernel": self.kernel, "tuned": int(self.candidate.tuned),
                "gflops": -1.0 if self.candidate.gflops is None else float(self.candidate.gflops),
                "shape": (c.problem.m, c.problem.n, c.problem.k, c.problem.batch),
                "type_a": c.types.a, "type_b": c.types.b, "layout_a": c.layout.a, "layout_b": c.layout.b,
                "bm": bm, "bn": bn, "bk": bk, "split_k": c.tile.split_k, "stream_k": c.tile.stream_k,
                "index": self.candidate.index}


def dispatch_entries(config: Config, best: dict, lowering, kernels: dict[str, int], dispatchable: set[str]
                     ) -> tuple[list[DispatchEntry], list[str]]:
    """The table of ``config``'s candidates (with ``best``'s measurements) whose kernel at their own problem is
    one of ``kernels`` (plan name -> index) and in ``dispatchable``; and why the others are left out."""
    entries, left_out = [], []
    for cand in candidates(config, best):
        pv = plan_variant(Variant(cand.config), lowering)
        if pv.plan is None:
            left_out.append(f"variant {cand.index}: {pv.reason}")
        elif pv.plan.name not in kernels:
            left_out.append(f"variant {cand.index}: its kernel was not exported")
        elif pv.plan.name not in dispatchable:
            left_out.append(f"variant {cand.index}: a quantized or traced-epilogue kernel (its launcher takes "
                            "more operands than a shape-only call has)")
        else:
            entries.append(DispatchEntry(kernels[pv.plan.name], cand))
    return entries, left_out
