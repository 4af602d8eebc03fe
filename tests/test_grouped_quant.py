"""An MoE layer with quantized expert weights (docs/grouped.md): one launch dequantizes each expert's B with the
single GEMM's dequantization and the expert's own scales and zeros, on the CPU device; verified expert by expert
(ragged rows, empty experts); a kernel reading the wrong expert's scales must fail; ``Gemm.moe`` takes the
format's arrays stacked per expert.  Five device builds, the smallest quantized tile."""

import re
from pathlib import Path

import numpy as np
import pytest

import xegemm
from conftest import break_kernel
from xegemm.api.errors import ShapeMismatchError
from xegemm.config import config_from_text
from xegemm.evaluate import plan_variants
from xegemm.jobs.pipeline import run_variant
from xegemm.quant import compute_type, dequantize, operand_spec, random_quantized

MOE = """\
problem: {m: 61, n: 64, k: 96}
moe: {experts: 5, rows: [0, 27, 1, 0, 33]}
types: {a: f16, b: %s, c: f16}
quant: %s
tile: {workgroup: [16, 64, 32], subgroups: [1, 2], walk: %s}
profile: {warmup: 1, repeats: 1}   # run_variant times it too: once is enough here
"""
CASES = {   # GPTQ: int32 words of 8 K, read as 32-bit rows of K / 8; plain u4 column-major with zeros
    "gptq": ("u4", "{format: gptq, group: 32, scale: f16, zero: u4}", "static", {}),
    "plain u4 col": ("u4", "{format: plain, group: 32, scale: f16, zero: u4}", "dynamic", {"layout.b": "col"}),
    # gpt-oss's experts: MXFP4 (e2m1 values, an e8m0 scale per 32 K)
    "mxfp4": ("e2m1", "{format: mx, group: 32, scale: e8m0}", "static", {}),
}
SHIPPED = Path(__file__).resolve().parents[1] / "configs" / "moe_w4a16.yaml"


def evaluated(session, name: str):
    """The case's variant run and verified on the CPU device (conftest's module ``session``)."""
    weight, quant, walk, overrides = CASES[name]
    (pv,) = plan_variants(config_from_text(MOE % (weight, quant, walk)).with_overrides(overrides))
    assert pv.plan is not None, pv.reason
    return run_variant(pv, session)


@pytest.mark.device
@pytest.mark.parametrize("name", CASES)
def test_quantized_experts_verify_in_one_launch(session, name):
    result = evaluated(session, name)
    assert result.status == "ok", result.reason
    assert re.search(r"_grouped(static|dynamic)_q", result.name)


@pytest.mark.device
def test_a_kernel_reading_the_next_experts_scales_fails_and_names_the_expert(session, monkeypatch):
    break_kernel(monkeypatch, "S_all + group * expert_stride_s", "S_all + (group + 1) % groups * expert_stride_s")
    result = evaluated(session, "gptq")
    assert result.status == "failed_verify", (result.status, result.reason)
    assert re.match(r"group [14] \(\d+x64x96\) failed", result.reason), result.reason


def test_quantized_weights_are_an_moe_layers_only():
    text = MOE % CASES["gptq"][:3]
    (pv,) = plan_variants(config_from_text(text.replace("moe: {experts: 5, rows: [0, 27, 1, 0, 33]}\n", "")
                                           .replace("{m: 61, n: 64, k: 96}", "{groups: [8x64x96, 3x64x64]}")))
    assert pv.plan is None and "quantized B is not built" in pv.reason


@pytest.mark.device
def test_moe_call_takes_the_formats_arrays_stacked_per_expert(sycl_device):
    gemm = xegemm.load(str(SHIPPED), device=sycl_device)
    config = gemm.candidates[0].config
    spec = operand_spec(config, "b")
    rng = np.random.default_rng(3)
    rows, k, n = [5, 0, 11, 3], 64, 128
    experts = [random_quantized(spec, k, n, rng) for _ in rows]
    b = np.stack([q.arrays["qweight"] for q in experts])
    scales = np.stack([q.arrays["scales"] for q in experts])
    zeros = np.stack([q.arrays["zeros"] for q in experts])
    a = rng.standard_normal((sum(rows), k)).astype(np.float16)
    d = gemm.moe(a, b, rows, scales=scales, zeros=zeros)
    begin = np.cumsum([0] + rows)
    want = np.concatenate([a[begin[e]:begin[e + 1]].astype(np.float64)
                           @ dequantize(q, compute_type(config.types)).astype(np.float64) for e, q in enumerate(experts)])
    assert d.shape == (sum(rows), n) and d.dtype == np.float16
    # f16 output (2^-11 relative) over an f32 sum of f16 products: far below one expert's scales for another's
    np.testing.assert_allclose(d.astype(np.float64), want, rtol=0, atol=2e-3 * np.abs(want).max())
    with pytest.raises(ShapeMismatchError, match="scales has 3 batches, b has 4"):
        gemm.moe(a, b, rows, scales=scales[:3], zeros=zeros)
    with pytest.raises(ShapeMismatchError, match="pass its scales"):
        gemm.moe(a, b, rows, zeros=zeros)
