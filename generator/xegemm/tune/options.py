"""Every option of a tune in one record: :class:`TuneOptions`, each field with its default, its ``xegemm tune``
flag and help text, and its check.

:func:`xegemm.tune.tune` takes a TuneOptions (or keyword arguments that make one); ``xegemm tune`` builds its
options from these fields (:func:`add_arguments`, :meth:`TuneOptions.from_args`); the resume command a stopped
tune prints is made from them too (:meth:`TuneOptions.flags`).  A new option is one field here.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Callable

from xegemm.aot.toolchain import compiler_help
from xegemm.epilogues.config import consent_flags
from xegemm.errors import XegemmError
from xegemm.evaluate.isolated import TimeLimits
from xegemm.library.targets import AOT_TARGETS
from xegemm.tune.leaders import BUDGET_S, LEADERS
from xegemm.tune.strategies import STRATEGIES, get_strategy
from xegemm.tune.study import HEARTBEAT_S, resumable_url

JOBS_PER_CPU = 4        # --jobs at most this many workers per usable CPU
SEED_LIMIT = 2**32      # a seed is an integer from 0 to SEED_LIMIT - 1


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):   # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def max_jobs() -> int:
    """The most ``--jobs`` workers this machine can use: each is a thread and a device worker process, and they
    share the CPUs (timing stays serial)."""
    return JOBS_PER_CPU * usable_cpus()


def check_jobs(jobs: int) -> None:
    if not 1 <= jobs <= max_jobs():
        raise XegemmError(f"--jobs {jobs}: at least 1 and at most {max_jobs()} workers on this machine "
                          f"({JOBS_PER_CPU} per usable CPU, {usable_cpus()} CPUs)")


def _strategy_help() -> str:
    return "; ".join(f"{s.name}: {s.summary}" for s in STRATEGIES.values())


def _option(default, flag: str | None = None, help: str | Callable[[], str] = "", kind: str | None = None,
            metavar: str | None = None, choices: Callable[[], list] | None = None, group: str | None = None,
            spell: Callable = str, factory=None):
    """A TuneOptions field: its default and, for a command-line option, its flag, help text (or a function
    that makes it), the kind of value the command line parses (``count``, ``small_count`` (0 to 20), ``seed``, ``duration``, ``seconds``:
    the command line's parsers; None: a string; ``switch``: a flag without a value), its choices, its
    mutually exclusive group, and how the resume command spells its value."""
    meta = {"flag": flag, "help": help, "kind": kind, "metavar": metavar, "choices": choices, "group": group,
            "spell": spell}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class TuneOptions:
    """How to tune (everything but the config and the shapes)."""

    strategy: str = _option("exhaustive", "--strategy", _strategy_help, choices=lambda: list(STRATEGIES))
    budget: int | None = _option(None, "--budget", "points evaluated per shape (pruned points are free; default: "
                                 "the whole space)", kind="count", metavar="N", group="limit")
    time_s: float | None = _option(None, "--time", "start no trial after this long, e.g. 90s, 10m, 1h",
                                   kind="duration", metavar="DURATION", group="limit", spell=lambda s: f"{s:g}s")
    jobs: int = _option(1, "--jobs", "worker processes building side by side; timing stays serial on the device "
                        "(default 1)", kind="count", metavar="J")
    storage: str | None = _option(None, "--storage", "SQLAlchemy URL of the study database, e.g. "
                                  "postgresql://user:pw@host/db (default: sqlite in --out); workers sharing it share "
                                  "the study")
    study: str | None = _option(None, "--study", "study name (default: the config's name)")
    seed: int | None = _option(None, "--seed", "seed of the sampler (a seeded --jobs 1 study is reproducible)",
                               kind="seed")
    device: str | None = _option(None, "--device", "dpctl filter string (default: the best device)")
    target: str | None = _option(None, "--target", "no device: score ahead-of-time builds for this GPU (ocloc) "
                                 "and rank a shortlist", choices=lambda: list(AOT_TARGETS))
    capabilities: str | None = _option(None, "--capabilities", "with --target: compiler capabilities (default: "
                                       "probe ocloc)")
    compiler: str | None = _option(None, "--compiler", lambda: compiler_help("with --target, the compiler that "
                                   "builds"), metavar="NAME|PATH")
    out: str | Path | None = _option(None, "--out", "output directory (default runs/tune-<timestamp>); an existing "
                                     "one resumes")
    # a file, None (the default file), or False: no cache (--no-cache)
    cache: str | Path | bool | None = _option(None, "--cache", "measurement cache file (default "
                                              "$XDG_CACHE_HOME/xegemm/measurements.db)")
    retime: bool = _option(False, "--retime", "build and time again even when the cache has it", kind="switch")
    heartbeat_s: int = _option(HEARTBEAT_S, "--heartbeat", f"seconds between a running trial's heartbeats; a trial "
                               f"silent for 3 (its process died) is failed and its point retried (default "
                               f"{HEARTBEAT_S})", kind="count", metavar="S")
    build_timeout_s: float = _option(TimeLimits.build_s, "--build-timeout", f"seconds one build may take (default "
                                     f"{TimeLimits.build_s:.0f})", kind="seconds", metavar="S",
                                     spell=lambda s: f"{s:g}")
    run_timeout_s: float | None = _option(None, "--run-timeout", "seconds one trial's verification and timing may "
                                          "take (default: from the problem size)", kind="seconds", metavar="S",
                                          spell=lambda s: f"{s:g}")
    leaders: int = _option(LEADERS, "--leaders", f"time the N best candidates of each shape again, interleaved, "
                           f"before naming a winner (0 or 1: off; default {LEADERS})", kind="small_count",
                           metavar="N")
    leader_time_s: float = _option(BUDGET_S, "--leader-time", f"seconds the leaders' re-timing may take per shape "
                                   f"(default {BUDGET_S:.0f})", kind="seconds", metavar="S", spell=lambda s: f"{s:g}")
    progress: bool | None = _option(None)      # the progress bar: None = when stderr is a terminal
    command: str | None = _option(None)        # the command line that started it, recorded in the study

    # ---- made, checked ---------------------------------------------------------------------------------------

    @classmethod
    def of(cls, options: TuneOptions | None = None, **kwargs) -> TuneOptions:
        """``options`` with ``kwargs`` changed (a :class:`TimeLimits` as ``limits=``, as :func:`tune` took it)."""
        limits = kwargs.pop("limits", None)
        if limits is not None:
            kwargs.update(build_timeout_s=limits.build_s, run_timeout_s=limits.run_s)
        unknown = sorted(set(kwargs) - {f.name for f in fields(cls)})
        if unknown:
            raise TypeError(f"tune() got unexpected keyword arguments: {', '.join(unknown)}")
        return replace(options or cls(), **kwargs)

    def check(self) -> None:
        """An error in words for an option no tune can run with."""
        get_strategy(self.strategy)
        check_jobs(self.jobs)
        if self.seed is not None and not 0 <= self.seed < SEED_LIMIT:
            raise XegemmError(f"--seed {self.seed}: a seed is an integer from 0 to {SEED_LIMIT - 1}")
        if self.budget is not None and self.budget < 1:
            raise XegemmError(f"--budget {self.budget}: at least one point per shape")
        if self.heartbeat_s < 1:
            raise XegemmError(f"--heartbeat {self.heartbeat_s}: at least one second")
        if self.leaders < 0:
            raise XegemmError(f"--leaders {self.leaders}: 0 or more (0 or 1: no re-timing)")
        if not self.leader_time_s > 0:
            raise XegemmError(f"--leader-time {self.leader_time_s}: a positive number of seconds")

    @property
    def limits(self) -> TimeLimits:
        return TimeLimits(build_s=self.build_timeout_s, run_s=self.run_timeout_s)

    # ---- the command line ------------------------------------------------------------------------------------

    @classmethod
    def from_args(cls, args) -> TuneOptions:
        """The options of a parsed ``xegemm tune`` command line (:func:`add_arguments`)."""
        values = {f.name: getattr(args, f.name) for f in cli_fields()}
        if getattr(args, "no_cache", False):
            values["cache"] = False
        return cls(**values, command=getattr(args, "command_line", None))

    def flags(self, skip: tuple[str, ...] = ("strategy", "out", "storage")) -> list[str]:
        """The command-line words of every option that is not its default (those in ``skip`` left to the
        caller), in the order of the fields; ``--no-cache`` for ``cache=False``."""
        words = []
        for f in cli_fields():
            value = getattr(self, f.name)
            if f.name in skip or value == f.default or value is None:
                continue
            if f.name == "cache" and value is False:
                continue
            if f.metadata["kind"] == "switch":
                continue
            words += [f.metadata["flag"], f.metadata["spell"](value)]
        words += ["--no-cache"] if self.cache is False else []
        words += [f.metadata["flag"] for f in cli_fields() if f.metadata["kind"] == "switch" and getattr(self, f.name)]
        return words

    def resume_command(self, config_path, shapes, out_dir) -> str:
        """The ``xegemm tune`` command that resumes this run, started as this process was (:func:`program_words`),
        with every option it was given, shell-quoted; the password of a storage URL as ``$XEGEMM_DB_PASSWORD`` (in
        double quotes, so the shell expands it)."""
        words = [*program_words(), "tune", str(config_path), "--out", str(out_dir),
                 "--shapes", ",".join(shape.label for shape in shapes), "--strategy", self.strategy, *self.flags(), *consent_flags()]
        text = shlex.join(words)
        if self.storage:
            url = resumable_url(self.storage).replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`")
            text += f' --storage "{url}"'
        return text


def program_words() -> list[str]:
    """How to start this program again: ``sys.argv[0]`` as it was run (``.venv/bin/xegemm``, a path relative to
    the directory it was run from), ``python -m xegemm`` with this interpreter when it was run as a module, and
    ``xegemm`` (the installed command) when it runs inside another program (the Python API)."""
    first = sys.argv[0] if sys.argv else ""
    path = Path(first)
    if path.name == "__main__.py" and path.parent.name == "xegemm":
        return [sys.executable, "-m", "xegemm"]
    if path.name.startswith("xegemm"):
        return [first]
    return ["xegemm"]


def cli_fields():
    """The fields ``xegemm tune`` has a flag for, in the order of its help."""
    return [f for f in fields(TuneOptions) if f.metadata["flag"]]


def add_arguments(parser, kinds: dict[str, Callable]) -> None:
    """Add a flag per :func:`cli_fields` field to ``parser`` (``kinds``: the command line's parser of each
    kind of value), and ``--no-cache`` after ``--cache``."""
    groups = {}
    for f in cli_fields():
        m = f.metadata
        target = parser
        if m["group"]:
            if m["group"] not in groups:
                groups[m["group"]] = parser.add_mutually_exclusive_group()
            target = groups[m["group"]]
        help_text = m["help"]() if callable(m["help"]) else m["help"]
        if m["kind"] == "switch":
            target.add_argument(m["flag"], dest=f.name, action="store_true", help=help_text)
            continue
        extra = {}
        if m["kind"]:
            extra["type"] = kinds[m["kind"]]
        if m["metavar"]:
            extra["metavar"] = m["metavar"]
        if m["choices"]:
            extra["choices"] = m["choices"]()
        if f.default is not None:
            extra["default"] = f.default
        target.add_argument(m["flag"], dest=f.name, help=help_text, **extra)
        if f.name == "cache":
            parser.add_argument("--no-cache", action="store_true", help="neither read nor write the measurement cache")
