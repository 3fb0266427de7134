"""Pass or fail from repeated measurements, and how sure the verdict is.

A CI gate on a shared machine must neither pass a clear regression nor fail a clean repository
because one window was noisy. So a tuned model is measured in independent *rounds* (each one a
full measurement: warm-up, then windows until stable), every criterion is judged on the median
over rounds, and the confidence says how many rounds agree with that verdict:

* ``high``: every round (at least 3) on the same side of the limit;
* ``medium``: at least two thirds agree;
* ``low``: a bare majority; the figure is close to its limit or the machine is noisy.

One noisy window moves one round at most, which the median ignores. When the rounds disagree,
the caller measures two more (:func:`needs_more_rounds`), so a verdict is never a coin toss
between two windows.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tritontune.measure.measurement import MAX_ERROR_RATE


@dataclass(frozen=True)
class RoundFigures:
    """What one round measured at the recorded load."""

    throughput: float
    p99_s: float
    error_rate: float


@dataclass(frozen=True)
class Criterion:
    """One pass/fail rule applied to the rounds."""

    name: str
    """``p99``, ``throughput`` or ``errors``; a workload class's name for its objective."""
    passed: bool
    measured: float
    """The median over rounds."""
    limit: float
    agreeing: int
    """Rounds on the same side of the limit as the verdict."""
    rounds: int

    @property
    def unanimous(self) -> bool:
        return self.agreeing == self.rounds

    @property
    def confidence(self) -> str:
        if self.rounds >= 3 and self.unanimous:
            return "high"
        if 3 * self.agreeing >= 2 * self.rounds:
            return "medium"
        return "low"


def _criterion(
    name: str,
    values: Sequence[float],
    limit: float,
    ok: Callable[[float], bool],
) -> Criterion:
    median = statistics.median(values)
    passed = ok(median)
    agreeing = sum(1 for v in values if ok(v) == passed)
    return Criterion(name, passed, median, limit, agreeing, len(values))


def judge(
    rounds: Sequence[RoundFigures],
    *,
    slo_p99_s: float,
    recorded_throughput: float,
    tolerance: float,
) -> list[Criterion]:
    """The p99, throughput and error criteria for ``rounds`` (at least one)."""
    if not rounds:
        raise ValueError("no rounds to judge")
    floor = recorded_throughput * (1 - tolerance)
    return [
        _criterion("p99", [r.p99_s for r in rounds], slo_p99_s, lambda v: v <= slo_p99_s),
        _criterion("throughput", [r.throughput for r in rounds], floor, lambda v: v >= floor),
        _criterion(
            "errors", [r.error_rate for r in rounds], MAX_ERROR_RATE, lambda v: v <= MAX_ERROR_RATE
        ),
    ]


def objective_criterion(name: str, met: Sequence[bool]) -> Criterion:
    """A workload class's rule: its objective met in most rounds (``measured`` is the median of
    1 for a round that met it and 0 for one that did not)."""
    return _criterion(name, [1.0 if m else 0.0 for m in met], 0.5, lambda v: v >= 0.5)


def needs_more_rounds(criteria: Sequence[Criterion]) -> bool:
    """True while some criterion's rounds disagree (the verdict rests on a split vote)."""
    return any(not c.unanimous for c in criteria)
