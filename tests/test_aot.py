"""Ahead-of-time builds with ocloc: ISA statistics, spills, GRF modes and the compiler profile.

Every kernel here is compiled for real Xe targets by Intel's offline compiler and checked against its real
disassembly.  `make test` installs ocloc when run as root; elsewhere these tests are skipped with what to
install (the ocloc marker, tests/conftest.py).
"""

from __future__ import annotations

import dataclasses
import re
import shutil

import pytest

from xegemm.aot import (
    BuiltinNameError,
    OclocMissingError,
    CapabilitiesError,
    UnknownTargetError,
    compile_kernel,
    compiler_capabilities,
    compiler_version,
    compose_options,
    declare_block2d_builtin,
    find_ocloc,
    isa_stats,
    load_capabilities,
    parse_block2d_builtin,
    parse_instructions,
    parse_shader_dump,
    probe_compiler_capabilities,
)
from xegemm.aot.build import disassemble
from xegemm.aot.builtins import block2d_violation
from xegemm.aot.isa import block2d_shapes
from xegemm.aot.probes import Probe, probe_catalog
from xegemm.aot.capabilities import run_probes
from xegemm.aot.toolchain import run_ocloc

pytestmark = pytest.mark.ocloc

READ_U16_8x16 = "__builtin_IB_subgroup_block_read_flat_u16_m8k16v1"
READ_U16_32x16 = "__builtin_IB_subgroup_block_read_flat_u16_m32k16v1"
SG16 = "__attribute__((intel_reqd_sub_group_size(16)))"


@pytest.fixture(scope="session")
def ocloc():
    return find_ocloc()      # the ocloc marker skips this module where it is missing (tests/conftest.py)


@pytest.fixture(scope="session")
def profile_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("profiles")


@pytest.fixture(scope="session")
def pvc_profile(ocloc, profile_dir):
    # refresh=True: measure the live compiler, never a cache left by an earlier run
    return probe_compiler_capabilities("pvc", cache_dir=profile_dir, refresh=True)


def dpas_kernel(n: int) -> str:
    steps = "\n".join(
        f"  acc = intel_sub_group_bf16_bf16_matrix_mad_k16(vload8({16 * j} + i, a), vload8({16 * j} + i, b), acc);"
        for j in range(n))
    return (f"{SG16}\nkernel void chain(global float *c, global short *a, global int *b) {{\n"
            f"  int i = get_sub_group_local_id();\n  float8 acc = vload8(i, c);\n{steps}\n  vstore8(acc, i, c);\n}}\n")


def block_read_kernel(name: str, reads: int) -> str:
    loads = "\n".join(f"  ushort8 v{j} = {READ_U16_8x16}((long)p, 255, 63, 255, (int2)({16 * j}, {8 * j}));"
                      for j in range(reads))
    total = " + ".join(f"v{j}" for j in range(reads))
    return (f"{SG16}\nkernel void {name}(global ushort *p, global ushort *out) {{\n{loads}\n"
            f"  intel_sub_group_block_write_us8(out, {total});\n}}\n")


def spilling_kernel(accumulators: int) -> str:
    # `accumulators` float8 DPAS accumulators live across a loop: 8 GRFs each at SIMD16 (docs/atoms.md §4),
    # so 20 of them (160 GRFs) cannot fit the 128-GRF file.
    decl = "\n".join(f"  float8 c{j} = 0;" for j in range(accumulators))
    body = "\n".join(f"    c{j} = intel_sub_group_bf16_bf16_matrix_mad_k16(av, vload8({j} + k, b + 8 * i), c{j});"
                     for j in range(accumulators))
    store = "\n".join(f"  vstore8(c{j}, {j}, c + 8 * i);" for j in range(accumulators))
    return (f"{SG16}\nkernel void spill(global float *c, global short *a, global int *b, int K) {{\n"
            f"  int i = get_sub_group_local_id();\n{decl}\n  for (int k = 0; k < K; ++k) {{\n"
            f"    short8 av = vload8(k, a + 8 * i);\n{body}\n  }}\n{store}\n}}\n")


