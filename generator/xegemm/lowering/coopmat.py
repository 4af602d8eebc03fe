"""The ``coopmat`` lowering: a plan as a SPIR-V kernel of cooperative matrices (SPV_KHR_cooperative_matrix with
Intel's SPV_INTEL_joint_matrix additions, the form SYCL's joint_matrix compiles to), rendered as SPIR-V assembly
from templates/spirv/gemm.spvasm.j2.

What this module knows (docs/lowerings.md "coopmat"):

- which coop-matrix tiles a plan's sub-group tile is made of (:func:`coopmat_kernel`): accumulator tiles of
  ``tm`` x 16 (``tm`` = 16 where the sub-group tile's rows allow, else 8) and k-steps of ``tk`` = 32 (bf16) or
  64 (8-bit) where the work-group's k-tile allows, else 16 / 32: the Intel AMX shapes (bf16 -> f32 up to
  16x16x32, 8-bit -> s32 up to 16x16x64; intel/llvm sycl_ext_oneapi_matrix.asciidoc, "Intel AMX Supported
  Combinations");
- the operand rules: A row-major as a matrix (a column-major A is copied through local memory at every k-step:
  the CPU runtime refuses ColumnMajorKHR A), B VNNI-packed in memory from either layout (layout PackedINTEL = 2:
  ``[ceil(K/v)][N*v]``, v = 2 for 16-bit, 4 for 8-bit elements), packed on the device before the kernel (a
  quantized B dequantized into bf16 or f16 there: xegemm.lowering.coopmat_pack; :func:`pack_b` is the numpy
  reference), accumulators in the
  accumulator type, C/D row-major in their own type;
- the epilogue of each element (:func:`element_stage`): the OpenCL C element code of the plan's epilogue graph
  (fixed or traced), compiled into SPIR-V by xegemm.epilogues.spirv, with the loads and stores the template
  lays around it;
- the SPIR-V words: bf16 is carried as 16-bit integers with the multiply-add operand
  MatrixAAndBBFloat16ComponentsINTEL (0x40, capability 6437); signed 8-bit with Matrix{A,B,C,Result}
  SignedComponentsKHR; the capability PackedCooperativeMatrixINTEL (6434) is NOT declared (the Intel CPU runtime
  refuses modules that declare it, and accepts layout 2 without it);
- the kernel's arguments (:data:`PARAMETERS`): those of xegemm.kernel.arguments' plain GEMM, in its order and meaning,
  then a traced epilogue's, except that B's buffer holds B VNNI-packed (``ldb`` counts the bytes of a row of B as
  a K x N matrix, whatever B's layout); a grouped / MoE kernel's are the OpenCL C grouped kernel's
  (:data:`GROUPED_PARAMETERS`: the tile inside the persistent walk over the problem table), a split-K kernel's the
  plain GEMM's and ``k_slice``, a stream-K kernel's the plain GEMM's and the workspace ``W`` (its schedule:
  xegemm.plan.stream_k's formulas compiled by xegemm.epilogues.spirv.compile_formula), each beside a second entry
  point ``<name>_reduce`` with the OpenCL C reduce's (its ids prefixed: :meth:`ElementStage.relabeled`).
"""

from __future__ import annotations

import ctypes
import math
import re
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from xegemm.epilogues.fixed import EpilogueSpec, fixed_graph
from xegemm.epilogues.outputs import storage_ctype
from xegemm.epilogues.emit import element_code, input_names
from xegemm.epilogues.graph import Graph
from xegemm.epilogues.plan import input_param
from xegemm.epilogues.spirv import Compiler, Formula, SpirvCompileError, Value, compile_formula
from xegemm.errors import PlanRejected, XegemmError
from xegemm.grouped.schedule import MODES
from xegemm.grouped.table import FIELD, FIELDS
from xegemm.plan import stream_k as sk
from xegemm.plan.planner import REDUCE_LOCAL
from xegemm.library.dtypes import dtype
from xegemm.lowering.templating import environment, render_macro
from xegemm.quant import compute_type, dequantize, operand_spec
from xegemm.quant.codec import QuantizedMatrix
from xegemm.quant.formats import FORMATS

TEMPLATE = "spirv/gemm.spvasm.j2"

