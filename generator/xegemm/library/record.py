"""The one record of a result: what happened to one variant on one problem, and every way it is written down.

:class:`Evaluation` is filled by the evaluation layer (:mod:`xegemm.evaluate`) and then travels unchanged:
through the worker pipe, into the run's journal and results.json (:meth:`Evaluation.to_row` /
:meth:`Evaluation.from_row`), into a study's trial (:meth:`Evaluation.to_user_attrs` /
:meth:`Evaluation.from_user_attrs`, as Optuna's ``FrozenTrial`` keeps its own fields typed), into the CSV files
(:data:`COLUMNS`, one column per value and one per parameter, as cutlass_profiler writes one row per problem and
kernel with every parameter a column) and into the report, which reads it back with :meth:`Evaluation.from_row`.
A new value of a result is one field here and, if it belongs in the CSV files, one :data:`COLUMNS` entry.

Also here: :data:`STATUSES` (the one set of status words) and :class:`DeviceRecord` (the device a result was
measured on, as every results document records it).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields
from typing import Any, Callable

from xegemm.library.parts import PROBLEM_KEYS as PROBLEM_KEYS, TYPE_KEYS as TYPE_KEYS   # re-exported: one home, parts
from xegemm.library.parts import Reference, TimeStats, VariantParams

# The one set of status words, for every job and every file it writes.
STATUSES = (
    "ok",             # built, and every observer's check passed (verified and timed on a device; ISA = plan)
    "generated",      # rendered and written (generate: nothing was built)
    "rejected",       # never built: a constraint, the planner, or the lowering rules it out (reason says which)
    "failed_build",   # the compiler rejected it, or (AOT) its machine code does not issue what the plan says
    "failed_verify",  # ran, but its result differs from the numpy reference beyond the tolerance
    "error",          # the launch or the timing failed after a good build, or its worker died running it
    "timeout",        # its build or its run overran the time limit; the worker was killed
)
PASSED = ("ok", "generated")

# keys build.json writes beside a result row (xegemm.jobs.pipeline.build_config); read back into ``extra``
BUILD_KEYS = ("target", "grf", "capabilities", "isa", "predicted", "measured_messages", "artefacts")
# the spellings of older files and studies: a study's trials named the kernel ``kernel``
OLD_NAMES = {"kernel": "name"}


def joined(p: dict, keys) -> str | None:
    """The values of ``keys`` in ``p`` joined by x (``32x32x16``), or None when one is missing."""
    values = [p.get(k) for k in keys]
    return None if any(v is None for v in values) else "x".join(map(str, values))


def tile_label(params: dict) -> str:
    """The parameters of a variant in a few characters: ``32x32x16 sg1x2 pf0 grf256`` (plus split K or stream-K,
    the swizzle, the register block and the epilogue when there are any: ``... splitk4 swz4 rb4x2 beta_biascol_relu``)."""
    parts = [joined(params, ("wg_m", "wg_n", "wg_k")), f"sg{joined(params, ('sg_m', 'sg_n'))}"
             if params.get("sg_m") is not None else None,
             f"pf{params['prefetch']}" if params.get("prefetch") is not None else None,
             f"grf{params['grf']}" if params.get("grf") is not None else None,
             f"splitk{params['split_k']}" if (params.get("split_k") or 1) > 1 else None,
             f"streamk{params['stream_k']}" if params.get("stream_k") else None,
             f"swz{params['swizzle']}" if (params.get("swizzle") or 1) > 1 else None,
             f"rb{params['register_block']}" if params.get("register_block") not in (None, "all") else None,
             params["epilogue"] if params.get("epilogue") not in (None, "none") else None]
    atoms = [str(params[k]) for k in ("atom_a", "atom_b", "atom_c") if params.get(k)]
    return " ".join(x for x in parts if x) + (" " + "/".join(atoms) if atoms else "") or "?"


class RowFieldError(ValueError):
    """A result row whose field should hold a number and holds something else (a hand-edited ``gflops: "fast"``)."""

    def __init__(self, key: str, value):
        super().__init__(f"{key} is {str(value)[:40]!r}, not a number")
        self.key = key


@dataclass
class Evaluation:
    """What happened to one variant: one row of results.json, results.csv, trials.json, build.json, one trial's
    user attributes in a study."""

    name: str
    status: str
    reason: str | None
    params: dict
    plan: dict | None = None
    time_ms: dict | None = None       # xegemm.evaluate.timing.Timing.as_dict(): min, median, max, mean, cv, runs
    gflops: float | None = None
    gbps: float | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    bad_elements: int | None = None
    build_s: float | None = None
    source_sha256: str | None = None
    log: str | None = None            # path of the saved build log (LogObserver)
    extra: dict = field(default_factory=dict)   # the reference measured with it, ISA statistics, a tuner's score
    # when and where it was recorded (None until it is: the journal, a study, a report)
    trial: int | None = None          # its place in the run's order, or its trial number in a study
    finished_at: float | None = None  # Unix time
    load1: float | None = None        # the 1-minute load average when it finished
    cached: bool | None = None        # a tuner took it from the measurement cache
    strategy: str | None = None       # the tuner's search strategy
    score: float | None = None        # the tuner's value for an ahead-of-time study
    # GFLOP/s over the numpy reference of its problem in its run (one per problem: every variant's interleaved
    # numpy runs pooled, xegemm.reporting.model.pooled_reference); set when the run's documents are written
    vs_numpy: float | None = None
    source: str | None = field(default=None, compare=False)        # the report's label of its directory
    source_kind: str | None = field(default=None, compare=False)   # "run", "tune" or "build"
    build_log: str | None = field(default=None, repr=False, compare=False)   # the compiler's text, until saved

    def fail(self, status: str, reason: str) -> None:
        """Mark the variant as failed with one of :data:`STATUSES` and a reason a person understands."""
        assert status in STATUSES and status not in PASSED, status
        self.status, self.reason = status, reason

    @staticmethod
    def digest(source: str) -> str:
        """The sha256 of a kernel source: what identifies a built kernel in results and caches."""
        return hashlib.sha256(source.encode()).hexdigest()

    # ---- derived values ------------------------------------------------------------------------------------

    @property
    def passed(self) -> bool:
        return self.status in PASSED

    @property
    def timing(self) -> TimeStats:
        """Its timing statistics (:attr:`time_ms` read as a record; every value None when it was not timed)."""
        return TimeStats.from_dict(self.time_ms) or TimeStats()

    @property
    def parameters(self) -> VariantParams:
        """Its parameters (:attr:`params` read as a record)."""
        return VariantParams.from_dict(self.params)

    @property
    def median_ms(self) -> float | None:
        return self.timing.median

    @property
    def min_ms(self) -> float | None:
        return self.timing.min

    @property
    def max_ms(self) -> float | None:
        return self.timing.max

    @property
    def cv(self) -> float | None:
        return self.timing.cv

    @property
    def runs(self) -> int | None:
        return self.timing.runs

    @property
    def warmup(self) -> dict:
        """The warm-up the timing really used (xegemm.evaluate.timing.Warmup as a dict: runs, ms, settled, ...); {} if untimed."""
        return self.timing.warmup or {}

    @property
    def reference(self) -> Reference | None:
        """The numpy reference measured interleaved with this variant's timing (None if it was not timed)."""
        return Reference.from_dict(self.extra.get("reference"))

    @property
    def atoms(self) -> tuple:
        """(mma, copy A, copy B, copy C): the atoms its plan chose, else those its config named (None: unknown)."""
        plan = self.plan if isinstance(self.plan, dict) else {}
        named = self.parameters.atoms
        return tuple(plan.get(key) or name for key, name in zip(("mma", "copy_a", "copy_b", "copy_c"), named))

    @property
    def numpy_gflops(self) -> float | None:
        """The GFLOP/s of the reference :attr:`vs_numpy` is against."""
        return self.gflops / self.vs_numpy if self.gflops and self.vs_numpy else None

    @property
    def high_cv(self) -> bool | None:
        """The interleaved measurement kept a CV above xegemm.evaluate.timing.CV_LIMIT after measuring twice."""
        return self.reference.high_cv if self.reference else None

    @property
    def label(self) -> str:
        """Its parameters in a few characters (:func:`tile_label`)."""
        return tile_label(self.params)

    @property
    def problem(self) -> tuple:
        """(m, n, k, batch): what groups variants into problems."""
        return self.parameters.problem

    @property
    def group_key(self) -> tuple:
        """(m, n, k, batch, a, b, acc, c, layout): a problem and its types."""
        return (*self.problem, *self.parameters.types)

    @property
    def group_labels(self) -> list[str]:
        """A grouped launch's groups (``MxNxK`` each) as its evaluation recorded them in ``extra``, or []."""
        labels = self.extra.get("groups")
        return labels if isinstance(labels, list) else []

    @property
    def built_for(self) -> tuple[str | None, int | None]:
        """(target, GRF mode) an ahead-of-time build recorded beside its result (build.json's keys), or Nones."""
        return self.extra.get("target"), self.extra.get("grf")

    def part(self, key: str) -> dict:
        """A dict ``extra`` holds (``isa``, ``predicted``, ``measured_messages``), or an empty one."""
        value = self.extra.get(key)
        return value if isinstance(value, dict) else {}

    # ---- written down and read back --------------------------------------------------------------------------

    def to_row(self) -> dict:
        """The result as JSON data (a results.json / trials.json row, a journal line's result, a cache entry):
        every field but the report's and the build log, record fields only once set."""
        row = {}
        for f in fields(self):
            if f.name in ("source", "source_kind", "build_log"):
                continue
            value = getattr(self, f.name)
            if f.name in RECORD_FIELDS and value is None:
                continue
            row[f.name] = value
        return row

    @classmethod
    def from_row(cls, row) -> Evaluation:
        """A result from :meth:`to_row`'s data, or from the rows older versions wrote (build.json's keys go into
        ``extra``); ValueError when it is not a result."""
        if not isinstance(row, dict):
            raise ValueError("not an object")
        row = {OLD_NAMES.get(k, k): v for k, v in row.items()}
        if not isinstance(row.get("name"), str) or row.get("status") not in STATUSES:
            raise ValueError("no name or an unknown status")
        extra = dict(row["extra"]) if isinstance(row.get("extra"), dict) else {}
        extra.update({k: row[k] for k in BUILD_KEYS if row.get(k) is not None and k not in extra})
        known = {f.name for f in fields(cls)} - {"extra", "build_log"}
        values = {k: v for k, v in row.items() if k in known}
        times = row.get("time_ms") if isinstance(row.get("time_ms"), dict) else {}
        for key, value in [*values.items(), *((f"time_ms.{k}", times.get(k)) for k in TIME_NUMBERS)]:
            if (key in NUMBERS or key.startswith("time_ms.")) and value is not None and (
                    isinstance(value, bool) or not isinstance(value, (int, float))):
                raise RowFieldError(key, value)
        values["params"] = row["params"] if isinstance(row.get("params"), dict) else {}
        values["time_ms"] = row["time_ms"] if isinstance(row.get("time_ms"), dict) else None
        values.setdefault("reason", None)
        return cls(**values, extra=extra)

    def to_user_attrs(self) -> dict:
        """The result as a study trial's user attributes (one attribute per field, as :meth:`to_row`)."""
        return self.to_row()

    @classmethod
    def from_user_attrs(cls, attrs: dict) -> Evaluation:
        """A result from a trial's user attributes (:meth:`to_user_attrs`, or an older study's, which named the
        kernel ``kernel``); ValueError for a trial that holds no result (a duplicate, an interrupted one)."""
        return cls.from_row(attrs)

    def columns(self) -> dict:
        """The CSV row: :data:`COLUMNS`, then one column per parameter."""
        return {**{c.name: c.value(self) for c in COLUMNS}, **self.params}


