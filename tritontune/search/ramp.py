"""Ramp, then bisect: the highest load that still passes, in few measurements.

Both searches over loads are this one walk with their own rules plugged in: a config's operating
point under a p99 SLO (:mod:`tritontune.search.operating_point`) and a traffic mix's capacity
(:mod:`tritontune.search.traffic_capacity`). It measures ``start``; ramps up geometrically while
levels pass (until one fails or the caller says more load only queues), or steps down
(:data:`DOWN_STEP`) while they fail, to ``min_load``; then bisects between the highest load that
passed and the lowest that failed, to ``precision`` or ``max_bisections``, or not below
``coarse_below``. A level the load generator limited bounds the walk like a failing one but its
figure is never the config's (:attr:`Ramp.limited_at`). A failing level counts as failed only if
it fails ``confirm`` more tries (one busy second puts a p99 over its bound): the first load at
once, since it sets the direction, and of the others only the one that bounds the answer, once
the walk has ended (trying every miss as it came cost four of a MiniLM trial's ten levels); a
level the caller says missed beyond doubt (``decided``) is not tried again. ``measure`` is a
function, so both searches are tested on a modelled server.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

M = TypeVar("M")

#: A walk whose first level failed divides the load by this at each step down (then bisects
#: between the highest load that passed and the lowest that failed, as after a ramp up).
DOWN_STEP = 2.0
#: Where a walk over request rates stops stepping down when the caller names no floor: this
#: fraction of ``start`` (six halvings). A walk over concurrency stops at 1.
MIN_LOAD_FRACTION = 1 / 64


@dataclass(frozen=True)
class RampRules(Generic[M]):
    """What one search over loads plugs into the walk."""

    passes: Callable[[M], bool]
    """Does a measured level meet the objective?"""
    step: Callable[[M], float]
    """The ramp's factor, given the best level so far (> 1)."""
    better: Callable[[M, M], bool]
    """Is a passing level a better answer than the best so far?"""
    saturated: Callable[[M, M], bool] = lambda level, best: False
    """Stop ramping after this passing level (given the best before it): more load only queues."""
    integer: bool = False
    """Loads are whole numbers (concurrency)."""
    precision: float = 0.25
    """The bisection ends once the failing load is within this fraction of the passing one."""
    max_bisections: int = 2
    confirm: int = 0
    """Times a failing level is measured again before it counts as failed."""
    limited: Callable[[M], bool] = lambda level: False
    """The load generator, not the config, limited this level (its figure is the client's)."""
    down_step: Callable[[float], float] = lambda load: DOWN_STEP
    """The factor a failing first load is stepped down by, given the load that failed (> 1)."""
    decided: Callable[[M], bool] = lambda level: False
    """This failing level missed beyond doubt (a traffic level that ended as soon as a class had
    surely missed): ``confirm`` does not measure it again."""


@dataclass
class Ramp(Generic[M]):
    """What the walk measured: every level by load, the first one, and the answer."""

    first: M
    """The level measured first (at ``start``)."""
    best: M | None
    """The best passing level (None: not even the floor passed)."""
    measured: dict[float, M] = field(default_factory=dict)
    remeasured: list[float] = field(default_factory=list)
    """Loads measured again because a first try failed (the level kept is the last try)."""
    limited_at: float | None = None
    """The lowest load the load generator limited (None: it never did)."""
    stepped_down: bool = False
    """The first level failed, so the walk stepped down from it (to :attr:`best`, or to
    :attr:`floor` when nothing passed)."""
    floor: float | None = None
    """The lowest load the walk would step down to."""

    @property
    def lowest(self) -> M:
        """The level measured at the lowest load (the closest to passing when none did)."""
        return min(self.measured.items(), key=lambda item: item[0])[1]

    def levels(self) -> list[tuple[float, M]]:
        """Every level measured, by ascending load."""
        return sorted(self.measured.items(), key=lambda item: item[0])


