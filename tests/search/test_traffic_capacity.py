"""The capacity search for a mixed workload (tritontune.search.traffic_capacity), driven by a
modelled server: the interactive class's p99 grows as the total rate nears the server's capacity
C and passes its SLO past 0.8 C; the best-effort class falls behind past C (or, where it may be
shed, has its surplus rejected). Checked: the capacity found is within the bisection's precision
of the true threshold and never a rate that failed, each rate is measured once and the levels
come out ascending, a start above the capacity stepped down from (and an infeasible config, down
to the floor), the cliff of a class, a shed class's saturation stopping
the ramp (the figure is the work served, not the load offered), a ``min_served`` floor, a
client-bound level stopping the walk without ever being the capacity, and the JSON report."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable

import pytest

from tritontune.measure.client_cost import ClientCost, ClientWindow
from tritontune.measure.loadgen import QUEUE_FULL_ERROR
from tritontune.measure.mixed import ClassFigures, TrafficMeasurement
from tritontune.measure.request_shape import RequestShape
from tritontune.measure.stats import LatencyStats
from tritontune.measure.traffic import ServedFloor, Traffic, TrafficClass
from tritontune.report.workload import summary_lines
from tritontune.search.traffic_capacity import NEAR_STEP, find_traffic_capacity
from tritontune.study.figures import CapacityFigure

SLO = 0.020
SPAN = 10.0
#: The interactive p99 is BASE_P99 / (1 - u) at utilization u: it passes the SLO past u = 0.8.
BASE_P99 = 0.004
CLIFF_UTILIZATION = 1 - BASE_P99 / SLO

INTERACTIVE = TrafficClass("interactive", 0.3, RequestShape(batch_size=1, priority=1), slo_p99_s=SLO)
BATCH = TrafficClass("batch", 0.7, RequestShape(batch_size=8, priority=2))
TRAFFIC = Traffic((INTERACTIVE, BATCH))


def latency(p99: float, count: int) -> LatencyStats:
    if count == 0:
        return LatencyStats.from_samples([])
    return LatencyStats(count, p99 / 2, p99 / 2, p99 * 0.8, p99 * 0.9, p99, p99 * 1.1, p99 * 1.2)


def class_figures(
    traffic_class: TrafficClass,
    *,
    offered: float,
    served: float,
    p99: float,
    rejected: float = 0.0,
) -> ClassFigures:
    """A class offered ``offered`` req/s, ``served`` of them successfully at ``p99``, and
    ``rejected`` req/s refused at once by the queue (answered, as failures)."""
    errors = {QUEUE_FULL_ERROR: round(rejected * SPAN)} if rejected else {}
    return ClassFigures(
        name=traffic_class.name,
        batch_size=traffic_class.request.batch_size,
        offered_rate=offered,
        request_rate=served,
        answered_rate=served + rejected,
        latency=latency(p99, round(served * SPAN)),
        errors=errors,
        p99_windows=(p99, p99),
    )


def interactive_p99(utilization: float) -> float:
    """Grows like a queue's as the server fills; past saturation it keeps growing."""
    return BASE_P99 / (1 - min(utilization, 0.95)) * max(1.0, utilization)


def modelled_server(
    capacity: float, traffic: Traffic = TRAFFIC
) -> Callable[[float], TrafficMeasurement]:
    """A server that completes ``capacity`` req/s at most (past it, each class gets its share of
    that, so a best-effort class falls behind); the interactive p99 grows with utilization."""

    def measure(rate: float) -> TrafficMeasurement:
        utilization = rate / capacity
        served = min(1.0, capacity / rate)
        figures = []
        for c, class_rate in zip(traffic.classes, traffic.rates(rate).values(), strict=True):
            p99 = interactive_p99(utilization) if c.slo_p99_s is not None else 0.5
            figures.append(class_figures(c, offered=class_rate, served=class_rate * served, p99=p99))
        return TrafficMeasurement(rate, tuple(figures), span_s=SPAN, duration_s=SPAN + 5)

    return measure


