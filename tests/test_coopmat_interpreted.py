"""The coopmat lowering's kernels run by the reference interpreter (xegemm.verify.interpreter), on every machine:
the cases, mutants and launches of tests/test_coopmat.py (whose device tests need a CPU with AMX) by the SPIR-V
semantics, each laid out as the evaluator lays it out and judged by xegemm.verify.dense's or .grouped's check;
the modules rendered for the GPU compiler too (f16, tf32, a column-major A loaded as such), which no device here
runs.  The interpreter is not a device: nothing here is timed (docs/lowerings.md "The reference interpreter")."""

from __future__ import annotations

import numpy as np
import pytest

from test_coopmat import (A_COL_AS_ROW, EPILOGUE_MUTANTS, EPILOGUES, FIXED, GROUPED_MUTANTS, GROUPED_SMALL, LAYOUTS,
                          MUTANTS, QUANTIZED, SHAPES, SPLIT, SPLIT_MUTANTS, STREAM, STREAM_MUTANTS, TRACED,
                          TRACED_MUTANTS, _arguments, _broken_grouped, _broken_traced, _grouped_variants,
                          _host_buffers, _inputs, _packed_b, _split, _stream, _traced)
from xegemm.lowering import Lowering


def _interpret(name: str, epilogue: str, edit: tuple[str, str] | None = None, b_storage: str = "packed",
               family: str = "amx"):
    """The case of :func:`_inputs` run by the reference interpreter (xegemm.verify.interpreter); (ok, reason)."""
    from xegemm.verify.dense import check, reference
    from xegemm.verify.interpreter import InterpreterError, run_kernel

    config, ops, k, text, host = _inputs(name, epilogue, edit, b_storage, family=family)
    p = config.problem
    try:
        run_kernel(text, k.name, _arguments(config, k, host), k.global_size(p.m, p.n, p.batch), k.local)
    except InterpreterError as e:
        return False, f"the interpreter stopped: {e}"
    verdict = check(config, host["D"], reference(config, ops))
    return verdict.ok, verdict.reason


def _interpret_variant(pv, source: str | None = None):
    """A planned variant's whole call (each launch of KernelCall: a split-K or stream-K reduce second, a traced
    epilogue's inputs and outputs) run by the reference interpreter on the evaluator's operands, B packed by the
    numpy reference; (ok, reason) of the evaluator's check, its auxiliary outputs included."""
    from xegemm.evaluate import render_variant
    from xegemm.evaluate.device import epilogue_scalars, traced_host_buffers
    from xegemm.kernel.arguments import KernelCall
    from xegemm.verify.dense import check, make_operands, reference
    from xegemm.verify.interpreter import InterpreterError, Program

    config, p = pv.config, pv.config.problem
    ops = make_operands(config, graph=pv.plan.graph)
    call = KernelCall.of(pv.plan)
    sizes = call.sizes(p.m, p.n, p.k, p.batch)
    traced = traced_host_buffers(config, ops)
    host = _host_buffers(config, ops, _packed_b(config, ops), traced)
    program = Program(source or render_variant(pv, Lowering("coopmat")))
    try:
        for kernel, args, gsize, lsize in call.bind(sizes, host, epilogue_scalars(config) | traced["named_scalars"]):
            program.launch(kernel, args, gsize, lsize)
    except InterpreterError as e:
        return False, f"the interpreter stopped: {e}"
    outputs = {name: host[k] for k, (_, name) in traced["aux_outputs"].items()}
    verdict = check(config, host["D"], reference(config, ops), outputs)
    return verdict.ok, verdict.reason


