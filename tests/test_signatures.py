"""The documented 2D block IO and DPAS prototypes (OCL2D, OCLMMA, OCLTF32 of KhronosGroup/OpenCL-Docs), and
the call checker against them; the last tests hold the checker against a real OpenCL C front end."""

import re

import pytest

from xegemm.aot.errors import BuiltinNameError
from xegemm.aot.call_check import check_calls
from xegemm.aot.prototypes import (
    BLOCK2D_SHAPES,
    block2d_prototypes,
    declare_documented,
    documented_names,
    documented_overloads,
    documented_prototype,
)
from xegemm.atoms.copy import Message, message_violations
from xegemm.atoms.mma import enumerate_mma_atoms

RD = "intel_sub_group_2d_block_read_"
BF16 = "intel_sub_group_bf16_bf16_matrix_mad_k16"
BLOCK_ARGS = ("global void*", "int", "int", "int", "int2")


# -- the table -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, scalar, count", [
    ("read_16b_32r16x2c", "ushort", 64),            # 32*16*2 / 16 ushorts per work-item
    ("read_16b_8r16x1c", "ushort", 8),
    ("read_8b_32r32x2c", "ushort", 64),             # 8-bit, 32 columns: two bytes of a row in one ushort
    ("read_8b_1r32x1c", "ushort", 1),
    ("read_8b_8r16x4c", "uchar", 32),               # 8-bit, 16 columns: one uchar per row and block
    ("read_8b_32r16x4c", "uchar", 128),
    ("read_32b_16r16x1c", "uint", 16),
    ("read_32b_1r8x1c", "uint", 1),                 # half a uint of data, still one uint
    ("read_32b_2r8x1c", "uint", 1),
    ("read_32b_1r8x2c", "uint", 2),                 # each block rounds up on its own
    ("read_32b_32r8x2c", "uint", 32),
    ("read_transform_16b_32r16x2c", "uint", 32),    # VNNI: two 16-bit rows per uint
    ("read_transform_16b_16r16x1c", "uint", 8),
    ("read_transform_8b_32r16x1c", "uint", 8),      # four 8-bit rows per uint
    ("read_transform_8b_32r16x4c", "uint", 32),
    ("read_transpose_32b_16r8x1c", "uint", 8),
    ("read_transpose_32b_32r8x1c", "uint", 16),
])
def test_read_destination_type_and_count(name, scalar, count):
    p = documented_prototype(RD[:-5] + name)
    assert p.param_types == (*BLOCK_ARGS, f"private {scalar}*")
    assert (p.data_scalar, p.data_count) == (scalar, count)
    assert p.params[-1][1] == "destination" and p.return_type == "void" and p.sub_group_size == 16


@pytest.mark.parametrize("shape, scalar, count", [
    ("8b_1r16x1c", "uchar", 1), ("8b_8r16x1c", "uchar", 8), ("8b_1r32x1c", "ushort", 1),
    ("8b_8r32x1c", "ushort", 8), ("16b_8r16x1c", "ushort", 8), ("32b_8r16x1c", "uint", 8),
])
def test_writes_take_a_private_pointer_to_the_values(shape, scalar, count):
    p = documented_prototype(f"intel_sub_group_2d_block_write_{shape}")
    assert p.params[-1] == (f"private {scalar}*", "value")
    assert p.data_count == count


def test_prefetches_have_no_data_pointer():
    p = documented_prototype("intel_sub_group_2d_block_prefetch_16b_32r16x2c")
    assert p.param_types == BLOCK_ARGS and p.data_scalar is None
    assert p.declaration == ("void intel_sub_group_2d_block_prefetch_16b_32r16x2c(global void* base_address, "
                             "int width, int height, int pitch, int2 coord);")


