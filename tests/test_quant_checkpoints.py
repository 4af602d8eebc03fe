"""Checkpoints as their formats store them: small safetensors files written per format (by the safetensors package
from PyPI), loaded with xegemm.quant.from_safetensors and run through the call API on the CPU device, against a
reference dequantization written here from each format's published packing rule (not xegemm's codec):

* GPTQ (AutoGPTQ ``qlinear_cuda.py``): ``q = (qweight[k // 8, n] >> 4 (k % 8)) & 15``, ``z = ((qzeros[g, n // 8] >>
  4 (n % 8)) & 15) + 1`` (v1), without the + 1 for GPTQModel's ``gptq_v2``; ``W = s[g_idx[k], n] (q - z)``;
* AWQ (AutoAWQ ``packing_utils.py``): word nibble j holds column 8c + [0, 2, 4, 6, 1, 3, 5, 7][j], zeros alike;
* compressed-tensors ``pack-quantized`` (``pack_to_int32``): ``weight_packed[n, k // 8]`` nibble k % 8 holds q + 8;
  ``W = s[n, k // g] q`` (symmetric);
* FP8: ``W = weight[n, k] * weight_scale`` (per tensor or per channel);
* gpt-oss MXFP4 (openai/gpt-oss ``gpt_oss/torch/weights.py``): ``blocks[..., n, b, j]`` low nibble = element 2j,
  e2m1 LUT [0, .5, 1, 1.5, 2, 3, 4, 6] (and negatives), scaled by ``2^(scales[..., n, b] - 127)``; as a batch and
  through ``gemm.moe`` with rows per expert and the experts' bias;
* zero points outside the codes' range (a u4 zero of 200) refused, naming the tensor.

Block FP8 (W8A8) and pack-quantized W8A16, written and dequantized by compressed-tensors itself, are in
tests/test_quant_checkpoints_reference.py.

Each has a mutant: the same file read the wrong way (v2 as v1, act-order ignored) must fail the tolerance."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import xegemm
from xegemm.api import LayoutError, ShapeMismatchError
from xegemm.quant import CheckpointError, from_safetensors

st = pytest.importorskip("safetensors.numpy", reason="the safetensors package (pip install -e '.[test]') writes the "
                                                         "checkpoints these tests load")

E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6])
TILE = "tile: {workgroup: [8, 32, 32], subgroups: [1, 2]}\nprofile: {warmup: 0, repeats: 1}\n"
M, K, N = 5, 96, 40                 # ragged against the 8 x 32 x 32 tile
GROUP = 32


def _gemm(tmp_path, weights, a_type="f16"):
    path = tmp_path / "layer.yaml"
    path.write_text("problem: {m: 8, n: 64, k: 128}\n" + weights.config_text(a_type, "f32") + TILE)
    return xegemm.load(path)


def _check(d, a, w, compute="f16"):
    """D against float64 A @ round_compute(W): an f16/bf16 GEMM's tolerance with f32 accumulation of K, plus the
    compute type's rounding of each dequantized weight (the reference rounds through f32)."""
    ml = np.float16 if compute == "f16" else ml_dtypes.bfloat16
    w_c = w.astype(np.float32).astype(ml).astype(np.float64)
    a64 = a.astype(np.float64)
    want = a64 @ w_c
    unit = 2.0 ** -11 if compute == "f16" else 2.0 ** -8
    bound = (2 * (w.shape[0] + 1) * 2.0 ** -24 + unit) * (np.abs(a64) @ np.abs(w_c)) + 1e-30
    return np.asarray(d).shape == want.shape and bool(np.all(np.abs(np.asarray(d, np.float64) - want) <= bound))


def _words(nibbles, axis):
    """int32 words of 8 nibbles along ``axis`` (the lowest index in the lowest bits), as GPTQ and compressed-tensors
    pack."""
    v = np.moveaxis(nibbles.astype(np.uint32), axis, -1)
    v = v.reshape(*v.shape[:-1], -1, 8)
    words = sum(v[..., i] << np.uint32(4 * i) for i in range(8)).astype(np.uint32)
    return np.moveaxis(words, -1, axis).view(np.int32)