# (A/B type) -> (accumulator, SPIR-V bits of A/B, VNNI factor v, multiply-add operands, preferred tk, smaller tk)
TYPES = {
    "bf16": ("f32", 16, 2, 0x40, 32, 16),      # MatrixAAndBBFloat16ComponentsINTEL
    "s8": ("s32", 8, 4, 0x1 | 0x2 | 0x4 | 0x8, 64, 32),   # Matrix{A,B,C,Result}SignedComponentsKHR
    "u8": ("s32", 8, 4, 0x0, 64, 32),       # no signed bits (with C/Result signed 0xC: wrong sums, measured)
    "f16": ("f32", 16, 2, 0x0, 32, 16),     # components OpTypeFloat 16: Xe GPU builds only (FAMILY_TYPES)
    "tf32": ("f32", 32, 1, 0x20, 8, 8),     # MatrixAAndBTF32ComponentsINTEL, f32 components, B row-major: Xe only
}
# 8-bit A and B of different signedness: (A, B) -> the multiply-add operands (MatrixASignedComponentsKHR 0x1,
# MatrixBSignedComponentsKHR 0x2; SPV_KHR_cooperative_matrix); A's type is the kernel's ``ab`` (the same 8 bits and
# VNNI factor), ``b_type`` says B's.  The signed operand's bit alone: with C and Result signed (0x4 | 0x8) as well,
# or any other mask, the CPU runtime's sums were wrong (all 10 masks tried on both pairs, measured 2026-12-03), as
# for u8 x u8 above
MIXED_SIGNS = {("s8", "u8"): 0x1, ("u8", "s8"): 0x2}
# the A/B types each tile family's device takes: the CPU runtime's AMX has no f16 without AMX-FP16 (no CPU with it
# was at hand to verify one on), Xe's DPAS takes f16 (8x16x16, measured with both compilers: dpas.8x8 ... :hf)
FAMILY_TYPES = {"amx": ("bf16", "s8", "u8"), "xe": ("bf16", "s8", "u8", "f16", "tf32")}
# the types a quantized B is dequantized into by the B packer (the compute type; f16 then builds for Xe GPUs only)
DEQUANTIZED = ("bf16", "f16")
CAP_TF32_COMPONENTS = 6436                        # CooperativeMatrixTF32ComponentTypeINTEL
LAYOUT_ROW_MAJOR, LAYOUT_PACKED_INTEL = 0, 2      # SPV_KHR_cooperative_matrix / SPV_INTEL_joint_matrix
# the SPIR-V words a kernel is written in: khr (SPV_KHR_cooperative_matrix with Intel's additions: the CPU runtime,
# IGC 2.x) or legacy (SPV_INTEL_joint_matrix's first form, OpTypeJointMatrixINTEL 6119 and kin: the IGC 1.0 of
# Debian 12's ocloc 22.43, which refuses the KHR opcodes); docs/lowerings.md "coopmat"
DIALECTS = ("khr", "legacy")
# the legacy multiply-add per A/B type: OpJointMatrixMadINTEL 6122 (signed), OpJointMatrixUUMadINTEL 6130
# (KhronosGroup/SPIRV-LLVM-Translator, lib/SPIRV/libSPIRV/spirv_internal.hpp)
# (no tf32: Debian's IGC 1.0.12504 had not finished compiling a tf32 kernel after 10 minutes, measured 2026-12-03)
LEGACY_MAD = {"bf16": 6122, "s8": 6122, "u8": 6130, "f16": 6122}
# ... and for A and B of different signedness: OpJointMatrixSUMadINTEL 6128 (A signed), OpJointMatrixUSMadINTEL 6129
LEGACY_MIXED_MAD = {("s8", "u8"): 6128, ("u8", "s8"): 6129}
LEGACY_MAD_NAMES = {6122: "OpJointMatrixMadINTEL", 6128: "OpJointMatrixSUMadINTEL", 6129: "OpJointMatrixUSMadINTEL",
                    6130: "OpJointMatrixUUMadINTEL"}
CAP_BFLOAT16_COMPONENTS = 6437                    # CooperativeMatrixBFloat16ComponentTypeINTEL
TILE_N = 16
MAX_TILE_M = 16

# The kernel's parameters, as xegemm.kernel.arguments' plain GEMM (KernelCall.of): name -> SPIR-V type id (``ab``,
# ``out``: pointers to A's and B's, to D's storage type), then a traced epilogue's (xegemm.kernel.arguments.traced_arguments' order)
PARAMETERS = (("A", "ab"), ("B", "ab"), ("C", "out"), ("M", "%u32"), ("N", "%u32"), ("K", "%u32"),
              ("lda", "%u32"), ("ldb", "%u32"), ("ldc", "%u32"), ("batch_stride_a", "%u64"),
              ("batch_stride_b", "%u64"), ("batch_stride_c", "%u64"), ("Cin", "out"), ("bias", "%pcw_f32"),
              ("alpha", "%f32"), ("beta", "%f32"), ("clamp_lo", "%f32"), ("clamp_hi", "%f32"))
# a grouped / MoE kernel's parameters, as xegemm.kernel.arguments' grouped kernel (KernelCall._grouped): every
# group's sizes, offsets (elements; B's: of the packed B) and pitches come from the problem table
GROUPED_PARAMETERS = (("A", "ab"), ("B", "ab"), ("C", "out"), ("Cin", "out"), ("bias", "%pcw_f32"),
                      ("alpha", "%f32"), ("beta", "%f32"), ("clamp_lo", "%f32"), ("clamp_hi", "%f32"),
                      ("table", "%pcw_u64"), ("groups", "%u32"), ("total_tiles", "%u32"),
                      ("tile_counter", "%pcw_u32"))
# quantized experts' arguments (after the walk's): not read, every expert was dequantized by the packer
GROUPED_QUANT_PARAMETERS = (("S", "%pcw_u8"), ("Z", "%pcw_u8"), ("expert_stride_s", "%u64"),
                            ("expert_stride_z", "%u64"))
STORAGE_IDS = {"uchar": "%u8", "ushort": "%u16", "uint": "%u32"}
# the reduce entry point's ids (its parameters, its copy of the element stage: ElementStage.relabeled)
REDUCE_TAG = "r_"
# a quantized B's arguments (xegemm.kernel.arguments, after the epilogue's): not read, B was dequantized by the packer
QUANT_PARAMETERS = (("S", "%pcw_u8"), ("Z", "%pcw_u8"), ("batch_stride_s", "%u64"), ("batch_stride_z", "%u64"))
# an FP8 A's (W8A8; after the quantized B's): not read, A was dequantized into bf16 by the A dequantizer
A_QUANT_PARAMETERS = (("SA", "%pcw_u8"), ("batch_stride_sa", "%u64"))