@pytest.mark.parametrize("name", [
    "read_transpose_16b_16r8x1c",    # no 16-bit transpose
    "read_transpose_32b_16r16x1c",   # IGC defines it, OCL2D does not
    "read_transpose_64b_8r4x1c",     # no 64-bit anything
    "read_64b_8r4x1c",
    "write_16b_8r16x2c",             # writes: one block only
    "write_16b_16r16x1c",            # writes: at most 8 rows
    "write_8b_8r16x4c",
    "read_16b_8r16x4c",              # 16-bit reads: 1 or 2 blocks
    "read_32b_8r16x2c",              # 32-bit 16-wide: one block
    "read_8b_8r16x1c",               # 8-bit 16-wide plain reads only as 4 blocks
    "read_8b_4r16x4c",               # ... of 8, 16 or 32 rows
    "read_16b_16r8x1c",              # IGC-internal 8-wide 16-bit reads
    "read_transform_8b_16r16x1c",    # 8-bit VNNI: 32 rows only
    "read_transform_16b_8r16x1c",
    "read_transform_32b_16r16x1c",
    "prefetch_8b_16r16x1c",          # 8-bit 16-wide prefetch: 32 rows (or 4 blocks)
    "prefetch_32b_8r16x2c",
])
def test_undocumented_shapes_do_not_exist(name):
    assert documented_prototype(f"intel_sub_group_2d_block_{name}") is None
    assert documented_overloads(f"intel_sub_group_2d_block_{name}") == ()


@pytest.mark.parametrize("name", ["prefetch_8b_32r16x1c", "prefetch_8b_32r16x2c", "read_transform_16b_32r16x1c",
                                  "read_8b_16r16x4c", "read_32b_32r16x1c", "write_8b_8r32x1c"])
def test_documented_edge_shapes_exist(name):
    op, bits, rows, cols, count = re.fullmatch(r"(\w+?)_(\d+)b_(\d+)r(\d+)x(\d+)c", name).groups()
    p = documented_prototype(f"intel_sub_group_2d_block_{name}")
    assert (p.name, p.op, p.elem_bits, p.rows, p.cols, p.count) == \
        (f"intel_sub_group_2d_block_{name}", op, int(bits), int(rows), int(cols), int(count))
    assert p.return_type == "void" and p.params[0] == ("global void*", "base_address")


MESSAGE_KIND = {"read": "load", "read_transform": "transform", "read_transpose": "transpose", "write": "store",
                "prefetch": "prefetch"}


@pytest.mark.parametrize("p", block2d_prototypes(), ids=lambda p: p.name)
def test_every_documented_shape_obeys_the_hardware_rules(p):
    """The documented API surface and the hardware rules (one home: xegemm.atoms.copy.message_violations) agree."""
    assert message_violations(Message(MESSAGE_KIND[p.op], p.elem_bits, p.cols, p.rows, p.count)) == [], p.name


def test_catalog_size_and_hardware_bounds():
    block = [n for n in documented_names() if "_2d_block_" in n]
    by_op = {}
    for n in block:
        by_op[documented_prototype(n).op] = by_op.get(documented_prototype(n).op, 0) + 1
    assert by_op == {"read": 45, "read_transform": 7, "read_transpose": 2, "write": 16, "prefetch": 47}
    assert len(BLOCK2D_SHAPES) == 18
    for n in block:
        p = documented_prototype(n)
        row = p.cols * p.count * p.elem_bits // 8
        assert row <= 64, n                              # docs/atoms.md §2: a row of all blocks <= 64 B
        assert p.rows <= (8 if p.op == "write" else 32), n
        if p.data_scalar:
            lane = p.data_count * {"uchar": 1, "ushort": 2, "uint": 4}[p.data_scalar]
            assert lane * 16 >= p.rows * p.cols * p.count * p.elem_bits // 8, n   # the lanes hold the block
            assert lane * 16 <= (512 if p.op == "write" else 2048), n            # docs/atoms.md §2 message size


