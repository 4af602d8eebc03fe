"""sycl-tla's tiles built ahead of time, and the ISA reader's figures from both of IGC's outputs.

The full sweep (sycl-tla's 19 cppgen Xe tiles and its legacy PVC benchmark tiles, each in the four A/B layouts, for
pvc and bmg with the current compiler: bench/cppgen_tiles.yaml, bench/sycl_tla_legacy.yaml, `python -m
bench.compiler_sweep`) takes minutes and lives in bench/, its results in docs/compilers.md; here a representative
few of its variants (the largest tile, the thinnest, both transposed operands, f16, K = 16 and K = 64), sycl-tla's
W4A16 benchmark tile (bench/sycl_tla_w4a16.yaml) built for pvc and verified through the native emulation at a
small shape, and dg2 with the current compiler, whose DPAS count holds once IGC's workaround DPAS are told apart.
The reader's rules are checked on the exact lines ocloc 26.27 printed and on broken variants of them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from xegemm.aot.isa import dump_kernel_stats, isa_stats, parse_instructions, parse_shader_dump
from xegemm.aot.toolchain import current_ocloc
from xegemm.config import load_config
from xegemm.evaluate import plan_variants
from xegemm.evaluate.aot import aot_evaluator
from xegemm.lowering import named_lowering

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
CURRENT_MISSING = ("the current Intel GPU compiler is not installed: run `sudo make ocloc-current` "
                   "(.ci/install-ocloc-current.sh, Debian unstable's ocloc into .tools)")
needs_current = pytest.mark.skipif(current_ocloc() is None, reason=CURRENT_MISSING)

# ---- the reader, on the lines ocloc 26.27 / IGC 2.40 printed ---------------------------------------------------

# dg2, a bf16 SIMD8 kernel (configs/dg2.yaml): IGC's dummy DPAS (no accumulator, the destination's registers as both
# multiplicands), then the two DPAS of the kernel, the first accumulating into the same registers
DG2_DPAS = """\
        dpas.8x8 (8|M0)          r168:f        null:f            r168:bf           r168.0:bf        {Atomic}
        dpas.8x8 (8|M0)          r168:f        r168:f            r15:bf            r160.0:bf        {Atomic}
        dpas.8x8 (8|M0)          r176:f        r176:f            r96:bf            r160.0:bf        {$12}
"""
# pvc: a DPAS of the kernel with a zero accumulator is written with null too, its multiplicands elsewhere
ZERO_ACC_DPAS = "        dpas.8x8 (16|M0)         r16:f         null:f            r6:hf             r2.0:hf\n"

# one 2D load, one prefetch, one 2D store and an atomic (a grouped launch's tile counter) as the disassembly prints
# them (sends) and as the dump does (by name)
DISASM_MESSAGES = """\
        send.ugm (1|M0)          r7       r149    null:0  0x0            0x02F00203           {A@1,$1} // wr:1+0, rd:31; load_block2d.ugm.d16.a64
        send.ugm (1|M0)          null     r81     null:0  0x0            0x02000203           {$2} // wr:1+0, rd:0; load_block2d.ugm.d16.a64.ca.ca
        send.ugm (1|M0)          null     r153    r82:8   0x0            0x020000207          {$3} // wr:1+8, rd:0; store_block2d.ugm.d32.a64
(W)     send.ugm (1|M0)          r10      r6      r8:1    0x0            0x0410058C           {I@1,$6} // wr:2+1, rd:1; atomic_iadd.ugm.d32.a64
"""
DUMP_MESSAGES = """\
        load_block2d.ugm.d16.a64 (1|M0)  r7:31   [r149:1]    {A@1,$1} // ex_desc:0x0; desc:0x2F00203 // $10
        load_block2d.ugm.d16.a64.ca.ca (1|M0)  null:0  [r81:1]   {$2} // ex_desc:0x0; desc:0x2000203 // $11
        store_block2d.ugm.d32.a64 (1|M0)  [r153:1]  r82:8       {$3} // ex_desc:0x0; desc:0x20000207 // $12
