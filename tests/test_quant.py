"""Quantized operands on the host (xegemm.quant): the formats' documented packings on hand-made words, round trips
of every format, exactness of the 8- and 4-bit floats in f16/bf16, the dequantization order, deliberately broken
dequantizers that the verifier's comparison must catch, the config sections' errors and the planner's rules."""

import itertools

import ml_dtypes
import numpy as np
import pytest
from xegemm.config import ConfigError, config_from_text
from xegemm.config import expand as expand_sweep
from xegemm.library.dtypes import dtype
from xegemm.plan.planner import PlanRejected, plan
from xegemm.quant import (
    FORMATS,
    QuantError,
    QuantizedMatrix,
    QuantSpec,
    Unpacked,
    compute_type,
    dequantize,
    dequantized_values,
    quantize,
    random_quantized,
    random_unpacked,
    reference_gemm,
    with_arrays,
)
from xegemm.quant.packing import AWQ_ORDER, unpack_nibbles, unpack_words
from xegemm.quant.rules import NOT_LOWERED
from xegemm.quant.spec import expand
from xegemm.quant.values import NUMPY_DTYPES, round_to
from xegemm.verify.dense import Operands, accumulator_reference

RNG = np.random.default_rng(20261126)


def words(*values: int) -> np.ndarray:
    """int32 words from their unsigned 32-bit spellings (0x87654321 is negative as int32)."""
    return np.array(values, dtype=np.uint32).view(np.int32)


# ---- the documented packings, on hand-made words ---------------------------------------------------------------

def test_plain_int4_is_two_per_byte_low_nibble_first():
    q = quantize(np.array([[1.0, -2.0, 3.0, -7.0]]), "plain", weight="s4", group="tensor", scale="f32")
    assert float(q.scales[0, 0]) == 1.0                      # max |w| / 7 = 1
    assert q.qweight.tolist() == [[0xE1, 0x93]]              # -2 = 0xE in the high nibble of byte 0; -7 = 0x9
    assert dequantize(q).astype(float).tolist() == [[1.0, -2.0, 3.0, -7.0]]


def test_plain_int4_column_major_packs_along_k_as_sycl_tla_stores_it():
    # B is N x K (K contiguous): column n holds K consecutive nibbles, two per byte
    w = np.array([[1.0], [2.0], [3.0], [4.0]])               # K = 4, N = 1
    q = quantize(w, "plain", weight="u4", group="tensor", scale="f32", layout="col")
    assert q.qweight.shape == (1, 2)
    s = float(q.scales[0, 0])
    codes = np.rint(w[:, 0] / s).astype(int)
    assert q.qweight.tolist() == [[codes[0] | codes[1] << 4, codes[2] | codes[3] << 4]]


def test_gptq_qweight_holds_eight_consecutive_k_per_word_lowest_k_in_the_low_nibble():
    spec = QuantSpec("gptq", "u4", "channel", "f16", "u4")
    # K = 8, N = 1: codes k = 0..7 are 1..8, zero 8 (stored as 7), scale 1
    arrays = {"qweight": words(0x87654321).reshape(1, 1),
              "qzeros": words(0x77777777).reshape(1, 1)[:, :1],
              "scales": np.ones((1, 1), np.float16)}
    with pytest.raises(QuantError, match="N = 1 is not a multiple of 8"):
        QuantizedMatrix.from_arrays(spec, 8, 1, arrays)
    # N must be a multiple of 8 for qzeros: 8 columns, column j holding codes 1..8 shifted by j
    qweight = np.array([[(sum(((i + j) % 16) << (4 * i) for i in range(8))) for j in range(8)]], np.uint32)
    arrays = {"qweight": qweight.view(np.int32), "qzeros": words(0x76543210).reshape(1, 1),
              "scales": np.full((1, 8), 0.5, np.float16)}
    matrix = QuantizedMatrix.from_arrays(spec, 8, 8, arrays)
    codes = np.array([[(i + j) % 16 for j in range(8)] for i in range(8)])
    zeros = (np.arange(8) + 1) % 16                           # stored z - 1: 0x76543210 means zeros 1..8
    assert matrix.unpacked().codes.tolist() == codes.tolist()
    assert matrix.unpacked().zeros.tolist() == [zeros.tolist()]
    assert dequantize(matrix).astype(float).tolist() == ((codes - zeros) * 0.5).tolist()


