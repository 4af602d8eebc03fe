"""Dequantizing GEMM kernels (a quantized B, docs/quantization.md) on the CPU device: each format verified against
numpy (xegemm.quant.dequantize, then a float64 product; the f16/bf16 GEMM's tolerance), and broken kernels the
verifier must fail: the zero point applied after the scale, the nibbles in the wrong order, the scales of the wrong
group, AWQ's column order ignored.  Problems are small and ragged (M, N, K not multiples of the tile, batch 2 for
one), tiles small, so that each kernel builds in a few seconds."""

import re

import numpy as np
import pytest

import xegemm
from xegemm import evaluate
from xegemm.plan import dequant
from xegemm.api import DTypeMismatchError, ShapeMismatchError
from xegemm.kernel.arguments import KernelCall
from xegemm.config import config_from_text
from xegemm.evaluate import plan_variants
from xegemm.plan.kernel_name import parse_kernel_name
from xegemm.lowering import dequant as dequant_c
from xegemm.jobs.pipeline import build_config, run_variant
from xegemm.jobs.support import QUANTIZED
from xegemm.plan.planner import PlanRejected, plan
from xegemm.quant import dequantize, quantize, reference_gemm
from xegemm.kernel.render import render_kernel

TILE = "tile: {workgroup: [16, 32, 32], subgroups: [1, 2]}\nprofile: {warmup: 0, repeats: 1}\n"

# name -> config text; one kernel each, between them every format, value type family, scale type and layout,
# both compute types, zero points of every packing, and both ways a group meets the K tile (g >= BK, g < BK).
# With the shipped configs (tests/test_call_api.py: plain u4 with zeros and gptq per 128, s8 per channel, e4m3 per
# tensor, MXFP4, W8A8) they cover W4A16 with and without zeros per 16/32/64/128 K and channel, W8A16 s8 and u8 per
# channel and group, e4m3 and e5m2 per tensor and channel.
KERNELS = {
    "plain u4 zeros g32 f16 batch 2": ("problem: {m: 20, n: 40, k: 72, batch: 2}\ntypes: {a: f16, b: u4, c: f16}\n"
                                       "quant: {format: plain, group: 32, scale: f16, zero: u4}\n"),
    "gptq u4 g64 bf16": ("problem: {m: 9, n: 48, k: 160}\ntypes: {a: bf16, b: u4, c: bf16}\n"
                         "quant: {format: gptq, group: 64, scale: bf16, zero: u4}\n"),
    "awq u4 g16 f16 (groups inside the k-tile)": ("problem: {m: 20, n: 40, k: 88}\ntypes: {a: f16, b: u4, c: f16}\n"
                                                  "quant: {format: awq, group: 16, scale: f16, zero: u4}\n"),
    "plain s8 g64 f32 scales bf16": ("problem: {m: 20, n: 36, k: 70}\ntypes: {a: bf16, b: s8, c: f32}\n"
                                     "quant: {format: plain, group: 64, scale: f32}\n"),
    "plain u8 u8 zeros per channel": ("problem: {m: 9, n: 36, k: 70}\ntypes: {a: f16, b: u8, c: f16}\n"
                                      "quant: {format: plain, group: channel, scale: f16, zero: u8}\n"),
    "plain s4 per channel, no zeros": ("problem: {m: 9, n: 40, k: 70}\ntypes: {a: f16, b: s4, c: f16}\n"
                                       "quant: {format: plain, group: channel, scale: f16}\n"),
    "plain u8 zeros g32 column-major nk": ("problem: {m: 20, n: 36, k: 96}\ntypes: {a: f16, b: u8, c: f32}\n"
                                           "layout: {b: col}\n"
                                           "quant: {format: plain, group: 32, scale: f16, zero: u8, scale_layout: nk}\n"),
    "e4m3 per channel f16": ("problem: {m: 20, n: 36, k: 70}\ntypes: {a: f16, b: e4m3, c: f16}\n"
                             "quant: {format: plain, group: channel, scale: f16}\n"),
    "e5m2 per tensor bf16": ("problem: {m: 20, n: 36, k: 70}\ntypes: {a: bf16, b: e5m2, c: bf16}\n"
                             "quant: {format: plain, group: tensor, scale: f32}\n"),
    # MXFP4 as vLLM's and SGLang's XPU kernels hold it: [N, K/2] nibbles, e8m0 scales [N, K/32]; K = 88 ends in a
    # partial group
    "mx e2m1 column-major nk bf16": ("problem: {m: 20, n: 40, k: 88}\ntypes: {a: bf16, b: e2m1, c: bf16}\n"
                                     "layout: {b: col}\nquant: {format: mx, group: 32, scale: e8m0, scale_layout: nk}\n"),
    # SGLang's u4 codes with bf16 zero points: q - z rounded to bf16, then scaled
    "plain u4 bf16 zeros g32": ("problem: {m: 9, n: 40, k: 72}\ntypes: {a: bf16, b: u4, c: bf16}\n"
                                "quant: {format: plain, group: 32, scale: bf16, zero: bf16}\n"),
    # W8A8 FP8 as DeepSeek-V3's checkpoints: A's scales per token and 128 K ([M, K/128]), B's per 128 x 128 block
    # ([N/128, K/128], nk; configs/w8a8_fp8.yaml has kn); 2 x 2 blocks
    "w8a8 e4m3 token groups, block128 nk": ("problem: {m: 20, n: 136, k: 200}\ntypes: {a: e4m3, b: e4m3, c: bf16, "
                                            "compute: bf16}\nquant: {format: plain, group: block128, scale: f32, "
                                            "scale_layout: nk}\n"
                                            "quant_a: {format: plain, group: 128, scale: f32, scale_layout: nk}\n"),
    # FP8 checkpoints' layouts: weight [N, K] (column-major B) with per-channel scales [N, 1] (nk), and W8A8 with
    # per-token A scales [M, 1] (nk): one scale row along K, so the kernel indexes them by column / row alone
    "e4m3 per channel nk, column-major B": ("problem: {m: 20, n: 36, k: 70}\ntypes: {a: f16, b: e4m3, c: f16}\n"
                                            "layout: {b: col}\n"
                                            "quant: {format: plain, group: channel, scale: f32, scale_layout: nk}\n"),
    "w8a8 e4m3 per token nk, per channel nk": ("problem: {m: 20, n: 36, k: 70}\ntypes: {a: e4m3, b: e4m3, c: bf16, "
                                               "compute: bf16}\nlayout: {b: col}\nquant: {format: plain, group: "
                                               "channel, scale: f32, scale_layout: nk}\nquant_a: {format: plain, "
                                               "group: channel, scale: f32, scale_layout: nk}\n"),
}


