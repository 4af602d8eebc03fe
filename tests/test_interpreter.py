"""The reference interpreter (xegemm.verify.interpreter) on small SPIR-V modules written here: the matrix layouts
and multiply-add operands against numpy (and ml_dtypes for bf16), the work-item built-ins against the OpenCL
definitions, and the wrong modules it must refuse.  Every module is assembled by spirv-as and checked by spirv-val
first, so that each is real SPIR-V; the coopmat kernels themselves are interpreted in
tests/test_coopmat_interpreted.py."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from xegemm.lowering.coopmat import pack_b
from xegemm.runtime.spirv import assemble, validate
from xegemm.verify.interpreter import InterpreterError, Program, run_kernel

HEADER = """\
OpCapability Addresses
OpCapability Kernel
OpCapability Int64
OpCapability Int16
OpCapability Int8
OpCapability Float16
OpCapability CooperativeMatrixKHR
OpExtension "SPV_KHR_cooperative_matrix"
OpMemoryModel Physical64 OpenCL
OpEntryPoint Kernel %main "k" %wgid %sgid %sglid %lid
OpExecutionMode %main LocalSize {local} 1 1
OpDecorate %wgid BuiltIn WorkgroupId
OpDecorate %sgid BuiltIn SubgroupId
OpDecorate %sglid BuiltIn SubgroupLocalInvocationId
OpDecorate %lid BuiltIn LocalInvocationId
%void = OpTypeVoid
%bool = OpTypeBool
%u8 = OpTypeInt 8 0
%u16 = OpTypeInt 16 0
%u32 = OpTypeInt 32 0
%u64 = OpTypeInt 64 0
%f16 = OpTypeFloat 16
%f32 = OpTypeFloat 32
%v3 = OpTypeVector %u64 3
%pin_v3 = OpTypePointer Input %v3
%pin_u32 = OpTypePointer Input %u32
%p_u8 = OpTypePointer CrossWorkgroup %u8
%p_u16 = OpTypePointer CrossWorkgroup %u16
%p_u32 = OpTypePointer CrossWorkgroup %u32
%p_f16 = OpTypePointer CrossWorkgroup %f16
%p_f32 = OpTypePointer CrossWorkgroup %f32
%c0 = OpConstant %u32 0
%c1 = OpConstant %u32 1
%c2 = OpConstant %u32 2
%c3 = OpConstant %u32 3
%c16 = OpConstant %u32 16
%sem = OpConstant %u32 264
%wgid = OpVariable %pin_v3 Input
%sgid = OpVariable %pin_u32 Input
%sglid = OpVariable %pin_u32 Input
%lid = OpVariable %pin_v3 Input
"""


def module(body: str, local: int = 16) -> str:
    text = HEADER.format(local=local) + body
    verdict = validate(assemble(text))        # real SPIR-V: spirv-val passes it, or cannot judge an Intel word
    assert verdict.ok is not False, verdict.message
    return text


def buffer(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values).reshape(-1).view(np.uint8).copy()


def _matrix_copy(component: str, rows: int, cols: int, use: int, layout: int, stride: int) -> str:
    """Loads a rows x cols matrix of ``use`` with ``layout`` and ``stride`` from the first buffer and stores it
    row-major (stride cols) into the second: what the load read, element by element."""
    return f"""\