def test_gptq_zero_is_stored_minus_one_and_zero_zero_wraps():
    u = Unpacked(np.zeros((8, 8), np.int64), np.ones((1, 8)), np.array([[8, 0, 1, 15, 2, 3, 4, 5]]))
    spec = QuantSpec("gptq", "u4", "channel", "f16", "u4")
    packed = FORMATS["gptq"].pack(spec, u)
    stored = unpack_words(packed["qzeros"], 4, axis=1)
    assert stored.tolist() == [[7, 15, 0, 14, 1, 2, 3, 4]]     # z - 1, modulo 16 (AutoGPTQ)
    assert FORMATS["gptq"].unpack(spec, packed, 8, 8).zeros.tolist() == u.zeros.tolist()


def test_awq_packs_eight_columns_in_the_order_0_2_4_6_1_3_5_7():
    spec = QuantSpec("awq", "u4", "channel", "f16", "u4")
    codes = np.arange(8).reshape(1, 8)                        # column j holds code j
    u = Unpacked(codes, np.ones((1, 8)), np.zeros((1, 8), np.int64))
    packed = FORMATS["awq"].pack(spec, u)
    assert packed["qweight"].view(np.uint32).tolist() == [[0x75316420]]   # nibble slots hold columns 0,2,4,6,1,3,5,7
    assert AWQ_ORDER == (0, 2, 4, 6, 1, 3, 5, 7)
    assert FORMATS["awq"].unpack(spec, packed, 1, 8).codes.tolist() == codes.tolist()
    # zeros: the same packing, without GPTQ's - 1
    u = Unpacked(np.zeros((1, 8), np.int64), np.ones((1, 8)), np.arange(8).reshape(1, 8))
    assert FORMATS["awq"].pack(spec, u)["qzeros"].view(np.uint32).tolist() == [[0x75316420]]


def test_mx_scales_are_powers_of_two_by_the_ocp_rule():
    # one column, two blocks of 32 K: max |w| 5.0 -> 2^(floor(log2 5) - 2) = 1; max 0.75 -> 2^(-1 - 2) = 1/8
    w = np.concatenate([np.linspace(-5, 5, 32), np.linspace(-0.75, 0.75, 32)]).reshape(64, 1)
    w = np.repeat(w, 2, axis=1)
    q = quantize(w, "mx")
    assert q.scales.dtype == np.dtype(ml_dtypes.float8_e8m0fnu)
    assert q.scales.view(np.uint8)[:, 0].tolist() == [127, 124]     # e8m0: 127 + exponent
    codes = unpack_nibbles(q.qweight, axis=1)
    assert codes[63, 0] == 0x7 and codes[0, 0] == 0xE               # 0.75 / (1/8) = 6 = e2m1 0x7; -5 -> -4 (0xE)
    big = quantize(RNG.normal(size=(256, 8)) * 100, "mx")
    values = big.scales.astype(np.float64)
    assert big.scales.shape == (8, 8) and np.all(np.exp2(np.round(np.log2(values))) == values)


def test_mx_scales_in_layout_nk_are_the_transpose():
    w = RNG.normal(size=(64, 6))
    kn, nk = quantize(w, "mx"), quantize(w, "mx", scale_layout="nk")
    assert kn.scales.shape == (2, 6) and nk.scales.shape == (6, 2)
    assert np.array_equal(kn.scales.view(np.uint8).T, nk.scales.view(np.uint8))
    assert np.array_equal(dequantize(kn).astype(float), dequantize(nk).astype(float))


# ---- round trips of every format -------------------------------------------------------------------------------

