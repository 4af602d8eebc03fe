"""The coopmat lowering's B packer (xegemm.lowering.coopmat_pack, run by xegemm.runtime.b_packer): B as the caller
or the checkpoint stores it, packed (and a quantized B dequantized into bf16) on the device, compared byte for byte
with the numpy packing (xegemm.lowering.coopmat.pack_b over xegemm.quant's dequantization) on ragged, batched
shapes; and an FP8 A (W8A8) dequantized into row-major bf16 by the A dequantizer, against xegemm.quant's codec.
The packers are OpenCL C: they run on every CPU, with or without AMX; broken packers must differ."""

from __future__ import annotations

import numpy as np
import pytest

from xegemm.config import config_from_text
from xegemm.lowering import Lowering
from xegemm.lowering.coopmat import dequantized_b, pack_b
from xegemm.plan.planner import plan
from xegemm.quant import compute_type, dequantize, operand_spec
from xegemm.quant.codec import QuantizedMatrix
from xegemm.quant.formats import FORMATS
from xegemm.runtime.b_packer import DeviceAPacker, DevicePacker
from xegemm.runtime.program import from_device, to_device
from xegemm.verify.dense import make_operands

BF16 = "{a: bf16, b: bf16, acc: f32, c: f32}"
CASES = {   # name: (types, quant section or None, layout section)
    "gptq_g32": ("{a: bf16, b: u4, acc: f32, c: bf16}", "{format: gptq, group: 32, scale: f16, zero: u4}", "{}"),
    "gptq_8bit_channel": ("{a: bf16, b: u8, acc: f32, c: bf16}", "{format: gptq, group: channel, scale: f16, zero: u8}",
                          "{}"),
    "awq_g32": ("{a: bf16, b: u4, acc: f32, c: bf16}", "{format: awq, group: 32, scale: f16, zero: u4}", "{}"),
    "plain_u4_g32_bf16": ("{a: bf16, b: u4, acc: f32, c: bf16}", "{format: plain, group: 32, scale: bf16, zero: u4}",
                          "{}"),
    "plain_u4_f16_zeros_nk": ("{a: bf16, b: u4, acc: f32, c: bf16}",
                              "{format: plain, group: 32, scale: f16, zero: f16, scale_layout: nk}", "{}"),
    "plain_s4_col": ("{a: bf16, b: s4, acc: f32, c: bf16}", "{format: plain, group: 32, scale: bf16}", "{b: col}"),
    "plain_s8_channel": ("{a: bf16, b: s8, acc: f32, c: bf16}", "{format: plain, group: channel, scale: bf16}", "{}"),
    "fp8_channel_nk": ("{a: bf16, b: e4m3, acc: f32, c: bf16}",
                       "{format: plain, group: channel, scale: f32, scale_layout: nk}", "{b: col}"),
    "fp8_tensor": ("{a: bf16, b: e5m2, acc: f32, c: bf16}", "{format: plain, group: tensor, scale: f32}", "{b: col}"),
    "fp8_block128_nk": ("{a: bf16, b: e4m3, acc: f32, c: bf16}",
                        "{format: plain, group: block128, scale: f32, scale_layout: nk}", "{b: col}"),
    "mxfp4_nk": ("{a: bf16, b: e2m1, acc: f32, c: bf16}", "{format: mx, group: 32, scale: e8m0, scale_layout: nk}",
                 "{b: col}"),
    # f16 activations: dequantized into f16 (what GPU builds multiply; the CPU runtime's AMX has no f16)
    "gptq_g32_f16": ("{a: f16, b: u4, acc: f32, c: f16}", "{format: gptq, group: 32, scale: f16, zero: u4}", "{}"),
    "fp8_channel_nk_f16": ("{a: f16, b: e4m3, acc: f32, c: f16}",
                           "{format: plain, group: channel, scale: f32, scale_layout: nk}", "{b: col}"),
    "bf16_row": (BF16, None, "{}"),
    "bf16_col": (BF16, None, "{b: col}"),
    "s8_col": ("{a: s8, b: s8, acc: s32, c: s32}", None, "{b: col}"),
    "u8_row": ("{a: u8, b: u8, acc: s32, c: s32}", None, "{}"),
}


def _config(name: str, k: int = 160, n: int = 48):
    types, quant, layout = CASES[name]
    return config_from_text(f"problem: {{m: 5, n: {n}, k: {k}, batch: 2}}\ntypes: {types}\nlayout: {layout}\n"
                            + (f"quant: {quant}\n" if quant else "")
                            + "tile: {workgroup: [16, 32, 32], subgroups: [1, 2], subgroup_size: 16}\n")