# ---------------------------------------------------------------------------------------------------
# DPAS and 2D block reads, counted in the real disassembly


def test_bf16_dpas_chain_gives_one_dpas_per_call_on_pvc(ocloc, tmp_path):
    n = 6
    build = compile_kernel(declare_block2d_builtin(READ_U16_8x16) + dpas_kernel(n), "pvc", workdir=tmp_path)
    assert build.ok, build.log
    assert build.stats.dpas == n
    dpas = [i for i in parse_instructions(build.kernel_asm["chain"]) if i.opcode == "dpas"]
    assert len(dpas) == n
    for ins in dpas:  # dpas.8x8 (16|M0) rD:f rC:f rB:bf rA:bf — systolic depth 8, repeat 8, SIMD16
        assert ins.mnemonic == "dpas.8x8" and ins.exec_size == 16
        assert ins.operand_types == ("f", "f", "bf", "bf"), ins.operands
    assert build.stats.target == "pvc" and build.stats.grf == 128 and build.stats.spill_bytes == 0


def test_plain_2d_reads_are_counted_per_kernel(ocloc, tmp_path):
    source = (declare_block2d_builtin(READ_U16_8x16) + "\n" + block_read_kernel("three_reads", 3)
              + block_read_kernel("one_read", 1))
    build = compile_kernel(source, "pvc", workdir=tmp_path)
    assert build.ok, build.log
    per = build.stats.kernels
    assert set(per) == {"three_reads", "one_read"}
    assert per["three_reads"].load_block2d == 3 and per["one_read"].load_block2d == 1
    assert build.stats.load_block2d == 4
    assert build.stats.instructions == per["three_reads"].instructions + per["one_read"].instructions
    assert build.stats.sends == per["three_reads"].sends + per["one_read"].sends
    shapes = block2d_shapes(parse_instructions(build.kernel_asm["three_reads"]))
    assert len(shapes) == 3
    for ins, shape in shapes:  # 8 rows of 16 u16 = 4 GRFs at least (IGC 1.0.12504 reads 2 blocks: 8 GRFs)
        assert ins.message.startswith("load_block2d.ugm.d16") and ins.response_grfs >= 4
        assert shape is not None and shape[:2] == (16, 8)
    # every load_block2d is a send, and the 1D block write is one too
    assert per["one_read"].messages.get("store_block1d") == 1
    assert per["one_read"].sends >= 2 + 1  # read, write, end of thread
    assert set(build.stats.to_dict()) == {"target", "grf", "instructions", "dpas", "load_block2d",
                                          "store_block2d", "prefetch_block2d", "sends", "spill_bytes"}
    assert all(k.dump_exact for k in per.values())  # each kernel's IGC dump matched its disassembly