@dataclass(frozen=True)
class ElementStage:
    """The epilogue of one element, as the kernel's SPIR-V computes it after the accumulators went to local memory:
    D's storage type (``out_t``, a SPIR-V id, and its bytes), whether C is read (into ``%e_cbits``), the row/column
    vectors (var, parameter, kind) and auxiliary input matrices (var, parameter, storage type id) the template
    loads for the element, the compiled element code (``constants``, ``decorations``, ``lines``), the id of D's
    storage bits (``d``), the auxiliary outputs (parameter, storage type id, value id) and the traced epilogue's
    extra kernel parameters.  ``inputs`` are the ids the template defines for the code (the accumulator
    ``%e_acc``, C's bits ``%e_cbits``, the loaded vectors and matrices, the scalar parameters); ``tag`` prefixes
    every id of a :meth:`relabeled` copy."""

    describe: str
    out_t: str
    out_bytes: int
    reads_c: bool
    vectors: tuple = ()
    matrices: tuple = ()
    constants: tuple = ()
    decorations: tuple = ()
    lines: tuple = ()
    d: str = ""
    outputs: tuple = ()
    params: tuple = ()
    inputs: tuple = ()
    tag: str = ""

    def relabeled(self, tag: str) -> ElementStage:
        """The same code under ids prefixed by ``tag`` (its inputs' too, e.g. ``%<tag>e_acc``), for a second entry
        point of the module: SPIR-V ids are module-wide, so a stage emitted twice needs two names for each value.
        The constants (module scope) are the same ids, emitted once."""
        local = set(self.inputs) | {line.split(" = ", 1)[0] for line in self.lines if " = " in line}
        table = {old: "%" + tag + old[1:] for old in local}
        pattern = re.compile(r"%\w+")

        def rename(text: str) -> str:
            return pattern.sub(lambda m: table.get(m.group(0), m.group(0)), text)

        return replace(self, lines=tuple(map(rename, self.lines)), decorations=tuple(map(rename, self.decorations)),
                       d=rename(self.d), outputs=tuple((p, t, rename(v)) for p, t, v in self.outputs),
                       vectors=tuple((rename("%" + var)[1:], param, kind) for var, param, kind in self.vectors),
                       matrices=tuple((rename("%" + var)[1:], param, t) for var, param, t in self.matrices),
                       inputs=tuple(map(rename, self.inputs)), tag=tag + self.tag)


def _helpers() -> str:
    """The OpenCL C conversion helpers of templates/convert.cl.j2 the element code may call, in the portable
    lowering's integer spelling (the native one goes through private memory, which the element code here has not)."""
    return render_macro("convert.cl.j2", "bf16_rne", "portable") + render_macro("convert.cl.j2", "f16_rne", "portable")


def element_stage(graph: Graph, traced: bool, acc: str, describe: str) -> ElementStage:
    """The SPIR-V of an epilogue graph (the fixed epilogue's, or a ``traced`` one's: its inputs are then the
    ``in_<name>`` parameters) over an accumulator of type ``acc``: the element code the OpenCL C lowerings print
    (emit.element_code over the names every epilogue stage binds, emit.input_names) compiled by
    :mod:`xegemm.epilogues.spirv`.  Reductions are refused (they need the fix-up kernel, not rendered here)."""
    if graph.reductions():
        raise PlanRejected(f"coopmat: epilogue {graph.function} has reductions "
                           f"({', '.join(o.name for o in graph.reductions())}); their per-tile partials and fix-up "
                           "kernel are not rendered in SPIR-V")
    exact = graph.exact_integer
    acc_int = dtype(acc).is_int
    acc_c = ("as_int(xe_acc)" if exact else "(float)as_int(xe_acc)") if acc_int else "xe_acc"
    vectors: dict[str, tuple[str, str, str]] = {}

    def vector(param: str, kind: str) -> str:
        var = f"xe_v_{param}"
        vectors.setdefault(var, (var, param, kind))
        return var

    def param(name: str) -> str:
        return input_param(name) if traced else name

    names = {"acc": acc_c} | input_names(graph, param, vector, "xe_cbits")
    code = element_code(graph, names, temp="xe_e")
    compiler = Compiler("xe")
    compiler.define(_helpers())
    compiler.define(code.definitions)
    compiler.bind("xe_acc", Value("%e_acc", "uint" if acc_int else "float"))
    inputs = ["%e_acc"]
    out_type = graph.out
    out_c = storage_ctype(out_type)
    if graph.reads("c"):
        if graph.input("c").type != out_type:
            raise PlanRejected(f"coopmat: C of type {graph.input('c').type} beside D of type {out_type}: C is read "
                               "laid out and typed as D")
        compiler.load("xe_cbits", "%e_cbits", out_c)
        inputs.append("%e_cbits")
    params, matrices = [], []
    for i in graph.inputs:
        if i.name in ("acc", "c"):
            continue
        name = param(i.name)
        if i.kind == "scalar":
            compiler.bind(name, Value(f"%{name}", "float"))
            inputs.append(f"%{name}")
            if traced:
                params.append((name, "%f32"))
        elif i.kind == "matrix":
            ctype = storage_ctype(i.type)
            var = f"xe_ai_{i.name}"
            compiler.load(var, f"%{var}", ctype)
            inputs.append(f"%{var}")
            matrices.append((var, name, STORAGE_IDS[ctype]))
            params.append((name, "%pcw_" + STORAGE_IDS[ctype][1:]))
        elif traced:
            params.append((name, "%pcw_f32"))
    for var, _, _ in vectors.values():
        compiler.bind(var, Value(f"%{var}", "float"))
        inputs.append(f"%{var}")
    try:
        for statement in code.statements:
            compiler.statement(statement)
        d = compiler.store_bits(compiler.expression(code.outputs["d"]), out_c)
        outputs = []
        for aux in graph.auxiliaries():
            ctype = storage_ctype(aux.type)
            value = compiler.store_bits(compiler.expression(code.outputs[aux.name]), ctype)
            outputs.append((f"out_{aux.name}", STORAGE_IDS[ctype], value))
            params.append((f"out_{aux.name}", "%pcw_" + STORAGE_IDS[ctype][1:]))
    except SpirvCompileError as exc:
        raise PlanRejected(str(exc)) from None
    return ElementStage(describe, STORAGE_IDS[out_c], dtype(out_type).bits // 8, graph.reads("c"),
                        tuple(vectors.values()), tuple(matrices), tuple(compiler.constants),
                        tuple(compiler.decorations), tuple(compiler.lines), d, tuple(outputs), tuple(params),
                        tuple(inputs))


