"""OpenCL C of a traced epilogue, for the epilogue stage of either lowering: per element, the statements and
expressions that compute D, the auxiliary outputs and each reduction's contribution from the accumulator
element and the inputs; and, for reductions, the fix-up kernel that combines per-tile partials.

The element code is plain scalar OpenCL C over names the caller chooses (:func:`element_code` ``names``: the
accumulator element, C's element as a float, each input's value), so the portable and the native lowering
print the same text around their own loads and stores.  Values used once are inlined; values used more than
once (a pre-activation stored as an auxiliary output, a result that is also reduced) become ``const``
temporaries.  Operands print with C's precedence, parenthesised wherever the graph's order of evaluation
would otherwise change (``a + (b + c)`` stays so: f32 addition does not associate).  For the fixed epilogue's
graphs (:mod:`.fixed`) this is exactly the expression the fixed epilogue's kernels have always printed.

Reductions are deterministic without atomics, as split K's and stream-K's fix-ups are (templates/reduce.cl.j2):
each work-group combines its tile's contributions in a fixed order into one partial per row (per column, or
one per tile) and stores it to its own workspace slot; a second kernel (:func:`fixup_kernel`) combines the
partials of each row in tile order.  Nothing depends on which work-group ran first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xegemm.epilogues.outputs import load_float, storage_ctype, store_float, store_int
from xegemm.epilogues.graph import Graph
from xegemm.epilogues.registry import (
    CALL,
    HELPERS,
    OPS,
    REDUCTIONS,
    TERNARY,
    UNARY,
    Reduction,
)

TEMP = "xe_e"   # temporaries: xe_e<node>; input names cannot start with xe_ (tracer)


@dataclass(frozen=True)
class ReductionCode:
    """One reduction output: its name, the registry entry (kind, identity, combination), the C float expression
    of one element's contribution, and the type its final value is stored as."""

    name: str
    reduction: Reduction
    value: str
    type: str


@dataclass(frozen=True)
class ElementCode:
    """The epilogue of one element: ``statements`` (temporaries, in order), ``outputs`` (name -> C expression
    of the storage bits of D and of each auxiliary output), ``reductions``, ``definitions`` (the C functions
    the expressions call), ``conversions`` (the output types whose conversion helpers of
    templates/convert.cl.j2 the expressions call: ``bf16``, ``f16``), ``integer`` (the exact integer path:
    the accumulator is an int)."""

    statements: tuple[str, ...]
    outputs: dict[str, str]
    reductions: tuple[ReductionCode, ...]
    definitions: str
    conversions: tuple[str, ...]
    integer: bool


LONGEST = 2000      # characters of one expression before it becomes a temporary: a deep chain stays linear


def c_float(value: float) -> str:
    """An f32 constant as OpenCL C prints it (shortest digits that read back the same f32)."""
    v = np.float32(value)
    if np.isnan(v):
        return "NAN"
    if np.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    text = str(v)
    return text + ("f" if any(ch in text for ch in ".e") else ".0f")


def element_code(graph: Graph, names: dict[str, str] | None = None, temp: str = TEMP) -> ElementCode:
    """The C of ``graph`` per element.  ``names`` maps each input (``acc``, ``c``, the named inputs) to a C
    expression of its value as a float (an int for ``acc`` on the exact integer path) that binds at least as
    tightly as a unary expression (a name, ``x[i]``, ``as_float(b)``, ``(float)b``); by default the inputs'
    own names.  Temporaries are named ``temp`` + the node's index: a kernel that prints several elements in
    one scope gives each its own ``temp`` (``xe_e3_1_``)."""
    names = {i.name: i.name for i in graph.inputs} | dict(names or {})
    integer = graph.exact_integer
    uses = graph.uses()
    text: list[tuple[str, int]] = []
    statements = []
    definitions: dict[str, str] = {}
    conversions: list[str] = []
    for index, node in enumerate(graph.nodes):
        if node.op == "input":
            text.append((names[node.attr], UNARY))
        elif node.op == "const":
            c = c_float(node.attr)
            text.append((c, UNARY if c.startswith("-") else CALL))
        elif node.op in REDUCTIONS:
            text.append(text[node.args[0]])     # a reduction's contribution per element is its operand
            continue
        else:
            text.append(_expression(node, [text[a] for a in node.args], integer, definitions, conversions))
        if (uses[index] > 1 or len(text[index][0]) > LONGEST) and node.op not in ("input", "const"):
            ctype = "int" if integer or node.vtype == "bool" else "float"
            statements.append(f"const {ctype} {temp}{index} = {text[index][0]};")
            text[index] = (f"{temp}{index}", CALL)
    outputs, reductions = {}, []
    for o in graph.outputs:
        node = graph.nodes[o.node]
        value = text[o.node][0]
        if node.op in REDUCTIONS:
            reductions.append(ReductionCode(o.name, REDUCTIONS[node.op], value, o.type))
            _conversion(o.type, conversions)
            continue
        outputs[o.name] = store_int(o.type, value) if integer else store_float(o.type, value)
        _conversion(o.type, conversions)
    return ElementCode(tuple(statements), outputs, tuple(reductions), "".join(definitions.values()),
                       tuple(dict.fromkeys(conversions)), integer)


