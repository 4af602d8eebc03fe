"""Traced epilogues on the host: the graph a function traces to, its stable name, the errors a bad function
gets (naming the function, its line and the reason), the numpy reference and its tolerance, the fixed epilogue
as a traced function (same C, same reference), and the config form.  The emitted C runs on the device in
tests/test_epilogue_graph_device.py."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap

import epilogue_examples as examples
import numpy as np
import pytest
import xegemm
from xegemm import ops
from xegemm.library.dtypes import dtype
from xegemm.epilogues.fixed import EpilogueSpec, reference_bounds
from xegemm.epilogues.outputs import U32, load_float, round_to
from xegemm.epilogues.registry import ACTIVATIONS
from xegemm.epilogues.config import load_epilogue, resolve_function
from xegemm.epilogues.emit import (
    c_float,
    element_code,
    fixup_kernel,
    partial_layout,
)
from xegemm.epilogues.errors import (
    EpilogueError,
    EpilogueLoadError,
    OutputTypeError,
    ShapeError,
    UnknownOpError,
    UnsupportedConstructError,
)
from xegemm.epilogues.fixed import fixed_graph, fixed_inputs
from xegemm.epilogues.reference import mismatches, node_values, reference
from xegemm.epilogues.tracer import input_kind, kinds_from_arrays, trace


pytestmark = pytest.mark.usefixtures("code_allowed")

# ---- the documented examples -----------------------------------------------------------------------------------

bias_gelu = xegemm.epilogue(examples.bias_gelu, inputs={"bias": "row"}, outputs={"pre": "f32"})
residual, gated, scaled_s8, row_stats = examples.residual, examples.gated, examples.scaled_s8, examples.row_stats


def test_the_documented_examples_trace_to_typed_graphs():
    g = bias_gelu.trace(out="bf16")
    assert [(i.name, i.kind, i.type) for i in g.inputs] == [("acc", "matrix", "f32"), ("bias", "row", "f32")]
    assert [n.op for n in g.nodes] == ["input", "input", "add", "gelu_erf"]
    assert [(o.name, o.type) for o in g.outputs] == [("d", "bf16"), ("pre", "f32")]
    assert g.auxiliaries() == [g.output("pre")] and g.reductions() == []
    assert g.tag == "bias_gelu_erf_pre"

    r = trace(residual, out="bf16")
    assert [n.op for n in r.nodes] == ["input", "input", "add"] and r.reads("c") and r.input("c").type == "bf16"

    gu = trace(gated, {"up": {"kind": "matrix", "type": "bf16"}})
    assert gu.input("up") == xegemm.epilogues.Input("up", "matrix", "bf16")
    assert [n.op for n in gu.nodes][-2:] == ["silu", "mul"] and gu.tag == "up_silu"

    s = trace(scaled_s8, {"scale": "row"}, out="s8")
    assert [n.op for n in s.nodes] == ["input", "input", "mul", "const", "const", "clamp"]
    assert s.nodes[3].attr == -100.0 and s.nodes[5].kind == "matrix"

    st = trace(row_stats, {"bias": "col"})
    assert [(o.name, o.type, st.nodes[o.node].op, st.nodes[o.node].kind) for o in st.reductions()] == \
        [("rowmax", "f32", "row_max", "row"), ("rowsum", "f32", "row_sum", "row"), ("colsum", "f32", "col_sum", "col"),
         ("colmax", "f32", "col_max", "col"), ("total", "f32", "sum", "scalar")]
    assert st.tag == "bias_relu_row_max_row_sum_col_sum"   # at most 40 characters, whole words


def test_kinds_broadcast_row_and_column_to_a_matrix():
    g = trace(lambda a, b: a * b + 2.0, {"a": "row", "b": "col"})
    assert [n.kind for n in g.nodes] == ["row", "col", "matrix", "scalar", "matrix"]
    assert trace(lambda a, s: a * s, {"a": "row", "s": "scalar"}).nodes[-1].kind == "row"


def test_the_hash_names_the_computation_not_the_spelling():
    def one(acc, bias):
        pre = acc + bias
        return {"d": ops.gelu(pre), "pre": pre}

    def two(acc, bias):   # other names, the same graph
        t = acc + bias
        return {"d": ops.gelu(t), "pre": t}
    assert trace(one, {"bias": "row"}).key == trace(two, {"bias": "row"}).key
    others = [trace(one, {"bias": "col"}), trace(one, {"bias": "row"}, out="bf16"),
              trace(lambda acc, bias: {"d": ops.gelu(acc - bias), "pre": acc - bias}, {"bias": "row"}),
              trace(lambda acc, bias: {"d": ops.gelu(acc + bias, "tanh"), "pre": acc + bias}, {"bias": "row"})]
    keys = {g.key for g in others} | {trace(one, {"bias": "row"}).key}
    assert len(keys) == 5
    # stable across processes and Python's hash seeds: the canonical JSON's sha256, pinned
    g = bias_gelu.trace(out="bf16")
    assert g.key == "4c602197", g.canonical()
    assert g.name_suffix() == "_epi_bias_gelu_erf_pre_4c602197"
    code = ("import xegemm; from xegemm import ops\n"
            "f = xegemm.epilogue(lambda acc, bias: {'d': ops.gelu(acc + bias), 'pre': acc + bias},"
            " inputs={'bias': 'row'}, outputs={'pre': 'f32'})\nprint(f.trace(out='bf16').key)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PYTHONHASHSEED": "123", "PYTHONPATH": ":".join(sys.path)})
    assert done.stdout.strip() == g.key, done.stderr


def test_common_values_are_traced_once():
    g = trace(lambda acc: ops.exp(acc) + ops.exp(acc))
    assert [n.op for n in g.nodes] == ["input", "exp", "add"]


# ---- errors: the function, its line, the reason ---------------------------------------------------------------

def _line_of(fn, text: str) -> int:
    import inspect
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def data_dependent(acc):
    if acc > 0:
        return acc
    return -acc


def unknown_op(acc):
    return ops.softmax(acc)


def numpy_sin(acc):
    return np.sin(acc) + 1.0


def constant_array(acc):
    return acc + np.ones(5)


def reduction_reused(acc):
    s = ops.row_sum(acc)
    return acc / s


def returns_condition(acc, bias):
    return {"d": acc, "mask": acc > bias}


def raises_inside(acc):
    return len(acc.shape)


@pytest.mark.parametrize("fn, cls, line_text, reason", [
    (data_dependent, UnsupportedConstructError, "if acc > 0", "data-dependent `if`"),
    (unknown_op, UnknownOpError, "ops.softmax", "xegemm.ops.softmax is not an epilogue op"),
    (numpy_sin, UnknownOpError, "np.sin", "numpy.sin is not an epilogue op"),
    (constant_array, ShapeError, "np.ones(5)", "shape (5,) cannot broadcast"),
    (reduction_reused, ShapeError, "acc / s", "only be returned as an output"),
    (returns_condition, OutputTypeError, "acc > bias", "'mask' is a comparison"),
    (raises_inside, UnsupportedConstructError, "len(acc.shape)", "raised AttributeError"),
])
def test_a_bad_function_is_named_with_its_line_and_reason(fn, cls, line_text, reason):
    with pytest.raises(cls) as err:
        trace(fn, {"bias": "row"} if "bias" in fn.__code__.co_varnames else {})
    e = err.value
    assert e.function == fn.__qualname__ and reason in e.reason, str(e)
    assert e.site[0].endswith("test_epilogue_graph.py") and e.site[1] == _line_of(fn, line_text), str(e)
    assert str(e).startswith(f"epilogue {fn.__qualname__} (") and f":{e.site[1]}): " in str(e)


@pytest.mark.parametrize("kwargs, cls, reason", [
    (dict(fn=lambda acc, bias: acc + bias), ShapeError, "input 'bias' has no kind"),
    (dict(fn=lambda acc: acc, inputs={"bias": "row"}), ShapeError, "not a parameter"),
    (dict(fn=lambda acc, bias: acc + bias, inputs={"bias": "diagonal"}), ShapeError, "kind 'diagonal'"),
    (dict(fn=lambda acc: acc, outputs={"aux": "f16"}), OutputTypeError, "declares output 'aux'"),
    (dict(fn=lambda acc: {"d": acc, "s": ops.row_sum(acc)}, outputs={"s": "s8"}), OutputTypeError,
     "cannot be stored as s8"),
    (dict(fn=lambda acc: {"d": acc, "a": acc}, outputs={"a": "f64"}), OutputTypeError, "cannot be stored as f64"),
    (dict(fn=lambda acc: {"d": acc, "a": acc}, outputs={"a": "f13"}), OutputTypeError, "unknown data type 'f13'"),
    (dict(fn=lambda acc: ops.cast(acc, "s4")), OutputTypeError, "cannot cast to s4"),
    (dict(fn=lambda acc: (acc, acc)), OutputTypeError, "returns a tuple"),
    (dict(fn=lambda acc: {"e": acc}), OutputTypeError, "without 'd'"),
    (dict(fn=lambda acc: ops.row_sum(acc)), ShapeError, "D is row_sum"),
    (dict(fn=lambda acc: acc + (acc > 0)), UnsupportedConstructError, "a condition is not a number"),
    (dict(fn=lambda acc: ops.where(acc, acc, 0.0)), UnsupportedConstructError, "needs a comparison"),
    (dict(fn=lambda acc: acc ** 0.5), UnsupportedConstructError, "constant integer powers"),
    (dict(fn=lambda *tiles: tiles[0]), UnsupportedConstructError, "not *args"),
    (dict(fn=lambda acc: float(acc)), UnsupportedConstructError, "float() needs the value"),
    (dict(fn=lambda acc: acc, out="s4"), OutputTypeError, "D cannot be stored as s4"),
])
def test_bad_declarations_and_returns_are_clear(kwargs, cls, reason):
    fn = kwargs.pop("fn")
    with pytest.raises(cls) as err:
        trace(fn, **kwargs)
    assert reason in str(err.value) and str(err.value).startswith("epilogue "), str(err.value)
    assert isinstance(err.value, xegemm.errors.XegemmError)


def test_the_unknown_op_error_outside_tracing_is_an_attribute_error():
    with pytest.raises(AttributeError, match="not an epilogue op"):
        ops.softmax


# ---- the numpy side ------------------------------------------------------------------------------------------

RNG = np.random.default_rng(7)
M, N, B = 6, 10, 2


def _acc():
    return dtype("f32").round(RNG.uniform(-3, 3, (B, M, N)))


def test_the_function_on_numpy_arrays_is_the_graphs_reference():
    """The same function, called on numpy arrays (xegemm.ops computes with numpy), gives the values the graph's
    reference computes before the output conversion."""
    acc, bias = _acc(), dtype("f32").round(RNG.uniform(-1, 1, M))
    direct = bias_gelu(acc, bias.reshape(M, 1))
    g = bias_gelu.trace()
    values = node_values(g, acc, 0.0, {"bias": bias})
    assert np.allclose(direct["d"], values[g.output("d").node][0], rtol=1e-12, atol=0)
    assert np.array_equal(direct["pre"], values[g.output("pre").node][0])
    stats = row_stats(acc, bias.reshape(M, 1) * 0 + RNG.uniform(-1, 1, N))
    assert stats["rowmax"].shape == (B, M, 1) and np.all(stats["rowmax"] >= stats["d"])


def _formula_bounds(spec: EpilogueSpec, acc, acc_tol, c_in, bias):
    """The fixed epilogue's error formula as docs/epilogues.md writes it, computed directly: each f32 operation of
    alpha * acc + beta * C + bias rounds once (4 u_f32 of the terms' magnitudes), the activation carries that
    through its slope and adds its own error; the exact integer path has no tolerance.  An oracle for the
    graph's reference, which the verifier uses."""
    out = dtype(spec.out)
    if spec.exact_integer:
        expected = round_to(out, ACTIVATIONS[spec.activation].reference(acc.astype(np.float64), *spec.clamp))
        return expected, expected, expected
    alpha, beta = np.float64(np.float32(spec.alpha)), np.float64(np.float32(spec.beta))
    z = alpha * acc.astype(np.float64)
    magnitude = np.abs(z) + abs(alpha) * acc_tol
    if spec.reads_c:
        z, magnitude = z + beta * c_in, magnitude + np.abs(beta * c_in)
    if spec.bias != "none":
        b = bias[None, :, None] if spec.bias == "row" else bias[None, None, :]
        z, magnitude = z + b, magnitude + np.abs(b)
    activation = ACTIVATIONS[spec.activation]
    y = activation.reference(z, *(float(np.float32(v)) for v in spec.clamp))
    tol = activation.lipschitz * (abs(alpha) * acc_tol + 4 * U32 * magnitude) \
        + activation.error_units * U32 * (np.abs(y) + 1.0) + np.finfo(np.float32).tiny
    return round_to(out, y), round_to(out, y - tol), round_to(out, y + tol)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_the_fixed_epilogues_reference_is_the_graphs_and_within_the_formula(name):
    """The fixed epilogue's reference (reference_bounds, computed through its graph) gives the same expected D
    as the documented error formula for the same inputs (every alpha/beta/bias combination, float and integer
    paths), and a tolerance no wider."""
    for (acc_t, out), alpha, beta, bias in itertools.product(
            [("f32", "f32"), ("f32", "bf16"), ("f32", "f16"), ("s32", "s8"), ("s32", "u8"), ("s32", "s32"),
             ("bf16", "bf16")], [1.0, 0.75], [0.0, -1.25], ["none", "row", "col"]):
        spec = EpilogueSpec(alpha, beta, bias, name, (-0.5, 0.25), acc_t, out)
        acc = RNG.integers(-300, 300, (B, M, N)) if acc_t == "s32" else \
            dtype(acc_t).round(RNG.uniform(-3, 3, (B, M, N)))
        c = RNG.integers(-50, 50, (B, M, N)).astype(np.float64) if out in ("s8", "s32") else \
            RNG.integers(0, 50, (B, M, N)).astype(np.float64) if out == "u8" else \
            dtype(out).round(RNG.uniform(-1, 1, (B, M, N)))
        b = dtype("f32").round(RNG.uniform(-1, 1, M if bias == "row" else N))
        expected, low, high = _formula_bounds(spec, acc, 1e-5, c, b if bias != "none" else None)
        graph = reference_bounds(spec, acc, 1e-5, c, b if bias != "none" else None)
        traced = reference(fixed_graph(spec), acc, 1e-5, fixed_inputs(spec, c, b))["d"]
        assert np.array_equal(graph.expected, traced.expected) and np.array_equal(graph.low, traced.low)
        assert np.array_equal(expected, graph.expected), spec
        assert np.all(graph.low >= low) and np.all(graph.high <= high), spec


FIXED_C = [   # the element expressions the fixed epilogue's kernels have always printed (kernels/ holds them whole)
    (EpilogueSpec(3.0, 0.5, "row", "gelu_erf", (0.0, 6.0), "f32", "bf16"),
     "xe_f32_to_bf16_rne(xe_gelu_erf(alpha * acc_0_1.s3 + beta * as_float((uint)ci.s3 << 16) + bias0))"),
    (EpilogueSpec(1.0, 0.0, "none", "relu", (0.0, 6.0), "s32", "s8"), "(uchar)convert_char_sat(xe_relu_int(acc_0_1.s3))"),
    (EpilogueSpec(1.0, 0.0, "col", "clamp", (0.0, 6.0), "f32", "f16"),
     "xe_f32_to_f16_rne(xe_clamp(acc_0_1.s3 + bias0, clamp_lo, clamp_hi))"),
]


@pytest.mark.parametrize("spec, c", FIXED_C)
def test_the_fixed_epilogues_print_todays_c(spec, c):
    """The fixed epilogue's graph prints the element expression and definitions of today's kernels, so that
    kernels rendered through the graph stay byte-identical (the kernels/ check covers every shipped one)."""
    code = element_code(fixed_graph(spec), {"acc": "acc_0_1.s3", "c": load_float(spec.out, "ci.s3"), "bias": "bias0"})
    assert code.statements == () and code.integer == spec.exact_integer
    assert code.outputs == {"d": c}
    assert code.definitions == ACTIVATIONS[spec.activation].definition(integer=spec.exact_integer)


def test_every_fixed_epilogue_is_a_graph_of_one_use_per_value():
    for (acc_t, out), alpha, beta, bias, name in itertools.product(
            [("f32", "f32"), ("f32", "bf16"), ("s32", "s8"), ("s32", "s32"), ("bf16", "bf16")], [1.0, 3.0],
            [0.0, 0.5], ["none", "row", "col"], ACTIVATIONS):
        spec = EpilogueSpec(alpha, beta, bias, name, (0.0, 6.0), acc_t, out)
        code = element_code(fixed_graph(spec), {"acc": "a", "c": "c", "bias": "b"})
        assert code.statements == () and code.integer == spec.exact_integer, spec


def test_tolerance_follows_each_ops_slope_and_rounding():
    acc = np.array([[[0.5, 2.0, 10.0]]])
    exp = reference(trace(lambda acc: ops.exp(acc)), acc, 1e-3)["d"]
    # exp's slope at x is exp(x): an accumulator error of 1e-3 moves exp(10) by ~22, exp(0.5) by ~1.6e-3
    width = exp.high - exp.low
    assert width[0, 0, 2] > 40 and width[0, 0, 0] < 4e-3
    relu = reference(trace(lambda acc: ops.relu(acc)), acc, 1e-3)["d"]
    assert np.allclose(relu.high - relu.low, 2e-3, rtol=1e-3)     # slope 1, exact
    # a condition that may flip within the tolerance admits either branch
    near = reference(trace(lambda acc: ops.where(acc > 2.0005, acc, 0.0)), acc, 1e-3)["d"]
    assert near.low[0, 0, 1] <= 0.0 and near.high[0, 0, 1] >= 2.0
    far = reference(trace(lambda acc: ops.where(acc > 1.0, acc, 0.0)), acc, 1e-3)["d"]
    assert far.expected[0, 0, 0] == 0.0 and far.high[0, 0, 0] - far.low[0, 0, 0] < 1e-37   # the tiny floor only
    # a cast to s8 rounds and saturates the whole interval
    s8 = reference(trace(lambda acc: ops.cast(acc * 30.0, "s8") / 2.0), acc, 0.0)["d"]
    assert s8.expected.tolist() == [[[7.5, 30.0, 63.5]]]
    # sums count every addition; maxima keep the largest error
    rs = reference(trace(lambda acc: {"d": acc, "s": ops.row_sum(acc), "m": ops.row_max(acc)}), acc, 1e-3)
    assert rs["s"].expected.tolist() == [[12.5]] and rs["m"].expected.tolist() == [[10.0]]
    assert rs["s"].high[0, 0] - rs["s"].low[0, 0] >= 6e-3 and rs["m"].high[0, 0] - rs["m"].low[0, 0] < 2.1e-3


def test_mismatches_count_out_of_bounds_nan_and_shape():
    b = reference(trace(lambda acc: acc), np.zeros((1, 2, 2)))["d"]
    assert mismatches(b, np.zeros((1, 2, 2))) == 0
    assert mismatches(b, np.array([[[0.0, 1.0], [np.nan, 0.0]]])) == 2
    assert mismatches(b, np.zeros((1, 2, 3))) == 6


# ---- C spelling details --------------------------------------------------------------------------------------

def test_c_keeps_the_graphs_order_of_evaluation():
    g = trace(lambda a, b, s: a - (b + s) / (a * s) - -b, {"a": "matrix", "b": "row", "s": "scalar"})
    d = element_code(g).outputs["d"]
    assert d == "as_uint(a - (b + s) / (a * s) - -b)"
    assert element_code(trace(lambda acc: -(-acc))).outputs["d"] == "as_uint(-(-acc))"
    w = element_code(trace(lambda acc: ops.where(acc > 1.0, acc + 1.0, ops.where(acc < -1.0, acc, 0.5))))
    assert w.outputs["d"] == "as_uint(acc > 1.0f ? acc + 1.0f : acc < -1.0f ? acc : 0.5f)"
    assert [c_float(v) for v in (0.044715, 3.0, -2.5, 1e30, float("inf"))] == \
        ["0.044715f", "3.0f", "-2.5f", "1e+30f", "INFINITY"]


def test_shared_values_become_temporaries_and_reductions_their_contributions():
    g = trace(row_stats, {"bias": "col"})
    code = element_code(g, {"acc": "acc_v", "bias": "bias_n"})
    assert code.statements == ("const float xe_e3 = xe_relu(acc_v + bias_n);",)
    assert code.outputs == {"d": "as_uint(xe_e3)"}
    assert element_code(g, {"acc": "a", "bias": "b"}, temp="xe_e7_").statements == \
        ("const float xe_e7_3 = xe_relu(a + b);",)
    assert [(r.name, r.reduction.name, r.value, r.type) for r in code.reductions] == \
        [("rowmax", "row_max", "xe_e3", "f32"), ("rowsum", "row_sum", "xe_e3", "f32"),
         ("colsum", "col_sum", "xe_e3", "f32"), ("colmax", "col_max", "xe_e3", "f32"), ("total", "sum", "xe_e3", "f32")]
    fix = fixup_kernel("k_rowmax", code.reductions[0])
    assert "r = (isnan(r) || isnan(w[(long)t * length]) ? r + w[(long)t * length] : fmax(r, w[(long)t * length]));" \
        in fix and "atomic_" not in fix      # a maximum keeps a NaN, as numpy's does
    assert partial_layout(code.reductions[0], 45, 70, (16, 32)) == (45, 3)


def test_input_kinds_from_arrays():
    assert [input_kind(v, 4, 5) for v in (2.0, np.zeros((4, 1)), np.zeros((1, 5)), np.zeros(5), np.zeros((4, 5)),
                                          np.zeros((3, 4, 5)))] == ["scalar", "row", "col", "col", "matrix", "matrix"]
    with pytest.raises(ValueError, match=r"shape \(4,\) cannot broadcast over D \(4 x 5\)"):
        input_kind(np.zeros(4), 4, 5)
    assert kinds_from_arrays(gated, {"acc": 0, "up": np.zeros((4, 5))}, 4, 5) == {"up": "matrix"}
    with pytest.raises(ShapeError, match=r"epilogue gated \(.*epilogue_examples.py:\d+\): input 'up': shape \(5, 4\)"):
        kinds_from_arrays(gated, {"up": np.zeros((5, 4))}, 4, 5)


def test_xegemm_epilogue_is_the_decorator():
    """``xegemm.epilogue`` is the decorator itself (no module swaps its class to be callable)."""
    from xegemm import epilogue
    from xegemm.epilogues.tracer import epilogue as decorator
    assert epilogue is decorator
    f = xegemm.epilogue(residual)
    assert isinstance(f, xegemm.epilogues.EpilogueFunction) and f(1.0, 2.0) == 3.0
    assert f.trace().tag == "c"


# ---- the config form -----------------------------------------------------------------------------------------

EPI_MODULE = '''
from xegemm import ops

def swiglu(acc, up):
    return ops.silu(acc) * up

def branchy(acc):
    if acc > 0:
        return acc
    return acc

not_a_function = 3
'''


@pytest.fixture
def epi_dir(tmp_path):
    pkg = tmp_path / "myepis"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "gates.py").write_text(textwrap.dedent(EPI_MODULE))
    (pkg / "broken.py").write_text("import nonexistent_dependency_xyz\n")
    (pkg / "raising.py").write_text("raise RuntimeError('boom')\n")
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("myepis")]:
        del sys.modules[name]


