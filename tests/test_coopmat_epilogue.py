"""The coopmat lowering's epilogue compiler (xegemm.epilogues.spirv): the OpenCL C the OpenCL C lowerings print for
an element (the registry's ops and activations, the NaN-keeping helpers, the output conversions of every output
type) compiled into SPIR-V gives the same bits as the OpenCL C itself, built by the Intel OpenCL CPU runtime, on
special values (signed zeros, halfway cases, out-of-range values, infinities, NaN); relu and clamp keep NaN as
numpy does.  These kernels have no cooperative matrix: they run in this process (no AMX target needed).

The GEMM kernels with these epilogues (fixed and traced) are run and verified in tests/test_coopmat.py."""

from __future__ import annotations

import numpy as np
import pytest

from xegemm.epilogues.outputs import OUTPUT_TYPES
from xegemm.epilogues.registry import ACTIVATIONS, HARDSWISH, HELPERS, OPS, SIGMOID
from xegemm.epilogues.spirv import Compiler, SpirvCompileError, Value
from xegemm.library.dtypes import c_spelling
from xegemm.lowering.coopmat import _helpers
from xegemm.runtime.opencl import OpenCLBuffer, program_from_il, program_from_source
from xegemm.runtime.spirv import assemble

pytestmark = pytest.mark.device

X = np.array([0.0, -0.0, 1.0, -1.0, 0.5, 1.5, 2.5, -2.5, 3.7, -3.7, 127.4, 127.5, 127.6, 128.0, -128.5, -128.6,
              -129.0, 255.5, 256.0, 1e10, -1e10, np.inf, -np.inf, np.nan, -np.nan, 65504.0, 65520.0, 1e-8, -1e-8,
              6e-5, 3e-6, 1.00390625, 1.01171875, 1.0078125, 3.0e38, 2147483520.0, 2147483648.0, -2147483648.0,
              4294967296.0, 0.1, -5.3, 20.0, -20.0, 88.0, -88.0, 1e-40]
             + list(np.random.default_rng(0).standard_normal(40) * 4), np.float32)


def _module(expr: str, definitions: str) -> str:
    """A kernel ``k(const float* X, uint* O)``: O[i] = the bits of ``expr`` over x = X[i] (a float result as its
    bits, an integer one converted to uint as C converts it)."""
    c = Compiler("e")
    c.define(definitions)
    c.bind("x", Value("%xv", "float"))
    v = c.expression(expr)
    out = c.emit("uint", "OpBitcast", v.id).id if v.ctype == "float" else c.convert(v, "uint").id
    return "\n".join([
        "OpCapability Addresses", "OpCapability Kernel", "OpCapability Int64", "OpCapability Int16",
        "OpCapability Int8", '%ocl = OpExtInstImport "OpenCL.std"', "OpMemoryModel Physical64 OpenCL",
        'OpEntryPoint Kernel %main "k" %gid', "OpDecorate %gid BuiltIn GlobalInvocationId", *c.decorations,
        "%void = OpTypeVoid", "%bool = OpTypeBool", "%u8 = OpTypeInt 8 0", "%u16 = OpTypeInt 16 0",
        "%u32 = OpTypeInt 32 0", "%u64 = OpTypeInt 64 0", "%f32 = OpTypeFloat 32", "%v3u64 = OpTypeVector %u64 3",
        "%pin = OpTypePointer Input %v3u64", "%pf = OpTypePointer CrossWorkgroup %f32",
        "%pu = OpTypePointer CrossWorkgroup %u32", "%gid = OpVariable %pin Input", *c.constants,
        "%fnty = OpTypeFunction %void %pf %pu", "%main = OpFunction %void None %fnty",
        "%X = OpFunctionParameter %pf", "%O = OpFunctionParameter %pu", "%entry = OpLabel",
        "%g = OpLoad %v3u64 %gid", "%i = OpCompositeExtract %u64 %g 0", "%xp = OpInBoundsPtrAccessChain %pf %X %i",
        "%xv = OpLoad %f32 %xp", *c.lines, "%op = OpInBoundsPtrAccessChain %pu %O %i", f"OpStore %op {out}",
        "OpReturn", "OpFunctionEnd", ""])


def _opencl(expr: str, definitions: str, integer: bool) -> str:
    value = f"(uint)({expr})" if integer else f"as_uint((float)({expr}))"
    return (definitions + "\n__kernel void k(const global float* X, global uint* O)\n{\n"
            f"    const size_t i = get_global_id(0);\n    const float x = X[i];\n    O[i] = {value};\n}}\n")


def _launch(queue, program) -> np.ndarray:
    x = OpenCLBuffer(queue, X.nbytes)
    x.copy_from_host(X.view(np.uint8))
    out = OpenCLBuffer(queue, X.nbytes)
    program.get_sycl_kernel("k").launch(queue, [x, out], (len(X), 1, 1), (1, 1, 1)).wait()
    return out.copy_to_host().view(np.uint32)


def _both(queue, expr: str, definitions: str = "", integer: bool = False) -> tuple[np.ndarray, np.ndarray]:
    spirv = program_from_il(queue.context, assemble(_module(expr, definitions)))
    opencl = program_from_source(queue.context, _opencl(expr, definitions, integer), "")
    return _launch(queue, spirv), _launch(queue, opencl)


