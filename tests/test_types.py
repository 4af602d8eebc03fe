"""Data types end to end (issue #13 item 4): every DPAS type combination, row-major A, B and C with C type =
accumulator type, at sub-group size 16 (pvc, bmg: 2D block copies) and 8 (dg2: 1D block copies).

- planned and verified on the CPU device in the portable lowering on a ragged batched problem, and the
  verifier rejects a corrupted C of each combination;
- combinations a target lacks are rejected with the rule and the target named;
- built ahead of time for pvc and dg2 with ocloc: the machine code issues exactly the plan's dpas and block
  loads per k-step, and nothing spills.
"""

import dataclasses

import numpy as np
import pytest

from xegemm.aot.capabilities import DEBIAN_CAPABILITIES
from xegemm.aot.call_check import check_calls
from xegemm.config import config_from_text
from xegemm.config.schema import Problem
from xegemm.library.dtypes import dtype
from xegemm.evaluate import Evaluation, plan_variants
from xegemm.evaluate.device import DeviceBuilder, VerifyObserver
from xegemm.lowering import Lowering
from xegemm.lowering.native import native_capabilities
from xegemm.plan.planner import PlanRejected, plan
from xegemm.kernel.render import render_kernel
from xegemm.runtime.program import from_device
from xegemm.verify.dense import check

INT8 = [(a, b, "s32") for a in ("s8", "u8") for b in ("s8", "u8")]
INT4 = [(a, b, "s32") for a in ("s4", "u4") for b in ("s4", "u4")]
SG16_TYPES = [("bf16", "bf16", "f32"), ("f16", "f16", "f32"), ("bf16", "bf16", "bf16"), ("f16", "f16", "f16"),
              ("tf32", "tf32", "f32"), *INT8, *INT4]
SG8_TYPES = [("bf16", "bf16", "f32"), ("f16", "f16", "f32"), *INT8, *INT4]


def _text(types, sg: int, layout_b: str = "row") -> str:
    """A small one-variant config: two DPAS k-steps per k-tile, two sub-groups (at sub-group size 8 each 16
    columns wide for 4-bit B: a 1D block message's row is at least 8 lanes x 8 bits)."""
    a, b, acc = types
    bk = 2 * 256 // dtype(a).bits                  # DPAS K = 256 / input bits
    wg = "[32, 32" if sg == 16 else "[16, 32" if dtype(b).bits == 4 else "[16, 16"
    return (f"problem: {{m: 64, n: 64, k: {4 * bk}}}\ntypes: {{a: {a}, b: {b}, acc: {acc}, c: {acc}}}\n"
            f"layout: {{a: row, b: {layout_b}, c: row}}\n"
            f"tile: {{workgroup: {wg}, {bk}], subgroups: [1, 2], subgroup_size: {sg}}}\n")


def _ragged(config):
    """The config on a problem that is not a multiple of its tile in M, N or K, with batch 2."""
    bm, bn, bk = config.tile.workgroup
    return dataclasses.replace(config, problem=Problem(m=bm + 27, n=bn + 21, k=2 * bk + 7, batch=2))


def _id(types, sg):
    return f"{'_'.join(types)}_sg{sg}"


SUPPORTED = [pytest.param(t, 16, id=_id(t, 16)) for t in SG16_TYPES] + \
            [pytest.param(t, 8, id=_id(t, 8)) for t in SG8_TYPES]


# ---- on the CPU device: verified, and the verifier can fail -----------------------------------------------


def _corrupt(config, c_raw: np.ndarray, ref) -> np.ndarray:
    """C with one element of batch 1 moved past the highest value the reference allows (integers: off by one)."""
    c = dtype(config.types.c)
    p = config.problem
    nbytes = p.batch * p.m * p.n * c.bits // 8
    values = c.decode(c_raw[:nbytes].view(f"<u{c.bits // 8}").astype(np.uint64)).reshape(p.batch, p.m, p.n)
    idx = (1, p.m - 1, p.n - 1)              # the last element: written by an edge tile
    if c.is_int:
        values[idx] += 1
    else:
        values[idx] = ref.high[idx] + 0.5 * max(1.0, abs(values[idx]))
    out = c_raw.copy()
    out[:nbytes] = np.ascontiguousarray(c.encode(values.ravel()).astype(f"<u{c.bits // 8}")).view(np.uint8)
    return out


@pytest.mark.device
@pytest.mark.parametrize("types, sg", SUPPORTED)
def test_portable_gemm_verifies_and_a_corrupted_result_does_not(types, sg, session):
    config = _ragged(config_from_text(_text(types, sg)))
    pv = next(iter(plan_variants(config)))
    assert pv.plan is not None, pv.reason
    assert (pv.plan.mma.n, pv.plan.uses_block1d) == (sg, sg == 8)
    evaluation = Evaluation(pv.name, "ok", "", {})
    # unoptimised: a fraction of the build time; tests/test_portable_staged.py builds these kernels optimised
    kernel = DeviceBuilder(session, Lowering("portable"), options="-cl-std=CL3.0 -cl-opt-disable").build(
        pv, render_kernel(pv.plan, Lowering("portable")), evaluation)
    assert kernel is not None, evaluation.reason
    VerifyObserver().built(pv, evaluation, kernel)
    assert evaluation.status == "ok", evaluation.reason
    assert evaluation.bad_elements == 0
    ref = kernel.buffers["reference"]
    c_raw = from_device(kernel.buffers["c"], np.uint8, kernel.buffers["poison"].shape)
    assert check(pv.config, c_raw, ref).ok
    verdict = check(pv.config, _corrupt(pv.config, c_raw, ref), ref)
    assert not verdict.ok and verdict.bad_elements == 1, verdict
    assert "(batch, row, col) = (1, " in verdict.reason


