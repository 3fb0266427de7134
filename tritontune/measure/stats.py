"""Latency statistics and the stability rule for measurement windows, as perf_analyzer computes them.

Percentiles: perf_analyzer's index into the sorted latencies, ``int(p / 100 * (n - 1) + 0.5)``
(``SummarizeLatency`` in its ``inference_profiler.cc``): the reported p99 is a latency that was
really observed, never an interpolation.

Stability: perf_analyzer's rule (``IsInferWindowStable`` / ``IsLatencyWindowStable``): over the
last ``count`` windows, max / min <= 1 + ``tolerance`` for throughput and for its stabilizing
latency (the mean, unless ``--percentile`` is given), and no window without a completed request.
tritontune adds one check of its own, so its rule is stricter: p99's max / min <= 1 + 2 x
``tolerance`` (a tail that swings more would make an SLO verdict depend on the window looked at).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PERCENTILES = (50, 90, 95, 99, 99.9)


@dataclass(frozen=True)
class LatencyStats:
    """Latency distribution of successful requests, in seconds."""

    count: int
    mean: float
    p50: float
    p90: float
    p95: float
    p99: float
    p999: float
    max: float

    @classmethod
    def from_samples(cls, latencies: Sequence[float] | np.ndarray) -> LatencyStats:
        values = np.asarray(latencies, dtype=np.float64)
        if values.size == 0:
            nan = float("nan")
            return cls(0, nan, nan, nan, nan, nan, nan, nan)
        ordered = np.sort(values)
        p50, p90, p95, p99, p999 = (percentile_of_sorted(ordered, p) for p in PERCENTILES)
        return cls(
            count=int(values.size),
            mean=float(values.mean()),
            p50=float(p50),
            p90=float(p90),
            p95=float(p95),
            p99=float(p99),
            p999=float(p999),
            max=float(values.max()),
        )

    def to_dict(self, unit: float = 1e-3) -> dict[str, float | int]:
        """In milliseconds by default (``unit`` seconds per reported unit)."""
        out: dict[str, float | int] = {"count": self.count}
        for name in ("mean", "p50", "p90", "p95", "p99", "p999", "max"):
            out[name] = round(getattr(self, name) / unit, 4)
        return out


@dataclass(frozen=True)
class WindowSummary:
    """One measurement window: how much got done, and how fast."""

    duration: float
    completed: int
    throughput: float
    """Inferences per second (requests x client batch size)."""
    mean_latency: float
    p99: float


def percentile_of_sorted(ordered: np.ndarray, percentile: float) -> float:
    """perf_analyzer's percentile of ascending ``ordered`` (non-empty): the value at index
    ``int(p / 100 * (n - 1) + 0.5)``."""
    return float(ordered[int(percentile / 100.0 * (ordered.size - 1) + 0.5)])


def spread(values: Sequence[float]) -> float:
    """max / min - 1: perf_analyzer's stability measure (0.1: the largest is 10 % over the
    smallest); inf when the smallest is 0 or a value is undefined."""
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0 or not np.all(np.isfinite(array)):
        return float("inf")
    low = float(array.min())
    return float(array.max()) / low - 1 if low > 0 else float("inf")


def relative_deviation(values: Sequence[float]) -> float:
    """The largest distance of a value from the mean, relative to the mean (perf_analyzer's
    measure); 0 for a single value, inf when the mean is 0 or undefined."""
    array = np.asarray(values, dtype=np.float64)
    if array.size <= 1:
        return 0.0
    mean = float(array.mean())
    if not np.isfinite(mean) or mean <= 0:
        return float("inf")
    return float(np.abs(array - mean).max() / mean)


def is_stable(windows: Sequence[WindowSummary], *, count: int, tolerance: float) -> bool:
    """perf_analyzer's rule, plus a check of p99 (see the module's docstring).

    The last ``count`` windows are stable when each completed requests, throughput and mean
    latency each have max / min <= 1 + ``tolerance`` (perf_analyzer's default 10 %), and p99
    max / min <= 1 + 2 x ``tolerance``.
    """
    if len(windows) < count:
        return False
    last = windows[-count:]
    return (
        all(w.completed > 0 for w in last)
        and spread([w.throughput for w in last]) <= tolerance
        and spread([w.mean_latency for w in last]) <= tolerance
        and spread([w.p99 for w in last]) <= 2 * tolerance
    )


def surely_over(past: int, count: int, share: float, chance: float) -> bool:
    """Is more than ``share`` of what ``count`` samples were drawn from past a line, when
    ``past`` of them are? Yes when so many would be past it by less than ``chance`` were only
    ``share`` of the population (the binomial tail P(X >= past | count, share) < chance).

    What lets a level end as soon as a class has surely missed its objective (a p99 is past its
    bound when more than 1 % of the replies are): 3 of 5 replies past it decides at once, 3 of
    50 does not (P = 1.4 %), so a stray slow reply never ends a level."""
    if past <= 0 or count <= 0:
        return False
    if share <= 0:
        return True
    # the pmf term by term (no factorials: a level has thousands of replies)
    term = (1.0 - share) ** count
    below = 0.0
    for i in range(past):
        below += term
        term *= (count - i) / (i + 1) * share / (1.0 - share)
    return 1.0 - below < chance
