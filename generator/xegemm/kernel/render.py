"""Render OpenCL C from the jinja2 templates (StrictUndefined: a missing value is an error, never blank).

The plan says what the kernel computes; the :class:`xegemm.lowering.Lowering` says how each atom is spelled
(:mod:`xegemm.lowering.portable` and :mod:`xegemm.lowering.native` turn atom descriptions into what the atom
templates print).  :func:`render_kernel` is the one entry point for a kernel; :func:`render_mma` and
:func:`render_copy_atoms` render atom libraries on their own (the atom tests use them).
"""

from __future__ import annotations

from pathlib import Path

from xegemm import __version__

from xegemm.plan import stream_k
from xegemm.atoms.copy import CopyAtom
from xegemm.atoms.mma import MmaAtom
from xegemm.atoms.lanemap import lane_affine, lane_expr
from xegemm.library.dtypes import UNSIGNED_CTYPE, c_spelling, ctype_shape, dtype
from xegemm.epilogues.outputs import load_float
from xegemm.errors import XegemmError
from xegemm.grouped.schedule import walk_lines
from xegemm.lowering import Lowering, lowering_class, named_lowering
from xegemm.lowering.native import NativeUnsupported
from xegemm.lowering.loops import reroll
from xegemm.lowering.dequant import dequant_a_operands, dequant_b_operands, dequant_code
from xegemm.lowering.portable import staged_kstep
from xegemm.lowering.reorder import plan_reorders
from xegemm.plan.planner import Plan, PlanRejected
from xegemm.epilogues.emit import element_code
from xegemm.epilogues.fixed import fixed_graph
from xegemm.epilogues.stage import Stage
from xegemm.plan.swizzle import c_lines as swizzle_c_lines
from xegemm.lowering.templating import environment, render_macro, wide_vector_typedefs

__all__ = ["environment", "render_copy_atoms", "render_kernel", "render_macro", "render_mma", "render_opencl",
           "wide_vector_typedefs"]


def render_mma(atoms, lowering: str) -> str:
    """OpenCL C defining the ``fn_name`` function of each DPAS atom (one atom or an iterable), in the lowering
    "native" (the builtin) or "portable" (ordinary arithmetic and sub-group broadcasts)."""
    atoms = [atoms] if isinstance(atoms, MmaAtom) else list(atoms)
    return lowering_class(lowering).render_mma(atoms)


def render_copy_atoms(atoms, lowering: Lowering) -> str:
    """OpenCL C defining the ``fn_name`` function of each copy atom (2D or 1D block), in one lowering."""
    return lowering.render_copies(atoms)


def _accumulator_element(plan: Plan, staged, i: int, j: int, r: int, as_int: bool, scalar: str | None = None) -> str:
    """Row ``r`` of accumulator fragment (i, j) as a float (an int on the exact integer path): a scalar of the
    staged k-step (``scalar``: where it is read instead of its name), or a component of the DPAS accumulator
    register."""
    code = plan.mma.c
    if staged:
        x = scalar or f"acc_{i}_{j}_{r}"
        return (f"as_int({x})" if as_int else f"(float)as_int({x})") if code == "S32" else x
    x = f"acc_{i}_{j}" + (f".s{r:x}" if plan.mma.register_m > 1 else "")
    return x if as_int else c_spelling(code, "register_to_float", x)


def _lane_coordinate(values: list[int], sub_group: int) -> str:
    """A C expression in ``lane`` giving ``values[lane]`` (affine in the lane, as block layouts are)."""
    fit = next(((n, c) for n in (sub_group, 8, 4, 2) if (c := lane_affine(values, n)) is not None), None)
    if fit is None:
        raise XegemmError(f"C element coordinates {values} are not affine in the lane")
    return lane_expr(fit[1], fit[0], sub_group)


