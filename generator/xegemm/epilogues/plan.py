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

from xegemm.plan.atom_choice import load_twin, plan_store
from xegemm.atoms.base import CopyAtomBase
from xegemm.library.dtypes import dtype
from xegemm.epilogues.graph import Graph
from xegemm.errors import PlanRejected
from xegemm.plan.operands import OperandPlan


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


# ---- reductions: per-tile partials, then a fix-up kernel in fixed order -----------------------------------------

@dataclass(frozen=True)
class ReductionPlan:
    """Where a reduction's partials go (docs/epilogues.md, "Deterministic reductions").  Each work-item combines
    its own elements of the sub-group tile in a fixed order into one partial per row it holds (a row reduction),
    per column (a column reduction) or one (a sum), and stores it to its own slot of the workspace, laid out
    [batch][slot][length]; the fix-up kernel ``<kernel>_<name>`` combines each element's slots in slot order.

    * row: a slot per (sub-group column, lane): ``(n0 / sgN) * SG + lane``; ceil(N / BN) * SG_N * SG slots of M.
    * col: a slot per sub-group row: ``m0 / sgM``; ceil(M / BM) * SG_M slots of N (each column in one lane).
    * scalar: a slot per sub-group and lane; slots of 1.

    ``slots``, ``length`` and ``offset`` (floats before its partials in the workspace) are formulas of M, N and
    batch (xegemm.library.formula); ``slot`` the C of the work-item's slot."""

    name: str
    kind: str
    type: str
    slots: str
    length: str
    offset: str
    slot: str

    @property
    def floats(self) -> str:
        """Floats of its partials: batch x slots x length."""
        return f"batch * ({self.slots}) * {self.length}"


def plan_reductions(config, graph: Graph, subgroup_tile) -> tuple[ReductionPlan, ...]:
    """The workspace of a traced epilogue's reductions, in output order."""
    (bm, bn, _), (sgm_count, sgn_count), sg = config.tile.workgroup, config.tile.subgroups, config.tile.subgroup_size
    sgm, sgn = subgroup_tile
    tiles_m, tiles_n = f"(M + {bm - 1}) / {bm}", f"(N + {bn - 1}) / {bn}"
    out, offset = [], "0"
    for o in graph.reductions():
        kind = graph.nodes[o.node].kind
        if kind == "row":
            slots, length, slot = f"{tiles_n} * {sgn_count * sg}", "M", f"(n0 / {sgn}) * {sg} + lane"
        elif kind == "col":
            slots, length, slot = f"{tiles_m} * {sgm_count}", "N", f"m0 / {sgm}"
        else:
            slots, length = f"{tiles_m} * {tiles_n} * {sgm_count * sgn_count * sg}", "1"
            slot = f"((m0 / {sgm}) * ({tiles_n}) * {sgn_count} + n0 / {sgn}) * {sg} + lane"
        r = ReductionPlan(o.name, kind, o.type, slots, length, offset, slot)
        out.append(r)
        offset = f"{offset} + {r.floats}" if offset != "0" else r.floats
    return tuple(out)


def workspace_floats(reductions) -> str:
    """Floats of the whole workspace of a traced epilogue's reductions (a formula; "0": none)."""
    return " + ".join(f"({r.floats})" for r in reductions) or "0"
