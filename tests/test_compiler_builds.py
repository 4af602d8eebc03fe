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

from xegemm.aot.toolchain import COMPILER_ENV, OCLOC_ENV, current_ocloc
from xegemm.config import load_config
from xegemm.evaluate import plan_variants
from xegemm.evaluate.aot import aot_evaluator
from xegemm.lowering import named_lowering

pytestmark = pytest.mark.ocloc

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
CURRENT_MISSING = ("the current Intel GPU compiler is not installed: run `sudo make ocloc-current` "
                   "(.ci/install-ocloc-current.sh, Debian unstable's ocloc into .tools)")
needs_current = pytest.mark.skipif(current_ocloc() is None, reason=CURRENT_MISSING)


@pytest.fixture(autouse=True)
def no_overrides(monkeypatch):
    monkeypatch.delenv(OCLOC_ENV, raising=False)
    monkeypatch.delenv(COMPILER_ENV, raising=False)
    monkeypatch.delenv("XEGEMM_COMPILER_CAPABILITIES", raising=False)


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