def _specs():
    """Every format with every value type and zero type it takes; the scale types, layouts, scale layouts and
    groups it takes rotate through those (each appears), so the list stays short."""
    count = itertools.count()
    for fmt in FORMATS.values():
        groups = [32] if fmt.groups == "32" else [64, "channel"] + (["tensor", 128] if fmt.groups == "any" else [])
        for weight, zero in itertools.product(fmt.weights, fmt.zeros):
            if (zero != "none" and weight in ("e4m3", "e5m2", "e2m1")) or (fmt.name == "gptq" and zero != weight):
                continue
            for _ in range(2):
                i = next(count)
                group = groups[i % len(groups)]
                if weight in ("e4m3", "e5m2") and fmt.name == "plain" and i % 2:
                    group = "block128"
                yield QuantSpec(fmt.name, weight, group, fmt.scales[i % len(fmt.scales)], zero,
                                fmt.scale_layouts[i % len(fmt.scale_layouts)], fmt.layouts[(i // 2) % len(fmt.layouts)])


SPECS = list(_specs())


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe().replace(" ", "_"))
def test_every_format_packs_and_unpacks_to_the_same_values(spec):
    k, n = 256, 16
    fmt = FORMATS[spec.format]
    u = random_unpacked(spec, k, n, RNG)
    arrays = fmt.pack(spec, u)
    matrix = QuantizedMatrix.from_arrays(spec, k, n, arrays)     # the arrays are what the registry says
    back = matrix.unpacked()
    assert np.array_equal(back.codes, u.codes)
    assert np.array_equal(back.scales, u.scales)
    assert (back.zeros is None) == (u.zeros is None)
    if u.zeros is not None:
        assert np.array_equal(back.zeros, u.zeros)


def _spacing(x: np.ndarray, name: str) -> np.ndarray:
    """The distance between neighbouring values of float type ``name`` around |x|."""
    info = ml_dtypes.finfo(NUMPY_DTYPES[name])
    exponent = np.floor(np.log2(np.maximum(np.abs(x), float(info.smallest_subnormal))))
    return np.exp2(np.maximum(exponent, info.minexp) - info.nmant)


def test_random_test_data_covers_every_code_and_its_scale_type():
    gptq = random_quantized(QuantSpec("gptq", "u4", 64, "bf16", "u4"), 256, 16, RNG).unpacked()
    assert set(np.unique(gptq.codes)) == set(range(16)) and set(np.unique(gptq.zeros)) <= set(range(16))
    assert np.array_equal(round_to(gptq.scales, "bf16"), gptq.scales)
    mx = random_quantized(QuantSpec("mx", "e2m1", 32, "e8m0"), 256, 16, RNG)
    assert set(np.unique(mx.unpacked().codes)) == set(dtype("e2m1").decode(np.arange(16)))
    scales = mx.scales.astype(np.float64)
    assert np.all(np.exp2(np.round(np.log2(scales))) == scales) and scales.min() >= 2.0 ** -8


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe().replace(" ", "_"))
def test_quantize_then_dequantize_stays_within_half_a_step(spec):
    """Each value comes back within half a quantization step (plus the f16 rounding of the result), except
    where the format clips on purpose (unsigned values without a zero point, OCP MX's saturating scale)."""
    k, n = 256, 16
    w = RNG.normal(size=(k, n))
    keys = {"weight": spec.weight, "group": spec.group, "scale": spec.scale, "zero": spec.zero,
                "scale_layout": spec.scale_layout, "layout": spec.layout}
    q = quantize(w, spec.format, **keys)
    again = quantize(w, spec.format, **keys)
    assert all(np.array_equal(q.arrays[name], again.arrays[name]) for name in q.arrays)   # deterministic
    got = dequantize(q, "f16").astype(np.float64)
    u = q.unpacked()
    s = expand(u.scales, spec, k, n)
    t = dtype(spec.weight)
    if t.is_int:
        lo, hi = t.value_range
        z = 0 if u.zeros is None else expand(u.zeros, spec, k, n)
        w = np.clip(w, (lo - z) * s, (hi - z) * s)         # unsigned without a zero point: no negatives
        # float zeros: q - z rounds once in the zero's type
        rounding = dtype(spec.zero).unit_roundoff if spec.zero in ("f16", "bf16") else 0.0
        error = s / 2 + rounding * np.abs(u.codes - z) * s
    else:
        top = float(ml_dtypes.finfo(NUMPY_DTYPES[spec.weight]).max)
        w = np.clip(w, -top * s, top * s)                 # OCP MX: the scale's floor rule saturates the block top
        error = s * _spacing(w / s, spec.weight) / 2
    assert np.all(np.abs(got - w) <= error + np.abs(w) * 2.0 ** -11 + 2.0 ** -24)


# ---- the 8- and 4-bit floats are exact in f16 and bf16 ---------------------------------------------------------

@pytest.mark.parametrize("name", ["e4m3", "e5m2", "e2m1"])
@pytest.mark.parametrize("compute", ["f16", "bf16"])
def test_every_fp8_and_fp4_value_is_exact_in_the_compute_type(name, compute):
    t = dtype(name)
    values = t.decode(np.arange(1 << t.bits))
    finite = values[np.isfinite(values)]
    assert len(finite) == {"e4m3": 254, "e5m2": 248, "e2m1": 16}[name]       # every code but NaNs and infinities
    assert np.array_equal(round_to(finite, compute), finite)
    storage = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}[compute]
    assert np.array_equal(finite.astype(storage).astype(np.float64), finite)
    specials = values[~np.isfinite(values)]
    assert np.array_equal(np.isnan(round_to(specials, compute)), np.isnan(specials))


