"""SPIR-V of an epilogue's element code: the OpenCL C that :mod:`.emit` and :mod:`.stage` print for the OpenCL C
lowerings, compiled into SPIR-V assembly instructions for the coopmat lowering (docs/lowerings.md "coopmat").

Nothing here knows an op, an activation or a conversion: the element code, the activations' bodies, the NaN-keeping
helpers and the output conversions are the registries' OpenCL C (:mod:`.registry`, :mod:`.outputs`,
xegemm.library.dtypes' spellings, templates/convert.cl.j2's helpers), and this module translates the small part of
OpenCL C they are written in, mechanically and in one place:

- expressions: literals (decimal and hex floats with ``f``, integers with ``u``, ``NAN``, ``INFINITY``), names,
  casts ``(float)``, ``(uint)``, ``(uchar)`` ..., unary ``- ! ~``, ``* / + - << >> < <= > >= == != & ^ | && ||``,
  ``?:`` (both operands are computed, then selected: the code has no side effects), calls;
- calls of OpenCL C built-ins: the math functions (OpenCL.std extended instructions of the same name: ``fmax``,
  ``tanh``, ``erf`` ...; the integer ``max``/``min``/``abs`` as ``s_``/``u_`` forms), ``isnan`` (OpIsNan),
  ``as_float``/``as_uint``/``as_int`` (OpBitcast), and the saturating conversions ``convert_<t>_sat[_rte]``
  (OpenCL C 6.4.3: round to nearest even where ``_rte``, NaN to 0, out-of-range values to the type's limits);
- calls of the kernel's own ``static inline`` functions (the activations, ``xe_maximum``, the conversion
  helpers): their bodies (declarations, ``if (c) return e;``, ``return e;``) are compiled inline at each call.

Types follow C's usual arithmetic conversions over ``bool``, ``char``/``uchar`` (8 bits), ``short``/``ushort``
(16), ``int``/``uint`` (32), ``long`` (64) and ``float``; SPIR-V integers are signless, so signedness is carried
here and picks the instruction (OpSLessThan or OpULessThan, arithmetic or logical shifts, OpSConvert or
OpUConvert).  ``long`` is there for the integer formulas (xegemm.library.formula) the coopmat kernel computes the
same way, e.g. stream-K's schedule (xegemm.plan.stream_k): :func:`compile_formula`.

The module's words are laid out for a template: :attr:`Compiler.constants` (module scope, after the types the
template declares: ``%bool %u8 %u16 %u32 %u64 %f32``, and ``%ocl``, the OpenCL.std import),
:attr:`Compiler.decorations` and the function body's :attr:`Compiler.lines`.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from xegemm.errors import XegemmError

# 8- and 16-bit values are carried in 32 bits (zero- or sign-extended, as C promotes them anyway): the CPU
# runtime's compiler crashed on OpSelect and on some stores of 16-bit values (measured), so only a load or a store
# touches the narrow types (:meth:`Compiler.load`, :meth:`Compiler.store_bits`)
TYPE_IDS = {"bool": "%bool", "char": "%u32", "uchar": "%u32", "short": "%u32", "ushort": "%u32", "int": "%u32",
            "uint": "%u32", "long": "%u64", "float": "%f32"}
STORAGE_IDS = {8: "%u8", 16: "%u16", 32: "%u32"}
BITS = {"char": 8, "uchar": 8, "short": 16, "ushort": 16, "int": 32, "uint": 32, "long": 64, "float": 32,
        "bool": 1}
SIGNED = {"char", "short", "int", "long"}
UNSIGNED_OF = {"char": "uchar", "short": "ushort", "int": "uint"}
LIMITS = {"char": (-128, 127), "uchar": (0, 255), "short": (-32768, 32767), "ushort": (0, 65535),
          "int": (-2 ** 31, 2 ** 31 - 1), "uint": (0, 2 ** 32 - 1)}
FLOAT_FUNCTIONS = ("fmax", "fmin", "fabs", "exp", "log", "sqrt", "rsqrt", "tanh", "erf", "rint", "floor", "ceil",
                   "trunc", "pow", "exp2", "log2", "sin", "cos")   # OpenCL.std, same names, float operands
INT_FUNCTIONS = {"max": "max", "min": "min", "abs": "abs"}        # OpenCL.std s_/u_ forms
CTYPES = tuple(TYPE_IDS)
_TOKEN = re.compile(r"\s*(?:(?P<num>0[xX][0-9a-fA-F]*\.?[0-9a-fA-F]*[pP][-+]?\d+[fF]?|0[xX][0-9a-fA-F]+[uU]?"
                    r"|\d+\.\d*(?:[eE][-+]?\d+)?[fF]?|\d+[eE][-+]?\d+[fF]?|\.\d+(?:[eE][-+]?\d+)?[fF]?|\d+[uU]?)"
                    r"|(?P<name>[A-Za-z_]\w*)|(?P<op><<|>>|<=|>=|==|!=|&&|\|\||[-+*/%<>!~&|^?:(),]))")
_FUNCTION = re.compile(r"static\s+inline\s+(\w+)\s+(\w+)\s*\(([^)]*)\)\s*\{(.*?)\n\}", re.S)
_PRECEDENCE = {"||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6, "<": 7, "<=": 7, ">": 7, ">=": 7,
               "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10}


class SpirvCompileError(XegemmError):
    """The element code uses OpenCL C this translator does not take (the message says what)."""


@dataclass(frozen=True)
class Value:
    """An SSA value: its id and its C type."""

    id: str
    ctype: str


@dataclass(frozen=True)
class Function:
    """A ``static inline`` function of the kernel: its return type, parameters and body statements."""

    ctype: str
    params: tuple[tuple[str, str], ...]
    body: str


def parse_functions(text: str) -> dict[str, Function]:
    """The ``static inline`` functions of OpenCL C ``text`` (comments and preprocessor lines ignored)."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    out = {}
    for ret, name, params, body in _FUNCTION.findall(text):
        pairs = []
        for p in params.split(","):
            words = p.replace("const ", "").split()
            pairs.append((words[0], words[1]))
        out[name] = Function(ret, tuple(pairs), body)
    return out


