"""The persistent study: Optuna's relational storage (SQLAlchemy) plus xegemm's claim table in the same database.

One Optuna study per shape (``NAME@MxNxK``) holds every trial with its user attributes (status, reason,
kernel, timings).  The default storage is an SQLite file in the output directory; ``postgresql://...`` lets
``xegemm tune`` processes on several machines fill one study.

Optuna's samplers may propose a point another worker is already evaluating, or one already done.  The
*claim table* (``xegemm_claims``: one row per (study, point), a primary key) is the arbiter: a worker
evaluates a point only after inserting its claim, in the same transaction that takes one unit of the
budget from ``xegemm_budget`` (``UPDATE ... WHERE evaluated < budget``: a row lock, so the budget is never
overrun by racing workers).  A claim whose trial failed (its worker was interrupted, or killed and found
stale by Optuna's heartbeat) is an *orphan*: the next worker takes it over and evaluates the point again;
nothing is lost and nothing is evaluated twice.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import sqlite3
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import optuna
from optuna.exceptions import StorageInternalError
from sqlalchemy import Boolean, Column, Integer, MetaData, String, Table, event, insert, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import (
    ArgumentError,
    DatabaseError,
    DBAPIError,
    IntegrityError,
    InterfaceError,
    NoSuchModuleError,
    OperationalError,
    ProgrammingError,
    SQLAlchemyError,
)

from xegemm.errors import XegemmError
from xegemm.files import create_sqlite, sqlite_problem
from xegemm.library.parts import StudyInfo
from xegemm.library.record import DeviceRecord

from xegemm.config.shapes import Shape

CREATE_ATTEMPTS = 5
HEARTBEAT_S = 10          # a running trial's heartbeat; one silent for 3 heartbeats is stale (its worker died)

_metadata = MetaData()
CLAIMS = Table("xegemm_claims", _metadata,
               Column("study", String(255), primary_key=True),
               Column("point", String(64), primary_key=True),
               Column("trial", Integer, nullable=False),
               Column("budgeted", Boolean, nullable=False))
BUDGET = Table("xegemm_budget", _metadata,
               Column("study", String(255), primary_key=True),
               Column("evaluated", Integer, nullable=False))


PASSWORD_VARIABLE = "XEGEMM_DB_PASSWORD"
RETRY_S = 60              # how long a lost database connection is retried before the worker gives up
RETRY_VARIABLE = "XEGEMM_DB_RETRY_S"   # another retry time in seconds (0: fail at once)
# storage methods that only describe the storage, never touch the database: not retried
_LOCAL = {"get_heartbeat_interval", "get_failed_trial_callback", "get_heartbeat_stale_trial_callback",
          "remove_session", "is_heartbeat_enabled"}
# private storage methods Optuna's own cache in front of an RDB storage (optuna.storages._CachedStorage) calls
# directly: retried like the public ones (a test checks this list against the installed Optuna)
CACHE_CALLS = ("_create_new_trial", "_set_trial_param", "_get_best_trial_id", "_get_trials",
               "_get_stale_trial_ids")


_CHECKED: set[str] = set()     # SQLite files found healthy by this process


class StorageError(XegemmError):
    """The study database cannot be used: unreachable, refused, not a database; the message says which."""


def mask_url(url: str) -> str:
    """A storage URL fit for logs and reports: any password replaced by ``***``."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def resumable_url(url: str) -> str:
    """A storage URL fit for a command to copy: the password as ``$XEGEMM_DB_PASSWORD`` (the shell expands it
    inside double quotes; xegemm reads the variable itself when the URL has no password)."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", rf"\1${PASSWORD_VARIABLE}@", url)


def with_password(url: str) -> str:
    """``url`` with ``$XEGEMM_DB_PASSWORD`` (written literally, or no password at all) taken from the
    environment; an SQLite URL as it is."""
    password = os.environ.get(PASSWORD_VARIABLE)
    if url.startswith("sqlite") or password is None:
        return url
    literal = f"${PASSWORD_VARIABLE}"
    if literal in url:
        return url.replace(literal, quote(password, safe=""))
    try:
        parsed = make_url(url)
    except ArgumentError:
        return url
    if parsed.username and parsed.password is None:
        return parsed.set(password=password).render_as_string(hide_password=False)
    return url


def default_url(out_dir: Path | str) -> str:
    """The embedded default: ``sqlite:///OUT/study.db``."""
    return f"sqlite:///{(Path(out_dir) / 'study.db').resolve()}"


