"""The epilogue graph: what a traced epilogue function computes, as typed nodes.

A graph has inputs (``acc``, the accumulator tile; ``c``, the source matrix; named row vectors (one value per
row of D, shape (M, 1)), column vectors ((1, N)), auxiliary matrices (M x N, of their own element type) and
scalars), nodes in the order the function computed them (each an op of :mod:`.registry` over earlier nodes,
with the shape it broadcasts to and whether it is a number or a condition), and outputs: ``d``, auxiliary
matrices stored with their own type, and reductions (row/column vectors or a scalar per batch).

The graph is the one description every consumer reads: the numpy reference (:mod:`.reference`), the C
emitter (:mod:`.emit`), and the kernel name through :attr:`Graph.key` (a stable short hash of its canonical
serialization) and :attr:`Graph.tag` (a readable summary such as ``bias_gelu_erf_aux``).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field

from xegemm.epilogues.outputs import OUTPUT_TYPES
from xegemm.epilogues.registry import EXACT_INTEGER_OPS, OPS, REDUCTIONS

KINDS = ("scalar", "row", "col", "matrix")   # how a value broadcasts over the M x N tile
VECTOR_TYPE = "f32"                          # row and column vectors and scalars are f32, as the bias is today
REDUCTION_TYPES = ("f32", "f16", "bf16")     # a reduction is summed in f32 and stored as one of these
RESERVED = ("acc", "c", "d")                 # parameter and output names with fixed meanings
HASH_CHARS = 8
STORE_TYPES = OUTPUT_TYPES                   # what D and auxiliary outputs can be stored as


def kind_shape(kind: str, m: int, n: int, batch: tuple = ()) -> tuple:
    """The shape of a value of ``kind`` over a D of M x N (``batch``: the leading dimensions it carries): a
    matrix is (*batch, M, N), a row vector (one value per row of D) (*batch, M), a column vector (*batch, N), a
    scalar (*batch,).  The one home of what the kinds mean in memory."""
    shapes = {"matrix": (*batch, m, n), "row": (*batch, m), "col": (*batch, n), "scalar": tuple(batch)}
    if kind not in shapes:
        raise ValueError(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")
    return shapes[kind]


def broadcast(a: str, b: str) -> str:
    """The kind of a value computed from values of kinds ``a`` and ``b`` (a row and a column make a matrix)."""
    if a == b or b == "scalar":
        return a
    if a == "scalar":
        return b
    return "matrix"


@dataclass(frozen=True)
class Input:
    """A named input: ``kind`` one of :data:`KINDS`; ``type`` its element type (f32 unless a matrix)."""

    name: str
    kind: str
    type: str = VECTOR_TYPE


@dataclass(frozen=True)
class Node:
    """One value: ``op`` (a :mod:`.registry` op, ``input`` or ``const``), its operands (earlier node indices),
    ``attr`` (the input's name, the constant (an f32 value), a cast's type), its ``kind`` and ``vtype``
    (``float``, or ``bool`` for a comparison); ``site`` is the (file, line) that computed it."""

    op: str
    args: tuple[int, ...]
    attr: object
    kind: str
    vtype: str = "float"
    site: tuple[str, int] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Output:
    """An output: ``d``, an auxiliary matrix, or a reduction (its node's op is a reduction), stored as ``type``."""

    name: str
    node: int
    type: str


@dataclass(frozen=True)
class Graph:
    """A traced epilogue: ``function`` (the traced function's qualified name), the accumulator type ``acc``, the
    inputs (``acc`` and ``c`` among them when used), the nodes and the outputs (``d`` first)."""

    function: str
    acc: str
    inputs: tuple[Input, ...]
    nodes: tuple[Node, ...]
    outputs: tuple[Output, ...]
    site: tuple[str, int] | None = field(default=None, compare=False)

    # -- parts ------------------------------------------------------------------------------------------
    def input(self, name: str) -> Input:
        return next(i for i in self.inputs if i.name == name)

    def output(self, name: str) -> Output:
        return next(o for o in self.outputs if o.name == name)

    @property
    def d(self) -> Output:
        return self.outputs[0]

    @property
    def out(self) -> str:
        """D's type."""
        return self.d.type

    def reads(self, name: str) -> bool:
        return any(i.name == name for i in self.inputs)

    def reductions(self) -> list[Output]:
        from_nodes = {i for i, n in enumerate(self.nodes) if n.op in REDUCTIONS}
        return [o for o in self.outputs if o.node in from_nodes]

    def auxiliaries(self) -> list[Output]:
        """Extra matrix outputs (not d, not reductions)."""
        return [o for o in self.outputs[1:] if self.nodes[o.node].op not in REDUCTIONS]

    def uses(self) -> list[int]:
        """How many times each node is read (by nodes and outputs)."""
        count = [0] * len(self.nodes)
        for n in self.nodes:
            for a in n.args:
                count[a] += 1
        for o in self.outputs:
            count[o.node] += 1
        return count

    @property
    def exact_integer(self) -> bool:
        """The exact integer path (as :attr:`xegemm.epilogues.fixed.EpilogueSpec.exact_integer`): an integer accumulator
        stored to an integer D through nothing but ops that map integers to integers (relu)."""
        return (_is_int(self.acc) and _is_int(self.out) and len(self.outputs) == 1
                and all(n.op in EXACT_INTEGER_OPS or (n.op == "input" and n.attr == "acc") for n in self.nodes))

    # -- names ------------------------------------------------------------------------------------------
    def canonical(self) -> str:
        """The graph as canonical JSON: what it computes, nothing of how the function was written (names of
        Python variables, source lines, the function's name)."""
        def attr(a):
            return float(a).hex() if isinstance(a, float) else a
        return json.dumps({"acc": self.acc,
                           "inputs": [[i.name, i.kind, i.type] for i in self.inputs],
                           "nodes": [[n.op, list(n.args), attr(n.attr)] for n in self.nodes],
                           "outputs": [[o.name, o.node, o.type] for o in self.outputs]},
                          separators=(",", ":"), sort_keys=True)

    @property
    def key(self) -> str:
        """A stable short hash: the first hex digits of the sha256 of :meth:`canonical`."""
        return hashlib.sha256(self.canonical().encode()).hexdigest()[:HASH_CHARS]

    @property
    def tag(self) -> str:
        """A readable summary for kernel names: the named inputs read, the ops beyond arithmetic, the casts'
        types and the extra outputs, in the order the function used them (``bias_gelu_erf_aux``)."""
        parts = [i.name for i in self.inputs if i.name != "acc"]
        for n in self.nodes:
            if n.op in REDUCTIONS or (n.op in OPS and OPS[n.op].tagged):
                parts.append(n.attr if n.op == "cast" else n.op)
        parts += [o.name for o in self.outputs[1:]]
        words = list(dict.fromkeys(re.sub(r"[^a-z0-9_]+", "", p.lower()).strip("_") for p in parts)) or ["identity"]
        tag = ""
        for w in words:
            if w and len(tag) + len(w) + 1 > 40:
                break
            tag = f"{tag}_{w}" if tag else w
        return tag

    def describe(self) -> str:
        """One line for kernel comments and plan summaries: the function, its tag and key, outputs and inputs."""
        inputs = ", ".join(f"{i.name} ({i.kind}{' ' + i.type if i.kind == 'matrix' else ''})"
                           for i in self.inputs if i.name != "acc")
        outputs = ", ".join(f"{o.name} as {o.type}" for o in self.outputs)
        return (f"traced {self.function} ({self.tag}, graph {self.key}): {outputs}"
                + (f"; reads {inputs}" if inputs else "") + ", computed in f32")

    def name_suffix(self) -> str:
        """The kernel name's part for the epilogue: ``_epi_<tag>_<key>``."""
        return f"_epi_{self.tag}_{self.key}"


def _is_int(type_name: str) -> bool:
    return type_name in ("s32", "s8", "u8")
