"""xegemm.torch on CPU tensors on the CPU device: DLPack in and out (torch in, torch out, no copy of a contiguous
operand), the nn.Linear replacements for plain, GPTQ, AWQ, FP8 and MXFP4 weights built from state dicts of torch
tensors, verified against dequantizations written from the formats' packing rules (tests/test_quant_checkpoints.py),
and one module run under torch.compile (fullgraph: the custom op's fake implementation traces)."""

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install -e '.[torch]'; the test extra "
                                            "installs torch==2.13.0)")

import xegemm  # noqa: E402
from xegemm.errors import XegemmError  # noqa: E402
from tests.test_quant_checkpoints import GROUP, K, M, N, _gptq  # noqa: E402
from xegemm.torch import AWQLinear, FP8Linear, GPTQLinear, MXFP4Linear, XeLinear  # noqa: E402

E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6])


def _t(x):
    return torch.from_numpy(np.ascontiguousarray(x)) if np.asarray(x).dtype != ml_dtypes.bfloat16 else \
        torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).view(torch.bfloat16)


def test_torch_tensors_in_torch_tensor_out(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("problem: {m: 8, n: 64, k: 128}\ntypes: {a: bf16, b: bf16, c: f32}\n"
                    "tile: {workgroup: [8, 32, 32], subgroups: [1, 2]}\n")
    gemm = xegemm.load(path)
    a = torch.randn(M, K, dtype=torch.bfloat16)
    b = torch.randn(K, N, dtype=torch.bfloat16)
    d = gemm(a, b)
    assert isinstance(d, torch.Tensor) and d.dtype == torch.float32 and d.shape == (M, N)
    want = a.double() @ b.double()
    assert torch.allclose(d.double(), want, rtol=0, atol=float(2 * (K + 1) * 2.0 ** -24 * (a.double().abs() @ b.double().abs()).max()))
    assert gemm.last_kernel.copies == ()                         # contiguous: read where it is
    gemm(a, b.t().contiguous().t())                              # a transposed view: copied, and counted
    assert gemm.last_kernel.copies and "B:" in gemm.last_kernel.copies[0]
    assert isinstance(xegemm.torch.gemm(gemm, a, b), torch.Tensor)


def test_linear_replacements_from_state_dicts():
    rng = np.random.default_rng(5)
    x = torch.from_numpy(rng.uniform(-1, 1, (2, 3, K)).astype(np.float16))      # [..., K]
    x2 = x.reshape(-1, K).numpy()
    # plain f16 with bias
    weight = rng.uniform(-1, 1, (N, K)).astype(np.float16)
    bias = rng.uniform(-1, 1, N).astype(np.float32)
    layer = XeLinear.from_state_dict({"l.weight": _t(weight), "l.bias": _t(bias)}, "l")
    y = layer(x)
    assert y.shape == (2, 3, N) and y.dtype == torch.float16
    ref = x2.astype(np.float64) @ weight.T.astype(np.float64) + bias
    assert np.allclose(y.reshape(-1, N).double().numpy(), ref, rtol=2e-3, atol=2e-3)
    # GPTQ
    w, tensors = _gptq(rng)
    layer = GPTQLinear.from_state_dict({f"g.{k}": _t(v) for k, v in tensors.items()}, "g",
                                       config={"quant_method": "gptq", "bits": 4, "group_size": GROUP})
    assert _close_f16(layer(x), x2, w)
    # FP8 per channel [N, 1]
    fp8 = rng.uniform(-400, 400, (N, K)).astype(ml_dtypes.float8_e4m3fn)
    scale = np.asarray(2.0 ** rng.uniform(-8, -2, (N, 1)), np.float32)
    layer = FP8Linear.from_state_dict({"f.weight": torch.from_numpy(fp8.view(np.uint8)).view(torch.float8_e4m3fn),
                                       "f.weight_scale": _t(scale)}, "f")
    assert _close_f16(layer(x), x2, (fp8.astype(np.float64) * scale).T)
    with pytest.raises(XegemmError, match="FP8Linear takes fp8"):
        FP8Linear.from_state_dict({"l.weight": _t(weight)}, "l")


def _close_f16(y, x2, w):
    """y (f16, rounded once from the f32 sums) against the float64 reference: the f16 GEMM's tolerance plus D's
    rounding to f16."""
    got = y.reshape(-1, w.shape[1]).double().numpy()
    w16 = w.astype(np.float32).astype(np.float16).astype(np.float64)
    want = x2.astype(np.float64) @ w16
    bound = (2 * (w.shape[0] + 1) * 2.0 ** -24 + 2.0 ** -11) * (np.abs(x2.astype(np.float64)) @ np.abs(w16)) \
        + 2.0 ** -11 * np.abs(want) + 2.0 ** -24
    return bool(np.all(np.abs(got - want) <= bound))


def test_awq_and_mxfp4_modules_and_one_compiled_module():
    rng = np.random.default_rng(9)
    order = [0, 2, 4, 6, 1, 3, 5, 7]
    q, z = rng.integers(0, 16, (K, N)), rng.integers(0, 16, (K // GROUP, N))
    s = (2.0 ** rng.uniform(-6, -2, (K // GROUP, N))).astype(np.float16)

    def pack(v):
        runs = v.reshape(v.shape[0], -1, 8).astype(np.uint32)
        return sum(runs[..., order[j]] << np.uint32(4 * j) for j in range(8)).astype(np.uint32).view(np.int32)
    awq = AWQLinear.from_state_dict({"a.qweight": _t(pack(q)), "a.qzeros": _t(pack(z)), "a.scales": _t(s)}, "a",
                                    config={"quant_method": "awq", "bits": 4, "group_size": GROUP})
    x = torch.from_numpy(rng.uniform(-1, 1, (M, K)).astype(np.float16))
    w = s.repeat(GROUP, 0).astype(np.float64) * (q - z.repeat(GROUP, 0))
    assert _close_f16(awq(x), x.numpy(), w)
    # gpt-oss MXFP4, one expert's [N, K/32, 16] blocks, under torch.compile (the op is traced by its fake)
    blocks = rng.integers(0, 256, (N, K // 32, 16), dtype=np.uint8)
    scales = rng.integers(118, 128, (N, K // 32), dtype=np.uint8)
    values = np.stack([E2M1[blocks & 15], E2M1[blocks >> 4]], -1).reshape(N, K // 32, 32)
    w = (values * np.exp2(scales.astype(np.float64) - 127)[..., None]).reshape(N, K).T
    mx = MXFP4Linear.from_state_dict({"m.blocks": _t(blocks), "m.scales": _t(scales)}, "m", dtype=torch.bfloat16)
    xb = x.to(torch.bfloat16)
    compiled = torch.compile(mx, fullgraph=True)
    y = compiled(xb)
    assert y.dtype == torch.bfloat16 and y.shape == (M, N)
    wb = w.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
    xa = xb.float().double().numpy()
    want = xa @ wb
    bound = (2 * (K + 1) * 2.0 ** -24 + 2.0 ** -8) * (np.abs(xa) @ np.abs(wb)) + 2.0 ** -8 * np.abs(want) + 1e-30
    assert np.all(np.abs(y.double().numpy() - want) <= bound)
    assert torch.equal(compiled(xb), mx(xb))
