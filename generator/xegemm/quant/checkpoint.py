"""``from_safetensors(path_or_dict, prefix)``: one linear layer's tensors from a safetensors file (or a directory
of them with its ``config.json``) or a state dict, as a :class:`LayerWeights` the call API takes
(``gemm(a, weights)``), the format detected from the tensor names and the checkpoint's ``quantization_config``.

Tensor names under ``prefix`` (``model.layers.0.mlp.down_proj``), per format (docs/quantization.md, "Loading a
checkpoint", has the packing rules and their sources):

* ``qweight``, ``qzeros``, ``scales`` (, ``g_idx``): GPTQ (qweight ``[K*bits/32, N]``) or AWQ (``[K, N/8]``),
  told apart by ``quant_method`` or by the shapes; GPTQ v2 from ``checkpoint_format: gptq_v2``;
* ``weight_packed``, ``weight_scale`` (, ``weight_zero_point``, ``weight_shape``, ``weight_g_idx``):
  compressed-tensors ``pack-quantized`` (W4A16/W8A16): ``[N, K*bits/32]`` int32 words of consecutive K, codes
  stored as ``q + 2^(bits-1)`` -> plain u4/u8, column-major, scales ``nk``, zero points ``2^(bits-1)`` when
  symmetric (a small array made here) or unpacked from their int32 words packed along N;
* ``weight`` FP8 with ``weight_scale`` (per tensor, per channel, or compressed-tensors' ``block`` strategy
  ``[ceil(N/128), ceil(K/128)]``) or ``weight_scale_inv`` (DeepSeek-V3's 128 x 128 blocks): plain e4m3/e5m2,
  column-major ``[N, K]``; a W8A8 config (DeepSeek's ``activation_scheme: dynamic``, compressed-tensors' FP8
  ``input_activations``) gives :attr:`LayerWeights.spec_a`, the FP8 activations' description (their scales are
  the call's ``a_scales``, made per call);
* ``blocks``/``scales`` or ``_blocks``/``_scales`` (gpt-oss MXFP4, any leading expert dimension): mx e2m1,
  column-major, e8m0 scales ``nk`` as stored; the bias is ``bias``/``_bias`` under the prefix or, for
  openai/gpt-oss's names (``block.0.mlp.mlp1_weight.blocks``), ``block.0.mlp.mlp1_bias`` beside it;
* ``weight`` f16/bf16/f32: not quantized (B = weight.T, a column-major view).

The file is read by its documented layout (https://github.com/huggingface/safetensors, "Format": an 8-byte
little-endian header size, a JSON header of dtype, shape and data offsets per tensor, then the bytes), only the
layer's tensors, each read bounded (xegemm.files); nothing of the file is executed.  Zero points stored as
values are checked against the codes' range (a 4-bit zero outside -8..7 is refused naming the tensor).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np

from xegemm.errors import XegemmError
from xegemm.files import read_range, read_text
from xegemm.library.dlpack import array_of
from xegemm.quant.spec import BLOCK, QuantSpec

HEADER_BYTES = 100 << 20          # a safetensors JSON header (the format caps it at 100 MB)
TENSOR_BYTES = 64 << 30           # one tensor
CONFIG_JSON_BYTES = 16 << 20
DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16, "I64": np.int64,
          "I32": np.int32, "I16": np.int16, "I8": np.int8, "U64": np.uint64, "U32": np.uint32, "U16": np.uint16,
          "U8": np.uint8, "BOOL": np.bool_, "F8_E4M3": ml_dtypes.float8_e4m3fn, "F8_E5M2": ml_dtypes.float8_e5m2,
          "F8_E8M0": ml_dtypes.float8_e8m0fnu}
FP8_NAMES = {np.dtype(ml_dtypes.float8_e4m3fn): "e4m3", np.dtype(ml_dtypes.float8_e5m2): "e5m2"}
FLOAT_NAMES = {np.dtype(np.float16): "f16", np.dtype(ml_dtypes.bfloat16): "bf16", np.dtype(np.float32): "f32"}


class CheckpointError(XegemmError, ValueError):
    """A layer's tensors that are missing, unknown or do not fit together (the message names them)."""