def recording(measure: Callable[[float], TrafficMeasurement]):
    """``measure``, keeping the rates it was called at."""
    calls: list[float] = []

    def wrapped(rate: float) -> TrafficMeasurement:
        calls.append(rate)
        return measure(rate)

    return wrapped, calls


@pytest.mark.parametrize(
    ("capacity", "start"), [(1000.0, 70.0), (1000.0, 1.0), (250.0, 3.0), (50_000.0, 100.0)]
)
def test_capacity_is_within_the_precision_of_the_true_threshold(capacity, start):
    threshold = CLIFF_UTILIZATION * capacity
    found = find_traffic_capacity(modelled_server(capacity), TRAFFIC, start=start, precision=0.1)
    assert found.feasible
    assert found.total_rate <= threshold
    assert threshold <= found.total_rate * 1.1
    # the failing rate that bounds it is close above
    failing = [m.total_rate for m in found.levels if not m.meets(TRAFFIC)]
    assert found.total_rate < min(failing) <= found.total_rate * 1.1


@pytest.mark.parametrize("known", [0.7, 0.8, 1.0, 1.25])
def test_a_ramp_near_a_known_capacity_finds_it_within_tolerance_in_five_levels(known):
    """A workload trial starts at the best capacity so far, a finalist at its own (issue 41):
    for a config whose true threshold is 0.8-1.4x that, the small steps bracket it at once and
    the bisection closes to within 10 % in at most five levels (rates measured; a failing level
    is measured twice)."""
    capacity = 1000.0
    threshold = CLIFF_UTILIZATION * capacity
    measure, calls = recording(modelled_server(capacity))
    found = find_traffic_capacity(
        measure, TRAFFIC, start=threshold * known, precision=0.1, near=threshold * known
    )
    assert len(set(calls)) <= 5, calls
    assert found.total_rate <= threshold <= found.total_rate * 1.1


def test_a_config_below_the_finalists_is_not_bisected():
    """A workload trial whose capacity is under the lowest finalist's (``coarse_below``) gets the
    highest rate it held, within one step, in fewer levels than one near the top: it could not
    enter the final rounds, so its figure only ranks it for the sampler."""
    capacity = 1000.0
    threshold = CLIFF_UTILIZATION * capacity
    best = threshold / 0.6  # the best trial so far: this config holds 0.6x its rate
    measure, calls = recording(modelled_server(capacity))
    fine = find_traffic_capacity(measure, TRAFFIC, start=best, precision=0.1, near=best)
    measure, coarse_calls = recording(modelled_server(capacity))
    coarse = find_traffic_capacity(
        measure, TRAFFIC, start=best, precision=0.1, near=best, coarse_below=0.9 * best
    )
    assert len(set(coarse_calls)) < len(set(calls))
    assert coarse.total_rate <= threshold <= coarse.total_rate * NEAR_STEP
    assert fine.total_rate <= threshold <= fine.total_rate * 1.1
    # a config above the bar is bisected as before
    measure, high_calls = recording(modelled_server(capacity))
    high = find_traffic_capacity(
        measure, TRAFFIC, start=best, precision=0.1, near=best, coarse_below=0.4 * best
    )
    assert high_calls == calls and high.total_rate == fine.total_rate


def test_far_from_the_known_capacity_the_ramp_doubles_again():
    capacity = 1000.0
    threshold = CLIFF_UTILIZATION * capacity
    measure, calls = recording(modelled_server(capacity))
    found = find_traffic_capacity(measure, TRAFFIC, start=50.0, precision=0.1, near=50.0)
    assert calls[:5] == [50.0, 62.5, pytest.approx(78.125), pytest.approx(97.65625), 122.0703125]
    assert calls[5] == pytest.approx(2 * 122.0703125)  # past twice the known rate: doubling
    assert found.total_rate <= threshold <= found.total_rate * 1.1


def test_finer_precision_needs_more_bisections():
    threshold = CLIFF_UTILIZATION * 1000
    found = find_traffic_capacity(
        modelled_server(1000.0), TRAFFIC, start=70.0, precision=0.01, max_bisections=10
    )
    assert found.total_rate <= threshold <= found.total_rate * 1.01


