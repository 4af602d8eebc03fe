"""Hostile input against the newer surfaces: a config that names Python code (traced epilogues), NaN and
infinities through the epilogues and the FP8 decodes, forged cache entries, huge grouped problems and traced
graphs, and the smaller doors (reports, exports, call arguments).  Each test is named after its attack;
docs/reliability.md counts them.  Real files, real processes, the real device; nothing is mocked.  Every test
is bounded in time (a subprocess has a timeout) and in memory (sizes are stated)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import xegemm
from xegemm.config import ConfigError, load_config
from xegemm.epilogues.config import CodeNotAllowedError, graph_of, resolve_function
from xegemm.errors import XegemmError

TRACED = textwrap.dedent("""\
    name: traced
    problem: {{m: 32, n: 32, k: 32}}
    types: {{a: bf16, b: bf16, acc: f32, c: f32}}
    tile: {{workgroup: [32, 32, 32], subgroups: [1, 2]}}
    epilogue:
      function: "{function}"
    """)
FUNCTION_LINE = 6       # the line of `function:` in TRACED

# A module that leaves a mark when it is imported: the mark must never appear unless the user allowed code.
PAYLOAD = textwrap.dedent("""\
    import pathlib
    pathlib.Path({mark!r}).write_text("imported")

    def doubled(acc):
        return acc * 2.0
    """)


def xegemm_cli(*args, timeout=300, env=None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xegemm", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, cwd=cwd)


@pytest.fixture(autouse=True)
def _no_consent(monkeypatch):
    """No test starts with consent, and whatever a command sets in os.environ is undone afterwards."""
    monkeypatch.setenv("XEGEMM_ALLOW_CODE", "0")
    monkeypatch.setenv("XEGEMM_CODE_PATH", "")


@pytest.fixture
def payload(tmp_path):
    """(folder, config beside the payload module, the mark file); the module's name is unique to the test."""
    name = f"payload_{tmp_path.name.replace('-', '_')}"
    mark = tmp_path / "IMPORTED"
    (tmp_path / f"{name}.py").write_text(PAYLOAD.format(mark=str(mark)))
    config = tmp_path / "cfg.yaml"
    config.write_text(TRACED.format(function=f"{name}:doubled"))
    yield tmp_path, config, mark, name
    sys.modules.pop(name, None)


# ---- 1. no code from a config without consent ----------------------------------------------------------------

def test_a_config_naming_a_module_beside_it_imports_nothing_without_consent(payload):
    folder, config, mark, name = payload
    with pytest.raises(ConfigError) as err:
        load_config(config)
    message = str(err.value)
    assert f"{config}:{FUNCTION_LINE}: epilogue.function" in message, message
    assert f"{name}:doubled" in message and "--allow-code" in message and "XEGEMM_ALLOW_CODE=1" in message
    assert not mark.exists() and name not in sys.modules


def test_consent_does_not_open_the_configs_folder(payload):
    folder, config, mark, name = payload
    os.environ["XEGEMM_ALLOW_CODE"] = "1"
    with pytest.raises(ConfigError, match=f"module '{name}' not found.*--code-path"):
        load_config(config)
    assert not mark.exists()


def test_consent_does_not_open_the_working_directory(payload, monkeypatch):
    folder, config, mark, name = payload
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))           # as `python -m` puts the working directory first
    os.environ["XEGEMM_ALLOW_CODE"] = "1"
    with pytest.raises(ConfigError, match="the working directory"):
        load_config(config)
    assert not mark.exists()


def test_with_consent_and_the_path_given_the_function_is_imported(payload):
    folder, config, mark, name = payload
    with pytest.raises(ConfigError):
        load_config(config)
    os.environ["XEGEMM_ALLOW_CODE"] = "1"
    os.environ["XEGEMM_CODE_PATH"] = str(folder)
    graph = graph_of(load_config(config))
    assert graph.function == "doubled" and mark.exists()


