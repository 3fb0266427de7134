"""The walk itself (tritontune.search.ramp), on a toy level: a load passes when it is at most
``capacity``. Checked: stepping down from a failing start (halving to the floor, then bisecting,
whole loads for concurrency), the floor bounding it, and confirm retries on the way down."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tritontune.search.ramp import MIN_LOAD_FRACTION, RampRules, ramp_and_bisect


def rules(capacity: float, **kwargs) -> RampRules[float]:
    return RampRules(
        passes=lambda load: load <= capacity,
        step=lambda best: 2.0,
        better=lambda load, best: load > best,
        **kwargs,
    )


def recording() -> tuple[Callable[[float], float], list[float]]:
    calls: list[float] = []

    def measure(load: float) -> float:
        calls.append(load)
        return load

    return measure, calls


def test_a_failing_start_steps_down_then_bisects():
    measure, calls = recording()
    ramp = ramp_and_bisect(measure, rules(30.0, max_bisections=5), start=100.0, max_load=1e6)
    assert calls[:3] == [100.0, 50.0, 25.0]  # halved until a load passed
    assert all(25.0 < load < 50.0 for load in calls[3:])
    assert ramp.stepped_down and ramp.first == 100.0
    assert ramp.best is not None and ramp.best <= 30.0 < ramp.best * 1.25


def test_concurrency_steps_down_by_whole_loads_to_one():
    measure, calls = recording()
    ramp = ramp_and_bisect(measure, rules(3.0, integer=True), start=8, max_load=512)
    assert calls == [8.0, 4.0, 2.0, 3.0]  # down to 2, then the one load between 2 and 4
    assert ramp.best == 3.0 and ramp.stepped_down
    measure, calls = recording()
    none = ramp_and_bisect(measure, rules(0.5, integer=True), start=8, max_load=512)
    assert calls == [8.0, 4.0, 2.0, 1.0] and none.best is None and none.floor == 1.0


def test_a_start_at_the_floor_is_all_there_is():
    measure, calls = recording()
    ramp = ramp_and_bisect(measure, rules(0.5, integer=True), start=1, max_load=512)
    assert calls == [1.0] and ramp.best is None and not ramp.stepped_down


def test_the_default_rate_floor_bounds_the_measurements():
    measure, calls = recording()
    ramp = ramp_and_bisect(measure, rules(0.0, confirm=1), start=64.0, max_load=1e6)
    assert ramp.floor == pytest.approx(64.0 * MIN_LOAD_FRACTION) == 1.0
    # seven loads (64 .. 1): the first tried again at once (it sets the direction), the floor
    # once the walk ended (it bounds the answer), the others once: 9 measurements, then nothing
    assert calls == [64.0, 64.0, 32.0, 16.0, 8.0, 4.0, 2.0, 1.0, 1.0]
    assert ramp.best is None and ramp.stepped_down
    assert ramp.lowest == 1.0 and ramp.first == 64.0
    assert ramp.remeasured == [64.0, 1.0]


def test_a_caller_floor_and_a_confirmed_pass_on_the_way_down():
    tries: dict[float, int] = {}

    def measure(load: float) -> float:
        tries[load] = tries.get(load, 0) + 1
        # 50 fails its first try (a busy second) and passes the second
        return 1e9 if load == 50.0 and tries[load] == 1 else load

    ramp = ramp_and_bisect(
        measure, rules(60.0, confirm=1, max_bisections=0), start=100.0, max_load=1e6, min_load=40.0
    )
    # 100 tried again at once; 50 failed, 40 passed, and 50, the bound, was tried again
    assert tries == {100.0: 2, 50.0: 2, 40.0: 1}
    assert ramp.best == 50.0 and ramp.remeasured == [100.0, 50.0]


def test_only_the_failing_load_that_bounds_the_answer_is_tried_again():
    """Every failing load but the first and the bound is measured once: the loads above the
    bound cannot set the answer. When the bound passes on its try, the walk goes on above it."""
    measure, calls = recording()
    ramp = ramp_and_bisect(measure, rules(30.0, confirm=1, max_bisections=5), start=10.0, max_load=1e6)
    assert calls[:3] == [10.0, 20.0, 40.0]  # 40 failed: not tried again there
    assert ramp.remeasured == [min(load for load in calls if load > 30.0)]  # the bound, once
    assert ramp.best is not None and ramp.best <= 30.0 < ramp.best * 1.25
    tries: dict[float, int] = {}

    def busy_once(load: float) -> float:  # 40 fails its first try (a busy second) only
        tries[load] = tries.get(load, 0) + 1
        return 1e9 if load == 40.0 and tries[load] == 1 else load

    again = ramp_and_bisect(
        busy_once, rules(50.0, confirm=1, max_bisections=0), start=10.0, max_load=1e6
    )
    # 40 failed, and was the bound: it passed its try, so the walk ramped on from it
    assert tries == {10.0: 1, 20.0: 1, 40.0: 2, 80.0: 2} and again.best == 40.0


def test_no_bisection_below_the_coarse_bar():
    """A caller that only ranks loads above ``coarse_below`` (the workload search's finalists)
    gets the highest load that passed, within one step, once a load at or below the bar failed;
    above the bar the bisection is as before."""
    measure, calls = recording()
    coarse = ramp_and_bisect(
        measure, rules(30.0, max_bisections=5), start=100.0, max_load=1e6, coarse_below=60.0
    )
    assert calls == [100.0, 50.0, 25.0]  # 50 failed under the bar: 25 passed, and that is all
    assert coarse.best == 25.0
    measure, calls = recording()
    fine = ramp_and_bisect(
        measure, rules(30.0, max_bisections=5), start=100.0, max_load=1e6, coarse_below=20.0
    )
    assert calls[:3] == [100.0, 50.0, 25.0] and len(calls) > 3  # the bar is lower: bisected
    assert fine.best is not None and fine.best <= 30.0 < fine.best * 1.25
