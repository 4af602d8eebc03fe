"""xegemm: a CUTLASS-style GEMM kernel generator for Intel Xe GPUs.

The package is organised as a one-way chain (config -> plan -> render -> build -> verify -> profile
-> report) with the atom model (:mod:`xegemm.atoms`) beside it as the single source of truth for
every 2D block copy and DPAS atom.
"""

__version__ = "0.1.0"

import importlib

# Looked up on first use (PEP 562), so that `import xegemm` (and `xegemm --version`) loads nothing heavy:
# name -> the module that holds it (None: the submodule of that name itself).
_LAZY = {"ops": ("xegemm.epilogue_graph.ops", None), "epilogue": ("xegemm.epilogue", None)}


def __getattr__(name: str):
    if name in _LAZY:
        module, attribute = _LAZY[name]
        found = importlib.import_module(module)
        return getattr(found, attribute) if attribute else found
    raise AttributeError(f"module 'xegemm' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_LAZY])
