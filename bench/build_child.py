"""Build every variant of a benchmark run in this process and print one JSON line per variant: how long
``build_program`` took and whether the program came from the persistent cache.

Run by :mod:`bench.test_build_bench` as ``python -m bench.build_child CONFIG... [--shapes SPEC]`` in a fresh
process, with ``XEGEMM_CACHE_DIR`` (and for the AVX2 code path ``CL_CONFIG_CPU_TARGET_ARCH``) set by the
parent.  A small program is built first, so that the runtime's one-time start-up (about 0.1 s) is not
charged to the first variant.
"""

from __future__ import annotations

import argparse
import json
import time

from xegemm.evaluate import render_variant
from xegemm.evaluate.device import device_build_options
from xegemm.lowering import choose_lowering
from xegemm.runtime import describe, select_sycl_device
from xegemm.runtime.program import build_program, make_queue

from bench.selection import cases

WARM_UP = "__kernel void warm_up(__global int *x) { x[get_global_id(0)] = 1; }"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("configs", nargs="+")
    parser.add_argument("--shapes", default=None)
    args = parser.parse_args()
    device = select_sycl_device()
    lowering = choose_lowering(describe(device))
    queue = make_queue(device)
    build_program(queue, WARM_UP, "")
    for case in cases(args.configs, args.shapes):
        for pv in case.variants:
            if pv.plan is None:
                continue
            source = render_variant(pv, lowering)
            t0 = time.perf_counter()
            program = build_program(queue, source, device_build_options(lowering, pv.config))
            seconds = time.perf_counter() - t0
            print(json.dumps({"config": case.config.name, "shape": case.shape.label, "variant": pv.name,
                              "seconds": seconds, "from_cache": bool(getattr(program, "from_cache", False))}),
                  flush=True)


if __name__ == "__main__":
    main()
