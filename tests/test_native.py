"""The native lowering: message choice per compiler profile (proved by lane maps), ahead-of-time builds for
pvc with the ISA counts the plan predicts, and the choice of lowering from a device's capability report."""

import json
from pathlib import Path

import pytest

from xegemm.atoms.copy import CopyAtom, enumerate_copy_atoms
from xegemm.aot.build import compile_kernel
from xegemm.aot.call_check import check_calls
from xegemm.cli import main
from xegemm.config import config_from_text, expand, load_config
from xegemm.aot.capabilities import DEBIAN_CAPABILITIES
from xegemm.lowering.native import NativeCapabilities, NativeUnsupported, count_messages, lower_copy, native_capabilities
from xegemm.lowering import Lowering
from xegemm.jobs.pipeline import build_config, choose_lowering
from xegemm.plan.planner import plan
from xegemm.plan.surfaces import native_surface_violations
from xegemm.kernel.render import render_copy_atoms, render_kernel
from xegemm.runtime import DeviceInfo

ROOT = Path(__file__).resolve().parents[1]
OLD = native_capabilities(DEBIAN_CAPABILITIES)
LOADS = [a for a in enumerate_copy_atoms(include_quirks=False) if a.is_load]


def _compose(atom, messages):
    """The parent lane map rebuilt from the messages' lane maps and their register runs."""
    per = atom.register_elem_bits // atom.elem_bits
    lanes = [[None] * atom.elems_per_lane for _ in range(16)]
    for m in messages:
        r0, c0 = m.origin
        for dst, src, n in m.runs:
            for lane in range(16):
                for e in range(n * per):
                    c = m.atom.lane_map.map[lane][src * per + e]
                    lanes[lane][dst * per + e] = None if c is None else (r0 + c[0], c0 + c[1])
    return [tuple(lane) for lane in lanes]


PROFILES = {"old": OLD, "modern": native_capabilities("cl_intel_subgroup_2d_block_io")}


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("atom", LOADS, ids=lambda a: a.name)
def test_split_messages_rebuild_the_atom_exactly(atom, profile):
    prof = PROFILES[profile]
    try:
        messages = lower_copy(atom, prof)
    except NativeUnsupported as exc:
        assert "cannot issue" in str(exc)
        return
    for m in messages:
        assert prof.has(m.builtin) and m.atom.legal
    assert _compose(atom, messages) == list(atom.lane_map.map)


def test_the_gemm_atoms_are_single_messages_on_a_modern_driver():
    for name in ("XE_2D_U16x32x32_LD_N", "XE_2D_U16x32x32_LD_V", "XE_2D_U16x16x16_LD_T", "XE_2D_Packed_U8x32x32_LD_N",
                 "XE_2D_U8x32x32_LD_V", "XE_2D_TF32x32x16_LD_N", "XE_2D_U32x8x16_ST_N", "XE_2D_U16x32x32_PF_N"):
        messages = lower_copy(CopyAtom.parse(name), PROFILES["modern"])
        assert len(messages) == 1 and messages[0].builtin == CopyAtom.parse(name).ocl_builtin, name
    assert sum(_lowers(a, PROFILES["modern"]) for a in LOADS) > sum(_lowers(a, OLD) for a in LOADS) >= 60


def _lowers(atom, prof) -> bool:
    try:
        lower_copy(atom, prof)
        return True
    except NativeUnsupported:
        return False


def test_old_compiler_splits_the_reference_atoms():
    a = lower_copy(CopyAtom.parse("XE_2D_U16x32x32_LD_N"), OLD)
    assert [m.builtin for m in a] == ["__builtin_IB_subgroup_block_read_flat_u16_m8k16v2"] * 4
    b = lower_copy(CopyAtom.parse("XE_2D_U16x32x32_LD_V"), OLD)
    assert [m.builtin for m in b] == ["__builtin_IB_subgroup_block_read_flat_transform_u16_k16"] * 4
    assert all(m.swizzles for m in a + b)          # assembled with .lo/.hi, never through a union
    c = lower_copy(CopyAtom.parse("XE_2D_U32x8x16_ST_N"), OLD)
    assert [(m.kind, m.builtin) for m in c] == [("store_block1d", "intel_sub_group_block_write")]
    p = lower_copy(CopyAtom.parse("XE_2D_U16x32x32_PF_N"), OLD)
    assert p[0].kind == "prefetch" and count_messages(p)["prefetch"] == 2   # 32 rows x 1 line / 16 lanes
    # the LSC prefetch of 4-bit data starts at byte x / 2 (two elements per byte), of 16-bit data at x * 2
    source = render_copy_atoms([CopyAtom.parse("XE_2D_Packed_U4x16x64_PF_N"), CopyAtom.parse("XE_2D_U16x32x32_PF_N")],
                               Lowering("native", OLD))
    assert [line.strip() for line in source.splitlines() if "const long xb" in line] == [
        "const long xb = (long)x / 2;", "const long xb = (long)x * 2;"]