def test_store_and_prefetch_block2d_are_counted_from_iga_text(ocloc, tmp_path):
    # This IGC drops every 2D write, so build the ISA by hand: turn the compiled 2D read into a 2D store and
    # the 1D write into a 2D load to null (a prefetch), re-assemble with `ocloc asm`, disassemble again:
    # the counts must come from IGA's own spelling of those messages.
    build = compile_kernel(declare_block2d_builtin(READ_U16_8x16) + block_read_kernel("k", 1), "pvc",
                           workdir=tmp_path / "build")
    assert build.ok and build.stats.load_block2d == 1, build.log
    edited = tmp_path / "edited"
    shutil.copytree(build.workdir / "disasm", edited)
    asm_file = edited / "k_KernelHeap.asm"
    text = asm_file.read_text()
    load = re.compile(r"send\.ugm \(16\|M0\)\s+(r\d+)\s+(r\d+)\s+null:0\s+0x0\s+0x(\w+)")
    m = load.search(text)
    assert m, text
    desc = int(m.group(3), 16)
    store_desc = (desc & ~0x3F & ~(0x1F << 20)) | 0x07  # LSC op 7 = store_block2d, no response
    text = load.sub(f"send.ugm (16|M0) null {m.group(2)} {m.group(1)}:4 0x0 {store_desc:#010x}", text, count=1)
    write1d = re.compile(r"send\.ugm \(1\|M0\)\s+null\s+(r\d+)\s+r\d+:\d+\s+0x0\s+0x\w+")
    assert write1d.search(text), text
    prefetch_desc = desc & ~(0x1F << 20)  # load_block2d with no response and destination null
    text = write1d.sub(f"send.ugm (16|M0) null {m.group(2)} null:0 0x0 {prefetch_desc:#010x}", text, count=1)
    asm_file.write_text(text)
    done = run_ocloc(["asm", "-out", str(tmp_path / "edited.bin"), "-dump", str(edited), "-device", "pvc"],
                     cwd=tmp_path)
    assert done.returncode == 0, done.stdout
    kernels, _ = disassemble(tmp_path / "edited.bin", "pvc", tmp_path / "redis")
    assert "store_block2d.ugm.d16.a64" in kernels["k"]
    stats = isa_stats(kernels, target="pvc").kernels["k"]
    assert (stats.load_block2d, stats.store_block2d, stats.prefetch_block2d) == (0, 1, 1)
    assert stats.grf is None and stats.spill_bytes is None  # no dumps given: unknown, not zero


def test_dg2_bf16_dpas_runs_at_simd8(ocloc, tmp_path):
    # SIMD8 signature (docs/atoms.md §3.4): A int8 (2 bf16 per lane per row), B int8, acc float8.
    source = ("__attribute__((intel_reqd_sub_group_size(8)))\n"
              "kernel void d8(global float *c, global int *a, global int *b) {\n"
              "  int i = get_sub_group_local_id();\n  float8 acc = vload8(i, c);\n"
              "  acc = intel_sub_group_bf16_bf16_matrix_mad_k16(vload8(i, a), vload8(i, b), acc);\n"
              "  acc = intel_sub_group_bf16_bf16_matrix_mad_k16(vload8(8 + i, a), vload8(8 + i, b), acc);\n"
              "  vstore8(acc, i, c);\n}\n")
    build = compile_kernel(source, "dg2", workdir=tmp_path)
    assert build.ok, build.log
    dpas = [i for i in parse_instructions(build.kernel_asm["d8"]) if i.opcode == "dpas"]
    assert build.stats.dpas == 2 and len(dpas) == 2
    assert all(i.exec_size == 8 and i.operand_types[2:] == ("bf", "bf") for i in dpas)
    assert build.stats.target == "dg2"


# ---------------------------------------------------------------------------------------------------
# Register file: spills and GRF modes


def test_spill_bytes_zero_for_small_kernel_and_positive_when_spilling(ocloc, tmp_path):
    small = compile_kernel(dpas_kernel(2), "pvc", workdir=tmp_path / "small")
    assert small.ok and small.stats.spill_bytes == 0
    big = compile_kernel(spilling_kernel(20), "pvc", grf=128, workdir=tmp_path / "big128")
    assert big.ok, big.log
    assert big.stats.spill_bytes > 0
    assert big.stats.dump_exact  # the dump whose instCount equals the disassembly (IGC retries on spills)
    assert big.stats.messages.get("scratch_write", 0) > 0  # the spill traffic is in the binary
    large = compile_kernel(spilling_kernel(20), "pvc", grf=256, workdir=tmp_path / "big256")
    assert large.ok and large.stats.grf == 256
    assert large.stats.spill_bytes == 0 and "scratch_write" not in large.stats.messages


def test_stack_call_frame_is_not_counted_as_spill(ocloc, tmp_path):
    # A call to a function the program does not define becomes a stack call; IGC then reports the stack
    # frame in "//.spill size" although the allocator did not spill (see xegemm.aot.isa).
    source = ("void external_helper(global int *p);\n"
              f"{SG16}\nkernel void caller(global int *p) {{ external_helper(p); p[1] = 2; }}\n")
    build = compile_kernel(source, "pvc", workdir=tmp_path)
    assert build.ok, build.log
    assert set(build.stats.kernels) == {"caller"}  # ocloc's symbol-table stub is not a kernel
    dump = next(d for d in map(lambda kv: parse_shader_dump(*kv), build.dumps.items()) if d and d.kernel == "caller")
    assert dump.spill_size > 0 and not dump.spilled
    assert build.stats.spill_bytes == 0


