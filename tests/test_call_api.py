"""xegemm.load(...)(A, B): the call API on the real CPU device, checked against numpy with the verifier's bounds."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

import xegemm
from xegemm.api import (AlignmentError, DeviceArray, DeviceMemoryError, DTypeMismatchError, LayoutError,
                        RankError, ShapeMismatchError)
from xegemm.api.gemm import load_source
from xegemm.config import load_config
from xegemm.library.dtypes import dtype, host_dtype
from xegemm.epilogues.fixed import EpilogueSpec
from xegemm.lowering import named_lowering
from xegemm.quant import compute_type, dequantize, operand_spec, random_quantized
from xegemm.runtime.sycl import dpctl, dpmem
from xegemm.tune.export import best_config
from xegemm.config.shapes import Shape
from xegemm.verify.dense import Operands, reference

pytestmark = pytest.mark.device
CONFIGS = sorted(Path(__file__).resolve().parents[1].joinpath("configs").glob("*.yaml"))


def values(rng, type_name: str, shape) -> np.ndarray:
    """Host values of a registry type, and their float64/int64 values."""
    t = dtype(type_name)
    if t.is_int:
        lo, hi = t.value_range
        v = rng.integers(lo, hi + 1, size=shape)
    else:
        v = t.round(rng.uniform(-1, 1, size=shape))
    return v.astype(host_dtype(type_name))


def assert_matches(gemm, a, b, d, c=None, bias=None):
    """D within the verifier's bounds for the config that ran (its epilogue, split K, stream-K)."""
    config = gemm.last_kernel.config
    a3 = np.asarray(a).reshape((-1,) + a.shape[-2:]).astype(np.float64)
    b3 = np.asarray(b).reshape((-1,) + b.shape[-2:]).astype(np.float64)
    if dtype(config.types.a).is_int:
        a3, b3 = a3.astype(np.int64), b3.astype(np.int64)
    spec = EpilogueSpec.of(config)
    c3 = None if c is None or not spec.reads_c else np.asarray(c).reshape((-1,) + c.shape[-2:]).astype(np.float64)
    ops = Operands(a3, b3, np.zeros(1, np.uint8), np.zeros(1, np.uint8), 0, 0, 0, c_in=c3,
                   bias=None if bias is None else bias.astype(np.float64))
    ref = reference(config, ops)
    got = np.asarray(d).reshape(ref.expected.shape).astype(np.float64)
    bad = ~((got >= ref.low) & (got <= ref.high))
    assert not bad.any(), f"{gemm.last_kernel.name}: {int(bad.sum())} of {bad.size} elements out of bounds"


def call_inputs(rng, config, m, n, k, batch=None):
    t = config.types
    lead = () if batch is None else (batch,)
    a = values(rng, t.a, lead + (m, k))
    b = values(rng, t.b, lead + (k, n))
    if config.layout.a == "col":      # column-major: a transposed view of a C-ordered array
        a = np.swapaxes(np.ascontiguousarray(np.swapaxes(a, -1, -2)), -1, -2)
    if config.layout.b == "col":
        b = np.swapaxes(np.ascontiguousarray(np.swapaxes(b, -1, -2)), -1, -2)
    spec = EpilogueSpec.of(config)
    c = values(rng, t.c, lead + (m, n)) if spec.reads_c else None
    bias = None
    if spec.bias != "none":
        bias = dtype("f32").round(rng.uniform(-1, 1, m if spec.bias == "row" else n)).astype(np.float32)
    return a, b, c, bias