def _plus(base: str, origin: int | str, offset: str) -> str:
    """``base + origin + offset`` with the constants folded (``origin`` a number, or a C variable)."""
    if isinstance(origin, str):
        return f"{base} + {origin}" + ("" if offset == "0" else f" + {offset}")
    if offset.isdigit():
        total = origin + int(offset)
        return f"{base} + {total}" if total else base
    return f"{base} + {origin} + {offset}" if origin else f"{base} + {offset}"


# The rolled epilogue's names: the accumulators by tile (or their offsets in local memory), the tile's index
# and origin (row, column); with its rows in local memory, C read there and D (by its component type) written
# there.
ROLLED_ACC, ROLLED_BASE, ROLLED_TILE, ROLLED_ORIGIN = "xe_acc", "xe_af", "xe_t", ("xe_tr", "xe_tc")
ROWS_C, ROWS_D = "xe_ci", "xe_d_{ctype}"


def _tile_fragments(operand, t: int) -> list:
    """((i, j), fragment) of C tile ``t``, in the plan's order."""
    return [(ij, frag) for ij, frag in operand.fragments.items() if frag.tile == t]


def _rollable(operand, stage: Stage) -> bool:
    """Whether every C tile holds its fragments at the same offsets (so one loop body serves them all), and no
    reduction keeps partials per tile position."""
    tiles = [[frag.offset for _, frag in _tile_fragments(operand, t)] for t in range(len(operand.tiles))]
    return len(tiles) > 1 and all(offsets == tiles[0] for offsets in tiles) and not stage.reductions


def epilogue_tiles(plan: Plan, staged, partial: bool = False, stage: Stage | None = None,
                   rolled: bool = False) -> list[dict]:
    """Per C tile: its origin, and each element of its store register computed from the accumulator (and C,
    and the bias) as xegemm.epilogues.fixed spells the element function.  ``partial``: stream-K's store of a piece
    of a tile, the accumulator as it is (plan.partial).

    ``rolled`` (the lowering's ``rolls_epilogue``): when every tile has the same shape, one tile whose
    ``roll`` says where each tile's accumulators are and the tiles' origins; the template prints its body once,
    in a loop over the tiles, at origin (xe_tr, xe_tc).  Where the staged k-step keeps the accumulators in
    local memory (its register blocks run by a loop, ``staged.rolled``), the loop reads them there, by each
    tile's fragment offsets (``roll.bases``), whatever the epilogue; otherwise only an epilogue that computes
    (not D = acc) is rolled, over an array of all tiles' accumulators (``roll.init``, ``xe_acc[tile][slot]``).
    The same element code on the same values: the results are identical to the unrolled tiles'."""
    spec, operand = (plan.partial_epilogue, plan.partial) if partial else (plan.kernel_epilogue, plan.c)
    store = operand.atom
    identity = spec.identity and spec.out == spec.acc and (partial or plan.graph is None)
    if stage is None or partial:
        stage = Stage.of(plan, spec if partial else None)
    # Read from local memory, one store call site instead of one per tile: the plain kernel's build took 0.76x
    # (AVX-512) and 0.66x (AVX2) the unrolled stores' time.  D = acc over an array of accumulator registers is
    # left unrolled: a put and a store per tile cost little, and that array made the plain kernel build 1.37x
    # slower on the AVX2 code path (0.92x on AVX-512).
    local = rolled and staged is not None and staged.rolled is not None
    if rolled and (local or not identity) and _rollable(operand, stage):
        return [_rolled_tile(plan, staged, operand, stage, local)]
    if identity:
        # D = acc, bit for bit: each accumulator register is moved into the store register whole, by the put
        # helper (templates/fragments.cl.j2).  Measured: IGC 1.0.12504 spills 128 B on the 256x256x32 / 8x4
        # reference tile when the same register is built from its elements, and none with the helper.
        return [_put_tile(plan, store, origin, [
            (frag.offset, staged.packed(i, j) if staged else f"acc_{i}_{j}")
            for (i, j), frag in _tile_fragments(operand, t)]) for t, origin in enumerate(operand.tiles)]
    return [_element_tile(plan, staged, operand, stage, t, origin) for t, origin in enumerate(operand.tiles)]


