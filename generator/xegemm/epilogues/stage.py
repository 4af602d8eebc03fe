"""The epilogue stage of a GEMM kernel from an epilogue graph: what the kernel template prints around the
store of each C tile, for the fixed epilogue (:func:`xegemm.epilogues.fixed.fixed_graph`) and a traced one
(docs/epilogues.md) alike, in either lowering (the atoms' functions are the lowering's; the element code is
plain OpenCL C, :mod:`xegemm.epilogues.emit`).

Per element the graph's inputs are named for :func:`xegemm.epilogues.emit.element_code`: ``acc`` the
accumulator element, ``c`` C's element in the register its load twin filled (``ci``), a row or column vector
the value loaded once per tile and index (``<param><k>``: ``bias0``), a scalar its kernel parameter, an
auxiliary matrix the element of the register its load atom filled for the tile (``xe_ai_<name>``).  The fixed
epilogue's inputs are the kernel's own parameters (``bias``, ``alpha``, ``beta``, ``clamp_lo``, ``clamp_hi``); a
traced epilogue's are ``in_<name>`` and its extra outputs ``out_<name>`` (:mod:`xegemm.epilogues.plan`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xegemm.library.dtypes import dtype
from xegemm.epilogues.emit import element_code, fixup_kernel, input_names
from xegemm.epilogues.fixed import fixed_graph
from xegemm.epilogues.graph import Graph
from xegemm.epilogues.plan import input_param
from xegemm.errors import PlanRejected
from xegemm.library.formula import substitute

CONVERSIONS = ("bf16", "f16")      # the output types whose conversion helpers templates/convert.cl.j2 defines


@dataclass(frozen=True)
class Stage:
    """The epilogue stage of a plan: its graph, whether it is traced, and the auxiliary matrices' atoms."""

    graph: Graph
    traced: bool
    aux: tuple = ()
    reductions: tuple = ()        # xegemm.epilogues.plan.ReductionPlan per reduction
    partials: dict = field(default_factory=dict, compare=False)   # (reduction, row/column) -> its C variable

    @classmethod
    def of(cls, plan, spec=None) -> "Stage":
        """The stage of ``plan`` (``spec``: a fixed EpilogueSpec instead, e.g. stream-K's store of pieces)."""
        if spec is None and plan.graph is not None:
            return cls(plan.graph, True, plan.aux, plan.reductions)
        return cls(fixed_graph(spec or plan.kernel_epilogue), False)

    # -- reductions ----------------------------------------------------------------------------------------------
    def reduce(self, codes, row: str, col: str, lanes) -> list[str]:
        """The statements that combine one element's contributions (``codes``: emit.ReductionCode) into the
        work-item's partials, in element order; ``row``, ``col`` its coordinates (C), ``lanes`` its row and column
        in each lane.  Elements outside the problem contribute nothing."""
        rows, cols = lanes
        out = []
        for code in codes:
            kind = code.reduction.kind
            if kind == "row" and len(set(rows)) != 1 or kind == "col" and len(set(cols)) != len(cols):
                raise PlanRejected(f"epilogue {self.graph.function}: {code.name} ({code.reduction.name}) needs every "
                                   f"lane to hold {'all rows' if kind == 'row' else 'columns of its own'} of the C "
                                   "tile, which this plan's C layout does not")
            key = row if kind == "row" else col if kind == "col" else "0"
            taken = sum(name == code.name for name, _ in self.partials)
            var = self.partials.setdefault((code.name, key), f"xe_p_{code.name}_{taken}")
            out.append(f"if ({row} < M && {col} < N) {var} = {code.reduction.c_combine(var, code.value)};")
        return out

    def partial_declarations(self) -> list[str]:
        """Each partial, set to its reduction's identity before the tiles."""
        identity = {c.name: c.reduction.identity for c in element_code(self.graph).reductions}
        return [f"float {var} = {identity[name]};" for (name, _), var in self.partials.items()]

    def partial_stores(self) -> list[str]:
        """After the tiles: each partial to the work-item's slot of its reduction's workspace."""
        out = []
        for r in self.reductions:
            def c(expr):
                return substitute(expr, {"batch": "get_num_groups(2)"})
            out.append(f"global float* const xe_w_{r.name} = xe_partials + (long)({c(r.offset)}) + "
                       f"((long)get_group_id(2) * ({c(r.slots)}) + {r.slot}) * {r.length};")
            for (name, key), var in self.partials.items():
                if name == r.name:
                    limit = {"row": f"if ({key} < M) ", "col": f"if ({key} < N) "}.get(r.kind, "")
                    out.append(f"{limit}xe_w_{r.name}[{key}] = {var};")
        return out

    def fixups(self, kernel: str) -> str:
        """The reductions' fix-up kernels (emit.fixup_kernel), ``<kernel>_<name>``."""
        return "".join(fixup_kernel(f"{kernel}_{c.name}", c) for c in element_code(self.graph).reductions)

    def param(self, name: str) -> str:
        return input_param(name) if self.traced else name

    def element(self, acc: str, c_suffix: str, vector_load, temp: str, c_register: str = "ci"):
        """The element code (emit.ElementCode) of one element: ``acc`` its accumulator, ``c_suffix`` its
        component of the C / auxiliary registers (``.s3``, ``[48]``, or "" for a one-element register),
        ``vector_load(name, kind)`` the variable holding a row or column vector's value for it; ``c_register``:
        where C was read into."""
        names = {"acc": acc} | input_names(self.graph, self.param, vector_load, c_register, c_suffix)
        return element_code(self.graph, names, temp=temp)

    # -- what the template prints once ------------------------------------------------------------------------
    def definitions(self) -> str:
        """The C functions the element code calls (the activations')."""
        return element_code(self.graph).definitions

    def conversions(self, c_type: str) -> list[str]:
        """The conversion helpers of templates/convert.cl.j2 the kernel needs: C's, then the traced outputs' and
        casts' (in the graph's order)."""
        wanted = [c_type] + (list(element_code(self.graph).conversions) if self.traced else [])
        return [t for t in dict.fromkeys(wanted) if t in CONVERSIONS]

    def params(self) -> list[str]:
        """The traced epilogue's kernel parameters beyond the fixed ones: named inputs, then auxiliary outputs."""
        if not self.traced:
            return []
        out = []
        for i in self.graph.inputs:
            if i.name in ("acc", "c"):
                continue
            if i.kind == "matrix":
                out.append(f"const global uchar* {input_param(i.name)}")
            elif i.kind == "scalar":
                out.append(f"float {input_param(i.name)}")
            else:
                out.append(f"const global float* {input_param(i.name)}")
        return out + [f"global uchar* {a.param}" for a in self.aux if a.output] \
            + ["global float* xe_partials" for _ in self.reductions[:1]]

    def batch_lines(self) -> list[str]:
        """The auxiliary matrices' moves to the work-group's batch (compact M x N per batch, as C)."""
        return [f"{a.param} += get_group_id(2) * (long)M * N * {dtype(a.type).bits // 8};" for a in self.aux]

    def surface(self, aux) -> str:
        """An auxiliary matrix's 2D surface: base, width in bytes, height, pitch in bytes (compact rows)."""
        row = f"N * {dtype(aux.type).bits // 8}"
        return f"{aux.param}, {row}, M, {row}"

    def describe(self) -> str:
        """One line for the kernel's header comment."""
        if not self.traced:
            raise ValueError("the fixed epilogue describes itself (EpilogueSpec.describe)")
        return self.graph.describe()