def identity_stage(acc: str) -> ElementStage:
    """D = acc stored in the accumulator's type (a kernel made without a plan, e.g. the runtime's probe)."""
    spec = EpilogueSpec(1.0, 0.0, "none", "none", (0.0, 0.0), acc, acc)
    return element_stage(fixed_graph(spec), False, acc, spec.describe())


def plan_stage(plan) -> ElementStage:
    """The element stage of a plan's epilogue (fixed or traced): the GEMM entry point's, or with split K the
    reduce entry point's (the GEMM's then stores the partial sums as they are)."""
    if plan.graph is not None:
        return element_stage(plan.graph, True, plan.config.types.acc, plan.graph.describe())
    spec = plan.epilogue
    return element_stage(fixed_graph(spec), False, plan.config.types.acc, spec.describe())


@dataclass(frozen=True)
class CoopmatKernel:
    """One coop-matrix GEMM kernel: types, the work-group and sub-group tiles, and the coop-matrix tiles."""

    name: str
    ab: str                 # A and B element type: bf16, s8, u8
    sg: int                 # sub-group size
    sg_m: int               # sub-groups along M and N
    sg_n: int
    sgm: int                # sub-group block (elements)
    sgn: int
    tm: int                 # coop-matrix tiles: accumulator tm x tn, A tm x tk, B tk x tn
    tn: int
    tk: int
    b_layout: int = LAYOUT_PACKED_INTEL
    a_col: bool = False     # A column-major: read through local memory at every k-step on the CPU runtime
    a_col_loads: bool = False   # ... and in GPU builds as ColumnMajorKHR matrices in the interior k-steps
    dequantized: bool = False   # B quantized, dequantized into the compute type by the packer (its scales' arguments follow)
    fp8_a: bool = False     # A FP8 (W8A8), dequantized into row-major bf16 by the A dequantizer (its scales follow)
    epilogue: ElementStage | None = None     # None: D = acc in the accumulator type (identity_stage)
    walk: str | None = None     # a grouped / MoE kernel: its persistent walk (xegemm.grouped.schedule.MODES)
    split: int = 1              # split K: slices, each into the workspace; the reduce entry point applies the epilogue
    stream_k: int = 0           # stream-K: G work-groups share a batch's MAC-loop iterations (xegemm.plan.stream_k)
    bk: int = 0                 # stream-K: the work-group k-tile its iterations are counted in
    swizzle: int = 1            # stream-K: the tile order it walks (xegemm.plan.swizzle)
    reduce_local: tuple = REDUCE_LOCAL  # the reduce entry point's local size (Plan.reduce_workgroup_size)
    dialect: str = "khr"        # the SPIR-V words (DIALECTS): khr, or legacy for a compiler without the KHR opcodes
    b_type: str | None = None   # B's element type where its signedness differs from A's (MIXED_SIGNS)

    def __post_init__(self):
        if self.ab == "tf32":       # v = 1: the "packed" B is B row-major, loaded so
            object.__setattr__(self, "b_layout", LAYOUT_ROW_MAJOR)
        if self.epilogue is None:
            object.__setattr__(self, "epilogue", identity_stage(TYPES[self.ab][0] if self.ab in TYPES else "f32"))
        if self.ab not in TYPES:
            raise PlanRejected(f"coopmat: A and B of type {self.ab!r}: the lowering takes {', '.join(TYPES)}")
        if self.sgm % self.tm or self.sgn % self.tn or self.tm > MAX_TILE_M or self.tn != TILE_N:
            raise PlanRejected(f"coopmat: sub-group block {self.sgm}x{self.sgn} is not made of {self.tm}x{self.tn} "
                               f"accumulator tiles (tiles: M <= {MAX_TILE_M}, N = {TILE_N})")
        if self.tk not in TYPES[self.ab][4:]:
            raise PlanRejected(f"coopmat: k-step {self.tk} for {self.ab}: one of {TYPES[self.ab][4:]}")
        if self.dialect not in DIALECTS:
            raise PlanRejected(f"coopmat: dialect {self.dialect!r}: one of {', '.join(DIALECTS)}")
        if self.walk is not None and self.walk not in MODES:
            raise PlanRejected(f"coopmat: walk {self.walk!r}: one of {', '.join(MODES)}")
        if (self.walk is not None or self.reduces) and (self.epilogue.params or self.epilogue.matrices
                                                        or self.epilogue.outputs):
            raise PlanRejected("coopmat: a grouped, split-K or stream-K kernel takes the fixed epilogue only")
        if sum((self.walk is not None, self.split > 1, self.stream_k > 0)) > 1:
            raise PlanRejected("coopmat: a kernel walks grouped tiles, splits K or streams K: one of them")
        if self.stream_k and (self.bk <= 0 or self.bk % self.tk):
            raise PlanRejected(f"coopmat: stream-K counts k-tiles of the work-group k-tile, a multiple of {self.tk} "
                               f"(got {self.bk})")

    # -- derived --------------------------------------------------------------------------------------------
    @property
    def reduces(self) -> bool:
        """Whether the module has a second entry point ``<name>_reduce`` (split K's and stream-K's fix-up)."""
        return self.split > 1 or self.stream_k > 0

    @property
    def reduce_epilogue(self) -> ElementStage:
        """The reduce entry point's copy of the element stage (its own ids)."""
        return self.epilogue.relabeled(REDUCE_TAG)

    # stream-K's schedule: xegemm.plan.stream_k's formulas, compiled from the C the OpenCL C kernels print
    def _sk_lines(self, steps) -> list[str]:
        return sk.c_lines(steps, (self.bm, self.bn, self.bk), self.stream_k)

    @staticmethod
    def _sk_inputs(formula: Formula, names) -> dict[str, tuple[str, str]]:
        return {n: (formula.id(n), "long" if n in sk.LONG else "int") for n in names}

    @property
    def sk_slots(self) -> int:
        return sk.SLOTS

    @cached_property
    def sk_range(self) -> Formula:
        """The work-group's iterations [it_begin, it_end) of its batch (GRID, RANGE; g = the work-group's x)."""
        return compile_formula(self._sk_lines(sk.GRID + sk.RANGE), {"M": ("%M", "int"), "N": ("%N", "int"),
                               "K": ("%K_all", "int"), "g": ("%wgx", "int")}, "skr")

    @cached_property
    def sk_piece(self) -> Formula:
        """The piece at iteration ``%it``: its tile (and tile_m, tile_n), k-range, whole and slot (SEGMENT)."""
        inputs = self._sk_inputs(self.sk_range, ("tiles_n", "tiles_m", "k_tiles", "it_begin", "it_end"))
        return compile_formula(self._sk_lines(sk.SEGMENT) + sk.tile_lines(self.swizzle),
                               {**inputs, "it": ("%it", "long"), "K": ("%K_all", "int")}, "skp")

    @cached_property
    def sk_fixup(self) -> Formula:
        """The fix-up's tile ``z % tiles`` of batch ``z / tiles`` (z: the work-item's z), its contributors
        first..last and its tile_m, tile_n (GRID, FIXUP)."""
        return compile_formula(self._sk_lines(sk.GRID) + ["const long tile = z % tiles;",
                                                          "const int batch = z / tiles;"]
                               + self._sk_lines(sk.FIXUP) + sk.tile_lines(self.swizzle),
                               {"M": ("%r_M", "int"), "N": ("%r_N", "int"), "K": ("%r_K", "int"),
                                "z": ("%r_z64", "long")}, "skf")

    @cached_property
    def sk_slot(self) -> Formula:
        """The slot of contributor ``%r_s``'s piece of the tile (PIECE)."""
        inputs = self._sk_inputs(self.sk_fixup, ("iters", "tile_first"))
        return compile_formula(self._sk_lines(sk.PIECE), {**inputs, "g": ("%r_s", "int")}, "sks")

    @property
    def constants(self) -> tuple[str, ...]:
        """The module-scope constants of the element stage and of stream-K's formulas, each once."""
        lines = list(self.epilogue.constants)
        if self.stream_k:
            for formula in (self.sk_range, self.sk_piece, self.sk_fixup, self.sk_slot):
                lines += formula.constants
        return tuple(dict.fromkeys(lines))

    @property
    def k_step_bodies(self) -> int:
        """How many k-step bodies the template emits, each mt x nt multiply-adds: the interior loop and its K
        tail, the staged loop of an edge work-group and its K tail (a column-major A on the CPU runtime: the
        staged two only)."""
        return 2 if self.a_col and not self.a_col_loads else 4

    @property
    def float16(self) -> bool:
        """A and B are f16: the matrices' components are OpTypeFloat 16 (loaded from 16-bit storage)."""
        return self.ab == "f16"

    @property
    def ab_component(self) -> str:
        """The SPIR-V type id of A's and B's matrix components (bf16: 16-bit integers with the bf16 operand)."""
        return "%f16" if self.float16 else "%f32" if self.tf32 else f"%u{self.ab_bits}"

    @property
    def tf32(self) -> bool:
        """A and B are tf32: f32 components read as tf32 (MatrixAAndBTF32ComponentsINTEL), B row-major (v = 1)."""
        return self.ab == "tf32"

    @property
    def legacy(self) -> bool:
        return self.dialect == "legacy"

    @property
    def legacy_mad(self) -> int:
        """The legacy dialect's multiply-add opcode (:data:`LEGACY_MAD`)."""
        return LEGACY_MIXED_MAD[self.ab, self.b_type] if self.b_type else LEGACY_MAD[self.ab]

    @property
    def legacy_mad_name(self) -> str:
        return LEGACY_MAD_NAMES[self.legacy_mad]

    @property
    def acc(self) -> str:
        return TYPES[self.ab][0]

    @property
    def float_acc(self) -> bool:
        return self.acc == "f32"

    @property
    def bf16(self) -> bool:
        return self.ab == "bf16"

    @property
    def ab_bits(self) -> int:
        return TYPES[self.ab][1]

    @property
    def ab_bytes(self) -> int:
        return self.ab_bits // 8

    @property
    def v(self) -> int:
        """The VNNI factor: K rows of B per 32-bit packed element."""
        return TYPES[self.ab][2]

    @property
    def mad_operands(self) -> str:
        return hex(MIXED_SIGNS[self.ab, self.b_type] if self.b_type else TYPES[self.ab][3])

    @property
    def cap_bf16(self) -> int:
        return CAP_BFLOAT16_COMPONENTS

    @property
    def cap_tf32(self) -> int:
        return CAP_TF32_COMPONENTS

    @property
    def mt(self) -> int:
        return self.sgm // self.tm

    @property
    def nt(self) -> int:
        return self.sgn // self.tn

    @property
    def bm(self) -> int:
        return self.sgm * self.sg_m

    @property
    def bn(self) -> int:
        return self.sgn * self.sg_n

    @property
    def subgroups(self) -> int:
        return self.sg_m * self.sg_n

    @property
    def local(self) -> tuple[int, int, int]:
        """OpenCL local size, as Plan.workgroup_size: (SG_N * sub-group size, SG_M, 1)."""
        return (self.sg_n * self.sg, self.sg_m, 1)

    @property
    def fields(self) -> dict[str, int]:
        """A grouped kernel's problem table: each field's column (xegemm.grouped.table.FIELD), and ``count``."""
        return {**FIELD, "count": len(FIELDS)}

    @property
    def parameters(self) -> tuple[tuple[str, str], ...]:
        """(name, SPIR-V type id) of each kernel parameter: :data:`PARAMETERS`, then the traced epilogue's (a
        grouped kernel: :data:`GROUPED_PARAMETERS`)."""
        ids = {"out": "%pcw_" + self.epilogue.out_t[1:], "ab": f"%pcw_u{self.ab_bits}"}
        if self.walk is not None:
            quant = GROUPED_QUANT_PARAMETERS if self.dequantized else ()
            return tuple((n, ids.get(t, t)) for n, t in GROUPED_PARAMETERS + quant)
        quant = (QUANT_PARAMETERS if self.dequantized else ()) + (A_QUANT_PARAMETERS if self.fp8_a else ())
        acc_ptr = "%pcw_f32" if self.float_acc else "%pcw_u32"
        if self.split > 1:    # C is the workspace of partial sums
            ids["out"] = acc_ptr
            return tuple(("K_all" if n == "K" else n, ids.get(t, t)) for n, t in PARAMETERS) \
                + (("k_slice", "%u32"),) + quant
        if self.stream_k:     # K is all of K (a piece's length is %K), then the workspace of pieces
            return tuple(("K_all" if n == "K" else n, ids.get(t, t)) for n, t in PARAMETERS) \
                + self.epilogue.params + (("W", acc_ptr),) + quant
        return tuple((n, ids.get(t, t)) for n, t in PARAMETERS) + self.epilogue.params + quant

    @property
    def local_bytes(self) -> int:
        """Local memory of a work-group (the template's Workgroup variables): each sub-group's A and B k-step and
        its accumulators, and a dynamic walk's next-tile counter."""
        return (self.subgroups * (self.sgm * self.tk * self.ab_bytes + self.tk * self.sgn * self.ab_bytes
                                  + self.sgm * self.sgn * 4)
                + (4 if self.walk and self.walk != "static" else 0))

    def global_size(self, m: int, n: int, batch: int = 1) -> tuple[int, int, int]:
        """OpenCL global size covering an M x N problem (edges included), as Plan.global_size."""
        lx, ly, _ = self.local
        return (math.ceil(n / self.bn) * lx, math.ceil(m / self.bm) * ly, batch)


