"""The benchmark suite measures the configs and shapes it is given (``--bench-config``, ``--bench-shapes``;
``make bench CONFIG= SHAPES=``), and by default configs/default.yaml at its own problem.  Checked by collecting
the suite, which plans every variant, without running anything on the device."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def collect(*options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "bench/test_gemm_bench.py", "bench/test_build_bench.py",
                           "--collect-only", "-q", "-p", "no:cacheprovider", *options],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def ids(done: subprocess.CompletedProcess, test: str) -> list[str]:
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return re.findall(rf"::{test}\[([^\]]+)\]", done.stdout)


def test_by_default_the_default_config_at_its_own_problem():
    done = collect()
    variants = ids(done, "test_variant")
    assert len(variants) == 8 and all(v.startswith("demo-520x496x264-xegemm_") for v in variants)
    assert ids(done, "test_plain_subgroup_sgemm") == ["520x496x264"]
    assert ids(done, "test_best_variant_vs_references") == ["520x496x264"]
    assert len(ids(done, "test_build_time")) == 16          # each variant on both CPU code paths


def test_configs_and_shapes_from_the_command_line():
    done = collect("--bench-config", "configs/default.yaml", "--bench-config", "bench/tune_demo.yaml",
                   "--bench-shapes", "256x128x64,64x64x64x2")
    variants = ids(done, "test_variant")
    for name in ("demo", "tune_demo"):
        for shape in ("256x128x64", "64x64x64x2"):
            assert any(v.startswith(f"{name}-{shape}-xegemm_") for v in variants), (name, shape, variants)
    assert not any("520x496x264" in v for v in variants)
    for test in ("test_numpy_in_process", "test_plain_subgroup_sgemm", "test_best_variant_vs_references"):
        assert ids(done, test) == ["256x128x64", "64x64x64x2"]


def test_a_bad_shape_is_a_clear_error():
    done = collect("--bench-shapes", "1024x1024")
    assert done.returncode != 0
    assert "'1024x1024' is not a shape" in done.stdout + done.stderr


def test_make_passes_config_and_shapes_through():
    done = subprocess.run(["make", "-n", "bench", "CONFIG=a.yaml b.yaml", "SHAPES=8x8x8"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "--bench-config a.yaml --bench-config b.yaml --bench-shapes 8x8x8" in " ".join(done.stdout.split())


def test_against_renders_in_the_tree_of_the_other_commit():
    """``--against REV`` (bench.build_times, bench.interleave) runs the renderer of commit REV: its own xegemm,
    from a checkout outside this tree, with the arguments given."""
    from bench.revision import python_at
    got = python_at("HEAD", "import json, sys, xegemm; print(json.dumps([xegemm.__file__, sys.argv[1:]]))", "a", "b")
    assert not Path(got[0]).is_relative_to(ROOT) and got[0].endswith("xegemm/__init__.py")
    assert got[1] == ["a", "b"]


def test_the_build_time_table_gives_each_feature_against_the_other_commit():
    from bench.build_times import BEFORE, CPU, table
    loads = {"loadavg": [1.0, 1.0, 1.0], "cpu_count": 2}
    result = {"repeats": 3, "against": "abc123", "conditions_before": loads, "conditions_after": loads,
              "features": [{"feature": "plain", "chars": 10, "statements": 2},
                           {"feature": "output f16", "chars": 12, "statements": 3}],
              "paths": {"avx512": {"plain": {"build_s": 1.0, BEFORE + "build_s": 1.0},
                                   "output f16": {"build_s": 1.2, CPU: 1.1, BEFORE + "build_s": 2.4}}}}
    text = table(result)
    assert "| avx512 build s at abc123 | avx512 now / abc123 |" in text
    assert "| avx512 build s | avx512 CPU s | avx512 x plain |" in text
    assert "| output f16 | 12 | 3 | 1.20 | 1.10 | 1.2 | 2.40 | 0.50 | - | - | - |" in text
    assert "| plain | 10 | 2 | 1.00 | - | 1.0 |" in text
    assert "each interleaved with the same feature rendered at abc123" in text