def ramp_and_bisect(
    measure: Callable[[float], M],
    rules: RampRules[M],
    *,
    start: float,
    max_load: float,
    min_load: float | None = None,
    coarse_below: float | None = None,
) -> Ramp[M]:
    """Walk from ``start`` up to at most ``max_load`` or, when ``start`` fails, down to at least
    ``min_load`` (None: 1 for concurrency, ``start`` x :data:`MIN_LOAD_FRACTION` for a rate),
    calling ``measure`` once per load, then once more per try of the first load and of the failing
    load that bounds the answer; no bisection once a load at or below ``coarse_below`` failed (see
    the module docstring)."""
    measured: dict[float, M] = {}
    remeasured: list[float] = []
    confirmed: set[float] = set()

    def passes(level: M) -> bool:
        return rules.passes(level) and not rules.limited(level)

    def norm(load: float) -> float:
        return float(max(1, round(load))) if rules.integer else float(load)

    def at(load: float) -> M:
        load = norm(load)
        if load not in measured:
            measured[load] = measure(load)
        return measured[load]

    def passes_again(load: float) -> bool:
        """Does the failing ``load`` pass on one of ``confirm`` more tries (the level kept is the
        last try)? Never asked twice of a load, nor of one the caller says is decided."""
        level = measured[load]
        if load in confirmed or rules.limited(level) or rules.decided(level):
            return False
        confirmed.add(load)
        for _ in range(rules.confirm):
            remeasured.append(load)
            level = measured[load] = measure(load)
            if passes(level):
                return True
            if rules.limited(level) or rules.decided(level):
                break
        return False

    def failing_above(load: float | None) -> float | None:
        """The lowest load measured above ``load`` that failed (None: none did)."""
        return min(
            (x for x, level in measured.items() if (load is None or x > load) and not passes(level)),
            default=None,
        )

    start = norm(start)
    if min_load is None:
        min_load = 1.0 if rules.integer else start * MIN_LOAD_FRACTION
    floor = min(start, norm(min_load))
    first = at(start)
    ramp = Ramp(first, None, measured, remeasured, floor=floor)
    good: float | None = None
    bad: float | None = None
    best: M | None = None
    if passes(first) or passes_again(start):
        good, best = start, measured[start]
    else:
        bad = start
        ramp.stepped_down = floor < start
        while bad > floor:  # step down until a load passes or the floor failed
            load = max(floor, bad / rules.down_step(bad))
            if rules.integer:
                load = float(min(bad - 1, max(floor, round(load))))
            level = at(load)
            if passes(level):
                good, best = load, level
                break
            bad = load
    steps = 0
    while True:
        if good is None or best is None:  # the floor failed: unless a try passes, nothing did
            assert bad is not None
            if not passes_again(bad):
                lowest = measured[bad]
                if rules.limited(lowest):  # nothing lower to measure: the client's figure, flagged
                    ramp.best = lowest if rules.passes(lowest) else None
                ramp.limited_at = _limited_at(measured, rules)
                return ramp
            good, best = bad, measured[bad]
            bad = failing_above(good)
        while bad is None and good < max_load:
            load = min(max_load, good * rules.step(best))
            if rules.integer:
                load = float(max(good + 1, round(load)))
            level = at(load)
            if not passes(level):
                bad = load
                break
            good = load
            previous = best
            if rules.better(level, best):
                best = level
            if rules.saturated(level, previous):
                break
        while (
            bad is not None
            and steps < rules.max_bisections
            and bad - good > max(1.0 if rules.integer else 0.0, good * rules.precision)
            and (coarse_below is None or bad > coarse_below)
        ):
            steps += 1
            load = math.sqrt(good * bad)
            if rules.integer:
                load = float(min(bad - 1, max(good + 1, round(load))))
            level = at(load)
            if passes(level):
                good = load
                if rules.better(level, best):
                    best = level
            else:
                bad = load
        if bad is None or not passes_again(bad):
            break
        good = bad  # the bound passed on a try: the walk goes on above it, bisecting afresh
        if rules.better(measured[bad], best):
            best = measured[bad]
        bad = failing_above(good)
        steps = 0
    ramp.best = best
    ramp.limited_at = _limited_at(measured, rules)
    return ramp


def _limited_at(measured: dict[float, M], rules: RampRules[M]) -> float | None:
    """The lowest load whose level the load generator limited (None: none)."""
    return min((load for load, level in measured.items() if rules.limited(level)), default=None)
