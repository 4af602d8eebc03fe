"""numpy's float32 matmul as a reference: operands, one timed call, and which BLAS kernel ran.

Imported by the benchmarks for the in-process reference, and run as a script (``python blas_worker.py M N K
BATCH SEED``) for the fair reference: the benchmark starts it with ``OPENBLAS_CORETYPE`` and
``OPENBLAS_L2_SIZE`` removed from its environment only, so OpenBLAS picks its kernels for the real CPU.
The script prints one JSON line describing itself, then answers each ``run`` line on stdin with the
duration of one matmul in seconds, until stdin closes.  It imports nothing from xegemm.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time

import numpy as np

OPENBLAS_VARIABLES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def operands(m: int, n: int, k: int, batch: int = 1, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seeded float32 A (batch x M x K) and B (batch x K x N); 2-D when batch is 1."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((batch, m, k), dtype=np.float32)
    b = rng.standard_normal((batch, k, n), dtype=np.float32)
    return (a[0], b[0]) if batch == 1 else (a, b)


def timed_matmul(a: np.ndarray, b: np.ndarray) -> float:
    """Seconds taken by one ``np.matmul(a, b)`` (host wall clock)."""
    t0 = time.perf_counter()
    np.matmul(a, b)
    return time.perf_counter() - t0


def _openblas_corename() -> dict:
    """The core type of the OpenBLAS numpy loaded, read from the library itself (no threadpoolctl)."""
    with open("/proc/self/maps", encoding="utf-8") as maps:
        paths = {line.split()[-1] for line in maps if "openblas" in line.lower() and "/" in line}
    for path in sorted(paths):
        lib = ctypes.CDLL(path)
        for symbol in ("scipy_openblas_get_corename64_", "openblas_get_corename64_", "openblas_get_corename"):
            fn = getattr(lib, symbol, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                return {"internal_api": "openblas", "filepath": path, "architecture": fn().decode()}
    return {"internal_api": "unknown", "architecture": None, "note": "no OpenBLAS library found in the process"}


def blas_info() -> dict:
    """numpy's version, the OpenBLAS variables as this process sees them, and the BLAS libraries it runs.

    Uses threadpoolctl's ``threadpool_info()`` when installed, else asks OpenBLAS for its core name.
    Call it after a first matmul so that the BLAS library is loaded and initialised.
    """
    try:
        from threadpoolctl import threadpool_info  # noqa: PLC0415
        libraries = [lib for lib in threadpool_info() if lib.get("user_api") == "blas"]
        source = "threadpoolctl"
    except ImportError:
        libraries = [_openblas_corename()]
        source = "openblas_get_corename (threadpoolctl not installed)"
    return {"numpy": np.__version__, "pid": os.getpid(),
            "environment": {name: os.environ.get(name) for name in OPENBLAS_VARIABLES},
            "blas": libraries, "blas_info_source": source}


def main(argv: list[str]) -> int:
    """Serve timed matmuls over stdin/stdout (see the module docstring)."""
    m, n, k, batch, seed = (int(x) for x in argv)
    a, b = operands(m, n, k, batch, seed)
    np.matmul(a, b)  # loads and warms up the BLAS library before it is described
    print(json.dumps(blas_info()), flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            print(json.dumps({"error": f"unknown request {line.strip()!r}"}), flush=True)
            return 2
        print(repr(timed_matmul(a, b)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