def test_rounding_is_once_at_the_targets_precision():
    # float64 -> bf16 through float32 rounds twice: 1 + 2^-8 + 2^-40 is above the tie, so it rounds up
    x = 1 + 2.0 ** -8 + 2.0 ** -40
    assert float(round_to(x, "bf16")) == 1 + 2.0 ** -7
    assert float(np.float64(x).astype(np.float32).astype(ml_dtypes.bfloat16)) == 1.0
    # on float32 inputs (no double rounding) it is ml_dtypes' conversion, overflow and subnormals included
    for name in ("f16", "bf16", "e4m3", "e5m2", "e2m1", "e8m0"):
        x = (RNG.uniform(-8, 8, 20000) * np.exp2(RNG.integers(-24, 24, 20000))).astype(np.float32).astype(np.float64)
        x = np.abs(x) if name == "e8m0" else x
        with np.errstate(over="ignore"):
            want = x.astype(np.float32).astype(NUMPY_DTYPES[name]).astype(np.float64)
        got = round_to(x, name)
        assert np.array_equal(got, want, equal_nan=True), name


# ---- the dequantization order ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("compute", "scale", "want", "wrong"), [
    ("f16", 1 + 2.0 ** -10, -2.001953125, -2.00390625),
    ("bf16", 1 + 2.0 ** -7, -2.015625, -2.03125),
])
def test_zero_is_subtracted_before_the_scale(compute, scale, want, wrong):
    # q = 1, z = 3: (q - z) * s = -2 s is exact; q*s - z*s rounds z*s = 3s at a tie and then the difference
    spec = QuantSpec("plain", "u4", "tensor", compute, "u4")
    u = Unpacked(np.array([[1]]), np.array([[scale]]), np.array([[3]]))
    assert dequantized_values(u, spec, compute).item() == want
    products = round_to(round_to(1 * scale, compute) - round_to(3 * scale, compute), compute)
    assert products.item() == wrong != want


def test_float_zeros_subtract_in_their_own_type():
    # SGLang's f16 zeros: q - z rounds to f16 (once), then the scale: 255 - 0.3 is not an f16 value
    spec = QuantSpec("plain", "u8", "tensor", "f32", "f16")
    z = float(round_to(0.3, "f16"))
    u = Unpacked(np.array([[255]]), np.array([[1.0]]), np.array([[z]]))
    assert dequantized_values(u, spec, "f16").item() == float(round_to(round_to(255 - z, "f16"), "f16"))
    u = Unpacked(np.array([[255]]), np.array([[2.0 ** -3]]), np.array([[z]]))
    assert dequantized_values(u, spec, "bf16").item() == float(round_to(float(round_to(255 - z, "f16")) / 8, "bf16"))


# ---- broken dequantizers: the verifier's comparison must catch each ---------------------------------------------

F16_GEMM = config_from_text("problem: {m: 16, n: 64, k: 256}\ntypes: {a: f16, b: f16, c: f32}\n")


def verdict(a: np.ndarray, w_used: np.ndarray, matrix: QuantizedMatrix) -> bool:
    """True when A @ w_used, accumulated in f32 as a DPAS does, passes the verifier's f16-GEMM tolerance
    against the reference built from xegemm.quant.dequantize."""
    w_ref = dequantize(matrix, "f16").astype(np.float64)
    ops = Operands(a[None], w_ref[None], np.zeros(0, np.uint8), np.zeros(0, np.uint8), 0, 0, 0)
    expected, tolerance = accumulator_reference(F16_GEMM, ops)
    assert np.array_equal(expected[0], reference_gemm(a, matrix, "f16"))
    got = np.matmul(a.astype(np.float32), round_to(w_used, "f16").astype(np.float32)).astype(np.float64)
    return bool(np.all(np.abs(got - expected[0]) <= tolerance[0]))


