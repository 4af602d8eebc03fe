"""The tuning loop of one shape: ask Optuna for a point, claim it, prune or evaluate it, tell Optuna.

``jobs`` threads run the loop side by side, each with its own objective (its own device worker process);
the device gate keeps their timings serial.  Every trial that owns a point (its claim) is one of:

- ``rejected``: pruned before any build, Optuna state PRUNED, its reason kept; it costs no budget;
- evaluated: Optuna state COMPLETE, value = the objective (0 for a failure), status and reason kept;
- interrupted (Ctrl-C) or stale (its process died; Optuna's heartbeat finds it): state FAIL; its claim is
  an orphan that the next worker retries, so no point is lost.

A trial whose point is already claimed is a *duplicate*: never evaluated and never COMPLETE (a copy of the
owner's value would count one measurement twice in optuna-dashboard's history and in every sampler's model):
it is told FAIL, which Optuna's samplers leave out, with ``duplicate_of`` naming the owner and ``reason``
saying why.  A proposal outside the sweep (labels of separate field parameters that no choice of a section
axis has, :meth:`xegemm.tune.space.TuneSpace.point`) claims nothing and is told PRUNED with ``outside_sweep``
and its reason (a sampler learns to leave that region).  Neither is a point, costs budget or is exported.
"""

from __future__ import annotations

import os
import random
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import optuna
from optuna.trial import TrialState

from xegemm.library.record import Evaluation
from xegemm.tune.model import Machine
from xegemm.tune.objective import failure
from xegemm.tune.options import TuneOptions
from xegemm.tune.space import Candidate, TuneSpace
from xegemm.tune.strategies import Strategy
from xegemm.tune.study import ClaimBook

DUPLICATES_BEFORE_FALLBACK = 4     # consecutive duplicates, then an unclaimed point is enqueued
WAIT_S = 0.5                       # poll interval while other workers finish the last points
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


