"""Checkpoints written and dequantized by their format's own library (compressed-tensors, from PyPI, pure Python on
torch): block FP8 W8A8 (DeepSeek-V3's ``weight_scale_inv`` and compressed-tensors' ``block`` strategy, with
per-token-group FP8 activations) and pack-quantized W8A16/W4A16 (group and channel, symmetric and asymmetric).
Each file is saved with the safetensors package, loaded with xegemm.quant.from_safetensors and run through the call
API on the CPU device on ragged shapes, against the library's dequantization:

* ``compressed_tensors.quantization.lifecycle.forward.quantize`` / ``dequantize`` (strategies ``block`` for the
  weights, 128 x 128, and ``group`` for the activations: ``x = q * s`` per group of 128 K of each token);
* ``compressed_tensors.compressors.pack_quantized.base.PackedQuantizationCompressor.compress`` writes
  ``weight_packed`` (int32 words along K, ``q + 2^(bits-1)``), ``weight_scale``, ``weight_zero_point`` (int32 words
  along N) and ``weight_shape``; ``.decompress`` is the reference weight.

The same arrays read the wrong way (another group's scales, the zero points dropped) are mutants that must fail."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

import xegemm
from xegemm.quant import from_safetensors

torch = pytest.importorskip("torch", reason="compressed-tensors runs on torch (pip install torch==2.13.0)")
ct = pytest.importorskip("compressed_tensors", reason="compressed-tensors (pip install -e '.[test]') writes and "
                                                      "dequantizes these checkpoints")
st = pytest.importorskip("safetensors.torch", reason="the safetensors package writes the checkpoints")

from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor  # noqa: E402
from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme  # noqa: E402
from compressed_tensors.quantization.lifecycle.forward import dequantize, quantize  # noqa: E402

F8 = torch.float8_e4m3fn


def _np(t) -> np.ndarray:
    """A torch tensor as numpy (FP8 and bf16 through their bytes, as ml_dtypes arrays)."""
    t = t.detach().contiguous()
    if t.dtype == F8:
        return t.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn)
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _rounded(x, compute: str) -> np.ndarray:
    ml = np.float16 if compute == "f16" else ml_dtypes.bfloat16
    return np.asarray(x, np.float64).astype(np.float32).astype(ml).astype(np.float64)


def _check(d, a_values, w_values, compute="bf16"):
    """D (f32) against float64 round(A) @ round(W): both operands rounded once to the compute type as the kernels
    dequantize them, an f16/bf16 GEMM's tolerance with f32 accumulation of K."""
    a_c, w_c = _rounded(a_values, compute), _rounded(w_values, compute)
    want = a_c @ w_c
    bound = 2 * (w_c.shape[0] + 1) * 2.0 ** -24 * (np.abs(a_c) @ np.abs(w_c)) + 1e-30
    d = np.asarray(d, np.float64)
    return d.shape == want.shape and bool(np.all(np.abs(d - want) <= bound))


def _save(tmp_path, tensors: dict, config: dict):
    directory = tmp_path / "ckpt"
    directory.mkdir(exist_ok=True)
    st.save_file({name: t.contiguous() for name, t in tensors.items()}, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps({"quantization_config": config}))
    return directory


def _load(tmp_path, weights, a: str, tile: str):
    path = tmp_path / "layer.yaml"
    path.write_text("problem: {m: 8, n: 64, k: 128}\n" + weights.config_text(a, "f32") + tile
                    + "profile: {warmup: 0, repeats: 1}\n")
    return xegemm.load(path)


# ---- block FP8 -------------------------------------------------------------------------------------------------

W_BLOCK = QuantizationArgs(num_bits=8, type="float", strategy="block", block_structure=[128, 128], symmetric=True)
A_GROUP = QuantizationArgs(num_bits=8, type="float", strategy="group", group_size=128, symmetric=True, dynamic=True)
W8A8_TILE = "pipeline: {prefetch: 0}\ntile: {workgroup: [16, 64, 64], subgroups: [1, 2]}\n"