# -- DPAS ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, kw, ret, params", [
    (BF16, {}, "float8", ("short8", "int8", "float8")),
    (BF16, {"m": 1}, "float", ("short", "int8", "float")),
    (BF16, {"m": 4, "acc": "short"}, "short4", ("short4", "int8", "short4")),
    ("intel_sub_group_f16_f16_matrix_mad_k16", {"m": 2, "acc": "half"}, "half2", ("short2", "int8", "half2")),
    (BF16, {"sub_group_size": 8}, "float8", ("int8", "int8", "float8")),
    ("intel_sub_group_u8_i8_matrix_mad_k32", {"m": 4}, "int4", ("ushort4", "int8", "int4")),
    ("intel_sub_group_i8_u8_matrix_mad_k32", {"m": 4}, "int4", ("short4", "uint8", "int4")),
    ("intel_sub_group_u8_u8_matrix_mad_k32", {"m": 2, "sub_group_size": 8}, "int2", ("uint2", "uint8", "int2")),
    ("intel_sub_group_i4_u4_matrix_mad_k64", {}, "int8", ("short8", "uint8", "int8")),
    ("intel_sub_group_tf32_tf32_matrix_mad_k8", {"m": 1}, "float", ("float", "float8", "float")),
    ("intel_sub_group_tf32_tf32_matrix_mad_k8", {"m": 2}, "float2", ("float", "float8", "float2")),
    ("intel_sub_group_tf32_tf32_matrix_mad_k8", {"m": 8}, "float8", ("float4", "float8", "float8")),
])
def test_dpas_overloads(name, kw, ret, params):
    p = documented_prototype(name, **kw)
    assert (p.return_type, p.param_types) == (ret, params)


@pytest.mark.parametrize("name, kw", [
    (BF16, {"sub_group_size": 8, "acc": "short"}),                      # SIMD8: float accumulators only
    ("intel_sub_group_tf32_tf32_matrix_mad_k8", {"sub_group_size": 8}),  # tf32: SIMD16 only
    (BF16, {"m": 3}),
    ("intel_sub_group_i4_i4_matrix_mad_k32", {}),
    ("intel_sub_group_tf32_tf32_matrix_mad_k8_f32", {}),                # old IGC spelling
])
def test_dpas_overloads_that_do_not_exist(name, kw):
    assert documented_prototype(name, **kw) is None


def test_dpas_overload_counts():
    counts = {n: len(documented_overloads(n)) for n in documented_names() if "matrix_mad" in n}
    assert len(counts) == 11
    assert counts[BF16] == counts["intel_sub_group_f16_f16_matrix_mad_k16"] == 12   # 4 f32 + 4 narrow + 4 SIMD8
    assert counts["intel_sub_group_tf32_tf32_matrix_mad_k8"] == 4
    assert sum(counts.values()) == 92


@pytest.mark.parametrize("atom", [a for a in enumerate_mma_atoms() if a.builtin], ids=lambda a: a.name)
def test_generator_register_types_are_documented_overloads(atom):
    fitting = [p for p in documented_overloads(atom.builtin)
               if p.sub_group_size == atom.n and p.param_types == (atom.a_ctype, atom.b_ctype, atom.c_ctype)]
    assert len(fitting) == 1 and fitting[0].return_type == atom.c_ctype and fitting[0].m == atom.m


# -- declarations ----------------------------------------------------------------------------------
def test_declare_documented():
    text = declare_documented(RD + "16b_32r16x2c")
    assert text == ("__attribute__((overloadable)) void intel_sub_group_2d_block_read_16b_32r16x2c("
                    "global void* base_address, int width, int height, int pitch, int2 coord, "
                    "private ushort* destination);\n")
    f16 = declare_documented("intel_sub_group_f16_f16_matrix_mad_k16")
    assert f16.count("overloadable") == 12
    assert "#ifdef cl_khr_fp16" in f16 and f16.index("half8 intel_") > f16.index("#ifdef cl_khr_fp16")
    simd8 = declare_documented(BF16, sub_group_size=8)
    assert simd8.count(";") == 4
    assert "float8 intel_sub_group_bf16_bf16_matrix_mad_k16(int8 a, int8 b, float8 acc);" in simd8
    with pytest.raises(BuiltinNameError):
        declare_documented(RD + "16b_8r16x4c")
    with pytest.raises(BuiltinNameError):
        declare_documented("intel_sub_group_tf32_tf32_matrix_mad_k8", sub_group_size=8)


# -- check_calls -----------------------------------------------------------------------------------
PARAMS = "global uchar* src, global uint* dst, global ushort* base, local ushort* tile, const global uchar* csrc"
PRE = "#define ROWS 8\ntypedef ushort xe_ushort64 __attribute__((ext_vector_type(64)));\n"


def kernel(body: str, params: str = PARAMS, sg: int = 16, pre: str = PRE) -> str:
    return (f"{pre}__attribute__((intel_reqd_sub_group_size({sg})))\n"
            f"kernel void k({params}) {{\n{body}\n}}\n")


