"""Per-class statistics of a mixed workload (tritontune.measure.mixed): a class's figures over the
measured span from a hand-filled request log (rates, latency over the span's successes only,
per-window p99s, rejections and queue timeouts), the verdict on each class's objective, a whole
measurement's verdicts, goodput and report, its client-bound verdict (the single-class rule) and
``--load-processes auto``'s second measurement of a client-bound level, and how Triton's
scheduler messages become error kinds (tritontune.measure.loadgen.error_kind)."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path

import pytest

from tritontune.measure.arrivals import Arrival, ArrivalTrace
from tritontune.measure.client_cost import (
    CLIENT_LAG_LIMIT_S,
    LOOP_DEMAND_LIMIT,
    ClientCost,
    ClientWindow,
)
from tritontune.measure.loadgen import (
    QUEUE_FULL_ERROR,
    QUEUE_TIMEOUT_ERROR,
    LoadSpec,
    Stream,
    error_kind,
)
from tritontune.measure.mixed import (
    ClassFigures,
    ClassRequests,
    TrafficMeasurement,
    _class_figures,
    judge,
)
from tritontune.measure.request_shape import RequestShape
from tritontune.measure.stats import LatencyStats
from tritontune.measure.traffic import ServedFloor, Traffic, TrafficClass
from tritontune.measure.windows import Edge

INTERACTIVE = TrafficClass("interactive", 0.3, RequestShape(batch_size=1, priority=1), slo_p99_s=0.020)
BATCH = TrafficClass("batch", 0.7, RequestShape(batch_size=8, priority=2), may_shed=False)
SHED_BATCH = TrafficClass("batch", 0.7, RequestShape(batch_size=8, priority=2), may_shed=True)
BOUNDED_BATCH = TrafficClass("batch", 0.7, RequestShape(batch_size=8), completion_p99_s=5.0)


def stream(name: str = "batch") -> Stream:
    return Stream(name, [], LoadSpec.rate(10))


def edges(name: str, points: list[tuple[float, int]]) -> list[Edge]:
    """Edges at ``(time, requests logged by then)``."""
    return [Edge(at, {name: count}, stats={}) for at, count in points]


def figures(
    name: str = "batch",
    *,
    latencies: Sequence[float] = (),
    errors: dict[str, int] | None = None,
    offered_rate: float | None = None,
    answered_rate: float | None = None,
    batch_size: int = 8,
    span: float = 1.0,
) -> ClassFigures:
    """Figures as _class_figures would give them: ``latencies`` of successes and ``errors``,
    answered over ``span`` seconds (answered_rate defaults to everything answered in the span,
    offered_rate to answered_rate: a class that keeps up)."""
    errors = dict(errors or {})
    answered = len(latencies) + sum(errors.values())
    answered_rate = answered / span if answered_rate is None else answered_rate
    return ClassFigures(
        name=name,
        batch_size=batch_size,
        offered_rate=answered_rate if offered_rate is None else offered_rate,
        request_rate=len(latencies) / span,
        answered_rate=answered_rate,
        latency=LatencyStats.from_samples(list(latencies)),
        errors=errors,
        p99_windows=(),
    )


# --- figures over the span -------------------------------------------------------------------


def filled_stream() -> tuple[Stream, list[Edge]]:
    """Two requests before the span (slow ones, which must not count), then two 1 s windows:
    window 1 has successes of 1..10 ms and a rejection; window 2 has successes of 11..20 ms, a
    queue timeout, a client deadline and an UNAVAILABLE."""
    s = stream()
    log = s.log
    log.record(9.5, 5.0, None)  # before the first edge: excluded
    log.record(9.9, 5.0, "UNAVAILABLE")
    for i in range(1, 11):
        log.record(10.0 + i / 20, i / 1000, None)
    log.record(10.9, 0.001, QUEUE_FULL_ERROR)
    log.error_examples[QUEUE_FULL_ERROR] = "Exceeds maximum queue size"
    for i in range(11, 21):
        log.record(11.0 + (i - 10) / 20, i / 1000, None)
    log.record(11.7, 2.0, QUEUE_TIMEOUT_ERROR)
    log.record(11.8, 3.0, "DEADLINE_EXCEEDED")
    log.record(11.9, 0.5, "UNAVAILABLE")
    # arrivals: 3 before the span, 30 in it (10.0 <= t < 12.0), 2 at or past its end
    log.scheduled += [9.0, 9.5, 9.9]
    log.scheduled += [10.0 + i / 15 for i in range(30)]
    log.scheduled += [12.0, 12.5]
    log.send_lag += [0.001] * 99 + [0.050]
    return s, edges("batch", [(10.0, 2), (11.0, 13), (12.0, 26)])


def test_rates_count_only_the_span():
    s, e = filled_stream()
    f = _class_figures(s, BATCH, e, span=2.0)
    assert f.offered_rate == pytest.approx(30 / 2.0)  # scheduled in [10, 12)
    assert f.answered_rate == pytest.approx(24 / 2.0)  # 20 successes + 4 errors
    assert f.request_rate == pytest.approx(20 / 2.0)
    assert f.answered() == 24


def slow_class_stream(failed_in_span: int = 0) -> tuple[Stream, list[Edge]]:
    """A slow class over the span [10, 12): six replies land in it to requests sent before it
    (1 s latency), ten requests are sent in it, the first eight answered in it and the last two
    after it (logged later, as the run drains them); ``failed_in_span`` of the ten failed."""
    s = stream()
    log = s.log
    for i in range(6):
        log.record(10.0 + i / 10, 1.0, None)  # sent at 9.0 .. 9.5
    sent = [10.0 + i / 5 for i in range(10)]  # 10.0 .. 11.8
    log.scheduled += [9.0 + i / 10 for i in range(6)] + sent
    for i, at in enumerate(sent):
        error = "UNAVAILABLE" if i < failed_in_span else None
        log.record(at + (0.1 if i < 8 else 0.5), 0.1 if i < 8 else 0.5, error)
    return s, edges("batch", [(10.0, 0), (12.0, 14)])


def test_the_served_share_counts_the_requests_sent_in_the_span():
    """The ratio of the rates counts replies landing in the span (14 of 10 sent: "served
    140 %"); the share counts the ten sent in it, served whenever they were answered."""
    s, e = slow_class_stream()
    f = _class_figures(s, BATCH, e, span=2.0)
    assert f.request_rate / f.offered_rate == pytest.approx(1.4)  # what was shown before
    assert f.served_share == 1.0
    assert f.to_dict()["served_share"] == 1.0
    s, e = slow_class_stream(failed_in_span=3)
    assert _class_figures(s, BATCH, e, span=2.0).served_share == pytest.approx(0.7)


def test_a_served_share_from_rates_alone_is_capped_at_one():
    over = figures(latencies=[0.1] * 14, offered_rate=10.0)  # figures made without the log
    assert over.sent_served is None and over.served_share == 1.0
    assert figures(latencies=[0.1] * 6, offered_rate=10.0).served_share == pytest.approx(0.6)
    assert figures(latencies=[], answered_rate=0.0, offered_rate=0.0).served_share == 1.0


def test_a_min_served_share_judges_the_requests_sent_in_the_span():
    """Replies to earlier requests must not lift a class over its floor: 7 of the 10 sent in
    the span were served (70 %) though 11 replies landed in it."""
    floor = dataclasses.replace(SHED_BATCH, min_served=ServedFloor(share=0.75))
    s, e = slow_class_stream(failed_in_span=3)
    f = dataclasses.replace(_class_figures(s, BATCH, e, span=2.0), errors={})
    assert f.request_rate / f.offered_rate > 0.75
    verdict = judge(floor, f)
    assert not verdict.met and verdict.reason == "served 70% of its arrivals < min_served 75%"


def test_throughput_is_request_rate_times_batch_size():
    s, e = filled_stream()
    f = _class_figures(s, BATCH, e, span=2.0)
    assert f.batch_size == 8
    assert f.throughput == pytest.approx(10.0 * 8)


def test_latency_is_over_the_spans_successes_only():
    s, e = filled_stream()
    latency = _class_figures(s, BATCH, e, span=2.0).latency
    # 1..20 ms: the 5 s requests before the span and the failures' times are left out
    assert latency.count == 20
    assert latency.max == pytest.approx(0.020)
    assert latency.mean == pytest.approx(0.0105)
    # perf_analyzer's index int(0.99 * 19 + 0.5) = 19: the 20th smallest, 20 ms
    assert latency.p99 == pytest.approx(0.020)
    # int(0.5 * 19 + 0.5) = 10: the 11th smallest, 11 ms
    assert latency.p50 == pytest.approx(0.011)


def test_p99_per_window():
    s, e = filled_stream()
    f = _class_figures(s, BATCH, e, span=2.0)
    assert f.p99_windows == pytest.approx((0.010, 0.020))


def test_window_without_a_success_has_nan_p99():
    s = stream()
    s.log.record(1.5, 0.01, None)
    s.log.record(2.5, 0.01, QUEUE_FULL_ERROR)
    f = _class_figures(s, BATCH, edges("batch", [(1.0, 0), (2.0, 1), (3.0, 2)]), span=2.0)
    assert f.p99_windows[0] == pytest.approx(0.01)
    assert math.isnan(f.p99_windows[1])


def test_rejections_and_timeouts_are_counted_apart():
    s, e = filled_stream()
    f = _class_figures(s, BATCH, e, span=2.0)
    assert f.errors == {
        QUEUE_FULL_ERROR: 1,
        QUEUE_TIMEOUT_ERROR: 1,
        "DEADLINE_EXCEEDED": 1,
        "UNAVAILABLE": 1,  # the one before the span is not counted
    }
    assert f.rejected == 1
    assert f.timed_out == 2  # queue timeout + client deadline


def test_failures_excuse_the_schedulers_decisions_only_when_sheddable():
    s, e = filled_stream()
    f = _class_figures(s, BATCH, e, span=2.0)
    assert f.failures(may_shed=False) == 4
    # QUEUE_FULL and QUEUE_TIMEOUT are excused; a client deadline and UNAVAILABLE are not
    assert f.failures(may_shed=True) == 2


def test_error_examples_and_send_lag():
    s, e = filled_stream()
    f = _class_figures(s, BATCH, e, span=2.0)
    assert f.error_examples[QUEUE_FULL_ERROR] == "Exceeds maximum queue size"
    assert f.error_examples["UNAVAILABLE"] == ""  # kinds without an example kept show ""
    assert set(f.error_examples) == set(f.errors)
    assert f.send_lag_p99_s == pytest.approx(0.050)


def test_no_send_lag_recorded_gives_none():
    s = stream()
    s.log.record(1.5, 0.01, None)
    f = _class_figures(s, BATCH, edges("batch", [(1.0, 0), (2.0, 1)]), span=1.0)
    assert f.send_lag_p99_s is None
    assert f.offered_rate == 0.0  # nothing scheduled (a closed loop's log)


def test_figures_to_dict_is_in_milliseconds():
    s, e = filled_stream()
    out = _class_figures(s, BATCH, e, span=2.0).to_dict()
    assert out["throughput_infer_per_s"] == pytest.approx(80.0)
    assert out["p99_windows_ms"] == pytest.approx([10.0, 20.0])
    assert out["latency_ms"]["p99"] == pytest.approx(20.0)
    assert (out["rejected"], out["timed_out"]) == (1, 2)
    assert out["send_lag_p99_ms"] == pytest.approx(50.0)
    json.dumps(out)


# --- judging a class -------------------------------------------------------------------------


def test_interactive_within_its_slo_meets_it():
    verdict = judge(INTERACTIVE, figures("interactive", latencies=[0.010] * 200))
    assert verdict.met
    assert verdict.name == "interactive"
    assert "p99 10.0 ms" in verdict.reason


def test_interactive_over_its_slo_misses_it():
    latencies = [0.010] * 95 + [0.030] * 5
    verdict = judge(INTERACTIVE, figures("interactive", latencies=latencies))
    assert not verdict.met
    assert verdict.reason == "p99 30.0 ms > 20 ms"


def test_p99_exactly_at_the_slo_meets_it():
    assert judge(INTERACTIVE, figures("interactive", latencies=[0.020] * 100)).met


def test_more_than_one_percent_failures_misses():
    verdict = judge(
        INTERACTIVE, figures("interactive", latencies=[0.001] * 98, errors={"UNAVAILABLE": 2})
    )
    assert not verdict.met
    assert verdict.reason == "2 of 100 requests failed (UNAVAILABLE x2)"


def test_one_percent_failures_is_allowed():
    verdict = judge(
        INTERACTIVE, figures("interactive", latencies=[0.001] * 99, errors={"UNAVAILABLE": 1})
    )
    assert verdict.met


def test_rejections_fail_a_class_that_may_not_be_shed():
    f = figures(latencies=[0.1] * 80, errors={QUEUE_FULL_ERROR: 20})
    verdict = judge(BATCH, f)
    assert not verdict.met
    assert "20 of 100 requests failed" in verdict.reason
    assert "QUEUE_FULL x20" in verdict.reason


def test_rejections_are_excused_when_the_class_may_be_shed():
    f = figures(latencies=[0.1] * 80, errors={QUEUE_FULL_ERROR: 15, QUEUE_TIMEOUT_ERROR: 5})
    verdict = judge(SHED_BATCH, f)
    assert verdict.met
    assert "15 rejected, 5 timed out (may be shed)" in verdict.reason


def test_a_sheddable_class_still_fails_on_other_errors():
    f = figures(latencies=[0.1] * 80, errors={QUEUE_FULL_ERROR: 10, "INTERNAL": 10})
    verdict = judge(SHED_BATCH, f)
    assert not verdict.met
    assert "10 of 100 requests failed" in verdict.reason


def test_a_class_shed_entirely_misses():
    verdict = judge(SHED_BATCH, figures(errors={QUEUE_FULL_ERROR: 50}))
    assert not verdict.met
    assert verdict.reason == "every request was shed"


def test_best_effort_falling_behind_misses_with_backlog():
    f = figures(latencies=[0.5] * 80, offered_rate=100.0, answered_rate=85.0)
    verdict = judge(BATCH, f)
    assert not verdict.met
    assert "backlog" in verdict.reason
    assert "85%" in verdict.reason


def test_best_effort_keeping_up_meets():
    f = figures(latencies=[0.5] * 90, offered_rate=100.0, answered_rate=90.0)
    assert judge(BATCH, f).met


def test_best_effort_over_its_completion_bound_misses():
    latencies = [1.0] * 90 + [6.0] * 10
    verdict = judge(BOUNDED_BATCH, figures(latencies=latencies))
    assert not verdict.met
    assert verdict.reason == "p99 6000.0 ms > 5000 ms"


def test_best_effort_within_its_completion_bound_meets():
    assert judge(BOUNDED_BATCH, figures(latencies=[4.0] * 100)).met


def test_nothing_answered_misses():
    verdict = judge(BATCH, figures(offered_rate=50.0, answered_rate=0.0))
    assert not verdict.met
    assert verdict.reason == "no request was answered in the span"


# --- a whole measurement ---------------------------------------------------------------------


TRAFFIC = Traffic((INTERACTIVE, SHED_BATCH))


def measurement(interactive_p99: float, batch_rejected: int = 0) -> TrafficMeasurement:
    return TrafficMeasurement(
        total_rate=200.0,
        classes=(
            figures("interactive", latencies=[interactive_p99] * 60, batch_size=1, span=2.0),
            figures(
                "batch",
                latencies=[0.5] * 100,
                errors={QUEUE_FULL_ERROR: batch_rejected} if batch_rejected else {},
                batch_size=8,
                span=2.0,
            ),
        ),
        span_s=2.0,
        duration_s=5.0,
    )


def test_meets_when_every_class_does():
    m = measurement(0.010, batch_rejected=10)
    assert m.meets(TRAFFIC)
    assert [v.met for v in m.verdicts(TRAFFIC)] == [True, True]


def test_misses_when_one_class_does():
    m = measurement(0.050)
    assert not m.meets(TRAFFIC)
    verdicts = m.verdicts(TRAFFIC)
    assert [(v.name, v.met) for v in verdicts] == [("interactive", False), ("batch", True)]


def test_verdicts_follow_the_traffics_order():
    m = measurement(0.010)
    reversed_traffic = Traffic((SHED_BATCH, INTERACTIVE))
    assert [v.name for v in m.verdicts(reversed_traffic)] == ["batch", "interactive"]


def test_goodput_and_throughput_add_the_classes():
    m = measurement(0.010, batch_rejected=10)
    assert m.goodput == pytest.approx(30.0 + 50.0)  # successes per second
    assert m.throughput == pytest.approx(30.0 * 1 + 50.0 * 8)


def test_figures_by_name():
    m = measurement(0.010)
    assert m.figures("batch").batch_size == 8
    with pytest.raises(KeyError):
        m.figures("nope")


def test_to_dict_with_traffic_carries_the_verdicts():
    out = measurement(0.050, batch_rejected=10).to_dict(TRAFFIC)
    assert out["meets_objectives"] is False
    assert out["verdicts"]["interactive"] == {"met": False, "reason": "p99 50.0 ms > 20 ms"}
    assert out["verdicts"]["batch"]["met"] is True
    assert out["goodput_per_s"] == pytest.approx(80.0)
    assert out["throughput_infer_per_s"] == pytest.approx(430.0)
    assert [c["name"] for c in out["classes"]] == ["interactive", "batch"]
    assert out["server"] == {} and out["interference"] is None
    json.dumps(out)


def test_to_dict_names_how_fast_a_replayed_trace_played():
    """Batch's trace was recorded at 2 req/s; 70 % of 200 req/s plays it 70 times faster."""
    trace = ArrivalTrace(Path("gateway.csv"), 3, 2.0, (1.0, 1.0))
    traced = dataclasses.replace(SHED_BATCH, arrival=Arrival.TRACE, trace=trace)
    out = measurement(0.010).to_dict(Traffic((INTERACTIVE, traced)))
    interactive, batch = out["classes"]
    assert batch["trace_speedup"] == pytest.approx(70.0) and "trace_speedup" not in interactive


def test_to_dict_without_traffic_has_no_verdicts():
    out = measurement(0.010).to_dict()
    assert "verdicts" not in out and "meets_objectives" not in out
    assert out["total_rate_per_s"] == 200.0


# --- Triton's scheduler messages -------------------------------------------------------------


def test_queue_full_message_is_a_rejection():
    message = "[request id: <id_unknown>] Exceeds maximum queue size"
    assert error_kind("UNAVAILABLE", message) == QUEUE_FULL_ERROR
    assert error_kind("HTTP_503", message) == QUEUE_FULL_ERROR


def test_queue_timeout_message_is_a_timeout():
    assert error_kind("UNAVAILABLE", "Request timeout expired") == QUEUE_TIMEOUT_ERROR
    assert error_kind("HTTP_503", "[request id: 7] Request timeout expired") == QUEUE_TIMEOUT_ERROR


def test_other_errors_keep_their_kind():
    assert error_kind("UNAVAILABLE", "connection refused") == "UNAVAILABLE"
    assert error_kind("HTTP_400", "bad input shape") == "HTTP_400"


def test_a_min_served_share_fails_a_class_shed_past_it():
    floor = dataclasses.replace(SHED_BATCH, min_served=ServedFloor(share=0.5))
    shed_60 = figures(latencies=[0.1] * 40, errors={QUEUE_FULL_ERROR: 60})
    assert judge(SHED_BATCH, shed_60).met  # without the floor, any shedding meets it
    verdict = judge(floor, shed_60)
    assert not verdict.met
    assert verdict.reason == "served 40% of its arrivals < min_served 50%"
    assert judge(floor, figures(latencies=[0.1] * 60, errors={QUEUE_FULL_ERROR: 40})).met


def test_a_min_served_rate_counts_inferences():
    floor = dataclasses.replace(SHED_BATCH, min_served=ServedFloor(infer_per_s=500.0))
    # 60 requests of 8 in 1 s: 480 inferences/s
    verdict = judge(floor, figures(latencies=[0.1] * 60, errors={QUEUE_FULL_ERROR: 40}))
    assert not verdict.met and verdict.reason == "served 480.0 infer/s < min_served 500/s"
    assert judge(floor, figures(latencies=[0.1] * 63, errors={QUEUE_FULL_ERROR: 37})).met


# --- the load generator's own cost: a client-bound level ---------------------------------------


#: A window where the client had no slack and it showed (loop demand and lag at their limits),
#: and one with slack to spare.
BOUND_WINDOW = ClientWindow(0.5, 0.48, 900, LOOP_DEMAND_LIMIT + 0.1, CLIENT_LAG_LIMIT_S * 8)
CALM_WINDOW = ClientWindow(0.5, 0.05, 100, 0.2, 0.0004)


def with_client(windows: Sequence[ClientWindow], processes: int = 1) -> TrafficMeasurement:
    return dataclasses.replace(measurement(0.010), client=ClientCost.of(windows, processes))


@pytest.mark.parametrize(
    ("windows", "bound"),
    [
        ([BOUND_WINDOW, BOUND_WINDOW, CALM_WINDOW], True),
        ([BOUND_WINDOW, CALM_WINDOW], True),  # half of them: the level is the client's in part
        ([BOUND_WINDOW, CALM_WINDOW, CALM_WINDOW], False),  # one busy window of three is not
        ([CALM_WINDOW] * 3, False),
    ],
)
def test_a_workload_level_is_client_bound_by_the_single_class_rule(windows, bound: bool):
    m = with_client(windows)
    assert m.client_bound is bound
    # the one rule: a single class's level with the same windows gets the same verdict
    assert m.client_bound is ClientCost.of(windows).bound


def test_a_client_bound_workload_level_says_so_in_its_json_and_remarks():
    m = with_client([BOUND_WINDOW, BOUND_WINDOW, CALM_WINDOW], processes=2)
    out = m.to_dict(TRAFFIC)
    assert out["client_bound"] is True  # as a single-class level in a study says it
    assert out["client"]["client_bound"] is True and out["client"]["processes"] == 2
    assert out["client"]["bound_windows"] == 2 and out["client"]["windows"] == 3
    assert "client-bound" in (out["disturbance"] or "") and "2 of 3 windows" in out["disturbance"]
    assert m.remarks() == out["disturbance"]
    json.dumps(out)


def test_a_clean_workload_level_has_no_client_bound_flag():
    out = with_client([CALM_WINDOW] * 3).to_dict(TRAFFIC)
    assert "client_bound" not in out and out["client"]["client_bound"] is False
    assert out["disturbance"] is None
    assert measurement(0.010).to_dict()["client"] is None  # not looked at: no verdict


@pytest.mark.parametrize(("limit", "tried"), [(8, [1, 2, 4]), (3, [1, 2, 3]), (None, [1])])
def test_auto_measures_a_client_bound_workload_level_again_with_twice_the_processes(
    monkeypatch: pytest.MonkeyPatch, limit: int | None, tried: list[int]
):
    """The measurement against the server is faked: client-bound below 4 load processes. With
    ``max_processes`` (``--load-processes auto``) the level is measured again with twice as
    many until it is clean or the cap is reached; the last one is kept."""
    from tritontune.measure import mixed

    seen: list[int] = []

    async def fake(*args: object) -> TrafficMeasurement:
        processes = args[-1]
        assert isinstance(processes, int)
        seen.append(processes)
        window = BOUND_WINDOW if processes < 4 else CALM_WINDOW
        return with_client([window] * 3, processes)

    monkeypatch.setattr(mixed, "_measure", fake)
    requests = {name: ClassRequests("m", [object()]) for name in ("interactive", "batch")}
    m = mixed.measure_traffic("x:1", TRAFFIC, requests, 200.0, max_processes=limit)
    assert seen == tried
    assert m.client is not None and m.client.processes == tried[-1]
    assert m.client_bound is (tried[-1] < 4)


def test_a_clean_workload_level_is_measured_once_under_auto(monkeypatch: pytest.MonkeyPatch):
    from tritontune.measure import mixed

    seen: list[object] = []

    async def fake(*args: object) -> TrafficMeasurement:
        seen.append(args[-1])
        return with_client([CALM_WINDOW] * 3, 2)

    monkeypatch.setattr(mixed, "_measure", fake)
    requests = {name: ClassRequests("m", [object()]) for name in ("interactive", "batch")}
    mixed.measure_traffic("x:1", TRAFFIC, requests, 200.0, processes=2, max_processes=8)
    assert seen == [2]


def test_a_disturbed_window_starts_the_span_again_after_it(monkeypatch: pytest.MonkeyPatch):
    """A window another tenant disturbed is not reported: the span starts again after it (up to
    ``extra_windows`` times), as a single class's level takes windows in place of disturbed ones.
    Against an in-process gRPC server; the probe is scripted (window 2 disturbed)."""
    from tritontune.measure import windows
    from tritontune.measure.interference import WindowLoad

    script = iter([False, True, False, False, False, False, False])

    class ScriptedProbe:
        def __init__(self, _threads: object) -> None:
            pass

        def sample(self) -> WindowLoad:
            disturbed = next(script)
            return WindowLoad(0.1, 1.0 if disturbed else 0.0, 0.0, 0.1, "burner (pid 7, 1.0 cores)")

    monkeypatch.setattr(windows, "InterferenceProbe", ScriptedProbe)
    m, _traffic = measure_on_fake(
        {},
        dict(window_s=0.1, min_window_requests=1, stable_windows=3, detect_interference=True),
        rate=200.0,
    )
    assert m.interference is not None
    assert m.interference.windows == 5 and m.interference.disturbed_windows == 1
    # window 1 clean, 2 disturbed: the span starts again, and is windows 3-5
    assert not m.interference.result_disturbed
    assert m.client is not None and m.client.windows == 3
    assert len(m.classes[0].p99_windows) == 3
    assert 0.25 < m.span_s < 0.5, m.span_s
    assert "re-measured until clean" in (m.interference.describe() or "")


@pytest.mark.parametrize(("bound_ms", "early"), [(1, True), (1000, False)])
def test_a_level_ends_as_soon_as_a_class_has_surely_missed(bound_ms: int, early: bool):
    """Every reply of the in-process server takes 5 ms: against a 1 ms bound the class has surely
    missed after its first windows, and the level ends there instead of waiting for replies it
    never gets enough of; against 1 s it runs to its cap as before."""
    # never enough replies (10,000): the span ends early, or at its clean time (3 x 0.15 x 4 =
    # 1.8 s after it starts), or at the cap (0.05 + 5 x 0.6 = 3.05 s, disturbed windows' time in it)
    m, traffic = measure_on_fake(
        {"slo_p99": f"{bound_ms}ms"},
        dict(
            window_s=0.15, min_window_requests=10_000, stable_windows=2, max_windows=3, extra_windows=2
        ),
    )
    if early:
        assert m.ended_early is not None and m.ended_early.startswith("a: ")
        assert "past 1 ms" in m.ended_early
        assert m.duration_s < 1.2, m.duration_s  # two windows and the warm-up, not the cap
        assert not m.meets(traffic)  # the judged span agrees with the early end
        assert m.to_dict(traffic)["ended_early"] == m.ended_early
    else:
        assert m.ended_early is None
        assert "ended_early" not in m.to_dict(traffic)
        # a clear pass (p99 ~5 ms of 1 s) ends at its clean time: the disturbed windows' share of
        # the cap is not waited for on a machine that disturbed none
        assert 1.7 <= m.duration_s < 2.7, m.duration_s
        assert m.meets(traffic)


def test_the_span_starts_once_every_class_has_its_first_reply(monkeypatch: pytest.MonkeyPatch):
    """Replies take 0.4 s, arrivals come every 10 ms: a span started after the 0.05 s warm-up
    would count 40 requests still in flight as a backlog (about 60 % answered of 90 arrivals).
    It starts once the first reply came, so the class keeps up, as it does."""
    from . import test_loadgen

    monkeypatch.setattr(test_loadgen, "HOLD_S", 0.4)
    m, traffic = measure_on_fake(
        {"arrival": "constant"},
        dict(window_s=0.3, min_window_requests=1, stable_windows=3, max_windows=3, extra_windows=0),
    )
    figures = m.figures("a")
    assert figures.answered_rate / figures.offered_rate > 0.9, figures
    assert m.meets(traffic), m.verdicts(traffic)
    assert m.duration_s > 0.4 + 0.9  # the first reply, then the three windows


def test_a_close_call_is_a_pass_by_a_hair():
    """What takes a level past its clean time to its cap: a p99 within its bound but past 80 % of
    it, or arrivals answered just over 90 %; a clear pass or a miss is no close call."""
    from tritontune.measure.mixed import _close_call
    from tritontune.measure.traffic import parse_traffic

    traffic = parse_traffic({"classes": [{"name": "a", "rate": 10, "slo_p99": "100ms"}]}, where="t")

    def case(latency_s: float, answered: int, offered: int = 100) -> bool:
        s = Stream("a", [], LoadSpec.rate(10))
        for i in range(answered):
            s.log.record(10.0 + i / 100, latency_s, None)
        s.log.scheduled += [10.0 + i / offered for i in range(offered)]
        first = Edge(10.0, {"a": 0}, stats={})
        last = Edge(11.0, {"a": answered}, stats={})
        return _close_call([s], traffic, first, last)

    assert case(0.090, 100)  # p99 90 ms of 100: a hair
    assert not case(0.050, 100)  # clear
    assert not case(0.120, 100)  # a miss: more replies won't make it a pass worth waiting for
    best_effort = parse_traffic({"classes": [{"name": "a", "rate": 10}]}, where="t")
    traffic = best_effort
    assert case(0.5, 92)  # 92 % answered: just over the 90 % line
    assert not case(0.5, 99)
    assert not case(0.5, 80)


def measure_on_fake(
    traffic_spec: dict, settings_spec: dict, rate: float = 100.0
) -> tuple[TrafficMeasurement, Traffic]:
    """One class at ``rate`` req/s against the in-process gRPC server of test_loadgen (each reply
    held ``test_loadgen.HOLD_S``), no interference probe unless the settings ask: the measurement
    and its traffic."""
    import asyncio

    from tritontune.measure import mixed
    from tritontune.measure.measurement import MeasureSettings
    from tritontune.measure.traffic import parse_traffic

    from .test_loadgen import request, serve

    traffic = parse_traffic({"classes": [{"name": "a", "rate": rate, **traffic_spec}]}, where="test")
    settings = MeasureSettings(**{"warmup_s": 0.05, "detect_interference": False, **settings_spec})

    async def main() -> TrafficMeasurement:
        server, _fake, address = await serve()
        try:
            requests = {"a": ClassRequests("m", [request("x")])}
            return await mixed._measure(address, traffic, requests, rate, settings, seed=1)
        finally:
            await server.stop(None)

    return asyncio.run(main()), traffic