def _save(tmp_path, tensors, config=None):
    directory = tmp_path / "ckpt"
    directory.mkdir(exist_ok=True)
    st.save_file(tensors, str(directory / "model.safetensors"))
    if config is not None:
        (directory / "config.json").write_text(json.dumps({"quantization_config": config}))
    return directory


def _gptq(rng, version=1, act_order=False):
    q = rng.integers(0, 16, (K, N))
    z = rng.integers(0, 16, (K // GROUP, N))
    s = (2.0 ** rng.uniform(-6, -2, (K // GROUP, N))).astype(np.float16)
    g_idx = np.arange(K) // GROUP
    if act_order:
        g_idx = g_idx[rng.permutation(K)]
    w = s[g_idx].astype(np.float64) * (q - z[g_idx])
    stored_z = (z - 1) & 15 if version == 1 else z
    return w, {"qweight": _words(q, 0), "qzeros": _words(stored_z, 1), "scales": s, "g_idx": g_idx.astype(np.int32)}


@pytest.mark.parametrize("version", [1, 2])
def test_gptq_checkpoints_v1_and_v2_load_and_verify(version, tmp_path):
    rng = np.random.default_rng(version)
    w, tensors = _gptq(rng, version)
    prefix = "model.layers.0.mlp.down_proj"
    config = {"quant_method": "gptq", "bits": 4, "group_size": GROUP, "desc_act": False,
              **({"checkpoint_format": "gptq_v2"} if version == 2 else {})}
    path = _save(tmp_path, {f"{prefix}.{name}": x for name, x in tensors.items()}, config)
    weights = from_safetensors(path, prefix)
    assert weights.source == "gptq" and weights.gptq_version == version and (weights.k, weights.n) == (K, N)
    gemm = _gemm(tmp_path, weights)
    a = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    assert _check(gemm(a, weights), a, w)
    if version == 2:     # the mutant: v2 zeros read as v1 (one off) must fail
        assert not _check(gemm(a, weights.b, scales=weights.scales, zeros=weights.zeros), a, w)
    # qweight stored as uint32 is the same words
    assert _check(gemm(a, weights.b.view(np.uint32), scales=weights.scales, zeros=weights.zeros,
                       gptq_version=version), a, w)


def test_gptq_act_order_is_computed_by_permuting_k_and_counted(tmp_path):
    rng = np.random.default_rng(7)
    w, tensors = _gptq(rng, act_order=True)
    weights = from_safetensors({f"l.{name}": x for name, x in tensors.items()}, "l",
                               {"quant_method": "gptq", "bits": 4, "group_size": GROUP, "desc_act": True})
    gemm = _gemm(tmp_path, weights)
    a = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    assert _check(gemm(a, weights), a, w)
    assert any("act-order" in note for note in gemm.last_kernel.copies)
    # the permutation is a host copy of A: copy=False refuses it with the fix
    with pytest.raises(LayoutError, match="act-order g_idx permutes A's columns .* copy=False"):
        gemm(a, weights, copy=False)
    # the mutant: g_idx ignored (groups taken as k // group) must fail
    assert not _check(gemm(a, weights.b, scales=weights.scales, zeros=weights.zeros), a, w)
    # a g_idx no permutation fixes is refused with the reason, never run
    bad = np.zeros(K, np.int32)
    with pytest.raises(ShapeMismatchError, match="neither arange"):
        gemm(a, weights.b, scales=weights.scales, zeros=weights.zeros, g_idx=bad)


def test_awq_checkpoint_loads_and_verifies(tmp_path):
    rng = np.random.default_rng(11)
    order = [0, 2, 4, 6, 1, 3, 5, 7]
    q = rng.integers(0, 16, (K, N))
    z = rng.integers(0, 16, (K // GROUP, N))
    s = (2.0 ** rng.uniform(-6, -2, (K // GROUP, N))).astype(np.float16)     # AutoAWQ writes f16 scales

    def pack(x):
        runs = x.reshape(x.shape[0], -1, 8).astype(np.uint32)
        return sum(runs[..., order[j]] << np.uint32(4 * j) for j in range(8)).astype(np.uint32).view(np.int32)
    w = s.repeat(GROUP, 0).astype(np.float64) * (q - z.repeat(GROUP, 0))
    path = _save(tmp_path, {"p.qweight": pack(q), "p.qzeros": pack(z), "p.scales": s},
                 {"quant_method": "awq", "bits": 4, "group_size": GROUP, "zero_point": True, "version": "gemm"})
    weights = from_safetensors(path, "p")
    assert weights.source == "awq"
    a = rng.uniform(-1, 1, (M, K)).astype(ml_dtypes.bfloat16)
    gemm = _gemm(tmp_path, weights, "bf16")
    assert _check(gemm(a, weights), a, w, "bf16")


@pytest.mark.parametrize("strategy", ["group", "channel"])
def test_compressed_tensors_pack_quantized_w4a16_loads_and_verifies(strategy, tmp_path):
    rng = np.random.default_rng(13)
    q = rng.integers(-8, 8, (N, K))                       # signed codes, stored as q + 8 (symmetric: no zero point)
    groups = K // GROUP if strategy == "group" else 1
    s = (2.0 ** rng.uniform(-6, -2, (N, groups))).astype(ml_dtypes.bfloat16)
    w = (s.astype(np.float64).repeat(K // groups, 1) * q).T              # [K, N]
    tensors = {"x.weight_packed": _words(q + 8, 1), "x.weight_scale": s,
               "x.weight_shape": np.array([N, K], np.int32)}
    config = {"quant_method": "compressed-tensors", "format": "pack-quantized",
              "config_groups": {"group_0": {"weights": {"num_bits": 4, "symmetric": True, "strategy": strategy,
                                                        "group_size": GROUP if strategy == "group" else None}}}}
    weights = from_safetensors(_save(tmp_path, tensors, config), "x")
    assert weights.source == "compressed-tensors pack-quantized" and weights.spec.layout == "col"
    a = rng.uniform(-1, 1, (M, K)).astype(ml_dtypes.bfloat16)
    gemm = _gemm(tmp_path, weights, "bf16")
    assert _check(gemm(a, weights), a, w, "bf16")


@pytest.mark.parametrize("scale_shape", [(), (1,), (N, 1), (N,)])
def test_fp8_checkpoints_per_tensor_and_per_channel_are_taken_as_stored(scale_shape, tmp_path):
    rng = np.random.default_rng(17)
    weight = rng.uniform(-400, 400, (N, K)).astype(ml_dtypes.float8_e4m3fn)          # [out, in] = [N, K]
    scale = np.asarray(2.0 ** rng.uniform(-8, -2, scale_shape), np.float32)
    w = (weight.astype(np.float64) * (scale.reshape(-1, 1) if scale.size > 1 else scale)).T
    weights = from_safetensors(_save(tmp_path, {"f.weight": weight, "f.weight_scale": scale}), "f")
    assert weights.spec.group == ("channel" if scale.size > 1 else "tensor")
    a = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    gemm = _gemm(tmp_path, weights)
    assert _check(gemm(a, weights), a, w)
    # and straight through the call: the scale as stored, 0-d / [1] / [N, 1] / [N]
    assert _check(gemm(a, weight, scales=scale), a, w)


def test_gpt_oss_mxfp4_blocks_and_uint8_scales_with_experts(tmp_path):
    rng = np.random.default_rng(19)
    experts = 2
    blocks = rng.integers(0, 256, (experts, N, K // 32, 16), dtype=np.uint8)
    scales = rng.integers(118, 128, (experts, N, K // 32), dtype=np.uint8)
    lo, hi = E2M1[blocks & 15], E2M1[blocks >> 4]
    values = np.stack([lo, hi], axis=-1).reshape(experts, N, K // 32, 32)       # low nibble first
    w = (values * np.exp2(scales.astype(np.float64) - 127)[..., None]).reshape(experts, N, K).transpose(0, 2, 1)
    path = _save(tmp_path, {"block.0.mlp.mlp1_weight.blocks": blocks, "block.0.mlp.mlp1_weight.scales": scales})
    weights = from_safetensors(path, "block.0.mlp.mlp1_weight")
    assert weights.experts == experts and weights.spec.scale_layout == "nk" and weights.spec.layout == "col"
    gemm = _gemm(tmp_path, weights, "bf16")
    a = rng.uniform(-1, 1, (experts, M, K)).astype(ml_dtypes.bfloat16)
    d = gemm(a, weights)
    assert all(_check(d[e], a[e], w[e], "bf16") for e in range(experts))
    # the same through the call with the arrays as stored (uint8 blocks and scales, no conversion by hand)
    assert all(_check(x, a[e], w[e], "bf16") for e, x in enumerate(gemm(a, blocks, scales=scales)))


def test_plain_weight_and_bias_and_what_is_refused(tmp_path):
    rng = np.random.default_rng(23)
    weight = rng.uniform(-1, 1, (N, K)).astype(np.float16)
    weights = from_safetensors({"lin.weight": weight, "lin.bias": np.zeros(N, np.float16)}, "lin")
    assert weights.spec is None and weights.bias.dtype == np.float32 and weights.b.shape == (K, N)
    with pytest.raises(CheckpointError, match="no format recognised"):
        from_safetensors({"lin.foo": weight}, "lin")
    with pytest.raises(CheckpointError, match="lacks qzeros"):
        from_safetensors({"g.qweight": np.zeros((12, 40), np.int32), "g.scales": np.zeros((3, 40), np.float16)}, "g")


def test_the_readme_example_copies_an_f_ordered_b_and_counts_it():
    """README.md and docs/use.md: an F-ordered B for row-major kernels is copied (named in last_kernel.copies), or
    refused with the fix when copy=False."""
    gemm = xegemm.load(Path(__file__).resolve().parent.parent / "configs" / "default.yaml")
    rng = np.random.default_rng(0)
    a = rng.random((30, 20)).astype(ml_dtypes.bfloat16)
    b = np.asfortranarray(rng.random((20, 10)).astype(ml_dtypes.bfloat16))
    d = gemm(a, b)
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.allclose(d, want, rtol=1e-5, atol=1e-5)
    layouts = {c.config.layout.b for c in gemm.candidates}
    if "col" not in layouts:
        assert gemm.last_kernel.copies == ("B: col-major 20 x 10 copied into row-major",)
        with pytest.raises(LayoutError, match="copy=False"):
            gemm(a, b, copy=False)
    strided = np.asarray(rng.random((20, 20)).astype(ml_dtypes.bfloat16))[:, ::2]
    gemm(a, strided)
    assert any("strided" in note for note in gemm.last_kernel.copies)


MOE_TILE = "tile: {workgroup: [16, 64, 32], subgroups: [1, 2]}\nprofile: {warmup: 0, repeats: 1}\n"


def test_gpt_oss_moe_layer_through_the_moe_call_verified_per_expert(tmp_path):
    """gpt-oss's MoE weights as openai/gpt-oss names them (``block.0.mlp.mlp1_weight.blocks`` [E, N, K/32, 16],
    ``.scales`` [E, N, K/32] uint8 e8m0, the bias ``block.0.mlp.mlp1_bias`` [E, N] beside them) through
    ``gemm.moe`` with rows per expert (one empty), each expert's rows against its own dequantized weight."""
    rng = np.random.default_rng(29)
    experts, rows = 3, [5, 0, 7]
    blocks = rng.integers(0, 256, (experts, N, K // 32, 16), dtype=np.uint8)
    scales = rng.integers(118, 128, (experts, N, K // 32), dtype=np.uint8)
    bias = rng.uniform(-1, 1, (experts, N)).astype(ml_dtypes.bfloat16)
    lo, hi = E2M1[blocks & 15], E2M1[blocks >> 4]
    values = np.stack([lo, hi], axis=-1).reshape(experts, N, K // 32, 32)          # low nibble first
    w = (values * np.exp2(scales.astype(np.float64) - 127)[..., None]).reshape(experts, N, K).transpose(0, 2, 1)
    path = _save(tmp_path, {"block.0.mlp.mlp1_weight.blocks": blocks, "block.0.mlp.mlp1_weight.scales": scales,
                            "block.0.mlp.mlp1_bias": bias, "block.0.mlp.mlp2_bias": bias[:, :8]})
    weights = from_safetensors(path, "block.0.mlp.mlp1_weight")
    assert weights.experts == experts and weights.bias.shape == (experts, N)
    config = tmp_path / "moe.yaml"
    config.write_text("problem: {m: 12, n: 64, k: 96}\nmoe: {experts: 3, rows: [5, 0, 7]}\n"
                      + weights.config_text("bf16", "f32") + MOE_TILE)
    gemm = xegemm.load(config)
    a = rng.uniform(-1, 1, (sum(rows), K)).astype(ml_dtypes.bfloat16)
    begin = np.cumsum([0] + rows)

    def per_expert(d, bias_values):
        return all(_check(d[begin[e]:begin[e + 1]] - bias_values[e].astype(np.float64), a[begin[e]:begin[e + 1]],
                          w[e], "bf16") for e in range(experts) if rows[e])
    assert per_expert(gemm.moe(a, weights, rows, bias=weights.bias), bias)
    # the arrays as stored, straight through the call
    assert per_expert(gemm.moe(a, blocks, rows, scales=scales, bias=weights.bias), bias)
    # the mutant: each expert's scales taken from the next expert must fail
    assert not per_expert(gemm.moe(a, blocks, rows, scales=np.roll(scales, 1, axis=0), bias=weights.bias), bias)


def test_a_zero_point_outside_the_codes_range_is_refused_naming_the_tensor(tmp_path):
    """A u4 zero point of 200 (one per byte, as plain u4 stores them) is not a u4 value: one line naming the array
    and the element, never wrapped or run; compressed-tensors' unpacked 4-bit zero points likewise."""
    gemm = xegemm.load(Path(__file__).resolve().parent.parent / "configs" / "w4a16.yaml")
    rng = np.random.default_rng(31)
    q = rng.integers(0, 256, (K, N // 2), dtype=np.uint8)                 # u4 row-major, two per byte along N
    scales = np.ones((1, N), np.float16)
    zeros = np.full((1, N), 8, np.uint8)
    zeros[0, 7] = 200
    a = np.ones((M, K), np.float16)
    with pytest.raises(ShapeMismatchError, match=r"^zeros holds 200 at \[0, 7\]; .* codes' range 0\.\.15"):
        gemm(a, q, scales=scales, zeros=zeros)
    packed = _words(rng.integers(0, 16, (N, K)), 1)
    zp = np.zeros((N, K // GROUP), np.int8)
    zp[3, 1] = 100
    config = {"quant_method": "compressed-tensors", "format": "pack-quantized",
              "config_groups": {"g": {"weights": {"num_bits": 4, "symmetric": False, "strategy": "group",
                                                  "group_size": GROUP}}}}
    tensors = {"x.weight_packed": packed, "x.weight_scale": np.ones((N, K // GROUP), np.float16),
               "x.weight_zero_point": zp, "x.weight_shape": np.array([N, K], np.int32)}
    with pytest.raises(CheckpointError, match=r"^x\.weight_zero_point holds 100 at \[3, 1\]; .* -8\.\.7"):
        from_safetensors(tensors, "x", config)


def test_block_fp8_scales_that_do_not_fit_are_refused_with_the_shapes():
    weight = np.zeros((N, K), ml_dtypes.float8_e4m3fn)
    deepseek = {"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic"}
    with pytest.raises(CheckpointError, match=r"l\.weight_scale_inv is \[3, 3\]; .* = \[1, 1\]"):
        from_safetensors({"l.weight": weight, "l.weight_scale_inv": np.ones((3, 3), np.float32)}, "l", deepseek)
    with pytest.raises(CheckpointError, match="weight blocks are 64 x 64"):
        from_safetensors({"l.weight": weight, "l.weight_scale_inv": np.ones((1, 2), np.float32)}, "l",
                         {**deepseek, "weight_block_size": [64, 64]})
    weight_only = from_safetensors({"l.weight": weight, "l.weight_scale": np.ones((N, 1), np.float32)}, "l")
    assert weight_only.spec_a is None and "quant_a" not in weight_only.config_text("bf16")
    with pytest.raises(CheckpointError, match="activations are not FP8"):
        weight_only.config_text("e4m3")
    w8a8 = from_safetensors({"l.weight": weight, "l.weight_scale_inv": np.ones((1, 1), np.float32)}, "l", deepseek)
    assert "quant_a: {format: plain, group: 128, scale: f32, scale_layout: nk}" in w8a8.config_text("e4m3")
