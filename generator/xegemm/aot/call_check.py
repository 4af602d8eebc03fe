"""A checker of calls to the documented Xe 2D block IO and DPAS builtins in generated OpenCL C.

No compiler here knows ``cl_intel_subgroup_2d_block_io``, so :func:`check_calls` holds every call to the
prototypes of :mod:`xegemm.aot.prototypes`.  It reads OpenCL C with a small declaration scanner, not a
compiler: it sees calls outside preprocessor directives, and the types of variables declared (or typedef'd)
in the source; integer constant expressions in declarations are folded by a small :mod:`ast` evaluator.
"""

from __future__ import annotations

import ast
import bisect
import difflib
import operator
import re
from dataclasses import dataclass

from xegemm.aot.prototypes import (
    BLOCK2D_SUB_GROUP,
    EXT_2D,
    SCALAR_BYTES,
    Prototype,
    block2d_prototypes,
    documented_names,
    documented_overloads,
)
from xegemm.library.dtypes import vector_ctype

# ---------------------------------------------------------------------------------------------------
# A small OpenCL C scanner: comments, functions, declarations, expression types
# ---------------------------------------------------------------------------------------------------
_CALL = re.compile(r"\b(intel_sub_group_2d_block_\w+|intel_sub_group_\w+_matrix_mad_k\w*)\s*\(")
_BLOCK2D_NAME = re.compile(r"^intel_sub_group_2d_block_(read|read_transform|read_transpose|write|prefetch)"
                           r"_(\d+)b_(\d+)r(\d+)x(\d+)c$")
_TOKEN = re.compile(r"\s*(?:(?P<id>[A-Za-z_]\w*)|(?P<num>(?:0[xX][0-9a-fA-F]+|\d+)[uUlL]*)|(?P<p>->|\+\+|--|"
                    r"<<=|>>=|[-+*/%&|^!=<>]=|&&|\|\||<<|>>|[^\s\w]))")
_SPACES = {"global": "global", "__global": "global", "local": "local", "__local": "local",
           "private": "private", "__private": "private", "constant": "constant", "__constant": "constant",
           "generic": "generic", "__generic": "generic"}
_QUALIFIERS = {"const", "volatile", "restrict", "__restrict", "static", "inline", "__inline", "register",
               "extern", "signed"} | set(_SPACES)
_VECTOR = re.compile(r"^(char|uchar|short|ushort|int|uint|long|ulong|half|float|double)(2|3|4|8|16)$")
_UNSIGNED = {"char": "uchar", "short": "ushort", "int": "uint", "long": "ulong"}
_EXT_VECTOR_TYPEDEF = re.compile(r"\btypedef\s+(?:unsigned\s+)?(\w+)\s+(\w+)\s+__attribute__\s*\(\(\s*"
                                 r"ext_vector_type\s*\(\s*(\d+)\s*\)\s*\)\)\s*;")
_ALIAS_TYPEDEF = re.compile(r"\btypedef\s+((?:unsigned\s+)?\w+)\s+(\w+)\s*;")
_DIRECTIVE = re.compile(r"[ \t]*#")
_INT_MACRO = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+([^\n]+?)[ \t]*$", re.M)
_REQD_SG = re.compile(r"\b(?:intel_reqd_sub_group_size|reqd_sub_group_size)\s*\(\s*(\d+)\s*\)")


@dataclass(frozen=True)
class CType:
    """A scalar or vector value type: ``ushort8`` = CType("ushort", 8)."""

    scalar: str
    lanes: int = 1

    @property
    def name(self) -> str:
        return vector_ctype(self.scalar, self.lanes)

    @property
    def size(self) -> int:
        """sizeof in bytes (3-component vectors take the room of 4, OpenCL C 6.3.5)."""
        return SCALAR_BYTES[self.scalar] * (4 if self.lanes == 3 else self.lanes)


@dataclass(frozen=True)
class Var:
    """A declared variable or parameter: ``T *x[4][8]`` -> (T, pointers=1, dims=(4, 8))."""

    name: str
    ctype: CType | None  # None for types the scanner does not model (structs, void)
    pointers: int = 0
    dims: tuple[int | None, ...] = ()
    space: str | None = None  # address space of the object (arrays/values) or of the pointee (pointers)
    const: bool = False


