"""Traced epilogues in the real GEMM kernel, run on the default device (the Intel OpenCL CPU runtime): each
documented example (docs/epilogues.md) is planned, rendered in the portable lowering, built, launched on a
ragged batched problem (M, N, K not multiples of the tile, batch 2) and verified against its numpy reference
in float64 with the tolerance of each op, D and every auxiliary output (xegemm.verify.dense); and broken kernels of
those graphs (an op dropped, a broadcast along the wrong axis, an auxiliary store lost) fail verification.
One kernel per case, to keep the suite cheap."""

from __future__ import annotations

import re

import epilogue_examples
import ml_dtypes
import numpy as np
import pytest

import xegemm
from xegemm import evaluate
from xegemm.config import config_from_text
from xegemm.evaluate import plan_variants
from xegemm.library.dtypes import dtype
from xegemm.epilogues.reference import mismatches, reference
from xegemm.errors import XegemmError
from xegemm.jobs.pipeline import run_variant



pytestmark = [pytest.mark.device, pytest.mark.usefixtures("code_allowed")]

SHAPE = """\
problem: {{m: 37, n: {n}, k: 40, batch: 2}}
types: {{a: bf16, b: bf16, acc: f32, c: {c}}}
tile: {{workgroup: [32, 32, 32], subgroups: [1, 2]}}
profile: {{warmup: 0, repeats: 1}}
epilogue: {epilogue}
"""

# name: (D's type, the epilogue section; functions of tests/epilogue_examples.py)
CASES = {
    "bias_gelu_pre": ("bf16", '{function: "epilogue_examples:bias_gelu", inputs: {bias: row}, outputs: {pre: f32}}'),
    "residual_bf16": ("bf16", '{function: "epilogue_examples:residual"}'),
    "gated_up": ("bf16", '{function: "epilogue_examples:gated", inputs: {up: {kind: matrix, type: bf16}}}'),
    "scale_clamp_s8": ("s8", '{function: "epilogue_examples:scaled_s8", inputs: {scale: row}}'),
    "activations": ("f32", '{function: "epilogue_examples:activations"}'),
    "row_stats": ("f32", '{function: "epilogue_examples:row_stats", inputs: {bias: col}}'),
}


def planned(name: str, n: int = 45, **replace):
    c, epilogue = CASES[name]
    for old, new in replace.items():
        epilogue = epilogue.replace(old, new)
    (pv,) = plan_variants(config_from_text(SHAPE.format(c=c, epilogue=epilogue, n=n)))
    assert pv.plan is not None, pv.reason
    return pv



@pytest.mark.parametrize("name", sorted(CASES))
def test_a_traced_epilogue_verifies_in_the_gemm_kernel(name, session):
    pv = planned(name)
    assert "_epi_" in pv.plan.name and pv.plan.graph.key in pv.plan.name
    result = run_variant(pv, session)
    assert result.status == "ok", (name, result.status, result.reason)


def _rendered_as(broken, monkeypatch):
    """Make the evaluator build ``broken``'s kernel (another graph, the same arguments) under the name of the plan
    it evaluates: verification then checks the broken kernel against the correct graph's reference."""
    original = evaluate.render_variant
    monkeypatch.setattr(evaluate, "render_variant", lambda pv, lowering: original(broken, lowering).replace(
        broken.plan.name, pv.plan.name))


# name: (the correct case, the broken one: a replacement in its epilogue section, the output that must fail);
# square (M = N = 37), so that a reduction over the wrong axis has as many values as the right one
BROKEN = {
    "gelu dropped": ("bias_gelu_pre", {"bias_gelu": "bias_gelu_dropped"}, "C"),
    "bias along the wrong axis": ("bias_gelu_pre", {"bias: row": "bias: col"}, "C"),
    "row sum over the wrong axis": ("row_stats", {"row_stats": "row_stats_wrong_axis"}, "output rowsum"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_graph_fails_verification_through_the_kernel(name, session, monkeypatch):
    correct, replace, output = BROKEN[name]
    _rendered_as(planned(correct, n=37, **replace), monkeypatch)
    result = run_variant(planned(correct, n=37), session)
    assert result.status == "failed_verify", (name, result.status, result.reason)
    assert result.reason.startswith("output") == (output != "C") and output.removeprefix("C") in result.reason
    assert result.time_ms is None


def test_an_auxiliary_output_never_stored_fails_verification(session, monkeypatch):
    original = evaluate.render_variant

    def without_aux_store(pv, lowering):     # the first tile's store of the pre-activation lost
        source, n = re.subn(r"\n\s*\w+\(out_pre, N \* 4, M, N \* 4,[^;]*;", "", original(pv, lowering), count=1)
        assert n == 1
        return source
    monkeypatch.setattr(evaluate, "render_variant", without_aux_store)
    result = run_variant(planned("bias_gelu_pre"), session)
    assert result.status == "failed_verify" and "output pre" in result.reason, (result.status, result.reason)


def test_the_call_api_takes_named_inputs_and_returns_every_output(sycl_device):
    """xegemm.load(cfg, epilogue=fn): bias passed by name (a row vector by its shape), D and the pre-activation
    returned, each within the graph's reference; the same kernel as the config's (the same source)."""
    cfg = config_from_text(SHAPE.format(c="bf16", epilogue="{}", n=45))
    fn = xegemm.epilogue(epilogue_examples.bias_gelu, outputs={"pre": "f32"})
    gemm = xegemm.load(cfg, device=sycl_device, epilogue=fn)
    rng = np.random.default_rng(3)
    a, b = (dtype("bf16").round(rng.uniform(-1, 1, s)).astype(ml_dtypes.bfloat16) for s in ((2, 37, 40), (2, 40, 45)))
    bias = rng.uniform(-1, 1, (37, 1)).astype(np.float32)
    got = gemm(a, b, bias=bias)
    assert set(got) == {"d", "pre"} and got["pre"].dtype == np.float32 and got["d"].shape == (2, 37, 45)
    assert gemm.last_kernel.name == planned("bias_gelu_pre").plan.name
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    tol = 2 * 41 * 2.0 ** -24 * np.matmul(np.abs(a64), np.abs(b64))
    bounds = reference(fn.trace({"bias": "row"}, out="bf16"), np.matmul(a64, b64), tol, {"bias": bias})
    assert mismatches(bounds["d"], got["d"]) == 0 and mismatches(bounds["pre"], got["pre"]) == 0
    with pytest.raises(XegemmError, match="reads input 'bias'"):
        gemm(a, b)
