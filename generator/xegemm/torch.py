"""PyTorch front end (optional: ``pip install -e '.[torch]'``): xegemm's GEMM as a ``torch.library`` custom op with a
fake (meta) implementation, so ``torch.compile`` traces through it, and ``nn.Module`` s that replace ``nn.Linear``
for plain, GPTQ, AWQ, FP8 and MXFP4 weights built from a state dict (xegemm.quant.from_safetensors).

Tensors go in and come out through DLPack (xegemm.library.dlpack): CPU tensors are read where they are, D comes back
as a torch tensor over the result's memory.  Tested on CPU tensors on the Intel OpenCL CPU device; XPU tensors were
not run here (docs/use.md).

    from xegemm.torch import XeLinear
    layer = XeLinear.from_state_dict(state_dict, "model.layers.0.mlp.down_proj", dtype=torch.float16)
    y = layer(x)                       # x [..., K] -> y [..., N], x's dtype
    y = torch.compile(layer)(x)
"""

from __future__ import annotations

import itertools
import threading

import torch

from xegemm.api import load
from xegemm.config import config_from_text
from xegemm.errors import XegemmError
from xegemm.library.dlpack import to_torch
from xegemm.quant import from_safetensors

DTYPES = {torch.float16: "f16", torch.bfloat16: "bf16"}
TILE = "tile: {workgroup: [16, 64, 32], subgroups: [1, 2]}\n"     # one fixed variant: dispatch is not tuned here
_LAYERS: dict[str, object] = {}        # op key -> the XeLinear whose weights the op multiplies by
_GEMMS: dict[str, object] = {}         # op key -> a loaded Gemm (xegemm.torch.gemm)
_KEYS = itertools.count()
_LOCK = threading.Lock()


def _key(prefix: str) -> str:
    with _LOCK:
        return f"{prefix}{next(_KEYS)}"


@torch.library.custom_op("xegemm::linear", mutates_args=())
def linear_op(x: torch.Tensor, key: str) -> torch.Tensor:
    """``x [..., K] @ W + bias`` with the weights of the XeLinear registered under ``key``; x's dtype."""
    layer = _LAYERS[key]
    rows = x.reshape(-1, x.shape[-1]).to(layer.dtype).contiguous()
    d = layer.gemm(rows, layer.weights, bias=layer.weights.bias)
    return d.reshape(*x.shape[:-1], layer.out_features).to(x.dtype)


@linear_op.register_fake
def _linear_fake(x: torch.Tensor, key: str) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], _LAYERS[key].out_features))


@torch.library.custom_op("xegemm::gemm", mutates_args=())
def gemm_op(a: torch.Tensor, b: torch.Tensor, key: str) -> torch.Tensor:
    """``A @ B`` with the Gemm registered under ``key`` (D in the kernels' C type)."""
    out = _GEMMS[key](a, b)
    return out if isinstance(out, torch.Tensor) else to_torch(torch, out)


@gemm_op.register_fake
def _gemm_fake(a: torch.Tensor, b: torch.Tensor, key: str) -> torch.Tensor:
    c = _GEMMS[key].candidates[0].config.types.c
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "s32": torch.int32}[c]
    return a.new_empty((*a.shape[:-1], b.shape[-1]), dtype=dtype)


def gemm(loaded, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``A @ B`` through the custom op ``xegemm::gemm`` with a loaded Gemm (``xegemm.load(...)``): traceable by
    torch.compile."""
    key = getattr(loaded, "_torch_key", None)
    if key is None:
        key = loaded._torch_key = _key("gemm")
        _GEMMS[key] = loaded
    return gemm_op(a, b, key)


class XeLinear(torch.nn.Module):
    """``nn.Linear`` on xegemm's kernels: ``y = x W^T + b`` with W as its checkpoint stores it (a LayerWeights of
    xegemm.quant: plain, GPTQ, AWQ, compressed-tensors, FP8, MXFP4).  ``dtype``: the activations' f16/bf16 (the
    DPAS type; x is converted to it); ``device``: the dpctl device of the kernels."""

    formats: tuple[str, ...] | None = None    # the formats a subclass takes (None: any)

    def __init__(self, weights, dtype: torch.dtype = torch.float16, device=None):
        super().__init__()
        if dtype not in DTYPES:
            raise XegemmError(f"dtype {dtype}: the kernels take f16 or bf16 activations (torch.float16, torch.bfloat16)")
        if self.formats is not None and not weights.source.startswith(self.formats):
            raise XegemmError(f"{type(self).__name__} takes {', '.join(self.formats)} weights; the state dict holds "
                              f"{weights.source} - use XeLinear.from_state_dict, which takes any")
        if weights.experts is not None:
            raise XegemmError(f"the weights have {weights.experts} experts: an nn.Linear has one; call gemm.moe")
        self.weights, self.dtype = weights, dtype
        self.in_features, self.out_features = weights.k, weights.n
        name = DTYPES[dtype]
        bias = "epilogue: {bias: col}\n" if weights.bias is not None else ""
        text = f"problem: {{m: 16, n: 64, k: 128}}\n{weights.config_text(name, name)}{TILE}{bias}"
        self.gemm = load(config_from_text(text), device=device)
        self.key = _key("linear")
        _LAYERS[self.key] = self

    @classmethod
    def from_state_dict(cls, state_dict, prefix: str, dtype: torch.dtype = torch.float16, config=None, device=None):
        """The layer ``prefix`` of a state dict (torch tensors or numpy arrays) or a safetensors file/directory;
        ``config``: config.json's content or its quantization_config."""
        return cls(from_safetensors(state_dict, prefix, config), dtype, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise XegemmError(f"x has {x.shape[-1]} features; the layer takes {self.in_features}")
        return linear_op(x, self.key)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, weights={self.weights.source}"


class GPTQLinear(XeLinear):
    formats = ("gptq",)


class AWQLinear(XeLinear):
    formats = ("awq",)


class FP8Linear(XeLinear):
    formats = ("fp8",)


class MXFP4Linear(XeLinear):
    formats = ("gpt-oss mxfp4",)


__all__ = ["AWQLinear", "FP8Linear", "GPTQLinear", "MXFP4Linear", "XeLinear", "gemm", "gemm_op", "linear_op"]