class Compiler:
    """Compiles OpenCL C expressions and statements into SPIR-V instructions named ``%<prefix>...``."""

    def __init__(self, prefix: str = "x", functions: dict[str, Function] | None = None):
        self.prefix = prefix
        self.functions = dict(functions or {})
        self.lines: list[str] = []
        self.decorations: list[str] = []
        self._constants: dict[str, str] = {}
        self._scopes: list[dict[str, Value]] = [{}]
        self._count = 0

    # -- the module's parts ------------------------------------------------------------------------------------
    @property
    def constants(self) -> list[str]:
        return list(self._constants.values())

    def define(self, text: str) -> None:
        """Add the ``static inline`` functions of ``text`` (an activation's definition, a helper)."""
        self.functions.update(parse_functions(text))

    def bind(self, name: str, value: Value) -> None:
        self._scopes[-1][name] = value

    def fresh(self) -> str:
        self._count += 1
        return f"%{self.prefix}{self._count}"

    def emit(self, ctype: str, op: str, *operands: str) -> Value:
        rid = self.fresh()
        self.lines.append(f"{rid} = {op} {TYPE_IDS[ctype]} {' '.join(operands)}".rstrip())
        return Value(rid, ctype)

    def ext(self, ctype: str, name: str, *operands: str) -> Value:
        return self.emit(ctype, "OpExtInst", "%ocl", name, *operands)

    # -- constants ---------------------------------------------------------------------------------------------
    def int_constant(self, value: int, ctype: str = "int") -> Value:
        if BITS[ctype] == 64:
            word = value & 0xffffffffffffffff
            cid = f"%k64_{word:x}"
            self._constants.setdefault(cid, f"{cid} = OpConstant %u64 {word}")
            return Value(cid, ctype)
        word = value & 0xffffffff          # every narrower integer is carried in 32 bits
        cid = f"%k32_{word:x}"
        self._constants.setdefault(cid, f"{cid} = OpConstant %u32 {word}")
        return Value(cid, ctype)

    def value(self, name: str) -> Value:
        """The value a name is bound to (a declaration's, an input's)."""
        for scope in reversed(self._scopes):
            if name in scope:
                return scope[name]
        raise SpirvCompileError(f"coopmat epilogue: the name {name!r} is not bound")

    # -- the narrow types at loads and stores ------------------------------------------------------------------
    def load(self, name: str, rid: str, ctype: str) -> None:
        """Bind ``name`` to the value of ``rid``, a load of storage type ``ctype`` (its own width)."""
        if BITS[ctype] < 32:
            rid = self.emit(ctype, "OpSConvert" if ctype in SIGNED else "OpUConvert", rid).id
        self.bind(name, Value(rid, ctype))

    def store_bits(self, v: Value, ctype: str) -> str:
        """The id of ``v`` as storage type ``ctype`` (its own width), to store."""
        v = self.convert(v, ctype)
        if BITS[ctype] == 32:
            return v.id
        rid = self.fresh()
        self.lines.append(f"{rid} = OpUConvert {STORAGE_IDS[BITS[ctype]]} {v.id}")
        return rid

    def narrow(self, v: Value, ctype: str) -> Value:
        """A 32-bit integer as C's ``(ctype)`` of 8 or 16 bits leaves it: the low bits, zero- or sign-extended."""
        bits = BITS[ctype]
        if ctype in SIGNED:
            shift = self.int_constant(32 - bits, "int").id
            up = self.emit("int", "OpShiftLeftLogical", v.id, shift)
            return Value(self.emit("int", "OpShiftRightArithmetic", up.id, shift).id, ctype)
        return Value(self.emit("uint", "OpBitwiseAnd", v.id, self.int_constant((1 << bits) - 1, "uint").id).id, ctype)

    def float_constant(self, value: float) -> Value:
        word = struct.unpack("<I", struct.pack("<f", value))[0]
        if (word & 0x7f800000) == 0x7f800000:        # NaN and infinities: their bits, cast in the function
            return Value(self.emit("float", "OpBitcast", self.int_constant(word, "uint").id).id, "float")
        cid = f"%kf_{word:08x}"
        self._constants.setdefault(cid, f"{cid} = OpConstant %f32 {struct.unpack('<f', struct.pack('<I', word))[0]!r}")
        return Value(cid, "float")

    # -- conversions -------------------------------------------------------------------------------------------
    def convert(self, v: Value, ctype: str) -> Value:
        """``(ctype)v`` as C converts (float to integer truncates, as C's cast does)."""
        if v.ctype == ctype:
            return v
        if ctype == "bool":
            return self.truth(v)
        if v.ctype == "bool":
            one, zero = (self.float_constant(1.0), self.float_constant(0.0)) if ctype == "float" else \
                (self.int_constant(1, ctype), self.int_constant(0, ctype))
            return self.emit(ctype, "OpSelect", v.id, one.id, zero.id)
        if ctype == "float":
            return self.emit("float", "OpConvertSToF" if v.ctype in SIGNED else "OpConvertUToF", v.id)
        if v.ctype == "float":
            wide = "long" if BITS[ctype] == 64 else "int" if ctype in SIGNED else "uint"
            v = self.emit(wide, "OpConvertFToS" if ctype in SIGNED else "OpConvertFToU", v.id)
            return v if BITS[ctype] >= 32 else self.narrow(v, ctype)
        if BITS[ctype] == 64:               # to 64 bits: extended as the (32-bit carried) source's signedness
            return self.emit(ctype, "OpSConvert" if v.ctype in SIGNED else "OpUConvert", v.id)
        if BITS[v.ctype] == 64:             # from 64 bits: the low 32, then narrower if asked
            low = self.emit("int" if ctype in SIGNED else "uint", "OpUConvert", v.id)
            return low if BITS[ctype] == 32 else self.narrow(low, ctype)
        if BITS[ctype] == BITS[v.ctype] and BITS[ctype] < 32 and (ctype in SIGNED) != (v.ctype in SIGNED):
            return self.narrow(v, ctype)               # char <-> uchar: the same 8 bits, extended the other way
        if BITS[ctype] >= BITS[v.ctype]:
            return Value(v.id, ctype)                  # widening: the 32-bit value already is the wider one
        return self.narrow(v, ctype)                   # truncation to 8 or 16 bits

    def truth(self, v: Value) -> Value:
        if v.ctype == "bool":
            return v
        if v.ctype == "float":
            return self.emit("bool", "OpFUnordNotEqual", v.id, self.float_constant(0.0).id)
        return self.emit("bool", "OpINotEqual", v.id, self.int_constant(0, v.ctype).id)

    @staticmethod
    def _promoted(ctype: str) -> str:
        return "int" if ctype in ("bool", "char", "uchar", "short", "ushort") else ctype

    def common(self, a: Value, b: Value) -> tuple[Value, Value, str]:
        """C's usual arithmetic conversions of two operands."""
        ta, tb = self._promoted(a.ctype), self._promoted(b.ctype)
        t = "float" if "float" in (ta, tb) else "long" if "long" in (ta, tb) else \
            "uint" if "uint" in (ta, tb) else "int"
        return self.convert(a, t), self.convert(b, t), t

    # -- expressions -------------------------------------------------------------------------------------------
    def expression(self, text: str) -> Value:
        tokens = [m.group(0).strip() for m in _TOKEN.finditer(text)]
        if "".join(tokens) != re.sub(r"\s+", "", text):
            raise SpirvCompileError(f"coopmat epilogue: cannot read the OpenCL C {text!r}")
        self._tokens, self._at = tokens, 0
        value = self._ternary()
        if self._at != len(tokens):
            raise SpirvCompileError(f"coopmat epilogue: unexpected {tokens[self._at]!r} in {text!r}")
        return value

    def _peek(self) -> str | None:
        return self._tokens[self._at] if self._at < len(self._tokens) else None

    def _take(self, want: str | None = None) -> str:
        token = self._peek()
        if token is None or (want is not None and token != want):
            raise SpirvCompileError(f"coopmat epilogue: expected {want or 'more'} in {' '.join(self._tokens)!r}")
        self._at += 1
        return token

    def _ternary(self) -> Value:
        cond = self._binary(1)
        if self._peek() != "?":
            return cond
        self._take("?")
        a = self._ternary()
        self._take(":")
        b = self._ternary()
        c = self.truth(cond)
        if a.ctype != b.ctype:
            a, b, _ = self.common(a, b)
        return self.emit(a.ctype, "OpSelect", c.id, a.id, b.id)

    def _binary(self, level: int) -> Value:
        """Precedence climbing over :data:`_PRECEDENCE` (all left-associative)."""
        left = self._unary()
        while True:
            op = self._peek()
            if op not in _PRECEDENCE or _PRECEDENCE[op] < level:
                return left
            self._take()
            left = self.binary(op, left, self._binary(_PRECEDENCE[op] + 1))

    def binary(self, op: str, a: Value, b: Value) -> Value:
        if op in ("&&", "||"):
            return self.emit("bool", "OpLogicalAnd" if op == "&&" else "OpLogicalOr", self.truth(a).id,
                             self.truth(b).id)
        if op in ("<<", ">>"):
            a = self.convert(a, self._promoted(a.ctype))
            b = self.convert(b, a.ctype)
            name = "OpShiftLeftLogical" if op == "<<" else \
                "OpShiftRightArithmetic" if a.ctype in SIGNED else "OpShiftRightLogical"
            return self.emit(a.ctype, name, a.id, b.id)
        a, b, t = self.common(a, b)
        f, s = t == "float", t in SIGNED
        compare = {"<": ("OpFOrdLessThan", "OpSLessThan", "OpULessThan"),
                   "<=": ("OpFOrdLessThanEqual", "OpSLessThanEqual", "OpULessThanEqual"),
                   ">": ("OpFOrdGreaterThan", "OpSGreaterThan", "OpUGreaterThan"),
                   ">=": ("OpFOrdGreaterThanEqual", "OpSGreaterThanEqual", "OpUGreaterThanEqual"),
                   "==": ("OpFOrdEqual", "OpIEqual", "OpIEqual"),
                   "!=": ("OpFUnordNotEqual", "OpINotEqual", "OpINotEqual")}
        if op in compare:
            names = compare[op]
            return self.emit("bool", names[0] if f else names[1] if s else names[2], a.id, b.id)
        arith = {"+": ("OpFAdd", "OpIAdd", "OpIAdd"), "-": ("OpFSub", "OpISub", "OpISub"),
                 "*": ("OpFMul", "OpIMul", "OpIMul"), "/": ("OpFDiv", "OpSDiv", "OpUDiv"),
                 "%": ("OpFRem", "OpSRem", "OpUMod"), "&": (None, "OpBitwiseAnd", "OpBitwiseAnd"),
                 "|": (None, "OpBitwiseOr", "OpBitwiseOr"), "^": (None, "OpBitwiseXor", "OpBitwiseXor")}
        name = arith[op][0] if f else arith[op][1] if s else arith[op][2]
        if name is None:
            raise SpirvCompileError(f"coopmat epilogue: {op} of floats")
        return self.emit(t, name, a.id, b.id)

    def _unary(self) -> Value:
        token = self._peek()
        if token in ("-", "!", "~", "+"):
            self._take()
            v = self._unary()
            if token == "+":
                return v
            if token == "!":
                return self.emit("bool", "OpLogicalNot", self.truth(v).id)
            v = self.convert(v, self._promoted(v.ctype))
            if token == "~":
                return self.emit(v.ctype, "OpNot", v.id)
            return self.emit(v.ctype, "OpFNegate" if v.ctype == "float" else "OpSNegate", v.id)
        if token == "(" and self._at + 2 < len(self._tokens) and self._tokens[self._at + 1] in CTYPES \
                and self._tokens[self._at + 2] == ")":
            self._take("(")
            ctype = self._take()
            self._take(")")
            return self.convert(self._unary(), ctype)
        return self._primary()

    def _primary(self) -> Value:
        token = self._take()
        if token == "(":
            v = self._ternary()
            self._take(")")
            return v
        if token[0].isdigit() or token[0] == ".":
            return self._number(token)
        if token in ("NAN", "INFINITY"):
            return self.float_constant(float("nan") if token == "NAN" else float("inf"))
        if self._peek() == "(":
            self._take("(")
            args = []
            while self._peek() != ")":
                args.append(self._ternary())
                if self._peek() == ",":
                    self._take(",")
            self._take(")")
            return self.call(token, args)
        return self.value(token)

    def _number(self, token: str) -> Value:
        t = token.lower()
        if "p" in t and t.startswith("0x"):
            return self.float_constant(float.fromhex(t.rstrip("f")))
        if t.startswith("0x"):
            return self.int_constant(int(t.rstrip("u"), 16), "uint" if t.endswith("u") else "int")
        if any(ch in t for ch in ".e") or t.endswith("f"):
            return self.float_constant(float(t.rstrip("f")))
        return self.int_constant(int(t.rstrip("u")), "uint" if t.endswith("u") else "int")

    # -- calls -------------------------------------------------------------------------------------------------
    def call(self, name: str, args: list[Value]) -> Value:
        if name in self.functions:
            return self.inline(self.functions[name], args)
        if name in FLOAT_FUNCTIONS:
            return self.ext("float", name, *(self.convert(a, "float").id for a in args))
        if name in INT_FUNCTIONS and all(a.ctype != "float" for a in args):
            if len(args) == 2:
                a, b, t = self.common(*args)
                args = [a, b]
            else:
                t = self._promoted(args[0].ctype)
                args = [self.convert(args[0], t)]
            prefix = "s_" if t in SIGNED else "u_"
            return self.ext(t if name != "abs" else UNSIGNED_OF.get(t, t), prefix + INT_FUNCTIONS[name],
                            *(a.id for a in args))
        if name == "isnan":
            return self.emit("bool", "OpIsNan", self.convert(args[0], "float").id)
        if name in ("as_float", "as_uint", "as_int"):
            target = name[3:]
            (v,) = args
            if BITS[v.ctype] != 32:
                raise SpirvCompileError(f"coopmat epilogue: {name} of a {v.ctype}")
            if (v.ctype == "float") == (target == "float"):
                return Value(v.id, target)
            return self.emit(target, "OpBitcast", v.id)
        match = re.fullmatch(r"convert_(\w+?)_sat(_rte)?", name)
        if match and match.group(1) in LIMITS:
            return self.saturate(args[0], match.group(1), bool(match.group(2)))
        raise SpirvCompileError(f"coopmat epilogue: no SPIR-V for the call {name}()")

    def saturate(self, v: Value, ctype: str, rte: bool) -> Value:
        """``convert_<ctype>_sat[_rte](v)`` (OpenCL C 6.4.3): NaN -> 0, clamped to the type's range."""
        lo, hi = LIMITS[ctype]
        if v.ctype == "float":
            x = self.ext("float", "rint", v.id) if rte else self.ext("float", "trunc", v.id)
            clamped = self.ext("float", "fmin", self.ext("float", "fmax", x.id, self.float_constant(lo).id).id,
                               self.float_constant(hi).id)
            zero = self.float_constant(0.0)
            safe = self.emit("float", "OpSelect", self.emit("bool", "OpIsNan", x.id).id, zero.id, clamped.id)
            if hi >= 2 ** 31 - 1:       # 2^31 - 1 is not an f32: the top of the range is its own case
                wide = self.emit(ctype, "OpConvertFToS" if ctype in SIGNED else "OpConvertFToU", safe.id)
                top = self.emit("bool", "OpFOrdGreaterThanEqual", x.id, self.float_constant(float(hi) + 1).id)
                return self.emit(ctype, "OpSelect", top.id, self.int_constant(hi, ctype).id, wide.id)
            return self.emit(ctype, "OpConvertFToS" if ctype in SIGNED else "OpConvertFToU", safe.id)
        t = self._promoted(v.ctype)
        v = self.convert(v, t)
        if t in SIGNED:
            lo_v, hi_v = max(lo, -2 ** 31), min(hi, 2 ** 31 - 1)
            x = self.ext(t, "s_clamp", v.id, self.int_constant(lo_v, t).id, self.int_constant(hi_v, t).id)
        else:
            x = self.ext(t, "u_min", v.id, self.int_constant(min(hi, 2 ** 32 - 1), t).id)
        return self.convert(x, ctype)

    def inline(self, fn: Function, args: list[Value]) -> Value:
        """A call of a kernel function: its body compiled over the arguments (early returns become selects)."""
        if len(args) != len(fn.params):
            raise SpirvCompileError(f"coopmat epilogue: {len(args)} arguments for {fn.params}")
        self._scopes.append({name: self.convert(a, t) for (t, name), a in zip(fn.params, args)})
        try:
            pending: list[tuple[Value, Value]] = []      # (condition, value) of each early return, in order
            for statement in _statements(fn.body):
                early = re.fullmatch(r"if\s*\((.*)\)\s*return\s+(.*)", statement, re.S)
                if early:
                    cond, value = _split_condition(statement)
                    pending.append((self.truth(self._sub(cond)), self.convert(self._sub(value), fn.ctype)))
                elif statement.startswith("return "):
                    result = self.convert(self._sub(statement[len("return "):]), fn.ctype)
                    for cond, value in reversed(pending):
                        result = self.emit(fn.ctype, "OpSelect", cond.id, value.id, result.id)
                    return result
                else:
                    self.declaration(statement)
            raise SpirvCompileError(f"coopmat epilogue: a function without a return: {fn.body!r}")
        finally:
            self._scopes.pop()

    def _sub(self, text: str) -> Value:
        """An expression inside a statement (the parser's state is saved around it)."""
        saved = getattr(self, "_tokens", None), getattr(self, "_at", 0)
        try:
            return self.expression(text)
        finally:
            self._tokens, self._at = saved

    def declaration(self, statement: str) -> None:
        """``[const] <type> a = e[, b = e];``: each name bound to its value."""
        words = statement.replace("const ", "", 1).strip() if statement.startswith("const ") else statement
        ctype, _, rest = words.partition(" ")
        if ctype not in CTYPES:
            raise SpirvCompileError(f"coopmat epilogue: cannot read the statement {statement!r}")
        for part in _split_top(rest, ","):
            name, _, expr = part.partition("=")
            self.bind(name.strip(), self.convert(self._sub(expr), ctype))

    def statement(self, text: str) -> None:
        """One statement of element code (``const float xe_e3 = ...;``)."""
        self.declaration(text.strip().rstrip(";").strip())


