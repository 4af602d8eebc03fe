"""The typed parts of a result and of the documents that hold results, each read from and written to JSON here.

An :class:`xegemm.library.record.Evaluation` keeps its parts as the JSON data it writes (``params``, ``time_ms``,
``extra["reference"]``), so a row round-trips exactly; these records are how code reads them, as Optuna's
``FrozenTrial`` keeps a trial's fields typed and cutlass_library keeps one enum per concept:

- :class:`VariantParams`: a variant's parameters (``Evaluation.params``; :func:`xegemm.evaluate.params_of`);
- :class:`TimeStats`: timing statistics (``Evaluation.time_ms``, a reference's ``time_ms``;
  :meth:`xegemm.evaluate.timing.Timing.as_dict` writes them from :meth:`TimeStats.to_dict`);
- :class:`Conditions`: what else ran when a measurement was taken (:func:`xegemm.evaluate.timing.conditions`);
- :class:`Reference`: the numpy (or another provider's) reference a variant is measured against;
- :class:`DevicePeak`: a run's measured device peak (:mod:`xegemm.evaluate.peak`);
- :class:`RunInfo`: what a results document (results.json, trials.json, build.json) says about how it ran;
- :class:`StudyInfo`: a tuning study's metadata (its ``xegemm`` user attribute);
- :class:`Confidence`: how a tuned shape's winner was chosen (the leaders' re-timing), and :class:`Winner`, the
  winner trials.json names for the report;
- :class:`BuildFigures`: a built variant's machine-code figures beside its plan's prediction.

Every ``from_dict`` accepts what older versions wrote (the spellings are listed beside each record) and
returns None (or an empty record) for data that is not an object; every ``to_dict`` writes the keys the files
have always had, leaving out values that were never set, and keeps keys it does not know (``extra``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

# the parameters that name a problem, and its types (VariantParams.problem, VariantParams.types)
PROBLEM_KEYS = ("m", "n", "k", "batch")
TYPE_KEYS = ("a", "b", "acc", "c", "layout")


def _known(cls, data: dict) -> tuple[dict, dict]:
    """``data`` split into the values of ``cls``'s fields and the rest."""
    names = {f.name for f in fields(cls) if f.metadata.get("json", True)} - {"extra"}
    return {k: v for k, v in data.items() if k in names}, {k: v for k, v in data.items() if k not in names}


def _plain(record, always: tuple[str, ...] = ()) -> dict:
    """A record as JSON data: every field that is set (and those in ``always``), then its ``extra``."""
    out = {}
    for f in fields(record):
        if f.name == "extra" or not f.metadata.get("json", True):
            continue
        value = getattr(record, f.name)
        if value is None and f.name not in always:
            continue
        out[f.name] = value.to_dict() if hasattr(value, "to_dict") else value
    return {**out, **getattr(record, "extra", {})}


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


# ---- a variant's parameters ----------------------------------------------------------------------------

@dataclass(frozen=True)
class VariantParams:
    """The flat parameters of a variant, as results rows and the CSV columns hold them (every one optional: a
    row of an older version, or a rejected variant, may lack some)."""

    m: int | None = None
    n: int | None = None
    k: int | None = None
    batch: int | None = None
    a: str | None = None
    b: str | None = None
    acc: str | None = None
    c: str | None = None
    layout: str | None = None            # "row/row/row": A, B, C
    wg_m: int | None = None
    wg_n: int | None = None
    wg_k: int | None = None
    sg_m: int | None = None
    sg_n: int | None = None
    subgroup_size: int | None = None
    prefetch: int | None = None
    grf: int | None = None
    split_k: int | None = None
    stream_k: int | None = None
    swizzle: int | None = None
    register_block: str | None = None    # "4x2", or "all"
    epilogue: str | None = None          # its kernel-name part, or "none"
    atom_mma: str | None = None
    atom_a: str | None = None
    atom_b: str | None = None
    atom_c: str | None = None
    groups: str | None = None            # a grouped or MoE launch's groups label
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data) -> VariantParams:
        known, rest = _known(cls, _dict(data))
        return cls(**known, extra=rest)

    def to_dict(self) -> dict:
        return _plain(self)

    @property
    def problem(self) -> tuple:
        """(m, n, k, batch)."""
        return tuple(getattr(self, key) for key in PROBLEM_KEYS)

    @property
    def types(self) -> tuple:
        """(a, b, acc, c, layout)."""
        return tuple(getattr(self, key) for key in TYPE_KEYS)

    @property
    def atoms(self) -> tuple:
        """(mma, a, b, c): the atoms the config named (None: the planner's choice)."""
        return self.atom_mma, self.atom_a, self.atom_b, self.atom_c

    def k_decomposition(self) -> tuple[str, int]:
        """How the variant splits the K loop, as CUTLASS's profiler names it: ("serial", 1); ("parallel", S) for
        split K (slices reduced by a second kernel); ("stream_k", G) for stream-K over G work-groups."""
        if self.stream_k:
            return "stream_k", self.stream_k
        split = self.split_k or 1
        return ("parallel" if split > 1 else "serial"), split


