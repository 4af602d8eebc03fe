"""The coopmat lowering (xegemm.lowering.coopmat, xegemm.runtime.spirv): SPIR-V cooperative-matrix GEMM kernels
rendered from a plan, assembled, built in a child process and then here, run on the Intel OpenCL CPU runtime
(Intel AMX) and verified element by element against numpy with xegemm.verify.dense's tolerance; mutants must fail."""

from __future__ import annotations

import numpy as np
import pytest

from xegemm.config import config_from_text
from xegemm.errors import PlanRejected
from xegemm.lowering import Lowering
from xegemm.lowering.coopmat import coopmat_kernel, kernel_arguments, pack_b, plan_violation, render_kernel
from xegemm.plan.planner import plan
from xegemm.runtime.spirv import (amx_target, assemble, build_in_child, build_spirv, prepare_environment,
                                  probe_coopmat, validate)
from xegemm.verify.dense import check, make_operands, poison_c, reference

READY = prepare_environment()     # before the CPU runtime starts: CL_CONFIG_CPU_TARGET_ARCH with AMX

SHAPES = {   # name: (types, problem, tile)
    "bf16_64": ("{a: bf16, b: bf16, acc: f32, c: f32}", "{m: 64, n: 64, k: 64}", "[64, 64, 32], subgroups: [2, 2]"),
    "bf16_ragged": ("{a: bf16, b: bf16, acc: f32, c: f32}", "{m: 77, n: 45, k: 70}", "[64, 32, 32], subgroups: [2, 1]"),
    "bf16_odd_k_batch": ("{a: bf16, b: bf16, acc: f32, c: f32}", "{m: 33, n: 50, k: 17, batch: 2}",
                         "[16, 32, 16], subgroups: [1, 2]"),
    "bf16_8row_tiles": ("{a: bf16, b: bf16, acc: f32, c: f32}", "{m: 40, n: 48, k: 96}", "[8, 48, 32], subgroups: [1, 1]"),
    "s8_64": ("{a: s8, b: s8, acc: s32, c: s32}", "{m: 64, n: 64, k: 128}", "[32, 32, 64], subgroups: [1, 2]"),
    "s8_ragged": ("{a: s8, b: s8, acc: s32, c: s32}", "{m: 50, n: 33, k: 99}", "[32, 32, 64], subgroups: [2, 1]"),
    "u8_ragged": ("{a: u8, b: u8, acc: s32, c: s32}", "{m: 20, n: 30, k: 70}", "[16, 16, 32], subgroups: [1, 1]"),
}
EPILOGUES = {"plain": "", "alpha_beta": "epilogue: {alpha: 0.5, beta: -1.5}\n"}


def _config(name: str, epilogue: str = ""):
    types, problem, tile = SHAPES[name]
    return config_from_text(f"problem: {problem}\ntypes: {types}\ntile: {{workgroup: {tile}, subgroup_size: 16}}\n"
                            + epilogue)


@pytest.fixture(scope="module")
def cpu_queue(sycl_device):
    if amx_target() is None:
        pytest.skip("this CPU has no AMX (amx_tile, amx_bf16, amx_int8): the Intel CPU runtime refuses cooperative "
                    "matrices without it")
    if READY:
        pytest.skip(f"cannot build cooperative matrices in this process: {READY}")
    from xegemm.runtime.opencl import OpenCLQueue
    if sycl_device.device_type.name != "cpu":
        pytest.skip(f"the coopmat tests run on the Intel OpenCL CPU runtime, not {sycl_device.name}")
    queue = OpenCLQueue(sycl_device)
    probe = probe_coopmat(queue)
    if not probe.runs:
        pytest.skip(f"{sycl_device.name} does not run the coopmat lowering: {probe.reason}")
    return queue


def _run(queue, config, text: str, b_storage=None):
    """Run a rendered kernel on the config's problem; the verdict of xegemm.verify.dense."""
    from xegemm.runtime.opencl import OpenCLBuffer

    p, t = config.problem, config.types
    ops = make_operands(config)
    k = coopmat_kernel(plan(config))
    b = pack_b(ops.b_bytes, p.k, p.n, t.a) if b_storage is None else b_storage(ops)
    c_raw = poison_c(config)
    bufs = {}
    for key, data in (("A", ops.a_bytes), ("B", b), ("D", c_raw),
                      ("C", ops.c_in_bytes if ops.c_in_bytes is not None else np.zeros(4, np.uint8)),
                      ("bias", np.zeros(4, np.uint8))):
        data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        bufs[key] = OpenCLBuffer(queue, data.nbytes)
        bufs[key].copy_from_host(data)
    program = build_spirv(text, queue)
    e = config.epilogue
    args = kernel_arguments(p.m, p.n, p.k, p.batch, t.a, bufs, e.alpha, e.beta)
    program.get_sycl_kernel(k.name).launch(queue, args, k.global_size(p.m, p.n, p.batch), k.local).wait()
    return check(config, bufs["D"].copy_to_host(), reference(config, ops))


