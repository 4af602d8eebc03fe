"""A reference interpreter of the coopmat lowering's SPIR-V: runs a module's kernel on the host by the semantics
the SPIR-V specification and its cooperative-matrix extensions give each instruction, so that what a module
computes can be checked against numpy on any machine, including those whose OpenCL runtime cannot run
cooperative matrices (a CPU without AMX) and for modules built only for GPUs (8-row tiles, f16, tf32).

It is not a device: it says what the module means, not what a device or its compiler makes of it (a compiler
bug shows as a device result that differs from the interpreter's), and nothing it runs is ever timed or reported
as a device run (docs/lowerings.md "The reference interpreter").

What it takes is the subset of SPIR-V that templates/spirv/gemm.spvasm.j2 writes in the KHR dialect (the legacy
SPV_INTEL_joint_matrix words are raw opcodes it refuses by name); any other instruction is an
:class:`InterpreterError` naming it.  Its semantics, per instruction family:

- integers are bit patterns of their width (SPIR-V's OpTypeInt signedness is only a hint; the opcode says how
  the bits are read: OpSLessThan, OpSDiv, OpSConvert, ...), floats are numpy scalars of their width, so that f32
  arithmetic rounds as f32;
- memory is bytes: each buffer argument (a numpy uint8 array, written in place), each work-group's Workgroup
  variables (filled with 0xFF at the start of the work-group: a read of local memory nobody wrote is NaN or
  all ones, never a convenient 0), each work-item's Function variables; every access is bounds-checked
  against its buffer, so a kernel that reads or writes outside one fails with where and by how much;
- work-items run one after another (a valid schedule: OpenCL promises no other order) until they reach a
  convergent instruction: a sub-group barrier or cooperative-matrix load, store or multiply-add waits for every
  work-item of its sub-group, a work-group barrier for the work-group; the sub-group's operands must be the same
  in every work-item (they are sub-group uniform by the extension), else the module is wrong and the
  interpreter says so, as it does when work-items diverge at one (a deadlock);
- cooperative matrices (SPV_KHR_cooperative_matrix) are whole ``rows x cols`` arrays of the component type:
  OpCooperativeMatrixLoadKHR / StoreKHR with layout RowMajorKHR (0) ``element (r, c) at r * stride + c``,
  ColumnMajorKHR (1) ``at c * stride + r``, and Intel's PackedINTEL (2, SPV_INTEL_joint_matrix), the VNNI layout
  of a B operand ``element (k, n) at (k / v) * stride + n * v + k % v`` with ``v`` = 4 bytes / the element's bytes;
  the stride counts elements of the pointer's type.  OpCooperativeMatrixMulAddKHR computes ``A x B + C`` with the
  operands word read as the extensions define it: MatrixASignedComponentsKHR 0x1, MatrixBSignedComponentsKHR 0x2
  (8-bit components read as signed), MatrixAAndBTF32ComponentsINTEL 0x20 (f32 components rounded to TF32,
  to nearest even), MatrixAAndBBFloat16ComponentsINTEL 0x40 (16-bit components read as bf16); integer sums wrap
  at 32 bits, float products are summed in float64 and rounded to the accumulator's type once per multiply-add
  (a device's order of summation differs within the verifier's tolerance).

Sources: the SPIR-V 1.6 specification (instruction semantics); SPV_KHR_cooperative_matrix (the matrix type, its
loads, stores and multiply-add operands); SPV_INTEL_joint_matrix (PackedINTEL, the bf16 and tf32 operands);
the OpenCL SPIR-V environment specification (built-in variables, sub-groups of consecutive local ids).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from xegemm.errors import XegemmError

LAYOUT_ROW, LAYOUT_COL, LAYOUT_PACKED = 0, 1, 2
SCOPE_WORKGROUP, SCOPE_SUBGROUP = 2, 3
A_SIGNED, B_SIGNED, AB_TF32, AB_BF16 = 0x1, 0x2, 0x20, 0x40
POISON = 0xFF                         # the byte a work-group's local memory starts as
MAX_STEPS = 200_000_000               # instructions of one launch before it is taken for a hang
_TERMINATORS = ("OpBranch", "OpBranchConditional", "OpReturn", "OpUnreachable")
# module-level instructions that say nothing the interpreter needs (beyond those it reads)
_MODULE_WORDS = ("OpCapability", "OpExtension", "OpMemoryModel", "OpExecutionMode", "OpDecorate", "OpName",
                 "OpSource", "OpSourceExtension", "OpModuleProcessed")
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[^\s]+')


class InterpreterError(XegemmError):
    """The module cannot be interpreted (an instruction outside the subset) or is wrong by the semantics above
    (an access out of bounds, a convergent instruction not reached by its whole sub-group, ...)."""


# -- types ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Number:
    width: int
    kind: ClassVar[str]      # the numpy kind: integers are unsigned bit patterns

    @property
    def size(self) -> int:
        return self.width // 8

    @property
    def dtype(self):
        return np.dtype(f"<{self.kind}{self.size}")


class Int(_Number):
    kind = "u"


class Float(_Number):
    kind = "f"


@dataclass(frozen=True)
class Other:              # void, bool, function types: no memory
    what: str


@dataclass(frozen=True)
class Vector:
    component: object
    count: int


@dataclass(frozen=True)
class Array:
    element: object
    length: int

    @property
    def size(self) -> int:
        return self.element.size * self.length


@dataclass(frozen=True)
class Pointer:
    storage: str
    pointee: object


@dataclass(frozen=True)
class Matrix:
    component: object
    scope: int
    rows: int
    cols: int
    use: int


class Cell:
    """A Function or Input variable: one value, not bytes (a cooperative matrix lives in one)."""

    __slots__ = ("value",)

    def __init__(self, value=None):
        self.value = value


@dataclass(frozen=True)
class Ptr:
    """A pointer into bytes: ``memory`` (a numpy uint8 array), a byte offset, and the buffer's name for errors."""

    memory: np.ndarray
    offset: int
    name: str

    def moved(self, nbytes: int) -> Ptr:
        return Ptr(self.memory, self.offset + nbytes, self.name)

    def span(self, start: int, nbytes: int) -> None:
        if start < 0 or start + nbytes > self.memory.size:
            raise InterpreterError(f"an access of {nbytes} bytes at byte {start} of {self.name}, which has "
                                   f"{self.memory.size}: out of bounds")

    def load(self, t):
        self.span(self.offset, t.size)
        raw = self.memory[self.offset:self.offset + t.size].view(t.dtype)[0]
        return int(raw) if isinstance(t, Int) else raw

    def store(self, t, value) -> None:
        self.span(self.offset, t.size)
        self.memory[self.offset:self.offset + t.size] = np.array([value], t.dtype).view(np.uint8)

    def same(self, other) -> bool:
        return isinstance(other, Ptr) and other.memory is self.memory and other.offset == self.offset