def _sub(pattern: str, repl: str):
    def mutate(source: str) -> str:
        mutated, n = re.subn(pattern, repl, source)
        assert n, f"mutant pattern {pattern!r} did not apply"
        return mutated
    return mutate


# name -> (the kernel it breaks, the generator bug it stands for, the mutation of the rendered source)
MUTANTS = {
    "zero after the scale": ("plain u4 zeros g32 f16 batch 2", "q*s - z*s, each rounded to the compute type",
                             _sub(r"\(\(float\)\(q - z\) \* s\)",
                                  "(xe_round_once((float)q, s) - xe_round_once((float)z, s))")),
    "wrong nibble order": ("plain u4 zeros g32 f16 batch 2", "the high nibble of a byte taken first",
                           _sub(r"\(unit >> \(4u \* j\)\)", "(unit >> (4u * (j ^ 1u)))")),
    "scale of the wrong group": ("gptq u4 g64 bf16", "the group row of a k-tile computed with the wrong group size",
                                 _sub(r"\)S\)\[k0 / 64 \* N", ")S)[k0 / 128 * N")),
    "MXFP4 nibbles swapped": ("mx e2m1 column-major nk bf16", "the high e2m1 nibble of a byte taken first",
                              _sub(r"\(unit >> \(4u \* j\)\)", "(unit >> (4u * (j ^ 1u)))")),
    "e8m0 scale without its bias": ("mx e2m1 column-major nk bf16", "the e8m0 byte e applied as 2^e, not 2^(e - 127)",
                                    _sub(r"as_float\(\(uint\)\((.*?)\) << 23\)", r"ldexp(1.0f, (int)(\1))")),
    "float zero difference not rounded": ("plain u4 bf16 zeros g32", "q - z left in f32, not rounded to the zero's bf16",
                                          _sub(r"xe_round_once\(xe_zero_diff\(\(float\)q, z\), s\)",
                                               "xe_round_once((float)q - z, s)")),
    "A scale of the wrong token group": ("w8a8 e4m3 token groups, block128 nk", "A's scales of the other 128 K of a token",
                                         _sub(r"SA\)\[xa_m(\d) \* xa_groups \+ k0 / 128\]",
                                              r"SA)[xa_m\1 * xa_groups + (k0 / 128 + 1) % xa_groups]")),
    "block128 scales transposed": ("w8a8 e4m3 token groups, block128 nk", "B's [N/128, K/128] scales read as [K/128, N/128]",
                                   _sub(r"S\)\[xq_n(\d) / 128 \* xq_groups \+ k0 / 128\]",
                                        r"S)[k0 / 128 * ((N + 127) / 128) + xq_n\1 / 128]")),
}