def _interpret_grouped(pv, source: str | None = None, compute_units: int = 3):
    """A grouped or MoE variant's launch run by the reference interpreter as the evaluator lays it out
    (xegemm.kernel.grouped_launch, persistent work-groups for ``compute_units``), every group's B packed by the numpy
    reference at the table's packed offsets (a quantized expert dequantized first), launched twice as the evaluator
    does (the dynamic walk's counter zeroed before each); (ok, reason) of its group-by-group check."""
    from xegemm.evaluate import render_variant
    from xegemm.evaluate.device import epilogue_scalars
    from xegemm.evaluate.grouped import GroupedSetup, grouped_host_arrays
    from xegemm.grouped.problem import from_config
    from xegemm.grouped.table import FIELD
    from xegemm.kernel.arguments import KernelCall
    from xegemm.kernel.grouped_launch import grouped_launch
    from xegemm.verify.grouped import check_groups, group_operands, group_references
    from xegemm.verify.interpreter import InterpreterError, Program

    config, plan = pv.config, pv.plan
    problem = from_config(config)
    layout = grouped_launch(plan, problem, compute_units)
    ops = group_operands(config, problem)
    packed = np.zeros(max(4, layout.nbytes["B_packed"]), np.uint8)
    for g, o, at in zip(problem.groups, ops, layout.packed_b_offsets):
        if o is not None:
            b = np.ascontiguousarray(_packed_b(config, o, k=g.k, n=g.n)).reshape(-1).view(np.uint8)
            packed[at:at + b.size] = b
    host = grouped_host_arrays(plan, layout, ops) | {"B": packed}
    poison = host["D"]
    buffers = {k: np.ascontiguousarray(v).reshape(-1).view(np.uint8).copy() for k, v in host.items()}
    call = KernelCall.of(plan)
    ((kernel, args, gsize, lsize),) = call.bind(call.grouped_sizes(**layout.sizes), buffers, epilogue_scalars(config))
    program = Program(source or render_variant(pv, Lowering("coopmat")))
    try:
        for _ in range(2):
            buffers["D"][:] = poison
            buffers["tile_counter"][:] = 0
            program.launch(kernel, args, gsize, lsize)
    except InterpreterError as e:
        return False, f"the interpreter stopped: {e}"
    refs = group_references(config, problem, ops)
    verdict = check_groups(config, problem, buffers["D"], layout.table[:, FIELD["c_offset"]], refs)
    if not verdict.ok:
        return False, verdict.reason
    setup = GroupedSetup(config, problem, layout, buffers, poison, refs, np.zeros(1, np.int32), 0)
    return (True, None) if setup.untouched(buffers["D"]) else (False, "D written outside every group")


CASES = ([(s, e) for s in sorted(SHAPES) for e in sorted(EPILOGUES)] + [(f, "fixed") for f in sorted(FIXED)]
         + [(q, "quantized") for q in sorted(QUANTIZED)] + [(x, "layouts") for x in sorted(LAYOUTS)])
GPU_TYPES = ("f16_f16_out", "tf32", "s8_u8", "u8_s8")


@pytest.mark.parametrize("name,epilogue", CASES + [("bf16_k16_sg1x2", "plain"), ("s8_u8", "plain"),
                                                   ("u8_s8", "plain")])
def test_the_cpu_module_computes_the_gemm_by_the_spirv_semantics(name, epilogue):
    """Every case the CPU runtime runs above, and the mixed signs, interpreted: the module itself is right, on any
    machine.  ``bf16_k16_sg1x2`` is the work-group whose result the CPU runtime gets wrong: right here."""
    ok, reason = _interpret(name, epilogue)
    assert ok, reason


@pytest.mark.parametrize("name,epilogue", [(s, "alpha_beta") for s in sorted(SHAPES)] + [(x, "layouts") for x in
                                                                                       sorted(LAYOUTS)]
                         + [(g, "plain") for g in GPU_TYPES])
def test_the_gpu_module_computes_the_gemm_by_the_spirv_semantics(name, epilogue):
    """The modules ``xegemm build --lowering coopmat`` gives the GPU compiler (8-row A tiles; a column-major A
    loaded as ColumnMajorKHR at interior k-steps; f16 and tf32), which no device here runs: right by the spec."""
    ok, reason = _interpret(name, epilogue, family="xe")
    assert ok, reason


