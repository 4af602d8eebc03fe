"""The layout the docs describe holds: every module imports on its own, imports stay at the top, data
flows one way (docs/architecture.md)."""

import ast
import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import xegemm

ROOT = Path(xegemm.__file__).resolve().parent
MODULES = sorted(m.name for m in pkgutil.walk_packages([str(ROOT)], "xegemm.") if m.name != "xegemm.__main__")
# what each layer may not import (the one-way chain of docs/architecture.md)
FORBIDDEN = {
    "xegemm.dtypes": ("xegemm.atoms", "xegemm.plan", "xegemm.lowering", "xegemm.aot", "xegemm.runtime"),
    "xegemm.targets": ("xegemm.atoms", "xegemm.plan", "xegemm.lowering", "xegemm.aot", "xegemm.runtime"),
    "xegemm.quant": ("xegemm.config", "xegemm.atoms", "xegemm.plan", "xegemm.lowering", "xegemm.render",
                     "xegemm.evaluate", "xegemm.runtime", "xegemm.verify"),
    "xegemm.atoms": ("xegemm.plan", "xegemm.render", "xegemm.lowering", "xegemm.aot", "xegemm.evaluate",
                     "xegemm.pipeline", "xegemm.runtime"),
    "xegemm.config": ("xegemm.plan", "xegemm.render", "xegemm.evaluate", "xegemm.pipeline", "xegemm.runtime"),
    "xegemm.epilogue_graph": ("xegemm.plan", "xegemm.render", "xegemm.lowering", "xegemm.evaluate", "xegemm.pipeline",
                              "xegemm.runtime", "xegemm.tune", "xegemm.cli"),
    "xegemm.layouts": ("xegemm.atoms", "xegemm.config", "xegemm.plan", "xegemm.lowering", "xegemm.aot",
                       "xegemm.runtime"),
    "xegemm.build_flags": ("xegemm.atoms", "xegemm.plan", "xegemm.lowering", "xegemm.aot", "xegemm.runtime"),
    "xegemm.templating": ("xegemm.atoms", "xegemm.plan", "xegemm.lowering", "xegemm.render", "xegemm.runtime"),
    "xegemm.kernel_name": ("xegemm.atoms", "xegemm.plan", "xegemm.lowering", "xegemm.render", "xegemm.evaluate",
                           "xegemm.runtime"),
    "xegemm.plan": ("xegemm.render", "xegemm.evaluate", "xegemm.pipeline", "xegemm.runtime", "xegemm.lowering"),
    # the planner's jobs: none imports the planner, the lowerings or anything below them
    **{f"xegemm.{job}": ("xegemm.plan", "xegemm.render", "xegemm.lowering", "xegemm.evaluate", "xegemm.pipeline",
                         "xegemm.runtime") for job in ("operands", "atom_choice", "surfaces", "registers", "dequant")},
    "xegemm.aot": ("xegemm.evaluate", "xegemm.pipeline", "xegemm.lowering", "xegemm.render", "xegemm.runtime"),
    "xegemm.lowering": ("xegemm.render", "xegemm.evaluate", "xegemm.pipeline", "xegemm.runtime"),
    "xegemm.render": ("xegemm.evaluate", "xegemm.pipeline"),
    "xegemm.result": ("xegemm.config", "xegemm.plan", "xegemm.render", "xegemm.evaluate", "xegemm.journal",
                      "xegemm.reporting", "xegemm.pipeline", "xegemm.tune", "xegemm.runtime", "xegemm.cli"),
    "xegemm.journal": ("xegemm.evaluate", "xegemm.reporting", "xegemm.pipeline", "xegemm.runtime", "xegemm.cli"),
    "xegemm.reporting": ("xegemm.pipeline", "xegemm.tune", "xegemm.cli", "xegemm.runtime"),
    "xegemm.evaluate": ("xegemm.pipeline", "xegemm.tune", "xegemm.cli"),
    "xegemm.pipeline": ("xegemm.tune", "xegemm.cli"),
    "xegemm.tune": ("xegemm.cli",),
    "xegemm.arguments": ("xegemm.render", "xegemm.evaluate", "xegemm.pipeline", "xegemm.runtime", "xegemm.api"),
    "xegemm.api": ("xegemm.pipeline", "xegemm.export", "xegemm.cli"),
    "xegemm.export": ("xegemm.pipeline", "xegemm.cli"),
}