@pytest.mark.parametrize("epilogue", sorted(EPILOGUES))
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_coopmat_gemm_verifies_on_the_cpu(name, epilogue, cpu_queue):
    config = _config(name, EPILOGUES[epilogue])
    verdict = _run(cpu_queue, config, render_kernel(coopmat_kernel(plan(config))))
    assert verdict.ok, verdict.reason


MUTANTS = {   # rendered-text edits that must break the result: (shape, old, new)
    "vnni_factor_1": ("bf16_ragged", "%c_v = OpConstant %u32 2", "%c_v = OpConstant %u32 1"),
    "second_a_tile_at_the_first": ("bf16_64", "%c_ti1 = OpConstant %u64 16", "%c_ti1 = OpConstant %u64 0"),
    "local_b_stride_one_tile": ("s8_ragged", "%l_brow64 = OpConstant %u64 128", "%l_brow64 = OpConstant %u64 64"),
    "epilogue_column_stride": ("bf16_ragged", "%e_ro = OpIMul %u64 %e_gm64 %ldc_e", "%e_ro = OpIMul %u64 %e_gm64 %lda_e"),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_broken_kernel_fails_verification(mutant, cpu_queue):
    name, old, new = MUTANTS[mutant]
    config = _config(name, EPILOGUES["alpha_beta"])
    text = render_kernel(coopmat_kernel(plan(config)))
    assert old in text, "the mutant no longer applies"
    verdict = _run(cpu_queue, config, text.replace(old, new))
    assert not verdict.ok


def test_b_not_vnni_packed_fails_verification(cpu_queue):
    config = _config("bf16_64")
    verdict = _run(cpu_queue, config, render_kernel(coopmat_kernel(plan(config))),
                   b_storage=lambda ops: ops.b_bytes)          # row-major B where the kernel reads PackedINTEL
    assert not verdict.ok


def test_row_major_b_layout_does_not_build_and_cannot_hurt_the_caller(cpu_queue):
    """B declared RowMajor: the CPU runtime aborts its compiler (measured); the child process takes the blow."""
    k = coopmat_kernel(plan(_config("bf16_64")))
    text = render_kernel(type(k)(**{**k.__dict__, "b_layout": 0}))
    child = build_in_child(assemble(text), cpu_queue.sycl_device.filter_string)
    assert not child.ok and child.reason


def test_pack_b_is_the_documented_vnni_layout():
    rng = np.random.default_rng(0)
    b = rng.integers(0, 255, (1, 5, 3)).astype(np.uint8)          # K=5, N=3 of one-byte elements, v = 4
    packed = pack_b(b, 5, 3, "s8")
    assert packed.shape == (1, 2, 12)
    for r in range(2):
        for c in range(3):
            for i in range(4):
                want = b[0, 4 * r + i, c] if 4 * r + i < 5 else 0
                assert packed[0, r, 4 * c + i] == want


def test_tiles_and_rejections():
    k = coopmat_kernel(plan(_config("bf16_64")))
    assert (k.tm, k.tn, k.tk, k.mt, k.nt, k.v) == (16, 16, 32, 2, 2, 2)
    assert coopmat_kernel(plan(_config("s8_64"))).tk == 64
    assert coopmat_kernel(plan(_config("bf16_8row_tiles"))).tm == 8
    assert Lowering("coopmat").name == "coopmat"
    f16 = config_from_text("problem: {m: 64, n: 64, k: 64}\ntypes: {a: f16, b: f16, acc: f32, c: f32}\n"
                           "tile: {workgroup: [64, 64, 32], subgroups: [2, 2], subgroup_size: 16}\n")
    assert "bf16" in plan_violation(plan(f16))
    col = config_from_text("problem: {m: 64, n: 64, k: 64}\nlayout: {a: col}\n"
                           "tile: {workgroup: [64, 64, 32], subgroups: [2, 2], subgroup_size: 16}\n")
    with pytest.raises(PlanRejected, match="row-major"):
        coopmat_kernel(plan(col))


def test_spirv_val_judges_the_khr_parts_and_says_when_it_cannot():
    s8 = validate(assemble(render_kernel(coopmat_kernel(plan(_config("s8_ragged"))))))
    assert s8.ok is True, s8.message
    bf16 = validate(assemble(render_kernel(coopmat_kernel(plan(_config("bf16_64"))))))
    assert bf16.ok is None and "6437" in bf16.message
