"""Run B against run A, through each run's own reference: what changed, and only what exceeds the noise.

Two runs rarely see the same machine: another job, a thermal state or a governor makes every timing of one run
slower.  Each run times numpy's matmul of the same problem interleaved with its kernels
(:func:`xegemm.evaluate.timing.measure_against_reference`), so a variant's *ratio to its own reference* cancels
what the machine did to both.  A comparison is made of those ratios:

- ``ratio`` of a variant in a run: its GFLOP/s over the GFLOP/s of the numpy run measured interleaved with it
  (its own record, ``extra.reference``), else over its problem's reference in that run (pooled, or timed alone);
  a run with no reference at all is compared on GFLOP/s, and the row says so (``basis``);
- ``cv`` of a ratio: the two sides' coefficients of variation combined, sqrt(cv_kernel^2 + cv_reference^2)
  (a quotient's relative spread, to first order);
- the change B/A = ratio_B / ratio_A is called ``faster`` or ``slower`` only when it departs from 1 by more than
  ``noise`` = max(2 sqrt(cv_A^2 + cv_B^2), :data:`MIN_CHANGE`) (two standard deviations of the quotient of two
  ratios);
- within the noise it is ``same`` when both runs were stable (every CV within
  :data:`xegemm.evaluate.timing.CV_LIMIT`, neither flagged ``high_cv``) and ``no reliable difference`` when
  either was not: the runs were too noisy to tell a change from none.

Per-repetition samples are not stored in results (only min, median, max, mean, CV and the count), so the test is
on the CVs, not a rank test on samples.  docs/reports.md says this to users.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xegemm.evaluate.timing import CV_LIMIT
from xegemm.library.parts import Reference
from xegemm.library.record import PROBLEM_KEYS, Evaluation
from xegemm.reporting.sources import Source

MIN_CHANGE = 0.05         # a change smaller than this is never called, however quiet the runs
NO_RELIABLE_DIFFERENCE = "no reliable difference"
CHANGES = ("new failure", "vanished", "slower", "fixed", "new", "faster", "still failing", NO_RELIABLE_DIFFERENCE,
           "same")        # the order of a comparison table: what needs a look first


@dataclass(frozen=True)
class Ratio:
    """A variant's speed in one run, against that run's reference: ``value`` (the ratio, or GFLOP/s when the run
    measured no reference: ``basis`` says which), ``cv`` (the ratio's), and whether both sides were stable."""

    value: float
    cv: float
    basis: str            # "numpy" or "GFLOP/s"
    stable: bool
    kernel_cv: float | None
    reference_cv: float | None
    reference_gflops: float | None


def _cv(ref: Reference) -> float | None:
    cv = ref.cv
    return float(cv) if isinstance(cv, (int, float)) else None


def problem_references(sources: list[Source]) -> dict[tuple[str, tuple], Reference]:
    """(source label, problem) -> the reference that source lists for that problem (run's results.json or a tune
    export's trials.json ``references``)."""
    out = {}
    for src in sources:
        for r in src.references:
            problem = r.problem or {}
            out[(src.label, tuple(problem.get(k) for k in PROBLEM_KEYS))] = r
    return out


def ratio_of(v: Evaluation, listed: dict[tuple[str, tuple], Reference]) -> Ratio | None:
    """``v``'s :class:`Ratio` in its run (None when it was not timed)."""
    if not v.gflops:
        return None
    kernel_cv = v.cv
    own = v.reference
    ref = own if own and own.gflops else listed.get((v.source, v.problem))
    if ref and ref.gflops:
        ref_cv = _cv(ref)
        parts = [x for x in (kernel_cv, ref_cv) if x is not None]
        cv = math.sqrt(sum(x * x for x in parts))
        stable = (kernel_cv is not None and kernel_cv <= CV_LIMIT and ref_cv is not None and ref_cv <= CV_LIMIT
                  and not ref.high_cv)
        return Ratio(v.gflops / ref.gflops, cv, "numpy", stable, kernel_cv, ref_cv, ref.gflops)
    cv = kernel_cv or 0.0
    return Ratio(v.gflops, cv, "GFLOP/s", kernel_cv is not None and kernel_cv <= CV_LIMIT, kernel_cv, None, None)


def judge(a: Ratio, b: Ratio) -> tuple[float, float, str]:
    """(B/A, the noise bound, the change) for one variant timed in both runs (see the module docstring)."""
    if a.basis != b.basis:           # one run has a reference, the other none: compare what both have
        raise ValueError("ratios of different bases")
    change = b.value / a.value
    noise = max(2 * math.sqrt(a.cv ** 2 + b.cv ** 2), MIN_CHANGE)
    if change > 1 + noise:
        return change, noise, "faster"
    if change < 1 - noise:
        return change, noise, "slower"
    return change, noise, "same" if a.stable and b.stable else NO_RELIABLE_DIFFERENCE


def _plain(r: Ratio) -> Ratio:
    """A ratio seen as GFLOP/s alone (when the other run has no reference)."""
    return Ratio(r.value * r.reference_gflops if r.reference_gflops else r.value, r.kernel_cv or 0.0, "GFLOP/s",
                 r.kernel_cv is not None and r.kernel_cv <= CV_LIMIT, r.kernel_cv, None, None)


def compare(base: list[Source], new: list[Source]) -> list[dict]:
    """Each variant of either side, matched by name and problem: its GFLOP/s, ratio to its run's reference and
    the ratio's CV in A and B, B/A (``speedup``: of the ratios, or of GFLOP/s when a run has no reference:
    ``basis``), the noise bound, and the change (:data:`CHANGES`)."""
    def index(sources) -> dict[tuple, Evaluation]:
        return {(v.name, v.problem): v for s in sources for v in s.variants}

    listed = problem_references([*base, *new])
    a, b = index(base), index(new)
    rows = []
    for key in sorted(set(a) | set(b), key=lambda k: (k[0], str(k[1]))):
        va, vb = a.get(key), b.get(key)
        ra = ratio_of(va, listed) if va and va.status == "ok" else None
        rb = ratio_of(vb, listed) if vb and vb.status == "ok" else None
        speedup = noise = None
        if va is None:
            change = "new"
        elif vb is None:
            change = "vanished"
        elif va.status == "ok" and vb.status != "ok":
            change = "new failure"
        elif va.status != "ok" and vb.status == "ok":
            change = "fixed"
        elif ra is None or rb is None:
            change = "still failing"
        else:
            if ra.basis != rb.basis:
                ra, rb = _plain(ra), _plain(rb)
            speedup, noise, change = judge(ra, rb)
        either = vb or va
        rows.append({"name": key[0], "problem": dict(zip(PROBLEM_KEYS, key[1])), "label": either.label,
                     "types": "/".join(str(t) for t in either.parameters.types[:4]),
                     "status_a": va.status if va else None, "status_b": vb.status if vb else None,
                     "gflops_a": va.gflops if va else None, "gflops_b": vb.gflops if vb else None,
                     "ratio_a": ra.value if ra and ra.basis == "numpy" else None,
                     "ratio_b": rb.value if rb and rb.basis == "numpy" else None,
                     "cv_a": ra.cv if ra else None, "cv_b": rb.cv if rb else None,
                     "stable_a": ra.stable if ra else None, "stable_b": rb.stable if rb else None,
                     "basis": (ra or rb).basis if (ra or rb) else None,
                     "speedup": speedup, "noise": noise, "change": change, "reason_b": vb.reason if vb else None})
    return rows
