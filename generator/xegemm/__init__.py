"""xegemm: a CUTLASS-style GEMM kernel generator for Intel Xe GPUs.

The package is organised as a one-way chain (config -> plan -> render -> build -> verify -> profile
-> report) with the atom model (:mod:`xegemm.atoms`) beside it as the single source of truth for
every 2D block copy and DPAS atom.
"""

__version__ = "0.1.0"

from xegemm.epilogue_graph import make_epilogue_callable, ops  # noqa: F401 - xegemm.ops; xegemm.epilogue(fn)
make_epilogue_callable()
