"""Timers for pytest-benchmark that report durations the benchmarked code measured itself.

pytest-benchmark times a round as ``timer()`` after minus ``timer()`` before.  A :class:`MeasuredClock`
stands still except when a round adds the duration it measured, so the statistics pytest-benchmark keeps
are exactly those durations: device time from a kernel's profiling event (no launch overhead), or the time
a child process measured around its own matmul (no pipe round trip).
"""

from __future__ import annotations

from collections.abc import Callable

from xegemm.evaluate.timing import Timing, warm_up


class MeasuredClock:
    """A pytest-benchmark timer (pass it as ``@pytest.mark.benchmark(timer=...)``) fed with measured seconds."""

    def __init__(self, name: str):
        self.__name__ = name          # how pytest-benchmark names the timer in its JSON
        self._now = 0.0
        self.samples: list[float] = []

    def __call__(self) -> float:
        return self._now

    def add(self, seconds: float) -> None:
        """Advance the clock by one measured duration."""
        self._now += seconds
        self.samples.append(seconds)

    def measure(self, target: Callable[[], float], rounds: int, warmup: int = 0, benchmark=None) -> Timing:
        """Warm ``target`` (which returns the seconds it measured) up as every xegemm timing does
        (:func:`xegemm.evaluate.timing.warm_up`: by time and stability, at least ``warmup`` runs), then run it ``rounds``
        times through ``benchmark.pedantic`` (or a plain loop without one); return those rounds' timing, with
        the warm-up used."""
        warm = warm_up(lambda: target() * 1e3, warmup)
        start = len(self.samples)
        if benchmark is None:
            for _ in range(rounds):
                self.add(target())
        else:
            benchmark.pedantic(lambda: self.add(target()), rounds=rounds, iterations=1)
        samples = self.samples[start:]
        del self.samples[start:]
        return Timing(tuple(s * 1e3 for s in samples), warm)


def event_seconds(event) -> float:
    """Device time of a finished-or-pending dpctl profiling event (waits for it)."""
    event.wait()
    return (event.profiling_info_end - event.profiling_info_start) * 1e-9