def _planned(name: str):
    (pv,) = plan_variants(config_from_text(KERNELS[name] + TILE))
    assert pv.plan is not None, pv.reason
    return pv


@pytest.mark.parametrize("name", KERNELS)
def test_dequantizing_kernels_verify(name, session):
    result = run_variant(_planned(name), session)
    assert result.status == "ok", (name, result.reason)


SCALE_ROWS = [name for name in QUANTIZED if name.startswith("scales ")]


@pytest.mark.parametrize("name", SCALE_ROWS)
def test_every_scale_layout_and_group_kind_of_the_support_matrix_builds_and_verifies(name, session):
    """docs/support.md's scale layout x group kind rows, each built by the device compiler and verified on a
    ragged problem (rendering alone missed an undeclared identifier of per-channel nk scales)."""
    text = QUANTIZED[name].replace("types: {a: f16, b: e4m3}", "types: {a: f16, b: e4m3, c: f16}")
    (pv,) = plan_variants(config_from_text("problem: {m: 20, n: 136, k: 200}\n" + text
                                           + "tile: {workgroup: [16, 32, 32], subgroups: [1, 2]}\n"
                                             "profile: {warmup: 0, repeats: 1}\n"))
    assert pv.plan is not None, pv.reason
    result = run_variant(pv, session)
    assert result.status == "ok", (name, result.reason)


@pytest.mark.parametrize("name", MUTANTS)
def test_verification_catches_broken_dequantization(name, session, monkeypatch):
    kernel, _, mutate = MUTANTS[name]
    original = evaluate.render_variant
    monkeypatch.setattr(evaluate, "render_variant", lambda pv, lowering: mutate(original(pv, lowering)))
    result = run_variant(_planned(kernel), session)
    assert result.status == "failed_verify", (name, result.status, result.reason)
    assert result.time_ms is None


def test_a_session_remakes_its_inputs_when_only_the_quantization_changes(session):
    # GPTQ and AWQ B of the same problem and types: different arrays, so different inputs and references
    gptq = config_from_text(KERNELS["gptq u4 g64 bf16"] + TILE)
    awq = config_from_text(KERNELS["gptq u4 g64 bf16"].replace("gptq", "awq") + TILE)
    first = session.buffers(gptq)["ops"]
    second = session.buffers(awq)["ops"]
    assert first is not second and first.quant["zeros"].nbytes == second.quant["zeros"].nbytes
    assert not np.array_equal(first.b_bytes, second.b_bytes) or not np.array_equal(first.b, second.b)


def test_verification_catches_awq_order_ignored(session, monkeypatch):
    # the generator reading AWQ's words as if their columns were in order: weights and zero points alike
    monkeypatch.setattr(dequant, "_AWQ_SLOT", tuple(range(8)))
    dequant._stored_lane_map.cache_clear()
    monkeypatch.setattr(dequant_c, "AWQ_SLOT_C", "(({n}) & 7)")
    try:
        result = run_variant(_planned("awq u4 g16 f16 (groups inside the k-tile)"), session)
    finally:
        dequant._stored_lane_map.cache_clear()
    assert result.status == "failed_verify", (result.status, result.reason)


