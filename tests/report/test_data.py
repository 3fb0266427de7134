"""The report's figures, collected from an in-memory study (no server)."""

from pathlib import Path

import pytest

from tests.studies import make_study, point
from tritontune.report.data import collect
from tritontune.search.operating_point import OperatingPoint
from tritontune.search.study import read_study


def test_report_states_the_confirmed_point_and_its_gain(example_repository: Path):
    held = point(5200, 0.04, load=64)
    data = collect(read_study(make_study(example_repository, [3000, 6000], confirmed=held)))
    assert data.best is not None and data.best.throughput == 6000
    assert data.best_point == OperatingPoint.from_dict(held.to_dict())  # as stored
    assert data.best_improvement == pytest.approx(4.2)
    assert data.capacity is not None and data.capacity.max_throughput == pytest.approx(5200)
    assert [r.throughput for r in data.top] == [6000, 3000]
    assert data.points and data.to_dict()["load_mode"] == "concurrency"


def test_report_falls_back_to_the_screening_point_when_confirmation_missed(example_repository):
    missed = point(5000, 0.07, load=64, feasible=False)
    data = collect(read_study(make_study(example_repository, [3000, 6000], confirmed=missed)))
    assert data.best_point is not None and data.best_point.throughput == 6000