def _put_tile(plan: Plan, store, origin, puts) -> dict:
    return {"origin": origin, "puts": puts, "put": f"xe_put_{plan.mma.ctype('c')}_into_{store.register_type}",
            "biases": [], "uses_lane": False, "statements": [], "aux_loads": [], "aux_stores": [], "roll": None,
            "rows": None}


def _rolled_tile(plan: Plan, staged, operand, stage: Stage, local: bool) -> dict:
    """The one tile of a rolled epilogue (see :func:`epilogue_tiles`): the accumulator elements by tile, as the
    element code takes them; ``local``: read from the staged k-step's local accumulators (``sacc``), where
    row r of fragment (i, j) is ``sacc[((i * rows + r) * nt + j) * sg + lane]`` (its rolled_accumulators)."""
    store, frag_rows = operand.atom, plan.mma.lane_map("c").map[0]
    exact = stage.graph.exact_integer
    if local:
        nt, sg = plan.mma_grid[1], plan.config.tile.subgroup_size
        slots = {ij: (k, frag.offset) for k, (ij, frag) in enumerate(_tile_fragments(operand, 0))}

        def accumulator(i, j, e):
            k, offset = slots[(i, j)]
            at = f"sacc[{ROLLED_BASE}[{ROLLED_TILE}][{k}] + {(e - offset) * nt * sg} + lane]"
            return _accumulator_element(plan, staged, i, j, e - offset, exact, at)
        tile = _element_tile(plan, staged, operand, stage, 0, ROLLED_ORIGIN, accumulator)
        two_d = all(isinstance(a, CopyAtom) for a in (operand.atom, plan.c_in) if a is not None)
        if two_d and not (tile["statements"] or tile["biases"] or tile["aux_loads"] or tile["aux_stores"]):
            tile = _rows_tile(plan, staged, operand, stage, accumulator, sg)
        bases = [[(i * staged.rows * nt + j) * sg for (i, j), _ in _tile_fragments(operand, t)]
                 for t in range(len(operand.tiles))]
        tile["roll"] = {"bases": bases, "init": None, "origins": list(operand.tiles)}
        return tile
    init = []
    for t in range(len(operand.tiles)):
        row = ["0"] * store.register_length
        for (i, j), frag in _tile_fragments(operand, t):
            for r, cell in enumerate(frag_rows):
                if cell is not None:
                    row[frag.offset + r] = _accumulator_element(plan, staged, i, j, r, exact)
        init.append(row)
    tile = _element_tile(plan, staged, operand, stage, 0, ROLLED_ORIGIN,
                         lambda i, j, e: f"{ROLLED_ACC}[{ROLLED_TILE}][{e}]")
    tile["roll"] = {"ctype": "int" if exact else "float", "init": init, "bases": None, "origins": list(operand.tiles)}
    return tile


def _rows_tile(plan: Plan, staged, operand, stage: Stage, accumulator, sg: int) -> dict:
    """The rolled tile with its rows in local memory: C read with the load's ``_into_local`` into
    :data:`ROWS_C`, each component of D computed into :data:`ROWS_D` (component e of this lane at ``[e * sg]``,
    so that alike components are one loop, lowering.loops), then stored with the store's ``_from_local``.  The
    same element code on the same values as :func:`_element_tile`'s; each lane reads and writes only its own
    components, so no barrier is needed.  An f16 D with alpha, beta and relu built in 0.65x (AVX-512) and
    0.58x (AVX2) the time of the tile's element-by-element store (docs/benchmarks.md)."""
    store = operand.atom
    d = ROWS_D.format(ctype=store.register_elem_ctype)
    tile = _element_tile(plan, staged, operand, stage, 0, ROLLED_ORIGIN, accumulator, rows=(ROWS_C, sg))
    lines = [f"{d}[{e * sg}] = {value};" for e, value in enumerate(tile["values"]) if value != "0"]
    c_in = plan.c_in if plan.c_in and operand is plan.c else None
    buffers = {d: (store.register_elem_ctype, store.register_length * sg)}
    if c_in:
        buffers[ROWS_C] = (c_in.register_elem_ctype, c_in.register_length * sg)
    return {**tile, "values": [], "rows": {"lines": reroll(lines, indent="    "), "d": d, "buffers": buffers,
                                          "c_in": ROWS_C if c_in else None}}