# ---- timing --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TimeStats:
    """Statistics over repeated runs in milliseconds (``time_ms``), and the warm-up before them
    (xegemm.evaluate.timing.Warmup as a dict: runs, ms, settled, steady_ms, round_runs)."""

    min: float | None = None
    median: float | None = None
    max: float | None = None
    mean: float | None = None
    cv: float | None = None
    runs: int | None = None
    warmup: dict | None = None
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data) -> TimeStats | None:
        if not isinstance(data, dict):
            return None
        known, rest = _known(cls, data)
        if not isinstance(known.get("warmup", {}), dict):
            rest["warmup"] = known.pop("warmup")
        return cls(**known, extra=rest)

    def to_dict(self) -> dict:
        return _plain(self)


@dataclass(frozen=True)
class Conditions:
    """What else ran and how many threads could run when a measurement was taken."""

    loadavg: list | None = None          # 1, 5 and 15 minutes
    cpu_count: int | None = None
    cpu_code_path: str | None = None     # the CPU runtime's code path (xegemm.runtime.cpu_path)
    affinity_cpus: int | None = None
    machine: str | None = None
    threads_env: dict | None = None
    loadavg_after: list | None = None    # an interleaved measurement's load average when it ended
    cpu_governor: str | None = None      # the CPU frequency governor (xegemm.evaluate.timing.cpu_governor)
    timing_method: str | None = None     # how the times were taken (xegemm.evaluate.timing.TIMING_METHOD)
    timing_buffers: str | None = None    # "rotating N buffers of X MiB" or "same buffers" (timing.Rotation)
    timing_pace: str | None = None       # the timing loops' floors where not the default (timing.Pace, XEGEMM_PACE)
    # the governor was looked for (None then means unreadable: no cpufreq, a VM or a container); older files
    # have no ``cpu_governor`` key at all.  Not a key of its own: whether ``cpu_governor`` is written.
    governor_recorded: bool = field(default=False, metadata={"json": False})
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data) -> Conditions | None:
        if not isinstance(data, dict):
            return None
        known, rest = _known(cls, data)
        return cls(**known, governor_recorded="cpu_governor" in data, extra=rest)

    def to_dict(self) -> dict:
        return _plain(self, ("cpu_governor",) if self.governor_recorded else ())

    @property
    def load1(self) -> float | None:
        """The 1-minute load average, or None."""
        return self.loadavg[0] if isinstance(self.loadavg, (list, tuple)) and self.loadavg else None