def sqlite_path(url: str) -> Path | None:
    """The file of an SQLite URL (None for another database or an in-memory one)."""
    if not url.startswith("sqlite"):
        return None
    path = url.split("///", 1)[1] if "///" in url else ""
    return Path(path) if path and path != ":memory:" else None


def check_sqlite_file(path: Path, what: str = "study database") -> None:
    """Refuse an existing file that is not a healthy SQLite database (:func:`xegemm.files.sqlite_problem`):
    it is never opened, so never re-created over.  Checked once per process: a check closes its own connection,
    and SQLite's locks are the process's, so it must not run beside the storage's open connections."""
    key = str(Path(path).resolve())
    if key in _CHECKED:
        return
    problem = sqlite_problem(path)
    if not problem:
        _CHECKED.add(key)
    if problem:
        raise StorageError(f"{path}: the {what} is {problem}; move it aside (or choose another --out) to start "
                           "a new study, or restore it from a backup; its last export (trials.json, best.json) "
                           "is beside it")


def describe_failure(exc: BaseException, url: str) -> str:
    """The real cause of a database failure in a few words: connection refused, authentication, an unknown
    database, a missing driver, a damaged file."""
    cause = exc
    while cause.__cause__ is not None and not isinstance(cause, DBAPIError):
        cause = cause.__cause__
    text = str(getattr(cause, "orig", None) or cause).strip().splitlines()
    first = next((line for line in text if line.strip()), type(cause).__name__)
    lowered = " ".join(text).lower()
    for needle, what in (("password authentication failed", "authentication failed (wrong user or password; "
                          f"set ${PASSWORD_VARIABLE})"),
                         ("no password supplied", f"the server asks for a password: set ${PASSWORD_VARIABLE}"),
                         ("does not exist", "unknown database or user"),
                         ("connection refused", "connection refused (is the server running and listening there?)"),
                         ("could not translate host name", "unknown host"),
                         ("timeout expired", "the server did not answer in time"),
                         ("not a database", "not a database file"),
                         ("malformed", "the database file is damaged"),
                         ("unable to open database", "cannot open the database file")):
        if needle in lowered:
            return f"{what}: {first[:200]}"
    return first[:300]


_LOST = ("connection", "server closed", "terminating", "shutting down", "starting up", "timeout",
         "could not receive", "ssl syscall", "the database system is", "database is locked")