def local_buffers(*tile_lists) -> list[tuple[str, str, int]]:
    """(name, component type, components of a sub-group) of each local buffer the tiles with their rows in local
    memory (:func:`_rows_tile`) use, the largest each name needs."""
    sizes: dict[str, tuple[str, int]] = {}
    for tile in (t for tiles in tile_lists for t in tiles if t.get("rows")):
        for name, (ctype, n) in tile["rows"]["buffers"].items():
            sizes[name] = (ctype, max(n, sizes.get(name, (ctype, 0))[1]))
    return [(name, ctype, n) for name, (ctype, n) in sizes.items()]


def _element_tile(plan: Plan, staged, operand, stage: Stage, t: int, origin, accumulator=None,
                  rows: tuple[str, int] | None = None) -> dict:
    """C tile ``t`` at ``origin`` with each element of its store register computed by the stage from the
    accumulator element (``accumulator(i, j, e)``, default the fragment's own register); ``rows``: C's
    component e read at ``<name>[e * stride]`` (local memory, :func:`_rows_tile`), not from the register."""
    sg, store = plan.config.tile.subgroup_size, operand.atom
    cmap = store.lane_map.map
    frag_rows = plan.mma.lane_map("c").map[0]
    count = store.register_length
    outputs = [o.name for o in stage.graph.auxiliaries()]
    stores = {a.name: a for a in stage.aux if a.output}
    r0, c0 = origin
    values, biases = ["0"] * count, {}     # biases: the tile's vector loads, one per distinct index
    aux_values = {name: ["0"] * count for name in outputs}
    statements = []
    for (i, j), frag in _tile_fragments(operand, t):
        for r, cell in enumerate(frag_rows):
            if cell is None:
                continue
            e = frag.offset + r
            row = _lane_coordinate([cmap[lane][e][0] for lane in range(sg)], sg)
            col = _lane_coordinate([cmap[lane][e][1] for lane in range(sg)], sg)

            def vector(param, kind):
                where = _plus("m0", r0, row) if kind == "row" else _plus("n0", c0, col)
                load = f"{where} < {'M' if kind == 'row' else 'N'} ? {param}[{where}] : 0.0f"
                taken = sum(name.startswith(param) for name in biases.values())
                return biases.setdefault(load, f"{param}{taken}")
            acc = accumulator(i, j, e) if accumulator else \
                _accumulator_element(plan, staged, i, j, r, stage.graph.exact_integer)
            suffix = f"[{e * rows[1]}]" if rows else f".s{e:x}" if count > 1 else ""
            code = stage.element(acc, suffix, vector, f"xe_e{e}_", *(rows[:1] if rows else ()))
            statements += code.statements
            if code.reductions:
                lanes = [[cmap[lane][e][axis] for lane in range(sg)] for axis in (0, 1)]
                statements += stage.reduce(code.reductions, _plus("m0", r0, row), _plus("n0", c0, col), lanes)
            values[e] = code.outputs["d"]
            for name in outputs:
                aux_values[name][e] = code.outputs[name]
    loads = [(name, load) for load, name in biases.items()]
    return {"origin": (r0, c0), "values": values, "biases": loads, "puts": [], "roll": None, "rows": None,
            "uses_lane": any("lane" in line for line in [load for _, load in loads] + statements),
            "statements": statements,
            "aux_loads": [{"type": a.atom.register_type, "var": a.register, "fn": a.atom.fn_name,
                           "surface": stage.surface(a)} for a in stage.aux if not a.output],
            "aux_stores": [{"type": stores[name].atom.register_type, "fn": stores[name].atom.fn_name,
                            "surface": stage.surface(stores[name]), "values": aux_values[name]}
                           for name in outputs]}


