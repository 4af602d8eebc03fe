"""The static performance model: a plan's predicted efficiency, from the plan alone (nothing is built or run).

It multiplies five factors, each in (0, 1]:

- intensity: a sub-group's flops per byte it loads per k-step, ``2 sgM sgN BK / (sgM BK a_bytes + BK sgN
  b_bytes)``, against a ridge point (``RIDGE_FLOPS_PER_BYTE``): more work per loaded byte until the loads hide;
- occupancy: threads an Xe core keeps resident in the plan's GRF mode (8 in 128-GRF mode, 4 in 256-GRF
  mode), and the register estimate's headroom (a plan near its budget is more likely to spill);
- waves: how evenly the work-groups fill the device's compute units (a last partial wave idles the rest);
- edges: the share of the padded tiles (M, N and K rounded up to the tile) that is real work;
- prefetch: a small bonus for k-tiles prefetched ahead (latency hidden), none beyond two.

What it does not know: caches and memory bandwidth, the compiler's scheduling, instruction latencies, and
anything about the CPU runtime's vectoriser.  ``model`` uses it to evaluate the best-predicted points first;
``--target`` (no device) uses it, gated by the machine code, as its score.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xegemm.plan import Plan

RIDGE_FLOPS_PER_BYTE = 32.0
THREADS_PER_CORE = {128: 8, 256: 4}


@dataclass(frozen=True)
class Prediction:
    """The factors and their product (``score``, higher is better)."""

    intensity: float
    occupancy: float
    waves: float
    edges: float
    prefetch: float

    @property
    def score(self) -> float:
        return self.intensity * self.occupancy * self.waves * self.edges * self.prefetch

    def as_dict(self) -> dict:
        return {"intensity": round(self.intensity, 4), "occupancy": round(self.occupancy, 4),
                "waves": round(self.waves, 4), "edges": round(self.edges, 4), "prefetch": round(self.prefetch, 4),
                "score": round(self.score, 6)}


def predict(plan: Plan, compute_units: int) -> Prediction:
    """Predict a plan's efficiency on a device with ``compute_units`` compute units."""
    config = plan.config
    p, (bm, bn, bk) = config.problem, config.tile.workgroup
    sgm, sgn = plan.subgroup_tile
    a_bytes, b_bytes = plan.mma.a_type.bits / 8, plan.mma.b_type.bits / 8
    flops = 2.0 * sgm * sgn * bk
    loaded = sgm * bk * a_bytes + bk * sgn * b_bytes
    ai = flops / loaded
    intensity = ai / (ai + RIDGE_FLOPS_PER_BYTE)
    grf = config.target.grf
    threads = THREADS_PER_CORE.get(grf, 4)
    headroom = 1.0 - plan.registers["total_grf"] / plan.registers["budget_grf"]
    occupancy = (threads / max(THREADS_PER_CORE.values())) * (0.75 + 0.25 * min(1.0, headroom * 4))
    workgroups = math.ceil(p.m / bm) * math.ceil(p.n / bn) * p.batch
    slots = max(1, compute_units)
    waves = workgroups / (math.ceil(workgroups / slots) * slots)
    edges = (p.m * p.n * p.k) / (math.ceil(p.m / bm) * bm * math.ceil(p.n / bn) * bn * math.ceil(p.k / bk) * bk)
    prefetch = 1.0 + 0.05 * min(config.pipeline.prefetch, 2)
    return Prediction(intensity, occupancy, waves, edges, prefetch / 1.1)
