"""Before a winner is named: the leading candidates timed again, interleaved with each other and the reference.

A search keeps the highest of single measurements, and the highest of several noisy measurements is biased up:
a candidate that was lucky once (a quiet moment of the machine) beats a faster one that was measured while
another job ran.  So after the trials, the :data:`LEADERS` best candidates of a shape are measured again in
rounds: each round measures every leader once (each measurement is interleaved with numpy's matmul of the same
problem, :func:`xegemm.evaluate.timing.measure_against_reference`, and the value kept is the ratio to it, so
load that comes and goes cancels), the leaders in a rotated order (none always first after the pause).  Rounds
go on until the leaders' order by the median of their ratios has been the same after :data:`STABLE_ROUNDS`
successive rounds (at least :data:`MIN_ROUNDS` rounds), or :data:`MAX_ROUNDS` rounds, or the time budget is
spent.  The winner is the leader with the highest median ratio; :class:`Verdict` (in best.json as
``confidence``) records every re-timing, each leader's median and spread, whether the order held and whether
the winner's lead exceeds the noise (2 sqrt(cv_1^2 + cv_2^2) of the two best, as xegemm.reporting.comparison
judges two runs).

The measuring is a function given to :func:`retime` (the tuner's device objective, xegemm.tune.api), so the
decision can be checked with a deterministic fake timer (tests/test_leaders.py).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

from xegemm.library.parts import Confidence

LEADERS = 3             # candidates timed again before a winner is named
MIN_ROUNDS = 2          # at least this many rounds of re-timing
STABLE_ROUNDS = 2       # the order must be the same after this many successive rounds
MAX_ROUNDS = 6          # at most this many
BUDGET_S = 60.0         # and no new round after this many seconds


@dataclass
class Leader:
    """A candidate timed again: its trial, kernel, the value its one trial measured, and each re-timing."""

    trial: int
    kernel: str
    first: float                                   # the trial's own measurement (GFLOP/s)
    first_ratio: float | None = None               # and its ratio to numpy
    ratios: list[float] = field(default_factory=list)
    gflops: list[float] = field(default_factory=list)
    cvs: list[float] = field(default_factory=list)  # each re-timing's worst CV (kernel or reference)

    @property
    def median(self) -> float:
        return statistics.median(self.ratios) if self.ratios else 0.0

    @property
    def spread(self) -> float:
        """The relative spread of the re-timings (stdev / mean of the ratios; 0 with fewer than two)."""
        if len(self.ratios) < 2 or statistics.fmean(self.ratios) == 0:
            return 0.0
        return statistics.stdev(self.ratios) / statistics.fmean(self.ratios)

    def as_dict(self) -> dict:
        return {"trial": self.trial, "kernel": self.kernel, "first_gflops": self.first,
                "first_ratio": self.first_ratio, "ratios": self.ratios, "gflops": self.gflops, "cvs": self.cvs,
                "median_ratio": self.median, "spread": self.spread}


@dataclass
class Verdict:
    """What the re-timing decided (best.json's ``confidence``)."""

    winner: int | None                  # the winning trial's number
    order: list[int]                    # the leaders' trials, best first
    rounds: int
    order_held: bool                    # the order was the same after the last STABLE_ROUNDS rounds
    separated: bool                     # the winner's median beats the second's by more than the noise
    stopped: str                        # "order held", "max rounds", "time budget"
    seconds: float
    leaders: list[Leader]
    complete_trials: int = 0            # completed trials when it ran (a later resume makes it stale)

    def as_dict(self) -> dict:
        return {"retimed": True, "winner_trial": self.winner, "order": self.order, "rounds": self.rounds,
                "order_held": self.order_held, "separated": self.separated, "stopped": self.stopped,
                "seconds": self.seconds, "complete_trials": self.complete_trials,
                "method": f"the {len(self.leaders)} best trials timed again in up to {MAX_ROUNDS} rounds, each "
                          "interleaved with numpy; ranked by the median ratio to numpy",
                "leaders": [leader.as_dict() for leader in self.leaders]}


# what measure() returns for one leader: (ratio to the interleaved reference, GFLOP/s, worst CV); a failed
# re-timing is (0, 0, None)
Measure = Callable[[Leader], tuple[float, float, float | None]]


def _order(leaders: list[Leader]) -> list[int]:
    return [leader.trial for leader in sorted(leaders, key=lambda x: (-x.median, x.trial))]


def retime(leaders: list[Leader], measure: Measure, budget_s: float = BUDGET_S,
           clock: Callable[[], float] = time.monotonic) -> Verdict:
    """Time ``leaders`` again by rounds with ``measure`` until their order is stable (see the module docstring)."""
    start = clock()
    orders: list[list[int]] = []
    stopped = "max rounds"
    for round_number in range(MAX_ROUNDS):
        if round_number >= 1 and clock() - start >= budget_s:
            stopped = "time budget"
            break
        shift = round_number % len(leaders)
        for leader in leaders[shift:] + leaders[:shift]:
            ratio, gflops, cv = measure(leader)
            leader.ratios.append(ratio)
            leader.gflops.append(gflops)
            leader.cvs.append(cv)
        orders.append(_order(leaders))
        if len(orders) >= max(MIN_ROUNDS, STABLE_ROUNDS) and all(o == orders[-1] for o in orders[-STABLE_ROUNDS:]):
            stopped = "order held"
            break
    held = len(orders) >= STABLE_ROUNDS and all(o == orders[-1] for o in orders[-STABLE_ROUNDS:])
    ranked = sorted(leaders, key=lambda x: (-x.median, x.trial))
    winner = ranked[0] if ranked and ranked[0].median > 0 else None
    separated = False
    if winner is not None and len(ranked) > 1:
        second = ranked[1]
        noise = 2 * math.sqrt(winner.spread ** 2 + second.spread ** 2)
        separated = second.median <= 0 or winner.median / second.median - 1 > noise
    elif winner is not None:
        separated = True
    return Verdict(winner.trial if winner else None, [x.trial for x in ranked], len(orders), held, separated,
                   stopped, clock() - start, leaders)


ATTR = "xegemm_leaders"   # the study's user attribute holding the last Verdict (as_dict), or why none ran


def not_retimed(why: str, complete_trials: int) -> dict:
    """The confidence record of a shape whose leaders were not timed again, and why."""
    return {"retimed": False, "why": why, "complete_trials": complete_trials}


def confidence(record: dict | None, complete_ok: list[int]) -> tuple[int | None, dict]:
    """(the winning trial the re-timing chose, or None to keep the best single measurement; best.json's
    ``confidence``) from a study's :data:`ATTR` record and its completed passing trials now."""
    if not isinstance(record, dict):
        return None, not_retimed("the leaders were not timed again (an ahead-of-time study, an interrupted tune, "
                                 "or a study from before re-timing)", len(complete_ok))
    verdict = Confidence.from_dict(record)
    if not verdict.current(len(complete_ok)):
        return None, {**record, "retimed": False, "why": "trials were added after the leaders were timed again: "
                      "the best single measurement is named; tune again to re-time"}
    winner = verdict.winner_trial
    return (winner if verdict.retimed and winner in complete_ok else None), record
