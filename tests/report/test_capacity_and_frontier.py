"""The report's arithmetic: the Pareto frontier and the capacity plan."""

import math

import pytest

from tritontune.report.capacity import plan_capacity
from tritontune.report.data import MeasuredPoint, pareto_front
from tritontune.study.figures import OperatingPoint


def point(throughput: float, p99_ms: float, trial: int = 0) -> MeasuredPoint:
    return MeasuredPoint(trial, 1, throughput, p99_ms / 2e3, p99_ms / 1e3, True)


def test_frontier_keeps_only_unbeaten_points():
    points = [point(100, 10), point(90, 12), point(150, 20), point(140, 25), point(200, 40)]
    front = [(p.throughput, p.p99_s * 1e3) for p in pareto_front(points) if p.on_frontier]
    assert sorted(front) == [(100, 10), (150, 20), (200, 40)]
    assert len(pareto_front(points)) == len(points)  # every point kept, the front flagged


def op(throughput=1000.0, load=32.0, mean_ms=20.0, p50_ms=18.0, feasible=True) -> OperatingPoint:
    return OperatingPoint(
        slo_p99_s=0.05, load_mode="concurrency", feasible=feasible, load=load,
        throughput=throughput, p50_s=p50_ms / 1e3, p99_s=0.045, p99_deviation=0.0,
        throughput_deviation=0.0, avg_batch_size=8.0, mean_s=mean_ms / 1e3,
    )  # fmt: skip


def test_capacity_plan_follows_littles_law():
    plan = plan_capacity(op(), headroom=0.7, peak=5000)
    assert plan.recommended_throughput == pytest.approx(700)
    assert plan.in_flight == pytest.approx(700 * 0.020)  # L = lambda x W
    assert plan.replicas == math.ceil(5000 / 700) == 8
    text = " ".join(plan.lines())
    assert "1,000 infer/s" in text and "700 infer/s" in text and "needs 8 server(s)" in text
    # At 100 % of a closed-loop operating point, the plan's requests in flight (L = lambda x W,
    # W the mean latency) are the concurrency that was measured there.
    consistent = op(throughput=1000.0, load=20.0, mean_ms=20.0)
    assert plan_capacity(consistent, headroom=1.0).in_flight == pytest.approx(consistent.load)


def test_older_studies_without_a_mean_use_p50():
    old = op()
    old = OperatingPoint(**{**old.__dict__, "mean_s": None})
    assert plan_capacity(old).mean_latency_s == pytest.approx(0.018)


def test_no_plan_without_a_feasible_point_and_bad_headroom():
    assert plan_capacity(op(feasible=False)) is None
    with pytest.raises(ValueError):
        plan_capacity(op(), headroom=1.5)