def _blank(source: str) -> str:
    """``source`` with comments, string/char literals and preprocessor directives blanked out (newlines
    and offsets kept)."""
    out = list(source)
    i, n = 0, len(source)

    def blank(a: int, b: int) -> None:
        for j in range(a, b):
            if out[j] != "\n":
                out[j] = " "

    line_start = True
    while i < n:
        c = source[i]
        if line_start and _DIRECTIVE.match(source, i):
            j = i
            while j < n:  # a directive ends at a newline not preceded by a backslash
                if source[j] == "\n" and (j == 0 or source[j - 1] != "\\"):
                    break
                j += 1
            blank(i, j)
            i = j
            continue
        if source.startswith("//", i):
            j = source.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
            continue
        if source.startswith("/*", i):
            j = source.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
            continue
        if c in "\"'":
            j = i + 1
            while j < n and source[j] != c:
                j += 2 if source[j] == "\\" else 1
            blank(i, min(j + 1, n))
            i = j + 1
            line_start = False
            continue
        line_start = c == "\n" or (line_start and c in " \t")
        i += 1
    return "".join(out)


def _tokens(text: str) -> list[str]:
    return [m.group(m.lastgroup) for m in _TOKEN.finditer(text) if m.lastgroup]


def _matching(text: str, i: int) -> int:
    """Index of the bracket closing the one at ``text[i]`` (``(``, ``[`` or ``{``), or -1."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = []
    for j in range(i, len(text)):
        c = text[j]
        if c in pairs:
            stack.append(pairs[c])
        elif c in ")]}":
            if not stack or stack.pop() != c:
                return -1
            if not stack:
                return j
    return -1


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` outside brackets."""
    parts, depth, start = [], 0, 0
    for j, c in enumerate(text):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(text[start:j])
            start = j + 1
    parts.append(text[start:])
    return parts


class _Types:
    """The value types the source can name: OpenCL scalars and vectors plus its own typedefs."""

    def __init__(self, text: str, source: str = ""):
        self.macros = {m[1]: m[2] for m in _INT_MACRO.finditer(source)}  # object-like #defines
        self.typedefs: dict[str, CType] = {}
        for m in _EXT_VECTOR_TYPEDEF.finditer(text):
            base = self.parse(m[1])
            if base is not None and base.lanes == 1:
                self.typedefs[m[2]] = CType(base.scalar, int(m[3]))
        for m in _ALIAS_TYPEDEF.finditer(text):
            base = self.parse(m[1])
            if base is not None:
                self.typedefs[m[2]] = base

    def parse(self, name: str) -> CType | None:
        """``ushort8`` -> CType("ushort", 8); ``unsigned short`` -> CType("ushort"); unknown -> None."""
        words = name.split()
        if words and words[0] == "unsigned":
            return CType(_UNSIGNED.get(words[1], "uint") if len(words) > 1 else "uint")
        if name in SCALAR_BYTES:
            return CType(name)
        m = _VECTOR.match(name)
        if m:
            return CType(m[1], int(m[2]))
        return self.typedefs.get(name)

    def is_type_word(self, word: str) -> bool:
        return word in ("void", "unsigned") or self.parse(word) is not None

    def const_int(self, toks: list[str], depth: int = 0) -> int | None:
        """Value of an integer constant expression of literals and object-like macros, or None."""
        parts = []
        for t in toks:
            if t[0].isdigit():
                digits = t.rstrip("uUlL")
                try:
                    v = int(digits, 16) if digits[:2] in ("0x", "0X") else int(digits, 8 if digits[0] == "0" else 10)
                except ValueError:
                    return None
            elif t[0].isalpha() or t[0] == "_":
                v = self.const_int(_tokens(self.macros[t]), depth + 1) if t in self.macros and depth < 8 else None
                if v is None:
                    return None
            elif t in ("+", "-", "*", "/", "%", "(", ")", "<<", ">>"):
                parts.append("//" if t == "/" else t)
                continue
            else:
                return None
            parts.append(str(v))
        try:
            return _eval_int(ast.parse(" ".join(parts), mode="eval").body) if parts else None
        except (SyntaxError, ValueError, ZeroDivisionError):
            return None


_INT_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
            ast.Mod: operator.mod, ast.LShift: operator.lshift, ast.RShift: operator.rshift}


