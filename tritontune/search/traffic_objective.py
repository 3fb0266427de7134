"""A traffic mix's objective: a config's capacity for the mix, and the work it served there.

A trial's value is the work it served (inferences per second, every class together) at its
capacity, the workload's mix scaled up until a class missed its objective
(:func:`~tritontune.search.traffic_capacity.find_traffic_capacity`). Work served, not the rate
offered: a class that may be shed meets its objective at any rejection rate, so the offered rate
rewarded the config that rejected the most. :class:`TrafficObjective` implements the loop's
objective protocol (:mod:`tritontune.search.objective`); the scheduler's knobs it adds to the
space and the endpoint layout are :mod:`tritontune.search.endpoint_layout`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from tritontune.config.variant import Variant
from tritontune.measure.measurement import MeasureSettings
from tritontune.measure.mixed import TrafficMeasurement
from tritontune.measure.traffic import Layout, Traffic
from tritontune.search.endpoint_layout import EndpointChoices, EndpointSplit, point_variant
from tritontune.search.objective import Evaluation
from tritontune.search.pipeline_space import PipelineSpace, knob_name
from tritontune.search.space import SearchSpace
from tritontune.search.traffic_capacity import (
    DEFAULT_MAX_RATE,
    DEFAULT_START_RATE,
    MIN_RATE_FRACTION,
    TrafficCapacity,
    find_traffic_capacity,
)
from tritontune.serving.bench import Bench
from tritontune.study.records import TrialResult

#: Admission control bounds searched (the lowest priority level's queue, in requests).
ADMISSION_CHOICES: tuple[Any, ...] = ("none", 16, 64, 256)
#: A workload search's windows: each class needs its own tail (the mixed measurement also waits
#: for enough answers of every class). Where a class's replies are slow to come (MiniLM's mix:
#: 2-5 interactive replies a second), a level ends at its clean time, ``max_windows`` windows at
#: their longest: 6 s, or the time cap (11 s) where a class passes by a hair. With 6 windows
#: (7.2 s) a MiniLM trial's ten levels took 85 s; the verdict of a class far from its bound does
#: not change in the last second, and one near it takes the cap anyway.
WORKLOAD_MEASURE = MeasureSettings(warmup_s=0.2, window_s=0.3, min_window_requests=50, max_windows=5)
#: How close a workload search's capacity ramp closes in (the gap between the rate held and the
#: lowest that missed): a bracket of x1.25 is bisected once. A level's verdict near a capacity
#: is itself this uncertain where replies are slow: of MiniLM's near-capacity levels, a third
#: that missed held on their second try, and keeping up within 10 % of a backlog is a queue
#: still filling as much as one growing; a finer walk bisected that noise. The final rounds
#: re-measure the finalists, and ``profile --workload`` keeps 10 %.
CAPACITY_PRECISION = 0.15


@dataclass(frozen=True)
class RatesSoFar:
    """What a trial's capacity walk takes from the trials finished before it (one read of the
    study per trial: a shared study is read over the network)."""

    best: float | None = None
    """The best total rate a trial held (None: none yet): the ramp starts there
    (:meth:`TrafficObjective.capacity` with ``near``) instead of walking up from the start rate."""
    finalist_bar: float | None = None
    """The lowest total rate among the trials that would enter the final rounds now (None: fewer
    trials than finalists have held a rate): a trial that misses at or below it cannot be a
    finalist, so its capacity is not bisected further (``coarse_below``)."""

    @classmethod
    def of(cls, trials: list[TrialResult], top: int) -> RatesSoFar:
        """From the study's ``trials`` (best first), ``top`` finalists."""
        best = max((t.total_rate for t in trials if t.feasible and t.total_rate), default=None)
        finalists = [t.total_rate for t in top_trials(trials, top) if t.total_rate]
        return cls(best, min(finalists) if len(finalists) >= top else None)


