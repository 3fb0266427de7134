"""The workload report: per-class plan (Little's law), the interactive cliff, what the SLO costs
the batch class, and the HTML page, from a capacity search on a modelled server."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.search.test_traffic_capacity import TRAFFIC, modelled_server
from tritontune.report.workload import (
    SloCost,
    class_plans,
    slo_cost,
    slo_cost_per_ms,
    summary_lines,
    write_workload_report,
)
from tritontune.search.traffic_capacity import find_traffic_capacity


@pytest.fixture
def capacity():
    return find_traffic_capacity(modelled_server(1000.0), TRAFFIC, start=70.0)


def test_each_class_plan_is_littles_law_at_the_capacity(capacity):
    plans = {p.name: p for p in class_plans(capacity, headroom=0.5)}
    assert set(plans) == {"interactive", "batch"}
    best = capacity.best
    for name, plan in plans.items():
        figures = best.figures(name)
        assert plan.rate == pytest.approx(figures.request_rate)
        assert plan.in_flight == pytest.approx(figures.request_rate * figures.latency.mean)
        assert plan.planned_rate == pytest.approx(0.5 * figures.request_rate)
    assert plans["interactive"].rate == pytest.approx(0.3 * capacity.total_rate)


def test_the_slo_cost_is_a_staircase_of_better_batch_throughput(capacity):
    stairs = slo_cost(capacity, "interactive")
    assert len(stairs) >= 3
    assert [s.p99_s for s in stairs] == sorted(s.p99_s for s in stairs)
    assert all(b.batch_throughput > a.batch_throughput for a, b in zip(stairs, stairs[1:], strict=False))


def test_cost_per_ms_is_the_slope_of_the_last_step_within_the_slo():
    stairs = [SloCost(0.005, 1000.0), SloCost(0.010, 3000.0), SloCost(0.030, 9000.0)]
    assert slo_cost_per_ms(stairs, 0.020) == pytest.approx(400.0)  # 2000 infer/s over 5 ms
    assert slo_cost_per_ms(stairs, 0.006) is None  # one step within: no slope


def test_summary_names_the_cliff_and_the_plan(capacity):
    lines = summary_lines(capacity)
    cliff = capacity.cliff("interactive")
    assert cliff is not None
    assert any(line.startswith(f"interactive's cliff starts at {cliff:,.0f} req/s") for line in lines)
    assert any("Little's law" in line and line.startswith("batch:") for line in lines)


def test_the_html_report_is_self_contained_with_its_figures_as_json(capacity, tmp_path: Path):
    out = write_workload_report(capacity, tmp_path / "w.html", title="mlp <workload>")
    page = out.read_text()
    assert "<title>mlp &lt;workload&gt;</title>" in page
    assert "interactive p99" in page and "served per class" in page
    assert "<script src=" not in page  # plotly.js is inlined: opens with no network
    data = re.search(r"id='tritontune-workload'>(.*?)</script>", page, re.S)
    assert data is not None
    figures = json.loads(data.group(1).replace("<\\/", "</"))
    assert figures["total_rate_per_s"] == pytest.approx(capacity.total_rate, abs=1e-3)