def _eval_int(node: ast.AST) -> int:
    """Evaluate an integer-only arithmetic expression tree (no names, no calls)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _eval_int(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _INT_OPS:
        return _INT_OPS[type(node.op)](_eval_int(node.left), _eval_int(node.right))
    raise ValueError("not an integer constant expression")


def _parse_declarator_list(types: _Types, toks: list[str]) -> list[Var]:
    """Variables of one declaration ``[qualifiers] TYPE declarator[, declarator...]``, or [] if ``toks``
    is not a declaration of a modelled type."""
    i, space, const = 0, None, False
    while i < len(toks) and toks[i] in _QUALIFIERS:
        space = _SPACES.get(toks[i], space)
        const = const or toks[i] == "const"
        i += 1
    if i >= len(toks) or not types.is_type_word(toks[i]):
        return []
    if toks[i] == "unsigned":
        tname = "unsigned " + toks[i + 1] if i + 1 < len(toks) and toks[i + 1] in _UNSIGNED else "unsigned"
        i += 2 if tname != "unsigned" else 1
    else:
        tname = toks[i]
        i += 1
    ctype = types.parse(tname)
    out = []
    depth, start = 0, i
    pieces = []
    for j in range(i, len(toks) + 1):
        t = toks[j] if j < len(toks) else ","
        if t in ("(", "[", "{"):
            depth += 1
        elif t in (")", "]", "}"):
            depth -= 1
        elif t == "," and depth == 0:
            pieces.append(toks[start:j])
            start = j + 1
    for piece in pieces:
        k, pointers, pspace, pconst = 0, 0, space, const
        while k < len(piece) and (piece[k] == "*" or piece[k] in _QUALIFIERS):
            if piece[k] == "*":
                pointers += 1
            else:
                pspace = _SPACES.get(piece[k], pspace)
                pconst = pconst or (piece[k] == "const" and pointers == 0)
            k += 1
        if k >= len(piece) or not re.match(r"^[A-Za-z_]\w*$", piece[k]) or piece[k] in _QUALIFIERS:
            continue
        name = piece[k]
        k += 1
        dims: list[int | None] = []
        while k < len(piece) and piece[k] == "[":
            close, depth = k, 0
            for close in range(k, len(piece)):
                depth += {"[": 1, "]": -1}.get(piece[close], 0)
                if depth == 0:
                    break
            dims.append(types.const_int(piece[k + 1:close]))
            k = close + 1
        if k < len(piece) and piece[k] not in ("=",):
            continue  # e.g. a function declarator: not a variable
        out.append(Var(name, ctype, pointers, tuple(dims), pspace, pconst))
    return out


@dataclass
class _Function:
    name: str
    return_type: CType | None
    params: list[Var]
    body_start: int  # offset of the opening brace
    body_end: int


def _functions(text: str, types: _Types) -> list[_Function]:
    """The function definitions of the (blanked) translation unit."""
    out, i, header_start = [], 0, 0
    while i < len(text):
        c = text[i]
        if c in ";}":
            header_start = i + 1
        elif c == "{":
            end = _matching(text, i)
            if end < 0:
                break
            header = text[header_start:i]
            f = _function_header(header, types)
            if f is not None:
                out.append(_Function(f[0], f[1], f[2], i, end))
            i = end
            header_start = end + 1
        i += 1
    return out


def _function_header(header: str, types: _Types) -> tuple[str, CType | None, list[Var]] | None:
    header = re.sub(r"__attribute__\s*\(\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)\)", " ", header).strip()
    if not header.endswith(")"):
        return None
    close = len(header) - 1
    depth = 0
    for j in range(close, -1, -1):
        depth += {")": 1, "(": -1}.get(header[j], 0)
        if depth == 0:
            break
    before = _tokens(header[:j])
    if not before or not re.match(r"^[A-Za-z_]\w*$", before[-1]) or before[-1] in ("if", "for", "while", "switch"):
        return None
    if "=" in before:
        return None
    rtype = None
    for t in reversed(before[:-1]):
        if types.parse(t) is not None:
            rtype = types.parse(t)
            break
    params = []
    for p in _split_top(header[j + 1:close]):
        params += _parse_declarator_list(types, _tokens(p))
    return before[-1], rtype, params


def _local_vars(text: str, start: int, end: int, types: _Types) -> list[tuple[int, Var]]:
    """(offset, variable) of the declarations in ``text[start:end]`` (a function body), in order."""
    out = []
    seg_start = start
    j = start
    while j <= end:
        c = text[j] if j < end else ";"
        if c in ";{}" or (c == "(" and re.search(r"\bfor\s*$", text[seg_start:j])):
            stmt = text[seg_start:j]
            toks = _tokens(stmt)
            if toks:
                for v in _parse_declarator_list(types, toks):
                    out.append((seg_start, v))
            seg_start = j + 1
        j += 1
    return out


@dataclass
class _Scope:
    types: _Types
    vars: dict[str, Var]
    function: _Function | None


def _strip_parens(expr: str) -> str:
    expr = expr.strip()
    while expr.startswith("(") and _matching(expr, 0) == len(expr) - 1:
        expr = expr[1:-1].strip()
    return expr


@dataclass(frozen=True)
class _Cast:
    ctype: CType | None  # None for void
    pointers: int
    space: str | None
    text: str


def _leading_cast(expr: str, types: _Types) -> tuple[_Cast, str] | None:
    """Split ``(T*)rest`` into the cast and ``rest``; None if ``expr`` does not start with a cast."""
    if not expr.startswith("("):
        return None
    close = _matching(expr, 0)
    if close < 0 or close == len(expr) - 1:
        return None
    toks = _tokens(expr[1:close])
    space, pointers, tname = None, 0, []
    for t in toks:
        if t in _SPACES:
            space = _SPACES[t]
        elif t == "*":
            pointers += 1
        elif t in _QUALIFIERS:
            continue
        elif re.match(r"^[A-Za-z_]\w*$", t):
            tname.append(t)
        else:
            return None
    name = " ".join(tname)
    if not tname or (name != "void" and types.parse(name) is None):
        return None
    return _Cast(None if name == "void" else types.parse(name), pointers, space, expr[1:close].strip()), \
        expr[close + 1:].strip()


@dataclass(frozen=True)
class _Pointer:
    """What a pointer-valued argument points to, as far as the source shows."""

    pointee: CType | None  # type the expression's pointer points to (before any cast); None: not modelled
    pointee_is_array: bool  # ``&arr``: a pointer to a whole array
    object_bytes: int | None  # bytes from the pointed-to element to the end of the object
    space: str | None
    const: bool
    var: str


def _pointer_value(expr: str, scope: _Scope) -> _Pointer | str:
    """Decode ``&x``, ``&x[i]``, ``x`` (array or pointer) and ``x[i]`` (sub-array); a reason string if not."""
    expr = _strip_parens(expr)
    addr = expr.startswith("&")
    if addr:
        expr = _strip_parens(expr[1:])
    m = re.match(r"^([A-Za-z_]\w*)\s*((?:\[[^\[\]]*\]\s*)*)$", expr)
    if not m:
        return f"`{expr}` is not a form the checker reads (&var, &var[i], var, (private T*)&var)"
    var = scope.vars.get(m[1])
    if var is None:
        return f"`{m[1]}` is not declared in the calling function"
    if var.ctype is None:
        return f"`{m[1]}` has a type the checker does not model"
    indices = re.findall(r"\[([^\[\]]*)\]", m[2])
    dims = list(var.dims)
    pointers = var.pointers
    offset_elems = 0  # in units of the element reached
    for k, idx in enumerate(indices):
        if dims:
            dims.pop(0)
        elif pointers:
            pointers -= 1
        elif var.ctype.lanes > 1 and k == len(indices) - 1:
            return f"`{expr}` indexes a vector component"
        else:
            return f"`{expr}` indexes a non-array"
        lit = scope.types.const_int(_tokens(idx))
        inner = 1
        for d in dims:
            inner = inner * d if (inner is not None and d is not None) else None
        if lit is None or inner is None:
            offset_elems = None
        elif offset_elems is not None:
            offset_elems += lit * inner
    total = 1
    for d in var.dims:
        total = total * d if (total is not None and d is not None) else None
    elem_size = var.ctype.size
    if var.pointers:
        obj_bytes = None  # a pointer: the object it points into is not visible
    elif total is None or offset_elems is None:
        obj_bytes = None
    else:
        obj_bytes = (total - offset_elems) * elem_size
    space = var.space or ("private" if not var.pointers else None)
    if addr:
        # &x: pointer to x (x a value, a whole array, or one element after indexing)
        if pointers:
            return f"`&{expr}` is the address of a pointer"
        return _Pointer(var.ctype, bool(dims), obj_bytes, space, var.const, var.name)
    if dims:  # an array (or sub-array) decays to a pointer to its first element
        return _Pointer(var.ctype, len(dims) > 1, obj_bytes, space, var.const, var.name)
    if pointers == 1:
        return _Pointer(var.ctype, False, None, var.space, var.const, var.name)
    return f"`{expr}` is not a pointer"


def _value_type(expr: str, scope: _Scope) -> CType | None:
    """The type of a value argument when visible: a declared variable, ``x[i]`` of an array, a cast
    ``(T)...``, or ``as_T(...)`` / ``convert_T(...)``; None otherwise."""
    expr = _strip_parens(expr)
    cast = _leading_cast(expr, scope.types)
    if cast is not None:
        c, _rest = cast
        return c.ctype if c.pointers == 0 else None
    m = re.match(r"^(?:as|convert)_(\w+?)(?:_sat)?(?:_rt[enpz])?\s*\(", expr)
    if m and _matching(expr, expr.index("(")) == len(expr) - 1:
        return scope.types.parse(m[1])
    m = re.match(r"^([A-Za-z_]\w*)\s*((?:\[[^\[\]]*\]\s*)*)$", expr)
    if not m or m[1] not in scope.vars:
        return None
    var = scope.vars[m[1]]
    n = len(re.findall(r"\[", m[2]))
    if var.pointers + len(var.dims) != n:
        return None
    return var.ctype


# ---------------------------------------------------------------------------------------------------
# The checker
# ---------------------------------------------------------------------------------------------------
def _unknown_hint(name: str) -> str:
    """Why ``name`` is not documented, and the nearest documented names."""
    if name == "intel_sub_group_tf32_tf32_matrix_mad_k8_f32":
        return ("an old IGC spelling (Debian's IGC 1.0.12504, docs/compilers.md); OCLTF32 documents "
                "intel_sub_group_tf32_tf32_matrix_mad_k8(float{,2,4} a, float8 b, float{,2,4,8} acc)")
    m = _BLOCK2D_NAME.match(name)
    if m:
        op, bits = m[1], int(m[2])
        shapes = sorted((p.cols, p.count, p.rows) for p in block2d_prototypes()
                        if p.op == op and p.elem_bits == bits)
        if not shapes:
            ops = sorted({p.elem_bits for p in block2d_prototypes() if p.op == op})
            return f"OCL2D has no {bits}-bit {op} (only {', '.join(f'{b}b' for b in ops)})"
        listed = ", ".join(f"{r}r{c}x{n}c" for c, n, r in shapes)
        return f"the documented {op} {bits}b shapes are {listed}"
    near = difflib.get_close_matches(name, documented_names(), n=2, cutoff=0.8)
    return f"did you mean {' or '.join(near)}?" if near else "no documented function has this name"


def _sub_group_sizes(text: str) -> set[int]:
    return {int(v) for v in _REQD_SG.findall(text)}


def _scope_at(pos: int, text: str, types: _Types, functions: list[_Function],
              local_cache: dict[int, list[tuple[int, Var]]]) -> _Scope:
    for f in functions:
        if f.body_start < pos < f.body_end:
            if f.body_start not in local_cache:
                local_cache[f.body_start] = _local_vars(text, f.body_start + 1, f.body_end, types)
            vs = {v.name: v for v in f.params}
            for off, v in local_cache[f.body_start]:
                if off < pos:
                    vs[v.name] = v
            return _Scope(types, vs, f)
    return _Scope(types, {}, None)


def _check_block2d(proto: Prototype, args: list[str], scope: _Scope, sg: set[int]) -> list[str]:
    problems = []
    if sg and sg != {BLOCK2D_SUB_GROUP}:
        problems.append(f"needs sub-group size 16 (OCL2D 6.13.X.6), the source requires {sorted(sg)}")
    # base_address: global void* (OCL2D prototypes)
    base = _strip_parens(args[0])
    cast = _leading_cast(base, scope.types)
    if cast is not None:
        c, _ = cast
        if c.pointers != 1:
            problems.append(f"base_address `{args[0].strip()}` is cast to a non-pointer; documented: global void*")
        elif c.space != "global":
            why = "an unqualified pointer is generic in OpenCL C 2.0+" if c.space is None else "wrong address space"
            problems.append(f"base_address is cast to `{c.text}`: documented `global void*`; {why}")
    else:
        p = _pointer_value(base, scope)
        if isinstance(p, _Pointer):
            if p.space not in (None, "global"):
                problems.append(f"base_address `{args[0].strip()}` points to {p.space} memory; "
                                "documented: global void*")
            elif p.const:
                problems.append(f"base_address `{args[0].strip()}` is a const pointer; documented `global void*` "
                                "is not const (cast: (global void*))")
    coord = _value_type(args[4], scope)
    if coord is not None and coord != CType("int", 2):
        problems.append(f"coord `{args[4].strip()}` is {coord.name}; documented: int2")
    for i, what in ((1, "width"), (2, "height"), (3, "pitch")):
        t = _value_type(args[i], scope)
        if t is not None and t.lanes != 1:
            problems.append(f"{what} `{args[i].strip()}` is {t.name}; documented: int")
    if proto.data_scalar is None:
        return problems
    problems += _check_data_pointer(proto, args[5], scope)
    return problems


def _check_data_pointer(proto: Prototype, arg: str, scope: _Scope) -> list[str]:
    role = "value" if proto.op == "write" else "destination"
    want, need = proto.data_scalar, proto.data_count
    need_bytes = need * SCALAR_BYTES[want]
    expr = _strip_parens(arg)
    cast = _leading_cast(expr, scope.types)
    problems = []
    if cast is not None:
        c, rest = cast
        if c.pointers != 1 or c.ctype is None or c.ctype != CType(want):
            problems.append(f"{role} is cast to `{c.text}`; documented: private {want}* ({need} {want} per work-item)")
        if c.space is None:
            problems.append(f"{role} cast `({c.text})` has no address space: in OpenCL C 2.0+ it is a generic "
                            f"pointer, which does not convert to the documented `private {want}*`")
        elif c.space != "private":
            problems.append(f"{role} is cast to {c.space} memory; documented: private {want}*")
        p = _pointer_value(rest, scope)
        if isinstance(p, str):
            return problems + [f"{role}: {p}"]
        if p.space not in (None, "private"):
            problems.append(f"{role} `{arg.strip()}` points to {p.space} memory; documented: private {want}*")
        if p.object_bytes is not None and p.object_bytes < need_bytes:
            problems.append(f"{role} `{arg.strip()}` reaches {p.object_bytes} bytes, the function "
                            f"{'reads' if proto.op == 'write' else 'writes'} {need} {want} = {need_bytes} bytes")
        return problems
    p = _pointer_value(expr, scope)
    if isinstance(p, str):
        return [f"{role}: {p}"]
    shown = arg.strip()
    if p.pointee_is_array:
        problems.append(f"{role} `{shown}` is a pointer to an array, not to {want}")
    elif p.pointee != CType(want):
        if p.pointee.scalar == want:
            problems.append(f"{role} `{shown}` is a {p.pointee.name}*; documented: private {want}* "
                            f"(write `(private {want}*)&{p.var}`)")
        else:
            problems.append(f"{role} `{shown}` has element type {p.pointee.name}; documented: private {want}*")
    if p.space not in (None, "private"):
        problems.append(f"{role} `{shown}` points to {p.space} memory; documented: private {want}*")
    if p.object_bytes is not None and p.object_bytes < need_bytes:
        have = p.object_bytes // SCALAR_BYTES[want] if p.pointee.scalar == want else p.object_bytes
        unit = want if p.pointee.scalar == want else "bytes"
        problems.append(f"{role} `{shown}` holds {have} {unit}, the function "
                        f"{'reads' if proto.op == 'write' else 'writes'} {need} {want} per work-item")
    return problems


def _call_result_type(text: str, call_start: int, scope: _Scope) -> CType | None:
    """Type the call's value is stored to: ``T x = call``, ``x = call`` or ``return call``."""
    stmt_start = max(text.rfind(c, 0, call_start) for c in ";{}") + 1
    before = text[stmt_start:call_start].strip()
    if before == "return":
        return scope.function.return_type if scope.function else None
    # "... x =" or "... x[i] =" (a compound "x +=" or a comparison "==" does not match)
    m = re.fullmatch(r".*?([A-Za-z_]\w*(?:\s*\[[^\[\]]*\])*)\s*=", before, re.S)
    return _value_type(m[1], scope) if m else None