def test_a_profile_without_the_message_says_so():
    empty = NativeCapabilities("nothing", "ib", frozenset())
    with pytest.raises(NativeUnsupported, match="cannot issue XE_2D_U16x8x16_LD_N"):
        lower_copy(CopyAtom.parse("XE_2D_U16x8x16_LD_N"), empty)


def test_surface_rules_reject_with_the_padding_that_fixes_them():
    bad = config_from_text("problem: {m: 64, n: 20, k: 100}\n")
    msgs = native_surface_violations(bad)
    assert any("B rows are 20 x 2 B = 40 B wide" in m and "pad N to 32" in m for m in msgs)
    assert any("A pitch 200 B is not a multiple of 16 B: pad K to a multiple of 8 (104)" in m for m in msgs)
    assert native_surface_violations(config_from_text("problem: {m: 64, n: 64, k: 64}\n")) == []


def _fake(extensions):
    return DeviceInfo("level_zero:gpu:0", "Intel(R) Data Center GPU Max 1100", "Intel(R) Corporation", "level_zero",
                      "gpu", "1.6", 448, 1024, (16, 32), True, True, 48 << 30, tuple(extensions))


def test_run_chooses_native_from_the_capability_report(device_info):
    modern = _fake(["cl_intel_subgroups", "cl_intel_subgroup_2d_block_io",
                    "cl_intel_subgroup_matrix_multiply_accumulate"])
    lowering, profile = choose_lowering(modern)
    assert lowering == "native" and profile.spelling == "ocl2d"
    old = _fake(["cl_intel_subgroups", "cl_intel_subgroup_extended_block_read",
                 "cl_intel_subgroup_matrix_multiply_accumulate"])
    lowering, profile = choose_lowering(old)
    assert lowering == "native" and profile.name == DEBIAN_CAPABILITIES
    assert choose_lowering(device_info)[0] == "portable"          # the CPU runtime here
    assert choose_lowering(modern, "portable") == ("portable", None)


def _shipped_variants():
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        for v in expand(load_config(path)):
            if not v.rejected:
                yield path.stem, plan(v.config)


@pytest.mark.parametrize("profile_name", [DEBIAN_CAPABILITIES, "cl_intel_subgroup_2d_block_io"])
def test_native_source_of_shipped_configs_has_no_portable_fallback(profile_name):
    rendered = 0
    for _, p in _shipped_variants():
        lowering = Lowering("native", native_capabilities(profile_name, "dg2" if p.uses_block1d else "pvc"))
        atoms = [p.a.atom, p.b.atom, p.c.atom] + ([p.c_in] if p.c_in else [])
        if profile_name == DEBIAN_CAPABILITIES and not all(lowering.issues(a) for a in atoms):
            # this IGC has no 32-bit plain 2D reads (tf32 A; an f32 C read, which a plan for this lowering takes
            # from 1D block reads, tests/test_epilogue.py; GPTQ's 32-bit words of B, docs/quantization.md) nor
            # 8-wide d32 ones: such variants are rejected naming the builtin (tests/test_types.py), never given a
            # portable path
            assert p.config.types.a == "tf32" or p.c_in and p.c_in.elem_bits == 32 or \
                p.quant and p.quant.b_view.gptq, p.name
            continue
        src = render_kernel(p, lowering)
        rendered += 1
        for portable_only in ("xe_copy_coord", "xe_read_elem", "xe_write_elem", "sub_group_broadcast"):
            assert portable_only not in src, (p.name, portable_only)
        assert p.mma.builtin_family + "(" in src
    assert rendered > 20


def test_modern_profile_calls_match_the_documented_signatures():

    profile = native_capabilities("cl_intel_subgroup_2d_block_io")
    for _, p in _shipped_variants():
        src = render_kernel(p, Lowering("native", profile))
        if p.uses_block1d:     # SIMD8 (dg2) plans copy with 1D sub-group block messages
            assert "intel_sub_group_block_read" in src and "intel_sub_group_block_write" in src
        else:
            assert "intel_sub_group_2d_block_read" in src and "intel_sub_group_2d_block_write" in src
        assert check_calls(src) == [], p.name


# ---- ahead-of-time builds (ocloc) ----------------------------------------------------------------------

ocloc = pytest.mark.ocloc