def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside parentheses."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if ch == sep and depth == 0:
            out.append(text[start:i])
            start = i + 1
    return out + [text[start:]]


def _statements(body: str) -> list[str]:
    return [s.strip() for s in _split_top(body, ";") if s.strip()]


def _split_condition(statement: str) -> tuple[str, str]:
    """``if (cond) return value`` -> (cond, value), the condition's parentheses matched."""
    start = statement.index("(")
    depth = 0
    for i in range(start, len(statement)):
        depth += statement[i] == "("
        depth -= statement[i] == ")"
        if depth == 0:
            return statement[start + 1:i], statement[i + 1:].strip()[len("return"):].strip()
    raise SpirvCompileError(f"coopmat epilogue: unbalanced {statement!r}")


@dataclass(frozen=True)
class Formula:
    """Integer C statements compiled into SPIR-V: their ``lines`` (a function body's), the module-scope
    ``constants`` and the id of each name they define (:meth:`id`)."""

    lines: tuple[str, ...]
    constants: tuple[str, ...]
    names: tuple[tuple[str, str], ...]

    def id(self, name: str) -> str:
        return dict(self.names)[name]


def compile_formula(statements, inputs: dict[str, tuple[str, str]], prefix: str) -> Formula:
    """``const <type> name = expression;`` statements (xegemm.library.formula's steps as the OpenCL C kernels print
    them) over ``inputs`` (name -> (SPIR-V id, C type)), as instructions named ``%<prefix>...``."""
    compiler = Compiler(prefix)
    for name, (rid, ctype) in inputs.items():
        compiler.bind(name, Value(rid, ctype))
    defined = []
    for statement in statements:
        compiler.statement(statement)
        defined.append(re.match(r"\s*(?:const\s+)?\w+\s+(\w+)", statement).group(1))
    return Formula(tuple(compiler.lines), tuple(compiler.constants),
                   tuple((name, compiler.value(name).id) for name in defined))
