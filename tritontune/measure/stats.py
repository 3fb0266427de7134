"""Latency statistics and the stability rule for measurement windows.

Percentiles use the nearest-rank ("higher") definition, as perf_analyzer does: the reported p99 is
a latency that was really observed, never an interpolation below it.
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
        p50, p90, p95, p99, p999 = np.percentile(values, PERCENTILES, method="higher")
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
    """perf_analyzer's rule, tightened on the tail.

    The last ``count`` windows are stable when throughput and mean latency each stay within
    ``tolerance`` (perf_analyzer's default 10 %), and p99 within twice that: a tail that swings more
    would make an SLO verdict depend on which window was looked at.
    """
    if len(windows) < count:
        return False
    last = windows[-count:]
    return (
        all(w.completed > 0 for w in last)
        and relative_deviation([w.throughput for w in last]) <= tolerance
        and relative_deviation([w.mean_latency for w in last]) <= tolerance
        and relative_deviation([w.p99 for w in last]) <= 2 * tolerance
    )