def test_the_cli_refuses_a_configs_code_without_allow_code_and_takes_it_with(payload, tmp_path):
    folder, config, mark, name = payload
    denied = xegemm_cli("generate", config, "--out", tmp_path / "k0", timeout=120)
    assert denied.returncode == 2 and "Traceback" not in denied.stderr, denied.stderr
    assert f"{config}:{FUNCTION_LINE}: epilogue.function" in denied.stderr and "--allow-code" in denied.stderr
    assert not mark.exists()
    only_path = xegemm_cli("generate", config, "--out", tmp_path / "k1", "--code-path", folder, timeout=120)
    assert only_path.returncode == 2 and "needs --allow-code" in only_path.stderr and not mark.exists()
    allowed = xegemm_cli("generate", config, "--out", tmp_path / "k2", "--allow-code", "--code-path", folder,
                         timeout=120)
    assert allowed.returncode == 0, allowed.stderr
    assert mark.exists() and list((tmp_path / "k2").glob("*.cl"))


@pytest.mark.parametrize("function", ["os:abort", "os:fork", "signal:pause", "os:_exit", "math:sqrt",
                                      "numpy:maximum", "builtins:print"])
def test_builtins_c_functions_and_the_standard_library_are_refused_even_with_consent(function, tmp_path):
    config = tmp_path / "cfg.yaml"
    config.write_text(TRACED.format(function=function))
    os.environ["XEGEMM_ALLOW_CODE"] = "1"
    with pytest.raises(ConfigError) as err:
        load_config(config)
    message = str(err.value)
    assert f"{config}:{FUNCTION_LINE}: epilogue.function" in message
    assert "standard library" in message or "not a Python function" in message, message


def test_a_python_file_beside_a_tune_directory_never_runs_on_load(payload):
    folder, config, mark, name = payload
    config.rename(folder / "best.yaml")                 # the directory now looks like `xegemm tune`'s output
    with pytest.raises(ConfigError, match="--allow-code"):
        xegemm.load(folder)
    with pytest.raises(ConfigError, match="not found"):
        xegemm.load(folder, allow_code=True)            # consent, but the tune directory is not a code path
    assert not mark.exists()
    with pytest.raises(XegemmError, match="needs allow_code=True"):
        xegemm.load(folder, code_path=folder)
    assert not mark.exists()


def test_a_function_object_needs_no_consent_and_consent_for_one_load_covers_its_calls(payload, sycl_device):
    import ml_dtypes
    import numpy as np
    folder, config, mark, name = payload
    plain = folder / "plain.yaml"
    plain.write_text(TRACED.format(function="x:y").split("epilogue:")[0])
    gemm = xegemm.load(plain, device=sycl_device, epilogue=lambda acc: acc * 3.0)    # no consent needed
    a = np.ones((8, 16), dtype=ml_dtypes.bfloat16)
    b = np.ones((16, 8), dtype=ml_dtypes.bfloat16)
    assert np.all(gemm(a, b) == 48.0)
    allowed = xegemm.load(config, device=sycl_device, allow_code=True, code_path=folder)
    assert mark.exists() and os.environ["XEGEMM_ALLOW_CODE"] == "0"     # the consent was the load's only
    assert np.all(allowed(a, b) == 32.0)


def test_resolve_function_without_consent_names_the_config_and_the_flag():
    with pytest.raises(CodeNotAllowedError, match=r"config my\.yaml.*--allow-code"):
        resolve_function("anything.at_all:fn", source="my.yaml")


# ---- 2. NaN and infinities as numpy computes them ------------------------------------------------------------

F32 = textwrap.dedent("""\
    name: nan{tag}
    problem: {{m: 16, n: 32, k: 32}}
    types: {{a: tf32, b: tf32, acc: f32, c: f32}}
    tile: {{workgroup: [16, 32, 32], subgroups: [1, 2]}}
    {epilogue}
    """)


def _nan_operands():
    import numpy as np
    rng = np.random.default_rng(0)
    a = (rng.integers(-8, 8, (16, 32)) / 8).astype(np.float32)     # exact in tf32: D is exact in f32
    b = (rng.integers(-8, 8, (32, 32)) / 8).astype(np.float32)
    bias = (rng.integers(-8, 8, 16) / 8).astype(np.float32)
    bias[3] = np.nan                    # row 3 of D is NaN before the activation
    return a, b, bias