@dataclass
class LayerWeights:
    """One layer's weight as the call API takes it: ``gemm(a, weights)`` (its B, scales, zeros, g_idx and GPTQ
    version; K x N with K the input features).  ``spec`` None: not quantized (``b`` is B itself).
    ``source``: the checkpoint format detected; ``notes``: what was converted while loading; ``bias``: the
    layer's bias (float32) if it has one."""

    source: str
    spec: QuantSpec | None
    k: int
    n: int
    b: np.ndarray
    scales: np.ndarray | None = None
    zeros: np.ndarray | None = None
    g_idx: np.ndarray | None = None
    gptq_version: int = 1
    bias: np.ndarray | None = None
    experts: int | None = None          # a leading expert dimension (gpt-oss MoE)
    notes: list[str] = field(default_factory=list)
    spec_a: QuantSpec | None = None      # W8A8: the FP8 activations' description (their scales come per call)
    input_scale: np.ndarray | None = None   # a static activation scale, when the checkpoint stores one

    def call_arrays(self, scales, zeros, g_idx, gptq_version):
        """(b, scales, zeros, g_idx, gptq_version) for the call; the call's own must not be given as well."""
        given = [name for name, x in (("scales", scales), ("zeros", zeros), ("g_idx", g_idx),
                                      ("gptq_version", gptq_version)) if x is not None]
        if given:
            raise CheckpointError(f"{given[0]} was given with a loaded layer's weights, which carry their own: "
                                  "pass gemm(a, weights) alone")
        return self.b, self.scales, self.zeros, self.g_idx, self.gptq_version

    def config_text(self, a: str = "f16", c: str = "f32", compute: str = "bf16") -> str:
        """The config keys (``types``, ``layout.b``, ``quant:``, ``quant_a:``) whose kernels take these arrays, as
        YAML text, for A of type ``a`` and D of type ``c`` (add a problem and a tile; a weight not quantized is
        B = its ``weight.T``, column-major).  ``a`` an FP8 type (a W8A8 checkpoint's ``spec_a.weight``): the FP8 A
        with the checkpoint's activation scales (``quant_a:``), dequantized to ``compute``; f16/bf16: weight only."""
        if self.spec is None:
            return f"types: {{a: {a}, b: {a}, c: {c}}}\nlayout: {{b: col}}\n"
        s = self.spec
        fp8_a = a in FP8_NAMES.values()
        if fp8_a and self.spec_a is None:
            raise CheckpointError(f"config_text(a={a!r}): the checkpoint's activations are not FP8 (no W8A8 "
                                  "quantization_config); take a = f16 or bf16")
        zero = f", zero: {s.zero}" if s.has_zero else ""
        text = (f"types: {{a: {a}, b: {s.weight}, c: {c}{f', compute: {compute}' if fp8_a else ''}}}\n"
                f"layout: {{b: {s.layout}}}\nquant: {{format: {s.format}, group: {s.group}, scale: {s.scale}{zero}, "
                f"scale_layout: {s.scale_layout}}}\n")
        if fp8_a:
            sa = self.spec_a
            text += f"quant_a: {{format: plain, group: {sa.group}, scale: {sa.scale}, scale_layout: {sa.scale_layout}}}\n"
        return text


# ---- reading ----------------------------------------------------------------------------------------------------