def _xegemm_imports(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("xegemm"):
            yield node, node.module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("xegemm"):
                    yield node, alias.name


def _path(module: str) -> Path:
    rel = Path(*module.split(".")[1:])
    return ROOT / rel / "__init__.py" if (ROOT / rel).is_dir() else ROOT / rel.with_suffix(".py")


# One interpreter imports the third-party libraries once, then forks a child per module that imports that
# module alone: no xegemm module is loaded before the child's import, so a cycle hidden by a lucky import order
# still fails there, in a fraction of the time of a fresh interpreter per module (each spends about a second
# importing numpy, jinja2 and the others again).
_IMPORT_EACH = r"""
import json, os, sys, traceback
import jinja2, ml_dtypes, numpy, optuna, sqlalchemy, tqdm, yaml   # third-party only: no xegemm module
assert not any(m == "xegemm" or m.startswith("xegemm.") for m in sys.modules)
results = {}
for module in json.loads(sys.argv[1]):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            __import__(module)
            message = ""
        except BaseException:
            message = traceback.format_exc()[-2000:] or "failed"
        os.write(write, message.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        message = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    results[module] = message or ("" if status == 0 else f"the child exited with status {status}")
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def imported_alone():
    """{module: '' or the traceback of importing it alone}."""
    done = subprocess.run([sys.executable, "-c", _IMPORT_EACH, json.dumps(MODULES)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", MODULES)
def test_module_imports_on_its_own(module, imported_alone):
    """No import cycle hides behind a lucky import order: each module imports with no other xegemm module loaded."""
    assert imported_alone[module] == "", imported_alone[module]


# the command line imports a command's modules when the command runs, so that --help and --version stay fast;
# xegemm.epilogue, the fixed epilogue's home, is also callable as the traced-epilogue decorator and imports the
# tracer (which builds on it) only when called
LOCAL_IMPORTS_ALLOWED = ("xegemm.cli", "xegemm.epilogue")
HEAVY = ("matplotlib", "optuna", "sqlalchemy", "dpctl", "numpy", "jinja2")


@pytest.mark.parametrize("module", MODULES)
def test_imports_are_at_the_top_and_flow_one_way(module):
    tree = ast.parse(_path(module).read_text())
    top = {id(n) for n in tree.body}
    for node, target in _xegemm_imports(tree):
        assert id(node) in top or module in LOCAL_IMPORTS_ALLOWED, f"{module}:{node.lineno} imports {target} inside a function"
        for layer, banned in FORBIDDEN.items():
            if module == layer or module.startswith(layer + "."):
                assert not target.startswith(banned), f"{module} ({layer}) must not import {target}"


def test_every_module_is_in_the_architecture_doc():
    doc = (ROOT.parents[1] / "docs" / "architecture.md").read_text()
    for module in MODULES:
        leaf = module.split(".")[-1]
        assert f"{leaf}.py" in doc or f"{leaf}/" in doc or module in doc, f"{module} is missing in docs/architecture.md"


def test_importing_the_package_does_not_import_dpctl():
    done = subprocess.run([sys.executable, "-c", "import sys, xegemm.plan, xegemm.render; "
                           "print('dpctl' in sys.modules)"], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr
    importlib.import_module("xegemm.runtime")


@pytest.mark.parametrize("words", [["--version"], ["--help"]])
def test_version_and_help_import_no_heavy_library(words):
    """`xegemm --version` and `xegemm --help` answer without importing the library's heavy dependencies (they
    took 1.5 to 2.4 s when the command line imported everything up front)."""
    code = ("import sys\nfrom xegemm.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            f"print([m for m in {HEAVY!r} if m in sys.modules], file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code, *words], capture_output=True, text=True)
    assert done.stderr.strip().splitlines()[-1] == "[]", done.stderr
    assert "xegemm" in done.stdout
