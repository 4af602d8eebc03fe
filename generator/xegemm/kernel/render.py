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
from xegemm.atoms.mma import MmaAtom
from xegemm.library.dtypes import UNSIGNED_CTYPE, ctype_shape, dtype
from xegemm.errors import XegemmError
from xegemm.grouped.schedule import walk_lines
from xegemm.lowering import Lowering, lowering_class, named_lowering
from xegemm.lowering.native import NativeUnsupported
from xegemm.lowering.dequant import dequant_a_operands, dequant_b_operands, dequant_code
from xegemm.lowering.portable import staged_kstep
from xegemm.lowering.reorder import plan_reorders
from xegemm.plan.planner import Plan, PlanRejected
from xegemm.epilogues.stage import Stage
from xegemm.epilogues.tiles import epilogue_tiles, local_buffers, reduction
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