def _fresh(format: str, **keys):
    k, n = F16_GEMM.problem.k, F16_GEMM.problem.n
    a = round_to(RNG.uniform(-1, 1, (F16_GEMM.problem.m, k)), "f16")
    return a, quantize(RNG.normal(size=(k, n)), format, **keys)


def _right(matrix):
    return dequantize(matrix, "f16").astype(np.float64)


def _nibbles_high_first(matrix):           # plain s4: reads the high nibble as the even element
    u = matrix.unpacked()
    swapped = u.codes.reshape(u.codes.shape[0], -1, 2)[:, :, ::-1].reshape(u.codes.shape)
    return dequantized_values(Unpacked(swapped, u.scales, u.zeros), matrix.spec, "f16")


def _zero_after_the_scale(matrix):         # w = q*s - z: the zero point taken in the scaled domain
    u = matrix.unpacked()
    k, n = u.codes.shape
    return u.codes * expand(u.scales, matrix.spec, k, n) - expand(u.zeros, matrix.spec, k, n)


def _scale_of_the_next_group(matrix):      # the group index off by one
    u = matrix.unpacked()
    shifted = np.concatenate([u.scales[1:], u.scales[-1:]], axis=0)
    return dequantized_values(Unpacked(u.codes, shifted, u.zeros), matrix.spec, "f16")


def _awq_order_ignored(matrix):            # AWQ words unpacked as if columns were in order
    qweight = unpack_words(matrix.arrays["qweight"], 4, axis=1)
    qzeros = unpack_words(matrix.arrays["qzeros"], 4, axis=1)
    u = matrix.unpacked()
    return dequantized_values(Unpacked(qweight, u.scales, qzeros), matrix.spec, "f16")


def _gptq_zero_without_the_plus_one(matrix):
    u = matrix.unpacked()
    stored = unpack_words(matrix.arrays["qzeros"], 4, axis=1)
    return dequantized_values(Unpacked(u.codes, u.scales, stored), matrix.spec, "f16")


@pytest.mark.parametrize(("format", "keys", "dequantizer", "passes"), [
    ("plain", {"weight": "s4", "group": 32}, _right, True),
    ("gptq", {"group": 64}, _right, True),
    ("awq", {"group": 64}, _right, True),
    ("plain", {"weight": "s4", "group": 32}, _nibbles_high_first, False),
    ("plain", {"weight": "u4", "zero": "u4", "group": 64}, _zero_after_the_scale, False),
    ("gptq", {"group": 32}, _scale_of_the_next_group, False),
    ("awq", {"group": 64}, _awq_order_ignored, False),
    ("gptq", {"group": 64}, _gptq_zero_without_the_plus_one, False),
], ids=lambda x: getattr(x, "__name__", None) if callable(x) else None)
def test_the_reference_comparison_catches_broken_dequantizers(format, keys, dequantizer, passes):
    a, matrix = _fresh(format, **keys)
    assert verdict(a, dequantizer(matrix), matrix) is passes


# ---- W8A8 FP8 ----------------------------------------------------------------------------------------------------

def test_w8a8_fp8_per_token_groups_and_128_blocks():
    m, k, n = 4, 256, 256
    a_values, w_values = RNG.normal(size=(m, k)), RNG.normal(size=(k, n))
    qa = quantize(a_values, "plain", weight="e4m3", group=128, scale="f32", scale_layout="nk", operand="a")
    qb = quantize(w_values, "plain", weight="e4m3", group="block128", scale="f32")
    assert qa.qweight.shape == (m, k) and qa.scales.shape == (m, 2)           # [M, K/128]: DeepSeek's layout
    assert qb.qweight.shape == (k, n) and qb.scales.shape == (2, 2)           # [K/128, N/128]
    a_deq = dequantize(qa, "bf16").astype(np.float64)
    assert a_deq.shape == (m, k)
    scales = qa.scales.astype(np.float64)
    codes = qa.qweight.astype(np.float64)
    assert np.array_equal(a_deq, round_to(codes * np.repeat(scales, 128, axis=1), "bf16"))
    assert np.array_equal(reference_gemm(qa, qb, "bf16"), a_deq @ dequantize(qb, "bf16").astype(np.float64))


# ---- arrays from elsewhere ---------------------------------------------------------------------------------------