%n_rows = OpConstant %u32 {rows}
%n_cols = OpConstant %u32 {cols}
%use = OpConstant %u32 {use}
%layout = OpConstant %u32 {layout}
%stride = OpConstant %u64 {stride}
%out_stride = OpConstant %u64 {cols}
%mat = OpTypeCooperativeMatrixKHR %{component} %c3 %n_rows %n_cols %use
%fn = OpTypeFunction %void %p_{component} %p_{component}
%main = OpFunction %void None %fn
%src = OpFunctionParameter %p_{component}
%dst = OpFunctionParameter %p_{component}
%entry = OpLabel
%m = OpCooperativeMatrixLoadKHR %mat %src %layout %stride
OpCooperativeMatrixStoreKHR %dst %m %c0 %out_stride
OpReturn
OpFunctionEnd
"""


def _loaded(component, dtype, rows, cols, use, layout, stride, source: np.ndarray) -> np.ndarray:
    out = buffer(np.zeros((rows, cols), dtype))
    run_kernel(module(_matrix_copy(component, rows, cols, use, layout, stride)), "k", [buffer(source), out], (16,))
    return out.view(dtype).reshape(rows, cols)


def test_row_and_column_major_loads_read_the_documented_elements():
    """RowMajorKHR: element (r, c) at r x stride + c; ColumnMajorKHR: at c x stride + r (SPV_KHR_cooperative_matrix)."""
    rng = np.random.default_rng(1)
    src = rng.integers(0, 1 << 16, (12, 20), dtype=np.uint16)
    np.testing.assert_array_equal(_loaded("u16", np.uint16, 8, 16, 0, 0, 20, src), src[:8, :16])
    np.testing.assert_array_equal(_loaded("u16", np.uint16, 8, 12, 0, 1, 20, src), src[:12, :8].T)


@pytest.mark.parametrize("ab,component,dtype,v", [("bf16", "u16", np.uint16, 2), ("s8", "u8", np.uint8, 4)])
def test_a_packed_load_of_pack_bs_layout_gives_back_b(ab, component, dtype, v):
    """PackedINTEL (SPV_INTEL_joint_matrix): the VNNI layout pack_b writes (tests/test_coopmat.py checks pack_b
    against the documented table); read back as a K x N matrix it is B itself, for 16-bit (v 2) and 8-bit (v 4)."""
    k, n = 16 * v // 2, 16
    b = np.random.default_rng(2).integers(0, 200, (k, n)).astype(dtype)
    packed = pack_b(b.view(np.uint8).reshape(k, -1), k, n, ab)
    got = _loaded(component, dtype, k, n, 1, 2, n * v, np.frombuffer(packed.tobytes(), dtype))
    np.testing.assert_array_equal(got, b)


def _mad(component_ab: str, component_c: str, m: int, n: int, k: int, operands: int) -> str:
    return f"""\
%cm = OpConstant %u32 {m}
%cn = OpConstant %u32 {n}
%ck = OpConstant %u32 {k}
%sa = OpConstant %u64 {k}
%sb = OpConstant %u64 {n}
%matA = OpTypeCooperativeMatrixKHR %{component_ab} %c3 %cm %ck %c0
%matB = OpTypeCooperativeMatrixKHR %{component_ab} %c3 %ck %cn %c1
%matC = OpTypeCooperativeMatrixKHR %{component_c} %c3 %cm %cn %c2
%fn = OpTypeFunction %void %p_{component_ab} %p_{component_ab} %p_{component_c} %p_{component_c}
%main = OpFunction %void None %fn
%A = OpFunctionParameter %p_{component_ab}
%B = OpFunctionParameter %p_{component_ab}
%C = OpFunctionParameter %p_{component_c}
%D = OpFunctionParameter %p_{component_c}
%entry = OpLabel
%a = OpCooperativeMatrixLoadKHR %matA %A %c0 %sa
%b = OpCooperativeMatrixLoadKHR %matB %B %c0 %sb
%c = OpCooperativeMatrixLoadKHR %matC %C %c0 %sb
%d = OpCooperativeMatrixMulAddKHR %matC %a %b %c !{operands:#x}
OpCooperativeMatrixStoreKHR %D %d %c0 %sb
OpReturn
OpFunctionEnd
"""


def _run_mad(component_ab, component_c, a, b, c, operands):
    m, k = a.shape
    n = b.shape[1]
    d = buffer(np.zeros_like(c))
    run_kernel(module(_mad(component_ab, component_c, m, n, k, operands)), "k",
               [buffer(a), buffer(b), buffer(c), d], (16,))
    return d.view(c.dtype).reshape(c.shape)


def test_bf16_operands_are_read_as_bf16_and_summed_into_f32():
    """MatrixAAndBBFloat16ComponentsINTEL (0x40): 16-bit components are bf16 (ml_dtypes' conversion, not the
    interpreter's)."""
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal(s).astype(ml_dtypes.bfloat16) for s in ((8, 16), (16, 16)))
    c = rng.standard_normal((8, 16)).astype(np.float32)
    got = _run_mad("u16", "f32", a.view(np.uint16), b.view(np.uint16), c, 0x40)
    want = a.astype(np.float64) @ b.astype(np.float64) + c
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("operands,a_signed,b_signed", [(0x0, False, False), (0x1, True, False), (0x2, False, True),
                                                        (0x3, True, True)])
def test_8_bit_operands_take_their_signedness_from_the_operands_word(operands, a_signed, b_signed):
    """MatrixASignedComponentsKHR 0x1 and MatrixBSignedComponentsKHR 0x2: which of the 8-bit operands are read as
    signed; the sum wraps at 32 bits."""
    rng = np.random.default_rng(4)
    a = rng.integers(0, 256, (8, 32)).astype(np.uint8)
    b = rng.integers(0, 256, (32, 16)).astype(np.uint8)
    c = rng.integers(-1000, 1000, (8, 16)).astype(np.int32).view(np.uint32)
    got = _run_mad("u8", "u32", a, b, c, operands).view(np.int32)
    x = a.view(np.int8) if a_signed else a
    y = b.view(np.int8) if b_signed else b
    np.testing.assert_array_equal(got, x.astype(np.int64) @ y.astype(np.int64) + c.view(np.int32))


def test_tf32_operands_are_rounded_to_ten_mantissa_bits():
    """MatrixAAndBTF32ComponentsINTEL (0x20): f32 components keep 10 mantissa bits (to nearest even): 1 + 2^-11
    is 1, 1 + 2^-10 stays."""
    a = np.zeros((8, 8), np.float32)
    b = np.zeros((8, 16), np.float32)
    a[0, 0], a[1, 0], b[0, :] = 1 + 2.0 ** -11, 1 + 2.0 ** -10, 1
    got = _run_mad("f32", "f32", a, b, np.zeros((8, 16), np.float32), 0x20)
    assert got[0, 0] == 1.0 and got[1, 0] == np.float32(1 + 2.0 ** -10)
    plain = _run_mad("f32", "f32", a, b, np.zeros((8, 16), np.float32), 0x0)
    assert plain[0, 0] == np.float32(1 + 2.0 ** -11)


def test_f16_components_are_half_floats():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((8, 16)).astype(np.float16), rng.standard_normal((16, 16)).astype(np.float16)
    c = np.zeros((8, 16), np.float32)
    got = _run_mad("f16", "f32", a, b, c, 0)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-6, atol=1e-6)