def _chain(exc: BaseException):
    """``exc`` and what led to it, through both ``raise ... from`` (``__cause__``) and an exception raised while
    handling another (``__context__``: Optuna rolls a session back inside its ``except``, and a rollback on a
    dead connection raises anew)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ if exc.__cause__ is not None else exc.__context__


def _transient(exc: BaseException) -> bool:
    """A lost or refused connection (worth waiting for), not a wrong query or a full disk."""
    for seen in _chain(exc):
        if isinstance(seen, DBAPIError):
            if seen.connection_invalidated or isinstance(seen, InterfaceError):
                return True
            if isinstance(seen, OperationalError):
                return any(w in str(seen.orig).lower() for w in _LOST)
    return False


def retry_seconds() -> float:
    """How long an unreachable database is waited for: ``$XEGEMM_DB_RETRY_S``, else :data:`RETRY_S`."""
    try:
        value = float(os.environ.get(RETRY_VARIABLE, RETRY_S))
    except ValueError:
        value = RETRY_S
    return value if 0 <= value < 86400 else RETRY_S


_warned = threading.Event()


def with_retries(call):
    """``call()``, retried with backoff while the database is unreachable (a server restart costs a pause, said
    once on stderr)."""
    delay, waited, budget = 0.25, 0.0, retry_seconds()
    while True:
        try:
            return call()
        except (StorageInternalError, SQLAlchemyError) as exc:
            if not _transient(exc) or waited >= budget:
                raise
            if not _warned.is_set():
                _warned.set()
                print(f"xegemm: the study database is unreachable ({describe_failure(exc, '')}); retrying for up "
                      f"to {budget:.0f} s", file=sys.stderr, flush=True)
            time.sleep(delay)
            waited += delay
            delay = min(delay * 2, 5.0)


def _retrying(method):
    @functools.wraps(method)
    def call(*args, **kwargs):
        return with_retries(lambda: method(*args, **kwargs))
    return call


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")     # other readers (optuna-dashboard) never wait for a writer
    cursor.execute("PRAGMA busy_timeout=60000")
    cursor.close()
    # Python's sqlite3 driver opens a transaction only at the first INSERT/UPDATE, so a read-then-write is two
    # steps another process can come between.  Optuna's queue relies on that read-then-write: it reads a
    # WAITING trial and sets it RUNNING (SELECT ... FOR UPDATE, which SQLite ignores), and two workers could
    # both pop the same enqueued trial.  So the driver's own transactions are switched off and every
    # transaction is BEGIN IMMEDIATE (see _begin_immediate): it takes SQLite's write lock before its first
    # read, which makes each of Optuna's storage calls atomic across processes.
    dbapi_connection.isolation_level = None


def _begin_immediate(connection) -> None:
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def _create(url: str, heartbeat_s: int) -> optuna.storages.RDBStorage:
    kwargs = ({"connect_args": {"timeout": 60}} if url.startswith("sqlite")
              else {"pool_pre_ping": True, "connect_args": {"connect_timeout": 10}})
    storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs, heartbeat_interval=heartbeat_s,
                                         grace_period=3 * heartbeat_s)
    if url.startswith("sqlite"):
        event.listen(storage.engine, "connect", _sqlite_pragmas)
        event.listen(storage.engine, "begin", _begin_immediate)
        storage.engine.dispose()
    _metadata.create_all(storage.engine, checkfirst=True)
    for name in dir(storage):             # every public method Optuna calls, retried while the server is away
        method = getattr(storage, name)
        if ((not name.startswith("_") and name not in _LOCAL) or name in CACHE_CALLS) and inspect.ismethod(method):
            setattr(storage, name, _retrying(method))
    return storage


def open_storage(url: str, heartbeat_s: int = HEARTBEAT_S) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage at ``url`` with heartbeats (stale trials are found and failed), and the claim
    tables created beside Optuna's.  Workers that start together on a new database race to create the
    tables (Optuna's schema set-up is not atomic): the loser sees "already exists" and opens it again.

    An existing SQLite file must be a healthy database (:func:`check_sqlite_file`); an unreachable server is
    retried for :data:`RETRY_S`; every failure is a :class:`StorageError` naming the cause."""
    shown = mask_url(url)
    url = with_password(url)
    path = sqlite_path(url)
    if path is not None:
        check_sqlite_file(path)
        try:
            create_sqlite(path)
        except (OSError, sqlite3.Error) as exc:
            raise StorageError(f"cannot create the study database {path}: {getattr(exc, 'strerror', None) or exc}") \
                from None
    try:
        make_url(url)
    except ArgumentError:
        raise StorageError(f"--storage {shown}: not a database URL; write e.g. sqlite:///path/study.db or "
                           "postgresql://user@host/database") from None
    for attempt in range(CREATE_ATTEMPTS):
        try:
            return with_retries(lambda: _create(url, heartbeat_s))
        except (NoSuchModuleError, ImportError) as exc:
            raise StorageError(f"--storage {shown}: no database driver for this URL ({exc}); xegemm ships "
                               "SQLite and PostgreSQL (postgresql://, psycopg 3)") from None
        except (OperationalError, ProgrammingError, IntegrityError, StorageInternalError) as exc:
            racing = isinstance(exc, (ProgrammingError, IntegrityError)) or "already exists" in str(exc)
            if not racing or attempt == CREATE_ATTEMPTS - 1:
                raise StorageError(f"cannot open the study database {shown}: {describe_failure(exc, url)}") \
                    from None
            time.sleep(0.2 * (attempt + 1))
        except (DatabaseError, ValueError, RuntimeError) as exc:
            raise StorageError(f"cannot open the study database {shown}: {describe_failure(exc, url)}") from None
    raise AssertionError("unreachable")


def study_name(name: str, shape: Shape) -> str:
    return f"{name}@{shape.label}"


@dataclass(frozen=True)
class Claim:
    """The answer to a claim: ``granted``, ``held`` (by trial ``owner``) or ``budget`` (the budget is spent)."""

    outcome: str
    owner: int | None = None


class _OverBudget(Exception):
    pass