def read16(dst: str, name: str = RD + "16b_8r16x1c", coord: str = "(int2)(0, 0)", base: str = "(global void*)src"):
    return f"{name}({base}, 64, 32, 64, {coord}, {dst});"


GOOD = {
    "array": "ushort buf[8];\n" + read16("buf"),
    "private cast of a vector": "ushort8 v;\n" + read16("(private ushort*)&v"),
    "cast of a short vector (DPAS A operand)": "short8 a;\n" + read16("(__private ushort *)&a"),
    "bigger array": "ushort buf[64];\n" + read16("&buf[8]"),
    "sub-array": "uint b[2][32];\n" + read16("b[1]", RD + "transform_16b_32r16x2c"),
    "macro sizes": "ushort buf[ROWS * 2];\n" + read16("buf", RD + "16b_8r16x2c"),
    "typedef'd wide vector": "xe_ushort64 v;\n" + read16("(private ushort*)&v", RD + "16b_32r16x2c"),
    "global base param": "ushort8 v;\n" + read16("(private ushort*)&v", base="base"),
    "write": ("uint vals[8];\n"
              "intel_sub_group_2d_block_write_32b_8r16x1c((global void*)dst, 64, 8, 64, (int2)(0, 0), vals);"),
    "prefetch": "intel_sub_group_2d_block_prefetch_16b_32r16x2c((global void*)src, 64, 32, 64, (int2)(0, 0));",
    "dpas": "short8 a = 0; int8 b = 0; float8 c = 0;\nc = intel_sub_group_bf16_bf16_matrix_mad_k16(a, b, c);",
    "dpas bf16 acc": "short4 a; int8 b; short4 c;\nshort4 d = intel_sub_group_bf16_bf16_matrix_mad_k16(a, b, c);",
    "dpas casts": "int4 x; float8 c;\nc = intel_sub_group_bf16_bf16_matrix_mad_k16(as_short8(x), (int8)(0), c);",
}


@pytest.mark.parametrize("case", GOOD)
def test_correct_calls_have_no_problems(case):
    assert check_calls(kernel(GOOD[case])) == []


