"""pytest-benchmark suites of xegemm (``make bench``), each against references measured in the same run."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = REPO / "configs" / "default.yaml"