def assert_quantized_matches(gemm, a, q, d):
    """D of a quantized B within the verifier's bounds: B is its dequantized values (xegemm.quant.dequantize), and so
    is an FP8 A given as its QuantizedMatrix."""
    config = gemm.last_kernel.config
    b = dequantize(q, compute_type(config.types)).astype(np.float64)
    if not isinstance(a, np.ndarray):
        a = dequantize(a, compute_type(config.types))
    ops = Operands(a.astype(np.float64)[None], b[None], np.zeros(1, np.uint8), np.zeros(1, np.uint8), 0, 0, 0)
    ref = reference(config, ops)
    got = np.asarray(d).reshape(ref.expected.shape).astype(np.float64)
    bad = ~((got >= ref.low) & (got <= ref.high))
    assert not bad.any(), f"{gemm.last_kernel.name}: {int(bad.sum())} of {bad.size} elements out of bounds"


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_every_shipped_config_on_ragged_and_batched_shapes(path):
    gemm = xegemm.load(path)
    config = gemm.candidates[0].config
    rng = np.random.default_rng(7)
    p = config.problem
    spec = operand_spec(config, "b")
    if spec is not None:        # a quantized B, as its format stores it; ragged within its packing's rules
        m, n, k = p.m // 2 + 3, p.n // 2 + 8, p.k // 2 + 24
        q = random_quantized(spec, k, n, rng)
        a_spec = operand_spec(config, "a")
        if a_spec is None:
            a = values(rng, config.types.a, (m, k))
            d = gemm(a, q.qweight, scales=q.scales, zeros=q.zeros)
        else:                   # W8A8: an FP8 A with its scales
            a = random_quantized(a_spec, k, m, rng, operand="a")
            d = gemm(a.qweight, q.qweight, scales=q.scales, a_scales=a.scales)
        assert d.shape == (m, n) and d.dtype == host_dtype(config.types.c)
        assert_quantized_matches(gemm, a, q, d)
        return
    # ragged: not multiples of the tiles; K long enough for split K and stream-K's work-groups
    m, n, k = max(1, p.m // 2 + 3), max(1, p.n // 2 + 5), p.k + 7 if (config.tile.split_k > 1 or config.tile.stream_k) \
        else max(1, p.k // 2 + 9)
    for batch in (None, 3):
        a, b, c, bias = call_inputs(rng, config, m, n, k, batch)
        d = gemm(a, b, c, bias=bias)
        assert d.shape == ((m, n) if batch is None else (batch, m, n))
        assert d.dtype == host_dtype(config.types.c)
        assert_matches(gemm, a, b, d, c, bias)
        assert "legal" in gemm.last_kernel.reason


def test_row_and_column_major_operands_as_c_and_f_ordered_arrays():
    gemm = xegemm.load(CONFIGS[0].parent / "layouts.yaml")
    rng = np.random.default_rng(3)
    a = values(rng, "bf16", (45, 70))
    b = values(rng, "bf16", (70, 33))
    names = set()
    for aa in (a, np.asfortranarray(a)):
        for bb in (b, np.asfortranarray(b), np.ascontiguousarray(b.T).T):
            d = gemm(aa, bb)
            assert_matches(gemm, aa, bb, d)
            cfg = gemm.last_kernel.config
            assert cfg.layout.a == ("row" if aa.flags.c_contiguous else "col")
            assert cfg.layout.b == ("row" if bb.flags.c_contiguous else "col")
            names.add(gemm.last_kernel.name)
    assert len(names) == 4
    # a strided view (neither layout) is copied into one the kernels take
    d = gemm(a[:, ::2], b[:35])
    assert_matches(gemm, a[:, ::2], b[:35], d)


def test_tuned_best_yaml_dispatches_to_each_winner_and_a_fallback(tmp_path):
    base = load_config(CONFIGS[0].parent / "default.yaml")
    base = replace(base, sweep={}, constraints=())
    s1, s2 = Shape(64, 64, 64), Shape(96, 80, 48)
    tiles = [{"workgroup": [64, 64, 32], "subgroups": [2, 2]}, {"workgroup": [32, 64, 32], "subgroups": [1, 2]}]
    winners = [({"problem": s.as_dict(), "tile": tile},
                {**s.overrides(), "tile.workgroup": tile["workgroup"], "tile.subgroups": tile["subgroups"]})
               for s, tile in zip((s1, s2), tiles)]
    (tmp_path / "best.yaml").write_text(yaml.safe_dump(best_config(base, winners), sort_keys=False))
    # best.json as tune writes it: per shape its winner's kernel and GFLOP/s (the second measured faster)
    config, _, _ = load_source(tmp_path / "best.yaml")
    shapes = {s.label: {"shape": s.as_dict(), "best": {"gflops": g}} for s, g in ((s1, 5.0), (s2, 9.0))}
    (tmp_path / "best.json").write_text(json.dumps({"study": "t", "shapes": shapes}))
    gemm = xegemm.load(tmp_path)
    rng = np.random.default_rng(1)
    ran = {}
    for shape in (s1, s2, Shape(50, 70, 40)):
        a, b = values(rng, "bf16", (shape.m, shape.k)), values(rng, "bf16", (shape.k, shape.n))
        d = gemm(a, b)
        assert_matches(gemm, a, b, d)
        ran[shape] = gemm.last_kernel
    assert ran[s1].reason == f"the tuned winner of {s1.label}" and "64x64x32" in ran[s1].name
    assert ran[s2].reason == f"the tuned winner of {s2.label}" and "32x64x32" in ran[s2].name
    fallback = ran[Shape(50, 70, 40)]       # measured nowhere: the model, scaled by the winners' measurements
    assert fallback.reason.startswith("model-ranked: variant ") and "the fastest predicted of those legal for 50x70x40" \
        in fallback.reason
    assert "scaled by its measured/predicted at " in fallback.reason
    assert fallback.name in (ran[s1].name, ran[s2].name)


@pytest.mark.parametrize("name", ["llm", "llm_gptq"])
def test_a_decode_shape_takes_a_skinny_tile_by_the_model_and_verifies(name):
    """M = 1 with N = K = 4096 (an LLM layer's decode GEMM) and ragged decode shapes: the shipped LLM configs,
    measured nowhere, run a work-group M of 8 or 16 (not the prefill tiles), picked by the model-ranked rule."""
    gemm = xegemm.load(CONFIGS[0].parent / f"{name}.yaml")
    config = gemm.candidates[0].config
    spec = operand_spec(config, "b")
    rng = np.random.default_rng(11)
    for m, n, k in ((1, 4096, 4096), (1, 1000, 1024), (5, 776, 1152), (32, 1032, 640)):
        if spec is None:
            if m > 1 or n != 4096:       # ragged in every dimension (a packed B keeps its packing's multiples)
                n, k = n + 1, k - 3
            a, b = values(rng, config.types.a, (m, k)), values(rng, config.types.b, (k, n))
            d = gemm(a, b)
            assert_matches(gemm, a, b, d)
        else:
            q = random_quantized(spec, k, n, rng)
            a = values(rng, config.types.a, (m, k))
            d = gemm(a, q.qweight, scales=q.scales, zeros=q.zeros)
            assert_quantized_matches(gemm, a, q, d)
        assert d.shape == (m, n)
        assert gemm.last_kernel.reason.startswith("model-ranked: "), gemm.last_kernel.reason
        assert gemm.last_kernel.config.tile.workgroup[0] <= 16, gemm.last_kernel.name


def test_device_arrays_are_read_where_they_are(sycl_device):
    gemm = xegemm.load(CONFIGS[0].parent / "default.yaml", device=sycl_device)
    rng = np.random.default_rng(2)
    a, b = values(rng, "f16", (2, 40, 72)), values(rng, "f16", (2, 72, 24))
    q = dpctl.SyclQueue(sycl_device, property=["in_order", "enable_profiling"])

    def usm(array, order="C"):
        mem = dpmem.MemoryUSMDevice(array.nbytes, queue=q)
        host = array if order == "C" else np.ascontiguousarray(np.swapaxes(array, -1, -2))
        mem.copy_from_host(host.reshape(-1).view(np.uint8))
        return DeviceArray(mem, array.shape, array.dtype, order)

    out_mem = dpmem.MemoryUSMDevice(2 * 40 * 24 * 4, queue=q)
    out = DeviceArray(out_mem, (2, 40, 24), np.float32)
    assert gemm(usm(a), usm(b), out=out) is out
    d = np.frombuffer(bytes(out_mem.copy_to_host()), np.float32).reshape(2, 40, 24)
    assert_matches(gemm, a, b, d)
    d2 = gemm(usm(a), b)                       # mixed: B goes up, D comes back
    assert_matches(gemm, a, b, d2)
    with pytest.raises(LayoutError, match="row"):
        gemm(usm(a, "F"), usm(b))              # column-major A: default.yaml's kernels have row-major A only
    mem = dpmem.MemoryUSMDevice(a.nbytes + 64, queue=q)
    with pytest.raises(AlignmentError, match="64-byte"):
        gemm(DeviceArray(mem, a.shape, a.dtype, offset=2), usm(b))


def test_bad_inputs_raise_before_anything_runs_and_leave_out_untouched():
    gemm = xegemm.load(CONFIGS[0].parent / "default.yaml")
    rng = np.random.default_rng(4)
    a, b = values(rng, "bf16", (20, 30)), values(rng, "bf16", (30, 10))
    out = np.full((20, 10), 7.0, np.float32)
    cases = [
        (RankError, "3 dimensions|1 dimensions", (a[0], b)),
        (ShapeMismatchError, r"A is 20 x 30 and B is 31 x 10", (a, values(rng, "bf16", (31, 10)))),
        (DTypeMismatchError, "bf16 \\(ml_dtypes.bfloat16\\)", (a.astype(np.float32), b.astype(np.float32))),
        (LayoutError, r"A is col-major, .* and copy=False: pass numpy.ascontiguousarray", (np.asfortranarray(a), b)),
        (DeviceMemoryError, "GiB", (np.broadcast_to(a[:1, :1], (200000, 200000)),
                                    np.broadcast_to(b[:1, :1], (200000, 200000)))),
    ]
    for exc, pattern, args in cases:
        with pytest.raises(exc, match=pattern):
            gemm(*args, out=np.broadcast_to(out, out.shape) if exc is DeviceMemoryError else out,
                 copy=exc is not LayoutError)     # an F-ordered A is copied unless copy=False refuses it
        assert np.all(out == 7.0), exc
    with pytest.raises(ShapeMismatchError, match="out is 20 x 11 but D is 20 x 10"):
        gemm(a, b, out=np.zeros((20, 11), np.float32))
    with pytest.raises(DTypeMismatchError, match="numpy.float32"):
        gemm(a, b, out=np.zeros((20, 10), np.float64))
    assert isinstance(RankError("x"), xegemm.api.CallError) and isinstance(RankError("x"), ValueError)


def test_native_pitch_rules_name_the_rule():
    """On a native target the 2D block surface rules decide legality; the error names the broken rule."""
    gemm = xegemm.load(CONFIGS[0].parent / "default.yaml")
    gemm.lowering = named_lowering("native")
    with pytest.raises(AlignmentError, match="pitch .* not a multiple of 16 B"):
        gemm.choose(64, 64, 37, 1, "bf16", "bf16", ("row",), ("row",))


def test_call_epilogue_overrides_pick_the_kernel_that_does_it():
    """alpha, beta, C and a bias given in the call run the variant that scales, reads C and adds the bias."""
    gemm = xegemm.load(CONFIGS[0].parent / "default.yaml")       # alpha 1, beta 0, no bias
    rng = np.random.default_rng(9)
    a, b = values(rng, "f16", (2, 33, 40)), values(rng, "f16", (2, 40, 21))
    c = values(rng, "f32", (2, 33, 21))
    bias = dtype("f32").round(rng.uniform(-1, 1, 21)).astype(np.float32)     # length N: per column
    out = np.zeros((2, 33, 21), np.float32)
    assert gemm(a, b, c, alpha=0.5, beta=2.0, bias=bias, out=out) is out
    assert gemm.last_kernel.name.endswith("_alpha_beta_biascol")
    assert_matches(gemm, a, b, out, c, bias)
    d = gemm(a, b)                                               # back to the plain kernel, same shape
    assert not gemm.last_kernel.name.endswith("_biascol")
    assert_matches(gemm, a, b, d)
    with pytest.raises(ShapeMismatchError, match="beta = 1.0 reads C"):
        gemm(a, b, beta=1.0)