def test_arrays_that_do_not_fit_the_format_are_named():
    q = quantize(RNG.normal(size=(128, 16)), "gptq")
    with pytest.raises(QuantError, match=r"qzeros is int64 \[1, 2\], gptq needs int32 \[1, 2\]"):
        with_arrays(q, qzeros=q.arrays["qzeros"].astype(np.int64))
    with pytest.raises(QuantError, match=r"scales is float16 \[16, 1\], gptq needs float16 \[1, 16\]"):
        with_arrays(q, scales=q.scales.T.copy())
    with pytest.raises(QuantError, match="format awq takes weight u4, not s4"):
        quantize(RNG.normal(size=(128, 16)), "awq", weight="s4")
    with pytest.raises(QuantError, match="K = 12 is not a multiple of 8"):
        quantize(RNG.normal(size=(12, 16)), "gptq", group="channel")
    with pytest.raises(QuantError, match="a quantized A is stored row-major"):
        quantize(RNG.normal(size=(8, 128)), "plain", weight="e4m3", layout="col", operand="a")
    with pytest.raises(QuantError, match="e4m3 values take scales only"):
        quantize(RNG.normal(size=(128, 16)), "plain", weight="e4m3", zero="u4")


# ---- the config sections -----------------------------------------------------------------------------------------

BASE = "problem: {m: 64, n: 256, k: 512}\ntile: {workgroup: [64, 64, 64], subgroups: [2, 2]}\n"


@pytest.mark.parametrize(("text", "line", "key", "message"), [
    ("types: {a: f16, b: u4}\nquant:\n  format: gtpq\n", 5, "quant.format",
     "unknown quantization format 'gtpq'; expected one of none, plain, gptq, awq, mx; did you mean 'gptq'?"),
    ("types: {a: f16, b: u4}\nquant:\n  format: gptq\n  group: chanel\n", 6, "quant.group",
     "or one of channel, tensor, block128, found 'chanel'; did you mean 'channel'?"),
    ("types: {a: f16, b: u4}\nquant:\n  format: gptq\n  group: 0\n", 6, "quant.group",
     "expected a positive integer (K elements per scale) or one of channel, tensor, block128, found 0"),
    ("types: {a: f16, b: s4}\nquant:\n  format: plain\n  scale: f8\n", 6, "quant.scale",
     "unknown scale type 'f8'; expected one of f16, bf16, f32, e8m0"),
    ("types: {a: f16, b: s4}\nquant:\n  format: plain\n  scale_layout: mk\n", 6, "quant.scale_layout",
     "unknown scale layout 'mk'; expected one of kn, nk"),
    ("types: {a: f16, b: e4m3}\n", 3, "types.b", "e4m3 is not a DPAS input type: xegemm converts it to types.compute"),
    ("types: {a: f16, b: e8m0}\n", 3, "types.b", "e8m0 is a known data type, but no Xe DPAS has it as an input type"),
    ("types: {a: f16, b: u4}\nquant:\n  format: gptq\n  zero: s8\n", 6, "quant.zero",
     "format gptq takes zero u4 | u8, not s8"),
    ("types: {a: f16, b: s4}\nquant:\n  format: gptq\n", 3, "types.b", "format gptq takes weight u4 | u8, not s4"),
    ("types: {a: f16, b: u4}\nlayout: {b: col}\nquant:\n  format: awq\n", 4, "layout.b",
     "format awq takes layout row, not col"),
    ("types: {a: f16, b: e2m1}\nquant:\n  format: mx\n  group: 64\n", 6, "quant.group",
     "format mx has one scale per 32 K elements (group: 32), not 64"),
    ("types: {a: f16, b: s4}\nquant:\n  format: plain\n  group: block128\n", 6, "quant.group",
     "block128 (128 x 128 blocks) is for FP8 weights (e4m3, e5m2), not s4"),
    ("types: {a: f16, b: f16, compute: bf16}\n", 3, "types.compute",
     "types.compute is the type quantized operands are converted to; without a quant: section"),
    ("types: {a: f16, b: s4, compute: bf16}\nquant: {format: plain}\n", 3, "types.compute",
     "types.compute is bf16 but A is f16 and is not quantized"),
    ("types: {a: tf32, b: s4}\nquant: {format: plain}\n", 3, "types.compute",
     "types.a is tf32: name the DPAS input type, types.compute: f16 or bf16"),
    ("types: {a: f16, b: s4, acc: f16}\nquant: {format: plain}\n", 3, "types.acc",
     "a quantized GEMM accumulates in f32"),
    ("types: {a: f16, b: e4m3}\nquant: {format: plain, scale: f32}\nquant_a: {format: plain}\n", 5, "quant_a.format",
     "quant_a describes an FP8 A, but types.a is f16"),
    ("types: {a: e4m3, b: e4m3, compute: bf16}\nquant: {format: plain, group: block128}\n", 3, "types.a",
     "e4m3 is not a DPAS input type: describe A's scales in a quant_a: section"),
    ("types: {a: e4m3, b: s8, compute: bf16}\nquant: {format: plain}\nquant_a: {format: plain}\n", 3, "types.b",
     "FP8 A (types.a: e4m3) goes with FP8 weights"),
    ("types: {a: e2m1, b: e2m1}\n", 3, "types.a", "or FP8 (e4m3, e5m2) with a quant_a: section"),
])
def test_quant_config_errors_name_file_line_and_key(text, line, key, message):
    with pytest.raises(ConfigError) as caught:
        config_from_text(BASE + text, "q.yaml")
    issues = [issue for issue in caught.value.issues if issue.key == key]
    assert issues, str(caught.value)
    assert issues[0].line == line and message in issues[0].message, str(caught.value)