@pytest.mark.parametrize("target", ["pvc", "dg2"])
def test_256_grf_mode_changes_num_grf(ocloc, tmp_path, target):
    sg = 16 if target == "pvc" else 8
    source = (f"__attribute__((intel_reqd_sub_group_size({sg})))\n"
              "kernel void add(global float *x) { x[get_global_id(0)] += 1.0f; }\n")
    normal = compile_kernel(source, target, grf=128, workdir=tmp_path / "128")
    large = compile_kernel(source, target, grf=256, workdir=tmp_path / "256")
    assert normal.ok and large.ok
    assert (normal.stats.grf, large.stats.grf) == (128, 256)
    assert "-cl-intel-256-GRF-per-thread" in large.options and "-cl-intel-256" not in normal.options


def test_syntax_error_gives_failed_build_with_log(ocloc, tmp_path):
    build = compile_kernel("kernel void broken(global int *p) { p[0] = ; }\n", "pvc", workdir=tmp_path)
    assert build.status == "failed_build" and not build.ok
    assert "error" in build.log and "expected expression" in build.log
    assert build.stats is None and build.binary is None and build.kernel_asm == {}


def test_a_build_past_its_time_limit_is_stopped_and_says_so(ocloc, tmp_path):
    build = compile_kernel("kernel void k(global int *p) { p[0] = 1; }\n", "dg2", timeout=0.001, workdir=tmp_path)
    assert build.status == "timed_out" and not build.ok and build.binary is None and build.stats is None
    assert build.log.endswith("ocloc stopped after 0.001 s")


# ---------------------------------------------------------------------------------------------------
# Compiler profile


def test_profile_detects_dropped_builtin_against_the_isa(ocloc, pvc_profile, tmp_path):
    assert pvc_profile.supports(READ_U16_8x16)
    assert pvc_profile.ocloc_calls <= 4  # one program for all probes, plus a rebuild without failing ones
    # What the profile says about the 32-row read must agree with a direct compile of that read.
    source = (declare_block2d_builtin(READ_U16_32x16) + f"\n{SG16}\nkernel void tall(global ushort *p, global uint *o) {{\n"
              f"  {parse_block2d_builtin(READ_U16_32x16).lane_type} v = {READ_U16_32x16}((long)p, 63, 31, 63, (int2)(0, 0));\n"
              "  uint s = 0; for (int i = 0; i < 32; ++i) s += v[i];\n  o[get_global_id(0)] = s;\n}\n")
    build = compile_kernel(source, "pvc", workdir=tmp_path)
    assert build.ok, build.log
    reads = [i for i in parse_instructions(build.kernel_asm["tall"]) if i.message_kind == "load_block2d"]
    really_reads = sum(i.response_grfs for i in reads) >= 32 * 16 * 2 // 64
    assert pvc_profile.supports(READ_U16_32x16) == really_reads
    if compiler_version().igc_release == "1.0.12504":
        # docs/compilers.md "What Debian's IGC issues": this IGC builds reads taller than 8 rows and drops them
        assert not really_reads and build.stats.load_block2d == 0
        assert READ_U16_32x16 in pvc_profile.dropped
        # ... and issues every plain read with 2 blocks: u16 v1 over-fetches, u32 16-wide becomes illegal
        assert pvc_profile.results[READ_U16_8x16].shape == "16x8x2" and pvc_profile.results[READ_U16_8x16].exact is False
        u32 = pvc_profile.results["__builtin_IB_subgroup_block_read_flat_u32_m8k16v1"]
        assert u32.built and u32.found == 1 and not u32.supported and "128 B per row" in u32.detail
        named = load_capabilities("igc-1.0.12504", "pvc")
        assert set(pvc_profile.supported) == set(named.supported)
        assert all(pvc_profile.results[n].exact == named.results[n].exact for n in named.supported)


