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
    assert data.gain is not None and data.gain.median == pytest.approx(4.2)
    assert data.capacity is not None and data.capacity.max_throughput == pytest.approx(5200)
    assert [r.throughput for r in data.top] == [6000, 3000]
    assert data.points and data.to_dict()["load_mode"] == "concurrency"


def test_report_falls_back_to_the_screening_point_when_confirmation_missed(example_repository):
    missed = point(5000, 0.07, load=64, feasible=False)
    data = collect(read_study(make_study(example_repository, [3000, 6000], confirmed=missed)))
    assert data.best_point is not None and data.best_point.throughput == 6000


def test_report_states_the_playoff_winner_with_its_interval(example_repository: Path):
    from tests.test_export_records import playoff_of

    playoff = playoff_of({0: ([3000, 2800, 3300], 0.03, True), 1: ([5000, 4500, 5600], 0.04, True)}, 0)
    study = read_study(make_study(example_repository, [3000, 6000], playoff=playoff))
    data = collect(study)
    assert data.figures == "playoff" and data.best is not None and data.best.number == 0
    assert data.best_point is not None and data.best_point.throughput == 3000  # the playoff median
    assert data.gain is not None and data.gain.median == pytest.approx(2.0)
    figures = data.to_dict()
    assert figures["playoff"]["winner"] == 0 and figures["figures"] == "playoff"