# ---- references ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Reference:
    """A reference measured for a problem (xegemm.evaluate.timing.NumpyReference.record and the records that
    add to it): numpy's float32 matmul, measured interleaved with a variant or on its own, or one pooled over a
    problem's variants (xegemm.reporting.model.pooled_reference).  Older files left out ``provider`` (numpy)."""

    provider: str | None = None
    dtype: str | None = None
    numpy: str | None = None             # numpy's version
    openblas_coretype: str | None = None
    time_ms: TimeStats | None = None
    gflops: float | None = None
    interleaved: bool | None = None
    pooled: int | None = None            # how many interleaved measurements were pooled into it
    high_cv: bool | None = None
    attempts: int | None = None
    conditions: Conditions | None = None
    problem: dict | None = None          # {m, n, k, batch}, in a document's list of references
    source: str | None = None            # the report's label of the run it was measured in
    extra: dict = field(default_factory=dict)

    # what NumpyReference.record always writes, set or not
    ALWAYS = ("provider", "dtype", "numpy", "openblas_coretype", "time_ms", "gflops")

    @classmethod
    def from_dict(cls, data) -> Reference | None:
        if not isinstance(data, dict):
            return None
        known, rest = _known(cls, data)
        known["time_ms"] = TimeStats.from_dict(known.get("time_ms"))
        known["conditions"] = Conditions.from_dict(known.get("conditions"))
        if not isinstance(known.get("problem", {}), dict):
            rest["problem"] = known.pop("problem")
        return cls(**known, extra=rest)

    def to_dict(self) -> dict:
        return _plain(self, tuple(k for k in self.ALWAYS if k != "provider" or self.provider is not None))

    @property
    def is_numpy(self) -> bool:
        return self.provider in (None, "numpy")

    @property
    def name(self) -> str:
        """Who ran it: its provider, or ``reference`` when none was recorded."""
        return str(self.provider or "reference")

    @property
    def median_ms(self) -> float | None:
        return self.time_ms.median if self.time_ms else None

    @property
    def cv(self) -> float | None:
        return self.time_ms.cv if self.time_ms else None

    @property
    def load1(self) -> float | None:
        return self.conditions.load1 if self.conditions else None

    def detail(self) -> str:
        """What it ran, in words: ``numpy 2.4.6 float32 matmul (OPENBLAS_CORETYPE=Haswell)``."""
        bits = [self.name]
        if self.numpy:
            bits.append(f"{self.numpy} float32 matmul")
        if self.openblas_coretype:
            bits.append(f"(OPENBLAS_CORETYPE={self.openblas_coretype})")
        return " ".join(bits)


# ---- what a document says about its run -------------------------------------------------------------------

@dataclass(frozen=True)
class DevicePeak:
    """A run's measured device peak (``device_peak``): GFLOP/s of an FMA kernel, GB/s of a copy, how they were
    measured; or why they could not be."""

    gflops: float | None = None
    gbps: float | None = None
    what: str | None = None
    error: str | None = None
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data) -> DevicePeak | None:
        if not isinstance(data, dict):
            return None
        known, rest = _known(cls, data)
        return cls(**known, extra=rest)

    def to_dict(self) -> dict:
        return _plain(self)

    @property
    def roofline(self) -> bool:
        """Both ceilings were measured."""
        return bool(self.gflops and self.gbps)


@dataclass(frozen=True)
class ConfigInfo:
    """The config a document's results came from (older documents wrote its name alone, as a string)."""

    name: str | None = None
    source: str | None = None
    description: str | None = None

    @classmethod
    def from_dict(cls, data) -> ConfigInfo:
        if not isinstance(data, dict):
            return cls(name=None if data is None else str(data))
        return cls(**{f.name: data.get(f.name) for f in fields(cls)})

    def to_dict(self) -> dict:
        return {"name": self.name, "source": self.source, "description": self.description}


@dataclass(frozen=True)
class RunInfo:
    """What a results document (results.json, trials.json, build.json) records beside its variants: what ran,
    where, with what and when.  Older documents spelled ``compiler_capabilities`` as ``capabilities`` (build.json
    still does) and the config as its name alone."""

    kind: str | None = None              # "tune" in trials.json
    config: ConfigInfo = field(default_factory=ConfigInfo)
    device: dict | None = None           # xegemm.library.record.DeviceRecord.from_dict reads it
    command: str | None = None
    target: str | None = None            # an ahead-of-time build's or study's GPU
    lowering: str | None = None
    lowering_note: str | None = None     # what the lowering is beyond its name (the native one's CPU emulation)
    compiler_capabilities: str | None = None
    versions: dict = field(default_factory=dict)
    started_at: str | None = None
    written_at: str | None = None
    conditions: Conditions | None = None
    device_peak: DevicePeak | None = None
    study: str | None = None
    strategy: str | None = None
    objective: str | None = None
    winners: tuple = ()                  # trials.json: each tuned shape's named winner (Winner)

    @classmethod
    def from_dict(cls, data) -> RunInfo:
        data = _dict(data)
        return cls(kind=data.get("kind"), config=ConfigInfo.from_dict(data.get("config")),
                   device=data["device"] if isinstance(data.get("device"), dict) else None,
                   command=data.get("command"), target=data.get("target"), lowering=data.get("lowering"),
                   lowering_note=data.get("lowering_note"),
                   # build.json's and older results' spelling
                   compiler_capabilities=data.get("compiler_capabilities") or data.get("capabilities"),
                   versions=_dict(data.get("versions")), started_at=data.get("started_at"),
                   written_at=data.get("written_at"), conditions=Conditions.from_dict(data.get("conditions")),
                   device_peak=DevicePeak.from_dict(data.get("device_peak")), study=data.get("study"),
                   strategy=data.get("strategy"), objective=data.get("objective"),
                   winners=tuple(w for x in data.get("winners") or () if (w := Winner.from_dict(x)) is not None)
                   if isinstance(data.get("winners"), list) else ())

    @property
    def when(self) -> str:
        """``STARTED to WRITTEN`` (UTC), what is known of it, or ``unknown``."""
        return " to ".join(x for x in (self.started_at, self.written_at) if x) or "unknown"