@pytest.mark.parametrize(("text", "lowered"), [
    ("types: {a: f16, b: u4, c: f16}\nquant: {format: gptq, group: 128, zero: u4}\n", True),
    ("types: {a: bf16, b: u4}\nquant: {format: awq, group: 64, zero: u4}\n", True),
    ("types: {a: f16, b: u4}\nlayout: {b: col}\nquant: {format: plain, group: 128, zero: u4}\n", True),
    ("types: {a: bf16, b: e5m2}\nquant: {format: plain, group: channel, scale: bf16}\n", True),
    ("types: {a: bf16, b: e2m1}\nquant: {format: mx, group: 32, scale: e8m0}\n", True),
    ("types: {a: f16, b: s8}\nquant: {format: plain, group: channel, scale: f32, zero: f16}\n", True),
    ("types: {a: f16, b: e4m3}\nquant: {format: plain, group: block128, scale: f32}\n", True),
    (("types: {a: e4m3, b: e4m3, compute: bf16}\nquant: {format: plain, group: block128, scale: f32}\n"
      "quant_a: {format: plain, group: 128, scale: f32, scale_layout: nk}\n"), True),
    (("types: {a: e4m3, b: e4m3, compute: bf16}\nquant: {format: plain, group: block128, scale: f32}\n"
      "quant_a: {format: plain, group: 8, scale: f32}\n"), "quant_a: scale f32, group 8"),
])
def test_valid_quant_configs_load_and_the_planner_lowers_or_names_what_is_not_lowered(text, lowered):
    config = config_from_text(BASE + text)
    assert compute_type(config.types) in ("f16", "bf16")
    if lowered is True:
        p = plan(config)
        compute = dtype(compute_type(config.types)).code
        assert p.quant is not None and (p.mma.a, p.mma.b) == (compute, compute)
        token = ("_q" + config.quant.format + str(config.quant.group) + "s" + config.quant.scale
                 + ("z" + config.quant.zero if config.quant.zero != "none" else ""))
        a = config.quant_a     # W8A8: A's part follows B's
        assert p.name.endswith(token + (f"a{a.group}s{a.scale}nk" if a.format != "none" else ""))
    else:
        with pytest.raises(PlanRejected, match=NOT_LOWERED) as caught:
            plan(config)
        assert lowered in str(caught.value)


def test_unquantized_configs_are_unchanged():
    config = config_from_text(BASE + "types: {a: bf16, b: bf16}\n")
    assert config.quant.format == "none" and config.types.compute is None
    assert plan(config).name.startswith("xegemm_bf16_bf16_f32_f32_ttt_64x64x64")


# ---- the planner's rules -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("group", "bk", "ok"), [
    (128, 64, True), (64, 64, True), (32, 64, True), (16, 64, True), ("channel", 64, True),
    (96, 64, False), (48, 32, False), (64, 96, False),
])
def test_the_group_must_be_a_multiple_or_a_divisor_of_the_k_tile(group, bk, ok):
    text = (f"problem: {{m: 64, n: 256, k: 768}}\ntile: {{workgroup: [64, 64, {bk}], subgroups: [2, 2]}}\n"
            f"types: {{a: f16, b: u4}}\nquant: {{format: gptq, group: {group}, zero: u4}}\n")
    if ok:
        assert plan(config_from_text(text)).quant.spec.group == group
        return
    with pytest.raises(PlanRejected) as caught:
        plan(config_from_text(text))
    if not ok:
        assert str(caught.value).startswith(f"quant.group = {group} K elements per scale and the work-group K tile "
                                            f"tile.workgroup[2] = {bk}: neither is a multiple of the other")


