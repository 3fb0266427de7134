"""Open-loop arrival processes: how the gaps between a stream's requests are drawn, or replayed.

Every process is a *shape* that any rate scales: its gaps have mean ``1 / rate`` whatever the
shape, so a capacity search can look for the highest rate of that same shape. Poisson (independent
users), constant, gamma (bursts and lulls, with a given coefficient of variation), or a recorded
trace (:class:`ArrivalTrace`): the timestamps of real arrivals, e.g. from a gateway's access log,
replayed with their gaps scaled by ``rate / trace rate`` (the speed-up).
"""

from __future__ import annotations

import csv
import itertools
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TextIO

from tritontune.enums import TextEnum
from tritontune.errors import InputError


class Arrival(TextEnum):
    """How open-loop arrivals are spaced."""

    POISSON = "poisson"
    """Exponential gaps (coefficient of variation 1): independent users."""
    CONSTANT = "constant"
    GAMMA = "gamma"
    """Gamma-distributed gaps with a given coefficient of variation: above 1, bursts and lulls
    (traffic that arrives in clumps, e.g. behind a fan-out or a retrying client)."""
    TRACE = "trace"
    """Gaps replayed from a recorded trace (:class:`ArrivalTrace`), scaled to the rate."""


@dataclass(frozen=True)
class ArrivalTrace:
    """Recorded arrivals of one class, kept as their gaps in units of the trace's mean gap (so
    their mean is 1): replayed at ``rate`` req/s, a gap lasts ``unit_gap / rate`` seconds, which
    plays the trace ``rate / natural_rate`` times faster than it was recorded."""

    source: Path
    arrivals: int
    natural_rate: float
    """Its own rate (req/s): arrivals over the time from the first to the last."""
    unit_gaps: tuple[float, ...] = field(repr=False)

    def speedup(self, rate: float) -> float:
        """How many times faster than recorded the trace plays at ``rate`` req/s."""
        return rate / self.natural_rate

    def describe(self) -> str:
        return f"{self.source.name}: {self.arrivals:,} arrivals at {self.natural_rate:,.4g} req/s"


def next_gap(arrival: Arrival, rate: float, rng: random.Random, cv: float | None = None) -> float:
    """The time to the next arrival of a random stream of ``rate`` req/s: mean ``1 / rate``
    whatever the shape. A gamma gap of shape ``k = 1 / cv**2`` and scale ``1 / (rate * k)`` has
    that mean and a standard deviation ``cv`` times it (``cv = 1`` is Poisson)."""
    if arrival == Arrival.POISSON:
        return rng.expovariate(rate)
    if arrival == Arrival.GAMMA:
        shape = 1.0 / (cv or 1.0) ** 2
        return rng.gammavariate(shape, 1.0 / (rate * shape))
    if arrival == Arrival.TRACE:
        raise ValueError("trace arrivals are replayed by arrival_gaps(), not drawn")
    return 1.0 / rate


def arrival_gaps(
    arrival: Arrival,
    rate: float,
    rng: random.Random,
    cv: float | None = None,
    trace: ArrivalTrace | None = None,
) -> Iterator[float]:
    """The gaps (seconds) of a stream of ``rate`` req/s, one per arrival, without end. A trace is
    replayed from its first gap, starting over after its last, so that every load level of a
    search plays the same stretch of it."""
    if arrival == Arrival.TRACE:
        if trace is None:
            raise ValueError("trace arrivals need their ArrivalTrace")
        return (gap / rate for gap in itertools.cycle(trace.unit_gaps))
    return (next_gap(arrival, rate, rng, cv) for _ in itertools.count())


def read_arrival_trace(path: Path, class_name: str | None = None, *, where: str) -> ArrivalTrace:
    """Read a trace of arrivals: one per line, a timestamp (seconds, e.g. Unix time, or ISO 8601)
    then, optionally, the class it belongs to, separated by a comma or spaces; a header line and
    ``#`` comments are skipped. With a class column, only ``class_name``'s lines are this class's
    arrivals. Lines need not be in order (access logs are written as requests finish). ``where``
    names the field that pointed here, for errors."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{where}: {path} is not a file")
    times: list[float] = []
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            for number, fields in _rows(handle):
                if len(fields) > 1 and class_name is not None and fields[1] != class_name:
                    continue
                stamp = _timestamp(fields[0])
                if stamp is None:
                    if number == 1:
                        continue  # a header
                    raise InputError(
                        f"{path} line {number}: expected a timestamp (seconds, or ISO 8601 such as "
                        f"2026-11-24T10:00:00.250Z) first (got {fields[0]!r})"
                    )
                times.append(stamp)
    except UnicodeDecodeError:
        raise InputError(f"{where}: {path} is not a text file of timestamps") from None
    of = f" of class {class_name!r}" if class_name is not None else ""
    if len(times) < 2:
        raise InputError(f"{where}: {path} has {len(times)} arrival(s){of}: a trace needs at least 2")
    times.sort()
    span = times[-1] - times[0]
    if not span > 0:
        raise InputError(f"{where}: {path}: every arrival{of} has the same timestamp")
    natural_rate = (len(times) - 1) / span
    gaps = tuple((b - a) * natural_rate for a, b in itertools.pairwise(times))
    return ArrivalTrace(path.resolve(), len(times), natural_rate, gaps)


def _rows(handle: TextIO) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of each line that is not blank or a comment."""
    for number, line in enumerate(handle, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        fields = [f.strip() for f in next(csv.reader([text]))] if "," in text else text.split()
        yield number, fields


def _timestamp(text: str) -> float | None:
    """Seconds from ``text`` (a number of seconds, or an ISO 8601 date and time), else None."""
    try:
        value = float(text)
    except ValueError:
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            return None
        return moment.timestamp()
    return value if math.isfinite(value) else None