# the tile shapes each compiler takes: AMX (the CPU runtime) up to 16 x 16 x 32 (bf16) / 64 (8-bit); Xe GPUs
# through IGC 2.x: A 8 x 16 (bf16) / 8 x 32 (8-bit) only ("unsupported number of rows: 16, supported values: lower
# or equal 8", measured with ocloc 26.27; intel/llvm sycl_ext_oneapi_matrix.asciidoc, "Intel XMX Supported
# Combinations")
TILE_FAMILIES = {"amx": (16, 8), "xe": (8,)}


def choose_tiles(ab: str, sgm: int, sgn: int, bk: int, family: str = "amx") -> tuple[int, int, int]:
    """(tm, tn, tk) of a sub-group block sgm x sgn with work-group k-tile bk: the largest tiles of ``family``
    (:data:`TILE_FAMILIES`) that divide it (AMX: tm 16 or 8, tk the type's larger k-step if bk allows, else its
    smaller one; Xe: tm 8 and the smaller k-step; tn 16)."""
    if ab not in TYPES:
        raise PlanRejected(f"coopmat: A and B of type {ab!r}: the lowering takes {', '.join(TYPES)}")
    tm = next((t for t in TILE_FAMILIES[family] if sgm % t == 0), None)
    if tm is None or sgn % TILE_N:
        raise PlanRejected(f"coopmat: sub-group tile {sgm}x{sgn} must be a multiple of 8x16 (coop-matrix "
                           "accumulator tiles of 8 or 16 rows, 16 columns)")
    big, small = TYPES[ab][4:]
    tk = big if bk % big == 0 and family == "amx" else small if bk % small == 0 else None
    if tk is None:
        raise PlanRejected(f"coopmat: the work-group k-tile {bk} must be a multiple of {small} for {ab}")
    return tm, TILE_N, tk