# -- parsing -------------------------------------------------------------------------------------------------
@dataclass
class Instruction:
    op: str
    result: str | None
    args: list[str]
    line: int


@dataclass
class Block:
    label: str
    phis: list[Instruction]
    body: list[Instruction]
    end: Instruction


@dataclass
class Function:
    name: str
    params: list[Instruction]
    blocks: dict[str, Block]
    first: str


def _parse_lines(text: str) -> list[Instruction]:
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        tokens = _TOKEN.findall(raw)
        for i, tok in enumerate(tokens):
            if tok.startswith(";"):
                tokens = tokens[:i]
                break
        if not tokens:
            continue
        result = None
        if len(tokens) > 2 and tokens[1] == "=":
            result, tokens = tokens[0], tokens[2:]
        out.append(Instruction(tokens[0], result, tokens[1:], number))
    return out


def _literal(token: str, t) -> object:
    if isinstance(t, Float):
        value = float.fromhex(token) if "0x" in token.lower() else float(token)
        return t.dtype.type(value)
    value = int(token, 0)
    return value & ((1 << t.width) - 1) if isinstance(t, Int) else value


class Module:
    """A parsed module: its types, constants, module-scope variables, built-ins and functions."""

    def __init__(self, text: str):
        self.types: dict[str, object] = {}
        self.constants: dict[str, object] = {}
        self.type_of: dict[str, object] = {}
        self.variables: dict[str, Instruction] = {}
        self.builtins: dict[str, str] = {}
        self.entries: dict[str, str] = {}
        self.local_size: dict[str, tuple[int, ...]] = {}
        self.functions: dict[str, Function] = {}
        self.ext: dict[str, str] = {}
        function = block = None
        pending: list[Instruction] = []
        for ins in _parse_lines(text):
            op, a = ins.op, ins.args
            if op.startswith("!"):
                raise InterpreterError(f"line {ins.line}: raw opcode {op} (the legacy SPV_INTEL_joint_matrix "
                                       "dialect?): the interpreter takes the KHR dialect only")
            if function is not None:
                if op == "OpFunctionParameter":
                    self.type_of[ins.result] = self.types[a[0]]
                    function.params.append(ins)
                elif op == "OpLabel":
                    block, pending = ins.result, []
                    function.first = function.first or block
                elif op == "OpFunctionEnd":
                    self.functions[function.name] = function
                    function = None
                elif op in _TERMINATORS:
                    phis = [i for i in pending if i.op == "OpPhi"]
                    body = [i for i in pending if i.op != "OpPhi"]
                    function.blocks[block] = Block(block, phis, body, ins)
                else:
                    if ins.result is not None and a:
                        self.type_of[ins.result] = self.types.get(a[0])
                    pending.append(ins)
                continue
            if op == "OpFunction":
                function = Function(ins.result, [], {}, "")
            elif op == "OpTypeInt":
                self.types[ins.result] = Int(int(a[0]))
            elif op == "OpTypeFloat":
                self.types[ins.result] = Float(int(a[0]))
            elif op in ("OpTypeVoid", "OpTypeBool", "OpTypeFunction"):
                self.types[ins.result] = Other(op)
            elif op == "OpTypeVector":
                self.types[ins.result] = Vector(self.types[a[0]], int(a[1]))
            elif op == "OpTypeArray":
                self.types[ins.result] = Array(self.types[a[0]], self.constants[a[1]])
            elif op == "OpTypePointer":
                self.types[ins.result] = Pointer(a[0], self.types[a[1]])
            elif op == "OpTypeCooperativeMatrixKHR":
                self.types[ins.result] = Matrix(self.types[a[0]], *(self.constants[x] for x in a[1:5]))
            elif op == "OpConstant":
                self.constants[ins.result] = _literal(a[1], self.types[a[0]])
                self.type_of[ins.result] = self.types[a[0]]
            elif op == "OpVariable":
                self.variables[ins.result] = ins
                self.type_of[ins.result] = self.types[a[0]]
            elif op == "OpDecorate" and a[1] == "BuiltIn":
                self.builtins[a[0]] = a[2]
            elif op == "OpEntryPoint":
                self.entries[a[2].strip('"')] = a[1]
            elif op == "OpExecutionMode" and a[1] == "LocalSize":
                self.local_size[a[0]] = tuple(int(x) for x in a[2:5])
            elif op == "OpExtInstImport":
                self.ext[ins.result] = a[0].strip('"')
            elif op not in _MODULE_WORDS:
                raise InterpreterError(f"line {ins.line}: {op} is outside the interpreter's subset")