BAD = {
    "unknown 16b transpose": (read16("buf", RD + "transpose_16b_16r8x1c"),
                              "not a documented", "no 16-bit read_transpose"),
    "unknown write shape": ("ushort b[16];\nintel_sub_group_2d_block_write_16b_8r16x2c((global void*)dst, 64, 8, 64, "
                            "(int2)(0,0), b);", "not a documented", "8r16x1c"),
    "old IGC tf32 name": ("float8 c = intel_sub_group_tf32_tf32_matrix_mad_k8_f32(a, b, c);", "not a documented",
                          "old IGC spelling"),
    "typo": ("c = intel_sub_group_bf16_bf16_matrix_mad_k32(a, b, c);", "not a documented",
             "did you mean intel_sub_group_bf16_bf16_matrix_mad_k16"),
    "argument count": ("ushort buf[8];\n" + RD + "16b_8r16x1c((global void*)src, 64, 32, 64, buf);",
                       "5 arguments, documented 6", ""),
    "prefetch with data": ("ushort b[8];\nintel_sub_group_2d_block_prefetch_16b_8r16x1c((global void*)src, 64, 32, "
                           "64, (int2)(0,0), b);", "6 arguments, documented 5", ""),
    "element type": ("uchar buf[16];\n" + read16("buf"), "element type uchar", "private ushort*"),
    "sign": ("short buf[8];\n" + read16("buf"), "element type short", ""),
    "too small": ("ushort buf[32];\n" + read16("buf", RD + "16b_32r16x2c"), "holds 32 ushort", "writes 64 ushort"),
    "too small after offset": ("ushort buf[64];\n" + read16("&buf[40]", RD + "16b_32r16x1c"), "holds 24 ushort",
                               "32 ushort"),
    "cast of a small vector": ("ushort16 v;\n" + read16("(private ushort*)&v", RD + "16b_32r16x1c"),
                               "reaches 32 bytes", "32 ushort = 64 bytes"),
    "vector address": ("ushort8 v;\n" + read16("&v"), "is a ushort8*", "(private ushort*)&v"),
    "array address": ("ushort buf[8];\n" + read16("&buf"), "pointer to an array", ""),
    "2-d array": ("uint b[2][32];\n" + read16("b", RD + "transform_16b_32r16x2c"), "pointer to an array", ""),
    "generic cast": ("ushort8 v;\n" + read16("(ushort*)&v"), "no address space", "generic"),
    "cast to wrong type": ("uint4 v;\n" + read16("(private uint*)&v"), "cast to `private uint*`",
                           "private ushort*"),
    "local destination": ("local ushort buf[8];\n" + read16("buf"), "points to local memory", ""),
    "undeclared destination": (read16("nowhere"), "`nowhere` is not declared", ""),
    "unreadable destination": ("ushort buf[16];\n" + read16("buf + 8"), "not a form the checker reads", ""),
    "write of too few values": ("uint vals[4];\nintel_sub_group_2d_block_write_32b_8r16x1c((global void*)dst, 64, 8, "
                                "64, (int2)(0, 0), vals);", "value `vals` holds 4 uint", "reads 8 uint"),
    "generic base": ("ushort buf[8];\n" + read16("buf", base="(void*)src"), "base_address is cast to `void*`",
                     "generic"),
    "local base": ("ushort buf[8];\n" + read16("buf", base="tile"), "base_address `tile` points to local", ""),
    "const base": ("ushort buf[8];\n" + read16("buf", base="csrc"), "const pointer", ""),
    "coord type": ("uint2 c; ushort buf[8];\n" + read16("buf", coord="c"), "coord `c` is uint2", "int2"),
    "void used as value": ("ushort buf[8];\nushort8 v = " + read16("buf"), "returns void", ""),
    "dpas A type": ("ushort8 a; int8 b; float8 c;\nc = intel_sub_group_bf16_bf16_matrix_mad_k16(a, b, c);",
                    "no documented SIMD16 overload takes (ushort8, int8, float8)", "(short8, int8, float8)"),
    "dpas M mismatch": ("short8 a; int8 b; float4 c;\nc = intel_sub_group_bf16_bf16_matrix_mad_k16(a, b, c);",
                        "takes (short8, int8, float4)", ""),
    "dpas SIMD8 operand at SIMD16": ("int8 a; int8 b; float8 c;\nc = intel_sub_group_f16_f16_matrix_mad_k16(a, b, c);",
                                     "no documented SIMD16 overload takes (int8, int8, float8)", ""),
    "dpas int B sign": ("ushort8 a; int8 b; int8 c;\nc = intel_sub_group_u8_u8_matrix_mad_k32(a, b, c);",
                        "takes (ushort8, int8, int8)", "(ushort8, uint8, int8)"),
    "dpas result": ("short8 a; int8 b; float8 c;\nfloat4 r = intel_sub_group_bf16_bf16_matrix_mad_k16(a, b, c);",
                    "result stored as float4", "returns float8"),
    "dpas tf32 A": ("float8 a; float8 b; float8 c;\nc = intel_sub_group_tf32_tf32_matrix_mad_k8(a, b, c);",
                    "takes (float8, float8, float8)", "(float4, float8, float8)"),
}


@pytest.mark.parametrize("case", BAD)
def test_incorrect_calls_name_the_problem(case):
    body, what, detail = BAD[case]
    src = kernel(body)
    problems = check_calls(src)
    assert len(problems) == 1, problems
    assert what in problems[0] and detail in problems[0], problems[0]
    assert problems[0].startswith(f"line {5 + body.count(chr(10))}: ")  # the call is the body's last line


def test_sub_group_size_rules():
    simd8 = kernel("int8 a; int8 b; float8 c;\nc = intel_sub_group_bf16_bf16_matrix_mad_k16(a, b, c);", sg=8)
    assert check_calls(simd8) == []
    assert "SIMD16" in check_calls(simd8, sub_group_size=16)[0]
    tf32 = kernel("float4 a; float8 b; float8 c;\nc = intel_sub_group_tf32_tf32_matrix_mad_k8(a, b, c);", sg=8)
    assert "only for sub-group size [16]" in check_calls(tf32)[0]
    block = kernel("ushort buf[8];\n" + read16("buf"), sg=8)
    assert "needs sub-group size 16" in check_calls(block)[0]


