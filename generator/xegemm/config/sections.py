"""The config's keys: one frozen dataclass per section whose fields carry their check and default.

The known keys, their defaults and what may be swept (the tables at the end) are derived from these classes,
so a key is declared exactly once.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from xegemm.config.checks import (
    Check,
    a_dtype,
    accumulator_dtype,
    activation,
    b_dtype,
    bias_kind,
    compute_dtype,
    config_name,
    epilogue_function,
    epilogue_inputs,
    epilogue_outputs,
    copy_atom,
    group_list,
    int_choice,
    layout,
    lowering_name,
    mma_atom,
    non_negative_int,
    non_negative_ints,
    non_negative_number,
    number,
    number_range,
    output_dtype,
    positive_int,
    positive_ints,
    rotate_setting,
    row_counts,
    quant_format,
    quant_group,
    scale_dtype,
    scale_layout,
    text,
    walk_mode,
    zero_dtype,
)
from xegemm.library.targets import GRF_MODES


def _key(check: Check, default: Any = MISSING) -> Any:
    """A config key: its check and, unless it is required, its default."""
    return field(default=default, metadata={"check": check})


@dataclass(frozen=True, order=True)
class Problem:
    """The GEMM problem: D[batch] = A[batch] (m x k) @ B[batch] (k x n); or ``groups``, a grouped problem (one
    launch, one GEMM per group; M may be 0), which sets m, n and k to the largest group's (xegemm.grouped).  The
    tuner's shapes are Problems too."""

    m: int = _key(positive_int)
    n: int = _key(positive_int)
    k: int = _key(positive_int)
    batch: int = _key(positive_int, 1)
    groups: tuple[tuple[int, int, int], ...] = _key(group_list, ())

    def __post_init__(self):      # groups read back from JSON (a study's shape) are lists: hashable again
        object.__setattr__(self, "groups", tuple(tuple(g) for g in self.groups))

    @property
    def label(self) -> str:
        """``MxNxK``, or ``MxNxKxB`` for a batch: how messages, reports and ``--shapes`` write a problem; a
        grouped problem's groups joined by ``+``."""
        if self.groups:
            return "+".join(f"{m}x{n}x{k}" for m, n, k in self.groups)
        return f"{self.m}x{self.n}x{self.k}" + (f"x{self.batch}" if self.batch != 1 else "")

    def overrides(self) -> dict[str, int]:
        """The config keys that set this problem (a grouped one: its groups, replacing an MoE layer)."""
        keys = {"problem.m": self.m, "problem.n": self.n, "problem.k": self.k, "problem.batch": self.batch}
        return {**keys, "problem.groups": self.groups, "moe.experts": 0, "moe.rows": ()} if self.groups else keys

    def as_dict(self) -> dict:
        out = {"m": self.m, "n": self.n, "k": self.k, "batch": self.batch}
        return {**out, "groups": [list(g) for g in self.groups]} if self.groups else out


GROUPS_SET = ("m", "n", "k")     # the problem keys a groups list sets


@dataclass(frozen=True)
class Moe:
    """A Mixture-of-Experts layer (xegemm.grouped): A's problem.m rows sorted by expert, ``experts`` weight
    matrices of k x n, ``rows`` per expert (summing to problem.m; left out: spread evenly); 0 experts: off."""

    experts: int = _key(non_negative_int, 0)
    rows: tuple[int, ...] = _key(row_counts, ())


@dataclass(frozen=True)
class Types:
    """Element types of A, B, the accumulator and C (= D, the output; canonical names from ``DTYPES``).
    C may differ from the accumulator: the epilogue converts (xegemm.epilogues.fixed).  A quantized B (``quant:``: s8 u8
    s4 u4 e4m3 e5m2 e2m1) or FP8 A (``quant_a:``) is converted to ``compute`` (f16 | bf16; null: types.a), the
    DPAS input type (xegemm.quant)."""

    a: str = _key(a_dtype, "bf16")
    b: str = _key(b_dtype, "bf16")
    acc: str = _key(accumulator_dtype, "f32")
    c: str = _key(output_dtype, "f32")
    compute: str | None = _key(compute_dtype, None)