(W)     atomic_iadd.ugm.d32.a64 (1|M0)  r10:1   [r6:2]            r8:1               {I@1,$6} // ex_desc:0x0; desc:0x410058C // $23
"""


def _dump(code: str, inst_count: int, kernel: str = "k") -> str:
    return (f"//.kernel {kernel}\n//.platform DG2\n//.thread_config numGRF=256, numAcc=8, numSWSB=16\n"
            f"//.instCount {inst_count}\n//.RA type\tHYBRID_RA\n\n{code}")


def test_igcs_workaround_dpas_is_told_apart_from_the_kernels():
    ins = parse_instructions(DG2_DPAS)
    assert [i.is_workaround_dpas for i in ins] == [True, False, False]
    assert not parse_instructions(ZERO_ACC_DPAS)[0].is_workaround_dpas       # a zero accumulator is the kernel's
    # a null accumulator with the destination as only one of the multiplicands is a real product too
    assert not parse_instructions(DG2_DPAS.splitlines()[0].replace("r168.0:bf", "r160.0:bf"))[0].is_workaround_dpas
    # at 128 GRFs (spilling) IGC gives the dummy another destination, still one register as both multiplicands
    assert parse_instructions(
        "        dpas.8x8 (8|M0)          r24:f         null:f            r97:bf            r97.0:bf         {Atomic}\n"
    )[0].is_workaround_dpas
    stats = isa_stats({"k": DG2_DPAS})
    assert (stats.dpas, stats.dpas_workaround) == (2, 1)


def test_a_dumps_named_messages_count_as_the_disassemblys_sends():
    disasm, dump = parse_instructions(DISASM_MESSAGES), parse_instructions(DUMP_MESSAGES)
    assert [i.message_kind for i in disasm] == [i.message_kind for i in dump] == \
        ["load_block2d", "prefetch_block2d", "store_block2d", "atomic_iadd"]
    assert [i.response_grfs for i in disasm] == [i.response_grfs for i in dump] == [31, 0, 0, 1]
    from_dump = dump_kernel_stats(parse_shader_dump("x_simd16_entry_0001.asm", _dump(DUMP_MESSAGES, 4)))
    from_disasm = isa_stats({"k": DISASM_MESSAGES}).kernels["k"]
    for key in ("instructions", "load_block2d", "prefetch_block2d", "store_block2d", "sends", "dpas", "messages"):
        assert getattr(from_dump, key) == getattr(from_disasm, key), key
    assert from_dump.grf == 256 and from_dump.spill_bytes == 0


def test_a_dump_matches_by_its_listing_and_only_with_the_same_figures():
    code = DG2_DPAS + DUMP_MESSAGES
    disasm = DG2_DPAS + DISASM_MESSAGES
    # IGC 2.40's dg2 headers count more instructions than they list: the listing decides
    assert isa_stats({"k": disasm}, {"a_simd8_entry_0001.asm": _dump(code, 15)}).dump_exact is True
    # a dump of another compile of the kernel (one DPAS fewer, or a message of another kind) does not match
    fewer = code.replace(DG2_DPAS.splitlines()[2] + "\n", "        mov (8|M0)  r1.0<1>:f  0.0:f\n")
    assert isa_stats({"k": disasm}, {"a_simd8_entry_0001.asm": _dump(fewer, 7)}).dump_exact is False
    other = code.replace("store_block2d", "load_block2d")
    assert isa_stats({"k": disasm}, {"a_simd8_entry_0001.asm": _dump(other, 7)}).dump_exact is False


# ---- real builds with the current compiler ----------------------------------------------------------------------

SUBSET = {   # (config, workgroup, subgroups, layout a/b, a type): a few of the sweep's variants
    "largest": ("cppgen_tiles", (512, 128, 32), (16, 2), ("row", "row"), "bf16"),
    "thinnest, both transposed": ("cppgen_tiles", (64, 16, 64), (8, 1), ("col", "col"), "bf16"),
    "K 16, A transposed": ("cppgen_tiles", (256, 256, 16), (8, 4), ("col", "row"), "bf16"),
    "decode, f16, B transposed": ("sycl_tla_legacy", (8, 128, 32), (1, 4), ("row", "col"), "f16"),
}


def _variant(lowering, config: str, wg, sg, layouts, a_type):
    planned = plan_variants(load_config(BENCH / f"{config}.yaml"), lowering)
    (pv,) = [pv for pv in planned if pv.plan is not None and pv.config.tile.workgroup == wg
             and pv.config.tile.subgroups == sg and (pv.config.layout.a, pv.config.layout.b) == layouts
             and pv.config.types.a == a_type]
    return pv


def _assert_built_as_planned(ev, target: str, grf: int):
    assert ev.status == "ok", (ev.reason, ev.extra.get("isa_line"))
    assert ev.extra["compiler"] == "current" and ev.extra["isa"]["target"] == target
    gates = ev.extra["gates"]
    assert all(g["ok"] for g in gates.values()), ev.extra["isa_line"]
    assert gates["dpas"]["isa"] == gates["dpas"]["plan"] and gates["load_block2d"]["isa"] == gates["load_block2d"]["plan"]
    assert gates["spill_bytes"]["isa"] == 0 and gates["grf"]["isa"] == grf


@needs_current
@pytest.mark.ocloc
@pytest.mark.usefixtures("no_overrides")
@pytest.mark.parametrize("target", ["pvc", "bmg"])
@pytest.mark.parametrize("case", list(SUBSET))
def test_sycl_tla_tiles_build_as_planned_with_the_current_compiler(case, target, tmp_path):
    lowering = named_lowering("native", None, target, "current")
    pv = _variant(lowering, *SUBSET[case])
    _assert_built_as_planned(aot_evaluator(lowering, target, tmp_path, compiler="current").evaluate(pv), target, 256)


@needs_current
@pytest.mark.ocloc
@pytest.mark.usefixtures("no_overrides")
def test_sycl_tlas_w4a16_tile_builds_for_pvc(tmp_path):
    lowering = named_lowering("native", None, "pvc", "current")
    planned = [pv for pv in plan_variants(load_config(BENCH / "sycl_tla_w4a16.yaml"), lowering) if pv.plan]
    assert [(pv.config.types.a, pv.config.quant.scale) for pv in planned] == [("f16", "f16"), ("bf16", "bf16")]
    evaluator = aot_evaluator(lowering, "pvc", tmp_path, compiler="current")
    for pv in planned:
        assert (pv.config.problem.m, pv.config.problem.n, pv.config.problem.k) == (32, 14336, 4096)
        assert pv.config.tile.workgroup == (32, 128, 32) and pv.config.layout.b == "col"
        assert pv.plan.b.atom.name == "XE_2D_U4x16x32_LD_T"        # the d32 transpose 4 wide: this compiler has it
        ev = evaluator.evaluate(pv)
        _assert_built_as_planned(ev, "pvc", 256)
        conversion = ev.extra["gates"][f"to_{pv.config.types.a}"]
        assert conversion["ok"] and conversion["isa"] > 0          # B dequantized into A's type


@needs_current
@pytest.mark.ocloc
@pytest.mark.usefixtures("no_overrides")
def test_dg2_with_the_current_compiler_holds_its_dpas_beside_igcs_workaround_ones(tmp_path):
    lowering = named_lowering("native", None, "dg2", "current")
    pv = next(pv for pv in plan_variants(load_config(ROOT / "configs" / "dg2.yaml"), lowering)
              if pv.plan is not None and pv.config.types.a == "bf16")
    ev = aot_evaluator(lowering, "dg2", tmp_path, compiler="current").evaluate(pv)
    assert ev.status == "ok", (ev.reason, ev.extra.get("isa_line"))
    dpas = ev.extra["gates"]["dpas"]
    assert dpas["isa"] == dpas["plan"] == 16 and dpas["workaround"] > 0       # 5 with IGC 2.40
    assert ev.extra["gates"]["instructions"]["ok"]                            # the dump is this machine code
    assert "IGC workaround dpas" in ev.extra["isa_line"]


@pytest.mark.device
def test_sycl_tlas_w4a16_tile_verifies_through_the_emulation(session, sycl_device):
    from xegemm.aot.capabilities import CURRENT_CAPABILITIES
    from xegemm.jobs.pipeline import run_variant
    from xegemm.lowering import EmulatedNativeLowering, choose_lowering
    from xegemm.lowering.native import native_capabilities
    from xegemm.runtime import describe

    if not choose_lowering(describe(sycl_device), "native").emulated:
        pytest.skip(f"{sycl_device.filter_string} has the Xe builtins itself: the native lowering runs natively")
    # the kernel the current compiler builds: its capability set spells B's 4-wide d32 transpose with IGC's
    # builtin, which the public cl_intel_subgroup_2d_block_io names lack
    lowering = EmulatedNativeLowering("native", native_capabilities(CURRENT_CAPABILITIES))
    config = load_config(BENCH / "sycl_tla_w4a16.yaml").with_overrides({"profile.warmup": 0, "profile.repeats": 1})
    # the same tile at a small shape: N ragged against 128, K two groups and a ragged k-tile
    config = config.at_problems([{"m": 32, "n": 200, "k": 288, "batch": 1}])
    pv = next(pv for pv in plan_variants(config, lowering) if pv.plan and pv.config.types.a == "f16")
    assert pv.plan.b.atom.name == "XE_2D_U4x16x32_LD_T"
    result = run_variant(pv, session, lowering)
    assert result.status == "ok", f"{pv.name}: {result.status}: {result.reason}"


@needs_current
@pytest.mark.ocloc
@pytest.mark.usefixtures("no_overrides")
@pytest.mark.parametrize("lowering", ["native", "coopmat"])
def test_build_prints_each_variants_isa_figures_for_either_lowering(lowering, tmp_path):
    """`xegemm build` shows every variant's machine-code figures beside the plan's on the console, the coopmat
    lowering's too (its dpas against its multiply-adds, the 2D loads beside its global tiles)."""
    import io

    from xegemm.jobs.pipeline import build_config
    config = tmp_path / "c.yaml"
    config.write_text("name: gpu\nproblem: {m: 256, n: 256, k: 256}\ntypes: {a: bf16, b: bf16, acc: f32, c: f32}\n"
                      "tile: {workgroup: [64, 64, 32], subgroups: [2, 2], subgroup_size: 16}\n")
    console = io.StringIO()
    result = build_config(config, target="pvc", compiler="current", out_dir=tmp_path / "b", lowering=lowering,
                          progress=console)
    (v,) = result["variants"]
    assert v["status"] == "ok", v["reason"]
    lines = console.getvalue().splitlines()
    figures = lines[lines.index(next(ln for ln in lines if ln.startswith("[1/1]"))) + 1]
    want = v["predicted"]["dpas"]
    for word in (f"dpas {want}/{want}", "load2d", "grf 256/", "spills", "sends", "instructions"):
        assert word in figures, figures