def reduction(plan: Plan) -> dict:
    """What the reduction kernel (templates/reduce.cl.j2) of split K or stream-K needs: the partial sums' type
    and how one element of D is computed from their sum, as xegemm.epilogues.fixed spells the epilogue."""
    spec, t = plan.epilogue, plan.config.types
    acc = dtype(t.acc)
    exact = spec.exact_integer
    partial = c_spelling(acc.name, "acc_to_register", "w[{i}]") if exact else \
        c_spelling(acc.name, "workspace_load", "{i}")
    return {"name": plan.name + "_reduce", "w_ctype": UNSIGNED_CTYPE[acc.bits], "sum_ctype": "int" if exact else "float",
            "partial": partial, "c_ctype": UNSIGNED_CTYPE[dtype(t.c).bits],
            "element": _fixed_element(spec, "sum", load_float(t.c, "c_bits"), "b"),
            # stream-K's GEMM kernel applies the epilogue to whole tiles: its definitions are there already
            "definitions": element_code(fixed_graph(spec)).definitions if plan.split_k > 1 else ""}


def _fixed_element(spec, acc: str, c_in: str, bias: str) -> str:
    """One element of D of the fixed epilogue ``spec``, printed from its graph (as the GEMM kernel's stage)."""
    code = element_code(fixed_graph(spec), {"acc": acc, "c": c_in, "bias": bias})
    assert not code.statements, "the fixed epilogue's graph uses each value once"
    return code.outputs["d"]


