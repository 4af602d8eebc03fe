"""Python run in the tree of another commit of this repository: what that commit's generator renders, for
benchmarks that compare it with the working tree's (``--against REV`` of :mod:`bench.build_times` and
:mod:`bench.interleave`).  The commit's tree is checked out (``git archive``) into a scratch directory and the
code runs there in a child process, with that tree's ``xegemm`` and ``bench`` first on the path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from bench import REPO


def python_at(rev: str, code: str, *args: str):
    """Run ``code`` (which prints one JSON document) with ``args`` as ``sys.argv[1:]`` in the tree of commit
    ``rev``; its JSON."""
    with tempfile.TemporaryDirectory(prefix="xegemm-rev-") as tree:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", tree], input=archive.stdout, check=True)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([f"{tree}/generator", tree])}
        done = subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=tree, capture_output=True,
                              text=True)
    if done.returncode:
        raise SystemExit(f"rendering at {rev} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)
