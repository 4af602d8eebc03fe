"""The kernel-name grammar: how a variant's description is spelled as its name, and read back.

A kernel name is CUTLASS-style and is the key of everything (results, reports, caches, the kernels/ files)::

    xegemm_<A>_<B>_<acc>_<C>_<layouts>_<BM>x<BN>x<BK>_sg<SGM>x<SGN>_dpas<M>x<N>x<K>_a<atom>_b<atom>_c<atom>
        _pf<prefetch>_grf<GRF>[_swz<S>][_rb<R>x<J>][_alpha][_beta][_bias<row|col>][_<activation>]
        [_epi_<tag>_<key>][_splitk<S>][_streamk<G>][_grouped<static|dynamic>][_q<format><group>s<scale>[z<zero>][nk]]
        [_<lowering>]

with the types' config names (xegemm.library.dtypes), the layouts' kernel-name letters (xegemm.library.layouts: ``t`` =
row-major, ``n`` = column-major, for A, B and C), the copy atoms' short names (``short_name`` of
xegemm.atoms: ``u16x32x32n``, ``pu8x32x32n``, ``u16x8x16s8``) and the epilogue's parts
(:meth:`xegemm.epilogues.fixed.EpilogueSpec.name_parts`), or a traced epilogue's readable tag and the short hash of
its graph (:meth:`xegemm.epilogues.graph.Graph.name_suffix`); a quantized B adds its description
(:attr:`xegemm.plan.dequant.QuantPlan.name_part`, e.g. ``_qplain32sf16zu4``); a config that pins its lowering
(``target.lowering``) ends with it (``_coopmat``).  A variant the planner rejected has no atoms; its name
ends ``_pf<prefetch>_rejected_<digest>`` after the sub-groups.  :class:`KernelName` is the one place that
writes the grammar; :func:`parse_kernel_name` reads it (the reports take a name's parts from it).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from xegemm.epilogues.fixed import BIAS_KINDS

from xegemm.epilogues.registry import ACTIVATIONS
from xegemm.epilogues.graph import HASH_CHARS
from xegemm.errors import XegemmError
from xegemm.library.layouts import LAYOUTS, from_name_letters, name_letters
from xegemm.library.targets import LOWERING_NAMES


class KernelNameError(XegemmError):
    """A string that is not a kernel name of the grammar."""


_EPILOGUE_PARTS = ("alpha", "beta", *(f"bias{b}" for b in BIAS_KINDS if b != "none"),
                   *sorted((a for a in ACTIVATIONS if a != "none"), key=lambda a: (-len(a), a)))
_TYPE, _ATOM, _N = r"[a-z0-9]+", r"[a-z0-9]+", r"\d+"
_PATTERN = re.compile(
    rf"^xegemm_(?P<a>{_TYPE})_(?P<b>{_TYPE})_(?P<acc>{_TYPE})_(?P<c>{_TYPE})"
    rf"_(?P<layouts>[{''.join(lay.name_letter for lay in LAYOUTS.values())}]{{3}})_(?P<bm>{_N})x(?P<bn>{_N})x(?P<bk>{_N})_sg(?P<sgm>{_N})x(?P<sgn>{_N})"
    rf"(?:_pf(?P<rejected_pf>{_N})_rejected_(?P<rejected>[0-9a-f]+)"
    rf"|_dpas(?P<dm>{_N})x(?P<dn>{_N})x(?P<dk>{_N})_a(?P<atom_a>{_ATOM})_b(?P<atom_b>{_ATOM})_c(?P<atom_c>{_ATOM})"
    rf"_pf(?P<pf>{_N})_grf(?P<grf>{_N})(?:_swz(?P<swz>{_N}))?(?:_rb(?P<rbr>{_N})x(?P<rbj>{_N}))?"
    rf"(?P<epilogue>(?:_(?:{'|'.join(_EPILOGUE_PARTS)}))*)(?:_epi_(?P<traced>[a-z0-9_]+?_[0-9a-f]{{{HASH_CHARS}}}))?"
    rf"(?:_splitk(?P<splitk>{_N}))?(?:_streamk(?P<streamk>{_N}))?(?:_grouped(?P<walk>static|dynamic))?"
    rf"(?:_(?P<quant>q[a-z0-9]+?))?(?:_(?P<lowering>{'|'.join(LOWERING_NAMES)}))?)$")


@dataclass(frozen=True)
class KernelName:
    """The parts of a kernel name (``str()`` spells it).  ``rejected``: the digest of a variant the planner
    rejected, whose name stops after the prefetch distance (no DPAS shape, atoms or GRF mode)."""

    types: tuple[str, str, str, str]            # A, B, accumulator, C (config names)
    layouts: tuple[str, str, str]               # A, B, C (config names: row, col)
    workgroup: tuple[int, int, int]
    subgroups: tuple[int, int]
    prefetch: int
    dpas: tuple[int, int, int] | None = None    # the DPAS atom's M, N, K
    atoms: tuple[str, str, str] | None = None   # short names of the A, B and C copy atoms
    grf: int | None = None
    swizzle: int = 1
    register_block: tuple[int, int] = (0, 0)
    epilogue: tuple[str, ...] = ()              # EpilogueSpec.name_parts(): alpha, beta, bias<row|col>, activation
    traced: str | None = None                   # a traced epilogue's <tag>_<key> (Graph.name_suffix)
    split_k: int = 1
    stream_k: int = 0
    walk: str = ""                              # grouped / MoE: the persistent walk (xegemm.grouped.schedule)
    rejected: str | None = None
    quant: str = ""                             # a quantized B: q<format><group>s<scale>[z<zero>][nk][a<group>s<scale>[nk]]
    lowering: str = ""                          # the config's pinned lowering (target.lowering), '' for none

    @classmethod
    def of_config(cls, config, **parts) -> "KernelName":
        """The parts a config fixes (types, layouts, tiles, sub-groups, prefetch, and when planned the GRF mode,
        swizzle, register block, split K and stream-K), plus ``parts``."""
        t, lay, tile = config.types, config.layout, config.tile
        planned = {} if "rejected" in parts else {
            "grf": config.target.grf, "swizzle": tile.swizzle, "register_block": tuple(tile.register_block),
            "split_k": tile.split_k, "stream_k": tile.stream_k,
            "walk": tile.walk if config.problem.groups or config.moe.experts else "",
            "lowering": config.target.lowering or ""}
        return cls((t.a, t.b, t.acc, t.c), (lay.a, lay.b, lay.c), tuple(tile.workgroup), tuple(tile.subgroups),
                   config.pipeline.prefetch, **planned, **parts)

    @classmethod
    def of_plan(cls, config, mma, a, b, c, epilogue, graph=None, quant: str = "") -> "KernelName":
        """A planned variant's name: its config, DPAS atom, A/B/C copy atoms and epilogue (EpilogueSpec; a traced
        epilogue's Graph instead when ``graph`` is given) and the quantization's token
        (xegemm.plan.dequant.QuantPlan.name_part, '' for none)."""
        traced = {"traced": graph.name_suffix().removeprefix("_epi_")} if graph is not None else \
            {"epilogue": epilogue.name_parts()}
        return cls.of_config(config, dpas=(mma.m, mma.n, mma.k), atoms=(a.short_name, b.short_name, c.short_name),
                             quant=quant, **traced)

    @property
    def stem(self) -> str:
        """The part fixed by the config's types, layouts and tiles."""
        (bm, bn, bk), (sgm, sgn) = self.workgroup, self.subgroups
        return f"xegemm_{'_'.join(self.types)}_{name_letters(*self.layouts)}_{bm}x{bn}x{bk}_sg{sgm}x{sgn}"

    def __str__(self) -> str:
        if self.rejected is not None:
            return f"{self.stem}_pf{self.prefetch}_rejected_{self.rejected}"
        a, b, c = self.atoms
        return (f"{self.stem}_dpas{'x'.join(map(str, self.dpas))}_a{a}_b{b}_c{c}_pf{self.prefetch}_grf{self.grf}"
                + (f"_swz{self.swizzle}" if self.swizzle != 1 else "")
                + ("_rb{}x{}".format(*self.register_block) if any(self.register_block) else "")
                + "".join(f"_{p}" for p in self.epilogue)
                + (f"_epi_{self.traced}" if self.traced else "")
                + (f"_splitk{self.split_k}" if self.split_k > 1 else "")
                + (f"_streamk{self.stream_k}" if self.stream_k else "")
                + (f"_grouped{self.walk}" if self.walk else "")
                + (f"_{self.quant}" if self.quant else "")
                + (f"_{self.lowering}" if self.lowering else ""))

    def as_dict(self) -> dict:
        return asdict(self)


