"""A config's capacity for a mixed workload: the most work it serves with every class meeting its
objective.

The mix is scaled as a whole (each class keeps its share) along the ramp of
:mod:`tritontune.search.ramp`: doubling the total rate (x1.25 near a capacity the caller expects)
while every class meets its objective, halving from a first rate that misses (to ``min_rate``),
then bisecting. The figure is the work **served**, every class together, at the best passing
level: the offered rate rewarded shedding, since a class that may be shed meets its objective at
any rejection rate. So the ramp also stops once a passing level served less than
:data:`SATURATION_GAIN` more than the best before it. ``measure`` is a function, so the search is
tested on a modelled server. See ``docs/concepts/workloads.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tritontune.measure.mixed import TrafficMeasurement
from tritontune.measure.traffic import ClassObjective, Traffic
from tritontune.search.ramp import MIN_LOAD_FRACTION, RampRules, ramp_and_bisect
from tritontune.study.figures import CapacityFigure

#: Where a capacity ramp starts when nobody says (total req/s in all): the default of
#: ``search --workload`` and ``profile --workload`` (below what most models serve; a ramp whose
#: first level misses steps down from it, to 1/64 of it at most: :data:`MIN_RATE_FRACTION`).
DEFAULT_START_RATE = 20.0
#: How far below its start a capacity ramp whose first level missed steps down when nobody names
#: a floor (six halvings: 20 req/s -> 0.3 req/s).
MIN_RATE_FRACTION = MIN_LOAD_FRACTION
#: The highest total rate a capacity ramp tries when nobody says (``search --max-load``).
DEFAULT_MAX_RATE = 100_000.0
#: The ramp stops once a passing level served less than this much more than the best before it.
SATURATION_GAIN = 0.03
#: The ramp's step while within a factor 2 of a capacity it was told to expect (``near``): the
#: answer is close, so a small step brackets it in one level, and the bisection has a fifth of
#: a doubling's gap to close (issue 41: MiniLM's mix walked 2 -> 4 -> ... -> 32 req/s per trial).
NEAR_STEP = 1.25


def _gain(level: TrafficMeasurement, best: TrafficMeasurement) -> float:
    """How much more work ``level`` served than ``best`` (a fraction)."""
    return level.throughput / max(best.throughput, 1e-9) - 1


def _rate(rate: float) -> str:
    """A total rate as the failure line shows it: whole req/s, two digits below 10."""
    return f"{rate:.0f}" if rate >= 10 else f"{rate:.2g}"


@dataclass(frozen=True)
class TrafficCapacity:
    """The capacity found, and every level measured on the way (ascending total rate)."""

    traffic: Traffic
    levels: tuple[TrafficMeasurement, ...]
    best: TrafficMeasurement | None
    """The level that served the most inferences with every class meeting its objective (None:
    not even the lowest rate met them)."""
    remeasured: tuple[float, ...] = ()
    """Rates measured again because a first try missed an objective (the level kept is the
    last try)."""
    client_bound_at: float | None = None
    """The lowest total rate the load generator limited: the walk stopped there, and the
    capacity found is a lower bound (None: the client kept up)."""
    stepped_down: bool = False
    """The first rate missed, so the ramp stepped down from it (to :attr:`best`, or to
    :attr:`min_rate` when every rate missed)."""
    min_rate: float | None = None
    """The lowest total rate the ramp would step down to."""

    @property
    def feasible(self) -> bool:
        return self.best is not None

    @property
    def served(self) -> float:
        """Inferences served per second at :attr:`best`, every class together: the figure a
        config is ranked by."""
        return self.best.throughput if self.best is not None else 0.0

    def served_by_class(self) -> dict[str, float]:
        """Each class's inferences served per second at :attr:`best`."""
        if self.best is None:
            return {c.name: 0.0 for c in self.traffic.classes}
        return {c.name: self.best.figures(c.name).throughput for c in self.traffic.classes}

    def class_figures(self) -> dict[str, dict[str, float | None]]:
        """Each class's figures at :attr:`best`: inferences served per second and the p50 and
        p99 of its successful requests (ms; None where none succeeded): what a reader checks the
        objectives against."""
        figures: dict[str, dict[str, float | None]] = {}
        for c in self.traffic.classes:
            found = self.best.figures(c.name) if self.best is not None else None
            latency = found.latency if found is not None and found.latency.count else None
            figures[c.name] = {
                "served_infer_per_s": round(found.throughput, 3) if found is not None else 0.0,
                "p50_ms": round(latency.p50 * 1e3, 3) if latency else None,
                "p99_ms": round(latency.p99 * 1e3, 3) if latency else None,
            }
        return figures

    @property
    def total_rate(self) -> float:
        """The total rate offered at :attr:`best`."""
        return self.best.total_rate if self.best is not None else 0.0

    @property
    def highest_rate(self) -> float:
        """The highest total rate offered at which every class met its objective (above
        :attr:`total_rate` when shed classes absorbed an overload: shown, never ranked by)."""
        return max((m.total_rate for m in self.levels if m.meets(self.traffic)), default=0.0)

    def failure(self) -> str:
        """Why the lowest failing level failed (one line), or ''; when every level failed after
        stepping down, it says from where."""
        for level in self.levels:
            missed = [v for v in level.verdicts(self.traffic) if not v.met]
            if missed:
                shown = "; ".join(f"{v.name}: {v.reason}" for v in missed)
                if not self.feasible and self.stepped_down:
                    top = _rate(self.levels[-1].total_rate)
                    shown += f" (every rate missed, stepping down from {top} req/s)"
                return f"at {_rate(level.total_rate)} req/s: {shown}"
        return ""

    def cliff(self, name: str) -> float | None:
        """The lowest total rate at which class ``name``'s p99 passed its bound (None: it never
        did in the levels measured): where that class's utilization cliff starts."""
        bound = self.traffic.get(name).latency_bound_s
        if bound is None:
            return None
        for level in self.levels:
            figures = level.figures(name)
            if figures.latency.count == 0 or figures.latency.p99 > bound:
                return level.total_rate
        return None

    def figure(self) -> CapacityFigure:
        """What a workload trial keeps of it."""
        return CapacityFigure.from_dict(self.to_dict())

    def to_dict(self) -> dict:
        return {
            "feasible": self.feasible,
            "served_infer_per_s": round(self.served, 3),
            "served_infer_per_s_by_class": {
                name: round(v, 3) for name, v in self.served_by_class().items()
            },
            "total_rate_per_s": round(self.total_rate, 3),
            "highest_rate_per_s": round(self.highest_rate, 3),
            "goodput_per_s": round(self.best.goodput, 3) if self.best else 0.0,
            "failure": self.failure(),
            "remeasured_rates_per_s": [round(r, 3) for r in self.remeasured],
            "client_bound_at_rate_per_s": self.client_bound_at,
            "stepped_down": self.stepped_down,
            "min_rate_per_s": None if self.min_rate is None else round(self.min_rate, 6),
            "cliff_total_rate_per_s": {
                c.name: self.cliff(c.name)
                for c in self.traffic.classes
                if c.objective == ClassObjective.LATENCY
            },
            "best": self.best.to_dict(self.traffic) if self.best else None,
            "levels": [level.to_dict(self.traffic) for level in self.levels],
        }


