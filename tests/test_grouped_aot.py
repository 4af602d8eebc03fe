"""The persistent walk's C built ahead of time for pvc: both walks compile without spills, and the kernel
around a one-store body stays small (the scheduler's instructions; docs/grouped.md records the counts)."""

import pytest

from xegemm.aot.build import compile_kernel
from xegemm.config import config_from_text
from xegemm.evaluate import plan_variants
from xegemm.grouped import schedule
from xegemm.lowering import named_lowering
from xegemm.kernel.render import render_kernel

pytestmark = pytest.mark.ocloc

BODY = ["if (get_local_id(0) == 0) d[t] = group * 65536 + tile_m * 256 + tile_n + (int)(a_offset + ldb);"]


def walk_kernel(mode: str) -> str:
    return ("__attribute__((intel_reqd_sub_group_size(16)))\n"
            "__kernel void walk(__global const long* table, const int groups, const int total_tiles,\n"
            "                   __global int* tile_counter, __global int* d) {\n"
            + "\n".join("  " + line for line in schedule.walk_lines(mode, BODY)) + "\n}\n")


@pytest.mark.parametrize("mode", schedule.MODES)
def test_the_walk_builds_for_pvc_without_spills(mode, tmp_path):
    build = compile_kernel(walk_kernel(mode), "pvc", grf=256, workdir=tmp_path)
    assert build.ok, build.log
    assert build.stats.spill_bytes == 0
    assert build.stats.instructions < 400          # measured: 134 static, 173 dynamic (docs/grouped.md)


def test_the_grouped_gemm_kernel_builds_for_pvc_without_spills(tmp_path):
    """The real grouped kernel (the dynamic walk around the 256 x 256 x 32 reference tile's main loop and
    epilogue): no spills, and the tile body's DPAS and block loads are all there."""
    (pv,) = plan_variants(config_from_text("problem: {groups: [512x256x256, 0x256x256, 100x512x128]}\n"
                                           "tile: {walk: dynamic}\n"))
    lowering = named_lowering("native", "igc-1.0.12504")     # the capabilities of the ocloc CI installs
    build = compile_kernel(render_kernel(pv.plan, lowering), "pvc", grf=256, workdir=tmp_path)
    assert build.ok, build.log
    assert build.stats.spill_bytes == 0
    assert build.stats.dpas == pv.plan.dpas_per_kstep      # measured: 6693 instructions, 32 DPAS (docs/grouped.md)


def test_the_quantized_moe_kernel_builds_for_pvc_without_spills(tmp_path):
    """The shipped u4 MoE layer (plain u4 with zeros, dequantized into the f16 DPAS per expert): no spills, and
    the tile body's DPAS are all there (measured: 3492 instructions static, 3597 dynamic; the single GEMM's 3379)."""
    from pathlib import Path

    from xegemm.config import load_config
    pv = plan_variants(load_config(Path(__file__).resolve().parents[1] / "configs" / "moe_w4a16.yaml"))[0]
    build = compile_kernel(render_kernel(pv.plan, named_lowering("native", "igc-1.0.12504")), "pvc", grf=256,
                           workdir=tmp_path)
    assert build.ok, build.log
    assert build.stats.spill_bytes == 0
    assert build.stats.dpas == pv.plan.dpas_per_kstep