IDS = """\
%c48 = OpConstant %u32 48
%c3u = OpConstant %u32 3
%fn = OpTypeFunction %void %p_u32
%main = OpFunction %void None %fn
%out = OpFunctionParameter %p_u32
%entry = OpLabel
%wg = OpLoad %v3 %wgid
%wgx64 = OpCompositeExtract %u64 %wg 0
%wgx = OpUConvert %u32 %wgx64
%li = OpLoad %v3 %lid
%lx64 = OpCompositeExtract %u64 %li 0
%lx = OpUConvert %u32 %lx64
%sg = OpLoad %u32 %sgid
%lane = OpLoad %u32 %sglid
%base = OpIMul %u32 %wgx %c48
%item = OpIAdd %u32 %base %lx
%slot = OpIMul %u32 %item %c3u
%p0 = OpInBoundsPtrAccessChain %p_u32 %out %slot
OpStore %p0 %sg
%p1 = OpInBoundsPtrAccessChain %p_u32 %p0 %c1
OpStore %p1 %lane
%p2 = OpInBoundsPtrAccessChain %p_u32 %p0 %c2
OpStore %p2 %wgx
OpReturn
OpFunctionEnd
"""


def test_work_items_have_the_opencl_ids():
    """Sub-groups of 16 consecutive local ids (the OpenCL SPIR-V environment): item x of a 48-wide work-group is
    in sub-group x / 16 at lane x % 16; two work-groups of 48."""
    out = buffer(np.zeros(2 * 48 * 3, np.uint32))
    run_kernel(module(IDS, local=48), "k", [out], (96,))
    got = out.view(np.uint32).reshape(2, 48, 3)
    x = np.arange(48)
    for g in range(2):
        np.testing.assert_array_equal(got[g, :, 0], x // 16)
        np.testing.assert_array_equal(got[g, :, 1], x % 16)
        np.testing.assert_array_equal(got[g, :, 2], g)


def _store_at(offset_expr: str) -> str:
    """Each work-item stores one u32 at the element its ``%at`` says (lines defining %at from %lane)."""
    return f"""\
%fn = OpTypeFunction %void %p_u32
%main = OpFunction %void None %fn
%out = OpFunctionParameter %p_u32
%entry = OpLabel
%lane = OpLoad %u32 %sglid
{offset_expr}
%p = OpInBoundsPtrAccessChain %p_u32 %out %at
OpStore %p %lane
OpReturn
OpFunctionEnd
"""


def test_a_store_past_its_buffers_end_is_refused_with_where():
    text = module(_store_at("%at = OpIAdd %u32 %lane %c1"))
    with pytest.raises(InterpreterError, match=r"at byte 64 of argument %out, which has 64: out of bounds"):
        run_kernel(text, "k", [buffer(np.zeros(16, np.uint32))], (16,))
    out = buffer(np.zeros(17, np.uint32))
    run_kernel(text, "k", [out], (16,))
    np.testing.assert_array_equal(out.view(np.uint32), np.r_[0, np.arange(16)])


NOT_UNIFORM = """\
%c8 = OpConstant %u32 8
%s16 = OpConstant %u64 16
%mat = OpTypeCooperativeMatrixKHR %u16 %c3 %c8 %c16 %c0
%fn = OpTypeFunction %void %p_u16
%main = OpFunction %void None %fn
%src = OpFunctionParameter %p_u16
%entry = OpLabel
%lane = OpLoad %u32 %sglid
%p = OpInBoundsPtrAccessChain %p_u16 %src %{index}
%m = OpCooperativeMatrixLoadKHR %mat %p %c0 %s16
OpReturn
OpFunctionEnd
"""


def test_a_matrix_load_whose_pointer_differs_between_work_items_is_refused():
    """A cooperative matrix's operands are sub-group uniform (SPV_KHR_cooperative_matrix)."""
    src = buffer(np.zeros(16 * 24, np.uint16))
    run_kernel(module(NOT_UNIFORM.format(index="c1")), "k", [src], (16,))
    with pytest.raises(InterpreterError, match="operands differ between its work-items"):
        run_kernel(module(NOT_UNIFORM.format(index="lane")), "k", [src], (16,))


DIVERGENT = """\
%s16 = OpConstant %u64 16
%mat = OpTypeCooperativeMatrixKHR %u16 %c3 %c16 %c16 %c0
%fn = OpTypeFunction %void %p_u16
%main = OpFunction %void None %fn
%src = OpFunctionParameter %p_u16
%entry = OpLabel
%lane = OpLoad %u32 %sglid
%low = OpULessThan %bool %lane %c{split}
OpBranchConditional %low %then %end
%then = OpLabel
%m = OpCooperativeMatrixLoadKHR %mat %src %c0 %s16
OpBranch %end
%end = OpLabel
OpReturn
OpFunctionEnd
"""


def test_a_matrix_instruction_reached_by_part_of_a_sub_group_is_refused():
    """Convergent: every work-item of the sub-group reaches it, or the module is wrong."""
    src = buffer(np.zeros(256, np.uint16))
    run_kernel(module(DIVERGENT.format(split=16)), "k", [src], (16,))
    with pytest.raises(InterpreterError, match="never reaches together"):
        run_kernel(module(DIVERGENT.format(split=2)), "k", [src], (16,))


BARRIER = """\
%fn = OpTypeFunction %void %p_u32
%main = OpFunction %void None %fn
%out = OpFunctionParameter %p_u32
%entry = OpLabel
%sg = OpLoad %u32 %sgid
%lane = OpLoad %u32 %sglid
%first = OpIEqual %bool %sg %c0
OpBranchConditional %first %write %wait
%write = OpLabel
OpStore %out %c16
OpBranch %wait
%wait = OpLabel
{barrier}
%p = OpInBoundsPtrAccessChain %p_u32 %out %c1
%seen = OpLoad %u32 %out
%is_last = OpIEqual %bool %sg %c1
OpBranchConditional %is_last %record %end
%record = OpLabel
OpStore %p %seen
OpBranch %end
%end = OpLabel
OpReturn
OpFunctionEnd
"""


def test_a_work_group_barrier_orders_the_sub_groups_and_one_not_reached_is_refused():
    """Sub-group 1 reads what sub-group 0 wrote before the work-group barrier; with the barrier in one branch only,
    the work-group never meets at it."""
    out = buffer(np.zeros(2, np.uint32))
    run_kernel(module(BARRIER.format(barrier="OpControlBarrier %c2 %c2 %sem"), local=32), "k", [out], (32,))
    assert out.view(np.uint32)[1] == 16
    skipped = BARRIER.replace("OpStore %out %c16\n", "OpStore %out %c16\nOpControlBarrier %c2 %c2 %sem\n")
    with pytest.raises(InterpreterError, match="never reaches together|some work-items never reach"):
        run_kernel(module(skipped.format(barrier=""), local=32), "k", [out], (32,))


def test_what_it_does_not_take_is_named():
    unknown = _store_at("%at = OpBitCount %u32 %lane")
    with pytest.raises(InterpreterError, match="OpBitCount is outside the interpreter's subset"):
        run_kernel(module(unknown), "k", [buffer(np.zeros(16, np.uint32))], (16,))
    with pytest.raises(InterpreterError, match="legacy SPV_INTEL_joint_matrix dialect"):
        Program(HEADER.format(local=16) + "%x = !6119 %u32\n")
    with pytest.raises(InterpreterError, match="takes 1 arguments, given 2"):
        run_kernel(module(_store_at("%at = OpCopyObject %u32 %lane")), "k", [buffer(np.zeros(16, np.uint32))] * 2,
                   (16,))
    with pytest.raises(InterpreterError, match="no entry point 'gemm'"):
        run_kernel(module(_store_at("%at = OpCopyObject %u32 %lane")), "gemm", [], (16,))