@dataclass
class Tally:
    """What this process did (for the progress bar and the summary line)."""

    evaluated: int = 0
    pruned: int = 0
    cached: int = 0
    failed: int = 0
    duplicates: int = 0
    outside: int = 0
    retried: int = 0
    best: tuple[float, str] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class ShapeRun:
    """One shape's study driven to its budget by ``jobs`` threads (see the module docstring)."""

    def __init__(self, study: optuna.Study, storage: optuna.storages.RDBStorage, space: TuneSpace,
                 claims: ClaimBook, strategy: Strategy, options: TuneOptions, deadline: float | None,
                 machine: Machine, on_trial: Callable[[dict], None]):
        """``options``: the tune's (its budget per shape, sampler seed and heartbeat); ``deadline``: the
        monotonic time after which no trial starts (from ``options.time_s``, shared by every shape)."""
        self.study, self.space, self.claims, self.strategy = study, space, claims, strategy
        self.budget, self.deadline = options.budget, deadline
        self.on_trial = on_trial
        self.heartbeat_s = options.heartbeat_s
        self.rng = random.Random(options.seed)
        self.order = strategy.order(space, machine) if strategy.order else []
        if strategy.shuffled:             # every point once, in the seed's order (enqueued one at a time)
            self.order = list(space.all_params())
            self.rng.shuffle(self.order)
        self.enqueued: set[str] = set()
        self.stop = threading.Event()
        self.tally = Tally()
        self.running: dict[int, int] = {}     # trial number -> trial id, for heartbeats
        self.ask_lock = threading.Lock()      # one sampler call at a time in this process
        self.worker = f"{socket.gethostname()}:{os.getpid()}"
        self.storage = storage
        self.study_id = self.storage.get_study_id_from_name(study.study_name)

    # ---- the state of the study ------------------------------------------------------------------------

    def _states(self) -> dict[int, TrialState]:
        return {t.number: t.state for t in self.study.get_trials(deepcopy=False)}

    def _budget_spent(self) -> bool:
        return self.budget is not None and self.claims.evaluated() >= self.budget

    def _orphans(self, claims: dict[str, int], states: dict[int, TrialState]) -> dict[str, int]:
        return {point: owner for point, owner in claims.items() if states.get(owner) == TrialState.FAIL}

    def done(self) -> bool:
        """Every point the budget allows is claimed, and every claim's trial has finished."""
        optuna.storages.fail_stale_trials(self.study)
        claims, states = self.claims.claims(), self._states()
        if any(states.get(owner) not in FINISHED for owner in claims.values()):
            return False
        return self._budget_spent() or len(claims) >= self.space.size

    # ---- choosing what to ask --------------------------------------------------------------------------

    def _enqueue(self, params: dict, **attrs) -> None:
        self.study.enqueue_trial(params, user_attrs=attrs, skip_if_exists=False)

    def _steer(self, duplicates: int) -> None:
        """Before asking: retry an orphan, else enqueue the strategy's next point in order, else (after many
        duplicates) a random unclaimed point.  Each point is enqueued once per process; another process may
        enqueue the same one, and the claim table turns the second into a duplicate."""
        claims, states = self.claims.claims(), self._states()
        for point, owner in self._orphans(claims, states).items():
            if f"retry:{owner}" not in self.enqueued:
                self.enqueued.add(f"retry:{owner}")
                self._enqueue(self.study.get_trials(deepcopy=False)[owner].params, retry_of=owner)
                return
        fresh = (params for params in self.order if (key := self.space.key(params)) not in claims
                 and key not in self.enqueued)
        params = next(fresh, None)
        if params is not None:
            self.enqueued.add(self.space.key(params))
            self._enqueue(params)
        elif duplicates >= DUPLICATES_BEFORE_FALLBACK and TrialState.WAITING not in states.values():
            left = [p for p in self.space.all_params() if self.space.key(p) not in claims]
            if left:
                self._enqueue(self.rng.choice(left), fallback=True)

    # ---- one trial -------------------------------------------------------------------------------------

    def _tell_duplicate(self, trial: optuna.Trial, owner: int | None, why: str) -> None:
        trial.set_user_attr("duplicate_of", owner)
        trial.set_user_attr("reason", why)
        self.study.tell(trial, state=TrialState.FAIL)
        with self.tally.lock:
            self.tally.duplicates += 1

    def _tell_outside(self, trial: optuna.Trial) -> None:
        trial.set_user_attr("outside_sweep", True)
        trial.set_user_attr("reason", self.space.outside(trial.params))
        self.study.tell(trial, state=TrialState.PRUNED)
        with self.tally.lock:
            self.tally.outside += 1

    def _claim(self, trial: optuna.Trial, candidate: Candidate) -> bool:
        """Claim the candidate's point for ``trial`` (taking over an orphan); tell a duplicate and return False
        when it is not ours."""
        claim = self.claims.claim(candidate.key, trial.number, budgeted=not candidate.pruned, budget=self.budget)
        if claim.outcome == "granted":
            return True
        if claim.outcome == "budget":
            self._tell_duplicate(trial, None, "the budget was spent by other workers")
            return False
        if self._states().get(claim.owner) == TrialState.FAIL and \
                self.claims.take_over(candidate.key, claim.owner, trial.number):
            trial.set_user_attr("retry_of", claim.owner)
            with self.tally.lock:
                self.tally.retried += 1
            return True
        self._tell_duplicate(trial, claim.owner, f"point already claimed by trial {claim.owner}")
        return False

    def _record(self, trial: optuna.Trial, candidate: Candidate, result: Evaluation) -> None:
        """The trial's point and worker, then the result through its own user attributes
        (:meth:`xegemm.library.record.Evaluation.to_user_attrs`; the export reads them back with ``from_user_attrs``)."""
        attrs = {"shape": candidate.shape.label, "point": candidate.key, "worker": self.worker,
                 **result.to_user_attrs()}
        for key, value in attrs.items():
            trial.set_user_attr(key, value)

    def _trial(self, objective, duplicates: int) -> int:
        """Run one trial; return the new count of consecutive duplicates."""
        with self.ask_lock:
            self._steer(duplicates)
            trial = self.study.ask(self.space.distributions())
        # beating from the start: a process killed at any point after this leaves a trial that goes stale
        trial_id = self.storage.get_trial_id_from_study_id_trial_number(self.study_id, trial.number)
        self.running[trial.number] = trial_id
        self.storage.record_heartbeat(trial_id)
        try:
            return self._owned_trial(objective, trial, duplicates)
        finally:
            self.running.pop(trial.number, None)

    def _owned_trial(self, objective, trial: optuna.Trial, duplicates: int) -> int:
        """Claim the trial's point, then record it pruned or evaluate it (see the module docstring)."""
        if self.space.point(trial.params) is None:
            self._tell_outside(trial)
            return duplicates + 1        # counts toward the fallback to an unclaimed point, as a duplicate
        candidate = self.space.candidate(trial.params)
        if not self._claim(trial, candidate):
            return duplicates + 1
        if candidate.pruned:
            self._record(trial, candidate, failure(candidate, "rejected", candidate.reason))
            self.study.tell(trial, state=TrialState.PRUNED)
            with self.tally.lock:
                self.tally.pruned += 1
            self.on_trial(self._summary(candidate, "rejected", None, None))
            return 0
        result = objective.evaluate(candidate) if not self.stop.is_set() else None
        if self.stop.is_set():           # interrupted: the worker was stopped under it; retried on resume
            trial.set_user_attr("interrupted", True)
            self.study.tell(trial, state=TrialState.FAIL)
            return 0
        self._record(trial, candidate, result)
        value = objective.value(result)
        self.study.tell(trial, value)
        with self.tally.lock:
            self.tally.evaluated += 1
            self.tally.cached += bool(result.cached)
            self.tally.failed += result.status != "ok"
            if result.status == "ok" and (self.tally.best is None or value > self.tally.best[0]):
                self.tally.best = (value, result.name)
        self.on_trial(self._summary(candidate, result.status, value, result))
        return 0

    @staticmethod
    def _summary(candidate: Candidate, status: str, value, result) -> dict:
        return {"shape": candidate.shape.label, "kernel": candidate.planned.name, "status": status, "value": value,
                "cached": bool(result and result.cached)}

    # ---- the loop --------------------------------------------------------------------------------------

    def _heartbeats(self) -> None:
        """Beat for the running trials.  A beat is best effort: one that fails even after the storage's retries
        is skipped (a trial goes stale only after three missed intervals), never a traceback from this thread;
        the workers' own storage calls meet the same database and report what is wrong with it."""
        while not self.stop.wait(self.heartbeat_s / 2):
            for trial_id in list(self.running.values()):
                try:
                    self.storage.record_heartbeat(trial_id)
                except Exception:  # noqa: BLE001 - see the docstring
                    break

    def _work(self, objective, errors: list) -> None:
        duplicates = 0
        try:
            while not self.stop.is_set():
                if self.deadline is not None and time.monotonic() >= self.deadline:
                    return
                with self.ask_lock:
                    finished = self.done()
                    busy = not finished and self._budget_or_space_exhausted()
                if finished:
                    return
                if busy:                  # others are finishing the last points (or a dead one goes stale)
                    time.sleep(WAIT_S)
                    continue
                duplicates = self._trial(objective, duplicates)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            errors.append(exc)
            self.stop.set()

    def _budget_or_space_exhausted(self) -> bool:
        claims, states = self.claims.claims(), self._states()
        if self._orphans(claims, states) or any(s == TrialState.WAITING for s in states.values()):
            return False
        return self._budget_spent() or len(claims) >= self.space.size

    def run(self, objectives: list) -> None:
        """Drive the study with one thread per objective until done, the deadline, or Ctrl-C."""
        errors: list = []
        beat = threading.Thread(target=self._heartbeats, daemon=True, name="xegemm-heartbeat")
        beat.start()
        threads = [threading.Thread(target=self._work, args=(objective, errors), daemon=True,
                                    name=f"xegemm-tune-{i}") for i, objective in enumerate(objectives)]
        for thread in threads:
            thread.start()
        try:
            while any(thread.is_alive() for thread in threads):
                for thread in threads:
                    thread.join(0.2)
        except KeyboardInterrupt:
            self.stop.set()
            for objective in objectives:
                objective.close()         # kills the worker processes under the running trials
            for thread in threads:
                thread.join(30)
            raise
        finally:
            self.stop.set()
            beat.join(5)
        if errors:
            raise errors[0]