def _same(got: np.ndarray, want: np.ndarray, as_float: bool, signed_zero: bool = True) -> np.ndarray:
    """Elements that differ: bit for bit, except that any NaN equals any NaN (the payload of a NaN constant is
    the compiler's choice) and, where ``signed_zero`` is False, -0 equals +0."""
    if not as_float:
        return np.nonzero(got != want)[0]
    g, w = got.view(np.float32), want.view(np.float32)
    zeros = (g == 0) & (w == 0) if not signed_zero else False
    return np.nonzero(~((got == want) | (np.isnan(g) & np.isnan(w)) | zeros))[0]


@pytest.fixture(scope="module")
def cl_queue(queue, sycl_device):
    if sycl_device.device_type.name != "cpu" or not hasattr(queue, "context"):
        pytest.skip(f"the SPIR-V modules are built through OpenCL on the CPU runtime, not {sycl_device.name}")
    return queue


ACTIVATION_CASES = [a for a in (*ACTIVATIONS.values(), SIGMOID, HARDSWISH) if a.name != "none"]


@pytest.mark.parametrize("activation", ACTIVATION_CASES, ids=lambda a: a.name)
def test_each_activation_compiles_to_the_bits_of_its_opencl_c(activation, cl_queue):
    call = activation.call("x").replace("clamp_lo, clamp_hi", "-1.5f, 2.0f")
    got, want = _both(cl_queue, call, activation.definition())
    bad = _same(got, want, True)
    assert not len(bad), [(X[i], hex(got[i]), hex(want[i])) for i in bad[:5]]
    if activation.name in ("relu", "clamp"):     # NaN kept, as numpy's maximum and minimum keep it
        ref = activation.reference(X.astype(np.float64), -1.5, 2.0).astype(np.float32)
        np.testing.assert_array_equal(got.view(np.float32), ref)


def _op_expression(name: str) -> str | None:
    op = OPS[name]
    if op.activation is not None or name == "cast" or op.result == "bool":
        return None
    operands = ["x", "0.75f", "-2.0f"][:op.arity]
    if name == "where":
        return None
    return op.c.format(*operands)


@pytest.mark.parametrize("name", [n for n in OPS if _op_expression(n)])
def test_each_arithmetic_op_compiles_to_the_bits_of_its_opencl_c(name, cl_queue):
    got, want = _both(cl_queue, _op_expression(name), "".join(HELPERS.values()))
    bad = _same(got, want, True)
    assert not len(bad), [(X[i], hex(got[i]), hex(want[i])) for i in bad[:5]]


def test_comparisons_and_selects_compile_to_the_bits_of_their_opencl_c(cl_queue):
    compares = [OPS[n].c.format("x", "0.5f") for n in OPS if OPS[n].result == "bool"]
    expr = " + ".join(f"(({c}) ? {2 ** i}.0f : 0.0f)" for i, c in enumerate(compares))
    got, want = _both(cl_queue, OPS["where"].c.format("x < 1.0f", "-x", "x * 3.0f") + " + " + expr)
    assert not len(_same(got, want, True))


@pytest.mark.parametrize("type_name", OUTPUT_TYPES)
def test_each_output_conversion_compiles_to_the_bits_of_its_opencl_c(type_name, cl_queue):
    """D's store (float -> storage bits: round to nearest even, integers saturating, NaN to 0), the exact integer
    path's store_int, and C's load (storage bits -> float) of every output type."""
    store = c_spelling(type_name, "store", "x")
    got, want = _both(cl_queue, store, _helpers(), integer=True)
    bad = _same(got, want, False)
    assert not len(bad), ("store", [(X[i], hex(got[i]), hex(want[i])) for i in bad[:5]])
    load = c_spelling(type_name, "load", store)
    got, want = _both(cl_queue, load, _helpers())
    # s32: the runtime folds the SPIR-V's float -> int -> float of -0 to -0 (its OpenCL C gives +0): equal values
    assert not len(_same(got, want, True, signed_zero=type_name != "s32")), "load"
    if type_name in ("s32", "s8", "u8"):
        store_int = c_spelling(type_name, "store_int", "(int)x")
        got, want = _both(cl_queue, store_int, _helpers(), integer=True)
        finite = np.abs(X) < 2.0 ** 31          # (int)x of other floats is undefined in C
        assert not len(_same(got[finite], want[finite], False)), "store_int"


def test_a_broken_translation_is_caught(cl_queue):
    """The comparison can fail: bf16's round to nearest even with its rounding bias lost differs."""
    helpers = _helpers().replace("0x7fffu", "0x0u")
    got, _ = _both(cl_queue, c_spelling("bf16", "store", "x"), helpers, integer=True)
    _, want = _both(cl_queue, c_spelling("bf16", "store", "x"), _helpers(), integer=True)
    assert len(_same(got, want, False))


def test_what_it_cannot_read_is_one_clear_error():
    c = Compiler()
    c.bind("x", Value("%x", "float"))
    for text, what in (("x + * 1", "expected|unexpected|not bound"), ("(x + 1.0f", "expected \\)"), ("printf(x)", "no SPIR-V for the call printf"),
                       ("y + 1.0f", "'y' is not bound"), ("x $ 2", "cannot read")):
        with pytest.raises(SpirvCompileError, match=what):
            c.expression(text)