class ClaimBook:
    """The claim and budget tables of one study (see the module docstring)."""

    def __init__(self, storage: optuna.storages.RDBStorage, study: str):
        self.engine = storage.engine
        self.study = study
        with_retries(self._create_budget)

    def _create_budget(self) -> None:
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(BUDGET).values(study=self.study, evaluated=0))
        except IntegrityError:
            pass     # another worker (or an earlier run) created it

    @_retrying
    def claim(self, point: str, trial: int, budgeted: bool, budget: int | None) -> Claim:
        """Claim ``point`` for trial number ``trial``; a budgeted point also takes one unit of ``budget``."""
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(CLAIMS).values(study=self.study, point=point, trial=trial, budgeted=budgeted))
                if budgeted:
                    cap = BUDGET.c.evaluated < budget if budget is not None else BUDGET.c.evaluated >= 0
                    taken = conn.execute(update(BUDGET).where(BUDGET.c.study == self.study, cap)
                                         .values(evaluated=BUDGET.c.evaluated + 1))
                    if taken.rowcount == 0:
                        raise _OverBudget
            return Claim("granted")
        except IntegrityError:
            return Claim("held", self.owner(point))
        except _OverBudget:
            return Claim("budget")

    @_retrying
    def owner(self, point: str) -> int | None:
        with self.engine.connect() as conn:
            return conn.execute(select(CLAIMS.c.trial).where(CLAIMS.c.study == self.study,
                                                             CLAIMS.c.point == point)).scalar_one_or_none()

    @_retrying
    def take_over(self, point: str, old: int, new: int) -> bool:
        """Move an orphaned claim from failed trial ``old`` to ``new``; False if another worker took it first."""
        with self.engine.begin() as conn:
            moved = conn.execute(update(CLAIMS).where(CLAIMS.c.study == self.study, CLAIMS.c.point == point,
                                                      CLAIMS.c.trial == old).values(trial=new))
        return moved.rowcount == 1

    @_retrying
    def claims(self) -> dict[str, int]:
        """Every claimed point -> the trial number that owns it."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(CLAIMS.c.point, CLAIMS.c.trial).where(CLAIMS.c.study == self.study))
            return {point: trial for point, trial in rows}

    @_retrying
    def evaluated(self) -> int:
        """Budget units taken (claims of points that are built and timed, not pruned)."""
        with self.engine.connect() as conn:
            return conn.execute(select(BUDGET.c.evaluated).where(BUDGET.c.study == self.study)).scalar_one()


# What defines a study: the problem its trials solve and how they are scored.  The tunable axes are the space
# (compared separately); everything here must be equal for trials to be comparable.
DEFINING_SECTIONS = ("types", "layout", "epilogue", "quantization")


def study_definition(meta: StudyInfo) -> dict:
    """The defining parts of a study's metadata (``meta``: the study's ``xegemm`` user attribute): the config's
    types, layouts, epilogue and quantization (and any sweep over them), the shape, the objective and what it
    was measured on."""
    config = meta.config
    # the config as Config.to_dict wrote it, in this version or an older one: a section may be absent
    sweep = config.get("sweep") or {}
    parts = {section: config[section] for section in DEFINING_SECTIONS if section in config}
    parts.update({f"sweep {axis}": choices for axis, choices in sweep.items()
                  if axis.split(".", 1)[0] in DEFINING_SECTIONS})
    device = DeviceRecord.from_dict(meta.device)
    parts.update(shape=meta.shape or None, objective=meta.objective, target=meta.target,
                 device=device.name if device else None)
    return parts


def definition_changes(old: dict, new: dict) -> list[str]:
    """What differs between two study definitions, one phrase per part."""
    return [f"{key}: the study has {old.get(key)!r}, this run {new.get(key)!r}"
            for key in sorted(set(old) | set(new), key=str) if old.get(key) != new.get(key)]


def space_changes(old: dict[str, list], new: dict[str, list]) -> list[str]:
    """What differs between two tuning spaces (axis -> labels): Optuna cannot mix them in one study."""
    changes = []
    for axis in dict.fromkeys([*old, *new]):
        if axis not in new:
            changes.append(f"axis {axis} is in the study, not in this config")
        elif axis not in old:
            changes.append(f"axis {axis} is new in this config")
        elif old[axis] != new[axis]:
            gone = [label for label in old[axis] if label not in new[axis]]
            added = [label for label in new[axis] if label not in old[axis]]
            changes.append(f"axis {axis}: " + "; ".join(
                part for part in (f"{len(gone)} choices missing ({_labels(gone)})" if gone else "",
                                  f"{len(added)} choices added ({_labels(added)})" if added else "",
                                  "" if gone or added else "the choices are in another order") if part))
    return changes


def _labels(labels: list) -> str:
    text = ", ".join(map(str, labels[:4]))
    return text + (f", ... {len(labels) - 4} more" if len(labels) > 4 else "")