@dataclass(frozen=True)
class Layout:
    """Memory layout of A, B and C: ``row`` or ``col`` (major)."""

    a: str = _key(layout, "row")
    b: str = _key(layout, "row")
    c: str = _key(layout, "row")


@dataclass(frozen=True)
class Quant:
    """How a quantized operand is stored (``quant:`` for B, ``quant_a:`` for an FP8 A; xegemm.quant,
    docs/quantization.md): ``format`` none (not quantized) | plain | gptq | awq | mx; ``group``: K elements per
    scale, channel, tensor or block128 (128 x 128, FP8 B); ``scale`` f16 | bf16 | f32 | e8m0; ``zero`` none | u4 |
    s8 | u8 | f16 | bf16 (in quantized units, subtracted before the scale); ``scale_layout`` kn = scales[K/group,
    N] or nk = scales[N, K/group]."""

    format: str = _key(quant_format, "none")
    group: int | str = _key(quant_group, 128)
    scale: str = _key(scale_dtype, "f16")
    zero: str = _key(zero_dtype, "none")
    scale_layout: str = _key(scale_layout, "kn")


@dataclass(frozen=True)
class Tile:
    """Work-group tile [BM, BN, BK], its sub-group grid [SG_M, SG_N], the sub-group size, ``split_k``: K cut
    into that many slices computed by separate work-groups, whose partial sums a second kernel adds in order,
    ``stream_k`` G: the G work-groups of a batch share its tiles x k-tiles MAC-loop iterations in even ranges,
    tiles cut between work-groups finished by a second kernel (0: off; xegemm.plan.stream_k; not with split_k),
    ``swizzle``: work-groups walk groups of that many tile rows column-major (1: row by row; xegemm.plan.swizzle),
    and ``register_block`` [R, J]: the portable lowering runs each DPAS k-chunk's k loop once per block of R
    accumulator rows x J N-fragments of the sub-group tile, so a CPU keeps that block in vector registers
    ([0, 0]: the lowering's default, blocks of 4 x 2 where they can run as a loop, else the whole tile; the
    results are the same bit for bit; native builds ignore it).  ``persistent`` G and
    ``walk``: a grouped or MoE launch's persistent work-groups (0: the device's compute units x occupancy, at
    launch) and how they walk the groups' tiles: ``static`` (work-group w takes tiles w, w + G, ...) or
    ``dynamic`` (the next tile from a global atomic counter); a single GEMM ignores both (xegemm.grouped)."""

    workgroup: tuple[int, int, int] = _key(positive_ints(3, "[BM, BN, BK]"), (256, 256, 32))
    subgroups: tuple[int, int] = _key(positive_ints(2, "[SG_M, SG_N]"), (8, 4))
    subgroup_size: int = _key(int_choice("sub-group size", (8, 16, 32)), 16)
    split_k: int = _key(positive_int, 1)
    stream_k: int = _key(non_negative_int, 0)
    swizzle: int = _key(positive_int, 1)
    register_block: tuple[int, int] = _key(non_negative_ints(2, "[R rows, J N-fragments], 0 = all"), (0, 0))
    persistent: int = _key(non_negative_int, 0)
    walk: str = _key(walk_mode, "static")


def tile_conflict(split_k: int, stream_k: int) -> str | None:
    """Why ``tile.split_k`` and ``tile.stream_k`` cannot go together, or None when they can."""
    if stream_k and split_k > 1:
        return (f"tile.stream_k = {stream_k} with tile.split_k = {split_k}: stream-K and split K are two ways of "
                "cutting K between work-groups, choose one (split_k: 1 or stream_k: 0)")
    return None


