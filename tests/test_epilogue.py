"""The epilogue: D = convert(activation(alpha * acc + beta * C + bias)), in both lowerings.

Every case runs on the real default device (portable lowering) on ragged, batched problems and is verified
against xegemm.verify.dense's reference, which applies the same operations in float64 and converts each end of the
tolerance interval to the output type; kernels with a deliberately wrong epilogue (truncation instead of
rounding, wrapping instead of saturating, a dropped bias or beta, the wrong GELU) must fail that check.  The
conversions themselves are checked bit for bit on the device; the native lowering is built for pvc and dg2.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import break_kernel, one_variant

from xegemm.config import ConfigError, config_from_text
from xegemm.epilogues.fixed import EpilogueSpec, reference_bounds
from xegemm.epilogues.registry import ACTIVATIONS
from xegemm.jobs.pipeline import run_variant
from xegemm.plan.planner import plan

FAST = "profile: {warmup: 1, repeats: 2}\n"
RAGGED = "problem: {m: 45, n: 70, k: 72, batch: 2}\n"
SG16 = "tile: {workgroup: [32, 64, 32], subgroups: [2, 2], subgroup_size: 16}\n"
SG8 = "tile: {workgroup: [16, 32, 32], subgroups: [2, 2], subgroup_size: 8}\n"
INT16 = "tile: {workgroup: [32, 64, 64], subgroups: [2, 2], subgroup_size: 16}\n"   # DPAS k = 32 for 8-bit
INT4 = INT16 + "layout: {b: col}\n"     # DPAS k = 64 for 4-bit

CASES = {
    "f32_alpha_beta_biasrow_relu": SG16 + "epilogue: {alpha: 0.75, beta: -1.25, bias: row, activation: relu}\n",
    "bf16_out_beta_biascol_gelu_tanh": SG16 + "types: {c: bf16}\n"
                                      "epilogue: {beta: 0.5, bias: col, activation: gelu_tanh}\n",
    "f16_out_alpha_gelu_erf": SG16 + "types: {a: f16, b: f16, c: f16}\nepilogue: {alpha: 3, activation: gelu_erf}\n",
    "f16_out_beta": SG16 + "types: {c: f16}\nepilogue: {beta: -0.5}\n",
    "s8_out_beta_biasrow": INT16 + "types: {a: s8, b: u8, acc: s32, c: s8}\nepilogue: {alpha: 0.05, beta: 2, bias: row}\n",
    "f32_silu": SG16 + "epilogue: {activation: silu}\n",
    "bf16_out_clamp": SG16 + "types: {c: bf16}\nepilogue: {activation: clamp, clamp: [-0.5, 0.25]}\n",
    "bf16_out_plain": SG16 + "types: {c: bf16}\n",
    "s8_to_s8_saturating_relu": INT16 + "types: {a: s8, b: s8, acc: s32, c: s8}\n"
                                "epilogue: {activation: relu}\n",
    "u8_to_u8_alpha_beta": INT16 + "types: {a: u8, b: s8, acc: s32, c: u8}\n"
                           "epilogue: {alpha: 0.01, beta: 0.5}\n",
    "s32_biascol": INT16 + "types: {a: s8, b: u8, acc: s32, c: s32}\n"
                   "epilogue: {bias: col}\n",
    "f16_acc_to_f32_beta": SG16 + "types: {a: f16, b: f16, acc: f16, c: f32}\nepilogue: {beta: 1}\n",
    "bf16_acc_alpha": SG16 + "types: {acc: bf16, c: bf16}\nepilogue: {alpha: -2}\n",
    "col_major_b_biasrow": SG16 + "layout: {b: col}\ntypes: {c: bf16}\nepilogue: {bias: row, beta: 2}\n",
    "sg8_bf16_out_beta_biasrow": SG8 + "types: {c: bf16}\nepilogue: {beta: 0.25, bias: row, activation: silu}\n",
    "sg8_s8_out": SG8 + "types: {a: s8, b: s8, acc: s32, c: s8}\n",
    "s4_to_s8_saturating_relu": INT4 + "types: {a: s4, b: s4, acc: s32, c: s8}\nepilogue: {activation: relu}\n",
    "u4_s4_to_u8_alpha_beta": INT4 + "types: {a: u4, b: s4, acc: s32, c: u8}\nepilogue: {alpha: 0.01, beta: 0.5}\n",
}


def _variant(text: str):
    return one_variant(RAGGED + text + FAST)


@pytest.mark.device
@pytest.mark.parametrize("name", sorted(CASES))
def test_epilogue_verifies_on_the_device(name, session):
    res = run_variant(_variant(CASES[name]), session)
    assert res.status == "ok", res.reason
    assert res.bad_elements == 0


MUTANTS = {
    # the case, what the broken kernel does instead, (text in the kernel, its replacement)
    "truncate instead of rounding to nearest even": (
        "bf16_out_plain", ("(u + 0x7fffu + ((u >> 16) & 1u)) >> 16", "u >> 16")),
    "wrap instead of saturating": ("s8_to_s8_saturating_relu", ("convert_char_sat(", "convert_char(")),
    "bias dropped": ("f32_alpha_beta_biasrow_relu", ("? bias[", "? 0.0f * bias[")),
    "beta * C dropped": ("bf16_out_beta_biascol_gelu_tanh", ("beta * ", "0.0f * ")),
    "alpha dropped": ("bf16_acc_alpha", ("alpha * ", "")),
    "GELU with tanh in place of erf": ("f16_out_alpha_gelu_erf", ("+ erf(", "+ tanh(")),
    "C read from the wrong row": ("col_major_b_biasrow", ("M, ldc, n0 + xe_tc, m0 + xe_tr);", "M, ldc, n0 + xe_tc, m0 + xe_tr + 1);")),
}


@pytest.mark.device
@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_wrong_epilogue_fails_verification(mutant, session, monkeypatch):
    case, (old, new) = MUTANTS[mutant]
    break_kernel(monkeypatch, old, new)
    res = run_variant(_variant(CASES[case]), session)
    assert res.status == "failed_verify", f"{mutant}: {res.status} {res.reason}"


# ---- the conversions, bit for bit on the device ----------------------------------------------------------

SPECIAL = np.array([0.0, -0.0, 1.0, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 1.0 + 2 ** -9, -(1.0 + 2 ** -8),
                    1.0 + 2 ** -11, 1.0 + 3 * 2 ** -11, 65504.0, 65520.0, 1e5, 3.4e38, 1e-40, 6e-8, 3e-8,
                    np.inf, -np.inf, np.nan], dtype=np.float32)


def _rounding_edges() -> np.ndarray:
    """f32 bit patterns at every rounding edge of f16 and bf16: for each exponent from f32's subnormals to its
    infinity and each bit position an f16 (normal or subnormal) or bf16 rounds at, the ties and their
    neighbours, with the kept bit even and odd, both signs; then NaNs with and without payload."""
    rng = np.random.default_rng(5)
    exponents = np.arange(0, 256, dtype=np.uint32)
    positions = np.arange(12, 26, dtype=np.uint32)          # f16 normals round at bit 13, subnormals up to 24
    positions = np.concatenate([positions, [16]])            # bf16
    low = (np.uint32(1) << (positions - 1))[:, None] + np.array([-1, 0, 1], dtype=np.int64)[None, :]
    low = low.astype(np.uint32).reshape(-1)
    odd = np.concatenate([np.zeros_like(low), (np.uint32(1) << np.repeat(positions, 3)).astype(np.uint32)])
    low = np.concatenate([low, low]) | odd
    high = rng.integers(0, 1 << 23, size=(exponents.size, 2), dtype=np.uint32)
    mant = (high[:, :, None] & ~np.uint32((1 << 26) - 1) & 0x7FFFFF) | low[None, None, :]
    x = (exponents[:, None, None] << 23) | (mant & 0x7FFFFF)
    x = np.concatenate([x.reshape(-1), rng.integers(0, 1 << 32, 4096, dtype=np.uint64).astype(np.uint32),
                        np.array([0x7F800001, 0x7FC00000, 0x7FBFFFFF, 0x7F802000, 0x7FFFFFFF], np.uint32)])
    return np.concatenate([x, x | np.uint32(0x80000000), SPECIAL.view(np.uint32)])


@pytest.mark.device
def test_conversions_round_to_nearest_even_bit_for_bit(sycl_device):
    """Both lowerings' f16 conversions (the portable integer ones, the native lowering's vstore_half_rte and
    vload_half) and bf16's, on the device, against each other and numpy: every f16 pattern, and f32 patterns at
    every rounding edge (``python -m bench.conversions`` runs all 2^32)."""
    from bench.conversions import Converter, f16_mismatches, f32_mismatches
    converter = Converter(sycl_device)
    x = _rounding_edges()
    failures = {**f32_mismatches(x, *converter.f32(x)), **f16_mismatches(*converter.f16())}
    assert x.size > 20000
    assert {name: x[bad][:4].tolist() if bad.size == x.size else np.flatnonzero(bad)[:4].tolist()
            for name, bad in failures.items() if bad.any()} == {}


# ---- the reference and its bounds -------------------------------------------------------------------------

def _spec(**kw):
    base = dict(alpha=1.0, beta=0.0, bias="none", activation="none", clamp=(0.0, 6.0), acc="f32", out="f32")
    return EpilogueSpec(**{**base, **kw})


def test_bounds_pin_round_to_nearest_even():
    d = 2.0 ** -12      # far more than the f32 compute error, far less than a bf16 unit (2^-7 at 1)
    acc = np.array([[[1.0 + 2 ** -8 + d, 1.0 + 2 ** -8 - d, 1.0 + 3 * 2 ** -8 - d]]])
    b = reference_bounds(_spec(out="bf16"), acc, 0.0, None, None)
    # off the ties a single value is allowed: the nearest; truncation would give 1.0 for the first and third
    assert b.expected.tolist() == [[[1.0 + 2 ** -7, 1.0, 1.0 + 2 ** -7]]]
    assert np.array_equal(b.low, b.expected) and np.array_equal(b.high, b.expected)
    # at a tie with an exact accumulator D = acc computes nothing that rounds: only the even neighbour is allowed;
    # within the accumulator's error of a tie either neighbour is, the even one expected
    exact = reference_bounds(_spec(out="bf16"), np.array([[[1.0 + 2 ** -8]]]), 0.0, None, None)
    assert (exact.low.item(), exact.expected.item(), exact.high.item()) == (1.0, 1.0, 1.0)
    tie = reference_bounds(_spec(out="bf16"), np.array([[[1.0 + 2 ** -8]]]), 2.0 ** -20, None, None)
    assert (tie.low.item(), tie.expected.item(), tie.high.item()) == (1.0, 1.0, 1.0 + 2 ** -7)


def test_bounds_saturate_integers_and_keep_exact_path_exact():
    acc = np.array([[[-300, -5, 0, 7, 200]]], dtype=np.int64)
    relu = reference_bounds(_spec(acc="s32", out="s8", activation="relu"), acc, 0.0, None, None)
    assert relu.expected.tolist() == [[[0, 0, 0, 7, 127]]]
    assert np.array_equal(relu.low, relu.high)
    u8 = reference_bounds(_spec(acc="s32", out="u8", alpha=0.5), acc, 0.0, None, None)
    assert u8.expected.tolist() == [[[0, 0, 0, 4, 100]]]     # 3.5 -> 4 (to even), saturated at 0


def test_bounds_widen_with_the_accumulator_tolerance_and_the_activation():
    acc = np.full((1, 1, 1), 0.3)
    tight = reference_bounds(_spec(), acc, 0.0, None, None)
    loose = reference_bounds(_spec(activation="gelu_erf"), acc, 1e-3, None, None)
    assert tight.high[0, 0, 0] - tight.low[0, 0, 0] < 1e-6
    assert loose.high[0, 0, 0] - loose.low[0, 0, 0] > 2 * 1e-3 * 0.5


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_references_match_their_definitions(name):
    x = np.linspace(-4, 4, 33)
    y = ACTIVATIONS[name].reference(x, -1.0, 2.0)
    from math import erf, exp, tanh, pi, sqrt
    want = {"none": lambda v: v, "relu": lambda v: max(v, 0.0), "clamp": lambda v: min(max(v, -1.0), 2.0),
            "gelu_erf": lambda v: 0.5 * v * (1 + erf(v / sqrt(2))),
            "gelu_tanh": lambda v: 0.5 * v * (1 + tanh(sqrt(2 / pi) * (v + 0.044715 * v ** 3))),
            "silu": lambda v: v / (1 + exp(-v))}[name]
    assert np.allclose(y, [want(v) for v in x], rtol=1e-12, atol=1e-12)
    slopes = np.abs(np.diff(ACTIVATIONS[name].reference(np.linspace(-8, 8, 4001), -1.0, 2.0))) / (16 / 4000)
    assert slopes.max() <= ACTIVATIONS[name].lipschitz * (1 + 1e-9)


# ---- config, plan and names --------------------------------------------------------------------------------

def _plan(text: str):
    return plan(config_from_text("problem: {m: 64, n: 64, k: 64}\n" + SG16 + text))


def test_kernel_name_encodes_the_epilogue():
    plain = _plan("")
    assert not plain.name.endswith(("_relu", "_beta"))
    full = _plan("types: {c: bf16}\nepilogue: {alpha: 2, beta: 1, bias: row, activation: gelu}\n")
    assert full.name.endswith("_alpha_beta_biasrow_gelu_erf")
    assert "_f32_bf16_" in full.name
    assert full.c_in is not None and full.c_in.name == "XE_2D_U16x8x16_LD_N"
    assert _plan("epilogue: {beta: 0}\n").c_in is None          # beta = 0 reads nothing
    # reports and profiler CSVs tell the variants apart by it
    from xegemm.evaluate import params_of
    from xegemm.library.record import tile_label
    params = params_of(full.config)
    assert params["epilogue"] == "alpha_beta_biasrow_gelu_erf" and params_of(plain.config)["epilogue"] == "none"
    assert tile_label(params).endswith(" alpha_beta_biasrow_gelu_erf")


def test_kernel_comment_describes_the_epilogue():
    from xegemm.kernel.render import render_kernel
    src = render_kernel(plan(config_from_text("problem: {m: 64, n: 64, k: 64}\n" + INT16
                                              + "types: {a: s8, b: s8, acc: s32, c: u8}\n")))
    assert "D = acc, computed in s32 (exact), converted to u8 (saturating)" in src
    assert "convert_uchar_sat(" in src


@pytest.mark.parametrize("text, message", [
    ("epilogue: {activation: softmax}\n", "unknown activation 'softmax'"),
    ("epilogue: {bias: diagonal}\n", "unknown bias 'diagonal'"),
    ("epilogue: {alpha: .nan}\n", "expected a finite number"),
    ("epilogue: {clamp: [2, 1]}\n", "low <= high"),
    ("types: {c: s4}\n", "unknown C data type 's4'"),
    ("epilogue: {apha: 2}\n", "did you mean 'alpha'"),
])
def test_bad_epilogue_config_names_the_key(text, message):
    with pytest.raises(ConfigError) as err:
        config_from_text("problem: {m: 64, n: 64, k: 64}\n" + text)
    assert message in str(err.value) and "epilogue" in str(err.value) or "types.c" in str(err.value)


# ---- the native lowering, built ahead of time ---------------------------------------------------------------

@pytest.mark.ocloc
@pytest.mark.parametrize("target, tile", [("pvc", SG16), ("dg2", SG8)])
def test_native_epilogue_builds_with_the_predicted_messages(target, tile, tmp_path):
    from xegemm.jobs.pipeline import build_config
    path = tmp_path / "ep.yaml"
    path.write_text("problem: {m: 64, n: 64, k: 64, batch: 2}\n" + tile +
                    "sweep:\n  types: [{c: bf16}, {c: f32}, {a: s8, b: s8, acc: s32, c: s8}]\n"
                    "  epilogue: [{beta: 0.5, bias: col, activation: gelu_tanh}, {alpha: 2}]\n"
                    "constraints: [\"types.a != 's8' or tile.workgroup[2] % 32 == 0\"]\n")
    result = build_config(path, target=target, out_dir=tmp_path / "out")
    assert result["variants"]
    for v in result["variants"]:
        assert v["status"] == "ok", (v["name"], v["reason"])
        assert v["isa"]["spill_bytes"] == 0
    # an f32 C read: Debian's IGC has no 32-bit plain 2D read, so C is read by 1D sub-group block reads of its
    # rows (the same lane map); a compiler with the 2D read uses that
    if target == "pvc":
        (f32,) = [v for v in result["variants"] if "_f32_f32_" in v["name"] and "_beta" in v["name"]]
        source = (tmp_path / "out" / f32["name"] / "kernel.cl").read_text()
        rows_1d = "= xe_copy_1d_u32x8x16_ld_sg16(Cin," in source
        assert rows_1d or "= xe_copy_u32x8x16_ld_n(Cin," in source
        assert rows_1d == ("igc-1.0.12504" in result["capabilities"])
