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
from xegemm.cli import main
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