def test_block128_columns_against_the_n_tile_and_the_shapes_of_packings():
    fp8 = "types: {a: f16, b: e4m3}\nquant: {format: plain, group: block128, scale: f32}\n"
    text = f"problem: {{m: 64, n: 384, k: 512}}\ntile: {{workgroup: [64, 96, 32], subgroups: [2, 2]}}\n{fp8}"
    with pytest.raises(PlanRejected, match=r"block128 has 128 columns per scale and the work-group N tile "
                                           r"tile.workgroup\[1\] = 96"):
        plan(config_from_text(text))
    gptq = "types: {a: f16, b: u4}\nquant: {format: gptq, zero: u4}\n"
    text = f"problem: {{m: 64, n: 100, k: 512}}\ntile: {{workgroup: [64, 64, 32], subgroups: [2, 2]}}\n{gptq}"
    with pytest.raises(PlanRejected, match="quant.format = gptq: GPTQ packs the zeros of 8 columns per int32 word: "
                                           "N = 100 is not a multiple of 8"):
        plan(config_from_text(text))


def test_a_sweep_of_the_group_rejects_only_the_variants_that_break_the_rule():
    text = (BASE + "types: {a: f16, b: u4}\nquant: {format: gptq, zero: u4}\n"
            "sweep:\n  quant.group: [32, 96, 128]\n")
    reasons = []
    for variant in expand_sweep(config_from_text(text)):
        try:
            reasons.append(plan(variant.config).quant.spec.group)
        except PlanRejected as exc:
            reasons.append(str(exc))
    assert reasons[0] == 32 and reasons[2] == 128 and "quant.group = 96" in reasons[1]


def _all_finite(name: str) -> np.ndarray:
    """Every finite value of a 4-, 8- or 16-bit float type, as float64."""
    t = NUMPY_DTYPES[name]
    raw = np.arange(16 if name == "e2m1" else 1 << (8 * t.itemsize), dtype=np.uint16 if t.itemsize == 2 else np.uint8)
    with np.errstate(invalid="ignore"):
        values = raw.view(t).astype(np.float64)
    return values[np.isfinite(values)]


@pytest.mark.parametrize("weight", ["u4", "s4", "u8", "s8", "e4m3", "e5m2", "e2m1"])
@pytest.mark.parametrize("scale", ["f16", "bf16", "f32", "e8m0"])
def test_the_kernels_round_the_f32_product_directly_only_where_it_is_exact(weight, scale):
    """xegemm.lowering.dequant.exact_product, checked by brute force: where it says the f32 product (q - z) * s is
    exact, it equals the float64 product for every q - z of the code type and every finite scale of the type (f16,
    e8m0: all of them; bf16: every 3rd, both ends kept), or is the infinity f32 overflows to; f32 scales never."""
    from xegemm.lowering.dequant import exact_product    # noqa: PLC0415 - the lowering under test
    from xegemm.quant.spec import QuantSpec              # noqa: PLC0415
    t = dtype(weight)
    zero = weight if t.is_int else "none"
    exact = exact_product(QuantSpec(format="plain", weight=weight, group=32, scale=scale, zero=zero))
    assert exact == (scale != "f32")
    if not exact:
        return
    if t.is_int:
        lo, hi = t.value_range
        diffs = np.arange(lo - hi, hi - lo + 1, dtype=np.float64)      # every q - z
    else:
        diffs = _all_finite(weight)
    scales = 2.0 ** np.arange(-127, 128, dtype=np.float64) if scale == "e8m0" else _all_finite(scale)
    if scale == "bf16":
        scales = np.concatenate([scales[::3], scales[-1:], scales[:1]])
    wide = diffs[:, None] * scales[None, :]
    with np.errstate(over="ignore"):
        narrow = diffs.astype(np.float32)[:, None] * scales.astype(np.float32)[None, :]
    finite = np.abs(wide) <= np.finfo(np.float32).max
    assert np.array_equal(narrow[finite].astype(np.float64), wide[finite])
    assert np.all(np.isinf(narrow[~finite]))