# the fields a result row holds a number in (or null): what from_row checks of a hand-edited row
NUMBERS = frozenset(f.name for f in fields(Evaluation) if f.type in ("float | None", "int | None"))
TIME_NUMBERS = ("min", "median", "max", "mean", "cv", "runs")
# the fields that say where and when a result was recorded (left out of a row until they are set)
RECORD_FIELDS = ("trial", "finished_at", "load1", "cached", "strategy", "score")


@dataclass(frozen=True)
class Column:
    """One CSV column of a result: its heading, its value, and cutlass_profiler's heading when it has one."""

    name: str
    value: Callable[[Evaluation], Any]
    profiler: str | None = None


# results.csv and trials.csv (the parameters follow, one column each); the profiler CSV takes the same values
# under cutlass_profiler's headings (xegemm.reporting.model.profiler_rows)
COLUMNS = (
    Column("name", lambda r: r.name, "Operation"),
    Column("status", lambda r: r.status, "xegemm_status"),
    Column("reason", lambda r: r.reason or "", "reason"),
    Column("median_ms", lambda r: r.median_ms, "Runtime"),
    Column("min_ms", lambda r: r.min_ms),
    Column("max_ms", lambda r: r.max_ms),
    Column("cv", lambda r: r.cv, "cv"),
    Column("runs", lambda r: r.runs),
    Column("gflops", lambda r: r.gflops, "GFLOPs"),
    Column("gbps", lambda r: r.gbps),
    Column("vs_numpy", lambda r: r.vs_numpy),
    Column("numpy_gflops", lambda r: r.numpy_gflops),
    Column("high_cv", lambda r: r.high_cv),
    Column("max_abs_err", lambda r: r.max_abs_err),
    Column("max_rel_err", lambda r: r.max_rel_err),
    Column("bad_elements", lambda r: r.bad_elements),
    Column("build_s", lambda r: r.build_s),
    Column("warmup_runs", lambda r: r.warmup.get("runs")),
    Column("warmup_settled", lambda r: r.warmup.get("settled")),
    Column("trial", lambda r: r.trial),
    Column("finished_at", lambda r: r.finished_at),
    Column("load1", lambda r: r.load1),
    Column("cached", lambda r: r.cached),
    Column("score", lambda r: r.score),
)


@dataclass(frozen=True)
class DeviceRecord:
    """The device results were measured on, as results.json and trials.json record it
    (:meth:`xegemm.runtime.devices.DeviceInfo.as_dict`; older studies spelled two keys ``filter`` and ``driver``)."""

    filter_string: str | None = None
    name: str | None = None
    backend: str | None = None
    driver_version: str | None = None
    compute_units: int | None = None

    @classmethod
    def from_dict(cls, data) -> DeviceRecord | None:
        if not isinstance(data, dict):
            return None
        data = {{"filter": "filter_string", "driver": "driver_version"}.get(k, k): v for k, v in data.items()}
        return cls(**{f.name: data.get(f.name) for f in fields(cls)})

    def describe(self) -> str:
        """``NAME (FILTER, BACKEND, N compute units)``, leaving out what was not recorded."""
        bits = [x for x in (self.filter_string, self.backend) if x]
        if self.compute_units:
            bits.append(f"{self.compute_units} compute units")
        return f"{self.name or 'unknown device'}" + (f" ({', '.join(bits)})" if bits else "")