@dataclass(frozen=True)
class TrafficObjective:
    """The workload objective: a config's capacity for the traffic mix (the most work served
    with every class meeting its objective)."""

    space: SearchSpace
    traffic: Traffic
    start_rate: float = DEFAULT_START_RATE
    measure: MeasureSettings = WORKLOAD_MEASURE
    max_rate: float | None = None
    layouts: tuple[Layout, ...] = (Layout.SHARED,)
    """The serving layouts searched (both only on a server tritontune launched: endpoints are
    models it adds to the repository)."""
    endpoint_choices: EndpointChoices = EndpointChoices()
    """What an endpoint trial searches each endpoint's own knobs over."""
    rates_so_far: Callable[[], RatesSoFar] | None = None
    """What the study's finished trials held, read when a trial starts (None: nothing known)."""

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        point = self.space.suggest(trial)
        if isinstance(self.space, PipelineSpace) and self.traffic.routed:
            # several models: each gets the scheduler of the classes it serves
            for model, knobs in self.space.knobs_by_model(point).items():
                served = self.traffic.served_by(model)
                point.update(self._scheduler(trial, knobs, served, Layout.SHARED, knob_name(model, "")))
            return point
        layout = self.layouts[0]
        if len(self.layouts) > 1:
            layout = Layout(trial.suggest_categorical("layout", [str(x) for x in self.layouts]))
        if layout != Layout.SHARED or len(self.layouts) > 1:  # a shared-only study says nothing
            point["layout"] = str(layout)
        point.update(self._scheduler(trial, point, self.traffic, layout))
        return point

    def _scheduler(
        self,
        trial: optuna.Trial,
        knobs: Mapping[str, Any],
        traffic: Traffic,
        layout: Layout,
        prefix: str = "",
    ) -> dict[str, Any]:
        """The scheduler's knobs for a model serving ``traffic`` with ``knobs`` (names after
        ``prefix``): none without the dynamic batcher's queue."""
        point: dict[str, Any] = {}
        if knobs.get("dynamic_batching", True) is False:
            return point
        if layout == Layout.ENDPOINTS:
            point.update(self.endpoint_choices.suggest(trial, traffic))
        if traffic.priority_levels and layout == Layout.SHARED:  # an endpoint: one class
            name = prefix + "priorities"
            point[name] = trial.suggest_categorical(name, [True, False])
        name = prefix + "admission"
        point[name] = trial.suggest_categorical(name, list(ADMISSION_CHOICES))
        return point

    def variant(self, point: Mapping[str, Any]) -> Variant:
        return point_variant(self.space, self.traffic, point)

    def evaluate(self, bench: Bench, variant: Variant) -> Evaluation:
        if isinstance(variant, EndpointSplit):
            switch_s = bench.load_endpoints(dict(variant.split)).switch_s
        else:
            switch_s = bench.load(variant).switch_s
        so_far = self.rates_so_far() if self.rates_so_far else RatesSoFar()
        known = so_far.best
        capacity = self.capacity(
            bench, known or self.start_rate, near=known, coarse_below=so_far.finalist_bar
        )
        return Evaluation(capacity.figure(), switch_s)

    def at_rate(self, bench: Bench, rate: float) -> TrafficCapacity:
        """What ``bench`` has loaded measured at ``rate`` alone: its capacity when every class
        meets its objective there, none (:attr:`TrafficCapacity.best` None) when one misses."""
        level = bench.measure_traffic(self.traffic, rate, self.measure)
        return TrafficCapacity(
            self.traffic, (level,), level if level.meets(self.traffic) else None, min_rate=rate
        )

    @property
    def min_rate(self) -> float:
        """The lowest total rate any of the search's ramps steps down to, wherever it started."""
        return self.start_rate * MIN_RATE_FRACTION

    def capacity(
        self,
        bench: Bench,
        start_rate: float,
        *,
        near: float | None = None,
        coarse_below: float | None = None,
    ) -> TrafficCapacity:
        """The capacity of what ``bench`` has loaded, its ramp started at ``start_rate`` (and
        stepping down to :attr:`min_rate` should that miss), in small steps near ``near``, a
        capacity it is expected close to (a finalist's own in the search; the best trial's so
        far, for the next trial): walking up from a start rate far below the answer cost most
        of a ramp's levels (on MiniLM's mix, 2 req/s doubling up to ~20); not bisected under
        ``coarse_below``, a rate only capacities above which are compared."""
        return traffic_capacity(
            bench,
            self.traffic,
            start_rate,
            self.measure,
            max_rate=self.max_rate,
            min_rate=self.min_rate,
            near=near,
            coarse_below=coarse_below,
        )


def traffic_capacity(
    bench: Bench,
    traffic: Traffic,
    start_rate: float,
    settings: MeasureSettings | None = None,
    *,
    max_rate: float | None = None,
    min_rate: float | None = None,
    near: float | None = None,
    coarse_below: float | None = None,
) -> TrafficCapacity:
    """The capacity of what is loaded (one shared model, or one endpoint per class), to
    :data:`CAPACITY_PRECISION`; a ramp whose first rate misses steps down to ``min_rate`` (None:
    1/64 of the start); ``near`` and ``coarse_below``: see
    :func:`~tritontune.search.traffic_capacity.find_traffic_capacity`."""

    def measure(rate: float) -> TrafficMeasurement:
        return bench.measure_traffic(traffic, rate, settings)

    top = max_rate if max_rate is not None else DEFAULT_MAX_RATE
    start = min(start_rate, top)
    floor = min(min_rate, start) if min_rate is not None else None
    return find_traffic_capacity(
        measure,
        traffic,
        start=start,
        max_rate=top,
        min_rate=floor,
        near=near,
        coarse_below=coarse_below,
        precision=CAPACITY_PRECISION,
    )


def top_trials(trials: list[TrialResult], top: int) -> list[TrialResult]:
    """The trials that enter the final rounds: the ``top`` best that served anything (``trials``
    best first)."""
    return [t for t in trials if t.served][:top]