# ---- a tuning study ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrialInfo:
    """What the tuner records on a trial beside its result (xegemm.tune.runner): its shape and point, the
    worker that ran it, the trial it retried or duplicated, whether it was interrupted.  A trial of an older
    study, or a duplicate or interrupted one, lacks some of them."""

    shape: str | None = None
    point: str | None = None
    worker: str | None = None
    retry_of: int | None = None
    duplicate_of: int | None = None
    interrupted: bool | None = None

    @classmethod
    def from_attrs(cls, attrs) -> TrialInfo:
        """From a trial's user attributes (the result's own attributes are left to Evaluation.from_user_attrs)."""
        return cls(**_known(cls, _dict(attrs))[0])

@dataclass(frozen=True)
class StudyInfo:
    """A tuning study's metadata, its ``xegemm`` user attribute (one per shape's study): the config, the
    strategy and objective, what it was measured on, the shape, and the numpy reference taken when it was
    created.  Older studies have no ``reference`` (or ``capabilities_named``); their device record may use the
    older spellings DeviceRecord reads."""

    config: dict = field(default_factory=dict)   # the config as data (Config.to_dict)
    shape: dict = field(default_factory=dict)    # xegemm.config.shapes.Shape.as_dict
    strategy: str | None = None
    command: str | None = None
    objective: str | None = None         # "GFLOP/s" or "aot score"
    target: str | None = None            # an ahead-of-time study's GPU
    device: dict | None = None           # a device study's xegemm.runtime.devices.DeviceInfo.as_dict
    lowering: str | None = None
    capabilities: str | None = None      # the capabilities the kernels were spelled for
    capabilities_named: str | None = None    # how to get them again (None: probe the installed ocloc)
    reference: dict | None = None        # the study's numpy reference (Reference.from_dict reads it)
    compiler: dict | None = None         # an ahead-of-time study's compiler (xegemm.aot.toolchain.compiler_record)
    parameters: str | None = None        # "fields": one parameter per section field (None: an older study's axes)
    extra: dict = field(default_factory=dict)

    # what the tuner has always written, set or not
    ALWAYS = ("config", "strategy", "command", "lowering", "capabilities", "capabilities_named", "shape")

    @classmethod
    def from_dict(cls, data) -> StudyInfo | None:
        if not isinstance(data, dict):
            return None
        known, rest = _known(cls, data)
        for key in ("config", "shape"):
            known[key] = _dict(known.get(key))
        return cls(**known, extra=rest)

    def to_dict(self) -> dict:
        return _plain(self, self.ALWAYS)

    @property
    def config_info(self) -> ConfigInfo:
        return ConfigInfo.from_dict(self.config)

    @property
    def study_reference(self) -> Reference | None:
        return Reference.from_dict(self.reference)

    @property
    def compiler_name(self) -> str | None:
        """Which compiler an ahead-of-time study built with (``system``, ``current`` or a path; None: the
        installed one, or a study from before the choice)."""
        name = _dict(self.compiler).get("name")
        return name if isinstance(name, str) else None