# -- the instructions ----------------------------------------------------------------------------------------
def _signed(x: int, width: int) -> int:
    return x - (1 << width) if x >> (width - 1) else x


def _tf32(x: np.ndarray) -> np.ndarray:
    """f32 values rounded to TF32 (10 mantissa bits), to nearest even."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000
    return bits.astype(np.uint32).view(np.float32)


_EXT = {   # OpenCL.std on float operands (the OpenCL C functions of the same names, in the operands' type)
    "fmax": np.fmax, "fmin": np.fmin, "fabs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "rsqrt": lambda x: type(x)(1) / np.sqrt(x), "tanh": np.tanh, "sinh": np.sinh, "cosh": np.cosh,
    "erf": lambda x: type(x)(math.erf(float(x))), "erfc": lambda x: type(x)(math.erfc(float(x))), "rint": np.rint, "floor": np.floor, "ceil": np.ceil,
    "trunc": np.trunc, "pow": np.power, "exp2": np.exp2, "log2": np.log2, "sin": np.sin, "cos": np.cos,
}
_EXT_INT = {   # OpenCL.std on integers: s_ reads the bits as signed, u_ as unsigned
    "s_min": min, "s_max": max, "u_min": min, "u_max": max, "s_abs": abs, "u_abs": abs,
    "s_clamp": lambda x, lo, hi: min(max(x, lo), hi), "u_clamp": lambda x, lo, hi: min(max(x, lo), hi),
}

_COMPARE = {
    "OpIEqual": (False, lambda a, b: a == b), "OpINotEqual": (False, lambda a, b: a != b),
    "OpULessThan": (False, lambda a, b: a < b), "OpULessThanEqual": (False, lambda a, b: a <= b),
    "OpUGreaterThan": (False, lambda a, b: a > b), "OpUGreaterThanEqual": (False, lambda a, b: a >= b),
    "OpSLessThan": (True, lambda a, b: a < b), "OpSLessThanEqual": (True, lambda a, b: a <= b),
    "OpSGreaterThan": (True, lambda a, b: a > b), "OpSGreaterThanEqual": (True, lambda a, b: a >= b),
}
_INT_BINARY = {
    "OpIAdd": lambda a, b, w: a + b, "OpISub": lambda a, b, w: a - b, "OpIMul": lambda a, b, w: a * b,
    "OpBitwiseAnd": lambda a, b, w: a & b, "OpBitwiseOr": lambda a, b, w: a | b,
    "OpBitwiseXor": lambda a, b, w: a ^ b,
    "OpShiftLeftLogical": lambda a, b, w: a << b, "OpShiftRightLogical": lambda a, b, w: a >> b,
    "OpShiftRightArithmetic": lambda a, b, w: _signed(a, w) >> b,
}
_FLOAT_BINARY = {"OpFAdd": lambda a, b: a + b, "OpFSub": lambda a, b: a - b, "OpFMul": lambda a, b: a * b,
                 "OpFDiv": lambda a, b: a / b, "OpFRem": np.fmod,
                 "OpFOrdEqual": lambda a, b: bool(a == b), "OpFOrdLessThan": lambda a, b: bool(a < b),
                 "OpFOrdLessThanEqual": lambda a, b: bool(a <= b), "OpFOrdGreaterThan": lambda a, b: bool(a > b),
                 "OpFOrdGreaterThanEqual": lambda a, b: bool(a >= b),
                 "OpFUnordNotEqual": lambda a, b: bool(not a == b)}


def _float_to_int(width: int, signed: bool, x: str):
    """OpConvertFToS / FToU: toward zero; a value the type cannot hold (NaN, out of range) is undefined in SPIR-V
    and gives what x86's conversions give, the "integer indefinite" (the sign bit alone; 0 unsigned)."""
    lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed else (0, (1 << width) - 1)
    mask, indefinite = (1 << width) - 1, (1 << (width - 1)) if signed else 0

    def convert(v):
        f = float(v[x])
        if math.isnan(f) or not lo <= math.trunc(f) <= hi:
            return indefinite
        return math.trunc(f) & mask
    return convert


