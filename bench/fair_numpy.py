"""The fair numpy reference: ``blas_worker.py`` in a child process without the machine's OpenBLAS overrides.

The machines export ``OPENBLAS_CORETYPE=Haswell`` and ``OPENBLAS_L2_SIZE``; OpenBLAS then runs its AVX2
kernels on a CPU that has AVX-512.  Only the child's environment loses the two variables: the benchmark's
own process (and every test) keeps them as they are.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.blas_worker import OPENBLAS_VARIABLES

WORKER = Path(__file__).with_name("blas_worker.py")


class FairNumpyProcess:
    """A child process serving timed float32 matmuls of one problem (use as a context manager)."""

    def __init__(self, m: int, n: int, k: int, batch: int = 1, seed: int = 0):
        env = {name: value for name, value in os.environ.items() if name not in OPENBLAS_VARIABLES}
        args = [sys.executable, str(WORKER), *(str(x) for x in (m, n, k, batch, seed))]
        self._stderr: str | None = None
        self._proc = subprocess.Popen(args, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
        first = self._proc.stdout.readline()
        if not first:
            raise RuntimeError(f"the reference process exited: {self._finish()}")
        #: what the child reports: numpy version, its OPENBLAS_* variables, the BLAS libraries and core type
        self.info = json.loads(first)
        self.unset = list(OPENBLAS_VARIABLES)

    def run_once(self) -> float:
        """Seconds of one matmul, measured inside the child."""
        self._proc.stdin.write("run\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        try:
            return float(line)
        except ValueError:
            raise RuntimeError(f"the reference process answered {line!r}: {self._finish()}") from None

    def _finish(self) -> str:
        """Close the child's stdin (it then exits), wait for it and return what it wrote on stderr."""
        if self._stderr is None:
            try:
                _, err = self._proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                _, err = self._proc.communicate()
            self._stderr = (err or "").strip()[-2000:]
        return self._stderr or f"exit status {self._proc.returncode}"

    def close(self) -> None:
        self._finish()

    def __enter__(self) -> FairNumpyProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