def test_bisections_are_bounded():
    measure, calls = recording(modelled_server(1000.0))
    find_traffic_capacity(measure, TRAFFIC, start=70.0, precision=1e-6, max_bisections=2, confirm=0)
    # the ramp: 70, 140, 280, 560, 1120 (fails); then exactly two bisections
    assert calls[:5] == [70.0, 140.0, 280.0, 560.0, 1120.0]
    assert len(calls) == 7


def test_best_effort_backlog_bounds_capacity_when_the_slo_is_loose():
    loose = Traffic((TrafficClass("interactive", 0.3, RequestShape(), slo_p99_s=10.0), BATCH))
    found = find_traffic_capacity(modelled_server(1000.0, loose), loose, start=70.0)
    threshold = 1000.0 / 0.9  # the batch class answers under 90 % of its arrivals past it
    assert found.total_rate <= threshold <= found.total_rate * 1.1
    assert "batch: answered" in found.failure()
    assert "backlog" in found.failure()


def test_never_reports_a_rate_that_failed():
    found = find_traffic_capacity(modelled_server(1000.0), TRAFFIC, start=70.0)
    assert found.best is not None
    assert found.best.meets(TRAFFIC)
    assert found.best in found.levels
    assert all(m.meets(TRAFFIC) for m in found.levels if m.total_rate <= found.total_rate)


def test_a_one_off_spike_is_measured_again_and_does_not_set_the_capacity():
    base = modelled_server(1000.0)
    measure, calls = recording(base)

    def flaky(rate: float) -> TrafficMeasurement:
        m = measure(rate)
        if len(calls) == 6:  # 1120 missed; then the first bisection point, below 800
            f = m.classes[0]
            spiked = class_figures(INTERACTIVE, offered=f.offered_rate, served=f.request_rate, p99=1.0)
            m = TrafficMeasurement(rate, (spiked, m.classes[1]), span_s=SPAN, duration_s=SPAN)
        return m

    found = find_traffic_capacity(flaky, TRAFFIC, start=70.0)
    spiked_rate = calls[5]
    assert calls[4] == 1120.0 and spiked_rate < 800.0
    # the spike bounded the bisection; once it ended, the bound was measured again, passed, and
    # the walk went on above it
    assert calls.count(spiked_rate) == 2 and spiked_rate in found.remeasured
    assert found.highest_rate >= spiked_rate
    kept = next(m for m in found.levels if m.total_rate == spiked_rate)
    assert kept.meets(TRAFFIC)  # the level kept is the second try


def test_never_reports_a_rate_that_failed_on_a_flaky_server():
    """Without re-measuring (``confirm=0``) a level that should pass fails (a noisy measurement:
    the interactive p99 spikes): the search keeps below it, never reporting it."""
    base = modelled_server(1000.0)
    measure, calls = recording(base)

    def flaky(rate: float) -> TrafficMeasurement:
        m = measure(rate)
        if len(calls) == 6:  # the first bisection point, sqrt(560 x 1120) ~ 792: below 800
            f = m.classes[0]
            spiked = class_figures(INTERACTIVE, offered=f.offered_rate, served=f.request_rate, p99=1.0)
            m = TrafficMeasurement(rate, (spiked, m.classes[1]), span_s=SPAN, duration_s=SPAN)
        return m

    found = find_traffic_capacity(flaky, TRAFFIC, start=70.0, confirm=0)
    spiked_rate = calls[5]
    assert spiked_rate == pytest.approx(math.sqrt(560 * 1120))
    assert base(spiked_rate).meets(TRAFFIC)  # it would have passed without the spike
    assert found.best is not None and found.best.meets(TRAFFIC)
    assert 560.0 <= found.total_rate < spiked_rate
    assert found.highest_rate < spiked_rate