@ocloc
def test_reference_config_builds_for_pvc_with_the_predicted_machine_code(tmp_path):
    from xegemm.jobs.pipeline import build_config

    result = build_config(ROOT / "configs" / "xe_reference.yaml", "pvc", out_dir=tmp_path, capabilities_name=DEBIAN_CAPABILITIES)
    on_disk = json.loads((tmp_path / "build.json").read_text())
    assert on_disk == json.loads(json.dumps(result))
    ref = result["variants"][0]
    assert "256x256x32_sg8x4" in ref["name"] and ref["name"].endswith("pf2_grf256")
    assert ref["status"] == "ok", ref["reason"]
    isa = ref["isa"]
    assert set(isa) == {"target", "grf", "instructions", "dpas", "load_block2d", "store_block2d",
                        "prefetch_block2d", "sends", "spill_bytes"}
    assert isa["dpas"] == ref["predicted"]["dpas"] == 32               # 4 x 4 x 2 DPAS per k-step
    assert isa["load_block2d"] == ref["predicted"]["load_block2d"] == 12   # A: 4 x 8-row, B: 8 x 16x16 VNNI
    assert isa["spill_bytes"] == 0 and isa["grf"] == 256
    assert all(v["status"] == "ok" for v in result["variants"]), [v["reason"] for v in result["variants"]]


@ocloc
def test_representative_variants_for_pvc_and_dg2(tmp_path):
    from xegemm.jobs.pipeline import build_config

    cfg = tmp_path / "mix.yaml"
    cfg.write_text("""name: mix
problem: {m: 512, n: 512, k: 512}
tile: {workgroup: [64, 64, 32], subgroups: [2, 2]}
sweep:
  types: [{a: bf16, b: bf16, acc: f32, c: f32}, {a: s8, b: u8, acc: s32, c: s32}, {a: tf32, b: tf32, acc: f32, c: f32}]
  layout.b: [row, col]
""")
    pvc = build_config(cfg, "pvc", grf=256, out_dir=tmp_path / "pvc", capabilities_name=DEBIAN_CAPABILITIES)
    by_type = {}
    for v in pvc["variants"]:
        by_type.setdefault(v["name"].split("_")[1], []).append(v)
    for v in by_type["bf16"] + by_type["s8"]:
        assert v["status"] == "ok", v["reason"]
        assert v["isa"]["dpas"] == v["predicted"]["dpas"] > 0
        assert v["isa"]["load_block2d"] == v["predicted"]["load_block2d"] > 0
        assert v["isa"]["spill_bytes"] == 0
    for v in by_type["tf32"]:   # this compiler has no 32-bit 8-wide 2D reads: said, not faked
        assert v["status"] == "rejected" and "cannot issue XE_2D_TF32" in v["reason"]
    small = build_config(cfg, "pvc", grf=128, out_dir=tmp_path / "pvc128", capabilities_name=DEBIAN_CAPABILITIES)
    spilled = [v for v in small["variants"] if v["isa"] and v["isa"]["spill_bytes"]]
    assert spilled and all(f"spills {v['isa']['spill_bytes']} bytes in 128-GRF mode" in v["reason"] for v in spilled)
    dg2 = build_config(cfg, "dg2", out_dir=tmp_path / "dg2", capabilities_name=DEBIAN_CAPABILITIES)
    assert all(v["status"] == "rejected" and "no 2D block messages" in v["reason"] for v in dg2["variants"])


@ocloc
def test_a_dropped_message_fails_the_build(tmp_path, monkeypatch):

    # pretend the compiler also had 32-row plain reads: it accepts the call and silently drops the message
    real = native_capabilities(DEBIAN_CAPABILITIES)
    lying = NativeCapabilities("lying", "ib", real.supported | {"__builtin_IB_subgroup_block_read_flat_u16_m32k16v2"})
    monkeypatch.setattr("xegemm.lowering.native_capabilities", lambda *a, **k: lying)
    result = build_config(ROOT / "configs" / "xe_reference.yaml", "pvc", out_dir=tmp_path)
    ref = result["variants"][0]
    assert ref["status"] == "failed_build"
    assert "load_block2d: ISA has" in ref["reason"] and "the plan needs 9" in ref["reason"]


@ocloc
def test_build_with_a_relative_out_dir(tmp_path, monkeypatch):
    """The documented `xegemm build CONFIG --target pvc` with a relative --out (a user found every variant
    failed_build: "ocloc rejected the kernel: Build succeeded." when IGC's dump folder was relative)."""
    cfg = tmp_path / "small.yaml"
    cfg.write_text("name: small\nproblem: {m: 256, n: 256, k: 256}\n"
                   "tile: {workgroup: [32, 32, 32], subgroups: [1, 2]}\n")
    monkeypatch.chdir(tmp_path)
    assert main(["build", str(cfg), "--target", "pvc", "--out", "rel", "--capabilities", DEBIAN_CAPABILITIES,
                 "--strict"]) == 0
    result = json.loads((tmp_path / "rel" / "build.json").read_text())
    assert [v["status"] for v in result["variants"]] == ["ok"], result["variants"][0]["reason"]


@ocloc
def test_compile_kernel_takes_a_relative_workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    build = compile_kernel("__kernel void k(global int* p) { p[get_global_id(0)] = 1; }", "pvc",
                           workdir=Path("rel"))
    assert build.ok, build.log[-500:]
    assert build.stats.spill_bytes == 0 and build.workdir.is_absolute()