@dataclass(frozen=True)
class Epilogue:
    """D = activation(alpha * acc + beta * C + bias), converted to the C type (xegemm.epilogues.fixed): beta = 0 reads
    no C; ``bias`` adds an f32 vector per ``row`` (length M) or ``col`` (length N); ``clamp`` bounds the
    ``clamp`` activation.  Or a traced epilogue (docs/epilogues.md): ``function`` names a Python function of
    named tensors ("package.module:function_name"), ``inputs`` the kinds of its named inputs, ``outputs`` the
    types of its extra outputs; the fixed keys then keep their defaults."""

    alpha: float = _key(number, 1.0)
    beta: float = _key(number, 0.0)
    bias: str = _key(bias_kind, "none")
    activation: str = _key(activation, "none")
    clamp: tuple[float, float] = _key(number_range, (0.0, 6.0))
    function: Any = _key(epilogue_function, None)
    inputs: tuple[tuple[str, str, str | None], ...] = _key(epilogue_inputs, ())
    outputs: tuple[tuple[str, str], ...] = _key(epilogue_outputs, ())

    @property
    def traced(self) -> bool:
        """A traced epilogue (``function`` set) rather than the fixed one."""
        return self.function is not None


@dataclass(frozen=True)
class Atoms:
    """Atom names chosen by the user; None lets the planner pick a legal one."""

    mma: str | None = _key(mma_atom, None)
    a: str | None = _key(copy_atom, None)
    b: str | None = _key(copy_atom, None)
    c: str | None = _key(copy_atom, None)


@dataclass(frozen=True)
class Pipeline:
    """Main-loop pipelining: how many k-tiles are prefetched ahead."""

    prefetch: int = _key(non_negative_int, 2)


@dataclass(frozen=True)
class Target:
    """Compilation target knobs: registers per thread (``-cl-intel-<grf>-GRF-per-thread``), and ``lowering``: the
    lowering this variant is rendered in (portable, native, coopmat; None: the one the command chose, ``--lowering``
    or the device's own).  Sweeping it (``sweep: {target.lowering: [portable, coopmat]}``) compares lowerings on one
    device; a variant whose lowering is pinned has it in its kernel name (``_coopmat``)."""

    grf: int = _key(int_choice("GRF count", GRF_MODES), 256)
    lowering: str | None = _key(lowering_name, None)


@dataclass(frozen=True)
class Verify:
    """Verification against a numpy reference: always on, with a tolerance derived from the types and K
    (xegemm.verify.dense); the seed of the random inputs is the one setting."""

    seed: int = _key(non_negative_int, 0)


@dataclass(frozen=True)
class Profile:
    """Timing: at least ``warmup`` untimed launches (a minimum: the warm-up goes on by time and stability until
    the kernel's time is steady, :func:`xegemm.evaluate.timing.warm_up`), at least ``repeats`` timed launches, and at
    least ``min_time_ms`` of measured time; ``rotate``: time over rotating copies of the operands so that a small
    problem is not timed from the cache (auto: below :data:`xegemm.evaluate.timing.ROTATE_BELOW_BYTES`; on;
    off: the same buffers every launch)."""

    warmup: int = _key(non_negative_int, 10)
    repeats: int = _key(positive_int, 100)
    min_time_ms: float = _key(non_negative_number, 0.0)
    rotate: str = _key(rotate_setting, "auto")


SECTIONS: dict[str, type] = {
    "problem": Problem, "types": Types, "layout": Layout, "quant": Quant, "quant_a": Quant, "tile": Tile,
    "epilogue": Epilogue, "atoms": Atoms, "pipeline": Pipeline, "target": Target, "verify": Verify,
    "profile": Profile, "moe": Moe,
}
TOP_LEAVES: dict[str, Check] = {"name": config_name, "description": text}
LEAF_CHECKS: dict[str, Check] = {
    **TOP_LEAVES,
    **{f"{section}.{f.name}": f.metadata["check"] for section, cls in SECTIONS.items() for f in fields(cls)},
}
TOP_KEYS = (*TOP_LEAVES, *SECTIONS, "sweep", "constraints")
SWEEPABLE = (*(key for key in LEAF_CHECKS if key not in TOP_LEAVES), *SECTIONS)


SECTION_KEYS: dict[str, tuple[str, ...]] = {
    section: tuple(f.name for f in fields(cls)) for section, cls in SECTIONS.items()}
