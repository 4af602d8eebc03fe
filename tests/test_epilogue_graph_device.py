"""The emitted C of traced epilogues, run for real: a small standalone OpenCL kernel applies a graph's element
code to a given accumulator array on the default device (the Intel OpenCL CPU runtime), stores D and the
auxiliary outputs, reduces each work-group tile to per-tile partials in a fixed order, and the emitted fix-up
kernel combines them; every output is checked against the graph's numpy reference within its derived
tolerance.  Broken graphs (an op dropped, a broadcast along the wrong axis, a reduction over the wrong axis)
run the same way and must fail against the correct function's reference."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from epilogue_examples import bias_gelu, gated, residual, row_stats, scaled_s8
from xegemm import ops
from xegemm.library.dtypes import dtype
from xegemm.epilogues.fixed import EpilogueSpec
from xegemm.epilogues.outputs import load_float, storage_ctype
from xegemm.epilogues.registry import ACTIVATIONS
from xegemm.epilogues.emit import element_code, fixup_kernel, partial_layout
from xegemm.epilogues.fixed import fixed_graph, fixed_inputs
from xegemm.epilogues.graph import Graph
from xegemm.epilogues.reference import mismatches, reference
from xegemm.epilogues.tracer import trace
from xegemm.kernel.render import environment
from xegemm.runtime.program import (
    build_program,
    from_device,
    launch,
    make_queue,
    to_device,
)

pytestmark = pytest.mark.device

M, N, BATCH = 37, 45, 2       # ragged against the tile
TILE = (8, 16)                # (BM, BN) work-group tile
NUMPY_OF = {8: np.uint8, 16: np.uint16, 32: np.uint32}


def _standalone(graph: Graph) -> tuple[str, list]:
    """OpenCL C of a kernel that applies ``graph`` per element (one work-item per element of D, one work-group
    per BM x BN tile) and stores each reduction's per-tile partials, combined in a fixed order; and the emitted
    fix-up kernels."""
    bm, bn = TILE
    integer = graph.exact_integer
    names, params = {}, []
    acc_ctype = "int" if dtype(graph.acc).is_int else "float"
    params.append(f"const global {acc_ctype}* acc")
    names["acc"] = "acc[at]" if integer or acc_ctype == "float" else "(float)acc[at]"
    for i in graph.inputs:
        if i.name == "acc":
            continue
        if i.kind == "matrix":
            params.append(f"const global {storage_ctype(i.type)}* in_{i.name}")
            names[i.name] = load_float(i.type, f"in_{i.name}[at]")
        elif i.kind == "scalar":
            params.append(f"float in_{i.name}")
            names[i.name] = f"in_{i.name}"
        else:
            params.append(f"const global float* in_{i.name}")
            names[i.name] = f"in_{i.name}[{'m' if i.kind == 'row' else 'n'}]"
    code = element_code(graph, names)
    for name in code.outputs:
        params.append(f"global {storage_ctype(graph.output(name).type)}* out_{name}")
    for r in code.reductions:
        params.append(f"global float* part_{r.name}")
    convert = environment().get_template("convert.cl.j2").module
    helpers = str(convert.bf16_rne()) + str(convert.f16_rne())
    body = [f"    {s}" for s in code.statements]
    body += [f"    out_{name}[at] = {expr};" for name, expr in code.outputs.items()]
    body += [f"    red_{r.name}[tm][tn] = {r.value};" for r in code.reductions]
    reduce_lines = []
    for r in code.reductions:
        red = r.reduction
        reduce_lines.append(f"    local float red_{r.name}[{bm}][{bn}];")
    finish = []
    for r in code.reductions:
        red = r.reduction
        combine = red.c_combine("p", f"red_{r.name}[i][j]")
        if red.kind == "row":
            finish.append(f"""    if (tn == 0 && m < M) {{
        float p = {red.identity};
        for (int i = tm, j = 0; j < {bn}; ++j)
            p = {combine};
        part_{r.name}[((long)batch * tiles_n + tile_n) * M + m] = p;
    }}""")
        elif red.kind == "col":
            finish.append(f"""    if (tm == 0 && n < N) {{
        float p = {red.identity};
        for (int i = 0, j = tn; i < {bm}; ++i)
            p = {combine};
        part_{r.name}[((long)batch * tiles_m + tile_m) * N + n] = p;
    }}""")
        else:
            finish.append(f"""    if (tm == 0 && tn == 0) {{
        float p = {red.identity};
        for (int i = 0; i < {bm}; ++i)
            for (int j = 0; j < {bn}; ++j)
                p = {combine};
        part_{r.name}[(long)batch * tiles_m * tiles_n + tile_m * tiles_n + tile_n] = p;
    }}""")
    identities = "\n".join(f"        red_{r.name}[tm][tn] = {r.reduction.identity};" for r in code.reductions)
    source = f"""{helpers}
{code.definitions}
__attribute__((reqd_work_group_size({bn}, {bm}, 1)))
__kernel void epi({', '.join(params)}, int M, int N)
{{
    const int n = get_global_id(0), m = get_global_id(1), batch = get_global_id(2);
    const int tn = get_local_id(0), tm = get_local_id(1);
    const int tile_n = get_group_id(0), tile_m = get_group_id(1);
    const int tiles_n = get_num_groups(0), tiles_m = get_num_groups(1);
{chr(10).join(reduce_lines)}
    if (m < M && n < N) {{
    const long at = ((long)batch * M + m) * N + n;
{chr(10).join(body)}
    }} else {{
{identities}
    }}
    barrier(CLK_LOCAL_MEM_FENCE);
{chr(10).join(finish)}
}}
""" + "".join(fixup_kernel(f"fix_{r.name}", r) for r in code.reductions)
    return source, code.reductions


def _storage(type_name: str, values: np.ndarray) -> np.ndarray:
    t = dtype(type_name)
    return t.encode(values).astype(NUMPY_OF[t.bits])


def run(device, graph: Graph, acc: np.ndarray, inputs: dict) -> dict[str, np.ndarray]:
    """Every output of ``graph`` computed on the device from ``acc`` (batch, M, N) and the named inputs."""
    source, reductions = _standalone(graph)
    queue = make_queue(device, profiling=False)
    program = build_program(queue, source)
    args = [to_device(queue, acc.astype(np.int32 if dtype(graph.acc).is_int else np.float32))]
    for i in graph.inputs:
        if i.name == "acc":
            continue
        value = inputs[i.name]
        if i.kind == "matrix":
            args.append(to_device(queue, _storage(i.type, np.broadcast_to(value, acc.shape))))
        elif i.kind == "scalar":
            args.append(ctypes.c_float(value))
        else:
            args.append(to_device(queue, np.asarray(value, np.float32).reshape(-1)))
    outs = {}
    for o in graph.outputs:
        if o in graph.reductions():
            continue
        t = dtype(o.type)
        outs[o.name] = to_device(queue, np.full(acc.shape, 0xFF, NUMPY_OF[t.bits]))
        args.append(outs[o.name])
    bm, bn = TILE
    tiles_m, tiles_n = -(-M // bm), -(-N // bn)
    parts = {}
    for r in reductions:
        length, tiles = partial_layout(r, M, N, TILE)
        parts[r.name] = to_device(queue, np.full(BATCH * tiles * length, np.nan, np.float32))
        args.append(parts[r.name])
    args += [ctypes.c_int(M), ctypes.c_int(N)]
    launch(queue, program.get_sycl_kernel("epi"), args, (tiles_n * bn, tiles_m * bm, BATCH), (bn, bm, 1)).wait()
    got = {}
    for name, mem in outs.items():
        t = dtype(graph.output(name).type)
        got[name] = t.decode(from_device(mem, NUMPY_OF[t.bits], acc.shape))
    for r in reductions:
        length, tiles = partial_layout(r, M, N, TILE)
        t = dtype(r.type)
        out = to_device(queue, np.zeros(BATCH * length, NUMPY_OF[t.bits]))
        launch(queue, program.get_sycl_kernel(f"fix_{r.name}"), [parts[r.name], out, ctypes.c_long(0),
                                                                 ctypes.c_int(length), ctypes.c_int(tiles)],
               (-(-length // 16) * 16, BATCH, 1), (16, 1, 1)).wait()
        values = t.decode(from_device(out, NUMPY_OF[t.bits], (BATCH, length)))
        got[r.name] = values[:, 0] if r.reduction.kind == "scalar" else values
    return got


def failures(graph_or_bounds, got: dict) -> dict[str, int]:
    return {name: mismatches(b, got[name]) for name, b in graph_or_bounds.items()}


RNG = np.random.default_rng(11)
ACC = dtype("f32").round(RNG.uniform(-4, 4, (BATCH, M, N)))
ROW = dtype("f32").round(RNG.uniform(-1, 1, M))
COL = dtype("f32").round(RNG.uniform(-1, 1, N))
POSITIVE = dtype("f32").round(RNG.uniform(0.25, 4, (BATCH, M, N)))
UP = dtype("bf16").round(RNG.uniform(-2, 2, (BATCH, M, N)))


def _check(device, graph, acc, inputs):
    bounds = reference(graph, acc, 0.0, inputs)
    got = run(device, graph, acc, inputs)
    bad = failures(bounds, got)
    assert not any(bad.values()), f"{graph.function}: elements out of tolerance per output {bad}"
    reduced = {o.name: {"row": N, "col": M, "scalar": M * N}[graph.nodes[o.node].kind] for o in graph.reductions()}
    for name, b in bounds.items():   # and the tolerance is no blanket: f32 outputs are pinned to a few ulps
        if graph.output(name).type == "f32":   # (a sum: 2 n u either side, the rule of docs/epilogues.md)
            width = (b.high - b.low) / (np.abs(b.expected) + 1.0)
            limit = 5 * reduced[name] * 2.0 ** -24 if name in reduced else 1e-5
            assert np.median(width) < limit, f"{graph.function}: output {name} allows {np.median(width):.2g}"
    return got, bounds


# ---- every op ------------------------------------------------------------------------------------------------

def _cast_to(type_name: str):
    def cast(acc):
        return ops.cast(acc * 40.0, type_name) * 0.5
    return cast


OP_CASES = {
    "add": (lambda acc, r: acc + r, {"r": "row"}), "sub": (lambda acc, r: r - acc, {"r": "col"}),
    "mul": (lambda acc, r: acc * r * 3.5, {"r": "row"}), "div": (lambda acc, p: acc / p, {"p": "matrix"}),
    "neg_abs": (lambda acc: -ops.abs(acc), {}), "maximum": (lambda acc, r: ops.maximum(acc, r), {"r": "col"}),
    "minimum": (lambda acc: ops.minimum(acc, 0.5), {}),
    "where_lt": (lambda acc, r: ops.where(acc < r, acc, r * 2.0), {"r": "row"}),
    "where_ge_eq": (lambda acc: ops.where(acc >= 1.0, 1.0, ops.where(acc == 0.0, 2.0, acc)), {}),
    "exp": (lambda acc: ops.exp(acc), {}), "log": (lambda acc, p: ops.log(p) + acc, {"p": "matrix"}),
    "sqrt": (lambda p: ops.sqrt(p), {"p": "matrix"}), "rsqrt": (lambda p: ops.rsqrt(p), {"p": "matrix"}),
    "tanh": (lambda acc: ops.tanh(acc), {}), "sigmoid": (lambda acc: ops.sigmoid(acc), {}),
    "relu": (lambda acc: ops.relu(acc), {}), "silu": (lambda acc: ops.silu(acc), {}),
    "gelu_erf": (lambda acc: ops.gelu(acc), {}), "gelu_tanh": (lambda acc: ops.gelu(acc, approximate="tanh"), {}),
    "hardswish": (lambda acc: ops.hardswish(acc), {}),
    "clamp": (lambda acc, lo: ops.clamp(acc, lo, 1.5), {"lo": "scalar"}),
    "pow": (lambda acc: acc ** 3 - acc ** 2, {}),
    **{f"cast_{t}": (_cast_to(t), {}) for t in ("f16", "bf16", "s8", "u8", "s32")},
}
INPUTS = {"r": None, "p": POSITIVE, "lo": -0.75}


@pytest.mark.parametrize("name", sorted(OP_CASES))
def test_each_op_runs_as_its_reference_says(name, sycl_device):
    fn, kinds = OP_CASES[name]
    fn.__qualname__ = name
    graph = trace(fn, kinds, out="f32")
    inputs = {k: (ROW if kinds[k] == "row" else COL) if k == "r" else INPUTS[k] for k in kinds}
    acc = POSITIVE if graph.reads("p") and not graph.reads("acc") else ACC
    _check(sycl_device, graph, acc, inputs)


# ---- the documented examples -----------------------------------------------------------------------------------

C_BF16 = dtype("bf16").round(RNG.uniform(-2, 2, (BATCH, M, N)))
SCALE = dtype("f32").round(RNG.uniform(0, 40, M))
EXAMPLES = {
    "bias_gelu_pre_activation_aux": (bias_gelu, {"bias": "row"}, {"pre": "f32"}, "bf16", {"bias": ROW}),
    "residual_bf16": (residual, {}, {}, "bf16", {"c": C_BF16}),
    "gated_silu_up": (gated, {"up": {"kind": "matrix", "type": "bf16"}}, {}, "f16", {"up": UP}),
    "row_scale_clamp_s8": (scaled_s8, {"scale": "row"}, {}, "s8", {"scale": SCALE}),
    "row_max_row_sum": (row_stats, {"bias": "col"}, {}, "f32", {"bias": COL}),
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_documented_examples_run_as_their_reference_says(name, sycl_device):
    fn, kinds, outputs, out, inputs = EXAMPLES[name]
    graph = trace(fn, kinds, outputs, out=out)
    got, _ = _check(sycl_device, graph, ACC, inputs)
    if name == "row_scale_clamp_s8":     # the clamp and the saturation are exercised, not vacuous
        assert (got["d"] == 100).sum() > 10 and (got["d"] == -100).sum() > 10
    if name == "row_max_row_sum":
        assert got["rowmax"].shape == (BATCH, M) and got["colsum"].shape == (BATCH, N)
        assert got["total"].shape == (BATCH,)
        again = run(sycl_device, graph, ACC, inputs)    # no atomics: the same bits every run
        assert all(np.array_equal(got[k], again[k]) for k in got)


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_the_fixed_epilogues_traced_run_as_todays_reference_says(activation, sycl_device):
    spec = EpilogueSpec(0.75, -1.25, "col", activation, (-0.5, 0.25), "f32", "bf16")
    graph = fixed_graph(spec)
    _check(sycl_device, graph, ACC, fixed_inputs(spec, C_BF16, COL))


def test_the_exact_integer_path_runs_exactly(sycl_device):
    spec = EpilogueSpec(1.0, 0.0, "none", "relu", (0.0, 6.0), "s32", "s8")
    graph = fixed_graph(spec)
    assert graph.exact_integer
    acc = RNG.integers(-400, 400, (BATCH, M, N)).astype(np.int64)
    got, _ = _check(sycl_device, graph, acc, {})
    assert np.array_equal(got["d"], np.clip(np.maximum(acc, 0), 0, 127))


# ---- broken graphs fail ----------------------------------------------------------------------------------------

def gelu_dropped(acc, bias):
    pre = acc + bias
    return {"d": pre, "pre": pre}


def silu_dropped(acc, up):
    return acc * up


def scale_dropped(acc, scale):
    return ops.clamp(acc, -100.0, 100.0)


def stats_wrong_axis(acc, bias):     # the bias broadcast along rows instead of columns
    y = ops.relu(acc + bias)
    return {"d": y, "rowmax": ops.row_max(y), "rowsum": ops.row_sum(y), "colsum": ops.col_sum(y),
            "colmax": ops.col_max(y), "total": ops.sum(y)}


def stats_reduced_wrong_axis(acc, bias):
    y = ops.relu(acc + bias)
    return {"d": y, "rowmax": ops.row_max(y), "rowsum": ops.col_sum(y), "colsum": ops.col_sum(y),
            "colmax": ops.col_max(y), "total": ops.sum(y)}


SQUARE = 32    # a square problem, so that a reduction over the wrong axis has the right shape and wrong values

BROKEN = {
    # name: (correct, broken, kinds of the broken, what must fail)
    "gelu dropped": ("bias_gelu_pre_activation_aux", gelu_dropped, {"bias": "row"}, "d"),
    "silu dropped": ("gated_silu_up", silu_dropped, {"up": {"kind": "matrix", "type": "bf16"}}, "d"),
    "row scale dropped": ("row_scale_clamp_s8", scale_dropped, {"scale": "row"}, "d"),
    "bias broadcast along the wrong axis": ("row_max_row_sum", stats_wrong_axis, {"bias": "row"}, "d"),
    "row sum taken over columns": ("row_max_row_sum", stats_reduced_wrong_axis, {"bias": "col"}, "rowsum"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_graph_fails_against_the_correct_reference(name, sycl_device, monkeypatch):
    correct, broken, kinds, output = BROKEN[name]
    fn, good_kinds, outputs, out, inputs = EXAMPLES[correct]
    monkeypatch.setattr(f"{__name__}.M", SQUARE)
    monkeypatch.setattr(f"{__name__}.N", SQUARE)
    acc = ACC[:, :SQUARE, :SQUARE]
    sized = {k: (v[:SQUARE] if np.ndim(v) == 1 else v[:, :SQUARE, :SQUARE]) for k, v in inputs.items()}
    if name == "bias broadcast along the wrong axis":
        sized = {"bias": COL[:SQUARE]}
    want = reference(trace(fn, good_kinds, outputs, out=out), acc, 0.0, sized)
    # the correct graph passes on these inputs ...
    assert not any(failures(want, run(sycl_device, trace(fn, good_kinds, outputs, out=out), acc, sized)).values())
    # ... and the broken one fails where it is broken
    got = run(sycl_device, trace(broken, kinds, outputs, out=out), acc, sized)
    bad = failures({output: want[output]}, got)
    assert bad[output] > 0, f"{name}: the broken graph passed"


# ---- random compositions: the per-op rules compose soundly -----------------------------------------------------

UNARY = [ops.exp, ops.tanh, ops.sigmoid, ops.relu, ops.silu, ops.gelu, lambda x: ops.gelu(x, approximate="tanh"),
         ops.hardswish, lambda x: ops.log(ops.abs(x) + 0.125), lambda x: ops.sqrt(ops.abs(x)),
         lambda x: ops.rsqrt(ops.abs(x) + 0.125), lambda x: ops.clamp(x, -1.0, 0.5), lambda x: -x,
         lambda x: ops.cast(x, "bf16"), lambda x: ops.cast(x * 8.0, "s8"), lambda x: ops.cast(x, "f16")]
BINARY = [lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b, lambda a, b: a / (ops.abs(b) + 0.25),
          ops.maximum, ops.minimum, lambda a, b: ops.where(a < b, a * 2.0, b)]


def _random_function(seed: int):
    """A random epilogue of depth ~6 over acc, a row and a column vector, with an auxiliary bf16 output and a
    row sum: every op of xegemm.ops in compositions nobody wrote by hand."""
    rng = np.random.default_rng(seed)
    plan = [(int(rng.integers(2)), int(rng.integers(len(UNARY))), int(rng.integers(len(BINARY))),
             int(rng.integers(1, 4))) for _ in range(6)]

    def epilogue(acc, r, q):
        pool = [acc, r, q, acc * 0.5]
        for binary, u, b, pick in plan:
            x = pool[-1]
            y = BINARY[b](x, pool[-1 - pick]) if binary else UNARY[u](x)
            pool.append(ops.clamp(y, -30.0, 30.0))   # keeps exp from overflowing f32 in long chains
        return {"d": pool[-1], "aux": pool[-3], "rs": ops.row_sum(pool[-2])}
    epilogue.__qualname__ = f"random_{seed}"
    return epilogue


@pytest.mark.parametrize("seed", range(24))
def test_random_compositions_run_as_their_reference_says(seed, sycl_device):
    graph = trace(_random_function(seed), {"r": "row", "q": "col"}, {"aux": "bf16"}, out="f32")
    bounds = reference(graph, ACC, 0.0, {"r": ROW, "q": COL})
    got = run(sycl_device, graph, ACC, {"r": ROW, "q": COL})
    bad = failures(bounds, got)
    assert not any(bad.values()), f"{[n.op for n in graph.nodes]}: out of tolerance {bad}"