def plan_violation(plan, family: str = "amx", dialect: str = "khr") -> str | None:
    """Why the coopmat lowering cannot render a plan in the tiles of ``family`` (amx: the CPU runtime; xe: Intel
    GPUs ahead of time) and the words of ``dialect``, or None."""
    config = plan.config
    t, lay = config.types, config.layout
    if plan.quant:
        compute = compute_type(t)
        if compute not in DEQUANTIZED or (plan.quant.a_spec is None and t.a != compute):
            return ("coopmat: a quantized B is dequantized into bf16 or f16 before the multiply: the compute type "
                    f"must be one of them and an unquantized A of that type (got A={t.a}, compute={compute})")
        if plan.quant.a_spec and compute != "bf16":
            return f"coopmat: an FP8 A (W8A8) is dequantized into bf16 (got compute={compute})"
    elif (t.a != t.b or t.a not in TYPES) and (t.a, t.b) not in MIXED_SIGNS:
        return (f"coopmat: A and B must be one of {', '.join(TYPES)} alike, or s8 and u8 in either order (got "
                f"A={t.a}, B={t.b})")
    ab = operand_type(plan)
    if ab not in FAMILY_TYPES[family]:
        return (f"coopmat: {ab} A and B are built for Xe GPUs only (xegemm build --lowering coopmat): the CPU "
                f"runtime's AMX takes {', '.join(FAMILY_TYPES['amx'])} (f16 needs AMX-FP16)")
    if dialect == "legacy" and ab not in LEGACY_MAD:
        return (f"coopmat: {ab} in the legacy dialect (Debian's compiler): not taken (the compiler did not finish "
                "a tf32 kernel in 10 minutes, measured); build with the current compiler (--compiler current)")
    if t.acc != TYPES[ab][0]:
        return f"coopmat: {ab} accumulates in {TYPES[ab][0]} (got acc={t.acc})"
    if lay.c != "row":
        return "coopmat: C and D must be row-major (layout.c: row)"
    if plan.split_k > 1 and plan.graph is not None:
        return "coopmat: split K with a traced epilogue is not done (its reduce entry point applies the fixed one)"
    if plan.grouped and plan.quant and plan.quant.a_spec:
        return "coopmat: a grouped launch with an FP8 A (W8A8) is not done (its A dequantizer runs on one matrix)"
    if plan.graph is not None and plan.graph.reductions():
        return (f"coopmat: the traced epilogue {plan.graph.function} has reductions; their per-tile partials and "
                "fix-up kernel are not rendered in SPIR-V")
    return None