def _uses_value(text: str, call_start: int) -> bool:
    """Whether the call's value is assigned or returned (``x = call``, ``T x = call``, ``return call``)."""
    stmt_start = max(text.rfind(c, 0, call_start) for c in ";{}") + 1
    before = text[stmt_start:call_start].strip()
    return before == "return" or bool(re.search(r"(?<![=!<>])=$", before))


def _check_mma(name: str, args: list[str], scope: _Scope, sg: set[int], result: CType | None) -> list[str]:
    overloads = [p for p in documented_overloads(name) if not sg or p.sub_group_size in sg]
    if not overloads:
        sizes = sorted({p.sub_group_size for p in documented_overloads(name)})
        return [f"documented only for sub-group size {sizes} ({documented_overloads(name)[0].source}), "
                f"the source requires {sorted(sg)}"]
    seen = [_value_type(a, scope) for a in args]
    fitting = [p for p in overloads
               if all(t is None or t.name == pt for t, pt in zip(seen, p.param_types))]
    shown = ", ".join(t.name if t else "?" for t in seen)
    simd = "/".join(f"SIMD{s}" for s in sorted({p.sub_group_size for p in overloads}))
    if not fitting:
        def matches(p: Prototype) -> int:
            return sum(t is not None and t.name == pt for t, pt in zip(seen, p.param_types))
        near = sorted(overloads, key=lambda p: -matches(p))
        listed = "; ".join(f"({', '.join(p.param_types)})" for p in near[:3])
        return [f"no documented {simd} overload takes ({shown}); documented e.g. {listed} "
                f"({overloads[0].source})"]
    if result is not None and all(p.return_type != result.name for p in fitting):
        returns = sorted({p.return_type for p in fitting})
        return [f"result stored as {result.name}, but ({shown}) returns {' or '.join(returns)}"]
    return []