def test_probe_blames_only_the_probe_that_fails_to_build(ocloc):
    good = next(p for p in probe_catalog() if p.name == READ_U16_8x16)
    bad = Probe("broken_probe", "ib_block2d", "load_block2d", 0, "", "  dst[0] = ;")
    results, calls = run_probes([good, bad, dataclasses.replace(good, name="again")], "pvc")
    assert not results["broken_probe"].built and "expected expression" in results["broken_probe"].detail
    assert results[READ_U16_8x16].supported and results["again"].supported
    assert calls == 2


def test_profile_is_cached_per_compiler_version(ocloc, pvc_profile, profile_dir, monkeypatch):
    assert (profile_dir / f"{compiler_version().key}_pvc.json").exists()
    assert pvc_profile.origin == "probed" and pvc_profile.compiler["driver"] == compiler_version().driver

    def no_ocloc(*args, **kwargs):
        raise AssertionError("a cached profile must not run ocloc")

    monkeypatch.setattr("xegemm.aot.build.run_ocloc", no_ocloc)
    again = probe_compiler_capabilities("pvc", cache_dir=profile_dir)
    assert again.results == pvc_profile.results and again.name == pvc_profile.name


def test_named_profiles_can_be_forced(monkeypatch):
    modern = load_capabilities("cl_intel_subgroup_2d_block_io", "pvc")
    assert modern.supports(READ_U16_32x16) and modern.supports("__builtin_IB_subgroup_block_write_flat_u16_m8k16v1")
    old = load_capabilities("igc-1.0.12504", "pvc")
    assert old.supports(READ_U16_8x16) and not old.supports(READ_U16_32x16)
    assert not old.supports("intel_sub_group_2d_block_read_16b_8r16x1c")
    assert not load_capabilities("cl_intel_subgroup_2d_block_io", "dg2").supports(READ_U16_8x16)  # no 2D HW on DG2
    monkeypatch.setenv("XEGEMM_COMPILER_CAPABILITIES", "igc-1.0.12504")
    assert compiler_capabilities("pvc").name == "igc-1.0.12504"
    with pytest.raises(CapabilitiesError, match="named profiles|give one of"):
        load_capabilities("igc-9.9")
    with pytest.raises(CapabilitiesError):
        old.supports("__builtin_IB_not_probed")


# ---------------------------------------------------------------------------------------------------
# No compiler needed


def test_declarations_follow_the_builtin_grammar():
    assert declare_block2d_builtin(READ_U16_8x16) == (
        "ushort8 __builtin_IB_subgroup_block_read_flat_u16_m8k16v1(long base_address, int width_in_bytes_minus_1, "
        "int height_minus_1, int pitch_in_bytes_minus_1, int2 coord);")
    tall = declare_block2d_builtin("__builtin_IB_subgroup_block_read_flat_u16_m32k16v2")
    assert "typedef ushort xegemm_ushort64 __attribute__((ext_vector_type(64)));" in tall
    assert tall.rstrip().endswith("xegemm_ushort64 __builtin_IB_subgroup_block_read_flat_u16_m32k16v2("
                                  "long base_address, int width_in_bytes_minus_1, int height_minus_1, "
                                  "int pitch_in_bytes_minus_1, int2 coord);")
    write = declare_block2d_builtin("__builtin_IB_subgroup_block_write_flat_u32_m8k16v1")
    assert write.startswith("void ") and write.endswith("int2 coord, uint8 data);")
    assert parse_block2d_builtin("__builtin_IB_subgroup_block_read_flat_transform_u16_k16").lane_type == "uint8"
    assert parse_block2d_builtin("__builtin_IB_subgroup_block_read_flat_transpose_u32_k8").lane_type == "uint8"
    assert parse_block2d_builtin("__builtin_IB_subgroup_block_read_flat_u8_m8k32v2").lane_type == "ushort16"
    prefetch = declare_block2d_builtin("__builtin_IB_subgroup_block_read_prefetch_u16_m8k16v1")
    assert prefetch.startswith("void ") and prefetch.endswith("int2 coord, int cache_control);")
    for bad in ("__builtin_IB_subgroup_block_read_flat_u16_k16", "intel_sub_group_block_read8",
                "__builtin_IB_subgroup_block_read_flat_transpose_u16_k8"):
        with pytest.raises(BuiltinNameError):
            declare_block2d_builtin(bad)