def _divide(op: str, a: int, b: int, w: int) -> int:
    if b == 0:
        raise InterpreterError(f"{op} by zero")
    if op in ("OpUDiv", "OpUMod"):
        return a // b if op == "OpUDiv" else a % b
    sa, sb = _signed(a, w), _signed(b, w)
    q = abs(sa) // abs(sb) * (1 if (sa < 0) == (sb < 0) else -1)
    return q if op == "OpSDiv" else sa - q * sb


class _Compiler:
    """Turns each instruction of a function into a closure over the work-item's value table: ``step(values)``
    for the plain ones, ``(prepare, resolve)`` for the convergent ones (see :class:`Launch`)."""

    def __init__(self, module: Module):
        self.m = module

    def type(self, name: str):
        return self.m.types[name]

    def plain(self, ins: Instruction):
        op, a, m = ins.op, ins.args, self.m
        if op in _INT_BINARY:
            f, w = _INT_BINARY[op], self.type(a[0]).width
            mask, x, y = (1 << w) - 1, a[1], a[2]
            return lambda v: f(v[x], v[y], w) & mask
        if op in ("OpUDiv", "OpUMod", "OpSDiv", "OpSRem"):
            w, x, y = self.type(a[0]).width, a[1], a[2]
            mask = (1 << w) - 1
            return lambda v: _divide(op, v[x], v[y], w) & mask
        if op in _COMPARE:
            signed, f = _COMPARE[op]
            x, y = a[1], a[2]
            if signed:
                w = m.type_of[x].width
                return lambda v: f(_signed(v[x], w), _signed(v[y], w))
            return lambda v: f(v[x], v[y])
        if op in _FLOAT_BINARY:
            f, x, y = _FLOAT_BINARY[op], a[1], a[2]
            return lambda v: f(v[x], v[y])
        if op == "OpFNegate":
            x = a[1]
            return lambda v: -v[x]
        if op in ("OpSNegate", "OpNot"):
            mask, x = (1 << self.type(a[0]).width) - 1, a[1]
            return (lambda v: -v[x] & mask) if op == "OpSNegate" else (lambda v: ~v[x] & mask)
        if op in ("OpConvertFToS", "OpConvertFToU"):
            return _float_to_int(self.type(a[0]).width, op == "OpConvertFToS", a[1])
        if op == "OpIsNan":
            x = a[1]
            return lambda v: bool(np.isnan(v[x]))
        if op == "OpLogicalAnd":
            x, y = a[1], a[2]
            return lambda v: v[x] and v[y]
        if op == "OpLogicalOr":
            x, y = a[1], a[2]
            return lambda v: v[x] or v[y]
        if op == "OpLogicalNot":
            x = a[1]
            return lambda v: not v[x]
        if op == "OpSelect":
            c, x, y = a[1], a[2], a[3]
            return lambda v: v[x] if v[c] else v[y]
        if op == "OpCopyObject":
            x = a[1]
            return lambda v: v[x]
        if op == "OpUConvert":
            mask, x = (1 << self.type(a[0]).width) - 1, a[1]
            return lambda v: v[x] & mask
        if op == "OpSConvert":
            mask, x, w = (1 << self.type(a[0]).width) - 1, a[1], m.type_of[a[1]].width
            return lambda v: _signed(v[x], w) & mask
        if op in ("OpConvertUToF", "OpConvertSToF"):
            t, x = self.type(a[0]), a[1]
            w = m.type_of[x].width
            signed = op == "OpConvertSToF"
            return lambda v: t.dtype.type(_signed(v[x], w) if signed else v[x])
        if op == "OpBitcast":
            t, s = self.type(a[0]), m.type_of[a[1]]
            x = a[1]
            if isinstance(t, Int):
                return lambda v: int(np.array([v[x]], s.dtype).view(t.dtype)[0])
            return lambda v: np.array([v[x]], s.dtype).view(t.dtype)[0]
        if op == "OpCompositeExtract":
            x, index = a[1], int(a[2])
            return lambda v: v[x][index]
        if op == "OpCompositeConstruct":
            t, parts = self.type(a[0]), a[1:]
            if isinstance(t, Matrix):
                x = parts[0]
                return lambda v: np.full((t.rows, t.cols), v[x], t.component.dtype)
            return lambda v: tuple(v[p] for p in parts)
        if op == "OpExtInst":
            if m.ext.get(a[1]) != "OpenCL.std":
                raise InterpreterError(f"line {ins.line}: extended instructions of {a[1]} are not known")
            name, xs = a[2], a[3:]
            if name in _EXT_INT:
                f, w = _EXT_INT[name], self.type(a[0]).width
                if name.startswith("s_"):
                    mask = (1 << w) - 1
                    return lambda v: f(*(_signed(v[x], w) for x in xs)) & mask
                return lambda v: f(*(v[x] for x in xs))
            if name not in _EXT:
                raise InterpreterError(f"line {ins.line}: OpenCL.std {name} is outside the interpreter's subset")
            f, t = _EXT[name], self.type(a[0])
            return lambda v: t.dtype.type(f(*(v[x] for x in xs)))
        if op == "OpVariable":
            if a[1] != "Function":
                raise InterpreterError(f"line {ins.line}: a {a[1]} variable inside a function")
            return lambda v: Cell()
        if op == "OpLoad":
            t, p = self.type(a[0]), a[1]
            if isinstance(m.type_of[p].pointee, (Matrix, Vector)) or m.type_of[p].storage in ("Function", "Input"):
                def load_cell(v, p=p, line=ins.line):
                    value = v[p].value
                    if value is None:
                        raise InterpreterError(f"line {line}: a load of a variable never stored")
                    return value
                return load_cell
            return lambda v: v[p].load(t)
        if op == "OpStore":
            p, x = a[0], a[1]
            t = m.type_of[p].pointee
            if m.type_of[p].storage in ("Function", "Input"):
                def store_cell(v):
                    v[p].value = v[x]
                return store_cell
            return lambda v: v[p].store(t, v[x])
        if op in ("OpInBoundsPtrAccessChain", "OpPtrAccessChain", "OpInBoundsAccessChain", "OpAccessChain"):
            base, indexes = a[1], a[2:]
            t = m.type_of[base].pointee
            steps = []
            if op.endswith("PtrAccessChain"):
                steps.append(t.size)
                indexes_t = indexes[1:]
            else:
                indexes_t = indexes
            for _ in indexes_t:
                if not isinstance(t, Array):
                    raise InterpreterError(f"line {ins.line}: an access chain into {t}")
                t = t.element
                steps.append(t.size)
            widths = [m.type_of[i].width for i in indexes]
            return lambda v: v[base].moved(sum(_signed(v[i], w) * s for i, w, s in zip(indexes, widths, steps)))
        if op == "OpAtomicIIncrement":
            p, t = a[1], self.type(a[0])
            mask = (1 << t.width) - 1

            def increment(v):
                old = v[p].load(t)
                v[p].store(t, (old + 1) & mask)
                return old
            return increment
        raise InterpreterError(f"line {ins.line}: {op} is outside the interpreter's subset")


