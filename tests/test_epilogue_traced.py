"""Traced epilogues wired into a config, the plan, the kernel name and the kernel's arguments (host only; the
device tests are tests/test_epilogue_traced_device.py)."""

from __future__ import annotations

import pytest

from xegemm.kernel.arguments import KernelCall
from xegemm.config import ConfigError, config_from_text
from xegemm.plan.kernel_name import parse_kernel_name
from xegemm.plan.planner import PlanRejected, plan
from xegemm.jobs.pipeline import build_config as build_pvc
from xegemm.kernel.render import render_kernel


pytestmark = pytest.mark.usefixtures("code_allowed")

BASE = """\
problem: {{m: 64, n: 64, k: 64}}
types: {{a: bf16, b: bf16, acc: f32, c: bf16}}
tile: {{workgroup: [32, 32, 32], subgroups: [1, 2]{tile}}}
epilogue: {epilogue}
"""
GELU = '{function: "epilogue_examples:bias_gelu", inputs: {bias: row}, outputs: {pre: f16}}'


def config(epilogue=GELU, tile=""):
    return config_from_text(BASE.format(epilogue=epilogue, tile=tile))


def test_the_kernel_name_carries_tag_and_key_and_reads_back():
    p = plan(config())
    assert p.name.endswith(f"_epi_bias_gelu_erf_pre_{p.graph.key}")
    parsed = parse_kernel_name(p.name)
    assert parsed.traced == f"bias_gelu_erf_pre_{p.graph.key}" and parsed.epilogue == () and str(parsed) == p.name
    renamed = plan(config(GELU.replace("pre: f16", "pre: f32")))   # another output type: another graph
    assert renamed.name != p.name


def test_named_inputs_and_outputs_are_kernel_arguments():
    p = plan(config(GELU.replace("bias: row", "bias: col")))
    (gemm,) = KernelCall.of(p).launches
    extra = [(a.name, a.ctype, a.as_dict()["kind"]) for a in gemm.arguments[18:]]
    assert extra == [("in_bias", "const global float*", "buffer"), ("out_pre", "global uchar*", "buffer")]
    source = render_kernel(p)
    assert "const global float* in_bias, global uchar* out_pre)" in source
    assert "out_pre += get_group_id(2) * (long)M * N * 2;" in source
    scalar = plan(config('{function: "epilogue_examples:scaled_s8", inputs: {scale: scalar}}'))
    assert [(a.name, a.as_dict()["kind"]) for a in KernelCall.of(scalar).launches[0].arguments[18:]] == [
        ("in_scale", "scalar")]


@pytest.mark.parametrize("epilogue, message", [
    ('{function: "epilogue_examples:residual", alpha: 2.0}', "epilogue.alpha: is the fixed epilogue's"),
    ("{inputs: {bias: row}}", "epilogue.inputs: belongs to a traced epilogue"),
    ('{function: "epilogue_examples:gated"}', "input 'up' has no kind"),
    ('{function: "epilogue_examples"}', 'expected "package.module:function_name"'),
    ('{function: "epilogue_examples:bias_gelu", inputs: {bias: diagonal}}', "input bias: expected one of scalar, row, col, matrix"),
])
def test_a_bad_traced_epilogue_is_a_config_error(epilogue, message):
    with pytest.raises(ConfigError, match="epilogue") as err:
        config(epilogue)
    assert message in str(err.value), str(err.value)


def test_what_the_kernels_cannot_do_yet_is_rejected_with_the_reason():
    with pytest.raises(PlanRejected, match="split K and stream-K"):
        plan(config(tile=", split_k: 2"))


def test_each_reduction_has_its_partials_and_a_fixup_launch():
    p = plan(config('{function: "epilogue_examples:row_stats", inputs: {bias: col}}'))
    call = KernelCall.of(p)
    names = [launch.kernel.removeprefix(p.name) for launch in call.launches]
    assert names == ["", "_rowmax", "_rowsum", "_colsum", "_colmax", "_total"]
    sizes = call.sizes(37, 45, 64, 2)      # rows: 2 tiles of 32 columns x 2 sub-groups x 16 lanes per row of D;
    floats = 2 * (64 * 37) * 2 + 2 * 2 * 45 * 2 + 2 * (2 * 2 * 32)   # columns: 2 tiles x 1 sub-group; sums
    assert sizes["workspace_bytes"] == 4 * floats
    assert (sizes["xe_colsum_length"], sizes["xe_colsum_slots"], sizes["global3"]) == (45, 2, (48, 2, 1))
    assert sizes["xe_total_offset"] == 2 * (64 * 37) * 2 + 2 * 2 * 45 * 2


def test_a_traced_config_writes_back_its_function_form():
    data = config().to_dict()["epilogue"]
    assert data == {"alpha": 1.0, "beta": 0.0, "bias": "none", "activation": "none", "clamp": [0.0, 6.0],
                    "function": "epilogue_examples:bias_gelu", "inputs": {"bias": "row"}, "outputs": {"pre": "f16"}}
    assert "function" not in config_from_text(BASE.format(epilogue="{}", tile="")).to_dict()["epilogue"]


@pytest.mark.ocloc
def test_a_traced_epilogue_builds_for_pvc_with_its_aux_messages_counted(tmp_path):
    """Ahead of time with ocloc: an auxiliary input read and an auxiliary output stored beside D, each with the
    messages of its planned atom (xegemm.evaluate.aot.predicted_counts), no spill."""
    path = tmp_path / "traced.yaml"
    path.write_text(BASE.format(epilogue='{function: "epilogue_examples:gated_pre", inputs: {up: matrix}, '
                                         'outputs: {act: bf16}}', tile=""))
    result = build_pvc(path, target="pvc", out_dir=tmp_path / "out")
    (v,) = result["variants"]
    assert v["status"] == "ok", v["reason"]
    assert v["isa"]["spill_bytes"] == 0
    for kind in ("load_block2d", "store_block2d", "store_block1d"):
        assert v["measured_messages"][kind] == v["predicted"][kind], kind


def test_load_traces_the_function_at_load_and_refuses_a_config_with_its_own_fixed_epilogue():
    """docs/epilogues.md: a bad function is refused when it is loaded (the tracer's error, naming its line), not
    at the first call; a config with its own fixed epilogue (bias + SiLU) is refused, not silently replaced."""
    import xegemm
    from xegemm.epilogues.errors import EpilogueError, EpilogueLoadError

    def branchy(acc):
        if acc > 0:
            return acc
        return -acc

    with pytest.raises(EpilogueError, match=r"branchy \(.*test_epilogue_traced\.py:\d+\).*data-dependent"):
        xegemm.load(config("{}"), device="opencl:cpu", epilogue=branchy)
    fixed = config("{bias: row, activation: silu}")
    with pytest.raises(EpilogueLoadError, match=r"its own fixed epilogue \(bias 'row', activation 'silu'\)"):
        xegemm.load(fixed, device="opencl:cpu", epilogue=lambda acc: acc * 2.0)