@dataclass(frozen=True)
class Confidence:
    """How a tuned shape's winner was chosen: the study attribute the re-timing of the leaders writes
    (xegemm.tune.leaders.Verdict.as_dict, or ``not_retimed``'s record of why it did not run), and best.json's
    ``confidence``.  ``complete_trials`` is the number of passing trials when it was decided (a resume that adds
    trials makes the record stale).  A study from before re-timing has none."""

    retimed: bool = False
    why: str | None = None
    winner_trial: int | None = None
    complete_trials: int | None = None
    order: list = field(default_factory=list)
    rounds: int | None = None
    order_held: bool | None = None
    separated: bool | None = None
    stopped: str | None = None
    seconds: float | None = None
    method: str | None = None
    leaders: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data) -> Confidence | None:
        if not isinstance(data, dict):
            return None
        known, rest = _known(cls, data)
        known["retimed"] = known.get("retimed") is True
        for key in ("order", "leaders"):
            known[key] = known[key] if isinstance(known.get(key), list) else []
        return cls(**known, extra=rest)

    def to_dict(self) -> dict:
        return _plain(self, ("retimed",))

    def current(self, complete_trials: int) -> bool:
        """Whether it was decided over the ``complete_trials`` passing trials there are now."""
        return self.complete_trials == complete_trials


@dataclass(frozen=True)
class Winner:
    """A tuned shape's named winner as trials.json lists it (``winners``), so that a report of the tune
    directory heads the shape with the kernel best.json names, re-timed or not."""

    problem: dict                       # {m, n, k, batch}
    kernel: str
    trial: int | None = None
    retimed: bool = False               # chosen by the leaders' re-timing (else: the best single measurement)
    separated: bool | None = None       # its lead over the second exceeded the re-timings' noise

    @classmethod
    def from_dict(cls, data) -> Winner | None:
        known, _ = _known(cls, _dict(data))
        if not isinstance(known.get("problem"), dict) or not isinstance(known.get("kernel"), str):
            return None          # damaged, or not a winner
        known["retimed"] = known.get("retimed") is True
        return cls(**known)

    def to_dict(self) -> dict:
        return _plain(self, ("retimed",))

    @property
    def shape(self) -> tuple:
        return tuple(self.problem.get(key) for key in PROBLEM_KEYS)


# ---- an ahead-of-time build's machine-code figures ---------------------------------------------------------

@dataclass(frozen=True)
class BuildFigures:
    """A built variant's machine-code figures beside its plan's prediction, from the Evaluation's ``extra``:
    ``isa`` (xegemm.aot.isa.IsaStats.to_dict), ``predicted`` (xegemm.evaluate.aot.predicted_counts: message kind
    -> count, and ``prefetch_per_kstep``), ``measured_messages`` (every counted message kind), and the build's
    own ``target``, ``grf`` and ``capabilities``.  A variant that was never built has no ``isa`` (``built`` is
    False); a row of an older build may lack any count (None)."""

    isa: dict = field(default_factory=dict)
    predicted: dict = field(default_factory=dict)
    measured: dict = field(default_factory=dict)
    target: str | None = None
    grf: int | None = None
    capabilities: str | None = None

    @classmethod
    def from_extra(cls, extra) -> BuildFigures:
        extra = _dict(extra)
        isa = _dict(extra.get("isa"))
        return cls(isa=isa, predicted=_dict(extra.get("predicted")), measured=_dict(extra.get("measured_messages")),
                   target=extra.get("target") or isa.get("target"), grf=extra.get("grf") or isa.get("grf"),
                   capabilities=extra.get("capabilities"))

    @property
    def built(self) -> bool:
        return bool(self.isa)

    def stat(self, key: str):
        """A statistic of the machine code (instructions, sends, spill_bytes, ...), None when not recorded."""
        return self.isa.get(key)

    def have(self, key: str) -> int | None:
        """How many messages of a kind the machine code has (a statistic, else a counted message kind)."""
        return self.isa.get(key, self.measured.get(key))

    def want(self, key: str) -> int | None:
        """How many the plan predicts (1D block loads: 0 where a prediction exists without them)."""
        return self.predicted.get(key, 0 if key == "load_block1d" and self.predicted else None)

    @property
    def prefetches_have(self) -> int | None:
        values = [x for x in (self.have("prefetch_block2d"), self.measured.get("prefetch")) if x is not None]
        return sum(values) if values else None

    @property
    def prefetches_want(self) -> int | None:
        per = self.predicted.get("prefetch_per_kstep")
        return sum(per.values()) if isinstance(per, dict) else (0 if self.predicted else None)