def find_traffic_capacity(
    measure: Callable[[float], TrafficMeasurement],
    traffic: Traffic,
    *,
    start: float,
    max_rate: float = DEFAULT_MAX_RATE,
    min_rate: float | None = None,
    precision: float = 0.1,
    max_bisections: int = 3,
    confirm: int = 1,
    near: float | None = None,
    coarse_below: float | None = None,
) -> TrafficCapacity:
    """Ramp (x2) from ``start`` req/s until a level misses an objective or served no more than the
    best before it (:data:`SATURATION_GAIN`), then bisect until the gap between the passing and
    failing rates is ``precision`` of the passing one or ``max_bisections`` steps were taken
    (:func:`tritontune.search.ramp.ramp_and_bisect`). When ``start`` misses, the ramp halves it
    until a level passes or ``min_rate`` (None: ``start`` x :data:`MIN_RATE_FRACTION`) missed too,
    then bisects the same way.

    A level that misses an objective counts as missed only if ``confirm`` more tries miss too:
    on a shared machine one busy second puts a p99 over its SLO, and the capacity must not be
    set by it. The tries are spent where they decide (:mod:`tritontune.search.ramp`): on the
    first rate, which sets the ramp's direction, and on the lowest rate that missed above the
    capacity found, once the ramp has ended (the retries are listed in the result). A level
    that ended early because a class had surely missed
    (:attr:`~tritontune.measure.mixed.TrafficMeasurement.ended_early`) is not tried again.

    ``near``: a total rate the capacity is expected close to (the best trial's so far, a
    finalist's own in the search). The ramp steps by :data:`NEAR_STEP` up or down while within
    a factor 2 of it, and doubles or halves beyond: a config near it is bracketed by its first
    two levels and found in about five; one far from it costs a few more halvings.

    ``coarse_below``: a total rate only capacities above which are compared (the lowest a
    workload search's finalist holds): once a rate at or below it missed, the capacity is not
    bisected further, and is the highest rate held, within one ramp step (x1.25 near ``near``).
    A trial that cannot enter the final rounds so costs its ramp, not its bisection."""

    def up(best: TrafficMeasurement) -> float:
        return NEAR_STEP if near and best.total_rate < 2 * near else 2.0

    def down(failed: float) -> float:
        return NEAR_STEP if near and failed > near / 2 else 2.0

    rules: RampRules[TrafficMeasurement] = RampRules(
        passes=lambda level: level.meets(traffic),
        step=up,
        down_step=down,
        better=lambda level, best: _gain(level, best) > 0,
        # more offered load is only shed or queued: the served figure is known within the gain
        saturated=lambda level, best: _gain(level, best) < SATURATION_GAIN,
        precision=precision,
        max_bisections=max_bisections,
        confirm=confirm,
        limited=lambda level: level.client_bound,
        # a level that ended as soon as a class had surely missed is no busy second's doing
        decided=lambda level: level.ended_early is not None,
    )
    if min_rate is None:
        min_rate = start * MIN_RATE_FRACTION
    ramp = ramp_and_bisect(
        measure, rules, start=start, max_load=max_rate, min_load=min_rate, coarse_below=coarse_below
    )
    levels = tuple(level for _, level in ramp.levels())
    return TrafficCapacity(
        traffic,
        levels,
        ramp.best,
        tuple(ramp.remeasured),
        client_bound_at=ramp.limited_at,
        stepped_down=ramp.stepped_down,
        min_rate=ramp.floor,
    )