def test_levels_are_ascending_and_each_rate_measured_once_or_twice_if_it_missed():
    measure, calls = recording(modelled_server(1000.0))
    found = find_traffic_capacity(measure, TRAFFIC, start=70.0)
    rates = [m.total_rate for m in found.levels]
    assert rates == sorted(rates)
    assert sorted(set(calls)) == rates
    missed = sorted(m.total_rate for m in found.levels if not m.meets(TRAFFIC))
    assert missed and found.remeasured == (missed[0],)  # the bound, not the misses above it
    assert sorted(calls) == sorted([*rates, missed[0]])
    # the bisection went below its last failing point: the order measured is not ascending
    assert calls != sorted(calls)


def test_a_start_above_the_capacity_steps_down_then_bisects():
    """The first rate misses (the model is slower than the start assumed): the ramp halves it
    until a rate passes, then bisects between that and the lowest rate that missed, to the same
    precision as a ramp from below (before issue 24's fix this config scored 0)."""
    threshold = CLIFF_UTILIZATION * 1000.0  # 800 req/s
    measure, calls = recording(modelled_server(1000.0))
    found = find_traffic_capacity(measure, TRAFFIC, start=2000.0, precision=0.1)
    # 2000 missed twice (the first level is confirmed), 1000 missed, 500 passed; then bisected
    # in (500, 1000), and the bound confirmed
    assert calls[:4] == [2000.0, 2000.0, 1000.0, 500.0]
    assert all(500.0 < rate < 1000.0 for rate in calls[4:])
    assert found.feasible and found.stepped_down
    assert found.total_rate <= threshold <= found.total_rate * 1.1
    assert found.levels[-1].total_rate == 2000.0  # the first level measured is kept
    assert found.to_dict()["stepped_down"] is True


def test_a_ramp_that_never_missed_did_not_step_down():
    found = find_traffic_capacity(modelled_server(1000.0), TRAFFIC, start=70.0)
    assert not found.stepped_down
    assert found.to_dict()["stepped_down"] is False


def test_infeasible_down_to_the_floor():
    """Every rate misses: the ramp steps down to 1/64 of the start and stops there, a bounded
    number of measurements (the start and the floor confirmed once); only then is the capacity
    0."""
    measure, calls = recording(modelled_server(1.0))  # passes only under 0.8 req/s
    found = find_traffic_capacity(measure, TRAFFIC, start=2000.0)
    rates = [2000.0 / 2**k for k in range(7)]  # down to 31.25 = 2000 / 64
    assert calls == [rates[0], *rates, rates[-1]]
    assert not found.feasible and found.stepped_down
    assert found.best is None
    assert found.min_rate == pytest.approx(2000.0 / 64)
    assert found.total_rate == 0.0
    assert found.highest_rate == 0.0
    failure = found.failure()
    assert failure.startswith("at 31 req/s: ")  # the lowest rate tried
    assert "interactive: p99" in failure and "> 20 ms" in failure
    assert "batch: answered 3% of its arrivals: a backlog is growing" in failure
    assert failure.endswith("(every rate missed, stepping down from 2000 req/s)")
    assert "\n" not in failure


def test_a_caller_given_floor_bounds_the_step_down():
    measure, calls = recording(modelled_server(1.0))
    found = find_traffic_capacity(measure, TRAFFIC, start=20.0, min_rate=4.0, confirm=0)
    assert calls == [20.0, 10.0, 5.0, 4.0]  # halved, the last step clipped to the floor
    assert not found.feasible and found.min_rate == 4.0
    assert found.failure().startswith("at 4 req/s: ")


def test_a_floor_at_the_start_tries_nothing_lower():
    measure, calls = recording(modelled_server(1000.0))
    found = find_traffic_capacity(measure, TRAFFIC, start=2000.0, min_rate=2000.0)
    assert calls == [2000.0, 2000.0]  # confirmed once, then nothing more is tried
    assert not found.feasible and not found.stepped_down
    failure = found.failure()
    assert failure.startswith("at 2000 req/s: ")
    assert "batch: answered 50% of its arrivals: a backlog is growing" in failure
    assert "every rate missed" not in failure