def test_the_config_form_loads_and_traces(epi_dir):
    g = load_epilogue({"function": "myepis.gates:swiglu", "inputs": {"up": {"kind": "matrix", "type": "bf16"}}},
                      out="bf16", acc="f32", search=[epi_dir])
    assert g.function == "swiglu" and g.input("up").type == "bf16" and g.out == "bf16"
    assert str(epi_dir) not in sys.path


@pytest.mark.parametrize("section, message", [
    ({"function": "myepis.gates"}, "expected \"package.module:function_name\""),
    ({"function": "no_such_pkg_xyz.mod:fn"}, "module 'no_such_pkg_xyz' not found"),
    ({"function": "myepis.nothere:fn"}, "module 'myepis.nothere' not found"),
    ({"function": "myepis.broken:fn"}, "importing myepis.broken failed: No module named 'nonexistent_dependency_xyz'"),
    ({"function": "myepis.raising:fn"}, "importing myepis.raising raised RuntimeError: boom"),
    ({"function": "myepis.gates:missing"}, "myepis.gates has no 'missing'"),
    ({"function": "myepis.gates:not_a_function"}, "not_a_function is a int, not a function"),
    ({"function": "myepis.gates:swiglu", "outputs": ["aux"]}, "epilogue.outputs: expected a mapping"),
    ({"function": "myepis.gates:swiglu", "activation": "relu"}, "epilogue.activation: not a key of the function form"),
])
def test_config_form_errors_are_one_line(epi_dir, section, message):
    with pytest.raises(EpilogueLoadError) as err:
        load_epilogue(section, out="f32", acc="f32", search=[epi_dir])
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_config_form_reports_the_functions_line(epi_dir):
    with pytest.raises(EpilogueError) as err:
        load_epilogue({"function": "myepis.gates:branchy"}, out="f32", acc="f32", search=[epi_dir])
    assert err.value.site[0].endswith("gates.py") and err.value.site[1] == 8, str(err.value)
    with pytest.raises(ShapeError, match="input 'up' has no kind"):
        load_epilogue({"function": "myepis.gates:swiglu"}, out="f32", acc="f32", search=[epi_dir])
    assert callable(resolve_function("myepis.gates:swiglu", [epi_dir]))