# ---- without a device ---------------------------------------------------------------------------------------------

def test_the_kernel_takes_scales_and_zeros_through_the_one_argument_description():
    p = plan(config_from_text(KERNELS["gptq u4 g64 bf16"] + TILE))
    call = KernelCall.of(p)
    names = [a.name for a in call.launches[0].arguments]
    assert names[-4:] == ["S", "Z", "batch_stride_s", "batch_stride_z"]
    sizes = call.sizes(9, 48, 160, 1)
    # GPTQ: qweight [K / 8, N] int32, scales [ceil(K / 64), N] bf16, qzeros [ceil(K / 64), N / 8] int32
    assert (sizes["ldb"], sizes["stride_b"]) == (48 * 4, 48 * 4 * 20)
    assert (sizes["stride_s"], sizes["stride_z"]) == (3 * 48 * 2, 3 * 6 * 4)
    source = render_kernel(p, "portable")
    assert "const global uchar* S, const global uchar* Z" in source and "b_height = (K) / 8" in source


def test_the_kernel_name_says_how_b_is_quantized_and_parses_back():
    p = plan(config_from_text(KERNELS["plain u8 zeros g32 column-major nk"] + TILE))
    assert p.name.endswith("_qplain32sf16zu8nk") and p.name.startswith("xegemm_f16_u8_f32_f32_tnt_")
    assert str(parse_kernel_name(p.name)) == p.name and parse_kernel_name(p.name).quant == "qplain32sf16zu8nk"


AOT_CONFIGS = {
    "awq": "types: {a: f16, b: u4, c: f16}\nquant: {format: awq, group: 64, scale: f16, zero: u4}\n",
    "e4m3": "types: {a: bf16, b: e4m3, c: bf16}\nquant: {format: plain, group: tensor, scale: f32}\n",
    "mxfp4": "types: {a: bf16, b: e2m1, c: bf16}\nquant: {format: mx, group: 32, scale: e8m0}\n",
    "w8a8": ("types: {a: e4m3, b: e4m3, c: bf16, compute: bf16}\nquant: {format: plain, group: block128, scale: f32}\n"
             "quant_a: {format: plain, group: 128, scale: f32, scale_layout: nk}\n"),
}


@pytest.mark.ocloc
@pytest.mark.parametrize("name", AOT_CONFIGS)
def test_native_dequantizing_kernels_build_for_pvc_as_planned(name, tmp_path):
    # the installed ocloc's own capabilities (Debian's IGC): every dpas and 2D block load of a k-step as the plan
    # predicts (xegemm.evaluate.aot.IsaObserver), and every conversion to f16/bf16 (one per dequantized value of a
    # lane per k-step, W8A8's A included, and per value of D when D is f16/bf16), no spills
    path = tmp_path / f"{name}.yaml"
    path.write_text("problem: {m: 32, n: 256, k: 256}\ntile: {workgroup: [32, 64, 32], subgroups: [1, 2]}\n"
                    + AOT_CONFIGS[name])
    result = build_config(path, target="pvc", out_dir=tmp_path / "build")
    (v,) = result["variants"]
    assert v["status"] == "ok", v["reason"]
    assert v["isa"]["spill_bytes"] == 0 and v["measured_messages"]["dpas"] == v["predicted"]["dpas"] == 16
    # 32 x 64 x 32 over 1 x 2 sub-groups: 2 k-chunks x 2 N-fragments x 16 B values, 4 x 2 fragments of 8 D values
    compute = {"awq": "to_f16"}.get(name, "to_bf16")
    want = 64 + 64 + (64 if name == "w8a8" else 0)       # W8A8: 4 M-fragments x 2 k-chunks x 8 A values
    assert v["measured_messages"][compute] == v["predicted"][compute] == want
    source = (tmp_path / "build" / v["name"] / "kernel.cl").read_text()
    assert "_matrix_mad_k16(" in source and "xe_pack_b(xe_dequant_b(" in source