@pytest.mark.parametrize("activation", ["relu", "clamp"])
def test_a_nan_through_the_fixed_epilogues_relu_and_clamp_stays_nan(activation, tmp_path, sycl_device):
    import numpy as np
    config = tmp_path / "nan.yaml"
    config.write_text(F32.format(tag=activation, epilogue=f"epilogue: {{bias: row, activation: {activation}, "
                                                           "clamp: [-0.25, 0.25]}"))
    a, b, bias = _nan_operands()
    d = xegemm.load(config, device=sycl_device)(a, b, bias=bias)
    z = a.astype(np.float64) @ b + bias[:, None]
    want = np.maximum(z, 0.0) if activation == "relu" else np.minimum(np.maximum(z, -0.25), 0.25)
    assert np.isnan(d[3]).all() and not np.isnan(np.delete(d, 3, axis=0)).any()
    assert np.allclose(np.delete(d, 3, axis=0), np.delete(want, 3, axis=0), atol=1e-5)


def test_a_nan_through_traced_maximum_minimum_clamp_relu_and_row_max_stays_nan(tmp_path, sycl_device):
    import numpy as np
    from xegemm import ops
    config = tmp_path / "nan.yaml"
    config.write_text(F32.format(tag="traced", epilogue=""))

    @xegemm.epilogue(inputs={"bias": "row"}, outputs={"mx": "f32", "mn": "f32", "cl": "f32", "rmax": "f32"})
    def nan_paths(acc, bias):
        z = acc + bias
        return {"d": ops.relu(z), "mx": ops.maximum(z, 0.0), "mn": ops.minimum(z, 0.0),
                "cl": ops.clamp(z, -0.25, 0.25), "rmax": ops.row_max(z)}

    a, b, bias = _nan_operands()
    out = xegemm.load(config, device=sycl_device, epilogue=nan_paths)(a, b, bias=bias)
    z = a.astype(np.float64) @ b + bias[:, None]
    for name in ("d", "mx", "mn", "cl"):
        assert np.isnan(out[name][3]).all(), name
        assert not np.isnan(np.delete(out[name], 3, axis=0)).any(), name
    rmax = out["rmax"].reshape(-1)
    assert np.isnan(rmax[3]) and np.allclose(np.delete(rmax, 3), np.delete(z.max(axis=1), 3), atol=1e-5)


def test_a_traced_epilogue_whose_output_is_infinite_verifies_without_numpy_warnings(tmp_path, recwarn):
    """exp overflows to +inf on the device and in the reference; log of a negative is NaN on both: the verifier
    must pass them (and print no RuntimeWarning)."""
    import warnings

    import numpy as np
    from xegemm.epilogues.reference import mismatches, reference
    from xegemm.epilogues.tracer import trace
    from xegemm import ops
    graph = trace(lambda acc: {"d": ops.exp(acc * 100.0), "lg": ops.log(acc)}, outputs={"lg": "f32"})
    acc = np.array([[[-3.0, 0.5, 2.0]]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bounds = reference(graph, acc, 1e-6)
        with np.errstate(over="ignore"):          # what the device computes: f32 exp overflows to inf
            device = {"d": np.exp(acc.astype(np.float32) * np.float32(100.0)),
                      "lg": np.where(acc < 0, np.nan, np.log(np.abs(acc)))}
        assert np.isinf(bounds["d"].expected[0, 0, 2]) and mismatches(bounds["d"], device["d"]) == 0
        assert mismatches(bounds["lg"], device["lg"]) == 0
        assert mismatches(bounds["d"], np.where(np.isinf(device["d"]), 1e38, device["d"])) == 1
        assert mismatches(bounds["lg"], np.nan_to_num(device["lg"])) == 1
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


@pytest.mark.parametrize("fmt, nan_codes, inf_codes", [("e4m3", (0x7F, 0xFF), ()),
                                                       ("e5m2", (0x7D, 0x7E, 0x7F, 0xFD), (0x7C, 0xFC))])
def test_fp8_nan_and_infinity_codes_decode_as_ml_dtypes_does(fmt, nan_codes, inf_codes):
    import ml_dtypes
    import numpy as np
    from xegemm.library.dtypes import dtype
    ml = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}[fmt]
    codes = np.arange(256, dtype=np.uint8)
    ours, reference = dtype(fmt).decode(codes), codes.view(ml).astype(np.float64)
    assert np.array_equal(ours, reference, equal_nan=True)
    assert all(np.isnan(ours[c]) for c in nan_codes) and all(np.isinf(ours[c]) for c in inf_codes)
    assert np.isnan(dtype("e8m0").decode(np.array([0xFF]))[0])


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_nan_codes_in_b_give_nan_in_the_kernel_not_480_or_inf(fmt, tmp_path, sycl_device):
    """Column 5 of B holds the NaN code, column 9 (e5m2) the infinity: D's column 5 is NaN, 9 is +inf."""
    import ml_dtypes
    import numpy as np
    ml = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}[fmt]
    config = tmp_path / "fp8.yaml"
    config.write_text(textwrap.dedent(f"""\
        name: fp8nan
        problem: {{m: 16, n: 64, k: 64}}
        types: {{a: f16, b: {fmt}, c: f32}}
        quant: {{format: plain, group: tensor, scale: f32}}
        tile: {{workgroup: [16, 64, 32], subgroups: [1, 2]}}
        """))
    a = np.full((16, 64), 0.5, dtype=np.float16)
    b_codes = np.full((64, 64), np.array(1.0, dtype=ml).view(np.uint8), dtype=np.uint8)
    b_codes[7, 5] = 0x7F
    if fmt == "e5m2":
        b_codes[7, 9] = 0x7C
    d = xegemm.load(config, device=sycl_device)(a, b_codes.view(ml), scales=np.ones((1, 1), np.float32))
    assert np.isnan(d[:, 5]).all(), d[:, 5]
    if fmt == "e5m2":
        assert np.isposinf(d[:, 9]).all(), d[:, 9]
    rest = np.delete(d, [5, 9], axis=1)
    assert np.all(rest == 32.0), rest