def _packed(queue, config, packer: DevicePacker):
    """(the device packer's output, numpy's) for the config's operands."""
    p, ops = config.problem, make_operands(config)
    pl = packer.plan
    if pl.quant:
        want = pack_b(dequantized_b(config, ops.b_bytes, ops.quant, p.k, p.n), p.k, p.n,
                      compute_type(config.types))
    else:
        want = pack_b(ops.b_bytes, p.k, p.n, config.types.b, config.layout.b)
    assert packer.packed_bytes(p.k, p.n) * p.batch == want.nbytes
    assert packer.stored_bytes(p.k, p.n)["B"] * p.batch == ops.b_bytes.nbytes
    quant, nothing = ops.quant or {}, np.zeros(4, np.uint8)
    out = to_device(queue, np.full(want.nbytes, 0xA5, np.uint8))     # poisoned: every word must be written
    buffers = {"stored": to_device(queue, ops.b_bytes), "packed": out,
               **{name: to_device(queue, nothing if quant.get(name) is None else quant[name])
                  for name in ("scales", "zeros")}}
    packer.run(queue, buffers, p.k, p.n, p.batch).wait()
    return from_device(out, np.uint8, want.shape), want


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_device_packer_matches_numpy_byte_for_byte(name, queue):
    config = _config(name)
    got, want = _packed(queue, config, DevicePacker(plan(config)))
    assert np.array_equal(got, want), f"{np.count_nonzero(got != want)} of {got.size} bytes differ"


@pytest.mark.parametrize("name, k", [("bf16_row", 17), ("s8_col", 99), ("u8_row", 70)])
def test_k_not_a_multiple_of_v_is_padded_with_zero_rows(name, k, queue):
    config = _config(name, k=k, n=30)
    got, want = _packed(queue, config, DevicePacker(plan(config)))
    assert np.array_equal(got, want)


BROKEN = {   # name: (case, old text of the packer, new): each must change the packed bytes
    "nibble order": ("gptq_g32", "xe_q_code(unit, (uint)(k % 8))", "xe_q_code(unit, (uint)(7 - k % 8))"),
    "awq order ignored": ("awq_g32", "xe_q_code(unit, (uint)((((n) & 7) >> 1) + (((n) & 1) << 2)))",
                          "xe_q_code(unit, (uint)(n % 8))"),
    "scale of the wrong group": ("plain_u4_g32_bf16", "const int row = k / 32;", "const int row = k / 64;"),
    "zero point lost": ("gptq_g32", "xe_dequant_b(xe_q_code(unit, (uint)(k % 8)), ",
                        "xe_dequant_b(xe_q_code(unit, (uint)(k % 8)), 8 + 0 * "),
    "vnni order swapped": ("bf16_col", "<< (16 * i)", "<< (16 * (1 - i))"),
    "columns for rows": ("s8_col", "(size_t)n * K + k", "(size_t)k * N + n"),
    "f16 stored as bf16 bits": ("gptq_g32_f16", "return (uint)xe_f32_to_f16_rne(v);", "return as_uint(v) >> 16;"),
}


@pytest.mark.parametrize("mutant", sorted(BROKEN))
def test_a_broken_packer_differs_from_numpy(mutant, queue):
    case, old, new = BROKEN[mutant]
    config = _config(case)
    packer = DevicePacker(plan(config))
    assert old in packer.source, "the mutant no longer applies"
    packer.source = packer.source.replace(old, new)
    got, want = _packed(queue, config, packer)
    assert not np.array_equal(got, want)


# ---- an FP8 A (W8A8), dequantized into row-major bf16 ---------------------------------------------------------

A_CASES = {   # name: (A's layout, quant_a section)
    "per_token_group_nk": ("row", "{format: plain, group: 128, scale: f32, scale_layout: nk}"),
    "per_tensor": ("row", "{format: plain, group: tensor, scale: f32}"),
    "column_major_e5m2_channel": ("col", "{format: plain, group: channel, scale: f32, scale_layout: nk}"),
}


