"""The persistent scheduler's balance on MoE layers: how much longer the busiest work-group works than the mean.

``python -m bench.grouped_balance [--seed S] [--json FILE]``: for gpt-oss-20b-like MoE layers (32 experts,
about 8048 routed rows drawn from a skewed distribution with 10 empty experts; GEMM1 N = 5760, GEMM2 N = 2880,
K = 2880; xegemm.grouped.schedule) and their CPU-scaled versions, prints per grid size G the static walk's
balance (exactly the kernel's assignment) and the dynamic walk's (a model: each tile to the work-group free
first).  A model of work (MACs of whole tiles), not a timing: the measured launches come with the grouped
kernels (docs/grouped.md).
"""

from __future__ import annotations

import argparse

import numpy as np

from xegemm.files import write_json_atomic
from xegemm.grouped.problem import GroupedProblem
from xegemm.grouped.schedule import balance

# gpt-oss-20b prefill per layer, as sycl-tla's MoE example states it (docs/grouped.md)
EXPERTS, ROUTED_ROWS, EMPTY_EXPERTS, HIDDEN = 32, 8048, 10, 2880
LAYERS = {"gemm1": (5760, HIDDEN), "gemm2": (HIDDEN, HIDDEN)}
CPU_SCALE = 8            # the CPU versions: rows, N and K divided by this


def skewed_rows(tokens: int, experts: int, empty: int, seed: int, exponent: float = 1.0) -> list[int]:
    """Rows per expert summing to ``tokens``: ``empty`` experts get none, the others a Zipf(``exponent``) share
    in a random order (exponent 1 with 22 busy experts gives the busiest about a quarter of the rows, as the
    gpt-oss-20b layer's 1950 of 8048)."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, experts - empty + 1) ** exponent
    shares = np.zeros(experts)
    shares[rng.permutation(experts)[: experts - empty]] = weights / weights.sum()
    return [int(r) for r in rng.multinomial(tokens, shares)]


def layer(name: str, seed: int, scale: int = 1) -> GroupedProblem:
    n, k = LAYERS[name]
    return GroupedProblem.moe(skewed_rows(ROUTED_ROWS // scale, EXPERTS, EMPTY_EXPERTS, seed), n // scale,
                              k // scale)


# a grouped problem whose groups differ in K: there the static walk's deal by tile count and the dynamic
# walk's deal by work part ways (in an MoE layer every tile is the same work)
MIXED_K = GroupedProblem.of([(1024, 2880, 2880), (512, 2880, 360), (0, 2880, 2880), (2048, 2880, 720)] * 4)


def table(seed: int) -> list[dict]:
    rows = []
    for scale, workgroup, grids in ((1, (256, 128, 32), (20, 40, 64, 128)), (CPU_SCALE, (32, 64, 32), (2, 4, 8))):
        for problem in [*(layer(name, seed, scale) for name in LAYERS), *([MIXED_K] if scale == 1 else [])]:
            for g in grids:
                static, dynamic = balance(problem, workgroup, g, "static"), balance(problem, workgroup, g, "dynamic")
                rows.append({"problem": problem.label, "rows": [x.m for x in problem.groups],
                             "workgroup": list(workgroup[:2]), "G": g, "tiles": sum(static.tiles),
                             "static": round(static.ratio, 3), "dynamic": round(dynamic.ratio, 3)})
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    rows = table(args.seed)
    print(f"rows per expert ({rows[0]['problem']}): {rows[0]['rows']}")
    print(f"{'problem'[:28]:28} {'tile':>8} {'G':>4} {'tiles':>6} {'static':>7} {'dynamic':>8}   (busiest / mean work)")
    for r in rows:
        print(f"{r['problem'][:28]:28} {'x'.join(map(str, r['workgroup'])):>8} {r['G']:>4} {r['tiles']:>6} "
              f"{r['static']:>7.3f} {r['dynamic']:>8.3f}")
    if args.json:
        write_json_atomic(args.json, rows)


if __name__ == "__main__":
    main()