def _block_weight(rng, n, k):
    """An FP8 weight [N, K] quantized by compressed-tensors with one f32 scale per 128 x 128 block (amax / 448, as
    DeepSeek-V3's and compressed-tensors' observers make it), and the library's dequantization of it."""
    w = torch.from_numpy(rng.normal(size=(n, k)) * np.exp2(rng.integers(-3, 3, (n, 1))))
    pad = torch.nn.functional.pad(w, (0, -k % 128, 0, -n % 128)).abs()
    amax = pad.reshape(-(-n // 128), 128, -(-k // 128), 128).amax(dim=(1, 3))
    scale = (amax / 448).float()
    q = quantize(w.float(), scale, None, W_BLOCK, dtype=F8)
    return q, scale, dequantize(q, scale, None, W_BLOCK).double().numpy()


def _fp8_activations(rng, m, k):
    """Activations [M, K] quantized per token and 128 K (DeepSeek-V3's act_quant: s = amax / 448) by
    compressed-tensors, and the library's dequantization."""
    x = torch.from_numpy(rng.normal(size=(m, k)).astype(np.float32) * np.exp2(rng.integers(-4, 4, (m, 1))))
    scale = (x.reshape(m, -1, 128).abs().amax(-1) / 448).float()
    q = quantize(x, scale, None, A_GROUP, dtype=F8)
    return q, scale, dequantize(q, scale, None, A_GROUP).double().numpy()


CHECKPOINTS = {   # how each writer names the block scales and says what the activations are
    "deepseek-v3": ("weight_scale_inv", {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                         "weight_block_size": [128, 128]}),
    "compressed-tensors": ("weight_scale", {"quant_method": "compressed-tensors", "format": "float-quantized",
                                            "config_groups": {"group_0": {"targets": ["Linear"],
                                                                          "weights": W_BLOCK.model_dump(),
                                                                          "input_activations": A_GROUP.model_dump()}}}),
}


@pytest.mark.parametrize("writer", CHECKPOINTS)
def test_w8a8_block_fp8_checkpoint_with_per_token_group_activations(writer, tmp_path):
    m, n, k = 5, 200, 256             # N ragged against the tile and the 128-column blocks; K in 128-groups (A's)
    rng = np.random.default_rng(31)
    name, config = CHECKPOINTS[writer]
    wq, ws, w_ref = _block_weight(rng, n, k)
    aq, a_s, a_ref = _fp8_activations(rng, m, k)
    weights = from_safetensors(_save(tmp_path, {f"l.{name}": ws, "l.weight": wq}, config), "l")
    assert weights.spec.group == "block128" and weights.spec_a is not None and weights.spec_a.group == 128
    assert weights.scales.shape == (2, 2) and weights.b.shape == (n, k)     # as stored: [ceil(N/128), K/128]
    gemm = _load(tmp_path, weights, weights.spec_a.weight, W8A8_TILE)
    a, s = _np(aq), _np(a_s)                                                # [M, K] e4m3 and [M, K/128] f32
    assert _check(gemm(a, weights, a_scales=s), a_ref, w_ref.T)
    # straight through the call, the checkpoint's tensors as they are
    assert _check(gemm(a, _np(wq), scales=_np(ws), a_scales=s), a_ref, w_ref.T)
    # mutants: a token's scales of its other K-group, and the blocks' scales of the other N-block
    assert not _check(gemm(a, weights, a_scales=np.ascontiguousarray(s[:, ::-1])), a_ref, w_ref.T)
    assert not _check(gemm(a, _np(wq), scales=np.ascontiguousarray(_np(ws)[::-1]), a_scales=s), a_ref, w_ref.T)


def test_block_fp8_weights_with_ragged_k_as_weight_only(tmp_path):
    """The same checkpoint with bf16 activations (W8A16): K = 200 leaves a partial 128-K block."""
    m, n, k = 3, 136, 200
    rng = np.random.default_rng(37)
    wq, ws, w_ref = _block_weight(rng, n, k)
    weights = from_safetensors({"l.weight": wq, "l.weight_scale": ws}, "l")       # found by the scales' shape
    assert weights.spec.group == "block128" and weights.spec_a is None
    gemm = _load(tmp_path, weights, "bf16", "tile: {workgroup: [8, 64, 32], subgroups: [1, 2]}\n")
    a = rng.uniform(-1, 1, (m, k)).astype(ml_dtypes.bfloat16)
    assert _check(gemm(a, weights), a, w_ref.T)


# ---- pack-quantized W8A16 / W4A16 -----------------------------------------------------------------------------

PACKED = [(8, "group", True), (8, "group", False), (8, "channel", True), (8, "channel", False), (4, "group", False)]


@pytest.mark.parametrize("bits,strategy,symmetric", PACKED)
def test_compressed_tensors_pack_quantized_written_by_the_library(bits, strategy, symmetric, tmp_path):
    m, n, k, group = 5, 40, 96, 32
    rng = np.random.default_rng(41 + bits)
    args = QuantizationArgs(num_bits=bits, type="int", strategy=strategy, symmetric=symmetric,
                            group_size=group if strategy == "group" else None)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    groups = k // group if strategy == "group" else 1
    state = {"weight": torch.from_numpy(rng.normal(size=(n, k)).astype(np.float32)).to(torch.bfloat16),
             "weight_scale": torch.from_numpy(np.exp2(rng.uniform(-9, -5, (n, groups))).astype(np.float32))
             .to(torch.bfloat16)}
    if not symmetric:
        half = 1 << (bits - 1)
        state["weight_zero_point"] = torch.from_numpy(rng.integers(-half, half, (n, groups))).to(torch.int8)
    stored = PackedQuantizationCompressor.compress(dict(state), scheme)
    assert stored["weight_packed"].shape == (n, k * bits // 32) and ("weight_zero_point" in stored) != symmetric
    w_ref = PackedQuantizationCompressor.decompress(dict(stored), scheme)["weight"].double().numpy().T   # [K, N]
    config = {"quant_method": "compressed-tensors", "format": "pack-quantized",
              "config_groups": {"group_0": {"targets": ["Linear"], "weights": args.model_dump()}}}
    weights = from_safetensors(_save(tmp_path, {f"x.{name}": t for name, t in stored.items()}, config), "x")
    assert weights.spec.weight == f"u{bits}" and weights.spec.group == (group if strategy == "group" else "channel")
    gemm = _load(tmp_path, weights, "bf16", "tile: {workgroup: [8, 32, 32], subgroups: [1, 2]}\n")
    a = rng.uniform(-1, 1, (m, k)).astype(ml_dtypes.bfloat16)
    assert _check(gemm(a, weights), a, w_ref)
    if not symmetric:   # the mutant: the zero points dropped (the symmetric offset instead) must fail
        flat = np.full_like(weights.zeros, 1 << (bits - 1))
        assert not _check(gemm(a, weights.b, scales=weights.scales, zeros=flat), a, w_ref)
    elif strategy == "group":   # the mutant: each group's scales taken from the next group
        rolled = np.ascontiguousarray(np.roll(weights.scales, 1, axis=1))
        assert not _check(gemm(a, weights.b, scales=rolled, zeros=weights.zeros), a, w_ref)