def check_calls(source: str, *, sub_group_size: int | None = None) -> list[str]:
    """Problems of every call to an ``intel_sub_group_2d_block_*`` or ``intel_sub_group_*_matrix_mad_k*``
    function in OpenCL C ``source``, as ``"line N: name: problem"`` strings ([] if none are found).

    Checked: the name is documented; the argument count; for 2D block calls the base pointer's address
    space, ``coord``'s type and the destination/value pointer (it must be ``var``, ``&var``,
    ``&var[i]`` or ``(private T*)&var`` of a variable declared in the calling function, of the
    documented element type, reaching at least the documented element count); for DPAS calls the visible
    argument and result types against the documented overloads.  ``sub_group_size`` defaults to the one
    ``intel_reqd_sub_group_size`` gives in the source, if unique.
    """
    text = _blank(source)
    types = _Types(text, source)
    functions = _functions(text, types)
    sg = {sub_group_size} if sub_group_size else _sub_group_sizes(source)
    sg_single = sg if len(sg) == 1 else set()
    local_cache: dict[int, list[tuple[int, Var]]] = {}
    line_starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    problems = []
    for m in _CALL.finditer(text):
        name, start = m[1], m.start()
        prev = re.search(r"([A-Za-z_]\w*|\)\))\s*$", text[max(0, start - 256):start])
        if prev and prev[1] != "return" and (prev[1] == "))" or types.is_type_word(prev[1])
                                            or prev[1] in _QUALIFIERS):
            continue  # a declaration or definition of the function, not a call
        where = f"line {bisect.bisect_right(line_starts, start)}: {name}"
        open_ = m.end() - 1
        close = _matching(text, open_)
        if close < 0:
            problems.append(f"{where}: unbalanced parentheses in the call")
            continue
        inner = text[open_ + 1:close]
        args = [a for a in _split_top(inner)] if inner.strip() else []
        overloads = documented_overloads(name)
        if not overloads:
            problems.append(f"{where}: not a documented {EXT_2D} / DPAS function ({_unknown_hint(name)})")
            continue
        want = len(overloads[0].params)
        if len(args) != want:
            problems.append(f"{where}: {len(args)} arguments, documented {want}: "
                            f"({', '.join(overloads[0].param_types)}) ({overloads[0].source})")
            continue
        scope = _scope_at(start, text, types, functions, local_cache)
        if overloads[0].op == "mma":
            result = _call_result_type(text, start, scope)
            found = _check_mma(name, args, scope, sg_single, result)
        else:
            found = _check_block2d(overloads[0], args, scope, sg_single)
            if _uses_value(text, start):
                found.insert(0, "its value is used, but it returns void (OCL2D): data goes through the pointer")
        problems += [f"{where}: {p}" for p in found]
    return problems