# ---- what a target lacks: rejected with the rule and the target ----------------------------------------

REJECTED = [
    (("tf32", "tf32", "f32"), 8, "row", r"N=8 with tf32: tf32 DPAS exists only at SIMD16 \(PVC, BMG, LNL, PTL\), not on DG2"),
    (("bf16", "bf16", "bf16"), 8, "row", r"N=8 with a bf16 accumulator: DG2 \(SIMD8\) DPAS has only float acc"),
    (("f16", "f16", "f16"), 8, "row", r"N=8 with a f16 accumulator: DG2 \(SIMD8\) DPAS has only float acc"),
    (("s8", "s4", "s32"), 16, "row", r"integer A and B must both be 8-bit or both 4-bit"),
]


@pytest.mark.parametrize("types, sg, layout_b, rule", REJECTED,
                         ids=[f"{_id(t, sg)}_{lay}" for t, sg, lay, _ in REJECTED])
def test_missing_combinations_are_rejected_with_the_rule(types, sg, layout_b, rule):
    with pytest.raises(PlanRejected, match=rule):
        plan(config_from_text(_text(types, sg, layout_b)))


def test_tf32_native_source_is_complete_for_a_2d_block_io_compiler():
    """Debian's IGC cannot issue tf32 A's 8-wide d32 reads (the AOT test below); a compiler with
    cl_intel_subgroup_2d_block_io gets the builtins, each call matching the documented prototypes."""
    p = plan(config_from_text(_text(("tf32", "tf32", "f32"), 16)))
    src = render_kernel(p, Lowering("native", native_capabilities("cl_intel_subgroup_2d_block_io")))
    assert "intel_sub_group_tf32_tf32_matrix_mad_k8(" in src and "intel_sub_group_2d_block_read_32b_" in src
    assert check_calls(src) == []


# ---- ahead of time (ocloc): the machine code issues the plan's messages ----------------------------------

def _sweep_config(tmp_path, name, sg, combos):
    types = ", ".join(f"{{a: {a}, b: {b}, acc: {acc}, c: {acc}}}" for a, b, acc in combos)
    text = (f"name: {name}\n" + _text(SG16_TYPES[0], sg).replace("k: 128", "k: 512")
            + "profile: {warmup: 1, repeats: 2}\n"
            + f"sweep:\n  types: [{types}]\n  tile.workgroup: [[{'32, 32' if sg == 16 else '16, 32'}, 64]]\n")
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


@pytest.mark.ocloc
@pytest.mark.parametrize("target, sg", [("pvc", 16), ("dg2", 8)])
def test_aot_builds_issue_the_predicted_dpas_and_block_loads(target, sg, tmp_path):
    from xegemm.jobs.pipeline import build_config

    every = SG16_TYPES if sg == 16 else SG8_TYPES + [("tf32", "tf32", "f32"), ("bf16", "bf16", "bf16")]
    result = build_config(_sweep_config(tmp_path, f"types_{target}", sg, every), target, out_dir=tmp_path / "out",
                          capabilities_name=DEBIAN_CAPABILITIES)
    by_types = {tuple(v["name"].split("_")[1:4]): v for v in result["variants"]}
    assert len(by_types) == len(every)
    built = 0
    for (a, b, acc), v in by_types.items():
        where = f"{target} {a}x{b}->{acc}: {v['reason']}"
        if a in ("s4", "u4") and sg == 16 and v["status"] == "rejected":
            # Debian's IGC lacks the 4-bit row loads; 64 row-major 4-bit columns of B are 32 B, under 64 B
            assert "cannot issue" in v["reason"] or "2D block surfaces must be >= 64 B" in v["reason"], where
        elif sg == 8 and (a == "tf32" or acc != "f32" and acc != "s32"):
            assert v["status"] == "rejected" and "DG2" in v["reason"], where
        elif a == "tf32":       # Debian's IGC has no 8-wide d32 2D read (docs/compilers.md "Compiler capabilities")
            assert v["status"] == "rejected" and "cannot issue XE_2D_TF32" in v["reason"], where
        else:
            built += 1
            assert v["status"] == "ok", where
            isa, want, got = v["isa"], v["predicted"], v["measured_messages"]
            assert isa["target"] == target and isa["spill_bytes"] == 0, where
            assert isa["dpas"] == want["dpas"] == v["plan"]["messages_per_kstep"]["dpas"] > 0, where
            assert isa["load_block2d"] == want["load_block2d"], where
            if sg == 16:
                assert want["load_block2d"] > 0, where
            else:
                assert want["load_block2d"] == 0 and got["load_block1d"] == want["load_block1d"] > 0, where
    assert built == (8 if sg == 16 else 10)