def test_a_level_that_passes_on_its_confirmation_ends_the_step_down():
    """A failing level is measured again before the ramp steps down from it: a one-off spike at
    the start does not send the walk down."""
    base = modelled_server(1000.0)
    measure, calls = recording(base)

    def flaky(rate: float) -> TrafficMeasurement:
        m = measure(rate)
        if len(calls) == 1:  # the start's first try spikes
            f = m.classes[0]
            spiked = class_figures(INTERACTIVE, offered=f.offered_rate, served=f.request_rate, p99=1.0)
            m = TrafficMeasurement(rate, (spiked, m.classes[1]), span_s=SPAN, duration_s=SPAN)
        return m

    found = find_traffic_capacity(flaky, TRAFFIC, start=100.0)
    assert calls[:3] == [100.0, 100.0, 200.0]  # confirmed, passed, then ramped up
    assert found.remeasured[0] == 100.0
    assert not found.stepped_down and found.feasible
    assert min(calls) == 100.0


def test_failure_names_the_first_failing_level():
    found = find_traffic_capacity(modelled_server(1000.0), TRAFFIC, start=70.0)
    first_failing = min(m.total_rate for m in found.levels if not m.meets(TRAFFIC))
    assert found.failure().startswith(f"at {first_failing:.0f} req/s: interactive: p99 ")


def test_failure_is_empty_when_nothing_failed():
    found = find_traffic_capacity(modelled_server(1e9), TRAFFIC, start=100.0, max_rate=800.0)
    assert found.failure() == ""


def test_ramp_stops_at_max_rate():
    measure, calls = recording(modelled_server(1e9))
    found = find_traffic_capacity(measure, TRAFFIC, start=100.0, max_rate=1000.0)
    assert calls == [100.0, 200.0, 400.0, 800.0, 1000.0]
    assert found.total_rate == 1000.0


def test_cliff_is_the_first_rate_whose_p99_passed_the_bound():
    found = find_traffic_capacity(modelled_server(1000.0), TRAFFIC, start=70.0)
    threshold = CLIFF_UTILIZATION * 1000.0
    over = [m.total_rate for m in found.levels if m.figures("interactive").latency.p99 > SLO]
    assert found.cliff("interactive") == min(over)
    assert found.cliff("interactive") > threshold
    assert found.cliff("interactive") > found.total_rate


def test_no_cliff_for_a_class_without_a_bound_or_never_past_it():
    found = find_traffic_capacity(modelled_server(1000.0), TRAFFIC, start=70.0)
    assert found.cliff("batch") is None  # best effort without completion_p99
    low = find_traffic_capacity(modelled_server(1e9), TRAFFIC, start=100.0, max_rate=400.0)
    assert low.cliff("interactive") is None


# --- a sheddable best-effort class at saturation ---------------------------------------------

SHED_TRAFFIC = Traffic(
    (
        TrafficClass("interactive", 0.1, RequestShape(batch_size=1, priority=1), slo_p99_s=SLO),
        TrafficClass("batch", 0.9, RequestShape(batch_size=8, priority=2), may_shed=True),
    )
)


def shedding_server(
    capacity: float, decline: float = 0.0, traffic: Traffic = SHED_TRAFFIC
) -> Callable[[float], TrafficMeasurement]:
    """Priorities and admission control: the interactive class is served first (its p99 stays
    low while it alone is under 0.8 C); the batch class gets the rest of the capacity and its
    surplus is rejected at once. ``decline``: the served capacity lost per req/s rejected (the
    cost of refusing)."""

    def measure(rate: float) -> TrafficMeasurement:
        rates = traffic.rates(rate)
        interactive, batch = rates["interactive"], rates["batch"]
        room = max(0.0, capacity - interactive)
        surplus = max(0.0, batch - room)
        served_batch = min(batch, room) - decline * surplus
        figures = (
            class_figures(
                traffic.classes[0],
                offered=interactive,
                served=interactive,
                p99=interactive_p99(interactive / capacity),
            ),
            class_figures(
                traffic.classes[1],
                offered=batch,
                served=served_batch,
                p99=0.3,
                rejected=batch - served_batch,
            ),
        )
        return TrafficMeasurement(rate, figures, span_s=SPAN, duration_s=SPAN + 5)

    return measure