def _a_config(name: str):
    layout, quant_a = A_CASES[name]
    weight = "e5m2" if "e5m2" in name else "e4m3"
    return config_from_text(f"problem: {{m: 37, n: 48, k: 300, batch: 2}}\n"
                            f"types: {{a: {weight}, b: e4m3, c: bf16, compute: bf16}}\nlayout: {{a: {layout}, b: col}}\n"
                            "quant: {format: plain, group: block128, scale: f32, scale_layout: nk}\n"
                            f"quant_a: {quant_a}\n"
                            "tile: {workgroup: [16, 64, 64], subgroups: [1, 2], subgroup_size: 16}\n")


def _dequantized_a(queue, config, packer: DeviceAPacker):
    """(the device's dequantized A, xegemm.quant.dequantize's), both batch x M x K bf16 bits."""
    p, ops = config.problem, make_operands(config)
    spec = operand_spec(config, "a")
    want = FORMATS[spec.format].arrays(spec, p.k, p.m)
    size = {name: int(np.prod(w.shape)) * np.dtype(w.dtype).itemsize for name, w in want.items()}
    assert packer.stored_bytes(p.m, p.k)["A"] * p.batch == ops.a_bytes.nbytes
    sources = {"qweight": np.ascontiguousarray(ops.a_bytes).reshape(-1).view(np.uint8),
               "scales": np.ascontiguousarray(ops.quant["a_scales"]).reshape(-1).view(np.uint8)}
    expected = []
    for i in range(p.batch):
        arrays = {name: sources[name][i * size[name]:(i + 1) * size[name]].view(w.dtype).reshape(w.shape)
                  for name, w in want.items()}
        values = np.asarray(dequantize(QuantizedMatrix.from_arrays(spec, p.k, p.m, arrays, operand="a"), "bf16"))
        expected.append(np.ascontiguousarray(values).view(np.uint16))
    out = to_device(queue, np.full(packer.packed_bytes(p.m, p.k) * p.batch, 0xA5, np.uint8))
    packer.run(queue, {"stored": to_device(queue, ops.a_bytes), "scales": to_device(queue, ops.quant["a_scales"]),
                       "packed": out}, p.m, p.k, p.batch).wait()
    return from_device(out, np.uint16, (p.batch, p.m, p.k)), np.stack(expected)


@pytest.mark.parametrize("name", sorted(A_CASES))
def test_the_a_dequantizer_matches_the_codec_bit_for_bit(name, queue):
    config = _a_config(name)
    got, want = _dequantized_a(queue, config, DeviceAPacker(plan(config)))
    assert got.shape == want.shape and np.array_equal(got, want), f"{np.count_nonzero(got != want)} values differ"


@pytest.mark.parametrize("name, old, new", [("per_token_group_nk", "const int row = k / 128;", "const int row = 0;"),
                                            ("column_major_e5m2_channel", "(size_t)k * M + m", "(size_t)m * K + k")])
def test_a_broken_a_dequantizer_differs(name, old, new, queue):
    config = _a_config(name)
    packer = DeviceAPacker(plan(config))
    assert old in packer.source, "the mutant no longer applies"
    packer.source = packer.source.replace(old, new)
    got, want = _dequantized_a(queue, config, packer)
    assert not np.array_equal(got, want)


# ---- the packers on Intel GPUs: ordinary OpenCL C, built ahead of time ------------------------------------------

@pytest.mark.ocloc
@pytest.mark.parametrize("target", ["pvc", "bmg"])
def test_the_packers_build_for_xe_gpus_with_the_current_compiler(target, tmp_path):
    """The GPU side of the coopmat lowering's packers: GPTQ B packers into bf16 and f16, an FP8 block-scaled B packer
    and an FP8 A dequantizer built by the current compiler (ocloc 26.x) for pvc and bmg."""
    import subprocess

    from xegemm.aot.toolchain import current_ocloc
    from xegemm.runtime.b_packer import packers

    ocloc = current_ocloc()
    if ocloc is None:
        pytest.skip("the current Intel GPU compiler is not installed: run `sudo make ocloc-current`")
    sources = [DevicePacker(plan(_config("gptq_g32"))).source, DevicePacker(plan(_config("gptq_g32_f16"))).source]
    b, a = packers(plan(_a_config("per_token_group_nk")), Lowering("coopmat"))
    assert a is not None
    sources += [b.source, a.source]
    for i, source in enumerate(sources):
        path = tmp_path / f"p{i}.cl"
        path.write_text(source)
        done = subprocess.run([ocloc, "compile", "-file", str(path), "-device", target, "-output",
                               str(tmp_path / f"p{i}"), "-q"], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert any(tmp_path.glob(f"p{i}*.bin")), sorted(p.name for p in tmp_path.iterdir())
