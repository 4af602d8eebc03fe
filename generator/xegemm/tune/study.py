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

import re
import time
from dataclasses import dataclass
from pathlib import Path

import optuna
from sqlalchemy import Boolean, Column, Integer, MetaData, String, Table, event, insert, select, update
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

from xegemm.tune.shapes import Shape

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


def mask_url(url: str) -> str:
    """A storage URL fit for logs and reports: any password replaced by ``***``."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def default_url(out_dir: Path | str) -> str:
    """The embedded default: ``sqlite:///OUT/study.db``."""
    return f"sqlite:///{(Path(out_dir) / 'study.db').resolve()}"


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")     # readers never wait for the writer (several workers)
    cursor.execute("PRAGMA busy_timeout=60000")
    cursor.close()


def _create(url: str, heartbeat_s: int) -> optuna.storages.RDBStorage:
    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {"pool_pre_ping": True}
    storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs, heartbeat_interval=heartbeat_s,
                                         grace_period=3 * heartbeat_s)
    if url.startswith("sqlite"):
        event.listen(storage.engine, "connect", _sqlite_pragmas)
        storage.engine.dispose()
    _metadata.create_all(storage.engine, checkfirst=True)
    return storage


def open_storage(url: str, heartbeat_s: int = HEARTBEAT_S) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage at ``url`` with heartbeats (stale trials are found and failed), and the claim
    tables created beside Optuna's.  Workers that start together on a new database race to create the
    tables (Optuna's schema set-up is not atomic): the loser sees "already exists" and opens it again."""
    if url.startswith("sqlite"):
        Path(url.split("///", 1)[1]).parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(CREATE_ATTEMPTS):
        try:
            return _create(url, heartbeat_s)
        except (OperationalError, ProgrammingError, IntegrityError):
            if attempt == CREATE_ATTEMPTS - 1:
                raise
            time.sleep(0.2 * (attempt + 1))
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
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(BUDGET).values(study=study, evaluated=0))
        except IntegrityError:
            pass     # another worker (or an earlier run) created it

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

    def owner(self, point: str) -> int | None:
        with self.engine.connect() as conn:
            return conn.execute(select(CLAIMS.c.trial).where(CLAIMS.c.study == self.study,
                                                             CLAIMS.c.point == point)).scalar_one_or_none()

    def take_over(self, point: str, old: int, new: int) -> bool:
        """Move an orphaned claim from failed trial ``old`` to ``new``; False if another worker took it first."""
        with self.engine.begin() as conn:
            moved = conn.execute(update(CLAIMS).where(CLAIMS.c.study == self.study, CLAIMS.c.point == point,
                                                      CLAIMS.c.trial == old).values(trial=new))
        return moved.rowcount == 1

    def claims(self) -> dict[str, int]:
        """Every claimed point -> the trial number that owns it."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(CLAIMS.c.point, CLAIMS.c.trial).where(CLAIMS.c.study == self.study))
            return {point: trial for point, trial in rows}

    def evaluated(self) -> int:
        """Budget units taken (claims of points that are built and timed, not pruned)."""
        with self.engine.connect() as conn:
            return conn.execute(select(BUDGET.c.evaluated).where(BUDGET.c.study == self.study)).scalar_one()