def parse_kernel_name(name: str) -> KernelName:
    """The parts of a kernel name (KernelNameError when ``name`` does not follow the grammar);
    ``str(parse_kernel_name(n)) == n`` for every name xegemm writes."""
    m = _PATTERN.match(name)
    if not m:
        raise KernelNameError(f"{name!r} is not an xegemm kernel name (xegemm_<A>_<B>_<acc>_<C>_<layouts>_<BM>x<BN>x"
                              "<BK>_sg<SGM>x<SGN>_dpas<M>x<N>x<K>_a<atom>_b<atom>_c<atom>_pf<P>_grf<GRF>...)")
    g = m.groupdict()
    common = dict(types=(g["a"], g["b"], g["acc"], g["c"]), layouts=from_name_letters(g["layouts"]),
                  workgroup=(int(g["bm"]), int(g["bn"]), int(g["bk"])), subgroups=(int(g["sgm"]), int(g["sgn"])))
    if g["rejected"] is not None:
        return KernelName(**common, prefetch=int(g["rejected_pf"]), rejected=g["rejected"])
    epilogue = tuple(re.findall(rf"_({'|'.join(_EPILOGUE_PARTS)})", g["epilogue"]))
    return KernelName(**common, prefetch=int(g["pf"]), dpas=(int(g["dm"]), int(g["dn"]), int(g["dk"])),
                      atoms=(g["atom_a"], g["atom_b"], g["atom_c"]), grf=int(g["grf"]),
                      swizzle=int(g["swz"] or 1),
                      register_block=(int(g["rbr"]), int(g["rbj"])) if g["rbr"] is not None else (0, 0),
                      epilogue=epilogue, traced=g["traced"], split_k=int(g["splitk"] or 1),
                      stream_k=int(g["streamk"] or 0), walk=g["walk"] or "", quant=g["quant"] or "",
                      lowering=g["lowering"] or "")