def test_sheddable_class_at_saturation_stops_the_ramp_without_an_overload_bonus():
    """Past the knee more offered load is only shed: the ramp stops at the first level that
    served no more than the best (it used to go on to 4x overload and rank by the rate offered),
    and the figure is the work served there."""
    measure, calls = recording(shedding_server(1000.0))
    found = find_traffic_capacity(measure, SHED_TRAFFIC, start=100.0, max_rate=100_000.0)
    # 100 .. 800 under capacity, 1600 with the surplus shed (served +18 %), 3200 served less
    assert calls == [100.0, 200.0, 400.0, 800.0, 1600.0, 3200.0]
    assert all(m.meets(SHED_TRAFFIC) for m in found.levels)
    assert found.total_rate == 1600.0
    # 160 interactive + (1000 - 160) batch requests of 8
    assert found.served == pytest.approx(160 + 840 * 8)
    assert found.served_by_class() == pytest.approx({"interactive": 160.0, "batch": 840 * 8.0})
    assert found.highest_rate == 3200.0  # shown, never ranked by


def test_a_trial_keeps_the_work_served_as_its_value_and_old_trials_read_theirs():
    found = find_traffic_capacity(shedding_server(1000.0), SHED_TRAFFIC, start=100.0)
    figure = found.figure()
    assert figure.served == pytest.approx(found.served)
    assert figure.highest_rate == 3200.0 and figure.served != figure.highest_rate
    # recorded before the served figure was: read from its best level's inferences
    old = {k: v for k, v in found.to_dict().items() if not k.startswith("served_")}
    assert CapacityFigure.from_dict(old).served == pytest.approx(found.served, abs=1e-2)


def test_a_min_served_floor_fails_a_level_that_sheds_too_much_and_is_bisected():
    floor = Traffic(
        (
            SHED_TRAFFIC.classes[0],
            dataclasses.replace(SHED_TRAFFIC.classes[1], min_served=ServedFloor(share=0.5)),
        )
    )
    measure, calls = recording(shedding_server(1000.0, traffic=floor))
    found = find_traffic_capacity(measure, floor, start=100.0, precision=0.05, max_bisections=4)
    # 3200 serves 680 of 2880 batch req/s (24 %): below the floor, so it fails
    assert calls[:6] == [100.0, 200.0, 400.0, 800.0, 1600.0, 3200.0]
    assert any(1600.0 < rate < 3200.0 for rate in calls[6:])  # closed in on by bisection
    assert "min_served 50%" in found.failure()
    best = found.best
    assert best is not None
    batch = best.figures("batch")
    assert batch.request_rate >= 0.5 * batch.offered_rate
    # the most work served among the levels that kept the floor (here 1600: past it the
    # interactive class takes request slots from batches of 8)
    assert found.served == max(m.throughput for m in found.levels if m.meets(floor))
    assert found.total_rate == 1600.0


def client_limited_from(limit: float, measure: Callable[[float], TrafficMeasurement]):
    """``measure``, with the load generator out of CPU from ``limit`` req/s on: those levels are
    client-bound (every window without slack, its lag in the latencies), whatever they met."""
    bound = ClientWindow(1.0, 0.95, 1000, 0.97, 0.016)
    calm = ClientWindow(1.0, 0.20, 1000, 0.30, 0.001)

    def wrapped(rate: float) -> TrafficMeasurement:
        windows = [bound if rate >= limit else calm] * 3
        return dataclasses.replace(measure(rate), client=ClientCost.of(windows))

    return wrapped


def test_a_client_bound_level_stops_the_walk_and_is_never_the_capacity():
    """The config serves up to ~800 req/s, the client runs out of CPU at 280: the walk stops
    there like at a missed level (no second try: measuring again gives the client no more CPU),
    the capacity is the best level measured cleanly below it, flagged as a lower bound."""
    measure, calls = recording(client_limited_from(280.0, modelled_server(1000.0)))
    found = find_traffic_capacity(measure, TRAFFIC, start=70.0)
    assert found.feasible and found.best is not None and not found.best.client_bound
    assert found.total_rate < 280.0 and found.best.meets(TRAFFIC)
    assert found.client_bound_at == 280.0
    assert calls.count(280.0) == 1 and max(calls) == 280.0  # never measured above it, nor again
    limited = [m for m in found.levels if m.client_bound]
    assert limited and all(m.meets(TRAFFIC) for m in limited)  # it met them: still not taken
    out = json.loads(json.dumps(found.to_dict()))
    assert out["client_bound_at_rate_per_s"] == 280.0
    assert [lv.get("client_bound", False) for lv in out["levels"]] == [
        m.total_rate >= 280.0 for m in found.levels
    ]
    figure = found.figure()
    assert figure.client_bound
    assert any("client-bound" in note for note in figure.caveats())
    assert any(line.startswith("at least: client-bound from 280 req/s") for line in summary_lines(found))