def test_block2d_hardware_rules():
    assert block2d_violation((16, 8, 1), 16) is None and block2d_violation((16, 8, 2), 16) is None
    assert "128 B per row" in block2d_violation((16, 8, 2), 32)
    assert "32" in block2d_violation((16, 64, 1), 16)
    assert block2d_violation((16, 16, 1), 16, op="write") is not None  # stores <= 8 rows
    assert block2d_violation((8, 16, 1), 32, "transpose") is None
    assert block2d_violation((16, 16, 1), 32, "transpose") is not None  # d32 transpose <= 8 wide


def test_missing_ocloc_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("XEGEMM_OCLOC", str(tmp_path / "no-such-ocloc"))
    assert find_ocloc() is None
    with pytest.raises(OclocMissingError) as err:
        compile_kernel("kernel void k() {}", "pvc", workdir=tmp_path)
    assert "apt-get install intel-opencl-icd" in str(err.value) and "install-ocloc.sh" in str(err.value)
    assert "libiga64.so" in str(err.value)


def test_targets_and_grf_modes_are_checked(monkeypatch):
    monkeypatch.delenv("XEGEMM_OCLOC", raising=False)
    with pytest.raises(UnknownTargetError, match="unknown target 'xe9'"):
        compile_kernel("kernel void k() {}", "xe9")
    with pytest.raises(UnknownTargetError, match="make ocloc-current"):   # Debian's compiler knows no Xe2
        compile_kernel("kernel void k() {}", "bmg", compiler="system")
    with pytest.raises(UnknownTargetError):
        compose_options(192)
    with pytest.raises(UnknownTargetError, match="grf=256"):
        compose_options(128, "-cl-intel-256-GRF-per-thread")
    assert compose_options(256, "-cl-mad-enable").endswith("-cl-intel-256-GRF-per-thread -cl-mad-enable")


def test_conversions_to_16_bit_floats_are_counted_from_iga_text():
    # f32 -> f16: a SIMD mov to :hf from :f; f32 -> bf16: the add of 0x7fff of xe_f32_to_bf16_rne; SIMD1 moves,
    # other types and other immediates are not conversions of a lane's value
    from xegemm.aot.isa import conversion_counts, parse_instructions
    asm = "\n".join([
        "        mov (16|M0)              r12.0<1>:hf   r40.0<1;1,0>:f",
        "        mov (16|M0)              r13.0<1>:f    r41.0<1;1,0>:hf",
        "(W)     mov (1|M0)               r1.16<1>:hf   0x3C00:hf",
        "(~f0.0) add3 (16|M0)             acc0.0<1>:d   r74.0<1;0>:d      acc0.0<1;0>:d     32767:w",
        "        add (16|M0)              r20.0<1>:d    r21.0<1;1,0>:d    0x7FFF:uw",
        "        add3 (16|M0)             r253.0<1>:d   r154.0<1;0>:d     r159.0<1;0>:d     16:w",
    ])
    assert conversion_counts(parse_instructions(asm)) == {"to_f16": 1, "to_bf16": 2}


def test_float_immediates_read_back_as_their_bits_in_either_spelling():
    """IGA prints a float immediate as a decimal (header dwords moved as :f) or as its bits in hex."""
    from xegemm.aot.isa import _immediate_bits
    assert _immediate_bits("0x3AB743CE:f") == 0x3AB743CE
    assert _immediate_bits("1.5:f") == 0x3FC00000
    assert _immediate_bits("0x1F0F:ud") == 0x1F0F