def _header(path: Path) -> tuple[dict, int]:
    head = read_range(path, 0, 8, 8, "safetensors file")
    size = int.from_bytes(head, "little")
    if size > HEADER_BYTES:
        raise CheckpointError(f"{path}: the safetensors header claims {size} bytes; at most {HEADER_BYTES} are read")
    try:
        header = json.loads(read_range(path, 8, size, HEADER_BYTES, "safetensors header"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: not a safetensors file (its header is not JSON: {exc})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: not a safetensors file (its header is not a JSON object)")
    return header, 8 + size


def _tensor(path: Path, name: str, entry, base: int) -> np.ndarray:
    try:
        dt, shape, (start, end) = np.dtype(DTYPES[entry["dtype"]]), [int(d) for d in entry["shape"]], \
            entry["data_offsets"]
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"{path}: tensor {name}'s header entry {entry!r} is not a safetensors tensor (dtype one "
                              f"of {', '.join(DTYPES)}, shape, data_offsets)") from None
    count = math.prod(shape)
    if end - start != count * dt.itemsize:
        raise CheckpointError(f"{path}: tensor {name} is {entry['dtype']} {shape} ({count * dt.itemsize} bytes) but "
                              f"its data_offsets span {end - start}")
    data = read_range(path, base + int(start), int(end - start), TENSOR_BYTES, f"tensor {name}")
    return np.frombuffer(data, dt).reshape(shape).copy()


def _files(path: Path) -> tuple[list[Path], dict | None]:
    """The safetensors files of a file or a directory, and the directory's config.json (or None)."""
    if path.is_dir():
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise CheckpointError(f"{path}: no *.safetensors file in the directory")
        config = path / "config.json"
        return files, json.loads(read_text(config, CONFIG_JSON_BYTES, "config.json")) if config.exists() else None
    return [path], None


def _layer_tensors(source, prefix: str, also: Mapping[str, str] | None = None) -> tuple[dict[str, np.ndarray],
                                                                                      dict | None]:
    """The tensors named ``prefix`` + ``.`` or ``_`` + suffix, by suffix, from a file, a directory or a dict
    (and those named exactly as a key of ``also``, under its value)."""
    def suffix(name: str) -> str | None:
        if also and name in also:
            return also[name]
        if prefix and not name.startswith(prefix):
            return None
        rest = name[len(prefix):]
        if prefix and rest[:1] not in (".", "_"):
            return None
        return rest[1:] if prefix else rest
    if isinstance(source, Mapping):
        found = {suffix(name): array_of(value, name) for name, value in source.items() if suffix(name)}
        return found, None
    files, config = _files(Path(source))
    found = {}
    for path in files:
        header, base = _header(path)
        for name, entry in header.items():
            part = suffix(name) if name != "__metadata__" else None
            if part:
                found[part] = _tensor(path, name, entry, base)
    return found, config


# ---- detection --------------------------------------------------------------------------------------------------

def _quant_config(config) -> dict:
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise CheckpointError(f"config is a {type(config).__name__}: pass config.json's content (a dict) or its "
                              "quantization_config")
    return dict(config.get("quantization_config", config))


def _group_of(k: int, rows: int, configured) -> int | str:
    if configured not in (None, -1):
        return int(configured)
    if rows == 1:
        return "channel"
    group = -(-k // rows)
    if -(-k // group) != rows:
        raise CheckpointError(f"scales have {rows} groups along K = {k}: no group size gives that - pass "
                              "config= with the checkpoint's group_size")
    return group


def _need(tensors: dict, prefix: str, *names: str) -> list[np.ndarray]:
    missing = [name for name in names if name not in tensors]
    if missing:
        raise CheckpointError(f"{prefix}: the layer has {', '.join(sorted(tensors)) or 'no tensors'} but lacks "
                              f"{', '.join(missing)} - check the prefix and the checkpoint's format")
    return [tensors[name] for name in names]


def _gptq_or_awq(t: dict, prefix: str, q: dict) -> LayerWeights:
    qweight, qzeros, scales = _need(t, prefix, "qweight", "qzeros", "scales")
    qweight = qweight.view(np.int32) if qweight.dtype == np.uint32 else qweight
    method = str(q.get("quant_method", "")).lower()
    is_awq = method == "awq" or (method != "gptq" and qweight.shape[1] * 8 == scales.shape[1])
    notes = []
    scale = FLOAT_NAMES.get(scales.dtype)
    if scale is None:
        raise CheckpointError(f"{prefix}.scales is {scales.dtype}; GPTQ/AWQ store f16 (or bf16/f32) scales")
    if is_awq:
        bits = int(q.get("bits", q.get("w_bit", 4)))
        if bits != 4:
            raise CheckpointError(f"{prefix}: AWQ with {bits} bits; AWQ packs 4-bit values (bits: 4)")
        k, n = qweight.shape[0], qweight.shape[1] * 8
        group = _group_of(k, scales.shape[0], q.get("group_size", q.get("q_group_size")))
        spec = QuantSpec("awq", "u4", group, scale, "u4", "kn", "row")
        return LayerWeights("awq", spec, k, n, qweight, scales, qzeros, notes=notes)
    bits = int(q.get("bits", 4))
    k, n = qweight.shape[0] * 32 // bits, qweight.shape[1]
    group = _group_of(k, scales.shape[0], q.get("group_size"))
    version = 2 if str(q.get("checkpoint_format", q.get("format", ""))).lower() == "gptq_v2" else 1
    if version == 2:
        notes.append("GPTQ v2 (checkpoint_format: gptq_v2): zeros stored without v1's - 1")
    spec = QuantSpec("gptq", f"u{bits}", group, scale, f"u{bits}", "kn", "row")
    return LayerWeights("gptq", spec, k, n, qweight, scales, qzeros, t.get("g_idx"), version, notes=notes)


def _compressed(t: dict, prefix: str, q: dict) -> LayerWeights:
    packed, scales = _need(t, prefix, "weight_packed", "weight_scale")
    packed = packed.view(np.int32) if packed.dtype == np.uint32 else packed
    n = packed.shape[0]
    groups_cfg = q.get("config_groups") or {}
    weights_cfg = next((g.get("weights") or {} for g in groups_cfg.values() if isinstance(g, Mapping)), {})
    bits = int(weights_cfg.get("num_bits", 0) or 0)
    if "weight_shape" in t:
        n_, k = (int(x) for x in np.asarray(t["weight_shape"]).reshape(-1)[:2])
        if n_ != n:
            raise CheckpointError(f"{prefix}.weight_shape says {n_} x {k} but weight_packed has {n} rows")
        bits = bits or 32 * packed.shape[1] // k if k else 0
    else:
        bits = bits or 4
        k = packed.shape[1] * 32 // bits
    if bits not in (4, 8):
        raise CheckpointError(f"{prefix}: pack-quantized with {bits} bits; xegemm takes 4 (W4A16) and 8 (W8A16)")
    per = 32 // bits
    if -(-k // per) != packed.shape[1]:
        raise CheckpointError(f"{prefix}.weight_packed is {list(packed.shape)}; pack-quantized stores [N, ceil(K/{per})] "
                              f"int32 = [{n}, {-(-k // per)}] for K = {k}")
    weight = "u4" if bits == 4 else "u8"
    codes = packed.view(np.uint8).reshape(n, -1)[:, :k * bits // 8]   # words of consecutive K, lowest first
    notes = ["pack-quantized weight_packed int32 [N, K/%d] viewed as %s bytes [N, %s]" % (per, weight,
             "K/2" if bits == 4 else "K")]
    if codes.shape[1] * 8 // bits != k or not codes.flags.c_contiguous:
        codes = np.ascontiguousarray(codes)
    scale = FLOAT_NAMES.get(scales.dtype)
    if scale is None:
        raise CheckpointError(f"{prefix}.weight_scale is {scales.dtype}; pack-quantized stores f16/bf16/f32 scales")
    scales = scales.reshape(n, -1)
    group = _group_of(k, scales.shape[1], weights_cfg.get("group_size"))
    offset = 1 << (bits - 1)
    if "weight_zero_point" in t and not weights_cfg.get("symmetric", False):
        zp = np.asarray(t["weight_zero_point"])
        if zp.dtype in (np.int32, np.uint32) and zp.shape[0] == -(-n // per):      # packed along N, q + offset
            words = zp.view(np.uint32).astype(np.int64)
            unpacked = np.stack([(words >> (bits * i)) & ((1 << bits) - 1) for i in range(per)], axis=1)
            zeros = unpacked.reshape(-1, zp.shape[1])[:n].astype(np.uint8)
            notes.append("weight_zero_point int32 words packed along N unpacked to one per byte")
        else:                                                                    # unpacked signed zero points
            signed = zp.astype(np.int64).reshape(n, -1)
            bad = (signed < -offset) | (signed >= offset)
            if bad.any():
                where = [int(i) for i in np.argwhere(bad)[0]]
                raise CheckpointError(f"{prefix}.weight_zero_point holds {int(signed[tuple(where)])} at {where}; "
                                      f"{bits}-bit pack-quantized zero points lie in the codes' range {-offset}.."
                                      f"{offset - 1} - the checkpoint is damaged or not {bits}-bit")
            zeros = (signed + offset).astype(np.uint8)
            notes.append("weight_zero_point taken + %d, as the codes are stored" % offset)
    else:
        zeros = np.full(scales.shape, offset, np.uint8)
        notes.append(f"symmetric: codes stored as q + {offset}, so zero points {offset} (a small array made here)")
    spec = QuantSpec("plain", weight, group, scale, weight, "nk", "col")
    g_idx = t.get("weight_g_idx")
    return LayerWeights("compressed-tensors pack-quantized", spec, k, n, codes, scales, zeros, g_idx, notes=notes)


def _block_structure(q: dict) -> list[int] | None:
    """The weight block of a block-FP8 checkpoint's config: DeepSeek-V3's ``weight_block_size`` or
    compressed-tensors' ``block_structure`` (strategy ``block``); None when the config names none."""
    if q.get("weight_block_size") is not None:
        return [int(x) for x in q["weight_block_size"]]
    weights = _ct_args(q, "weights")
    if str(weights.get("strategy", "")).lower() == "block":
        return [int(x) for x in weights.get("block_structure") or (BLOCK, BLOCK)]
    return None


def _ct_args(q: dict, which: str) -> dict:
    """compressed-tensors' ``config_groups``: the first group's ``weights`` or ``input_activations`` args."""
    groups = q.get("config_groups") or {}
    return next((g.get(which) or {} for g in groups.values() if isinstance(g, Mapping)), {})


def _activation_spec(q: dict, prefix: str) -> QuantSpec | None:
    """The FP8 activations' description of a W8A8 checkpoint (dynamic: the scales are made per call, so the call
    takes them as ``a_scales``), or None for a weight-only one.  DeepSeek-V3 (``quant_method: fp8``,
    ``activation_scheme: dynamic``): per token and 128 K; compressed-tensors ``input_activations`` of type float,
    8 bits: strategy ``group`` (its group_size), ``token`` (one scale per row) or ``tensor``."""
    if str(q.get("quant_method", "")).lower() == "fp8" and q.get("weight_block_size") is not None:
        if str(q.get("activation_scheme", "dynamic")).lower() != "dynamic":
            return None
        fmt = str(q.get("fmt", "e4m3")).lower()
        return QuantSpec("plain", "e5m2" if fmt == "e5m2" else "e4m3", int(q["weight_block_size"][1]), "f32",
                         "none", "nk", "row")
    act = _ct_args(q, "input_activations")
    if not act or str(act.get("type", "")).lower() != "float" or int(act.get("num_bits", 0) or 0) != 8:
        return None
    strategy = str(act.get("strategy", "")).lower()
    group = {"group": act.get("group_size"), "token": "channel", "tensor": "tensor"}.get(strategy)
    if group is None:
        raise CheckpointError(f"{prefix}: input_activations strategy {strategy!r}; xegemm's FP8 A takes group (per "
                              "token and group of K), token and tensor scales")
    return QuantSpec("plain", "e4m3", int(group) if strategy == "group" else group, "f32", "none", "nk", "row")


def _fp8(t: dict, prefix: str, q: dict) -> LayerWeights:
    weight = t["weight"]
    n, k = weight.shape[-2:]
    name = "weight_scale_inv" if "weight_scale_inv" in t else "weight_scale"
    (scales,) = _need(t, prefix, name)
    blocks = (-(-n // BLOCK), -(-k // BLOCK))
    block = _block_structure(q)
    if block is not None and block != [BLOCK, BLOCK]:
        raise CheckpointError(f"{prefix}: the checkpoint's weight blocks are {' x '.join(map(str, block))}; "
                              f"xegemm's block128 scales one {BLOCK} x {BLOCK} block each")
    spec_a = _activation_spec(q, prefix)
    scale = FLOAT_NAMES.get(scales.dtype)
    if scale is None:
        raise CheckpointError(f"{prefix}.{name} is {scales.dtype}; FP8 checkpoints store f32 (or f16/bf16) scales")
    notes = []
    if "input_scale" in t:
        notes.append("input_scale (a static activation scale) kept as weights.input_scale: quantize A with it and "
                     "pass it as a_scales" if spec_a is not None else
                     "input_scale (static activation scale) not used: A is taken as f16/bf16")
    is_block = block is not None or name == "weight_scale_inv" or \
        (scales.ndim == 2 and tuple(scales.shape) == blocks and scales.size > 1)
    if is_block:         # DeepSeek-V3 / compressed-tensors block: [ceil(N/128), ceil(K/128)] per 128 x 128 block
        if tuple(scales.shape) != blocks:
            raise CheckpointError(f"{prefix}.{name} is {list(scales.shape)}; 128 x 128 block scales of a weight "
                                  f"[N, K] = [{n}, {k}] are [ceil(N/128), ceil(K/128)] = {list(blocks)}")
        spec = QuantSpec("plain", FP8_NAMES[weight.dtype], "block128", scale, "none", "nk", "col")
        source = f"fp8 block128 ({name})"
    else:
        group = "tensor" if scales.size == 1 else "channel"
        if group == "channel" and scales.size != n:
            raise CheckpointError(f"{prefix}.{name} is {list(scales.shape)}; FP8 checkpoints store one scale (per "
                                  f"tensor), [N, 1] = [{n}, 1] (per channel) or [ceil(N/128), ceil(K/128)] = "
                                  f"{list(blocks)} (per 128 x 128 block)")
        spec = QuantSpec("plain", FP8_NAMES[weight.dtype], group, scale, "none", "nk", "col")
        source = f"fp8 per {group}"
    out = LayerWeights(source, spec, k, n, weight, scales, notes=notes, spec_a=spec_a)
    if spec_a is not None:
        out.notes.append(f"W8A8: activations {spec_a.weight} with f32 scales per "
                         + (f"token and {spec_a.group} K ([M, K/{spec_a.group}])" if isinstance(spec_a.group, int)
                            else "token ([M])" if spec_a.group == "channel" else "tensor")
                         + ", made per call (a_scales=)")
        out.input_scale = t.get("input_scale")
    return out


def _mxfp4(t: dict, prefix: str) -> LayerWeights:
    blocks, scales = _need(t, prefix, "blocks", "scales")
    if blocks.dtype != np.uint8 or blocks.ndim < 3 or blocks.shape[-1] != 16 or tuple(scales.shape) != blocks.shape[:-1]:
        raise CheckpointError(f"{prefix}: blocks {blocks.dtype} {list(blocks.shape)} and scales {list(scales.shape)}; "
                              "gpt-oss stores blocks uint8 [..., N, K/32, 16] and scales uint8 [..., N, K/32]")
    n, k = blocks.shape[-3], blocks.shape[-2] * 32
    experts = int(math.prod(blocks.shape[:-3])) if blocks.ndim > 3 else None
    if experts is not None:
        blocks = blocks.reshape(experts, *blocks.shape[-3:])
        scales = scales.reshape(experts, *scales.shape[-2:])
    spec = QuantSpec("mx", "e2m1", 32, "e8m0", "none", "nk", "col")
    return LayerWeights("gpt-oss mxfp4", spec, k, n, blocks, scales, experts=experts)


def from_safetensors(source, prefix: str, config=None) -> LayerWeights:
    """The layer ``prefix``'s weight from ``source`` (a .safetensors path, a directory with config.json, or a
    state dict of numpy arrays / DLPack tensors); ``config``: config.json's content or its
    ``quantization_config`` (a directory's config.json is read when not given)."""
    prefix = prefix.rstrip(".")
    # openai/gpt-oss names an MoE weight's bias beside it: block.0.mlp.mlp1_weight.blocks and block.0.mlp.mlp1_bias
    sibling = {prefix[:-len("_weight")] + "_bias": "bias"} if prefix.endswith("_weight") else {}
    tensors, found_config = _layer_tensors(source, prefix, sibling)
    q = _quant_config(config if config is not None else found_config)
    if "blocks" in tensors:
        out = _mxfp4(tensors, prefix)
    elif "weight_packed" in tensors:
        out = _compressed(tensors, prefix, q)
    elif "qweight" in tensors:
        out = _gptq_or_awq(tensors, prefix, q)
    elif "weight" in tensors and tensors["weight"].dtype in FP8_NAMES:
        out = _fp8(tensors, prefix, q)
    elif "weight" in tensors and tensors["weight"].dtype in FLOAT_NAMES:
        w = tensors["weight"]
        out = LayerWeights(f"{FLOAT_NAMES[w.dtype]} (not quantized)", None, w.shape[1], w.shape[0], w.T,
                           notes=["weight [N, K] taken as B = weight.T, a column-major view"])
    else:
        raise CheckpointError(f"{prefix}: no format recognised from the tensors {', '.join(sorted(tensors)) or '(none)'}"
                              " (gptq/awq: qweight; compressed-tensors: weight_packed; FP8: weight + weight_scale; "
                              "gpt-oss: blocks + scales; plain: weight)")
    if "bias" in tensors:
        out.bias = np.asarray(tensors["bias"], np.float32)
    return out
