"""The small vocabularies have one home each: the kernel-name grammar (written once, read back by
parse_kernel_name), the layout registry (config name, table letter, kernel-name letter), the C spellings of
the dtype registry, the lowering objects and the copy-atom interface."""

import json
import pickle
from pathlib import Path

import pytest

from xegemm.atoms import copy_atom_named
from xegemm.atoms.base import CopyAtomBase
from xegemm.atoms.block1d import Block1DAtom
from xegemm.atoms.copy import CopyAtom
from xegemm.config import config_from_text
from xegemm.config.checks import LAYOUTS as CONFIG_LAYOUTS
from xegemm.library.dtypes import C_SPELLINGS, DTYPES, ML_DTYPES, c_spelling
from xegemm.errors import XegemmError
from xegemm.evaluate import plan_variants
from xegemm.plan.kernel_name import KernelName, KernelNameError, parse_kernel_name
from xegemm.library.layouts import AB_LAYOUTS, LAYOUTS, from_letters, from_name_letters, letters, name_letters
from xegemm.lowering import LOWERINGS, Lowering, NativeLowering, PortableLowering
from xegemm.lowering.native import native_capabilities
from xegemm.jobs.support import LAYOUTS as SUPPORT_LAYOUTS

KERNELS = Path(__file__).resolve().parents[1] / "kernels"


def _shipped_names() -> list[dict]:
    out = []
    for manifest in (KERNELS / "manifest.json", KERNELS / "native" / "manifest.json"):
        for entry in json.loads(manifest.read_text())["configs"].values():
            out += entry["kernels"]
    return out


@pytest.mark.parametrize("kernel", _shipped_names(), ids=lambda k: k["name"][:90])
def test_every_shipped_kernel_name_parses_back_to_itself_and_its_parameters(kernel):
    name, p = kernel["name"], kernel["params"]
    parts = parse_kernel_name(name)
    assert str(parts) == name
    assert parts.types == (p["a"], p["b"], p["acc"], p["c"])
    assert "/".join(parts.layouts) == p["layout"]
    assert parts.workgroup == (p["wg_m"], p["wg_n"], p["wg_k"]) and parts.subgroups == (p["sg_m"], p["sg_n"])
    assert (parts.prefetch, parts.grf, parts.swizzle) == (p["prefetch"], p["grf"], p["swizzle"])
    assert (parts.split_k, parts.stream_k) == (p["split_k"], p["stream_k"])
    assert ("_".join(parts.epilogue) or "none") == p["epilogue"]
    plan = kernel["plan"]
    assert parts.atoms == tuple(copy_atom_named(plan[f"copy_{x}"]).short_name for x in "abc")


def test_a_rejected_variant_name_parses_and_names_no_atoms():
    config = config_from_text("problem: {m: 256, n: 256, k: 256}\ntypes: {a: bf16, b: bf16}\n"
                              "tile: {workgroup: [64, 64, 32], subgroups: [3, 2]}\npipeline: {prefetch: 1}\n")
    (pv,) = plan_variants(config)
    assert pv.plan is None
    parts = parse_kernel_name(pv.name)
    assert parts.rejected and parts.atoms is None and parts.prefetch == 1 and str(parts) == pv.name
    assert parts.subgroups == (3, 2) and parts.layouts == ("row", "row", "row")


def test_the_grammar_reads_every_optional_part():
    name = KernelName(("s8", "s8", "s32", "s8"), ("col", "row", "row"), (128, 64, 64), (4, 2), 3, (8, 16, 32),
                      ("u8x32x16t", "u8x32x16v", "u8x8x16n"), 128, swizzle=4, register_block=(4, 0),
                      epilogue=("alpha", "beta", "biascol", "gelu_tanh"), split_k=3)
    text = str(name)
    assert text.startswith("xegemm_s8_s8_s32_s8_ntt_128x64x64_sg4x2_dpas8x16x32_")
    assert text.endswith("_pf3_grf128_swz4_rb4x0_alpha_beta_biascol_gelu_tanh_splitk3")
    assert parse_kernel_name(text) == name
    assert parse_kernel_name(text.replace("_splitk3", "_streamk5")).stream_k == 5
    assert parse_kernel_name(text.replace("_splitk3", "_groupeddynamic")).walk == "dynamic"