def stream_k_lines(plan: Plan) -> dict:
    """The C of stream-K's formulas (xegemm.plan.stream_k) for both kernels, and the workspace's tile size."""
    tile = plan.config.tile

    def lines(steps):
        return stream_k.c_lines(steps, tile.workgroup, tile.stream_k)
    bm, bn, _ = tile.workgroup
    return {"groups": tile.stream_k, "grid": lines(stream_k.GRID), "range": lines(stream_k.RANGE),
            "segment": lines(stream_k.SEGMENT), "fixup": lines(stream_k.FIXUP), "piece": lines(stream_k.PIECE),
            "tile": stream_k.tile_lines(tile.swizzle), "slots": stream_k.SLOTS,
            "slot_elements": bm * bn, "row_bytes": bn * dtype(plan.config.types.acc).bits // 8}


def _byte_offset(elements: str, bits: int) -> str:
    """The C of an element offset in bytes (4-bit: two to a byte; the table's offsets are byte-aligned)."""
    return f"{elements} * {bits // 8}" if bits >= 8 else f"{elements} / {8 // bits}"


PITCH_NAMES = {"lda": "lda_elements", "ldb": "ldb_elements", "ldc": "ldc_elements"}   # the kernel's own are bytes
BODY = "/* the tile */"


def grouped_lines(plan: Plan) -> dict:
    """What templates/grouped.cl.j2 needs: the persistent walk's C around the tile (``head``, ``tail``, the
    body's indent), the groups' operand pointers and byte pitches from the problem table's columns."""
    tile = plan.config.tile
    walk = walk_lines(tile.walk, [BODY], names=PITCH_NAMES)
    at = walk.index(next(line for line in walk if line.strip() == BODY))
    bits = [plan.a.atom.elem_bits, plan.b.atom.elem_bits, plan.c.atom.elem_bits]
    # the table's offsets count elements of the operands' types; a quantized B's copies may read wider words
    # (GPTQ: 32-bit words of 8 K), whose rows the pitch counts (xegemm.plan.dequant.StoredB)
    offset_bits = [bits[0], dtype(plan.config.types.b).bits, bits[2]]
    describe = ("work-group w takes tiles w, w + G, w + 2G, ... of all groups (G = the launch's work-groups)"
                if tile.walk == "static" else "each work-group takes the next tile from tile_counter")
    return {"walk": tile.walk, "describe": describe, "head": walk[:at], "tail": walk[at + 1:],
            "indent": 4 + len(walk[at]) - len(walk[at].lstrip()),
            **{f"{x}_offset": _byte_offset(f"{x}_offset", b) for x, b in zip("abc", offset_bits)},
            **{f"ld{x}": _row_bytes(b).format(f"(int)ld{x}_elements") for x, b in zip("abc", bits)}}


def fragment_helpers(plan: Plan) -> list[str]:
    """The C functions that move a plan's contiguous-run fragments out of copy registers (A, B) and
    accumulators into C's store registers, each once."""
    macros = environment().get_template("fragments.cl.j2").module
    out = []
    for operand in (plan.a, plan.b):
        dst = plan.mma.ctype(operand.operand)
        bits, dst_n = ctype_shape(dst)
        src_bits, src_n = ctype_shape(operand.atom.register_type)
        out.append(str(macros.take(dst, UNSIGNED_CTYPE[bits], dst_n, operand.atom.register_type,
                                   src_n * src_bits // bits)))
    stores = ([(plan.c, plan.kernel_epilogue)] if plan.graph is None else []) \
        + ([(plan.partial, plan.partial_epilogue)] if plan.partial else [])
    for store, spec in stores:
        if spec.identity and spec.out == spec.acc:  # see epilogue_tiles
            acc = plan.mma.ctype("c")
            bits, acc_n = ctype_shape(acc)
            dst_bits, dst_n = ctype_shape(store.atom.register_type)
            out.append(str(macros.put(acc, UNSIGNED_CTYPE[bits], acc_n, store.atom.register_type,
                                      dst_n * dst_bits // bits)))
    return list(dict.fromkeys(out))


def _row_bytes(bits: int) -> str:
    """The C of a row's bytes, ``{}`` the row's elements: ``{} * 2`` for 16-bit, ``({} + 1) / 2`` for 4-bit
    elements, two to a byte (xegemm.verify.dense ends an odd row with a zero nibble)."""
    return f"{{}} * {bits // 8}" if bits >= 8 else f"({{}} + {8 // bits - 1}) / {8 // bits}"


def render_kernel(plan: Plan, lowering: Lowering | str = "portable", mma_lowering: str | None = None,
                  staged: bool = True) -> str:
    """The source of one planned kernel in the given lowering (deterministic for a plan): the lowering renders
    it (:meth:`xegemm.lowering.Lowering.render_plan`), the OpenCL C lowerings through :func:`render_opencl`,
    the coopmat lowering as SPIR-V assembly (its ``source_kind``)."""
    if isinstance(lowering, str):
        lowering = named_lowering(lowering)
    return lowering.render_plan(plan, render_opencl, mma_lowering=mma_lowering, staged=staged)


def render_opencl(plan: Plan, lowering: Lowering, mma_lowering: str | None = None, staged: bool = True) -> str:
    """The OpenCL C source of one planned kernel in an OpenCL C lowering (deterministic for a plan).

    ``lowering`` is a :class:`xegemm.lowering.Lowering` (or a lowering name: native then uses the default
    compiler capabilities).  ``mma_lowering`` renders the DPAS atoms in another lowering than the copies
    (default: the same), e.g. native 1D block copies with portable DPAS to run the native copy code on a
    device without DPAS.  Portable DPAS atoms are composed for the CPU (``staged``, see
    :class:`xegemm.lowering.portable.StagedKstep`); ``staged=False`` calls each atom's function in turn
    instead, as the native lowering calls the builtin (the same results, bit for bit, much slower on the CPU).
    Raises PlanRejected when the native lowering cannot express the plan: the problem
    breaks a surface rule of the block messages, or the compiler has no way to issue one of its atoms.
    """
    lowering.check_surfaces(plan)
    cfg = plan.config
    bm, bn, bk = cfg.tile.workgroup
    sgm_count, sgn_count = cfg.tile.subgroups
    copies = [plan.a.atom, plan.b.atom, plan.c.atom] + [p.prefetch for p in (plan.a, plan.b) if p.prefetch] \
        + ([plan.c_in] if plan.c_in else []) + ([plan.partial.atom] if plan.partial else []) \
        + [a.atom for a in plan.aux]
    mt, nt, kt = plan.mma_grid
    # the staged k-step takes portable 2D copies into arrays of register components (scalars per lane)
    mma = lowering_class(mma_lowering) if mma_lowering else type(lowering)
    copy_arrays = staged and lowering.copies_as_arrays(plan)
    staged_plan = staged_kstep(plan, copy_arrays) if staged and mma.stages_kstep else None
    dequant = staged_plan.dequant if staged_plan else dequant_code(plan) if plan.quant else None
    try:
        copy_library = lowering.render_copies(copies)
    except NativeUnsupported as exc:
        raise PlanRejected(str(exc)) from exc
    stage = Stage.of(plan)
    rolled = lowering.rolls_epilogue
    tiles = epilogue_tiles(plan, staged_plan, stage=stage, rolled=rolled)   # (the stage learns its reductions' partials)
    partial_tiles = epilogue_tiles(plan, staged_plan, partial=True, rolled=rolled) if plan.stream_k else []
    context = dict(
        plan=plan, config=cfg, lowering=lowering.name, version=__version__, source_name=Path(str(cfg.source)).name,
        bm=bm, bn=bn, bk=bk, sgm_count=sgm_count, sgn_count=sgn_count, sg=cfg.tile.subgroup_size,
        sgm=plan.subgroup_tile[0], sgn=plan.subgroup_tile[1], mt=mt, nt=nt, kt=kt,
        wg=plan.workgroup_size, prefetch=cfg.pipeline.prefetch,
        a_bytes=plan.a.atom.elem_bits // 8, b_bytes=plan.b.atom.elem_bits // 8, c_bytes=plan.c.atom.elem_bits // 8,
        a_row_bytes=_row_bytes(plan.a.atom.elem_bits), b_row_bytes=_row_bytes(plan.b.atom.elem_bits),
        acc_type=plan.mma.ctype("c"), a_frag_type=plan.mma.ctype("a"), b_frag_type=plan.mma.ctype("b"),
        needs_fp16="f16" in (cfg.types.a, cfg.types.b, cfg.types.acc, plan.quant.compute if plan.quant else None),
        typedefs=wide_vector_typedefs([a.register_type for a in copies if a.register_type]),
        copy_library=copy_library, capabilities_name=lowering.capabilities_name,
        mma_library=mma.render_mma([plan.mma]),
        fragment_helpers="\n".join(fragment_helpers(plan)),
        staged=staged_plan, copy_arrays=copy_arrays, epilogue=plan.kernel_epilogue, stage=stage,
        reduction=reduction(plan) if plan.reduces else None,
        stream_k=stream_k_lines(plan) if plan.stream_k else None,
        partial_tiles=partial_tiles,
        swizzle=cfg.tile.swizzle, swizzle_lines=swizzle_c_lines(cfg.tile.swizzle) if cfg.tile.swizzle > 1 else [],
        epilogue_tiles=tiles, reorders=plan_reorders(plan),
        epilogue_buffers=local_buffers(tiles, partial_tiles),
        a_chunks=plan.load_chunks("a"), b_chunks=plan.load_chunks("b"),
        dequant=dequant, dequant_b=dequant_b_operands(plan) if dequant and not staged_plan else {},
        dequant_a=dequant_a_operands(plan) if dequant and not staged_plan and plan.quant.a_view else {},
        b_k_per_row=plan.quant.b_view.k_per_element if plan.quant else 1,
        grouped=grouped_lines(plan) if plan.grouped else None,
    )
    source = environment().get_template("gemm.cl.j2").render(**context)
    problems = lowering.check_source(source)
    if problems:
        raise XegemmError(f"{plan.name}: generated calls break the documented prototypes: " + "; ".join(problems))
    return source
