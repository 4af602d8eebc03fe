"""Hostile input cannot reach outside the output directory, run code or hide in the YAML.

Constraint expressions are compiled by xegemm's own evaluator, never eval (fuzzed in test_fuzz_configs.py);
these tests cover the paths: every file a job writes is inside its output directory, and no name taken from a
config can climb out of it."""

import os
from pathlib import Path

import pytest

from xegemm.config import ConfigError, config_from_text
from xegemm.jobs.pipeline import generate

EVIL_NAMES = ["../../outside", "a/b", "/etc/passwd", "..", ".hidden", "x\\..\\y", "name\x00", "~root"]


@pytest.mark.parametrize("name", EVIL_NAMES)
def test_a_config_name_cannot_be_a_path(name):
    with pytest.raises(ConfigError, match="name: expected a name made of letters"):
        config_from_text(f"name: {name!r}\nproblem: {{m: 8, n: 8, k: 8}}\n".replace("'", '"'))


def test_yaml_object_tags_are_refused():
    with pytest.raises(ConfigError, match="python/object"):
        config_from_text("problem: !!python/object/apply:os.system ['true']\n")


def _files(root: Path) -> set[Path]:
    return {Path(d) / f for d, _, fs in os.walk(root) for f in fs}


def test_generate_writes_only_inside_its_output_directory(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("name: evil.name-1\nproblem: {m: 40, n: 40, k: 40}\n"
                   "tile: {workgroup: [32, 32, 32], subgroups: [1, 2]}\nsweep:\n  pipeline.prefetch: [0, 1]\n")
    before = _files(tmp_path)
    generate(cfg, tmp_path / "out")
    new = _files(tmp_path) - before
    assert new and all((tmp_path / "out") in p.parents for p in new), new
