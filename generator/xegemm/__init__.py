"""xegemm: a CUTLASS-style GEMM kernel generator for Intel Xe GPUs.

The package is organised as a one-way chain (config -> plan -> render -> build -> verify -> profile
-> report) with the atom model (:mod:`xegemm.atoms`) beside it as the single source of truth for
every 2D block copy and DPAS atom.

``xegemm.load(source)`` returns a callable :class:`xegemm.api.Gemm` (docs/use.md).  It is looked up on first
use (PEP 562), so that importing the generator alone does not start the SYCL runtime.
"""

import importlib

__version__ = "0.1.0"

# Looked up on first use (PEP 562), so that `import xegemm` (and `xegemm --version`) loads nothing heavy and does
# not start the SYCL runtime: name -> (the module that holds it, the attribute; None: the module itself).
_LAZY = {"ops": ("xegemm.epilogues.ops", None), "epilogue": ("xegemm.epilogues.tracer", "epilogue"),
         "load": ("xegemm.api", "load"), "Gemm": ("xegemm.api", "Gemm"), "DeviceArray": ("xegemm.api", "DeviceArray")}


def __getattr__(name: str):
    if name in _LAZY:
        module, attribute = _LAZY[name]
        found = importlib.import_module(module)
        return getattr(found, attribute) if attribute else found
    raise AttributeError(f"module 'xegemm' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_LAZY])
