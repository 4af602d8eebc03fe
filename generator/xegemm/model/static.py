"""The static performance model: a plan's predicted efficiency, from the plan alone (nothing is built or run).

It multiplies six factors, each in (0, 1]:

- intensity: a sub-group's flops per byte it loads per k-step, ``2 sgM sgN BK / (sgM BK a_bytes + BK sgN
  b_bytes)``, against a ridge point (``RIDGE_FLOPS_PER_BYTE``): more work per loaded byte until the loads hide;
- occupancy: threads an Xe core keeps resident in the plan's GRF mode (8 in 128-GRF mode, 4 in 256-GRF
  mode), and the register estimate's headroom (a plan near its budget is more likely to spill);
- waves: how evenly the work-groups fill the device's compute units (a last partial wave idles the rest;
  split K, ``tile.split_k``: S work-groups per C tile, one per K slice; stream-K, ``tile.stream_k``: its G
  work-groups per batch of about I / G MAC-loop iterations each);
- edges: the share of the padded tiles (M, N and K rounded up to the tile) that is real work;
- prefetch: a small bonus for k-tiles prefetched ahead (latency hidden), none beyond two;
- locality: the problem's flops per byte fetched from beyond the cache (:func:`memory_traffic`: the
  work-groups in their swizzled order, ``tile.swizzle``, against the machine's cache) against a memory ridge
  point (``MEMORY_RIDGE_FLOPS_PER_BYTE``): a swizzle whose group keeps its A panels and the B panel in cache
  fetches B once per group of tile rows instead of once per tile row.

What it does not know: the cache's associativity and the hardware prefetchers, which work-groups run at the
same time on different compute units, the compiler's scheduling, instruction latencies, and anything about the
CPU runtime's vectoriser (so ``tile.register_block`` choices score alike: which block keeps its
accumulators in registers depends on how the runtime unrolls the block's k loop, docs/kernels.md "Register blocks").
``model`` uses it to evaluate the best-predicted points first.

:func:`predict_tflops` is the same model calibrated into a speed: the product's DPAS peak
(:data:`xegemm.library.targets.PARTS`, published figures) times a compute efficiency (the factors above, with
waves over the product's Xe-cores), against the time the plan's bytes (:func:`memory_traffic` with the
product's L2) take at its published DRAM bandwidth, plus a fixed launch time.  Its free constants live in
:mod:`xegemm.model.calibration` with their provenance; ``--target`` (no device) reports it, gated by the machine
code, as predicted TFLOP/s.  How it compares with published hardware figures: docs/benchmarks.md, "The static
model against published numbers" (``python -m bench.model_check``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xegemm.plan import stream_k
from xegemm.library.dtypes import dtype
from xegemm.plan.planner import Plan, k_slice
from xegemm.library.targets import HW_THREADS, Part, get_part, get_target
from xegemm.model.calibration import CALIBRATED, Constants

RIDGE_FLOPS_PER_BYTE = 32.0
MEMORY_RIDGE_FLOPS_PER_BYTE = 32.0
THREADS_PER_CORE = HW_THREADS


@dataclass(frozen=True)
class Machine:
    """What the model knows of the machine: compute units, and the bytes of the cache that consecutive
    work-groups share (a GPU's L2; on the CPU device the host's last-level cache, shared by the cores its
    work-groups run on)."""

    compute_units: int
    cache_bytes: int

    @classmethod
    def of_target(cls, name: str) -> "Machine":
        """An ahead-of-time target (no device): one compute unit (waves are not modelled), its L2."""
        return cls(1, get_target(name).l2_bytes)

    @classmethod
    def of_device(cls, info) -> "Machine":
        """A device (:class:`xegemm.runtime.DeviceInfo`): its compute units and the cache its work-groups share
        (``DeviceInfo.shared_cache_bytes``: on the CPU device the host's last-level cache, not one core's L2)."""
        return cls(info.compute_units, info.shared_cache_bytes)


@dataclass(frozen=True)
class Prediction:
    """The factors and their product (``score``, higher is better)."""

    intensity: float
    occupancy: float
    waves: float
    edges: float
    prefetch: float
    locality: float = 1.0

    @property
    def score(self) -> float:
        return self.intensity * self.occupancy * self.waves * self.edges * self.prefetch * self.locality

    def as_dict(self) -> dict:
        return {"intensity": round(self.intensity, 4), "occupancy": round(self.occupancy, 4),
                "waves": round(self.waves, 4), "edges": round(self.edges, 4), "prefetch": round(self.prefetch, 4),
                "locality": round(self.locality, 4), "score": round(self.score, 6)}


def memory_traffic(plan: Plan, cache_bytes: int) -> float:
    """Bytes a problem fetches from beyond a cache of ``cache_bytes``, walking the work-groups in their swizzled
    order (xegemm.plan.swizzle; split-K slices and batches one after another, as work-group z enumerates them).

    Per group of G tile rows (the last one may have fewer), walked column-major: the group's A panels
    (BM x K each) are fetched once if they fit in the cache beside one B panel (K x BN), else once per tile;
    every column's B panel is fetched once per group (G consecutive work-groups share it) unless the whole of
    B fits beside the group's A panels, in which case only the first group fetches it.  G = 1 is the plain
    row-by-row order: B is fetched again for every tile row unless all of it stays in the cache.  C (or the
    split-K workspace, written and read back) is moved once; stream-K adds its pieces of cut tiles, written and
    read back (its work-groups cover each tile's k-tiles once, as unsplit)."""
    config = plan.config
    p, (bm, bn, _) = config.problem, config.tile.workgroup
    kk = k_slice(config) if plan.split_k > 1 else p.k
    a_panel = bm * kk * dtype(config.types.a).bits / 8      # the operands as stored (a quantized B: its codes)
    b_panel = kk * bn * dtype(config.types.b).bits / 8
    ny, nx = math.ceil(p.m / bm), math.ceil(p.n / bn)
    group = min(config.tile.swizzle, ny)
    per_slice = 0.0
    for first in range(0, ny, group):
        rows = min(group, ny - first)
        per_slice += rows * a_panel if rows * a_panel + b_panel <= cache_bytes else rows * nx * a_panel
        if first == 0 or nx * b_panel + rows * a_panel > cache_bytes:
            per_slice += nx * b_panel
    acc_bytes, c_bytes = plan.mma.c_type.bits / 8, dtype(config.types.c).bits / 8
    out = p.m * p.n * (c_bytes + (2 * plan.split_k * acc_bytes if plan.split_k > 1 else 0))
    if plan.stream_k:
        cut = sum(not piece["whole"] for pieces in stream_k.schedule(p.m, p.n, p.k, config.tile.workgroup,
                                                                      plan.stream_k) for piece in pieces)
        out += 2 * cut * bm * bn * acc_bytes
    return p.batch * (plan.split_k * per_slice + out)


def predict(plan: Plan, machine: Machine) -> Prediction:
    """Predict a plan's efficiency on ``machine``."""
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
    headroom = 1.0 - plan.registers["total_grf"] / plan.registers["budget_grf"]    # < 0: "may spill"
    occupancy = (threads / max(THREADS_PER_CORE.values())) * (0.75 + 0.25 * max(-1.0, min(1.0, headroom * 4)))
    # split K's slices are work-groups of their own (grid z): a decode shape's few tiles fill more slots
    workgroups = math.ceil(p.m / bm) * math.ceil(p.n / bn) * p.batch * max(1, plan.split_k)
    slots = max(1, machine.compute_units)
    waves = workgroups / (math.ceil(workgroups / slots) * slots)
    if plan.stream_k:       # work-groups of ceil(I / G) iterations: the time of that many, per wave
        iters, workgroups = stream_k.iterations(p.m, p.n, p.k, config.tile.workgroup), plan.stream_k * p.batch
        waves = iters * p.batch / (math.ceil(workgroups / slots) * slots * math.ceil(iters / plan.stream_k))
    edges = (p.m * p.n * p.k) / (math.ceil(p.m / bm) * bm * math.ceil(p.n / bn) * bn * math.ceil(p.k / bk) * bk)
    prefetch = 1.0 + 0.05 * min(config.pipeline.prefetch, 2)
    locality = 1.0                  # a cache of unknown size: not modelled
    if machine.cache_bytes > 0:
        mem_ai = 2.0 * p.m * p.n * p.k * p.batch / memory_traffic(plan, machine.cache_bytes)
        locality = mem_ai / (mem_ai + MEMORY_RIDGE_FLOPS_PER_BYTE)
    return Prediction(intensity, occupancy, waves, edges, prefetch / 1.1, locality)


VECTOR_ENGINES_PER_CORE = 8     # Xe-HPC and Xe2 Xe-cores: 8 vector engines (docs/atoms.md §3.1)


def _slots(plan: Plan, part: Part) -> int:
    """Work-groups the product runs at once: per Xe-core, its hardware threads in the plan's GRF mode over the
    work-group's sub-groups (at least one)."""
    threads = VECTOR_ENGINES_PER_CORE * THREADS_PER_CORE.get(plan.config.target.grf, 4)
    sub_groups = plan.config.tile.subgroups[0] * plan.config.tile.subgroups[1]
    return part.xe_cores * max(1, threads // sub_groups)


@dataclass(frozen=True)
class Features:
    """What :func:`predict_tflops` takes from a plan on a product; none of it depends on the calibration."""

    part: str
    flops: float                 # useful flops (2 M N K per batch or expert)
    bytes: float                 # bytes fetched from beyond the L2 (memory_traffic; per expert for an MoE layer)
    peak_tflops: float           # the product's DPAS peak for the plan's DPAS type and repeat count
    loads_per_flop: float        # a sub-group's flops per loaded byte per k-step (the intensity factor's input)
    occupancy: float             # the model's occupancy factor, in (0, 1]
    waves: float                 # the work-groups over the product's slots
    edges: float                 # real work over padded work
    prefetch: float
    dequant: str | None          # None: B is a DPAS type; "f16" / "bf16": converted in registers into that DPAS
    launches: int = 1            # kernel launches per call (split K's reduction is a second one)


def features(plan: Plan, part: Part | str) -> Features:
    """The constant-independent inputs of :func:`predict_tflops` for ``plan`` on ``part``."""
    part = get_part(part) if isinstance(part, str) else part
    config = plan.config
    p, (bm, bn, bk) = config.problem, config.tile.workgroup
    base = predict(plan, Machine(_slots(plan, part), part.l2_bytes))
    sgm, sgn = plan.subgroup_tile
    a_bytes, b_bytes = plan.mma.a_type.bits / 8, plan.mma.b_type.bits / 8
    ai = 2.0 * sgm * sgn * bk / (sgm * bk * a_bytes + bk * sgn * b_bytes)
    rows = config.moe.rows or ((p.m // config.moe.experts,) * config.moe.experts if config.moe.experts else ())
    if rows:        # an MoE layer: every expert's tiles in one persistent launch; each expert's own B
        flops = sum(2.0 * r * p.n * p.k for r in rows)
        tiles = sum(math.ceil(r / bm) * math.ceil(p.n / bn) for r in rows)
        padded = sum(math.ceil(r / bm) * bm for r in rows) * math.ceil(p.n / bn) * bn * math.ceil(p.k / bk) * bk
        edges = sum(r for r in rows) * p.n * p.k / padded
        slots = _slots(plan, part)
        waves = tiles / (math.ceil(tiles / slots) * slots) if tiles else 1.0
        per_row = dtype(config.types.a).bits / 8 * p.k + dtype(config.types.c).bits / 8 * p.n
        b_bytes_each = p.k * p.n * dtype(config.types.b).bits / 8
        # B of an expert is fetched once per tile row of it unless it stays in the L2 beside the A panels
        moved = sum(r * per_row + (b_bytes_each if b_bytes_each <= part.l2_bytes else math.ceil(r / bm) * b_bytes_each)
                    for r in rows if r)
    else:
        flops = 2.0 * p.m * p.n * p.k * p.batch
        edges, waves = base.edges, base.waves
        moved = memory_traffic(plan, part.l2_bytes)
    quantized = dtype(config.types.b).name != plan.mma.b_type.name
    # a DPAS of repeat count M < 8 (a GEMV-shaped tile's 1-row atom) is taken to do M/8 of an 8-row DPAS's work
    # in the same time: an assumption (no public figure of DPAS throughput per repeat count was found) that
    # keeps a 1-row tile from looking as fast as an 8-row one wherever M > 1
    peak = part.bf16_tflops * plan.mma.k / 16 * min(plan.mma.m, 8) / 8
    return Features(part.name, flops, moved, peak, ai, base.occupancy,
                    waves, edges, base.prefetch, (plan.mma.a_type.name if quantized else None),
                    1 + int(bool(plan.reduces)))


@dataclass(frozen=True)
class Throughput:
    """Predicted TFLOP/s and how the model got there."""

    tflops: float
    peak_tflops: float
    compute_tflops: float        # the rate if memory were free
    memory_tflops: float         # the rate if compute were free
    efficiency: float            # compute_tflops / peak_tflops

    @property
    def bound(self) -> str:
        return "memory" if self.memory_tflops < self.compute_tflops else "compute"

    def as_dict(self) -> dict:
        return {"tflops": round(self.tflops, 3), "peak_tflops": round(self.peak_tflops, 2),
                "compute_tflops": round(self.compute_tflops, 3), "memory_tflops": round(self.memory_tflops, 3),
                "efficiency": round(self.efficiency, 4), "bound": self.bound}


def throughput(f: Features, c: Constants = CALIBRATED) -> Throughput:
    """Predicted TFLOP/s from :func:`features` and the calibrated constants (:mod:`xegemm.model.calibration`).

    compute efficiency = efficiency x intensity x occupancy^occupancy_exponent x waves x edges x prefetch
    (x dequant for a B converted in registers), each in (0, 1]; memory time = bytes / (bandwidth x the
    product's DRAM bandwidth); time = (t_compute^p + t_memory^p)^(1/p) + launch_us per launch.  Never above the
    peak."""
    part = get_part(f.part)
    intensity = f.loads_per_flop / (f.loads_per_flop + c.ridge_flops_per_byte)
    convert = {None: 1.0, "bf16": c.dequant_bf16}.get(f.dequant, c.dequant)
    eff = min(1.0, c.efficiency * intensity * f.occupancy ** c.occupancy_exponent * f.waves * f.edges
              * f.prefetch * convert)
    t_compute = f.flops / (f.peak_tflops * 1e12 * eff)
    t_memory = f.bytes / (part.memory_gbs * 1e9 * c.bandwidth)
    t = (t_compute ** c.overlap + t_memory ** c.overlap) ** (1.0 / c.overlap) + c.launch_us * 1e-6 * f.launches
    return Throughput(f.flops / t / 1e12, f.peak_tflops, f.flops / t_compute / 1e12, f.flops / t_memory / 1e12,
                      eff)


def predict_tflops(plan: Plan, part: Part | str, constants: Constants = CALIBRATED) -> Throughput:
    """Predicted TFLOP/s of ``plan`` on ``part`` (a :data:`xegemm.library.targets.PARTS` name or entry)."""
    return throughput(features(plan, part), constants)