def test_function_parameters_returns_comments_and_directives():
    src = (
        "/* intel_sub_group_2d_block_read_16b_99r16x1c(x) in a comment */\n"
        "#define LOAD(v) intel_sub_group_2d_block_read_16b_99r16x1c(v)\n"
        "__attribute__((overloadable)) float8 intel_sub_group_bf16_bf16_matrix_mad_k16(short8 a, int8 b, float8 c);\n"
        "static inline float8 mma(short8 a, int8 b, float8 c) {\n"
        "    // returns what the builtin returns\n"
        "    return intel_sub_group_bf16_bf16_matrix_mad_k16(a, b, c);\n"
        "}\n"
        "static inline float4 bad(short8 a, int8 b, float8 c) {\n"
        "#pragma unroll\n"
        "    return intel_sub_group_bf16_bf16_matrix_mad_k16(a, b, c);\n"
        "}\n"
        "static inline void ld(const global ushort* p, ushort* out) {\n"
        "    intel_sub_group_2d_block_read_16b_8r16x1c((global void*)p, 64, 8, 64, (int2)(0, 0), out);\n"
        "}\n")
    assert check_calls(src) == ["line 10: intel_sub_group_bf16_bf16_matrix_mad_k16: result stored as float4, "
                                "but (short8, int8, float8) returns float8"]


def test_scope_is_the_calling_function():
    src = ("void f(void) { ushort buf[8]; }\n"
           "void g(global uchar* src) {\n  " + read16("buf") + "\n}\n")
    assert "`buf` is not declared in the calling function" in check_calls(src)[0]


def test_generated_native_dpas_atoms_check_clean():
    from xegemm.kernel.render import render_mma

    atoms = list(enumerate_mma_atoms())
    for n in (8, 16):
        src = render_mma([a for a in atoms if a.n == n], "native")
        assert src.count("_matrix_mad_k") > 10
        assert check_calls(src, sub_group_size=n) == []


# -- against a real OpenCL C front end (the Intel CPU runtime's clang) -------------------------------
# The CPU device has neither extension: with the documented declarations a program compiles and then fails
# to link on exactly the missing builtins, so the compile stage type-checks the calls like a GPU driver's.
FRONT_END_GOOD = ("array", "private cast of a vector", "sub-array", "write", "typedef'd wide vector",
                  "global base param", "dpas", "dpas bf16 acc", "dpas casts")
FRONT_END_BAD = ("element type", "vector address", "array address", "generic cast", "local destination",
                 "generic base", "coord type", "dpas A type", "dpas M mismatch", "dpas result", "dpas int B sign",
                 "dpas tf32 A")


def _front_end(sycl_device, bodies):
    """Build one program with a kernel per body; return (source, clang's error lines, log)."""
    from xegemm.runtime.program import BuildError, build_program, make_queue

    names = sorted({n for b in bodies for n in documented_names() if n in b})
    src = "".join(declare_documented(n) for n in names) + PRE
    for i, body in enumerate(bodies):
        src += kernel(body + "\ndst[get_global_id(0)] = 0;", pre="").replace("kernel void k(", f"kernel void k{i}(")
    with pytest.raises(BuildError) as err:  # never links: the CPU device lacks the builtins
        build_program(make_queue(sycl_device), src, "-cl-std=CL3.0")
    log = err.value.log
    return src, {int(line) for line, _col in re.findall(r"(\d+):(\d+): error: ", log)}, log


@pytest.mark.device
def test_front_end_accepts_what_the_checker_accepts(sycl_device):
    src, errors, log = _front_end(sycl_device, [GOOD[k] for k in FRONT_END_GOOD])
    assert errors == set() and "Symbols not found" in log, log[-3000:]  # compiled; only the builtins missing
    assert check_calls(src) == []


@pytest.mark.device
def test_front_end_rejects_what_the_checker_rejects_on_the_same_lines(sycl_device):
    src, errors, log = _front_end(sycl_device, [BAD[k][0] for k in FRONT_END_BAD])
    problems = check_calls(src)
    assert len(problems) == len(FRONT_END_BAD) == len(errors), (problems, log[-3000:])
    assert {int(p.split(":")[0].split()[1]) for p in problems} == errors