def test_a_walk_the_client_kept_up_with_says_nothing_of_it():
    found = find_traffic_capacity(client_limited_from(1e9, modelled_server(1000.0)), TRAFFIC, start=70.0)
    assert found.client_bound_at is None and not found.figure().client_bound
    assert found.figure().caveats() == []
    assert not any("client-bound" in line for line in summary_lines(found))


def test_a_client_bound_floor_is_the_answer_only_flagged():
    """Client-bound down to the floor: nothing lower can be measured, so the floor's figure is
    the answer (as a single class's walk does), flagged as the client's."""
    found = find_traffic_capacity(
        client_limited_from(0.0, modelled_server(1000.0)), TRAFFIC, start=70.0, min_rate=70.0
    )
    assert found.best is not None and found.best.client_bound and found.total_rate == 70.0
    assert found.client_bound_at == 70.0
    assert found.to_dict()["client_bound_at_rate_per_s"] == 70.0


# --- the report ------------------------------------------------------------------------------


def test_to_dict_is_json_serializable():
    found = find_traffic_capacity(modelled_server(1000.0), TRAFFIC, start=70.0)
    out = json.loads(json.dumps(found.to_dict(), allow_nan=False))
    assert out["feasible"] is True
    assert out["total_rate_per_s"] == pytest.approx(found.total_rate, abs=1e-3)
    assert out["goodput_per_s"] == pytest.approx(found.best.goodput, abs=1e-3)
    assert out["served_infer_per_s"] == pytest.approx(found.served, abs=1e-3)
    assert sum(out["served_infer_per_s_by_class"].values()) == pytest.approx(found.served, abs=1e-2)
    assert out["cliff_total_rate_per_s"] == {"interactive": found.cliff("interactive")}
    assert out["best"]["meets_objectives"] is True
    assert [lv["total_rate_per_s"] for lv in out["levels"]] == pytest.approx(
        [round(m.total_rate, 3) for m in found.levels]
    )
    assert out["failure"] == found.failure()


def test_to_dict_when_infeasible():
    found = find_traffic_capacity(modelled_server(1000.0), TRAFFIC, start=2000.0, min_rate=2000.0)
    out = json.loads(json.dumps(found.to_dict()))
    assert out["feasible"] is False
    assert out["best"] is None
    assert out["goodput_per_s"] == 0.0
    assert len(out["levels"]) == 1
    assert out["levels"][0]["meets_objectives"] is False
    assert not math.isnan(out["levels"][0]["goodput_per_s"])


def test_a_level_that_ended_early_on_a_sure_miss_is_not_measured_again():
    """Levels above the capacity end early (a class surely missed: the measurement says so):
    no busy second did that, so the walk does not measure them again as it does a plain miss."""
    base = modelled_server(1000.0)

    def decisive(rate: float) -> TrafficMeasurement:
        m = base(rate)
        return m if m.meets(TRAFFIC) else dataclasses.replace(m, ended_early="interactive: 5 of 9")

    measure, calls = recording(decisive)
    found = find_traffic_capacity(measure, TRAFFIC, start=70.0)
    assert found.remeasured == ()
    assert len(calls) == len(set(calls))  # every rate once
    plain, plain_calls = recording(base)
    again = find_traffic_capacity(plain, TRAFFIC, start=70.0)
    assert again.remeasured and len(plain_calls) > len(calls)
    assert found.served == pytest.approx(again.served)