@pytest.mark.parametrize("bad", ["gemm_bf16", "xegemm_bf16_bf16_f32_f32_txt_64x64x32_sg2x2_pf2_rejected_abc123",
                                 "xegemm_bf16_bf16_f32_f32_ttt_64x64x32_sg2x2_dpas8x16x16_au16x32x32n_bu16x32x32v"
                                 "_cu32x8x16n_pf2_grf256_sigmoid"])
def test_a_name_outside_the_grammar_is_a_clear_error(bad):
    with pytest.raises(KernelNameError, match="not an xegemm kernel name"):
        parse_kernel_name(bad)


def test_the_layout_registry_is_the_one_table_of_every_spelling():
    assert CONFIG_LAYOUTS == tuple(LAYOUTS) == ("row", "col")
    assert SUPPORT_LAYOUTS == AB_LAYOUTS == ("RRR", "RCR", "CRR", "CCR")
    assert letters("row", "col", "row") == "RCR" and name_letters("row", "col", "row") == "tnt"
    assert from_letters("CRR") == from_name_letters("ntt") == ("col", "row", "row")
    with pytest.raises(XegemmError, match="not a layout"):
        from_letters("RXR")
    config = config_from_text("problem: {m: 64, n: 64, k: 64}\nlayout: {a: column_major}\n")
    assert config.layout.a == "col"


def test_every_c_spelling_template_formats_and_the_registry_covers_every_type():
    # every type a kernel holds has its spellings, the 8- and 4-bit floats of quantized operands included
    assert set(ML_DTYPES) <= set(C_SPELLINGS)
    assert set(C_SPELLINGS) == set(DTYPES)
    for t in (DTYPES[name] for name in C_SPELLINGS):
        for column, template in vars(t.c).items():
            if template is not None:
                text = c_spelling(t.name, column, "v", 8, " & 0xffffu")
                assert "{" not in text and "v" in text, (t.name, column, text)
    assert c_spelling("BF16", "load", "x") == c_spelling("bf16", "load", "x") == "as_float((uint)x << 16)"
    with pytest.raises(XegemmError, match="no store spelling of tf32"):
        c_spelling("tf32", "store", "x")


def test_lowerings_are_objects_made_by_name_and_equal_by_name_and_capabilities():
    portable = Lowering("portable")
    assert type(portable) is PortableLowering and portable == PortableLowering() and portable.name in LOWERINGS
    native = Lowering("native")
    assert isinstance(native, NativeLowering) and native != portable and hash(native) == hash(Lowering("native"))
    assert pickle.loads(pickle.dumps(native)) == native        # evaluators send lowerings to worker processes
    assert "-cl-intel-256-GRF-per-thread" in native.build_options(256)
    assert portable.build_options(256) == "-cl-std=CL3.0 -cl-mad-enable"
    with pytest.raises(XegemmError, match="lowering must be one of portable, native"):
        Lowering("spirv")
    with pytest.raises(XegemmError, match="pass capabilities="):
        NativeLowering(native_capabilities("cl_intel_subgroup_2d_block_io"))


def test_copy_atoms_of_both_families_answer_the_same_interface():
    two, one = CopyAtom.parse("XE_2D_U16x8x16_ST_N"), Block1DAtom.parse("XE_1D_U16x8x16_ST_SG8")
    for atom in (two, one):
        assert isinstance(atom, CopyAtomBase) and copy_atom_named(atom.name) == atom
        assert atom.with_op("LD").is_load and atom.prefetch.is_prefetch and atom.legal
    assert (two.lanes, two.messages, two.short_name) == (16, 1, "u16x8x16n")
    assert (one.lanes, one.messages, one.short_name) == (8, 8, "u16x8x16s8")
    assert two.block1d_rows() == Block1DAtom("U16", 8, 16, "ST", 16)
    assert CopyAtom.parse("XE_2D_TF32x8x8_LD_N").block1d_rows() is None