def input_names(graph: Graph, param, vector_load, c_register: str, suffix: str = "") -> dict[str, str]:
    """The names :func:`element_code` takes for the graph's inputs other than ``acc``, as every kernel's epilogue
    stage binds them: ``c`` C's element as a float from the storage bits in ``c_register`` + ``suffix``; a scalar
    its kernel parameter (``param(name)``); an auxiliary matrix its element as a float from the storage bits in
    ``xe_ai_<name>`` + ``suffix``; a row or column vector what ``vector_load(param(name), kind)`` names."""
    names = {}
    for i in graph.inputs:
        if i.name == "acc":
            continue
        if i.name == "c":
            names["c"] = load_float(i.type, c_register + suffix)
        elif i.kind == "scalar":
            names[i.name] = param(i.name)
        elif i.kind == "matrix":
            names[i.name] = load_float(i.type, f"xe_ai_{i.name}{suffix}")
        else:
            names[i.name] = vector_load(param(i.name), i.kind)
    return names


def _conversion(type_name: str, conversions: list[str]) -> None:
    if type_name in ("bf16", "f16"):
        conversions.append(type_name)


def _wrap(operand: tuple[str, int], at_least: int) -> str:
    text, precedence = operand
    return text if precedence >= at_least else f"({text})"


def _expression(node, operands, integer: bool, definitions: dict, conversions: list) -> tuple[str, int]:
    op = OPS[node.op]
    if op.activation is not None:
        a = op.activation
        definitions.setdefault(a.name, a.definition(integer=integer))
        if integer:
            return a.call(operands[0][0], integer=True), CALL
        return f"xe_{a.name}({', '.join(t for t, _ in operands)})", CALL
    if node.op in HELPERS:
        definitions.setdefault(node.op, HELPERS[node.op])
    if node.op == "cast":
        _conversion(node.attr, conversions)
        return load_float(node.attr, store_float(node.attr, operands[0][0])), UNARY
    if node.op == "neg":
        (text, precedence), = operands
        return "-" + (f"({text})" if precedence < UNARY or text.startswith("-") else text), UNARY
    if node.op == "where":
        cond, a, b = operands
        return f"{_wrap(cond, TERNARY + 1)} ? {_wrap(a, TERNARY + 1)} : {_wrap(b, TERNARY)}", TERNARY
    if op.precedence == CALL:
        return op.c.format(*(t for t, _ in operands)), CALL
    left, right = operands   # a binary infix operator: the right operand keeps its own grouping
    return op.c.format(_wrap(left, op.precedence), _wrap(right, op.precedence + 1)), op.precedence


# ---- the fix-up of reductions ----------------------------------------------------------------------------------

def fixup_kernel(kernel_name: str, code: ReductionCode) -> str:
    """OpenCL C of the kernel that finishes one reduction: partials ``W`` (f32, from float ``offset`` on) laid out
    [batch][tile][length],
    where ``length`` is M for a row reduction (``tiles`` = the column tiles), N for a column reduction (the row
    tiles) and 1 for a sum (every tile); one work-item per (element, batch) combines its ``tiles`` partials in
    tile order and stores the result as the output type to ``out`` [batch][length].  Global size
    (length, batch)."""
    r = code.reduction
    ctype = storage_ctype(code.type)
    return f"""/* fix-up of {r.name} '{code.name}': per element, the per-tile partials combined in tile order (no
   atomics: the same result on every run), then stored as {code.type} */
__kernel void {kernel_name}(const global float* W, global {ctype}* out, long offset, int length, int tiles)
{{
    const int i = get_global_id(0), batch = get_global_id(1);
    if (i >= length)
        return;
    const global float* w = W + offset + (long)batch * tiles * length + i;
    float r = {r.identity};
    for (int t = 0; t < tiles; ++t)
        r = {r.c_combine("r", "w[(long)t * length]")};
    out[(long)batch * length + i] = {store_float(code.type, "r")};
}}
"""


def partial_layout(code: ReductionCode, m: int, n: int, tile: tuple[int, int]) -> tuple[int, int]:
    """(length, tiles) of a reduction's partials for an M x N problem cut into ``tile`` = (BM, BN) work-group
    tiles: which partial a work-group tile (tile_m, tile_n) stores is index tile_n (row reductions),
    tile_m (column reductions) or tile_m * tiles_n + tile_n (sums) of element m, n or 0."""
    bm, bn = tile
    tiles_m, tiles_n = -(-m // bm), -(-n // bn)
    kind = code.reduction.kind
    if kind == "row":
        return m, tiles_n
    if kind == "col":
        return n, tiles_m
    return 1, tiles_m * tiles_n