# ---- 4. huge grouped and MoE problems ------------------------------------------------------------------------

def test_a_grouped_table_of_100000_groups_is_built_in_linear_time():
    """bias_offsets was a sum per group over the groups before it (quadratic); the table is now running sums.
    10^5 groups: about 3 s here (the GroupShape objects dominate); a quadratic step would take minutes."""
    import numpy as np
    from xegemm.grouped.problem import GroupedProblem
    from xegemm.grouped.table import FIELD, bias_offsets, problem_table
    n = 100_000
    problem = GroupedProblem.of([(i % 7, 16, 32) for i in range(n)])
    table = problem_table(problem, (16, 64, 32), (16, 16, 32), bias="row")
    m = np.array([i % 7 for i in range(n)])
    assert table.shape == (n, len(FIELD))
    assert np.array_equal(table[:, FIELD["bias_offset"]], np.concatenate([[0], np.cumsum(m)[:-1]]))
    assert bias_offsets(problem, "row")[-1] == m.sum()
    moe = GroupedProblem.moe([i % 5 for i in range(n)], 64, 32)
    assert problem_table(moe, (16, 64, 32), (16, 16, 32), bias="col")[-1, FIELD["bias_offset"]] == (n - 1) * 64


def test_a_million_groups_are_refused_before_any_is_listed():
    from xegemm.grouped.problem import MAX_GROUPS, GroupedProblem, GroupedProblemError
    with pytest.raises(GroupedProblemError, match=f"at most {MAX_GROUPS}"):
        GroupedProblem.of((1, 16, 32) for _ in range(10**6))
    with pytest.raises(GroupedProblemError, match="1000000 experts"):
        GroupedProblem.moe([1] * 10**6, 64, 32)


@pytest.mark.parametrize("rows, message", [
    ("12", "expected a list"), ([1, 2.5], r"rows_per_expert\[1\] = 2.5: expected a number of rows"),
    ([1, -1], "cannot be negative"), ([1, float("nan")], r"rows_per_expert\[1\] = nan"),
    ([1, "1"], r"rows_per_expert\[1\] = '1'"), (3, "expected a list"), ([True, 1], "expected a number")])
def test_rows_per_expert_that_are_not_counts_are_refused(rows, message):
    from xegemm.grouped.problem import GroupedProblemError, moe_from_operands
    with pytest.raises(GroupedProblemError, match=message):
        moe_from_operands((2, 32), (2, 32, 64), rows)