def operand_type(plan) -> str:
    """The type of the matrices the kernel multiplies: A's and B's, or for a quantized B (and an FP8 A) the
    compute type they are dequantized into (bf16)."""
    return compute_type(plan.config.types) if plan.quant else plan.config.types.a


def reads_a_as_stored(plan) -> bool:
    """Whether the kernel reads A as the caller stores it (else an FP8 A, dequantized into a row-major bf16 A by
    the A dequantizer, xegemm.lowering.coopmat_pack)."""
    return not (plan.quant and plan.quant.a_spec)


def coopmat_kernel(plan, name: str | None = None, family: str = "amx", dialect: str = "khr") -> CoopmatKernel:
    """The coop-matrix kernel of a plan in the tiles of ``family`` (amx: the CPU runtime; xe: Intel GPUs ahead of
    time) and the words of ``dialect`` (:data:`DIALECTS`), PlanRejected with the reason when the lowering cannot
    render it."""
    why = plan_violation(plan, family, dialect)
    if why:
        raise PlanRejected(why)
    tile = plan.config.tile
    sgm, sgn = plan.subgroup_tile
    ab = operand_type(plan)
    tm, tn, tk = choose_tiles(ab, sgm, sgn, tile.workgroup[2], family)
    sg_m, sg_n = tile.subgroups
    a_col = plan.config.layout.a == "col" and reads_a_as_stored(plan)
    # a column-major A as ColumnMajorKHR matrices: IGC 2.x issues transposed 2D block loads for them; the CPU runtime
    # aborts on them and Debian's IGC 1.0 has no such load ("undefined reference to
    # __builtin_spriv_OpJointMatrixLoadINTEL_PackedA_ColumnMajor_..."), both measured: staged there
    a_col_loads = a_col and family == "xe" and dialect == "khr"
    return CoopmatKernel(name or plan.name, ab, tile.subgroup_size, sg_m, sg_n, sgm, sgn, tm, tn, tk,
                         a_col=a_col, a_col_loads=a_col_loads, epilogue=plan_stage(plan),
                         dequantized=plan.quant is not None,
                         fp8_a=not reads_a_as_stored(plan), walk=tile.walk if plan.grouped else None,
                         split=plan.split_k, stream_k=plan.stream_k, bk=tile.workgroup[2] if plan.stream_k else 0,
                         swizzle=tile.swizzle if plan.stream_k else 1, reduce_local=plan.reduce_workgroup_size,
                         dialect=dialect, b_type=_b_type(plan))


def _b_type(plan) -> str | None:
    """B's type where it is A's other signedness (:data:`MIXED_SIGNS`), else None."""
    t = plan.config.types
    return t.b if not plan.quant and (t.a, t.b) in MIXED_SIGNS else None


def render_kernel(kernel: CoopmatKernel) -> str:
    """SPIR-V assembly text of one kernel (for spirv-as)."""
    return environment().get_template(TEMPLATE).render(k=kernel)


def render_coopmat(plan, family: str = "amx", dialect: str = "khr") -> str:
    """SPIR-V assembly text of a plan's kernel (its entry point is ``plan.name``) in the tiles of ``family`` and
    the words of ``dialect``."""
    return render_kernel(coopmat_kernel(plan, family=family, dialect=dialect))


def probe_kernel(dialect: str, ab: str = "bf16") -> CoopmatKernel:
    """The known-good kernel a compiler's dialect is probed with: one sub-group, one 8 x 16 accumulator tile over
    k-steps of the smaller k-step, in Xe's tiles (xegemm.evaluate.aot.coopmat_dialect)."""
    return CoopmatKernel("xegemm_coopmat_probe", ab, 16, 1, 1, 8, TILE_N, 8, TILE_N, TYPES[ab][5], dialect=dialect)