def test_statistics_from_dumps_alone_need_one_dump_per_kernel():
    from xegemm.aot.build import stats_from_dumps
    dump = _dump(DG2_DPAS + DUMP_MESSAGES, 7)
    stats = stats_from_dumps({"a_simd8_entry_0001.asm": dump}, "dg2", 256)
    assert (stats.dpas, stats.dpas_workaround, stats.load_block2d, stats.store_block2d, stats.prefetch_block2d) == \
        (2, 1, 1, 1, 1)
    assert stats.grf == 256 and stats.spill_bytes == 0 and set(stats.kernels) == {"k"}
    # a kernel compiled twice (IGC's retry): which one is in the binary is unknown, so no figures
    assert stats_from_dumps({"a_simd8_entry_0001.asm": dump, "a_1_simd8_entry_0001.asm": dump}, "dg2", 256) is None
    assert stats_from_dumps({}, "dg2", 256) is None


@pytest.mark.ocloc
@pytest.mark.usefixtures("no_overrides")
def test_a_build_whose_disassembly_gives_no_code_takes_the_dumps_figures(tmp_path, monkeypatch):
    """Where `ocloc disasm` writes no kernel code, the figures come from IGC's dumps of the same compile: the
    same as the disassembly's where both exist (the default compiler for pvc, a 2D-load + DPAS kernel)."""
    from xegemm.aot import build as aot_build
    from xegemm.aot.errors import OclocToolError
    from xegemm.config import config_from_text
    from xegemm.kernel.render import render_kernel

    text = ("problem: {m: 64, n: 64, k: 64}\ntypes: {a: bf16, b: bf16, acc: f32, c: f32}\n"
            "tile: {workgroup: [32, 32, 32], subgroups: [2, 2], subgroup_size: 16}\n")
    lowering = named_lowering("native", None, "pvc")
    (pv,) = plan_variants(config_from_text(text), lowering)
    source = render_kernel(pv.plan, lowering)
    real = aot_build.compile_kernel(source, "pvc", grf=256, workdir=tmp_path / "a")
    assert real.ok and real.isa_source == "disassembly", real.log

    def no_code(*args, **kwargs):
        raise OclocToolError("`ocloc disasm` gave no kernels (exit 0)", "")

    monkeypatch.setattr(aot_build, "disassemble", no_code)
    from_dumps = aot_build.compile_kernel(source, "pvc", grf=256, workdir=tmp_path / "b")
    assert from_dumps.ok and from_dumps.isa_source == "dumps" and not from_dumps.kernel_asm
    assert from_dumps.stats.to_dict() == real.stats.to_dict()
    assert from_dumps.stats.messages == real.stats.messages and from_dumps.stats.dpas > 0
