"""Every shipped config builds for pvc and bmg with the current compiler, its machine code holding the plan.

One representative variant per config and target (the config's first that plans), built by the current compiler
(Debian unstable's ocloc 26 / IGC 2.x, `make ocloc-current`) with its probed capability profile: status ``ok``
(dpas, 2D block loads and, where predicted, conversions as the plan says), every store and every kind of
prefetch there, the GRF mode asked, no spill, and the disassembly's instruction count equal to IGC's dump.
dg2's sub-group-8 kernels are rejected for these targets by the target rules, with the reason, before any
compiler runs.  The full sweep over every variant (and Debian's compiler) is bench/compiler_sweep.py, its
results in docs/compilers.md.  Where the current compiler is not installed every test here is skipped with the
command that installs it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from xegemm.aot.toolchain import current_ocloc
from xegemm.config import load_config
from xegemm.evaluate import plan_variants
from xegemm.evaluate.aot import aot_evaluator
from xegemm.lowering import named_lowering

pytestmark = [pytest.mark.ocloc, pytest.mark.usefixtures("no_overrides")]

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
CURRENT_MISSING = ("the current Intel GPU compiler is not installed: run `sudo make ocloc-current` "
                   "(.ci/install-ocloc-current.sh, Debian unstable's ocloc into .tools)")
needs_current = pytest.mark.skipif(current_ocloc() is None, reason=CURRENT_MISSING)




@needs_current
@pytest.mark.parametrize("target", ["pvc", "bmg"])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_a_shipped_config_builds_with_the_current_compiler(config, target, tmp_path):
    lowering = named_lowering("native", None, target, "current")
    evaluator = aot_evaluator(lowering, target, tmp_path, compiler="current")
    planned = plan_variants(load_config(config), lowering)
    admitted = [pv for pv in planned if pv.plan is not None and evaluator.builder.admit(pv) is None]
    if config.stem == "dg2":          # sub-group 8 kernels: not for a SIMD16 target, said before building
        assert not admitted
        assert all("executes DPAS at SIMD16" in evaluator.builder.admit(pv) for pv in planned if pv.plan)
        return
    assert admitted, [pv.reason for pv in planned]
    ev = evaluator.evaluate(admitted[0])
    assert ev.status == "ok", (ev.reason, ev.extra.get("isa_line"))
    assert ev.extra["compiler"] == "current" and ev.extra["isa"]["target"] == target
    gates = ev.extra["gates"]
    assert all(g["ok"] for g in gates.values()), ev.extra["isa_line"]
    assert gates["spill_bytes"]["isa"] == 0 and gates["grf"]["isa"] == admitted[0].config.target.grf


@needs_current
def test_build_records_the_compiler_and_prints_each_variants_figures(tmp_path):
    """`xegemm build --target bmg` (the current compiler, the only one that knows Xe2): build.json names the
    compiler and its versions, and the console shows each variant's ISA figures beside the plan's."""
    import io
    import json

    from xegemm.jobs.pipeline import build_config
    console = io.StringIO()
    result = build_config(ROOT / "configs" / "tf32.yaml", "bmg", out_dir=tmp_path, progress=console)
    written = json.loads((tmp_path / "build.json").read_text())
    assert written["compiler"]["name"] == "current" and written["compiler"]["igc"].startswith("2.")
    (v,) = written["variants"]
    assert v["status"] == "ok" and v["compiler"] == "current" and v["isa"]["target"] == "bmg"
    assert result["compiler"] == written["compiler"]
    figures = console.getvalue().splitlines()[1]
    for word in ("dpas 8/8", "load2d", "store2d", "prefetch", "grf 256/256", "spills 0", "sends", "instructions"):
        assert word in figures, figures
    assert "differs" not in figures
