"""The tuner's leaders timed again before a winner is named (xegemm.tune.leaders), with a deterministic noisy
timer injected in place of the device: a single-measurement argmax picks a candidate that was lucky once, the
re-timing does not."""

import itertools

from xegemm.tune import leaders
from xegemm.tune.leaders import Leader, confidence, retime

# the candidates' true ratios to numpy: A is the fastest, C the slowest
TRUE = {1: 1.00, 2: 0.96, 3: 0.90}
# one trial each, on a machine whose load comes and goes: C was timed in a quiet moment (+30 %), A while
# another job ran (-10 %): what a search that keeps the best single measurement sees
FIRST = {1: 0.90, 2: 0.97, 3: 1.17}
# the re-timings' noise: deterministic, +-4 %, a different phase per candidate
NOISE = (0.04, -0.03, 0.01, -0.04, 0.02, 0.0, -0.01, 0.03)


class NoisyTimer:
    """measure(leader) -> (ratio, GFLOP/s, CV): the true ratio times a deterministic wobble."""

    def __init__(self):
        self.calls = {trial: itertools.cycle(NOISE[i:] + NOISE[:i]) for i, trial in enumerate(TRUE)}
        self.order: list[int] = []

    def __call__(self, leader: Leader):
        self.order.append(leader.trial)
        ratio = TRUE[leader.trial] * (1 + next(self.calls[leader.trial]))
        return ratio, 20.0 * ratio, 0.05


def _leaders():
    return [Leader(trial, f"k{trial}", 20.0 * FIRST[trial], FIRST[trial]) for trial in sorted(FIRST, key=lambda t: -FIRST[t])]


def test_a_single_measurement_argmax_picks_wrongly_and_the_retimed_leaders_do_not():
    argmax = max(FIRST, key=FIRST.get)
    assert argmax == 3                                   # the slowest candidate, lucky once
    timer = NoisyTimer()
    verdict = retime(_leaders(), timer, budget_s=1e9)
    assert verdict.winner == 1 and verdict.order == [1, 2, 3]
    assert verdict.order_held and verdict.stopped == "order held" and verdict.rounds >= leaders.MIN_ROUNDS
    # every round measured each leader once, in a rotated order (none always first after the pause)
    rounds = [timer.order[i:i + 3] for i in range(0, len(timer.order), 3)]
    assert len(rounds) == verdict.rounds and all(sorted(r) == [1, 2, 3] for r in rounds)
    assert len({r[0] for r in rounds}) == min(3, len(rounds))
    record = verdict.as_dict()
    assert record["winner_trial"] == 1 and all(len(x["ratios"]) == verdict.rounds for x in record["leaders"])
    assert record["leaders"][0]["first_ratio"] == FIRST[3]       # what the single measurement said is kept


def test_an_order_that_never_settles_stops_at_the_budget_and_says_so():
    # each leader alternates between fast and slow, out of phase: the medians swap after every round
    runs = {1: itertools.cycle([1.2, 0.7]), 2: itertools.cycle([0.8, 1.3])}

    def measure(leader):
        ratio = next(runs[leader.trial])
        return ratio, ratio, 0.3

    clock = itertools.count(0.0, 10.0)      # every call of the clock is 10 s later
    verdict = retime([Leader(1, "a", 1.0), Leader(2, "b", 1.0)], measure, budget_s=25.0,
                     clock=lambda: next(clock))
    assert verdict.stopped == "time budget" and not verdict.order_held and not verdict.separated
    assert verdict.as_dict()["order_held"] is False


def test_a_failed_retiming_is_never_the_winner_and_a_stale_record_is_not_used():
    def measure(leader):
        return (0.0, 0.0, None) if leader.trial == 1 else (0.5, 10.0, 0.02)

    verdict = retime([Leader(1, "broken now", 30.0), Leader(2, "b", 10.0)], measure, budget_s=1e9)
    assert verdict.winner == 2
    verdict.complete_trials = 5
    record = verdict.as_dict()
    assert confidence(record, [1, 2, 3, 4, 5]) == (2, record)
    winner, stale = confidence(record, [1, 2, 3, 4, 5, 6])       # a resume added a trial since
    assert winner is None and stale["retimed"] is False and "added" in stale["why"]
    assert confidence(None, [1])[0] is None