@pytest.mark.parametrize(("text", "part"), [
    ("types: {a: f16, b: u4}\nquant: {format: gptq, group: 8, zero: u4}\n", "quant.group = 8"),
    ("types: {a: f16, b: u4}\nquant: {format: plain, group: 32, zero: u4}\ntile: {subgroup_size: 8, workgroup: "
     "[16, 16, 32], subgroups: [1, 2]}\n", "tile.subgroup_size = 8"),
])
def test_what_is_not_lowered_is_rejected_naming_it(text, part):
    base = "problem: {m: 32, n: 64, k: 128}\n"
    if "tile:" not in text:
        base += "tile: {workgroup: [16, 32, 32], subgroups: [1, 2]}\n"
    with pytest.raises(PlanRejected, match="no lowering dequantizes this yet") as caught:
        plan(config_from_text(base + text))
    assert part in str(caught.value)


# ---- the call API -------------------------------------------------------------------------------------------------

CALL_CONFIG = """\
problem: {m: 8, n: 64, k: 128}
types: {a: f16, b: u4, c: f32}
quant: {format: gptq, group: 32, scale: f16, zero: u4}
tile: {workgroup: [8, 32, 32], subgroups: [1, 2]}
"""


def test_the_call_api_takes_b_as_the_format_stores_it_and_says_what_is_missing(tmp_path):
    path = tmp_path / "gptq.yaml"
    path.write_text(CALL_CONFIG)
    gemm = xegemm.load(path)
    rng = np.random.default_rng(3)
    m, n, k = 5, 48, 96                    # ragged: not multiples of the tile
    q = quantize(rng.normal(size=(k, n)), "gptq", group=32)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    d = gemm(a, q.qweight, scales=q.scales, zeros=q.zeros)
    want = reference_gemm(a, q, "f16")
    # the f16 GEMM's tolerance (xegemm.verify.dense): f32 sums of exact products, then D is f32
    bound = 2 * (k + 1) * 2.0 ** -24 * (np.abs(a.astype(np.float64)) @ np.abs(dequantize(q, "f16").astype(np.float64)))
    assert d.shape == (m, n) and np.all(np.abs(d - want) <= bound + 1e-30), gemm.last_kernel.name
    assert gemm.last_kernel.name.endswith("_qgptq32sf16zu4")
    out = np.full((m, n), np.nan, np.float32)
    with pytest.raises(ShapeMismatchError, match=r"pass its scales, scales=\.\.\."):
        gemm(a, q.qweight, zeros=q.zeros, out=out)
    with pytest.raises(ShapeMismatchError, match=r"scales is 2 x 48; .* needs scales 3 x 48 for K = 96"):
        gemm(a, q.qweight, scales=q.scales[:2], zeros=q.zeros, out=out)
    with pytest.raises(DTypeMismatchError, match=r"b \(qweight\) has dtype uint8; .* stores qweight as int32 - pass"):
        gemm(a, q.qweight.view(np.uint8), scales=q.scales, zeros=q.zeros, out=out)
    with pytest.raises(ShapeMismatchError, match="with zero points .*: pass them, zeros="):
        gemm(a, q.qweight, scales=q.scales, out=out)
    assert np.isnan(out).all()


def test_a_tiny_tune_of_a_quantized_config_verifies_times_and_reports_it(sycl_device, tmp_path):
    from xegemm.reporting import load_source
    from xegemm.reporting.model import groups
    from xegemm.tune import tune

    path = tmp_path / "mx.yaml"
    path.write_text("name: mxtune\nproblem: {m: 20, n: 64, k: 96}\ntypes: {a: bf16, b: e2m1, c: bf16}\n"
                    "quant: {format: mx, group: 32, scale: e8m0}\nprofile: {warmup: 0, repeats: 1}\n"
                    "tile: {workgroup: [16, 32, 32], subgroups: [1, 2]}\nsweep:\n  pipeline.prefetch: [1, 2]\n")
    result = tune(path, out=tmp_path / "t", cache=False, strategy="exhaustive", budget=1, progress=False)
    best = result.best["shapes"]["20x64x96"]["best"]
    assert best["kernel"].endswith("_qmx32se8m0") and best["gflops"] > 0
    (group,) = groups([load_source(tmp_path / "t")])
    assert group.quant == "qmx32se8m0" and "quantized qmx32se8m0" in group.title
    assert [v.status for v in group.variants if v.status != "rejected"] == ["ok"]
