"""The data-type registry: one entry per type, read by everything else."""

import numpy as np
import pytest

from xegemm.atoms.mma import BY_CODE, MmaAtom, enumerate_mma_atoms
from xegemm.config import ConfigError, config_from_text
from xegemm.library.dtypes import ALIASES, DTYPES, UnknownDTypeError, by_code, ctype_shape, dtype, sizeof_ctype

FLOATS = [t for t in DTYPES.values() if not t.is_int]
INTS = [t for t in DTYPES.values() if t.is_int]


@pytest.mark.parametrize("t", DTYPES.values(), ids=lambda t: t.name)
def test_encode_decode_round_trip(t):
    rng = np.random.default_rng(1)
    if t.is_int:
        lo, hi = t.value_range
        values = rng.integers(lo, hi + 1, 200)
    else:   # e8m0 has no sign
        values = t.round(rng.uniform(-4, 4, 200) if t.signed else rng.uniform(2 ** -4, 4, 200))
    bits = t.encode(values)
    assert bits.dtype == np.uint64 and int(bits.max()) < (1 << t.bits)
    assert np.array_equal(t.decode(bits), values)


def test_rounding_facts():
    # bf16 keeps 8 significand bits, rounds to nearest even: 1 + 2^-8 is a tie between 1 and 1 + 2^-7
    assert dtype("bf16").round([1 + 2 ** -8, 1 + 3 * 2 ** -8]).tolist() == [1.0, 1 + 2 ** -6]
    assert dtype("f16").round([1 + 2 ** -11]).tolist() == [1.0]
    assert dtype("tf32").encode([1 + 2 ** -20]).tolist() == [0x3F800000]   # low 13 mantissa bits cleared
    assert dtype("s4").decode([0xF, 0x8, 0x7]).tolist() == [-1, -8, 7]
    with pytest.raises(ValueError, match="do not fit S8"):
        dtype("s8").round([128])
    # OCP 8- and 4-bit floats: e4m3 tops out at 448 (no infinity), e2m1 holds 0.5 steps up to 2 then 3, 4, 6,
    # e8m0 holds powers of two only (2^-127 .. 2^127)
    assert dtype("e4m3").decode([0x7E, 0x01]).tolist() == [448.0, 2.0 ** -9]
    assert dtype("e5m2").decode([0x7B, 0x7C]).tolist() == [57344.0, float("inf")]
    assert dtype("e2m1").decode(range(8)).tolist() == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert dtype("e8m0").decode([127, 0, 254]).tolist() == [1.0, 2.0 ** -127, 2.0 ** 127]


@pytest.mark.parametrize("t", FLOATS, ids=lambda t: t.name)
def test_unit_roundoff_is_half_an_ulp_of_one(t):
    if t.name == "f64" or t.unit_roundoff is None:    # e8m0: no significand to round (powers of two)
        return
    u = t.unit_roundoff
    assert t.round([1 + u]).tolist() == [1.0]              # a tie rounds to even (or is cut, for tf32)
    assert t.round([1 + 2 * u]).tolist() == [1 + 2 * u]    # one ulp is representable


def test_names_codes_and_aliases_have_one_home():
    assert all(by_code(t.code) is t for t in DTYPES.values() if t.code)
    assert all(dtype(alias) is DTYPES[name] for alias, name in ALIASES.items())
    assert BY_CODE["BF16"] is dtype("bfloat16")
    with pytest.raises(UnknownDTypeError, match="unknown data type 'fp8'"):
        dtype("fp8")
    # the config reader takes exactly the registry's names and aliases, each where a DPAS can use it
    for name in (*DTYPES, *ALIASES):
        t = dtype(name)
        for role, usable in (("a", bool(t.accumulators)), ("acc", t.acc_ctype is not None)):
            text = f"problem: {{m: 8, n: 8, k: 8}}\ntypes: {{{role}: {name}}}\n"
            if role == "a" and t.name in ("e4m3", "e5m2"):     # an FP8 A needs its scales (xegemm.quant)
                with pytest.raises(ConfigError, match=f"types.a: {t.name} is not a DPAS input type: describe A's"):
                    config_from_text(text)
            elif usable:
                assert getattr(config_from_text(text).types, role) == t.name
            else:
                with pytest.raises(ConfigError, match=f"types.{role}: {t.name} is a known data type, but no Xe DPAS"):
                    config_from_text(text)


def test_every_dpas_input_type_has_atoms_from_the_registry():
    inputs = {a.a for a in enumerate_mma_atoms()}
    assert inputs == {t.code for t in DTYPES.values() if t.builtin_tag}
    assert MmaAtom.parse("XE_8x16x16_F32BF16BF16F32_TT").a_type is dtype("bf16")


def test_ctype_vocabulary():
    assert ctype_shape("ushort8") == (16, 8) and ctype_shape("float") == (32, 1)
    assert sizeof_ctype("float3") == 16 and sizeof_ctype("ushort64") == 128
    assert {t.storage_ctype for t in INTS} == {"uchar", "uint"}