# -- convergent instructions -----------------------------------------------------------------------------------
def _element_offsets(t: Matrix, layout: int, stride: int, line: int) -> np.ndarray:
    r, c = np.meshgrid(np.arange(t.rows), np.arange(t.cols), indexing="ij")
    if layout == LAYOUT_ROW:
        return r * stride + c
    if layout == LAYOUT_COL:
        return c * stride + r
    if layout == LAYOUT_PACKED:
        v = max(1, 4 // t.component.size)
        return (r // v) * stride + c * v + r % v
    raise InterpreterError(f"line {line}: matrix layout {layout} is not known")


def _bytes_of(ptr: Ptr, t: Matrix, layout: int, stride: int, line: int) -> np.ndarray:
    size = t.component.size
    at = ptr.offset + _element_offsets(t, layout, stride, line) * size
    lo, hi = int(at.min()), int(at.max()) + size
    ptr.span(lo, hi - lo)
    return at[..., None] + np.arange(size)


def _matrix_load(t: Matrix, ptr: Ptr, layout: int, stride: int, line: int) -> np.ndarray:
    index = _bytes_of(ptr, t, layout, stride, line)
    return ptr.memory[index].reshape(t.rows, t.cols * t.component.size).view(t.component.dtype)


def _matrix_store(t: Matrix, ptr: Ptr, value: np.ndarray, layout: int, stride: int, line: int) -> None:
    index = _bytes_of(ptr, t, layout, stride, line)
    ptr.memory[index] = np.ascontiguousarray(value, t.component.dtype).view(np.uint8).reshape(index.shape)


def _operand(x: np.ndarray, flags: int, signed_bit: int) -> np.ndarray:
    if flags & AB_BF16:
        return (x.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if flags & AB_TF32:
        return _tf32(x).astype(np.float64)
    if x.dtype.kind == "f":
        return x.astype(np.float64)
    if flags & signed_bit:
        return x.view(f"i{x.dtype.itemsize}").astype(np.int64)
    return x.astype(np.int64)


def _mul_add(t: Matrix, a: np.ndarray, b: np.ndarray, c: np.ndarray, flags: int) -> np.ndarray:
    x, y = _operand(a, flags, A_SIGNED), _operand(b, flags, B_SIGNED)
    if t.component.dtype.kind == "f":
        return (x @ y + c.astype(np.float64)).astype(t.component.dtype)
    w = t.component.width
    total = (x @ y + c.view(f"i{c.dtype.itemsize}").astype(np.int64)) & ((1 << w) - 1)
    return total.astype(t.component.dtype)


@dataclass
class _Wait:
    """What a work-item waits at: the instruction, its scope, and its operands (compared across the scope)."""

    ins: Instruction
    scope: int
    operands: tuple


class _Convergent:
    def __init__(self, module: Module):
        self.m = module

    def prepare(self, ins: Instruction):
        """(scope, operands of a work-item) for a convergent instruction, or None for a plain one."""
        op, a, m = ins.op, ins.args, self.m
        if op == "OpControlBarrier":
            scope = m.constants[a[0]]
            if scope not in (SCOPE_WORKGROUP, SCOPE_SUBGROUP):
                raise InterpreterError(f"line {ins.line}: a barrier of scope {scope}")
            return lambda v: (scope, ())
        if op == "OpCooperativeMatrixLoadKHR":
            p, layout, stride = a[1], m.constants[a[2]], a[3]
            return lambda v: (SCOPE_SUBGROUP, (v[p], layout, v[stride]))
        if op == "OpCooperativeMatrixStoreKHR":
            p, x, layout, stride = a[0], a[1], m.constants[a[2]], a[3]
            return lambda v: (SCOPE_SUBGROUP, (v[p], v[x], layout, v[stride]))
        if op == "OpCooperativeMatrixMulAddKHR":
            flags = int(a[4].lstrip("!"), 0) if len(a) > 4 else 0
            x, y, z = a[1], a[2], a[3]
            return lambda v: (SCOPE_SUBGROUP, (v[x], v[y], v[z], flags))
        return None

    def resolve(self, ins: Instruction, operands: tuple):
        """The instruction's result, once for its sub-group (or work-group)."""
        op = ins.op
        if op == "OpControlBarrier":
            return None
        if op == "OpCooperativeMatrixLoadKHR":
            ptr, layout, stride = operands
            return _matrix_load(self.m.types[ins.args[0]], ptr, layout, stride, ins.line)
        if op == "OpCooperativeMatrixStoreKHR":
            ptr, value, layout, stride = operands
            t = self.m.type_of[ins.args[1]]
            _matrix_store(t, ptr, value, layout, stride, ins.line)
            return None
        a, b, c, flags = operands
        return _mul_add(self.m.types[ins.args[0]], a, b, c, flags)


def _same(x, y) -> bool:
    if isinstance(x, Ptr):
        return x.same(y)
    if isinstance(x, np.ndarray):
        return x is y or (isinstance(y, np.ndarray) and x.shape == y.shape
                          and np.array_equal(x.view(np.uint8), y.view(np.uint8)))
    return x == y


# -- a launch ----------------------------------------------------------------------------------------------------
@dataclass
class _Code:
    """A function compiled for the interpreter: per block, its phis, its steps and its branch."""

    blocks: dict
    first: str
    params: list


class Program:
    """A module ready to launch: ``Program(text).launch(entry, args, global_size, local_size)``."""

    def __init__(self, text: str, subgroup_size: int = 16):
        self.module = Module(text)
        self.subgroup_size = subgroup_size
        self._code: dict[str, _Code] = {}
        self._convergent = _Convergent(self.module)

    def _compiled(self, fid: str) -> _Code:
        if fid in self._code:
            return self._code[fid]
        fn, plain, conv = self.module.functions[fid], _Compiler(self.module), self._convergent
        blocks = {}
        for label, block in fn.blocks.items():
            phis = [(i.result, dict(zip(i.args[2::2], i.args[1::2]))) for i in block.phis]
            steps = []
            for ins in block.body:
                prepare = conv.prepare(ins)
                steps.append((ins, prepare, None if prepare else plain.plain(ins)))
            blocks[label] = (phis, steps, block.end)
        self._code[fid] = code = _Code(blocks, fn.first, [p.result for p in fn.params])
        return code

    def _work_item(self, code: _Code, values: dict, budget: list):
        label, previous = code.first, None
        while True:
            phis, steps, end = code.blocks[label]
            if phis:
                chosen = {}
                for result, incoming in phis:
                    if previous not in incoming:
                        raise InterpreterError(f"a phi of {label} has no value from {previous}")
                    chosen[result] = values[incoming[previous]]
                values.update(chosen)
            for ins, prepare, step in steps:
                if step is not None:
                    value = step(values)
                else:
                    scope, operands = prepare(values)
                    value = yield _Wait(ins, scope, operands)
                if ins.result is not None:
                    values[ins.result] = value
            budget[0] -= len(steps) + 1
            if budget[0] < 0:
                raise InterpreterError(f"more than {MAX_STEPS} instructions: a kernel that does not end, or a "
                                       "launch too large to interpret")
            previous = label
            if end.op == "OpBranch":
                label = end.args[0]
            elif end.op == "OpBranchConditional":
                label = end.args[1] if values[end.args[0]] else end.args[2]
            elif end.op == "OpReturn":
                return
            else:
                raise InterpreterError(f"line {end.line}: {end.op} reached")

    def launch(self, entry: str, args: list, global_size, local_size=None) -> None:
        """Run the kernel ``entry`` over an OpenCL NDRange (x fastest): ``args`` in the kernel's parameter order,
        numpy arrays for pointers (read and written in place as bytes), numbers or ctypes values for scalars."""
        m = self.module
        if entry not in m.entries:
            raise InterpreterError(f"the module has no entry point {entry!r} (it has {', '.join(m.entries)})")
        fid = m.entries[entry]
        local = tuple(local_size or m.local_size.get(fid) or (1, 1, 1))
        local = (local + (1, 1, 1))[:3]
        size = (tuple(global_size) + (1, 1, 1))[:3]
        if any(g % n for g, n in zip(size, local)):
            raise InterpreterError(f"global size {size} is not a multiple of the local size {local}")
        if fid in m.local_size and m.local_size[fid] != local:
            raise InterpreterError(f"local size {local} differs from the module's LocalSize {m.local_size[fid]}")
        code = self._compiled(fid)
        if len(args) != len(code.params):
            raise InterpreterError(f"{entry} takes {len(code.params)} arguments, given {len(args)}")
        base = dict(m.constants)
        for name, value in zip(code.params, args):
            base[name] = self._argument(name, value)
        groups = tuple(s // n for s, n in zip(size, local))
        budget = [MAX_STEPS]
        try:
            with np.errstate(all="ignore"):     # IEEE results (inf, NaN) as a device gives them, no warnings
                for gz in range(groups[2]):
                    for gy in range(groups[1]):
                        for gx in range(groups[0]):
                            self._work_group(code, base, (gx, gy, gz), groups, local, budget)
        except KeyError as e:
            raise InterpreterError(f"{e.args[0]} is used where it has no value (not defined before that use)") \
                from None

    def _argument(self, name: str, value):
        t = self.module.type_of[name]
        if isinstance(t, Pointer):
            if not isinstance(value, np.ndarray) or value.dtype != np.uint8 or value.ndim != 1:
                raise InterpreterError(f"argument {name}: a 1-D numpy uint8 array, not {type(value).__name__}")
            return Ptr(value, 0, f"argument {name}")
        value = getattr(value, "value", value)
        if isinstance(t, Float):
            return t.dtype.type(value)
        return int(value) & ((1 << t.width) - 1)

    def _work_group(self, code: _Code, base: dict, group, groups, local, budget) -> None:
        m, sg = self.module, self.subgroup_size
        shared = dict(base)
        for vid, ins in m.variables.items():
            t = m.types[ins.args[0]]
            if t.storage == "Workgroup":
                memory = np.full(t.pointee.size, POISON, np.uint8)
                shared[vid] = Ptr(memory, 0, f"local variable {vid}")
        count = local[0] * local[1] * local[2]
        n_sub = -(-count // sg)
        items, waits = [], []
        for linear in range(count):
            lid = (linear % local[0], linear // local[0] % local[1], linear // (local[0] * local[1]))
            values = dict(shared)
            builtin = {"WorkgroupId": group, "NumWorkgroups": groups, "LocalInvocationId": lid,
                       "GlobalInvocationId": tuple(g * n + i for g, n, i in zip(group, local, lid)),
                       "WorkgroupSize": local, "SubgroupId": linear // sg, "SubgroupLocalInvocationId": linear % sg,
                       "SubgroupSize": sg, "NumSubgroups": n_sub, "LocalInvocationIndex": linear}
            for vid, name in m.builtins.items():
                if name not in builtin:
                    raise InterpreterError(f"built-in {name} is outside the interpreter's subset")
                values[vid] = Cell(builtin[name])
            items.append(self._work_item(code, values, budget))
            waits.append(None)
        ready = list(range(count))
        sent: dict[int, object] = {}
        done = [False] * count
        while True:
            for i in ready:
                try:
                    waits[i] = items[i].send(sent.pop(i, None)) if i in sent or waits[i] is not None \
                        else next(items[i])
                except StopIteration:
                    done[i], waits[i] = True, None
            ready = self._resolve(waits, done, count, sent, group)
            if not ready:
                if all(done):
                    return
                raise InterpreterError(self._stuck(waits, done, group))

    def _resolve(self, waits, done, count, sent, group) -> list[int]:
        """Release every sub-group (or the work-group) whose work-items all wait at one convergent instruction."""
        sg, conv = self.subgroup_size, self._convergent
        released = []
        if all(done[i] or (waits[i] is not None and waits[i].scope == SCOPE_WORKGROUP) for i in range(count)) \
                and not all(done):
            if any(done):
                raise InterpreterError(f"work-group {group}: a work-group barrier that some work-items never reach")
            first = waits[0].ins
            if any(w.ins is not first for w in waits):
                raise InterpreterError(f"work-group {group}: work-items wait at different work-group barriers "
                                       f"(lines {sorted({w.ins.line for w in waits})})")
            released = list(range(count))
            for i in released:
                sent[i], waits[i] = None, None
            return released
        for s in range(0, count, sg):
            lanes = range(s, min(s + sg, count))
            if not all(waits[i] is not None and waits[i].scope == SCOPE_SUBGROUP for i in lanes):
                continue
            first = waits[lanes[0]]
            for i in lanes:
                w = waits[i]
                if w.ins is not first.ins:
                    raise InterpreterError(f"work-group {group}, sub-group {s // sg}: its work-items reach different "
                                           f"convergent instructions (lines {first.ins.line} and {w.ins.line})")
                if not all(_same(x, y) for x, y in zip(first.operands, w.operands)):
                    raise InterpreterError(f"work-group {group}, sub-group {s // sg}, line {w.ins.line}: "
                                           f"{w.ins.op}'s operands differ between its work-items (they must be "
                                           "the same in the whole sub-group)")
            result = conv.resolve(first.ins, first.operands)
            for i in lanes:
                sent[i], waits[i] = result, None
                released.append(i)
        return released

    def _stuck(self, waits, done, group) -> str:
        lines = sorted({w.ins.line for w in waits if w is not None})
        finished = sum(done)
        return (f"work-group {group}: work-items wait at convergent instructions (lines {lines}) that their sub-group "
                f"or work-group never reaches together ({finished} of {len(done)} work-items have returned)")


def run_kernel(text: str, entry: str, args: list, global_size, local_size=None, subgroup_size: int = 16) -> None:
    """Interpret one launch of ``entry`` of the SPIR-V assembly ``text`` (:meth:`Program.launch`)."""
    Program(text, subgroup_size).launch(entry, args, global_size, local_size)
