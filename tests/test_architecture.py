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
# The one-way chain of docs/architecture.md, lowest first: a module may import a module of a lower layer, or of
# its own entry; nothing else.  Every module of the package falls under one entry (the longest prefix).
LAYERS = (
    ("xegemm", "xegemm.errors", "xegemm.files"),              # the root (lazy: imports nothing), errors, file safety
    ("xegemm.library",),                                      # the registries: dtypes, layouts, targets, flags, record
    ("xegemm.atoms",), ("xegemm.quant",),                     # the atom models; quantized operands
    ("xegemm.grouped",),                                      # grouped / MoE problems, tables, schedules
    ("xegemm.epilogues",),                                    # epilogue front end, graph, registry, fixed, reference
    ("xegemm.config",),                                       # config files, sweeps, shapes, sources
    ("xegemm.plan", "xegemm.epilogues.plan"),                 # the planner and the epilogue's planning pass
    ("xegemm.model",),                                        # the static model: predicted speed, its calibration
    ("xegemm.aot",),                                          # Intel's offline compiler, ISA statistics, capabilities
    ("xegemm.lowering",),                                     # how atoms become code
    ("xegemm.kernel", "xegemm.epilogues.stage", "xegemm.epilogues.tiles"),   # a plan rendered into a kernel
    ("xegemm.runtime",),                                      # devices, builds, launches
    ("xegemm.verify",),                                       # numpy references and verdicts
    ("xegemm.evaluate",),                                     # evaluator, builders, observers, timing
    ("xegemm.results",), ("xegemm.reporting",),               # journals; documents made from results
    ("xegemm.api",), ("xegemm.export",),                      # the call API; exports for host programs
    ("xegemm.torch",),                                        # the PyTorch front end (optional: torch)
    ("xegemm.jobs",), ("xegemm.tune",),                       # the jobs: generate, run, build, support; the tuner
    ("xegemm.cli", "xegemm.__main__"),                        # the command line
)
ENTRY = {prefix: (rank, entry) for rank, entry in enumerate(LAYERS) for prefix in entry}
# what the call API and the export must never load, however indirectly (they are used inside host programs)
CALL_API_FORBIDDEN = ("xegemm.tune", "xegemm.reporting", "xegemm.jobs", "xegemm.cli", "optuna", "sqlalchemy",
                      "matplotlib")


def layer_of(module: str) -> tuple[int, tuple]:
    """(rank, entry) of the longest prefix of ``module`` in LAYERS."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in ENTRY:
            return ENTRY[prefix]
    raise KeyError(module)


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
import dpctl, matplotlib.figure, matplotlib.ticker                  # (matplotlib's figure: 0.8 s per child)
try:
    import torch                                                   # the optional extra, where it is installed
except ImportError:
    pass
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


# the command line imports a command's modules when the command runs, so that --help and --version stay fast
LOCAL_IMPORTS_ALLOWED = ("xegemm.cli",)
HEAVY = ("matplotlib", "optuna", "sqlalchemy", "dpctl", "numpy", "jinja2")


def _graph() -> dict[str, set[str]]:
    """module -> the xegemm modules it imports (anywhere in it, a function's imports too)."""
    graph = {}
    for module in MODULES:
        targets = set()
        for node, _ in _xegemm_imports(ast.parse(_path(module).read_text())):
            for target in _names_imported(node):
                while target not in MODULES and "." in target:
                    target = target.rsplit(".", 1)[0]    # `import xegemm.pkg.mod.attr`: the module
                if target != module and target.startswith("xegemm"):
                    targets.add(target)
        graph[module] = targets
    return graph


def _names_imported(node) -> list[str]:
    """The modules an import names: `from xegemm.plan import stream_k` names xegemm.plan.stream_k."""
    if isinstance(node, ast.ImportFrom):
        return [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module for a in node.names]
    return [a.name for a in node.names]


@pytest.mark.parametrize("module", MODULES)
def test_imports_are_at_the_top_and_flow_one_way(module):
    tree = ast.parse(_path(module).read_text())
    top = {id(n) for n in tree.body}
    rank, entry = layer_of(module)
    for node, _ in _xegemm_imports(tree):
        assert id(node) in top or module in LOCAL_IMPORTS_ALLOWED, f"{module}:{node.lineno} imports inside a function"
        for target in _names_imported(node):
            if not target.startswith("xegemm"):
                continue
            their_rank, their_entry = layer_of(target)
            assert their_entry == entry or their_rank < rank, (
                f"{module} (layer {entry[0]}) imports {target} (layer {their_entry[0]}): an import running upward")


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


def test_the_import_graph_has_no_circle():
    """No module reaches itself through imports (Tarjan's strongly connected components)."""
    graph, index, low, stack, on_stack, circles = _graph(), {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    assert circles == []


@pytest.mark.parametrize("face", ["xegemm.api", "xegemm.export"])
def test_the_call_api_and_the_export_load_no_tuner(face):
    """Transitively: neither the import graph nor a fresh interpreter that imports the call API (or the export)
    reaches the tuner, the reports or their libraries (Optuna, SQLAlchemy, matplotlib)."""
    graph, seen, todo = _graph(), set(), [face]
    while todo:
        module = todo.pop()
        for target in graph.get(module, ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    assert not [m for m in seen if m.startswith(CALL_API_FORBIDDEN)]
    code = f"import sys, {face}\nprint([m for m in sys.modules if m.split('.')[0] in {CALL_API_FORBIDDEN!r} " \
           f"or m.startswith({CALL_API_FORBIDDEN!r})])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout


def test_every_module_is_in_the_architecture_doc():
    doc = (ROOT.parents[1] / "docs" / "architecture.md").read_text()
    for module in MODULES:
        leaf = module.split(".")[-1]
        assert f"{leaf}.py" in doc or f"{leaf}/" in doc or module in doc, f"{module} is missing in docs/architecture.md"


def test_importing_the_package_does_not_import_dpctl():
    done = subprocess.run([sys.executable, "-c", "import sys, xegemm.plan.planner, xegemm.kernel.render; "
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


def test_no_fixture_is_defined_twice():
    """Fixtures shared by several test files live once, in tests/conftest.py (a second definition in a test file
    would silently shadow it there and drift from it)."""
    tests = Path(__file__).resolve().parent
    defined: dict[str, list[str]] = {}
    for path in sorted(tests.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and any("fixture" in ast.unparse(d) for d in node.decorator_list):
                defined.setdefault(node.name, []).append(str(path.relative_to(tests)))
    assert {name: files for name, files in defined.items() if len(files) > 1} == {}
