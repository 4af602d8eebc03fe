"""The coopmat lowering (xegemm.lowering.coopmat, xegemm.runtime.spirv): SPIR-V cooperative-matrix GEMM kernels
rendered from a plan, assembled, built in a child process and then there, run on the Intel OpenCL CPU runtime
(Intel AMX) and verified element by element against numpy with xegemm.verify.dense's tolerance; mutants must fail.

The CPU runtime needs CL_CONFIG_CPU_TARGET_ARCH naming an AMX target before it starts, and that changes the code it
generates for every kernel.  This process (pytest's, shared with every other test file) is left alone: each kernel
of this file runs in a worker process that starts the runtime with the AMX target (a spawned process pool here,
the run's isolated device workers for ``xegemm run``, a subprocess for the call API).  The same cases run by the
reference interpreter, on every machine, are tests/test_coopmat_interpreted.py's."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from xegemm.config import config_from_text
from xegemm.errors import PlanRejected
from xegemm.lowering import Lowering
from xegemm.lowering.coopmat import (coopmat_kernel, dequantized_b, kernel_arguments, pack_b, plan_violation,
                                     render_kernel)
from xegemm.plan.planner import plan
from xegemm.runtime.cpu_path import TARGET_ARCH_VARIABLE
from xegemm.runtime.spirv import amx_target, assemble, build_in_child, prepare_environment, validate

ROOT = Path(__file__).resolve().parents[1]
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
# the fixed epilogue beyond alpha and beta, and D in other types than the accumulator's: (shape, types, epilogue);
# ragged shapes, so that the stores stay inside M x N and bias vectors are read at the right rows and columns
RAGGED_BF16 = ("{m: 77, n: 45, k: 70}", "[64, 32, 32], subgroups: [2, 1]")
RAGGED_S8 = ("{m: 50, n: 33, k: 99}", "[32, 32, 64], subgroups: [2, 1]")
FIXED = {
    "bf16_out_bias_row_gelu_tanh": (RAGGED_BF16, "{a: bf16, b: bf16, acc: f32, c: bf16}",
                                    "{alpha: 0.5, beta: -1.5, bias: row, activation: gelu_tanh}"),
    "f16_out_bias_col_silu": (RAGGED_BF16, "{a: bf16, b: bf16, acc: f32, c: f16}",
                              "{alpha: 0.25, beta: 2.0, bias: col, activation: silu}"),
    "f32_out_gelu_erf": (RAGGED_BF16, "{a: bf16, b: bf16, acc: f32, c: f32}", "{bias: row, activation: gelu_erf}"),
    "bf16_out_clamp_batch": (("{m: 33, n: 50, k: 17, batch: 2}", "[16, 32, 16], subgroups: [1, 2]"),
                             "{a: bf16, b: bf16, acc: f32, c: bf16}", "{activation: clamp, clamp: [-1.0, 2.5]}"),
    "s8_out_saturating": (RAGGED_S8, "{a: s8, b: s8, acc: s32, c: s8}", "{alpha: 0.05, bias: col}"),
    "s8_out_relu_exact": (RAGGED_S8, "{a: s8, b: s8, acc: s32, c: s8}", "{activation: relu}"),
    "u8_out_clamp": (("{m: 20, n: 30, k: 70}", "[16, 16, 32], subgroups: [1, 1]"), "{a: u8, b: u8, acc: s32, c: u8}",
                     "{alpha: 0.01, beta: 0.5, activation: clamp, clamp: [3.0, 200.0]}"),
    "s32_out_bias_relu": (RAGGED_S8, "{a: s8, b: s8, acc: s32, c: s32}", "{alpha: 0.5, bias: row, activation: relu}"),
}
LAYOUTS = {   # column-major operands: (shape, types, layout); A staged at every k-step, B packed from its layout
    "bf16_a_col": (RAGGED_BF16, "{a: bf16, b: bf16, acc: f32, c: f32}", "{a: col}"),
    "bf16_b_col": (RAGGED_BF16, "{a: bf16, b: bf16, acc: f32, c: f32}", "{b: col}"),
    "bf16_both_col_batch": (("{m: 33, n: 50, k: 17, batch: 2}", "[16, 32, 16], subgroups: [1, 2]"),
                            "{a: bf16, b: bf16, acc: f32, c: bf16}", "{a: col, b: col}"),
    "s8_a_col": (RAGGED_S8, "{a: s8, b: s8, acc: s32, c: s32}", "{a: col, b: col}"),
}


def _config(name: str, epilogue: str = ""):
    if name in QUANTIZED:
        (problem, tile), quant = QUANTIZED[name]
        return config_from_text(f"problem: {problem}\ntypes: {{a: bf16, b: u4, acc: f32, c: bf16}}\nquant: {quant}\n"
                                f"tile: {{workgroup: {tile}, subgroup_size: 16}}\nepilogue: {{bias: col}}\n")
    if name in LAYOUTS:
        (problem, tile), types, layout = LAYOUTS[name]
        return config_from_text(f"problem: {problem}\ntypes: {types}\ntile: {{workgroup: {tile}, subgroup_size: 16}}\n"
                                f"layout: {layout}\nepilogue: {{alpha: 0.5, beta: -1.5}}\n")
    if name in FIXED:
        (problem, tile), types, section = FIXED[name]
        return config_from_text(f"problem: {problem}\ntypes: {types}\ntile: {{workgroup: {tile}, subgroup_size: 16}}\n"
                                f"epilogue: {section}\n")
    types, problem, tile = {**SHAPES, **MODULE_ONLY}[name]
    return config_from_text(f"problem: {problem}\ntypes: {types}\ntile: {{workgroup: {tile}, subgroup_size: 16}}\n"
                            + epilogue)


def _queue():
    """The OpenCL CPU queue of a worker (the runtime started with the AMX target by prepare_environment)."""
    from xegemm.runtime import select_sycl_device
    from xegemm.runtime.opencl import OpenCLQueue
    return OpenCLQueue(select_sycl_device())


def _inputs(name: str, epilogue: str, edit: tuple[str, str] | None = None, b_storage: str = "packed",
            b_layout: int | None = None, family: str = "amx"):
    """The case's config, operands and kernel (rendered for the tile ``family``, with a text ``edit``, another B
    layout word), and its host buffers: B as ``b_storage`` says (``packed``; ``plain``: row-major where the kernel
    reads PackedINTEL; ``wrong_zeros``: a quantized B dequantized from zero points all 0)."""
    from xegemm.verify.dense import make_operands

    config = _config(name, EPILOGUES.get(epilogue, ""))
    ops = make_operands(config)
    k = coopmat_kernel(plan(config), family=family)
    if b_layout is not None:
        k = type(k)(**{**k.__dict__, "b_layout": b_layout})
    text = render_kernel(k)
    if edit is not None:
        assert edit[0] in text, "the mutant no longer applies"
        text = text.replace(*edit)
    if b_storage == "wrong_zeros":
        b = _packed_b(config, ops, {**ops.quant, "zeros": np.zeros_like(ops.quant["zeros"])})
    else:
        b = _packed_b(config, ops) if b_storage == "packed" else ops.b_bytes
    return config, ops, k, text, _host_buffers(config, ops, b)


def _packed_b(config, ops, quant: dict | None = None, k: int | None = None, n: int | None = None) -> np.ndarray:
    """B as the kernel reads it, by the numpy reference: VNNI-packed, a quantized B dequantized into A's type first
    (from ``quant``, the operands' own by default); K x N the problem's (a group's: ``k``, ``n``)."""
    k, n = k or config.problem.k, n or config.problem.n
    if config.quant.format != "none":
        return pack_b(dequantized_b(config, ops.b_bytes, quant or ops.quant, k, n), k, n, config.types.a)
    return pack_b(ops.b_bytes, k, n, config.types.a, config.layout.b)


def _host_buffers(config, ops, b: np.ndarray, traced: dict | None = None) -> dict:
    """The evaluator's buffers of the problem (xegemm.evaluate.device.host_arrays, a traced epilogue's
    ``traced_host_buffers``) as host bytes under xegemm.kernel.arguments.BUFFERS' names, B replaced by ``b``."""
    from xegemm.evaluate.device import device_buffers, host_arrays
    host = device_buffers({**host_arrays(config, ops), **(traced or {"named": {}, "aux_outputs": {}})}) | {"B": b}
    return {key: np.ascontiguousarray(data).reshape(-1).view(np.uint8).copy() for key, data in host.items()}


def _arguments(config, k, bufs) -> list:
    p, t, e = config.problem, config.types, config.epilogue
    return kernel_arguments(p.m, p.n, p.k, p.batch, t.a, bufs, e.alpha, e.beta, t.c, tuple(e.clamp), config.layout.a,
                            k.dequantized)


def _run(name: str, epilogue: str, edit: tuple[str, str] | None = None, b_storage: str = "packed",
         b_layout: int | None = None):
    """In a worker: the case of :func:`_inputs` run on the CPU runtime; (ok, reason)."""
    from xegemm.runtime.opencl import OpenCLBuffer
    from xegemm.runtime.spirv import build_spirv
    from xegemm.verify.dense import check, reference

    queue = _queue()
    config, ops, k, text, host = _inputs(name, epilogue, edit, b_storage, b_layout)
    bufs = {}
    for key, data in host.items():
        bufs[key] = OpenCLBuffer(queue, data.nbytes)
        bufs[key].copy_from_host(data)
    program = build_spirv(text, queue)
    p = config.problem
    program.get_sycl_kernel(k.name).launch(queue, _arguments(config, k, bufs), k.global_size(p.m, p.n, p.batch),
                                           k.local).wait()
    verdict = check(config, bufs["D"].copy_to_host(), reference(config, ops))
    return verdict.ok, verdict.reason


def _probe():
    from xegemm.runtime.spirv import in_process_ready, probe_coopmat
    why = in_process_ready()
    if why:
        return False, why
    probe = probe_coopmat(_queue())
    return probe.runs, probe.reason


@pytest.fixture(scope="module")
def amx_worker(sycl_device):
    """A worker process whose CPU runtime starts with the AMX target; skips with the reason where it cannot."""
    if amx_target() is None:
        pytest.skip("this CPU has no AMX (amx_tile, amx_bf16, amx_int8): the Intel CPU runtime refuses cooperative "
                    "matrices without it")
    if sycl_device.device_type.name != "cpu":
        pytest.skip(f"the coopmat tests run on the Intel OpenCL CPU runtime, not {sycl_device.name}")
    worker = _Worker()
    try:
        runs, reason = worker.submit(_probe)
        if not runs:
            pytest.skip(f"{sycl_device.name} does not run the coopmat lowering: {reason}")
        yield worker
    finally:
        worker.pool.shutdown(cancel_futures=True)


class _Worker:
    """One spawned process whose CPU runtime starts with the AMX target; started again after a kernel killed it
    (a broken kernel may write out of bounds and take its process down: that is its failure, not the suite's)."""

    def __init__(self):
        self.pool = self._start()

    @staticmethod
    def _start():
        return concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                      initializer=prepare_environment)

    def submit(self, fn, *args, **kwargs):
        try:
            return self.pool.submit(fn, *args, **kwargs).result(timeout=600)
        except concurrent.futures.process.BrokenProcessPool:
            self.pool.shutdown(cancel_futures=True)
            self.pool = self._start()
            raise


def _in_worker(worker, *args, **kwargs):
    return worker.submit(_run, *args, **kwargs)


@pytest.mark.parametrize("epilogue", sorted(EPILOGUES))
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_coopmat_gemm_verifies_on_the_cpu(name, epilogue, amx_worker):
    ok, reason = _in_worker(amx_worker, name, epilogue)
    assert ok, reason


@pytest.mark.parametrize("name", sorted(FIXED))
def test_the_fixed_epilogue_and_output_types_verify_on_the_cpu(name, amx_worker):
    """Bias rows and columns, the activations, D as bf16 / f16 (round to nearest even), s8 / u8 (saturating) and s32,
    the exact integer path: the element code of the OpenCL C lowerings compiled into the kernel's SPIR-V."""
    ok, reason = _in_worker(amx_worker, name, "fixed")
    assert ok, reason


QUANTIZED = {   # a 4-bit B dequantized into bf16 on the host before the multiply: (shape, quant section)
    "gptq_g128": (("{m: 37, n: 64, k: 256, batch: 2}", "[32, 32, 32], subgroups: [1, 2]"),
                  "{format: gptq, group: 128, scale: f16, zero: u4}"),
    "awq_g128": (("{m: 20, n: 48, k: 128}", "[16, 16, 32], subgroups: [1, 1]"),
                 "{format: awq, group: 128, scale: f16, zero: u4}"),
}


@pytest.mark.parametrize("name", sorted(QUANTIZED))
def test_a_quantized_b_dequantized_on_the_host_verifies(name, amx_worker):
    ok, reason = _in_worker(amx_worker, name, "quantized")
    assert ok, reason


def test_a_quantized_b_dequantized_with_its_zero_points_lost_fails_verification(amx_worker):
    ok, _ = _in_worker(amx_worker, "gptq_g128", "quantized", b_storage="wrong_zeros")
    assert not ok


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_column_major_operands_verify_on_the_cpu(name, amx_worker):
    ok, reason = _in_worker(amx_worker, name, "layouts")
    assert ok, reason


# the staged copy of a column-major A indexing it as row-major
A_COL_AS_ROW = ("%st_fa_ro = OpIMul %u64 %st_fa_gc64 %lda_e\n%st_fa_o = OpIAdd %u64 %st_fa_ro %st_fa_gr64",
                "%st_fa_ro = OpIMul %u64 %st_fa_gr64 %lda_e\n%st_fa_o = OpIAdd %u64 %st_fa_ro %st_fa_gc64")


def test_a_column_major_a_read_as_row_major_fails_verification(amx_worker):
    try:
        ok, _ = _in_worker(amx_worker, "bf16_a_col", "layouts", edit=A_COL_AS_ROW)
    except concurrent.futures.process.BrokenProcessPool:
        ok = False
    assert not ok


EPILOGUE_MUTANTS = {   # edits of the compiled epilogue that must break the result: (case, old, new)
    "bias_read_by_column": ("bf16_out_bias_row_gelu_tanh", "%bias %e_gm64", "%bias %e_gn64"),
    "bf16_truncated": ("bf16_out_bias_row_gelu_tanh", "%k32_7fff = OpConstant %u32 32767",
                       "%k32_7fff = OpConstant %u32 0"),
    "tanh_as_sinh": ("bf16_out_bias_row_gelu_tanh", "%ocl tanh", "%ocl sinh"),
    "s8_wraps": ("s8_out_saturating", "%kf_c3000000 = OpConstant %f32 -128.0", "%kf_c3000000 = OpConstant %f32 -1e9"),
    "clamp_bound_lost": ("u8_out_clamp", "%ocl fmin", "%ocl fmax"),
}


@pytest.mark.parametrize("mutant", sorted(EPILOGUE_MUTANTS))
def test_a_broken_epilogue_fails_verification(mutant, amx_worker):
    name, old, new = EPILOGUE_MUTANTS[mutant]
    try:
        ok, _ = _in_worker(amx_worker, name, "fixed", edit=(old, new))
    except concurrent.futures.process.BrokenProcessPool:
        ok = False
    assert not ok


MUTANTS = {   # rendered-text edits that must break the result: (shape, old, new)
    "vnni_factor_1": ("bf16_ragged", "%c_v = OpConstant %u32 2", "%c_v = OpConstant %u32 1"),
    "second_a_tile_at_the_first": ("bf16_64", "%c_ti1 = OpConstant %u64 16", "%c_ti1 = OpConstant %u64 0"),
    "local_b_stride_one_tile": ("s8_ragged", "%l_brow64 = OpConstant %u64 128", "%l_brow64 = OpConstant %u64 64"),
    "epilogue_column_stride": ("bf16_ragged", "%e_ro = OpIMul %u64 %e_gm64 %ldc_e", "%e_ro = OpIMul %u64 %e_gm64 %lda_e"),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_broken_kernel_fails_verification(mutant, amx_worker):
    name, old, new = MUTANTS[mutant]
    try:
        ok, _ = _in_worker(amx_worker, name, "alpha_beta", edit=(old, new))
    except concurrent.futures.process.BrokenProcessPool:
        ok = False          # the broken kernel wrote out of bounds and killed its process: detected as well
    assert not ok


def test_b_not_vnni_packed_fails_verification(amx_worker):
    ok, _ = _in_worker(amx_worker, "bf16_64", "plain", b_storage="plain")   # row-major B read as PackedINTEL
    assert not ok


# Cases only the reference interpreter runs (tests/test_coopmat_interpreted.py): (types, problem, tile).  The
# GPU-only types (the CPU runtime has no f16 without AMX-FP16, and no tf32), the mixed signs, and the one k-tile the
# CPU runtime computes wrong (docs/lowerings.md "sycl-tla's legacy PVC tiles": a 32x64x16 work-group of 1x2
# sub-groups, each 2x2 tiles of 16x16x16).
MODULE_ONLY = {
    "f16_f16_out": ("{a: f16, b: f16, acc: f32, c: f16}", "{m: 45, n: 70, k: 75, batch: 2}",
                    "[32, 32, 32], subgroups: [2, 1]"),
    "tf32": ("{a: tf32, b: tf32, acc: f32, c: f32}", "{m: 45, n: 70, k: 75}", "[16, 64, 32], subgroups: [1, 2]"),
    "s8_u8": ("{a: s8, b: u8, acc: s32, c: s32}", "{m: 45, n: 70, k: 75}", "[32, 32, 32], subgroups: [2, 1]"),
    "u8_s8": ("{a: u8, b: s8, acc: s32, c: s32}", "{m: 45, n: 70, k: 75}", "[16, 64, 32], subgroups: [1, 2]"),
    "bf16_k16_sg1x2": ("{a: bf16, b: bf16, acc: f32, c: f32}", "{m: 32, n: 64, k: 64}",
                       "[32, 64, 16], subgroups: [1, 2]"),
}


def test_row_major_b_layout_does_not_build_and_cannot_hurt_the_caller(sycl_device):
    """B declared RowMajor: the CPU runtime aborts its compiler (measured); the child process takes the blow."""
    if amx_target() is None:
        pytest.skip("this CPU has no AMX: the Intel CPU runtime refuses cooperative matrices without it")
    k = coopmat_kernel(plan(_config("bf16_64")))
    text = render_kernel(type(k)(**{**k.__dict__, "b_layout": 0}))
    child = build_in_child(assemble(text), sycl_device.filter_string)
    assert not child.ok and child.reason


def test_this_process_is_left_on_its_own_target():
    """Importing this file sets nothing: the CPU runtime of the pytest process keeps the target it started with."""
    assert os.environ.get(TARGET_ARCH_VARIABLE) == _started_with()


def _started_with() -> str | None:
    raw = Path("/proc/self/environ").read_bytes().decode(errors="replace").split("\0")
    return next((item.split("=", 1)[1] for item in raw if item.startswith(TARGET_ARCH_VARIABLE + "=")), None)


def test_in_process_builds_are_refused_with_the_reason(sycl_device):
    """This process's runtime started without the AMX target: building here is refused, saying how to start."""
    from xegemm.runtime.opencl import OpenCLQueue
    from xegemm.runtime.spirv import SpirvError, build_spirv, in_process_ready
    if sycl_device.device_type.name != "cpu":
        pytest.skip(f"the refusal is the Intel OpenCL CPU runtime's, not {sycl_device.name}'s")
    if amx_target() is None:
        pytest.skip("this CPU has no AMX: no process of it can build cooperative matrices, so there is no refusal "
                    "to check")
    if in_process_ready() is None:
        pytest.skip("this process's runtime can build cooperative matrices (started with the AMX target)")
    with pytest.raises(SpirvError, match=f"{TARGET_ARCH_VARIABLE}=sapphirerapids"):
        build_spirv(render_kernel(coopmat_kernel(plan(_config("bf16_64")))), OpenCLQueue(sycl_device))


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
    assert "Xe GPUs only" in plan_violation(plan(f16)) and plan_violation(plan(f16), "xe") is None
    assert coopmat_kernel(plan(f16), family="xe").ab_component == "%f16"
    def with_layout(layout):
        return plan(config_from_text(f"problem: {{m: 64, n: 64, k: 64}}\nlayout: {layout}\n"
                                     "tile: {workgroup: [64, 64, 32], subgroups: [2, 2], subgroup_size: 16}\n"))
    with pytest.raises(PlanRejected, match="row-major"):
        coopmat_kernel(with_layout("{c: col}"))
    assert coopmat_kernel(with_layout("{a: col, b: col}")).a_col
    col_a = with_layout("{a: col}")     # ColumnMajorKHR A matrices in GPU builds with IGC 2.x only
    assert not coopmat_kernel(col_a).a_col_loads and coopmat_kernel(col_a, family="xe").a_col_loads
    assert not coopmat_kernel(col_a, family="xe", dialect="legacy").a_col_loads
    assert coopmat_kernel(col_a, family="xe").k_step_bodies == 4 and coopmat_kernel(col_a).k_step_bodies == 2
    split = config_from_text("problem: {m: 64, n: 64, k: 256}\ntile: {workgroup: [64, 64, 32], subgroups: [2, 2], "
                             "subgroup_size: 16, split_k: 2}\n")
    assert plan_violation(plan(split)) is None and coopmat_kernel(plan(split)).split == 2
    stream = config_from_text("problem: {m: 64, n: 64, k: 256}\ntile: {workgroup: [64, 64, 32], subgroups: [2, 2], "
                              "subgroup_size: 16, stream_k: 2}\n")
    kernel = coopmat_kernel(plan(stream))
    assert plan_violation(plan(stream)) is None and (kernel.stream_k, kernel.bk, kernel.split) == (2, 32, 1)
    with pytest.raises(PlanRejected, match="one of them"):
        replace(kernel, split=2)


def test_a_work_group_larger_than_the_devices_local_memory_is_refused_before_the_build(sycl_device):
    """sycl-tla's 256x256x32 PVC tile with 8x4 sub-groups keeps 448 KiB of operands and accumulators in local
    memory; a device with less (the CPU runtime reports 256 KiB) refuses it with the numbers, unbuilt, where the
    launch would fail with CL_OUT_OF_RESOURCES (measured); a tile that fits is admitted as before."""
    from xegemm.evaluate import plan_variants
    from xegemm.evaluate.device import DeviceBuilder, DeviceSession, local_memory_violation
    low = Lowering("coopmat")
    big = config_from_text("problem: {m: 256, n: 256, k: 64}\n"
                           "tile: {workgroup: [256, 256, 32], subgroups: [8, 4], subgroup_size: 16}\n")
    (pv,) = plan_variants(big, low)
    kernel = coopmat_kernel(pv.plan)
    assert low.local_memory_bytes(pv.plan) == kernel.local_bytes == 32 * (32 * 32 * 2 + 32 * 64 * 2 + 32 * 64 * 4)
    assert Lowering("portable").local_memory_bytes(pv.plan) is None
    why = local_memory_violation(kernel.local_bytes, 256 << 10)
    assert why.startswith("a work-group needs 448 KiB of local memory and the device has 256 KiB")
    assert local_memory_violation(kernel.local_bytes, 512 << 10) is None and local_memory_violation(None, 1) is None
    from xegemm.runtime.devices import describe
    has = int(sycl_device.local_mem_size)
    assert describe(sycl_device).local_mem_bytes == has > 0      # what the call API's dispatch checks against
    if has >= kernel.local_bytes:
        pytest.skip(f"{sycl_device.name} has {has >> 10} KiB of local memory: the tile fits")
    builder = DeviceBuilder(DeviceSession(sycl_device), low)
    assert builder.admit(pv) == local_memory_violation(kernel.local_bytes, has)
    (small,) = plan_variants(config_from_text(RAGGED), low)
    assert "local memory" not in (builder.admit(small) or "")


def test_the_call_api_passes_over_a_variant_larger_than_the_devices_local_memory():
    """The call API's dispatch skips a variant whose work-group does not fit the device's local memory (the
    Gemm gives its dispatcher DeviceInfo.local_mem_bytes) for the next legal one, and says why when none fits."""
    from xegemm.api.dispatch import Dispatcher, Request, candidates
    from xegemm.api.errors import NoKernelError
    config = config_from_text("problem: {m: 256, n: 256, k: 64}\n"
                              "tile: {workgroup: [256, 256, 32], subgroups: [8, 4], subgroup_size: 16}\n"
                              "sweep:\n  tile: [{workgroup: [256, 256, 32], subgroups: [8, 4]},\n"
                              "         {workgroup: [64, 64, 32], subgroups: [2, 2]}]\n")
    low = Lowering("coopmat")
    request = Request(300, 520, 200, 1, "bf16", "bf16", ("row",), ("row",))
    choice = Dispatcher(candidates(config, {}), "c", local_memory_bytes=256 << 10).choose(low, request)
    assert choice.config.tile.workgroup == (64, 64, 32)
    assert Dispatcher(candidates(config, {}), "c").choose(low, request).config.tile.workgroup == (256, 256, 32)
    with pytest.raises(NoKernelError, match="needs 448 KiB of local memory and the device has 16 KiB"):
        Dispatcher(candidates(config, {}), "c", local_memory_bytes=16 << 10).choose(low, request)


def test_spirv_val_judges_the_khr_parts_and_says_when_it_cannot():
    s8 = validate(assemble(render_kernel(coopmat_kernel(plan(_config("s8_ragged"))))))
    assert s8.ok is True, s8.message
    bf16 = validate(assemble(render_kernel(coopmat_kernel(plan(_config("bf16_64"))))))
    assert bf16.ok is None and "6437" in bf16.message


# -- the lowering wired in: run, sweep, generate, the call API ------------------------------------------------
RAGGED = """\
name: coop_wired
problem: {m: 77, n: 45, k: 70}
types: {a: bf16, b: bf16, acc: f32, c: f32}
tile: {workgroup: [64, 32, 32], subgroups: [2, 1], subgroup_size: 16}
epilogue: {alpha: 0.5, beta: -1.5}
profile: {warmup: 1, repeats: 3}
"""


def _needs_amx(sycl_device):
    if amx_target() is None:
        pytest.skip("this CPU has no AMX (amx_tile, amx_bf16, amx_int8): the coopmat lowering is unavailable")
    if sycl_device.device_type.name != "cpu":
        pytest.skip(f"the coopmat runs are on the Intel OpenCL CPU runtime, not {sycl_device.name}")


def test_run_with_the_coopmat_lowering_verifies_and_times(tmp_path, sycl_device):
    """`xegemm run --lowering coopmat`: the run's workers start the runtime with the AMX target, B is packed in
    the launch path (its time recorded), the kernel verified and timed; this process stays on its target."""
    from xegemm.jobs.pipeline import run
    _needs_amx(sycl_device)
    config = tmp_path / "c.yaml"
    config.write_text(RAGGED)
    results = run(config, out_dir=tmp_path / "out", lowering="coopmat", progress=None, reference_repeats=1)
    (variant,) = results.variants
    assert variant.status == "ok", variant.reason
    assert variant.name.endswith("_coopmat")
    assert os.environ.get(TARGET_ARCH_VARIABLE) == _started_with()


def test_a_sweep_over_lowerings_compares_them_on_the_device(tmp_path, sycl_device):
    from xegemm.jobs.pipeline import run
    _needs_amx(sycl_device)
    config = tmp_path / "c.yaml"
    config.write_text(RAGGED + "sweep:\n  target.lowering: [portable, coopmat]\n")
    results = run(config, out_dir=tmp_path / "out", progress=None, reference_repeats=1)
    by_lowering = {v.name.rsplit("_", 1)[1]: v for v in results.variants}
    assert set(by_lowering) == {"portable", "coopmat"}
    for v in by_lowering.values():
        assert v.status == "ok", v.reason


def test_a_broken_coopmat_kernel_fails_the_runs_verification(tmp_path, sycl_device):
    """The evaluator's own verification (not this file's helper) catches a wrong kernel: the mutant source is
    handed to the same isolated evaluator a run uses."""
    from xegemm.evaluate import Evaluator, plan_variants, render_variant
    from xegemm.evaluate.isolated import isolated_device_evaluator
    _needs_amx(sycl_device)
    low = Lowering("coopmat")
    config = config_from_text(RAGGED)
    (pv,) = plan_variants(config, low)
    source = render_variant(pv, low)
    old, new = "%c_v = OpConstant %u32 2", "%c_v = OpConstant %u32 1"
    assert old in source
    evaluator: Evaluator = isolated_device_evaluator(sycl_device.filter_string, low)
    try:
        good = evaluator.evaluate(pv, source)
        bad = evaluator.evaluate(pv, source.replace(old, new))
    finally:
        evaluator.builder.close()
    assert good.status == "ok", good.reason
    assert good.extra["pack_b_ms"] >= 0
    assert bad.status == "failed_verify", bad.reason


TRACED_SHAPE = """\
problem: {{m: 37, n: 45, k: 40, batch: 2}}
types: {{a: bf16, b: bf16, acc: f32, c: {c}}}
tile: {{workgroup: [32, 32, 32], subgroups: [1, 2], subgroup_size: 16}}
profile: {{warmup: 0, repeats: 1}}
epilogue: {epilogue}
"""
# traced epilogues (tests/epilogue_examples.py): D's type, the epilogue section
TRACED = {
    "bias_gelu_pre": ("bf16", '{function: "epilogue_examples:bias_gelu", inputs: {bias: row}, outputs: {pre: f32}}'),
    "gated_pre_f16": ("f16", '{function: "epilogue_examples:gated_pre", inputs: {up: {kind: matrix, type: f16}}, '
                             'outputs: {act: bf16}}'),
    "residual_bf16": ("bf16", '{function: "epilogue_examples:residual"}'),
    "scale_clamp_s8": ("s8", '{function: "epilogue_examples:scaled_s8", inputs: {scale: row}}'),
}


@pytest.fixture(scope="module")
def coopmat_evaluator(sycl_device):
    """The isolated evaluator a run with coopmat variants uses (its worker starts with the AMX target)."""
    from xegemm.evaluate.isolated import isolated_device_evaluator
    _needs_amx(sycl_device)
    evaluator = isolated_device_evaluator(sycl_device.filter_string, Lowering("coopmat"))
    yield evaluator
    evaluator.builder.close()


def _traced(name: str, **replace):
    from xegemm.evaluate import plan_variants
    c, epilogue = TRACED[name]
    for old, new in replace.items():
        epilogue = epilogue.replace(old, new)
    (pv,) = plan_variants(config_from_text(TRACED_SHAPE.format(c=c, epilogue=epilogue)), Lowering("coopmat"))
    assert pv.plan is not None, pv.reason
    return pv


@pytest.mark.usefixtures("code_allowed")
@pytest.mark.parametrize("name", sorted(TRACED))
def test_a_traced_epilogue_verifies_in_the_coopmat_kernel(name, coopmat_evaluator):
    """Named row vectors, auxiliary input matrices (f16) and outputs (f32, bf16), C read as bf16, D as bf16 / f16 /
    s8: verified by the run's evaluator, D and every auxiliary output, against the graph's numpy reference."""
    from xegemm.evaluate import render_variant
    pv = _traced(name)
    result = coopmat_evaluator.evaluate(pv, render_variant(pv, Lowering("coopmat")))
    assert result.status == "ok", (name, result.reason)


# GELU's erf changed, or (``new`` None) the auxiliary output's store lost
TRACED_MUTANTS = [("bias_gelu_pre", "%ocl erf", "%ocl erfc"), ("gated_pre_f16", "OpStore %e_st_out_act", None)]


def _broken_traced(case: str, old: str, new: str | None):
    from xegemm.evaluate import render_variant
    pv = _traced(case)
    source = render_variant(pv, Lowering("coopmat"))
    assert old in source
    return pv, source.replace(old, new) if new is not None else \
        "".join(line for line in source.splitlines(keepends=True) if not line.startswith(old))


@pytest.mark.usefixtures("code_allowed")
@pytest.mark.parametrize("case, old, new", TRACED_MUTANTS)
def test_a_broken_traced_epilogue_fails_the_runs_verification(case, old, new, coopmat_evaluator):
    result = coopmat_evaluator.evaluate(*_broken_traced(case, old, new))
    assert result.status == "failed_verify", result.reason


def test_the_runs_evaluator_dequantizes_a_gptq_b_for_the_coopmat_kernel(coopmat_evaluator):
    """The evaluator's launch path (DeviceSession.packed_b): the GPTQ arrays dequantized into bf16 and packed once
    per problem, the kernel verified against the quantized GEMM's reference."""
    from xegemm.evaluate import plan_variants, render_variant
    (pv,) = plan_variants(_config("gptq_g128"), Lowering("coopmat"))
    assert pv.plan is not None, pv.reason
    result = coopmat_evaluator.evaluate(pv, render_variant(pv, Lowering("coopmat")))
    assert result.status == "ok", result.reason
    assert result.extra["pack_b_ms"] >= 0


@pytest.mark.parametrize("name", ["w8a8_fp8", "mxfp4", "awq"])
def test_the_runs_evaluator_runs_shipped_quantized_configs_through_the_coopmat_kernel(name, coopmat_evaluator):
    """Shipped configs with a bf16 compute type, each at a ragged shape, as `xegemm run --lowering coopmat` runs
    them: W8A8 FP8 (an FP8 A with per-token-group scales dequantized into bf16 by the A dequantizer, 128 x 128
    block-scaled FP8 B by the B packer), MXFP4 and AWQ; verified against the quantized GEMM's reference."""
    from xegemm.config import load_config
    from xegemm.evaluate import plan_variants, render_variant
    config = load_config(ROOT / "configs" / f"{name}.yaml").at_problems([{"m": 37, "n": 64, "k": 384, "batch": 1}])
    planned = [pv for pv in plan_variants(config.with_overrides({"profile.warmup": 0, "profile.repeats": 1}),
                                          Lowering("coopmat")) if pv.plan is not None]
    assert planned, f"{name}: no coopmat variant planned"
    result = coopmat_evaluator.evaluate(planned[0], render_variant(planned[0], Lowering("coopmat")))
    assert result.status == "ok", result.reason
    assert result.extra["pack_b_ms"] >= 0 and (name != "w8a8_fp8" or result.extra["pack_a_ms"] >= 0)


GROUPED = {   # shipped grouped / MoE configs through the coopmat kernel: (config, overrides)
    # K not a multiple of the VNNI factor: the packed groups are longer than the stored ones (their own offsets)
    "grouped_odd_k": ("grouped", {"problem.groups": ["100x256x127", "0x256x128", "33x512x65", "200x128x255"]}),
    "moe": ("moe", {}),
    # quantized experts (u4, zero points, per-32 scales) dequantized by the packer in one batched run
    "moe_w4a16_bf16": ("moe_w4a16", {"types.a": "bf16", "types.c": "bf16", "quant.scale": "bf16"}),
}
# ... smaller, for the interpreter (tests/test_coopmat_interpreted.py; the shipped grouped and moe problems take it
# 20 s and more): odd K, an empty group or expert
GROUPED_SMALL = {
    "grouped_small_odd_k": ("grouped", {"problem.groups": ["40x64x37", "0x64x32", "17x96x33", "50x32x63"]}),
    "moe_small": ("moe", {"problem.m": 40, "moe.experts": 4, "moe.rows": [16, 0, 9, 15], "problem.n": 64,
                          "problem.k": 96}),
}


def _grouped_variants(name: str):
    from xegemm.config import load_config
    from xegemm.evaluate import plan_variants
    config, overrides = {**GROUPED, **GROUPED_SMALL}[name]
    config = load_config(ROOT / "configs" / f"{config}.yaml").with_overrides(
        {"profile.warmup": 0, "profile.repeats": 1, **overrides})
    planned = [pv for pv in plan_variants(config, Lowering("coopmat")) if pv.plan is not None]
    assert {pv.config.tile.walk for pv in planned} == {"static", "dynamic"}, [pv.reason for pv in planned]
    return planned


@pytest.mark.parametrize("name", sorted(GROUPED))
def test_grouped_and_moe_launches_verify_through_the_coopmat_kernel(name, coopmat_evaluator):
    """The persistent walk (static and dynamic) in SPIR-V over the problem table, every group's B packed on the
    device first: the run's evaluator verifies every group (empty ones included) and the bytes between them."""
    from xegemm.evaluate import render_variant
    for pv in _grouped_variants(name):
        result = coopmat_evaluator.evaluate(pv, render_variant(pv, Lowering("coopmat")))
        assert result.status == "ok", (name, pv.config.tile.walk, result.reason)
        assert result.extra["pack_b_ms"] >= 0


GROUPED_MUTANTS = [
    ("static", "%gs_right = OpULessThanEqual", "%gs_right = OpULessThan"),     # the search lands one group early
    ("static", "%B %g_b_offset", "%B %z64"),                                  # every group reads group 0's B
    ("static", "%t_next = OpIAdd %u32 %t %nwgx", "%t_next = OpIAdd %u32 %t %total_tiles"),   # one tile each
    ("dynamic", "OpStore %next_tile %taken",                                  # each take skips a tile
     "%taken_again = OpAtomicIIncrement %u32 %tile_counter %c1 %c0\nOpStore %next_tile %taken"),
]


def _broken_grouped(name: str, walk: str, old: str, new: str):
    from xegemm.evaluate import render_variant
    (pv,) = [pv for pv in _grouped_variants(name) if pv.config.tile.walk == walk]
    source = render_variant(pv, Lowering("coopmat"))
    assert old in source
    return pv, source.replace(old, new)


@pytest.mark.parametrize("walk, old, new", GROUPED_MUTANTS)
def test_a_broken_grouped_coopmat_kernel_fails_verification(walk, old, new, coopmat_evaluator):
    result = coopmat_evaluator.evaluate(*_broken_grouped("grouped_odd_k", walk, old, new))
    assert result.status == "failed_verify", result.reason


def test_the_packed_groups_have_their_own_offsets():
    """A coopmat grouped launch: the table's b_offset is the packed B's (each group 64-byte aligned, room for K
    rounded up to v), the caller's B stays at the stored offsets; an MoE layer's experts one packed expert apart."""
    from xegemm.grouped.problem import from_config
    from xegemm.grouped.table import FIELD
    from xegemm.kernel.grouped_launch import grouped_launch
    (pv, _) = _grouped_variants("grouped_odd_k")
    problem = from_config(pv.config)
    layout = grouped_launch(pv.plan, problem, 2)
    packed = [-(-g.k // 2) * g.n * 4 for g in problem.groups]
    starts = layout.packed_b_offsets
    assert all(s % 64 == 0 for s in starts) and all(b >= a + p for a, b, p in zip(starts, starts[1:], packed))
    assert layout.nbytes["B_packed"] == starts[-1] + packed[-1]
    assert list(layout.table[:, FIELD["b_offset"]] * 2) == list(starts)        # bf16: 2 bytes an element
    assert layout.byte_offsets("B") != list(starts) and layout.byte_offsets("B")[0] == 0
    (pv, _) = _grouped_variants("moe")
    moe = from_config(pv.config)
    g = moe.groups[0]
    assert grouped_launch(pv.plan, moe, 2).packed_b_offsets == tuple(e * g.k // 2 * g.n * 4
                                                                     for e in range(len(moe.groups)))


SPLIT_CALL = """\
problem: {m: 20, n: 70, k: 512}
types: {a: bf16, b: bf16, acc: f32, c: bf16}
tile: {workgroup: [16, 32, 32], subgroups: [1, 2], subgroup_size: 16, split_k: 5}
epilogue: {bias: row, activation: relu}
"""


def test_the_call_api_runs_grouped_moe_split_k_and_stream_k_calls_through_the_coopmat_kernel(sycl_device,
                                                                                             tmp_path):
    """gemm.grouped (ragged groups, one empty, bias and ReLU), gemm.moe (an empty expert), a split-K and a
    stream-K call (the module's reduce entry point second) with lowering="coopmat" in a fresh process: every
    group's B packed on the device at the call, D against numpy."""
    _needs_amx(sycl_device)
    (tmp_path / "split.yaml").write_text(SPLIT_CALL)
    (tmp_path / "stream.yaml").write_text(SPLIT_CALL.replace("split_k: 5", "stream_k: 3"))
    script = f"""
import numpy as np, ml_dtypes, xegemm
rng = np.random.default_rng(1)
g = xegemm.load({str(ROOT / "configs" / "grouped.yaml")!r}, lowering="coopmat")
shapes = [(40, 64, 70), (0, 32, 64), (17, 48, 33)]
A = [rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16) for m, n, k in shapes]
B = [rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16) for m, n, k in shapes]
bias = [rng.standard_normal(n).astype(np.float32) for m, n, k in shapes]
errors = [0.0]
for a, b, v, d in zip(A, B, bias, g.grouped(A, B, bias=bias)):
    ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + v, 0)
    errors.append(float(np.max(np.abs(d.astype(np.float64) - ref) / (np.abs(ref) * 2.0 ** -8 + 1e-3), initial=0)))
print(g.last_kernel.name, max(errors))
m = xegemm.load({str(ROOT / "configs" / "moe.yaml")!r}, lowering="coopmat")
rows = [5, 0, 30, 2]
a = rng.standard_normal((sum(rows), 96)).astype(ml_dtypes.bfloat16)
b = rng.standard_normal((4, 96, 40)).astype(ml_dtypes.bfloat16)
ends = np.cumsum(rows)
ref = np.concatenate([a[e - r:e].astype(np.float64) @ b[i].astype(np.float64) for i, (r, e) in enumerate(zip(rows, ends))])
d = m.moe(a, b, rows).astype(np.float64)
print(m.last_kernel.name, float(np.max(np.abs(d - ref) / (np.abs(ref) * 2.0 ** -8 + 1e-3))))
s = xegemm.load({str(tmp_path / "split.yaml")!r}, lowering="coopmat")
a = rng.standard_normal((20, 512)).astype(ml_dtypes.bfloat16)
b = rng.standard_normal((512, 70)).astype(ml_dtypes.bfloat16)
bias = rng.standard_normal(20).astype(np.float32)
d = s(a, b, bias=bias).astype(np.float64)
ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias[:, None], 0)
print(s.last_kernel.name, float(np.max(np.abs(d - ref) / (np.abs(ref) * 2.0 ** -8 + 1e-3))))
t = xegemm.load({str(tmp_path / "stream.yaml")!r}, lowering="coopmat")
d = t(a, b, bias=bias).astype(np.float64)
print(t.last_kernel.name, float(np.max(np.abs(d - ref) / (np.abs(ref) * 2.0 ** -8 + 1e-3))))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          env={k: v for k, v in os.environ.items() if k != TARGET_ARCH_VARIABLE})
    assert done.returncode == 0, done.stderr[-2000:]
    grouped_name, grouped_err, moe_name, moe_err, split_name, split_err, stream_name, stream_err = done.stdout.split()
    assert "_grouped" in grouped_name and grouped_name.endswith("_coopmat") and moe_name.endswith("_coopmat")
    assert split_name.endswith("_splitk5_coopmat") and stream_name.endswith("_streamk3_coopmat")
    assert max(map(float, (grouped_err, moe_err, split_err, stream_err))) <= 1.0   # D in bf16: 2^-9 relative, f32 sums


SPLIT = {   # split K through the coopmat kernel and its reduce entry point: (problem, types, tile, extra sections)
    "bf16_ragged_batch_a_col": ("{m: 37, n: 45, k: 200, batch: 2}", "{a: bf16, b: bf16, acc: f32, c: f32}",
                                "[32, 32, 32], subgroups: [2, 1], split_k: 3",
                                "layout: {a: col}\nepilogue: {alpha: 0.5, beta: -1.5}\n"),
    "bf16_bias_gelu_to_bf16": ("{m: 20, n: 70, k: 512}", "{a: bf16, b: bf16, acc: f32, c: bf16}",
                               "[16, 32, 32], subgroups: [1, 2], split_k: 5",
                               "layout: {b: col}\nepilogue: {bias: row, activation: gelu_tanh}\n"),
    "s8_exact": ("{m: 20, n: 33, k: 300}", "{a: s8, b: s8, acc: s32, c: s32}",
                 "[16, 16, 64], subgroups: [1, 1], split_k: 4", ""),
    "gptq": ("{m: 16, n: 64, k: 512}", "{a: bf16, b: u4, acc: f32, c: bf16}",
             "[16, 32, 32], subgroups: [1, 2], split_k: 4", "quant: {format: gptq, group: 128, scale: f16, zero: u4}\n"),
}


def _case_variant(case: tuple[str, str, str, str]):
    """The one coopmat variant of a (problem, types, tile, extra sections) case of SPLIT or STREAM."""
    from xegemm.evaluate import plan_variants
    problem, types, tile, extra = case
    config = config_from_text(f"problem: {problem}\ntypes: {types}\ntile: {{workgroup: {tile}, subgroup_size: 16}}\n"
                              f"profile: {{warmup: 0, repeats: 1}}\n{extra}")
    (pv,) = plan_variants(config, Lowering("coopmat"))
    assert pv.plan is not None, pv.reason
    return pv


def _split(name: str):
    pv = _case_variant(SPLIT[name])
    assert pv.plan.split_k > 1
    return pv


def _fails_verification_when_edited(pv, evaluator, old: str, new: str) -> None:
    """A variant's module with ``old`` replaced by ``new`` (which must be in it) fails the evaluator's check."""
    from xegemm.evaluate import render_variant
    source = render_variant(pv, Lowering("coopmat"))
    assert old in source
    result = evaluator.evaluate(pv, source.replace(old, new))
    assert result.status == "failed_verify", result.reason


def _verifies_with_its_reduce_entry(pv, evaluator) -> None:
    """A split-K or stream-K variant's module has its reduce entry point and verifies through the evaluator."""
    from xegemm.evaluate import render_variant
    source = render_variant(pv, Lowering("coopmat"))
    assert f'"{pv.plan.name}_reduce"' in source
    result = evaluator.evaluate(pv, source)
    assert result.status == "ok", (pv.name, result.reason)


@pytest.mark.parametrize("name", sorted(SPLIT))
def test_split_k_verifies_through_the_coopmat_kernel_and_its_reduce(name, coopmat_evaluator):
    """Each slice's k-range into the workspace by the GEMM entry point, the slices added in order and the fixed
    epilogue applied by the module's reduce entry point: ragged, batched, column-major operands, integers exact, a
    GPTQ B dequantized by the packer."""
    _verifies_with_its_reduce_entry(_split(name), coopmat_evaluator)


SPLIT_MUTANTS = [
    ("%r_s_next = OpIAdd %u32 %r_s %c1", "%r_s_next = OpIAdd %u32 %r_s %c2"),   # the reduce skips slices
    ("%oa = OpIAdd %u64 %oa0 %k_begin64", "%oa = OpCopyObject %u64 %oa0"),      # every slice reads A's first
    ("%ob = OpIAdd %u64 %ob0 %kb", "%ob = OpCopyObject %u64 %ob0"),             # every slice reads B's first
]


@pytest.mark.parametrize("old, new", SPLIT_MUTANTS)
def test_a_broken_split_k_coopmat_kernel_fails_verification(old, new, coopmat_evaluator):
    _fails_verification_when_edited(_split("bf16_bias_gelu_to_bf16"), coopmat_evaluator, old, new)


MIXED = "problem: {{m: 50, n: 33, k: 99, batch: 2}}\ntypes: {{a: {a}, b: {b}, acc: s32, c: s32}}\n" \
        "tile: {{workgroup: [32, 32, 64], subgroups: [2, 1], subgroup_size: 16}}\nepilogue: {{bias: col}}\n" \
        "profile: {{warmup: 0, repeats: 1}}\n"


@pytest.mark.parametrize("a, b, mask", [("s8", "u8", "0x1"), ("u8", "s8", "0x2")])
def test_8_bit_operands_of_different_signedness_verify_exactly(a, b, mask, coopmat_evaluator):
    """s8 x u8 and u8 x s8: the signed operand's bit alone in the multiply-add (AMX's tdpbsud / tdpbusd); with C
    and Result signed too the CPU runtime's sums are wrong, and that mutant must fail."""
    from xegemm.evaluate import plan_variants, render_variant
    (pv,) = plan_variants(config_from_text(MIXED.format(a=a, b=b)), Lowering("coopmat"))
    assert pv.plan is not None, pv.reason
    source = render_variant(pv, Lowering("coopmat"))
    assert f" !{mask}\n" in source
    result = coopmat_evaluator.evaluate(pv, source)
    assert result.status == "ok", result.reason
    broken = coopmat_evaluator.evaluate(pv, source.replace(f" !{mask}\n", f" !{hex(int(mask, 16) | 0xc)}\n"))
    assert broken.status == "failed_verify", broken.reason


STREAM = {   # stream-K through the coopmat kernel's piece loop and its fix-up entry point: (problem, types, tile, extra)
    "bf16_ragged_batch_a_col_swizzle": ("{m: 37, n: 45, k: 200, batch: 2}", "{a: bf16, b: bf16, acc: f32, c: f32}",
                                        "[16, 16, 32], subgroups: [1, 1], stream_k: 4, swizzle: 2",
                                        "layout: {a: col}\nepilogue: {alpha: 0.5, beta: -1.5}\n"),
    "bf16_bias_gelu_to_bf16": ("{m: 20, n: 70, k: 512}", "{a: bf16, b: bf16, acc: f32, c: bf16}",
                               "[16, 32, 32], subgroups: [1, 2], stream_k: 5",
                               "layout: {b: col}\nepilogue: {bias: row, activation: gelu_tanh}\n"),
    "s8_exact": ("{m: 20, n: 33, k: 300}", "{a: s8, b: s8, acc: s32, c: s32}",
                 "[16, 16, 64], subgroups: [1, 1], stream_k: 4", ""),
    "gptq": ("{m: 32, n: 64, k: 512}", "{a: bf16, b: u4, acc: f32, c: bf16}",
             "[16, 32, 32], subgroups: [1, 2], stream_k: 3", "quant: {format: gptq, group: 128, scale: f16, zero: u4}\n"),
}


def _stream(name: str):
    from xegemm.plan.stream_k import tile_pieces
    pv = _case_variant(STREAM[name])
    assert pv.plan.stream_k
    pieces = [len(p) for _, p in tile_pieces(pv.config)]
    assert max(pieces) > 1 and min(pieces) == 1, pieces      # tiles cut between work-groups and tiles whole
    return pv


@pytest.mark.parametrize("name", sorted(STREAM))
def test_stream_k_verifies_through_the_coopmat_kernel_and_its_fix_up(name, coopmat_evaluator):
    """Each work-group's range of MAC-loop iterations walked piece by piece (whole tiles through the epilogue to
    D, pieces to their workspace slots), the cut tiles' pieces added in contributor order and the fixed epilogue
    applied by the module's reduce entry point: ragged, batched, swizzled, column-major operands, integers exact,
    a GPTQ B dequantized by the packer."""
    _verifies_with_its_reduce_entry(_stream(name), coopmat_evaluator)


STREAM_MUTANTS = [
    ("%r_s_next = OpIAdd %u32 %r_s %c1", "%r_s_next = OpIAdd %u32 %r_s %c2"),        # the fix-up skips pieces
    ("%sk_so = OpIMul %u64 %sk_slot64 %c_sk_slot64", "%sk_so = OpCopyObject %u64 %z64"),  # every piece to slot 0
    ("%oa = OpIAdd %u64 %oa0 %k_begin64", "%oa = OpCopyObject %u64 %oa0"),      # every piece reads A's first k
    ("OpBranchConditional %sk_whole %sk_epi %sk_part", "OpBranchConditional %sk_whole %sk_part %sk_epi"),
]


@pytest.mark.parametrize("old, new", STREAM_MUTANTS)
def test_a_broken_stream_k_coopmat_kernel_fails_verification(old, new, coopmat_evaluator):
    _fails_verification_when_edited(_stream("bf16_bias_gelu_to_bf16"), coopmat_evaluator, old, new)


def test_stream_k_schedule_is_the_formulas_compiled_in_64_bits_where_the_c_is_long():
    """The kernel's schedule is xegemm.plan.stream_k's C compiled into SPIR-V (one home for the formulas): the
    names the C declares long (iterations times G overflows an int) are 64-bit values."""
    from xegemm.plan.stream_k import LONG
    pv = _stream("s8_exact")
    kernel = coopmat_kernel(pv.plan)
    for formula in (kernel.sk_range, kernel.sk_piece, kernel.sk_fixup):
        defined = {line.split(" = ")[0]: line.split()[3] for line in formula.lines}
        for name, rid in formula.names:
            if rid in defined:
                assert defined[rid] == ("%u64" if name in LONG else "%u32"), (name, defined[rid])
    assert {n for n, _ in kernel.sk_range.names} >= {"it_begin", "it_end", "k_tiles"}


@pytest.mark.usefixtures("code_allowed")
def test_a_traced_epilogue_with_reductions_is_rejected_with_the_reason():
    from xegemm.evaluate import plan_variants
    text = TRACED_SHAPE.format(c="f32", epilogue='{function: "epilogue_examples:row_stats", inputs: {bias: col}}')
    (pv,) = plan_variants(config_from_text(text), Lowering("coopmat"))
    assert "reductions" in plan_violation(pv.plan)
    with pytest.raises(PlanRejected, match="reductions"):
        coopmat_kernel(pv.plan)


def test_generate_writes_spirv_assembly(tmp_path):
    from xegemm.jobs.pipeline import generate
    config = tmp_path / "c.yaml"
    config.write_text(RAGGED)
    manifest = generate(config, tmp_path / "out", lowering="coopmat")
    (entry,) = manifest["kernels"]
    assert entry["status"] == "generated" and entry["path"].endswith("_coopmat.spvasm")
    text = (tmp_path / "out" / entry["path"]).read_text()
    assert "OpCooperativeMatrixMulAddKHR" in text
    assert manifest["lowering"] == "coopmat"


QUANTIZED_CALL = """\
problem: {m: 37, n: 64, k: 256}
types: {a: bf16, b: u4, acc: f32, c: f32}
quant: {format: gptq, group: 128, scale: f16, zero: u4}
tile: {workgroup: [32, 32, 32], subgroups: [1, 2], subgroup_size: 16}
"""


def test_the_call_api_takes_the_lowering(tmp_path, sycl_device):
    """xegemm.load(..., lowering="coopmat") in a fresh process (it sets the AMX target before the runtime
    starts): B packed on the device at the call (from a column-major B too), D verified against numpy, with alpha
    and beta and with a bias, GELU and D stored as bf16; a GPTQ B as stored, dequantized there; W8A8 FP8 (both
    operands dequantized on the device); and USM arrays
    on a SYCL queue (the module built into a dpctl kernel bundle, B packed on that queue)."""
    _needs_amx(sycl_device)
    config, epilogue = tmp_path / "c.yaml", tmp_path / "e.yaml"
    config.write_text(RAGGED)
    quantized = tmp_path / "q.yaml"
    quantized.write_text(QUANTIZED_CALL)
    epilogue.write_text(RAGGED.replace("acc: f32, c: f32", "acc: f32, c: bf16").replace("{alpha: 0.5, beta: -1.5}",
                                                                    "{bias: row, activation: gelu_tanh}")
                        + "layout: {b: col}\n")
    script = f"""
import numpy as np, ml_dtypes, xegemm
g = xegemm.load({str(config)!r}, lowering="coopmat")
rng = np.random.default_rng(1)
a = rng.standard_normal((2, 50, 70)).astype(ml_dtypes.bfloat16)
b = rng.standard_normal((2, 70, 33)).astype(ml_dtypes.bfloat16)
d = g(a, b, alpha=1.0, beta=0.0)
ref = np.matmul(a.astype(np.float32), b.astype(np.float32))
print(g.last_kernel.name, float(np.abs(d - ref).max() / max(1.0, float(np.abs(ref).max()))))
e = xegemm.load({str(epilogue)!r}, lowering="coopmat")          # bias, GELU, D as bf16, B column-major
bias = rng.standard_normal(50).astype(np.float32)
d = e(a[0], np.asfortranarray(b[0]), bias=bias).astype(np.float64)
z = a[0].astype(np.float64) @ b[0].astype(np.float64) + bias[:, None]
ref = 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))
print(e.last_kernel.name, float(np.max(np.abs(d - ref) / (np.abs(ref) * 2.0 ** -8 + 1e-3))))
from xegemm.quant import dequantize, quantize     # GPTQ arrays as stored, dequantized and packed on the device
q = xegemm.load({str(quantized)!r}, lowering="coopmat")
w = quantize(rng.standard_normal((256, 64)), "gptq", group=128)
x = rng.standard_normal((37, 256)).astype(ml_dtypes.bfloat16)
d = q(x, w.qweight, scales=w.scales, zeros=w.zeros).astype(np.float64)
ref = x.astype(np.float64) @ dequantize(w, "bf16").astype(np.float64)
print(q.last_kernel.name, float(np.abs(d - ref).max() / np.abs(ref).max()))
from xegemm.config import load_config               # W8A8 FP8: A and B as DeepSeek-style checkpoints store them
from xegemm.quant import operand_spec, random_quantized
w = xegemm.load({str(ROOT / "configs" / "w8a8_fp8.yaml")!r}, lowering="coopmat")
cfg = load_config({str(ROOT / "configs" / "w8a8_fp8.yaml")!r})
qb = random_quantized(operand_spec(cfg, "b"), 384, 72, rng)
qa = random_quantized(operand_spec(cfg, "a"), 384, 21, rng, operand="a")
d = w(qa.qweight, qb.qweight, scales=qb.scales, a_scales=qa.scales).astype(np.float64)
ref = dequantize(qa, "bf16").astype(np.float64) @ dequantize(qb, "bf16").astype(np.float64)
print(w.last_kernel.name, float(np.max(np.abs(d - ref) / (np.abs(ref) * 2.0 ** -8 + 1e-2 * np.abs(ref).max()))))
from xegemm.api import DeviceArray               # USM arrays on a SYCL queue: the dpctl build path
from xegemm.runtime.sycl import dpctl, dpmem
sq = dpctl.SyclQueue(g.sycl_device, property=["in_order"])
def usm(x, order="C"):
    mem = dpmem.MemoryUSMDevice(x.nbytes, queue=sq)
    host = x if order == "C" else np.ascontiguousarray(np.swapaxes(x, -1, -2))
    mem.copy_from_host(host.reshape(-1).view(np.uint8))
    return DeviceArray(mem, x.shape, np.uint16, order)      # bf16 bits (USM typestrs have no bfloat16)
d = e(usm(a[0]), usm(b[0], "F"), bias=bias).astype(np.float64)   # B column-major, packed on the SYCL queue
z = a[0].astype(np.float64) @ b[0].astype(np.float64) + bias[:, None]
ref = 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))
print(e.last_kernel.name, float(np.max(np.abs(d - ref) / (np.abs(ref) * 2.0 ** -8 + 1e-3))))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          env={k: v for k, v in os.environ.items() if k != TARGET_ARCH_VARIABLE})
    assert done.returncode == 0, done.stderr[-2000:]
    (name, err, epilogue_name, epilogue_err, quant_name, quant_err, w8a8_name, w8a8_err, usm_name,
     usm_err) = done.stdout.split()
    assert name.endswith("_coopmat") and "_tnt_" in epilogue_name and epilogue_name.endswith("_gelu_tanh_coopmat")
    assert float(err) < 1e-5
    assert float(epilogue_err) <= 1.0         # within bf16's rounding (2^-9 relative) and the f32 sums
    assert "qgptq" in quant_name and quant_name.endswith("_coopmat")
    assert float(quant_err) < 1e-5            # the same bf16 values, summed in f32 over K = 256 (D in f32)
    assert "_e4m3_e4m3_" in w8a8_name and w8a8_name.endswith("_coopmat")
    assert float(w8a8_err) <= 1.0             # D in bf16 (2^-9 relative) of bf16 products summed in f32
    assert usm_name == epilogue_name and float(usm_err) <= 1.0     # the same kernel through dpctl, as exact


def test_call_api_in_a_process_started_without_the_target_says_how(sycl_device):
    """This process's runtime has started: loading the coopmat lowering here fails at the first call with
    what to do, not with a crash."""
    import xegemm
    import ml_dtypes
    from xegemm.runtime.spirv import in_process_ready
    _needs_amx(sycl_device)
    if in_process_ready() is None:
        pytest.skip("this process's runtime started with the AMX target")
    g = xegemm.load(config_from_text(RAGGED), lowering="coopmat")
    a = np.ones((16, 32), ml_dtypes.bfloat16)
    with pytest.raises(xegemm.errors.XegemmError, match=TARGET_ARCH_VARIABLE):
        g(a, np.ones((32, 16), ml_dtypes.bfloat16), alpha=1.0, beta=0.0)


# -- ahead of time for Intel GPUs ------------------------------------------------------------------------------
@pytest.mark.ocloc
@pytest.mark.parametrize("config, variants", [("moe", 2), ("split_k", 3), ("stream_k", 2)])
@pytest.mark.parametrize("target", ["pvc", "bmg"])
def test_gpu_build_of_the_moe_split_k_and_stream_k_configs_holds_the_gates(target, config, variants, tmp_path):
    """The shipped MoE config (both walks), split-K config (1, 4 and 16 slices) and stream-K config (4 and 16
    work-groups) through `xegemm build --lowering coopmat` with the current compiler: the persistent walk around the
    tile, a slice's k-range or stream-K's piece loop, and the reduce entry point beside it, keep the tile's dpas
    count, its 2D block loads and no spill."""
    from xegemm.aot.toolchain import find_ocloc
    from xegemm.jobs.pipeline import build_config
    if find_ocloc("current") is None:
        pytest.skip("the current compiler is not installed: make ocloc-current")
    result = build_config(ROOT / "configs" / f"{config}.yaml", target=target, out_dir=tmp_path / "b",
                          lowering="coopmat")
    assert len(result["variants"]) == variants
    for v in result["variants"]:
        assert v["status"] == "ok", v["reason"]
        assert v["measured_messages"]["dpas"] == v["predicted"]["dpas"] == 8     # 16 x 16 per sub-group, four bodies
        assert v["measured_messages"]["load_block2d"] == v["predicted"]["load_block2d"] > 0
        assert v["isa"]["spill_bytes"] in (0, None)


@pytest.mark.ocloc
@pytest.mark.parametrize("compiler", ["current", "system"])
def test_quantized_configs_with_f16_activations_build_for_the_gpu_in_f16(compiler, tmp_path):
    """A quantized B under f16 activations (the shipped gptq config: GPTQ 4-bit, f16 scales) is dequantized into
    f16 by the packer, and the kernel multiplies f16: it builds for pvc with both compilers, its dpas `:hf`; on the
    CPU runtime (no AMX-FP16) it is refused with that reason."""
    from xegemm.aot.toolchain import find_ocloc
    from xegemm.evaluate import plan_variants
    from xegemm.jobs.pipeline import build_config
    (pv,) = plan_variants(config_from_text((ROOT / "configs" / "gptq.yaml").read_text()), Lowering("coopmat"))
    assert pv.plan is not None and "AMX-FP16" in plan_violation(pv.plan)
    if find_ocloc(compiler) is None:
        pytest.skip(f"the {compiler} compiler is not installed")
    result = build_config(ROOT / "configs" / "gptq.yaml", target="pvc", out_dir=tmp_path / "b", lowering="coopmat",
                          compiler=compiler)
    (v,) = result["variants"]
    assert v["status"] == "ok", v["reason"]
    assert v["measured_messages"]["dpas"] == v["predicted"]["dpas"] == 16
    asm = "".join(f.read_text(errors="replace") for f in (tmp_path / "b" / v["name"] / "disasm").glob("*.asm"))
    assert {line.split()[-2].split(":")[-1] for line in asm.splitlines() if "dpas." in line} == {"hf"}


@pytest.mark.ocloc
@pytest.mark.parametrize("compiler", ["current", "system"])
def test_gpu_builds_of_every_signedness_pair_issue_dpas_of_those_types(compiler, tmp_path):
    """The shipped int8 config (s8/u8 x s8/u8) builds for pvc in both dialects (the legacy one with
    OpJointMatrixSUMadINTEL / USMadINTEL for the mixed pairs), and each dpas multiplies B (src1) and A (src2) in
    their own signedness: `:b` signed, `:ub` unsigned."""
    from xegemm.aot.toolchain import find_ocloc
    from xegemm.jobs.pipeline import build_config
    if find_ocloc(compiler) is None:
        pytest.skip(f"the {compiler} compiler is not installed")
    result = build_config(ROOT / "configs" / "int8.yaml", target="pvc", out_dir=tmp_path / "b", lowering="coopmat",
                          compiler=compiler)
    assert len(result["variants"]) == 4
    for v in result["variants"]:
        assert v["status"] == "ok", v["reason"]
        assert v["measured_messages"]["dpas"] == v["predicted"]["dpas"] == 16
        a, b = re.search(r"xegemm_([su]8)_([su]8)_", v["name"]).groups()
        asm = "".join(f.read_text(errors="replace") for f in (tmp_path / "b" / v["name"] / "disasm").glob("*.asm"))
        types = {tuple(re.findall(r":(u?b)\b", line)[-2:]) for line in asm.splitlines() if "dpas." in line}
        want = tuple("b" if t == "s8" else "ub" for t in (b, a))
        assert types == {want}, (v["name"], types)


@pytest.mark.ocloc
@pytest.mark.parametrize("compiler", ["current", "system"])
def test_gpu_builds_take_a_column_major_a(compiler, tmp_path):
    """The shipped layouts config (A and B each row- or column-major) builds for pvc: with the current compiler a
    column-major A is read as ColumnMajorKHR matrices in the interior k-steps, which IGC 2.x issues as transposed 2D
    block loads (d32t); Debian's IGC 1.0 has no column-major A load, so there the A is staged through local memory
    at every k-step (the staged two bodies' dpas only)."""
    from xegemm.aot.toolchain import find_ocloc
    from xegemm.jobs.pipeline import build_config
    if find_ocloc(compiler) is None:
        pytest.skip(f"the {compiler} compiler is not installed")
    result = build_config(ROOT / "configs" / "layouts.yaml", target="pvc", out_dir=tmp_path / "b",
                          lowering="coopmat", compiler=compiler)
    assert len(result["variants"]) == 4
    for v in result["variants"]:
        assert v["status"] == "ok", v["reason"]
        col_a = "_ntt_" in v["name"] or "_nnt_" in v["name"]      # layouts: A, B, C; n = column-major
        assert v["measured_messages"]["dpas"] == v["predicted"]["dpas"] == (16 if col_a and compiler == "system"
                                                                            else 32)
        assert v["isa"]["spill_bytes"] in (0, None)
        asm = "".join(f.read_text(errors="replace") for f in (tmp_path / "b" / v["name"] / "disasm").glob("*.asm"))
        if compiler == "current":
            assert v["measured_messages"]["load_block2d"] == v["predicted"]["load_block2d"] == 6
            assert ("load_block2d.ugm.d32t" in asm) == col_a, v["name"]


SYCL_TLA_TILES = """\
name: sycl_tla_pick
problem: {m: 4096, n: 4096, k: 4096}
types: {a: bf16, b: bf16, acc: f32, c: f32}
layout: {a: row, b: row, c: row}
tile: {workgroup: [256, 256, 32], subgroups: [8, 4], subgroup_size: 16}
pipeline: {prefetch: 3}
target: {grf: 256}
sweep:
  tile: [{workgroup: [256, 256, 32], subgroups: [8, 4]}, {workgroup: [128, 256, 16], subgroups: [4, 8]}]
  layout.a: [row, col]
"""


@pytest.mark.ocloc
def test_sycl_tlas_largest_and_k16_pvc_tiles_build_for_pvc_and_bmg(tmp_path):
    """Two of sycl-tla's legacy PVC tiles (bench/sycl_tla_legacy.yaml, all 64 of which build: docs/compilers.md):
    its largest, 256x256x32 on 8x4 sub-groups, and the only BK = 16 one, 128x256x16 on 4x8, with A row- and
    column-major, built by the current compiler for pvc and bmg with the plan's dpas, its 2D block loads and no
    spill."""
    from xegemm.aot.toolchain import find_ocloc
    from xegemm.jobs.pipeline import build_config
    if find_ocloc("current") is None:
        pytest.skip("the current compiler is not installed (make ocloc-current)")
    (tmp_path / "tla.yaml").write_text(SYCL_TLA_TILES)
    for target in ("pvc", "bmg"):
        result = build_config(tmp_path / "tla.yaml", target=target, out_dir=tmp_path / target, lowering="coopmat",
                              compiler="current")
        dpas = {re.search(r"_(\d+x\d+x\d+)_sg", v["name"]).group(1): v["measured_messages"]["dpas"]
                for v in result["variants"]}
        assert len(result["variants"]) == 4 and dpas == {"256x256x32": 64, "128x256x16": 32}, (target, dpas)
        for v in result["variants"]:
            assert v["status"] == "ok", v["reason"]
            assert v["measured_messages"]["dpas"] == v["predicted"]["dpas"], v["name"]
            assert v["measured_messages"]["load_block2d"] == v["predicted"]["load_block2d"] > 0, v["name"]
            assert v["isa"]["spill_bytes"] in (0, None), v["name"]


@pytest.mark.ocloc
def test_the_system_compiler_builds_the_legacy_dialect_with_the_gates(tmp_path):
    """Debian 12's ocloc 22.43 (IGC 1.0.12504) refuses the KHR opcodes; the probe finds that it takes the legacy
    SPV_INTEL_joint_matrix words (the current compiler: KHR), and `xegemm build --lowering coopmat --compiler system`
    builds the shipped MoE, split-K and stream-K configs in them: one dpas per multiply-add of the four k-step bodies, no
    spill (gathers instead of 2D block loads, reported).  Matrix pointers left global instead of Generic do not
    build there."""
    from xegemm.aot.build import compile_kernel
    from xegemm.aot.toolchain import find_ocloc
    from xegemm.evaluate.aot import coopmat_dialect
    from xegemm.jobs.pipeline import build_config
    from xegemm.lowering.coopmat import probe_kernel
    if find_ocloc("system") is None:
        pytest.skip("Debian's ocloc is not installed (intel-opencl-icd)")
    assert coopmat_dialect("pvc", "system") == "legacy"
    if find_ocloc("current") is not None:
        assert coopmat_dialect("pvc", "current") == "khr"
    for config, variants in (("moe", 2), ("split_k", 3), ("stream_k", 2)):
        result = build_config(ROOT / "configs" / f"{config}.yaml", target="pvc", out_dir=tmp_path / config,
                              lowering="coopmat", compiler="system")
        assert result["dialect"] == "legacy" and len(result["variants"]) == variants
        for v in result["variants"]:
            assert v["status"] == "ok", v["reason"]
            assert v["measured_messages"]["dpas"] == v["predicted"]["dpas"] == 8
            assert v["isa"]["spill_bytes"] in (0, None)
        source = (tmp_path / config / result["variants"][0]["name"] / "kernel.spvasm").read_text()
        assert "OpCapability !6118" in source and "OpCooperativeMatrix" not in source
    legacy = render_kernel(probe_kernel("legacy"))
    # the matrix pointers left global, not cast to Generic: Debian's IGC exits 1 without a message (or crashes)
    broken = re.sub(r"OpPtrCastToGeneric %pgen_(ab|acc) ", lambda m: "OpCopyObject %pcw_" +
                    ("u16 " if m.group(1) == "ab" else "f32 "), legacy)
    assert broken != legacy
    assert compile_kernel(legacy, "pvc", workdir=tmp_path / "good", dumps=False, compiler="system",
                          il=assemble(legacy)).ok
    assert not compile_kernel(broken, "pvc", workdir=tmp_path / "bad", dumps=False, compiler="system",
                              il=assemble(broken)).ok


@pytest.mark.ocloc
@pytest.mark.parametrize("ab, k_step", [("f16", 16), ("tf32", 8)])
@pytest.mark.parametrize("compiler", ["current", "system"])
def test_f16_and_tf32_build_for_the_gpu(compiler, ab, k_step, tmp_path):
    """f16 (OpTypeFloat 16 components) and tf32 (f32 components read as tf32, B row-major) A and B, which the CPU
    runtime's AMX does not take, through `xegemm build --lowering coopmat`: with either compiler in its dialect the
    dpas gate and no spill; tf32 in the legacy dialect refused with the reason (that compiler did not finish one)."""
    from xegemm.aot.toolchain import find_ocloc
    from xegemm.jobs.pipeline import build_config
    if find_ocloc(compiler) is None:
        pytest.skip(f"the {compiler} compiler is not installed")
    config = tmp_path / "c.yaml"
    config.write_text(f"name: {ab}\nproblem: {{m: 200, n: 96, k: 264}}\ntypes: {{a: {ab}, b: {ab}, acc: f32, c: f32}}\n"
                      "tile: {workgroup: [32, 32, 32], subgroups: [2, 2], subgroup_size: 16}\n"
                      "epilogue: {bias: col, activation: silu}\n")
    result = build_config(config, target="pvc", out_dir=tmp_path / "b", lowering="coopmat", compiler=compiler)
    (v,) = result["variants"]
    assert result["dialect"] == ("khr" if compiler == "current" else "legacy")
    assert coopmat_kernel(plan(config_from_text(config.read_text())), family="xe").tk == k_step
    if ab == "tf32" and compiler == "system":
        assert v["status"] == "rejected" and "legacy dialect" in v["reason"]
        return
    assert v["status"] == "ok", v["reason"]
    assert v["measured_messages"]["dpas"] == v["predicted"]["dpas"] == 8      # four k-step bodies of 2 x 1 tiles
    assert v["isa"]["spill_bytes"] in (0, None)


GPU_EPILOGUES = {"plain": ("f32", "", ""),
                 "bias_gelu_bf16_b_col": ("bf16", "layout: {b: col}\n",
                                          "epilogue: {alpha: 0.5, beta: 1.0, bias: row, activation: gelu_tanh}\n")}


@pytest.mark.ocloc
@pytest.mark.parametrize("epilogue", sorted(GPU_EPILOGUES))
@pytest.mark.parametrize("target", ["pvc", "bmg"])
def test_gpu_build_with_the_current_compiler_issues_the_kernels_dpas(target, epilogue, tmp_path):
    """`xegemm build --lowering coopmat`: the SPIR-V in the GPU's tiles (8-row A), built by the current compiler,
    one dpas per coop-matrix multiply-add of the four k-step bodies, 2D block loads for the interior k-step's
    global tiles, no spill, with the plain store and with an epilogue (bias, GELU, D as bf16; B column-major, packed
    on the host); the gate fails a kernel whose dpas count differs."""
    from xegemm.aot.toolchain import find_ocloc
    from xegemm.jobs.pipeline import build_config
    if find_ocloc("current") is None:
        pytest.skip("the current compiler is not installed: make ocloc-current")
    config = tmp_path / "c.yaml"
    c, layout, section = GPU_EPILOGUES[epilogue]
    config.write_text(f"name: gpu\nproblem: {{m: 256, n: 256, k: 256}}\ntypes: {{a: bf16, b: bf16, acc: f32, c: {c}}}\n"
                      "tile: {workgroup: [64, 64, 32], subgroups: [2, 2], subgroup_size: 16}\n" + layout + section)
    result = build_config(config, target=target, out_dir=tmp_path / "b", lowering="coopmat")
    (v,) = result["variants"]
    assert v["status"] == "ok", v["reason"]
    assert v["measured_messages"]["dpas"] == v["predicted"]["dpas"] == 4 * 4 * 2   # 32 x 32 per sub-group: 4 x 2 tiles of 8 x 16
    assert v["measured_messages"]["load_block2d"] == v["predicted"]["load_block2d"]
    assert v["isa"]["spill_bytes"] in (0, None)