def pack_b(b_bytes: np.ndarray, k: int, n: int, ab: str, layout: str = "row") -> np.ndarray:
    """B's storage as the kernel reads it: K x N bytes (row-major: batch, K, N * element bytes, as
    xegemm.verify.dense's operands; ``layout`` col: batch, N, K * element bytes, transposed here) VNNI-packed, per
    batch ``[ceil(K/v)][N*v]`` elements, zero rows padding K to a multiple of v: packed[r][v*c + i] = B[v*r + i][c]
    (intel/llvm sycl_ext_intel_matrix.asciidoc, ext_intel_packed).  Returns uint8 (batch, ceil(K/v),
    N * v * element bytes), whatever B's layout."""
    _, bits, v, *_ = TYPES[ab]
    eb = bits // 8
    if layout == "col":
        view = np.ascontiguousarray(b_bytes).reshape(-1, n, k, eb).transpose(0, 2, 1, 3)
    else:
        view = np.ascontiguousarray(b_bytes).reshape(-1, k, n, eb)
    batch, kp = view.shape[0], -(-k // v) * v
    padded = np.zeros((batch, kp, n, eb), np.uint8)
    padded[:, :k] = view
    packed = padded.reshape(batch, kp // v, v, n, eb).transpose(0, 1, 3, 2, 4)
    return np.ascontiguousarray(packed).reshape(batch, kp // v, n * v * eb)


def dequantized_b(config, b_bytes: np.ndarray, quant: dict | None, k: int, n: int) -> np.ndarray:
    """A quantized B dequantized in numpy into the compute type (bf16 or f16) by the format's own codec
    (xegemm.quant.dequantize: ``round_to_bf16((q - z) * s)``, the values every lowering multiplies; the reference
    of the device packer, xegemm.lowering.coopmat_pack): from its arrays
    as a kernel takes them (``b_bytes``: the stored weights, batch x rows x bytes; ``quant``: the scales' and zeros'
    bytes, batch after batch).  Returns uint8 (batch, K, N * 2), row-major bits of the compute type (bf16 or
    f16)."""
    spec = operand_spec(config, "b")
    want = FORMATS[spec.format].arrays(spec, k, n)
    weights = np.ascontiguousarray(b_bytes).reshape(-1)
    per_batch = {name: int(np.prod(w.shape)) * np.dtype(w.dtype).itemsize for name, w in want.items()}
    batch = weights.size // per_batch["qweight"]
    sources = {"qweight": weights}
    for name in want:
        if name != "qweight":
            key = "scales" if name == "scales" else "zeros"
            if quant is None or quant.get(key) is None:
                raise XegemmError(f"coopmat: the quantized B's {name} are needed to dequantize it")
            sources[name] = np.ascontiguousarray(quant[key]).reshape(-1).view(np.uint8)
    out = []
    for i in range(batch):
        arrays = {name: sources[name][i * per_batch[name]:(i + 1) * per_batch[name]].view(w.dtype)
                  .reshape(w.shape) for name, w in want.items()}
        values = dequantize(QuantizedMatrix.from_arrays(spec, k, n, arrays), compute_type(config.types))
        out.append(np.ascontiguousarray(values).view(np.uint8).reshape(k, n * 2))
    return np.stack(out)


def packed_b_batch_stride(k: int, ldb: int, ab: str) -> int:
    """Bytes between two batches of :func:`pack_b`'s output (K rounded up to a multiple of v)."""
    v = TYPES[ab][2]
    return -(-k // v) * v * ldb


_NOT_WIRED = ("the coopmat lowering renders a whole SPIR-V kernel (Lowering.render_plan: "
              "xegemm.lowering.coopmat.render_coopmat, built with xegemm.runtime.spirv.build_spirv), not OpenCL C "
              "atoms")


def make_lowering_class(base):
    """The coopmat Lowering class on ``base`` (xegemm.lowering.Lowering), registered by the package."""

    class CoopmatLowering(base):
        """SPIR-V cooperative matrices (this module): the whole kernel is one template, so the atom hooks refuse
        with what to call instead."""

        name = "coopmat"
        stages_kstep = False
        rolls_epilogue = False
        source_kind = "spirv"
        source_suffix = ".spvasm"
        pinned = True

        def render_copies(self, atoms) -> str:
            raise XegemmError(_NOT_WIRED)

        @classmethod
        def render_mma(cls, atoms) -> str:
            raise XegemmError(_NOT_WIRED)

        def check_surfaces(self, plan) -> None:
            why = plan_violation(plan, self.tiles, self.dialect)
            if why:
                raise PlanRejected(why)

        def render(self, plan) -> str:
            """SPIR-V assembly of the plan's kernel (:func:`render_coopmat`)."""
            return render_coopmat(plan)

        tiles = "amx"     # the tile family (TILE_FAMILIES): amx for the CPU runtime, xe for GPU builds (for_xe)
        dialect = "khr"   # the SPIR-V words (DIALECTS): legacy for a GPU compiler without the KHR opcodes

        @classmethod
        def for_xe(cls, dialect: str = "khr"):
            """The lowering as Intel GPUs' compiler takes it (8-row A tiles) in the words of ``dialect`` (what
            xegemm.evaluate.aot.coopmat_dialect found the compiler takes): ``xegemm build --lowering coopmat``."""
            lowering = cls()
            lowering.tiles, lowering.dialect = "xe", dialect
            return lowering

        def render_plan(self, plan, opencl_c, **options) -> str:
            if options.get("mma_lowering") or options.get("staged") is False:
                raise XegemmError("the coopmat lowering renders its kernel whole: no mma_lowering, no unstaged form")
            return render_coopmat(plan, self.tiles, self.dialect)

        def kernel_of(self, plan) -> CoopmatKernel:
            return coopmat_kernel(plan, family=self.tiles, dialect=self.dialect)

        def b_pack_factor(self, plan) -> int | None:
            ab = operand_type(plan)
            return TYPES[ab][2] if ab in TYPES else None

        def dequantizes_a(self, plan) -> bool:
            return not reads_a_as_stored(plan)

        def local_memory_bytes(self, plan) -> int | None:
            return self.kernel_of(plan).local_bytes

        def build_options(self, grf: int) -> str:
            return ""        # a SPIR-V module: no OpenCL C options

    return CoopmatLowering


def kernel_arguments(m: int, n: int, k: int, batch: int, ab: str, buffers: dict, alpha: float = 1.0,
                     beta: float = 0.0, out: str | None = None, clamp: tuple[float, float] = (0.0, 0.0),
                     a_layout: str = "row", dequantized: bool = False) -> list:
    """The kernel's argument values in :data:`PARAMETERS` order for a compact problem (as xegemm.kernel.arguments
    computes them, B's batch stride that of :func:`pack_b`); ``buffers``: A, B (packed), D, C, bias; ``out``: D's
    type (the accumulator's by default); ``a_layout``: A's (col: K rows of M elements); ``dequantized``: a kernel of
    a quantized B (:data:`QUANT_PARAMETERS` follow, bound to the bias buffer: the kernel does not read them)."""
    eb = TYPES[ab][1] // 8
    lda = (k if a_layout == "row" else m) * eb
    ldb, ldc = n * eb, n * dtype(out or TYPES[ab][0]).bits // 8
    i, l_, f = ctypes.c_int, ctypes.c_long, ctypes.c_float
    return [buffers["A"], buffers["B"], buffers["D"], i(m), i(n), i(k), i(lda), i(ldb), i(ldc),
            l_(lda * (m if a_layout == "row" else k)), l_(packed_b_batch_stride(k, ldb, ab)), l_(ldc * m),
            buffers["C"], buffers["bias"], f(alpha), f(beta), f(clamp[0]), f(clamp[1])] \
        + ([buffers["bias"], buffers["bias"], l_(0), l_(0)] if dequantized else [])