INTERPRETED_MUTANTS = {   # (case, epilogue, edit, B storage) that must fail in the interpreter
    **{f"kernel_{m}": (case, "alpha_beta", (old, new), "packed") for m, (case, old, new) in MUTANTS.items()},
    **{f"epilogue_{m}": (case, "fixed", (old, new), "packed") for m, (case, old, new) in EPILOGUE_MUTANTS.items()},
    "a_col_read_as_row": ("bf16_a_col", "layouts", A_COL_AS_ROW, "packed"),
    "b_not_vnni_packed": ("bf16_64", "plain", None, "plain"),
    "zero_points_lost": ("gptq_g128", "quantized", None, "wrong_zeros"),
    # a sub-group's local block placed by work-item instead of by sub-group (the last ones past the array's end)
    "local_block_per_work_item": ("bf16_ragged", "plain", ("%sg_la = OpIMul %u32 %sg %c_a_block",
                                                           "%sg_la = OpIMul %u32 %lane %c_a_block"), "packed"),
}


@pytest.mark.parametrize("mutant", sorted(INTERPRETED_MUTANTS))
def test_a_broken_module_fails_in_the_interpreter(mutant):
    name, epilogue, edit, storage = INTERPRETED_MUTANTS[mutant]
    ok, reason = _interpret(name, epilogue, edit, storage)
    assert not ok, "the broken module verified"


@pytest.mark.parametrize("name", sorted(GROUPED_SMALL) + ["moe_w4a16_bf16"])
def test_grouped_and_moe_launches_compute_by_the_spirv_semantics(name):
    """Both walks over the problem table (the dynamic one's atomic counter), empty groups and experts, odd K
    (packed groups longer than stored ones), quantized experts: every group, and nothing written between them."""
    for pv in _grouped_variants(name):
        ok, reason = _interpret_grouped(pv)
        assert ok, (pv.config.tile.walk, reason)


@pytest.mark.parametrize("walk, old, new", GROUPED_MUTANTS)
def test_a_broken_grouped_module_fails_in_the_interpreter(walk, old, new):
    ok, _ = _interpret_grouped(*_broken_grouped("grouped_small_odd_k", walk, old, new))
    assert not ok, "the broken module verified"


# -- split K, stream-K and traced epilogues by the SPIR-V semantics: the whole call, each launch of KernelCall ------
CALLS = {"split": _split, "stream": _stream}


@pytest.mark.parametrize("kind,name", [("split", n) for n in sorted(SPLIT)] + [("stream", n) for n in sorted(STREAM)])
def test_split_k_and_stream_k_calls_compute_the_gemm_by_the_spirv_semantics(kind, name):
    ok, reason = _interpret_variant(CALLS[kind](name))
    assert ok, reason


@pytest.mark.parametrize("kind,old,new", [("split", *m) for m in SPLIT_MUTANTS] + [("stream", *m) for m in STREAM_MUTANTS])
def test_a_broken_split_k_or_stream_k_module_fails_in_the_interpreter(kind, old, new):
    from xegemm.evaluate import render_variant
    pv = CALLS[kind]("gptq")
    source = render_variant(pv, Lowering("coopmat"))
    assert old in source
    ok, _ = _interpret_variant(pv, source.replace(old, new))
    assert not ok, "the broken module verified"


@pytest.mark.usefixtures("code_allowed")
@pytest.mark.parametrize("name", sorted(TRACED))
def test_a_traced_epilogue_computes_by_the_spirv_semantics(name):
    ok, reason = _interpret_variant(_traced(name))
    assert ok, reason


@pytest.mark.usefixtures("code_allowed")
@pytest.mark.parametrize("case, old, new", TRACED_MUTANTS)
def test_a_broken_traced_epilogue_fails_in_the_interpreter(case, old, new):
    ok, _ = _interpret_variant(*_broken_traced(case, old, new))
    assert not ok, "the broken module verified"
