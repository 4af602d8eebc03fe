"""The planner's job for a traced epilogue (docs/epilogues.md): the copy atoms of its auxiliary matrices and the
rules a traced epilogue sets on a plan.

An auxiliary input matrix is read with the load twin of the store atom of its own element type, an auxiliary
output stored with that store atom, beside D's tiles: every one must cover the sub-group tile with the same tiles
and hold each accumulator element at the same register offset as D's store, so that one element of the epilogue
is computed once and written to each of them (checked here; a plan where they differ is rejected with the
reason).  Kernel parameters of named inputs and outputs are ``in_<name>`` and ``out_<name>`` (the tracer
reserves ``xe_`` names, and kernel locals never start so).
"""

from __future__ import annotations

from dataclasses import dataclass

from xegemm.atom_choice import load_twin, plan_store
from xegemm.atoms.base import CopyAtomBase
from xegemm.dtypes import dtype
from xegemm.epilogue_graph.graph import Graph
from xegemm.errors import PlanRejected
from xegemm.operands import OperandPlan


@dataclass(frozen=True)
class AuxMatrix:
    """An auxiliary matrix of a traced epilogue: ``name``, element ``type``, ``output`` (stored) or input (read),
    and the copy atom that moves it."""

    name: str
    type: str
    output: bool
    atom: CopyAtomBase

    @property
    def param(self) -> str:
        """Its kernel parameter: ``out_<name>`` or ``in_<name>``."""
        return f"{'out' if self.output else 'in'}_{self.name}"

    @property
    def register(self) -> str:
        """The register variable a tile of an input is loaded into."""
        return f"xe_ai_{self.name}"


def input_param(name: str) -> str:
    """The kernel parameter of a named row, column or scalar input."""
    return f"in_{name}"


def plan_auxiliaries(config, graph: Graph, c_plan: OperandPlan, mma, subgroup_tile, grid, block2d: bool,
                     issuable=None) -> tuple[AuxMatrix, ...]:
    """The auxiliary matrices' atoms, or PlanRejected naming the rule a traced epilogue breaks in this plan."""
    tile = config.tile
    if tile.split_k > 1 or tile.stream_k:
        raise PlanRejected(f"epilogue {graph.function}: a traced epilogue runs in the GEMM kernel's epilogue stage, "
                           "which split K and stream-K leave to their fix-up kernel; use split_k: 1 and stream_k: 0")
    if graph.reductions():
        names = ", ".join(o.name for o in graph.reductions())
        raise PlanRejected(f"epilogue {graph.function}: reductions ({names}) are not in the GEMM kernels yet "
                           "(docs/epilogues.md, Status)")
    wanted = [(i.name, i.type, False) for i in graph.inputs if i.kind == "matrix" and i.name not in ("acc", "c")] \
        + [(o.name, o.type, True) for o in graph.auxiliaries()]
    out = []
    for name, type_name, output in wanted:
        what = f"epilogue {graph.function}: auxiliary {'output' if output else 'input'} {name} ({type_name})"
        bits = dtype(type_name).bits
        store = c_plan if bits == c_plan.atom.elem_bits else plan_store(None, bits, mma, subgroup_tile, grid, block2d)
        if store.tiles != c_plan.tiles or store.fragments != c_plan.fragments:
            raise PlanRejected(f"{what}: its store atom {store.atom.name} covers the sub-group tile with other tiles "
                               f"or register offsets than D's {c_plan.atom.name}; the epilogue writes one element to "
                               "both at once: store it as a type of D's width or choose another tile")
        atom = store.atom
        if not output:
            try:
                atom = load_twin(store.atom, issuable)
            except PlanRejected as exc:
                raise PlanRejected(f"{what}: {exc}") from None
        out.append(AuxMatrix(name, type_name, output, atom))
    return tuple(out)