# ---- 5. call arguments ---------------------------------------------------------------------------------------

def test_a_call_with_alpha_x_or_an_empty_array_is_a_clear_call_error(sycl_device):
    import ml_dtypes
    import numpy as np
    from xegemm.api import CallError
    gemm = xegemm.load(Path(__file__).parents[1] / "configs" / "default.yaml", device=sycl_device)
    a = np.ones((8, 16), dtype=ml_dtypes.bfloat16)
    b = np.ones((16, 8), dtype=ml_dtypes.bfloat16)
    with pytest.raises(CallError, match=r"alpha = 'x': expected a real number"):
        gemm(a, b, alpha="x")
    with pytest.raises(TypeError, match="beta"):
        gemm(a, b, beta=[1.0])
    for shapes, zero in [(((0, 16), (16, 8)), "M = 0"), (((8, 16), (16, 0)), "N = 0"), (((8, 0), (0, 8)), "K = 0"),
                         (((0, 8, 16), (0, 16, 8)), "batch = 0")]:
        x, y = (np.ones(s, dtype=ml_dtypes.bfloat16) for s in shapes)
        with pytest.raises(CallError, match=f"the call's arrays have {zero}") as err:
            gemm(x, y)
        assert "problem.m" not in str(err.value)


# ---- 4b. huge and endless traced epilogues ------------------------------------------------------------------

BIG_EPILOGUE = textwrap.dedent("""\
    import resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))       # 3 GiB of address space at most
    from xegemm import ops
    from xegemm.config import config_from_text
    from xegemm.kernel.render import render_kernel
    from xegemm.plan.planner import plan

    def chain(acc, bias):                      # 3 ops per step: {ops} ops
        y = acc
        for i in range({steps}):
            y = ops.maximum(y * 1.0001 + bias, float(i % 97) * 0.01)
        return y

    start = time.monotonic()
    config = config_from_text("problem: {{m: 64, n: 64, k: 64}}\\ntypes: {{a: bf16, b: bf16, acc: f32, c: f32}}\\n"
                              "tile: {{workgroup: [32, 32, 32], subgroups: [1, 2]}}\\n"
                              "epilogue: {{inputs: {{bias: row}}}}\\n".replace("epilogue: {{inputs: {{bias: row}}}}\\n", ""))
    config = config.with_overrides({{"epilogue.function": chain, "epilogue.inputs": {{"bias": "row"}}}})
    source = render_kernel(plan(config))
    print(len(source), round(time.monotonic() - start, 1),
          resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
    """)


def test_a_traced_epilogue_of_20000_ops_generates_in_bounded_time_and_memory(tmp_path):
    script = tmp_path / "big.py"
    script.write_text(BIG_EPILOGUE.format(ops=20_000, steps=20_000 // 3))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    size, seconds, rss_mib = proc.stdout.split()
    assert int(size) > 20_000 * 10, size         # every op is in the kernel (the chain is not folded away)


def test_an_epilogue_beyond_the_op_cap_is_refused_with_the_cap():
    from xegemm.epilogues.errors import UnsupportedConstructError
    from xegemm.epilogues.tracer import MAX_NODES, trace

    def endless_chain(acc):
        y = acc
        for i in range(MAX_NODES):
            y = y + float(i)
        return y
    with pytest.raises(UnsupportedConstructError, match=f"more than {MAX_NODES} distinct values"):
        trace(endless_chain)


def test_an_epilogue_that_loops_forever_while_traced_is_stopped_with_the_time_limit(monkeypatch):
    import time

    from xegemm.epilogues import tracer
    from xegemm.epilogues.errors import UnsupportedConstructError
    monkeypatch.setattr(tracer, "MAX_TRACE_S", 0.5)

    def spins(acc):
        while True:
            pass
    start = time.monotonic()
    with pytest.raises(UnsupportedConstructError, match=r"spins .*still running after 0.5 s"):
        tracer.trace(spins)
    assert time.monotonic() - start < 30
    assert tracer.trace(lambda acc: acc + 1.0).outputs          # the next trace is unaffected
